"""What tool discovery did and saved, from telemetry JSONL files: one self-contained HTML page,
or with ``--json`` the same figures as one JSON object on stdout.

    tooldisco report tool_discovery.jsonl [more.jsonl ...] -o report.html
        [--since 2026-05-01T09:00] [--until ...] [--session PREFIX] [--tenant PREFIX] [--agent NAME]
        [--api anthropic] [--strategy tool-search] [--usd-per-mtok 3.0] [--json] [--quiet]

The page leads with money: what the priced turns cost (``cost_usd``), what they would have cost
had the client's own request gone out (``cost_usd_without``), the difference, the cache tokens
inside those figures, the turns whose model has no price, the saving over time per tenant and
per agent, tokens by type and the tool definitions' share of the context window. Records
written before the proxy priced turns carry none of those fields: they count in every other
section and in none of the money figures.

Why streaming: a proxy left running writes millions of records; the report reads them line by
line and keeps only aggregates (sums per time bucket, API, strategy, model, tenant and agent;
counters; fixed-size random samples for the percentiles and the distributions), so memory
stays bounded whatever the size of the files. Money is summed as decimals of the values as
written, so the totals are exact. The plots (matplotlib, Agg backend) are written as PNG files
beside the page and embedded in it as data URIs, so the page can be mailed or attached alone;
a plot with nothing to draw is not drawn (the page says "none"). The api strategy's tables
are ``selector``'s, over the same records. The page needs the ``report`` extra (matplotlib,
tqdm); ``--json`` needs neither (tqdm, when present, draws the progress bar).
"""

from __future__ import annotations

import argparse
import base64
import html
import importlib.util
import io
import json
import math
import random
import sys
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from tooldisco.report import selector
from tooldisco.report.selector import PERCENTILES, percentiles
from tooldisco.watch.summary import (GLOSSARY, MODES, FlowSummary, last_status, mode_of, outcome_table, passed_of,
                                     plural, reason_table, reason_words, result_words)

SAMPLE = 20_000  # values kept per latency sample: exact percentiles below it, a uniform sample above
MAX_BUCKETS = 512  # time buckets; past it their width doubles and neighbours merge
MAX_REASONS = 40  # distinct fallback reasons counted; the rest are "other"
LOOP_STRATEGIES = ("tool-search", "api")  # the strategies whose model may search
MAX_SEARCHES_SHOWN = 5  # searches per turn: 0..4, then "5+"
MAX_NAMES = 40  # distinct models, tenants and agents kept apart; the rest are "other"
TOKEN_TYPES = ("input", "cache_read", "cache_write", "output")  # a record's usage: input is the uncached part
CONTEXT_SHARE_HIGH = 0.25  # tool definitions above this share of the context window are counted
HOURLY_UP_TO = 2 * 86400  # the saving over time is per hour over a span up to this, per day past it
TURNS = 100  # the latest turns listed one by one (--turns)
# The times a turn records (summary.GLOSSARY says what each is): name -> its telemetry field.
TIMINGS = {"planning": "processing_ms", "upstream": "upstream_ms", "answering": "loop_added_ms", "proxy": "",
           "total": "total_ms"}
MAX_SESSIONS = 2000  # sessions followed; past it the rest count as "other"
SESSIONS_SHOWN = 40  # the sessions listed, the latest first
MAX_CALLED = 20  # tool names kept per listed turn
MAX_RESULT_KEYS = 4096  # raw outcome values remembered with the result they count as (free text makes many)
OTHER = "other"
ZERO = Decimal(0)


class Sample:
    """A uniform random sample of at most ``size`` floats (reservoir sampling, Li's algorithm L:
    once full, it draws how many values to skip before the next one it keeps, so a value it skips
    costs a comparison, not a random number), in a compact array. Reads like the list the
    selector report expects: ``append``, ``len``, iteration, indexing."""

    def __init__(self, size: int = SAMPLE, seed: int = 0) -> None:
        self.size = size
        self.seen = 0
        self.values = array("d")
        self._random = random.Random(seed)
        self._w = 1.0
        self._next = 0  # the count of values seen at which the next one is kept (once full)

    def append(self, value: float) -> None:
        self.seen += 1
        if len(self.values) < self.size:
            self.values.append(value)
            if len(self.values) == self.size:
                self._skip()
        elif self.seen == self._next:
            self.values[self._random.randrange(self.size)] = value
            self._skip()

    def _skip(self) -> None:
        self._w *= math.exp(math.log(1.0 - self._random.random()) / self.size)
        gap = math.log(1.0 - self._random.random()) / math.log1p(-self._w) if self._w < 1.0 else 0.0
        self._next = self.seen + int(gap) + 1

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[float]:
        return iter(self.values)

    def __getitem__(self, index: int) -> float:
        return self.values[index]


@dataclass
class Bucket:
    requests: int = 0
    before: int = 0  # tool tokens sent
    after: int = 0  # in the prompt
    wire: int = 0  # on the wire
    saved: Counter[str] = field(default_factory=Counter)  # tool tokens saved, per API


class Timeline:
    """Per-time-bucket sums in bounded memory, whatever the order of the records: when there
    are too many buckets their width doubles and neighbours merge."""

    def __init__(self, width: float = 1.0, most: int = MAX_BUCKETS) -> None:
        self.width = width
        self.most = most
        self.buckets: dict[int, Bucket] = {}

    def add(self, when: float, api: str, before: int, after: int, wire: int | None = None) -> None:
        bucket = self.buckets.get(key := math.floor(when / self.width))
        if bucket is None:
            bucket = self.buckets[key] = Bucket()
            while len(self.buckets) > self.most:
                self._coarsen()
                bucket = self.buckets[math.floor(when / self.width)]
        bucket.requests += 1
        bucket.before += before
        bucket.after += after
        bucket.wire += after if wire is None else wire
        bucket.saved[api] += before - after

    def _coarsen(self) -> None:
        self.width *= 2
        merged: dict[int, Bucket] = {}
        for key, b in self.buckets.items():
            into = merged.setdefault(key // 2, Bucket())
            into.requests += b.requests
            into.before += b.before
            into.after += b.after
            into.wire += b.wire
            into.saved.update(b.saved)
        self.buckets = merged

    def ordered(self) -> list[tuple[float, Bucket]]:
        return [(key * self.width, self.buckets[key]) for key in sorted(self.buckets)]


@dataclass
class Group:
    """One API's or one strategy's totals and latency samples."""

    requests: int = 0
    before: int = 0  # tool tokens sent
    after: int = 0  # in the prompt
    wire: int = 0  # on the wire
    searches: int = 0
    fallbacks: int = 0
    processing_ms: Sample = field(default_factory=Sample)  # planning
    upstream_ms: Sample = field(default_factory=Sample)  # turns whose upstream time was measured
    loop_added_ms: Sample = field(default_factory=Sample)  # answering, over the turns that searched
    total_ms: Sample = field(default_factory=Sample)  # turns whose total was measured
    search_ms: Sample = field(default_factory=Sample)


# How a turn ended, as counted: (passed through, outcome, fallback reason, an upstream error status).
ResultKey = tuple[bool, str, str, "int | None"]
OTHER_RESULT: ResultKey = (False, OTHER, "", None)


@dataclass
class ModeRow:
    """The turns of one mode (``summary.MODES``): tools and tool tokens, the three counts."""

    turns: int = 0
    tools_sent: int = 0
    loaded: int = 0
    deferred: int = 0
    sent: int = 0  # tool tokens sent
    wire: int = 0  # on the wire
    prompt: int = 0  # in the prompt
    searches: int = 0
    hits: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"turns": self.turns, "tools": {"sent": self.tools_sent, "loaded": self.loaded,
                                               "deferred": self.deferred},
                "tokens": {"sent": self.sent, "wire": self.wire, "prompt": self.prompt,
                           "saved": self.sent - self.prompt,
                           "saved_pct": _pct_json(self.sent - self.prompt, self.sent)},
                "searches": self.searches, "hits": self.hits}


@dataclass
class SessionRow:
    """One session's turns: when, what they searched, what they saved, the last turn's id."""

    turns: int = 0
    first: float | None = None
    last: float | None = None
    searches: int = 0
    saved: int = 0  # tool tokens sent minus in the prompt
    last_id: str = ""

    def as_json(self, name: str) -> dict[str, Any]:
        return {"session": name, "turns": self.turns, "first": _when(self.first) if self.first is not None else None,
                "last": _when(self.last) if self.last is not None else None, "searches": self.searches,
                "saved": self.saved, "last_id": self.last_id}


