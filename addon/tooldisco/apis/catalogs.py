"""Request loading and the process's tool catalogs: a body decoded once, its tools found by
their text in ``CATALOGS`` (``core.catalog``) or parsed and kept, and the tool definitions'
texts read back from the same request. Apart: the one place that owns the catalog cache and
the stand-ins that prove a member the root's."""

from __future__ import annotations

import json
import secrets
from typing import Any, Callable, Collection, Iterable, Sequence

from tooldisco.core import jsonspan
from tooldisco.core.bytecache import MiB, memoize
from tooldisco.core.catalog import CatalogCache
from tooldisco.core.types import Tool, ToolCatalog, Unsupported


def load_object(body: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as e:
        raise Unsupported(f"body is not JSON: {e}") from None
    except RecursionError:
        raise Unsupported("body is nested deeper than the JSON parser goes") from None
    if not isinstance(data, dict):
        raise Unsupported("body is not a JSON object")
    return data


# The root member's value stands in for its tools while the rest of the body is decoded: a
# string no client can send (random per process), so finding it there proves the tools value
# spliced out was the root object's member, the one a JSON parser would have read.
_STAND_IN = "\x00tooldisco-catalog-" + secrets.token_hex(12)
_STAND_IN_TEXT = json.dumps(_STAND_IN)
_HISTORY_STAND_IN = "\x00tooldisco-history-" + secrets.token_hex(12)
_HISTORY_STAND_IN_TEXT = json.dumps(_HISTORY_STAND_IN)

#: Tool catalogs of this process, by their text (``core.catalog``); sized by ``set_catalog_budget``.
CATALOGS = CatalogCache(128 * MiB)

#: Builds a catalog's tools from its elements' texts and decoded values (an adapter's parse);
#: raises ``Unsupported`` for definitions it cannot use.
Build = Callable[[Sequence[str], Sequence[Any]], Sequence[Tool]]


def set_catalog_budget(max_bytes: int) -> None:
    """Bound the process's catalog cache (``planning.catalog_cache_mb``)."""
    if max_bytes != CATALOGS.max_bytes:
        CATALOGS.max_bytes = max_bytes
        CATALOGS.clear()


def load_request(body: str, api: str, build: Build, key: str = "tools", history: str | None = None,
                 inner: tuple[str, ...] = ()) -> tuple[dict[str, Any], ToolCatalog]:
    """The body decoded, without its root member ``key`` (popped), and the catalog that member
    holds (with its ``error`` when its definitions are unusable: ``History.view`` raises it):
    each byte of the body decoded once, a catalog seen before not decoded at all.

    The member's value is located from the end of the text (``jsonspan.member_starts``); a
    cached catalog whose text the body carries there is that value, else the array is decoded
    element by element (values and spans together) and its catalog built and kept. The rest of
    the body is decoded with a stand-in in the value's place, and the stand-in found as the
    root's ``key`` proves the value was the root member's. Anything else (no such member, one
    written with escapes, not an array) takes the plain way, with the same outcome.

    ``history``: the root member holding the conversation (an array), decoded element by element
    in the same pass, so that what is later located in it (``jsonspan.find_elements``: the
    restored rounds) is not decoded again; proven the root's by a stand-in of its own.

    ``inner``: the tools are the array at this path inside the root member ``key``, an object
    (Bedrock Converse's ``toolConfig.tools``): the whole member is the catalog's text, and the
    body's ``key`` is read as that object without its tools (shared: never to be changed)."""
    scope = (api, key, inner)
    path = (key, *inner)
    for start in jsonspan.member_starts(body, key):
        catalog = CATALOGS.find(scope, body, start)
        values: list[Any] | None = None
        try:
            if catalog is not None:
                end = start + len(catalog.text)
            elif inner and body[start] == "{":
                made = _nested(body, start, inner)
                if made is None:
                    continue
                values, spans, end, member, at = made
            elif not inner and body[start] == "[":
                values, spans, end = jsonspan.decode_array(body, start)
            else:
                continue
            conversation = _history(body, history, (start, end)) if history else None
            data = json.loads(_spliced(body, (start, end), conversation))
        except (ValueError, RecursionError, IndexError, KeyError, TypeError):  # IndexError: the text ends inside
            break  # the array; KeyError, TypeError: a nested member not as located. The plain way says why.
        if not isinstance(data, dict) or data.get(key) != _STAND_IN:
            continue  # a nested object's member: an earlier literal may be the root's
        del data[key]
        if catalog is None:
            raws = tuple(body[a:b] for a, b in spans)
            catalog = _built(raws, values or [], build, body[start:end])
            if inner:
                catalog.member, catalog.within = member, at
            CATALOGS.add(scope, catalog)
        if inner:
            data[key] = catalog.member
            if catalog.within is not None:
                jsonspan.remember(body, ("path", path), (start + catalog.within[0], start + catalog.within[1]))
        if conversation is not None and history is not None:
            if data.get(history) == _HISTORY_STAND_IN:
                data[history] = conversation[1]
                jsonspan.remember(body, (history, None), (conversation[0], conversation[2]))
                jsonspan.remember(body, ("values", history), conversation[1])  # each entry's value, by span
            else:  # a nested member's: the conversation as a parser reads it (a rare second decode)
                data = json.loads(body[:start] + _STAND_IN_TEXT + body[end:])
                del data[key]
                if inner:
                    data[key] = catalog.member
        jsonspan.known_member(body, key, (start, end))
        jsonspan.remember(body, ("catalog", path), catalog)
        jsonspan.remember(body, "decoded", data)
        return data, catalog
    data = load_object(body)
    jsonspan.remember(body, "decoded", data)
    if inner:  # as the tools at the path are found there, whatever the member holds
        raws = tuple(tool_spans(body, path))
        return data, _built(raws, [json.loads(r) for r in raws], build)
    if key not in data:
        return data, ToolCatalog(())
    value = data.pop(key)
    if not isinstance(value, list):
        raise Unsupported(f"{key} is not an array")
    return data, _built(tuple(tool_spans(body, [key])), value, build)


def catalog_spans(body: str, api: str, key: str = "tools") -> dict[int, int]:
    """Where ``body`` carries, as a member ``key``'s value, a tool catalog of ``api`` the cache
    holds (parsed when the request was planned): its end by its start, so that finding a member
    near it (``jsonspan.find``'s ``known``) does not decode the catalog again. Unverified (a
    nested member's value may be such a text too): a span to skip, not the member."""
    spans = {}
    for start in jsonspan.member_starts(body, key):
        catalog = CATALOGS.find((api, key, ()), body, start)
        if catalog is not None:
            spans[start] = start + len(catalog.text)
    return spans


def _nested(body: str, start: int, inner: tuple[str, ...]
            ) -> tuple[list[Any], list[tuple[int, int]], int, Any, tuple[int, int] | None] | None:
    """The object member at ``start`` holding the tools at ``inner``: their values and spans (in
    the body), where the member ends, the member without its tools, and where the tools' array
    is within the member's text (None: it has none). None when the tools are not an array."""
    member, end = jsonspan.decode_value(body, start)
    text = body[start:end]
    at = jsonspan.find(text, inner)
    if at is None:
        return [], [], end, member, None
    if text[at[0]] != "[":
        return None
    spans = [(start + a, start + b) for a, b in jsonspan.elements(text, at)]
    holder: Any = member
    for step in inner[:-1]:
        holder = holder[step]
    values = holder.pop(inner[-1])
    return values, spans, end, member, at


_History = tuple[tuple[int, int], list[Any], list[tuple[int, int]]]  # span, element values, element spans


def _history(body: str, name: str, tools: tuple[int, int]) -> _History | None:
    """The array a root member ``name`` may hold, outside the tools' span, found from the end
    and decoded element by element (unverified: ``load_request`` proves it the root's)."""
    for start in jsonspan.member_starts(body, name):
        if tools[0] <= start < tools[1] or body[start] != "[":
            continue  # inside the tools (a schema's property), or not an array
        values, spans, end = jsonspan.decode_array(body, start)
        return (start, end), values, spans
    return None


def _spliced(body: str, tools: tuple[int, int], conversation: _History | None) -> str:
    """``body`` with stand-ins in place of the tools and the conversation."""
    cuts = [(tools, _STAND_IN_TEXT)] + ([(conversation[0], _HISTORY_STAND_IN_TEXT)] if conversation else [])
    out, at = [], 0
    for (a, b), text in sorted(cuts):
        out += [body[at:a], text]
        at = b
    return "".join(out) + body[at:]


def catalog_at(body: str, path: Sequence[str | int] = ("tools",)) -> ToolCatalog | None:
    """The catalog ``load_request`` found at ``path`` in this very text (inside ``jsonspan.reusing``)."""
    found = jsonspan.recalled(body, ("catalog", tuple(path)))
    return found if isinstance(found, ToolCatalog) else None


def decoded(body: str) -> dict[str, Any]:
    """The body's root object, for reading members other than its tools: the one
    ``load_request`` decoded for this very text (inside ``jsonspan.reusing``), else decoded now."""
    found = jsonspan.recalled(body, "decoded")
    return found if isinstance(found, dict) else load_object(body)


def _built(raws: tuple[str, ...], values: Sequence[Any], build: Build, text: str = "") -> ToolCatalog:
    """The catalog of ``raws``; definitions the adapter refuses make one that says why."""
    try:
        tools = tuple(build(raws, values))
        check_unique(tools)
    except Unsupported as e:
        return ToolCatalog((), raws, text, error=str(e))
    return ToolCatalog(tools, raws, text)


def each_tool(parse: Callable[[str, Any], Tool]) -> Build:
    """A ``Build`` for APIs whose every element is one tool."""
    return lambda raws, values: tuple(map(parse, raws, values))


def tool_spans(body: str, path: Sequence[str | int]) -> list[str]:
    """Raw texts of the array elements at ``path`` (empty when absent)."""
    if isinstance(found := catalog_at(body, path), ToolCatalog):
        return list(found.raws)  # this request's catalog (``load_request``): nothing decoded again
    return list(_tool_spans(body, tuple(path)))


@memoize(16 * MiB, key=lambda body, path: (id(body), len(body), hash(body), path))
def _tool_spans(body: str, path: tuple[str | int, ...]) -> tuple[str, ...]:
    """Cached: parse, rewrite and breakpoint handling all look at the same request's tools.
    The key holds no body (bodies run to tens of MB): the same string object, its length
    and its hash; only the spans are kept, within a byte budget."""
    try:
        items = jsonspan.find_elements(body, path)
    except ValueError:
        raise Unsupported(f"{'.'.join(map(str, path))} is not an array") from None
    return () if items is None else tuple(body[a:b] for a, b in items)


def parsed_tools(body: str, path: Sequence[str | int], parse_tool: Callable[[str], Tool]) -> tuple[Tool, ...]:
    """The tools at ``path``; ``parse_tool`` is cached by definition text (agents resend the
    same definitions every turn)."""
    return tuple(parse_tool(raw) for raw in tool_spans(body, path))


def named(value: Any, names: Collection[str]) -> bool:
    """Whether a call's ``name`` is one of ``names``: one of another JSON type never is (and
    may not even hash)."""
    return isinstance(value, str) and value in names


def check_unique(tools: Iterable[Tool]) -> None:
    seen: set[str] = set()
    for t in tools:
        if not t.name:
            raise Unsupported("a tool has no name")
        if t.name in seen:
            raise Unsupported(f"duplicate tool name {t.name!r}")
        seen.add(t.name)
