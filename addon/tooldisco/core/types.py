"""Neutral types every layer speaks: tools, a request's view, calls and their results.

Why here, at the bottom: the policies, the search, the phantom loop and the session store
must not know which wire API they are working on, and the API packages must not depend on
them. Each adapter turns its API's body into these types and applies decisions back onto
the original body text (see ``jsonspan``), so what it does not understand passes through
byte-for-byte.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tooldisco.core import jsonspan


class Unsupported(Exception):
    """The body has a shape we do not handle: the request must pass through unchanged."""


@dataclass(frozen=True)
class Tool:
    """One client tool. ``raw`` is its definition text, re-emitted byte-for-byte."""

    name: str
    raw: str
    description: str = ""
    params: tuple[tuple[str, str], ...] = ()
    # Why it may never be deferred (server tool, client-deferred, client search tool), or None.
    pinned: str | None = None
    # Python's hash of every field, made once: a catalog's identity (``search.base.catalog_key``)
    # combines its tools' fingerprints, and the adapters hand out one (memoised) Tool per
    # definition text, so a session's catalog is not hashed anew, text by text, every search.
    fingerprint: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fingerprint", hash((self.name, self.raw, self.description, self.params, self.pinned)))

    @property
    def definition(self) -> Any:
        return json.loads(self.raw)

    @cached_property
    def identity(self) -> str:
        """The tool across requests, processes and proxies: a digest of what a search reads
        (name, description, parameters), so a tool whose definition changes is a new one.
        Unlike ``fingerprint`` it may be stored (learned priors are keyed by it)."""
        text = json.dumps([self.name, self.description, self.params], ensure_ascii=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=9).hexdigest()

    @property
    def search_text(self) -> str:
        """Name, description, parameter names and descriptions: what search reads."""
        parts = [self.name, self.description]
        for pname, pdesc in self.params:
            parts.append(pname)
            if pdesc:
                parts.append(pdesc)
        return "\n".join(p for p in parts if p)


@dataclass(frozen=True)
class RequestView:
    """What the engine needs to know about a request, independent of the wire API."""

    tools: tuple[Tool, ...]
    query: str = ""  # last user message with real text
    first_user: str = ""  # first user message text: the fallback session key
    used: frozenset[str] = frozenset()  # tools whose results appear in the history
    forced: frozenset[str] = frozenset()  # tools named by tool_choice / allowed names
    stream: bool = False
    session_hint: str | None = None  # a session id the client put in the body
    continues: str | None = None  # a stored response this request chains from (Responses)
    model: str = ""  # the body's ``model`` ("" when the body names none: Gemini, Bedrock name it in the path)

    def names(self) -> list[str]:
        return [t.name for t in self.tools]


@dataclass(frozen=True)
class ToolCall:
    """A call the model made. ``arguments`` is the parsed object, or the raw text if unparsable."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    content: str
    is_error: bool = False
    # Native deferral: the deferred tools this result loads where it stands (Anthropic
    # ``tool_reference`` blocks, a Responses ``tool_search_output``'s tools); the tool list stays.
    loads: tuple[Tool, ...] = ()


@dataclass
class Usage:
    """Token counts summed over rounds; provider keys kept as they are."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, other: dict[str, Any] | None) -> None:
        for key, value in (other or {}).items():
            if isinstance(value, bool):
                continue
            if isinstance(value, int):
                self.counts[key] = self.counts.get(key, 0) + value


@dataclass(frozen=True)
class Target:
    """The real call a dispatcher call stands for."""

    name: str
    arguments: dict[str, Any]

    @property
    def text(self) -> str:
        """The arguments as the APIs that carry them as text write them (Chat)."""
        return jsonspan.dumps(self.arguments)
