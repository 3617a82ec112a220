"""OpenAI Responses API: ``POST /v1/responses`` (JSON or SSE), with ``previous_response_id``.

Tools: flat ``function`` / ``custom`` tools, ``namespace`` tools (their nested functions are
offered as ``NAMESPACE.NAME``; a call to one is a ``function_call`` with ``namespace`` and the
plain ``name``, as Codex expects), and hosted tools (``web_search``, ``mcp``, ...) that offer
no name. Responses are stored (``store`` defaults to true, as in the real API) so a later
request can chain with ``previous_response_id``; a chained function call without an output
fails with "No tool output found for function call ...".

Reasoning: a reply that thinks starts with a ``reasoning`` item (its summary the thinking
text) carrying ``encrypted_content``: an HMAC-signed token naming the item and the item it
led to. Like the API, a replayed reasoning item is rejected when its ``encrypted_content``
was altered or belongs to another item, when the item it led to does not follow it, or, on a
``store: false`` request, when it comes without ``encrypted_content`` (nothing was persisted).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from ..cache import Segment
from ..model import (
    ApiError,
    Conversation,
    JsonResponse,
    Reply,
    Response,
    StreamResponse,
    ToolCall,
    ToolResult,
    compact_json,
    new_id,
    split_raw,
    split_text,
    sse,
)
from .base import Incoming, Provider, bad, check_tool_name, check_unique
from .openai_chat import leading_instructions, openai_error, openai_invalid_json

#: Tool types that carry no function name of their own (built-in / hosted tools).
HOSTED_TOOL_TYPES = frozenset(
    {
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer",
        "computer_use",
        "computer_use_preview",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
        "programmatic_tool_calling",
    }
)
_ROLES = ("user", "assistant", "system", "developer")
TOOL_SEARCH = "tool_search"  # how a scripted call names a client-executed tool search
#: (call item type, output item type, wording in the "No tool output found" error)
_PAIRS = {
    "function_call": ("function_call_output", "function call"),
    "custom_tool_call": ("custom_tool_call_output", "custom tool call"),
}
_OUTPUTS = {out: call for call, (out, _) in _PAIRS.items()}
_STORE_LIMIT = 1000
_SIGNING_KEY = b"fakeprovider-responses-reasoning"
_FOLLOWED_BY_MESSAGE = "message"  # what a reasoning item led to, when not a call (else the call's call_id)


def encrypted_reasoning(item_id: str, follows: str) -> str:
    """The ``encrypted_content`` of a reasoning item: signed, so the fake can check a replay."""
    payload = compact_json({"id": item_id, "next": follows}).encode()
    mac = hmac.new(_SIGNING_KEY, payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac + payload).decode()


def opened_reasoning(token: Any) -> dict[str, str] | None:
    """The payload of an ``encrypted_content`` the fake issued, or None when it was not (or was altered)."""
    try:
        raw = base64.urlsafe_b64decode(str(token).encode())
        mac, payload = raw[:32], raw[32:]
        if not hmac.compare_digest(mac, hmac.new(_SIGNING_KEY, payload, hashlib.sha256).digest()):
            return None
        opened = json.loads(payload)
    except ValueError:
        return None
    return opened if isinstance(opened, dict) else None


def _leads_to(follows: str, item: dict[str, Any]) -> bool:
    """Whether ``item`` is the one a reasoning item led to (``follows``: a call_id, or a message)."""
    kind = item.get("type") or ("message" if "role" in item else None)
    if follows == _FOLLOWED_BY_MESSAGE:
        return kind == "message" and item.get("role") == "assistant"
    return (kind in _PAIRS or kind == "tool_search_call") and item.get("call_id") == follows


def _content_text(content: Any) -> str:
    """Text of a message's content or a tool output (string, or text-bearing parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    return json.dumps(content)


def _function_name(tool: dict[str, Any], where: str) -> str:
    """A validated ``function``/``custom`` tool name."""
    if "name" not in tool:
        raise bad(f"Missing required parameter: '{where}.name'.", f"{where}.name")
    check_tool_name(tool["name"], f"{where}.name")
    if (
        tool.get("type") == "function"
        and tool.get("parameters") is not None
        and not isinstance(tool["parameters"], dict)
    ):
        raise bad(f"Invalid type for '{where}.parameters': expected an object.", f"{where}.parameters")
    return str(tool["name"])


