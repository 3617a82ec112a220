"""Native deferral through a real mitmdump with the real SDKs, streaming and not: deferred tools
stay in tools[] marked ``defer_loading``, a search loads found ones inline (Anthropic
``tool_reference`` blocks, a Responses ``tool_search_output``), tools[] never changes within a
session, and an upstream that refuses the native fields gets the request the classic way."""

from __future__ import annotations

import json
import uuid
from functools import partial

import pytest

from tests.e2e.harness import addon_config
from tests.e2e.wire_apis import (  # Bedrock: its AWS credential chain, reused
    _proxy_fixture,
    _running,
    anthropic_message,
    aws_chain,  # noqa: F401 (a fixture)
    invoke_body,
)
from tests.fakeprovider import SEARCH_TOOL, call, calls, reply, search
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

CONFIG = partial(addon_config, strategy="tool-search", max_search_results=3, defer={"upfront": 2},
                 search={"backend": "bm25"})
CLAUDE = "claude-sonnet-4-5"
GPT = "gpt-5.4"
TARGET = "mcp__weather__get_forecast"
A_TOOLS = anthropic_tools(60)
O_TOOLS = [{"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
           for t in A_TOOLS]


@pytest.fixture(scope="module")
def tool_discovery_config():
    return CONFIG


def fresh(text: str) -> str:
    """A first user message no other test used: each test is its own session."""
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def deferred(rec) -> set[str]:
    return {t["name"] for t in rec.json.get("tools") or [] if t.get("defer_loading")}


def script_search_then_call(fake, searching=None):
    searching = searching if searching is not None else search("weather forecast", times=1)
    fake.set_script([
        searching,
        call(TARGET, {"city": "Paris"}, text="Checking the forecast."),
        reply("It will be sunny: ", echo_last_result=True),
    ])


# --- Anthropic -------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_search_loads_by_reference_and_the_model_calls_the_found_tool(mitm, fake, anthropic_client, stream):
    script_search_then_call(fake)
    kw = dict(model=CLAUDE, max_tokens=256, tools=A_TOOLS,
              messages=[{"role": "user", "content": fresh("Can you help me plan a trip to Paris?")}])
    if stream:
        with anthropic_client.messages.stream(**kw) as s:
            msg = s.get_final_message()
    else:
        msg = anthropic_client.messages.create(**kw)
    assert [b.name for b in msg.content if b.type == "tool_use"] == [TARGET] and msg.stop_reason == "tool_use"
    first, second = fake.api_requests("anthropic")
    assert TARGET in deferred(first) and TARGET not in first.tool_names  # out of the model's sight
    assert first.reply["calls"][0]["name"] == SEARCH_TOOL
    assert second.json["tools"] == first.json["tools"]  # nothing appended: the cache prefix holds
    result = second.json["messages"][-1]["content"][0]
    assert {"type": "tool_reference", "tool_name": TARGET} in result["content"]
    assert TARGET in second.tool_names and second.reply["calls"][0]["name"] == TARGET
    assert SEARCH_TOOL not in json.dumps(msg.model_dump())


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_mixed_turn_loads_what_it_found_on_the_next_turn(mitm, fake, anthropic_client, stream):
    """Round two searched and called the tool round one found at once: the client answers its call, and
    the next request carries the turn as the model made it with the search's result (its
    ``tool_reference`` loads) first: the found tool is loaded, no second search."""
    kept = "mcp__github__get_file_contents"
    fake.set_script([
        search("github file contents", nth=1),
        calls((SEARCH_TOOL, {"query": "weather forecast"}), (kept, {"path": "notes.txt"}), nth=2, no_result_for=[]),
        call(TARGET, {"city": "Paris"}, text="Checking the forecast."),
        reply("It will be sunny: ", echo_last_result=True),
    ])
    messages = [{"role": "user", "content": fresh("Get the github file contents of notes.txt and tell me what to pack")}]

    def ask():
        kw = dict(model=CLAUDE, max_tokens=256, tools=A_TOOLS, messages=messages)
        if not stream:
            return anthropic_client.messages.create(**kw)
        with anthropic_client.messages.stream(**kw) as s:
            return s.get_final_message()

    msg = ask()
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == kept and SEARCH_TOOL not in json.dumps(msg.model_dump())
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "hello"}]}]
    msg2 = ask()
    assert [b.name for b in msg2.content if b.type == "tool_use"] == [TARGET]
    first, second, third = fake.api_requests("anthropic")
    assert third.json["tools"] == first.json["tools"]
    before = second.json["messages"]
    assert third.json["messages"][:len(before)] == before  # round one's exchange, as it went
    made, answers = third.json["messages"][len(before):len(before) + 2]
    assert [b["name"] for b in made["content"] if b["type"] == "tool_use"] == [SEARCH_TOOL, kept]
    assert {"type": "tool_reference", "tool_name": TARGET} in answers["content"][0]["content"]
    assert answers["content"][1] == {"type": "tool_result", "tool_use_id": use.id, "content": "hello"}
    assert TARGET in third.tool_names and third.reply["calls"][0]["name"] == TARGET


