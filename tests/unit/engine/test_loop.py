"""The phantom loop without a socket: messages in, actions out."""

import json

import pytest

from tooldisco.engine.loop import Finish, Found, PhantomLoop, Search, Send
from tooldisco.policy.modes import ClassicMode
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.core.types import Tool, ToolResult
from tooldisco.apis.registry import detect

from tests.support.catalog import anthropic_tools
from tests.support.loop_driver import Driver

A = AnthropicAdapter()
P = "gateway_search_tools"
WEATHER = Tool("get_weather", '{"name":"get_weather","input_schema":{"type":"object"}}')
BODY = json.dumps({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "weather?"}],
                   "tools": [{"name": P, "input_schema": {}}]})


def msg(*blocks, stop="tool_use", i=1, out=5):
    return {"id": f"msg_{i}", "type": "message", "role": "assistant", "content": list(blocks), "stop_reason": stop,
            "usage": {"input_tokens": 100, "output_tokens": out}}


def search_call(id="s1", q="weather"):
    return {"type": "tool_use", "id": id, "name": P, "input": {"query": q}}


def real_call(id="r1", name="get_weather"):
    return {"type": "tool_use", "id": id, "name": name, "input": {"city": "Paris"}}


def finder(call):
    return Found(ToolResult(call, "found get_weather"), [WEATHER])


def new_loop(**kw):
    return Driver(PhantomLoop(A, ClassicMode(A, P), [P], **kw), finder)


def test_searches_are_asked_for_not_run():
    loop = PhantomLoop(A, ClassicMode(A, P), [P])
    act = loop.start(BODY, msg(search_call("a"), search_call("b", "rain")))
    assert isinstance(act, Search) and [c.id for c in act.calls] == ["a", "b"]
    sent = loop.found([finder(c) for c in act.calls])
    results = json.loads(sent.body)["messages"][-1]["content"]
    assert [r["tool_use_id"] for r in results] == ["a", "b"]


def test_no_phantom_call_finishes_untouched():
    m = msg({"type": "text", "text": "hi"}, stop="end_turn")
    assert new_loop().start(BODY, m) == Finish(m, "no_phantom")


def test_search_then_real_call():
    loop = new_loop()
    act = loop.start(BODY, msg({"type": "text", "text": "let me search"}, search_call()))
    assert isinstance(act, Send)
    sent = json.loads(act.body)
    assert [t["name"] for t in sent["tools"]] == [P, "get_weather"]
    assert sent["messages"][-1]["content"][0] == {"type": "tool_result", "tool_use_id": "s1", "content": "found get_weather"}
    assert act.visible["content"] == [{"type": "text", "text": "let me search"}]
    done = loop.receive(msg(real_call(), i=2, out=7))
    assert isinstance(done, Finish) and done.reason == "done"
    assert [b.get("name") for b in done.message["content"]] == [None, "get_weather"]
    assert done.message["usage"] == {"input_tokens": 200, "output_tokens": 12} and done.message["id"] == "msg_1"
    assert P not in json.dumps(done.message)
    assert loop.expanded == ["get_weather"] and loop.rounds == 1


def test_mixed_turn_is_not_reforwarded():
    loop = new_loop()
    act = loop.start(BODY, msg(search_call(), real_call(name="read_file")))
    assert isinstance(act, Finish) and act.reason == "mixed"
    assert [b["name"] for b in act.message["content"]] == ["read_file"] and act.message["stop_reason"] == "tool_use"
    assert loop.expanded == ["get_weather"]  # the client's next request carries it


def test_max_loops_then_stripped():
    loop = new_loop(max_loops=2)
    act = loop.start(BODY, msg(search_call("a")))
    act = loop.receive(msg(search_call("b"), i=2))
    assert isinstance(act, Send)
    act = loop.receive(msg({"type": "text", "text": "still looking"}, search_call("c"), i=3))
    assert isinstance(act, Finish) and act.reason == "max_loops" and loop.rounds == 2
    assert act.message["stop_reason"] == "end_turn" and P not in json.dumps(act.message)


