"""Gemini ``generateContent`` / ``streamGenerateContent`` (``/v1beta``, ``/v1``, ``/v1alpha``, Vertex).

One adapter instance per request form: whether the path streams, and in which framing
(``alt=sse`` or the streamed JSON array), is not in the body, and the client must get back
the form it asked for. Function declarations are the tools; every other ``tools[]`` entry
(googleSearch, codeExecution, urlContext…) is not ours and stays as it is, where it is.
The REST API accepts camelCase and snake_case field names alike, so both are read.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Sequence

from tooldisco.core import jsonspan
from tooldisco.core.bytecache import ADMIT_WHEN_FULL, MiB, derived_size, memoize
from tooldisco.apis.base import CallThrough, Failure, Stitcher
from tooldisco.apis.streaming import as_dict, as_list
from tooldisco.core.types import RequestView, TokenUsage, Tool, ToolCall, ToolResult, Unsupported
from tooldisco.apis.base import StreamDecoder
from tooldisco.apis.gemini.messages import STAND_IN_SIGNATURE, _field, _parts, call_of, merge
from tooldisco.apis.text import History, user_text
from tooldisco.apis.defaults import AdapterDefaults
from tooldisco.apis.schema import params_of, query_schema
from tooldisco.apis.catalogs import catalog_at, load_request, named, parsed_tools, tool_spans
from tooldisco.apis.splice import append_array, replace_array, wrap_history
from tooldisco.apis.usage import tokens, usage_object
from tooldisco.apis.gemini.stream import fold_parts
from tooldisco.apis.gemini.stream import GeminiStreamDecoder
from tooldisco.apis.gemini.stream import encode
from tooldisco.apis.base import dispatcher_schema
from tooldisco.apis.gemini.stitch import error_object
from tooldisco.apis.gemini.stitch import GeminiStitcher
from tooldisco.apis.base import Dispatcher
from tooldisco.core.types import Target

_DECLARATIONS = ("functionDeclarations", "function_declarations")


def _declarations_key(entry: str) -> str | None:
    """The key holding function declarations in one ``tools[]`` entry, or None."""
    try:
        keys = [k for k, _ in jsonspan.members(entry, jsonspan.root(entry))]
    except ValueError:
        raise Unsupported("a tools entry is not an object") from None
    return next((k for k in reversed(keys) if k in _DECLARATIONS), None)


@dataclass(frozen=True)
class _Entry:
    """One ``tools[]`` entry: its text, its declarations key (None: not a function entry), that
    key's value span in the text (its last duplicate, the one parsers read) and whether the
    entry has other members."""

    raw: str
    key: str | None
    span: tuple[int, int] | None = None
    others: bool = False


def _entries_of(raws: Sequence[str]) -> list[_Entry]:
    out = []
    for raw in raws:
        key = _declarations_key(raw)
        if key is None:
            out.append(_Entry(raw, None))
            continue
        found = jsonspan.members(raw, jsonspan.root(raw))
        span = [s for k, s in found if k == key][-1]
        out.append(_Entry(raw, key, span, any(k != key for k, _ in found)))
    return out


def _build(raws: Sequence[str], values: Sequence[Any]) -> list[Tool]:
    """A catalog's tools: the declarations of every function entry, in order."""
    tools: list[Tool] = []
    for entry in _entries_of(raws):
        if entry.key is not None:
            tools += parsed_tools(entry.raw, [entry.key], parse_tool)
    return tools


def _without(entry: str, key: str) -> str:
    """The entry object minus one member (other members' bytes kept)."""
    kept = [f"{json.dumps(k)}:{entry[a:b]}" for k, (a, b) in jsonspan.members(entry, jsonspan.root(entry)) if k != key]
    return "{" + ",".join(kept) + "}"


def _calls_in(parts: Iterable[Any]) -> list[tuple[ToolCall, dict[str, Any]]]:
    """Each functionCall among ``parts`` with its call object."""
    out: list[tuple[ToolCall, dict[str, Any]]] = []
    for part in parts:
        call = _field(part, "functionCall", "function_call")
        if isinstance(call, dict):
            out.append((call_of(call, len(out)), call))
    return out


def _call_parts(message: dict[str, Any]) -> list[tuple[ToolCall, dict[str, Any]]]:
    return _calls_in(_parts(message))


def _is_response(part: Any) -> bool:
    return isinstance(_field(part, "functionResponse", "function_response"), dict)


