"""Okapi BM25 over tool definitions (k1 1.2, b 0.5), as a precomputed inverted index.

Why: keyword search needs no model, explains itself, and is what a tool name query
("github create issue") wants. The catalog is indexed once: every (term, tool) weight
is computed at build time, so a query is a handful of numpy additions over posting
lists and a partial sort (``scripts/bench_retrieval.py`` times it at 10k tools).

The document of a tool is its fields (``documents``) with their weights: the name
counts twice, parameter descriptions and schema values less. Length normalisation is
milder than the textbook 0.75 (b = 0.5): a tool's definition is long because it has many
parameters, not because it rambles (``scripts/bench_retrieval.py`` shows the recall it
gains on BFCL). Tools that have more of the query's terms are preferred
(``COORDINATION``). The kinds of value a query carries (a date, a path…) count for
the tools that match it and name them (``cues``). A query with several intents is
diversified across them (``intents``). A query none of whose terms occurs in the
catalog is most likely misspelt: it is answered by the fuzzy backend instead of with
nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tooldisco.core.types import Tool
import tooldisco.search.cues as cues
from tooldisco.search.base import Ranking, SearcherBase
from tooldisco.search.documents import FIELD_WEIGHTS, fields
from tooldisco.search.fuzzy_search import fuzzy_index
from tooldisco.search.intents import search
from tooldisco.search.index_cache import IndexCache
from tooldisco.search.tokens import query_terms, terms

K1 = 1.2
B = 0.5
# Lucene's coordination factor, softened: a tool's score is scaled by the share of
# the query's terms it has, to this power, so one rare word (a "3D" in a movie request
# matching a protein tool) weighs less than several of the request's words. 0.25 ranks
# best of 0, 0.25 and 0.5 on every set of ``scripts/bench_retrieval.py``; each intent of a
# multi-intent query is coordinated alone, as coordinating the whole query sinks a tool
# for one of its intents. Hybrid fuses the raw, uncoordinated scores: coordinating them
# costs multi-turn recall there.
COORDINATION = 0.25


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

    def scores(self, query: str, coordination: float = 0.0) -> np.ndarray:
        """BM25 score of every tool for ``query`` (each distinct query term counted once),
        times the share of the query's terms the tool has, to the power ``coordination``;
        plus, for tools with a score, the words of the kinds of value the query carries
        (``cues``) at their weight."""
        asked = set(query_terms(query))
        scores = self._sum(asked)
        if coordination and asked:
            matched = self._sum(asked, counts=True)
            scores *= (matched / len(asked)) ** coordination
        if (cued := set(query_terms(" ".join(cues.cue_words(query))))) and scores.any():
            scores += np.where(scores > 0, cues.WEIGHT * self._sum(cued), 0.0).astype(np.float32)
        return scores

    def _sum(self, query_terms: set[str], counts: bool = False) -> np.ndarray:
        """Per tool, the sum of its weights for ``query_terms`` (``counts``: how many it has)."""
        out = np.zeros(len(self.names), dtype=np.float32)
        for term in query_terms:
            posting = self.postings.get(term)
            if posting is not None:
                out[posting[0]] += 1.0 if counts else posting[1]
        return out

    def candidate_scores(self, texts: Sequence[str]) -> np.ndarray:
        """One row of ranking scores per text (``intents``' scorer: the whole query, then
        its intents); -inf for tools without a term in common. Coordination
        (``COORDINATION``) scores a single request, or each intent: no one tool is meant
        to have the words of all a multi-intent query asks."""
        rows = np.stack([
            self.scores(text, 0.0 if k == 0 and len(texts) > 1 else COORDINATION) for k, text in enumerate(texts)
        ]).astype(np.float64)
        rows[rows <= 0] = -np.inf
        return rows

    def top(self, query: str, limit: int) -> list[int]:
        """Indexes of the best ``limit`` tools with a positive score, best first, ties by
        name, diversified across the query's intents."""
        return search(self.candidate_scores, query, limit, self.name_order)


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
