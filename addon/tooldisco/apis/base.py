"""What every wire API package provides, and the stitching contract they share.

``Adapter`` (request and answer bodies: the protocols ``Requests``, ``Answers``, ``Rounds``,
``Streams``, ``History``), ``StreamDecoder`` (a stream into one answer) and
``Stitcher`` (the rounds of a phantom loop as one live client stream) are implemented once
per API under ``tooldisco.apis.<api>``; ``registry`` picks the package for a request. The
neutral types they produce live in ``tooldisco.core.types``.

Stitching. Why: a live client stream must start before the proxy knows whether the model will
search. Round 1 is forwarded event by event as it arrives; only a phantom call (and
what belongs to it) is held back. When a round ends with phantom calls only, the
runner searches and re-forwards, and the next round's events continue the same
client stream: one start, one stop, indexes renumbered, usage summed.

The rule, for every API: a round that hides nothing passes every upstream byte as it came:
the same events, in the same order and framing, with the same numbering, nothing inserted and
nothing held past an event that follows it (the one exception: a Responses object's echo of the
request's ``tools`` / ``tool_choice`` shows the client's own). A stitched turn changes only what
stitching must: the hidden calls' events go, and the ids, indexes and numbering of what the
client sees are made continuous over the rounds. An event the stitcher does not understand
passes where it came. Events held while the runner decides (a round's closing events, once the
round hid a call) are held with everything after them and go out in their original order; a
closing event the upstream did not send is never made up. After an upstream error event the rest
of the round passes as it came, and nothing is added.

Contract, for every API (``tooldisco.apis.<api>.stitch``):

- ``feed(data)``: upstream bytes of the current round, cut anywhere; returns the
  client bytes that are complete and visible now (``b""`` when nothing is). Events
  that close the message (stop reason, final usage, terminal event) are held until
  the runner decides. An in-stream upstream error event is passed on at once (it is
  the provider's own, so SDKs raise and agents retry) and ends the client stream.
- ``end_round()``: the round's upstream body ended. Returns what the loop needs: the
  round's assembled message (phantom calls included), whether the API's terminal
  event came, and the upstream error if one came.
  After an error, ``finish()`` returns only what is still owed to the client (the error
  event itself when the upstream left it unterminated, the API's end marker) and nothing
  else; the runner always calls it.
- ``next_round()``: the runner re-forwards; the next ``feed`` is round k+1. Its start
  events are swallowed, its indexes continue after what the client has seen.
- ``finish()``: the round just ended was the last: the held closing events, with the
  stop reason right for what the client saw (a tool stop only when a visible call was
  made in the final round) and usage summed over every round.
- ``fail(failure)``: something went wrong after bytes went out (an upstream error on a
  re-forward, a truncated round, a proxy fault): the provider's own in-stream error,
  so the client stream always ends valid and the client's SDK raises.

Memory: a stitcher holds the current event, the round's assembled message (what the
loop re-sends, its text bounded: ``cut`` past it) and small counters; never the raw body.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Protocol, Sequence, cast

from tooldisco.core.types import RequestView, Target, TokenUsage, Tool, ToolCall, ToolResult


@dataclass(frozen=True)
class RoundEnd:
    """How one upstream round ended."""

    message: dict[str, Any] | None  # the assembled message, phantom calls included; None if it never started
    complete: bool  # the API's terminal event arrived
    error: Any = None  # the upstream's in-stream error payload (already passed to the client)


@dataclass(frozen=True)
class Failure:
    """Why a stream has to end with an error: an upstream answer, or a fault of the proxy."""

    status: int  # the upstream's HTTP status; 502 when the proxy itself failed
    body: bytes = b""  # the upstream's error body, passed on when it is in the provider's format
    message: str = ""  # for the proxy's own failures

    def _json(self) -> Any:
        """The body's JSON value; None when it is not JSON (or nested past the parser's limit)."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None

    def upstream_error(self) -> dict[str, Any] | None:
        """The upstream's error object (``{"error": {...}}`` bodies), if the body holds one."""
        data = self._json()
        if isinstance(data, list) and data and isinstance(data[0], dict):  # Gemini wraps errors in a list
            data = data[0]
        if isinstance(data, dict) and isinstance(error := data.get("error"), dict):
            return cast(dict[str, Any], error)
        return None

    def text(self) -> str:
        """A human-readable message: the upstream's own (``{"error": {"message"}}``, or Bedrock's
        ``{"message"}``), else ours, else the status."""
        error = self.upstream_error()
        if error and isinstance(message := error.get("message"), str):
            return message
        body = self._json()
        if isinstance(body, dict) and isinstance(message := body.get("message"), str):
            return message
        return self.message or f"upstream answered HTTP {self.status}"


