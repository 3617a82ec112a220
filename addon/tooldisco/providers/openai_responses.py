"""OpenAI Responses (``POST /v1/responses``; Azure ``/openai/responses``, ``/openai/v1/responses``).

Codex CLI speaks only this API. Tools are flat (``{type:"function", name, parameters…}``);
everything that is not a plain function (namespaces of MCP tools, tool_search, hosted and
client built-ins) passes through pinned. A re-forward continues the conversation in one of
three ways, depending on where the conversation lives (see ``continue_after``).
"""

from __future__ import annotations

import json
from typing import Any, Collection, Iterable, Iterator, Sequence

from .. import jsonspan
from ..bytecache import MiB, memoize
from ..stitch.base import Stitcher
from ..streams.common import as_list
from .base import RequestView, StreamDecoder, Tool, ToolCall, ToolResult, Unsupported
from .common import (
    AdapterDefaults,
    History,
    append_array,
    check_unique,
    load_object,
    params_of,
    parse_arguments,
    parsed_tools,
    query_schema,
    replace_array,
    sum_usage,
    user_text,
)
from .openai_chat import forced_names

_CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}


def _message_texts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "input_text"]


def _qualified(item: dict[str, Any]) -> str:
    """A call's tool name; a call inside a namespace (Codex's MCP servers) is ``namespace/name``, so
    it can never be taken for the top-level phantom tool."""
    name = str(item.get("name"))
    namespace = item.get("namespace")
    return f"{namespace}/{name}" if isinstance(namespace, str) and namespace else name


def phantom_call(item: Any, names: Collection[str]) -> bool:
    """A ``function_call`` item calling one of ``names`` (a call inside a namespace never is)."""
    return isinstance(item, dict) and item.get("type") == "function_call" and _qualified(item) in names


# A Response echoes the request's ``tools`` and ``tool_choice``; for a field the request left
# out the API echoes these values.
_ECHO_DEFAULTS = {"tools": "[]", "tool_choice": '"auto"'}


def echoed_fields(body: str) -> dict[str, str]:
    """The raw JSON a Response must echo for the client's ``tools`` and ``tool_choice``: the
    client's own bytes from ``body``, or the API's value for a field it left out (or sent null)."""
    out = {}
    for key, default in _ECHO_DEFAULTS.items():
        span = jsonspan.find(body, [key])
        raw = body[span[0] : span[1]] if span is not None else "null"
        out[key] = default if raw == "null" else raw
    return out


@memoize(16 * MiB)
def parse_tool(raw: str) -> Tool:
    d = json.loads(raw)
    if not isinstance(d, dict):
        raise Unsupported("a tool is not an object")
    kind = d.get("type")
    if kind != "function":
        # namespace, tool_search, web_search, file_search, mcp, shell, local_shell, apply_patch, custom,
        # computer_use_preview, image_generation, code_interpreter…: the API's or the client's own.
        name = d.get("name") or d.get("server_label") or f"<{kind}>"
        return Tool(str(name), raw, pinned="builtin")
    if not isinstance(d.get("name"), str):
        raise Unsupported("a function tool has no name")
    desc = d.get("description")
    # defer_loading functions are already hidden behind the client's own tool_search.
    pinned = "client_deferred" if d.get("defer_loading") is True else None
    return Tool(d["name"], raw, desc if isinstance(desc, str) else "", params_of(d.get("parameters")), pinned)


def _stored(data: dict[str, Any]) -> bool:
    return data.get("store") is not False  # the API stores responses unless told not to


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


def _orphaned_reasoning(output: list[Any], removed: set[int]) -> set[int]:
    """Reasoning items whose whole step (the items up to the next reasoning item) was removed.

    The API rejects a replayed reasoning item without its following item, so a reasoning item
    that only led to phantom calls leaves with them; one that also led to a kept call stays.
    """
    orphans = set()
    for i, item in enumerate(output):
        if not (isinstance(item, dict) and item.get("type") == "reasoning"):
            continue
        step = []
        for j in range(i + 1, len(output)):
            if isinstance(output[j], dict) and output[j].get("type") == "reasoning":
                break
            step.append(j)
        if step and all(j in removed for j in step):
            orphans.add(i)
    return orphans


