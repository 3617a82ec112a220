"""The provider's usage of an answer the proxy relays without reading it, sans-IO and cheap.

Why: every answer carries the provider's own count of what it billed, and an answer the proxy
passes on as it comes (a fallback's stream, a JSON body) is not decoded. ``UsageScan`` finds
that count in the bytes going past: ``feed(bytes)`` in any chunking, ``feed(b"")`` at the end
(``usage()`` ends the scan too), then ``usage()``: what ``adapter.usage`` says of the answer
assembled, without assembling it.

Cheap: an SSE event is JSON-parsed only when a byte search finds the mark of usage in it
(Anthropic ``message_start`` / ``message_delta``, a Chat chunk whose ``usage`` is not null,
Responses ``response.completed`` / ``incomplete`` / ``failed``, Gemini ``usageMetadata``);
every other event is skipped unread. Event-stream frames (Bedrock) are walked by their
lengths and only ``metadata`` / ``messageStop`` payloads (ConverseStream) or the Anthropic
events inside ``chunk`` frames that carry usage (InvokeModel) are parsed. A JSON body (a
non-streaming answer, or Gemini's stream as one JSON array) is never held: its structure is
followed byte by byte and only the text of its ``usage`` (``usageMetadata``) member is kept.

Memory: never the body. At most one partial event is kept, up to ``MAX_EVENT``; an event past
that is read as a JSON body is (only the members that can hold usage kept) from its first
``{`` on, which takes one ``data:`` line as the providers send it. An event-stream frame past
``MAX_EVENT`` is skipped by its length. A usage value's text is kept up to ``MAX_VALUE``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import zlib
from collections.abc import Callable, Collection, Iterable
from typing import Any

from tooldisco.apis.base import Adapter
from tooldisco.apis.framing.eventstream import MAX_MESSAGE_LENGTH, EventStreamDecoder, EventStreamError, Frame
from tooldisco.apis.streaming import as_dict, as_list, loads_or_text
from tooldisco.core.types import TokenUsage

MAX_EVENT = 1024 * 1024  # bytes of one event kept whole; past it only its usage members are
MAX_VALUE = 64 * 1024  # bytes of one captured member's value (a usage object is a few hundred)

Path = tuple[str, ...]
_ANY = "*"  # a path step that is any element of an array


# -- what each API's usage-bearing events do to the answer's usage ---------------------------

class _Fold:
    """One API's usage as its stream assembler would leave it, from the few payloads that carry it."""

    key = "usage"  # the member of the answer that holds usage
    gate = re.compile(rb'"usage"')  # bytes an SSE event must contain to be parsed
    paths: tuple[Path, ...] = (("usage",),)  # members of an event too big to keep that are read

    def __init__(self) -> None:
        self.value: Any = None
        self.seen = False  # the assembled answer would have a usage member

    def event(self, data: Any) -> None:
        """One parsed SSE payload (or the members of one too big to keep)."""

    def body(self, values: dict[Path, Any]) -> None:
        """A JSON body's captured members: the last one wins, as a later chunk's does."""
        for path in (("usage",), ("usageMetadata",), (_ANY, "usageMetadata")):
            if path in values and (path[-1] == self.key):
                self.value, self.seen = values[path], True

    def message(self) -> dict[str, Any] | None:
        return {self.key: self.value} if self.seen else None


class _Anthropic(_Fold):
    """``message_start`` holds the usage so far; ``message_delta``'s counts are cumulative and
    overwrite the ones it names (``AnthropicAssembler``)."""

    gate = re.compile(rb'"message_(?:start|delta)"')
    paths = (("type",), ("message", "usage"), ("usage",))

    def event(self, data: Any) -> None:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "message_start" and isinstance(data.get("message"), dict):
            usage = data["message"].get("usage")
            self.value, self.seen = (dict(usage) if isinstance(usage, dict) else {}), True
        elif kind == "message_delta" and self.seen:
            self.value.update({k: v for k, v in as_dict(data.get("usage")).items() if v is not None})


class _Chat(_Fold):
    """The chunk whose ``usage`` is not null (``stream_options.include_usage``); a provider that
    puts it in the choice (Moonshot) has it kept per choice, as the assembler keeps it."""

    gate = re.compile(rb'"usage"\s*:\s*[^\sn]')
    paths = (("object",), ("usage",))

    def __init__(self) -> None:
        super().__init__()
        self._choices: dict[int, Any] = {}

    def event(self, data: Any) -> None:
        if not isinstance(data, dict) or ("error" in data and "choices" not in data):
            return
        if data.get("object", "chat.completion.chunk") != "chat.completion.chunk":
            return
        if data.get("usage") is not None:
            self.value, self.seen = data["usage"], True
        for choice in as_list(data.get("choices")):
            if isinstance(choice, dict) and choice.get("usage") is not None:
                index = choice.get("index", 0)
                self._choices[index if isinstance(index, int) else 0] = choice["usage"]

    def message(self) -> dict[str, Any] | None:
        choices = [{"usage": self._choices[i]} for i in sorted(self._choices)]
        if not self.seen and not choices:
            return None
        return {"usage": self.value, "choices": choices}