class Stitcher(ABC):
    """One client stream out of the rounds of one phantom loop (see the module docstring)."""

    def __init__(self, phantom: str) -> None:
        self.phantom = phantom  # the search tool's name: its calls never reach the client
        # Every name whose calls never reach the client: the search tool's, and the tools the
        # policy withholds from the request (their calls are answered in a hidden round).
        self.hidden: frozenset[str] = frozenset((phantom,)) if phantom else frozenset()
        self.rounds = 1  # the round being fed, from 1
        self._out = bytearray()  # client bytes decided but not returned yet
        self._ended = False  # the client stream is over (an error or the closing events went out)
        self._decoder: Any = None  # the round's stream decoder (each API's stitcher sets its own)
        # The client's stream assembled from what is emitted (``shown``), when the stitcher keeps it.
        self._client: Any = None
        # Something the client gets differs from the upstream's bytes (an event changed, hidden,
        # held past a later one, or one of the proxy's own): set by each API's stitcher.
        self._touched = False
        # The upstream reported an error in the stream: what follows passes as it came.
        self._errored = False

    def hides(self, name: Any) -> bool:
        """Whether a call by this name never reaches the client (a name the model wrote: any JSON value)."""
        return isinstance(name, str) and name in self.hidden

    @abstractmethod
    def feed(self, data: bytes) -> bytes: ...

    @abstractmethod
    def end_round(self) -> RoundEnd: ...

    def next_round(self) -> None:
        self.rounds += 1

    @property
    def untouched(self) -> bool:
        """Every byte the client got so far is the upstream's, as it came, in its order. While
        it holds, a round that ends in a way the stitcher does not recognise as complete still
        ends as the upstream ended it: nothing the proxy did changed it, so nothing is added."""
        return self.rounds == 1 and not self._touched

    @property
    def cut(self) -> bool:
        """The round's message lacks text past what a decoder keeps (``apis.streaming``): it
        was relayed, but cannot be sent back upstream as the model wrote it."""
        return bool(self._decoder.cut)

    def shown(self) -> StreamDecoder | None:
        """The client's stream as its SDK assembles it, when the stitcher assembles it itself from
        the events it emits (no second parse of its own output); None: the runner decodes it."""
        return cast(StreamDecoder | None, self._client)

    def _show(self, name: str | None, data: Any) -> None:
        """One event the client gets (its parsed payload), into the client's assembled message."""
        if self._client is not None:
            self._client.assembler.apply(name, data)

    @abstractmethod
    def finish(self) -> bytes: ...

    @abstractmethod
    def fail(self, failure: Failure) -> bytes: ...

    def _take(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def _relay(self, events: list[Any]) -> bytes:
        """The client bytes for upstream events, in order; nothing follows an error."""
        out = bytearray()
        for event in events:
            if self._ended:
                break
            out += self._pass(event)
        return bytes(out)

    def _pass(self, event: Any) -> bytes:
        """The client bytes for one upstream event (``b""``: held or hidden)."""
        raise NotImplementedError


# OpenAI's error ``type`` for each kind of failure (Chat and Responses share them).
OPENAI_ERROR_TYPES = {
    "rate_limit": "rate_limit_exceeded",
    "invalid_request": "invalid_request_error",
    "overloaded": "server_error",
    "timeout": "server_error",
    "server_error": "server_error",
}


def error_kind(status: int) -> str:
    """The error category a status stands for, in the words most APIs use."""
    if status == 429:
        return "rate_limit"
    if status in (503, 529):
        return "overloaded"
    if status == 408 or status == 504:
        return "timeout"
    if 400 <= status < 500:
        return "invalid_request"
    return "server_error"


class Dispatcher(Protocol):
    """Call-through's dispatcher as the APIs see it (``policy.call_through.Dispatch``): which
    dispatcher calls stand for which real call. Declared here so the API packages never
    import the policy that makes it."""

    name: str

    def target(self, call: ToolCall) -> Target | str:
        ...

    def resolve(self, call: ToolCall) -> Target | str | None:
        ...


def dispatcher_schema() -> dict[str, Any]:
    """The dispatcher's parameters, as JSON Schema: ``arguments`` is any object."""
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The exact name of a tool the search returned."},
            "arguments": {"type": "object", "description": "Its arguments, as its definition's parameters say."},
        },
        "required": ["name", "arguments"],
    }


class StreamDecoder(Protocol):
    """Sans-IO: feed raw response bytes in any chunking, ``b""`` at the end; then ``message()``."""

    def feed(self, data: bytes) -> list[Any]: ...

    def message(self) -> dict[str, Any]: ...

    @property
    def done(self) -> bool:
        """The API's terminal event arrived."""
        ...


class Requests(Protocol):
    """The request side: a body read, and its tool list rewritten. Bodies are ``str``
    (decoded UTF-8 JSON)."""

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


