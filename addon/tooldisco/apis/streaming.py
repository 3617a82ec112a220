"""What every stream codec shares: the event record, the errors, JSON text and
the delta-folding rule, and the decoder that joins SSE framing to an assembler.

Why: each wire API differs only in how one parsed payload changes the message
being assembled; framing, error reporting and "give me the message" are the same
everywhere, so they live here once.
"""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from tooldisco.core.jsonspan import dumps as dumps  # the one JSON writer; the stream encoders and stitchers take it from here
from tooldisco.apis.framing.sse import SSEDecoder

_J = TypeVar("_J")


@dataclass(frozen=True)
class Event:
    """One decoded stream event.

    ``type`` is the API's own name for it (``"message_start"``, ``"chunk"``,
    ``"contentBlockDelta"``...); ``data`` the parsed payload (the text itself when
    it is not JSON); ``raw`` the exact wire bytes, so an event nobody changes can be
    forwarded byte-for-byte.
    """

    type: str
    data: Any
    raw: bytes = b""


class StreamError(Exception):
    """The upstream reported an error inside a stream that had already started (HTTP 200)."""

    def __init__(self, error: Any) -> None:
        super().__init__(f"upstream stream error: {error!r}")
        self.error = error


class IncompleteStream(Exception):
    """The stream has not carried enough to assemble a message (e.g. no start event yet)."""


# How deep an upstream's JSON may nest for the stream code to take it as JSON. The assemblers
# copy and merge values recursively (up to two Python frames a level), so this
# keeps them well inside Python's default recursion limit of 1000; json.loads itself goes to
# about 10,000 levels. Real events nest a few dozen levels at most.
MAX_DEPTH = 200


def loads_or_text(text: str) -> Any:
    """The parsed JSON value, or the text itself when it is not JSON (never raises). JSON
    nested deeper than ``MAX_DEPTH``, or past the parser's own limit, counts as not JSON."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return value if _within_depth(text, value) else text


def _within_depth(text: str, value: Any) -> bool:
    """Whether ``value`` nests at most ``MAX_DEPTH`` deep. A text that opens fewer brackets
    than that cannot nest deeper (most events); else the value is walked level by level."""
    if text.count("{") + text.count("[") <= MAX_DEPTH:
        return True
    level = [value] if isinstance(value, (dict, list)) else []
    for _ in range(MAX_DEPTH):
        if not level:
            return True
        children = (c for v in level for c in (v.values() if isinstance(v, dict) else v))
        level = [c for c in children if isinstance(c, (dict, list))]
    return not level


_IMMUTABLE = (str, int, float, bool, type(None))


def copy_json(value: _J) -> _J:
    """A deep copy of a JSON value (what ``json.loads`` makes): objects and arrays are copied,
    the rest is immutable and shared. Why not ``copy.deepcopy``: a stream's values are trees
    without shared parts or cycles, and deepcopy's memo and dispatch cost several times this
    walk on every event. Anything else found inside is deep-copied as before."""
    kind = type(value)
    data: Any = value
    if kind is dict:
        return cast(_J, {k: copy_json(v) for k, v in data.items()})
    if kind is list:
        return cast(_J, [copy_json(v) for v in data])
    if kind in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


def parse_arguments(text: str) -> Any:
    """A streamed tool-argument text as an object: empty means ``{}``, unparsable stays text."""
    return loads_or_text(text) if text.strip() else {}


# Characters of streamed text one assembler keeps (every key together). The largest output a
# model can be asked for (max_tokens) is a few hundred thousand tokens, a few MB of text: past
# this the stream is not a model's answer the loop can re-send, and what comes is relayed but
# not kept, so a proxy's memory does not grow with an answer's size.
MAX_ASSEMBLED_TEXT = 4 * 1024 * 1024
_RUN = 256  # small fragments joined into one string every this many: no per-object cost per delta


class Fragments:
    """Collects streamed string fragments per (object, key) and joins them on ``flush``.

    Why: ``text = text + delta`` on every event is quadratic; a long answer arrives in
    thousands of deltas. Until ``flush`` the objects hold stale text, so assemblers
    flush before anything reads them (``Assembler.message`` does). Every ``_RUN``
    fragments of one key are joined as they come, so a key holds about its text's size
    however finely it was cut. ``limit``: characters kept over all keys; past it,
    fragments are dropped and ``cut`` says the text is incomplete.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._pending: dict[tuple[int, Hashable], tuple[MutableMapping[Any, Any], Hashable, list[str]]] = {}
        self.limit = limit
        self.size = 0  # characters appended, kept or not
        self.cut = False

    def append(self, target: MutableMapping[Any, Any], key: Hashable, piece: str) -> None:
        self.size += len(piece)
        if self.limit is not None and self.size > self.limit:
            self.cut = True
            return
        slot = self._pending.get((id(target), key))
        if slot is None:
            current = target.get(key)
            if not isinstance(current, str):
                target[key] = current = ""
            slot = (target, key, [current])
            self._pending[(id(target), key)] = slot  # holding target keeps its id unique
        pieces = slot[2]
        pieces.append(piece)
        if len(pieces) % (2 * _RUN) == 0:  # the last _RUN fragments become one string
            pieces[-_RUN:] = ["".join(pieces[-_RUN:])]

    def set(self, target: MutableMapping[Any, Any], key: Hashable, value: Any) -> None:
        """Replace the value outright, discarding fragments not yet joined."""
        self._pending.pop((id(target), key), None)
        target[key] = value

    def get(self, target: MutableMapping[Any, Any], key: Hashable) -> Any:
        """The current value of one key, its fragments joined."""
        slot = self._pending.pop((id(target), key), None)
        if slot is not None:
            target[key] = "".join(slot[2])
        return target.get(key)

    def flush(self) -> None:
        for target, key, pieces in self._pending.values():
            target[key] = "".join(pieces)
        self._pending.clear()


