"""OpenAI Responses (``POST /v1/responses``; Azure ``/openai/responses``, ``/openai/v1/responses``).

Codex CLI speaks only this API. Tools are flat (``{type:"function", name, parameters…}``) or
grouped in a ``namespace`` (Codex sends each MCP server as one): each function of a namespace is
a tool of its own, named ``namespace.name`` as the model calls it, whose definition text is its
namespace around that one function; ``with_tools`` puts a namespace's functions back into one
entry. Everything else (tool_search, hosted and client built-ins) passes through pinned. A
re-forward continues the conversation in one of three ways, depending on where the conversation lives (see ``append_round``).
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator, Sequence

from tooldisco.core import jsonspan
from tooldisco.core.bytecache import ADMIT_WHEN_FULL, MiB, derived_size, memoize
from tooldisco.apis.base import NativeDeferral, Failure, Stitcher
from tooldisco.apis.streaming import as_dict, as_list
from tooldisco.core.types import RequestView, TokenUsage, Tool, ToolCall, ToolResult, Unsupported
from tooldisco.apis.base import StreamDecoder
from tooldisco.apis.text import History, user_text
from tooldisco.apis.defaults import AdapterDefaults
from tooldisco.apis.schema import params_of, query_schema
from tooldisco.apis.catalogs import catalog_at, decoded, load_object, load_request, tool_spans
from tooldisco.apis.splice import deferred_text, append_array, replace_array, with_marked
from tooldisco.apis.usage import prompt_split, tokens, usage_object
from tooldisco.apis.openai_shared import forced_names, openai_error_object, parse_arguments
from tooldisco.apis.openai_responses.messages import (
    ECHOED,
    TOOL_SEARCH,
    _client_search,
    _qualified,
    echoed_fields,
    merge,
    strip,
)
from tooldisco.apis.openai_responses.stream import ResponsesStreamDecoder
from tooldisco.apis.openai_responses.stream import encode
from tooldisco.apis.openai_responses.stitch import ResponsesStitcher

_CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}


def _message_texts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "input_text"]


@memoize(16 * MiB)
def _namespace(raw: str) -> tuple[str, tuple[str, ...]] | None:
    """A namespace tool's name and its tools' texts (byte-exact), or None: another kind of tool,
    or a namespace we cannot read (it then passes whole, pinned)."""
    if '"namespace"' not in raw:
        return None
    d = json.loads(raw)
    if not (isinstance(d, dict) and d.get("type") == "namespace" and isinstance(d.get("name"), str)):
        return None
    span = jsonspan.find(raw, ["tools"])
    inner = d.get("tools")
    if span is None or not isinstance(inner, list) or not inner:
        return None
    if not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in inner):
        return None
    return d["name"], tuple(raw[a:b] for a, b in jsonspan.elements(raw, span))


def _split(tool: Tool) -> list[Tool]:
    """A namespace as one tool per function (its namespace around that function), so each can be
    deferred, found and called on its own; any other tool as it is."""
    parts = _namespace(tool.raw)
    if parts is None or len(parts[1]) == 1:
        return [tool]
    return [parse_tool(replace_array(tool.raw, ["tools"], [fn])) for fn in parts[1]]


def _merged(raws: Sequence[str]) -> list[str]:
    """Definition texts with the functions of one namespace back in one entry, where its first
    stands, in the order given. A namespace none of whose functions is here is simply absent."""
    out: list[str] = []
    at: dict[str, int] = {}
    functions: dict[str, list[str]] = {}
    for raw in raws:
        parts = _namespace(raw)
        if parts is None:
            out.append(raw)
        elif parts[0] in at:
            functions[parts[0]] += [fn for fn in parts[1] if fn not in functions[parts[0]]]
        else:
            at[parts[0]] = len(out)
            functions[parts[0]] = list(parts[1])
            out.append(raw)
    for name, i in at.items():
        if len(functions[name]) != len(_namespace(out[i])[1]):  # type: ignore[index]
            out[i] = replace_array(out[i], ["tools"], functions[name])
    return out


def _output_item(result: ToolResult) -> str:
    """The input item answering one call: a ``tool_search_output`` whose tools are the loaded
    definitions (their client bytes) for a native search, else a ``function_call_output``."""
    if result.call.name != TOOL_SEARCH:
        return jsonspan.dumps({"type": "function_call_output", "call_id": result.call.id, "output": result.content})
    head = jsonspan.dumps({"type": "tool_search_output", "call_id": result.call.id, "execution": "client",
                           "status": "completed"})
    return head[:-1] + ',"tools":' + jsonspan.array_text([t.raw for t in result.loads]) + "}"


@memoize(16 * MiB, sizeof=derived_size, admit_when_full=ADMIT_WHEN_FULL)  # a catalog too big for it still hits
def parse_tool(raw: str) -> Tool:
    d = json.loads(raw)
    if not isinstance(d, dict):
        raise Unsupported("a tool is not an object")
    kind = d.get("type")
    if (parts := _namespace(raw)) is not None and len(parts[1]) == 1:
        # One function of a namespace, named as the model calls it; deferred if the client defers it.
        fn = json.loads(parts[1][0])
        desc = fn.get("description")
        deferred = fn.get("defer_loading") is True or d.get("defer_loading") is True
        pinned = "client_deferred" if deferred else None if fn.get("type") == "function" else "builtin"
        return Tool(f"{parts[0]}.{fn['name']}", raw, desc if isinstance(desc, str) else "",
                    params_of(fn.get("parameters")), pinned)
    if kind != "function":
        # tool_search, web_search, file_search, mcp, shell, local_shell, apply_patch, custom,
        # computer_use_preview, image_generation, code_interpreter, an unreadable namespace…: the
        # API's or the client's own.
        name = d.get("name") or d.get("server_label") or f"<{kind}>"
        return Tool(str(name), raw, pinned="builtin")
    if not isinstance(d.get("name"), str):
        raise Unsupported("a function tool has no name")
    desc = d.get("description")
    # defer_loading functions are already hidden behind the client's own tool_search.
    pinned = "client_deferred" if d.get("defer_loading") is True else None
    return Tool(d["name"], raw, desc if isinstance(desc, str) else "", params_of(d.get("parameters")), pinned)


def _build(raws: Sequence[str], values: Sequence[Any]) -> tuple[Tool, ...]:
    """A catalog's tools: a namespace's functions each a tool of their own (``_split``)."""
    return tuple(t for raw in raws for t in _split(parse_tool(raw)))


def _native_entries(raws: Sequence[str]) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """Each ``tools[]`` entry for native deferral (once per catalog): its text, its tool's name,
    and a namespace's functions with the names the model calls them by."""
    out = []
    for raw in raws:
        if (parts := _namespace(raw)) is not None:
            out.append((raw, parts[0], tuple((fn, f"{parts[0]}.{json.loads(fn)['name']}") for fn in parts[1])))
        else:
            out.append((raw, parse_tool(raw).name, ()))
    return out


