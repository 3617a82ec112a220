"""OpenAI Responses SSE: the rounds of a phantom loop as one live client stream.

What the client sees (see ``base`` for the contract):

- One ``sequence_number`` counter from 0 over the events it gets, and ``output_index``
  values consecutive over the items it gets (the SDK rejects a repeated index). An event
  nothing changes goes out as its raw bytes; a changed one is re-serialized.
- Round 1's lifecycle events (``response.created`` / ``queued`` / ``in_progress``); later
  rounds' are swallowed.
- Every event of a phantom ``function_call`` item is dropped (its ``output_index`` names
  them). A ``reasoning`` item is held until the next item's ``output_item.added`` (or the
  round's end) shows what it led to: one whose step (the items up to the next reasoning
  item) was phantom calls only is dropped with them, as ``OpenAIResponsesAdapter.strip``
  drops it, because a client replaying it without its following item is rejected by the
  API. The price: a reasoning summary reaches the client when its item ends, not token by
  token. A reasoning item kept at a round's very end goes out with the next bytes returned.
  Memory: besides the round's assembled response, the events of one held reasoning item
  and the held terminal event.
- ``response.completed`` / ``.incomplete`` are held; ``finish`` sends one, whose response
  is the last round's with ``output`` every visible item in client order and ``usage``
  summed over rounds (``merge`` of the stripped rounds), ``previous_response_id`` the
  client's own.
- The response ``id`` stays round 1's, the id ``response.created`` carried: the SDK's
  ``ResponseStreamState`` raises "Lifecycle response identity changed" when a terminal
  event names another. A stored chain continues from the last round's id (``merge``), so
  the runner maps round 1's id to it for the client's next ``previous_response_id``.
- Every response object echoes the client's own ``tools`` / ``tool_choice``, never the
  forwarded list with the search tool. So round 1's lifecycle and terminal events differ
  from the upstream's even without a search. The echo is the client's own bytes, spliced
  into the event as written: a catalog of thousands of tools is neither parsed nor
  re-serialized for the three events that carry it.

Errors. An upstream ``error`` event is passed on at once (only its ``sequence_number``,
the stream's counter, follows the client's count) and ends the client stream; so does an
upstream ``response.failed``, stitched like a terminal event. ``fail`` sends an ``error``
event, then ``response.failed`` (status "failed", ``error`` {code, message}). Both because
the readers differ: the openai SDK raises ``APIError`` on an event whose payload has an
``error`` object (its ``Stream`` checks ``data["error"]``; ``response.failed`` alone only
makes ``get_final_response`` raise a bare RuntimeError), while Codex ignores ``error``
events and takes ``response.failed``'s ``error.code`` (``rate_limit_exceeded`` with
"try again in Ns" sets its retry delay). The ``error`` event carries the object nested, as
the API sends it, and ``code`` / ``message`` / ``param`` at the top too, as the API
reference documents it.
"""

from __future__ import annotations

import bisect
import json
import secrets
import time
import uuid
from typing import Any, cast

from tooldisco.core import jsonspan
from tooldisco.apis.openai_responses.messages import echoed_fields, merge, phantom_call, strip
from tooldisco.apis.streaming import Event, IncompleteStream, StreamError, dumps
from tooldisco.apis.openai_responses.stream import ResponsesStreamDecoder
from tooldisco.apis.framing.sse import encode_event, reframe
from tooldisco.apis.base import Failure, OPENAI_ERROR_TYPES, RoundEnd, Stitcher, error_kind

_LIFECYCLE = ("response.created", "response.queued", "response.in_progress")
_HELD_TERMINAL = ("response.completed", "response.incomplete")
# Events that settle a held reasoning item (what it led to, or the round's end) rather than wait with it.
_ENDS_HOLD = ("response.output_item.added", *_HELD_TERMINAL, "response.failed")
# error_kind -> the OpenAI error type; the code a failed response names, when the upstream gave none.


