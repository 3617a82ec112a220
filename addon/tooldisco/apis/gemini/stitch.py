"""Gemini ``streamGenerateContent`` (``alt=sse`` and the JSON array): the rounds of a phantom
loop as one live client stream.

Gemini has no start or stop event: every chunk is a whole GenerateContentResponse, a function
call arrives whole as one part, and the chunk carrying ``finishReason`` ends the round. What
the client sees (see ``base`` for the rule and the contract):

- A round that has hidden nothing (round 1, no phantom or dispatcher call yet) passes every
  chunk as its bytes at once, the finishing one included, and the bytes after its last chunk
  (the array's ``]``, SSE blank lines): a stream without a search is the upstream's, byte for
  byte, however it ends.
- Each chunk as it arrives, minus the phantom's ``functionCall`` parts; a chunk left with
  nothing to show is dropped. When a phantom part carried the step's ``thoughtSignature``, the
  next visible call gets Google's documented stand-in, as ``GeminiAdapter.strip`` does (Gemini 3
  rejects a replayed step whose first call is unsigned). Other signatures pass unchanged.
- Call-through (``dispatch``): a dispatcher's ``functionCall`` part goes out as a call of the
  real tool it stands for (its id and signature kept), or is hidden like the phantom's when it
  stands for none (the loop answers it).
- Once a round hid or rewrote a call (and in every round after the first), the chunk with
  ``finishReason`` is held while the runner decides, with every chunk after it, in order:
  ``next_round`` sends their parts without ``finishReason`` and usage, ``finish`` sends them
  whole. ``finishReason`` is ``STOP`` for calls too, so it never needs fixing.
- ``usageMetadata`` is the round's running total on every chunk: from round 2 on, the earlier
  rounds' totals are added to each (details by modality, ``GeminiAdapter.merge``'s rule), so the
  client's counts only grow and the last is the sum. ``responseId`` is round 1's.
- The JSON array keeps its framing: ``[`` as soon as the upstream opens its array (as a plain
  proxy passes it: the client's first byte does not wait for a round whose only element is a
  search), ``,`` between the elements the client gets, the upstream's own ``]`` at the end (the
  API's when a stitched stream's last round did not close its array). An unchanged chunk goes
  out as its bytes.

Errors are ``{"error": {code, message, status}}`` chunks (an SSE event or an array element):
google-genai raises ``ClientError``/``ServerError`` (by ``code``) for a chunk whose JSON starts
with ``{"error":``. An upstream one is passed on at once (after what was held before it) and the
rest of the round passes as it came; nothing is added, not even the array's end. ``fail`` sends
one: the upstream's own error object when the failure body holds one, else the canonical status
for the HTTP status.
"""

from __future__ import annotations

import re
from typing import Any, cast

from tooldisco.apis.gemini.messages import STAND_IN_SIGNATURE, call_of, merge
from tooldisco.apis.streaming import Event, IncompleteStream, StreamError, as_list, dumps
from tooldisco.apis.gemini.stream import SSE_NEWLINE, GeminiStreamDecoder
from tooldisco.apis.framing.sse import encode_event
from tooldisco.apis.base import Failure, RoundEnd, Stitcher, error_kind
from tooldisco.apis.base import Dispatcher

# error_kind -> google.rpc.Code name (the ``status`` of Google's HTTP error mapping).
_STATUSES = {
    "rate_limit": "RESOURCE_EXHAUSTED",
    "overloaded": "UNAVAILABLE",
    "timeout": "DEADLINE_EXCEEDED",
    "invalid_request": "INVALID_ARGUMENT",
    "server_error": "INTERNAL",
}
# Fields every chunk repeats: a chunk we emptied that has only these shows the client nothing.
_ROUTINE = frozenset({"candidates", "usageMetadata", "modelVersion", "responseId", "createTime"})
_ROUTINE_CANDIDATE = frozenset({"content", "index"})
_CLOSING_CANDIDATE = ("finishReason", "finishMessage")
# What the API writes between array elements and after the last one.
_SEPARATOR, _END = b"\n,\r\n", b"\n]"
_ELEMENT_PREFIX = re.compile(rb"\s*[\[,]?\s*")
_ARRAY_END = re.compile(rb"\s*\]\s*")


def _plus(earlier: dict[str, Any] | None, usage: Any) -> Any:
    """``usage`` with the earlier rounds' totals added, by the rule ``GeminiAdapter.merge`` sums with."""
    if earlier is None or not isinstance(usage, dict):
        return usage
    return merge([{"usageMetadata": earlier}, {"usageMetadata": usage}])["usageMetadata"]


def _finishes(chunk: dict[str, Any]) -> bool:
    return any(isinstance(c, dict) and c.get("finishReason") for c in as_list(chunk.get("candidates")))


def _shows_something(chunk: dict[str, Any]) -> bool:
    """Whether a chunk we changed still carries something for the client: a part, or a field
    beyond those every chunk repeats (a running usage total, the model, the ids)."""
    if set(chunk) - _ROUTINE:
        return True
    for candidate in as_list(chunk.get("candidates")):
        if not isinstance(candidate, dict) or set(candidate) - _ROUTINE_CANDIDATE:
            return True
        content = candidate.get("content")
        if not isinstance(content, dict) or content.get("parts"):
            return True
    return False


