"""The tool calls and results a request body carries in its history, for the view: which calls
were the proxy's own (its search, call-through's dispatcher), what their results said, and
which deferred tools a result loaded into the prompt (native deferral).

Why read the body here, not ask the adapters: the view must show what a round really sent,
whatever the engine meant to send, and it only reads. The shapes are the five APIs' own
(Anthropic Messages and Bedrock InvokeModel, Chat Completions, Responses, Gemini, Converse),
told apart by the body's history member and its entries; anything else reads as no history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

MAX_TEXT = 400  # characters of a result's text shown
TOOL_SEARCH = "tool_search"  # Responses' own search call (``tool_search_call``), as the loop names it


@dataclass
class Exchange:
    """One call in the history and its result, as the body carries them."""

    id: str
    name: str  # the tool as called ("" when the body holds the result only: a stored chain)
    arguments: Any
    result: str | None = None  # the result's text (None: the body carries no result for it)
    loads: tuple[str, ...] = ()  # deferred tools the result loads where it stands (native deferral)
    error: bool = False
    how: str = ""  # how the result loads them: "tool_reference", "tool_search_output"


def exchanges(body: str) -> list[Exchange]:
    """The body's calls in order, each with its result; results whose call the body does not
    hold (a Responses chain stored server-side) follow, nameless unless their kind names it."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return []
    if not isinstance(data, dict):
        return []
    found = _History()
    if isinstance(data.get("messages"), list):
        for m in data["messages"]:
            if isinstance(m, dict):
                _message(found, m)
    elif isinstance(data.get("input"), list):
        for item in data["input"]:
            if isinstance(item, dict):
                _item(found, item)
    elif isinstance(data.get("contents"), list):
        for content in data["contents"]:
            if isinstance(content, dict):
                for part in content.get("parts") or ():
                    if isinstance(part, dict):
                        _part(found, part)
    return found.all()


class _History:
    def __init__(self) -> None:
        self.calls: dict[str, Exchange] = {}
        self.orphans: list[Exchange] = []
        self._n = 0

    def call(self, id_: Any, name: Any, arguments: Any) -> None:
        self._n += 1
        key = str(id_) if id_ not in (None, "") else f"#{self._n}"
        self.calls[key] = Exchange(key, str(name or ""), arguments)

    def result(self, id_: Any, text: str | None, loads: Iterable[str] = (), error: bool = False, how: str = "",
               name: str = "") -> None:
        key = str(id_) if id_ not in (None, "") else None
        if key is None and name:  # Gemini without ids: the first call of that name still unanswered
            key = next((k for k, e in self.calls.items() if e.name == name and e.result is None), None)
        target = self.calls.get(key) if key is not None else None
        if target is None:
            target = Exchange(key or "", name, None)
            self.orphans.append(target)
        target.result, target.loads, target.error, target.how = text, tuple(loads), error, how

    def all(self) -> list[Exchange]:
        return [*self.calls.values(), *self.orphans]


def _message(found: _History, m: dict[str, Any]) -> None:
    """An Anthropic, Chat or Converse message."""
    for call in m.get("tool_calls") or ():  # Chat
        if isinstance(call, dict):
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            found.call(call.get("id"), fn.get("name"), _arguments(fn.get("arguments")))
    if m.get("role") == "tool":  # Chat
        found.result(m.get("tool_call_id"), _text(m.get("content")))
        return
    content = m.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_use":  # Anthropic
            found.call(block.get("id"), block.get("name"), block.get("input"))
        elif kind == "tool_result":
            inner = block.get("content")
            refs = [str(b.get("tool_name")) for b in inner if isinstance(b, dict) and b.get("type") == "tool_reference"] \
                if isinstance(inner, list) else []
            found.result(block.get("tool_use_id"), _text(inner), refs, block.get("is_error") is True,
                         "tool_reference" if refs else "")
        elif isinstance(block.get("toolUse"), dict):  # Converse
            use = block["toolUse"]
            found.call(use.get("toolUseId"), use.get("name"), use.get("input"))
        elif isinstance(block.get("toolResult"), dict):
            res = block["toolResult"]
            found.result(res.get("toolUseId"), _text(res.get("content")), error=res.get("status") == "error")


def _item(found: _History, item: dict[str, Any]) -> None:
    """A Responses input item."""
    kind = item.get("type")
    if kind in ("function_call", "custom_tool_call"):
        name = str(item.get("name") or "")
        found.call(item.get("call_id"), f"{item['namespace']}.{name}" if item.get("namespace") else name,
                   _arguments(item.get("arguments", item.get("input"))))
    elif kind == "tool_search_call":
        found.call(item.get("call_id"), TOOL_SEARCH, _arguments(item.get("arguments")))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        found.result(item.get("call_id"), _text(item.get("output")))
    elif kind == "tool_search_output":
        found.result(item.get("call_id"), "", _defined(item.get("tools")), how="tool_search_output",
                     name=TOOL_SEARCH)


def _part(found: _History, part: dict[str, Any]) -> None:
    """A Gemini part."""
    if isinstance(part.get("functionCall"), dict):
        call = part["functionCall"]
        found.call(call.get("id"), call.get("name"), call.get("args"))
    elif isinstance(part.get("functionResponse"), dict):
        res = part["functionResponse"]
        found.result(res.get("id"), _text(res.get("response")), name=str(res.get("name") or ""))


def _defined(tools: Any) -> list[str]:
    """The names of the definitions a ``tool_search_output`` loads (a namespace's as ``ns.fn``)."""
    names = []
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace" and isinstance(t.get("tools"), list):
            names += [f"{t.get('name')}.{fn.get('name')}" for fn in t["tools"] if isinstance(fn, dict)]
        elif isinstance(t.get("name"), str):
            names.append(t["name"])
    return names


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _text(content: Any) -> str:
    """A result's content as text: a string as it is, text blocks joined, anything else as JSON
    (``tool_reference`` blocks stand for the tools they load, said apart)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "tool_reference":
                continue
            if isinstance(b, dict) and isinstance(b.get("text"), str):
                parts.append(b["text"])
            elif isinstance(b, dict) and "json" in b:  # Converse
                parts.append(json.dumps(b["json"], ensure_ascii=False))
            else:
                parts.append(json.dumps(b, ensure_ascii=False))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def listed(result: str | None) -> tuple[list[str], dict[str, Any]]:
    """The tools a search result names (what it found), and the rest of its JSON; a result
    that is not the proxy's JSON names none. A Gemini result wraps the text in an object."""
    if not result:
        return [], {}
    try:
        data = json.loads(result)
    except (ValueError, RecursionError):
        return [], {}
    if isinstance(data, dict) and set(data) <= {"result", "output", "content"} and len(data) == 1:
        inner = next(iter(data.values()))  # Gemini: {"result": "<the text>"} or the object itself
        if isinstance(inner, str):
            return listed(inner)
        data = inner
    if not isinstance(data, dict):
        return [], {}
    names = [t["name"] if isinstance(t, dict) else t for t in data.get("tools") or ()
             if isinstance(t, str) or (isinstance(t, dict) and isinstance(t.get("name"), str))]
    return [str(n) for n in names], data


def definitions(result: str | None) -> dict[str, Any]:
    """The definitions a search result carries (call-through gives each found tool's in full), by name."""
    _, data = listed(result)
    return {t["name"]: t for t in data.get("tools") or () if isinstance(t, dict) and isinstance(t.get("name"), str)}


def short(text: str, limit: int = MAX_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
