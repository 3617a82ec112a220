"""OpenAI Chat Completions SSE: the rounds of a phantom loop as one live client stream.

What the client sees (see ``base`` for the contract):

- Every chunk as it arrives, its raw bytes when nothing in it changes, else re-serialized.
- Tool-call fragments of the phantom call are dropped: the first fragment of a call names
  it (``id`` + ``function.name``), later ones only repeat its upstream ``index``, so each
  choice maps upstream index -> client index (or hidden). Visible calls get consecutive
  indexes per choice over the whole client stream (the SDK's ``accumulate_delta`` inserts at
  ``index``: a gap or a repeat corrupts its snapshot). A fragment chunk left with no visible
  call is dropped; one that still carries role, content or anything else stays.
- Held until the runner decides: chunks with a non-null ``finish_reason``, the usage chunk
  (``choices: []`` with ``usage``) and ``[DONE]``. ``finish`` sends them, ``finish_reason``
  "tool_calls" turned into "stop" when the round's only calls were hidden (as
  ``OpenAIChatAdapter.strip`` does). ``next_round`` drops them; a closing chunk that also
  carried a visible delta (some compatible servers send the last content with the
  ``finish_reason``) has that delta go out with the next bytes returned, unfinished.
- Rounds >= 2: ``id`` and ``created`` rewritten to round 1's (one completion for the
  client); ``delta.role`` dropped (the SDK appends strings: "assistantassistant"); the
  first content after earlier rounds' content is prefixed with "\\n\\n", as
  ``OpenAIChatAdapter.merge`` joins round texts. Any ``usage`` object is the round's own
  plus the finished rounds' sum, so the last usage chunk carries the total (the SDK takes
  the last chunk's ``usage``). Fields ``merge`` takes from the last round only
  (``reasoning_content``, ``logprobs``) went out live and so accumulate over rounds.
- Call-through (``dispatch``): a dispatcher call is held while its arguments stream, and when
  it is whole (the next call of its choice begins, or the choice finishes) it goes out as one
  fragment calling the real tool, in a chunk of its own, at the client index it would have
  had; one that stands for no tool is hidden like the phantom's (the loop answers it).
- Azure content-filter side chunks (``object: ""``), non-JSON data and ``obfuscation``
  padding pass as they are.

Errors. The API reports a failure after the 200 as ``data: {"error": {message, type,
param, code}}`` and has been seen to follow it with ``data: [DONE]``; the openai SDK's
``Stream`` raises ``APIError`` on any payload with an ``error`` object (before it would
read ``[DONE]``), and clients that read until ``[DONE]`` end cleanly. So an upstream error
event goes out at once as it came, followed by our ``[DONE]``, and ends the client stream;
``fail`` sends the same pair, with the upstream's own error object when its body holds one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from tooldisco.core.types import ToolCall
from tooldisco.apis.usage import sum_usage
from tooldisco.apis.openai_shared import openai_error_object, parse_arguments
from tooldisco.apis.streaming import Event, IncompleteStream, StreamError, as_dict, as_list, dumps
from tooldisco.apis.openai_chat.stream import DONE, ChatCompletionStreamDecoder
from tooldisco.apis.framing.sse import encode_event, reframe
from tooldisco.apis.base import Failure, RoundEnd, Stitcher
from tooldisco.apis.base import Dispatcher

_CHUNK = "chat.completion.chunk"
_SEPARATOR = "\n\n"  # between rounds' texts, as OpenAIChatAdapter.merge joins them
_HELD = -1  # a call's client index while it is a dispatcher call still arriving
_ENVELOPE_SKIP = frozenset({"choices", "usage", "obfuscation"})  # not repeated in a chunk of our own


@dataclass
class _Dispatching:
    """A dispatcher call being received: its upstream index, id and argument fragments."""

    index: int
    id: Any
    arguments: list[str] = field(default_factory=list)


class ChatStitcher(Stitcher):
    """One client Chat Completions stream out of the rounds of one phantom loop."""

    def __init__(self, phantom: str, dispatch: Dispatcher | None = None) -> None:
        super().__init__(phantom)
        self.dispatch = dispatch
        self._envelope: dict[str, Any] = {}  # the last chunk's fields but its choices: for chunks of our own
        self._id: Any = None  # round 1's completion id and created, once its first chunk came
        self._created: Any = None
        self._next_call: dict[int, int] = {}  # choice -> the client's next tool-call index
        self._texted: set[int] = set()  # choices whose earlier rounds showed content
        self._prior_usage: Any = None  # usage summed over the finished rounds
        self._client = ChatCompletionStreamDecoder()  # fed the chunks the client gets (``shown``)
        self._start_round()

    def _start_round(self) -> None:
        self._decoder = ChatCompletionStreamDecoder()
        self._calls: dict[tuple[int, int], int | None] = {}  # (choice, upstream index) -> client index; None: hidden
        self._hidden: set[int] = set()  # choices with a phantom call this round
        self._shown: set[int] = set()  # choices with a visible call this round
        self._round_texted: set[int] = set()  # choices with content this round
        self._round_roled: set[int] = set()  # choices whose role this round was taken out
        self._held: list[tuple[Event, Any]] = []  # closing events, as the client would get them
        self._dispatching: dict[int, _Dispatching] = {}  # choice -> its dispatcher call still arriving
        self._whole: list[tuple[int, dict[str, Any]]] = []  # (choice, real call fragment) to send next

    # -- the contract --------------------------------------------------------------------
    def feed(self, data: bytes) -> bytes:
        for event in self._decoder.feed(data):
            self._route(event)
        return self._take()

    def end_round(self) -> RoundEnd:
        if self.untouched:  # an event the upstream left open goes as it came, and what followed it
            for event in self._decoder.feed(b""):
                self._route(event)
            self._out += self._decoder.tail
        else:
            # A blank line first ends an event the upstream left open, so whatever the client
            # gets next starts an event of its own; it changes nothing the decoder assembles.
            # Such an event was cut off: its text is no JSON the client could parse (the SDK
            # would raise on it before it read the error that follows), so it does not go out.
            for event in self._decoder.feed(b"\n\n") + self._decoder.feed(b""):
                if isinstance(event.data, dict) or event.type in ("done", "error"):
                    self._route(event)
        for choice in list(self._dispatching):  # a round that ended without finishing its choice
            self._dispatched(choice)
        self._send_whole()
        return RoundEnd(self._message(), self._decoder.done, self._decoder.error)

    def next_round(self) -> None:
        message = self._message()
        self._prior_usage = sum_usage([self._prior_usage, message and message.get("usage")])
        self._texted |= self._round_texted
        self._release_held()
        super().next_round()
        self._start_round()

    def finish(self) -> bytes:
        if self._ended:
            return self._take()
        if not self._decoder.done and not self.untouched and not self._errored:  # never an empty success
            return self.fail(Failure(502, message="upstream stream ended early"))
        for event, chunk in self._held:  # in the order they came
            self._emit(event, chunk)
        self._ended = True
        return self._take()

    def fail(self, failure: Failure) -> bytes:
        if self._ended:
            return self._take()
        self._release_held()
        self._out += encode_event(dumps({"error": openai_error_object(failure)})) + encode_event(DONE)
        self._ended = True
        return self._take()

    # -- routing upstream events -----------------------------------------------------------
    def _route(self, event: Event) -> None:
        if self._ended:
            return
        data = event.data
        if self._errored:  # after the upstream's error, the rest of its round as it came
            self._emit(event, data)
            return
        chunk: Any = data
        if event.type == "error":  # the upstream's own: as it came; what it sends after it too
            self._errored = True
        elif event.type != "done" and isinstance(data, dict) and data.get("object", _CHUNK) == _CHUNK:
            chunk = self._client_chunk(data)
            if chunk is None:  # only hidden fragments were in it
                self._touched = True
                return
        # Keep-alive text, Azure content-filter side chunks and unknown events pass where they came.
        closes = event.type == "done" or (isinstance(chunk, dict) and _closes(chunk))
        if self._held or (closes and (self.rounds > 1 or self._hidden or self._dispatching or self._whole)):
            # The round hid a call (or holds a dispatcher call still arriving): its end waits for
            # the runner, and so does all after it, in order.
            self._held.append((event, chunk))
        else:
            self._emit(event, chunk)

    def _client_chunk(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The chunk as the client gets it; None when only hidden fragments were in it."""
        chunk = dict(data)
        if self.rounds == 1 and self._id is None and data.get("id"):
            self._id, self._created = data["id"], data.get("created")
        elif self.rounds > 1 and self._id is not None:
            chunk.update({key: value for key, value in (("id", self._id), ("created", self._created)) if key in data})
        if isinstance(data.get("usage"), dict) and self._prior_usage is not None:
            chunk["usage"] = sum_usage([self._prior_usage, data["usage"]])
        self._envelope = {k: v for k, v in chunk.items() if k not in _ENVELOPE_SKIP}
        choices = data.get("choices")
        if isinstance(choices, list) and choices:
            chunk["choices"] = [c for c in map(self._client_choice, choices) if c is not None]
            self._send_whole()  # before this chunk: its calls come after the ones that are whole now
            if not chunk["choices"] and chunk.get("usage") is None:
                return None
        return chunk

    def _client_choice(self, choice: Any) -> Any:
        """One choice as the client gets it; None when it held only hidden tool-call fragments."""
        if not isinstance(choice, dict) or not isinstance(choice.get("delta"), dict):
            return choice
        index = choice.get("index", 0)
        if not isinstance(index, int):
            index = 0  # where the decoder puts a choice without a number for its index
        out = dict(choice)
        delta = out["delta"] = dict(choice["delta"])
        if self.rounds > 1 and index not in self._round_roled and "role" in delta:
            # Round 1 set it; the SDK appends a role, so the next round's first one goes (a
            # provider that repeats it on every chunk repeats it to the client as before).
            self._round_roled.add(index)
            delta.pop("role")
        calls = delta.get("tool_calls")
        if isinstance(calls, list) and calls:
            visible = [c for c in (self._client_call(index, call) for call in calls) if c is not None]
            if visible:
                delta["tool_calls"] = visible
            else:
                del delta["tool_calls"]
                if not delta and choice.get("finish_reason") is None:
                    return None
        if choice.get("finish_reason") is not None:
            self._dispatched(index)  # the choice is done: its last call is whole
        content = delta.get("content")
        if isinstance(content, str) and content:
            if index in self._texted and index not in self._round_texted:
                delta["content"] = _SEPARATOR + content
            self._round_texted.add(index)
        if choice.get("finish_reason") == "tool_calls" and index in self._hidden and index not in self._shown:
            out["finish_reason"] = "stop"  # every call of the round was hidden
        return out

    def _client_call(self, choice: int, call: Any) -> Any:
        """One tool-call fragment renumbered for the client; None for the phantom call's."""
        if not isinstance(call, dict) or not isinstance(call.get("index"), int):
            return call
        key = (choice, call["index"])
        function = as_dict(call.get("function"))
        if key not in self._calls:  # the call's first fragment: it carries the name
            self._dispatched(choice)  # a call before it is whole
            if self.hides(function.get("name")):
                self._calls[key] = None
                self._hidden.add(choice)
            elif self.dispatch is not None and function.get("name") == self.dispatch.name:
                self._calls[key] = _HELD
                self._dispatching[choice] = _Dispatching(call["index"], call.get("id"))
            else:
                self._calls[key] = self._next_index(choice)
        index = self._calls[key]
        if index == _HELD:
            held = self._dispatching.get(choice)
            # A fragment of a call that went out already (a server's late empty one) is dropped.
            if held is not None and held.index == call["index"] and isinstance(function.get("arguments"), str):
                held.arguments.append(function["arguments"])
            return None
        if index is None:
            return None
        return call if index == call["index"] else {**call, "index": index}

    def _next_index(self, choice: int) -> int:
        """The client index of a visible call of ``choice``: consecutive over the client stream."""
        index = self._next_call.get(choice, 0)
        self._next_call[choice] = index + 1
        self._shown.add(choice)
        return index

    def _dispatched(self, choice: int) -> None:
        """The choice's dispatcher call is whole: the real call it stands for goes out next
        (``_send_whole``), or it is hidden when it stands for none."""
        held = self._dispatching.pop(choice, None)
        if held is None or self.dispatch is None:
            return
        call = ToolCall(str(held.id), self.dispatch.name, parse_arguments("".join(held.arguments)))
        target = self.dispatch.target(call)
        if isinstance(target, str):
            self._hidden.add(choice)
            return
        fragment = {"index": self._next_index(choice), "id": held.id, "type": "function",
                    "function": {"name": target.name, "arguments": target.text}}
        self._whole.append((choice, fragment))

    def _send_whole(self) -> None:
        """The real calls of whole dispatcher calls, each in a chunk of its own."""
        for choice, fragment in self._whole:
            chunk = {**self._envelope, "choices": [{"index": choice, "delta": {"tool_calls": [fragment]},
                                                    "finish_reason": None}]}
            self._show(None, chunk)
            self._touched = True
            self._out += encode_event(dumps(chunk))
        self._whole = []

    def _release_held(self) -> None:
        """The round goes on: held closing chunks are dropped but for a visible delta they carried;
        what else came after them (a moderation chunk, keep-alive text) goes out in its place."""
        for event, chunk in self._held:
            if event.type == "done":
                continue
            if not (isinstance(chunk, dict) and _closes(chunk)):
                self._emit(event, chunk)
                continue
            choices = chunk.get("choices")
            kept = [
                {**c, "delta": delta, "finish_reason": None}
                for c in as_list(choices)
                if isinstance(c, dict)
                and (delta := {k: v for k, v in as_dict(c.get("delta")).items() if k != "role"})
            ]
            if kept:
                self._show(None, {**chunk, "choices": kept})
                self._out += encode_event(dumps({**chunk, "choices": kept}))
        self._held = []

    # -- what the client sees --------------------------------------------------------------
    def _emit(self, event: Event, chunk: Any) -> None:
        self._show(None, chunk)
        if chunk is event.data or chunk == event.data:
            self._out += event.raw
        else:  # changed: its data in the event's own framing
            self._touched = True
            self._out += reframe(event.raw, dumps(chunk)) if event.raw else encode_event(dumps(chunk))

    def _message(self) -> dict[str, Any] | None:
        """The round's completion as the decoder assembles it (None before it started or
        after an error event)."""
        try:
            return cast(dict[str, Any], self._decoder.message())
        except (IncompleteStream, StreamError):
            return None


def _closes(chunk: dict[str, Any]) -> bool:
    """A chunk that ends the completion: a finish_reason, or the usage chunk."""
    choices = chunk.get("choices")
    if isinstance(choices, list) and any(isinstance(c, dict) and c.get("finish_reason") is not None for c in choices):
        return True
    return choices == [] and chunk.get("usage") is not None