class ResponsesStitcher(Stitcher):
    """One client Responses stream out of the rounds of one phantom loop."""

    def __init__(self, phantom: str, body: str) -> None:
        super().__init__(phantom)
        # What the client's response objects echo: a placeholder per field, replaced by the
        # client's raw JSON when the event is encoded (``_encode``). The placeholder is a random
        # string no upstream text can hold.
        token = secrets.token_hex(16)
        self._raw_echo = echoed_fields(body)
        self._echo = {key: f"tooldisco-echo-{key}-{token}" for key in self._raw_echo}
        self._splices = [(json.dumps(self._echo[key]), raw) for key, raw in self._raw_echo.items()]
        self._client_named_phantom = bool(phantom) and phantom in body
        self._parsed_echo: dict[str, Any] | None = None  # the client's echo parsed, when a comparison needs it
        # The client's stream assembled from the events as they are emitted; its echoed fields
        # are the placeholders (what the session keeps of a turn is its output, not its echo).
        self._client = ResponsesStreamDecoder()
        self._body = body  # its ``model`` is read only for a failure before any upstream response
        self._last_seq = -1  # the last sequence_number the client got
        self._shift = 0  # added to the round's upstream sequence_numbers: where the round starts
        self._dropped: list[int] = []  # the round's upstream sequence_numbers the client does not get, sorted
        self._rebase = False  # the next numbered event starts a later round: it continues the count
        self._emitted = False  # the client got an event
        self._named: bool | None = None  # the stream names its events (``event:`` lines); None: unseen
        self._terminal_sent = False  # the client got the round's terminal event
        self._next_index = 0  # past the highest output_index the client got
        self._index_shift = 0  # added to the upstream's output_index: the hidden items taken out
        self._index_rebase = False  # the next item starts a later round: it continues the client's
        self._shown: dict[str, Any] | None = None  # the finished visible rounds, merged
        self._id: str | None = None  # round 1's response id
        self._start_round()

    def _start_round(self) -> None:
        self._decoder = ResponsesStreamDecoder()
        self._indexes: dict[int, int] = {}  # upstream output_index -> client output_index
        self._hidden: set[int] = set()  # upstream output_index of phantom calls
        self._held: list[Event] = []  # the events of a reasoning item whose fate is open
        self._held_index: int | None = None
        self._held_shift = 0  # the output_index shift where the held reasoning item came
        self._held_led_to_phantom = False  # only phantom calls came after the held reasoning
        self._terminal: Event | None = None
        self._after: list[Event] = []  # from a held terminal event on, every event, in order
        self._trailing = b""  # what the round's body held after its last event
        self._error: Any = None

    # -- the contract --------------------------------------------------------------------
    def feed(self, data: bytes) -> bytes:
        for event in self._decoder.feed(data):
            self._route(event)
        return self._take()

    def end_round(self) -> RoundEnd:
        for event in self._decoder.feed(b""):  # an event the upstream left unterminated
            self._route(event)
        if not self._ended:
            self._settle_held()
        if self.untouched:
            self._out += self._decoder.tail
        else:
            self._trailing = self._decoder.tail
        return RoundEnd(self._message(), self._decoder.done, self._error)

    def next_round(self) -> None:
        self._shown = self._visible(self._message())
        # The held terminal event goes (and a data-only stream's ``[DONE]``); anything else that
        # came after it goes out in its place.
        for event in self._after:
            if event is not self._terminal and isinstance(event.data, dict):
                self._emit(event)
        super().next_round()
        self._start_round()
        self._rebase = self._index_rebase = True

    def finish(self) -> bytes:
        if self._ended:
            return self._take()
        if self._terminal is None and not (self._terminal_sent or self.untouched or self._errored):
            return self.fail(Failure(502, message="upstream stream ended early"))  # never an empty success
        for event in self._after:  # in the order they came
            if event is self._terminal:
                self._emit(event, response=self._client_response(self._message()))
            elif isinstance(event.data, dict):
                self._emit(event)
            else:
                self._out += event.raw
        self._ended = True
        return self._take() + self._trailing

    def fail(self, failure: Failure) -> bytes:
        if self._ended:
            return self._take()
        self._settle_held()
        error = error_object(failure)
        message = self._message()
        response = self._client_response(message) if message is not None or self._shown else self._bare()
        response = {**response, "status": "failed", "error": {"code": error["code"], "message": error["message"]}}
        if not self._emitted:  # nothing went out yet: the stream still opens as the API's does
            self._emit_new("response.created", response={**response, "status": "in_progress", "error": None})
        self._emit_new("error", code=error["code"], message=error["message"], param=error["param"], error=error)
        self._emit_new("response.failed", response=response)
        self._ended = True
        return self._take()

    # -- routing upstream events -----------------------------------------------------------
    def _route(self, event: Event) -> None:
        if self._ended:
            return
        if self._named is None and isinstance(event.data, dict):
            self._named = b"event:" in event.raw
        if self._after:  # the round's end is held: so is everything after it, in order
            self._after.append(event)
            return
        data = event.data
        if self._held_index is not None and not (isinstance(data, dict) and data.get("type") in _ENDS_HOLD):
            self._held.append(event)  # a reasoning item is held: so is what comes with it, in order
            return
        if not isinstance(data, dict):  # not a Responses event (keep-alive, ``[DONE]``): as it came
            self._out += event.raw
        elif self._errored:  # after the upstream's error, the rest of its round as it came (the echo aside)
            if isinstance(data.get("response"), dict):
                self._emit(event, response=self._echoed(data["response"]))
            else:
                self._emit(event)
        elif event.type == "error":
            self._error = data
            self._errored = True
            self._emit(event)
        elif event.type in _LIFECYCLE:
            if self.rounds == 1:
                self._opened(data.get("response"))
                self._emit(event, response=self._echoed(data.get("response")))
            else:
                self._drop(data)
        elif event.type in _HELD_TERMINAL or event.type == "response.failed":
            self._terminal_event(event, data)
        else:
            self._item_event(event, data)

    def _terminal_event(self, event: Event, data: dict[str, Any]) -> None:
        """A round's last event. With nothing hidden in round 1 it goes out as it came (the echo
        aside); else a completed or incomplete one waits for the runner, stitched, and a failed
        one goes out stitched at once."""
        self._settle_held()
        failed = event.type == "response.failed"
        if failed:
            self._error = data
        if self.rounds == 1 and not self._hidden:
            self._terminal_sent = True
            self._emit(event, response=self._echoed(data.get("response")))
        elif failed:
            self._errored = self._terminal_sent = True
            self._emit(event, response=self._client_response(self._message()))
        else:
            self._terminal = event
            self._after.append(event)

    def _item_event(self, event: Event, data: dict[str, Any]) -> None:
        index = data.get("output_index")
        if not isinstance(index, int):
            index = None  # names no item: the event passes as it came
        if event.type == "response.output_item.added" and index is not None:
            self._added(index, data.get("item"))
        if index in self._hidden:
            self._drop(data)
            return
        if index is not None and index == self._held_index:
            self._held.append(event)
        elif index in self._indexes:
            self._emit(event, output_index=self._indexes[index])
        else:
            self._emit(event)

    def _added(self, index: int, item: Any) -> None:
        """A new item shows what a held reasoning item led to, then takes its own place."""
        if self._index_rebase:  # a later round's items continue after what the client has seen
            self._index_shift, self._index_rebase = self._next_index - index, False
        if phantom_call(item, self.hidden):
            self._hidden.add(index)
            self._index_shift -= 1
            self._held_led_to_phantom = self._held_index is not None
            return
        if isinstance(item, dict) and item.get("type") == "reasoning":
            self._settle_held()  # its step ends where the next reasoning item starts
            self._held_index, self._held_shift = index, self._index_shift
        else:
            self._release_held()  # it led to a visible item: it stays
            self._indexes[index] = self._client_index(index + self._index_shift)

    def _settle_held(self) -> None:
        """The held reasoning item's step is over: dropped if it was phantom calls only."""
        if self._held_led_to_phantom:
            held, index = self._held, self._held_index
            self._held, self._held_index, self._held_led_to_phantom = [], None, False
            self._index_shift -= 1
            for event in held:
                if isinstance(event.data, dict) and event.data.get("output_index") == index:
                    self._drop(event.data)
                else:
                    self._route(event)
        else:
            self._release_held()

    def _release_held(self) -> None:
        if self._held_index is None:
            return
        held, index = self._held, self._held_index
        self._held, self._held_index, self._held_led_to_phantom = [], None, False
        self._indexes[index] = self._client_index(index + self._held_shift)
        for event in held:  # in the order they came: what arrived while it was held too
            if isinstance(event.data, dict) and event.data.get("output_index") == index:
                self._emit(event, output_index=self._indexes[index])
            else:
                self._route(event)

    # -- what the client sees --------------------------------------------------------------
    def _emit(self, event: Event, **fields: Any) -> None:
        """An upstream event as the client's next one: raw when nothing in it changes. Only its
        ``sequence_number`` follows the client's count, and only where it has one: an upstream's
        numbering (gaps included) stands until a hidden event or a later round shifts it."""
        number = event.data.get("sequence_number")
        if isinstance(number, int) and not isinstance(number, bool):
            fields["sequence_number"] = self._number(number)
        changed = {k: v for k, v in fields.items() if k not in event.data or event.data[k] != v}
        data = {**event.data, **changed} if changed else event.data
        self._show(event.type, data)
        self._emitted = True
        if not changed:
            self._out += event.raw
            return
        if set(changed) != {"response"} or not self._echo_only(event.data.get("response"), changed["response"]):
            self._touched = True
        self._out += self._encode(data, event.type, event.raw)

    def _echo_only(self, upstream: Any, shown: Any) -> bool:
        """Whether ``shown`` is ``upstream`` with only its echoed request fields replaced."""
        return isinstance(upstream, dict) and isinstance(shown, dict) and set(upstream) == set(shown) and all(
            upstream[k] is shown[k] for k in upstream if k not in self._echo)

    def _drop(self, data: Any) -> None:
        """An upstream event the client does not get: the numbers after it close the gap."""
        self._touched = True
        number = data.get("sequence_number") if isinstance(data, dict) else None
        if isinstance(number, int) and not isinstance(number, bool):
            self._rebased(number)
            bisect.insort(self._dropped, number)

    def _number(self, number: int) -> int:
        """The client's sequence_number for the upstream's ``number``: shifted by the round's start
        and by the round's dropped events numbered below it (whenever a held event goes out)."""
        self._rebased(number)
        client = number + self._shift - bisect.bisect_left(self._dropped, number)
        self._last_seq = max(self._last_seq, client)
        return client

    def _rebased(self, number: int) -> None:
        if self._rebase:  # a later round's first event continues the client's count
            self._shift, self._rebase, self._dropped = self._last_seq + 1 - number, False, []

    def _emit_new(self, kind: str, **fields: Any) -> None:
        self._last_seq += 1
        data = {"type": kind, "sequence_number": self._last_seq, **fields}
        self._show(kind, data)
        self._emitted = self._touched = True
        self._out += self._encode(data, kind, b"")

    def _encode(self, event: dict[str, Any], kind: str, raw: bytes) -> bytes:
        """One event on the wire, the echo placeholders replaced by the client's own JSON, in the
        framing of the upstream event it stands for (``raw``), else of the stream."""
        text = dumps(event)
        for placeholder, raw_echo in self._splices:
            if placeholder in text:
                text = text.replace(placeholder, raw_echo)
        if raw:
            return reframe(raw, text)
        return encode_event(text, kind if self._named is not False else None)

    def _opened(self, response: Any) -> None:
        """Round 1's lifecycle response: its id is the one the client's SDK holds us to."""
        if self._id is None and isinstance(response, dict) and isinstance(response.get("id"), str):
            self._id = response["id"]

    def _message(self) -> dict[str, Any] | None:
        """The current round's response as the decoder assembles it (None before it started or
        after an error event)."""
        try:
            return cast(dict[str, Any], self._decoder.message())
        except (IncompleteStream, StreamError):
            return None

    def _visible(self, message: dict[str, Any] | None) -> dict[str, Any] | None:
        """The finished rounds plus ``message`` as the client sees them, merged."""
        rounds = [r for r in (self._shown, message and strip(message, self.hidden)) if r]
        return merge(rounds) if rounds else None

    def _client_response(self, message: dict[str, Any] | None) -> dict[str, Any]:
        response = self._visible(message) or {}
        if self._id is not None:
            response["id"] = self._id
        return cast(dict[str, Any], self._echoed(response))

    def _echoed(self, response: Any) -> Any:
        """A response object with the client's own ``tools`` / ``tool_choice`` where it echoes
        them; ``response`` itself when it echoes them already (its bytes then pass as they came)."""
        if not isinstance(response, dict):
            return response
        keys = [k for k in self._echo if k in response]
        if keys and not self._differs(response, keys):
            return response
        return {**response, **{k: self._echo[k] for k in keys}}

    def _differs(self, response: dict[str, Any], keys: list[str]) -> bool:
        """Whether the response echoes other values than the client's. Forwarded tools that hold
        the search tool, which the client's do not name, differ without parsing the client's."""
        tools = response.get("tools")
        if not self._client_named_phantom and isinstance(tools, list) and any(
                isinstance(t, dict) and t.get("name") == self.phantom for t in tools):
            return True
        if self._parsed_echo is None:
            self._parsed_echo = {key: json.loads(raw) for key, raw in self._raw_echo.items()}
        return any(response[k] != self._parsed_echo[k] for k in keys)

    def _bare(self) -> dict[str, Any]:
        """A response object for a failure before the upstream sent any (the API's fields)."""
        model = jsonspan.find(self._body, ["model"])  # the whole body is the conversation: decode one member
        return {"id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": int(time.time()),
                "status": "failed", "error": None,
                "model": json.loads(self._body[model[0]:model[1]]) if model is not None else None,
                "output": [], "usage": None,
                **self._echo}

    def _client_index(self, index: int) -> int:
        self._next_index = max(self._next_index, index + 1)
        return index


def error_object(failure: Failure) -> dict[str, Any]:
    """The OpenAI error object for a failure: the upstream's own fields where its body has one."""
    upstream = failure.upstream_error() or {}
    kind = OPENAI_ERROR_TYPES[error_kind(failure.status)]
    code = upstream.get("code")
    return {"type": upstream.get("type") or kind, "code": code if isinstance(code, str) else kind,
            "message": failure.text(), "param": upstream.get("param")}
