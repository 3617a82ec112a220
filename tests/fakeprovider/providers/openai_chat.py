"""OpenAI Chat Completions: ``POST /v1/chat/completions``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
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
    new_id,
    split_json,
    split_text,
    sse,
)
from .base import Incoming, Provider, bad, check_tool_name, check_unique

_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_INSTRUCTIONS = ("system", "developer")


def leading_instructions(messages: list[dict[str, Any]]) -> int:
    """How many messages at the start are system/developer instructions. OpenAI's prompt puts
    them first, then the tools, then the conversation: its format renders the function
    definitions in the developer message after the instructions (the published harmony format)."""
    return next((i for i, m in enumerate(messages) if m.get("role") not in _INSTRUCTIONS), len(messages))


def _text(content: Any) -> str:
    """Message content as text (a string, or the text parts of a list)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return json.dumps(content)


def _tool_name(tool: dict[str, Any], where: str) -> str:
    """The name of a ``function`` or ``custom`` tool definition (validated)."""
    kind = tool.get("type")
    if kind not in ("function", "custom"):
        raise bad(f"Invalid value for '{where}.type': expected 'function' or 'custom'.", f"{where}.type")
    spec = tool.get(kind)
    if not isinstance(spec, dict):
        raise bad(f"Missing required parameter: '{where}.{kind}'.", f"{where}.{kind}")
    if "name" not in spec:
        raise bad(f"Missing required parameter: '{where}.{kind}.name'.", f"{where}.{kind}.name")
    check_tool_name(spec["name"], f"{where}.{kind}.name")
    if kind == "function" and "parameters" in spec and not isinstance(spec["parameters"], dict):
        raise bad(
            f"Invalid type for '{where}.function.parameters': expected an object.", f"{where}.function.parameters"
        )
    return spec["name"]