def _is_indexed(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(v, dict) and "index" in v for v in value)


def merge_delta(
    acc: dict[str, Any],
    delta: Mapping[str, Any],
    fragments: Fragments,
    replace: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Fold one streamed delta into ``acc`` the way the official SDKs accumulate.

    Strings append (through ``fragments``), objects merge recursively, lists of
    ``index``-ed objects merge entry by entry on that index, other lists extend.
    ``index``, ``type`` and the keys in ``replace`` overwrite, as do numbers and
    booleans (a count is a snapshot, not a fragment). ``None`` never erases a value.
    """
    for key, value in delta.items():
        current = acc.get(key)
        if value is None:
            acc.setdefault(key, None)
            continue
        if current is None or key in replace or key in ("index", "type"):
            if _is_indexed(value):
                fragments.set(acc, key, [])
                current = acc[key]
            else:
                fragments.set(acc, key, copy_json(value))
                continue
        if isinstance(current, str) and isinstance(value, str):
            fragments.append(acc, key, value)
        elif isinstance(current, dict) and isinstance(value, dict):
            merge_delta(current, value, fragments, replace)
        elif isinstance(current, list) and isinstance(value, list):
            if _is_indexed(value):
                _merge_indexed(current, value, fragments, replace)
            else:
                current.extend(copy_json(value))
        else:
            fragments.set(acc, key, copy_json(value))
    return acc


def _merge_indexed(current: list[Any], entries: list[Any], fragments: Fragments, replace: frozenset[str]) -> None:
    for entry in entries:
        index = entry.get("index") if isinstance(entry, dict) else None
        target = next(
            (c for c in current if isinstance(c, dict) and index is not None and c.get("index") == index), None
        )
        if target is None:
            current.append(merge_delta({}, entry, fragments, replace) if isinstance(entry, dict) else entry)
        else:
            merge_delta(target, entry, fragments, replace)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one: malformed events must not crash us."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is an array, else an empty one: where a body or an upstream answer
    has ``true``, a number or an object in place of a list, there is nothing to walk."""
    return value if isinstance(value, list) else []


class Assembler(ABC):
    """Folds one API's parsed stream payloads into that API's non-streaming response object."""

    def __init__(self) -> None:
        self.error: Any = None  # the upstream's error payload, once one arrived
        self.done = False  # the API's terminal event arrived
        self.text = Fragments(MAX_ASSEMBLED_TEXT)  # string fragments not yet joined into the state

    @abstractmethod
    def apply(self, name: str | None, data: Any) -> str:
        """Fold one payload (``name`` is the framing's event name, if any); return its type."""

    @abstractmethod
    def _assemble(self) -> dict[str, Any] | None:
        """The message so far, as a fresh object; None before the stream has started."""

    def message(self) -> dict[str, Any]:
        """The assembled message; raises ``StreamError`` after an upstream error event."""
        if self.error is not None:
            raise StreamError(self.error)
        self.text.flush()
        message = self._assemble()
        if message is None:
            raise IncompleteStream("the stream has not started a message yet")
        return message


class AssembledDecoder:
    """What every stream decoder answers from its assembler: the message so far, the upstream's
    error, whether the API's end arrived, and whether text past ``MAX_ASSEMBLED_TEXT`` went unkept."""

    assembler: Assembler

    def message(self) -> dict[str, Any]:
        return self.assembler.message()

    @property
    def error(self) -> Any:
        """The upstream's error payload, to pass through to the client; None if none came."""
        return self.assembler.error

    @property
    def done(self) -> bool:
        """True once the API's end arrived (its terminal event, or Gemini's ``finishReason``)."""
        return self.assembler.done

    @property
    def cut(self) -> bool:
        """The message lacks text past ``MAX_ASSEMBLED_TEXT``: the stream went on, it was not kept."""
        return self.assembler.text.cut


class SSEStreamDecoder(AssembledDecoder):
    """Sans-IO decoder for an SSE API with JSON payloads: bytes in, ``Event``s out.

    ``feed(b"")`` marks the end of the body (as mitmproxy's stream callback and h11
    do) and flushes an event the server left unterminated.
    """

    def __init__(self, assembler: Assembler) -> None:
        self._sse = SSEDecoder()
        self.assembler = assembler

    @property
    def tail(self) -> bytes:
        """What the body held after its last event (blank lines, comments), once it ended."""
        return self._sse.tail

    def feed(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        for sse in self._sse.feed(data):
            payload = loads_or_text(sse.data)
            events.append(Event(self.assembler.apply(sse.event, payload), payload, sse.raw))
        return events
