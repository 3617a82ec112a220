"""A turn as mitmweb shows it: the client's flow keeps what the client sent and got (a live
stream's bytes included), round 1 is a flow whenever the request was rewritten, each round
says what the model saw of it, and one filter lists the turn's flows."""

import json
import sys
from pathlib import Path

import pytest
from mitmproxy import contentviews, flowfilter
from mitmproxy.addons.view import View
from mitmproxy.test import taddons, tflow, tutils

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "addon"))
from tooldisco.apis.anthropic.adapter import AnthropicAdapter  # noqa: E402
from tooldisco.apis.bedrock.adapter import ConverseAdapter  # noqa: E402
from tooldisco.apis.gemini.adapter import GeminiAdapter  # noqa: E402
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter  # noqa: E402
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter  # noqa: E402
from tooldisco.engine.telemetry import Record  # noqa: E402
from tooldisco.watch import history, rounds, tools  # noqa: E402
from tooldisco.watch.view import FLOW_KEY, ToolsView  # noqa: E402
from tooldisco.watch.watch import Watcher  # noqa: E402

contentviews.add(ToolsView)  # as the addon's options do when mitmproxy loads it

SEARCH, DISPATCHER = "gateway_search_tools", "gateway_call_tool"


def a_tool(name: str, **extra) -> dict:
    return {"name": name, "description": f"{name} does it", "input_schema": {"type": "object"}, **extra}


def fn(name: str, **extra) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"{name} does it",
                                             "parameters": {"type": "object"}}, **extra}


# --- what a round's body says the model saw -----------------------------------------------------------


def test_native_anthropic_a_reference_loads_a_deferred_tool_into_the_prompt():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 5,
            "tools": [a_tool("kept"), a_tool("weather", defer_loading=True), a_tool("slack", defer_loading=True),
                      a_tool(SEARCH)],
            "messages": [{"role": "user", "content": "forecast?"},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": SEARCH,
                                                            "input": {"query": "weather"}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                             {"type": "tool_reference", "tool_name": "weather"}]}]}]}
    seen = tools.seen(AnthropicAdapter(), json.dumps(body), SEARCH)
    assert seen.names() == ["kept", "weather"] and seen.names(proxys=True) == ["kept", "weather", SEARCH]
    status = {r.name: (r.status, r.note) for r in seen.prompt}
    assert status["weather"] == (tools.BY_RESULT, "tool_reference") and status[SEARCH][0] == tools.SEARCH_TOOL
    assert [(r.name, r.status) for r in seen.deferred] == [("slack", tools.NATIVE_DEFERRED)]
    (own,) = seen.own
    assert own.name == SEARCH and own.loads == ("weather",) and own.how == "tool_reference"
    text = "\n".join(tools.render_seen(seen, [SEARCH]))
    assert "in the prompt (3)" in text and "on the wire only, deferred" in text
    assert "→ loads by tool_reference: weather" in text and "⚙ search: gateway_search_tools" in text
    first = {"model": "claude-sonnet-4-5", "max_tokens": 5, "tools": body["tools"], "messages": body["messages"][:1]}
    before = tools.seen(AnthropicAdapter(), json.dumps(first), SEARCH)
    assert before.names() == ["kept"] and len(before.deferred) == 2  # round 1: nothing loaded yet


def test_call_through_chat_a_found_tool_is_called_through_the_dispatcher():
    result = {"tools": [{"name": "weather", "description": "weather does it", "parameters": {"type": "object"}}],
              "message": "Call this tool through gateway_call_tool"}
    body = {"model": "gpt-4o", "tools": [fn("kept"), fn(SEARCH), fn(DISPATCHER)],
            "messages": [{"role": "user", "content": "forecast?"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "call_1", "type": "function",
                              "function": {"name": SEARCH, "arguments": '{"query": "weather"}'}}]},
                         {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(result)},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "call_2", "type": "function",
                              "function": {"name": DISPATCHER, "arguments": '{"name": "weather", "arguments": {}}'}}]},
                         {"role": "tool", "tool_call_id": "call_2", "content": "sunny"}]}
    seen = tools.seen(OpenAIChatAdapter(), json.dumps(body), SEARCH, DISPATCHER)
    assert seen.names() == ["kept"]  # tools[] minus the proxy's own: what the provider loads
    status = {r.name: r.status for r in seen.prompt}
    assert status == {"kept": tools.LOADED, SEARCH: tools.SEARCH_TOOL, DISPATCHER: tools.DISPATCHER,
                      "weather": tools.THROUGH}
    assert next(r for r in seen.prompt if r.name == "weather").wire_tokens > 0  # its definition, in the result
    assert [e.name for e in seen.own] == [SEARCH, DISPATCHER]
    text = "\n".join(tools.own_calls(seen))
    assert "→ found: weather" in text and "⚙ dispatcher: gateway_call_tool" in text and "→ sunny" in text


