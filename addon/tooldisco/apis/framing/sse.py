"""Server-sent events framing (WHATWG "event stream" grammar), sans-IO.

Why: Anthropic, both OpenAI APIs and Gemini ``alt=sse`` all frame their streams
this way. The decoder takes bytes cut anywhere (inside a UTF-8 character, between
the ``\\r`` and ``\\n`` of a line end) and keeps each event's exact wire bytes so
an unchanged event can be forwarded as it came.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event. ``raw`` holds its wire bytes, including any comment
    lines and blank lines that came before it, so concatenating ``raw`` over all
    events gives back the stream."""

    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None
    raw: bytes = b""


class SSEDecoder:
    """Incremental SSE parser: ``feed(bytes) -> [SSEEvent]``; ``feed(b"")`` ends the stream.

    Follows the spec's field rules (one optional space after the colon, ``:`` lines
    are comments, ``data`` lines join with ``\\n``, any of CRLF/CR/LF ends a line).
    An event is dispatched when a blank line ends a block that set any field (as the
    official SDKs do); at the end of the stream an unterminated block is dispatched
    too rather than lost.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0  # the buffer holds no line end before this offset
        self._raw = bytearray()
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []
        self._last_id: str | None = None
        self._retry: int | None = None
        self._pending = False
        #: Bytes after the stream's last event (blank lines, comments), once ``feed(b"")`` ended it.
        self.tail = b""

    def feed(self, data: bytes) -> list[SSEEvent]:
        if not data:
            return self._finish()
        self._buffer += data
        if not self._started:
            if len(self._buffer) < len(_BOM) and _BOM.startswith(bytes(self._buffer)):
                return []
            self._started = True
            if self._buffer.startswith(_BOM):
                self._raw += _BOM
                del self._buffer[: len(_BOM)]
        return self._lines(final=False)

    def _lines(self, final: bool) -> list[SSEEvent]:
        """Handle every complete line in the buffer. A CR at the very end waits for the
        next byte (it may be half of a CRLF), so the result never depends on chunking."""
        buffer = self._buffer
        start = self._scanned  # the buffer holds no line end before it: only new bytes are looked at
        # Why two paths: a stream's lines all end alike (LF, or CRLF as Gemini's do), and then
        # one C-level split finds them; per-line regex work is left to streams that mix
        # line ends or use lone CRs (which the spec allows), and to a CR that may be half a CRLF.
        crs = buffer.count(b"\r", start)
        if not crs:
            sep = b"\n"
        elif crs == buffer.count(b"\r\n", start) == buffer.count(b"\n", start):
            sep = b"\r\n"
        else:
            return self._lines_mixed(final)
        end = buffer.rfind(sep, start)
        if end < 0:
            self._scanned = max(len(buffer) - 1, 0)  # a trailing CR is looked at again
            return []
        events: list[SSEEvent] = []
        step = len(sep)
        pos = taken = 0  # the next line's start; the end of what ``_raw`` holds of this buffer
        for line in bytes(buffer[:end]).split(sep):
            after = pos + len(line) + step
            if line:
                self._field(line)
            elif self._pending:  # a blank line ends the event: its raw bytes run to here
                self._raw += buffer[taken:after]
                taken = after
                events.append(self._dispatch())  # type: ignore[arg-type]  # pending: never None
            pos = after
        self._raw += buffer[taken:pos]
        del buffer[:pos]
        self._scanned = max(len(buffer) - 1, 0)
        return events

    def _lines_mixed(self, final: bool) -> list[SSEEvent]:
        """``_lines`` for a buffer whose lines do not all end alike: one line at a time."""
        buffer = self._buffer
        events: list[SSEEvent] = []
        pos = 0
        search_from = self._scanned  # a long line arriving in pieces is not rescanned
        while (match := _LINE_END.search(buffer, search_from)) is not None:
            if not final and match.end() == len(buffer) and match.group() == b"\r":
                break
            self._raw += buffer[pos : match.end()]
            event = self._line(bytes(buffer[pos : match.start()]))
            pos = search_from = match.end()
            if event is not None:
                events.append(event)
        del buffer[:pos]
        self._scanned = max(len(buffer) - 1, 0)  # a trailing CR is looked at again
        return events

    def _finish(self) -> list[SSEEvent]:
        events = self._lines(final=True)
        if self._buffer:  # a last line without a line end
            self._raw += self._buffer
            line = bytes(self._buffer)
            self._buffer.clear()
            self._scanned = 0
            if (event := self._line(line)) is not None:
                events.append(event)
        if (event := self._dispatch()) is not None:
            events.append(event)
        self.tail += bytes(self._raw)  # blank lines or comments after the last event
        self._raw.clear()
        return events

    def _line(self, line: bytes) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        self._field(line)
        return None

    def _field(self, line: bytes) -> None:
        """One non-blank line. Split before decoding: a colon is one byte in UTF-8 and never
        part of a multi-byte character, so the name and value are those of the decoded line."""
        name, _, value = line.partition(b":")
        if not name:
            return  # a comment
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", errors="replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", errors="replace")
        elif name == b"id":
            if b"\0" in value:
                return
            self._last_id = value.decode("utf-8", errors="replace")
        elif name == b"retry":
            if not value.isdigit():  # bytes: ASCII digits only, as the spec says
                return
            self._retry = int(value)
        else:
            return  # unknown field: ignored, as the spec says
        self._pending = True

    def _dispatch(self) -> SSEEvent | None:
        if not self._pending:
            return None
        event = SSEEvent("\n".join(self._data), self._event, self._last_id, self._retry, bytes(self._raw))
        self._event, self._data, self._retry, self._pending = None, [], None, False
        self._raw.clear()
        return event


def reframe(raw: bytes, data: str) -> bytes:
    """The event ``raw`` (its exact wire bytes) with its data replaced by ``data``, its other lines
    as they came: the ``event:`` line or its absence, ``id:``, comments, blank lines before it,
    and its line ends. Why: a changed event must keep the framing the stream chose (data-only
    SSE, CRLF), or the client's reader sees another stream than the upstream's."""
    lines = raw.splitlines(keepends=True)
    out = bytearray()
    done = False
    end = b"\n"
    for line in lines:
        body = line.rstrip(b"\r\n")
        if line != body:
            end = line[len(body):]
        if body.startswith(b"data"):
            if not done:
                out += b"".join(b"data: " + part.encode("utf-8") + end for part in re.split(r"\r\n|\r|\n", data))
                done = True
            continue
        out += line
    if not done:
        return encode_event(data)
    if not out.endswith(end + end):  # an event the upstream left unterminated is ended here
        out += end
    return bytes(out)


def encode_event(
    data: str,
    event: str | None = None,
    *,
    id: str | None = None,
    retry: int | None = None,
    newline: str = "\n",
) -> bytes:
    """One SSE event: ``event:``, ``id:``, ``retry:`` then one ``data:`` line per data line."""
    lines: list[str] = []
    if event is not None:
        lines.append(f"event: {event}")
    if id is not None:
        lines.append(f"id: {id}")
    if retry is not None:
        lines.append(f"retry: {retry}")
    if "\n" in data or "\r" in data:
        lines.extend(f"data: {part}" for part in re.split(r"\r\n|\r|\n", data))
    else:  # one line (compact JSON): no regex pass over a payload that may hold a whole catalog
        lines.append(f"data: {data}")
    return (newline.join(lines) + newline + newline).encode("utf-8")
