"""Per-session discovery state, in diskcache so it survives a proxy restart.

Why keyed by tenant: two users who both open with "hi" must never see each other's
tools. The tenant is a hash of the credential (never the credential itself); the
session is the client's own session id when it sends one, else the first user message.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import diskcache

# Headers that identify the caller. SigV4 signs every request anew, so only its access key id counts.
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "x-goog-api-key", "api-key", "proxy-authorization")
_SIGV4_KEY = re.compile(r"Credential=([^/,\s]+)")


@dataclass
class SessionState:
    """What a session remembers between requests."""

    kept: list[str] = field(default_factory=list)  # names forwarded upfront, sticky across turns
    expanded: list[str] = field(default_factory=list)  # found by search, in discovery order
    deferred: dict[str, str] = field(default_factory=dict)  # name -> raw definition
    api: str = ""

    def expand(self, names: list[str]) -> None:
        for n in names:
            if n not in self.expanded:
                self.expanded.append(n)


@dataclass(frozen=True)
class Link:
    """Where a stored response id leads: its session, results it awaits, the real chain head."""

    session: str
    pending: list[str]
    head: str | None = None


def tenant_of(headers: Mapping[str, str]) -> str:
    """A hash standing for the caller's credential; the value itself is never stored."""
    h = hashlib.sha256()
    for name in CREDENTIAL_HEADERS:
        value = headers.get(name)
        if not value:
            continue
        if name == "authorization" and value.startswith("AWS4-HMAC-SHA256"):
            m = _SIGV4_KEY.search(value)
            value = m.group(1) if m else value
        h.update(name.encode() + b"\0" + value.encode("utf-8", "replace") + b"\0")
    return h.hexdigest()[:32]


def session_key(tenant: str, client_session: str | None, first_user: str) -> str:
    basis = f"id:{client_session}" if client_session else f"first:{first_user}"
    return hashlib.sha256(f"{tenant}\0{basis}".encode("utf-8", "replace")).hexdigest()[:32]


def _alias(tenant: str, response_id: str) -> str:
    return "chain:" + hashlib.sha256(f"{tenant}\0{response_id}".encode("utf-8", "replace")).hexdigest()[:32]


class SessionStore:
    """diskcache-backed store with a sliding TTL and periodic cleanup of expired entries."""

    def __init__(self, directory: Path, ttl: float = 3600.0, cleanup_interval: float = 300.0):
        directory.mkdir(parents=True, exist_ok=True)
        self._cache = diskcache.Cache(str(directory))
        self._ttl = ttl
        self._cleanup_interval = cleanup_interval
        self._last_cleanup = 0.0
        self._lock = threading.Lock()

    def get(self, key: str) -> SessionState:
        self._maybe_cleanup()
        data = self._cache.get(key)
        return SessionState(**data) if isinstance(data, dict) else SessionState()

    def put(self, key: str, state: SessionState) -> None:
        self._cache.set(key, asdict(state), expire=self._ttl)

    def update(self, key: str, change: Callable[[SessionState], object]) -> SessionState:
        """Read, change and write one session atomically (flows of one session may overlap).

        ``change`` returning False means nothing changed: the entry's TTL is refreshed
        instead of rewriting a catalog that may hold thousands of definitions."""
        with self._cache.transact():
            state = self.get(key)
            if change(state) is False and key in self._cache:
                self._cache.touch(key, expire=self._ttl)
            else:
                self.put(key, state)
        return state

    def link(self, tenant: str, response_id: str, session: str, pending: list[str], head: str | None = None) -> None:
        """Remember which session a stored response belongs to (and what it still awaits), so a
        request chaining from it (``previous_response_id``) finds its session again. ``head``:
        the response the server really continues from, when the client was shown another id
        (a live stream keeps round one's id, the chain goes on from the last round)."""
        self._cache.set(_alias(tenant, response_id), {"session": session, "pending": pending, "head": head},
                        expire=self._ttl)

    def linked(self, tenant: str, response_id: str) -> Link | None:
        data = self._cache.get(_alias(tenant, response_id))
        if not isinstance(data, dict):
            return None
        return Link(data["session"], list(data["pending"]), data.get("head"))

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
