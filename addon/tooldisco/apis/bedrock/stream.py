"""Bedrock streams over event-stream frames: ConverseStream and InvokeModelWithResponseStream.

ConverseStream frames are named by ``:event-type``: ``messageStart{role}``,
``contentBlockStart{contentBlockIndex, start{toolUse|toolResult|image}}``,
``contentBlockDelta{contentBlockIndex, delta{text|toolUse{input}|reasoningContent|
toolResult|citation|image}}``, ``contentBlockStop``, ``messageStop{stopReason}``,
``metadata{usage, metrics}``; text blocks have no start event. They assemble into
the Converse response ``{output:{message:{role, content}}, stopReason, usage,
metrics}``. ``messageStop`` and ``metadata`` come in either order (real streams send
both), and ``metadata`` may be missing: the message is complete once both came, or
at the body's end after a ``messageStop``. A stream without ``messageStart`` is an
assistant message all the same. InvokeModelWithResponseStream frames are
``chunk{bytes: base64 of one Anthropic stream event}`` and reuse the Anthropic
assembler. Exceptions arrive as ``:message-type: exception`` frames. Bedrock pads
payloads with a random ``p`` field, which we drop.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from tooldisco.apis.anthropic import stream as anthropic
from tooldisco.apis.streaming import (
    AssembledDecoder,
    Assembler,
    Event,
    as_dict,
    copy_json,
    dumps,
    loads_or_text,
    merge_delta,
    parse_arguments,
)
from tooldisco.apis.framing.eventstream import EventStreamDecoder, Frame, encode_frame

_METADATA_FIELDS = ("usage", "metrics", "trace", "performanceConfig", "serviceTier")
_CONVERSE_EVENTS = frozenset(
    {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
)


def _concat_base64(first: str, second: str) -> str:
    """Blobs travel base64-encoded in JSON: join the bytes, not the texts."""
    try:
        return base64.b64encode(base64.b64decode(first) + base64.b64decode(second)).decode("ascii")
    except (binascii.Error, ValueError, TypeError):
        return f"{first}{second}"


class ConverseStreamAssembler(Assembler):
    """Folds ConverseStream events (by ``:event-type``) into a Converse response dict."""

    def __init__(self) -> None:
        super().__init__()
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}  # contentBlockIndex -> block
        self._top: dict[str, Any] = {}
        self._closing: set[str] = set()  # which of messageStop / metadata came

    def end(self) -> None:
        """The body ended: a ``messageStop`` without ``metadata`` is a complete message."""
        self.done = self.done or "messageStop" in self._closing

    def apply(self, name: str | None, data: Any) -> str:
        kind = name or "unknown"
        if not isinstance(data, dict):
            return kind
        if self._message is None and kind in _CONVERSE_EVENTS and kind != "messageStart":
            self._message = {"role": "assistant"}  # the upstream sent no messageStart
        if kind == "messageStart":
            self._message = {"role": data.get("role", "assistant")}
            self._blocks = {}
        elif kind == "contentBlockStart":
            block = self._block(data.get("contentBlockIndex"))
            for key, value in as_dict(data.get("start")).items():
                block[key] = copy_json(value)
                if key == "toolResult" and isinstance(value, dict):
                    block[key].setdefault("content", [])
        elif kind == "contentBlockDelta":
            self._delta(self._block(data.get("contentBlockIndex")), as_dict(data.get("delta")))
        elif kind in ("messageStop", "metadata"):
            self._top.update(copy_json(data))
            self._closing.add(kind)
            self.done = self.done or len(self._closing) == 2  # both, in either order
        return kind

    def _block(self, index: Any) -> dict[str, Any]:
        key = index if isinstance(index, int) else -1
        return self._blocks.setdefault(key, {})

    def _delta(self, block: dict[str, Any], delta: dict[str, Any]) -> None:
        for key, value in delta.items():
            if key == "reasoningContent" and isinstance(value, dict):
                reasoning = _member(block, "reasoningContent", dict)
                if "text" in value or "signature" in value:
                    text = _member(reasoning, "reasoningText", dict)
                    if "text" in value:
                        self.text.append(text, "text", str(value["text"]))
                    if "signature" in value:
                        text["signature"] = value["signature"]
                if "redactedContent" in value:
                    old = reasoning.get("redactedContent")
                    new = value["redactedContent"]
                    reasoning["redactedContent"] = _concat_base64(old, new) if old else new
            elif key == "toolResult" and isinstance(value, list):
                _member(_member(block, "toolResult", dict), "content", list).extend(copy_json(value))
            elif key == "citation":
                cited = _member(block, "citationsContent", dict)
                cited.setdefault("content", [])  # the cited text, filled in by _final_block
                _member(cited, "citations", list).append(copy_json(value))
            else:  # text, toolUse.input (a JSON text in pieces), image.source
                merge_delta(block, {key: value}, self.text)

    def _assemble(self) -> dict[str, Any] | None:
        if self._message is None:
            return None
        message = copy_json(self._message)
        message["content"] = [_final_block(self._blocks[i]) for i in sorted(self._blocks)]
        response: dict[str, Any] = {"output": {"message": message}}
        response["stopReason"] = self._top.get("stopReason")
        response.update(copy_json(self._top))
        return response


def _member(parent: dict[str, Any], key: str, kind: type[dict[str, Any]] | type[list[Any]]) -> Any:
    """``parent[key]``, made an empty ``kind`` when absent or, as a malformed stream may
    have it, of another type: the deltas that follow must have somewhere to go."""
    value = parent.get(key)
    if not isinstance(value, kind):
        value = parent[key] = kind()
    return value


def _final_block(block: dict[str, Any]) -> dict[str, Any]:
    """A streamed block in the Converse response shape: tool input parsed, cited text
    wrapped in ``citationsContent``."""
    block = copy_json(block)
    tool = block.get("toolUse")
    if isinstance(tool, dict):
        tool["input"] = parse_arguments(tool["input"]) if isinstance(tool.get("input"), str) else tool.get("input", {})
    if isinstance(block.get("citationsContent"), dict):
        text = block.pop("text", "")
        block["citationsContent"]["content"] = [{"text": text}]
    return block


class _FramedStreamDecoder(AssembledDecoder):
    """Event-stream frames -> ``Event``s through an assembler; exception frames become the error."""

    def __init__(self, assembler: Assembler) -> None:
        self._frames = EventStreamDecoder()
        self.assembler = assembler

    def feed(self, data: bytes) -> list[Event]:
        """Raises ``EventStreamError`` on a corrupt frame (bad CRC or length)."""
        events: list[Event] = []
        for frame in self._frames.feed(data):
            if frame.message_type in ("exception", "error"):
                error = _frame_error(frame)
                self.assembler.error = error
                events.append(Event(error["type"], error, frame.raw))
                continue
            name, payload = self._unwrap(frame)
            events.append(Event(self.assembler.apply(name, payload), payload, frame.raw))
        return events

    def _unwrap(self, frame: Frame) -> tuple[str | None, Any]:
        return frame.event_type, _json_payload(frame.payload)



def _json_payload(payload: bytes) -> Any:
    data = loads_or_text(payload.decode("utf-8", errors="replace"))
    if isinstance(data, dict):
        data.pop("p", None)
    return data


def _frame_error(frame: Frame) -> dict[str, Any]:
    headers = frame.headers
    kind = headers.get(":exception-type") or headers.get(":error-code") or "error"
    error: dict[str, Any] = {"type": kind}
    if ":error-message" in headers:
        error["message"] = headers[":error-message"]
    payload = _json_payload(frame.payload) if frame.payload else None
    if isinstance(payload, dict):
        error.update(payload)
    elif payload:
        error["message"] = payload
    return error


class ConverseStreamDecoder(_FramedStreamDecoder):
    """ConverseStream bytes -> events; ``message()`` is the Converse response. ``feed(b"")``
    ends the body (raises ``EventStreamError`` when it ended inside a frame)."""

    def __init__(self) -> None:
        self._converse = ConverseStreamAssembler()
        super().__init__(self._converse)
        self._unclaimed = bytearray()  # bytes fed that no whole frame holds yet

    def feed(self, data: bytes) -> list[Event]:
        self._unclaimed += data
        events = super().feed(data)
        del self._unclaimed[: sum(len(event.raw) for event in events)]
        if not data:
            self._converse.end()  # not reached when the body broke off inside a frame
        return events

    @property
    def rest(self) -> bytes:
        """The bytes after the last whole frame: once the body ended, a frame it broke off inside."""
        return bytes(self._unclaimed)


METRICS = "amazon-bedrock-invocationMetrics"


class InvokeStreamDecoder(_FramedStreamDecoder):
    """InvokeModelWithResponseStream (Claude) bytes -> the inner Anthropic events;
    ``message()`` is the Anthropic ``Message`` (InvokeModel's non-streaming body)."""

    def __init__(self) -> None:
        super().__init__(anthropic.AnthropicAssembler())
        self._metrics: Any = None

    def _unwrap(self, frame: Frame) -> tuple[str | None, Any]:
        outer = _json_payload(frame.payload)
        if frame.event_type != "chunk" or not isinstance(outer, dict) or not isinstance(outer.get("bytes"), str):
            return frame.event_type, outer
        inner = loads_or_text(base64.b64decode(outer["bytes"]).decode("utf-8", errors="replace"))
        if isinstance(inner, dict) and inner.get("type") == "message_stop" and METRICS in inner:
            self._metrics = inner[METRICS]
        return None, inner

    def message(self) -> dict[str, Any]:
        """Bedrock reports the invocation's metrics on ``message_stop``: kept on the message, so a
        merge can sum them and ``encode_invoke`` can put them back."""
        message = super().message()
        if self._metrics is not None:
            message[METRICS] = self._metrics
        return message


def _event_frame(event_type: str, payload: dict[str, Any]) -> bytes:
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return encode_frame(headers, dumps(payload).encode("utf-8"))


def _converse_block_events(index: int, block: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The start / deltas / stop for one Converse content block."""
    kind: str = next(iter(block), "")
    value: Any = block.get(kind)
    starts: dict[str, Any] = {}
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        deltas.append({"text": value})
    elif kind == "toolUse":
        starts = {"toolUse": {k: v for k, v in value.items() if k != "input"}}
        tool_input = value.get("input", {})
        deltas.append({"toolUse": {"input": tool_input if isinstance(tool_input, str) else json.dumps(tool_input)}})
    elif kind == "reasoningContent":
        text = value.get("reasoningText") or {}
        if "text" in text:
            deltas.append({"reasoningContent": {"text": text["text"]}})
        if "signature" in text:
            deltas.append({"reasoningContent": {"signature": text["signature"]}})
        if "redactedContent" in value:
            deltas.append({"reasoningContent": {"redactedContent": value["redactedContent"]}})
    elif kind == "toolResult":
        starts = {"toolResult": {k: v for k, v in value.items() if k != "content"}}
        deltas.append({"toolResult": value.get("content", [])})
    elif kind == "image":
        starts = {"image": {k: v for k, v in value.items() if k != "source"}}
        deltas.append({"image": {"source": value.get("source")}})
    elif kind == "citationsContent":
        deltas.append({"text": "".join(part.get("text", "") for part in value.get("content", []))})
        deltas += [{"citation": citation} for citation in value.get("citations", [])]
    else:
        raise ValueError(f"a {kind!r} content block cannot be expressed in a ConverseStream")
    events: list[tuple[str, dict[str, Any]]] = []
    if starts:
        events.append(("contentBlockStart", {"start": starts, "contentBlockIndex": index}))
    events += [("contentBlockDelta", {"delta": delta, "contentBlockIndex": index}) for delta in deltas]
    events.append(("contentBlockStop", {"contentBlockIndex": index}))
    return events


def converse_events(response: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(``:event-type``, payload) pairs that stream a Converse ``response``."""
    message = (response.get("output") or {}).get("message") or {}
    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": message.get("role", "assistant")})]
    for index, block in enumerate(message.get("content") or []):
        events += _converse_block_events(index, block)
    stop = {"stopReason": response.get("stopReason")}
    if "additionalModelResponseFields" in response:
        stop["additionalModelResponseFields"] = response["additionalModelResponseFields"]
    events.append(("messageStop", stop))
    events.append(("metadata", {k: response[k] for k in _METADATA_FIELDS if k in response}))
    return copy_json(events)


def encode_converse(response: dict[str, Any]) -> bytes:
    """The ConverseStream body (event-stream frames) for a Converse ``response``."""
    return b"".join(_event_frame(name, payload) for name, payload in converse_events(response))


def encode_invoke(message: dict[str, Any]) -> bytes:
    """The InvokeModelWithResponseStream body for an Anthropic ``message``."""
    message = dict(message)
    metrics = message.pop(METRICS, None)
    frames = []
    for event in anthropic.stream_events(message):
        if metrics is not None and event.get("type") == "message_stop":
            event = {**event, METRICS: metrics}
        wrapped = base64.b64encode(dumps(event).encode("utf-8")).decode("ascii")
        frames.append(_event_frame("chunk", {"bytes": wrapped}))
    return b"".join(frames)
