"""Amazon Bedrock Runtime: Converse (``/model/{id}/converse``, ``/converse-stream``) and
InvokeModel with Claude bodies (``/model/{id}/invoke``, ``/invoke-with-response-stream``).

Streams use the binary AWS event-stream framing (both CRCs). Errors are ``{"message": ...}``
with the exception name in ``x-amzn-ErrorType``, as botocore expects.

Auth: ``Authorization: Bearer <Bedrock API key>`` (any non-empty key), or SigV4
(``AWS4-HMAC-SHA256``), which is *verified* with botocore against the body received and
the fake's test credentials (:data:`TEST_ACCESS_KEY_ID` / :data:`TEST_SECRET_ACCESS_KEY`,
overridable per instance or with ``FAKE_AWS_ACCESS_KEY_ID`` / ``FAKE_AWS_SECRET_ACCESS_KEY``).
A body changed after signing fails with 403 ``InvalidSignatureException``.

The signed ``Host``: behind mitmproxy's map-remote the fake receives ``Host: 127.0.0.1:PORT``,
while the client signed the real endpoint. The fake verifies against the ``Host`` it received
and, failing that, against the canonical Bedrock hosts of the region named in the credential
scope (``bedrock-runtime[-fips].{region}.amazonaws.com``) — the host the real service would
have seen. That needs no cooperation from the proxy or the harness, and it weakens nothing
that matters here: the payload hash, path, date and every other signed header are still
checked exactly.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import os
import re
import struct
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

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
)
from .anthropic import AnthropicMessages
from .anthropic import prompt_segments as anthropic_prompt_segments
from .base import Incoming, Provider, check_tool_name

TEST_ACCESS_KEY_ID = "AKIDTESTFAKE"
TOOL_SEARCH_BETA = "tool-search-tool-2025-10-19"
TEST_SECRET_ACCESS_KEY = "test-secret"
_ROUTE = re.compile(r"^/model/([^/]+)/(converse|converse-stream|invoke|invoke-with-response-stream)$")
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[a-z0-9-]+)/(?P<service>[a-z0-9-]+)"
    r"/aws4_request,\s*SignedHeaders=(?P<headers>[a-z0-9;._-]+),\s*Signature=(?P<sig>[0-9a-f]{64})$"
)
EXCEPTIONS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
_MAX_SKEW = 15 * 60  # seconds a SigV4 date may be off (AWS: "Signature expired")
_BLOCK_KEYS = frozenset(
    {
        "text",
        "image",
        "document",
        "video",
        "toolUse",
        "toolResult",
        "guardContent",
        "cachePoint",
        "reasoningContent",
        "citationsContent",
    }
)


def validation(message: str) -> ApiError:
    return ApiError(400, message, "ValidationException")


# --- AWS event-stream framing --------------------------------------------------------------


def event_frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers (type 7) and both CRC32s.

    Written here rather than imported from the addon so the fake does not share code with
    what it tests; botocore's decoder (which checks both CRCs) reads these in the rig tests.
    """
    head = b"".join(
        struct.pack(">B", len(k)) + k.encode() + struct.pack(">BH", 7, len(v.encode())) + v.encode()
        for k, v in headers.items()
    )
    prelude = struct.pack(">II", 16 + len(head) + len(payload), len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + head + payload
    return message + struct.pack(">I", zlib.crc32(message) & 0xFFFFFFFF)


def event(event_type: str, payload: Any) -> bytes:
    """A ``:message-type: event`` frame with a JSON payload."""
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return event_frame(headers, compact_json(payload).encode())


# --- shared auth, routing and errors -------------------------------------------------------


class _Bedrock(Provider):
    """Routing, Bearer / SigV4 auth and the error shape shared by Converse and InvokeModel."""

    operations: tuple[str, str]  # (plain, streaming) path suffixes
    input_includes_cache = False  # inputTokens leaves out cacheReadInputTokens / cacheWriteInputTokens

    def __init__(self, access_key: str | None = None, secret_key: str | None = None) -> None:
        self.access_key = access_key or os.environ.get("FAKE_AWS_ACCESS_KEY_ID", TEST_ACCESS_KEY_ID)
        self.secret_key = secret_key or os.environ.get("FAKE_AWS_SECRET_ACCESS_KEY", TEST_SECRET_ACCESS_KEY)

    def match(self, method: str, path: str) -> dict[str, str] | None:
        m = _ROUTE.match(path)
        if method != "POST" or not m or m[2] not in self.operations:
            return None
        return {"model": unquote(m[1]), "operation": m[2], "stream": "1" if m[2] == self.operations[1] else ""}

    def check_auth(self, req: Incoming) -> None:
        auth = req.headers.get("authorization") or ""
        if auth.startswith("Bearer "):
            if not auth[7:].strip():
                raise ApiError(403, "Authentication failed: Invalid API Key format", "AccessDeniedException")
            return
        if not auth:
            raise ApiError(403, "Missing Authentication Token", "MissingAuthenticationTokenException")
        self.verify_sigv4(req)

    def verify_sigv4(self, req: Incoming) -> None:
        """Recompute the SigV4 signature with botocore; 403 like AWS when it does not match."""
        m = _AUTH.match(req.headers.get("authorization", "").strip())
        if not m:
            raise ApiError(
                403,
                "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature'.",
                "IncompleteSignatureException",
            )
        if m["key"] != self.access_key:
            raise ApiError(403, "The security token included in the request is invalid.", "UnrecognizedClientException")
        if m["service"] != "bedrock":
            raise ApiError(
                403,
                f"Credential should be scoped to correct service: 'bedrock'. (got {m['service']!r})",
                "InvalidSignatureException",
            )
        amz_date = req.headers.get("x-amz-date") or ""
        try:
            signed_at = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
        except ValueError:
            raise ApiError(403, "Missing or malformed X-Amz-Date header.", "IncompleteSignatureException") from None
        if abs(time.time() - signed_at.timestamp()) > _MAX_SKEW:
            raise ApiError(
                403, f"Signature expired: {amz_date} is now earlier than allowed.", "InvalidSignatureException"
            )
        names = m["headers"].split(";")
        received = req.headers.get("host") or ""
        region = m["region"]
        hosts = dict.fromkeys(
            [received, f"bedrock-runtime.{region}.amazonaws.com", f"bedrock-runtime-fips.{region}.amazonaws.com"]
        )
        signer = SigV4Auth(Credentials(self.access_key, self.secret_key), "bedrock", region)
        for host in hosts:
            headers = {n: (host if n == "host" else req.headers.get(n, "")) for n in names}
            url = f"https://{host}{req.path}" + (f"?{req.raw_query}" if req.raw_query else "")
            aws = AWSRequest(method=req.method, url=url, headers=headers, data=req.body)
            aws.context["timestamp"] = amz_date
            canonical = signer.canonical_request(aws)
            if signer.signature(signer.string_to_sign(aws, canonical), aws) == m["sig"]:
                return
        raise ApiError(
            403,
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
            "Access Key and signing method. Consult the service documentation for details.",
            "InvalidSignatureException",
        )

    def error_response(self, err: ApiError) -> JsonResponse:
        kind = err.kind if err.kind.endswith("Exception") else EXCEPTIONS.get(err.status, "InternalServerException")
        headers = {
            "x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            "x-amzn-RequestId": new_id(""),
        }
        return JsonResponse(err.status, {"message": err.message}, headers)

    def invalid_json(self) -> ApiError:
        return validation("Malformed input request, please reformat your input and try again.")

    @staticmethod
    def _stream(frames: Iterable[bytes], extra: dict[str, str] | None = None) -> StreamResponse:
        headers = {"x-amzn-RequestId": new_id(""), **(extra or {})}
        return StreamResponse(frames, headers=headers, content_type="application/vnd.amazon.eventstream")


# --- Converse ------------------------------------------------------------------------------


class BedrockConverse(_Bedrock):
    name = "bedrock-converse"
    call_id_prefix = "tooluse_"
    operations = ("converse", "converse-stream")

    def parse(self, body: Any, req: Incoming, route: dict[str, str]) -> Conversation:
        if not isinstance(body, dict):
            raise self.invalid_json()
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise validation(
                "1 validation error detected: Value null at 'messages' failed to satisfy constraint: "
                "Member must not be null"
            )
        names = self._check_tools(body.get("toolConfig"))
        calls, results, last_user = self._check_messages(messages, body.get("toolConfig") is not None)
        return Conversation(
            api=self.name,
            model=route["model"],
            stream=bool(route["stream"]),
            tools=names,
            calls=calls,
            results=results,
            last_user_text=last_user,
            body=body,
        )

    @staticmethod
    def _check_tools(config: Any) -> list[str]:
        if config is None:
            return []
        tools = config.get("tools") if isinstance(config, dict) else None
        if not isinstance(tools, list) or not tools:
            raise validation(
                "1 validation error detected: Value at 'toolConfig.tools' failed to satisfy constraint: "
                "Member must have length greater than or equal to 1"
            )
        names: list[str] = []
        for i, tool in enumerate(tools):
            where = f"toolConfig.tools.{i}"
            if not isinstance(tool, dict) or len(tool) != 1:
                raise validation(f"{where}: a Tool must set exactly one of toolSpec, cachePoint, systemTool.")
            spec = tool.get("toolSpec")
            if spec is None:
                continue  # cachePoint / systemTool
            check_tool_name(spec.get("name"), f"{where}.toolSpec.name")
            schema = spec.get("inputSchema")
            if not isinstance(schema, dict) or not isinstance(schema.get("json"), dict):
                raise validation(f"{where}.toolSpec.inputSchema: must set json to a JSON schema object.")
            if spec["name"] in names:
                raise validation(f"The model returned the following errors: {where}: Tool names must be unique.")
            names.append(spec["name"])
        choice = config.get("toolChoice")
        if isinstance(choice, dict) and "tool" in choice:
            wanted = (choice["tool"] or {}).get("name")
            if wanted not in names:
                raise validation(
                    f"The model returned the following errors: tool_choice: Tool '{wanted}' not found in tools."
                )
        return names

    @staticmethod
    def _check_messages(messages: list[Any], has_tools: bool) -> tuple[list[ToolCall], list[ToolResult], str]:
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        names: dict[str, str] = {}
        last_user = ""
        prev_uses: list[str] = []
        for i, msg in enumerate(messages):
            where = f"messages.{i}"
            role = msg.get("role") if isinstance(msg, dict) else None
            content = msg.get("content") if isinstance(msg, dict) else None
            if role not in ("user", "assistant") or not isinstance(content, list):
                raise validation(f"{where}: a message needs role user|assistant and a content list.")
            if i == 0 and role != "user":
                raise validation(
                    "A conversation must start with a user message. Try again with a conversation that "
                    "starts with a user message."
                )
            if i > 0 and messages[i - 1].get("role") == role:
                raise validation(
                    "A conversation must alternate between user and assistant roles. Make sure the "
                    "conversation alternates between user and assistant roles and try again."
                )
            for j, block in enumerate(content):
                if not isinstance(block, dict) or len(block) != 1 or next(iter(block)) not in _BLOCK_KEYS:
                    raise validation(f"{where}.content.{j}: a ContentBlock must set exactly one member.")
                if ("toolUse" in block or "toolResult" in block) and not has_tools:
                    raise validation(
                        "The toolConfig field must be defined when using toolUse and toolResult content blocks."
                    )
            uses = [b["toolUse"] for b in content if "toolUse" in b]
            answered = [b["toolResult"] for b in content if "toolResult" in b]
            if role == "user":
                ids = {r.get("toolUseId") for r in answered}
                missing = [u for u in prev_uses if u not in ids]
                if missing:
                    raise validation(
                        f"Expected toolResult blocks at {where}.content for the following Ids: {', '.join(missing)}"
                    )
                extra = [r.get("toolUseId") for r in answered if r.get("toolUseId") not in prev_uses]
                if extra:
                    raise validation(
                        f"The number of toolResult blocks at {where}.content exceeds the number of "
                        f"toolUse blocks of previous turn (unexpected {', '.join(map(str, extra))})."
                    )
                for r in answered:
                    text = "\n".join(
                        c["text"] if "text" in c else compact_json(c.get("json", c)) for c in r.get("content") or []
                    )
                    results.append(
                        ToolResult(r["toolUseId"], names.get(r["toolUseId"]), text, r.get("status") == "error")
                    )
                texts = [b["text"] for b in content if "text" in b]
                if any(t.strip() for t in texts):
                    last_user = "\n".join(texts)
                prev_uses = []
            else:
                for u in uses:
                    check_tool_name(u.get("name"), f"{where}.content.toolUse.name")
                    calls.append(ToolCall(str(u.get("toolUseId")), u["name"], u.get("input", {})))
                    names[str(u.get("toolUseId"))] = u["name"]
                prev_uses = [str(u.get("toolUseId")) for u in uses]
        if prev_uses:
            raise validation(
                f"Expected toolResult blocks at messages.{len(messages)}.content for the following Ids: "
                f"{', '.join(prev_uses)}"
            )
        return calls, results, last_user

    def prompt_segments(self, conv: Conversation) -> list[Segment]:
        """Tools, system, messages: Claude's order, which Converse keeps (a ``cachePoint`` in
        ``toolConfig`` caches the tools alone, one in ``system`` the tools and the system)."""
        body = conv.body
        tools = [t for t in (body.get("toolConfig") or {}).get("tools") or [] if "cachePoint" not in t]
        segments: list[Segment] = [(f"tool:{(t.get('toolSpec') or t).get('name', next(iter(t)))}", t) for t in tools]
        if body.get("system"):
            segments.append(("system", body["system"]))
        return segments + [(f"message:{i}", m) for i, m in enumerate(body["messages"])]

    @staticmethod
    def _usage(reply: Reply) -> dict[str, int]:
        u = reply.usage
        usage = {
            "inputTokens": u.input_tokens,
            "outputTokens": u.output_tokens,
            "totalTokens": u.input_tokens + u.output_tokens,
        }
        if u.cache_read_input_tokens or u.cache_creation_input_tokens:
            usage["cacheReadInputTokens"] = u.cache_read_input_tokens
            usage["cacheWriteInputTokens"] = u.cache_creation_input_tokens
        return usage

    def render(self, reply: Reply, conv: Conversation) -> Response:
        stop = "tool_use" if reply.stop_for_tools else "end_turn"
        if not conv.stream:
            content: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
            content += [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.arguments}} for c in reply.calls]
            body = {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": stop,
                "usage": self._usage(reply),
                "metrics": {"latencyMs": 42},
            }
            return JsonResponse(200, body, {"x-amzn-RequestId": new_id("")})
        return self._stream(self._events(reply, stop))

    def _events(self, reply: Reply, stop: str) -> Iterator[bytes]:
        yield event("messageStart", {"role": "assistant"})
        index = 0
        if reply.text:
            for frag in split_text(reply.text):
                yield event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": frag}})
            yield event("contentBlockStop", {"contentBlockIndex": index})
            index += 1
        for c in reply.calls:
            start = {"toolUse": {"toolUseId": c.id, "name": c.name}}
            yield event("contentBlockStart", {"contentBlockIndex": index, "start": start})
            for frag in split_raw(compact_json(c.arguments)):
                yield event("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": frag}}})
            yield event("contentBlockStop", {"contentBlockIndex": index})
            index += 1
        yield event("messageStop", {"stopReason": stop})
        yield event("metadata", {"usage": self._usage(reply), "metrics": {"latencyMs": 42}})


