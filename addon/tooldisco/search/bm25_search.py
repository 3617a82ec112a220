"""Okapi BM25 over tool definitions (k1 1.2, b 0.75), as a precomputed inverted index.

Why: keyword search needs no model, explains itself, and is what a tool name query
("github create issue") wants. The catalog is indexed once: every (term, tool) weight
is computed at build time, so a query is a handful of numpy additions over posting
lists and a partial sort, well under a millisecond at 10k tools.

The document of a tool is its fields (``documents``) with their weights: the name
counts twice (seed 002's name boost), parameter descriptions and schema values less.
A query none of whose terms occurs in the catalog is most likely misspelt: it is
answered by the fuzzy backend instead of with nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..providers.base import Tool
from .base import Ranking, SearcherBase
from .documents import FIELD_WEIGHTS, fields
from .fuzzy_search import fuzzy_index
from .index_cache import IndexCache
from .tokens import terms

K1 = 1.2
B = 0.75


def document(tool: Tool) -> Counter[str]:
    """Term -> weighted frequency for one tool (``FIELD_WEIGHTS``)."""
    tf: Counter[str] = Counter()
    for text, field in fields(tool):
        weight = FIELD_WEIGHTS[field]
        for term in terms(text):
            tf[term] += weight
    return tf


@dataclass(frozen=True)
class BM25Index:
    """Per-term posting lists with final BM25 weights; scores are sums of them."""

    names: tuple[str, ...]
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # term -> (tool indexes, weights)
    name_order: np.ndarray  # rank of each tool's name, to break ties alphabetically

    @classmethod
    def build(cls, tools: Sequence[Tool]) -> BM25Index:
        docs = [document(t) for t in tools]
        lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
        avgdl = float(lengths.mean()) if len(docs) and lengths.mean() > 0 else 1.0
        norm = K1 * (1.0 - B + B * lengths / avgdl)
        grouped: dict[str, tuple[list[int], list[float]]] = {}
        for i, doc in enumerate(docs):
            for term, tf in doc.items():
                ids, tfs = grouped.setdefault(term, ([], []))
                ids.append(i)
                tfs.append(tf)
        n = len(docs)
        postings = {}
        for term, (ids, tfs) in grouped.items():
            idf = math.log((n - len(ids) + 0.5) / (len(ids) + 0.5) + 1.0)
            id_arr = np.array(ids, dtype=np.int32)
            tf_arr = np.array(tfs, dtype=np.float64)
            weights = idf * tf_arr * (K1 + 1.0) / (tf_arr + norm[id_arr])
            postings[term] = (id_arr, weights.astype(np.float32))
        names = tuple(t.name for t in tools)
        order = np.empty(n, dtype=np.int32)
        order[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(n, dtype=np.int32)
        return cls(names=names, postings=postings, name_order=order)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every tool for ``query`` (each distinct query term counted once)."""
        scores = np.zeros(len(self.names), dtype=np.float32)
        for term in set(terms(query)):
            posting = self.postings.get(term)
            if posting is not None:
                scores[posting[0]] += posting[1]
        return scores

    def top(self, query: str, limit: int) -> list[int]:
        """Indexes of the best ``limit`` tools with a positive score, best first, ties by name."""
        if limit <= 0:
            return []
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if len(hits) > limit:
            kth = np.partition(scores[hits], len(hits) - limit)[len(hits) - limit]
            hits = hits[scores[hits] >= kth]  # keep every tie at the cut, sorted below
        order = np.lexsort((self.name_order[hits], -scores[hits]))
        return hits[order][:limit].tolist()


_INDEXES: IndexCache[BM25Index] = IndexCache(BM25Index.build)


def bm25_index(tools: Sequence[Tool]) -> BM25Index:
    """The cached index of ``tools``."""
    return _INDEXES.get(tools)


def keyword_top(query: str, tools: Sequence[Tool], limit: int) -> tuple[list[int], str | None]:
    """BM25's best tool indexes; when no term matches at all (a typo, an abbreviation),
    fuzzy keywords' instead, with the reason. Both index the catalog in its order."""
    hits = bm25_index(tools).top(query, limit)
    if hits:
        return hits, None
    return fuzzy_index(tools).top(query, limit), "no BM25 term matched"


class BM25Searcher(SearcherBase):
    name = "bm25"

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        hits, fallback = keyword_top(query, tools, limit)
        names = [tools[i].name for i in hits]
        return Ranking(names, "fuzzy" if fallback else self.name, fallback)
