"""Where a running mitmdump's memory goes, read over HTTP: ``mitmdump -s scripts/memtrace.py ...``.

Why requests rather than a signal: the caller gets the answer synchronously, at the exact
point of its traffic it chose, and nothing but a proxied request is needed to reach a
process started elsewhere. Plain-HTTP requests through the proxy to a reserved host (RFC
2606, so nothing leaves the proxy), answered as text; inert until asked:

- ``GET http://memtrace.invalid/caches``: ``BYTES ENTRIES`` held by the addon's byte-bounded
  caches (``tooldisco.core.bytecache.ByteLRU``), as they charge themselves; ``0 0`` without the addon.
- ``GET http://memtrace.invalid/clear``: empties those caches, so that a snapshot taken after
  it names only what is held outside them (caches churn: what they hold at the end was
  allocated late, so before clearing it shows among the sites that grew).
- ``GET http://memtrace.invalid/snapshot``: a tracemalloc snapshot, and the allocation sites
  that grew most since the previous one. The first call starts tracing (only what is
  allocated after it is seen; the traffic before runs at full speed).
- ``GET http://memtrace.invalid/big[?kib=N]``: every live ``str``/``bytes``/``bytearray`` of
  1 MiB (or N KiB) or more that a tracked object holds, grouped by the chain of objects that
  keeps it alive (up to a module, a class or an object nothing tracked refers to). A huge
  body still alive after its flow ended is a leak; this names its owner.
- ``GET http://memtrace.invalid/cycles[?kib=N]``: what only the cyclic collector frees, collected now:
  the counts by type, the frames and coroutines among it (they name the code that made the
  cycle), the large blobs it held (1 MiB or more, or N KiB) and which objects held them. A body
  held by a cycle stays resident until a collection reaches it, which may come long after its
  flow.
- ``GET http://memtrace.invalid/trim``: pymalloc's arenas against its live blocks, then
  glibc's ``malloc_trim(0)`` with RSS before and after, and RSS split into anonymous and
  file-backed pages. Free memory an allocator keeps is not live objects: this tells
  fragmentation from a leak. It stops tracing first (while tracemalloc hooks the allocator,
  pymalloc has no statistics to give).

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
from collections import Counter
from functools import partial

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
        answers = {"/caches": caches, "/clear": clear, "/snapshot": self.snapshot, "/big": big, "/cycles": cycles,
                   "/trim": trim}
        answer = answers.get(flow.request.path)
        if flow.request.path.startswith(("/big?kib=", "/cycles?kib=")):  # a lower floor than 1 MiB
            kib = int(flow.request.query["kib"]) * 1024
            answer = partial(big, kib) if flow.request.path.startswith("/big") else partial(cycles, kib)
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


def _byte_caches() -> list[object]:
    bytecache = sys.modules.get("tooldisco.core.bytecache")
    return [o for o in gc.get_objects() if bytecache is not None and isinstance(o, bytecache.ByteLRU)]


def caches() -> str:
    held = _byte_caches()
    return f"{sum(c.currsize for c in held)} {sum(len(c) for c in held)}\n"


def clear() -> str:
    held = _byte_caches()
    before = sum(c.currsize for c in held)
    for c in held:
        c.clear()
    return f"cleared {len(held)} caches holding {before / MiB:.1f} MiB\n"


BIG_BYTES = 1 << 20
CHAIN_DEPTH = 12
_BLOBS = (str, bytes, bytearray)


def big(min_bytes: int = BIG_BYTES) -> str:
    """Live blobs of ``min_bytes`` or more, grouped by the chain that holds them, largest first."""
    gc.collect()
    objects = gc.get_objects()
    blobs: dict[int, tuple[object, object]] = {}  # id(blob) -> (blob, a container holding it)
    for o in objects:
        for r in gc.get_referents(o):
            if isinstance(r, _BLOBS) and sys.getsizeof(r) >= min_bytes:
                blobs.setdefault(id(r), (r, o))
    del objects
    groups: dict[tuple[str, ...], list[int]] = {}
    ours = {id(blobs), id(groups), *map(id, blobs.values())}  # this probe's own references
    for blob, holder in blobs.values():
        groups.setdefault(tuple(_chain(blob, holder, ours)), []).append(sys.getsizeof(blob))
    total = sum(map(sum, groups.values()))
    lines = [f"{len(blobs)} live blobs of {min_bytes / 1024:,.0f} KiB or more, {total / MiB:.1f} MiB"]
    for chain, sizes in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"\n{len(sizes)} blobs, {sum(sizes) / MiB:.1f} MiB, held by")
        lines += [f"  <- {step}" for step in chain]
    return "\n".join(lines) + "\n"


def cycles(min_bytes: int = BIG_BYTES) -> str:
    """Collect, keeping what was collected in ``gc.garbage`` to describe it, then drop it (and
    collect again: out of ``gc.garbage`` the cycles are garbage again, which only a collection frees)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        found = gc.collect()
        garbage, gc.garbage[:] = list(gc.garbage), []
    finally:
        gc.set_debug(0)
    text = _describe_garbage(found, garbage, min_bytes)
    del garbage
    gc.collect()
    return text