class _Responses(_Fold):
    """The terminal event's ``response.usage`` (the stream's last word on the response)."""

    gate = re.compile(rb'"response\.(?:completed|incomplete|failed)"')
    paths = (("type",), ("response", "usage"))
    _TERMINAL = ("response.completed", "response.incomplete", "response.failed")

    def event(self, data: Any) -> None:
        if isinstance(data, dict) and data.get("type") in self._TERMINAL and isinstance(data.get("response"), dict):
            self.value, self.seen = data["response"].get("usage"), "usage" in data["response"]


class _Gemini(_Fold):
    """``usageMetadata`` is cumulative: the last chunk that has it wins."""

    key = "usageMetadata"
    gate = re.compile(rb'"usageMetadata"')
    paths = (("usageMetadata",),)

    def event(self, data: Any) -> None:
        if isinstance(data, dict) and not ("error" in data and "candidates" not in data) and self.key in data:
            self.value, self.seen = data[self.key], True


class _Converse(_Fold):
    """ConverseStream's ``metadata`` frame (or a ``messageStop`` that carries usage)."""

    def frame(self, frame: Frame) -> None:
        if frame.event_type in ("metadata", "messageStop") and b'"usage"' in frame.payload:
            data = loads_or_text(frame.payload.decode("utf-8", errors="replace"))
            if isinstance(data, dict) and "usage" in data:
                self.value, self.seen = data["usage"], True


class _Invoke(_Anthropic):
    """InvokeModelWithResponseStream: Anthropic events, base64 in ``chunk`` frames."""

    _BYTES = re.compile(rb'"bytes"\s*:\s*"([A-Za-z0-9+/=]*)"')

    def frame(self, frame: Frame) -> None:
        if frame.event_type != "chunk" or frame.message_type not in (None, "event"):
            return
        found = self._BYTES.search(frame.payload)
        try:
            inner = base64.b64decode(found.group(1)) if found else b""
        except (binascii.Error, ValueError):
            return
        if self.gate.search(inner):
            self.event(loads_or_text(inner.decode("utf-8", errors="replace")))


_FOLDS: dict[str, Callable[[], _Fold]] = {
    "anthropic": _Anthropic,
    "openai_chat": _Chat,
    "openai_responses": _Responses,
    "gemini": _Gemini,
    "bedrock_converse": _Converse,
    "bedrock_invoke": _Invoke,
}


# -- framings ----------------------------------------------------------------------------------

class _Members:
    """The values at some key paths of a JSON text fed in pieces; nothing else of it is kept.

    Follows the structure only (brackets, colons and commas outside strings, a string's end),
    so pieces may be cut anywhere. A path's steps are object keys, ``_ANY`` for an array's
    elements; a later value at the same path replaces an earlier one."""

    _OUTSIDE = re.compile(rb'["{}\[\]:,]')
    _INSIDE = re.compile(rb'["\\]')
    _MAX_KEY = 64

    def __init__(self, paths: Iterable[Path], limit: int = MAX_VALUE) -> None:
        self._paths = {tuple(step.encode() for step in path): path for path in paths}
        self._limit = limit
        self._stack: list[list[Any]] = []  # open containers: [is_object, current key, a key comes next]
        self._string = False  # inside a string
        self._escaped = False  # the last piece ended on a backslash inside a string
        self._key: bytearray | None = None  # the object key being read
        self._capture: tuple[Path, int] | None = None  # the path being kept, and its object's depth
        self._text: bytearray | None = None  # its value's bytes so far (None past the limit)
        self.values: dict[Path, Any] = {}

    def feed(self, data: bytes) -> None:
        pos, mark, keep = 0, 0, 0  # where to scan, where the key being read starts, where the kept value starts
        if self._escaped:
            self._escaped, pos = False, 1
        while True:
            if self._string:
                found = self._INSIDE.search(data, pos)
                if found is None:
                    self._add_key(data[mark:])
                    break
                if found.group() == b"\\":
                    if found.end() >= len(data):
                        self._escaped = True
                        self._add_key(data[mark:])
                        break
                    pos = found.end() + 1
                    continue
                self._string = False
                if self._key is not None:
                    self._add_key(data[mark:found.start()])
                    self._stack[-1][1] = bytes(self._key) if len(self._key) <= self._MAX_KEY else None
                    self._key = None
                pos = found.end()
                continue
            found = self._OUTSIDE.search(data, pos)
            if found is None:
                break
            char, pos = found.group(), found.end()
            top = self._stack[-1] if self._stack else None
            if char == b'"':
                self._string = True
                if top is not None and top[0] and top[2]:
                    self._key, mark = bytearray(), pos
            elif char in (b"{", b"["):
                self._stack.append([char == b"{", None, char == b"{"])
            elif char == b":":
                if top is not None and top[0]:
                    top[2] = False
                    if self._capture is None and top[1] is not None:
                        steps = tuple(f[1] if f[0] else b"*" for f in self._stack[:-1]) + (top[1],)
                        if steps in self._paths:
                            self._capture, self._text, keep = (self._paths[steps], len(self._stack)), bytearray(), pos
            else:  # , } ]
                if self._capture is not None and len(self._stack) == self._capture[1]:
                    self._end(data[keep:found.start()])
                if char == b",":
                    if top is not None and top[0]:
                        top[1], top[2] = None, True
                elif self._stack:
                    self._stack.pop()
        if self._capture is not None:
            self._keep(data[keep:])

    def _add_key(self, piece: bytes) -> None:
        if self._key is not None and len(self._key) <= self._MAX_KEY:
            self._key += piece[: self._MAX_KEY + 1]

    def _keep(self, piece: bytes) -> None:
        if self._text is not None:
            self._text += piece
            if len(self._text) > self._limit:
                self._text = None

    def _end(self, piece: bytes) -> None:
        assert self._capture is not None
        self._keep(piece)
        if self._text is not None:
            try:
                self.values[self._capture[0]] = json.loads(bytes(self._text))
            except (ValueError, RecursionError):
                pass
        self._capture, self._text = None, None


