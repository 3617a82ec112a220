"""Per-session discovery state, in diskcache so it survives a proxy restart.

Why keyed by tenant: two users who both open with "hi" must never see each other's
tools. The tenant is a hash of the credential (``tenants.py``, never the credential
itself); the session is the client's own session id when it sends one, else the first
user message.

Why every update is one transaction that merges: flows of one session overlap (an
agent's sub-agents share its session id), so a read apart from its write would lose the
update of a flow in between, and a kept set overwritten whole by each flow would thrash
between the sub-agents' tool lists.

Why a session holds tool names and never a definition: a session keyed by a credential
several clients share (an organisation's or CI's API key) with no session id of their own
is shared by every client that opens with the same message. Names found, kept upfront or
forwarded only order and pin the tools a request itself sends; a definition kept from one
request and supplied to another would hand one client's tool to another client's model.
"""

from __future__ import annotations

import hashlib
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import diskcache
from diskcache.core import DBNAME

from .telemetry import private_dir

MAX_NAMES = 10_000  # per session, in each of kept and expanded
# Above SQLite's own 1 GB cap on a value: no value ever spills to a file of its own, so the
# only files are SQLite's, which take the database file's mode (see ``private_cache``).
_NEVER_SPILL = 1 << 40
_PAGE_CACHE_PAGES = 512  # × 4 KiB pages: 2 MiB per connection

T = TypeVar("T")


@dataclass
class SessionState:
    """What a session remembers between requests."""

    expanded: list[str] = field(default_factory=list)  # found by search, in discovery order
    # tool-search and api, classic and native: the tools forwarded loaded (not deferred), chosen on the
    # session's first planned turn and reused as they are, so tools[] stays byte-identical (None: not chosen yet).
    upfront: list[str] | None = None
    classic: list[str] = field(default_factory=list)  # models whose API refused native deferral here
    # Relevance: per client tool list (``relevance.tool_list_key``), the names forwarded, in order.
    forwarded: dict[str, list[str]] = field(default_factory=dict)

    def expand(self, names: Iterable[str]) -> None:
        self.expanded = _union(self.expanded, names)


@dataclass(frozen=True)
class Link:
    """Where a stored response id leads: its session, results it awaits, the real chain head."""

    session: str
    pending: list[str]
    head: str | None = None


def session_key(tenant: str, client_session: str | None, first_user: str) -> str:
    basis = f"id:{client_session}" if client_session else f"first:{first_user}"
    return hashlib.sha256(f"{tenant}\0{basis}".encode("utf-8", "replace")).hexdigest()[:32]


def private_cache(directory: Path) -> diskcache.Cache:
    """A diskcache only this user can read: the directory 0700, every file in it 0600.

    Why: sessions hold tool definitions and what the user's conversations found, the
    embedding cache the tools' descriptions: the user's business, like telemetry.
    diskcache creates files with the process umask (0644), so: the directory is made (or,
    made by an older version, tightened to) 0700, which alone puts its contents out of
    others' reach; values never spill to files of their own; and ``cache.db`` is made
    0600, whose mode SQLite gives its ``-wal`` and ``-shm`` files when it creates them."""
    directory = directory.expanduser()
    private_dir(directory)
    directory.chmod(0o700)
    # SQLite's page cache and memory map are per connection, and diskcache opens one per
    # thread: at its defaults (32 MiB cache + 64 MiB map) each worker thread's RSS grows
    # with the database. 2 MiB of page cache and no map keep a session store's memory flat.
    cache = diskcache.Cache(str(directory), disk_min_file_size=_NEVER_SPILL,
                            sqlite_cache_size=_PAGE_CACHE_PAGES, sqlite_mmap_size=0)
    for name in (DBNAME, f"{DBNAME}-wal", f"{DBNAME}-shm"):
        with suppress(FileNotFoundError):
            (directory / name).chmod(0o600)
    return cache


def _union(old: Iterable[str], new: Iterable[str]) -> list[str]:
    """``old`` then the names of ``new`` it lacks, in order; the newest ``MAX_NAMES``."""
    return list(dict.fromkeys([*old, *new]))[-MAX_NAMES:]


def _alias(tenant: str, response_id: str) -> str:
    return "chain:" + hashlib.sha256(f"{tenant}\0{response_id}".encode("utf-8", "replace")).hexdigest()[:32]


