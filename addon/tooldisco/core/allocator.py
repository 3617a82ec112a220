"""Freed memory goes back to the OS (glibc's malloc only): large blocks at once, the rest periodically.

Why: glibc raises its mmap threshold each time a large mmapped block is freed (up to
32 MiB), so after the first 30 MB request body every later one is carved out of a heap
arena instead, and each worker thread has an arena of its own. Those arenas keep the
pages: a few 30 MB bodies parsed in worker threads leave several times that resident that
no object holds (``scripts/bench_memory.py`` shows it). A fixed threshold turns the
adjustment off: blocks of 1 MiB and more are mapped and unmapped on their own, so what a
huge body took is given back when the flow is done. Process-wide, so mitmproxy's own large buffers benefit too.

Smaller blocks stay in the heaps, and glibc gives a heap's free pages back only from its
top: a few live objects above a freed region (a cache entry made while a request was
parsed) keep the region resident, none of it live (``scripts/bench_memory.py`` shows it
after many requests and after a huge catalog is indexed). ``trim_periodically`` returns
those pages every few seconds (``malloc_trim``, which releases the GIL and takes each
arena's lock only while it walks it).

Cycles: mitmproxy's own layers leave reference cycles around every flow's body (the
``TypeError`` its ``MessageData.__post_init__`` type check raises and catches for each field
that is None keeps its frames, and through them the request's ``RequestData`` with the whole
body, and the connection's ``DataReceived`` chunks), which only the cyclic collector frees. The
addon's caches hold many long-lived objects, and Python runs a full collection only when those
grow by a quarter; with the youngest generation collected less often (below) even the young
garbage waits: 200 requests of 300 KB ran one collection and left about 50 MiB of bodies in
cycles (``scripts/memtrace.py``'s ``/cycles?kib=64`` shows them). Collector thresholds count
objects, and a body is one object whatever its size, so ``collect_soon`` counts the bytes of
the bodies of the flows that ended instead: each time they reach ``COLLECT_AFTER``, the
trimmer's next rounds begin with a collection (``COLLECT_ROUNDS``, at most one a round). Those
cycles are garbage from the moment the type check returns (nothing outside them refers to
them), so collecting the young generations frees them: a few milliseconds, where a full
collection walks every object of the process (about 0.1 s with the caches full). Every
``FULL_EVERY``-th collection asked for is a full one, for what a collection found still
reachable and moved to the oldest generation; a flow of ``COLLECT_AFTER`` or more alone asks
for a full one at once.

Collections: the interpreter collects its youngest generation every 2,000 container allocations
by default, and each tenth of those collections takes the next generation too. Planning a
request decodes its body into a container per JSON object and array, so a large catalog's body
sets off dozens of collections, and each full one walks every object the addon's caches hold
(indexes, catalogs). Decoded JSON forms no reference cycles: reference counting frees it, and
the collections find nothing of it to free. ``collect_less_often`` raises the youngest
generation's threshold (``GC_YOUNG``); the cycles the collector is for (mitmproxy's, around a
flow) would wait long, so the bodies of the flows that end ask for them to be collected (above).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading
import time

M_MMAP_THRESHOLD = -3  # glibc <malloc.h>
THRESHOLD = 1 << 20
TRIM_EVERY_S = 2.0
COLLECT_AFTER = 8 << 20  # bytes of the bodies of ended flows that ask for a collection
FULL_EVERY = 4  # every this many collections asked for, a full one (the others: the young generations)
COLLECT_ROUNDS = 2  # its cycles may become garbage only once the client's connection is done with it
YOUNG, OLDEST = 1, 2  # gc.collect(generation)
GC_YOUNG = 50_000  # container allocations between two collections of the youngest generation

_trimmer: threading.Thread | None = None
_trimmer_lock = threading.Lock()
_collect_rounds = 0  # trimmer rounds that still begin with a collection
_collect_generation = YOUNG  # the oldest generation those rounds collect
_ended_bytes = 0  # bytes of the bodies of the flows ended since a collection was last asked for
_asked = 0  # collections asked for since a full one was


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _ = libc.gnu_get_libc_version  # glibc only: musl has no mallopt tuning of this kind
    except (OSError, AttributeError):
        return None
    return libc


def return_large_blocks(threshold: int = THRESHOLD) -> bool:
    """Set glibc's mmap threshold; False where the C library is not glibc (nothing to do)."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


def trim_periodically(every_s: float = TRIM_EVERY_S) -> bool:
    """Give the heaps' free pages back every ``every_s`` seconds, from one daemon thread per
    process (started once); False where the C library is not glibc."""
    global _trimmer
    libc = _glibc()
    if libc is None:
        return False
    with _trimmer_lock:
        if _trimmer is None:
            _trimmer = threading.Thread(target=_trim_forever, args=(libc, every_s), name="tooldisco-trim",
                                        daemon=True)
            _trimmer.start()
    return True


def collect_less_often(young: int = GC_YOUNG) -> None:
    """The youngest generation collected every ``young`` container allocations (process-wide, it is
    the proxy's process); the older generations' thresholds stay, a higher setting is kept."""
    first, *older = gc.get_threshold()
    if 0 < first < young:  # 0: collection is off, left so
        gc.set_threshold(young, *older)


def collect_soon(body_bytes: int) -> None:
    """A flow that carried ``body_bytes`` ended: once the flows ended since a collection was last
    asked for carried ``COLLECT_AFTER`` bytes (this one alone, or with the ones before), the
    trimmer's next rounds begin with one: of the young generations, or a full one every
    ``FULL_EVERY``-th time and for a flow that large alone. Called on the event loop only."""
    global _collect_rounds, _collect_generation, _ended_bytes, _asked
    _ended_bytes += body_bytes
    if _ended_bytes < COLLECT_AFTER:
        return
    _ended_bytes = 0
    _asked += 1
    full = _asked >= FULL_EVERY or body_bytes >= COLLECT_AFTER
    if full:
        _asked = 0
    pending_full = _collect_rounds > 0 and _collect_generation == OLDEST  # a full one asked for is kept
    _collect_generation = OLDEST if full or pending_full else YOUNG
    _collect_rounds = COLLECT_ROUNDS


def _trim_forever(libc: ctypes.CDLL, every_s: float) -> None:
    while True:  # a daemon thread: it ends with the process
        time.sleep(every_s)
        trim_round(libc)


def trim_round(libc: ctypes.CDLL | None) -> None:
    """One round of the trimmer: the collection asked for (``collect_soon``), then the trim."""
    global _collect_rounds
    if _collect_rounds > 0:
        _collect_rounds -= 1
        gc.collect(_collect_generation)
    if libc is not None:
        libc.malloc_trim(0)
