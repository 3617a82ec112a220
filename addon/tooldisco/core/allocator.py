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

Cycles: mitmproxy's own layers leave reference cycles around a flow's body (exceptions
caught while its messages are type-checked keep their frames), which only a full collection
frees. The addon's caches hold many long-lived objects, and Python runs a full collection
only when those grow by a quarter, so large bodies would stay resident request after
request (``scripts/memtrace.py``'s ``/cycles`` shows them). After a flow with a large body
ends, ``collect_soon`` has the trimmer's next rounds run one first (``COLLECT_ROUNDS``),
not every round: a full collection is not free.

Collections: the interpreter collects its youngest generation every 2,000 container allocations
by default, and each tenth of those collections takes the next generation too. Planning a
request decodes its body into a container per JSON object and array, so a large catalog's body
sets off dozens of collections, and each full one walks every object the addon's caches hold
(indexes, catalogs). Decoded JSON forms no reference cycles: reference counting frees it, and
the collections find nothing of it to free. ``collect_less_often`` raises the youngest
generation's threshold (``GC_YOUNG``); the cycles the collector is for (mitmproxy's, around a
flow) wait a little longer, and a large body's are collected when its flow ends (above).
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
LARGE_BODY = 8 << 20  # a flow with a body this large asks for a full collection when it ends
COLLECT_ROUNDS = 2  # its cycles may become garbage only once the client's connection is done with it
GC_YOUNG = 50_000  # container allocations between two collections of the youngest generation

_trimmer: threading.Thread | None = None
_trimmer_lock = threading.Lock()
_collect_rounds = 0  # trimmer rounds that still begin with a full collection


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc only: musl has no mallopt tuning of this kind
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
    """A flow that carried ``body_bytes`` ended: past ``LARGE_BODY``, the trimmer's next rounds
    first run a full garbage collection."""
    global _collect_rounds
    if body_bytes >= LARGE_BODY:
        _collect_rounds = COLLECT_ROUNDS


def _trim_forever(libc: ctypes.CDLL, every_s: float) -> None:
    global _collect_rounds
    while True:  # a daemon thread: it ends with the process
        time.sleep(every_s)
        if _collect_rounds > 0:
            _collect_rounds -= 1
            gc.collect()
        libc.malloc_trim(0)