class Answers(Protocol):
    """The answer side. A message is the API's own non-streaming response object as a dict
    (streams are assembled into one first)."""

    #: Its answers restate request fields (``restore_echo`` has work to do); False spares
    #: decoding the client's body and the answer for nothing.
    echoes: bool

    def calls(self, message: dict[str, Any]) -> list[ToolCall]:
        ...

    def strip(self, message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
        """Remove calls to ``names``; fix indexes and the stop reason."""
        ...

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Client-visible rounds (already stripped) into one message, usage summed."""
        ...

    def usage(self, message: dict[str, Any]) -> TokenUsage | None:
        """The provider's own usage of one answer (a JSON answer, or a stream assembled into
        one), split into the four billed parts; None when the answer reports none."""
        ...

    def usage_headers(self, message: dict[str, Any]) -> dict[str, str]:
        """Response headers that restate usage (Bedrock InvokeModel), for a merged answer."""
        ...

    def restore_echo(self, response: str, body: str) -> str:
        """A JSON answer with the request fields it echoes (Responses ``tools``, ``tool_choice``)
        put back to the client's own, from ``body`` as the client sent it; other bytes kept."""
        ...

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        """Headers and body of an HTTP error answer of the proxy's own, in this API's format,
        so that the client's SDK raises the error it retries."""
        ...


class Rounds(Protocol):
    """Going on after a round: the next request of a loop, and the server-side conversation
    state a client chains from (OpenAI Responses ``store``; the other APIs keep none)."""

    def append_round(
        self,
        body: str,
        message: dict[str, Any],
        results: Sequence[ToolResult],
        add_raws: Sequence[str],
    ) -> str:
        """Append the assistant turn and the results in the API's exact shape; append tools."""
        ...

    def response_id(self, message: dict[str, Any]) -> str | None:
        """The id a client's next request may chain from (``previous_response_id``)."""
        ...

    def chain_from(self, body: str, response_id: str) -> str:
        """The request chained from ``response_id`` instead of the id the client names."""
        ...

    def owed_results(self, body: str, results: Sequence[ToolResult]) -> list[str]:
        """Results the server still waits for after a round the client never saw answered
        (a mixed turn on a stored chain), as input items: sent with the client's next chained request."""
        ...

    def with_owed_results(self, body: str, items: Sequence[str]) -> str:
        """The request with ``owed_results``' items put before the client's own input."""
        ...


class Streams(Protocol):
    """The streaming side: a stream read into one message, one message written as a stream,
    and the rounds of a loop stitched into one live stream (the module docstring)."""

    def decoder(self) -> StreamDecoder:
        ...

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        ...

    def stitcher(self, phantom: str, body: str) -> Stitcher:
        """A live stream stitcher for this API; ``body`` is the request as the client sent it
        (what echoed fields must show)."""
        ...


class History(Protocol):
    """Hidden rounds put back into a client's history (``tooldisco.engine.rounds``)."""

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
        of a mixed turn the client never saw (``with_hidden_results``)."""
        ...

    def with_hidden_results(self, made: Sequence[str], hidden: Sequence[str],
                            following: Sequence[str]) -> list[str] | None:
        """The client's entries after a restored turn (``made``), answering it as it was made:
        the results of its hidden calls (``hidden``) put in; None when they cannot be."""
        ...


class Adapter(Requests, Answers, Rounds, Streams, History, Protocol):
    """One wire API: each side above, and the deferral flavours it offers beyond the classic one."""

    api: str

    def native_deferral(self) -> NativeDeferral | None:
        """Its native deferral side (``NativeDeferral``), or None when it has none."""
        ...

    def call_through(self) -> CallThrough | None:
        """Its call-through side (``CallThrough``), or None when it has none."""
        ...


class NativeDeferral(Protocol):
    """The side of an API with cache-preserving deferral (``Adapter.native_deferral``):
    deferred tools stay in ``tools[]`` marked ``defer_loading`` (out of the prompt), and a
    search result loads found ones inline (``ToolResult.loads``), so the prompt prefix the
    provider cached never changes."""

    native_kind: str  # the key of ``tool_discovery.native`` that says which models take it

    def native_model(self, view: RequestView) -> str:
        """The request's model, as ``tool_discovery.native`` matches it (Bedrock's is in the path)."""
        ...

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


class CallThrough(Protocol):
    """The side of an API whose deferral may call found tools through one fixed dispatcher
    tool (``Adapter.call_through``, ``policy.call_through``), so that ``tools[]`` never changes."""

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

    def stitcher(self, phantom: str, body: str, dispatch: Dispatcher | None = None) -> Stitcher:
        """``Adapter.stitcher``; with ``dispatch``, dispatcher calls reach the client as real calls."""
        ...