def _state(data: Any) -> SessionState:
    """A fresh state from a stored entry (fields named one by one: an entry written by an
    older version reads as what it shares with this one)."""
    if not isinstance(data, dict):
        return SessionState()
    return SessionState(list(data.get("expanded", ())),
                        upfront=list(data["upfront"]) if isinstance(data.get("upfront"), list) else None,
                        classic=list(data.get("classic", ())),
                        forwarded={str(k): list(v) for k, v in dict(data.get("forwarded", {})).items()})


def _entry(state: SessionState) -> dict[str, Any]:
    return {"expanded": state.expanded, "upfront": state.upfront, "classic": state.classic,
            "forwarded": state.forwarded}


def _link_entry(session: str, pending: list[str], head: str | None) -> dict[str, Any]:
    return {"session": session, "pending": pending, "head": head}


def _rounds_key(tenant: str, session: str, digest: str) -> str:
    return "rounds:" + hashlib.sha256(f"{tenant}\0{session}\0{digest}".encode("utf-8", "replace")).hexdigest()[:32]


def _rounds(data: Any) -> list[str] | None:
    return data if isinstance(data, list) and all(isinstance(e, str) for e in data) else None


def _link(data: Any) -> Link | None:
    if not isinstance(data, dict):
        return None
    return Link(data["session"], list(data["pending"]), data.get("head"))


class SessionStore:
    """diskcache-backed store with a sliding TTL and periodic cleanup of expired entries.

    A session lives ``ttl`` past its last update. Entries an older version wrote under
    ``def:`` (tool definitions) are never read: diskcache's own expiry removes them."""

    def __init__(self, directory: Path, ttl: float = 3600.0, cleanup_interval: float = 300.0):
        self._cache = private_cache(directory)
        self._ttl = ttl
        self._cleanup_interval = cleanup_interval
        self._last_cleanup = 0.0
        self._lock = threading.Lock()

    def get(self, key: str) -> SessionState:
        """A snapshot, for reading only: a change goes through ``update``."""
        self._maybe_cleanup()
        return _state(self._cache.get(key))

    def update(self, key: str, change: Callable[[SessionState], T]) -> T:
        """Read, change and write one session in one transaction; ``change``'s result.

        Keep ``change`` short: the whole store is locked for writes while it runs. A state
        it leaves unchanged only has its TTL refreshed (a new session stays unwritten)."""
        self._maybe_cleanup()
        with self._cache.transact():
            data = self._cache.get(key)
            before, state = _state(data), _state(data)
            result = change(state)
            if state == before:
                self._cache.touch(key, expire=self._ttl)
            else:
                self._cache.set(key, _entry(state), expire=self._ttl)
        return result

    def link(self, tenant: str, response_id: str, session: str, pending: list[str], head: str | None = None) -> None:
        """Remember which session a stored response belongs to (and what it still awaits), so a
        request chaining from it (``previous_response_id``) finds its session again. ``head``:
        the response the server really continues from, when the client was shown another id
        (a live stream keeps round one's id, the chain goes on from the last round)."""
        self._cache.set(_alias(tenant, response_id), _link_entry(session, pending, head), expire=self._ttl)

    def linked(self, tenant: str, response_id: str) -> Link | None:
        return _link(self._cache.get(_alias(tenant, response_id)))

    def keep_rounds(self, tenant: str, session: str, digest: str, rounds: list[str]) -> None:
        """Remember what the upstream really saw (``rounds``: entry texts) for a message stitched
        from hidden rounds, under the digest of that message (``tooldisco.rounds``)."""
        self._cache.set(_rounds_key(tenant, session, digest), rounds, expire=self._ttl)

    def rounds(self, tenant: str, session: str, digest: str) -> list[str] | None:
        """The real rounds behind a stitched message, their TTL extended: the message stays in
        the client's history, and so in every later request of the session."""
        key = _rounds_key(tenant, session, digest)
        if (found := _rounds(self._cache.get(key))) is not None:
            self._cache.touch(key, expire=self._ttl)
        return found

    def _maybe_cleanup(self) -> None:
        now = time.monotonic()
        if now - self._last_cleanup < self._cleanup_interval:
            return
        with self._lock:
            if now - self._last_cleanup < self._cleanup_interval:
                return
            self._last_cleanup = now
        self._cache.expire()

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        self._cache.close()