def _responses(entries: Sequence[str]) -> list[dict[str, Any]]:
    """The functionResponse parts of history contents, in order."""
    return [p for text in entries for p in as_list(as_dict(json.loads(text)).get("parts")) if _is_response(p)]


def _step_calls(parts: Sequence[Any]) -> list[tuple[int, dict[str, Any]]]:
    """A model content's functionCalls: (part index, call object), in order."""
    return [(i, call) for i, p in enumerate(parts) if isinstance(call := _field(p, "functionCall", "function_call"), dict)]


def _unseen(calls: Sequence[tuple[int, dict[str, Any]]], hidden: Sequence[dict[str, Any]], shown: int) -> set[int]:
    """Which of a step's calls (part index, call) the client never saw: those ``hidden`` answers,
    by name, the first ones that leave enough calls for the ``shown`` ones the client has."""
    names = Counter(str(_field(p, "functionResponse", "function_response").get("name")) for p in hidden)
    out: set[int] = set()
    left = len(calls)
    for i, call in calls:
        left -= 1
        name = str(call.get("name"))
        if names[name] and left >= shown - (len(calls) - left - 1 - len(out)):
            names[name] -= 1
            out.add(i)
    return out


_SIGNATURES = frozenset({"thoughtSignature", "thought_signature"})
_INLINE = frozenset({"inlineData", "inline_data"})
_STANDARD_BASE64 = str.maketrans("-_", "+/", "=")


def _same_bytes(value: Any, inline: bool = False) -> Any:
    """``value`` with its base64 bytes fields in the standard alphabet, unpadded."""
    if isinstance(value, dict):
        return {k: v.translate(_STANDARD_BASE64)
                if isinstance(v, str) and (k in _SIGNATURES or (inline and k == "data"))
                else _same_bytes(v, k in _INLINE) for k, v in value.items()}
    if isinstance(value, list):
        return [_same_bytes(v) for v in value]
    return value


def _without_call_ids(content: Any) -> Any:
    """A content without its functionCall parts' ``id``s."""
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return content
    out = []
    for p in parts:
        key = next((k for k in ("functionCall", "function_call") if isinstance(as_dict(p).get(k), dict)), None)
        if key is not None and "id" in p[key]:
            p = {**p, key: {k: v for k, v in p[key].items() if k != "id"}}
        out.append(p)
    return {**content, "parts": out}


@memoize(16 * MiB, sizeof=derived_size, admit_when_full=ADMIT_WHEN_FULL)  # a catalog too big for it still hits
def parse_tool(raw: str) -> Tool:
    """One function declaration (``{name, description, parameters | parametersJsonSchema}``)."""
    d = json.loads(raw)
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise Unsupported("a function declaration has no name")
    desc = d.get("description")
    schema = d.get("parameters") or _field(d, "parametersJsonSchema", "parameters_json_schema")
    return Tool(d["name"], raw, desc if isinstance(desc, str) else "", params_of(schema))