# --- InvokeModel (Claude bodies) -----------------------------------------------------------


class BedrockInvoke(_Bedrock):
    name = "bedrock-invoke"
    call_id_prefix = "toolu_bdrk_"
    operations = ("invoke", "invoke-with-response-stream")

    def __init__(self, access_key: str | None = None, secret_key: str | None = None) -> None:
        super().__init__(access_key, secret_key)
        self.messages = AnthropicMessages()

    def parse(self, body: Any, req: Incoming, route: dict[str, str]) -> Conversation:
        if not isinstance(body, dict):
            raise self.invalid_json()
        if "anthropic_version" not in body:
            raise validation(
                "Malformed input request: #: required key [anthropic_version] not found, please "
                "reformat your input and try again."
            )
        for key in ("model", "stream"):
            if key in body:
                raise validation(
                    f"Malformed input request: #: extraneous key [{key}] is not permitted, please "
                    "reformat your input and try again."
                )
        try:
            conv = self.messages.parse({**body, "model": route["model"]}, req, route)
        except ApiError as err:  # Anthropic's own validation, relayed as Bedrock relays it
            raise validation(f"The model returned the following errors: {err.message}") from None
        deferring = any(isinstance(t, dict) and t.get("defer_loading") for t in body.get("tools") or [])
        if deferring and TOOL_SEARCH_BETA not in (body.get("anthropic_beta") or []):
            # Bedrock gates deferred tools (and tool_reference) behind the tool-search beta.
            raise validation("The model returned the following errors: tools: `defer_loading` requires the "
                             f"beta {TOOL_SEARCH_BETA} (anthropic_beta)")
        return dataclasses.replace(conv, api=self.name, stream=bool(route["stream"]), body=body)

    def prompt_segments(self, conv: Conversation) -> list[Segment]:
        return anthropic_prompt_segments(conv.body)

    def native_refusal(self, body: dict[str, Any]) -> ApiError | None:
        err = self.messages.native_refusal(body)
        return None if err is None else validation(f"The model returned the following errors: {err.message}")

    def render(self, reply: Reply, conv: Conversation) -> Response:
        metrics = {
            "inputTokenCount": reply.usage.input_tokens,
            "outputTokenCount": reply.usage.output_tokens,
            "invocationLatency": 42,
            "firstByteLatency": 10,
        }
        if not conv.stream:
            headers = {
                "x-amzn-RequestId": new_id(""),
                "X-Amzn-Bedrock-Input-Token-Count": str(metrics["inputTokenCount"]),
                "X-Amzn-Bedrock-Output-Token-Count": str(metrics["outputTokenCount"]),
                "X-Amzn-Bedrock-Invocation-Latency": "42",
            }
            return JsonResponse(200, self.messages.message(reply, conv), headers)

        def frames() -> Iterator[bytes]:
            for name, data in self.messages.events(reply, conv):
                if name == "ping":
                    continue
                if name == "message_stop":
                    data = {**data, "amazon-bedrock-invocationMetrics": metrics}
                yield event("chunk", {"bytes": base64.b64encode(json.dumps(data).encode()).decode()})

        return self._stream(frames(), {"X-Amzn-Bedrock-Content-Type": "application/json"})
