import json

import pytest

from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.core.types import ToolCall, ToolResult, Unsupported
from tooldisco.apis.registry import detect
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter

from tests.support.catalog import anthropic_tools, openai_tools

A, C = AnthropicAdapter(), OpenAIChatAdapter()


def body(**kw) -> str:
    return json.dumps(kw, indent=1)  # not compact on purpose: bytes must survive


@pytest.mark.parametrize(
    "method, path, api",
    [("POST", "/v1/messages", "anthropic"), ("POST", "/v1/messages?beta=true", "anthropic"),
     ("POST", "/v1/chat/completions", "openai_chat"), ("POST", "/openai/deployments/x/chat/completions?api-version=1", "openai_chat"),
     ("GET", "/v1/messages", None), ("POST", "/v1/messages/count_tokens", None), ("POST", "/v1/models", None)],
)
def test_detect(method, path, api):
    a = detect(method, path)
    assert (a.api if a else None) == api


def test_anthropic_parse_view():
    tools = anthropic_tools(4) + [
        {"type": "web_search_20250305", "name": "web_search"},
        {"name": "lazy", "description": "x", "input_schema": {}, "defer_loading": True},
        {"name": "ToolSearch", "description": "client search", "input_schema": {}},
    ]
    msgs = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                                          {"type": "tool_use", "id": "t1", "name": tools[0]["name"], "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"}]},
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>noise</system-reminder>"},
                                     {"type": "text", "text": "open a github issue"}]},
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>only noise</system-reminder>"}]},
    ]
    v = A.parse(body(model="m", max_tokens=5, tools=tools, messages=msgs, stream=True,
                     tool_choice={"type": "tool", "name": tools[1]["name"]},
                     metadata={"user_id": json.dumps({"session_id": "S1"})}))
    assert v.query == "open a github issue" and v.first_user == "first question"
    assert v.used == {tools[0]["name"]} and v.forced == {tools[1]["name"]}
    assert v.stream and v.session_hint == "S1"
    pins = {t.name: t.pinned for t in v.tools}
    assert pins["web_search"] == "server" and pins["lazy"] == "client_deferred" and pins["ToolSearch"] == "client_search"
    assert pins[tools[0]["name"]] is None
    assert v.tools[0].params[0] == ("repo", "Repository owner/name")


@pytest.mark.parametrize(
    "b, why",
    [("not json", "not JSON"), ("[1]", "not a JSON object"), ('{"model":"m"}', "no messages"),
     ('{"messages":[],"tools":[{"name":"a"},{"name":"a"}]}', "duplicate"),
     ('{"messages":[],"tools":[{"description":"x"}]}', "no name"),
     ('{"messages":[],"tools":{"a":1}}', "not an array")],
)
def test_anthropic_unsupported(b, why):
    with pytest.raises(Unsupported, match=why):
        A.parse(b)


def test_anthropic_with_tools_keeps_bytes_and_moves_breakpoint():
    tools = anthropic_tools(3)
    tools[-1]["cache_control"] = {"type": "ephemeral"}
    b = body(model="m", tools=tools, messages=[{"role": "user", "content": "hi"}], extra={"z": 1.0})
    v = A.parse(b)
    out = A.with_tools(b, [v.tools[0].raw])
    data = json.loads(out)
    assert data["tools"][0]["cache_control"] == {"type": "ephemeral"}
    assert data["extra"] == {"z": 1.0} and '"z": 1.0' in out  # untouched bytes elsewhere
    out2 = A.with_tools(b, [v.tools[0].raw, v.tools[2].raw])
    assert v.tools[2].raw in out2 and v.tools[0].raw in out2  # byte-identical definitions


