"""Edits of a request body's text: arrays set, appended to or edited element by element,
tools marked deferred, history entries rewritten for call-through, every other byte kept.
Apart: these write bodies; loading them (``apis.catalogs``) only reads."""

from __future__ import annotations

import re
from typing import Callable, Collection, Sequence

from tooldisco.core import jsonspan
from tooldisco.core.types import ToolCatalog, Unsupported


def replace_array(body: str, path: Sequence[str], raws: Sequence[str]) -> str:
    """Set the array at ``path`` (every parent must exist but the last key may be absent)."""
    return replace_array_text(body, path, jsonspan.array_text(raws))


def replace_array_text(body: str, path: Sequence[str], array: str) -> str:
    """``replace_array`` with the array's text already made."""
    span = jsonspan.find(body, path)
    if span is not None:
        return jsonspan.replace(body, span, array)
    parent = jsonspan.find(body, path[:-1])
    if parent is None:
        raise Unsupported(f"no {'.'.join(path[:-1])} to put tools in")
    return jsonspan.set_member(body, parent, path[-1], array)


def with_marked(body: str, catalog: ToolCatalog | None, deferred: Sequence[str], search: str,
                mark: Callable[[frozenset[str]], list[str]]) -> str:
    """``body`` with its tools as native deferral forwards them: ``mark(hidden)``, the elements
    with the deferred ones marked, then ``search``. A catalog found by its text keeps the marked
    elements for the next request that defers the same tools (``ToolCatalog.marked``)."""
    hidden = frozenset(deferred)
    if catalog is None:
        return replace_array(body, ["tools"], [*mark(hidden), search])
    joined = catalog.marked(hidden, lambda: ",".join(mark(hidden)))
    return replace_array_text(body, ["tools"], "[" + joined + ("," if joined else "") + search + "]")


def append_array(body: str, path: Sequence[str], raws: Sequence[str]) -> str:
    span = jsonspan.find(body, path)
    if span is None:
        return replace_array(body, path, raws)
    return jsonspan.append_to_array(body, span, raws)


def edit_elements(body: str, path: Sequence[str], edit: Callable[[str], str | None]) -> str:
    """``body`` with each element of the array at ``path`` that ``edit`` changes (its new text;
    None keeps it) replaced; every other byte kept."""
    span = jsonspan.find(body, path)
    if span is None or body[span[0]] != "[":
        return body
    edits = (((a, b), edit(body[a:b])) for a, b in jsonspan.elements(body, span))
    return jsonspan.replace_all(body, ((element, new) for element, new in edits if new is not None))


def wrap_history(body: str, path: Sequence[str], names: Collection[str], dispatcher: str, marker: str,
                 called: Callable[[str], tuple[str, ...]], rewrite: Callable[[str, str, frozenset[str]], str]) -> str:
    """Call-through's request side (``CallThrough.wrap``), shared: each history entry
    that calls (``called``: memoised per entry text) a tool in ``names`` rewritten by
    ``rewrite(text, dispatcher, those names)`` (memoised too: every request carries the whole
    history again); an entry without ``marker`` in its text is skipped unread."""
    def wrapped(text: str) -> str | None:
        if marker not in text:
            return None
        hit = frozenset(n for n in called(text) if n in names)
        return rewrite(text, dispatcher, hit) if hit else None

    return edit_elements(body, path, wrapped)


_MARK = '"defer_loading":true'


def deferred_text(raw: str) -> str:
    """A tool definition text with ``"defer_loading": true`` set, every other byte kept.

    A definition that does not mention ``defer_loading`` gets the member appended before its
    closing brace (what ``jsonspan.set_member`` writes), without decoding it: native deferral
    marks most of a catalog on every request. (A definition's text, as ``load_request`` cuts it,
    starts and ends with its braces.)"""
    if raw[:1] == "{" and raw[-1:] == "}" and '"defer_loading"' not in raw:
        return raw[:-1] + ("" if _EMPTY_OBJECT.match(raw) else ",") + _MARK + "}"
    return jsonspan.set_member(raw, jsonspan.root(raw), "defer_loading", "true")


_EMPTY_OBJECT = re.compile(r"\{[ \t\r\n]*\}")
