"""What tool discovery did and saved, from telemetry JSONL files: one self-contained HTML page.

    tooldisco report tool_discovery.jsonl [more.jsonl ...] -o report.html
        [--since 2026-05-01T09:00] [--until ...] [--session PREFIX] [--api anthropic] [--strategy tool-search]
        [--usd-per-mtok 3.0]

Why streaming: a proxy left running writes millions of records; the report reads them line by
line and keeps only aggregates (sums per time bucket, API and strategy; counters; fixed-size
random samples for the latency percentiles and the distribution), so memory stays bounded
whatever the size of the files. The plots (matplotlib, Agg backend) are written as PNG files
beside the page and embedded in it as data URIs, so the page can be mailed or attached alone.
The api strategy's tables are ``selector``'s, over the same records. Needs the
``report`` extra (matplotlib, tqdm).
"""

from __future__ import annotations

import argparse
import base64
import html
import importlib.util
import io
import math
import random
import sys
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tooldisco.report import selector
from tooldisco.report.selector import PERCENTILES, percentiles

SAMPLE = 20_000  # values kept per latency sample: exact percentiles below it, a uniform sample above
MAX_BUCKETS = 512  # time buckets; past it their width doubles and neighbours merge
MAX_REASONS = 40  # distinct fallback reasons counted; the rest are "other"
LOOP_STRATEGIES = ("tool-search", "api")  # the strategies whose model may search
MAX_SEARCHES_SHOWN = 5  # searches per turn: 0..4, then "5+"


class Sample:
    """A uniform random sample of at most ``size`` floats (reservoir sampling, algorithm R), in a
    compact array. Reads like the list the selector report expects: ``append``, ``len``, iteration, indexing."""

    def __init__(self, size: int = SAMPLE, seed: int = 0) -> None:
        self.size = size
        self.seen = 0
        self.values = array("d")
        self._random = random.Random(seed)

    def append(self, value: float) -> None:
        self.seen += 1
        if len(self.values) < self.size:
            self.values.append(value)
        elif (slot := self._random.randrange(self.seen)) < self.size:
            self.values[slot] = value

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[float]:
        return iter(self.values)

    def __getitem__(self, index: int) -> float:
        return self.values[index]


@dataclass
class Bucket:
    requests: int = 0
    before: int = 0
    after: int = 0
    saved: Counter[str] = field(default_factory=Counter)  # tool tokens saved, per API


