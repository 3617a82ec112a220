"""Where a running mitmdump's memory goes, read over HTTP: ``mitmdump -s scripts/memtrace.py ...``.

Why requests rather than a signal: the caller gets the answer synchronously, at the exact
point of its traffic it chose, and nothing but a proxied request is needed to reach a
process started elsewhere. Plain-HTTP requests through the proxy to a reserved host (RFC
2606, so nothing leaves the proxy), answered as text; inert until asked:

- ``GET http://memtrace.invalid/caches``: ``BYTES ENTRIES`` held by the addon's byte-bounded
  caches (``tooldisco.bytecache.ByteLRU``), as they charge themselves; ``0 0`` without the addon.
- ``GET http://memtrace.invalid/snapshot``: a tracemalloc snapshot, and the allocation sites
  that grew most since the previous one. The first call starts tracing (only what is
  allocated after it is seen; the traffic before runs at full speed).
- ``GET http://memtrace.invalid/trim``: pymalloc's arenas against its live blocks, then
  glibc's ``malloc_trim(0)`` with RSS before and after. Free memory an allocator keeps is not
  live objects: this tells fragmentation from a leak. It stops tracing first (while
  tracemalloc hooks the allocator, pymalloc has no statistics to give).

Used by ``scripts/bench_memory.py``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
import tempfile
import tracemalloc

import psutil
from mitmproxy import http

HOST = "memtrace.invalid"
FRAMES = 6  # enough to name the cache or caller; each frame more slows every allocation
TOP_LINES = 20
TOP_TRACEBACKS = 6
NOISE = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)
PYMALLOC_LINES = ("bytes/arena", "bytes in allocated blocks", "bytes in available blocks", "unused pools")
MiB = 1 << 20


class MemTrace:
    def __init__(self) -> None:
        self.previous: tracemalloc.Snapshot | None = None

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.pretty_host != HOST:
            return
        answers = {"/caches": caches, "/snapshot": self.snapshot, "/trim": trim}
        answer = answers.get(flow.request.path)
        status, text = (200, answer()) if answer else (404, f"not one of {sorted(answers)}\n")
        flow.response = http.Response.make(status, text.encode(), {"content-type": "text/plain; charset=utf-8"})

    def snapshot(self) -> str:
        if not tracemalloc.is_tracing():
            tracemalloc.start(FRAMES)
        gc.collect()  # what is left is reachable, not garbage waiting for a collection
        snapshot = tracemalloc.take_snapshot().filter_traces(NOISE)
        text = report(snapshot, self.previous)
        self.previous = snapshot
        return text


def caches() -> str:
    bytecache = sys.modules.get("tooldisco.bytecache")
    held = [o for o in gc.get_objects() if bytecache is not None and isinstance(o, bytecache.ByteLRU)]
    return f"{sum(c.currsize for c in held)} {sum(len(c) for c in held)}\n"


def report(snapshot: tracemalloc.Snapshot, previous: tracemalloc.Snapshot | None) -> str:
    """The traced total, then (against ``previous``) the lines and call paths that grew most."""
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced: {current / MiB:.1f} MiB now, {peak / MiB:.1f} MiB peak; "
             f"RSS {psutil.Process().memory_info().rss / MiB:.0f} MiB"]
    if previous is None:
        return "\n".join(lines) + "\n"
    lines.append(f"\n## top {TOP_LINES} lines by growth")
    lines += [str(stat) for stat in snapshot.compare_to(previous, "lineno")[:TOP_LINES]]
    lines.append(f"\n## top {TOP_TRACEBACKS} call paths by growth (innermost frame last)")
    for stat in snapshot.compare_to(previous, "traceback")[:TOP_TRACEBACKS]:
        lines.append(f"\n{stat.size_diff / MiB:+.2f} MiB in {stat.count_diff:+d} blocks")
        lines += [f"  {frame.filename}:{frame.lineno}" for frame in stat.traceback]
    return "\n".join(lines) + "\n"


def pymalloc() -> str:
    """The summary lines of ``sys._debugmallocstats``, which writes to the C stderr (fd 2)."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return "".join(f"pymalloc {line.strip()}\n" for line in text.splitlines()
                   if any(key in line for key in PYMALLOC_LINES))


def trim() -> str:
    tracemalloc.stop()
    stats = pymalloc()
    before = psutil.Process().memory_info().rss
    ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    after = psutil.Process().memory_info().rss
    return stats + f"malloc_trim: RSS {before / MiB:.0f} -> {after / MiB:.0f} MiB ({(after - before) / MiB:+.0f})\n"


addons = [MemTrace()]