def offered_names(tools: Any) -> list[str]:
    """Names the model may call: flat functions/custom tools, and ``ns.fn`` for namespaced ones."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad("Invalid type for 'tools': expected an array.", "tools")
    names: list[str] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise bad(f"Invalid type for '{where}': expected an object.", where)
        kind = tool.get("type")
        if kind in ("function", "custom"):
            names.append(_function_name(tool, where))
        elif kind == "namespace":
            ns = _function_name({**tool, "type": "namespace"}, where)
            inner = tool.get("tools")
            if not isinstance(inner, list) or not inner:
                raise bad(f"Invalid '{where}.tools': expected a non-empty array of function tools.", f"{where}.tools")
            for j, sub in enumerate(inner):
                swhere = f"{where}.tools[{j}]"
                if not isinstance(sub, dict) or sub.get("type") not in ("function", "custom"):
                    raise bad(f"Invalid value for '{swhere}.type': expected 'function' or 'custom'.", f"{swhere}.type")
                names.append(f"{ns}.{_function_name(sub, swhere)}")
        elif kind == "tool_search" and tool.get("execution") == "client":
            names.append(TOOL_SEARCH)  # the model calls it; the client answers with a tool_search_output
        elif kind not in HOSTED_TOOL_TYPES:
            raise bad(
                f"Invalid value: {kind!r}. Supported values are: 'function', 'custom', 'namespace', "
                f"{', '.join(repr(t) for t in sorted(HOSTED_TOOL_TYPES))}.",
                f"{where}.type",
            )
    check_unique(names)
    return names


def deferred_names(tools: Any) -> set[str]:
    """Names of ``defer_loading`` functions (``ns.fn`` inside a namespace): out of the model's
    sight until a ``tool_search_output`` loads them."""
    out: set[str] = set()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") in ("function", "custom") and tool.get("defer_loading") is True:
            out.add(str(tool.get("name")))
        elif tool.get("type") == "namespace":
            out |= {f"{tool.get('name')}.{t.get('name')}" for t in tool.get("tools") or []
                    if isinstance(t, dict) and (t.get("defer_loading") is True or tool.get("defer_loading") is True)}
    return out


def _in_prompt(tool: dict[str, Any]) -> dict[str, Any] | None:
    """A tool as the prompt holds it: ``defer_loading`` functions stay out until a tool search
    loads them (a namespace keeps its other functions), or None when nothing of it is in."""
    if tool.get("defer_loading"):
        return None
    if tool.get("type") != "namespace" or not isinstance(tool.get("tools"), list):
        return tool
    loaded = [t for t in tool["tools"] if not (isinstance(t, dict) and t.get("defer_loading"))]
    return {**tool, "tools": loaded} if loaded else None


def _qualified(item: dict[str, Any]) -> str:
    """A call item's tool name as offered (``ns.fn`` when it carries a namespace)."""
    name = str(item.get("name"))
    return f"{item['namespace']}.{name}" if item.get("namespace") else name


