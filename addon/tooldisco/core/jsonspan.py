"""Locate and splice JSON values inside the original body text.

Why: a body we change must keep every byte we did not mean to change (unknown
fields, key order, number formatting, escapes) and every kept tool definition
must go out byte-identical, so the provider's prompt cache keeps hitting.
The stdlib decoder's ``raw_decode`` gives the end offset of any value; these
helpers walk objects and arrays with it instead of re-serializing the body.
"""

from __future__ import annotations

import json
import re
import threading
from contextlib import contextmanager
from typing import Iterable, Iterator, Mapping, Sequence, cast

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"
WHITESPACE = _WS  # JSON's (RFC 8259 §2)

Path = Sequence[str | int]
Span = tuple[int, int]


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _value_end(text: str, i: int) -> int:
    _, end = _DECODER.raw_decode(text, i)
    return end


# A request's body is searched several times while it is planned (its tools, its history).
# Inside ``reusing(text)`` the members of that text's objects (keyed by the object's span) and
# its root members found from the end (keyed ``(key, None)``) are decoded once (per thread);
# outside, nothing is kept, so no body outlives the request that brought it.
_memo = threading.local()


@contextmanager
def reusing(text: str) -> Iterator[None]:
    """Decode the objects of ``text`` once while the block runs, however often they are searched."""
    _memo.text, _memo.found = text, {}
    try:
        yield
    finally:
        _memo.text = _memo.found = None


def remember(text: str, key: object, value: object) -> None:
    """Keep ``value`` under ``key`` while ``reusing(text)`` runs (nothing outside it)."""
    if getattr(_memo, "text", None) is text:
        _memo.found[key] = value


def recalled(text: str, key: object) -> object | None:
    """What ``remember`` kept under ``key`` for ``text`` in this ``reusing`` block, or None."""
    if getattr(_memo, "text", None) is not text:
        return None
    return cast(object | None, _memo.found.get(key))


def known_member(text: str, key: str, span: Span) -> None:
    """Record that the root object's member ``key`` is the value at ``span`` (found and
    verified by the caller), so that finding it again inside ``reusing(text)`` decodes nothing."""
    remember(text, (key, None), (span, None))


def members(text: str, span: Span) -> list[tuple[str, Span]]:
    """(key, value span) for each member of the object at ``span``, in order."""
    if getattr(_memo, "text", None) is not text:
        return _members(text, span)
    found = _memo.found.get(span)
    if found is None:
        found = _memo.found[span] = _members(text, span)
    return cast(list[tuple[str, Span]], found)


def _members(text: str, span: Span) -> list[tuple[str, Span]]:
    i = _skip_ws(text, span[0])
    if text[i] != "{":
        raise ValueError("not an object")
    out: list[tuple[str, Span]] = []
    i = _skip_ws(text, i + 1)
    if text[i] == "}":
        return out
    while True:
        key, i = _DECODER.raw_decode(text, i)
        i = _skip_ws(text, i)
        if text[i] != ":":
            raise ValueError("expected ':'")
        start = _skip_ws(text, i + 1)
        end = _value_end(text, start)
        out.append((key, (start, end)))
        i = _skip_ws(text, end)
        if text[i] == "}":
            return out
        if text[i] != ",":
            raise ValueError("expected ',' or '}'")
        i = _skip_ws(text, i + 1)


def elements(text: str, span: Span) -> list[Span]:
    """The span of each element of the array at ``span``."""
    return _array(text, span[0])[0]


def decode_value(text: str, start: int) -> tuple[object, int]:
    """The value at ``start`` and where it ends."""
    return _DECODER.raw_decode(text, start)


def decode_array(text: str, start: int) -> tuple[list[object], list[Span], int]:
    """The array at ``start``: each element's value and span, and where it ends, in one pass
    (``raw_decode`` yields the value and its end together: nothing decoded twice)."""
    i = _skip_ws(text, start)
    if text[i] != "[":
        raise ValueError("not an array")
    values: list[object] = []
    spans: list[Span] = []
    i = _skip_ws(text, i + 1)
    if text[i] == "]":
        return values, spans, i + 1
    decode = _DECODER.raw_decode
    while True:
        value, end = decode(text, i)
        values.append(value)
        spans.append((i, end))
        i = end
        while text[i] in _WS:
            i += 1
        if text[i] == "]":
            return values, spans, i + 1
        if text[i] != ",":
            raise ValueError("expected ',' or ']'")
        i = _skip_ws(text, i + 1)


