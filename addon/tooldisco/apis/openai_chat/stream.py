"""OpenAI Chat Completions streams: ``chat.completion.chunk`` SSE <-> ``chat.completion``.

Grammar: ``data: {chunk}`` events without event names, ended by ``data: [DONE]``.
The first chunk of a choice carries ``delta.role``; content, refusal and
``tool_calls[{index, id, type, function{name, arguments}}]`` arrive as fragments;
the choice's last chunk has an empty delta and ``finish_reason``. With
``stream_options.include_usage`` every chunk has ``"usage": null`` and one more
chunk with ``"choices": []`` carries the usage. ``obfuscation`` is padding. An
error after the 200 is ``data: {"error": {...}}``. Deltas fold the way the SDK's
``ChatCompletionStreamState`` folds them (see ``merge_delta``).
"""

from __future__ import annotations

from typing import Any

from tooldisco.apis.streaming import Assembler, SSEStreamDecoder, as_list, copy_json, dumps, merge_delta
from tooldisco.apis.framing.sse import encode_event

DONE = "[DONE]"
_CHUNK_ONLY = ("choices", "obfuscation", "object", "usage")
# A repeated role or id must not become "assistantassistant" (the SDK would append).
_REPLACED = frozenset({"role", "id"})


class ChatCompletionAssembler(Assembler):
    """Folds ``chat.completion.chunk`` objects into a ``chat.completion`` dict."""

    def __init__(self) -> None:
        super().__init__()
        self._top: dict[str, Any] | None = None
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: Any = None

    def apply(self, name: str | None, data: Any) -> str:
        if data == DONE:
            self.done = True
            return "done"
        if not isinstance(data, dict):
            return name or "unknown"
        if "error" in data and "choices" not in data:
            self.error = data
            return "error"
        # Azure's content-filter side chunks have object "" and no completion fields.
        if data.get("object", "chat.completion.chunk") != "chat.completion.chunk":
            return "chunk"
        self._chunk(data)
        return "chunk"

    def _chunk(self, chunk: dict[str, Any]) -> None:
        if self._top is None:
            self._top = {k: copy_json(v) for k, v in chunk.items() if k not in _CHUNK_ONLY}
        else:
            for key, value in chunk.items():
                if key not in _CHUNK_ONLY and value is not None and value != "":
                    self._top[key] = copy_json(value)
        if chunk.get("usage") is not None:
            self._usage = copy_json(chunk["usage"])
        for choice in as_list(chunk.get("choices")):
            if isinstance(choice, dict):
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index", 0)
        if not isinstance(index, int):
            index = 0
        state = self._choices.setdefault(
            index, {"index": index, "message": {}, "logprobs": None, "finish_reason": None}
        )
        if isinstance(choice.get("delta"), dict):
            merge_delta(state["message"], choice["delta"], self.text, _REPLACED)
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):  # token lists arrive in pieces: extend them; other keys keep the first
            acc = state["logprobs"] = state["logprobs"] or {}
            for key, value in logprobs.items():
                if isinstance(value, list) and isinstance(acc.get(key), list):
                    acc[key].extend(copy_json(value))
                elif isinstance(value, list) or key not in acc:
                    acc[key] = copy_json(value)
        for key, value in choice.items():
            if key not in ("index", "delta", "logprobs") and value is not None:
                state[key] = copy_json(value)

    def _assemble(self) -> dict[str, Any] | None:
        if self._top is None:
            return None
        top = copy_json(self._top)
        completion: dict[str, Any] = {
            "id": top.pop("id", None),
            "object": "chat.completion",
            "created": top.pop("created", None),
            "model": top.pop("model", None),
            "choices": [_finish_choice(self._choices[i]) for i in sorted(self._choices)],
            "usage": copy_json(self._usage),
        }
        completion.update(top)
        completion.setdefault("system_fingerprint", None)
        return completion


def _finish_choice(state: dict[str, Any]) -> dict[str, Any]:
    """One assembled choice in the non-streaming shape (tool calls lose their ``index``)."""
    choice = copy_json(state)
    message = choice["message"]
    for key in ("role", "content", "refusal"):
        message.setdefault(key, "assistant" if key == "role" else None)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        calls.sort(key=_call_index)
        for call in calls:
            if isinstance(call, dict):
                call.pop("index", None)
    return choice


def _call_index(call: Any) -> int | float:
    """Where a streamed tool call sorts: its ``index``, 0 when it has no number there."""
    index = call.get("index") if isinstance(call, dict) else None
    return index if isinstance(index, (int, float)) else 0


class ChatCompletionStreamDecoder(SSEStreamDecoder):
    """Chat Completions SSE bytes -> events; ``message()`` is the ``chat.completion``."""

    def __init__(self) -> None:
        super().__init__(ChatCompletionAssembler())


def _choice_deltas(choice: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunk-level choice objects that stream one choice, as the API sends them."""
    index = choice.get("index", 0)
    message = choice.get("message") or {}
    content, refusal = message.get("content"), message.get("refusal")
    first: dict[str, Any] = {"role": message.get("role", "assistant"), "content": "" if content else content}
    first["refusal"] = None
    first.update(
        {k: copy_json(v) for k, v in message.items() if k not in ("role", "content", "refusal", "tool_calls")}
    )
    deltas: list[dict[str, Any]] = [first]
    if content:
        deltas.append({"content": content})
    if refusal is not None:
        deltas.append({"refusal": refusal})
    for position, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        head = {k: copy_json(v) for k, v in call.items() if k != "function"}
        head = {"index": position, **head, "function": {**function, "arguments": ""}}
        deltas.append({"tool_calls": [head]})
        if function.get("arguments"):
            deltas.append({"tool_calls": [{"index": position, "function": {"arguments": function["arguments"]}}]})
    objects = [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None} for delta in deltas]
    last = {"index": index, "delta": {}, "logprobs": None, "finish_reason": None}
    last.update({k: copy_json(v) for k, v in choice.items() if k not in ("index", "message")})
    objects.append(last)
    return objects


def chunks(completion: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The chunk objects that stream ``completion``; ``include_usage`` mirrors the request's
    ``stream_options.include_usage`` (only then do chunks carry ``usage``)."""
    top = {
        "id": completion.get("id"),
        "object": "chat.completion.chunk",
        "created": completion.get("created"),
        "model": completion.get("model"),
    }
    top.update({k: copy_json(v) for k, v in completion.items() if k not in ("choices", "usage", *top)})
    tail = {"usage": None} if include_usage else {}
    out = [
        {**copy_json(top), "choices": [choice], **tail}
        for source in completion.get("choices") or []
        for choice in _choice_deltas(source)
    ]
    if include_usage:
        out.append({**copy_json(top), "choices": [], "usage": copy_json(completion.get("usage"))})
    return out


def encode(completion: dict[str, Any], include_usage: bool) -> bytes:
    """The complete SSE stream for ``completion``, ``data: [DONE]`` included."""
    events = [encode_event(dumps(chunk)) for chunk in chunks(completion, include_usage)]
    return b"".join(events) + encode_event(DONE)
