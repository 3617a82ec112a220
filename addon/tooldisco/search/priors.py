"""Learned priors: which words led a tenant's models to which tools, blended into ranking.

Why: a lexical backend ranks by the words of a definition, while models ask in their own
words ("page the on-call" for ``create_incident``). The proxy sees every turn's query and the
tool the model then called; a team's agents use the same tools all day, so what one session
learned should make the next session's first search land.

What is kept, per tenant (``Knowledge``, plain JSON so both session stores hold it): per tool,
identified by its definition's fingerprint (``Tool.identity``: a changed tool starts over), how often
it was called, and a weight per query term: raised by a query whose turn went on to call the
tool, lowered a little by one that ranked it above the called tool. Terms are stored as short
digests (``term_key``), never as text. Everything decays with a half-life, and the whole is
bounded in bytes (``Knowledge.bounded``).

How it ranks (``Learned``): the backend's ranking, fetched deeper than asked, scores by
reciprocal rank; to that each tool adds its learned score (``Priors.scores``: per known word
of the query, the tool's share of that word's evidence), so a tool the backend missed but the
priors know for these words joins the candidates. ``names.NamedFirst`` wraps the result, so a
tool the query names still comes first.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tooldisco.core.types import Tool
from tooldisco.search.base import Ranking, Searcher, SearcherBase, as_catalog
from tooldisco.search.index_cache import IndexCache
from tooldisco.search.phantom_query import LIST_ALL, SELECT_PREFIX
from tooldisco.search.tokens import SHORT_WORD, query_terms

VERSION = 1
MAX_QUERY_TERMS = 64  # terms of one query learned from or scored (a task told at length keeps its verb)
MAX_TERMS_PER_TOOL = 64  # the strongest kept per tool
POSITIVE = 1.0  # a query whose turn called the tool
NEGATIVE = -0.25  # a query that ranked the tool above the one the model called
FLOOR = 0.02  # weights and counts decayed below this are dropped
DEPTH = 2  # the backend is asked for this many times the limit, at least ``MIN_DEPTH``
MIN_DEPTH = 10
RRF_K = 10.0  # reciprocal-rank constant of the backend's side
# The learned side's weight: a tool every known word of the query led to, and only it, scores
# six times the backend's first place (1 / RRF_K), so strong evidence wins and weak evidence
# reorders only what the backend ranked close.
PRIOR_WEIGHT = 0.6
CONFIDENCE = 0.3  # a term's evidence at which it is trusted half
MAX_SHARES = 8  # tools a word's evidence is scored for, the strongest
MIN_SHARE = 0.1  # a smaller share of a word's evidence cannot reorder a ranking: not scored
DECAY_EVERY = 3600.0  # seconds between two decay passes over a tenant's priors
CALLS_HALF = 3.0  # calls at which a tool's call count is half its weight toward being kept upfront


def term_key(term: str) -> str:
    """A query term as it is stored: a short digest, so no query text is kept (a term that
    occurs in some tool's definition can be guessed back; a user's words cannot be read).
    Memoised for usual words: every search digests each of its words."""
    return _short_term_key(term) if len(term) <= SHORT_WORD else _term_key(term)


def _term_key(term: str) -> str:
    return hashlib.blake2b(term.encode("utf-8", "replace"), digest_size=4, person=b"tooldisco-term").hexdigest()


_short_term_key = functools.lru_cache(maxsize=8192)(_term_key)


def query_keys(query: str) -> list[str]:
    """The stored keys of a query's distinct terms, in order, at most ``MAX_QUERY_TERMS``."""
    return [term_key(t) for t in list(dict.fromkeys(query_terms(query)))[:MAX_QUERY_TERMS]]


def ranked(query: str) -> bool:
    """Whether a query asked for a ranking (not ``select:`` by name, nor the listing)."""
    q = query.strip()
    return bool(q) and q != LIST_ALL and not q.lower().startswith(SELECT_PREFIX)


