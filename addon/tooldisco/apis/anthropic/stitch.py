"""Anthropic Messages SSE: the rounds of a phantom loop as one live client stream.

The event logic (Anthropic event objects in, event objects out) lives once in
``AnthropicEventStitcher``; Bedrock's InvokeModel stream carries the same events in
event-stream frames and changes only the framing (``apis.bedrock.stitch_invoke``).

What the client sees (see ``base`` for the contract):

- Round 1's ``message_start`` (its id, model, input usage); later rounds' are swallowed.
  ``ping`` passes wherever it comes.
- Content blocks with ``index`` renumbered consecutive over the blocks the client sees
  (the SDK appends a block per ``content_block_start`` and looks deltas up by index). A
  ``tool_use`` block named the phantom is dropped with its deltas and stop. Thinking,
  redacted thinking and ``signature_delta`` pass unchanged (the client must replay them
  signed).
- ``message_delta`` and ``message_stop`` are held; ``finish`` sends the final round's.
  Its ``stop_reason`` is ``end_turn`` where the upstream said ``tool_use`` but the final
  round showed no ``tool_use`` (every call was hidden). After a search its ``usage`` is
  the sum over rounds of every count: the SDK's ``accumulate_event`` copies
  ``input_tokens``, ``cache_*_input_tokens``, ``server_tool_use`` and
  ``output_tokens_details`` from ``message_delta`` over ``message_start``'s, so its final
  usage is the sum. Only the ``cache_creation`` breakdown, which the SDK reads from
  ``message_start`` alone, stays round 1's there (our decoder sees the sum).
- An event nothing changes goes out as its raw bytes; a changed one is re-serialized.

Errors. An upstream ``error`` event is passed on at once, as it came, and ends the client
stream. ``fail`` sends ``event: error`` with ``{"type":"error","error":{type, message}}``
(the SDK's ``Stream`` raises ``APIStatusError`` on an ``error`` event): the upstream's own
error object when the failure body holds one, else the Anthropic type for its status.
Nothing is closed before it: the API itself ends a broken stream with a bare ``error``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Protocol, cast

from tooldisco.apis.base import StreamDecoder
from tooldisco.apis.usage import sum_usage
from tooldisco.apis.anthropic.stream import _DELTA_ALWAYS, AnthropicStreamDecoder, encode_event_object
from tooldisco.apis.streaming import Event, IncompleteStream, StreamError, as_dict
from tooldisco.apis.base import Failure, RoundEnd, Stitcher, error_kind

# error_kind -> Anthropic's error type (docs: "Errors", HTTP errors table).
_ERROR_TYPES = {
    "rate_limit": "rate_limit_error",
    "overloaded": "overloaded_error",
    "timeout": "timeout_error",
    "invalid_request": "invalid_request_error",
    "server_error": "api_error",
}
_CLOSING = ("message_delta", "message_stop")


class EventDecoder(StreamDecoder, Protocol):
    """A stream decoder that also names the upstream's error payload (``apis.streaming``)."""

    @property
    def error(self) -> Any: ...


def error_object(failure: Failure) -> dict[str, Any]:
    """The ``error`` member of an Anthropic error: the upstream's own, else one for its status."""
    return failure.upstream_error() or {"type": _ERROR_TYPES[error_kind(failure.status)], "message": failure.text()}