def _describe_garbage(found: int, garbage: list[object], min_bytes: int = BIG_BYTES) -> str:
    kinds = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in garbage)
    code = Counter(_describe(o, None) for o in garbage
                   if type(o).__name__ in ("frame", "coroutine", "async_generator", "generator"))
    blobs: dict[int, int] = {}
    holders: Counter[str] = Counter()  # the garbage objects that hold those blobs, by type
    for o in garbage:
        for r in gc.get_referents(o):
            if isinstance(r, _BLOBS) and sys.getsizeof(r) >= min_bytes and id(r) not in blobs:
                blobs[id(r)] = sys.getsizeof(r)
                holders[_describe(o, r)] += sys.getsizeof(r)
    lines = [f"{found} objects in cycles; blobs of {min_bytes / 1024:,.0f} KiB or more among them: {len(blobs)}, "
             f"{sum(blobs.values()) / MiB:.1f} MiB"]
    lines += [f"  {size / MiB:>7.1f} MiB held by {holder}" for holder, size in holders.most_common(8)]
    lines += [f"  {n:>7} {kind}" for kind, n in kinds.most_common(15)]
    lines += [f"  {n:>7} {where}" for where, n in code.most_common(15)]
    return "\n".join(lines) + "\n"


def _chain(child: object, holder: object, ignore: set[int]) -> list[str]:
    """Who keeps ``child`` alive: ``holder``, then one referrer of each, up to a root."""
    steps: list[str] = []
    seen = {id(child), id(steps)}
    node = holder
    for _ in range(CHAIN_DEPTH):
        steps.append(_describe(node, child))
        if isinstance(node, type) or type(node).__name__ == "module":
            break
        seen.add(id(node))
        referrers = gc.get_referrers(node)
        seen.add(id(referrers))
        parents = [r for r in referrers if id(r) not in ignore and id(r) not in seen and not _is_frame_of_ours(r)]
        seen.add(id(parents))
        if not parents:
            steps.append("(nothing tracked refers to it: a local of a running frame, or C-level)")
            break
        # A module's or class's namespace names the root best; else the first referrer.
        parents.sort(key=lambda r: 0 if isinstance(r, dict) and "__name__" in r else 1)
        child, node = node, parents[0]
    return steps


def _is_frame_of_ours(obj: object) -> bool:
    return type(obj).__name__ == "frame" and getattr(obj, "f_code", None) in (big.__code__, _chain.__code__)


def _describe(node: object, child: object) -> str:
    """``node``'s type, where it comes from, and where in it ``child`` sits."""
    kind = type(node)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(node, dict):
        # Attribute and global names say where; data keys (a cache's) would only split the groups.
        where = next((repr(k) for k, v in node.items() if v is child and isinstance(k, str) and k.isidentifier()),
                     None)
        owner = f" module {node['__name__']}" if "__name__" in node and "__builtins__" in node else ""
        return f"{name}{owner} [{where}]" if where else f"{name}{owner} (as a key, or inside)"
    if isinstance(node, (list, tuple)):
        return f"{name} of {len(node)}"
    if kind.__name__ == "frame":
        code = node.f_code  # type: ignore[attr-defined]
        return f"frame {code.co_qualname} {code.co_filename}:{node.f_lineno}"  # type: ignore[attr-defined]
    if kind.__name__ == "cell":
        return "cell (a closure's variable)"
    if kind.__name__ in ("function", "method"):
        return f"{name} {getattr(node, '__qualname__', '')}"
    if kind.__name__ in ("coroutine", "async_generator", "generator"):
        code = getattr(node, "cr_code", None) or getattr(node, "ag_code", None) or getattr(node, "gi_code", None)
        return f"{name} {code.co_qualname if code else ''}"
    return name


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
    return (stats + f"malloc_trim: RSS {before / MiB:.0f} -> {after / MiB:.0f} MiB ({(after - before) / MiB:+.0f})\n"
            + resident())


def resident() -> str:
    """RSS split as the kernel counts it: anonymous (the heaps) and file-backed (libraries,
    mapped files such as SQLite's shared memory)."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith("Rss"))
    except OSError:
        return ""
    return " ".join(f"{k} {v.strip()}" for k, v in fields.items()) + "\n"


addons = [MemTrace()]
