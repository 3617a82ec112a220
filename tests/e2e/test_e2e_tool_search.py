"""The phantom search loop through a real mitmdump with the real SDKs, streaming and not,
for every search backend."""

from __future__ import annotations

import json
import uuid
from functools import partial

import anthropic
import pytest

from tests.e2e.harness import ConfigSpec, addon_config
from tests.fakeprovider import DISPATCHER, SEARCH_TOOL, call, calls, fail, reply, search
from tests.support.catalog import anthropic_tools, openai_tools

pytestmark = pytest.mark.e2e

READ_FILE_A = {"name": "read_file", "description": "Read a local file.",
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
READ_FILE_O = {"type": "function", "function": {"name": "read_file", "description": "Read a local file.",
                                                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
TARGET = "mcp__weather__get_forecast"


def config(backend: str) -> ConfigSpec:
    return partial(addon_config, strategy="tool-search", max_search_results=3, always_keep=["read_file"],
                   search={"backend": backend})


@pytest.fixture(scope="module", params=["regex", "bm25", "hybrid", "fuzzy"])
def tool_discovery_config(request):
    return config(request.param)


def fresh(text: str) -> str:
    """A first user message no other test used: each test is its own session."""
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def a_tools(n=60):
    return anthropic_tools(n) + [READ_FILE_A]


def o_tools(n=60):
    return openai_tools(n) + [READ_FILE_O]


def names_a(rec):
    return [t["name"] for t in rec.json.get("tools") or []]


def names_o(rec):
    return [t["function"]["name"] for t in rec.json.get("tools") or []]


def script_search_then_call(fake):
    fake.set_script([
        search("weather forecast", times=1),
        call(TARGET, {"city": "Paris"}, text="Checking the forecast."),
        reply("It will be sunny: ", echo_last_result=True),
    ])


def post_raw(mitm, url, body, headers):
    with mitm.httpx_client() as client:
        return client.post(url, json=body, headers=headers, timeout=60)


# --- Anthropic -------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_search_then_call_hidden_from_client(mitm, fake, stream):
    script_search_then_call(fake)
    tools = a_tools()
    body = {"model": "claude-x", "max_tokens": 256, "stream": stream, "tools": tools,
            "messages": [{"role": "user", "content": fresh("What's the forecast for Paris?")}]}
    r = post_raw(mitm, "https://api.anthropic.com/v1/messages", body, {"x-api-key": "sk-ant-test"})
    assert r.status_code == 200
    assert SEARCH_TOOL not in r.text  # nothing of the search reaches the client
    first, second = fake.api_requests("anthropic")
    assert names_a(first) == ["read_file", SEARCH_TOOL]
    assert names_a(second) == ["read_file", SEARCH_TOOL, *[n for n in names_a(second)[2:]]]
    assert TARGET in names_a(second)
    original = {t["name"]: t for t in tools}
    assert all(t == original[t["name"]] for t in second.json["tools"] if t["name"] != SEARCH_TOOL)
    result = second.json["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and TARGET in result["content"]
    if stream:
        assert "event: message_stop" in r.text and r.text.count("event: message_start") == 1
    else:
        msg = r.json()
        assert [b["name"] for b in msg["content"] if b["type"] == "tool_use"] == [TARGET]
        assert msg["stop_reason"] == "tool_use"
        assert msg["usage"]["input_tokens"] == first.reply["usage"]["input_tokens"] + second.reply["usage"]["input_tokens"]


def test_anthropic_sdk_stream_and_second_turn_is_sticky(mitm, fake, anthropic_client):
    script_search_then_call(fake)
    tools = a_tools()
    messages = [{"role": "user", "content": fresh("What's the forecast for Paris?")}]
    with anthropic_client.messages.stream(model="claude-x", max_tokens=256, tools=tools, messages=messages) as s:
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [u.name for u in uses] == [TARGET] and final.stop_reason == "tool_use"
    assert len(fake.api_requests("anthropic")) == 2
    # The agent runs the tool and comes back: the found tool is already there, no new search.
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]}]
    answer = anthropic_client.messages.create(model="claude-x", max_tokens=256, tools=tools, messages=messages)
    assert "sunny" in answer.content[0].text
    reqs = fake.api_requests("anthropic")
    assert len(reqs) == 3 and TARGET in names_a(reqs[2]) and names_a(reqs[2])[:2] == ["read_file", SEARCH_TOOL]
    # The prefix up to and including the search tool is the same before and after the discovery.
    assert reqs[2].json["tools"][:2] == reqs[0].json["tools"][:2]


def test_anthropic_mixed_turn(mitm, fake, anthropic_client):
    fake.set_script([
        calls((SEARCH_TOOL, {"query": "slack"}), ("read_file", {"path": "notes.txt"}), times=1),
        reply("done", echo_last_result=True),
    ])
    tools = a_tools()
    messages = [{"role": "user", "content": fresh("Read notes.txt and post it to Slack")}]
    msg = anthropic_client.messages.create(model="claude-x", max_tokens=256, tools=tools, messages=messages)
    assert [b.name for b in msg.content if b.type == "tool_use"] == ["read_file"] and msg.stop_reason == "tool_use"
    assert len(fake.api_requests("anthropic")) == 1  # never re-forwarded without the real call's result
    use = next(b for b in msg.content if b.type == "tool_use")
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "hello"}]}]
    anthropic_client.messages.create(model="claude-x", max_tokens=256, tools=tools, messages=messages)
    first, nxt = fake.api_requests("anthropic")
    assert any(n.startswith("mcp__slack__") for n in names_a(nxt)[2:])  # found tools ride along
    # The model's turn goes on as it made it, its search answered first beside the client's result.
    made, answers = nxt.json["messages"][1:3]
    assert [b["name"] for b in made["content"] if b["type"] == "tool_use"] == [SEARCH_TOOL, "read_file"]
    assert [b["tool_use_id"] for b in answers["content"]] == [b["id"] for b in made["content"] if b["type"] == "tool_use"]
    assert "mcp__slack__" in json.dumps(answers["content"][0]) and answers["content"][1]["content"] == "hello"


