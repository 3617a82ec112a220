"""A thread-safe LRU of per-catalog indexes, bounded by the bytes they hold.

Why: building an index (tokenising every tool, embedding every description) costs far
more than a query, and the same catalog comes back on every request of a session. The
key is the catalog's identity (``catalog_key``), so a catalog that changes in any byte
gets a fresh index and an unchanged one, parsed anew from the next request, does not.
An index grows with its catalog, which the client picks, so the bound is in bytes
(``bytecache``); an index larger than the whole budget is built for each search instead.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Generic, Sequence, TypeVar

from tooldisco.core.bytecache import ByteLRU, MiB, entry_size
from tooldisco.core.types import Tool
from tooldisco.search.base import Catalog, catalog_key

IndexT = TypeVar("IndexT")

DEFAULT_MAX_BYTES = 64 * MiB

_ALL: weakref.WeakSet[IndexCache[object]] = weakref.WeakSet()


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

    @staticmethod
    def key(tools: Sequence[Tool]) -> str:
        """A ``Catalog`` brings its key, made once for all the caches a search consults."""
        return tools.key if isinstance(tools, Catalog) else catalog_key(tools)

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
        with self._lock:
            self._entries.clear()

