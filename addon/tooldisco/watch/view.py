"""The "Tool discovery" contentview: request and response bodies of every API the project speaks,
read as tools and tool calls.

Why a contentview: it is where mitmweb and the console show a body, so the question "which
tools did the model see?" is answered where the person already looks. For a flow the proxy
processed it is the default view (JSON stays one click away); for other bodies of a known API
it is offered in the list. The client's flow holds what the client sent and what it got: its
request shows the client's tools next to what went upstream; each hidden round's request shows
what the model saw of it (``tools.seen``) and the results the proxy added; a response shows the
tool calls the model made, the proxy's own among them.

Why the links are text: mitmweb shows a view and a comment as plain text, never as links. Each
view prints the filter that lists the turn's flows (``~comment <tag>``, for the search box) and
mitmweb addresses that open on them, to paste.
"""

from __future__ import annotations

import json
from typing import Any

from mitmproxy import contentviews, ctx, http

from tooldisco.apis.base import Adapter
from tooldisco.apis.registry import detect
from tooldisco.core.tokens import estimate_tokens

from tooldisco.watch import rounds, summary, tools
from tooldisco.watch.rounds import GEAR, ROUND_KEY

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
        dispatcher = rnd.get("dispatcher") or info.get("dispatcher")
        lines = _header(flow, info, rnd)
        if metadata.http_message is flow.request:
            lines += _request(adapter, flow, data, info, rnd, phantom, dispatcher)
        else:
            lines += _response(adapter, data, metadata.content_type, phantom, dispatcher, info)
        return "\n".join(lines) + "\n"


def _adapter(flow: http.HTTPFlow) -> Adapter | None:
    return detect(flow.request.method, flow.request.path)


def web_base() -> str | None:
    """mitmweb's address in this process (``web_host``, ``web_port``), or None outside mitmweb."""
    try:
        host, port = str(ctx.options.web_host), int(ctx.options.web_port)
    except (AttributeError, KeyError, ValueError):  # no mitmweb options: the console, mitmdump
        return None
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def _header(flow: http.HTTPFlow, info: dict[str, Any], rnd: dict[str, Any]) -> list[str]:
    """Lines short enough for mitmweb's half-window pane: what this flow is, and how to list
    the turn's flows (a filter to type, an address to open)."""
    base = web_base()
    if rnd:
        turn = rnd.get("turn") or rounds.tag(str(rnd.get("client_flow") or ""))
        cut = " (answer cut for the view)" if rnd.get("truncated") else ""
        lines = [f"{turn} {GEAR} round {rnd.get('round')}/{rnd.get('rounds')}: {rnd.get('kind')}{cut}",
                 f"the proxy's own request upstream for flow {turn} (what the agent sent and got)"]
        return lines + _turn_lines(turn, base, int(rnd.get("rounds") or 0)) + [""]
    record = info.get("record")
    if not isinstance(record, dict):
        return []
    lines = summary.FlowSummary.of(record).details([])  # the rounds are listed below, by their tag
    turn = info.get("turn") or rounds.tag(flow.id)
    kinds = list(info.get("kinds") or [])
    count = len(info.get("rounds") or [])
    if not count:
        return lines + [f"{turn}: the request went upstream as the client sent it; no hidden rounds", ""]
    lines += ["", "what the agent sent: this flow's Request · what it got: its Response",
              f"what the model saw: each round's Request ({GEAR}, listed after this flow)"]
    lines += _turn_lines(turn, base, count)
    lines += [f"  {turn} {GEAR} round {i + 1}/{count}: {kind}" for i, kind in enumerate(kinds)]
    return lines + [""]


def _turn_lines(turn: str, base: str | None, count: int) -> list[str]:
    """How to list the turn's flows: the filter for mitmweb's search box, and an address."""
    lines = [f"this turn's flows: the client's and its {count} round{'s' if count != 1 else ''}",
             f"  list them: {rounds.group_filter(turn)}  (in mitmweb's Search box)"]
    if (link := rounds.web_link(base, turn)) is not None:
        lines.append(f"  or open:   {link}")
    return lines


