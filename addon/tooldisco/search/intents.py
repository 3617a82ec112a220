"""Long and multi-intent queries: each intent searched on its own, results diversified.

Why: models paste whole tasks into the search ("read the csv, plot it, email the chart";
"First find ... Then book ..."). Ranked as one text, the intent with the most or rarest
words takes every slot: five csv readers, no plotter, no mailer. So the query is cut into
intents (sentences and sequencers like "then"; a single sentence listing three things or
more, by its commas and "and"s), each is scored like the whole query, and the head of the
ranking is picked greedily by xQuAD (Santos et al., WWW 2010): a tool's worth is its
relevance to the whole query plus, for each intent, its relevance to that intent times
how little the tools already picked cover it. The second tool for an intent is worth
little once the first covers it, so one near-identical variant does not push out another
intent's tool. On a single request the whole query dominates, so recall is kept; on
queries made of two or three requests it rises (``scripts/bench_retrieval.py``'s bfcl and
multi-intent sets). More diversity buys more there and costs single requests, so each
backend sets its lambda.

The scorer is the backend's: BM25 scores, or hybrid's fused scores, for a batch of texts.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import regex

from tooldisco.search.tokens import query_terms

#: Scores of every tool for each text (one row per text); -inf marks a tool that is no
#: candidate for that text (no term in common, too dissimilar).
Scorer = Callable[[Sequence[str]], np.ndarray]

MAX_INTENTS = 8  # each costs a scoring pass (a model forward pass for hybrid)
MIN_CLAUSES = 3  # fewer, and commas more often qualify one request ("in Paris, France")
POOL = 30  # candidates from the whole query
PER_INTENT = 5  # and from each intent
DIVERSITY = 0.5  # xQuAD's lambda: the weight of covering the intents vs the whole query
MAX_DIVERSIFIED = 20  # ranks picked greedily; the rest follow the whole query's order

_SENTENCES = regex.compile(
    r"(?<=[.?!;])\s+|\n+|\s+(?:and\s+then|then|after\s+that|afterwards|finally)\s+", regex.IGNORECASE
)
_CLAUSES = regex.compile(r"\s*,\s*(?:and\s+|then\s+)?|\s+and\s+", regex.IGNORECASE)
_LEADING = regex.compile(r"^(?:and\s+)?(?:then|after\s+that|afterwards|finally|next|also)\b[\s,]*", regex.IGNORECASE)


def split_intents(query: str) -> list[str]:
    """The intents of ``query`` ([] when it has one): its sentences, or else its clauses."""
    parts = _parts(_SENTENCES, query)
    if len(parts) <= 1:
        parts = _parts(_CLAUSES, query)
        parts = parts if len(parts) >= MIN_CLAUSES else []
    return parts[:MAX_INTENTS] if len(parts) > 1 else []


def _parts(separator: regex.Pattern[str], text: str) -> list[str]:
    """``text`` cut at ``separator``, leading sequencers ("then") dropped, word-less parts too."""
    parts = (_LEADING.sub("", p.strip()) for p in separator.split(text) if p)
    return [p for p in parts if query_terms(p)]


def ranked(scores: np.ndarray, limit: int, tiebreak: np.ndarray | None = None) -> list[int]:
    """Indexes of the ``limit`` best finite scores, best first, ties by ``tiebreak`` (else index)."""
    hits = np.flatnonzero(np.isfinite(scores))
    if len(hits) > limit > 0:
        kth = np.partition(scores[hits], len(hits) - limit)[len(hits) - limit]
        hits = hits[scores[hits] >= kth]  # keep every tie at the cut, sorted below
    second = hits if tiebreak is None else tiebreak[hits]
    return hits[np.lexsort((second, -scores[hits]))][: max(limit, 0)].tolist()


def search(
    score: Scorer, query: str, limit: int, tiebreak: np.ndarray | None = None, diversity: float = DIVERSITY
) -> list[int]:
    """The best ``limit`` tools for ``query``, diversified across its intents (``diversity``
    is xQuAD's lambda)."""
    parts = split_intents(query)
    rows = score([query, *parts])
    whole = ranked(rows[0], max(limit, POOL), tiebreak)
    if not parts or not whole:
        return whole[: max(limit, 0)]
    pool = list(dict.fromkeys(whole[:POOL] + [i for row in rows[1:] for i in ranked(row, PER_INTENT, tiebreak)]))
    picked = _xquad(rows, pool, parts, min(limit, MAX_DIVERSIFIED), diversity)
    chosen = set(picked)
    rest = [i for i in whole if i not in chosen]
    return (picked + rest)[: max(limit, 0)]


def _xquad(rows: np.ndarray, pool: list[int], parts: list[str], k: int, diversity: float) -> list[int]:
    """Greedy xQuAD over ``pool``: relevance to the whole query, and to each intent weighted
    by its share of the query's words and discounted by how well the picks cover it."""
    scores = rows[:, pool]
    relevance = _unit(scores[0])
    coverage = np.stack([_unit(row) for row in scores[1:]])  # intent x candidate, in [0, 1]
    weights = np.array([len(set(query_terms(p))) for p in parts], dtype=np.float64)
    weights /= weights.sum()
    uncovered = np.ones(len(parts))
    available = np.isfinite(scores[0])
    own = (1 - diversity) * relevance
    taken = np.where(available, 0.0, -np.inf)  # -inf once picked, or never a candidate
    picked: list[int] = []
    for _ in range(min(k, int(available.sum()))):
        worth = own + diversity * ((weights * uncovered) @ coverage)
        worth += taken
        best = int(np.argmax(worth))  # first of equals: the whole query's order
        picked.append(pool[best])
        taken[best] = -np.inf
        uncovered *= 1.0 - coverage[:, best]
    return picked


def _unit(row: np.ndarray) -> np.ndarray:
    """Finite scores mapped onto [0, 1] (min to max); no candidate (-inf) is 0."""
    finite = np.isfinite(row)
    if not finite.any():
        return np.zeros(len(row))
    low, high = row[finite].min(), row[finite].max()
    out = np.zeros(len(row))
    out[finite] = (row[finite] - low) / (high - low) if high > low else 1.0
    return out
