"""Anthropic Messages API: ``POST /v1/messages`` (any query string, e.g. ``?beta=true``).

Extended thinking: when the request enables ``thinking`` and the scripted reply thinks, the
answer starts with a ``thinking`` block whose ``signature`` is an HMAC of its text (so it
survives a restart of the fake). Like the API, a request is rejected when an assistant turn
carries a thinking block whose signature is missing or not the fake's for that text, and,
with thinking enabled, when the final assistant turn holds calls the model made while
thinking but no longer starts with a thinking block.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
from collections import OrderedDict
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
from .base import Incoming, Provider, bad, check_tool_name, check_unique, require

_ID_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
_SIGNING_KEY = b"fakeprovider-anthropic-thinking-signature"
_THINKING_TYPES = ("enabled", "adaptive")
_THOUGHTFUL_LIMIT = 10_000
_THINKING_BLOCKS = ("thinking", "redacted_thinking")
_ATTRIBUTION = "x-anthropic-billing-header:"


def thinking_signature(thinking: str) -> str:
    """The signature the fake puts on (and expects back with) a thinking block of this text."""
    digest = hmac.new(_SIGNING_KEY, thinking.encode(), hashlib.sha256).digest()
    return base64.b64encode(b"fk-thinking:" + digest).decode()


def thinking_enabled(body: dict[str, Any]) -> bool:
    """Whether the request turns extended thinking on (``{"type": "enabled" | "adaptive", ...}``)."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in _THINKING_TYPES


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """A message's content as a list of blocks (a bare string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise bad(f"{where}.content: Input should be a valid string or list of content blocks", where)
    return content


def _flatten(content: Any) -> str:
    """A tool_result's content as text (text blocks joined; tool_reference as ``tool_reference:NAME``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for b in content if isinstance(content, list) else [content]:
        if isinstance(b, dict) and b.get("type") == "text":
            parts.append(str(b.get("text", "")))
        elif isinstance(b, dict) and b.get("type") == "tool_reference":
            parts.append(f"tool_reference:{b.get('tool_name')}")
        else:
            parts.append(json.dumps(b))
    return "\n".join(parts)


def prompt_segments(body: dict[str, Any]) -> list[Segment]:
    """Tools, then system, then messages: Anthropic's cache prefix order. A ``defer_loading``
    tool is not in the prompt until a ``tool_reference`` loads it, right where the reference stands."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    deferred = {t.get("name"): t for t in tools if t.get("defer_loading")}
    segments: list[Segment] = [(f"tool:{t.get('name')}", t) for t in tools if not t.get("defer_loading")]
    if body.get("system") is not None:
        segments.append(("system", _without_attribution(body["system"])))
    for i, message in enumerate(body["messages"]):
        segments.append((f"message:{i}", {**message, "content": _as_blocks(message.get("content"))}))
        segments += [(f"tool_reference:{n}", deferred[n]) for n in _references(message) if n in deferred]
    return segments


def _as_blocks(content: Any) -> Any:
    """A string content as the one text block it stands for: the prompt is the same either way
    (Claude Code sends a message as blocks with ``cache_control``, then as a string)."""
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _without_attribution(system: Any) -> Any:
    """The system prompt without Claude Code's attribution block (``x-anthropic-billing-header:
    ...; cch=<per-request hash>;``, system[0]): the API reads it as billing metadata, not prompt,
    so its per-request value does not break the cache there."""
    if not isinstance(system, list):
        return system
    return [b for b in system if not (isinstance(b, dict) and str(b.get("text", "")).startswith(_ATTRIBUTION))]


def _references(message: dict[str, Any]) -> list[str]:
    """Tool names a message's tool_result blocks reference (``tool_reference`` blocks), in order."""
    blocks = message["content"] if isinstance(message["content"], list) else []
    return [
        ref.get("tool_name")
        for b in blocks
        if b.get("type") == "tool_result" and isinstance(b.get("content"), list)
        for ref in b["content"]
        if isinstance(ref, dict) and ref.get("type") == "tool_reference"
    ]