@dataclass
class Spend:
    """One model's, tenant's or agent's turns, money and tokens."""

    turns: int = 0
    priced: int = 0  # turns with a cost
    unpriced: int = 0  # turns with usage but no cost (their model has no price)
    spent: Decimal = ZERO  # sum of cost_usd over the priced turns
    without: Decimal = ZERO  # sum of cost_usd_without over the same turns
    tokens: Counter[str] = field(default_factory=Counter)  # TOKEN_TYPES, summed over turns with usage

    def as_json(self) -> dict[str, Any]:
        return {"turns": self.turns, "priced_turns": self.priced, "unpriced_turns": self.unpriced,
                "spent_usd": _usd_json(self.spent, self.priced), "without_usd": _usd_json(self.without, self.priced),
                "saved_usd": _usd_json(self.without - self.spent, self.priced),
                "saved_pct": _pct_json(self.without - self.spent, self.without),
                "tokens": {t: self.tokens.get(t, 0) for t in TOKEN_TYPES}}


Sums = dict[str, dict[str, Decimal]]  # a ledger bucket's: "tenant" / "agent" -> name -> USD saved


class Ledger:
    """USD saved per time bucket, per tenant and per agent, in bounded memory: buckets of an hour
    of local time, a day once there are more than ``most`` of them, then 2 days, 4 days..."""

    def __init__(self, most: int = MAX_BUCKETS) -> None:
        self.width = 3600
        self.most = most
        self.buckets: dict[int, Sums] = {}
        self.first: float | None = None  # local seconds (the wall clock read as UTC)
        self.last: float | None = None
        self._hour: int | None = None
        self._offset = 0.0

    def add(self, when: float, tenant: str, agent: str, saved: Decimal) -> None:
        local = when + self._utcoffset(when)
        self.first = local if self.first is None else min(self.first, local)
        self.last = local if self.last is None else max(self.last, local)
        bucket = self.buckets.get(key := math.floor(local / self.width))
        if bucket is None:
            bucket = self.buckets[key] = {"tenant": {}, "agent": {}}
            while len(self.buckets) > self.most:
                self._coarsen()
                bucket = self.buckets[math.floor(local / self.width)]
        for dim, name in (("tenant", tenant), ("agent", agent)):
            bucket[dim][name] = bucket[dim].get(name, ZERO) + saved

    def series(self) -> tuple[int, list[tuple[float, Sums]]]:
        """(bucket width in seconds, [(bucket start in local seconds, sums)]) in time order: hours
        over a span up to ``HOURLY_UP_TO``, days past it (or wider buckets, once coarsened)."""
        width, buckets = self.width, self.buckets
        if width < 86400 and self.first is not None and self.last - self.first > HOURLY_UP_TO:  # type: ignore[operator]
            width, buckets = 86400, _merged(buckets, self.width, 86400)
        return width, [(key * width, buckets[key]) for key in sorted(buckets)]

    def _coarsen(self) -> None:
        wider = 86400 if self.width < 86400 else self.width * 2
        self.buckets, self.width = _merged(self.buckets, self.width, wider), wider

    def _utcoffset(self, when: float) -> float:
        """The local zone's offset at ``when``, looked up once per hour of records."""
        hour = math.floor(when / 3600)
        if hour != self._hour:
            offset = datetime.fromtimestamp(when).astimezone().utcoffset()
            self._hour, self._offset = hour, offset.total_seconds() if offset is not None else 0.0
        return self._offset


