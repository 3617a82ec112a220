"""BM25 and embedding similarity, fused by standardised scores.

Why: BM25 finds exact names and rare terms, embeddings find paraphrases; their scores
live on incomparable scales. Fusing their ranks (RRF, K = 60) throws away how far ahead a
tool is; here each side's scores over the catalog are standardised (z-scores, per query)
and added with ``LEXICAL_WEIGHT``, which ranks better than RRF on BFCL
(``scripts/bench_retrieval.py``).

A tool is a candidate when it shares a term with the query (BM25; fuzzy keywords when no
BM25 term matches, so a misspelt query still finds its tool) or its similarity reaches
``MIN_SIMILARITY``. A query with several intents is scored per intent in the same model
batch and diversified across them (``intents``). Without the embedding model (the
optional ``semantic`` extra) the search is BM25 alone, and its ``Ranking`` says so.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tooldisco.core.types import Tool
from tooldisco.search.base import Ranking, SearcherBase
from tooldisco.search.bm25_search import bm25_index, keyword_top
from tooldisco.search.embeddings import Embedder, load_embedder
from tooldisco.search.fuzzy_search import fuzzy_index
from tooldisco.search.intents import search

#: Weight of the lexical side's z-score; the semantic side gets the rest.
LEXICAL_WEIGHT = 0.4
# Similarity (a cosine; for tools, the mean over their views) below which a tool is no
# semantic candidate: gibberish and typos ("xyzzy", "wether") reach about 0.2 against
# any tool, relevant pairs are mostly 0.3 and up.
MIN_SIMILARITY = 0.2
# xQuAD's lambda (``intents``): a fused score per intent covers it better than BM25 alone,
# so hybrid diversifies more than BM25's 0.5. Higher values trade single-intent recall for
# multi-intent recall (``scripts/bench_retrieval.py``'s bfcl and multi-intent sets); 0.6
# gains much of the one for little of the other.
DIVERSITY = 0.6


def standardised(rows: np.ndarray) -> np.ndarray:
    """Each row as z-scores (a constant row is all zeros)."""
    if rows.size == 0:
        return rows
    spread = rows.std(axis=1, keepdims=True)
    return (rows - rows.mean(axis=1, keepdims=True)) / np.where(spread > 0, spread, 1.0)


def cosines(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Each query's dot product with every tool vector, one row per query.

    ``einsum``'s own loop, not BLAS: a product this small (k x 384 by 10k x 384) is quick
    single-threaded, while multithreaded BLAS spends several times the CPU and wall time
    waiting for its threads on a busy machine (``scripts/bench_retrieval.py`` times search)."""
    return np.einsum("qd,td->qt", queries, vectors, optimize=False).astype(np.float64)


class HybridSearcher(SearcherBase):
    name = "hybrid"

    def __init__(self, cache_dir: str | None = None):
        self._cache_dir = cache_dir

    def embedder(self) -> Embedder | None:
        """Loaded on first use, so configuring hybrid costs nothing until a search."""
        return load_embedder(self._cache_dir)

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        embedder = self.embedder()
        if embedder is None:
            hits, no_match = keyword_top(query, tools, limit)
            why = "embedding model unavailable" + (f"; {no_match}" if no_match else "")
            return Ranking([tools[i].name for i in hits], "fuzzy" if no_match else "bm25", why)
        vectors = embedder.catalogs.get(tools)

        def fused(texts: Sequence[str]) -> np.ndarray:
            lexical = np.stack([_lexical(text, tools) for text in texts])
            similarity = cosines(embedder.embed_queries(texts), vectors)
            scores = LEXICAL_WEIGHT * standardised(lexical) + (1 - LEXICAL_WEIGHT) * standardised(similarity)
            scores[(lexical <= 0) & (similarity < MIN_SIMILARITY)] = -np.inf
            return scores

        hits = search(fused, query, limit, bm25_index(tools).name_order, DIVERSITY)
        return Ranking([tools[i].name for i in hits], self.name)


def _lexical(text: str, tools: Sequence[Tool]) -> np.ndarray:
    """BM25 scores of ``text``; fuzzy keyword scores when no BM25 term matches."""
    scores = bm25_index(tools).scores(text).astype(np.float64)
    return scores if scores.any() else fuzzy_index(tools).scores(text).astype(np.float64)
