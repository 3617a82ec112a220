"""Anthropic Messages streams: SSE events <-> the non-streaming ``Message`` object.

Grammar: ``message_start`` (the message with empty ``content``), ``ping``, per block
``content_block_start`` / ``content_block_delta``* / ``content_block_stop``, then
``message_delta`` (stop reason, cumulative usage) and ``message_stop``; ``error``
may arrive after the 200. The folding rules mirror the official SDK's
``accumulate_event`` so our message equals what ``get_final_message()`` returns.
The assembler works on parsed event objects, so Bedrock's InvokeModel stream
(the same events wrapped in event-stream frames) reuses it.
"""

from __future__ import annotations

from typing import Any

from tooldisco.apis.streaming import Assembler, SSEStreamDecoder, as_dict, copy_json, dumps, parse_arguments
from tooldisco.apis.framing.sse import encode_event

# message_delta.delta keys the SDK copies even when null; other null keys keep the earlier value.
_DELTA_ALWAYS = ("stop_reason", "stop_sequence", "stop_details")
# Message members the block events and message_delta's own usage build: nothing replaces them.
_BUILT = ("content", "usage")


def _late_fields(message: dict[str, Any]) -> list[str]:
    """Fields known only at the end: null in message_start, set by message_delta
    (``stop_details`` only where the API sends it)."""
    return [key for key in _DELTA_ALWAYS if key in message or key != "stop_details"]


class AnthropicAssembler(Assembler):
    """Folds Anthropic stream events (parsed JSON objects) into a ``Message`` dict."""

    def __init__(self) -> None:
        super().__init__()
        self._message: dict[str, Any] | None = None
        self._positions: dict[int, int] = {}  # event index -> position in content
        self._json: dict[int, str] = {}  # index -> input_json_delta text so far (via self.text)

    def apply(self, name: str | None, data: Any) -> str:
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            return name or "message"
        if kind == "error":
            self.error = data
        elif kind == "message_stop":
            self.done = True
        elif kind == "message_start" and isinstance(data.get("message"), dict):
            self._start(data["message"])
        elif self._message is not None:
            if kind == "content_block_start":
                self._block_start(data)
            elif kind == "content_block_delta":
                self._block_delta(data)
            elif kind == "content_block_stop":
                self._block_stop(data.get("index"))
            elif kind == "message_delta":
                self._message_delta(data)
        return kind

    def _start(self, message: dict[str, Any]) -> None:
        self._message = copy_json(message)
        if not isinstance(self._message.get("content"), list):
            self._message["content"] = []
        if not isinstance(self._message.get("usage"), dict):
            self._message["usage"] = {}
        self._positions = {i: i for i, block in enumerate(self._message["content"]) if isinstance(block, dict)}
        self._json = {}

    def _block(self, index: Any) -> dict[str, Any] | None:
        position = self._positions.get(index) if isinstance(index, int) else None
        return None if position is None or self._message is None else self._message["content"][position]

    def _block_start(self, data: dict[str, Any]) -> None:
        index, block = data.get("index"), data.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            return
        assert self._message is not None
        self._positions[index] = len(self._message["content"])
        self._message["content"].append(copy_json(block))

    def _block_delta(self, data: dict[str, Any]) -> None:
        index, delta = data.get("index"), data.get("delta")
        block = self._block(index)
        if block is None or not isinstance(delta, dict):
            return
        kind = delta.get("type")
        if kind == "text_delta":
            self.text.append(block, "text", str(delta.get("text", "")))
        elif kind == "input_json_delta":
            self.text.append(self._json, index, str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            self.text.append(block, "thinking", str(delta.get("thinking", "")))
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            if not isinstance(block.get("citations"), list):
                block["citations"] = []
            block["citations"].append(copy_json(delta.get("citation")))
        else:
            # Snapshot-style deltas (e.g. compaction_delta) and future kinds: fields replace.
            for key, value in delta.items():
                if key != "type":
                    self.text.set(block, key, copy_json(value))

    def _block_stop(self, index: Any) -> None:
        block = self._block(index)
        if block is not None and index in self._json:
            block["input"] = parse_arguments(self.text.get(self._json, index))
            del self._json[index]

    def _message_delta(self, data: dict[str, Any]) -> None:
        assert self._message is not None
        for key, value in as_dict(data.get("delta")).items():
            if (value is not None or key in _DELTA_ALWAYS) and key not in _BUILT:
                self._message[key] = copy_json(value)
        for key, value in data.items():
            if key not in ("type", "delta", *_BUILT) and value is not None:
                self._message[key] = copy_json(value)
        # Usage here is cumulative: present counts overwrite, absent ones keep message_start's.
        usage = self._message["usage"]
        for key, value in as_dict(data.get("usage")).items():
            if value is not None:
                usage[key] = copy_json(value)

    def _assemble(self) -> dict[str, Any] | None:
        if self._message is None:
            return None
        message = copy_json(self._message)
        for index, text in self._json.items():  # blocks the stream never closed
            message["content"][self._positions[index]]["input"] = parse_arguments(text)
        return message


class AnthropicStreamDecoder(SSEStreamDecoder):
    """Anthropic SSE bytes -> events; ``message()`` is the non-streaming ``Message``."""

    def __init__(self) -> None:
        super().__init__(AnthropicAssembler())


def _block_events(index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    """start / deltas / stop for one content block, the way the API streams that block type."""
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start = {**block, "text": ""}
        citations = block.get("citations")
        if isinstance(citations, list):
            start["citations"] = []
            deltas += [{"type": "citations_delta", "citation": c} for c in citations]
        if block.get("text"):
            deltas.append({"type": "text_delta", "text": block["text"]})
    elif kind == "thinking":
        start = {**block, "thinking": "", "signature": ""}
        if block.get("thinking"):
            deltas.append({"type": "thinking_delta", "thinking": block["thinking"]})
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif "input" in block:  # tool_use, server_tool_use, mcp_tool_use: input streams as JSON text
        start = {**block, "input": {}}
        value = block["input"]
        partial = value if isinstance(value, str) else ("" if value == {} else dumps(value))
        deltas.append({"type": "input_json_delta", "partial_json": partial})
    else:  # redacted_thinking, *_tool_result, unknown: the API sends them whole in the start
        start = block
    return [
        {"type": "content_block_start", "index": index, "content_block": copy_json(start)},
        *({"type": "content_block_delta", "index": index, "delta": copy_json(d)} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def stream_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The event objects that stream ``message`` (a non-streaming ``Message``), in order."""
    start = copy_json(message)
    start["content"] = []
    late = _late_fields(message)
    start.update(dict.fromkeys(late))
    usage = copy_json(message.get("usage") or {})
    start["usage"] = copy_json(usage)
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "ping"},
    ]
    for index, block in enumerate(message.get("content") or []):
        events += _block_events(index, block)
    delta = {key: copy_json(message.get(key)) for key in late}
    if message.get("container") is not None:
        delta["container"] = copy_json(message["container"])
    message_delta: dict[str, Any] = {"type": "message_delta", "delta": delta, "usage": usage}
    if message.get("context_management") is not None:
        message_delta["context_management"] = copy_json(message["context_management"])
    events += [message_delta, {"type": "message_stop"}]
    return events


def encode_event_object(event: dict[str, Any]) -> bytes:
    """One event object in the API's SSE form: ``event: <type>`` then its JSON."""
    return encode_event(dumps(event), event.get("type"))


def encode(message: dict[str, Any]) -> bytes:
    """The complete SSE stream for ``message``, in the exact grammar the API sends."""
    return b"".join(encode_event_object(event) for event in stream_events(message))