def test_anthropic_tools_are_byte_identical_over_a_three_turn_session(mitm, fake, anthropic_client):
    script_search_then_call(fake)
    messages = [{"role": "user", "content": fresh("Can you help me plan a trip to Paris?")}]
    msg = anthropic_client.messages.create(model=CLAUDE, max_tokens=256, tools=A_TOOLS, messages=messages)
    use = next(b for b in msg.content if b.type == "tool_use")
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
    anthropic_client.messages.create(model=CLAUDE, max_tokens=256, tools=A_TOOLS, messages=messages)
    messages += [{"role": "assistant", "content": "It will be sunny."},
                 {"role": "user", "content": "Now post a message to the slack channel"}]
    anthropic_client.messages.create(model=CLAUDE, max_tokens=256, tools=A_TOOLS, messages=messages)
    reqs = fake.api_requests("anthropic")
    assert len(reqs) == 4
    raw = [r.text[r.text.index('"tools"'):] for r in reqs]
    tools_text = [json.dumps(r.json["tools"]) for r in reqs]
    assert len(set(tools_text)) == 1, "tools[] changed within the session"
    assert all(SEARCH_TOOL in t for t in raw)


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_refusing_native_fields_goes_classic_and_stays_classic(mitm, fake, anthropic_client, stream):
    fake.no_native_models = {CLAUDE}
    script_search_then_call(fake)
    kw = dict(model=CLAUDE, max_tokens=256, tools=A_TOOLS, stream=stream,
              messages=[{"role": "user", "content": fresh("Can you help me plan a trip to Paris?")}])
    if stream:
        with anthropic_client.messages.stream(**{k: v for k, v in kw.items() if k != "stream"}) as s:
            msg = s.get_final_message()
    else:
        msg = anthropic_client.messages.create(**kw)
    assert [b.name for b in msg.content if b.type == "tool_use"] == [TARGET]
    reqs = fake.api_requests("anthropic")
    assert reqs[0].status == 400 and deferred(reqs[0])
    assert all(not deferred(r) for r in reqs[1:]) and reqs[1].status == 200
    assert TARGET in reqs[2].tool_names  # classic: the found tool appended
    use = next(b for b in msg.content if b.type == "tool_use")
    kw["messages"] = kw["messages"] + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
    kw["stream"] = False
    anthropic_client.messages.create(**kw)
    later = fake.api_requests("anthropic")[len(reqs):]
    assert len(later) == 1 and later[0].status == 200 and not deferred(later[0])  # classic at once