def test_anthropic_catastrophic_regex_is_bounded(mitm, fake, anthropic_client):
    tools = a_tools() + [{"name": "aaa_tool", "description": "a" * 5000 + "!", "input_schema": {"type": "object"}}]
    fake.set_script([search("(a+)+$", times=1), reply("ok", echo_last_result=True)])
    msg = anthropic_client.messages.create(model="claude-x", max_tokens=64, tools=tools,
                                           messages=[{"role": "user", "content": fresh("anything")}])
    assert msg.content[0].text.startswith("ok")
    second = fake.api_requests("anthropic")[1]
    assert second.json["messages"][-1]["content"][0]["type"] == "tool_result"


@pytest.mark.parametrize("args", [{"query": ""}, {}, {"query": 42}, {"query": "x" * 10_000}])
def test_bad_phantom_arguments_get_a_readable_error(mitm, fake, anthropic_client, args):
    fake.set_script([call(SEARCH_TOOL, args, times=1), reply("noted", echo_last_result=True)])
    msg = anthropic_client.messages.create(model="claude-x", max_tokens=64, tools=a_tools(),
                                           messages=[{"role": "user", "content": fresh("search badly")}])
    assert msg.content[0].text.startswith("noted")
    result = fake.api_requests("anthropic")[1].json["messages"][-1]["content"][0]
    assert result.get("is_error") is True and result["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_500_mid_loop(mitm, fake, anthropic_client, stream):
    """JSON: the upstream's status reaches the client. A stream has already started (its
    message_start went out live): the error arrives as the API's own in-stream error event,
    and the SDK raises, so the agent's retry logic applies."""
    fake.set_script([search("forecast", times=1), fail(500, "overloaded", nth=2)])
    body = {"model": "claude-x", "max_tokens": 64, "stream": stream, "tools": a_tools(),
            "messages": [{"role": "user", "content": fresh("forecast?")}]}
    r = post_raw(mitm, "https://api.anthropic.com/v1/messages", body, {"x-api-key": "k"})
    assert SEARCH_TOOL not in r.text
    if not stream:
        assert r.status_code == 500
        return
    assert r.status_code == 200 and "event: error" in r.text and "overloaded" in r.text
    fake.reset()
    fake.set_script([search("forecast", times=1), fail(500, "overloaded", nth=2)])
    with pytest.raises(anthropic.APIStatusError, match="overloaded"):
        with anthropic_client.messages.stream(model="claude-x", max_tokens=64, tools=a_tools(),
                                              messages=[{"role": "user", "content": fresh("forecast?")}]) as s:
            s.get_final_message()


# --- OpenAI Chat Completions ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_openai_search_then_call(mitm, fake, openai_client, stream):
    script_search_then_call(fake)
    kw = dict(model="gpt-x", tools=o_tools(), messages=[{"role": "user", "content": fresh("forecast for Paris?")}])
    if stream:
        calls_seen = {}
        for chunk in openai_client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
            for ch in chunk.choices:
                for tc in ch.delta.tool_calls or []:
                    if tc.function and tc.function.name:
                        calls_seen[tc.index] = tc.function.name
        names = list(calls_seen.values())
    else:
        res = openai_client.chat.completions.create(**kw)
        names = [tc.function.name for tc in res.choices[0].message.tool_calls]
        assert res.choices[0].finish_reason == "tool_calls"
    assert names == [TARGET]
    first, second = fake.api_requests("openai-chat") or fake.api_requests()
    # Call-through (Chat's default): tools[] stays as it was; the model calls the found tool through the dispatcher.
    assert names_o(first) == names_o(second) == ["read_file", SEARCH_TOOL, DISPATCHER] and second.can_call(TARGET)
    assert second.called() == [TARGET] and second.json["messages"][-1]["role"] == "tool"


def test_openai_raw_stream_has_no_phantom(mitm, fake):
    script_search_then_call(fake)
    body = {"model": "gpt-x", "stream": True, "tools": o_tools(),
            "messages": [{"role": "user", "content": fresh("forecast for Paris?")}]}
    r = post_raw(mitm, "https://api.openai.com/v1/chat/completions", body, {"authorization": "Bearer sk-test"})
    assert r.status_code == 200 and SEARCH_TOOL not in r.text and r.text.rstrip().endswith("data: [DONE]")
    assert TARGET in r.text


def test_telemetry_records_the_search(mitm, fake, anthropic_client):
    script_search_then_call(fake)
    anthropic_client.messages.create(model="claude-x", max_tokens=64, tools=a_tools(),
                                     messages=[{"role": "user", "content": fresh("telemetry forecast?")}])
    rec = [x for x in mitm.records(where=lambda x: x.get("searches")) if x.get("searches")][-1]
    assert rec["loops"] == 1 and rec["searches"][0]["query"] == "weather forecast"
    assert TARGET in rec["searches"][0]["matched"] and rec["outcome"] == "done"
    assert rec["loop_added_ms"] >= 0 and rec["upstream_ms"] > 0
