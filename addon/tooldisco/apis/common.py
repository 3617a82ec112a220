"""Helpers the adapters share: text extraction, schema reading, usage sums and counts."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Sequence, cast

from tooldisco.core import jsonspan
from tooldisco.core.bytecache import MiB, memoize
from tooldisco.core.catalog import CatalogCache
from tooldisco.apis import streaming as streams
from tooldisco.apis.base import OPENAI_ERROR_TYPES, CallThrough, Failure, NativeDeferral, error_kind
from tooldisco.core.types import RequestView, TokenUsage, Tool, ToolCatalog, Unsupported

_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


def clean_text(text: str) -> str:
    """User text minus injected ``<system-reminder>`` blocks (agents add them to user turns)."""
    return _REMINDER.sub(" ", text).strip()


_OPEN_TAG = re.compile(r"<([A-Za-z_][\w.:-]*)(?:\s[^>]*)?>")
# Codex wraps the project's AGENTS.md in a user message that starts with this heading.
_AGENTS_MD = "# AGENTS.md instructions for "


def _blocks_only(text: str) -> bool:
    """True when ``text`` is nothing but ``<tag>…</tag>`` blocks (scanned, no regex backtracking)."""
    rest = text.strip()
    if not rest:
        return False
    while rest:
        opening = _OPEN_TAG.match(rest)
        if opening is None:
            return False
        closing = f"</{opening.group(1)}>"
        end = rest.find(closing, opening.end())
        if end < 0:
            return False
        rest = rest[end + len(closing) :].lstrip()
    return True


def injected(text: str) -> bool:
    """Context an agent injects as a user turn, not the user's words: Codex sends
    ``<environment_context>``, ``<user_instructions>``, ``<recommended_plugins>`` blocks and the
    ``# AGENTS.md instructions for …`` wrapper as user messages."""
    return text.startswith(_AGENTS_MD) or _blocks_only(text)


def user_text(texts: Iterable[Any]) -> str:
    """The user's own words among a message's text parts: reminders removed, injected parts skipped."""
    kept = [t for t in (clean_text(p) for p in texts if isinstance(p, str)) if t and not injected(t)]
    return "\n".join(kept)


@dataclass
class History:
    """What a conversation says, gathered while an adapter walks its messages: the user's
    last and first real text, which calls were made, and which were answered."""

    query: str = ""
    first: str = ""
    calls: dict[str, str] = field(default_factory=dict)  # call id -> tool name
    answered: set[str] = field(default_factory=set)  # call ids with a result
    answered_names: set[str] = field(default_factory=set)  # for APIs whose results name the tool

    def user(self, text: str) -> None:
        if text:
            self.query = text
            self.first = self.first or text

    def view(
        self, tools: Sequence[Tool] | ToolCatalog, forced: Iterable[str], stream: bool, hint: Any = None,
        continues: Any = None, model: Any = None,
    ) -> RequestView:
        used = {self.calls[i] for i in self.answered if i in self.calls}
        used |= {n for n in self.calls.values() if n in self.answered_names}
        catalog = tools if isinstance(tools, ToolCatalog) else None
        if catalog is not None and catalog.error is not None:
            raise Unsupported(catalog.error)
        return RequestView(
            tools=catalog.tools if catalog is not None else tuple(cast(Sequence[Tool], tools)),
            catalog=catalog,
            query=self.query,
            first_user=self.first,
            used=frozenset(used),
            forced=frozenset(forced),
            stream=stream,
            session_hint=hint if isinstance(hint, str) and hint else None,
            continues=continues if isinstance(continues, str) and continues else None,
            model=model if isinstance(model, str) else "",
        )


class AdapterDefaults:
    """What most APIs do: no conversation kept on the server, usage only in the body."""

    echoes = False

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        """Headers and JSON body of an HTTP error answer in the API's own format, so that the
        client's SDK raises the error it retries (each API overrides it with its shape)."""
        body = {"error": {"type": "api_error", "code": failure.status, "message": failure.text()}}
        return [("content-type", "application/json")], jsonspan.dumps(body).encode("utf-8")

    def usage_headers(self, message: dict[str, Any]) -> dict[str, str]:
        return {}

    def native_deferral(self) -> NativeDeferral | None:
        """None: no native deferral (``apis.base.NativeDeferral``); the APIs with it return themselves."""
        return None

    def call_through(self) -> CallThrough | None:
        """None: no call-through (``apis.base.CallThrough``); the APIs with it return themselves."""
        return None

    def response_id(self, message: dict[str, Any]) -> str | None:
        return None

    def owed_results(self, body: str, results: Sequence[Any]) -> list[str]:
        return []

    def with_owed_results(self, body: str, items: Sequence[str]) -> str:
        return body

    def restore_echo(self, response: str, body: str) -> str:
        return response

    def chain_from(self, body: str, response_id: str) -> str:
        return body

    def history_path(self, body: str) -> tuple[str, ...] | None:
        return ("messages",)

    def produced(self, entry: Any) -> bool:
        return isinstance(entry, dict) and entry.get("role") == "assistant"

    def comparable(self, entries: list[Any]) -> list[Any]:
        return entries

    #: Where one model turn's results go: inside one entry, as the items of this member
    #: (Anthropic, Bedrock: ``content``; Gemini: ``parts``), or None: an entry each (Chat's
    #: ``tool`` messages, Responses' ``function_call_output`` items).
    results_member: str | None = None

    def adopt(self, restored: list[str], client: Sequence[str], hidden: Sequence[str] = ()) -> list[str]:
        return restored

    def with_hidden_results(self, made: Sequence[str], hidden: Sequence[str],
                            following: Sequence[str]) -> list[str] | None:
        """The client's entries after a restored turn (``made``: its real entries), answering
        that turn as it was made: the results of the calls the client never saw (a mixed
        turn's ``hidden``, entries as ``append_round`` made them) put first. None when there
        are such results and no results entry follows, or not in the shape this API answers
        calls with: the turn then passes as the client sent it. Results are matched by call id
        here, so nothing else changes."""
        if not hidden:
            return list(following)
        if not following:
            return None
        key = self.results_member
        if key is None:
            return [*hidden, *following]
        ours, theirs = jsonspan.find(hidden[0], [key]), jsonspan.find(following[0], [key])
        if ours is None or theirs is None or hidden[0][ours[0]] != "[" or following[0][theirs[0]] != "[":
            return None
        items = [hidden[0][a:b] for a, b in jsonspan.elements(hidden[0], ours)]
        inner = following[0][theirs[0] + 1 : theirs[1] - 1].strip()
        merged = "[" + ",".join(items) + ("," + inner if inner else "") + "]"
        return [jsonspan.replace(following[0], theirs, merged), *following[1:]]


