"""A thread-safe LRU of per-catalog indexes, bounded by the bytes they hold.

Why: building an index (tokenising every tool, embedding every description) costs far
more than a query, and the same catalog comes back on every request of a session. The
key is a digest of the definitions (``catalog_key``), so a catalog that changes in any
byte gets a fresh index and an unchanged one, parsed anew from the next request, does not.
An index grows with its catalog, which the client picks, so the bound is in bytes
(``bytecache``); an index larger than the whole budget is built for each search instead.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Generic, Sequence, TypeVar

from ..bytecache import ByteLRU, MiB, entry_size
from ..providers.base import Tool
from .base import catalog_key

IndexT = TypeVar("IndexT")

DEFAULT_MAX_BYTES = 64 * MiB

_ALL: weakref.WeakSet[IndexCache[object]] = weakref.WeakSet()

# The last tuple of tools seen and its key, shared by every cache: one search consults
# several (names, BM25, fuzzy, embeddings) with the same tuple, which is hashed once.
# A tuple of frozen tools cannot change, so the very same object has the same key.
# Holding the tuple keeps the catalog alive until the next one comes, and the client
# picks its size (60 tools of 500 KB kept 60 MB after their flow), so only a catalog of
# at most ``LAST_MAX_BYTES`` is remembered; a larger one is hashed by each cache, which
# costs milliseconds next to building its index.
LAST_MAX_BYTES = 1 * MiB
_last: tuple[tuple[Tool, ...], str] | None = None


def clear_all() -> None:
    """Drop every cached index (tests and benchmarks measure cold builds with it)."""
    for cache in list(_ALL):
        cache.clear()


class IndexCache(Generic[IndexT]):
    """``get(tools)`` returns ``build(tools)``, built once per distinct catalog."""

    def __init__(
        self,
        build: Callable[[Sequence[Tool]], IndexT],
        max_bytes: int = DEFAULT_MAX_BYTES,
        sizeof: Callable[[str, Any], int] = entry_size,
    ):
        self._build = build
        self._entries: ByteLRU[str, IndexT] = ByteLRU(max_bytes, sizeof)
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Event] = {}  # keys being built, set when done
        self.builds = 0  # how many indexes were built (for tests and telemetry)
        _ALL.add(self)

    def key(self, tools: Sequence[Tool]) -> str:
        global _last
        last = _last
        if last is not None and tools is last[0]:
            return last[1]
        key = catalog_key(tools)
        if isinstance(tools, tuple) and _text_bytes(tools) <= LAST_MAX_BYTES:
            _last = (tools, key)
        return key

    def get(self, tools: Sequence[Tool]) -> IndexT:
        key = self.key(tools)
        while True:
            with self._lock:
                index = self._entries.get(key)
                if index is not None:
                    return index
                pending = self._pending.get(key)
                if pending is None:  # nobody builds this catalog: this thread will
                    pending = self._pending[key] = threading.Event()
                    break
            pending.wait()  # another thread is building it; then look again
        # Built outside the lock, so a slow build (embedding a large catalog) stalls
        # only the requests that need this very index.
        try:
            index = self._build(tools)
            self._entries.put(key, index)  # sized outside the lock: it walks the whole index
            with self._lock:
                self.builds += 1
        finally:
            with self._lock:
                del self._pending[key]
            pending.set()
        return index

    def clear(self) -> None:
        global _last
        with self._lock:
            self._entries.clear()
            _last = None


def _text_bytes(tools: Sequence[Tool]) -> int:
    """About what a catalog's tools hold: their definition and description texts."""
    return sum(len(t.raw) + len(t.description) for t in tools)
