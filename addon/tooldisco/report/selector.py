"""Markdown report on the ``api`` strategy's selector calls, from the telemetry JSONL.

    tooldisco report --selector [tool_discovery.jsonl] [--since 2026-05-01T09:00 | 1777626000]

Why: a rollout is widened only when the selector proves itself: its success rate,
empty/invalid selection rate, average tools reinjected and added latency p50/p95/p99;
this turns the proxy's per-request records into those numbers. It reads records of
strategy ``api`` and, inside them, the searches the selector answered (backend
``api``). Fallback reasons are counted as found, so a reason added to the proxy shows
up without a change here. Lines that are not JSON objects are counted and skipped.
Only the standard library is used: it needs no extra.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from tooldisco.core.stats import percentile

API = "api"
SELECTOR_P95_TARGET_MS = 150.0  # the selector's budget: every search waits for it before the re-forward
PERCENTILES = (50, 95, 99)


@dataclass
class Loaded:
    records: list[dict[str, Any]] = field(default_factory=list)
    lines: int = 0
    malformed: int = 0  # not JSON, or not an object
    before_since: int = 0  # dropped by --since (or without a usable time)


@dataclass
class Summary:
    """The rollout metrics over the api-strategy records of one log."""

    records: int = 0
    searches: int = 0  # searches with backend "api"
    other_searches: Counter[str] = field(default_factory=Counter)  # in api records, by backend
    malformed_searches: int = 0
    selector_calls: int = 0  # searches that went (or tried to go) to the selector
    successes: int = 0  # HTTP 200 and a meaningful selection
    fallbacks: Counter[str] = field(default_factory=Counter)  # fail-open searches by reason
    invalid_selections: int = 0  # fail-open although the selector answered 200
    statuses: Counter[str] = field(default_factory=Counter)
    reinjected: list[int] = field(default_factory=list)  # len(matched), every search
    reinjected_ok: list[int] = field(default_factory=list)  # len(matched), successful searches
    deferred: list[float] = field(default_factory=list)
    api_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    loop_added_ms: list[float] = field(default_factory=list)  # per request that looped
    record_fallbacks: Counter[str] = field(default_factory=Counter)
    rollouts: Counter[str] = field(default_factory=Counter)
    shadow_records: int = 0
    shadow_overlaps: list[float] = field(default_factory=list)


def parse_since(text: str) -> float:
    """Epoch seconds, or an ISO 8601 time (without a zone: local time)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not epoch seconds or an ISO time: {text!r}") from None


class LineCounts(Protocol):
    lines: int
    malformed: int


def parse_line(line: str, counts: LineCounts) -> dict[str, Any] | None:
    """The record on one telemetry line (the HTML page reads through this too). None for a
    blank line (not counted) or one that is not a JSON object (counted in ``counts.malformed``);
    every other line counts in ``counts.lines``."""
    if not line.strip():
        return None
    counts.lines += 1
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        counts.malformed += 1
        return None
    return record


def load(lines: Iterable[str], since: float | None = None) -> Loaded:
    """The records of a JSONL stream, malformed lines counted, not fatal."""
    out = Loaded()
    for line in lines:
        if (record := parse_line(line, out)) is None:
            continue
        if since is not None:
            when = _number(record.get("time"))
            if when is None or when < since:
                out.before_since += 1
                continue
        out.records.append(record)
    return out


def summarize(records: Iterable[dict[str, Any]], s: Summary | None = None) -> Summary:
    """The metrics over ``records``; into ``s`` when given (the HTML page streams records in
    one by one, with bounded samples in place of the lists)."""
    s = s if s is not None else Summary()
    for record in records:
        add(s, record)
    return s


def add(s: Summary, record: dict[str, Any]) -> None:
    """One record into the summary (records of other strategies are ignored)."""
    if record.get("strategy") != API:
        return
    s.records += 1
    if record.get("fallback_reason"):
        s.record_fallbacks[str(record["fallback_reason"])] += 1
    if record.get("rollout"):
        s.rollouts[str(record["rollout"])] += 1
    _add_shadow(s, record.get("shadow"))
    searches = record.get("searches")
    searches = searches if isinstance(searches, list) else []
    api_searches = 0
    for search in searches:
        if not isinstance(search, dict):
            s.malformed_searches += 1
        elif search.get("backend") != API:
            s.other_searches[str(search.get("backend"))] += 1
        else:
            api_searches += 1
            _add_search(s, search)
    loop_ms = _number(record.get("loop_added_ms"))
    if loop_ms is not None and (api_searches or (_number(record.get("loops")) or 0) > 0):
        s.loop_added_ms.append(loop_ms)


def _add_search(s: Summary, search: dict[str, Any]) -> None:
    s.searches += 1
    status = search.get("api_status")
    fallback = search.get("fallback")
    matched = search.get("matched")
    count = len(matched) if isinstance(matched, list) else 0
    s.reinjected.append(count)
    for key, values in (("api_ms", s.api_ms), ("latency_ms", s.search_ms), ("deferred", s.deferred)):
        value = _number(search.get(key))
        if value is not None:
            values.append(value)
    if status is None and not fallback:
        return  # answered without the selector (bad arguments, a listing)
    s.selector_calls += 1
    s.statuses[str(status) if status is not None else "no response"] += 1
    if fallback:
        s.fallbacks[str(fallback)] += 1
        if status == 200:
            s.invalid_selections += 1
    elif status == 200:
        s.successes += 1
        s.reinjected_ok.append(count)


