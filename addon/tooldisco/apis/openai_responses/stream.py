"""OpenAI Responses API streams: typed SSE events <-> the ``Response`` object.

Grammar: ``event: <type>`` + JSON carrying the same ``type`` and a
``sequence_number`` counting from 0. ``response.created`` / ``in_progress`` hold
the response without output; each output item is framed by
``response.output_item.added`` / ``.done`` (``output_index``), with inner events
for message content parts (``content_part.added/done``, ``output_text.delta/done``,
``refusal.delta/done``, ``output_text.annotation.added``), function-call
arguments, custom-tool input and reasoning summaries / text. The stream ends with
``response.completed`` / ``.incomplete`` / ``.failed`` holding the final response,
or an ``error`` event; there is no ``[DONE]``. The final response is the message;
when its ``output`` is left out, the items from ``output_item.done`` fill it (as the
SDK's ``ResponseStreamState`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tooldisco.apis.streaming import Assembler, SSEStreamDecoder, copy_json, dumps
from tooldisco.apis.framing.sse import encode_event

_LIFECYCLE = ("response.created", "response.queued", "response.in_progress")
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_TERMINAL_BY_STATUS = {"incomplete": "response.incomplete", "failed": "response.failed"}
_ECHOED = ("tools", "tool_choice")  # request fields a response object echoes


def _slot(items: list[Any], index: Any) -> dict[str, Any] | None:
    item = items[index] if isinstance(index, int) and 0 <= index < len(items) else None
    return item if isinstance(item, dict) else None


def _put(items: list[Any], index: Any, value: Any) -> None:
    """Set ``items[index]``, growing the list as needed (events may skip or repeat indexes)."""
    if not isinstance(index, int) or index < 0:
        return
    while len(items) <= index:
        items.append(None)
    items[index] = copy_json(value)


class ResponsesAssembler(Assembler):
    """Folds Responses stream events into the ``Response`` object."""

    def __init__(self) -> None:
        super().__init__()
        self._response: dict[str, Any] | None = None
        self._final: dict[str, Any] | None = None
        self._items: dict[int, dict[str, Any]] = {}
        self._handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "response.output_item.added": self._item,
            "response.output_item.done": self._item,
            "response.content_part.added": self._part,
            "response.content_part.done": self._part,
            "response.output_text.delta": lambda e: self._append_part(e, "text"),
            "response.output_text.done": lambda e: self._set_part(e, "text", "text"),
            "response.refusal.delta": lambda e: self._append_part(e, "refusal"),
            "response.refusal.done": lambda e: self._set_part(e, "refusal", "refusal"),
            "response.reasoning_text.delta": lambda e: self._append_part(e, "text"),
            "response.reasoning_text.done": lambda e: self._set_part(e, "text", "text"),
            "response.output_text.annotation.added": self._annotation,
            "response.function_call_arguments.delta": lambda e: self._append_item(e, "arguments"),
            "response.function_call_arguments.done": lambda e: self._set_item(e, "arguments"),
            "response.custom_tool_call_input.delta": lambda e: self._append_item(e, "input"),
            "response.custom_tool_call_input.done": lambda e: self._set_item(e, "input"),
            "response.reasoning_summary_part.added": self._summary_part,
            "response.reasoning_summary_part.done": self._summary_part,
            "response.reasoning_summary_text.delta": self._summary_delta,
            "response.reasoning_summary_text.done": self._summary_done,
        }

    def apply(self, name: str | None, data: Any) -> str:
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            return name or "unknown"
        if kind == "error":
            self.error = data
        elif kind in _LIFECYCLE or kind in _TERMINAL:
            if isinstance(data.get("response"), dict):
                # A shallow copy: nothing here changes it in place (``_assemble`` copies deeply
                # before it fills ``output``), and a deep one per lifecycle event copied the
                # echoed ``tools`` (the whole catalog) three times a round.
                self._response = dict(data["response"])
                if kind in _TERMINAL:
                    self._final = self._response
                    self.done = True
        elif kind in self._handlers:
            self._handlers[kind](data)
        return kind

    # -- output items -------------------------------------------------------------
    def _item(self, event: dict[str, Any]) -> None:
        index, item = event.get("output_index"), event.get("item")
        if isinstance(index, int) and isinstance(item, dict):
            self._items[index] = copy_json(item)

    def _target(self, event: dict[str, Any]) -> dict[str, Any] | None:
        index = event.get("output_index")
        return self._items.get(index) if isinstance(index, int) else None

    def _append_item(self, event: dict[str, Any], field: str) -> None:
        if (item := self._target(event)) is not None:
            self.text.append(item, field, str(event.get("delta", "")))

    def _set_item(self, event: dict[str, Any], field: str) -> None:
        if (item := self._target(event)) is not None and field in event:
            self.text.set(item, field, event[field])

    # -- message / reasoning content parts ------------------------------------------
    def _part(self, event: dict[str, Any]) -> None:
        if (item := self._target(event)) is not None:
            if not isinstance(item.get("content"), list):
                item["content"] = []
            _put(item["content"], event.get("content_index"), event.get("part"))

    def _content(self, event: dict[str, Any]) -> dict[str, Any] | None:
        item = self._target(event)
        parts = item.get("content") if item is not None else None
        return _slot(parts, event.get("content_index")) if isinstance(parts, list) else None

    def _append_part(self, event: dict[str, Any], field: str) -> None:
        if (part := self._content(event)) is not None:
            self.text.append(part, field, str(event.get("delta", "")))

    def _set_part(self, event: dict[str, Any], field: str, source: str) -> None:
        if (part := self._content(event)) is not None and source in event:
            self.text.set(part, field, event[source])

    def _annotation(self, event: dict[str, Any]) -> None:
        if (part := self._content(event)) is not None:
            if not isinstance(part.get("annotations"), list):
                part["annotations"] = []
            _put(part["annotations"], event.get("annotation_index"), event.get("annotation"))

    # -- reasoning summaries ---------------------------------------------------------
    def _summary(self, event: dict[str, Any]) -> list[Any] | None:
        if (item := self._target(event)) is None:
            return None
        summary = item.get("summary")
        if not isinstance(summary, list):
            item["summary"] = summary = []
        return summary

    def _summary_part(self, event: dict[str, Any]) -> None:
        if (summary := self._summary(event)) is not None:
            _put(summary, event.get("summary_index"), event.get("part"))

    def _summary_delta(self, event: dict[str, Any]) -> None:
        summary = self._summary(event)
        if summary is not None and (part := _slot(summary, event.get("summary_index"))) is not None:
            self.text.append(part, "text", str(event.get("delta", "")))

    def _summary_done(self, event: dict[str, Any]) -> None:
        summary = self._summary(event)
        part = _slot(summary, event.get("summary_index")) if summary is not None else None
        if part is not None and "text" in event:
            self.text.set(part, "text", event["text"])

    def _assemble(self) -> dict[str, Any] | None:
        source = self._final if self._final is not None else self._response
        if source is None:
            return None
        # The echoed request fields (``tools``: the whole catalog) are shared, not copied: no
        # reader changes them in place (``strip`` and ``merge`` copy the response's top level).
        response = {k: v if k in _ECHOED else copy_json(v) for k, v in source.items()}
        if self._final is None or response.get("output") is None:
            response["output"] = [copy_json(self._items[i]) for i in sorted(self._items)]
        return response


class ResponsesStreamDecoder(SSEStreamDecoder):
    """Responses API SSE bytes -> events; ``message()`` is the ``Response`` object."""

    def __init__(self) -> None:
        super().__init__(ResponsesAssembler())


class _Events:
    """Builds the event list, numbering ``sequence_number`` from 0 as the API does."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, kind: str, **fields: Any) -> None:
        self.events.append({"type": kind, "sequence_number": len(self.events), **copy_json(fields)})


