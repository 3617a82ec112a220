"""Per-session discovery state, in diskcache so it survives a proxy restart.

Why keyed by tenant: two users who both open with "hi" must never see each other's
tools. The tenant is a hash of the credential (``tenants.py``, never the credential
itself); the session is the client's own session id when it sends one, else the first
user message.

Why every update is one transaction that merges: flows of one session overlap (an
agent's sub-agents share its session id), so a read apart from its write would lose the
update of a flow in between, and a kept set overwritten whole by each flow would thrash
between the sub-agents' tool lists.

Why definitions are stored apart, by content: a catalog holds up to 10,000 definitions
and every session of every user of one MCP server sends the same ones. Each is stored
once under ``def:<sha256 of its text>``; a session holds only name -> digest.
"""

from __future__ import annotations

import hashlib
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, TypeVar

import diskcache
from diskcache.core import DBNAME

from .telemetry import private_dir

MAX_NAMES = 10_000  # per session, in each of kept, expanded and the catalog
MAX_DEFINITION_BYTES = 1 << 20  # a larger definition is not kept for later turns
MAX_EXTENDED = 100_000  # digests whose recent expiry extension a disk store remembers (~10 MB)
# Above SQLite's own 1 GB cap on a value: no value ever spills to a file of its own, so the
# only files are SQLite's, which take the database file's mode (see ``private_cache``).
_NEVER_SPILL = 1 << 40
_PAGE_CACHE_PAGES = 512  # × 4 KiB pages: 2 MiB per connection

T = TypeVar("T")


@dataclass
class SessionState:
    """What a session remembers between requests."""

    expanded: list[str] = field(default_factory=list)  # found by search, in discovery order
    catalog: dict[str, str] = field(default_factory=dict)  # deferred name -> digest of its definition
    api: str = ""  # the wire API the catalog's definitions are written for
    refreshed: float = 0.0  # wall time the catalog's definitions last had their TTL extended
    # tool-search and api, classic and native: the tools forwarded loaded (not deferred), chosen on the
    # session's first planned turn and reused as they are, so tools[] stays byte-identical (None: not chosen yet).
    upfront: list[str] | None = None
    classic: list[str] = field(default_factory=list)  # models whose API refused native deferral here
    # Relevance: per client tool list (``relevance.tool_list_key``), the names forwarded, in order.
    forwarded: dict[str, list[str]] = field(default_factory=dict)
    # Definitions this update brings (digest -> text): the store writes them, never as part of the state.
    incoming: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def expand(self, names: Iterable[str]) -> None:
        self.expanded = _union(self.expanded, names)

    def remember(self, api: str, deferred: Mapping[str, str]) -> None:
        """Record one request's deferred tools (name -> definition), which a later search
        may reach. Names it did not send stay: they belong to another flow of the session (a
        sub-agent with other tools). A definition is in the wire format of one API: a session
        switching APIs starts a new catalog."""
        if api != self.api:
            self.api, self.catalog = api, {}
        if deferred:
            self._defer(deferred)

    def earlier(self, current: Collection[str]) -> dict[str, str]:
        """name -> digest of the catalog's tools absent from ``current``."""
        return {n: d for n, d in self.catalog.items() if n not in current}

    def _defer(self, tools: Mapping[str, str]) -> None:
        """Add this request's definitions; past ``MAX_NAMES`` the oldest names it did not send go first."""
        fresh: dict[str, str] = {}
        for name, raw in tools.items():
            data = raw.encode("utf-8", "surrogatepass")
            if len(data) > MAX_DEFINITION_BYTES or len(fresh) == MAX_NAMES:
                continue
            digest = hashlib.sha256(data).hexdigest()
            fresh[name] = digest
            self.incoming[digest] = raw
        merged = {n: d for n, d in self.catalog.items() if n not in tools or n in fresh} | fresh
        for name in list(islice((n for n in merged if n not in fresh), max(len(merged) - MAX_NAMES, 0))):
            del merged[name]
        self.catalog = merged


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


def _definition_key(digest: str) -> str:
    return f"def:{digest}"


def _alias(tenant: str, response_id: str) -> str:
    return "chain:" + hashlib.sha256(f"{tenant}\0{response_id}".encode("utf-8", "replace")).hexdigest()[:32]