def _add_shadow(s: Summary, shadow: Any) -> None:
    """Dark/shadow rollout: how much the selector's picks agree with relevance's.

    ``overlap`` as the proxy logged it; without one, the Jaccard index of ``selected``
    and ``relevance_kept``.
    """
    if not isinstance(shadow, dict):
        return
    s.shadow_records += 1
    overlap = _number(shadow.get("overlap"))
    if overlap is None:
        picked, kept = shadow.get("selected"), shadow.get("relevance_kept")
        if isinstance(picked, list) and isinstance(kept, list) and (picked or kept):
            a, b = set(map(str, picked)), set(map(str, kept))
            overlap = len(a & b) / len(a | b)
    if overlap is not None:
        s.shadow_overlaps.append(overlap)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def percentiles(values: Sequence[float]) -> dict[int, float]:
    """p50/p95/p99 (``core.stats.percentile``: linear interpolation between closest ranks); {} without values."""
    return {p: float(percentile(values, p)) for p in PERCENTILES} if values else {}


# --- rendering -----------------------------------------------------------------------


def render(s: Summary, loaded: Loaded, source: str) -> str:
    out = [f"# api strategy report: {source}", ""]
    skipped = f"{loaded.malformed} malformed line(s) skipped"
    if loaded.before_since:
        skipped += f", {loaded.before_since} before --since"
    out += [f"{loaded.lines} line(s) read, {skipped}; {s.records} api-strategy record(s).", ""]
    if not s.records:
        return "\n".join(out + ["No api-strategy records found.", ""])

    out += ["## Searches", "", "| Metric | Value |", "|---|---|"]
    rows = [
        ("Searches (backend api)", str(s.searches)),
        ("Selector calls", str(s.selector_calls)),
        ("Selector success (HTTP 200, meaningful selection)", _count_rate(s.successes, s.selector_calls)),
        ("Fail-open (all deferred tools restored)", _count_rate(sum(s.fallbacks.values()), s.selector_calls)),
        ("Empty/invalid selection (HTTP 200, fail-open)", _count_rate(s.invalid_selections, s.selector_calls)),
        ("Avg tools reinjected per search", _mean(s.reinjected)),
        ("Avg tools reinjected per successful search", _mean(s.reinjected_ok)),
        ("Avg deferred tools per search", _mean(s.deferred)),
    ]
    if s.malformed_searches:
        rows.append(("Malformed search entries skipped", str(s.malformed_searches)))
    out += [f"| {name} | {value} |" for name, value in rows] + [""]

    out += _counter_table("Fallback reasons (searches)", "Reason", s.fallbacks, s.selector_calls)
    out += _counter_table("Selector HTTP status", "Status", s.statuses, s.selector_calls)
    out += _counter_table("Request-level fallback reasons", "Reason", s.record_fallbacks, s.records)
    out += _counter_table("Other searches in api records, by backend", "Backend", s.other_searches, None)

    out += ["## Latency (ms)", "", "| Measure | n | p50 | p95 | p99 |", "|---|---|---|---|---|"]
    for name, values in (
        ("Selector API call (api_ms)", s.api_ms),
        ("Whole search (latency_ms)", s.search_ms),
        ("Loop-added per request (loop_added_ms)", s.loop_added_ms),
    ):
        pct = percentiles(values)
        cells = [f"{pct[p]:.1f}" if pct else "-" for p in PERCENTILES]
        out.append(f"| {name} | {len(values)} | {' | '.join(cells)} |")
    p95 = percentiles(s.api_ms).get(95)
    if p95 is not None:
        verdict = "met" if p95 <= SELECTOR_P95_TARGET_MS else "missed"
        out += ["", f"Selector p95 target of {SELECTOR_P95_TARGET_MS:.0f} ms: {verdict}."]
    out.append("")

    if s.rollouts or s.shadow_records:
        out += _counter_table("Rollout", "Rollout", s.rollouts, s.records)
        overlap = _mean(s.shadow_overlaps, 3)
        out += [
            "## Dark/shadow comparison",
            "",
            (
                f"{s.shadow_records} record(s) with a shadow comparison, {len(s.shadow_overlaps)} with an "
                f"overlap; average overlap of selector and relevance picks: {overlap}."
            ),
            "",
        ]
    return "\n".join(out)


def _counter_table(title: str, column: str, counts: Counter[str], total: int | None) -> list[str]:
    if not counts:
        return []
    header = f"| {column} | Count |" + (" Share |" if total else "")
    lines = [f"## {title}", "", header, "|---|---|" + ("---|" if total else "")]
    for key, count in counts.most_common():
        lines.append(f"| {key} | {count} |" + (f" {_pct(count, total)} |" if total else ""))
    return lines + [""]


def _count_rate(count: int, total: int) -> str:
    return f"{count} ({_pct(count, total)})" if total else str(count)


def _pct(count: int, total: int) -> str:
    return f"{100.0 * count / total:.1f}%"


def _mean(values: Sequence[float], digits: int = 2) -> str:
    return f"{statistics.fmean(values):.{digits}f}" if values else "-"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Markdown report on the api strategy's selector calls.")
    parser.add_argument("path", nargs="?", default="tool_discovery.jsonl", help="telemetry JSONL (default %(default)s)")
    parser.add_argument("--since", type=parse_since, help="only records from this time: epoch seconds or ISO 8601")
    args = parser.parse_args(argv)
    path = Path(args.path)
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            loaded = load(lines, args.since)
    except OSError as exc:
        print(f"error: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    sys.stdout.write(render(summarize(loaded.records), loaded, str(path)))
    return 0