def test_anthropic_loop_helpers():
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
           "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                       {"type": "text", "text": "searching"},
                       {"type": "tool_use", "id": "p1", "name": "gateway_search_tools", "input": {"query": "x"}},
                       {"type": "tool_use", "id": "r1", "name": "real", "input": {}}],
           "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5,
                                                  "cache_creation": {"ephemeral_5m_input_tokens": 1}}}
    assert [c.name for c in A.calls(msg)] == ["gateway_search_tools", "real"]
    stripped = A.strip(msg, ["gateway_search_tools"])
    assert [b.get("name") for b in stripped["content"]] == [None, None, "real"] and stripped["stop_reason"] == "tool_use"
    only = A.strip(dict(msg, content=msg["content"][:3]), ["gateway_search_tools"])
    assert only["stop_reason"] == "end_turn"
    b = body(model="m", tools=[{"name": "real", "input_schema": {}}], messages=[{"role": "user", "content": "q"}])
    call = ToolCall("p1", "gateway_search_tools", {"query": "x"})
    out = json.loads(A.append_round(b, dict(msg, content=msg["content"][:3]), [ToolResult(call, "found", False)],
                                      ['{"name":"new","input_schema":{}}']))
    assert out["messages"][1]["content"][0]["signature"] == "sig"  # thinking kept as signed
    assert out["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "p1", "content": "found"}]}
    assert [t["name"] for t in out["tools"]] == ["real", "new"]
    second = {"id": "msg_2", "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
              "usage": {"input_tokens": 20, "output_tokens": 7, "cache_creation": {"ephemeral_5m_input_tokens": 2}}}
    merged = A.merge([only, second])
    assert merged["id"] == "msg_1" and merged["stop_reason"] == "end_turn"
    assert merged["usage"] == {"input_tokens": 30, "output_tokens": 12, "cache_creation": {"ephemeral_5m_input_tokens": 3}}
    assert [b["type"] for b in merged["content"]] == ["thinking", "text", "text"]


def test_chat_parse_view_and_forced():
    tools = openai_tools(3) + [{"type": "custom", "custom": {"name": "grammar"}}]
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "hello"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": tools[0]["function"]["name"], "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "user", "content": "post to slack"}]
    v = C.parse(body(model="m", tools=tools, messages=msgs, prompt_cache_key="pk",
                     tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
                         {"type": "function", "function": {"name": tools[2]["function"]["name"]}}]}}))
    assert v.query == "post to slack" and v.first_user == "hello" and v.session_hint == "pk"
    assert v.used == {tools[0]["function"]["name"]} and v.forced == {tools[2]["function"]["name"]}
    assert [t.pinned for t in v.tools] == [None, None, None, "builtin"] and v.tools[3].name == "grammar"


def test_chat_loop_helpers():
    completion = {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "let me look", "refusal": None, "annotations": [], "tool_calls": [
            {"id": "p", "type": "function", "function": {"name": "gateway_search_tools", "arguments": '{"query":"x"}'}}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 1}}}
    calls = C.calls(completion)
    assert calls == [ToolCall("p", "gateway_search_tools", {"query": "x"})]
    b = body(model="m", messages=[{"role": "user", "content": "q"}], tools=openai_tools(1))
    out = json.loads(C.append_round(b, completion, [ToolResult(calls[0], "res")], []))
    assert out["messages"][1] == {"role": "assistant", "content": "let me look", "tool_calls": [
        {"id": "p", "type": "function", "function": {"name": "gateway_search_tools", "arguments": '{"query":"x"}'}}]}
    assert out["messages"][2] == {"role": "tool", "tool_call_id": "p", "content": "res"}
    stripped = C.strip(completion, ["gateway_search_tools"])
    assert "tool_calls" not in stripped["choices"][0]["message"] and stripped["choices"][0]["finish_reason"] == "stop"
    final = {"id": "c2", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
             "tool_calls": [{"id": "r", "type": "function", "function": {"name": "real", "arguments": "{}"}}]}}],
             "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, "prompt_tokens_details": {"cached_tokens": 2}}}
    merged = C.merge([stripped, final])
    m = merged["choices"][0]
    assert m["finish_reason"] == "tool_calls" and m["message"]["content"] == "let me look"
    assert [t["id"] for t in m["message"]["tool_calls"]] == ["r"]
    assert merged["usage"]["total_tokens"] == 13 and merged["usage"]["prompt_tokens_details"]["cached_tokens"] == 3