class Timeline:
    """Per-time-bucket sums in bounded memory, whatever the order of the records: when there
    are too many buckets their width doubles and neighbours merge."""

    def __init__(self, width: float = 1.0, most: int = MAX_BUCKETS) -> None:
        self.width = width
        self.most = most
        self.buckets: dict[int, Bucket] = {}

    def add(self, when: float, api: str, before: int, after: int) -> None:
        bucket = self.buckets.get(key := math.floor(when / self.width))
        if bucket is None:
            bucket = self.buckets[key] = Bucket()
            while len(self.buckets) > self.most:
                self._coarsen()
                bucket = self.buckets[math.floor(when / self.width)]
        bucket.requests += 1
        bucket.before += before
        bucket.after += after
        bucket.saved[api] += before - after

    def _coarsen(self) -> None:
        self.width *= 2
        merged: dict[int, Bucket] = {}
        for key, b in self.buckets.items():
            into = merged.setdefault(key // 2, Bucket())
            into.requests += b.requests
            into.before += b.before
            into.after += b.after
            into.saved.update(b.saved)
        self.buckets = merged

    def ordered(self) -> list[tuple[float, Bucket]]:
        return [(key * self.width, self.buckets[key]) for key in sorted(self.buckets)]


@dataclass
class Group:
    """One API's or one strategy's totals and latency samples."""

    requests: int = 0
    before: int = 0
    after: int = 0
    searches: int = 0
    fallbacks: int = 0
    processing_ms: Sample = field(default_factory=Sample)
    loop_added_ms: Sample = field(default_factory=Sample)  # requests that ran the phantom loop
    search_ms: Sample = field(default_factory=Sample)


@dataclass
class Filters:
    since: float | None = None
    until: float | None = None
    sessions: tuple[str, ...] = ()  # session hash prefixes
    apis: tuple[str, ...] = ()
    strategies: tuple[str, ...] = ()

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
        if self.apis and record.get("provider") not in self.apis:
            return False
        return not self.strategies or record.get("strategy") in self.strategies

    def describe(self) -> str:
        parts = []
        if self.since is not None:
            parts.append(f"from {_when(self.since)}")
        if self.until is not None:
            parts.append(f"until {_when(self.until)}")
        for name, values in (("session", self.sessions), ("API", self.apis), ("strategy", self.strategies)):
            if values:
                parts.append(f"{name} {', '.join(values)}")
        return "; ".join(parts) or "none"


class Aggregate:
    """Everything the page shows, added one record at a time."""

    def __init__(self) -> None:
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
        when = _number(record.get("time"))
        if when is not None:
            self.first = when if self.first is None else min(self.first, when)
            self.last = when if self.last is None else max(self.last, when)
            self.timeline.add(when, api, before, after)
        searches = [s for s in record.get("searches") or [] if isinstance(s, dict)]
        looped = bool(searches) or (_number(record.get("loops")) or 0) > 0
        reason = record.get("fallback_reason")
        for group in (self.apis[api], self.strategies[strategy]):
            group.requests += 1
            group.before += before
            group.after += after
            group.searches += len(searches)
            group.fallbacks += bool(reason)
            if (ms := _number(record.get("processing_ms"))) is not None:
                group.processing_ms.append(ms)
            if looped and (ms := _number(record.get("loop_added_ms"))) is not None:
                group.loop_added_ms.append(ms)
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


def read(paths: Sequence[Path], filters: Filters, progress: bool) -> Aggregate:
    """Stream every line of every file through one ``Aggregate``, with a progress bar over bytes."""
    from tqdm import tqdm

    agg = Aggregate()
    total = sum(p.stat().st_size for p in paths)
    with tqdm(total=total, unit="B", unit_scale=True, desc="records", disable=not progress, file=sys.stderr) as bar:
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


# --- plots ------------------------------------------------------------------------------


def plots(agg: Aggregate, usd_per_mtok: float) -> dict[str, bytes]:
    """PNG bytes by file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    out: dict[str, bytes] = {}

    def save(name: str, fig: Any) -> None:
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        out[name] = buf.getvalue()

    series = agg.timeline.ordered()
    times = [datetime.fromtimestamp(t) for t, _ in series]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    if series:
        ax.plot(times, [b.before / b.requests for _, b in series], label="original (client sent)", color="#c0392b")
        ax.plot(times, [b.after / b.requests for _, b in series], label="forwarded", color="#27ae60")
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
        ax.legend()
    ax.set_title(f"Tool tokens per request (mean per {_duration(agg.timeline.width)})")
    ax.set_ylabel("estimated tokens")
    save("tokens_over_time.png", fig)

    fig, ax = plt.subplots(figsize=(9, 3.6))
    apis = sorted({api for _, b in series for api in b.saved})
    for api in apis:
        running, ys = 0, []
        for _, b in series:
            running += b.saved.get(api, 0)
            ys.append(running)
        ax.plot(times, ys, label=api)
    if series:
        total, ys = 0, []
        for _, b in series:
            total += b.before - b.after
            ys.append(total)
        ax.plot(times, ys, label="all APIs", color="black", linewidth=2)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(ax.xaxis.get_major_locator()))
        cost = ax.secondary_yaxis("right", functions=(lambda t: t * usd_per_mtok / 1e6, lambda d: d * 1e6 / usd_per_mtok))
        cost.set_ylabel(f"USD at ${usd_per_mtok:g}/M input tokens")
        ax.legend(fontsize="small")
    ax.set_title("Cumulative tool tokens saved (estimated)")
    ax.set_ylabel("tokens")
    save("cumulative_saved.png", fig)

    fig, ax = plt.subplots(figsize=(9, 3.6))
    values = [v for s in agg.search_ms.values() for v in s if v > 0]
    if values:
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

    fig, ax = plt.subplots(figsize=(9, 3.6))
    strategies = sorted(agg.searches_per_turn)
    width = 0.8 / max(len(strategies), 1)
    for i, strategy in enumerate(strategies):
        counts = agg.searches_per_turn[strategy]
        total = sum(counts.values())
        xs = range(MAX_SEARCHES_SHOWN + 1)
        ax.bar([x + i * width for x in xs], [100 * counts.get(x, 0) / total for x in xs], width, label=strategy)
    ax.set_xticks([x + width * (len(strategies) - 1) / 2 for x in range(MAX_SEARCHES_SHOWN + 1)],
                  [str(x) for x in range(MAX_SEARCHES_SHOWN)] + [f"{MAX_SEARCHES_SHOWN}+"])
    if strategies:
        ax.legend()
    ax.set_title("Searches per turn")
    ax.set_xlabel("searches in one client request")
    ax.set_ylabel("% of requests")
    save("searches_per_turn.png", fig)

    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.35 * len(agg.fallbacks) + 1.2)))
    reasons = sorted(agg.fallbacks, key=lambda r: sum(agg.fallbacks[r].values()))
    left = [0] * len(reasons)
    for strategy in sorted({s for c in agg.fallbacks.values() for s in c}):
        counts = [agg.fallbacks[r].get(strategy, 0) for r in reasons]
        ax.barh(reasons, counts, left=left, label=strategy)
        left = [a + b for a, b in zip(left, counts)]
    if reasons:
        ax.legend(fontsize="small")
    ax.set_title("Fallbacks by reason (requests passed unchanged or resent), per strategy")
    ax.set_xlabel("requests")
    save("fallbacks.png", fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, (title, groups) in zip(axes, (("per API", agg.apis), ("per strategy", agg.strategies))):
        names = sorted(groups)
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [groups[n].before for n in names], 0.4, label="original", color="#c0392b")
        ax.bar([x + 0.2 for x in xs], [groups[n].after for n in names], 0.4, label="forwarded", color="#27ae60")
        ax.set_xticks(list(xs), names, rotation=20)
        ax.set_title(f"Tool tokens {title}")
        if names:
            ax.legend(fontsize="small")
    save("per_api_strategy.png", fig)
    return out


# --- the page -----------------------------------------------------------------------------


def page(agg: Aggregate, images: dict[str, bytes], sources: Sequence[Path], filters: Filters, usd_per_mtok: float) -> str:
    saved = sum(g.before - g.after for g in agg.apis.values())
    before = sum(g.before for g in agg.apis.values())
    span = f"{_when(agg.first)} – {_when(agg.last)}" if agg.first is not None else "no timestamps"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>tool discovery report</title>",
        ("<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
        "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%;display:block;margin:1em 0}"
        ".note{color:#555}</style></head><body>"),
        "<h1>Tool discovery report</h1>",
        (f"<p>{html.escape(', '.join(str(p) for p in sources))}: {agg.lines:,} line(s), {agg.malformed:,} malformed, "
        f"{agg.filtered:,} left out by the filters ({html.escape(filters.describe())}); "
        f"<b>{agg.records:,} record(s)</b>, {html.escape(span)}.</p>"),
        (f"<p>Estimated tool tokens: {before:,} sent by clients, {before - saved:,} forwarded, "
        f"<b>{saved:,} saved</b> ({_pct(saved, before)}), about <b>${saved * usd_per_mtok / 1e6:,.2f}</b> at "
        f"${usd_per_mtok:g} per million input tokens.</p>"),
        ("<p class='note'>Tokens are estimated (4 characters a token) over tool definitions only, and the cost "
        "ignores prompt caching: a changed <code>tools[]</code> also re-bills the cached prompt behind it "
        "(see the README's whole-session benchmark).</p>"),
    ]
    for name, png in images.items():
        parts.append(f"<img alt='{html.escape(name)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
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
    if agg.api.records:
        loaded = selector.Loaded(lines=agg.lines, malformed=agg.malformed, before_since=agg.filtered)
        parts.append(_markdown(selector.render(agg.api, loaded, "the records above")))
    parts.append("</body></html>")
    return "\n".join(parts)


def _group_table(groups: dict[str, Group]) -> str:
    head = ["", "requests", "tool tokens original", "forwarded", "saved", "searches", "fallbacks"]
    rows = [[n, f"{g.requests:,}", f"{g.before:,}", f"{g.after:,}", _pct(g.before - g.after, g.before),
             f"{g.searches:,}", f"{g.fallbacks:,}"] for n, g in sorted(groups.items())]
    return _table(head, rows)


def _latency_table(groups: dict[str, Group]) -> str:
    head = ["", "measure", "n", *(f"p{p}" for p in PERCENTILES)]
    rows = []
    for name, g in sorted(groups.items()):
        for measure, sample in (("processing (planner)", g.processing_ms), ("loop added", g.loop_added_ms),
                                ("search", g.search_ms)):
            if sample.seen:
                rows.append([name, measure, f"{sample.seen:,}", *_cells(sample)])
    return _table(head, rows)


def _cells(sample: Sample) -> list[str]:
    pct = percentiles(sample)
    return [f"{pct[p]:.1f}" if pct else "-" for p in PERCENTILES]


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return "<p>none</p>"
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
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


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _when(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch).isoformat(timespec="seconds") if epoch is not None else "-"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="HTML report with plots over tool discovery telemetry.")
    parser.add_argument("paths", nargs="*", default=["tool_discovery.jsonl"], type=Path, help="telemetry JSONL files")
    parser.add_argument("-o", "--output", type=Path, default=Path("tool_discovery_report.html"),
                        help="the HTML page (default %(default)s); PNGs go to <output stem>_png/")
    parser.add_argument("--since", type=selector.parse_since, help="only records from this time (epoch or ISO 8601)")
    parser.add_argument("--until", type=selector.parse_since, help="only records before this time")
    parser.add_argument("--session", action="append", default=[], help="session hash prefix (repeatable)")
    parser.add_argument("--api", action="append", default=[], help="provider API, e.g. anthropic (repeatable)")
    parser.add_argument("--strategy", action="append", default=[], help="strategy, e.g. tool-search (repeatable)")
    parser.add_argument("--usd-per-mtok", type=float, default=3.0, help="input price for the cost estimate")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if absent := [m for m in ("matplotlib", "tqdm") if importlib.util.find_spec(m) is None]:
        print(f"error: the report needs {', '.join(absent)}: pip install 'tooldisco[report]' "
              "(in a checkout: .venv/bin/python -m pip install -e '.[report]')", file=sys.stderr)
        return 1
    filters = Filters(args.since, args.until, tuple(args.session), tuple(args.api), tuple(args.strategy))
    try:
        agg = read(args.paths, filters, progress=not args.quiet)
    except OSError as exc:
        print(f"error: cannot read {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    images = plots(agg, args.usd_per_mtok)
    png_dir = args.output.with_name(args.output.stem + "_png")
    png_dir.mkdir(parents=True, exist_ok=True)
    for name, png in images.items():
        (png_dir / name).write_bytes(png)
    args.output.write_text(page(agg, images, args.paths, filters, args.usd_per_mtok), encoding="utf-8")
    print(f"{agg.records:,} record(s) → {args.output} (PNGs in {png_dir}/)")
    return 0

