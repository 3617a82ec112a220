"""Gemini ``streamGenerateContent`` streams <-> one ``GenerateContentResponse``.

Two framings of the same chunks: with ``alt=sse`` each ``data:`` is a whole
GenerateContentResponse; without it the body is one JSON array streamed element
by element (``[{...}\\n,\\r\\n{...}\\n]``). Chunks carry a few parts each: text arrives
in pieces, a ``functionCall`` arrives whole, and a ``thoughtSignature`` may come on
its own empty text part in the last chunk. Assembling concatenates consecutive
plain text parts of the same kind (thought or not) the way Gemini CLI consolidates
them, keeping the signature on the merged part, so the result has the
non-streaming shape; every other part is kept whole. Candidate fields
(``finishReason``...) and top-level fields (``usageMetadata``, ``modelVersion``...)
are taken from the last chunk that has them. Mid-stream errors are
``{"error": {...}}`` elements.
"""

from __future__ import annotations

import re
from typing import Any

from tooldisco.apis.streaming import AssembledDecoder, Assembler, Event, Fragments, as_list, copy_json, dumps, loads_or_text
from tooldisco.apis.framing.sse import SSEDecoder, encode_event

_TEXT_KEYS = frozenset({"text", "thought", "thoughtSignature"})
# Gemini's SSE ends lines with CRLF.
SSE_NEWLINE = "\r\n"


def _plain_text(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str) and set(part) <= _TEXT_KEYS


def _merge_part(parts: list[dict[str, Any]], part: Any, text: Fragments) -> None:
    """Append ``part``, folding it into the previous one when both are plain text of the
    same kind and they do not both carry a signature (a second signature starts a new part).
    An empty text part without a signature is dropped: the API rejects empty text in a turn."""
    if not isinstance(part, dict) or (_plain_text(part) and not part["text"] and "thoughtSignature" not in part):
        return
    last = parts[-1] if parts else None
    if (
        last is not None
        and _plain_text(last)
        and _plain_text(part)
        and bool(last.get("thought")) == bool(part.get("thought"))
        and not ("thoughtSignature" in last and "thoughtSignature" in part)
    ):
        text.append(last, "text", part["text"])
        if "thoughtSignature" in part:
            last["thoughtSignature"] = part["thoughtSignature"]
        return
    parts.append(copy_json(part))


def fold_parts(parts: list[Any]) -> list[dict[str, Any]]:
    """``parts`` folded as a stream is assembled (``_merge_part``): the same answer whichever way
    its text was cut into parts."""
    out: list[dict[str, Any]] = []
    text = Fragments()
    for part in parts:
        _merge_part(out, part, text)
    text.flush()
    return out


class GeminiAssembler(Assembler):
    """Folds GenerateContentResponse chunks into one GenerateContentResponse."""

    def __init__(self) -> None:
        super().__init__()
        self._top: dict[str, Any] | None = None
        self._candidates: dict[int, dict[str, Any]] = {}

    def apply(self, name: str | None, data: Any) -> str:
        if not isinstance(data, dict):
            return name or "unknown"
        if "error" in data and "candidates" not in data:
            self.error = data
            return "error"
        if self._top is None:
            self._top = {}
        for key, value in data.items():
            if key == "candidates":
                self._top.setdefault(key, None)  # filled in by _assemble; keeps the key order
                for position, candidate in enumerate(value if isinstance(value, list) else []):
                    if isinstance(candidate, dict):
                        self._candidate(position, candidate)
            else:
                self._top[key] = copy_json(value)
        if any(c.get("finishReason") for c in self._candidates.values()):
            self.done = True
        return "chunk"

    def _candidate(self, position: int, candidate: dict[str, Any]) -> None:
        index = candidate.get("index", position)
        state = self._candidates.setdefault(index if isinstance(index, int) else position, {})
        for key, value in candidate.items():
            if key != "content" or not isinstance(value, dict):
                state[key] = copy_json(value)
                continue
            content = state.get("content")
            if not isinstance(content, dict):  # absent, or an earlier chunk's was not an object
                content = state["content"] = {}
            if not isinstance(content.get("parts"), list):
                content["parts"] = []
            for part in as_list(value.get("parts")):
                _merge_part(content["parts"], part, self.text)
            content.update({k: copy_json(v) for k, v in value.items() if k != "parts"})

    def _assemble(self) -> dict[str, Any] | None:
        if self._top is None:
            return None
        response = copy_json(self._top)
        if "candidates" in response:  # a blocked prompt's answer has promptFeedback and no candidates
            response["candidates"] = [copy_json(self._candidates[i]) for i in sorted(self._candidates)]
        return response