def _merged(buckets: dict[int, Sums], width: int, wider: int) -> dict[int, Sums]:
    """``width``-second buckets as ``wider`` ones (a multiple), their sums added."""
    out: dict[int, Sums] = {}
    for key, sums in buckets.items():
        into = out.setdefault(key * width // wider, {"tenant": {}, "agent": {}})
        for dim, names in sums.items():
            for name, value in names.items():
                into[dim][name] = into[dim].get(name, ZERO) + value
    return out


@dataclass
class Filters:
    since: float | None = None
    until: float | None = None
    sessions: tuple[str, ...] = ()  # session hash prefixes
    apis: tuple[str, ...] = ()
    strategies: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()  # tenant hash prefixes
    agents: tuple[str, ...] = ()  # client families (claude-code, codex, ...)
    ids: tuple[str, ...] = ()  # turns' telemetry ids (prefixes)

    def keep(self, record: dict[str, Any]) -> bool:
        when = _number(record.get("time"))
        if (self.since is not None or self.until is not None) and when is None:
            return False
        if self.since is not None and when < self.since:  # type: ignore[operator]
            return False
        if self.until is not None and when >= self.until:  # type: ignore[operator]
            return False
        if self.sessions and not str(record.get("session", "")).startswith(self.sessions):
            return False
        if self.tenants and not str(record.get("tenant") or "").startswith(self.tenants):
            return False
        if self.agents and str(record.get("agent") or "") not in self.agents:
            return False
        if self.apis and record.get("provider") not in self.apis:
            return False
        if self.ids and not str(record.get("id") or "").startswith(self.ids):
            return False
        return not self.strategies or record.get("strategy") in self.strategies

    def describe(self) -> str:
        parts = []
        if self.since is not None:
            parts.append(f"from {_when(self.since)}")
        if self.until is not None:
            parts.append(f"until {_when(self.until)}")
        for name, values in (("session", self.sessions), ("tenant", self.tenants), ("agent", self.agents),
                             ("API", self.apis), ("strategy", self.strategies), ("id", self.ids)):
            if values:
                parts.append(f"{name} {', '.join(values)}")
        return "; ".join(parts) or "none"


class Aggregate:
    """Everything the page shows, added one record at a time."""

    def __init__(self, turns: int = TURNS) -> None:
        self.lines = 0
        self.malformed = 0
        self.filtered = 0
        self.records = 0
        self.first: float | None = None
        self.last: float | None = None
        self.timeline = Timeline()
        self.apis: dict[str, Group] = defaultdict(Group)
        self.strategies: dict[str, Group] = defaultdict(Group)
        self.search_ms: dict[str, Sample] = defaultdict(Sample)  # per backend
        self.searches_per_turn: dict[str, Counter[int]] = defaultdict(Counter)  # per strategy
        # Did searches land: turns whose model called a tool after searching; of them, those whose
        # first search returned it, and those that searched again and whose later search returned it.
        self.landing: Counter[str] = Counter()
        self.fallbacks: dict[str, Counter[str]] = defaultdict(Counter)  # reason -> strategy -> count
        self.api = selector.Summary(reinjected=Sample(), reinjected_ok=Sample(), deferred=Sample(),  # type: ignore[arg-type]
                                      api_ms=Sample(), search_ms=Sample(), loop_added_ms=Sample(),
                                      shadow_overlaps=Sample())
        # money, tokens and the context window (records written before the proxy priced turns have none)
        self.unmetered = 0  # records without the money fields (no "usage" nor "cost_usd" key)
        self.total = Spend()
        self.models: dict[str, Spend] = {}
        self.tenants: dict[str, Spend] = {}
        self.agents: dict[str, Spend] = {}
        self.unpriced_models: Counter[str] = Counter()
        self.no_usage = 0  # turns whose upstream answers reported no usage
        self.usage_unreported = 0  # upstream answers without usage, summed
        self.upstream: Counter[str] = Counter()  # answers by kind (client / hidden), and "errors" (not 2xx)
        self.passage: Counter[str] = Counter()  # live streams: untouched / changed / unhandled
        self.ledger = Ledger()
        self.context_share = Sample()
        self.context_max: float | None = None
        self.context_high = 0  # turns above CONTEXT_SHARE_HIGH
        # per turn: the modes, how turns ended, the latest turns one by one, the sessions
        self.modes: dict[str, ModeRow] = {mode: ModeRow() for mode in MODES}
        self.results: Counter[ResultKey] = Counter()  # how turns ended -> turns
        self._result_keys: dict[tuple[Any, ...], ResultKey] = {}  # a record's raw values -> their key (a cache)
        self.max_turns = turns
        # The latest records (at most twice ``max_turns``, cut back to it when full), and the time
        # a record must pass to be one of them.
        self._turns: list[tuple[float, int, dict[str, Any]]] = []
        self._floor = -math.inf
        self._seq = 0
        self.sessions: dict[str, SessionRow] = {}
        self.timing: dict[str, Sample] = {measure: Sample() for measure in TIMINGS}  # every turn's, as measured

    def line(self, text: str, filters: Filters) -> None:
        if (record := selector.parse_line(text, self)) is None:
            return
        if not filters.keep(record):
            self.filtered += 1
            return
        self.add(record)

    def add(self, record: dict[str, Any]) -> None:
        self.records += 1
        api, strategy = str(record.get("provider")), str(record.get("strategy"))
        before = int(_number(record.get("tool_tokens_before")) or 0)
        after = int(_number(record.get("tool_tokens_after")) or 0)
        wire = int(_number(record.get("tool_tokens_wire")) or after)  # before it was counted apart: the prompt's
        when = _time(record.get("time"))
        if when is not None:
            self.first = when if self.first is None else min(self.first, when)
            self.last = when if self.last is None else max(self.last, when)
            self.timeline.add(when, api, before, after, wire)
        searches = [s for s in record.get("searches") or [] if isinstance(s, dict)]
        looped = bool(searches) or (_number(record.get("loops")) or 0) > 0
        reason = record.get("fallback_reason")
        upstream, total = _number(record.get("upstream_ms")), _number(record.get("total_ms"))
        planning, answering = _number(record.get("processing_ms")), _number(record.get("loop_added_ms"))
        for group in (self.apis[api], self.strategies[strategy]):
            group.requests += 1
            group.before += before
            group.after += after
            group.wire += wire
            group.searches += len(searches)
            group.fallbacks += bool(reason)
            if planning is not None:
                group.processing_ms.append(planning)
            if upstream:
                group.upstream_ms.append(upstream)
            if looped and answering is not None:
                group.loop_added_ms.append(answering)
            if total:
                group.total_ms.append(total)
            for s in searches:
                if (ms := _number(s.get("latency_ms"))) is not None:
                    group.search_ms.append(ms)
        for s in searches:
            if (ms := _number(s.get("latency_ms"))) is not None:
                self.search_ms[str(s.get("backend"))].append(ms)
        if strategy in LOOP_STRATEGIES:
            self.searches_per_turn[strategy][min(len(searches), MAX_SEARCHES_SHOWN)] += 1
            self._landing(searches, record.get("called"))
        if reason:
            self.fallbacks[self._reason(str(reason))][strategy] += 1
        selector.add(self.api, record)
        self._money(record, when)
        self._timing(planning or 0.0, upstream or 0.0, answering or 0.0, total or 0.0)
        self._turn(record, when, before, after, wire, searches)

    def _timing(self, planning: float, upstream: float, answering: float, total: float) -> None:
        """Each time the turn measured (a turn written before a time was measured has it 0: not counted)."""
        timing = self.timing
        if planning > 0:
            timing["planning"].append(planning)
        if upstream > 0:
            timing["upstream"].append(upstream)
        if answering > 0:
            timing["answering"].append(answering)
        if planning + answering > 0:
            timing["proxy"].append(planning + answering)
        if total > 0:
            timing["total"].append(total)

    def _turn(self, record: dict[str, Any], when: float | None, before: int, after: int, wire: int,
              searches: list[dict[str, Any]]) -> None:
        """The turn by its mode, by how it ended, in its session, and (one of the latest) alone."""
        hits = 0
        for s in searches:
            if isinstance(matched := s.get("matched"), list):
                hits += len(matched)
        row = self.modes[mode_of(record)]
        row.turns += 1
        row.tools_sent += _count(record.get("total_tools"))
        row.loaded += _count(record.get("kept_tools"))
        row.deferred += _count(record.get("deferred_tools"))
        row.sent += before
        row.wire += wire
        row.prompt += after
        row.searches += len(searches)
        row.hits += hits
        self._result(record)
        session = record.get("session")
        if session and isinstance(session, str):
            kept = self.sessions.get(session)
            if kept is None:
                if len(self.sessions) >= MAX_SESSIONS:
                    session = OTHER
                kept = self.sessions.get(session) or self.sessions.setdefault(session, SessionRow())
            kept.turns += 1
            kept.searches += len(searches)
            kept.saved += before - after
            if when is not None:
                if kept.first is None or when < kept.first:
                    kept.first = when
                if kept.last is None or when >= kept.last:
                    kept.last, kept.last_id = when, _text(record.get("id"))
        if self.max_turns <= 0 or (at := when if when is not None else -math.inf) <= self._floor:
            return  # older than every turn listed: nothing to keep
        self._seq += 1
        self._turns.append((at, self._seq, record))  # made a row only when listed
        if len(self._turns) >= 2 * self.max_turns:  # the latest kept, the rest let go: amortized, in any order
            self._turns.sort(key=_by_time)
            del self._turns[:-self.max_turns]
            self._floor = self._turns[0][0]

    def _result(self, record: dict[str, Any]) -> None:
        """How the turn ended, counted by its telemetry values without their free text (at most
        ``MAX_REASONS`` kinds; the rest are "other"); said in words once, in ``results_json``."""
        outcome = record.get("outcome")
        raw = (bool(record.get("deferral") or record.get("deferred_tools")), outcome, record.get("fallback_reason"),
               None if outcome else last_status(record))
        try:
            key = self._result_keys.get(raw)
        except TypeError:  # a value no key can hold (a list where a text was expected)
            raw, key = None, None
        if key is None:
            passed = passed_of(record)
            outcome = _head(outcome)
            reason = _head(record.get("fallback_reason") if passed is None else passed)
            status = last_status(record) if not outcome else None  # an error the loop never read
            key = (passed is not None, outcome, reason, status if status is not None and status >= 400 else None)
            if raw is not None and len(self._result_keys) < MAX_RESULT_KEYS:
                self._result_keys[raw] = key
        if key not in self.results and len(self.results) >= MAX_REASONS:
            key = OTHER_RESULT
        self.results[key] += 1

    def turns(self) -> list[dict[str, Any]]:
        """The latest turns listed, the latest first."""
        latest = sorted(self._turns, key=_by_time, reverse=True)[: max(self.max_turns, 0)]
        return [turn_row(record) for _, _, record in latest]

    def _money(self, record: dict[str, Any], when: float | None) -> None:
        """Usage, cost, context share, upstream answers and stream passage of one turn."""
        if "usage" not in record and "cost_usd" not in record:
            self.unmetered += 1
            return
        usage = record.get("usage")
        tokens = Counter({t: int(_number(usage.get(t)) or 0) for t in TOKEN_TYPES}) if isinstance(usage, dict) else None
        cost = _decimal(record.get("cost_usd"))
        without = _decimal(record.get("cost_usd_without"))
        model = _named(self.models, _text(record.get("model")))
        tenant = _named(self.tenants, _text(record.get("tenant")))
        agent = _named(self.agents, _text(record.get("agent")))
        for row in (self.total, self.models[model], self.tenants[tenant], self.agents[agent]):
            row.turns += 1
            if tokens is not None:
                row.tokens.update(tokens)
            if cost is not None:
                row.priced += 1
                row.spent += cost
                row.without += cost if without is None else without  # no counterfactual: nothing saved
            elif tokens is not None:
                row.unpriced += 1
        if cost is None and tokens is not None:
            self.unpriced_models[model] += 1
        if tokens is None:
            self.no_usage += 1
        self.usage_unreported += int(_number(record.get("usage_unreported")) or 0)
        if cost is not None and when is not None:
            self.ledger.add(when, tenant, agent, (cost if without is None else without) - cost)
        if (share := _number(record.get("context_share"))) is not None:
            self.context_share.append(share)
            self.context_max = share if self.context_max is None else max(self.context_max, share)
            self.context_high += share > CONTEXT_SHARE_HIGH
        upstream = record.get("upstream")
        for answer in upstream if isinstance(upstream, list) else ():
            if isinstance(answer, list) and answer:
                if answer[0] in ("client", "hidden"):
                    self.upstream[answer[0]] += 1
                status = _number(answer[1]) if len(answer) > 1 else None
                self.upstream["errors"] += status is None or not 200 <= status < 300
        if isinstance(passage := record.get("passage"), str):
            self.passage[passage if passage in self.passage or len(self.passage) < MAX_REASONS else OTHER] += 1

    def _landing(self, searches: list[dict[str, Any]], called: Any) -> None:
        """Count whether a turn's searches found what its model then called (first or later)."""
        called = {c for c in called if isinstance(c, str)} if isinstance(called, list) else set()
        hits = [bool(called & {m for m in s.get("matched") or [] if isinstance(m, str)}) for s in searches]
        if not hits or not called:
            return
        self.landing["turns"] += 1
        self.landing["first"] += hits[0]
        if len(hits) > 1 and not hits[0]:
            self.landing["again"] += 1
            self.landing["again_landed"] += any(hits[1:])

    def _reason(self, reason: str) -> str:
        """Reasons carry details (``unsupported: body is not UTF-8 …``): counted by their head,
        and at most ``MAX_REASONS`` of them."""
        head = reason.split(":", 1)[0][:60]
        if head in self.fallbacks or len(self.fallbacks) < MAX_REASONS:
            return head
        return "other"


def turn_row(record: dict[str, Any]) -> dict[str, Any]:
    """One turn as the report lists it: the figures of mitmdump's line and mitmweb's comment
    (``summary.FlowSummary``, read from the same record), and its telemetry id to find it by."""
    said = FlowSummary.of(record)
    when = _time(record.get("time"))
    return {
        "id": said.id, "time": _when(when) if when is not None else None, "api": said.api,
        "model": _text(record.get("model")), "mode": mode_of(record), "strategy": said.strategy,
        "session": said.session, "result": said.result,
        "tools": {"sent": said.sent, "loaded": said.loaded, "deferred": said.deferred},
        "tokens": {"sent": said.tokens_sent, "wire": said.tokens_wire, "prompt": said.tokens_prompt,
                   "saved": said.saved},
        "searches": len(said.searches), "hits": said.hits, "found": len(said.found),
        "called": list(said.called[:MAX_CALLED]), "rounds": said.rounds, "search_rounds": said.loops,
        "ms": {"planning": said.processing_ms, "upstream": said.upstream_ms, "answering": said.added_ms,
               "proxy": round(said.proxy_ms, 3), "total": said.total_ms},
    }


def _by_time(entry: tuple[float, int, dict[str, Any]]) -> tuple[float, int]:
    return entry[0], entry[1]


def _count(value: Any) -> int:
    """A count as recorded; anything else is 0."""
    return value if type(value) is int else int(_number(value) or 0)


def _head(value: Any) -> str:
    """A telemetry value without its free text (``unsupported: body is not UTF-8 …``)."""
    return value.split(":", 1)[0][:60] if isinstance(value, str) else ""


def _named(rows: dict[str, Spend], name: str) -> str:
    """The name ``name`` is counted under, its row made: itself, or "other" once ``MAX_NAMES`` are kept."""
    if name not in rows and len(rows) >= MAX_NAMES:
        name = OTHER
    rows.setdefault(name, Spend())
    return name


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _decimal(value: Any) -> Decimal | None:
    """A finite number as the decimal it was written as (repr: the shortest that reads back)."""
    return None if _number(value) is None else Decimal(repr(value))


def read(paths: Sequence[Path], filters: Filters, progress: bool, turns: int = TURNS) -> Aggregate:
    """Stream every line of every file through one ``Aggregate`` (listing the latest ``turns``
    turns), with a progress bar over bytes (when tqdm is installed)."""
    try:
        from tqdm import tqdm
    except ImportError:  # --json needs no extra
        tqdm, progress = None, False

    agg = Aggregate(turns)
    total = sum(p.stat().st_size for p in paths)
    with (tqdm(total=total, unit="B", unit_scale=True, desc="records", disable=not progress, file=sys.stderr)
          if tqdm is not None else _NoBar()) as bar:
        for path in paths:
            pending = 0
            with path.open("rb") as f:
                for raw in f:
                    agg.line(raw.decode("utf-8", "replace"), filters)
                    pending += len(raw)
                    if pending >= 1 << 20:
                        bar.update(pending)
                        pending = 0
            bar.update(pending)
    return agg


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int) -> None:
        return None