def _in_progress(item: dict[str, Any], **emptied: Any) -> dict[str, Any]:
    """The item as ``output_item.added`` shows it: streamed fields empty, status in_progress."""
    added = {**copy_json(item), **emptied}
    if "status" in added:
        added["status"] = "in_progress"
    return added


def _message_item(out: _Events, where: dict[str, Any], item: dict[str, Any]) -> None:
    out.add("response.output_item.added", **where, item=_in_progress(item, content=[]))
    for content_index, part in enumerate(item.get("content") or []):
        at = {**where, "item_id": item.get("id", ""), "content_index": content_index}
        kind = part.get("type")
        if kind == "output_text":
            empty = {**part, "text": "", "annotations": []}
            out.add("response.content_part.added", **at, part=empty)
            logprobs = part.get("logprobs") or []
            out.add("response.output_text.delta", **at, delta=part.get("text", ""), logprobs=logprobs)
            for annotation_index, annotation in enumerate(part.get("annotations") or []):
                out.add(
                    "response.output_text.annotation.added",
                    **at,
                    annotation_index=annotation_index,
                    annotation=annotation,
                )
            out.add("response.output_text.done", **at, text=part.get("text", ""), logprobs=logprobs)
        elif kind == "refusal":
            out.add("response.content_part.added", **at, part={**part, "refusal": ""})
            out.add("response.refusal.delta", **at, delta=part.get("refusal", ""))
            out.add("response.refusal.done", **at, refusal=part.get("refusal", ""))
        else:
            out.add("response.content_part.added", **at, part=part)
        out.add("response.content_part.done", **at, part=part)