def member_starts(text: str, key: str, most: int = 4) -> Iterator[int]:
    """Where values of members named ``key`` start, found from the end of the text: the last
    ``most`` unescaped ``"key":`` literals. Unverified: such a literal may be a nested object's
    member (callers check that the value they take is the root object's)."""
    needle = json.dumps(key)
    hi = len(text)
    for _ in range(most):
        at = text.rfind(needle, 0, hi)
        if at < 0:
            return
        hi = at
        if _escaped(text, at):
            continue
        i = _skip_ws(text, at + len(needle))
        if i < len(text) and text[i] == ":":
            start = _skip_ws(text, i + 1)
            if start < len(text):
                yield start


def _array(text: str, start: int) -> tuple[list[Span], int]:
    """The element spans of the array at ``start``, and where it ends."""
    i = _skip_ws(text, start)
    if text[i] != "[":
        raise ValueError("not an array")
    out: list[Span] = []
    i = _skip_ws(text, i + 1)
    if text[i] == "]":
        return out, i + 1
    while True:
        end = _value_end(text, i)
        out.append((i, end))
        i = _skip_ws(text, end)
        if text[i] == "]":
            return out, i + 1
        if text[i] != ",":
            raise ValueError("expected ',' or ']'")
        i = _skip_ws(text, i + 1)


def root(text: str) -> Span:
    """The whole document, without parsing it: callers hand us text that is valid JSON
    (the adapters ``json.loads`` a body before locating anything in it)."""
    return (_skip_ws(text, 0), len(text.rstrip(_WS)))


def find(text: str, path: Path, span: Span | None = None, known: Mapping[int, int] | None = None) -> Span | None:
    """The span of the value at ``path`` (keys and indexes), or None if absent. ``known``: where
    values of the text end, by where they start (a tool catalog found in the catalog cache): the
    root member is located from the end without decoding them."""
    if span is None and len(path) > 1 and (located := recalled(text, ("path", tuple(path)))) is not None:
        return located  # type: ignore[return-value]  # located by the parse (``catalogs.load_request``)
    cur = span or root(text)
    if span is None and path and isinstance(path[0], str):
        first = _root_member(text, cur, path[0], known)[0]
        if first is None:
            return None
        if first is not _UNSURE:
            cur, path = first, path[1:]
    for step in path:
        if isinstance(step, int):
            try:
                items = elements(text, cur)
            except ValueError:
                return None
            if not -len(items) <= step < len(items):
                return None
            cur = items[step]
        else:
            try:
                found = [s for k, s in members(text, cur) if k == step]
            except ValueError:
                return None
            if not found:
                return None
            cur = found[-1]  # JSON parsers keep the last duplicate key
    return cur


def find_elements(text: str, path: Path) -> list[Span] | None:
    """The span of each element of the array at ``path`` (None if absent; ValueError if it is
    not an array). A root member's array is decoded once, not once to find it and again for
    its elements."""
    if len(path) == 1 and isinstance(path[0], str):
        span, items = _root_member(text, root(text), path[0])
        if span is None:
            return None
        if span is not _UNSURE:
            if items is None:
                if text[span[0]] != "[":
                    raise ValueError("not an array")
                items = elements(text, span)  # a member recorded without its elements (``known_member``)
            return items
    span = find(text, path)
    return None if span is None else elements(text, span)


_UNSURE: Span = (-1, -1)
_LOOKBACK = 4  # candidates tried from the end before walking the whole object
_Member = tuple[Span | None, list[Span] | None]  # the value's span and, for an array, its elements


def _root_member(text: str, obj: Span, key: str, known: Mapping[int, int] | None = None) -> _Member:
    """The value of the root object's member ``key``, found from the end of the text.

    Why: walking the root object decodes every member before the one asked for, and a
    request's ``messages`` (the whole conversation, most of the body) comes before its
    ``tools``. The last occurrence of the key's literal is the member when what follows its
    value is members up to the text's final ``}`` (inside anything nested, a closing bracket
    would come before that) and none of them has the same key (the last duplicate counts).
    ``_UNSURE`` when that does not settle it (no literal: the key may be written escaped).
    Inside ``reusing(text)`` each key is looked up once. A value ``known`` spans is not decoded
    (a member found so has no element spans)."""
    memo = _memo.found if getattr(_memo, "text", None) is text else None
    if memo is not None and (key, None) in memo:
        return cast(tuple[Span | None, list[Span] | None], memo[(key, None)])
    found = _from_the_end(text, obj, key, known or {})
    if memo is not None:
        memo[(key, None)] = found
    return found


