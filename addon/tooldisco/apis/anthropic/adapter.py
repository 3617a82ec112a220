"""Anthropic Messages (``POST /v1/messages``), also the body of Bedrock InvokeModel for Claude."""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from tooldisco.core import jsonspan
from tooldisco.core.bytecache import ADMIT_WHEN_FULL, MiB, derived_size, memoize
from tooldisco.apis.base import NativeDeferral, Failure, Stitcher
from tooldisco.apis.streaming import as_list
from tooldisco.core.types import RequestView, TokenUsage, Tool, ToolCall, ToolCatalog, ToolResult, Unsupported
from tooldisco.apis.base import StreamDecoder
from tooldisco.apis.text import History, user_text
from tooldisco.apis.defaults import AdapterDefaults
from tooldisco.apis.schema import params_of, query_schema
from tooldisco.apis.catalogs import catalog_at, each_tool, load_request, named, tool_spans
from tooldisco.apis.splice import deferred_text, append_array, replace_array, with_marked
from tooldisco.apis.usage import sum_usage, tokens, usage_object
from tooldisco.apis.anthropic.stream import AnthropicStreamDecoder
from tooldisco.apis.anthropic.stream import encode
from tooldisco.apis.anthropic.stitch import error_object
from tooldisco.apis.anthropic.stitch import AnthropicStitcher

# Claude Code's own deferred-tool search tool: the client answers it, we must not hide it.
CLIENT_SEARCH_TOOLS = frozenset({"ToolSearch"})


def _texts(content: Any) -> list[Any]:
    """Text of a user message: string content, or its text blocks (not tool results)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]


def _session_hint(data: dict[str, Any]) -> str | None:
    """Claude Code puts ``{"session_id": …}`` as a JSON string in ``metadata.user_id``."""
    user_id = (data.get("metadata") or {}).get("user_id") if isinstance(data.get("metadata"), dict) else None
    if not isinstance(user_id, str):
        return None
    try:
        parsed = json.loads(user_id)
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(session := parsed.get("session_id"), str):
        return session
    marker = "_session_"  # older Claude Code: user_<hash>_account_<id>_session_<uuid>
    return user_id.split(marker, 1)[1] if marker in user_id else None


def _marked(body: str) -> list[str]:
    """The body's tool definitions that mention ``cache_control`` (per catalog, once)."""
    catalog = catalog_at(body)
    if catalog is not None:
        return catalog.derived("cache_control", lambda: [r for r in catalog.raws if '"cache_control"' in r])
    return [r for r in tool_spans(body, ["tools"]) if '"cache_control"' in r]


def _keep_breakpoint(marked: list[str], raws: list[str]) -> list[str]:
    """Clients put ``cache_control`` on their last tool; if we dropped that tool, the
    breakpoint moves to our last one, so the tools prefix is still cached. ``marked``: the
    client's definitions that mention it."""
    kept = set(raws)
    dropped = [json.loads(r) for r in marked if r not in kept]
    marks = [d["cache_control"] for d in dropped if isinstance(d, dict) and "cache_control" in d]
    if not marks or not raws or any('"cache_control"' in r and "cache_control" in json.loads(r) for r in raws):
        return raws
    last = raws[-1]
    raws[-1] = jsonspan.set_member(last, jsonspan.root(last), "cache_control", jsonspan.dumps(marks[-1]))
    return raws


def _result_content(result: ToolResult) -> Any:
    """A tool_result's content. A native search answers with one ``tool_reference`` per tool
    it loads (the API expands each into its definition right there), as Anthropic's own tool
    search does. Its text would repeat those definitions in every later request of the
    session, so only what they do not say (tools listed but not loaded, unknown names) stays,
    as a text block ahead of them."""
    if not result.loads:
        return result.content
    refs = [{"type": "tool_reference", "tool_name": t.name} for t in result.loads]
    rest = _beyond_definitions(result.content)
    return [{"type": "text", "text": rest}, *refs] if rest else refs


