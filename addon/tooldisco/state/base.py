"""What a session remembers, and the codecs every session store shares.

Why public here: the disk store and the Redis store keep the same entries under the same keys,
so a session written by one reads the same through the other; the codecs are defined once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable

MAX_NAMES = 10_000  # per session, in each of kept and expanded


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


def session_key(tenant: str, client_session: str | None, first_user: str) -> str:
    basis = f"id:{client_session}" if client_session else f"first:{first_user}"
    return hashlib.sha256(f"{tenant}\0{basis}".encode("utf-8", "replace")).hexdigest()[:32]


def union(old: Iterable[str], new: Iterable[str]) -> list[str]:
    """``old`` then the names of ``new`` it lacks, in order; the newest ``MAX_NAMES``."""
    return list(dict.fromkeys([*old, *new]))[-MAX_NAMES:]


def alias_key(tenant: str, response_id: str) -> str:
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
    return {"expanded": state.expanded, "upfront": state.upfront, "classic": state.classic,
            "forwarded": state.forwarded}


def link_entry(session: str, pending: list[str], head: str | None) -> dict[str, Any]:
    return {"session": session, "pending": pending, "head": head}


def rounds_key(tenant: str, session: str, digest: str) -> str:
    return "rounds:" + hashlib.sha256(f"{tenant}\0{session}\0{digest}".encode("utf-8", "replace")).hexdigest()[:32]


def decode_rounds(data: Any) -> list[str] | None:
    return data if isinstance(data, list) and all(isinstance(e, str) for e in data) else None


def decode_link(data: Any) -> Link | None:
    if not isinstance(data, dict):
        return None
    return Link(data["session"], list(data["pending"]), data.get("head"))