class OpenAIResponsesAdapter(AdapterDefaults):
    api = "openai_responses"

    def parse_tool(self, raw: str) -> Tool:
        return parse_tool(raw)

    def parse(self, body: str) -> RequestView:
        data = load_object(body)
        items = data.get("input", [])
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        if not isinstance(items, list):
            raise Unsupported("input is neither text nor a list of items")
        tools = parsed_tools(body, ["tools"], parse_tool)
        check_unique(tools)
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
                # A namespaced call uses its namespace, which is the entry in tools[].
                namespace = item.get("namespace")
                name = namespace if isinstance(namespace, str) and namespace else item.get("name")
                history.calls[str(item.get("call_id"))] = str(name)
            elif kind in _CALLS.values():
                history.answered.add(str(item.get("call_id")))
        # tool_choice {type:"function", name} and {type:"allowed_tools", tools:[{type:"function", name}]}
        forced = forced_names(data.get("tool_choice"))
        return history.view(tools, forced, data.get("stream") is True, data.get("prompt_cache_key"),
                            continues=data.get("previous_response_id") if _stored(data) else None)

    def with_tools(self, body: str, raws: Sequence[str]) -> str:
        return replace_array(body, ["tools"], raws)

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

    def calls(self, message: dict[str, Any]) -> list[ToolCall]:
        return [
            ToolCall(str(item.get("call_id")), _qualified(item), parse_arguments(item.get("arguments")))
            for item in as_list(message.get("output"))
            if isinstance(item, dict) and item.get("type") == "function_call"
        ]

    def continue_after(
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
        # Every function_call needs its function_call_output (same call_id) in the next input.
        outputs = [
            jsonspan.dumps({"type": "function_call_output", "call_id": r.call.id, "output": r.content})
            for r in results
        ]
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
        return append_array(body, ["tools"], add_raws) if add_raws else body

    def response_id(self, message: dict[str, Any]) -> str | None:
        rid = message.get("id")
        return rid if isinstance(rid, str) and message.get("store") is not False else None

    def pending_items(self, body: str, results: Sequence[ToolResult]) -> list[str]:
        # A stored response with a function_call lacking its output fails the next chained
        # turn ("No tool output found for function call …"): the outputs must follow.
        if not _stored(load_object(body)):
            return []
        return [jsonspan.dumps({"type": "function_call_output", "call_id": r.call.id, "output": r.content})
                for r in results]

    def continue_from(self, body: str, response_id: str) -> str:
        return jsonspan.set_member(body, jsonspan.root(body), "previous_response_id", jsonspan.dumps(response_id))

    def with_pending(self, body: str, items: Sequence[str]) -> str:
        span = jsonspan.find(body, ["input"])
        if not items or span is None:
            return body
        if body[span[0]] == '"':  # a string input becomes a user message after the outputs
            return jsonspan.replace(body, span, "[" + ",".join(items) + ',{"role":"user","content":' + body[span[0]:span[1]] + "}]")
        inner = body[span[0] + 1 : span[1] - 1].strip()
        return jsonspan.replace(body, span, "[" + ",".join(items) + ("," + inner if inner else "") + "]")

    def strip(self, message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
        """Phantom calls leave the output, with reasoning that led only to them. Responses has no
        tool stop reason: the status stays as it is. The echoed ``tools`` / ``tool_choice`` are not
        touched here: what the client sees of them is its own request's (``restore_echo`` for a
        JSON answer, the stitcher for a stream), not a filtered forwarded list."""
        hidden = set(names)
        output = list(as_list(message.get("output")))
        removed = {i for i, item in enumerate(output) if phantom_call(item, hidden)}
        removed |= _orphaned_reasoning(output, removed)
        out = dict(message)
        out["output"] = [item for i, item in enumerate(output) if i not in removed]
        return out

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """One Response: outputs in order, usage summed, the last round's id.

        The last id because with storage it is the response the server holds with the whole
        chain behind it (the client's next ``previous_response_id``); without storage no id
        resolves anyway. ``previous_response_id`` is the client's own, from round one.
        """
        out = dict(rounds[-1])
        if "previous_response_id" in rounds[0] or "previous_response_id" in out:
            out["previous_response_id"] = rounds[0].get("previous_response_id")
        out["output"] = [item for r in rounds for item in as_list(r.get("output"))]
        usage = sum_usage(r.get("usage") for r in rounds)
        if usage is not None:
            out["usage"] = usage
        return out

    def restore_echo(self, response: str, body: str) -> str:
        """The echoed ``tools`` / ``tool_choice`` of a Response text set to the client's own: the
        proxy forwarded a reduced list plus the search tool, which the client must not see. Only
        members the text has are replaced (an error body echoes nothing); other bytes are kept."""
        for key, raw in echoed_fields(body).items():
            if jsonspan.find(response, [key]) is not None:
                response = jsonspan.set_member(response, jsonspan.root(response), key, raw)
        return response

    def decoder(self) -> StreamDecoder:
        from ..streams.openai_responses import ResponsesStreamDecoder

        return ResponsesStreamDecoder()

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        from ..streams.openai_responses import encode

        return encode(message)

    def stitcher(self, phantom: str, body: str) -> Stitcher:
        from ..stitch.openai_responses import ResponsesStitcher

        return ResponsesStitcher(phantom, body)
