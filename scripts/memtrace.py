"""tracemalloc inside mitmdump, read over HTTP: ``mitmdump -s scripts/memtrace.py ...``.

Why a request rather than a signal: the caller gets the answer synchronously, at the exact
point of its traffic it chose, and nothing but a proxied request is needed to reach a
process started elsewhere. ``GET http://memtrace.invalid/snapshot`` (a plain-HTTP request
through the proxy) takes a snapshot and answers, as text, the allocation sites that grew
most since the previous one (none on the first call). The host is reserved (RFC 2606), so
the request never leaves the proxy. Used by ``scripts/bench_memory.py --trace``.
"""

from __future__ import annotations

import tracemalloc

from mitmproxy import http

HOST = "memtrace.invalid"
FRAMES = 16  # deep enough to reach the addon's frames under asyncio and mitmproxy
TOP_LINES = 20
TOP_TRACEBACKS = 6
NOISE = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)


class MemTrace:
    def __init__(self) -> None:
        self.previous: tracemalloc.Snapshot | None = None

    def load(self, loader: object) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(FRAMES)

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.pretty_host != HOST:
            return
        snapshot = tracemalloc.take_snapshot().filter_traces(NOISE)
        text = report(snapshot, self.previous)
        self.previous = snapshot
        flow.response = http.Response.make(200, text.encode(), {"content-type": "text/plain; charset=utf-8"})


def report(snapshot: tracemalloc.Snapshot, previous: tracemalloc.Snapshot | None) -> str:
    """The traced total, then (against ``previous``) the lines and call paths that grew most."""
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced: {current / 2**20:.1f} MiB now, {peak / 2**20:.1f} MiB peak"]
    if previous is None:
        return "\n".join(lines) + "\n"
    lines.append(f"\n## top {TOP_LINES} lines by growth")
    lines += [str(stat) for stat in snapshot.compare_to(previous, "lineno")[:TOP_LINES]]
    lines.append(f"\n## top {TOP_TRACEBACKS} call paths by growth (innermost frame last)")
    for stat in snapshot.compare_to(previous, "traceback")[:TOP_TRACEBACKS]:
        lines.append(f"\n{stat.size_diff / 2**20:+.2f} MiB in {stat.count_diff:+d} blocks")
        lines += [f"  {frame.filename}:{frame.lineno}" for frame in stat.traceback]
    return "\n".join(lines) + "\n"


addons = [MemTrace()]