# --- the figures ------------------------------------------------------------------------


def summary(agg: Aggregate, sources: Sequence[Path], filters: Filters, usd_per_mtok: float) -> dict[str, Any]:
    """The page's figures as one JSON-ready object (``--json``; the keys are in docs/watching.md).
    Money is null where no turn was priced, a percentage null where its whole is zero."""
    t = agg.total
    prompt = t.tokens["input"] + t.tokens["cache_read"] + t.tokens["cache_write"]
    shares = percentiles(agg.context_share)
    before = sum(g.before for g in agg.apis.values())
    after = sum(g.after for g in agg.apis.values())
    width, buckets = agg.ledger.series()
    return {
        "sources": [str(p) for p in sources],
        "filters": filters.describe(),
        "lines": agg.lines,
        "malformed": agg.malformed,
        "filtered": agg.filtered,
        "records": agg.records,
        "first": _when(agg.first) if agg.first is not None else None,
        "last": _when(agg.last) if agg.last is not None else None,
        "unmetered_records": agg.unmetered,
        "money": {
            "spent_usd": _usd_json(t.spent, t.priced),
            "without_usd": _usd_json(t.without, t.priced),
            "saved_usd": _usd_json(t.without - t.spent, t.priced),
            "saved_pct": _pct_json(t.without - t.spent, t.without),
            "priced_turns": t.priced,
            "unpriced_turns": t.unpriced,
            "unpriced_models": dict(sorted(agg.unpriced_models.items())),
        },
        "tokens": {
            **{k: t.tokens.get(k, 0) for k in TOKEN_TYPES},
            "cache_read_pct": _pct_json(t.tokens["cache_read"], prompt),
            "cache_write_pct": _pct_json(t.tokens["cache_write"], prompt),
            "turns_with_usage": t.turns - agg.no_usage,
            "turns_without_usage": agg.no_usage,
            "answers_without_usage": agg.usage_unreported,
        },
        "context_share": {
            "turns": agg.context_share.seen,
            "median": shares.get(50),
            "p95": shares.get(95),
            "max": agg.context_max,
            "above": agg.context_high,
            "threshold": CONTEXT_SHARE_HIGH,
        },
        "by_model": {name: row.as_json() for name, row in sorted(agg.models.items())},
        "by_tenant": {name: row.as_json() for name, row in sorted(agg.tenants.items())},
        "by_agent": {name: row.as_json() for name, row in sorted(agg.agents.items())},
        "saving_over_time": {
            "bucket": _bucket_name(width),
            "bucket_seconds": width,
            "all": _cumulative([(start, sum(sums["tenant"].values(), ZERO)) for start, sums in buckets], width),
            **{f"by_{dim}": {name: _cumulative([(start, sums[dim][name]) for start, sums in buckets
                                                 if name in sums[dim]], width)
                             for name in sorted({n for _, sums in buckets for n in sums[dim]})}
               for dim in ("tenant", "agent")},
        },
        "upstream": {k: agg.upstream.get(k, 0) for k in ("client", "hidden", "errors")},
        "passage": dict(sorted(agg.passage.items())),
        "by_mode": {mode: row.as_json() for mode, row in agg.modes.items() if row.turns},
        "results": results_json(agg.results),
        "fallbacks": {reason: {"words": "other" if reason == OTHER else reason_words(reason),
                               "turns": sum(counts.values())}
                      for reason, counts in sorted(agg.fallbacks.items(),
                                                   key=lambda kv: (-sum(kv[1].values()), kv[0]))},
        "timing": {measure: {"turns": sample.seen, **{f"p{p}": round(v, 3) for p, v in percentiles(sample).items()}}
                   for measure, sample in agg.timing.items()},
        "turns": agg.turns(),
        "sessions": [row.as_json(name) for name, row in sorted(
            agg.sessions.items(), key=lambda kv: (kv[1].last or 0.0, kv[0]), reverse=True)[:SESSIONS_SHOWN]],
        "tool_tokens": {
            "before": before,
            "after": after,
            "wire": sum(g.wire for g in agg.apis.values()),
            "saved": before - after,
            "saved_pct": _pct_json(before - after, before),
            "estimated_usd": round((before - after) * usd_per_mtok / 1e6, 6),
            "usd_per_mtok": usd_per_mtok,
        },
    }