def _beyond_definitions(text: str) -> str:
    """A search result's JSON without the briefs of the tools it lists (and without its
    message when nothing else is left); text that is not such JSON is kept whole."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if not isinstance(data, dict):
        return text
    rest = {k: v for k, v in data.items() if k not in ("tools", "message")}
    if not rest:
        return ""
    return json.dumps({**rest, "message": data.get("message", "")}, ensure_ascii=False, separators=(",", ":"))


@memoize(16 * MiB, sizeof=derived_size, admit_when_full=ADMIT_WHEN_FULL)  # a catalog too big for it still hits
def parse_tool(raw: str) -> Tool:
    return tool_of(raw, json.loads(raw))


def tool_of(raw: str, d: Any) -> Tool:
    """The tool a definition text (``raw``, decoded: ``d``) defines."""
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise Unsupported("a tool has no name")
    name = d["name"]
    pinned = None
    if d.get("type") not in (None, "custom"):
        pinned = "server"  # web_search, bash, text_editor, mcp_toolset…: not ours to hide
    elif d.get("defer_loading") is True:
        pinned = "client_deferred"
    elif name in CLIENT_SEARCH_TOOLS:
        pinned = "client_search"
    desc = d.get("description")
    return Tool(name, raw, desc if isinstance(desc, str) else "", params_of(d.get("input_schema")), pinned)


_BUILD = each_tool(tool_of)


def _usage(counts: dict[str, Any]) -> TokenUsage:
    return TokenUsage(tokens(counts.get("input_tokens")), tokens(counts.get("cache_read_input_tokens")),
                      tokens(counts.get("cache_creation_input_tokens")), tokens(counts.get("output_tokens")))


class AnthropicAdapter(AdapterDefaults):
    api = "anthropic"
    results_member = "content"
    native_kind = "anthropic"  # ``tool_discovery.native.anthropic``

    def native_deferral(self) -> NativeDeferral:
        return self

    def native_model(self, view: RequestView) -> str:
        return view.model if isinstance(view.model, str) else ""

    def parse_tool(self, raw: str) -> Tool:
        return parse_tool(raw)

    def parse(self, body: str) -> RequestView:
        return self.view_of(*self.load(body))

    def load(self, body: str) -> tuple[dict[str, Any], ToolCatalog]:
        """The body decoded, its tools apart (``load_request``)."""
        return load_request(body, self.api, _BUILD, history="messages")

    def view_of(self, data: dict[str, Any], catalog: ToolCatalog) -> RequestView:
        """The view of a body decoded by ``load_request`` (its tools apart, in ``catalog``)."""
        messages = data.get("messages")
        if not isinstance(messages, list):
            raise Unsupported("no messages array")
        history = History()
        for m in messages:
            if not isinstance(m, dict):
                continue
            blocks = [b for b in as_list(m.get("content")) if isinstance(b, dict)]
            if m.get("role") == "user":
                history.user(user_text(_texts(m.get("content"))))
                history.answered |= {str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"}
            elif m.get("role") == "assistant":
                history.calls |= {str(b.get("id")): str(b.get("name")) for b in blocks if b.get("type") == "tool_use"}
        choice = data.get("tool_choice")
        forced = [choice["name"]] if isinstance(choice, dict) and choice.get("type") == "tool" \
            and isinstance(choice.get("name"), str) else []
        return history.view(catalog, forced, data.get("stream") is True, _session_hint(data), model=data.get("model"))

    def with_tools(self, body: str, raws: Sequence[str]) -> str:
        return replace_array(body, ["tools"], _keep_breakpoint(_marked(body), list(raws)))

    def phantom_tool(self, name: str, description: str) -> str:
        return jsonspan.dumps(
            {
                "name": name,
                "description": description,
                "input_schema": query_schema(),
            }
        )

    def native_search(self, name: str) -> str:
        return name  # the search is a client tool: its calls are tool_use blocks by that name

    def native_tools(self, body: str, deferred: Sequence[str], search: str) -> str:
        catalog = catalog_at(body)

        def mark(hidden: frozenset[str]) -> list[str]:
            if catalog is not None:  # one tool per element: names known, nothing parsed again
                pairs: Iterable[tuple[str, str]] = zip(catalog.raws, catalog.names)
            else:
                pairs = ((raw, parse_tool(raw).name) for raw in tool_spans(body, ["tools"]))
            return [deferred_text(raw) if name in hidden else raw for raw, name in pairs]

        return with_marked(body, catalog, deferred, search, mark)

    def native_search_tool(self, name: str, description: str) -> str:
        return self.phantom_tool(name, description)

    def calls(self, message: dict[str, Any]) -> list[ToolCall]:
        return [
            ToolCall(str(b.get("id")), str(b.get("name")), b.get("input"))
            for b in as_list(message.get("content"))
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]

    def append_round(
        self, body: str, message: dict[str, Any], results: Sequence[ToolResult], add_raws: Sequence[str]
    ) -> str:
        # The assistant turn goes back exactly as the model produced it (signed thinking blocks
        # must stay unchanged); every tool_use needs its tool_result in the very next user
        # message, tool_result blocks first.
        assistant = {"role": "assistant", "content": message.get("content") or []}
        blocks = []
        for r in results:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": r.call.id, "content": _result_content(r)}
            if r.is_error:
                block["is_error"] = True
            blocks.append(block)
        user = {"role": "user", "content": blocks}
        body = append_array(body, ["messages"], [jsonspan.dumps(assistant), jsonspan.dumps(user)])
        return append_array(body, ["tools"], add_raws) if add_raws else body

    def strip(self, message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
        hidden = set(names)
        out = dict(message)
        out["content"] = [
            b
            for b in as_list(message.get("content"))
            if not (isinstance(b, dict) and b.get("type") == "tool_use" and named(b.get("name"), hidden))
        ]
        if out.get("stop_reason") == "tool_use" and not self.calls(out):
            out["stop_reason"] = "end_turn"
        return out

    def merge(self, rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out = dict(rounds[-1])
        out["id"] = rounds[0].get("id", out.get("id"))
        out["content"] = [b for r in rounds for b in as_list(r.get("content"))]
        usage = sum_usage(r.get("usage") for r in rounds)
        if usage is not None:
            out["usage"] = usage
        return out

    def usage(self, message: dict[str, Any]) -> TokenUsage | None:
        """Anthropic's four counts are already apart (``input_tokens`` leaves the cache out). A
        compaction is a sampling step of its own, billed on the same model but reported only in
        ``usage.iterations`` (the top-level counts are the final message's), so it is added;
        the other iterations are already in the top level or billed on another model (an advisor's)."""
        counts = usage_object(message)
        if counts is None:
            return None
        total = _usage(counts)
        for step in as_list(counts.get("iterations")):
            if isinstance(step, dict) and step.get("type") == "compaction":
                total = total + _usage(step)
        return total

    def shown(self, message: dict[str, Any]) -> list[Any]:
        return [{"role": "assistant", "content": message.get("content")}]

    def decoder(self) -> StreamDecoder:
        return AnthropicStreamDecoder()

    def encode_stream(self, message: dict[str, Any]) -> bytes:
        return encode(message)

    def error_body(self, failure: Failure) -> tuple[list[tuple[str, str]], bytes]:
        """Anthropic's error body: ``{"type": "error", "error": {"type", "message"}}``."""
        body = {"type": "error", "error": error_object(failure)}
        return [("content-type", "application/json")], jsonspan.dumps(body).encode("utf-8")

    def stitcher(self, phantom: str, body: str) -> Stitcher:
        return AnthropicStitcher(phantom)