def _without_closing(chunk: dict[str, Any]) -> dict[str, Any]:
    """A held chunk as it goes out mid-stream: no finish reason, no usage (a later round's
    chunks carry the running total)."""
    out = {k: v for k, v in chunk.items() if k != "usageMetadata"}
    candidates = chunk.get("candidates")
    if isinstance(candidates, list):
        out["candidates"] = [
            {k: v for k, v in c.items() if k not in _CLOSING_CANDIDATE} if isinstance(c, dict) else c
            for c in candidates
        ]
    return out


def error_object(failure: Failure) -> dict[str, Any]:
    """Google's error object: the upstream's own, completed with the code and status of the
    failure so that google-genai picks the right exception class."""
    status = failure.status if 400 <= failure.status < 600 else 500
    ours = {"code": status, "message": failure.text(), "status": _STATUSES[error_kind(status)]}
    return {**ours, **(failure.upstream_error() or {})}


class GeminiStitcher(Stitcher):
    """Gemini chunks in the client's framing (``sse``: ``alt=sse``, else the JSON array)."""

    def __init__(self, phantom: str, sse: bool = True, dispatch: Dispatcher | None = None) -> None:
        super().__init__(phantom)
        self.sse = sse
        self.dispatch = dispatch
        self._decoder = GeminiStreamDecoder()
        self._client = GeminiStreamDecoder()  # fed the chunks the client gets (``shown``)
        self._unsigned: set[int] = set()  # candidates whose hidden call held the step's signature
        self._ranks: dict[int, int] = {}  # candidate -> its calls so far this round (``call_of``'s rank)
        self._hid = False  # this round hid or rewrote a call: its finishing chunk waits for the runner
        self._held: list[tuple[Event, Any]] = []  # the finishing chunk and all after it, as shown (None: hidden)
        self._rest = b""  # how the round's body ended: the bytes after its last chunk (the array's "]")
        self._round_usage: Any = None  # the round's final usageMetadata
        self._earlier: dict[str, Any] | None = None  # usage summed over the rounds before this one
        self._response_id: Any = None  # round 1's responseId
        self._error: Any = None  # the upstream error chunk passed on
        self._opened = False  # array form: the "[" went out
        self._elements = False  # array form: an element went out (the next one follows a ",")

    def feed(self, data: bytes) -> bytes:
        events = self._decoder.feed(data)
        if not self.sse and not self._opened and self._decoder.sse is False:
            # The upstream's "[" (and what came before it) goes out at once, as a plain proxy passes it.
            head = self._decoder.rest if not events else events[0].raw
            self._out += head[: head.index(b"[") + 1]
            self._opened = True
        return self._take() + self._relay(events)

    def end_round(self) -> RoundEnd:
        # Untouched (or after an error): what the body ended with passes as it came. Else an SSE
        # event the upstream left unterminated is re-encoded (raw b""); a truncated array element
        # (not JSON) is dropped.
        plain = self.untouched or self._errored
        flushed = [e if plain else Event(e.type, e.data, b"") for e in self._decoder.feed(b"")
                   if plain or isinstance(e.data, dict)]
        out = self._relay(flushed)
        if plain:  # with the body's last bytes, for ``finish`` (``fail`` must not follow a half event)
            self._rest = out + self._decoder.rest
        else:
            self._out += out
            self._rest = self._decoder.rest
        try:
            message: dict[str, Any] | None = self._decoder.message()
        except (StreamError, IncompleteStream):
            message = None
        self._round_usage = message.get("usageMetadata") if message is not None else None
        return RoundEnd(message, self._decoder.done, self._error)

    def next_round(self) -> None:
        super().next_round()
        self._ended = self._ended or self._errored  # the upstream's error ended the client stream
        for event, shown in self._held:
            if shown is None:  # only what the round hid
                continue
            if not isinstance(shown, dict):  # a chunk we do not understand: in its place
                self._out += self._frame(event, shown)
            elif _shows_something(chunk := _without_closing(shown)):
                self._out += self._frame(event, chunk)
        if isinstance(self._round_usage, dict):
            self._earlier = _plus(self._earlier, self._round_usage)
        self._decoder = GeminiStreamDecoder()
        self._unsigned, self._held, self._round_usage, self._ranks, self._hid = set(), [], None, {}, False
        self._rest = b""

    def finish(self) -> bytes:
        out = self._take()
        if self._ended:
            return out
        self._ended = True
        out += self._release()
        if self.sse or self.untouched or self._errored:  # blank lines, or the array's end, as they came
            return out + self._rest
        end = self._rest if _ARRAY_END.fullmatch(self._rest) else _END
        return out + (b"" if self._opened else b"[") + end

    def fail(self, failure: Failure) -> bytes:
        out = self._take()
        if self._ended:
            return out
        self._ended = True
        if self._errored:  # the upstream's own error went out already
            return out
        error = dumps({"error": error_object(failure)})
        if self.sse:
            return out + encode_event(error, newline=SSE_NEWLINE)
        return out + (_SEPARATOR if self._elements else b"" if self._opened else b"[") + error.encode("utf-8") + _END

    def _release(self) -> bytes:
        """The held chunks whole, in their order (the stream ends here)."""
        out = bytearray()
        held, self._held = self._held, []
        for event, shown in held:
            if shown is not None:
                out += self._frame(event, shown)
        return bytes(out)

    def _pass(self, event: Event) -> bytes:
        """The client bytes for one upstream chunk (``b""``: held or hidden)."""
        data = event.data
        if self._errored:  # after the upstream's error: as it came
            return self._frame(event, data)
        if event.type == "error":
            self._error, self._errored = data, True
            return self._release() + self._frame(event, data)  # the provider's own, as it came
        if not isinstance(data, dict):
            shown: Any = data
        else:
            if self.rounds == 1 and self._response_id is None:
                self._response_id = data.get("responseId")
            shown = self._shown(data)
        if self._held or (isinstance(data, dict) and _finishes(data) and (self._hid or self.rounds > 1)):
            self._held.append((event, shown))
            self._touched = True
            return b""
        if shown is None:
            self._touched = True
            return b""
        return self._frame(event, shown)

    def _shown(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        """``chunk`` as the client sees it (``chunk`` itself when nothing changes): phantom
        parts gone; from round 2 on, round 1's id and usage that includes the earlier rounds.
        None when the phantom's parts were all it showed."""
        out = chunk
        candidates = chunk.get("candidates")
        if isinstance(candidates, list):
            kept = [self._candidate(position, c) for position, c in enumerate(candidates)]
            if any(k is not c for k, c in zip(kept, candidates)):
                out = {**out, "candidates": kept}
                if not _shows_something(out):
                    return None
        if self.rounds > 1:
            first = self._response_id
            if first is not None and "responseId" in out and out["responseId"] != first:
                out = {**out, "responseId": first}
            if isinstance(out.get("usageMetadata"), dict) and self._earlier is not None:
                out = {**out, "usageMetadata": _plus(self._earlier, out["usageMetadata"])}
        return out

    def _candidate(self, position: int, candidate: Any) -> Any:
        """One candidate without the phantom's calls (the API writes fields in lowerCamelCase)."""
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            return candidate
        index = candidate.get("index")
        key = index if isinstance(index, int) else position
        kept: list[Any] = []
        for part in parts:
            call = part.get("functionCall") if isinstance(part, dict) else None
            if isinstance(call, dict):
                rank = self._ranks[key] = self._ranks.get(key, -1) + 1
                if self.hides(call.get("name")) or (self.dispatch and call.get("name") == self.dispatch.name):
                    self._hid = True
                if self.hides(call.get("name")) or (real := self._real(call, rank)) is None:
                    if "thoughtSignature" in part:
                        self._unsigned.add(key)
                    continue
                if real is not call:
                    part = {**part, "functionCall": real}
            if isinstance(call, dict) and key in self._unsigned:
                self._unsigned.discard(key)
                if "thoughtSignature" not in part:
                    part = {**part, "thoughtSignature": STAND_IN_SIGNATURE}
            kept.append(part)
        if len(kept) == len(parts) and all(k is p for k, p in zip(kept, parts)):
            return candidate
        return {**candidate, "content": {**cast(dict[str, Any], content), "parts": kept}}

    def _real(self, call: dict[str, Any], rank: int) -> dict[str, Any] | None:
        """A call as the client gets it: a dispatcher call as the real call it stands for
        (None: it stands for none), any other as it is."""
        if self.dispatch is None or call.get("name") != self.dispatch.name:
            return call
        target = self.dispatch.target(call_of(call, rank))
        return None if isinstance(target, str) else {**call, "name": target.name, "args": target.arguments}

    def _frame(self, event: Event, data: Any) -> bytes:
        """``data`` in the client's framing: the upstream's bytes when it is the event's own
        unchanged payload and they are whole, else re-encoded."""
        unchanged = data is event.data and bool(event.raw)
        self._touched = self._touched or not unchanged
        self._show(event.type, data)
        if self.sse:
            return event.raw if unchanged else encode_event(dumps(data), newline=SSE_NEWLINE)
        match = _ELEMENT_PREFIX.match(event.raw)
        head = match.end() if match else 0
        prefix, body = event.raw[:head], event.raw[head:]
        if self._elements:  # a "," before it: the upstream's own separator, or the API's
            lead = prefix if b"," in prefix else _SEPARATOR
        elif self._opened:  # the "[" went out alone: nothing of the prefix but the space after it
            lead = prefix[prefix.index(b"[") + 1:] if b"[" in prefix else b""
        else:
            lead = prefix if b"[" in prefix else b"["
        self._opened = self._elements = True
        return lead + (body if unchanged else dumps(data).encode("utf-8"))