@dataclass
class Lesson:
    """What one turn taught: positives and negatives as (term keys, tool id), and calls."""

    positives: list[tuple[list[str], str]] = field(default_factory=list)
    negatives: list[tuple[list[str], str]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # tool ids the model called

    def __bool__(self) -> bool:
        return bool(self.positives or self.negatives or self.calls)

    def extend(self, other: Lesson) -> None:
        self.positives += other.positives
        self.negatives += other.negatives
        self.calls += other.calls


def lesson(searches: Sequence[tuple[str | None, Sequence[str]]], called: Iterable[str],
           catalog: Mapping[str, Tool]) -> Lesson:
    """What a turn teaches: ``searches`` are (query, names returned, best first) in order,
    ``called`` the tools the model went on to call.

    A called tool is a positive for every query of the turn up to the one that returned it
    (a query that missed taught as much as the one that hit: it is the paraphrase). A tool a
    query ranked above a called one, that the model passed over, is a weak negative of that
    query; tools ranked below it say nothing (the model stopped reading where it found its tool)."""
    called = [n for n in dict.fromkeys(called) if n in catalog]
    out = Lesson(calls=[catalog[n].identity for n in called])
    keyed = [(query_keys(q), list(names)) for q, names in searches if q and ranked(q)]
    chosen = set(called)
    for name in called:
        tid = catalog[name].identity
        for keys, names in keyed:
            if not keys:
                continue
            out.positives.append((keys, tid))
            if name in names:
                out.negatives += [(keys, catalog[n].identity) for n in names[:names.index(name)]
                                  if n not in chosen and n in catalog]
                break
    return out


@dataclass
class Knowledge:
    """One tenant's priors as stored: ``tools`` maps a tool id to ``{"c": calls, "w": {term
    key: weight}}``; ``at`` is when they were last decayed (epoch seconds)."""

    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    at: float = 0.0

    @classmethod
    def decode(cls, data: Any) -> Knowledge:
        """From a stored entry; anything unreadable reads as nothing learned."""
        if not isinstance(data, dict) or data.get("v") != VERSION or not isinstance(data.get("tools"), dict):
            return cls()
        tools: dict[str, dict[str, Any]] = {}
        for tid, entry in data["tools"].items():
            if not isinstance(entry, dict):
                continue
            weights = entry.get("w")
            weights = {str(k): float(v) for k, v in weights.items()
                       if isinstance(v, (int, float))} if isinstance(weights, dict) else {}
            calls = entry.get("c")
            tools[str(tid)] = {"c": float(calls) if isinstance(calls, (int, float)) else 0.0, "w": weights}
        at = data.get("at")
        return cls(tools, float(at) if isinstance(at, (int, float)) else 0.0)

    def encode(self) -> dict[str, Any]:
        """The stored entry: plain JSON types (weights are kept to three decimals as they are
        written: what the evidence is worth, in a third of the bytes)."""
        return {"v": VERSION, "at": round(self.at, 3), "tools": self.tools}

    def size(self) -> int:
        """Bytes of the stored entry (its compact JSON)."""
        return _size(self.encode())

    def decay(self, now: float, half_life: float) -> None:
        """Every weight and count times 2^(-elapsed / half_life); what falls below ``FLOOR`` goes.
        At most once per ``DECAY_EVERY`` (a pass touches every weight; an hour is a tiny share of
        a half-life)."""
        if not self.at:
            self.at = now
        elif now - self.at >= min(DECAY_EVERY, half_life) and half_life > 0:
            factor = 0.5 ** ((now - self.at) / half_life)
            for tid in list(self.tools):
                entry = self.tools[tid]
                entry["c"] = round(entry["c"] * factor, 3)
                entry["w"] = {k: round(w * factor, 3) for k, w in entry["w"].items() if abs(w * factor) >= FLOOR}
                if entry["c"] < FLOOR and not entry["w"]:
                    del self.tools[tid]
            self.at = now

    def learn(self, lesson: Lesson) -> None:
        for keys, tid in lesson.positives:
            self._add(tid, keys, POSITIVE / math.sqrt(len(keys)))
        for keys, tid in lesson.negatives:
            self._add(tid, keys, NEGATIVE / math.sqrt(len(keys)))
        for tid in lesson.calls:
            self._entry(tid)["c"] = round(self._entry(tid)["c"] + 1.0, 3)

    def _entry(self, tid: str) -> dict[str, Any]:
        return self.tools.setdefault(tid, {"c": 0.0, "w": {}})

    def _add(self, tid: str, keys: list[str], amount: float) -> None:
        weights = self._entry(tid)["w"]
        for k in keys:
            # A term's case against a tool saturates, so a later positive still counts.
            weights[k] = round(max(weights.get(k, 0.0) + amount, NEGATIVE * 4), 3)
        if len(weights) > MAX_TERMS_PER_TOOL:
            strongest = sorted(weights.items(), key=lambda kv: -abs(kv[1]))[:MAX_TERMS_PER_TOOL]
            self._entry(tid)["w"] = dict(strongest)

    def bounded(self, max_bytes: int) -> None:
        """Drop the tools with the least evidence until the entry fits ``max_bytes``."""
        size = self.size()
        if size <= max_bytes:
            return
        tools = self.tools
        order = sorted(tools, key=lambda t: (tools[t]["c"] + sum(abs(w) for w in tools[t]["w"].values()), t))
        for tid in order:
            if size <= max_bytes:
                break
            size -= _share(tid, tools.pop(tid))
        while tools and self.size() > max_bytes:  # the shares are exact; this only guards that
            tools.pop(next(iter(tools)))


def _share(tid: str, entry: dict[str, Any]) -> int:
    """Bytes one tool takes in the entry's compact JSON: ``"tid":{"c":C,"w":{"k":W,...}}`` and
    its separator (ids and term keys are hex: nothing to escape; floats print as ``repr``)."""
    weights = entry["w"]
    terms = sum(len(k) + 3 + len(repr(w)) for k, w in weights.items()) + max(len(weights) - 1, 0)
    return len(tid) + 3 + 5 + len(repr(entry["c"])) + 6 + terms + 2 + 1


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def merge(data: Any, lesson: Lesson, now: float, half_life: float, max_bytes: int) -> dict[str, Any]:
    """The stored entry after ``lesson``: decayed to ``now``, taught, bounded."""
    knowledge = Knowledge.decode(data)
    knowledge.decay(now, half_life)
    knowledge.learn(lesson)
    knowledge.bounded(max_bytes)
    return knowledge.encode()


class Priors:
    """A tenant's priors, read-only and indexed for scoring: per term key, the strongest tools
    it led to with their share of its evidence, and per tool its call count."""

    def __init__(self, knowledge: Knowledge):
        postings: dict[str, list[tuple[str, float]]] = {}
        self.calls: dict[str, float] = {}
        for tid, entry in knowledge.tools.items():
            if entry["c"] > 0:
                self.calls[tid] = entry["c"]
            for key, weight in entry["w"].items():
                postings.setdefault(key, []).append((tid, weight))
        # What a term is worth: its share of evidence per tool (a word that led to many tools says
        # little about any one), trusted as the term's evidence grows (``CONFIDENCE``); made once
        # here, so a search only adds.
        self.shares: dict[str, list[tuple[str, float]]] = {}
        for key, posting in postings.items():
            mass = sum(w for _, w in posting if w > 0)
            if mass > 0:
                trust = 1.0 / (mass + CONFIDENCE)  # (w / mass) * (mass / (mass + CONFIDENCE))
                # A word that led to many tools gives each a sliver: only its strongest count,
                # and none too weak to move a ranking.
                shares = [(tid, share) for tid, w in posting if abs(share := w * trust) >= MIN_SHARE]
                if shares:
                    self.shares[key] = heapq.nlargest(MAX_SHARES, shares, key=lambda s: abs(s[1]))

    def __bool__(self) -> bool:
        return bool(self.shares or self.calls)

    def scores(self, query: str) -> dict[str, float]:
        """Tool id -> how much of ``query``'s learned words led to it, in [-1, 1]: per known
        term, the tool's share of the term's evidence times the trust in the term, averaged
        over the known terms (negative: ranked above the called tool and passed over)."""
        found = [share for k in query_keys(query) if (share := self.shares.get(k)) is not None]
        if len(found) <= 1:
            return dict(found[0]) if found else {}
        out: dict[str, float] = {}
        get = out.get
        for share in found:
            for tid, value in share:
                out[tid] = get(tid, 0.0) + value
        known = len(found)
        return {tid: value / known for tid, value in out.items()}

    def bonus(self, query: str, tools: Sequence[Tool], weight: float) -> dict[str, float]:
        """Per tool name, what the tenant's traffic says for keeping it loaded: how often it was
        called (saturating) plus how well words like ``query``'s led to it, each up to ``weight``."""
        if not self:
            return {}
        learned = self.scores(query) if query.strip() else {}
        out: dict[str, float] = {}
        for tool in tools:
            tid = tool.identity
            calls, evidence = self.calls.get(tid, 0.0), max(learned.get(tid, 0.0), 0.0)
            if calls or evidence:
                out[tool.name] = weight * (calls / (calls + CALLS_HALF) + evidence)
        return out


def _ids(tools: Sequence[Tool]) -> tuple[dict[str, str], dict[str, str]]:
    """Tool id -> name, and name -> tool id, for a catalog."""
    names = {t.identity: t.name for t in tools}
    return names, {name: tid for tid, name in names.items()}


_IDS: IndexCache[tuple[dict[str, str], dict[str, str]]] = IndexCache(_ids)


class Learned(SearcherBase):
    """``inner``'s ranking with a tenant's priors fused in (see the module's docstring)."""

    def __init__(self, inner: Searcher, priors: Priors):
        self.inner = inner
        self.priors = priors
        self.name = inner.name

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        tools = as_catalog(tools)
        learned = self.priors.scores(query)
        if not learned:
            return self.inner.rank(query, tools, limit)
        depth = max(limit * DEPTH, MIN_DEPTH)
        ranking = self.inner.rank(query, tools, depth)
        names, ids = _IDS.get(tools)
        # The backend's candidates, each with what was learned of it ...
        fused: dict[str, float] = {}
        for r, name in enumerate(ranking.names):
            tid = ids.get(name)
            fused[name] = 1.0 / (RRF_K + r) + (PRIOR_WEIGHT * learned.get(tid, 0.0) if tid is not None else 0.0)
        candidates = sorted((-score, r, name) for r, (name, score) in enumerate(fused.items()) if score > 0)
        # ... and the tools learned strongest for these words that the backend missed: only those
        # scoring above the ``limit``-th candidate can place.
        bar = -candidates[limit - 1][0] / PRIOR_WEIGHT if 0 < limit <= len(candidates) else 0.0
        missed = [(-PRIOR_WEIGHT * evidence, depth, name) for tid, evidence in learned.items()
                  if evidence > bar and (name := names.get(tid)) is not None and name not in fused]
        if missed:
            candidates = sorted(candidates + missed)
        best = [name for _, _, name in candidates[:limit]]
        return Ranking(best, ranking.backend, ranking.fallback, ranking.group)