def test_native_responses_a_tool_search_output_loads_its_tools():
    tool = {"type": "function", "name": "weather", "description": "w", "parameters": {"type": "object"}}
    body = {"model": "gpt-5.4",
            "tools": [{"type": "function", "name": "kept", "description": "k", "parameters": {"type": "object"}},
                      {**tool, "defer_loading": True},
                      {"type": "function", "name": "slack", "description": "s", "parameters": {"type": "object"},
                       "defer_loading": True},
                      {"type": "tool_search", "execution": "client", "description": "search"}],
            "input": [{"role": "user", "content": "forecast?"},
                      {"type": "tool_search_call", "call_id": "c1", "execution": "client",
                       "arguments": {"query": "weather"}},
                      {"type": "tool_search_output", "call_id": "c1", "execution": "client", "tools": [tool]}]}
    seen = tools.seen(OpenAIResponsesAdapter(), json.dumps(body), "tool_search")
    assert seen.names() == ["kept", "weather"] and [r.name for r in seen.deferred] == ["slack"]
    assert {r.name: r.status for r in seen.prompt}["<tool_search>"] == tools.SEARCH_TOOL
    assert [(e.name, e.loads, e.how) for e in seen.own] == [("tool_search", ("weather",), "tool_search_output")]


def test_gemini_and_converse_histories_are_read():
    gemini = {"contents": [{"role": "user", "parts": [{"text": "forecast?"}]},
                           {"role": "model", "parts": [{"functionCall": {"name": SEARCH, "args": {"query": "w"}}}]},
                           {"role": "user", "parts": [{"functionResponse": {"name": SEARCH, "response": {
                               "output": json.dumps({"tools": [{"name": "weather"}], "message": "m"})}}}]}],
              "tools": [{"functionDeclarations": [{"name": "kept"}, {"name": SEARCH}, {"name": DISPATCHER}]}]}
    (e,) = history.exchanges(json.dumps(gemini))
    assert e.name == SEARCH and history.listed(e.result)[0] == ["weather"]
    seen = tools.seen(GeminiAdapter(), json.dumps(gemini), SEARCH, DISPATCHER)
    assert seen.names() == ["kept"] and {r.name: r.status for r in seen.prompt}["weather"] == tools.THROUGH
    converse = {"messages": [{"role": "user", "content": [{"text": "forecast?"}]},
                             {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": SEARCH,
                                                                            "input": {"query": "w"}}}]},
                             {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [
                                 {"text": json.dumps({"tools": [{"name": "weather"}], "message": "m"})}]}}]}],
                "toolConfig": {"tools": [{"toolSpec": {"name": n, "inputSchema": {"json": {"type": "object"}}}}
                                         for n in ("kept", SEARCH, "weather")]}}
    seen = tools.seen(ConverseAdapter(), json.dumps(converse), SEARCH)
    assert seen.names() == ["kept", "weather"]  # classic: appended after the search tool, found by its result
    assert {r.name: r.status for r in seen.prompt}["weather"] == tools.BY_RESULT


# --- the client's flow: what it sent, what it got ---------------------------------------------------------------