class JSONArrayDecoder:
    """Incremental reader of a streamed JSON array: yields each element's text and raw bytes.

    Scans bytes for structure only (brackets outside strings), so chunks may split
    anywhere, UTF-8 characters included; an element is decoded once it is complete.
    """

    _STRUCTURE = re.compile(rb'["\\{}\[\]]')
    _IN_STRING = re.compile(rb'["\\]')

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pos = 0  # scanned up to here
        self._depth = 0  # nesting inside the top-level array
        self._in_string = False
        self._element_start: int | None = None

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        """Each element completed by ``data``, as (text, raw bytes since the previous element)."""
        buffer = self._buffer
        buffer += data
        elements: list[tuple[str, bytes]] = []
        pos = self._pos
        while True:
            match = (self._IN_STRING if self._in_string else self._STRUCTURE).search(buffer, pos)
            if match is None:
                break
            char = match.group()
            if self._in_string:
                if char == b"\\":
                    if match.end() >= len(buffer):  # the escaped byte has not arrived yet
                        pos = match.start()
                        break
                    pos = match.end() + 1
                    continue
                self._in_string = False
            elif char == b'"':
                self._in_string = True
                if self._depth == 1 and self._element_start is None:
                    self._element_start = match.start()
            elif char in (b"{", b"["):
                self._depth += 1
                if self._depth == 2 and self._element_start is None:
                    self._element_start = match.start()
            else:
                self._depth -= 1
                if self._depth == 1 and self._element_start is not None:
                    element = bytes(buffer[self._element_start : match.end()])
                    raw = bytes(buffer[: match.end()])
                    del buffer[: match.end()]
                    self._element_start = None
                    pos = 0
                    elements.append((element.decode("utf-8", errors="replace"), raw))
                    continue
            pos = match.end()
        self._pos = pos
        return elements

    def rest(self) -> bytes:
        """Bytes after the last element (the closing bracket, or a truncated element)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        self._pos = 0
        return rest


class GeminiStreamDecoder(AssembledDecoder):
    """Gemini stream bytes -> events; ``message()`` is the GenerateContentResponse.

    The framing is read from the first byte: ``[`` is the JSON-array form, anything
    else ``alt=sse``. ``feed(b"")`` ends the stream.
    """

    def __init__(self) -> None:
        self.assembler = GeminiAssembler()
        self._sse: SSEDecoder | None = None
        self._array: JSONArrayDecoder | None = None
        self._head = b""  # leading whitespace seen before the framing is known
        self._unclaimed = bytearray()  # bytes fed that no event holds yet

    @property
    def rest(self) -> bytes:
        """The bytes after the last event: once the body ended, what followed its last chunk (the
        array's ``]``, whitespace, SSE blank lines or comments)."""
        return bytes(self._unclaimed)

    @property
    def sse(self) -> bool | None:
        """True for ``alt=sse``, False for the JSON array, None before the first byte."""
        return None if self._sse is None and self._array is None else self._sse is not None

    def feed(self, data: bytes) -> list[Event]:
        self._unclaimed += data
        events = self._feed(data)
        del self._unclaimed[: sum(len(event.raw) for event in events)]
        return events

    def _feed(self, data: bytes) -> list[Event]:
        if self._sse is None and self._array is None:
            data, self._head = self._head + data, b""
            if not data.lstrip():
                self._head = data  # nothing, or whitespace: the framing is not known yet
                return []
            if data.lstrip().startswith(b"["):
                self._array = JSONArrayDecoder()
            else:
                self._sse = SSEDecoder()
        if self._sse is not None:
            items = [(sse.event, sse.data, sse.raw) for sse in self._sse.feed(data)]
        else:
            assert self._array is not None
            items = [(None, text, raw) for text, raw in self._array.feed(data)]
            if not data:
                rest = self._array.rest()
                if rest.strip(b" \t\r\n,]"):
                    items.append((None, rest.decode("utf-8", errors="replace"), rest))
        events = []
        for name, text, raw in items:
            payload = loads_or_text(text)
            events.append(Event(self.assembler.apply(name, payload), payload, raw))
        return events



def chunks(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks that stream ``response``: one part per chunk; each candidate's last
    chunk carries its other fields (finishReason...), the very last chunk the usage."""
    top = {k: copy_json(v) for k, v in response.items() if k not in ("candidates", "usageMetadata")}
    out: list[dict[str, Any]] = []
    for candidate in response.get("candidates") or []:
        content = candidate.get("content") or {}
        extras = {k: v for k, v in content.items() if k != "parts"}
        parts = content.get("parts") or []
        fields = {k: copy_json(v) for k, v in candidate.items() if k not in ("content", "index")}
        index = {"index": candidate["index"]} if "index" in candidate else {}
        pieces: list[dict[str, Any]] = [
            {"content": {"parts": [copy_json(part)], **copy_json(extras)}, **index} for part in parts
        ]
        if not pieces:
            pieces = [{**({"content": copy_json(content)} if "content" in candidate else {}), **index}]
        pieces[-1].update(fields)
        out += [{"candidates": [piece], **copy_json(top)} for piece in pieces]
    if not out:
        out.append({**({"candidates": []} if "candidates" in response else {}), **top})
    if "usageMetadata" in response:
        out[-1]["usageMetadata"] = copy_json(response["usageMetadata"])
    return out


def encode(response: dict[str, Any], sse: bool = True) -> bytes:
    """The stream for ``response``: ``alt=sse`` events, or the JSON array form."""
    if sse:
        return b"".join(encode_event(dumps(chunk), newline=SSE_NEWLINE) for chunk in chunks(response))
    elements = [dumps(chunk, indent=2) for chunk in chunks(response)]
    return ("[" + "\n,\r\n".join(elements) + "\n]").encode("utf-8")
