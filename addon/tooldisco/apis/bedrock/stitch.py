"""Bedrock ConverseStream: the rounds of a phantom loop as one live client stream.

Frames are AWS event-stream messages named by ``:event-type``: ``messageStart``, per block
``contentBlockStart`` (tool use only; text and reasoning blocks open with their first delta),
``contentBlockDelta``, ``contentBlockStop``, then ``messageStop{stopReason}`` and
``metadata{usage, metrics}``. What the client sees (see ``base`` for the contract):

- Round 1's ``messageStart``; later rounds' are swallowed.
- Blocks with ``contentBlockIndex`` renumbered consecutive over the blocks the client sees
  (boto3 users and our assembler key blocks by it). A ``toolUse`` block named the phantom is
  dropped with its deltas and stop. Reasoning blocks and their signatures pass unchanged.
- ``messageStop`` and ``metadata`` are held; ``finish`` sends the final round's. ``stopReason``
  is ``end_turn`` where the upstream said ``tool_use`` but the final round showed no call.
  After a search, ``usage`` and ``metrics`` (``latencyMs``: the client waited for every round)
  are the sums over rounds, as ``ConverseAdapter.merge`` makes them.
- An unchanged frame goes out as its bytes (Bedrock's ``p`` padding included); a changed one
  in a fresh frame (both CRCs recomputed, the padding dropped).

Errors are exception frames (``:message-type: exception``, ``:exception-type`` one of the
ConverseStream output's exception members, payload ``{"message": ...}``): botocore's
``EventStream`` raises ``EventStreamError`` on them. An upstream one is passed on as it came
and ends the client stream. A corrupt upstream frame (bad CRC) raises ``EventStreamError``
from ``feed``, which the runner answers with ``fail``; a body that ends inside a frame is a
round that did not complete.
"""

from __future__ import annotations

from typing import Any

from tooldisco.apis.common import sum_usage
from tooldisco.apis.bedrock.stream import ConverseStreamDecoder
from tooldisco.apis.streaming import Event, IncompleteStream, StreamError, as_dict, dumps
from tooldisco.apis.framing.eventstream import encode_frame
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
        self._held: dict[str, Event] = {}  # this round's messageStop / metadata
        self._totals: dict[str, Any] = {}  # usage / metrics summed over the rounds that ended
        self._error: Any = None  # the upstream exception passed on

    def feed(self, data: bytes) -> bytes:
        out = self._take()
        for event in self._decoder.feed(data):
            if self._ended:  # nothing may follow an error
                break
            out += self._pass(event)
        return out

    def end_round(self) -> RoundEnd:
        # Frames are whole or absent: a body that stopped inside one never brought metadata.
        try:
            message: dict[str, Any] | None = self._decoder.message()
        except (StreamError, IncompleteStream):
            message = None
        for key in _SUMMED:
            if message is not None and key in message:
                self._totals[key] = sum_usage([self._totals.get(key), message[key]])
        return RoundEnd(message, self._decoder.done, self._error)

    def next_round(self) -> None:
        super().next_round()
        self._decoder = ConverseStreamDecoder()
        self._indexes, self._visible_call, self._held = {}, False, {}

    def finish(self) -> bytes:
        out = self._take()
        if self._ended:
            return out
        self._ended = True
        for kind in _CLOSING:
            if (event := self._held.get(kind)) is not None:
                out += self._frame(event, self._closing(event.type, event.data))
        return out

    def fail(self, failure: Failure) -> bytes:
        out = self._take()
        if self._ended:
            return out
        self._ended = True
        headers = {
            ":exception-type": EXCEPTIONS[error_kind(failure.status)],
            ":content-type": "application/json",
            ":message-type": "exception",
        }
        return out + encode_frame(headers, dumps({"message": failure.text()}).encode("utf-8"))

    def _pass(self, event: Event) -> bytes:
        """The client bytes for one upstream frame (``b""``: held or hidden)."""
        data = event.data
        if data is not None and data is self._decoder.error:
            self._error, self._ended = data, True
            return event.raw  # the provider's own exception frame, renumbered nothing
        if not isinstance(data, dict):
            return event.raw
        if event.type in _CLOSING:
            self._held[event.type] = event
            return b""
        if event.type == "messageStart" and self.rounds > 1:
            return b""
        if event.type == "contentBlockStart":
            self._open(data)
        shown = self._renumber(data)
        return b"" if shown is None else self._frame(event, shown)

    def _open(self, data: dict[str, Any]) -> None:
        index = data.get(_INDEX)
        tool = as_dict(as_dict(data.get("start")).get("toolUse"))
        if not isinstance(index, int) or index in self._indexes:
            return
        if tool and tool.get("name") == self.phantom:
            self._indexes[index] = None
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
        """The final round's closing event as the client must see it (``data`` itself if unchanged)."""
        if kind == "messageStop" and data.get("stopReason") == "tool_use" and not self._visible_call:
            return {**data, "stopReason": "end_turn"}
        if kind == "metadata" and self.rounds > 1:
            return {**data, **{key: self._totals[key] for key in _SUMMED if key in self._totals}}
        return data

    def _frame(self, event: Event, data: dict[str, Any]) -> bytes:
        """The upstream's frame when ``data`` is its own unchanged payload, else a fresh one."""
        self._show(event.type, data)
        if data is event.data:
            return event.raw
        headers = {":event-type": event.type, ":content-type": "application/json", ":message-type": "event"}
        return encode_frame(headers, dumps(data).encode("utf-8"))
