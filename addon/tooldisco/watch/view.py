"""The "Tool discovery" contentview: request and response bodies of every API the project speaks,
read as tools and tool calls.

Why a contentview: it is where mitmweb and the console show a body, so the question "which
tools did the model see?" is answered where the person already looks. For a flow the proxy
processed it is the default view (JSON stays one click away); for other bodies of a known API
it is offered in the list. A request shows its tools with their status (for the client's flow,
what the client sent next to what went upstream); a response shows the tool calls the model
made, the proxy's hidden search among them.
"""

from __future__ import annotations

import json
from typing import Any

from mitmproxy import contentviews, http

from tooldisco.apis.base import Adapter
from tooldisco.apis.registry import detect

from tooldisco.watch import summary, tools
from tooldisco.watch.rounds import ROUND_KEY

FLOW_KEY = "tool_discovery"  # metadata of a client flow the proxy processed
PROCESSED = 2.0  # above mitmproxy's JSON view (1): the default for flows the proxy handled
KNOWN_API = 0.5  # offered, and chosen only when no other view fits (an SSE body)
MAX_ARGUMENTS = 300  # characters of a call's arguments shown


class ToolsView(contentviews.Contentview):
    name = "Tool discovery"

    def render_priority(self, data: bytes, metadata: contentviews.Metadata) -> float:
        flow = metadata.flow
        if not data or not isinstance(flow, http.HTTPFlow) or _adapter(flow) is None:
            return -1
        return PROCESSED if FLOW_KEY in flow.metadata or ROUND_KEY in flow.metadata else KNOWN_API

    def prettify(self, data: bytes, metadata: contentviews.Metadata) -> str:
        flow = metadata.flow
        if not isinstance(flow, http.HTTPFlow) or (adapter := _adapter(flow)) is None:
            raise ValueError("not a request or response of an API tool discovery speaks")
        info: dict[str, Any] = flow.metadata.get(FLOW_KEY) or {}
        rnd: dict[str, Any] = flow.metadata.get(ROUND_KEY) or {}
        phantom = str(info.get("phantom") or rnd.get("phantom") or "")
        lines = _header(info, rnd)
        if metadata.http_message is flow.request:
            lines += _request(adapter, data, info, rnd, phantom)
        else:
            lines += _response(adapter, data, metadata.content_type, phantom, client=bool(info))
        return "\n".join(lines) + "\n"


def _adapter(flow: http.HTTPFlow) -> Adapter | None:
    return detect(flow.request.method, flow.request.path)


def _header(info: dict[str, Any], rnd: dict[str, Any]) -> list[str]:
    if rnd:
        cut = " (answer cut for the view)" if rnd.get("truncated") else ""
        return [f"the proxy's own round {rnd.get('round')}/{rnd.get('rounds')}: {rnd.get('kind')}{cut}",
                f"for client flow {rnd.get('client_flow')}", ""]
    record = info.get("record")
    if not isinstance(record, dict):
        return []
    return summary.FlowSummary.of(record).details(info.get("rounds") or []) + [""]


def _request(adapter: Adapter, data: bytes, info: dict[str, Any], rnd: dict[str, Any], phantom: str) -> list[str]:
    stored = info.get("tools")
    if stored:  # the client's flow: its own tools next to what went upstream
        rows = [tools.Row.of(r) for r in stored]
        return ["tools: what the client sent, and what went upstream (this body)",
                "est. tokens of each: sent by the client / on the wire / in the prompt",
                *tools.render(rows, True)]
    view = adapter.parse(data.decode("utf-8"))
    rows = tools.forwarded(view, phantom, frozenset(rnd.get("found") or ()), rnd.get("dispatcher"))
    return ["tools in this body (what the model saw)", *tools.render(rows, False)]


def _response(adapter: Adapter, data: bytes, content_type: str | None, phantom: str, client: bool) -> list[str]:
    message = _message(adapter, data, content_type)
    calls = adapter.calls(message)
    who = "the client got" if client else "the upstream answered"
    if not calls:
        return [f"no tool calls in what {who}"]
    lines = [f"tool calls in what {who}:"]
    for call in calls:
        args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False)
        args = args if len(args) <= MAX_ARGUMENTS else args[: MAX_ARGUMENTS - 1] + "…"
        hidden = "   ← the proxy's search, hidden from the client" if call.name == phantom else ""
        lines.append(f"  {call.name} {args}{hidden}")
    return lines


def _message(adapter: Adapter, data: bytes, content_type: str | None) -> dict[str, Any]:
    """The answer as one message: a JSON body as it is, a stream assembled by the API's decoder."""
    if content_type == "application/json" or data.lstrip()[:1] == b"{":
        message = json.loads(data)
        if not isinstance(message, dict):
            raise ValueError("the body is not a JSON object")
        return message
    decoder = adapter.decoder()
    decoder.feed(data)
    decoder.feed(b"")
    return decoder.message()