class OpenAIResponses(Provider):
    name = "openai-responses"
    call_id_prefix = "call_"

    def __init__(self) -> None:
        self._store: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def match(self, method: str, path: str) -> dict[str, str] | None:
        return {} if method == "POST" and path == "/v1/responses" else None

    # --- stored responses (previous_response_id) --------------------------------------

    def _remember(self, resp_id: str, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._store[resp_id] = items
            while len(self._store) > _STORE_LIMIT:
                self._store.popitem(last=False)

    def stored_items(self, resp_id: str) -> list[dict[str, Any]] | None:
        """The whole conversation (input chain + output) of a stored response, or None."""
        with self._lock:
            items = self._store.get(resp_id)
        return None if items is None else list(items)

    # --- validation -------------------------------------------------------------------

    def parse(self, body: Any, req: Incoming, route: dict[str, str]) -> Conversation:
        if not isinstance(body, dict):
            raise bad("Invalid type for request body: expected an object.")
        if not isinstance(body.get("model"), str):
            raise bad("Missing required parameter: 'model'.", "model")
        stream = body.get("stream") is True
        if body.get("stream_options") is not None and not stream:
            raise bad("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options")
        names = offered_names(body.get("tools"))
        self._check_tool_choice(body.get("tool_choice"), names)
        history: list[dict[str, Any]] = []
        prev = body.get("previous_response_id")
        if prev is not None:
            stored = self.stored_items(prev) if isinstance(prev, str) else None
            if stored is None:
                raise ApiError(400, f"Previous response with id '{prev}' not found.", param="previous_response_id")
            history = stored
        given = self._input_items(body.get("input"))
        self._check_reasoning(given, stored=body.get("store", True) is not False)
        items = history + given
        calls, results, last_user = self._check_items(items)
        deferred = deferred_names(body.get("tools"))
        if deferred and TOOL_SEARCH not in names and not any(
            isinstance(t, dict) and t.get("type") == "tool_search" for t in body.get("tools") or []
        ):
            raise bad("Deferred tools (`defer_loading: true`) require a `tool_search` tool in 'tools'.", "tools")
        loaded = [n for item in items if item.get("type") == "tool_search_output"
                  for n in offered_names(item.get("tools") or [])]
        hidden = deferred - set(loaded)
        return Conversation(
            api=self.name,
            model=body["model"],
            stream=stream,
            tools=[n for n in names if n not in hidden] + [n for n in loaded if n not in names],
            calls=calls,
            results=results,
            last_user_text=last_user,
            body=body,
            meta={"items": items, "deferred": sorted(hidden), "client_search": TOOL_SEARCH in names},
        )

    def native_refusal(self, body: dict[str, Any]) -> ApiError | None:
        for i, tool in enumerate(body.get("tools") or []):
            if isinstance(tool, dict) and tool.get("type") == "tool_search":
                return bad(f"Tool 'tool_search' is not supported with model '{body.get('model')}'.", f"tools[{i}]")
            if isinstance(tool, dict) and "defer_loading" in tool:
                return bad(f"Unknown parameter: 'tools[{i}].defer_loading'.", f"tools[{i}].defer_loading")
        return None

    @staticmethod
    def _input_items(value: Any) -> list[dict[str, Any]]:
        """``input`` as a list of items (a string is one user message)."""
        if value is None:
            return []
        if isinstance(value, str):
            return [{"type": "message", "role": "user", "content": value}]
        if not isinstance(value, list):
            raise bad("Invalid type for 'input': expected one of a string or array of input items.", "input")
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise bad(f"Invalid type for 'input[{i}]': expected an object.", f"input[{i}]")
        return list(value)

    @staticmethod
    def _check_reasoning(items: list[dict[str, Any]], stored: bool) -> None:
        """Replayed reasoning items: the fake's own, unchanged, each before the item it led to."""
        for i, item in enumerate(items):
            if item.get("type") != "reasoning":
                continue
            rid, token = item.get("id"), item.get("encrypted_content")
            if token is None:
                if not stored:
                    raise ApiError(
                        404,
                        f"Item with id '{rid}' not found. Items are not persisted when `store` is set to false. "
                        "Try again with `store` set to true, or remove this item from your input.",
                        param="input",
                    )
                continue
            opened = opened_reasoning(token)
            if opened is None or rid not in (None, opened.get("id")):
                raise bad(f"The encrypted content for item {rid} could not be verified.", f"input[{i}]")
            following = items[i + 1] if i + 1 < len(items) else {}
            if not _leads_to(str(opened.get("next")), following):
                raise bad(
                    f"Item '{opened.get('id')}' of type 'reasoning' was provided without its required following "
                    "item.",
                    "input",
                )

    @staticmethod
    def _check_tool_choice(choice: Any, names: list[str]) -> None:
        if choice is None or choice in ("none", "auto"):
            return
        if choice == "required":
            if not names:
                raise bad("Tool choice 'required' must be specified with 'tools' parameter.", "tool_choice")
            return
        if not isinstance(choice, dict):
            raise bad("Invalid value for 'tool_choice'.", "tool_choice")
        kind = choice.get("type")
        if kind in ("function", "custom"):
            named = [_qualified(choice)]
        elif kind == "allowed_tools":
            named = [
                _qualified(t)
                for t in choice.get("tools") or []
                if isinstance(t, dict) and t.get("type") in ("function", "custom")
            ]
        elif kind in HOSTED_TOOL_TYPES:
            return
        else:
            raise bad(f"Invalid value for 'tool_choice.type': {kind!r}.", "tool_choice.type")
        for n in named:
            if n not in names:
                raise bad(f"Tool choice '{n}' not found in 'tools' parameter.", "tool_choice")

    @staticmethod
    def _check_items(items: list[dict[str, Any]]) -> tuple[list[ToolCall], list[ToolResult], str]:
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        open_calls: dict[str, tuple[str, str]] = {}  # call_id -> (item type, name), not answered yet
        open_searches: set[str] = set()  # client tool_search_call ids not answered yet
        names: dict[str, str] = {}
        last_user = ""
        for i, item in enumerate(items):
            where = f"input[{i}]"
            kind = item.get("type") or ("message" if "role" in item else None)
            if kind == "message":
                if item.get("role") not in _ROLES:
                    raise bad(
                        f"Invalid value: {item.get('role')!r}. Supported values are: 'user', 'assistant', "
                        f"'system', and 'developer'.",
                        f"{where}.role",
                    )
                if "content" not in item:
                    raise bad(f"Missing required parameter: '{where}.content'.", f"{where}.content")
                text = _content_text(item["content"])
                if item["role"] == "user" and text.strip():
                    last_user = text
            elif kind in _PAIRS:
                for key in ("call_id", "name"):
                    if not isinstance(item.get(key), str):
                        raise bad(f"Missing required parameter: '{where}.{key}'.", f"{where}.{key}")
                payload = "arguments" if kind == "function_call" else "input"
                if not isinstance(item.get(payload), str):
                    raise bad(f"Invalid type for '{where}.{payload}': expected a string.", f"{where}.{payload}")
                try:
                    args: Any = json.loads(item[payload]) if kind == "function_call" else item[payload]
                except ValueError:
                    args = item[payload]
                name = _qualified(item)
                calls.append(ToolCall(item["call_id"], name, args))
                open_calls[item["call_id"]] = (kind, name)
                names[item["call_id"]] = name
            elif kind in _OUTPUTS:
                cid = item.get("call_id")
                if not isinstance(cid, str):
                    raise bad(f"Missing required parameter: '{where}.call_id'.", f"{where}.call_id")
                if "output" not in item:
                    raise bad(f"Missing required parameter: '{where}.output'.", f"{where}.output")
                if cid not in names:
                    raise bad(f"No tool call found for {_PAIRS[_OUTPUTS[kind]][1]} output with call_id {cid}.", "input")
                open_calls.pop(cid, None)
                results.append(ToolResult(cid, names[cid], _content_text(item["output"])))
            elif kind == "tool_search_call":
                if item.get("execution") == "client":
                    if not isinstance(item.get("call_id"), str):
                        raise bad(f"Missing required parameter: '{where}.call_id'.", f"{where}.call_id")
                    calls.append(ToolCall(item["call_id"], TOOL_SEARCH, item.get("arguments")))
                    open_searches.add(item["call_id"])
            elif kind == "tool_search_output":
                cid = item.get("call_id")
                if item.get("execution", "client") == "client" and cid not in open_searches:
                    raise bad(f"No tool search call found for tool search output with call_id {cid}.", "input")
                if not isinstance(item.get("tools"), list):
                    raise bad(f"Missing required parameter: '{where}.tools'.", f"{where}.tools")
                open_searches.discard(cid)
                results.append(ToolResult(str(cid), TOOL_SEARCH, ", ".join(offered_names(item["tools"]))))
            elif kind == "reasoning":
                if not isinstance(item.get("summary"), list):
                    raise bad(f"Missing required parameter: '{where}.summary'.", f"{where}.summary")
            elif not isinstance(kind, str):
                raise bad(f"Missing required parameter: '{where}.type'.", f"{where}.type")
        if open_calls:
            cid, (kind, _) = next(iter(open_calls.items()))
            raise bad(f"No tool output found for {_PAIRS[kind][1]} {cid}.", "input")
        if open_searches:
            raise bad(f"No tool search output found for tool search call {next(iter(open_searches))}.", "input")
        return calls, results, last_user

    def prompt_segments(self, conv: Conversation) -> list[Segment]:
        """``instructions`` and the leading system/developer items, the tools, then the rest of
        the conversation (stored history included); a ``tool_search_output`` item carries the
        tools it loads, so they count where it stands."""
        body, items = conv.body, conv.meta["items"]
        lead = leading_instructions(items)
        segments = [(f"input:{i}", item) for i, item in enumerate(items)]
        head: list[Segment] = [("instructions", body["instructions"])] if body.get("instructions") else []
        tools = [(f"tool:{t.get('name') or t.get('type')}", shown) for t in body.get("tools") or []
                 if (shown := _in_prompt(t)) is not None]
        return head + segments[:lead] + tools + segments[lead:]

    # --- rendering --------------------------------------------------------------------

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        u = reply.usage
        return {
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.input_tokens + u.output_tokens,
        }

    @staticmethod
    def _output_items(reply: Reply, client_search: bool = False) -> list[dict[str, Any]]:
        """The completed output items: reasoning (when the model thinks), a message with the
        text, then one item per call."""
        items: list[dict[str, Any]] = []
        if reply.thinking:
            rid = new_id("rs_")
            follows = reply.calls[0].id if reply.calls and not reply.text else _FOLLOWED_BY_MESSAGE
            items.append(
                {
                    "id": rid,
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": reply.thinking}],
                    "encrypted_content": encrypted_reasoning(rid, follows),
                }
            )
        if reply.text:
            part = {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
            items.append(
                {"id": new_id("msg_"), "type": "message", "status": "completed", "role": "assistant", "content": [part]}
            )
        for c in reply.calls:
            if client_search and c.name == TOOL_SEARCH:
                items.append({"id": new_id("tsc_"), "type": "tool_search_call", "call_id": c.id,
                              "execution": "client", "arguments": c.arguments, "status": "completed"})
                continue
            ns, _, plain = c.name.rpartition(".")
            item = {
                "id": new_id("fc_"),
                "type": "function_call",
                "status": "completed",
                "arguments": compact_json(c.arguments),
                "call_id": c.id,
                "name": plain,
            }
            if ns:
                item["namespace"] = ns
            items.append(item)
        return items

    @staticmethod
    def _response(
        conv: Conversation,
        resp_id: str,
        created: int,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
    ) -> dict[str, Any]:
        body = conv.body
        return {
            "id": resp_id,
            "object": "response",
            "created_at": created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": conv.model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage,
            "user": body.get("user"),
            "metadata": body.get("metadata") or {},
        }

    def render(self, reply: Reply, conv: Conversation) -> Response:
        resp_id = new_id("resp_")
        created = int(time.time())
        output = self._output_items(reply, conv.meta.get("client_search", False))
        if conv.body.get("store", True) is not False:
            self._remember(resp_id, conv.meta.get("items", []) + output)
        headers = {"x-request-id": new_id("req_")}
        final = self._response(conv, resp_id, created, "completed", output, self._usage(reply))
        if not conv.stream:
            return JsonResponse(200, final, headers)
        return StreamResponse(self._events(conv, final, resp_id, created), headers=headers)

    def _events(self, conv: Conversation, final: dict[str, Any], resp_id: str, created: int) -> Iterator[bytes]:
        seq = 0

        def event(kind: str, **data: Any) -> bytes:
            nonlocal seq
            out = sse(kind, {"type": kind, "sequence_number": seq, **data})
            seq += 1
            return out

        pending = self._response(conv, resp_id, created, "in_progress", [], None)
        yield event("response.created", response=pending)
        yield event("response.in_progress", response=pending)
        for index, item in enumerate(final["output"]):
            ids = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                text = item["content"][0]["text"]
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                yield event("response.content_part.added", **ids, content_index=0, part=empty)
                for frag in split_text(text):
                    yield event("response.output_text.delta", **ids, content_index=0, delta=frag, logprobs=[])
                yield event("response.output_text.done", **ids, content_index=0, text=text, logprobs=[])
                yield event("response.content_part.done", **ids, content_index=0, part=item["content"][0])
            elif item["type"] == "reasoning":
                yield from self._reasoning_events(event, index, item)
            elif item["type"] == "tool_search_call":
                yield event("response.output_item.added", output_index=index,
                            item={**item, "status": "in_progress"})
            else:
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for frag in split_raw(item["arguments"]):
                    yield event("response.function_call_arguments.delta", **ids, delta=frag)
                yield event(
                    "response.function_call_arguments.done", **ids, name=item["name"], arguments=item["arguments"]
                )
            yield event("response.output_item.done", output_index=index, item=item)
        yield event("response.completed", response=final)

    @staticmethod
    def _reasoning_events(event: Callable[..., bytes], index: int, item: dict[str, Any]) -> Iterator[bytes]:
        """A reasoning item's summary, streamed; its ``encrypted_content`` comes whole with the item's done event."""
        ids = {"item_id": item["id"], "output_index": index, "summary_index": 0}
        text = item["summary"][0]["text"]
        yield event(
            "response.output_item.added",
            output_index=index,
            item={k: v for k, v in item.items() if k != "encrypted_content"} | {"summary": []},
        )
        yield event("response.reasoning_summary_part.added", **ids, part={"type": "summary_text", "text": ""})
        for frag in split_text(text):
            yield event("response.reasoning_summary_text.delta", **ids, delta=frag)
        yield event("response.reasoning_summary_text.done", **ids, text=text)
        yield event("response.reasoning_summary_part.done", **ids, part=item["summary"][0])

    def error_response(self, err: ApiError) -> JsonResponse:
        return openai_error(err)

    def invalid_json(self) -> ApiError:
        return openai_invalid_json()