def _request(adapter: Adapter, flow: http.HTTPFlow, data: bytes, info: dict[str, Any], rnd: dict[str, Any],
             phantom: str, dispatcher: str | None) -> list[str]:
    stored = info.get("tools")
    if stored:  # the client's flow: its own tools next to what went upstream
        rows = [tools.Row.of(r) for r in stored]
        first = f" ({info.get('turn')} {GEAR} round 1)" if info.get("rounds") else ""
        return [f"tools: what the client sent (this body), and what went upstream in round 1{first}",
                "est. tokens of each: sent by the client / on the wire / in the prompt",
                *tools.render(rows, True)]
    if info and not rnd:  # the client's flow, its table not made yet (or not at all): its tools as sent
        view = adapter.parse(data.decode("utf-8"))
        rows = [tools.Row(t.name, "sent", estimate_tokens(t.raw), estimate_tokens(t.raw)) for t in view.tools]
        return ["tools: what the client sent (this body)", *tools.render(rows, False)]
    seen = tools.seen(adapter, data.decode("utf-8"), phantom, dispatcher)
    return tools.render_seen(seen, _answer_calls(adapter, flow))


def _answer_calls(adapter: Adapter, flow: http.HTTPFlow) -> list[str]:
    """The tools the model called in this round's answer, if it can be read."""
    response = flow.response
    if response is None or not response.raw_content:
        return []
    try:
        body = response.get_content(strict=False) or b""
        calls = adapter.calls(_message(adapter, body, response.headers.get("content-type")))
        # A call through the dispatcher calls the tool it names.
        return [*(c.name for c in calls),
                *(str(c.arguments["name"]) for c in calls if isinstance(c.arguments, dict) and "name" in c.arguments)]
    except Exception:  # an answer cut for the view, an error body: the tools are shown without it
        return []


def _response(adapter: Adapter, data: bytes, content_type: str | None, phantom: str, dispatcher: str | None,
              info: dict[str, Any]) -> list[str]:
    client = bool(info)
    who = "the client got" if client else "the upstream answered"
    lines = []
    cut = info.get("answer") if client else None
    if isinstance(cut, dict) and cut.get("size", 0) > cut.get("kept", 0):
        lines.append(f"the stream as the client got it, cut to {cut['kept']:,} of {cut['size']:,} bytes for the view")
    try:
        calls = adapter.calls(_message(adapter, data, content_type))
    except Exception as e:
        if not lines:
            raise
        return lines + [f"its tool calls cannot be read from the cut stream ({type(e).__name__})"]
    if not calls:
        return lines + [f"no tool calls in what {who}"]
    lines.append(f"tool calls in what {who}:")
    for call in calls:
        args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False)
        args = args if len(args) <= MAX_ARGUMENTS else args[: MAX_ARGUMENTS - 1] + "…"
        if phantom and call.name in (phantom, f"<{phantom}>"):
            note = f"   ← {GEAR} the proxy's search, hidden from the client"
        elif dispatcher and call.name == dispatcher:
            target = call.arguments.get("name") if isinstance(call.arguments, dict) else None
            note = f"   ← {GEAR} the proxy's dispatcher: the client gets it as a call of {target or 'the named tool'}"
        else:
            note = ""
        lines.append(f"  {call.name} {args}{note}")
    return lines


def _message(adapter: Adapter, data: bytes, content_type: str | None) -> dict[str, Any]:
    """The answer as one message: a JSON body as it is, a stream assembled by the API's decoder."""
    if content_type == "application/json" or data.lstrip()[:1] in (b"{", b"["):
        message = json.loads(data)
        if isinstance(message, list):  # Gemini's JSON-array stream: its chunks, assembled
            decoder = adapter.decoder()
            decoder.feed(data)
            decoder.feed(b"")
            return decoder.message()
        if not isinstance(message, dict):
            raise ValueError("the body is not a JSON object")
        return message
    decoder = adapter.decoder()
    decoder.feed(data)
    decoder.feed(b"")
    return decoder.message()
