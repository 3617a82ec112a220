"""Gemini API: ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``.

Streaming answers are SSE of whole ``GenerateContentResponse`` objects with ``?alt=sse``,
else one JSON array written element by element. Auth: ``x-goog-api-key`` or ``?key=``.

Function-call parts carry a ``thoughtSignature`` (an HMAC over the call, so it survives a
restart of the fake). Like Gemini 3, a request to a ``gemini-3*`` model is rejected when a
model turn of the current turn (everything after the last user text) has function calls
whose first part lost its signature, or carries a signature the fake did not issue for it.

A reply that thinks starts with a thought summary part (``{"text": ..., "thought": true}``)
when the request asks for thoughts (``generationConfig.thinkingConfig.includeThoughts``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

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
    split_text,
    sse,
)
from .base import Incoming, Provider

_ROUTE = re.compile(r"^/(v1beta|v1|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$")
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$")
_BUILTIN_TOOLS = frozenset(
    {
        "googleSearch",
        "googleSearchRetrieval",
        "codeExecution",
        "urlContext",
        "retrieval",
        "computerUse",
        "fileSearch",
        "googleMaps",
        "enterpriseWebSearch",
        "mcpServers",
    }
)
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_SIGNING_KEY = b"fakeprovider-gemini-thought-signature"
#: Signatures Google documents as accepted in place of a real one (for histories built by hand).
DUMMY_SIGNATURES = frozenset({"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"})


def invalid(message: str) -> ApiError:
    """A Gemini 400 INVALID_ARGUMENT."""
    return ApiError(400, message, "INVALID_ARGUMENT")


def thought_signature(name: str, args: Any) -> str:
    """The signature the fake attaches to (and expects back on) a function-call part (base64 bytes)."""
    digest = hmac.new(_SIGNING_KEY, f"{name}\0{compact_json(args)}".encode(), hashlib.sha256).digest()
    return base64.b64encode(b"fk-sig:" + digest[:24]).decode()


def signature_matches(sig: str, name: str, args: Any) -> bool:
    """Whether ``sig`` is the fake's signature for this call (bytes fields may come back url-safe encoded)."""
    try:
        raw = base64.b64decode(sig.replace("-", "+").replace("_", "/") + "=" * (-len(sig) % 4))
    except ValueError:
        return False
    return hmac.compare_digest(raw, base64.b64decode(thought_signature(name, args)))


def requires_signatures(model: str) -> bool:
    """Gemini 3 models validate thought signatures on function calls; 2.x do not."""
    return model.startswith("gemini-3")


def includes_thoughts(body: dict[str, Any]) -> bool:
    """Whether the request asks for thought summaries."""
    config = body.get("generationConfig") or body.get("generation_config")
    if not isinstance(config, dict):
        return False
    thinking = config.get("thinkingConfig") or config.get("thinking_config")
    return isinstance(thinking, dict) and bool(thinking.get("includeThoughts") or thinking.get("include_thoughts"))


def _part_text(part: dict[str, Any]) -> str | None:
    text = part.get("text")
    return text if isinstance(text, str) and not part.get("thought") else None