class AnthropicEventStitcher(Stitcher):
    """The stitching of Anthropic stream events, whatever frames them; subclasses frame."""

    # Held closing event -> the message key it restates, summed over rounds in the final one.
    carries: ClassVar[dict[str, str]] = {"message_delta": "usage"}

    def __init__(self, phantom: str) -> None:
        super().__init__(phantom)
        self._decoder = self._new_decoder()
        self._client = self._new_decoder()  # fed the events the client gets (``shown``)
        self._indexes: dict[int, int | None] = {}  # this round's index -> the client's; None: hidden
        self._next_index = 0  # the client's next block index
        self._visible_call = False  # this round streamed a tool_use the client sees
        self._hid = False  # this round hid a block: its closing events wait for the runner
        self._late: dict[str, Any] = {}  # the end a later round's swallowed message_start said
        self._round_started = False  # this round's message_start came
        self._held: list[Event] = []  # from this round's first closing event on, every event, in order
        self._trailing = b""  # what the round's body held after its last event
        self._totals: dict[str, Any] = {}  # carried keys summed over the rounds that ended
        self._error: Any = None  # the upstream error event passed on

    @abstractmethod
    def _new_decoder(self) -> EventDecoder:
        """The API's stream decoder: its events carry Anthropic event objects as ``data``."""

    @abstractmethod
    def _encode(self, event: dict[str, Any]) -> bytes:
        """One changed event object in the client's framing."""

    @abstractmethod
    def _error_bytes(self, failure: Failure) -> bytes:
        """The API's own in-stream error for ``failure``."""

    def _flush(self) -> list[Event]:
        """The end of the round's body: the events it completes (an unterminated last one)."""
        return cast(list[Event], self._decoder.feed(b""))

    def feed(self, data: bytes) -> bytes:
        return self._take() + self._relay(self._decoder.feed(data))

    def end_round(self) -> RoundEnd:
        # An event the upstream left unterminated lacks the blank line that ends it on the wire:
        # a round that changed nothing passes it as it came; else it is re-encoded (raw b"") and
        # one cut inside its JSON is dropped.
        last = self._flush()
        if self.untouched:
            self._out += self._relay(last)
            self._out += getattr(self._decoder, "tail", b"")
        else:
            self._out += self._relay([Event(e.type, e.data, b"") for e in last if isinstance(e.data, dict)])
            self._trailing = getattr(self._decoder, "tail", b"")
        try:
            message: dict[str, Any] | None = self._decoder.message()
        except (StreamError, IncompleteStream):
            message = None
        for key in set(self.carries.values()):
            if message is not None and key in message:
                self._totals[key] = sum_usage([self._totals.get(key), message[key]])
        return RoundEnd(message, self._decoder.done, self._error)

    def next_round(self) -> None:
        # The round's closing events go; what else came after them (a ping) goes out in its place.
        for event in self._held:
            if not _closes(event):
                self._out += self._wire(event, event.data)
        super().next_round()
        self._decoder = self._new_decoder()
        self._indexes, self._visible_call, self._held, self._hid, self._trailing = {}, False, [], False, b""
        self._late, self._round_started = {}, False

    def finish(self) -> bytes:
        out = self._take()
        if self._ended:
            return out
        self._ended = True
        held = self._held
        if self._late and not any(_closes(e) and e.data.get("type") == "message_delta" for e in held):
            # A stitched message whose final round said its end only in its start: the client
            # learns it from a message_delta, the one event made up, before the message_stop.
            made = Event("message_delta", {"type": "message_delta", "delta": self._late}, b"")
            at = next((i for i, e in enumerate(held) if _closes(e)), len(held))
            held = [*held[:at], made, *held[at:]]
        for event in held:  # in the order they came
            closing = _closes(event) and event.type != "error"
            out += self._wire(event, self._closing(event.data) if closing else event.data)
        return out + self._trailing

    def fail(self, failure: Failure) -> bytes:
        out = self._take()
        if self._ended:
            return out
        self._ended = True
        return out + self._error_bytes(failure)

    def _pass(self, event: Event) -> bytes:
        """The client bytes for one upstream event (``b""``: held or hidden)."""
        if self._held:  # the round's end is held: so is everything after it, in order
            self._held.append(event)
            return b""
        if self._errored:  # after the upstream's error, the rest of its round as it came
            return self._wire(event, event.data)
        if event.type == "error" or (event.data is not None and event.data is self._decoder.error):
            self._error, self._errored = event.data, True
            return self._wire(event, event.data)  # the provider's own error, renumbered nothing
        data = event.data
        if not isinstance(data, dict):
            return event.raw
        kind = data.get("type")
        if kind in _CLOSING:
            if self.rounds == 1 and not self._hid:  # nothing hidden: the round ends as the upstream ends it
                return self._wire(event, data)
            self._held.append(event)
            return b""
        if kind == "message_start":
            return self._start(event, data)
        if kind == "content_block_start":
            self._open(data)
        visible = self._renumber(data)
        if visible is None:
            self._touched = True
            return b""
        return self._wire(event, visible)

    def _start(self, event: Event, data: dict[str, Any]) -> bytes:
        """A round's ``message_start``. Its ``message.content`` may already hold blocks (a call
        made by code the model ran): they take client indexes like streamed ones. Round 1's goes
        out (less a hidden block); a later round's is swallowed and its blocks go out whole."""
        message = as_dict(data.get("message"))
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        again = self._round_started  # a message that starts again: the SDK starts its snapshot again too
        self._round_started = True
        if self.rounds == 1 or again:
            self._indexes, self._next_index, self._visible_call = {}, 0, False
        shown: list[tuple[int, Any]] = []
        for index, block in enumerate(blocks):
            self._open({"index": index, "content_block": block})
            if (client := self._indexes.get(index)) is not None:
                shown.append((client, block))
        if self.rounds == 1 or again:
            if len(shown) < len(blocks):
                data = {**data, "message": {**message, "content": [block for _, block in shown]}}
            return self._wire(event, data)
        self._touched = True
        # What only the swallowed start says of how the message ends (a round whose calls code
        # made ends with no message_delta): said in the one made at the end (``finish``).
        self._late = {k: message[k] for k in (*_DELTA_ALWAYS, "container") if message.get(k) is not None}
        out = b""
        for client, block in shown:
            for made in ({"type": "content_block_start", "index": client, "content_block": block},
                         {"type": "content_block_stop", "index": client}):
                out += self._wire(None, made)
        return out

    def _wire(self, event: Event | None, data: Any) -> bytes:
        """``data`` for the client: the upstream's bytes when it is the event's own unchanged
        object and they are whole, else re-encoded."""
        self._show(event.type if event is not None else None, data)
        if event is not None and data is event.data and event.raw:
            return event.raw
        self._touched = True
        return self._encode(data)

    def _open(self, data: dict[str, Any]) -> None:
        index, block = data.get("index"), as_dict(data.get("content_block"))
        if not isinstance(index, int):
            return
        call = block.get("type") == "tool_use"
        if call and self.hides(block.get("name")):
            self._indexes[index] = None
            self._hid = True
            return
        self._indexes[index] = self._next_index
        self._next_index += 1
        self._visible_call = self._visible_call or call

    def _renumber(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """``data`` with the client's block index; None for a hidden block's event."""
        index = data.get("index")
        if not isinstance(index, int) or index not in self._indexes:
            return data
        client = self._indexes[index]
        if client is None:
            return None
        return data if client == index else {**data, "index": client}

    def _closing(self, data: dict[str, Any]) -> dict[str, Any]:
        """The final round's closing event as the client must see it (``data`` itself if unchanged)."""
        key = self.carries.get(str(data.get("type")))
        if key in self._totals and self.rounds > 1:
            data = {**data, key: self._totals[key]}
        delta = as_dict(data.get("delta"))
        if delta.get("stop_reason") == "tool_use" and not self._visible_call:
            data = {**data, "delta": {**delta, "stop_reason": "end_turn"}}
        return data


def _closes(event: Event) -> bool:
    """One of the events that end a message (``message_delta``, ``message_stop``)."""
    return isinstance(event.data, dict) and event.data.get("type") in _CLOSING


class AnthropicStitcher(AnthropicEventStitcher):
    """Anthropic Messages SSE (``event: <type>`` / ``data: {...}``)."""

    def _new_decoder(self) -> EventDecoder:
        return AnthropicStreamDecoder()

    def _encode(self, event: dict[str, Any]) -> bytes:
        return encode_event_object(event)

    def _error_bytes(self, failure: Failure) -> bytes:
        return encode_event_object({"type": "error", "error": error_object(failure)})