def results_json(results: Counter[ResultKey]) -> list[dict[str, Any]]:
    """How turns ended, the most frequent first: the words (``summary.result_words``, with no
    count of searches) and the telemetry values they stand for."""
    out = []
    for (passed, outcome, reason, status), turns in sorted(results.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        words = OTHER if (passed, outcome, reason, status) == OTHER_RESULT else result_words(
            reason if passed else None, outcome, None if passed else reason, status, None)
        out.append({"result": words, "passed_through": passed, "outcome": outcome or None,
                    "fallback_reason": reason or None, "status": status, "turns": turns})
    return out


def _cumulative(points: Sequence[tuple[float, Decimal]], width: int) -> list[dict[str, Any]]:
    """Per bucket with priced turns: its start (local time), the USD saved in it and up to its end."""
    out, running = [], ZERO
    for start, saved in points:
        running += saved
        out.append({"start": _bucket_label(start, width), "saved_usd": float(saved), "cumulative_usd": float(running)})
    return out


def _bucket_name(width: int) -> str:
    return "hour" if width == 3600 else "day" if width == 86400 else f"{width // 86400} days"


def _bucket_label(local: float, width: int) -> str:
    start = _wall(local)
    return start.strftime("%Y-%m-%dT%H:00") if width < 86400 else start.strftime("%Y-%m-%d")


def _wall(local: float) -> datetime:
    """Local seconds (the ledger's: the wall clock read as UTC) as a naive local datetime."""
    return datetime(1970, 1, 1) + timedelta(seconds=local)


def _usd_json(value: Decimal, priced: int) -> float | None:
    return float(value) if priced else None


def _pct_json(part: float | Decimal, whole: float | Decimal) -> float | None:
    return round(float(100 * part / whole), 2) if whole else None


# --- plots ------------------------------------------------------------------------------


PLOTS = {  # file name: what the page calls it
    "saving_by_tenant.png": "Saving over time, per tenant",
    "saving_by_agent.png": "Saving over time, per agent",
    "tokens_by_type.png": "Tokens by type",
    "context_share.png": "Tool definitions' share of the context window",
    "tokens_over_time.png": "Tool tokens per request over time",
    "cumulative_saved.png": "Cumulative tool tokens saved",
    "search_latency.png": "Search latency distribution",
    "searches_per_turn.png": "Searches per turn",
    "fallbacks.png": "Fallbacks by reason",
    "per_api_strategy.png": "Tool tokens per API and per strategy",
}
MAX_LINES = 8  # series drawn in a saving plot; the rest are summed in one line
MAX_BARS = 12  # models drawn in the tokens-by-type plot


def plots(agg: Aggregate, usd_per_mtok: float) -> dict[str, bytes]:
    """PNG bytes by file name (``PLOTS``): only the plots with something to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out: dict[str, bytes] = {}

    def save(name: str, fig: Any) -> None:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        out[name] = buf.getvalue()

    width, buckets = agg.ledger.series()
    for dim in ("tenant", "agent"):
        if buckets:
            save(f"saving_by_{dim}.png", _saving_plot(plt, buckets, width, dim))

    tokens = {name: row.tokens for name, row in agg.models.items() if sum(row.tokens.values())}
    if tokens:
        names = sorted(tokens, key=lambda n: sum(tokens[n].values()), reverse=True)
        shown, rest = names[:MAX_BARS], names[MAX_BARS:]
        rows = [(_label(n), tokens[n]) for n in shown]
        if rest:
            rows.append((f"{len(rest)} more", sum((tokens[n] for n in rest), Counter())))
        rows.reverse()  # the largest on top
        fig, ax = plt.subplots(figsize=(9, max(2.2, 0.4 * len(rows) + 1.4)))
        left = [0] * len(rows)
        for kind, color in zip(TOKEN_TYPES, ("#2980b9", "#27ae60", "#f39c12", "#8e44ad")):
            counts = [c.get(kind, 0) for _, c in rows]
            ax.barh([n for n, _ in rows], counts, left=left, label=kind.replace("_", " "), color=color)
            left = [a + b for a, b in zip(left, counts)]
        ax.set_title("Tokens by type, per model (the providers' usage)")
        ax.set_xlabel("tokens")
        ax.legend(fontsize="small", ncol=len(TOKEN_TYPES), loc="upper center", bbox_to_anchor=(0.5, -0.3))
        save("tokens_by_type.png", fig)

    if agg.context_share.seen:
        values = [100 * v for v in agg.context_share]
        top = max(30.0, max(values) * 1.05)
        fig, ax = plt.subplots(figsize=(9, 3.2))
        ax.hist(values, bins=[top * i / 40 for i in range(41)], color="#2980b9")
        ax.axvline(100 * CONTEXT_SHARE_HIGH, color="#c0392b", linestyle="--",
                   label=f"{100 * CONTEXT_SHARE_HIGH:g}%: {agg.context_high:,} turn(s) above")
        ax.set_xlim(0, top)
        ax.set_title("Tool definitions' share of the model's context window"
                     + (" (sampled)" if agg.context_share.seen > len(agg.context_share) else ""))
        ax.set_xlabel("% of the context window")
        ax.set_ylabel("turns")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize="small")
        save("context_share.png", fig)

    series = agg.timeline.ordered()
    times = [datetime.fromtimestamp(t) for t, _ in series]
    marker = "o" if len(series) < 30 else None
    if any(b.before or b.wire for _, b in series):  # records with no tool tokens: nothing to draw
        fig, ax = plt.subplots(figsize=(9, 3.6))
        ax.plot(times, [b.before / b.requests for _, b in series], label="sent (by the client)", color="#c0392b",
                marker=marker)
        ax.plot(times, [b.wire / b.requests for _, b in series], label="on the wire", color="#2980b9",
                marker=marker, linestyle="--")
        ax.plot(times, [b.after / b.requests for _, b in series], label="in the prompt", color="#27ae60", marker=marker)
        ax.set_ylim(bottom=0)  # counts: a few records' axis would otherwise start at the smallest
        _time_axis(ax, times[0], times[-1])
        ax.legend()
        ax.set_title(f"Tool tokens per request (mean per {_duration(agg.timeline.width)})")
        ax.set_ylabel("estimated tokens")
        save("tokens_over_time.png", fig)

        # Each line rises from 0 at the first record, in steps (a lone record is a step, not a dot
        # on an axis of its own), and the tokens axis starts at 0 unless a saving was negative.
        fig, ax = plt.subplots(figsize=(9, 3.6))
        steps = [times[0], *times]
        lowest = 0
        for api in sorted({api for _, b in series for api in b.saved}):
            running, ys = 0, [0]
            for _, b in series:
                running += b.saved.get(api, 0)
                ys.append(running)
            lowest = min(lowest, *ys)
            ax.plot(steps, ys, label=api, marker=marker, drawstyle="steps-post")
        total, ys = 0, [0]
        for _, b in series:
            total += b.before - b.after
            ys.append(total)
        lowest = min(lowest, *ys)
        ax.plot(steps, ys, label="all APIs", color="black", linewidth=2, marker=marker, drawstyle="steps-post",
                alpha=0.8)
        if lowest >= 0:
            ax.set_ylim(bottom=0, top=max(1, max(ys)) * 1.08)
        _time_axis(ax, times[0], times[-1])
        cost = ax.secondary_yaxis("right", functions=(lambda t: t * usd_per_mtok / 1e6,
                                                      lambda d: d * 1e6 / usd_per_mtok))
        cost.set_ylabel(f"USD at ${usd_per_mtok:g}/M input tokens")
        ax.legend(fontsize="small")
        ax.set_title("Cumulative tool tokens saved (estimated)")
        ax.set_ylabel("tokens")
        save("cumulative_saved.png", fig)

    values = [v for s in agg.search_ms.values() for v in s if v > 0]
    if values:
        fig, ax = plt.subplots(figsize=(9, 3.6))
        lo, hi = max(min(values), 1e-3), max(values)
        bins = [lo * (hi / lo) ** (i / 40) for i in range(41)] if hi > lo else [lo * 0.9, lo * 1.1]
        for backend, sample in sorted(agg.search_ms.items()):
            ax.hist([v for v in sample if v > 0], bins=bins, histtype="step", linewidth=1.5,
                    label=f"{backend} (n={sample.seen:,}{', sampled' if sample.seen > len(sample) else ''})")
        ax.set_xscale("log")
        ax.legend(fontsize="small")
        ax.set_title("Search latency distribution")
        ax.set_xlabel("ms (log scale)")
        ax.set_ylabel("searches")
        save("search_latency.png", fig)

    strategies = sorted(agg.searches_per_turn)
    if strategies:
        fig, ax = plt.subplots(figsize=(9, 3.6))
        width_ = 0.8 / len(strategies)
        xs = range(MAX_SEARCHES_SHOWN + 1)
        for i, strategy in enumerate(strategies):
            counts = agg.searches_per_turn[strategy]
            total = sum(counts.values())
            ax.bar([x + i * width_ for x in xs], [100 * counts.get(x, 0) / total for x in xs], width_, label=strategy)
        ax.set_xticks([x + width_ * (len(strategies) - 1) / 2 for x in xs],
                      [str(x) for x in range(MAX_SEARCHES_SHOWN)] + [f"{MAX_SEARCHES_SHOWN}+"])
        ax.legend()
        ax.set_title("Searches per turn")
        ax.set_xlabel("searches in one client request")
        ax.set_ylabel("% of requests")
        save("searches_per_turn.png", fig)

    if sum(sum(c.values()) for c in agg.fallbacks.values()):
        fig, ax = plt.subplots(figsize=(9, max(2.5, 0.35 * len(agg.fallbacks) + 1.2)))
        reasons = sorted(agg.fallbacks, key=lambda r: sum(agg.fallbacks[r].values()))
        labels = [_short_label(OTHER if r == OTHER else reason_words(r)) for r in reasons]
        left = [0] * len(reasons)
        for strategy in sorted({s for c in agg.fallbacks.values() for s in c}):
            counts = [agg.fallbacks[r].get(strategy, 0) for r in reasons]
            ax.barh(labels, counts, left=left, label=strategy)
            left = [a + b for a, b in zip(left, counts)]
        ax.legend(fontsize="small")
        ax.set_title("Fallbacks by reason (requests passed unchanged or resent), per strategy")
        ax.set_xlabel("requests")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        save("fallbacks.png", fig)

    if any(g.before or g.wire for g in agg.apis.values()):
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
        for ax, (title, groups) in zip(axes, (("per API", agg.apis), ("per strategy", agg.strategies))):
            names = sorted(groups)
            xs = range(len(names))
            ax.bar([x - 0.27 for x in xs], [groups[n].before for n in names], 0.27, label="sent", color="#c0392b")
            ax.bar(list(xs), [groups[n].wire for n in names], 0.27, label="on the wire", color="#2980b9")
            ax.bar([x + 0.27 for x in xs], [groups[n].after for n in names], 0.27, label="in the prompt",
                   color="#27ae60")
            ax.set_xticks(list(xs), names, rotation=20)
            ax.set_title(f"Tool tokens {title}")
            ax.legend(fontsize="small")
        save("per_api_strategy.png", fig)
    return out


def _saving_plot(plt: Any, buckets: list[tuple[float, Sums]], width: int, dim: str) -> Any:
    """USD saved up to each moment, one line per name (the largest ``MAX_LINES``, the rest summed)
    and one for all: flat between buckets, rising across each bucket's span."""
    totals: Counter[str] = Counter()
    for _, sums in buckets:
        for name, saved in sums[dim].items():
            totals[name] += saved  # type: ignore[assignment]
    names = sorted(totals, key=lambda n: (-abs(totals[n]), n))
    shown, rest = names[:MAX_LINES], set(names[MAX_LINES:])
    lines: dict[str, list[tuple[float, Decimal]]] = {
        _label(n): [(start, sums[dim][n]) for start, sums in buckets if n in sums[dim]] for n in shown}
    if rest:
        lines[f"{len(rest)} other {dim}s"] = [(start, sum((v for n, v in sums[dim].items() if n in rest), ZERO))
                                             for start, sums in buckets if rest & set(sums[dim])]
    end = buckets[-1][0] + width
    fig, ax = plt.subplots(figsize=(9, 3.6))
    if len(names) > 1:  # under the others, which it meets where one name saved everything
        ax.plot(*_steps([(start, sum(sums[dim].values(), ZERO)) for start, sums in buckets], width, end), label="all",
                color="black", linewidth=4, alpha=0.3)
    for label, points in lines.items():
        ax.plot(*_steps(points, width, end), label=label, marker="o" if len(points) < 30 else None, markersize=3)
    _time_axis(ax, _wall(buckets[0][0]), _wall(end))
    ax.axhline(0, color="#999", linewidth=0.8)
    ax.set_title(f"Cumulative USD saved per {dim} (per {_bucket_name(width)}, local time)")
    ax.set_ylabel("USD saved")
    ax.legend(fontsize="small")
    return fig


def _steps(points: Sequence[tuple[float, Decimal]], width: int, end: float) -> tuple[list[datetime], list[float]]:
    """The running sum as a line: each bucket from its start (the sum so far) to its end (plus its
    own), flat between buckets and on to ``end``."""
    xs, ys, running = [], [], ZERO
    for start, saved in points:
        xs.append(_wall(start))
        ys.append(float(running))
        running += saved
        xs.append(_wall(start + width))
        ys.append(float(running))
    if points and points[-1][0] + width < end:
        xs.append(_wall(end))
        ys.append(float(running))
    return xs, ys


def _time_axis(ax: Any, lo: datetime, hi: datetime) -> None:
    """A date axis over the data's own range (a minute at least, centred on a lone point),
    never matplotlib's default years around one."""
    import matplotlib.dates as mdates

    if hi - lo < timedelta(minutes=1):
        middle = lo + (hi - lo) / 2
        lo, hi = middle - timedelta(seconds=30), middle + timedelta(seconds=30)
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.set_xlim(lo, hi)


def _label(name: str) -> str:
    return name or "unknown"


def _short_label(text: str, most: int = 48) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


# --- the page -----------------------------------------------------------------------------


def page(agg: Aggregate, images: dict[str, bytes], sources: Sequence[Path], filters: Filters,
         usd_per_mtok: float) -> str:
    figures = summary(agg, sources, filters, usd_per_mtok)
    tool = figures["tool_tokens"]
    span = f"{_when(agg.first)} – {_when(agg.last)}" if agg.first is not None else "no timestamps"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>tool discovery report</title>",
        ("<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
        "table{border-collapse:collapse;margin:.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%;display:block;margin:1em 0}"
        ".note{color:#555}.money td{font-size:1.3em}table.turns td,table.turns th{font-size:.85em;text-align:left}"
        "table.words td,table.words th{text-align:left}</style></head><body>"),
        "<h1>Tool discovery report</h1>",
        (f"<p>{html.escape(', '.join(str(p) for p in sources))}: {agg.lines:,} line(s), {agg.malformed:,} malformed, "
        f"{agg.filtered:,} left out by the filters ({html.escape(filters.describe())}); "
        f"<b>{agg.records:,} record(s)</b>, {html.escape(span)}. The words are explained at the end "
        "(<a href='#words'>Words</a>).</p>"),
        *_money_section(figures, images),
        "<h2>Tool tokens (estimated)</h2>",
        (f"<p>Estimated tool tokens: {tool['before']:,} sent by clients, {tool['wire']:,} on the wire, "
        f"{tool['after']:,} in the prompt, <b>{tool['saved']:,} saved</b> ({_pct(tool['saved'], tool['before'])}), "
        f"about <b>${tool['estimated_usd']:,.2f}</b> at ${usd_per_mtok:g} per million input tokens.</p>"),
        ("<p class='note'>Tokens here are estimated (4 characters a token) over tool definitions only, and this "
        "cost ignores prompt caching: a changed <code>tools[]</code> also re-bills the cached prompt behind it. "
        "The money above is the providers' own usage, priced, caching included.</p>"),
        "<h3>By mode</h3>",
        _mode_table(figures["by_mode"]),
        "<h2>Results</h2>",
        ("<p>How turns ended (the words of mitmdump's line and mitmweb's comment), and the telemetry values behind "
         "them.</p>"),
        _table(["result", "turns", "outcome", "fallback_reason", "upstream status"],
               [[r["result"], f"{r['turns']:,}", r["outcome"] or "-", r["fallback_reason"] or "-",
                 r["status"] or "-"] for r in figures["results"]], css="words"),
        "<h3>Fallbacks by reason</h3>",
        _table(["fallback", "turns", "fallback_reason"],
               [[f["words"], f"{f['turns']:,}", reason] for reason, f in figures["fallbacks"].items()], css="words"),
    ]
    for name in ("fallbacks.png", "tokens_over_time.png", "cumulative_saved.png", "search_latency.png",
                 "searches_per_turn.png", "per_api_strategy.png"):
        parts.append(_image(name, images))
    parts.append("<h2>Time (ms)</h2>")
    parts.append(_table(["measure", "turns", *(f"p{p}" for p in PERCENTILES)],
                        [[m, f"{t['turns']:,}", *(f"{t[f'p{p}']:.1f}" if f"p{p}" in t else "-" for p in PERCENTILES)]
                         for m, t in figures["timing"].items() if t["turns"]]))
    for title, groups in (("Per API", agg.apis), ("Per strategy", agg.strategies)):
        parts.append(f"<h2>{title}</h2>")
        parts.append(_group_table(groups))
        parts.append(f"<h3>{title}: latency (ms)</h3>")
        parts.append(_latency_table(groups))
    if turns := agg.landing["turns"]:
        again = agg.landing["again"]
        parts.append("<h2>Did searches land</h2>")
        parts.append(_table(["turns that searched, then called a tool", "first search returned it",
                             "searched again after a miss", "a later search returned it"],
                            [[f"{turns:,}", _pct(agg.landing["first"], turns), f"{again:,}",
                              _pct(agg.landing["again_landed"], again) if again else "-"]]))
    parts.append("<h2>Search latency per backend (ms)</h2>")
    rows = [[b, f"{s.seen:,}", *_cells(s)] for b, s in sorted(agg.search_ms.items())]
    parts.append(_table(["backend", "searches", *(f"p{p}" for p in PERCENTILES)], rows))
    parts += _turns_section(figures, agg.max_turns)
    if agg.api.records:
        loaded = selector.Loaded(lines=agg.lines, malformed=agg.malformed, before_since=agg.filtered)
        parts.append(_markdown(selector.render(agg.api, loaded, "the records above")))
    parts += _words_section()
    parts.append("</body></html>")
    return "\n".join(parts)


