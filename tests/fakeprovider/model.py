"""API-neutral types shared by the server, the script and the provider modules.

A provider module turns its wire body into a :class:`Conversation` (validating it
like the real API), the script turns that into a :class:`Reply`, and the provider
renders the reply back in its own grammar as a :class:`JsonResponse` or a
:class:`StreamResponse`.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class ApiError(Exception):
    """A request the API rejects. Providers render it in their own error shape."""

    def __init__(self, status: int, message: str, kind: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind or default_error_kind(status)
        self.param = param


def default_error_kind(status: int) -> str:
    """Anthropic-style error type for a status code (OpenAI maps these itself)."""
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")


@dataclass
class ToolCall:
    """A tool call made by the assistant (in the history, or in a reply)."""

    id: str
    name: str
    arguments: Any = field(default_factory=dict)


@dataclass
class ToolResult:
    """A tool result sent back by the client. ``content`` is flattened to text."""

    call_id: str
    name: str | None
    content: str
    is_error: bool = False


DISPATCHER = "gateway_call_tool"  # the proxy's call-through dispatcher: {"name", "arguments"}


@dataclass
class Conversation:
    """What the scripted model can see of a request, independent of the wire API."""

    api: str
    model: str
    stream: bool
    tools: list[str]
    calls: list[ToolCall]
    results: list[ToolResult]
    last_user_text: str
    body: dict[str, Any]
    raw_text: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # provider-specific context for ``render``

    def offered(self, name: str) -> bool:
        return name in self.tools

    def has_result_for(self, name: str) -> bool:
        return any(r.name == name for r in self.results) or name in self.dispatched_results()

    def through(self, name: str) -> bool:
        """Whether the model can call ``name`` through the proxy's dispatcher, as a model does that
        read its definition in a search result: the dispatcher is offered and a result names it."""
        named = re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])")
        return self.offered(DISPATCHER) and any(named.search(r.content) for r in self.results)

    def dispatched_results(self) -> list[str]:
        """The tools the dispatcher's results answer for: each result's call by id, or (Gemini
        calls without ids) the dispatcher's calls in order."""
        dispatched = [c for c in self.calls if c.name == DISPATCHER]
        by_id = {c.id: c for c in dispatched if c.id}
        out: list[str] = []
        for nth, r in enumerate(r for r in self.results if r.name == DISPATCHER or r.call_id in by_id):
            call = by_id.get(r.call_id) or (dispatched[nth] if nth < len(dispatched) else None)
            if call is not None and isinstance(call.arguments, dict) and isinstance(call.arguments.get("name"), str):
                out.append(call.arguments["name"])
        return out

    def last_result(self) -> ToolResult | None:
        return self.results[-1] if self.results else None


@dataclass
class Usage:
    """Token counts reported in a response."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Usage:
        return cls(**{k: int(v) for k, v in d.items()})


@dataclass
class Reply:
    """What the scripted model answers: optional thinking, optional text, then zero or more
    tool calls. ``thinking`` reaches the wire only where the request asks for it (each
    provider decides), signed so that a replay can be checked."""

    text: str
    calls: list[ToolCall]
    usage: Usage
    thinking: str = ""

    @property
    def stop_for_tools(self) -> bool:
        return bool(self.calls)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "thinking": self.thinking,
            "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.calls],
            "usage": self.usage.__dict__.copy(),
        }


@dataclass
class JsonResponse:
    """A complete (non-streamed) response."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def encode(self) -> bytes:
        return json.dumps(self.body).encode()


@dataclass
class StreamResponse:
    """A streamed response: each item of ``events`` is written and flushed as one chunk,
    with the server's pacing delay between items."""

    events: Iterable[bytes]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream"
    delay: float | None = None  # seconds between events; None: the server's stream_delay


Response = JsonResponse | StreamResponse


_SESSION = secrets.token_hex(3)
_counter = itertools.count(1)
_counter_lock = threading.Lock()


def new_id(prefix: str) -> str:
    """A unique, readable id such as ``toolu_fk1a2b3c_000007`` (unique within a process)."""
    with _counter_lock:
        n = next(_counter)
    return f"{prefix}fk{_SESSION}_{n:06d}"


def sse(event: str | None, data: Any) -> bytes:
    """One server-sent event; ``data`` that is not a str is JSON-encoded."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def split_text(text: str, pieces: int = 4) -> list[str]:
    """Split ``text`` into about ``pieces`` word-aligned fragments (for streaming deltas)."""
    if not text:
        return []
    words = text.split(" ")
    size = max(1, -(-len(words) // pieces))
    out = [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    return [frag if i == len(out) - 1 else frag + " " for i, frag in enumerate(out)]


def compact_json(value: Any) -> str:
    """``value`` as compact JSON (how the APIs write tool-call arguments)."""
    return json.dumps(value, separators=(",", ":"))


def split_json(value: Any, pieces: int = 3) -> list[str]:
    """JSON-encode ``value`` and cut it into ``pieces`` raw fragments (like input_json_delta)."""
    return split_raw(compact_json(value), pieces)


def split_raw(text: str, pieces: int = 3) -> list[str]:
    """Cut ``text`` into about ``pieces`` fragments at arbitrary points."""
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def estimate_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: one token per 4 characters, at least 1."""
    return max(1, len(text) // 4)


TOOL_NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
