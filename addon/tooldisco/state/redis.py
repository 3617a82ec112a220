"""The session store on Redis, so several proxies share their sessions.

Why: behind a load balancer, or with agents moving between machines, a tool found through
one proxy must be loaded by the next without a second search. The semantics are the protocol's
(``state.base.SessionStore``) and the disk store's, on the same keys under a prefix:
sessions by tenant-bound key with a sliding TTL, response links under ``chain:``, real
rounds under ``rounds:``, learned priors under ``learned:``, pinned tool definitions under
``pins:`` (their bytes the disk store's: ``state.base.encode_entry``). What differs:

- Atomic read-modify-write across processes is optimistic: WATCH the session, read it,
  run ``change``, write it in MULTI/EXEC; another writer in between fails the EXEC and the
  update runs again on what that writer left. ``change`` may therefore run more than once:
  it must be a function of the state it is given (the planner's and runner's are).
- Redis expires keys itself: no cleanup pass.
- Redis may be down or slow. Every call then fails open: reads are blank, writes are
  dropped, ``update`` runs ``change`` on a blank state and returns its result, so the
  request goes through as if the session were new. Short timeouts bound the wait (each
  command's, and an update's optimistic retries together); a
  circuit breaker stops asking for ``retry_after`` seconds after a failure, then lets one
  call probe. One warning per outage says why, one line says when Redis is back.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis
from loguru import logger
from redis.backoff import NoBackoff
from redis.retry import Retry

from tooldisco.config import RedisSettings
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

MAX_ATTEMPTS = 50  # optimistic tries of one update under contention before it is dropped
_BACKOFF_S = (0.001, 0.05)  # after a lost race: a random pause, growing with each try up to the cap
_NONE: Any = object()
_SAME: Any = object()  # a transaction's step leaves the value as it is (its TTL is refreshed)


class _Breaker:
    """Closed: calls go to Redis. After a failure, open for ``retry_after`` seconds (calls
    fail open without waiting for a timeout each), then one call probes; a success closes it."""

    def __init__(self, where: str, retry_after: float):
        self._where = where
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._probing = False
        self.failures = 0  # calls that failed, since start

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def allows(self) -> bool:
        with self._lock:
            if self._down_since is None:
                return True
            if self._probing or time.monotonic() < self._retry_at:
                return False
            self._probing = True
            return True

    def failed(self, error: Exception) -> None:
        with self._lock:
            now = time.monotonic()
            self.failures += 1
            self._probing = False
            self._retry_at = now + self._retry_after
            if self._down_since is not None:
                return
            self._down_since = now
        logger.warning("session store: Redis at {} is unavailable ({}: {}); requests go through without session "
                       "state until it is back (next try in {:g} s)", self._where, type(error).__name__, error,
                       self._retry_after)

    def succeeded(self) -> None:
        with self._lock:
            since, self._down_since, self._probing = self._down_since, None, False
        if since is not None:
            logger.info("session store: Redis at {} is back after {:.1f} s", self._where, time.monotonic() - since)


class RedisSessionStore:
    """``SessionStore`` on Redis: the same methods, the same expiry rules, failing open."""

    def __init__(self, settings: RedisSettings, ttl: float = 3600.0):
        tls: dict[str, Any] = {}
        if settings.url.startswith("rediss://"):
            tls = {"ssl_ca_certs": settings.ca_file, "ssl_certfile": settings.cert_file,
                   "ssl_keyfile": settings.key_file}
        # No client-side retries: a failure opens the breaker instead of tripling the wait.
        self._redis = redis.Redis.from_url(
            settings.url, socket_timeout=settings.timeout, socket_connect_timeout=settings.timeout,
            retry=Retry(NoBackoff(), 0), health_check_interval=30, **tls)
        self._prefix = settings.prefix
        self._ttl_ms = max(int(ttl * 1000), 1)
        self._budget = settings.timeout  # optimistic retries of one update stop past it, like one slow command
        self._breaker = _Breaker(settings.where(), settings.retry_after)

    def get(self, key: str) -> SessionState:
        """A snapshot, for reading only: a change goes through ``update``."""
        return decode_state(self._call(lambda: _decode(self._redis.get(self._prefix + key)), None))

    def update(self, key: str, change: Callable[[SessionState], T]) -> T:
        """Read, change and write one session atomically (WATCH/MULTI/EXEC, retried when another
        writer came in between); ``change``'s result. ``change`` may run more than once."""

        def step(data: Any) -> tuple[Any, T]:
            before, state = decode_state(data), decode_state(data)
            result = change(state)
            # A new session left unchanged stays unwritten; a changed one is written whole.
            return (_SAME if state == before else encode_state(state)), result

        result = self._call(lambda: self._transact(self._prefix + key, step, self._ttl_ms), _NONE)
        return change(SessionState()) if result is _NONE else result

    def learned(self, tenant: str) -> Any:
        return self._call(lambda: _decode(self._redis.get(self._prefix + learned_key(tenant))), None)

    def learn(self, tenant: str, change: Callable[[Any], Any]) -> Any:
        """The tenant's priors read, changed and written atomically (like ``update``)."""

        def step(data: Any) -> tuple[Any, Any]:
            entry = change(data)
            return entry, entry

        return self._call(lambda: self._transact(self._prefix + learned_key(tenant), step,
                                                    int(LEARNED_TTL * 1000)), None)

    def forget(self, tenant: str | None) -> int:
        if tenant is not None:
            return int(self._call(lambda: self._redis.delete(self._prefix + learned_key(tenant)), 0))
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self._prefix + LEARNED_PREFIX) + "*"

        def every() -> int:
            keys = list(self._redis.scan_iter(match=pattern, count=1000))
            return int(self._redis.delete(*keys)) if keys else 0

        return self._call(every, 0)

    def pins(self, tenant: str) -> Any:
        return self._call(lambda: _decode(self._redis.get(self._prefix + pins_key(tenant))), None)

    def pin(self, tenant: str, change: Callable[[Any], Any]) -> Any:
        """The tenant's pins read, changed and written atomically (like ``learn``)."""
        return self.pin_at(pins_key(tenant), change)

    def pin_at(self, key: str, change: Callable[[Any], Any]) -> Any:
        if not is_pins_key(key):
            return None

        def step(data: Any) -> tuple[Any, Any]:
            entry = change(data)
            # The same object (or None: nothing to write) leaves the value as it is, its TTL refreshed.
            return (_SAME if entry is None or entry is data else entry), entry

        return self._call(lambda: self._transact(self._prefix + key, step, int(PINS_TTL * 1000)), None)

    def pin_entries(self) -> list[tuple[str, Any]]:
        """Every tenant's pins entry (a scan, then MGET in batches: for the CLI)."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self._prefix + PINS_PREFIX) + "*"

        def every() -> list[tuple[str, Any]]:
            keys = sorted(set(self._redis.scan_iter(match=pattern, count=1000)))
            out = []
            for i in range(0, len(keys), 500):
                batch = keys[i:i + 500]
                for k, raw in zip(batch, self._redis.mget(batch)):
                    key = k.decode("utf-8", "surrogateescape")[len(self._prefix):]
                    if raw is not None and is_pins_key(key):
                        out.append((key, _decode(raw)))
            return out

        return self._call(every, [])

    def _call(self, op: Callable[[], T], blank: T) -> T:
        """``op``'s result, or ``blank`` when Redis fails (or failed a moment ago)."""
        if not self._breaker.allows():
            return blank
        try:
            out = op()
        except redis.RedisError as e:
            self._breaker.failed(e)
            return blank
        self._breaker.succeeded()
        return out

    def _transact(self, skey: str, step: Callable[[Any], tuple[Any, T]], ttl_ms: int) -> T:
        """WATCH ``skey``, read it, ``step`` it into (the value to write or ``_SAME``, a result),
        write it in MULTI/EXEC with ``ttl_ms``; retried after a lost race, within the budget."""
        result: Any = _NONE
        deadline = time.monotonic() + self._budget
        tries = 0
        for attempt in range(MAX_ATTEMPTS):
            if attempt and time.monotonic() > deadline:
                break
            tries += 1
            with self._redis.pipeline() as pipe:
                try:
                    cast(Any, pipe).watch(skey)  # typed in some redis releases only
                    value, result = step(_decode(pipe.get(skey)))
                    pipe.multi()
                    if value is _SAME:
                        pipe.pexpire(skey, ttl_ms)
                    else:
                        pipe.set(skey, _encode(value), px=ttl_ms)
                    pipe.execute()
                    return cast(T, result)
                except redis.WatchError:
                    time.sleep(random.uniform(0, min(_BACKOFF_S[0] * 2 ** attempt, _BACKOFF_S[1])))
        logger.warning("session store: an update lost the race {} times in a row; dropped", tries)
        return cast(T, result)

    def link(self, tenant: str, response_id: str, session: str, pending: list[str], head: str | None = None) -> None:
        """Remember which session a stored response belongs to (see ``SessionStore.link``)."""
        entry = _encode(link_entry(session, pending, head))
        self._call(lambda: self._redis.set(self._prefix + alias_key(tenant, response_id), entry, px=self._ttl_ms), None)

    def linked(self, tenant: str, response_id: str) -> Link | None:
        return decode_link(self._call(lambda: _decode(self._redis.get(self._prefix + alias_key(tenant, response_id))), None))

    def keep_rounds(self, tenant: str, session: str, digest: str, rounds: list[str]) -> None:
        """Remember the real rounds behind a stitched message (see ``SessionStore.keep_rounds``)."""
        entry = _encode(rounds)
        self._call(lambda: self._redis.set(self._prefix + rounds_key(tenant, session, digest), entry,
                                           px=self._ttl_ms), None)

    def rounds(self, tenant: str, session: str, digest: str) -> list[str] | None:
        """The real rounds behind a stitched message, their TTL extended (GETEX: in the same call)."""
        key = self._prefix + rounds_key(tenant, session, digest)
        return decode_rounds(self._call(lambda: _decode(self._redis.getex(key, px=self._ttl_ms)), None))

    @property
    def available(self) -> bool:
        """Whether Redis is in use (False from a failure until a call succeeds again)."""
        return not self._breaker.down

    @property
    def failures(self) -> int:
        """Calls that failed, since start (``engine.metrics`` reads it)."""
        return self._breaker.failures

    def __len__(self) -> int:
        """Keys under the prefix (a scan: for tests and scripts, not the request path)."""
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self._prefix) + "*"
        return self._call(lambda: sum(1 for _ in self._redis.scan_iter(match=pattern, count=1000)), 0)

    def close(self) -> None:
        self._redis.close()


def _encode(value: Any) -> bytes:
    """JSON as UTF-8; a lone surrogate (a name the client sent escaped) passes as it is. The
    codec is ``state.base``'s: the disk store keeps pins in the same bytes."""
    return encode_entry(value)


def _decode(raw: Any) -> Any:
    """A stored JSON value; anything unreadable reads as absent (a blank session)."""
    return decode_entry(raw)