def _mode_table(modes: Mapping[str, Mapping[str, Any]]) -> str:
    """The turns of each mode: tools sent, loaded, deferred; tool tokens sent, on the wire, in the prompt."""
    return _table(["mode", "turns", "tools sent", "loaded", "deferred", "tokens sent", "on the wire", "in the prompt",
                   "saved", "saved %", "searches", "hits"],
                  [[mode, f"{m['turns']:,}", f"{m['tools']['sent']:,}", f"{m['tools']['loaded']:,}",
                    f"{m['tools']['deferred']:,}", f"{m['tokens']['sent']:,}", f"{m['tokens']['wire']:,}",
                    f"{m['tokens']['prompt']:,}", f"{m['tokens']['saved']:,}", _pct_text(m["tokens"]["saved_pct"]),
                    f"{m['searches']:,}", f"{m['hits']:,}"] for mode, m in modes.items()])


def _turns_section(figures: Mapping[str, Any], most: int) -> list[str]:
    """The latest turns one by one, and the latest sessions: each with the id that finds it in
    mitmweb (its search box: ``~comment ID``) and in the telemetry file (``"id"``)."""
    turns, sessions = figures["turns"], figures["sessions"]
    out = ["<h2>Turns</h2>",
           (f"<p>The latest {plural(len(turns), 'turn')} (at most {most:,}: <code>--turns</code>), the latest first. "
            "Find one in mitmweb by typing <code>~comment ID</code> in its search box, in mitmdump's output and the "
            "telemetry file by its id.</p>")]
    out.append(_table(
        ["time", "id", "API, model", "mode", "result", "searches → hits", "called", "upstream rounds",
         "tools sent → loaded", "tokens sent / wire / prompt", "saved", "ms total / upstream / proxy"],
        [[(t["time"] or "-").replace("T", " "), t["id"] or "-", f"{t['api']}, {t['model'] or '-'}", t["mode"],
          t["result"], f"{t['searches']} → {t['hits']}", ", ".join(t["called"]) or "-", str(t["rounds"]),
          f"{t['tools']['sent']:,} → {t['tools']['loaded']:,}",
          f"{t['tokens']['sent']:,} / {t['tokens']['wire']:,} / {t['tokens']['prompt']:,}", f"{t['tokens']['saved']:,}",
          f"{t['ms']['total']:.1f} / {t['ms']['upstream']:.1f} / {t['ms']['proxy']:.1f}"] for t in turns], css="turns"))
    out.append("<h2>Sessions</h2>")
    out.append(f"<p>The latest {plural(len(sessions), 'session')} (at most {SESSIONS_SHOWN}); in mitmweb, "
               "<code>~comment SESSION</code> lists a session's turns.</p>")
    out.append(_table(["session", "turns", "first", "last", "searches", "tokens saved", "last turn's id"],
                      [[r["session"], f"{r['turns']:,}", r["first"] or "-", r["last"] or "-", f"{r['searches']:,}",
                        f"{r['saved']:,}", r["last_id"] or "-"] for r in sessions], css="turns"))
    return out


