"""What a session remembers, the protocol every session store keeps, and the codecs they share.

Why one protocol: the engine plans and runs against ``SessionStore`` alone, so the backend
(diskcache on one machine, Redis shared by several proxies) is chosen once, by ``open_store``
(``tooldisco.state.factory``), and nothing else knows which it got.

Why public here: the disk store and the Redis store keep the same entries under the same keys,
so a session written by one reads the same through the other; the codecs are defined once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

MAX_NAMES = 10_000  # per session, in each of kept and expanded

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
        self.expanded = union(self.expanded, names)


@dataclass(frozen=True)
class Link:
    """Where a stored response id leads: its session, results it awaits, the real chain head."""

    session: str
    pending: list[str]
    head: str | None = None


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions, response links and real rounds live, each with a sliding TTL.

    Why ``update`` is the only way to change a session: flows of one session overlap (an
    agent's sub-agents share its session id), so each change is one atomic read-modify-write
    of that session; a read apart from its write would lose the update of a flow in between.

    Why every method fails open: the store is an optimisation (a session that found no tool
    yet looks like a new one), so a store that cannot be used (down, locked, full, corrupt)
    reads as blank and writes nothing, raising none of its own errors (an exception in
    ``change`` is a bug, and propagates) and waiting only a bounded time;
    ``update`` then runs ``change`` on a blank state, kept nowhere, and returns its result.
    """

    def get(self, key: str) -> SessionState:
        """A snapshot of one session, for reading only (blank when absent)."""
        ...

    def update(self, key: str, change: Callable[[SessionState], T]) -> T:
        """Read, change and write one session atomically; ``change``'s result. ``change`` may
        run more than once (a backend may retry on contention): it must be a function of the
        state it is given. A state it leaves unchanged only has its TTL refreshed."""
        ...

    def link(self, tenant: str, response_id: str, session: str, pending: list[str], head: str | None = None) -> None:
        """Remember which session a stored response belongs to, what it awaits, its real head."""
        ...

    def linked(self, tenant: str, response_id: str) -> Link | None:
        """Where a stored response id leads (None: unknown, expired, or the store unusable)."""
        ...

    def keep_rounds(self, tenant: str, session: str, digest: str, rounds: list[str]) -> None:
        """Remember what the upstream really saw behind a stitched message (by its digest)."""
        ...

    def rounds(self, tenant: str, session: str, digest: str) -> list[str] | None:
        """The real rounds behind a stitched message, their TTL extended on read."""
        ...

    def learned(self, tenant: str) -> Any:
        """The tenant's learned priors as stored (``search.priors.Knowledge``'s entry); None when
        nothing is learned, or the store is unusable."""
        ...

    def learn(self, tenant: str, change: Callable[[Any], Any]) -> Any:
        """Read, change and write the tenant's learned priors atomically; the entry written (None:
        the store unusable, nothing kept). ``change`` may run more than once, like ``update``'s."""
        ...

    def forget(self, tenant: str | None) -> int:
        """Wipe one tenant's learned priors, or every tenant's (None); how many entries went."""
        ...

    def pins(self, tenant: str) -> Any:
        """The tenant's pinned tool definitions as stored (``policy.pins``' entry); None when absent,
        or the store is unusable."""
        ...

    def pin(self, tenant: str, change: Callable[[Any], Any]) -> Any:
        """Read, change and write the tenant's pins atomically, like ``learn``; the entry written
        (None: the store unusable, or ``change`` returned None, which writes nothing). ``change``
        gets the entry as stored (None when absent) and may run more than once; returning the
        very object it was given writes nothing but refreshes the entry's TTL (``PINS_TTL``)."""
        ...

    def pin_entries(self) -> list[tuple[str, Any]]:
        """Every tenant's pins entry with its storage key (``pins_key``), for the CLI: a scan, not
        for the request path. Empty when the store is unusable."""
        ...

    def pin_at(self, key: str, change: Callable[[Any], Any]) -> Any:
        """``pin`` by storage key, as ``pin_entries`` names it (the CLI approves without knowing the
        tenant); a key that is not a pins key changes nothing and reads None."""
        ...

    def __len__(self) -> int:
        """Entries stored (for tests and scripts, not the request path)."""
        ...

    def close(self) -> None:
        ...


