"""Amazon Bedrock: Converse (``/model/{id}/converse``, ``/converse-stream``) and InvokeModel with
Claude bodies (``/model/{id}/invoke``, ``/invoke-with-response-stream``).

Whether the answer streams is in the path, not the body, so adapters are made per request
form. Streams are AWS event-stream frames (``application/vnd.amazon.eventstream``). Requests
are SigV4-signed over the body: whoever sends a changed body must re-sign it (``sigv4``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from tooldisco.core import jsonspan
from tooldisco.core.bytecache import ADMIT_WHEN_FULL, MiB, derived_size, memoize
from tooldisco.apis.base import Failure, Stitcher, error_kind
from tooldisco.apis.bedrock.stream import METRICS
from tooldisco.apis.streaming import as_dict, as_list
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.core.types import RequestView, TokenUsage, Tool, ToolCall, ToolResult, Unsupported
from tooldisco.apis.base import StreamDecoder
from tooldisco.apis.text import History, user_text
from tooldisco.apis.defaults import AdapterDefaults
from tooldisco.apis.schema import params_of, query_schema
from tooldisco.apis.catalogs import catalog_at, decoded, load_request, named, tool_spans
from tooldisco.apis.splice import append_array, replace_array
from tooldisco.apis.usage import sum_usage, tokens, usage_object
from tooldisco.apis.bedrock.stitch import EXCEPTIONS
from tooldisco.apis.bedrock.stream import ConverseStreamDecoder
from tooldisco.apis.bedrock.stream import encode_converse
from tooldisco.apis.bedrock.stitch import ConverseStitcher
from tooldisco.apis.bedrock.stream import InvokeStreamDecoder
from tooldisco.apis.bedrock.stream import encode_invoke
from tooldisco.apis.bedrock.stitch_invoke import InvokeStitcher

_TOOLS = ["toolConfig", "tools"]
# Bedrock gates Claude's deferred tools and tool references behind this beta, named in the body.
TOOL_SEARCH_BETA = "tool-search-tool-2025-10-19"


@memoize(16 * MiB)
def _is_spec(raw: str) -> bool:
    """A ``toolSpec`` entry; the others (``cachePoint``, ``systemTool``) are not ours."""
    d = json.loads(raw)
    return isinstance(d, dict) and "toolSpec" in d


@memoize(16 * MiB, sizeof=derived_size, admit_when_full=ADMIT_WHEN_FULL)  # a catalog too big for it still hits
def parse_tool(raw: str) -> Tool:
    """One ``{toolSpec:{name, description, inputSchema:{json}}}`` entry."""
    d = json.loads(raw)
    spec = d.get("toolSpec") if isinstance(d, dict) else None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise Unsupported("a toolSpec has no name")
    desc = spec.get("description")
    schema = spec.get("inputSchema")
    params = params_of(schema.get("json") if isinstance(schema, dict) else None)
    return Tool(spec["name"], raw, desc if isinstance(desc, str) else "", params)


def _specs(raws: Sequence[str], values: Sequence[Any]) -> tuple[Tool, ...]:
    """A catalog's tools: its ``toolSpec`` entries (``cachePoint`` and the like are not tools)."""
    return tuple(parse_tool(raw) for raw in raws if _is_spec(raw))


def place_structural(original: Sequence[str], raws: Sequence[str]) -> list[str]:
    """The forwarded ``toolConfig.tools``: ``raws`` (toolSpecs) with the client's other entries placed.

    A cachePoint caches the prefix before it. One that ends the client's list ("cache all my
    tools") still ends ours, after the phantom and found tools, so it keeps covering the whole
    tool block; one between the client's tools (a stable group before a volatile one) goes
    right after the last forwarded tool that preceded it, so it covers the same group.
    """
    kept = set(raws)
    after: dict[str | None, list[str]] = {}  # anchor toolSpec (None: the head) -> entries after it
    tail: list[str] = []
    anchor: str | None = None
    last_spec = max((i for i, raw in enumerate(original) if _is_spec(raw)), default=-1)
    for i, raw in enumerate(original):
        if _is_spec(raw):
            anchor = raw if raw in kept else anchor
        elif i < last_spec:
            after.setdefault(anchor, []).append(raw)
        else:
            tail.append(raw)
    out = list(after.get(None, []))
    for raw in raws:
        out.append(raw)
        out += after.get(raw, [])
    return out + tail