def _words_section() -> list[str]:
    """The glossary, and every result in words beside its telemetry value: docs/watching.md's
    ("Words"), from the same source (``summary``)."""
    out = ["<h2 id='words'>Words</h2>",
           "<p>The same words as mitmdump's line, mitmweb's comment and view, and docs/watching.md.</p>",
           _table(["word", "what it means"], [[term, _plain(text)] for term, text in GLOSSARY], css="words"),
           "<h3>Results: telemetry <code>outcome</code></h3>",
           _table(["outcome", "in words"], [list(row) for row in outcome_table()], css="words"),
           "<h3>Fallbacks and why a request passed through: telemetry <code>fallback_reason</code></h3>",
           _table(["fallback_reason", "in words"], [list(row) for row in reason_table()], css="words")]
    return out


def _plain(text: str) -> str:
    """A glossary text without its Markdown code marks (the page escapes what it prints)."""
    return text.replace("`", "")


def _money_section(figures: Mapping[str, Any], images: dict[str, bytes]) -> list[str]:
    """The page's lead: spent, without the proxy, saved; caching; unpriced turns; then the saving
    over time, tokens by type and the context share."""
    money, tokens, share = figures["money"], figures["tokens"], figures["context_share"]
    out = ["<h2>Money</h2>"]
    if money["priced_turns"]:
        lead = [money[k] for k in ("spent_usd", "without_usd", "saved_usd")]
        fine = any(0 < abs(v) < 1 for v in lead)
        spent, without, saved = (_usd(v, fine) for v in lead)
        out.append(_table(["spent", "without the proxy", "saved", "saved %", "priced turns"],
                          [[spent, without, saved, _pct_text(money["saved_pct"]), f"{money['priced_turns']:,}"]],
                          css="money"))
        out.append(f"<p>Spent <b>{spent}</b>; without the proxy <b>{without}</b>; saved <b>{saved}</b> "
                   f"({_pct_text(money['saved_pct'])}). A turn's cost is its upstream answers' usage, hidden rounds "
                   "included, priced; without the proxy: the same turn priced as if the client's own request had "
                   "gone out.</p>")
    else:
        out.append("<p>Spent: none (no turn carries a cost).</p>")
    out.append(f"<p>Caching included: {tokens['cache_read']:,} cache-read tokens "
               f"({_pct_text(tokens['cache_read_pct'])} of input tokens), {tokens['cache_write']:,} cache-write tokens "
               f"({_pct_text(tokens['cache_write_pct'])}); {tokens['input']:,} uncached input, "
               f"{tokens['output']:,} output tokens.</p>")
    unpriced = money["unpriced_models"]
    if money["unpriced_turns"]:
        out.append(f"<p>{money['unpriced_turns']:,} turn{'s' if money['unpriced_turns'] != 1 else ''} of models with "
                   f"no price: {html.escape(', '.join(_label(m) for m in unpriced))}.</p>")
    else:
        out.append("<p>0 turns of models with no price.</p>")
    notes = []
    if tokens["turns_without_usage"]:
        notes.append(f"{tokens['turns_without_usage']:,} turn(s) reported no usage")
    if tokens["answers_without_usage"]:
        notes.append(f"{tokens['answers_without_usage']:,} upstream answer(s) carried no usage")
    if figures["unmetered_records"]:
        notes.append(f"{figures['unmetered_records']:,} record(s) carry no money fields (written before the proxy "
                     "priced turns): counted everywhere but here")
    if notes:
        out.append(f"<p class='note'>{html.escape('; '.join(notes))}.</p>")
    over_time = figures["saving_over_time"]
    for dim in ("tenant", "agent"):
        out.append(f"<h3>Saving over time, per {dim}</h3>")
        out.append(_image(f"saving_by_{dim}.png", images))
        rows = figures[f"by_{dim}"]
        out.append(_spend_table(dim, rows))
    if over_time["all"]:
        out.append(f"<p class='note'>Cumulative, per {html.escape(over_time['bucket'])} of local time; "
                   "tenants are hash prefixes of their credentials, as recorded.</p>")
    out.append("<h2>Tokens by type</h2>")
    out.append(_image("tokens_by_type.png", images))
    out.append(_spend_table("model", figures["by_model"]))
    out.append("<h2>Tool definitions' share of the context window</h2>")
    if share["turns"]:
        out.append(_table(["turns", "median", "p95", "max", f"turns above {share['threshold']:g}"],
                          [[f"{share['turns']:,}", _share(share["median"]), _share(share["p95"]), _share(share["max"]),
                            f"{share['above']:,}"]]))
    out.append(_image("context_share.png", images))
    upstream, passage = figures["upstream"], figures["passage"]
    if any(upstream.values()) or passage:
        streams = ", ".join(f"{n} {k}" for k, n in passage.items())
        out.append(f"<p class='note'>Upstream answers: {upstream['client']:,} to clients, {upstream['hidden']:,} "
                   f"hidden rounds, {upstream['errors']:,} not 2xx"
                   + (f"; live streams: {html.escape(streams)}" if passage else "") + ".</p>")
    return out