def session_key(tenant: str, client_session: str | None, first_user: str) -> str:
    """A session's key: bound to its tenant, so two credentials that open alike never share one;
    hashed, so no message text is a key."""
    basis = f"id:{client_session}" if client_session else f"first:{first_user}"
    return hashlib.sha256(f"{tenant}\0{basis}".encode("utf-8", "replace")).hexdigest()[:32]


def union(old: Iterable[str], new: Iterable[str]) -> list[str]:
    """``old`` then the names of ``new`` it lacks, in order; the newest ``MAX_NAMES``."""
    return list(dict.fromkeys([*old, *new]))[-MAX_NAMES:]


def alias_key(tenant: str, response_id: str) -> str:
    """Where a response id's ``Link`` lives, bound to the tenant: another credential sending the
    same id never reaches the session."""
    return "chain:" + hashlib.sha256(f"{tenant}\0{response_id}".encode("utf-8", "replace")).hexdigest()[:32]


def decode_state(data: Any) -> SessionState:
    """A fresh state from a stored entry (fields named one by one: an entry written by an
    older version reads as what it shares with this one)."""
    if not isinstance(data, dict):
        return SessionState()
    return SessionState(list(data.get("expanded", ())),
                        upfront=list(data["upfront"]) if isinstance(data.get("upfront"), list) else None,
                        classic=list(data.get("classic", ())),
                        forwarded={str(k): list(v) for k, v in dict(data.get("forwarded", {})).items()})


def encode_state(state: SessionState) -> dict[str, Any]:
    """The stored entry of a state (plain JSON types: diskcache pickles it, Redis stores it as JSON)."""
    return {"expanded": state.expanded, "upfront": state.upfront, "classic": state.classic,
            "forwarded": state.forwarded}


#: Learned priors outlive sessions: they decay with their own half-life, and an entry no proxy
#: wrote for this long (a tenant gone) is removed by the store's expiry.
LEARNED_TTL = 180 * 86400.0
LEARNED_PREFIX = "learned:"


def learned_key(tenant: str) -> str:
    """Where a tenant's learned priors live: hashed again, like every key, so no tenant hash is a key."""
    return LEARNED_PREFIX + hashlib.sha256(f"learned\0{tenant}".encode("utf-8", "replace")).hexdigest()[:32]


#: Pinned tool definitions (``policy.pins``) are what a tenant approved: they outlive sessions
#: and learned priors; an entry no request refreshed for this long (a tenant gone) expires.
PINS_TTL = 365 * 86400.0
PINS_PREFIX = "pins:"


def pins_key(tenant: str) -> str:
    """Where a tenant's pinned tool definitions live: hashed again, with a domain prefix of its own."""
    return PINS_PREFIX + hashlib.sha256(f"pins\0{tenant}".encode("utf-8", "replace")).hexdigest()[:32]


def is_pins_key(key: str) -> bool:
    """Whether ``key`` is where a tenant's pins live (what ``pin_at`` may change)."""
    rest = key[len(PINS_PREFIX):] if isinstance(key, str) and key.startswith(PINS_PREFIX) else ""
    return len(rest) == 32 and all(c in "0123456789abcdef" for c in rest)


def encode_entry(value: Any) -> bytes:
    """A stored JSON value's bytes, the same in both stores (Redis keeps every value so; the disk
    store keeps pins so): UTF-8, a lone surrogate (a name the client sent escaped) as it is."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def decode_entry(raw: Any) -> Any:
    """The value ``encode_entry`` made (bytes or text); anything unreadable reads as absent."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        return None
    try:
        return json.loads(bytes(raw).decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError):
        return None


def link_entry(session: str, pending: list[str], head: str | None) -> dict[str, Any]:
    return {"session": session, "pending": pending, "head": head}


def rounds_key(tenant: str, session: str, digest: str) -> str:
    """Where the real rounds behind a stitched message live, bound to the tenant and session."""
    return "rounds:" + hashlib.sha256(f"{tenant}\0{session}\0{digest}".encode("utf-8", "replace")).hexdigest()[:32]


def decode_rounds(data: Any) -> list[str] | None:
    """Kept rounds, or None for anything else (an entry unreadable reads as absent)."""
    return data if isinstance(data, list) and all(isinstance(e, str) for e in data) else None


def decode_link(data: Any) -> Link | None:
    """The ``Link`` a stored entry holds (None: absent)."""
    if not isinstance(data, dict):
        return None
    return Link(data["session"], list(data["pending"]), data.get("head"))