def _nest(values: dict[Path, Any]) -> dict[str, Any]:
    """Captured members as the object they came from (``("message", "usage")`` -> ``{"message": {"usage": …}}``)."""
    out: dict[str, Any] = {}
    for path, value in values.items():
        node = out
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = value
    return out


class _SSE:
    """Event boundaries by a byte search; an event is parsed only when ``fold.gate`` finds its mark."""

    # A blank line: two line ends, CRLF counting as one.
    _END = re.compile(rb"\r\n(?:\r\n|\n|\r)|\n(?:\r\n|\n|\r)|\r\r\n?")
    _LINE = re.compile(rb"\r\n|\r|\n")

    def __init__(self, fold: _Fold, limit: int) -> None:
        self._fold = fold
        self._limit = limit
        self._buffer = bytearray()
        self._scanned = 0  # no boundary starts before this offset of the buffer
        self._big: _Members | None = None  # the event past the limit, read by its members
        self._tail = b""  # while reading a big event: its last bytes (a boundary may straddle pieces)

    def feed(self, data: bytes) -> None:
        if self._big is not None:
            rest = self._feed_big(data)
            if rest is None:
                return
            data = rest
        buffer = self._buffer
        buffer += data
        start = 0
        while (end := self._END.search(buffer, max(self._scanned, start))) is not None:
            if self._fold.gate.search(buffer, start, end.start()):
                self._event(bytes(buffer[start:end.start()]))
            start = end.end()
        del buffer[:start]
        self._scanned = max(len(buffer) - 3, 0)
        if len(buffer) > self._limit:
            self._big = _Members(self._fold.paths)
            first = buffer.find(b"{")
            if first >= 0:
                self._big.feed(bytes(buffer[first:]))
            self._tail = bytes(buffer[-3:])
            buffer.clear()
            self._scanned = 0

    def _feed_big(self, data: bytes) -> bytes | None:
        """Feed the big event; the bytes after its end, or None while it goes on."""
        assert self._big is not None
        joined = self._tail + data
        end = self._END.search(joined)
        if end is None:
            self._big.feed(data)
            self._tail = joined[-3:]
            return None
        cut = end.start() - len(self._tail)
        if cut > 0:
            self._big.feed(data[:cut])
        self._end_big()
        return data[max(end.end() - len(self._tail), 0):]

    def _end_big(self) -> None:
        assert self._big is not None
        if self._big.values:
            self._fold.event(_nest(self._big.values))
        self._big, self._tail = None, b""

    def _event(self, raw: bytes) -> None:
        lines = self._LINE.split(raw.removeprefix(b"\xef\xbb\xbf"))
        data = [line[6:] if line[5:6] == b" " else line[5:] for line in lines if line[:5] == b"data:"]
        data += [b"" for line in lines if line == b"data"]
        if data:
            self._fold.event(loads_or_text(b"\n".join(data).decode("utf-8", errors="replace")))

    def end(self) -> None:
        if self._big is not None:
            self._end_big()
        elif self._buffer and self._fold.gate.search(self._buffer):
            self._event(bytes(self._buffer))
        self._buffer.clear()