def query_schema(*, upper: bool = False, strict: bool = False) -> dict[str, Any]:
    """The phantom tool's one parameter. Gemini's OpenAPI subset spells types upper-case;
    ``strict`` closes the object so OpenAI's strict mode accepts it either way."""
    kind, text = ("OBJECT", "STRING") if upper else ("object", "string")
    schema: dict[str, Any] = {
        "type": kind,
        "properties": {"query": {"type": text, "description": "What to search for."}},
        "required": ["query"],
    }
    if strict:
        schema["additionalProperties"] = False
    return schema


def params_of(schema: Any) -> tuple[tuple[str, str], ...]:
    """Top-level parameter names and descriptions of a JSON schema."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return ()
    out = []
    for name, spec in props.items():
        desc = spec.get("description") if isinstance(spec, dict) else None
        out.append((str(name), desc if isinstance(desc, str) else ""))
    return tuple(out)


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


def tokens(value: Any) -> int:
    """One count of an upstream's usage object as a non-negative int. Why lenient: usage is
    reported, never trusted to be well formed; a string, a bool, a negative or fractional
    number counts as 0 rather than failing the turn's accounting."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    return 0


def usage_object(message: Any, key: str = "usage") -> dict[str, Any] | None:
    """``message[key]`` when it is an object: None means the answer reports no usage."""
    value = message.get(key) if isinstance(message, dict) else None
    return value if isinstance(value, dict) else None


def prompt_split(prompt: int, output: int, total: Any, cache_read: int, cache_write: int = 0,
                 reasoning: int = 0) -> TokenUsage:
    """An OpenAI-style count (a prompt that includes its cached part) in the four billed parts.
    Reasoning is part of ``output`` at OpenAI; xAI reports it apart (``total_tokens`` is then
    prompt + completion + reasoning), so it is added back exactly when the total says so."""
    if reasoning and tokens(total) == prompt + output + reasoning:
        output += reasoning
    return TokenUsage(max(prompt - cache_read - cache_write, 0), cache_read, cache_write, output)


def sum_usage(usages: Iterable[Any]) -> Any:
    """Add integer counts key by key (nested too); other values: the last one wins."""
    total: Any = None
    for u in usages:
        if u is None:
            continue
        if total is None:
            total = streams.copy_json(u)  # a value of the upstream's JSON: a tree to copy
            continue
        total = _add(total, u)
    return total


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _add(a[k], v) if k in a else v
        return out
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a + b
    return b if b is not None else a


def parse_arguments(text: Any) -> Any:
    """Tool call arguments arrive as JSON text in some APIs; keep the text if it is not JSON."""
    return streams.parse_arguments(text) if isinstance(text, str) else text


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


def forced_names(choice: Any) -> set[str]:
    """Tools named by tool_choice (single function or an allowed_tools list)."""
    if not isinstance(choice, dict):
        return set()
    if choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else choice.get("name")
        return {name} if isinstance(name, str) else set()
    if choice.get("type") == "allowed_tools":
        spec = choice.get("allowed_tools", choice)
        tools = spec.get("tools") if isinstance(spec, dict) else None
        out = set()
        for t in streams.as_list(tools):
            fn = t.get("function") if isinstance(t, dict) else None
            name = fn.get("name") if isinstance(fn, dict) else (t.get("name") if isinstance(t, dict) else None)
            if isinstance(name, str):
                out.add(name)
        return out
    return set()


def openai_error_object(failure: Failure) -> dict[str, Any]:
    """The OpenAI error object for a failure: the upstream's own where its body has one."""
    kind = OPENAI_ERROR_TYPES[error_kind(failure.status)]
    base = {"message": failure.text(), "type": kind, "param": None, "code": kind}
    return {**base, **(failure.upstream_error() or {}), "message": failure.text()}