def _stored(data: dict[str, Any]) -> bool:
    return data.get("store") is not False  # the API stores responses unless told not to


#: Members of a history item that say nothing the model produced: its status, and what Codex CLI
#: adds to each item it sends back (its turn ids).
_CLIENT_ANNOTATIONS = frozenset({"status", "internal_chat_message_metadata_passthrough"})


def _replay(output: Any, stored: bool) -> Iterator[dict[str, Any]]:
    """Round-one output items as the next round's input.

    Stored: as they came, ids resolve server-side. ``store:false``: nothing was persisted, so an
    item id is a dangling reference (OpenAI: "Item with id 'rs_…' not found", Azure rejects it):
    ids go, a message goes as an input message (no id, no status: what Codex, the store:false
    client, sends), and a reasoning item without ``encrypted_content`` carries nothing and goes.
    """
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict):
            continue
        if stored:
            yield item
        elif not (item.get("type") == "reasoning" and not item.get("encrypted_content")):
            drop = ("id", "status") if item.get("type") == "message" else ("id",)
            yield {k: v for k, v in item.items() if k not in drop}


class OpenAIResponsesAdapter(AdapterDefaults):
    api = "openai_responses"
    native_kind = "responses"  # ``tool_discovery.native.responses``
    echoes = True  # a Response restates the request's tools and tool_choice

    def native_deferral(self) -> NativeDeferral:
        return self

    def native_model(self, view: RequestView) -> str:
        return view.model if isinstance(view.model, str) else ""

    def parse_tool(self, raw: str) -> Tool:
        return parse_tool(raw)

    def parse(self, body: str) -> RequestView:
        data, catalog = load_request(body, self.api, _build, history="input")
        items = data.get("input", [])
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        if not isinstance(items, list):
            raise Unsupported("input is neither text nor a list of items")
        history = History()
        for item in items:
            if not isinstance(item, dict):
                continue
            kind = item.get("type", "message")  # easy input messages may leave the type out
            if not isinstance(kind, str):
                continue  # no item type we know
            if kind == "message" and item.get("role") == "user":
                history.user(user_text(_message_texts(item.get("content"))))
            elif kind in _CALLS:
                history.calls[str(item.get("call_id"))] = _qualified(item)
            elif kind in _CALLS.values():
                history.answered.add(str(item.get("call_id")))
        # tool_choice {type:"function", name} and {type:"allowed_tools", tools:[{type:"function", name}]}
        forced = forced_names(data.get("tool_choice"))
        return history.view(catalog, forced, data.get("stream") is True, data.get("prompt_cache_key"),
                            continues=data.get("previous_response_id") if _stored(data) else None,
                            model=data.get("model"))

    def with_tools(self, body: str, raws: Sequence[str]) -> str:
        return replace_array(body, ["tools"], _merged(raws))

    def phantom_tool(self, name: str, description: str) -> str:
        # A strict-compatible schema (all properties required, no others), so whether the API
        # applies strict mode by default or not, the definition is accepted.
        return jsonspan.dumps(
            {
                "type": "function",
                "name": name,
                "description": description,
                "parameters": query_schema(strict=True),
            }
        )

    def native_search(self, name: str) -> str:
        return TOOL_SEARCH

    def native_tools(self, body: str, deferred: Sequence[str], search: str) -> str:
        """Deferred functions of a namespace get ``defer_loading`` inside it (the API's rule for
        namespaces); the namespace entry stays where the client put it."""
        catalog = catalog_at(body)

        def mark(hidden: frozenset[str]) -> list[str]:
            entries = (catalog.derived("native entries", lambda: _native_entries(catalog.raws))
                       if catalog is not None else _native_entries(tool_spans(body, ["tools"])))
            raws = []
            for raw, name, functions in entries:
                if functions:
                    fns = [deferred_text(fn) if qualified in hidden else fn for fn, qualified in functions]
                    raws.append(raw if all(a is b for a, b in zip(fns, (fn for fn, _ in functions)))
                                else replace_array(raw, ["tools"], fns))
                else:
                    raws.append(deferred_text(raw) if name in hidden else raw)
            return raws

        return with_marked(body, catalog, deferred, search, mark)

    def native_search_tool(self, name: str, description: str) -> str:
        return jsonspan.dumps({"type": "tool_search", "execution": "client", "description": description,
                               "parameters": query_schema(strict=True)})

    def calls(self, message: dict[str, Any]) -> list[ToolCall]:
        out = []
        for item in as_list(message.get("output")):
            if _client_search(item):
                out.append(ToolCall(str(item.get("call_id")), TOOL_SEARCH, parse_arguments(item.get("arguments"))))
            elif isinstance(item, dict) and item.get("type") == "function_call":
                out.append(ToolCall(str(item.get("call_id")), _qualified(item), parse_arguments(item.get("arguments"))))
        return out

    def append_round(
        self, body: str, message: dict[str, Any], results: Sequence[ToolResult], add_raws: Sequence[str]
    ) -> str:
        """The rule, by where the conversation lives:

        - stored chain (``previous_response_id`` and not ``store:false``): round one is stored with
          a function_call lacking its output, so the next round points ``previous_response_id`` at
          round one and sends only the outputs. The final response then chains client turn ->
          round one -> … -> final, and the client's next turn can continue from the final id;
        - ``conversation``: the server appends each round's items to the conversation itself,
          so again only the outputs are sent;
        - otherwise stateless: the full input, then round one's output items (reasoning included,
          with its encrypted_content), then the outputs. A string input becomes a user message.
        """
        data = load_object(body)
        # Every function_call needs its function_call_output (same call_id) in the next input,
        # every client tool_search_call its tool_search_output.
        outputs = [_output_item(r) for r in results]
        if data.get("previous_response_id") and _stored(data) and isinstance(message.get("id"), str):
            body = jsonspan.set_member(body, jsonspan.root(body), "previous_response_id", jsonspan.dumps(message["id"]))
            body = replace_array(body, ["input"], outputs)
        elif data.get("conversation") is not None:
            body = replace_array(body, ["input"], outputs)
        else:
            span = jsonspan.find(body, ["input"])
            if span is not None and isinstance(data.get("input"), str):
                # The original string's bytes are kept, only wrapped into a user message item.
                body = jsonspan.replace(body, span, '[{"role":"user","content":' + body[span[0] : span[1]] + "}]")
            replay = [jsonspan.dumps(item) for item in _replay(message.get("output"), _stored(data))]
            body = append_array(body, ["input"], replay + outputs)
        if any(_namespace(raw) is not None for raw in add_raws):  # found functions go into their namespace
            return self.with_tools(body, [*tool_spans(body, ["tools"]), *add_raws])
        return append_array(body, ["tools"], add_raws) if add_raws else body

    def response_id(self, message: dict[str, Any]) -> str | None:
        rid = message.get("id")
        return rid if isinstance(rid, str) and message.get("store") is not False else None

    def owed_results(self, body: str, results: Sequence[ToolResult]) -> list[str]:
        # A stored response with a function_call lacking its output fails the next chained
        # turn ("No tool output found for function call …"): the outputs must follow.
        if not _stored(decoded(body)):
            return []
        return [_output_item(r) for r in results]

    def chain_from(self, body: str, response_id: str) -> str:
        return jsonspan.set_member(body, jsonspan.root(body), "previous_response_id", jsonspan.dumps(response_id))

    def with_owed_results(self, body: str, items: Sequence[str]) -> str:
        span = jsonspan.find(body, ["input"])
        if not items or span is None:
            return body
        if body[span[0]] == '"':  # a string input becomes a user message after the outputs
            user = ',{"role":"user","content":' + body[span[0]:span[1]] + "}]"
            return jsonspan.replace(body, span, "[" + ",".join(items) + user)
        inner = body[span[0] + 1 : span[1] - 1].strip()
        return jsonspan.replace(body, span, "[" + ",".join(items) + ("," + inner if inner else "") + "]")

    def strip(self, message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
        return strip(message, names)

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return merge(rounds)

    def usage(self, message: dict[str, Any]) -> TokenUsage | None:
        """``input_tokens`` includes ``input_tokens_details.cached_tokens`` (and a
        ``cache_write_tokens`` where it is reported): split out; ``output_tokens`` includes reasoning."""
        counts = usage_object(message)
        if counts is None:
            return None
        details = as_dict(counts.get("input_tokens_details"))
        reasoning = tokens(as_dict(counts.get("output_tokens_details")).get("reasoning_tokens"))
        return prompt_split(tokens(counts.get("input_tokens")), tokens(counts.get("output_tokens")),
                            counts.get("total_tokens"), tokens(details.get("cached_tokens")),
                            tokens(details.get("cache_write_tokens")), reasoning)

    def restore_echo(self, response: str, body: str) -> str:
        """The echoed ``tools`` / ``tool_choice`` of a Response text set to the client's own: the
        proxy forwarded a reduced list plus the search tool, which the client must not see. Only
        members the text has are replaced (an error body echoes nothing); other bytes are kept."""
        try:  # one walk of the response, before the client's catalog is spliced into it
            spans = dict(jsonspan.members(response, jsonspan.root(response)))  # the last duplicate counts
        except (ValueError, IndexError):
            return response
        fields = echoed_fields(body) if spans.keys() & ECHOED else {}
        return jsonspan.replace_all(response, sorted((spans[k], raw) for k, raw in fields.items() if k in spans))

    def history_path(self, body: str) -> tuple[str, ...] | None:
        data = decoded(body)
        if (data.get("previous_response_id") and _stored(data)) or data.get("conversation") is not None:
            return None  # the server holds the real rounds: chain_from / link keep the chain
        return ("input",)

    def produced(self, entry: Any) -> bool:
        if not isinstance(entry, dict):
            return False
        kind = entry.get("type", "message")
        if kind == "message":
            return entry.get("role") == "assistant"
        return isinstance(kind, str) and not kind.endswith("_output") and kind != "item_reference"

    def shown(self, message: dict[str, Any]) -> list[Any]:
        return list(as_list(message.get("output")))

    def comparable(self, entries: list[Any]) -> list[Any]:
        """Item ids and statuses are what a ``store:false`` client drops (they name nothing
        stored), and so is a reasoning item that carries no content; Codex CLI adds its own turn
        bookkeeping to every item it sends back (``_CLIENT_ANNOTATIONS``), which is not the item."""
        return [{k: v for k, v in item.items() if k not in _CLIENT_ANNOTATIONS}
                for item in _replay(entries, stored=False)]

    def decoder(self) -> StreamDecoder:
        return ResponsesStreamDecoder()

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        return encode(message)

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        """OpenAI's error body (Responses shares Chat's): ``{"error": {"message", "type", "param", "code"}}``."""
        body = {"error": openai_error_object(failure)}
        return [("content-type", "application/json")], jsonspan.dumps(body).encode("utf-8")

    def stitcher(self, phantom: str, body: str) -> Stitcher:
        return ResponsesStitcher(phantom, body)