class Gemini(Provider):
    name = "gemini"
    call_id_prefix = "fc_"

    def match(self, method: str, path: str) -> dict[str, str] | None:
        m = _ROUTE.match(unquote(path)) if method == "POST" else None
        return {"version": m[1], "model": m[2], "method": m[3]} if m else None

    def authenticated(self, req: Incoming) -> bool:
        return bool(req.headers.get("x-goog-api-key") or (req.query.get("key") or [""])[0])

    def check_auth(self, req: Incoming) -> None:
        if not self.authenticated(req):
            raise ApiError(
                403,
                "Method doesn't allow unregistered callers (callers without established identity). "
                "Please use API Key or other form of API consumer identity to call this API.",
                "PERMISSION_DENIED",
            )

    # --- validation -------------------------------------------------------------------

    def parse(self, body: Any, req: Incoming, route: dict[str, str]) -> Conversation:
        if not isinstance(body, dict):
            raise invalid("Invalid JSON payload received. Expected an object.")
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise invalid("* GenerateContentRequest.contents: contents is not specified\n")
        names = self._check_tools(body.get("tools"))
        self._check_tool_config(body.get("toolConfig"), names)
        calls, results, last_user = self._check_contents(contents, route["model"])
        stream = route["method"] == "streamGenerateContent"
        return Conversation(
            api=self.name,
            model=route["model"],
            stream=stream,
            tools=names,
            calls=calls,
            results=results,
            last_user_text=last_user,
            body=body,
            meta={"sse": (req.query.get("alt") or [""])[0] == "sse"},
        )

    @staticmethod
    def _check_tools(tools: Any) -> list[str]:
        if tools is None:
            return []
        if not isinstance(tools, list):
            raise invalid("Invalid value at 'tools': expected a list of Tool objects.")
        names: list[str] = []
        for i, tool in enumerate(tools):
            where = f"tools[{i}]"
            if not isinstance(tool, dict) or not tool:
                raise invalid(f"* GenerateContentRequest.{where}: a Tool needs one of its fields set\n")
            unknown = set(tool) - _BUILTIN_TOOLS - {"functionDeclarations", "function_declarations"}
            if unknown:
                raise invalid(f"Invalid JSON payload received. Unknown name \"{min(unknown)}\" at '{where}'.")
            decls = tool.get("functionDeclarations", tool.get("function_declarations", []))
            if not isinstance(decls, list):
                raise invalid(f"Invalid value at '{where}.function_declarations': expected a list.")
            for j, decl in enumerate(decls):
                dwhere = f"{where}.function_declarations[{j}]"
                if not isinstance(decl, dict) or not isinstance(decl.get("name"), str):
                    raise invalid(f"* GenerateContentRequest.{dwhere}.name: Name cannot be empty.\n")
                if not _NAME.match(decl["name"]):
                    raise invalid(
                        f"* GenerateContentRequest.{dwhere}.name: Invalid function name. Must start with a letter or "
                        "an underscore. Must be a-z, A-Z, 0-9, or contain underscores, dots, colons and dashes, "
                        "with a maximum length of 128.\n"
                    )
                if "parameters" in decl and "parametersJsonSchema" in decl:
                    raise invalid(
                        f"* GenerateContentRequest.{dwhere}: parameters and parameters_json_schema cannot both be set.\n"
                    )
                if decl["name"] in names:
                    raise invalid(f"Duplicate function declaration found: {decl['name']}")
                names.append(decl["name"])
        return names

    @staticmethod
    def _check_tool_config(config: Any, names: list[str]) -> None:
        fcc = (config or {}).get("functionCallingConfig") if isinstance(config, dict) else None
        if not isinstance(fcc, dict):
            return
        mode = fcc.get("mode", "AUTO")
        if mode not in ("AUTO", "ANY", "NONE", "VALIDATED", "MODE_UNSPECIFIED"):
            raise invalid(f"Invalid value at 'tool_config.function_calling_config.mode' ({mode!r})")
        allowed = fcc.get("allowedFunctionNames")
        if allowed is None:
            return
        if mode not in ("ANY", "VALIDATED"):
            raise invalid(
                "* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: "
                "allowed_function_names may only be set when mode is ANY or VALIDATED.\n"
            )
        for i, n in enumerate(allowed if isinstance(allowed, list) else [allowed]):
            if n not in names:
                raise invalid(
                    f"* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names[{i}]: "
                    f"function {n!r} is not declared in tools.\n"
                )

    @staticmethod
    def _check_contents(contents: list[Any], model: str) -> tuple[list[ToolCall], list[ToolResult], str]:
        calls: list[ToolCall] = []
        results: list[ToolResult] = []
        last_user = ""
        turn_start = 0  # index of the last user content with text: the "current turn" starts there
        for i, content in enumerate(contents):
            where = f"contents[{i}]"
            if not isinstance(content, dict) or not isinstance(content.get("parts"), list) or not content["parts"]:
                raise invalid(f"* GenerateContentRequest.{where}.parts: contents.parts must not be empty.\n")
            role = content.get("role", "user")
            if role not in ("user", "model", "function", ""):
                raise invalid(f"Please use a valid role: user, model. (got {role!r} at {where})")
            parts = content["parts"]
            if role == "model":
                fcs = [p["functionCall"] for p in parts if isinstance(p, dict) and "functionCall" in p]
                for fc in fcs:
                    calls.append(ToolCall(str(fc.get("id") or ""), str(fc.get("name")), fc.get("args", {})))
                if fcs:
                    prev_role = contents[i - 1].get("role", "user") if i > 0 else ""
                    if prev_role not in ("user", "function", ""):
                        raise invalid(
                            "Please ensure that function call turn comes immediately after a user turn or after a "
                            "function response turn."
                        )
                    nxt = contents[i + 1] if i + 1 < len(contents) else None
                    answered = [p for p in (nxt or {}).get("parts") or [] if "functionResponse" in p]
                    if nxt is not None and len(answered) != len(fcs):
                        raise invalid(
                            "Please ensure that the number of function response parts is equal to the number of "
                            "function call parts of the function call turn."
                        )
                    # Gemini 3 checks each response names a function the turn called (a 400
                    # INVALID_ARGUMENT otherwise; seen on Vertex gemini-3.x with signatures).
                    named = sorted(str(p["functionResponse"].get("name")) for p in answered)
                    if nxt is not None and named != sorted(str(fc.get("name")) for fc in fcs):
                        raise invalid(
                            f"* GenerateContentRequest.contents[{i + 1}]: function response names {named} do not "
                            f"match the function calls of contents[{i}]."
                        )
            else:
                texts = [t for p in parts if isinstance(p, dict) and (t := _part_text(p)) is not None]
                for p in parts:
                    fr = p.get("functionResponse") if isinstance(p, dict) else None
                    if isinstance(fr, dict):
                        response = fr.get("response", {})
                        text = compact_json(response) if not isinstance(response, str) else response
                        results.append(ToolResult(str(fr.get("id") or ""), fr.get("name"), text))
                if any(t.strip() for t in texts):
                    last_user = "\n".join(texts)
                    turn_start = i
        if requires_signatures(model):
            Gemini._check_signatures(contents[turn_start:], turn_start)
        return calls, results, last_user

    @staticmethod
    def _check_signatures(contents: list[dict[str, Any]], offset: int) -> None:
        """Gemini 3: the first function-call part of each model step of the current turn is signed."""
        for i, content in enumerate(contents, offset):
            if content.get("role") != "model":
                continue
            fc_parts = [(j, p) for j, p in enumerate(content["parts"]) if isinstance(p, dict) and "functionCall" in p]
            if not fc_parts:
                continue
            j, first = fc_parts[0]
            fc = first["functionCall"]
            sig = first.get("thoughtSignature") or first.get("thought_signature")
            if not sig:
                raise invalid(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools "
                    "to work correctly, and missing thought_signature may lead to degraded model performance. "
                    f"Additional data, function call `default_api:{fc.get('name')}` , position {i + 1}. Please refer "
                    "to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
                )
            if sig not in DUMMY_SIGNATURES and not signature_matches(sig, str(fc.get("name")), fc.get("args", {})):
                raise invalid(f"Corrupted thought signature. (contents[{i}].parts[{j}])")

    def prompt_segments(self, conv: Conversation) -> list[Segment]:
        """System instruction, tools, then contents. Google does not publish the order of its
        prompt; this one is an assumption (declarations beside the system turn, as in Gemma's
        chat template), and moves nothing that matters: a changed tool still misses the cache
        for the whole conversation behind it."""
        body = conv.body
        system = body.get("systemInstruction", body.get("system_instruction"))
        segments: list[Segment] = [("system", system)] if system is not None else []
        for entry in body.get("tools") or []:
            decls = entry.get("functionDeclarations", entry.get("function_declarations")) or []
            segments += [(f"tool:{d['name']}", d) for d in decls]
            builtin = {k: v for k, v in entry.items() if k not in ("functionDeclarations", "function_declarations")}
            segments += [(f"tool:{k}", {k: v}) for k, v in builtin.items()]
        return segments + [(f"content:{i}", c) for i, c in enumerate(body["contents"])]

    # --- rendering --------------------------------------------------------------------

    @staticmethod
    def _usage(reply: Reply) -> dict[str, Any]:
        u = reply.usage
        usage: dict[str, Any] = {
            "promptTokenCount": u.input_tokens,
            "candidatesTokenCount": u.output_tokens,
            "totalTokenCount": u.input_tokens + u.output_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": u.input_tokens}],
        }
        if u.cache_read_input_tokens:
            usage["cachedContentTokenCount"] = u.cache_read_input_tokens
        return usage

    @staticmethod
    def _call_part(call: ToolCall) -> dict[str, Any]:
        return {
            "functionCall": {"name": call.name, "args": call.arguments},
            "thoughtSignature": thought_signature(call.name, call.arguments),
        }

    @staticmethod
    def _chunk(
        conv: Conversation, resp_id: str, parts: list[dict[str, Any]], usage: dict[str, Any], finish: bool
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = "STOP"  # STOP even when the model calls functions
        return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": conv.model, "responseId": resp_id}

    @staticmethod
    def _thought_parts(reply: Reply, conv: Conversation) -> list[dict[str, Any]]:
        return [{"text": reply.thinking, "thought": True}] if reply.thinking and includes_thoughts(conv.body) else []

    def render(self, reply: Reply, conv: Conversation) -> Response:
        resp_id = new_id("")
        usage = self._usage(reply)
        if not conv.stream:
            parts = self._thought_parts(reply, conv)
            parts += [{"text": reply.text}] if reply.text or not reply.calls else []
            parts += [self._call_part(c) for c in reply.calls]
            return JsonResponse(200, self._chunk(conv, resp_id, parts, usage, True))
        chunks = list(self._stream_chunks(reply, conv, resp_id, usage))
        if conv.meta.get("sse"):
            return StreamResponse((sse(None, c) for c in chunks), content_type="text/event-stream")
        return StreamResponse(self._json_array(chunks), content_type="application/json; charset=UTF-8")

    def _stream_chunks(
        self, reply: Reply, conv: Conversation, resp_id: str, usage: dict[str, Any]
    ) -> Iterator[dict[str, Any]]:
        """Text in fragments, each function call whole; the last chunk has finishReason and full usage."""
        prompt_only = {k: v for k, v in usage.items() if k != "candidatesTokenCount"}
        parts = [[{"text": frag}] for frag in split_text(reply.text)] + [[self._call_part(c)] for c in reply.calls]
        parts = [[p] for p in self._thought_parts(reply, conv)] + (parts or [[{"text": ""}]])
        for i, p in enumerate(parts):
            last = i == len(parts) - 1
            yield self._chunk(conv, resp_id, p, usage if last else prompt_only, last)

    @staticmethod
    def _json_array(chunks: list[dict[str, Any]]) -> Iterator[bytes]:
        """The non-SSE stream: a JSON array whose elements arrive one by one."""
        for i, chunk in enumerate(chunks):
            yield (b"[" if i == 0 else b"\r\n,") + compact_json(chunk).encode()
        yield b"]"

    def error_response(self, err: ApiError) -> JsonResponse:
        status = err.kind if err.kind in _STATUS.values() else _STATUS.get(err.status, "UNKNOWN")
        return JsonResponse(err.status, {"error": {"code": err.status, "message": err.message, "status": status}})

    def invalid_json(self) -> ApiError:
        return invalid("Invalid JSON payload received. Unexpected token.")
