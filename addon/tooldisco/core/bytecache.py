"""Memory caches bounded by the bytes they hold, not by how many entries they have.

Why: the keys and values cached in this package come from request bodies whose sizes the
client picks (a user message, a tool definition, the tools of a whole request), so a
bound on the entry count bounds nothing: 50,000 cached user messages held 468 MiB, and 8
cached bodies of 30 MB held 240 MB. Each entry here is charged an estimate of what its key
and value hold, the least recently used entries go once the total passes the budget, and
an entry bigger than the whole budget is computed but never kept.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable, Generic, Hashable, TypeVar

import cachetools

MiB = 1 << 20
# What holding one entry costs beyond its key and value: the slots of cachetools' data, size
# and order maps, the stored (value, size) pair and its size (tracemalloc's figure on CPython,
# rounded up). Uncharged, a cache of short words would hold more in bookkeeping than its
# whole budget.
ENTRY_OVERHEAD = 256

# Caches of parsed tool definitions, once full, keep one new definition in this many (see ``ByteLRU``).
ADMIT_WHEN_FULL = 32

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")

_MISSING: Any = object()


def deep_size(obj: object) -> int:
    """Bytes held by ``obj`` and everything it reaches through containers and instance
    attributes, each object counted once (numpy arrays report their own buffer)."""
    seen: set[int] = set()
    stack = [obj]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, (str, bytes, int, float, bool)) or item is None:
            continue
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (tuple, list, set, frozenset)):
            stack.extend(item)
        elif hasattr(item, "__dict__"):
            stack.append(vars(item))
    return total


# A value's element beyond its container's own slots: a (name, description) pair tuple and
# the two string headers (CPython 3.13: 56 + 2 × 41 bytes, rounded up); the text they hold
# is charged from the key's (``derived_size``).
ITEM_OVERHEAD = 160
STR_HEADER = 80  # an attribute's object without its text (a str: 41 bytes for ASCII, more for wider kinds)
_TEXT = (str, bytes)
_CONTAINERS = (tuple, list, dict, set, frozenset)


def derived_size(key: object, value: object) -> int:
    """What an entry holds when its value is parsed out of its key's text (a tool definition
    text -> its ``Tool``), from lengths alone, without walking the value.

    Why: the walk of ``deep_size`` cost more than the parse it cached, on every one of a
    large catalog's definitions. Charged: the key and its texts; as much text again for the
    value's strings, which are cut from the key's (names, descriptions: never more than the
    key holds, the key's own text shared); the value, a header per attribute and one
    ``ITEM_OVERHEAD`` per element of its containers."""
    text = chars = 0
    wide = False
    for part in key if isinstance(key, tuple) else (key,):
        if isinstance(part, str):
            text += sys.getsizeof(part)
            chars += len(part)
            # JSON's \u escapes are the one way a parsed string gets wider characters than its
            # source (one astral character makes all of it 4 bytes a character).
            wide = wide or "\\u" in part
        elif isinstance(part, bytes):
            text += sys.getsizeof(part)
            chars += len(part)
    total = sys.getsizeof(key) + text + (4 * chars if wide else text) + sys.getsizeof(value)
    fields = getattr(value, "__dict__", None)
    if fields is not None:
        total += sys.getsizeof(fields) + len(fields) * STR_HEADER
        for item in fields.values():
            if isinstance(item, _CONTAINERS):
                total += sys.getsizeof(item) + len(item) * ITEM_OVERHEAD
    return total


def entry_size(key: object, value: object) -> int:
    """What an entry holds; a value sharing objects with its key is not counted twice."""
    return deep_size((key, value))


class ByteLRU(Generic[K, V]):
    """A thread-safe LRU mapping whose entries together hold at most ``max_bytes``."""

    def __init__(self, max_bytes: int, sizeof: Callable[[K, V], int] = entry_size, admit_when_full: int = 1):
        self.max_bytes = max_bytes
        self._sizeof = sizeof
        # Once full, only every n-th new entry is kept (evicting the least recently used).
        # Why: a set of keys visited in turn that is larger than the budget (a huge catalog's
        # definitions, every request) makes a plain LRU evict each entry just before its next
        # use: nothing ever hits. Admitting few keeps most of what is held, so part of such a
        # set hits, and a new working set still replaces an old one, n times more slowly.
        self._admit_when_full = max(1, admit_when_full)
        self._refused = 0
        # cachetools sizes values only, so each value is stored with its entry's size.
        self._lru: cachetools.LRUCache[K, tuple[V, int]] = cachetools.LRUCache(
            maxsize=max_bytes, getsizeof=lambda stored: stored[1]
        )
        self._lock = threading.Lock()

    def get(self, key: K, default: Any = None) -> Any:
        with self._lock:
            try:
                return self._lru[key][0]
            except KeyError:
                return default

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key``, evicting the least recently used entries to make
        room; a value too large for the whole budget is not kept."""
        nbytes = self._sizeof(key, value) + ENTRY_OVERHEAD
        if nbytes > self.max_bytes:
            return
        with self._lock:
            if self._admit_when_full > 1 and key not in self._lru and self._lru.currsize + nbytes > self.max_bytes:
                self._refused += 1
                if self._refused % self._admit_when_full:
                    return
            self._lru[key] = (value, nbytes)

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()

    @property
    def currsize(self) -> int:
        """Bytes charged to the entries held now, their bookkeeping included."""
        return int(self._lru.currsize)

    def __len__(self) -> int:
        return len(self._lru)


def memoize(
    max_bytes: int,
    *,
    key: Callable[..., Hashable] | None = None,
    sizeof: Callable[[Any, Any], int] = entry_size,
    admit_when_full: int = 1,
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Memoize a function of positional arguments in a ``ByteLRU`` of ``max_bytes``.

    ``key(*args)`` replaces the arguments as the cache key, so that a huge argument need
    not be kept alive by the cache; ``admit_when_full``: see ``ByteLRU``. The wrapper has
    ``cache`` and ``cache_clear()``.
    """

    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        cache: ByteLRU[Hashable, R] = ByteLRU(max_bytes, sizeof, admit_when_full)

        @functools.wraps(fn)
        def wrapper(*args: Any) -> R:
            k = args if key is None else key(*args)
            found = cache.get(k, _MISSING)
            if found is not _MISSING:
                return found  # type: ignore[no-any-return]
            value = fn(*args)
            cache.put(k, value)
            return value

        wrapper.cache = cache  # type: ignore[attr-defined]
        wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
        return wrapper

    return decorate
