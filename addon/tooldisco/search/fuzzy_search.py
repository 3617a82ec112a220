"""Typo-tolerant keyword search: every query word is matched to the catalog's words.

Why: models search with half-remembered words ("wether", "send msg", "getweather"),
which exact-term search misses. Each query word is compared with every distinct word of
the catalog by rapidfuzz: a ratio of 80 or more is a typo match; a word the catalog
does not have may also abbreviate one, by truncation ("repo" -> "repository") or by
keeping its first letter and some consonants in order ("msg" -> "message"). A tool
scores the sum, over query words, of its best match, weighted by the field it is in
(``documents.FIELD_WEIGHTS``) and by how rare the matched word is. The query with its
separators removed is also compared with each name, so a near-exact name wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from rapidfuzz import fuzz, process
from rapidfuzz.distance import LCSseq

from tooldisco.core.types import Tool
from tooldisco.search.base import Ranking, SearcherBase
from tooldisco.search.documents import FIELD_WEIGHTS, Field, fields
from tooldisco.search.index_cache import IndexCache
from tooldisco.search.tokens import STOPWORDS, words

TYPO_CUTOFF = 80  # rapidfuzz ratio, 0-100: "wether"/"weather" is 92, "msg"/"message" 60
ABBREVIATION_SIMILARITY = 0.8
MIN_ABBREVIATION = 3  # shorter words are abbreviations of too many things
VOWELS = frozenset("aeiouy")


def _compact(text: str) -> str:
    return "".join(words(text))


@dataclass(frozen=True)
class FuzzyIndex:
    """The catalog's distinct words, which tools hold each (with field weight), and names."""

    names: tuple[str, ...]
    compact_names: tuple[str, ...]
    vocabulary: list[str]
    known: frozenset[str]
    postings: list[tuple[np.ndarray, np.ndarray]]  # per word: (tool indexes, weight x idf)
    max_idf: float

    @classmethod
    def build(cls, tools: Sequence[Tool]) -> FuzzyIndex:
        holders: dict[str, dict[int, float]] = {}
        for i, tool in enumerate(tools):
            for text, field in fields(tool):
                weight = FIELD_WEIGHTS[field]
                for word in words(text):
                    held = holders.setdefault(word, {})
                    held[i] = max(held.get(i, 0.0), weight)
        n = max(len(tools), 1)
        vocabulary = list(holders)
        postings = []
        max_idf = 0.0
        for word in vocabulary:
            held = holders[word]
            idf = math.log(1.0 + n / len(held))
            max_idf = max(max_idf, idf)
            ids = np.fromiter(held.keys(), dtype=np.int32, count=len(held))
            weights = np.fromiter(held.values(), dtype=np.float32, count=len(held)) * idf
            postings.append((ids, weights))
        return cls(
            names=tuple(t.name for t in tools),
            compact_names=tuple(_compact(t.name) for t in tools),
            vocabulary=vocabulary,
            known=frozenset(vocabulary),
            postings=postings,
            max_idf=max_idf,
        )

    def scores(self, query: str) -> np.ndarray:
        scores = np.zeros(len(self.names), dtype=np.float32)
        all_words = list(dict.fromkeys(words(query)))
        query_words = [w for w in all_words if w not in STOPWORDS] or all_words
        if not query_words or not self.vocabulary:
            return scores
        similarity = process.cdist(
            query_words, self.vocabulary, scorer=fuzz.ratio, score_cutoff=TYPO_CUTOFF,
            dtype=np.uint8,
        ).astype(np.float32) / 100.0
        for q, word in enumerate(query_words):
            if len(word) >= MIN_ABBREVIATION and word not in self.known:
                self._add_abbreviations(word, similarity[q])
            best = np.zeros(len(self.names), dtype=np.float32)
            for v in np.flatnonzero(similarity[q]):
                ids, weights = self.postings[v]
                best[ids] = np.maximum(best[ids], weights * similarity[q, v])
            scores += best
        compact = "".join(all_words)
        if compact:
            ratios = process.cdist([compact], self.compact_names, scorer=fuzz.ratio,
                                   score_cutoff=TYPO_CUTOFF, dtype=np.uint8)[0]
            scores += ratios.astype(np.float32) / 100.0 * FIELD_WEIGHTS[Field.NAME] * self.max_idf
        return scores

    def _add_abbreviations(self, word: str, similarity: np.ndarray) -> None:
        """Mark the catalog words that ``word`` abbreviates (only asked for unknown words):
        by truncation ("repo" -> "repository") or by dropping vowels ("msg" -> "message")."""
        vowel_free = not any(c in VOWELS for c in word[1:])
        common = process.cdist([word], self.vocabulary, scorer=LCSseq.similarity, dtype=np.int32)[0]
        for v in np.flatnonzero(common == len(word)):  # word is a subsequence of candidate
            candidate = self.vocabulary[v]
            if len(candidate) <= len(word) or candidate[0] != word[0]:
                continue
            if vowel_free or candidate.startswith(word):
                similarity[v] = max(similarity[v], ABBREVIATION_SIMILARITY)

    def top(self, query: str, limit: int) -> list[int]:
        """Best ``limit`` tools with a positive score, best first, ties in catalog order."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = np.argsort(-scores[hits], kind="stable")
        return hits[order][: max(limit, 0)].tolist()


_INDEXES: IndexCache[FuzzyIndex] = IndexCache(FuzzyIndex.build)


def fuzzy_index(tools: Sequence[Tool]) -> FuzzyIndex:
    """The cached index of ``tools``."""
    return _INDEXES.get(tools)


class FuzzySearcher(SearcherBase):
    name = "fuzzy"

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        index = fuzzy_index(tools)
        return Ranking([index.names[i] for i in index.top(query, limit)], self.name)