class _Frames:
    """AWS event-stream frames walked by their lengths: one at most is held, and a frame past the
    limit is skipped unread. A corrupt prelude ends the scan (what was read stands)."""

    _PRELUDE = struct.Struct(">III")

    def __init__(self, on_frame: Callable[[Frame], None], limit: int) -> None:
        self._on_frame = on_frame
        self._limit = limit
        self._buffer = bytearray()
        self._skip = 0  # bytes of a skipped frame still to come
        self._decoder = EventStreamDecoder()  # fed whole frames only: checks both CRCs, reads headers
        self._broken = False

    def feed(self, data: bytes) -> None:
        if self._broken:
            return
        if self._skip:
            taken = min(self._skip, len(data))
            self._skip -= taken
            data = data[taken:]
        buffer = self._buffer
        buffer += data
        pos = 0
        while len(buffer) - pos >= self._PRELUDE.size:
            total, _, crc = self._PRELUDE.unpack_from(buffer, pos)
            if zlib.crc32(buffer[pos:pos + 8]) & 0xFFFFFFFF != crc or not 16 <= total <= MAX_MESSAGE_LENGTH:
                self._stop()
                return
            available = len(buffer) - pos
            if total > self._limit:  # skipped unread, by its length
                if available < total:
                    self._skip, pos = total - available, len(buffer)
                    break
                pos += total
                continue
            if available < total:
                break
            frame, pos = bytes(buffer[pos:pos + total]), pos + total
            try:
                frames = self._decoder.feed(frame)
            except EventStreamError:
                self._stop()
                return
            for decoded in frames:
                self._on_frame(decoded)
        del buffer[:pos]

    def _stop(self) -> None:
        self._broken = True
        self._buffer.clear()

    def end(self) -> None:
        self._buffer.clear()


class _Body:
    """A JSON body (an object, or Gemini's stream as an array of them): its usage member only."""

    def __init__(self, fold: _Fold) -> None:
        self._fold = fold
        self._members = _Members([("usage",), ("usageMetadata",), (_ANY, "usageMetadata")])

    def feed(self, data: bytes) -> None:
        self._members.feed(data)

    def end(self) -> None:
        self._fold.body(self._members.values)


# -- the scanner -------------------------------------------------------------------------------

_WHITESPACE = b" \t\r\n"


class UsageScan:
    """One answer's usage, read as it goes past (the module docstring). Never raises: an answer
    it cannot read has no usage (None)."""

    def __init__(self, adapter: Adapter, headers: Iterable[tuple[str, str]] = (), limit: int = MAX_EVENT) -> None:
        self._adapter = adapter
        self._fold = _FOLDS.get(getattr(adapter, "api", ""), _Fold)()
        self._limit = limit
        types = [v.lower() for k, v in headers if isinstance(k, str) and k.lower() == "content-type" and isinstance(v, str)]
        self._eventstream = any("amazon.eventstream" in t for t in types)
        self._framing: _SSE | _Frames | _Body | None = None
        self._head = b""  # leading whitespace, while the framing is not known
        self._ended = False

    def feed(self, data: bytes) -> None:
        """Upstream bytes, cut anywhere; ``b""`` ends the answer."""
        if self._ended:
            return
        if not data:
            self._end()
            return
        try:
            if self._framing is None:
                data = self._head + data
                if not data.lstrip(_WHITESPACE):
                    self._head = data[-1024:]  # only whitespace so far: not the answer's framing yet
                    return
                self._framing = self._choose(data)
            self._framing.feed(data)
        except Exception:  # noqa: BLE001  a scan never fails the relay: the answer goes unreported
            self._framing, self._ended = None, True

    def _choose(self, data: bytes) -> _SSE | _Frames | _Body:
        first = data.lstrip(_WHITESPACE)[:1]
        fold = self._fold
        if self._eventstream or (first == b"\x00" and isinstance(fold, (_Converse, _Invoke))):
            on_frame = fold.frame if isinstance(fold, (_Converse, _Invoke)) else (lambda frame: None)
            return _Frames(on_frame, self._limit)
        if first in (b"{", b"["):
            return _Body(fold)
        return _SSE(fold, self._limit)

    def _end(self) -> None:
        if not self._ended and self._framing is not None:
            try:
                self._framing.end()
            except Exception:  # noqa: BLE001
                self._framing = None
        self._ended = True

    def usage(self) -> TokenUsage | None:
        """The answer's usage as the provider reported it; None when it reported none. Ends the
        scan when ``feed(b"")`` has not."""
        self._end()
        message = self._fold.message() if self._framing is not None else None
        if message is None:
            return None
        try:
            return self._adapter.usage(message)
        except Exception:  # noqa: BLE001
            return None


def scanner_for(adapter: Adapter, headers: Collection[tuple[str, str]] = ()) -> UsageScan:
    """A fresh scan of one answer of ``adapter``'s API (``headers``: the answer's, for its framing)."""
    return UsageScan(adapter, headers)
