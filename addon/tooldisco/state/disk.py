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

Why the store never fails a request: it is an optimisation (a session found no tool yet
looks like a new one), so a store that cannot be opened (read-only, not a database,
locked) or breaks while running (disk full, file removed) leaves requests planned without
state, each store call waiting at most ``timeout`` for SQLite's lock; it is tried again
every ``retry_after`` seconds, and a file that is not a database is moved aside, never
deleted (it may be the only copy of what a user cares about).
"""

from __future__ import annotations

import errno
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from time import sleep as _pause
from typing import Any, TypeVar

import diskcache
from diskcache.core import DBNAME
from loguru import logger

from tooldisco.core.private import private_cache
from tooldisco.state.base import (
    LEARNED_PREFIX,
    LEARNED_TTL,
    PINS_PREFIX,
    PINS_TTL,
    Link,
    SessionState,
    alias_key,
    decode_entry,
    decode_link,
    decode_rounds,
    decode_state,
    encode_entry,
    encode_state,
    is_pins_key,
    learned_key,
    link_entry,
    pins_key,
    rounds_key,
)

T = TypeVar("T")


#: The share of a session's TTL that may go by before an unchanged turn refreshes it: a write
#: per turn would take the store's write lock for nothing, and a session then expires at most
#: this share early.
REFRESH = 0.1


class DiskSessionStore:
    """``SessionStore`` on diskcache: with a sliding TTL and periodic cleanup of expired entries.

    A session lives ``ttl`` past its last update. Entries an older version wrote under
    ``def:`` (tool definitions) are never read: diskcache's own expiry removes them.

    Failing open, like the Redis store: every call waits at most ``timeout`` seconds for
    SQLite's lock; a call that fails (locked past it, read-only, disk full, not a database)
    reads as blank and writes nothing, and for ``retry_after`` seconds calls skip the store,
    then one tries it again (reopening it when it could not be opened). One warning per
    outage says why and what to do; one line says when it is back.
    """

    def __init__(self, directory: Path, ttl: float = 3600.0, cleanup_interval: float = 300.0,
                 timeout: float = 0.3, retry_after: float = 5.0):
        self._directory = Path(directory).expanduser()
        self._timeout = timeout
        self._retry_after = retry_after
        self._cache: diskcache.Cache | None = None
        self._file: tuple[int, int] | None = None  # (device, inode) of the cache.db opened
        self._health = threading.Lock()
        self._down_since: float | None = None
        self._retry_at = 0.0  # monotonic: when calls may try the store again
        self._probing = False  # one call tries a store that failed; the others skip it meanwhile
        self._checked = 0.0  # monotonic: when the file was last checked to be the one opened
        self._corrupt_found: BaseException | None = None  # set: the file in use proved corrupt
        self.failures = 0  # store calls that failed, since start (``engine.metrics`` reads it)
        self._ttl = ttl
        self._cleanup_interval = cleanup_interval
        self._last_cleanup = 0.0
        self._lock = threading.Lock()
        try:  # at start, so a store that cannot be used is reported at once, not at the first request
            self._open()
        except _FAILURES as e:
            self._failed(e, None)

    def get(self, key: str) -> SessionState:
        """A snapshot, for reading only: a change goes through ``update``."""
        self._maybe_cleanup()
        return decode_state(self._call(lambda cache: cache.get(key), None))

    def update(self, key: str, change: Callable[[SessionState], T]) -> T:
        """Read, change and write one session atomically; ``change``'s result.

        Most turns change nothing: the state is read outside any transaction, and only a
        changed state, or a TTL refresh (due once ``REFRESH`` of the TTL went by since the
        last one), takes the store's write lock. The write re-reads the entry in a
        transaction and runs ``change`` again only when another flow wrote it in between, so
        no update is lost. A new session left unchanged stays unwritten. The store unusable:
        ``change`` runs on a blank state, kept nowhere, so the request is planned as a new
        session's; its lock held past ``timeout``: the change is not kept."""
        self._maybe_cleanup()
        result: Any = _NONE

        def transaction(cache: diskcache.Cache) -> None:
            nonlocal result
            data, expires = cache.get(key, expire_time=True)
            before, state = decode_state(data), decode_state(data)
            result = change(state)
            if state == before and (data is None or (expires is not None and
                                                     expires - time.time() > self._ttl * (1 - REFRESH))):
                return
            with cache.transact():
                now = cache.get(key)
                if now != data:  # another flow of the session wrote in between: change what it left
                    before, state = decode_state(now), decode_state(now)
                    result = change(state)
                if state != before:
                    cache.set(key, encode_state(state), expire=self._ttl)
                elif now is not None:
                    cache.touch(key, expire=self._ttl)

        self._call(transaction, None)
        return change(SessionState()) if result is _NONE else result

    def link(self, tenant: str, response_id: str, session: str, pending: list[str], head: str | None = None) -> None:
        """Remember which session a stored response belongs to (and what it still awaits), so a
        request chaining from it (``previous_response_id``) finds its session again. ``head``:
        the response the server really continues from, when the client was shown another id
        (a live stream keeps round one's id, the chain goes on from the last round)."""
        entry = link_entry(session, pending, head)
        self._call(lambda cache: cache.set(alias_key(tenant, response_id), entry, expire=self._ttl), None)

    def linked(self, tenant: str, response_id: str) -> Link | None:
        return decode_link(self._call(lambda cache: cache.get(alias_key(tenant, response_id)), None))

    def keep_rounds(self, tenant: str, session: str, digest: str, rounds: list[str]) -> None:
        """Remember what the upstream really saw (``rounds``: entry texts) for a message stitched
        from hidden rounds, under the digest of that message (``tooldisco.engine.rounds``)."""
        self._call(lambda cache: cache.set(rounds_key(tenant, session, digest), rounds, expire=self._ttl), None)

    def rounds(self, tenant: str, session: str, digest: str) -> list[str] | None:
        """The real rounds behind a stitched message, their TTL extended: the message stays in
        the client's history, and so in every later request of the session."""
        key = rounds_key(tenant, session, digest)

        def read(cache: diskcache.Cache) -> list[str] | None:
            if (found := decode_rounds(cache.get(key))) is not None:
                cache.touch(key, expire=self._ttl)
            return found

        return self._call(read, None)

    def learned(self, tenant: str) -> Any:
        return self._call(lambda cache: cache.get(learned_key(tenant)), None)

    def learn(self, tenant: str, change: Callable[[Any], Any]) -> Any:
        """Optimistic, like Redis's: ``change`` (a merge of a whole tenant's priors) runs outside
        any transaction, since SQLite's write lock would stall every session update meanwhile;
        the write then goes in only if no other writer came in between (a revision counter
        says), else the merge runs again on what that writer left."""
        key = learned_key(tenant)
        rev_key = key + _REVISION

        def attempt(cache: diskcache.Cache) -> Any:
            rev = cache.get(rev_key, 0)  # read before the entry: a write in between shows as a new revision
            entry = change(cache.get(key))
            with cache.transact():
                if cache.get(rev_key, 0) != rev:
                    return _NONE
                cache.set(key, entry, expire=LEARNED_TTL)
                cache.set(rev_key, rev + 1, expire=LEARNED_TTL)
            return entry

        for _ in range(LEARN_ATTEMPTS):
            entry = self._call(attempt, None)
            if entry is not _NONE:
                return entry
        logger.warning("session store: lessons lost the race {} times in a row; dropped", LEARN_ATTEMPTS)
        return None

    def forget(self, tenant: str | None) -> int:
        def wipe(cache: diskcache.Cache) -> int:
            if tenant is not None:
                keys = [learned_key(tenant), learned_key(tenant) + _REVISION]
            else:
                keys = [k for k in cache.iterkeys() if isinstance(k, str) and k.startswith(LEARNED_PREFIX)]
            gone = 0
            for k in keys:  # revision counters go too, but only entries are counted
                if cache.delete(k) and not k.endswith(_REVISION):
                    gone += 1
            return gone

        return self._call(wipe, 0)

    def pins(self, tenant: str) -> Any:
        return self._call(lambda cache: decode_entry(cache.get(pins_key(tenant))), None)

    def pin(self, tenant: str, change: Callable[[Any], Any]) -> Any:
        """Like ``learn``: optimistic, ``change`` outside any transaction, the write only if no other
        writer came in between (the revision counter). The entry is kept as ``encode_entry``'s
        bytes, the very bytes the Redis store keeps. After ``PIN_ATTEMPTS`` lost races the last try
        runs ``change`` inside the transaction (a pin is what a user approved: it is not dropped)."""
        return self.pin_at(pins_key(tenant), change)

    def pin_at(self, key: str, change: Callable[[Any], Any]) -> Any:
        if not is_pins_key(key):
            return None
        rev_key = key + _REVISION

        def write(cache: diskcache.Cache, data: Any, entry: Any, rev: int) -> Any:
            if entry is None or entry is data:  # nothing to write: the TTL slides
                if data is not None:
                    cache.touch(key, expire=PINS_TTL)
                    cache.touch(rev_key, expire=PINS_TTL)
                return entry
            cache.set(key, encode_entry(entry), expire=PINS_TTL)
            cache.set(rev_key, rev + 1, expire=PINS_TTL)
            return entry

        def attempt(cache: diskcache.Cache) -> Any:
            rev = cache.get(rev_key, 0)  # read before the entry: a write in between shows as a new revision
            data = decode_entry(cache.get(key))
            entry = change(data)
            if entry is None or entry is data:
                return write(cache, data, entry, rev)
            with cache.transact():
                if cache.get(rev_key, 0) != rev:
                    return _NONE
                return write(cache, data, entry, rev)

        def locked(cache: diskcache.Cache) -> Any:
            with cache.transact():
                rev = cache.get(rev_key, 0)
                data = decode_entry(cache.get(key))
                return write(cache, data, change(data), rev)

        for _ in range(PIN_ATTEMPTS):
            entry = self._call(attempt, None)
            if entry is not _NONE:
                return entry
            _pause(random.uniform(0, 0.005))  # a lost race: let the winner finish
        return self._call(locked, None)

    def pin_entries(self) -> list[tuple[str, Any]]:
        """Every tenant's pins entry (a walk over every key: for the CLI)."""

        def every(cache: diskcache.Cache) -> list[tuple[str, Any]]:
            keys = sorted(k for k in cache.iterkeys() if isinstance(k, str) and k.startswith(PINS_PREFIX)
                          and is_pins_key(k))
            out = []
            for k in keys:
                raw = cache.get(k)
                if raw is not None:
                    out.append((k, decode_entry(raw)))
            return out

        return self._call(every, [])

    def _maybe_cleanup(self) -> None:
        now = time.monotonic()
        if now - self._last_cleanup < self._cleanup_interval:
            return
        with self._lock:
            if now - self._last_cleanup < self._cleanup_interval:
                return
            self._last_cleanup = now
        # In batches, each its own transaction: a large backlog holds the lock only a batch at a time.
        self._call(lambda cache: cache.expire(), 0)

    # --- failing open ----------------------------------------------------------------------

    def _call(self, op: Callable[[diskcache.Cache], T], blank: T) -> T:
        """``op``'s result on the open store, or ``blank`` when the store is unusable (or was a
        moment ago: see ``retry_after``)."""
        cache = self._usable()
        if cache is None:
            return blank
        try:
            out = op(cache)
        except _FAILURES as e:
            self._failed(e, cache)
            return blank
        self._succeeded()
        return out

    def _usable(self) -> diskcache.Cache | None:
        """The store to use now, opened if it is not; None while it is down and not due a retry.
        While down, one call at a time (the probe) tries it."""
        now = time.monotonic()
        with self._health:
            cache = self._cache
            healthy = self._down_since is None and cache is not None
            if healthy and now - self._checked < self._retry_after:
                return cache
            if healthy:
                self._checked = now
            elif self._probing or now < self._retry_at:
                return None
            else:
                self._probing = True
        if healthy:
            if self._identity() == self._file:
                return cache
            # Removed or replaced under us: SQLite would go on writing to a file no one opens again.
            with self._health:
                if self._cache is cache:
                    self._cache = None
            self._failed(FileNotFoundError(errno.ENOENT, f"{DBNAME} was removed or replaced while in use"), None,
                         retry_now=True)
            return self._usable()  # down and due: this call reopens it
        if cache is not None:
            return cache  # this call is the probe
        try:
            return self._open()
        except _FAILURES as e:
            self._failed(e, None)
            return None

    def _open(self) -> diskcache.Cache:
        """Open the store; a file there that is not a database (or was found corrupt while in
        use) is moved aside and a fresh one made."""
        if self._corrupt_found is not None:
            self._move_aside(self._corrupt_found)
            self._corrupt_found = None
        try:
            cache = private_cache(self._directory, self._timeout)
        except sqlite3.DatabaseError as e:
            if not _corrupt(e):
                raise
            self._move_aside(e)
            cache = private_cache(self._directory, self._timeout)
        with self._health:
            self._cache, self._file, self._checked = cache, self._identity(), time.monotonic()
        return cache

    def _identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self._directory / DBNAME)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _move_aside(self, error: BaseException) -> None:
        """``cache.db`` (and its ``-wal``/``-shm``) renamed with a timestamp suffix, for whoever
        wants to look at it; never deleted."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        moved = []
        for name in (DBNAME, f"{DBNAME}-wal", f"{DBNAME}-shm"):
            src = self._directory / name
            dst = src.with_name(f"{name}.corrupt-{stamp}")
            n = 1
            while dst.exists():
                dst, n = src.with_name(f"{name}.corrupt-{stamp}-{n}"), n + 1
            with suppress(FileNotFoundError):
                src.rename(dst)
                moved.append(dst.name)
        logger.warning("session store: {} was not a usable database ({}); moved aside to {} and a fresh store "
                       "made (sessions start anew)", self._directory / DBNAME, error, ", ".join(moved) or "-")

    def _failed(self, error: BaseException, cache: diskcache.Cache | None, retry_now: bool = False) -> None:
        """Down: calls skip the store for ``retry_after`` seconds. A store found corrupt while open
        is dropped, so the next try reopens it (moving the file aside)."""
        now = time.monotonic()
        with self._health:
            self.failures += 1
            self._probing = False
            self._retry_at = now if retry_now else now + self._retry_after
            if cache is not None and cache is self._cache and _corrupt(error):
                # Opening it may well work again (the header is fine, a page is not): move it aside first.
                self._cache, self._retry_at, self._corrupt_found = None, now, error
            first, self._down_since = self._down_since is None, self._down_since or now
        if first:
            logger.warning("session store at {} is unavailable ({}); requests go through without session state "
                           "until it is back (tried again every {:g} s). {}", self._directory, _describe(error),
                           self._retry_after, _remedy(error))

    def _succeeded(self) -> None:
        with self._health:
            since, self._down_since, self._probing = self._down_since, None, False
        if since is not None:
            logger.info("session store at {} is back after {:.1f} s", self._directory, time.monotonic() - since)

    @property
    def available(self) -> bool:
        """Whether the store is in use (False while it is down)."""
        return self._down_since is None and self._cache is not None

    def __len__(self) -> int:
        return self._call(len, 0)

    def close(self) -> None:
        if self._cache is not None:
            with suppress(*_FAILURES):
                self._cache.close()


# What a store call may raise when the store is unusable: SQLite's errors (locked, read-only,
# full, not a database), diskcache's lock timeout, and the file system's.
_FAILURES = (sqlite3.Error, diskcache.Timeout, OSError)
_NONE: Any = object()
_REVISION = ":rev"  # beside a tenant's learned (or pins) entry: how many writes it has had
LEARN_ATTEMPTS = 5  # optimistic merges of one flush before its lessons are dropped
PIN_ATTEMPTS = 5  # optimistic tries of one pin before it runs inside the transaction


def _corrupt(error: BaseException) -> bool:
    """SQLITE_NOTADB / SQLITE_CORRUPT: a file that is no (longer a) database. An OperationalError
    (locked, read-only, full, I/O) is a state of the system, not of the file."""
    return isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError)


def _describe(error: BaseException) -> str:
    if isinstance(error, diskcache.Timeout):
        return "its lock is held by another process or thread"
    return f"{type(error).__name__}: {error}"


def _remedy(error: BaseException) -> str:
    """What the user can do about it, by the kind of failure."""
    text = str(error).lower()
    if isinstance(error, diskcache.Timeout) or "locked" in text:
        return ("Another process holds the store's write lock: end it, or give this proxy a sessions.dir of its own "
                "(sessions.timeout bounds each wait).")
    if isinstance(error, PermissionError) or "readonly" in text or "read-only" in text or "permission" in text:
        return "Make sessions.dir writable by this user, or point sessions.dir elsewhere."
    if "full" in text or getattr(error, "errno", None) == errno.ENOSPC:
        return "Free disk space where sessions.dir is."
    return "Check sessions.dir, or point it elsewhere."