def test_the_last_reforward_goes_without_the_search_tool():
    """At the limit the model answers with what it has: the search tool is no longer offered,
    the tools it found still are."""
    loop = new_loop(max_loops=2)
    first = loop.start(BODY, msg(search_call("a")))
    assert [t["name"] for t in json.loads(first.body)["tools"]] == [P, "get_weather"]
    last = loop.receive(msg(search_call("b"), i=2))
    assert isinstance(last, Send) and loop.rounds == 2
    assert [t["name"] for t in json.loads(last.body)["tools"]] == ["get_weather"]
    assert json.loads(last.body)["messages"][-1]["content"][0]["tool_use_id"] == "b"  # history as it was


def test_a_search_only_turn_at_the_limit_is_empty_not_a_success():
    loop = new_loop(max_loops=1)
    loop.start(BODY, msg(search_call("a")))
    act = loop.receive(msg(search_call("b"), i=2))
    assert isinstance(act, Finish) and act.reason == "max_loops" and act.empty
    assert act.message["content"] == []
    loop = new_loop(max_loops=1)
    loop.start(BODY, msg({"type": "text", "text": "let me look"}, search_call("a")))
    act = loop.receive(msg(search_call("b"), i=2))
    assert act.reason == "max_loops" and not act.empty  # the text it wrote is a turn


def test_already_forwarded_tools_are_not_injected_twice():
    loop = new_loop()
    loop.start(BODY, msg(search_call("a")))
    act = loop.receive(msg(search_call("b"), i=2))
    tools = [t["name"] for t in json.loads(act.body)["tools"]]
    assert tools == [P, "get_weather"]


def test_failure_returns_what_was_seen():
    loop = new_loop()
    loop.start(BODY, msg({"type": "text", "text": "searching"}, search_call()))
    fin = loop.fail()
    assert fin.reason == "error" and fin.message["content"] == [{"type": "text", "text": "searching"}]
    assert fin.message["stop_reason"] == "end_turn"


def _tools(n: int = 30) -> list[dict]:
    return anthropic_tools(n)


API_REQUESTS = {
    "/v1/chat/completions": lambda tools: {"model": "gpt-x", "messages": [{"role": "user", "content": "weather?"}],
                                           "tools": [{"type": "function", "function": {
                                               "name": t["name"], "description": t["description"],
                                               "parameters": t["input_schema"]}} for t in tools]},
    "/v1/responses": lambda tools: {"model": "gpt-x", "input": "weather?", "tools": [
        {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
        for t in tools] + [{"type": "web_search"}]},
    "/v1beta/models/gemini-x:generateContent": lambda tools: {
        "contents": [{"role": "user", "parts": [{"text": "weather?"}]}],
        "tools": [{"functionDeclarations": [{"name": t["name"], "description": t["description"],
                                             "parametersJsonSchema": t["input_schema"]} for t in tools]},
                  {"googleSearch": {}}]},
    "/model/m/converse": lambda tools: {"messages": [{"role": "user", "content": [{"text": "weather?"}]}],
                                        "toolConfig": {"tools": [{"toolSpec": {
                                            "name": t["name"], "description": t["description"],
                                            "inputSchema": {"json": t["input_schema"]}}} for t in tools]
                                            + [{"cachePoint": {"type": "default"}}]}},
}


@pytest.mark.parametrize("path", list(API_REQUESTS))
def test_without_search_takes_only_the_search_tool_out_for_every_api(path):
    """What the last re-forward sends, per API: every other tool entry (hosted tools, cache
    points) where it was."""
    adapter = detect("POST", path)
    client = json.dumps(API_REQUESTS[path](_tools()))
    with_search = adapter.with_tools(client, [t.raw for t in adapter.parse(client).tools]
                                     + [adapter.phantom_tool(P, "Search the tools.")])
    loop = PhantomLoop(adapter, ClassicMode(adapter, P), [P])
    assert P in adapter.parse(with_search).names()
    out = loop.without_search(with_search)
    assert adapter.parse(out).names() == adapter.parse(client).names()
    assert json.loads(out) == json.loads(adapter.with_tools(client, [t.raw for t in adapter.parse(client).tools]))
