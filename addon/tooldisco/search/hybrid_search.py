"""BM25 and embedding similarity fused by Reciprocal Rank Fusion (seed 002).

Why: BM25 finds exact names and rare terms, embeddings find paraphrases; their scores
live on incomparable scales, so they are fused by rank: a tool scores
``sum(weight / (K + rank))`` over the two candidate lists (K = 60, at least
``MIN_CANDIDATES`` from each side). The keyword side is ``keyword_top``: BM25, or
fuzzy keywords when no BM25 term matches, so a misspelt query still finds its tool.
Without the embedding model (the optional ``semantic`` extra) the search is that
keyword side alone, and its ``Ranking`` says so.

A request often asks for several things ("First, find ... Then, book ..."); one
vector for the whole text lands between the intents and finds neither. So each
sentence of a multi-sentence query is also embedded, and the semantic candidate list
takes the best tool of the whole query, then of each sentence, round-robin. BM25 needs
no such help: its score already sums over every term of every sentence.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import regex

from ..providers.base import Tool
from .base import Ranking, SearcherBase
from .bm25_search import keyword_top
from .embeddings import Embedder, load_embedder
from .tokens import words

RRF_K = 60
MIN_CANDIDATES = 30
LEXICAL_WEIGHT = 1.0
SEMANTIC_WEIGHT = 1.0
# Similarity (a cosine; for tools, the mean over their views) below which a tool is no
# semantic candidate: gibberish and typos ("xyzzy", "wether") reach about 0.2 against
# any tool, relevant pairs are mostly 0.3 and up.
MIN_SIMILARITY = 0.2
MIN_SENTENCE_WORDS = 3  # shorter sentences ("Thanks!") carry no intent of their own
MAX_SENTENCES = 8  # each costs a forward pass of the model

_SENTENCE_END = regex.compile(r"(?<=[.?!;])\s+|\n+")


def rrf(rankings: Iterable[tuple[Sequence[int], float]], limit: int) -> list[int]:
    """Fuse ranked lists of ids, each with a weight; best first, ties by first appearance."""
    fused: dict[int, float] = {}
    for ranked, weight in rankings:
        for rank, item in enumerate(ranked, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (RRF_K + rank)
    return sorted(fused, key=lambda item: -fused[item])[: max(limit, 0)]


def round_robin(rankings: Sequence[Sequence[int]], limit: int) -> list[int]:
    """First of each list, then second of each, ..., without repeats."""
    out: list[int] = []
    seen: set[int] = set()
    for depth in range(max((len(r) for r in rankings), default=0)):
        for ranked in rankings:
            if depth < len(ranked) and ranked[depth] not in seen:
                seen.add(ranked[depth])
                out.append(ranked[depth])
    return out[:limit]


def sentences(query: str) -> list[str]:
    """The sentences of a multi-sentence query worth embedding on their own; [] for one."""
    parts = [p.strip() for p in _SENTENCE_END.split(query)]
    parts = [p for p in parts if len(words(p)) >= MIN_SENTENCE_WORDS]
    return parts[:MAX_SENTENCES] if len(parts) > 1 else []


def semantic_top(embedder: Embedder, vectors: np.ndarray, query: str, depth: int) -> list[int]:
    """Tool indexes by cosine similarity (at least ``MIN_SIMILARITY``): the whole
    query's best and each sentence's best, round-robin."""
    queries = [query, *sentences(query)]
    similarity = embedder.embed_queries(queries) @ vectors.T
    rows = []
    for row in similarity:
        top = np.argpartition(-row, depth)[:depth] if len(row) > depth else np.arange(len(row))
        top = top[np.argsort(-row[top], kind="stable")]
        rows.append(top[row[top] >= MIN_SIMILARITY].tolist())
    return round_robin(rows, depth)


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
        depth = max(MIN_CANDIDATES, 3 * limit)
        lexical, _ = keyword_top(query, tools, depth)
        semantic = semantic_top(embedder, embedder.catalogs.get(tools), query, depth)
        fused = rrf([(lexical, LEXICAL_WEIGHT), (semantic, SEMANTIC_WEIGHT)], limit)
        return Ranking([tools[i].name for i in fused], self.name)