class OpenAIChat(Provider):
    name = "openai-chat"
    call_id_prefix = "call_"

    def match(self, method: str, path: str) -> dict[str, str] | None:
        return {} if method == "POST" and path == "/v1/chat/completions" else None

    # --- validation -------------------------------------------------------------------

    def parse(self, body: Any, req: Incoming, route: dict[str, str]) -> Conversation:
        if not isinstance(body, dict):
            raise bad("Invalid type for request body: expected an object.")
        if not isinstance(body.get("model"), str):
            raise bad("you must provide a model parameter", "model")
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise bad("Missing required parameter: 'messages'.", "messages")
        if not messages:
            raise bad("Invalid 'messages': empty array. Expected an array with minimum length 1.", "messages")
        stream = body.get("stream") is True
        if body.get("stream_options") is not None and not stream:
            raise bad("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options")
        names = self._check_tools(body.get("tools"))
        self._check_tool_choice(body.get("tool_choice"), names)
        calls, results, last_user = self._check_messages(messages)
        return Conversation(
            api=self.name,
            model=body["model"],
            stream=stream,
            tools=names,
            calls=calls,
            results=results,
            last_user_text=last_user,
            body=body,
        )

    @staticmethod
    def _check_tools(tools: Any) -> list[str]:
        if tools is None:
            return []
        if not isinstance(tools, list):
            raise bad("Invalid type for 'tools': expected an array.", "tools")
        names = []
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise bad(f"Invalid type for 'tools[{i}]': expected an object.", f"tools[{i}]")
            names.append(_tool_name(tool, f"tools[{i}]"))
        check_unique(names)
        return names

    @staticmethod
    def _check_tool_choice(choice: Any, names: list[str]) -> None:
        if choice is None or choice in ("none", "auto"):
            return
        if choice == "required":
            if not names:
                raise bad(
                    "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
                    "tool_choice",
                )
            return
        if not isinstance(choice, dict):
            raise bad("Invalid value for 'tool_choice'.", "tool_choice")
        kind = choice.get("type")
        if kind in ("function", "custom"):
            named = [(choice.get(kind) or {}).get("name") or choice.get("name")]
        elif kind == "allowed_tools":
            allowed = (choice.get("allowed_tools") or {}).get("tools") or []
            named = [(t.get(t.get("type")) or {}).get("name") or t.get("name") for t in allowed if isinstance(t, dict)]
        else:
            raise bad(f"Invalid value for 'tool_choice.type': {kind!r}.", "tool_choice.type")
        for n in named:
            if n not in names:
                raise bad(f"Invalid value for 'tool_choice': tool {n!r} is not in 'tools'.", "tool_choice")

    @staticmethod
    def _check_messages(messages: list[Any]) -> tuple[list[ToolCall], list[ToolResult], str]:
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        names_by_id: dict[str, str] = {}
        pending: list[str] = []  # ids of the last assistant tool_calls still without a tool message
        open_ids: set[str] = set()  # ids a tool message may answer right now
        last_user = ""
        for i, msg in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(msg, dict) or msg.get("role") not in _ROLES:
                raise bad(f"Invalid value for '{where}.role'.", f"{where}.role")
            role = msg["role"]
            if role == "tool":
                cid = msg.get("tool_call_id")
                if cid not in open_ids:
                    raise bad(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                        f"with 'tool_calls' (tool_call_id {cid!r}).",
                        f"{where}.role",
                    )
                if cid in pending:
                    pending.remove(cid)
                results.append(ToolResult(cid, names_by_id.get(cid), _text(msg.get("content"))))
                continue
            if pending:
                raise bad(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
                    f"{where}.role",
                )
            open_ids = set()
            if role == "user":
                text = _text(msg.get("content"))
                if text.strip():
                    last_user = text
            elif role == "assistant" and msg.get("tool_calls"):
                for j, tc in enumerate(msg["tool_calls"]):
                    fn = tc.get("function") or {}
                    check_tool_name(fn.get("name"), f"{where}.tool_calls[{j}].function.name")
                    try:
                        args = json.loads(fn.get("arguments") or "{}")
                    except ValueError:
                        args = fn.get("arguments")
                    calls.append(ToolCall(tc.get("id"), fn["name"], args))
                    names_by_id[tc.get("id")] = fn["name"]
                    pending.append(tc.get("id"))
                    open_ids.add(tc.get("id"))
        if pending:
            raise bad(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}",
                "messages",
            )
        return calls, results, last_user

    def prompt_segments(self, conv: Conversation) -> list[Segment]:
        messages = conv.body["messages"]
        lead = leading_instructions(messages)
        segments = [(f"message:{i}", m) for i, m in enumerate(messages)]
        tools: list[Segment] = [(f"tool:{name}", t) for name, t in zip(conv.tools, conv.body.get("tools") or [])]
        return segments[:lead] + tools + segments[lead:]

    # --- rendering --------------------------------------------------------------------

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        u = reply.usage
        return {
            "prompt_tokens": u.input_tokens,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cache_read_input_tokens},
        }

    def render(self, reply: Reply, conv: Conversation) -> Response:
        cid = new_id("chatcmpl-")
        created = int(time.time())
        finish = "tool_calls" if reply.stop_for_tools else "stop"
        if not conv.stream:
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
            if reply.calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                    for c in reply.calls
                ]
            body = {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": conv.model,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": self._usage(reply),
                "system_fingerprint": None,
            }
            return JsonResponse(200, body, {"x-request-id": new_id("req_")})
        include_usage = bool((conv.body.get("stream_options") or {}).get("include_usage"))
        return StreamResponse(
            self._chunks(reply, conv, cid, created, finish, include_usage), headers={"x-request-id": new_id("req_")}
        )

    def _chunks(
        self, reply: Reply, conv: Conversation, cid: str, created: int, finish: str, include_usage: bool
    ) -> Iterator[bytes]:
        def chunk(delta: dict[str, Any] | None, finish_reason: str | None = None, usage: Any = None) -> bytes:
            body: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": conv.model,
                "system_fingerprint": None,
                "choices": []
                if delta is None
                else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
            if include_usage:
                body["usage"] = usage
            return sse(None, body)

        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for frag in split_text(reply.text):
            yield chunk({"content": frag})
        for n, c in enumerate(reply.calls):
            head = {"index": n, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
            yield chunk({"tool_calls": [head]})
            for frag in split_json(c.arguments):
                yield chunk({"tool_calls": [{"index": n, "function": {"arguments": frag}}]})
        yield chunk({}, finish)
        if include_usage:
            yield chunk(None, usage=self._usage(reply))
        yield sse(None, "[DONE]")

    def error_response(self, err: ApiError) -> JsonResponse:
        return openai_error(err)

    def invalid_json(self) -> ApiError:
        return openai_invalid_json()


def openai_error(err: ApiError) -> JsonResponse:
    """An OpenAI API error body (shared by Chat Completions and Responses)."""
    kind = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        404: "invalid_request_error",
        429: "rate_limit_exceeded",
    }.get(err.status, "server_error")
    code = "invalid_api_key" if err.status == 401 else None
    body = {"error": {"message": err.message, "type": kind, "param": err.param, "code": code}}
    return JsonResponse(err.status, body, {"x-request-id": new_id("req_")})


def openai_invalid_json() -> ApiError:
    """OpenAI's answer to a body that is not JSON."""
    return bad(
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP "
        "library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"
    )