def _state(data: Any) -> SessionState:
    """A fresh state from a stored entry (fields named one by one: an entry written by an
    older version reads as what it shares with this one)."""
    if not isinstance(data, dict):
        return SessionState()
    return SessionState(list(data.get("expanded", ())), dict(data.get("catalog", {})),
                        str(data.get("api", "")), float(data.get("refreshed", 0.0)),
                        upfront=list(data["upfront"]) if isinstance(data.get("upfront"), list) else None,
                        classic=list(data.get("classic", ())),
                        forwarded={str(k): list(v) for k, v in dict(data.get("forwarded", {})).items()})


def _entry(state: SessionState) -> dict[str, Any]:
    return {"expanded": state.expanded, "catalog": state.catalog, "api": state.api,
            "refreshed": state.refreshed, "upfront": state.upfront, "classic": state.classic,
            "forwarded": state.forwarded}


def settle(before: SessionState, state: SessionState, ttl: float) -> set[str] | None:
    """After ``change``: None when the state is unchanged (only its TTL is extended), else the
    digests whose definitions to write or extend. Every store follows these expiry rules (see
    ``SessionStore``): the new digests, or all of them once per ``ttl`` (``refreshed``)."""
    now = time.time()
    if state.catalog and now - state.refreshed >= ttl:
        state.refreshed = now
    if state == before:
        return None
    digests = set(state.catalog.values())
    return digests if state.refreshed != before.refreshed else digests - set(before.catalog.values())


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

    Definitions (``def:<digest>``) are shared across sessions and tenants. That leaks
    nothing: a session only ever reads the digests its own requests recorded, and to name
    another tenant's definition by digest one must already know its exact text. Nor does
    it tell whether another tenant sent a definition: a request that brings one behaves
    the same whether it was stored already or not.

    Their expiry: a definition lives ``2 × ttl`` from when it was written or last
    refreshed, and a session refreshes all of its own once per ``ttl`` (on an update at
    least ``ttl`` after the last refresh). A session lives ``ttl`` past its last update,
    so it never outlives its definitions, an unreferenced definition is gone within
    ``2 × ttl`` by diskcache's own expiry (the periodic cleanup), and a turn costs no
    per-definition write. A sweep finding unreferenced digests would have to read every
    session, and would race with a proxy sharing the directory that just recorded one.
    """

    def __init__(self, directory: Path, ttl: float = 3600.0, cleanup_interval: float = 300.0):
        self._cache = private_cache(directory)
        self._ttl = ttl
        self._cleanup_interval = cleanup_interval
        self._last_cleanup = 0.0
        self._lock = threading.Lock()
        # digest -> monotonic time this process last set its definition's expiry. Sessions that
        # share a catalog (one agent's MCP servers) would each extend every definition again on
        # their first turn: one SQLite statement per tool in the request's path.
        self._extended: dict[str, float] = {}

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
            if (extend := settle(before, state, self._ttl)) is None:
                self._cache.touch(key, expire=self._ttl)
            else:
                self._write_definitions(state, extend)
                self._cache.set(key, _entry(state), expire=self._ttl)
        return result

    def definitions(self, digests: Iterable[str]) -> dict[str, str]:
        """digest -> definition, for those still stored."""
        out = {}
        for digest in digests:
            if isinstance(raw := self._cache.get(_definition_key(digest)), str):
                out[digest] = raw
        return out

    def _write_definitions(self, state: SessionState, digests: set[str]) -> None:
        """Extend the expiry of these definitions, writing those not stored yet that this update
        brings. One this process extended less than ``ttl / 2`` ago is skipped: it still lives
        more than ``1.5 × ttl``, longer than the session written now (expiry only ever grows)."""
        expire = 2 * self._ttl
        now = time.monotonic()
        for digest in digests:
            if now - self._extended.get(digest, -expire) < self._ttl / 2:
                continue
            key = _definition_key(digest)
            if not self._cache.touch(key, expire=expire):
                if digest not in state.incoming:
                    continue
                self._cache.set(key, state.incoming[digest], expire=expire)
            self._extended[digest] = now
        if len(self._extended) > MAX_EXTENDED:  # the first-remembered half goes: forgetting costs one touch
            for digest in list(islice(self._extended, len(self._extended) // 2)):
                del self._extended[digest]

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
