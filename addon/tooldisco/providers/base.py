"""Neutral types every provider adapter speaks, and the adapter interface.

Why: the strategies, the search and the phantom loop must not know which wire
API they are working on. Each adapter turns its API's body into these types and
applies decisions back onto the original body text (see ``jsonspan``), so that
whatever the adapter does not understand passes through byte-for-byte.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Protocol, Sequence

from ..stitch.base import Failure, Stitcher

if TYPE_CHECKING:
    from ..strategies.call_through import Dispatch, Target


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


class StreamDecoder(Protocol):
    """Sans-IO: feed raw response bytes in any chunking, ``b""`` at the end; then ``message()``."""

    def feed(self, data: bytes) -> list[Any]: ...

    def message(self) -> dict[str, Any]: ...

    @property
    def done(self) -> bool:
        """The API's terminal event arrived."""
        ...


class Adapter(Protocol):
    """One wire API. Bodies are ``str`` (decoded UTF-8 JSON); messages are the API's own
    non-streaming response object as a dict (streams are assembled into one first)."""

    api: str

    def parse(self, body: str) -> RequestView:
        """Raise ``Unsupported`` for any shape we must not touch."""
        ...

    def parse_tool(self, raw: str) -> Tool:
        """One tool definition text into a ``Tool`` (raise ``Unsupported`` if unreadable)."""
        ...

    def with_tools(self, body: str, raws: Sequence[str]) -> str:
        """Replace the tool list with ``raws`` (definition texts), keep every other byte."""
        ...

    def phantom_tool(self, name: str, description: str) -> str:
        """The search tool in this API's shape, as definition text."""
        ...

    def calls(self, message: dict[str, Any]) -> list[ToolCall]:
        ...

    def continue_after(
        self,
        body: str,
        message: dict[str, Any],
        results: Sequence[ToolResult],
        add_raws: Sequence[str],
    ) -> str:
        """Append the assistant turn and the results in the API's exact shape; append tools."""
        ...

    def strip(self, message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
        """Remove calls to ``names``; fix indexes and the stop reason."""
        ...

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Client-visible rounds (already stripped) into one message, usage summed."""
        ...

    def decoder(self) -> StreamDecoder:
        ...

    def usage_headers(self, message: dict[str, Any]) -> dict[str, str]:
        """Response headers that restate usage (Bedrock InvokeModel), for a merged answer."""
        ...

    # Server-side conversation state (OpenAI Responses ``store``); the other APIs keep none.

    def response_id(self, message: dict[str, Any]) -> str | None:
        """The id a client's next request may chain from (``previous_response_id``)."""
        ...

    def pending_items(self, body: str, results: Sequence[ToolResult]) -> list[str]:
        """Results the server still waits for after a round the client never saw answered
        (a mixed turn on a stored chain): sent with the client's next chained request."""
        ...

    def with_pending(self, body: str, items: Sequence[str]) -> str:
        ...

    def continue_from(self, body: str, response_id: str) -> str:
        """The request chained from ``response_id`` instead of the id the client names."""
        ...

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        ...

    def restore_echo(self, response: str, body: str) -> str:
        """A JSON answer with the request fields it echoes (Responses ``tools``, ``tool_choice``)
        put back to the client's own, from ``body`` as the client sent it; other bytes kept."""
        ...

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        """Headers and body of an HTTP error answer of the proxy's own, in this API's format,
        so that the client's SDK raises the error it retries."""
        ...

    def stitcher(self, phantom: str, body: str) -> Stitcher:
        """A live stream stitcher for this API (``tooldisco.stitch``); ``body`` is the request
        as the client sent it (what echoed fields must show)."""
        ...

    # Hidden rounds put back into a client's history (``tooldisco.rounds``).

    def history_path(self, body: str) -> tuple[str, ...] | None:
        """Where the body's conversation is; None when the server holds it (a stored chain)."""
        ...

    def produced(self, entry: Any) -> bool:
        """Whether a history entry is the model's own (an assistant turn, a Responses output item)."""
        ...

    def shown(self, message: dict[str, Any]) -> list[Any]:
        """The history entries a client appends for this answer, as the answer showed them."""
        ...

    def comparable(self, entries: list[Any]) -> list[Any]:
        """History entries reduced to what a client must send back unchanged for them to be
        the ones it was shown (output-only fields a client may drop go)."""
        ...

    def adopt(self, restored: list[str], client: Sequence[str], hidden: Sequence[str] = ()) -> list[str]:
        """The real rounds put back in place of ``client`` (the entries they stand for), with
        what the client gave those entries that the rest of its history refers to (Gemini CLI's
        own call ids, which its function responses name). ``hidden``: the results of the calls
        of a mixed turn the client never saw (``with_results``)."""
        ...

    def with_results(self, made: Sequence[str], hidden: Sequence[str], following: Sequence[str]) -> list[str] | None:
        """The client's entries after a restored turn (``made``), answering it as it was made:
        the results of its hidden calls (``hidden``) put in; None when they cannot be."""
        ...


class NativeAdapter(Adapter, Protocol):
    """An API with cache-preserving deferral: deferred tools stay in ``tools[]`` marked
    ``defer_loading`` (out of the prompt), and a search result loads found ones inline
    (``ToolResult.loads``), so the prompt prefix the provider cached never changes."""

    def native_search(self, name: str) -> str:
        """The name the loop knows this API's native search call by."""
        ...

    def native_tools(self, body: str, deferred: Sequence[str], search: str) -> str:
        """Every client tool in the client's order, those named in ``deferred`` with
        ``defer_loading: true`` added (nothing else of them changed), ``search`` appended last."""
        ...

    def native_search_tool(self, name: str, description: str) -> str:
        """The search tool of native deferral, as definition text."""
        ...


class CallThroughAdapter(Adapter, Protocol):
    """An API whose deferral may call found tools through one fixed dispatcher tool
    (``strategies.call_through``), so that ``tools[]`` never changes."""

    def dispatcher_tool(self, name: str, description: str) -> str:
        """The dispatcher (``{name, arguments}``) in this API's shape, as definition text."""
        ...

    def unwrap(self, message: dict[str, Any], resolve: Callable[[ToolCall], Target | str | None]) -> dict[str, Any]:
        """``message`` with each call ``resolve`` gives a ``Target`` turned into that real call,
        and each it gives a str removed (an error the proxy answers in a hidden round); None:
        the call stays as it is. Every choice / candidate, as the stitchers do."""
        ...

    def wrap(self, body: str, names: Collection[str], dispatcher: str) -> str:
        """The history with each call of a tool in ``names`` (deferred, not in ``tools[]``) as
        the dispatcher call it was made as (and results that name their call, renamed
        alike): the same bytes for the same history, every other byte kept."""
        ...

    def stitcher(self, phantom: str, body: str, dispatch: Dispatch | None = None) -> Stitcher:
        """``Adapter.stitcher``; with ``dispatch``, dispatcher calls reach the client as real calls."""
        ...