def _edit_calls(message: dict[str, Any],
                edit: Callable[[ToolCall, dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any]:
    """Each candidate's functionCall parts edited (``edit``: the call object as it stays, or
    None: the part removed). ``finishReason`` is STOP for calls too, so it stays.

    Gemini 3 signs only the first functionCall of a step and rejects a replayed step whose
    first call is unsigned; a signature must come back in the very part it came in. So when a
    removed call held it, the next kept call gets Google's documented stand-in.
    """
    out = dict(message)
    candidates = []
    for candidate in as_list(message.get("candidates")):
        content = candidate.get("content") if isinstance(candidate, dict) else None
        if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
            candidates.append(candidate)
            continue
        kept: list[Any] = []
        unsigned = False  # a removed call held the step's signature
        rank = 0
        for part in content["parts"]:
            raw = _field(part, "functionCall", "function_call")
            if isinstance(raw, dict):
                new, rank = edit(call_of(raw, rank), raw), rank + 1
                if new is None:
                    unsigned = unsigned or "thoughtSignature" in part
                    continue
                if new is not raw:
                    part = {**part, "functionCall" if "functionCall" in part else "function_call": new}
                if unsigned:
                    if "thoughtSignature" not in part:
                        part = {**part, "thoughtSignature": STAND_IN_SIGNATURE}
                    unsigned = False
            kept.append(part)
        candidates.append({**candidate, "content": {**content, "parts": kept}})
    out["candidates"] = candidates
    return out


def _error_response(text: str) -> dict[str, Any]:
    """A failed call's ``response``: ``{"error": ...}``, the error object itself when the text
    already is one (the proxy's own errors are), not wrapped in another."""
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) and list(parsed) == ["error"] else {"error": text}


@memoize(4 * MiB)
def _history_calls(text: str) -> tuple[str, ...]:
    """The tools a history content calls or answers (functionCall / functionResponse names)."""
    content = json.loads(text)
    return tuple(name for p in as_list(as_dict(content).get("parts"))
                 for key in ("functionCall", "function_call", "functionResponse", "function_response")
                 if isinstance(name := as_dict(as_dict(p).get(key)).get("name"), str))


@memoize(16 * MiB)
def _wrapped_content(text: str, dispatcher: str, names: frozenset[str]) -> str:
    """A history content with its calls of ``names`` (and their responses) as the dispatcher's."""
    content = json.loads(text)
    return jsonspan.dumps({**content, "parts": [_dispatched(p, names, dispatcher) for p in content["parts"]]})


def _dispatched(part: Any, names: Collection[str], dispatcher: str) -> Any:
    """A history part calling (or answering) a deferred tool as the dispatcher's; else ``part``."""
    if not isinstance(part, dict):
        return part
    for key in ("functionCall", "function_call"):
        call = part.get(key)
        if isinstance(call, dict) and call.get("name") in names:
            inner = {"name": call["name"], "arguments": call.get("args") if call.get("args") is not None else {}}
            return {**part, key: {**call, "name": dispatcher, "args": inner}}
    for key in ("functionResponse", "function_response"):
        response = part.get(key)
        if isinstance(response, dict) and response.get("name") in names:
            return {**part, key: {**response, "name": dispatcher}}
    return part


@dataclass(frozen=True)
class GeminiAdapter(AdapterDefaults):
    stream: bool = False  # :streamGenerateContent
    sse: bool = True  # with ?alt=sse; else the stream is one JSON array
    api = "gemini"  # not a field: the same for every form
    results_member = "parts"

    def call_through(self) -> CallThrough:
        return self

    def parse_tool(self, raw: str) -> Tool:
        return parse_tool(raw)

    def _entries(self, body: str) -> list[_Entry]:
        """Each ``tools[]`` entry (worked out once per catalog for the request's own body)."""
        catalog = catalog_at(body)
        if catalog is not None:
            return catalog.derived("entries", lambda: _entries_of(catalog.raws))
        return _entries_of(tool_spans(body, ["tools"]))

    def parse(self, body: str) -> RequestView:
        data, catalog = load_request(body, self.api, _build, history="contents")
        contents = data.get("contents")
        if not isinstance(contents, list):
            raise Unsupported("no contents array")
        history = History()
        for content in contents:
            if not isinstance(content, dict):
                continue
            parts = [p for p in as_list(content.get("parts")) if isinstance(p, dict)]
            if content.get("role", "user") == "user":  # a content without a role is the user's
                # Thought parts and functionResponse parts are not the user's words.
                history.user(user_text(p.get("text") for p in parts if not p.get("thought")))
                for p in parts:
                    response = _field(p, "functionResponse", "function_response")
                    if isinstance(response, dict):  # it names the function it answers (its id is optional)
                        history.answered_names.add(str(response.get("name")))
            else:
                history.calls |= {call.id: call.name for call, _ in _calls_in(parts)}
        config = _field(_field(data, "toolConfig", "tool_config"), "functionCallingConfig", "function_calling_config")
        allowed = _field(config, "allowedFunctionNames", "allowed_function_names")
        # Mode ANY / VALIDATED: every allowed name must be declared, or the API answers 400.
        return history.view(catalog, [n for n in as_list(allowed) if isinstance(n, str)], self.stream)

    def with_tools(self, body: str, raws: Sequence[str]) -> str:
        """Declarations go, in the given order, into the first function entry (at its place);
        further function entries are folded into it (one entry is what the API documents and
        what Gemini CLI sends): a function-only entry disappears, a mixed one loses only its
        declarations. Other entries are kept byte-identical where they were."""
        out: list[str] = []
        placed = False
        for entry in self._entries(body):
            raw, key = entry.raw, entry.key
            if key is None or entry.span is None:
                out.append(raw)
                continue
            if not placed and raws:
                out.append(jsonspan.replace(raw, entry.span, jsonspan.array_text(raws)))
            elif entry.others:
                out.append(_without(raw, key))
            placed = True
        if not placed and raws:
            out.append('{"functionDeclarations":' + jsonspan.array_text(raws) + "}")
        if not out and jsonspan.find(body, ["tools"]) is None:
            return body
        return replace_array(body, ["tools"], out)

    def phantom_tool(self, name: str, description: str) -> str:
        # ``parameters`` (OpenAPI subset, upper-case types) is accepted by every API version;
        # ``parametersJsonSchema`` is newer.
        return jsonspan.dumps(
            {
                "name": name,
                "description": description,
                "parameters": query_schema(upper=True),
            }
        )

    def calls(self, message: dict[str, Any]) -> list[ToolCall]:
        return [call for call, _ in _call_parts(message)]

    def append_round(
        self, body: str, message: dict[str, Any], results: Sequence[ToolResult], add_raws: Sequence[str]
    ) -> str:
        # The model turn goes back exactly as it came: Gemini 3 rejects function-call parts
        # that lost their thoughtSignature, and thought parts carry the reasoning.
        content = dict(message["candidates"][0]["content"])
        content["role"] = "model"
        calls = {call.id: raw for call, raw in _call_parts(message)}
        parts = []
        for r in results:
            response: dict[str, Any] = {"name": r.call.name}
            given = calls.get(r.call.id, {}).get("id")
            if given:
                response["id"] = given  # echoed only when the model gave the call an id
            # The API reads "output" as the function's output and "error" as its failure.
            response["response"] = _error_response(r.content) if r.is_error else {"output": r.content}
            parts.append({"functionResponse": response})
        turns = [jsonspan.dumps(content), jsonspan.dumps({"role": "user", "parts": parts})]
        body = append_array(body, ["contents"], turns)
        return self._add_declarations(body, add_raws) if add_raws else body

    def _add_declarations(self, body: str, raws: Sequence[str]) -> str:
        for i, entry in enumerate(self._entries(body)):
            span = jsonspan.find(body, ["tools", i, entry.key]) if entry.key is not None else None
            if span is not None:
                return jsonspan.append_to_array(body, span, raws)
        return append_array(body, ["tools"], ['{"functionDeclarations":' + jsonspan.array_text(raws) + "}"])

    def strip(self, message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
        """Phantom functionCall parts leave; ``finishReason`` is STOP for calls too, so it stays."""
        hidden = set(names)
        return _edit_calls(message, lambda call, raw: None if named(call.name, hidden) else raw)

    def unwrap(self, message: dict[str, Any], resolve: Callable[[ToolCall], Target | str | None]) -> dict[str, Any]:
        def real(call: ToolCall, raw: dict[str, Any]) -> dict[str, Any] | None:
            target = resolve(call)
            if target is None:
                return raw
            return None if isinstance(target, str) else {**raw, "name": target.name, "args": target.arguments}

        return _edit_calls(message, real)

    def wrap(self, body: str, names: Collection[str], dispatcher: str) -> str:
        return wrap_history(body, ["contents"], names, dispatcher, '"function', _history_calls, _wrapped_content)

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return merge(rounds)

    def usage(self, message: dict[str, Any]) -> TokenUsage | None:
        """``usageMetadata``: ``promptTokenCount`` includes ``cachedContentTokenCount``; the
        prompts of built-in tools (``toolUsePromptTokenCount``) and thinking
        (``thoughtsTokenCount``) are counted apart and billed as input and output."""
        counts = usage_object(message, "usageMetadata")
        if counts is None:
            return None
        cached = tokens(counts.get("cachedContentTokenCount"))
        prompt = max(tokens(counts.get("promptTokenCount")) - cached, 0) + tokens(counts.get("toolUsePromptTokenCount"))
        output = tokens(counts.get("candidatesTokenCount")) + tokens(counts.get("thoughtsTokenCount"))
        return TokenUsage(prompt, cached, 0, output)

    def history_path(self, body: str) -> tuple[str, ...] | None:
        return ("contents",)

    def produced(self, entry: Any) -> bool:
        return isinstance(entry, dict) and entry.get("role") == "model"

    def shown(self, message: dict[str, Any]) -> list[Any]:
        candidates = as_list(message.get("candidates"))
        return [as_dict(candidates[0]).get("content") if candidates else None]

    def comparable(self, entries: list[Any]) -> list[Any]:
        """Bytes fields (``thoughtSignature``, inline data) in one base64 alphabet: google-genai
        decodes them and sends them back URL-safe; the API reads either. No functionCall ids: a
        client gives a call the API left without one an id of its own (Gemini CLI does; ``adopt``
        carries it into the restored turn). A run of model contents as one, its text parts folded
        as a stream is assembled (``apis.gemini.stream.fold_parts``): a streamed answer comes in one
        part (or one content) per chunk, which a client may keep as they came or join."""
        out: list[Any] = []
        for entry in map(_without_call_ids, map(_same_bytes, entries)):
            parts = entry.get("parts") if isinstance(entry, dict) else None
            last = out[-1] if out else None
            if (isinstance(parts, list) and isinstance(last, dict) and entry.get("role") == last.get("role")
                    and set(entry) == set(last) == {"role", "parts"}):
                out[-1] = {**last, "parts": last["parts"] + parts}
            else:
                out.append({**entry, "parts": list(parts)} if isinstance(parts, list) else entry)
        return [{**e, "parts": fold_parts(e["parts"])} if isinstance(e, dict) and isinstance(e.get("parts"), list)
                else e for e in out]

    def adopt(self, restored: list[str], client: Sequence[str], hidden: Sequence[str] = ()) -> list[str]:
        """The client's functionCall ids, call by call, on the restored turn's last model content
        where it has none: the client's functionResponses name them. Calls the client never saw
        (a mixed turn's, answered by ``hidden``) get none: the ids go to the calls it was shown."""
        given = [call.get("id") for text in client for _, call in _step_calls(as_list(as_dict(json.loads(text)).get("parts")))]
        if not any(given) or not restored:
            return restored
        last = json.loads(restored[-1])
        parts = as_list(as_dict(last).get("parts"))
        calls = _step_calls(parts)
        unseen = _unseen(calls, _responses(hidden), len(given))
        ids = iter(given)
        out = list(parts)
        for i, call in calls:
            if i in unseen:
                continue
            given_id = next(ids, None)
            if given_id is not None and not call.get("id"):
                key = "functionCall" if "functionCall" in parts[i] else "function_call"
                out[i] = {**parts[i], key: {**call, "id": given_id}}
        return [*restored[:-1], jsonspan.dumps({**last, "parts": out})]

    def with_hidden_results(self, made: Sequence[str], hidden: Sequence[str],
                            following: Sequence[str]) -> list[str] | None:
        """The client's functionResponses answer the calls it was shown; upstream they answer
        the step as it was made, in its order and by its calls' names (Gemini 3 refuses a
        response naming another function than the call: a kept tool the model called through
        the dispatcher was shown as itself). The hidden calls' responses go where their calls
        are."""
        unchanged = None if hidden else list(following)
        if not made or not following:
            return unchanged
        entry = json.loads(following[0])
        parts = as_list(as_dict(entry).get("parts"))
        theirs = [p for p in parts if _is_response(p)]
        ours = _responses(hidden)
        calls = _step_calls(as_list(as_dict(json.loads(made[-1])).get("parts")))
        if not theirs or len(calls) != len(theirs) + len(ours):
            return unchanged
        unseen = _unseen(calls, ours, len(theirs))
        hidden_parts, client_parts, answers = iter(ours), iter(theirs), []
        for i, call in calls:
            if i in unseen:
                answers.append(next(hidden_parts))
                continue
            part = next(client_parts)
            key = "functionResponse" if "functionResponse" in part else "function_response"
            if part[key].get("name") != call.get("name"):
                part = {**part, key: {**part[key], "name": call.get("name")}}
            answers.append(part)
        if answers == theirs:
            return unchanged
        rest = [p for p in parts if not _is_response(p)]
        return [jsonspan.dumps({**entry, "parts": answers + rest}), *following[1:]]

    def decoder(self) -> StreamDecoder:
        return GeminiStreamDecoder()

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        return encode(message, sse=self.sse)

    def dispatcher_tool(self, name: str, description: str) -> str:
        # JSON Schema: the OpenAPI subset of ``parameters`` has no free-form object for ``arguments``.
        return jsonspan.dumps({"name": name, "description": description, "parametersJsonSchema": dispatcher_schema()})

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        """Google's error body: ``{"error": {"code", "message", "status"}}``."""
        body = {"error": error_object(failure)}
        return [("content-type", "application/json")], jsonspan.dumps(body).encode("utf-8")

    def stitcher(self, phantom: str, body: str, dispatch: Dispatcher | None = None) -> Stitcher:
        return GeminiStitcher(phantom, sse=self.sse, dispatch=dispatch)