def _check_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise bad(f"{where}: String should match pattern '^[a-zA-Z0-9_-]+$' (got {value!r})", where)
    return value


def _check_signature(block: dict[str, Any], where: str) -> None:
    """A thinking block must come back with the signature issued for its text."""
    signature = block.get("signature")
    if not isinstance(signature, str):
        raise bad(f"{where}.thinking.signature: Field required", where)
    thinking = block.get("thinking")
    if not isinstance(thinking, str) or not hmac.compare_digest(signature, thinking_signature(thinking)):
        raise bad(f"{where}: Invalid `signature` in `thinking` block", where)


class AnthropicMessages(Provider):
    name = "anthropic"
    call_id_prefix = "toolu_"
    input_includes_cache = False  # input_tokens, cache_creation_input_tokens, cache_read_input_tokens add up

    def __init__(self) -> None:
        # ids of tool calls the model made after thinking: the API requires the final
        # assistant turn holding them to start with its thinking block.
        self._thoughtful: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def match(self, method: str, path: str) -> dict[str, str] | None:
        return {} if method == "POST" and path == "/v1/messages" else None

    # --- validation -------------------------------------------------------------------

    def parse(self, body: Any, req: Incoming, route: dict[str, str]) -> Conversation:
        if not isinstance(body, dict):
            raise bad("body: Input should be a valid dictionary")
        model = require(body, "model", str)
        if require(body, "max_tokens", int) < 1:
            raise bad("max_tokens: Input should be greater than or equal to 1", "max_tokens")
        messages = require(body, "messages", list)
        names = self._check_tools(body)
        self._check_tool_choice(body.get("tool_choice"), names)
        calls, results, last_user = self._check_messages(messages)
        self._check_thinking(messages, thinking_enabled(body))
        hidden = self._check_deferral(body, names)
        return Conversation(
            api=self.name,
            model=model,
            stream=body.get("stream") is True,
            tools=[n for n in names if n not in hidden],
            calls=calls,
            results=results,
            last_user_text=last_user,
            body=body,
            meta={"deferred": sorted(hidden)},
        )

    @staticmethod
    def _check_deferral(body: dict[str, Any], names: list[str]) -> set[str]:
        """Deferred tools the model cannot see yet: ``defer_loading`` ones no ``tool_reference``
        in the history loaded. Like the API: not every tool may be deferred, and a reference must
        name a tool of ``tools[]``."""
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t]
        deferred = {t["name"] for t in tools if t.get("defer_loading") is True}
        if deferred and len(deferred) == len(tools):
            raise bad("tools: At least one tool must not set `defer_loading`: every tool is deferred, so no "
                      "tool (not even a tool search tool) is available to the model.", "tools")
        referenced = [n for m in body["messages"] for n in _references(m)]
        for name in referenced:
            if name not in names:
                raise bad(f"messages: `tool_reference` names tool '{name}', which is not in `tools`.", "messages")
        return deferred - set(referenced)

    def native_refusal(self, body: dict[str, Any]) -> ApiError | None:
        for i, tool in enumerate(body.get("tools") or []):
            if isinstance(tool, dict) and "defer_loading" in tool:
                return bad(f"tools.{i}.custom.defer_loading: Extra inputs are not permitted", f"tools.{i}")
        return None

    @staticmethod
    def _check_tools(body: dict[str, Any]) -> list[str]:
        tools = body.get("tools")
        if tools is None:
            return []
        if not isinstance(tools, list):
            raise bad("tools: Input should be a valid list", "tools")
        names: list[str] = []
        for i, tool in enumerate(tools):
            where = f"tools.{i}"
            if not isinstance(tool, dict):
                raise bad(f"{where}: Input should be a valid dictionary", where)
            custom = tool.get("type") in (None, "custom")
            if custom or "name" in tool:
                if "name" not in tool:
                    raise bad(f"{where}.custom.name: Field required", where)
                check_tool_name(tool["name"], f"{where}.name")
                names.append(tool["name"])
            if custom:
                require(tool, "input_schema", dict, f"{where}.custom")
        check_unique(names)
        return names

    @staticmethod
    def _check_tool_choice(choice: Any, names: list[str]) -> None:
        if choice is None:
            return
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            raise bad("tool_choice: Input should be a valid tool choice", "tool_choice")
        if choice["type"] in ("any", "tool") and not names:
            raise bad(f"tool_choice: tool_choice.type '{choice['type']}' requires tools", "tool_choice")
        if choice["type"] == "tool":
            check_tool_name(choice.get("name"), "tool_choice.name")
            if choice["name"] not in names:
                raise bad(f"tool_choice: Tool '{choice['name']}' not found in tools", "tool_choice")

    @staticmethod
    def _check_messages(messages: list[Any]) -> tuple[list[ToolCall], list[ToolResult], str]:
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        names_by_id: dict[str, str] = {}
        last_user = ""
        parsed: list[tuple[str, list[dict[str, Any]]]] = []
        for i, msg in enumerate(messages):
            where = f"messages.{i}"
            if not isinstance(msg, dict):
                raise bad(f"{where}: Input should be a valid dictionary", where)
            role = msg.get("role")
            if role not in ("user", "assistant", "system"):
                raise bad(f"{where}.role: Input should be 'user' or 'assistant'", where)
            if "content" not in msg:
                raise bad(f"{where}.content: Field required", where)
            parsed.append((role, _blocks(msg["content"], where)))

        for i, (role, blocks) in enumerate(parsed):
            where = f"messages.{i}"
            if role == "assistant":
                uses = [(j, b) for j, b in enumerate(blocks) if b.get("type") == "tool_use"]
                for j, b in uses:
                    cid = _check_id(b.get("id"), f"{where}.content.{j}.id")
                    check_tool_name(b.get("name"), f"{where}.content.{j}.name")
                    calls.append(ToolCall(cid, b["name"], b.get("input", {})))
                    names_by_id[cid] = b["name"]
                if uses:
                    nxt_role, nxt_blocks = parsed[i + 1] if i + 1 < len(parsed) else ("", [])
                    answered = {b.get("tool_use_id") for b in nxt_blocks if b.get("type") == "tool_result"}
                    missing = [b["id"] for _, b in uses if nxt_role != "user" or b["id"] not in answered]
                    if missing:
                        raise bad(
                            f"{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                            f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` "
                            "block in the next message."
                        )
            elif role == "user":
                prev_role, prev_blocks = parsed[i - 1] if i > 0 else ("", [])
                offered_ids = (
                    {b.get("id") for b in prev_blocks if b.get("type") == "tool_use"}
                    if prev_role == "assistant"
                    else set()
                )
                other_seen = False
                texts = []
                for j, b in enumerate(blocks):
                    if b.get("type") != "tool_result":
                        other_seen = True
                        if b.get("type") == "text":
                            texts.append(str(b.get("text", "")))
                        continue
                    bwhere = f"{where}.content.{j}"
                    cid = _check_id(b.get("tool_use_id"), f"{bwhere}.tool_use_id")
                    if other_seen:
                        raise bad(
                            f"{bwhere}: `tool_result` blocks must come first in the user message: "
                            "put every `tool_result` before any other content."
                        )
                    if cid not in offered_ids:
                        raise bad(
                            f"{bwhere}: unexpected `tool_use_id` found in `tool_result` blocks: {cid}. Each "
                            "`tool_result` block must have a corresponding `tool_use` block in the previous message."
                        )
                    results.append(
                        ToolResult(cid, names_by_id.get(cid), _flatten(b.get("content")), bool(b.get("is_error")))
                    )
                text = "\n".join(texts)
                if text.strip():
                    last_user = text
        return calls, results, last_user

    def _check_thinking(self, messages: list[dict[str, Any]], enabled: bool) -> None:
        """Signed thinking blocks, and the final assistant turn starting with one (see module doc)."""
        assistant = [(i, _blocks(m["content"], f"messages.{i}")) for i, m in enumerate(messages)
                     if m.get("role") == "assistant"]
        for i, blocks in assistant:
            for j, b in enumerate(blocks):
                if b.get("type") == "thinking":
                    _check_signature(b, f"messages.{i}.content.{j}")
        if not enabled or not assistant:
            return
        i, blocks = assistant[-1]
        with self._lock:
            thoughtful = any(b.get("type") == "tool_use" and b.get("id") in self._thoughtful for b in blocks)
        if thoughtful and blocks[0].get("type") not in _THINKING_BLOCKS:
            raise bad(
                f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                f"`{blocks[0].get('type')}`. When `thinking` is enabled, a final `assistant` message must start "
                "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
                "recommend you include thinking blocks from previous turns. To avoid this requirement, disable "
                "`thinking`."
            )

    def prompt_segments(self, conv: Conversation) -> list[Segment]:
        return prompt_segments(conv.body)

    # --- rendering --------------------------------------------------------------------

    @staticmethod
    def _usage(reply: Reply, output_tokens: int | None = None) -> dict[str, int]:
        u = reply.usage
        return {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens if output_tokens is None else output_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
        }

    def _thinking(self, reply: Reply, conv: Conversation) -> dict[str, Any] | None:
        """The reply's signed thinking block, when the model thinks and the request enables it."""
        if not reply.thinking or not thinking_enabled(conv.body):
            return None
        with self._lock:
            for c in reply.calls:
                self._thoughtful[c.id] = None
            while len(self._thoughtful) > _THOUGHTFUL_LIMIT:
                self._thoughtful.popitem(last=False)
        return {"type": "thinking", "thinking": reply.thinking, "signature": thinking_signature(reply.thinking)}

    def render(self, reply: Reply, conv: Conversation) -> Response:
        headers = {"request-id": new_id("req_")}
        if not conv.stream:
            return JsonResponse(200, self.message(reply, conv), headers)
        return StreamResponse((sse(name, data) for name, data in self.events(reply, conv)), headers=headers)

    def message(self, reply: Reply, conv: Conversation) -> dict[str, Any]:
        """The complete (non-streamed) Message body for ``reply``."""
        thinking = self._thinking(reply, conv)
        content: list[dict[str, Any]] = [thinking] if thinking else []
        content += [{"type": "text", "text": reply.text}] if reply.text else []
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in reply.calls]
        return {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": conv.model,
            "content": content or [{"type": "text", "text": ""}],
            "stop_reason": "tool_use" if reply.stop_for_tools else "end_turn",
            "stop_sequence": None,
            "usage": self._usage(reply),
        }

    def events(self, reply: Reply, conv: Conversation) -> Iterator[tuple[str, dict[str, Any]]]:
        """The stream as (event name, data) pairs (Bedrock's InvokeModel stream wraps the same events)."""
        start: dict[str, Any] = {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": conv.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(reply, output_tokens=1),
        }
        yield "message_start", {"type": "message_start", "message": start}
        yield "ping", {"type": "ping"}
        index = 0
        thinking = self._thinking(reply, conv)
        if thinking:
            block: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            for frag in split_text(thinking["thinking"]):
                delta = {"type": "thinking_delta", "thinking": frag}
                yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            delta = {"type": "signature_delta", "signature": thinking["signature"]}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        if reply.text:
            block = {"type": "text", "text": ""}
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            for frag in split_text(reply.text):
                delta = {"type": "text_delta", "text": frag}
                yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        for c in reply.calls:
            block = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            for frag in [""] + split_json(c.arguments):
                delta = {"type": "input_json_delta", "partial_json": frag}
                yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
            index += 1
        stop_reason = "tool_use" if reply.stop_for_tools else "end_turn"
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": reply.usage.output_tokens},
            },
        )
        yield "message_stop", {"type": "message_stop"}

    def error_response(self, err: ApiError) -> JsonResponse:
        req_id = new_id("req_")
        body = {"type": "error", "error": {"type": err.kind, "message": err.message}, "request_id": req_id}
        return JsonResponse(err.status, body, {"request-id": req_id})

    def invalid_json(self) -> ApiError:
        return bad("There was an error parsing the body of your request: the body is not valid JSON.")
