"""Tool catalogs (``types.ToolCatalog``) kept once per catalog text, for the whole process.

Why: agents send the same tools array on every turn of every session, and at thousands of
tools it is most of the body. Everything that depends on the definitions alone (the parsed
``Tool``s, their names, token estimates, whether the client searches its own tools, the
search tool's description over a deferred set) is worked out when a catalog is first seen and
shared by every later request that carries the same text: a request pays for finding its
catalog (a comparison of its bytes) and for what is its own (the session, the query).

Nothing here is session state: a catalog is shared by every tenant that sends the same
definitions, so only what the definitions alone decide may be kept on it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Hashable

from tooldisco.core.types import ToolCatalog

#: A cached catalog is found by this many of its first characters (the API's tool arrays of
#: one agent often share a first tool, so a few candidates per prefix are compared in full).
PREFIX = 256
#: Catalogs kept under one prefix; the least recently used goes past it.
PER_PREFIX = 8


class CatalogCache:
    """Recent catalogs of one process, found by their text, bounded by what they hold.

    A tools value is found without decoding it: JSON values delimit themselves, so when the
    body continues at the value's start with a cached catalog's whole text, the value is that
    text. Candidates come by the text's first ``PREFIX`` characters (and the API and member they
    were found under), and each is compared in full (``str.startswith``: a memory compare)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lru: OrderedDict[int, tuple[Hashable, ToolCatalog]] = OrderedDict()
        self._by_prefix: dict[Hashable, list[ToolCatalog]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def find(self, scope: Hashable, body: str, start: int) -> ToolCatalog | None:
        """The cached catalog whose text ``body`` carries at ``start``, or None."""
        with self._lock:
            candidates = list(self._by_prefix.get((scope, body[start:start + PREFIX]), ()))
        for catalog in candidates:
            if body.startswith(catalog.text, start):
                with self._lock:
                    if id(catalog) in self._lru:
                        self._lru.move_to_end(id(catalog))
                return catalog
        return None

    def add(self, scope: Hashable, catalog: ToolCatalog) -> None:
        """Keep ``catalog`` (its ``text`` set); one too short to be found by a prefix, or larger
        than the whole budget, is not kept."""
        size = catalog.nbytes
        if len(catalog.text) < PREFIX or size > self.max_bytes:
            return
        key = (scope, catalog.text[:PREFIX])
        with self._lock:
            if id(catalog) in self._lru:
                return
            same = self._by_prefix.setdefault(key, [])
            same.insert(0, catalog)
            self._lru[id(catalog)] = (key, catalog)
            self._bytes += size
            while len(same) > PER_PREFIX:
                self._drop(same[-1])
            while self._bytes > self.max_bytes and self._lru:
                self._drop(next(iter(self._lru.values()))[1])

    def _drop(self, catalog: ToolCatalog) -> None:
        key, _ = self._lru.pop(id(catalog))
        self._bytes -= catalog.nbytes
        same = self._by_prefix.get(key, [])
        same[:] = [c for c in same if c is not catalog]
        if not same:
            self._by_prefix.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
            self._by_prefix.clear()
            self._bytes = 0

    @property
    def currsize(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._lru)