@dataclass(frozen=True)
class ConverseAdapter(AdapterDefaults):
    stream: bool = False  # /converse-stream
    api = "bedrock_converse"  # not a field: the same for both forms
    results_member = "content"

    def parse_tool(self, raw: str) -> Tool:
        return parse_tool(raw)

    def parse(self, body: str) -> RequestView:
        data, catalog = load_request(body, self.api, _specs, key=_TOOLS[0], history="messages", inner=(_TOOLS[1],))
        messages = data.get("messages")
        if not isinstance(messages, list):
            raise Unsupported("no messages array")
        history = History()
        for m in messages:
            if not isinstance(m, dict):
                continue
            blocks = [b for b in as_list(m.get("content")) if isinstance(b, dict)]
            if m.get("role") == "user":
                history.user(user_text(b.get("text") for b in blocks))
                results = [b["toolResult"] for b in blocks if isinstance(b.get("toolResult"), dict)]
                history.answered |= {str(r.get("toolUseId")) for r in results}
            elif m.get("role") == "assistant":
                uses = [b["toolUse"] for b in blocks if isinstance(b.get("toolUse"), dict)]
                history.calls |= {str(u.get("toolUseId")): str(u.get("name")) for u in uses}
        config = data.get("toolConfig")
        choice = config.get("toolChoice") if isinstance(config, dict) else None
        tool = choice.get("tool") if isinstance(choice, dict) else None
        forced = tool.get("name") if isinstance(tool, dict) else None
        return history.view(catalog, [forced] if isinstance(forced, str) else [], self.stream)  # toolChoice {tool:{name}}

    def with_tools(self, body: str, raws: Sequence[str]) -> str:
        catalog = catalog_at(body, _TOOLS)
        original = catalog.raws if catalog is not None else tuple(tool_spans(body, _TOOLS))
        # Most catalogs are toolSpecs alone: nothing of the client's to place (once per catalog).
        structural = (catalog.derived("structural", lambda: not all(map(_is_spec, original))) if catalog is not None
                      else not all(map(_is_spec, original)))
        tools = place_structural(original, raws) if structural else list(raws)
        if jsonspan.find(body, ["toolConfig"]) is None:
            config = '{"tools":' + jsonspan.array_text(tools) + "}"
            return jsonspan.set_member(body, jsonspan.root(body), "toolConfig", config)
        return replace_array(body, _TOOLS, tools)

    def phantom_tool(self, name: str, description: str) -> str:
        return jsonspan.dumps(
            {
                "toolSpec": {
                    "name": name,
                    "description": description,
                    "inputSchema": {"json": query_schema()},
                }
            }
        )

    def calls(self, message: dict[str, Any]) -> list[ToolCall]:
        out = []
        for block in _content(message):
            use = block.get("toolUse") if isinstance(block, dict) else None
            if isinstance(use, dict):
                out.append(ToolCall(str(use.get("toolUseId")), str(use.get("name")), use.get("input")))
        return out

    def append_round(
        self, body: str, message: dict[str, Any], results: Sequence[ToolResult], add_raws: Sequence[str]
    ) -> str:
        # The assistant message goes back as it came (signed reasoningContent must stay intact);
        # every toolUse needs a toolResult with its toolUseId in the next user message. No
        # ``status``: Bedrock documents it for some model families only; the text says it all.
        msg = message["output"]["message"]
        assistant = {"role": msg.get("role", "assistant"), "content": msg.get("content") or []}
        blocks = [{"toolResult": {"toolUseId": r.call.id, "content": [{"text": r.content}]}} for r in results]
        user = {"role": "user", "content": blocks}
        body = append_array(body, ["messages"], [jsonspan.dumps(assistant), jsonspan.dumps(user)])
        if not add_raws:
            return body
        # Found tools go after the forwarded ones, before a trailing cachePoint, as with_tools puts them.
        current = tool_spans(body, _TOOLS)
        specs = [raw for raw in current if _is_spec(raw)]
        return replace_array(body, _TOOLS, place_structural(current, [*specs, *add_raws]))

    def strip(self, message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
        hidden = set(names)
        out = dict(message)
        output = dict(as_dict(message.get("output")))
        msg = dict(as_dict(output.get("message")))
        msg["content"] = [
            b
            for b in _content(message)
            if not (isinstance(b, dict) and named(as_dict(b.get("toolUse")).get("name"), hidden))
        ]
        output["message"] = msg
        out["output"] = output
        if out.get("stopReason") == "tool_use" and not self.calls(out):
            out["stopReason"] = "end_turn"
        return out

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Content in order; usage and metrics (latencyMs: the client waited for every round) summed."""
        out = dict(rounds[-1])
        output = dict(as_dict(out.get("output")))
        output["message"] = {**as_dict(output.get("message")), "content": [b for r in rounds for b in _content(r)]}
        out["output"] = output
        for key in ("usage", "metrics"):
            total = sum_usage(r.get(key) for r in rounds)
            if total is not None:
                out[key] = total
        return out

    def usage(self, message: dict[str, Any]) -> TokenUsage | None:
        """Converse ``usage``. ``inputTokens`` leaves the cache out: AWS's prompt-caching guide
        (docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html) says that with caching
        on it is "only the non-cached input tokens", the prompt being inputTokens +
        cacheReadInputTokens + cacheWriteInputTokens (the API reference's TokenUsage only says
        "tokens sent in the request"). Where the stated ``totalTokens`` shows the cache counted
        inside ``inputTokens`` instead (seen on some ConverseStream models), it is taken out
        there, so the parts still add up to the provider's total."""
        counts = usage_object(message)
        if counts is None:
            return None
        read = tokens(counts.get("cacheReadInputTokens", counts.get("cacheReadInputTokenCount")))
        write = tokens(counts.get("cacheWriteInputTokens", counts.get("cacheWriteInputTokenCount")))
        prompt, output = tokens(counts.get("inputTokens")), tokens(counts.get("outputTokens"))
        if read + write and prompt >= read + write and tokens(counts.get("totalTokens")) == prompt + output:
            prompt -= read + write
        return TokenUsage(prompt, read, write, output)

    def shown(self, message: dict[str, Any]) -> list[Any]:
        return [as_dict(message.get("output")).get("message")]

    def decoder(self) -> StreamDecoder:
        return ConverseStreamDecoder()

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        return encode_converse(message)

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        return _error_body(failure)

    def stitcher(self, phantom: str, body: str) -> Stitcher:
        return ConverseStitcher(phantom)


def _error_body(failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
    """Bedrock's error answer: the exception's name in ``x-amzn-ErrorType`` (what botocore reads
    the error code from) and ``{"message"}`` as the body."""
    name = EXCEPTIONS[error_kind(failure.status)]
    body = jsonspan.dumps({"message": failure.text()}).encode("utf-8")
    return [("content-type", "application/json"), ("x-amzn-ErrorType", name[0].upper() + name[1:])], body


def _with_beta(body: str, beta: str, betas: Any) -> str:
    """``anthropic_beta`` naming ``beta``: added to the client's list (``betas``: the body's
    ``anthropic_beta``), or a list of its own."""
    if isinstance(betas, list) and beta in betas:
        return body
    if isinstance(betas, list):
        return append_array(body, ["anthropic_beta"], [jsonspan.dumps(beta)])
    if betas is not None:
        raise Unsupported("anthropic_beta is not a list")
    return jsonspan.set_member(body, jsonspan.root(body), "anthropic_beta", jsonspan.array_text([jsonspan.dumps(beta)]))


def _content(message: dict[str, Any]) -> list[Any]:
    return as_list(as_dict(as_dict(message.get("output")).get("message")).get("content"))


class InvokeAdapter(AnthropicAdapter):
    """InvokeModel with a Claude body: the Anthropic Messages body and answer, with Bedrock's
    stream framing, and the stream flag in the path (the body has no ``stream``)."""

    api = "bedrock_invoke"
    native_kind = "bedrock"  # ``tool_discovery.native.bedrock``

    def native_model(self, view: RequestView) -> str:
        return self.model  # the path names it; the body names none

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out = super().merge(rounds)
        metrics = sum_usage(r.get(METRICS) for r in rounds)  # latencies and token counts add up
        if metrics is not None:
            out[METRICS] = metrics
        return out

    def usage_headers(self, message: dict[str, Any]) -> dict[str, str]:
        # InvokeModel restates usage in headers; after a merge they must match the summed body.
        usage = as_dict(message.get("usage"))
        names = {"input_tokens": "x-amzn-bedrock-input-token-count", "output_tokens": "x-amzn-bedrock-output-token-count"}
        return {h: str(usage[k]) for k, h in names.items() if isinstance(usage.get(k), int)}

    def __init__(self, stream: bool = False, model: str = "") -> None:
        self.stream = stream
        self.model = model  # the model id from the path (the body names none)

    def native_tools(self, body: str, deferred: Sequence[str], search: str) -> str:
        betas = decoded(body).get("anthropic_beta")  # the client's: only the tools change on the way
        return _with_beta(super().native_tools(body, deferred, search), TOOL_SEARCH_BETA, betas)

    def parse(self, body: str) -> RequestView:
        # Bedrock requires anthropic_version in a Claude body; other model families (Llama,
        # Titan, Nova…) have their own bodies, which we do not touch.
        data, catalog = self.load(body)
        if "anthropic_version" not in data:
            raise Unsupported("not a Claude body (no anthropic_version)")
        return dataclasses.replace(self.view_of(data, catalog), stream=self.stream)

    def decoder(self) -> StreamDecoder:
        return InvokeStreamDecoder()

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        return encode_invoke(message)

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        return _error_body(failure)

    def stitcher(self, phantom: str, body: str) -> Stitcher:
        return InvokeStitcher(phantom)