def _spend_table(dim: str, rows: Mapping[str, Mapping[str, Any]]) -> str:
    head = [dim, "turns", "priced", "unpriced", "spent", "without", "saved", "saved %", *TOKEN_TYPES]
    return _table([h.replace("_", " ") for h in head], [
        [_label(name), f"{r['turns']:,}", f"{r['priced_turns']:,}", f"{r['unpriced_turns']:,}", _usd(r["spent_usd"]),
         _usd(r["without_usd"]), _usd(r["saved_usd"]), _pct_text(r["saved_pct"]),
         *(f"{r['tokens'][t]:,}" for t in TOKEN_TYPES)]
        for name, r in sorted(rows.items(), key=lambda kv: (-(kv[1]["saved_usd"] or 0), kv[0]))
        if r["priced_turns"] or r["unpriced_turns"] or any(r["tokens"].values())])


def _image(name: str, images: dict[str, bytes]) -> str:
    if name not in images:
        return f"<p class='plot-none'>{html.escape(PLOTS[name])}: none</p>"
    return f"<img alt='{html.escape(name)}' src='data:image/png;base64,{base64.b64encode(images[name]).decode()}'>"


def _usd(value: float | None, fine: bool | None = None) -> str:
    """Dollars to the cent from $1, to a hundredth of a cent below it (``fine``: that precision
    whatever the value, to write figures side by side alike); "-" for none."""
    if value is None:
        return "-"
    sign = "-" if value < 0 else ""
    fine = abs(value) < 1 if fine is None else fine
    return f"{sign}${abs(value):,.4f}" if fine else f"{sign}${abs(value):,.2f}"


def _pct_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _group_table(groups: dict[str, Group]) -> str:
    head = ["", "requests", "tool tokens sent", "on the wire", "in the prompt", "saved", "searches", "fallbacks"]
    rows = [[n, f"{g.requests:,}", f"{g.before:,}", f"{g.wire:,}", f"{g.after:,}", _pct(g.before - g.after, g.before),
             f"{g.searches:,}", f"{g.fallbacks:,}"] for n, g in sorted(groups.items())]
    return _table(head, rows)


def _latency_table(groups: dict[str, Group]) -> str:
    """Per group: planning, upstream, answering (over the turns that searched), total, one search."""
    head = ["", "measure", "n", *(f"p{p}" for p in PERCENTILES)]
    rows = []
    for name, g in sorted(groups.items()):
        for measure, sample in (("planning", g.processing_ms), ("upstream", g.upstream_ms),
                                ("answering (turns that searched)", g.loop_added_ms), ("total", g.total_ms),
                                ("search", g.search_ms)):
            if sample.seen:
                rows.append([name, measure, f"{sample.seen:,}", *_cells(sample)])
    return _table(head, rows)


def _cells(sample: Sample) -> list[str]:
    pct = percentiles(sample)
    return [f"{pct[p]:.1f}" if pct else "-" for p in PERCENTILES]


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    if not rows:
        return "<p>none</p>"
    table = f"<table class={css!r}>" if css else "<table>"
    out = [table + "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows]
    return "\n".join(out + ["</table>"])


def _markdown(text: str) -> str:
    """The selector report's Markdown (headings, tables, paragraphs) as HTML."""
    out, table = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(set(c) <= {"-"} for c in cells):
                table.append(cells)
            continue
        if table:
            out.append(_table(table[0], table[1:]))
            table = []
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level + 1}>{html.escape(line.lstrip('#').strip())}</h{level + 1}>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    return "\n".join(out)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _time(value: Any) -> float | None:
    """Epoch seconds a date can be made of (year 1970 to 9998); anything else is no time."""
    when = _number(value)
    return when if when is not None and 0 <= when < 253_370_000_000 else None


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _when(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch).isoformat(timespec="seconds") if epoch is not None else "-"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def main(argv: Sequence[str] | None = None, prog: str = "tooldisco report") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--selector"]:
        return selector.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog=prog, description="What tool discovery did and saved, from telemetry files: an HTML page with plots "
        "(the report extra: matplotlib, tqdm), or with --json the same figures as JSON on stdout (no extra). "
        "Money leads: spent, what it would have cost without the proxy, saved, caching, unpriced turns.",
        epilog="The --json keys are described in docs/watching.md (The report).")
    parser.add_argument("paths", nargs="*", default=[Path("tool_discovery.jsonl")], type=Path, metavar="FILE.jsonl",
                        help="telemetry JSONL files (default tool_discovery.jsonl)")
    parser.add_argument("-o", "--output", type=Path, default=Path("tool_discovery_report.html"),
                        help="the HTML page (default %(default)s); PNGs go to <output stem>_png/")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object to stdout instead of writing the page")
    parser.add_argument("--since", type=selector.parse_since, help="only records from this time (epoch or ISO 8601)")
    parser.add_argument("--until", type=selector.parse_since, help="only records before this time")
    parser.add_argument("--session", action="append", default=[], metavar="PREFIX",
                        help="session hash prefix (repeatable)")
    parser.add_argument("--tenant", action="append", default=[], metavar="PREFIX",
                        help="tenant hash prefix, as recorded (repeatable)")
    parser.add_argument("--agent", action="append", default=[], metavar="NAME",
                        help="client family, e.g. claude-code, codex (repeatable)")
    parser.add_argument("--api", action="append", default=[], help="provider API, e.g. anthropic (repeatable)")
    parser.add_argument("--strategy", action="append", default=[], help="strategy, e.g. tool-search (repeatable)")
    parser.add_argument("--id", action="append", default=[], metavar="ID",
                        help="a turn's telemetry id or its prefix, as mitmdump's line and mitmweb's comment show it "
                             "(repeatable)")
    parser.add_argument("--turns", type=int, default=TURNS, metavar="N",
                        help="list the latest N turns one by one (default %(default)s; 0: none)")
    parser.add_argument("--usd-per-mtok", type=float, default=3.0,
                        help="input price for the tool-token estimate (default %(default)s); the money figures "
                             "are the telemetry's own")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--selector", action="store_true",
                        help="as the first argument: the api strategy's Markdown tables instead (no extra; "
                             "takes one FILE and --since)")
    args = parser.parse_args(argv)
    if args.selector:
        parser.error("--selector must come first: tooldisco report --selector FILE.jsonl [--since ...]")
    if not args.json and (absent := [m for m in ("matplotlib", "tqdm") if importlib.util.find_spec(m) is None]):
        print(f"error: the report needs {', '.join(absent)}: pip install 'tooldisco[report]' "
              "(in a checkout: .venv/bin/python -m pip install -e '.[report]')", file=sys.stderr)
        return 1
    filters = Filters(args.since, args.until, tuple(args.session), tuple(args.api), tuple(args.strategy),
                      tuple(args.tenant), tuple(args.agent), tuple(args.id))
    try:
        agg = read(args.paths, filters, progress=not args.quiet, turns=args.turns)
    except OSError as exc:
        print(f"error: cannot read {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(summary(agg, args.paths, filters, args.usd_per_mtok), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    images = plots(agg, args.usd_per_mtok)
    png_dir = args.output.with_name(args.output.stem + "_png")
    png_dir.mkdir(parents=True, exist_ok=True)
    for name in PLOTS:
        if name in images:
            (png_dir / name).write_bytes(images[name])
        else:  # a plot drawn by an earlier run over other records is not this page's
            (png_dir / name).unlink(missing_ok=True)
    args.output.write_text(page(agg, images, args.paths, filters, args.usd_per_mtok), encoding="utf-8")
    print(f"{agg.records:,} record(s) → {args.output} (PNGs in {png_dir}/)")
    return 0