def client_flow(stream: bool = False):
    body = json.dumps({"model": "m", "max_tokens": 5, "stream": stream, "tools": [a_tool("kept"), a_tool("other")],
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = tutils.treq(host="api.anthropic.com", port=443, scheme=b"https", path=b"/v1/messages", method=b"POST",
                      headers=[(b"content-type", b"application/json"), (b"x-api-key", b"sk-ant-k")], content=body)
    return tflow.tflow(req=req, resp=False)


def record() -> Record:
    return Record(provider="anthropic", strategy="tool-search", total_tools=2, kept_tools=1, deferred_tools=1,
                  deferral="classic")


def watched(view: View, stream: bool):
    """A flow followed by a watcher as the rewrite leaves it: its request rewritten, the client's kept."""
    watcher = Watcher(lambda: None)
    f = client_flow(stream)
    client = f.request.raw_content
    view.add([f])
    upstream = json.dumps({"model": "m", "max_tokens": 5, "stream": stream, "tools": [a_tool("kept"), a_tool(SEARCH)],
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
    watcher.begin(f, AnthropicAdapter(), client, upstream, record(), SEARCH)
    f.request.content = upstream  # what mitmproxy sends: the rewrite's
    f.request.headers["x-changed"] = "by the rewrite"
    return watcher, f, client, upstream


async def test_a_rewritten_flow_shows_the_clients_request_and_round_one_the_rewritten_one():
    view = View()
    with taddons.context(view):
        watcher, f, client, upstream = watched(view, stream=False)
        f.response = tutils.tresp(content=b'{"type": "message", "content": [], "role": "assistant"}',
                                  headers=[(b"content-type", b"application/json")])
        watcher.response(f)
    assert f.request.raw_content == client and "x-changed" not in f.request.headers  # as the client sent it
    assert not f.modified()  # no edit of the person's to revert
    (own,) = [x for x in view if rounds.ROUND_KEY in x.metadata]  # no loop ran: round 1 is still a flow
    assert own.request.content == upstream and own.request.headers["x-api-key"] == "[redacted]"
    assert own.response.content == f.response.content
    turn = f.metadata[FLOW_KEY]["turn"]
    assert own.comment.startswith(f"{turn} ⚙ round 1/1: the rewritten request")
    text = contentviews.prettify_message(own.request, own).text
    assert "in the prompt (2)" in text and "search tool" in text


async def test_a_live_stream_keeps_what_the_client_got():
    view = View()
    with taddons.context(view):
        watcher, f, client, _ = watched(view, stream=True)
        f.response = tutils.tresp(content=None, headers=[(b"content-type", b"text/event-stream")])
        f.response.stream = lambda chunk: chunk.upper()  # another addon's callable: what it returns is what goes
        watcher.responseheaders(f)
        sent = [f.response.stream(c) for c in (b"event: a\n", b"data: {}\n\n", b"")]
        watcher.response(f)
    assert sent == [b"EVENT: A\n", b"DATA: {}\n\n", b""]  # nothing changed on the wire
    assert f.response.raw_content == b"EVENT: A\nDATA: {}\n\n" and f.request.raw_content == client
    assert f.metadata[FLOW_KEY]["answer"] == {"size": 19, "kept": 19}


async def test_a_long_stream_is_kept_up_to_the_limit_and_says_so():
    view = View()
    with taddons.context(view):
        watcher, f, _, _ = watched(view, stream=True)
        f.response = tutils.tresp(content=None, headers=[(b"content-type", b"text/event-stream")])
        f.response.stream = True
        watcher.responseheaders(f)
        for _ in range(3):
            f.response.stream(b"x" * (rounds.LIMIT // 2 + 1))
        watcher.response(f)
    assert len(f.response.raw_content) == rounds.LIMIT
    assert f.metadata[FLOW_KEY]["answer"] == {"size": 3 * (rounds.LIMIT // 2 + 1), "kept": rounds.LIMIT}
    text = contentviews.prettify_message(f.response, f, view_name="Tool discovery").text
    assert f"cut to {rounds.LIMIT:,} of {3 * (rounds.LIMIT // 2 + 1):,} bytes" in text


# --- one filter for the turn ----------------------------------------------------------------------------


async def test_one_filter_lists_the_client_flow_and_its_rounds_only():
    view = View()
    with taddons.context(view):
        watcher, f, _, _ = watched(view, stream=False)
        f.response = tutils.tresp(content=b"{}", headers=[(b"content-type", b"application/json")])
        watcher.response(f)
        other, *_ = watched(view, stream=False)[1:]
        other.response = tutils.tresp(content=b"{}", headers=[(b"content-type", b"application/json")])
    turn = f.metadata[FLOW_KEY]["turn"]
    match = flowfilter.parse(rounds.group_filter(turn))
    listed = [x for x in view if match(x)]
    assert listed[0] is f and len(listed) == 2 and rounds.ROUND_KEY in listed[1].metadata
    assert all(x.comment.startswith(turn) for x in listed)


@pytest.mark.parametrize("base, flow_id, link", [
    (None, None, None),
    ("http://127.0.0.1:8081/", None, "http://127.0.0.1:8081/?turn=abc123#/flows?s=~comment%20%23abc123"),
    ("http://127.0.0.1:8081/", "f-1", "http://127.0.0.1:8081/?turn=abc123#/flows/f-1/request?s=~comment%20%23abc123"),
])
def test_a_link_opens_mitmweb_on_the_turn(base, flow_id, link):
    assert rounds.web_link(base, "#abc123", flow_id) == link