def _reasoning_item(out: _Events, where: dict[str, Any], item: dict[str, Any]) -> None:
    emptied: dict[str, Any] = {"summary": []}
    if isinstance(item.get("content"), list):
        emptied["content"] = []
    out.add("response.output_item.added", **where, item=_in_progress(item, **emptied))
    at = {**where, "item_id": item.get("id", "")}
    for summary_index, part in enumerate(item.get("summary") or []):
        text = part.get("text", "")
        out.add("response.reasoning_summary_part.added", **at, summary_index=summary_index, part={**part, "text": ""})
        out.add("response.reasoning_summary_text.delta", **at, summary_index=summary_index, delta=text)
        out.add("response.reasoning_summary_text.done", **at, summary_index=summary_index, text=text)
        out.add("response.reasoning_summary_part.done", **at, summary_index=summary_index, part=part)
    for content_index, part in enumerate(item.get("content") or []):
        text = part.get("text", "")
        out.add("response.content_part.added", **at, content_index=content_index, part={**part, "text": ""})
        out.add("response.reasoning_text.delta", **at, content_index=content_index, delta=text)
        out.add("response.reasoning_text.done", **at, content_index=content_index, text=text)
        out.add("response.content_part.done", **at, content_index=content_index, part=part)


def _streamed_text_item(kind: str, field: str) -> Callable[[_Events, dict[str, Any], dict[str, Any]], None]:
    """Items whose one text field streams as delta/done events (function and custom tool calls)."""

    def emit(out: _Events, where: dict[str, Any], item: dict[str, Any]) -> None:
        out.add("response.output_item.added", **where, item=_in_progress(item, **{field: ""}))
        at = {**where, "item_id": item.get("id", "")}
        value = item.get(field) or ""
        out.add(f"response.{kind}.delta", **at, delta=value)
        out.add(f"response.{kind}.done", **at, **{field: value})

    return emit


def _whole_item(out: _Events, where: dict[str, Any], item: dict[str, Any]) -> None:
    out.add("response.output_item.added", **where, item=_in_progress(item))


_ITEM_EVENTS: dict[str, Callable[[_Events, dict[str, Any], dict[str, Any]], None]] = {
    "message": _message_item,
    "reasoning": _reasoning_item,
    "function_call": _streamed_text_item("function_call_arguments", "arguments"),
    "custom_tool_call": _streamed_text_item("custom_tool_call_input", "input"),
}


def stream_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The event objects that stream ``response``; ``output_index`` and ``sequence_number``
    are numbered afresh, so a response whose items were removed streams consistently."""
    out = _Events()
    opening = {**copy_json(response), "status": "in_progress", "output": []}
    if "usage" in opening:
        opening["usage"] = None
    out.add("response.created", response=opening)
    out.add("response.in_progress", response=opening)
    for output_index, item in enumerate(response.get("output") or []):
        where = {"output_index": output_index}
        _ITEM_EVENTS.get(str(item.get("type")), _whole_item)(out, where, item)
        out.add("response.output_item.done", **where, item=item)
    out.add(_TERMINAL_BY_STATUS.get(str(response.get("status")), "response.completed"), response=response)
    return out.events


def encode(response: dict[str, Any]) -> bytes:
    """The complete SSE stream for ``response``, ``event:`` lines included."""
    return b"".join(encode_event(dumps(event), event["type"]) for event in stream_events(response))
