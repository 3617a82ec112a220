"""Bedrock ConverseStream: the rounds of a phantom loop as one live client stream.

Frames are AWS event-stream messages named by ``:event-type``: ``messageStart``, per block
``contentBlockStart`` (tool use only; text and reasoning blocks open with their first delta),
``contentBlockDelta``, ``contentBlockStop``, then ``messageStop{stopReason}`` and
``metadata{usage, metrics}`` (in either order; ``metadata`` may be missing). What the client
sees (see ``base`` for the rule and the contract):

- A round that has hidden nothing (round 1, no phantom block yet) passes every frame as its
  bytes at once, closing frames included: a stream without a search is the upstream's, byte
  for byte, however it ends (a frame it broke off inside reaches the client too).
- Later rounds' ``messageStart`` is swallowed. Blocks' ``contentBlockIndex`` is renumbered
  consecutive over the blocks the client sees (boto3 users and our assembler key blocks by it).
  A ``toolUse`` block named the phantom is dropped with its deltas and stop. Reasoning blocks
  and their signatures pass unchanged.
- Once a round hid a block (and in every round after the first), ``messageStop`` and
  ``metadata`` are held while the runner decides, and every frame after the first held one
  with them, in order. ``finish`` sends them in that order: ``stopReason`` is ``end_turn``
  where the upstream said ``tool_use`` but the final round showed no call; after a search,
  ``usage`` and ``metrics`` (``latencyMs``: the client waited for every round) are the sums
  over rounds, as ``ConverseAdapter.merge`` makes them. ``next_round`` drops the held closing
  frames and sends the others. A closing frame the upstream did not send is never made up.
- An unchanged frame goes out as its bytes (Bedrock's ``p`` padding included); a changed one
  in a fresh frame (both CRCs recomputed, the padding dropped).

Errors are exception frames (``:message-type: exception``, ``:exception-type`` one of the
ConverseStream output's exception members, payload ``{"message": ...}``): botocore's
``EventStream`` raises ``EventStreamError`` on them. An upstream one is passed on as it came
(after what was held before it), and the rest of the round passes as it came; nothing is added.
A corrupt upstream frame (bad CRC) raises ``EventStreamError`` from ``feed``, which the runner
answers with ``fail``; a body that ends inside a frame is a round that did not complete.
"""

from __future__ import annotations

from typing import Any

from tooldisco.apis.usage import sum_usage
from tooldisco.apis.bedrock.stream import ConverseStreamDecoder
from tooldisco.apis.streaming import Event, IncompleteStream, StreamError, as_dict, dumps
from tooldisco.apis.framing.eventstream import EventStreamError, encode_frame
from tooldisco.apis.base import Failure, RoundEnd, Stitcher, error_kind

# error_kind -> a ConverseStreamOutput exception member (botocore's bedrock-runtime model);
# a type outside the union would reach boto3 users without its code.
EXCEPTIONS = {
    "rate_limit": "throttlingException",
    "overloaded": "serviceUnavailableException",
    "timeout": "modelStreamErrorException",
    "invalid_request": "validationException",
    "server_error": "internalServerException",
}
_CLOSING = ("messageStop", "metadata")
_SUMMED = ("usage", "metrics")
_INDEX = "contentBlockIndex"