def _from_the_end(text: str, obj: Span, key: str, known: Mapping[int, int]) -> _Member:
    if text[obj[0]] != "{":
        return None, None
    needle = json.dumps(key)
    hi = obj[1]
    for _ in range(_LOOKBACK):
        at = _rfind_outside(text, needle, obj[0] + 1, hi, known) if known else text.rfind(needle, obj[0] + 1, hi)
        if at < 0:
            return _UNSURE, None
        hi = at
        if _escaped(text, at):
            continue
        i = _skip_ws(text, at + len(needle))
        if i >= obj[1] or text[i] != ":":
            continue
        start = _skip_ws(text, i + 1)
        try:
            if start in known:
                items, end = None, known[start]
            else:
                items, end = _array(text, start) if text[start] == "[" else (None, _value_end(text, start))
            if _last_members(text, end, obj[1], key, known):
                return (start, end), items
        except (ValueError, IndexError):
            continue
    return _UNSURE, None


def _rfind_outside(text: str, needle: str, lo: int, hi: int, known: Mapping[int, int]) -> int:
    """``text.rfind(needle, lo, hi)`` outside the values ``known`` spans: a member of an object
    around a value is never inside it, so the value's text need not be searched."""
    outer: list[Span] = []  # the outermost spans (a value inside another is skipped with it), in order
    for start, end in sorted(known.items()):
        if not outer or start >= outer[-1][1]:
            outer.append((start, end))
    for start, end in reversed(outer):
        if start >= hi:
            continue
        at = text.rfind(needle, max(lo, end), hi)
        if at >= 0 or start < lo:
            return at
        hi = start
    return text.rfind(needle, lo, hi)


def outside(text: str, needle: str, known: Mapping[int, int]) -> bool:
    """Whether ``needle`` is in ``text`` outside the values ``known`` spans."""
    return _rfind_outside(text, needle, 0, len(text), known) >= 0


def _escaped(text: str, quote: int) -> bool:
    """Whether the quote at ``quote`` is escaped (an odd run of backslashes before it)."""
    i = quote
    while i > 0 and text[i - 1] == "\\":
        i -= 1
    return (quote - i) % 2 == 1


def _last_members(text: str, i: int, end: int, key: str, known: Mapping[int, int]) -> bool:
    """Whether ``text[i:end]`` is ``, "k": v`` members (none keyed ``key``) and the closing ``}``
    (values ``known`` spans are skipped, not decoded)."""
    i = _skip_ws(text, i)
    while text[i] == ",":
        other, i = _DECODER.raw_decode(text, _skip_ws(text, i + 1))
        if not isinstance(other, str) or other == key:
            return False
        i = _skip_ws(text, i)
        if text[i] != ":":
            return False
        start = _skip_ws(text, i + 1)
        i = _skip_ws(text, known[start] if start in known else _value_end(text, start))
    return text[i] == "}" and i == end - 1


def replace(text: str, span: Span, new: str) -> str:
    return text[: span[0]] + new + text[span[1] :]


def replace_all(text: str, edits: Iterable[tuple[Span, str]]) -> str:
    """``text`` with each span of ``edits`` (in order, none overlapping) replaced by its new
    text, in one join: a body is copied once however many spans change, not once per span."""
    pieces, at = [], 0
    for (start, end), new in edits:
        pieces += [text[at:start], new]
        at = end
    return "".join([*pieces, text[at:]]) if pieces else text


def array_text(items: Sequence[str]) -> str:
    """Join raw element texts into an array, compactly: no new whitespace style to invent."""
    return "[" + ",".join(items) + "]"


def append_to_array(text: str, span: Span, items: Sequence[str]) -> str:
    """Append raw element texts at the end of the array at ``span``."""
    if not items:
        return text
    close = span[1] - 1
    assert text[close] == "]"
    has_items = text[_skip_ws(text, span[0] + 1)] != "]"  # the first element, not all of them decoded
    insert = ("," if has_items else "") + ",".join(items)
    return text[:close] + insert + text[close:]


def set_member(text: str, obj: Span, key: str, value: str) -> str:
    """Set ``key`` of the object at ``obj`` to raw ``value``: replaced in place, or appended."""
    found = [s for k, s in members(text, obj) if k == key]
    if found:
        return replace(text, found[-1], value)
    close = obj[1] - 1
    assert text[close] == "}"
    sep = "," if members(text, obj) else ""
    return text[:close] + sep + json.dumps(key) + ":" + value + text[close:]


# A lone surrogate: JSON text carries one only escaped (``\ud800``), UTF-8 cannot at all.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps(value: object, indent: int | None = None) -> str:
    """JSON for the values we create or re-emit (phantom tool, results, stream events):
    compact, or ``indent``-ed; non-ASCII kept as is, the form the providers send.

    A lone surrogate, which a client or upstream can only have sent escaped, goes out
    escaped again: as a raw character it cannot be encoded to UTF-8."""
    separators = (",", ":") if indent is None else None
    text = json.dumps(value, ensure_ascii=False, indent=indent, separators=separators)
    return text if text.isascii() else _SURROGATE.sub(_escape, text)