def test_a_client_that_defers_itself_passes_untouched(mitm, fake, anthropic_client):
    tools = [{"name": "ToolSearch", "description": "Search deferred tools.",
              "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
             *[{**t, "defer_loading": True} for t in A_TOOLS]]
    fake.set_script([reply("ok")])
    anthropic_client.messages.create(model=CLAUDE, max_tokens=64, tools=tools,
                                     messages=[{"role": "user", "content": fresh("hello")}])
    (only,) = fake.api_requests("anthropic")
    assert only.json["tools"] == tools


# --- OpenAI Responses ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_search_is_answered_with_a_tool_search_output(mitm, fake, openai_client, stream):
    script_search_then_call(fake, call("tool_search", {"query": "weather forecast"}, times=1))
    kw = dict(model=GPT, tools=O_TOOLS, input=fresh("Can you help me plan a trip to Paris?"))
    if stream:
        with openai_client.responses.stream(**kw) as s:
            response = s.get_final_response()
    else:
        response = openai_client.responses.create(**kw)
    assert [i.type for i in response.output if i.type != "message"] == ["function_call"]
    assert [i.name for i in response.output if i.type == "function_call"] == [TARGET]
    assert "tool_search" not in json.dumps([i.model_dump() for i in response.output])
    assert [t.name for t in response.tools] == [t["name"] for t in O_TOOLS]  # the client's own echo
    first, second = fake.api_requests("openai-responses")
    assert TARGET in deferred(first) and first.reply["calls"][0]["name"] == "tool_search"
    assert second.json["tools"] == first.json["tools"]
    search_output = next(i for i in second.json["input"] if i.get("type") == "tool_search_output")
    assert TARGET in [t["name"] for t in search_output["tools"]]
    assert TARGET in second.tool_names and second.reply["calls"][0]["name"] == TARGET


def test_responses_stored_chain_keeps_working(mitm, fake, openai_client):
    script_search_then_call(fake, call("tool_search", {"query": "weather forecast"}, times=1))
    first = openai_client.responses.create(model=GPT, tools=O_TOOLS, input=fresh("Can you help me plan a trip to Paris?"))
    use = next(i for i in first.output if i.type == "function_call")
    nxt = openai_client.responses.create(model=GPT, tools=O_TOOLS, previous_response_id=first.id,
                                         input=[{"type": "function_call_output", "call_id": use.call_id,
                                                 "output": "sunny"}])
    assert "sunny" in nxt.output_text
    reqs = fake.api_requests("openai-responses")
    assert len(reqs) == 3 and all(r.status == 200 for r in reqs)
    assert len({json.dumps(r.json["tools"]) for r in reqs}) == 1


# --- Bedrock InvokeModel (Claude bodies) --------------------------------------------------------

_bedrock_proxy = _proxy_fixture("tool-search")
BEDROCK_CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.fixture
def bedrock_proxy(_bedrock_proxy, fake, aws_chain):
    return _running(_bedrock_proxy, aws_chain)


@pytest.mark.parametrize("stream", [False, True])
def test_bedrock_invoke_defers_natively_with_the_tool_search_beta(bedrock_proxy, fake, stream):
    script_search_then_call(fake)
    client = bedrock_proxy.bedrock()
    body = json.dumps(invoke_body([{"role": "user", "content": fresh("Can you help me plan a trip to Paris?")}],
                                  A_TOOLS))
    if stream:
        res = client.invoke_model_with_response_stream(modelId=BEDROCK_CLAUDE, body=body)
        msg = anthropic_message([json.loads(e["chunk"]["bytes"]) for e in res["body"]])
    else:
        msg = json.loads(client.invoke_model(modelId=BEDROCK_CLAUDE, body=body)["body"].read())
    assert [b["name"] for b in msg["content"] if b["type"] == "tool_use"] == [TARGET]
    first, second = fake.api_requests("bedrock-invoke")
    assert first.status == second.status == 200  # re-signed, and the beta named (the fake demands it)
    assert first.json["anthropic_beta"] == ["tool-search-tool-2025-10-19"] and TARGET in deferred(first)
    assert second.json["tools"] == first.json["tools"]
    assert {"type": "tool_reference", "tool_name": TARGET} in second.json["messages"][-1]["content"][0]["content"]