class ConverseStitcher(Stitcher):
    """ConverseStream event-stream frames."""

    def __init__(self, phantom: str) -> None:
        super().__init__(phantom)
        self._decoder = ConverseStreamDecoder()
        self._client = ConverseStreamDecoder()  # fed the events the client gets (``shown``)
        self._indexes: dict[int, int | None] = {}  # this round's block index -> the client's; None: hidden
        self._next_index = 0  # the client's next block index
        self._visible_call = False  # this round streamed a toolUse the client sees
        self._hid = False  # this round hid a block: its closing frames wait for the runner
        self._held: list[Event] = []  # this round's first closing frame and every frame after it
        self._earlier: dict[str, Any] = {}  # usage / metrics summed over the rounds before this one
        self._round: dict[str, Any] = {}  # this round's usage / metrics, once it ended
        self._rest = b""  # what the body held past its last whole frame
        self._error: Any = None  # the upstream exception passed on

    def feed(self, data: bytes) -> bytes:
        out = self._take()
        for event in self._decoder.feed(data):
            if self._ended:  # the client stream is over
                break
            out += self._pass(event)
        return out

    def end_round(self) -> RoundEnd:
        try:
            self._decoder.feed(b"")
        except EventStreamError:  # the body broke off inside a frame: the round is incomplete
            pass
        self._rest = self._decoder.rest
        try:
            message: dict[str, Any] | None = self._decoder.message()
        except (StreamError, IncompleteStream):
            message = None
        self._round = {key: message[key] for key in _SUMMED if message is not None and key in message}
        return RoundEnd(message, self._decoder.done, self._error)

    def next_round(self) -> None:
        self._out += self._release(closing=False)  # before the round's block numbering goes
        for key, value in self._round.items():
            self._earlier[key] = sum_usage([self._earlier.get(key), value])
        super().next_round()
        self._ended = self._ended or self._errored  # the upstream's exception ended the client stream
        self._decoder = ConverseStreamDecoder()
        self._indexes, self._visible_call, self._hid, self._round, self._rest = {}, False, False, {}, b""

    def finish(self) -> bytes:
        out = self._take()
        if self._ended:
            return out
        self._ended = True
        out += self._release(closing=True)
        if self.untouched or self._errored:  # a frame broken off: as the upstream left it
            out += self._rest
        return out

    def fail(self, failure: Failure) -> bytes:
        out = self._take()
        if self._ended:
            return out
        self._ended = True
        if self._errored:  # the upstream's own exception went out already
            return out
        headers = {
            ":exception-type": EXCEPTIONS[error_kind(failure.status)],
            ":content-type": "application/json",
            ":message-type": "exception",
        }
        return out + encode_frame(headers, dumps({"message": failure.text()}).encode("utf-8"))

    def _pass(self, event: Event) -> bytes:
        """The client bytes for one upstream frame (``b""``: held or hidden)."""
        if self._errored:  # after the upstream's exception: as it came
            return event.raw
        if event.data is not None and event.data is self._decoder.error:
            self._error, self._errored = event.data, True
            return self._release(closing=True) + event.raw  # the provider's own exception frame
        if self._held or (event.type in _CLOSING and (self._hid or self.rounds > 1)):
            self._held.append(event)
            self._touched = True
            return b""
        return self._shown(event)

    def _shown(self, event: Event) -> bytes:
        """The client bytes for a frame not held: renumbered, hidden or as it came."""
        data = event.data
        if not isinstance(data, dict):
            return event.raw
        if event.type == "messageStart" and self.rounds > 1:
            return b""
        if event.type == "contentBlockStart":
            self._open(data)
        shown = self._renumber(data)
        if shown is None:
            self._touched = True
            return b""
        return self._frame(event, shown)

    def _release(self, closing: bool) -> bytes:
        """The held frames, in their order: the closing ones as the client must see them when
        ``closing`` (the stream ends), else dropped (the stream goes on with another round)."""
        out = bytearray()
        held, self._held = self._held, []
        for event in held:
            if event.type in _CLOSING and isinstance(event.data, dict):
                if closing:
                    out += self._frame(event, self._closing(event.type, event.data))
            else:
                out += self._shown(event)
        return bytes(out)

    def _open(self, data: dict[str, Any]) -> None:
        index = data.get(_INDEX)
        tool = as_dict(as_dict(data.get("start")).get("toolUse"))
        if not isinstance(index, int) or index in self._indexes:
            return
        if tool and self.hides(tool.get("name")):
            self._indexes[index] = None
            self._hid = True
            return
        self._assign(index)
        self._visible_call = self._visible_call or bool(tool)

    def _assign(self, index: int) -> int:
        client = self._next_index
        self._indexes[index] = client
        self._next_index += 1
        return client

    def _renumber(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """``data`` with the client's block index (a block seen first here is a text or
        reasoning block, which has no start event); None for a hidden block's event."""
        index = data.get(_INDEX)
        if not isinstance(index, int):
            return data
        client = self._indexes[index] if index in self._indexes else self._assign(index)
        if client is None:
            return None
        return data if client == index else {**data, _INDEX: client}

    def _closing(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """A held closing event as the client must see it (``data`` itself if unchanged)."""
        if kind == "messageStop" and data.get("stopReason") == "tool_use" and not self._visible_call:
            return {**data, "stopReason": "end_turn"}
        if kind == "metadata" and self._earlier:
            summed = {key: sum_usage([self._earlier.get(key), data.get(key)]) for key in _SUMMED if key in data}
            return {**data, **summed}
        return data

    def _frame(self, event: Event, data: dict[str, Any]) -> bytes:
        """The upstream's frame when ``data`` is its own unchanged payload, else a fresh one."""
        self._show(event.type, data)
        if data is event.data:
            return event.raw
        self._touched = True
        headers = {":event-type": event.type, ":content-type": "application/json", ":message-type": "event"}
        return encode_frame(headers, dumps(data).encode("utf-8"))
