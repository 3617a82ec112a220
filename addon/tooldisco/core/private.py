"""Files only this user can read: folders made 0700, diskcaches whose files are 0600.

Why: sessions, telemetry and the embedding cache hold what the user's conversations found
and the tools' descriptions: the user's business.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import Any, Callable, cast

import diskcache
from diskcache.core import DBNAME, ENOVAL

# Above SQLite's own 1 GB cap on a value: no value ever spills to a file of its own, so the
# only files are SQLite's, which take the database file's mode (see ``private_cache``).
_NEVER_SPILL = 1 << 40
_PAGE_CACHE_PAGES = 512  # × 4 KiB pages: 2 MiB per connection


def private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents readable by the user alone (0700). Folders that
    already exist are left as they are: the telemetry file's may be the user's working dir."""
    missing = []
    for p in (path, *path.parents):
        if p.exists():
            break
        missing.append(p)
    for p in reversed(missing):
        p.mkdir(mode=0o700, exist_ok=True)


class _BoundedCache(diskcache.Cache):  # type: ignore[misc]  # diskcache ships no types
    """diskcache whose every wait for SQLite's lock ends at the connection's ``timeout``.

    diskcache retries statements outside a transaction (its setup, the pragmas each new
    thread's connection sets) for 60 s while another process holds the write lock; a store
    that must answer within a request's budget tries each once, with SQLite's busy timeout."""

    @property
    def _sql_retry(self) -> Callable[..., Any]:
        return cast(Callable[..., Any], self._sql)

    def reset(self, key: str, value: Any = ENOVAL, update: bool = True) -> Any:
        if value is ENOVAL or not key.startswith("sqlite_"):
            return super().reset(key, value, update)
        if update:
            self._sql("UPDATE Settings SET value = ? WHERE key = ?", (value, key))
        pragma = key[len("sqlite_"):]
        try:
            ((old,),) = self._sql(f"PRAGMA {pragma}").fetchall()
        except ValueError:  # a pragma that reads as nothing: set it
            old = ENOVAL
        if old != value:
            self._sql(f"PRAGMA {pragma} = {value}").fetchall()
        setattr(self, key, value)
        return value


def private_cache(directory: Path, timeout: float = 60.0) -> diskcache.Cache:
    """A diskcache only this user can read: the directory 0700, every file in it 0600.

    Why: sessions hold tool names and what the user's conversations found, the
    embedding cache the tools' descriptions: the user's business, like telemetry.
    diskcache creates files with the process umask (0644), so: the directory is made (or,
    made by an older version, tightened to) 0700, which alone puts its contents out of
    others' reach; values never spill to files of their own; and ``cache.db`` is made
    0600, whose mode SQLite gives its ``-wal`` and ``-shm`` files when it creates them.

    ``timeout``: seconds any statement waits for another connection's write lock."""
    directory = directory.expanduser()
    private_dir(directory)
    directory.chmod(0o700)
    # SQLite's page cache and memory map are per connection, and diskcache opens one per
    # thread: at its defaults (32 MiB cache + 64 MiB map) each worker thread's RSS grows
    # with the database. 2 MiB of page cache and no map keep a session store's memory flat.
    cache = _BoundedCache(str(directory), timeout=timeout, disk_min_file_size=_NEVER_SPILL,
                          sqlite_cache_size=_PAGE_CACHE_PAGES, sqlite_mmap_size=0)
    for name in (DBNAME, f"{DBNAME}-wal", f"{DBNAME}-shm"):
        with suppress(FileNotFoundError):
            (directory / name).chmod(0o600)
    return cache
