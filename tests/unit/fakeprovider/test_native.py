"""The fake provider validates native deferral like the APIs: deferred tools are out of the
model's sight until a ``tool_reference`` (Anthropic) or a ``tool_search_output`` (Responses)
loads them; a reference names a tool of ``tools[]``; not every tool is deferred; Bedrock wants
the tool-search beta; models listed in ``no_native_models`` refuse the fields with a 400.
Driven through the official SDKs."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.fakeprovider import FakeProvider, call, reply

MODEL = "claude-sonnet-4-5"
TOOLS = [{"name": n, "description": f"{n} tool", "input_schema": {"type": "object", "properties": {}}}
         for n in ("search_tools", "get_weather", "send_mail")]
DEFERRED = [TOOLS[0], *[{**t, "defer_loading": True} for t in TOOLS[1:]]]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    with FakeProvider(stream_delay=0) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeProvider) -> FakeProvider:
    server.reset()
    return server


@pytest.fixture
def claude(fake: FakeProvider) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(base_url=fake.url, api_key="sk-test", max_retries=0)
    yield client
    client.close()


@pytest.fixture
def gpt(fake: FakeProvider) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", max_retries=0)
    yield client
    client.close()


def history(reference: str) -> list[dict]:
    return [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "search_tools",
                                               "input": {"query": "weather"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": "found"}, {"type": "tool_reference", "tool_name": reference}]}]}]


def test_a_deferred_tool_is_hidden_until_a_reference_loads_it(fake, claude):
    fake.set_script([call("get_weather", {}), reply("no tool")])
    msg = claude.messages.create(model=MODEL, max_tokens=9, tools=DEFERRED,
                                 messages=[{"role": "user", "content": "weather?"}])
    assert msg.content[0].type == "text"
    assert fake.api_requests()[-1].tool_names == ["search_tools"]
    msg = claude.messages.create(model=MODEL, max_tokens=9, tools=DEFERRED, messages=history("get_weather"))
    assert [b.name for b in msg.content if b.type == "tool_use"] == ["get_weather"]
    assert fake.api_requests()[-1].tool_names == ["search_tools", "get_weather"]


def test_a_scripted_call_to_an_unloaded_deferred_tool_fails_loudly(fake, claude):
    fake.set_script([call("send_mail", {}, require_offered=False)])
    with pytest.raises(anthropic.BadRequestError, match="deferred tool"):
        claude.messages.create(model=MODEL, max_tokens=9, tools=DEFERRED, messages=history("get_weather"))


@pytest.mark.parametrize("tools, messages, error", [
    ([{**t, "defer_loading": True} for t in TOOLS], [{"role": "user", "content": "hi"}], "every tool is deferred"),
    (DEFERRED, history("no_such_tool"), "not in `tools`"),
])
def test_anthropic_rejects_what_the_api_rejects(fake, claude, tools, messages, error):
    with pytest.raises(anthropic.BadRequestError, match=error):
        claude.messages.create(model=MODEL, max_tokens=9, tools=tools, messages=messages)


def test_a_model_without_native_deferral_refuses_defer_loading(fake, claude):
    fake.no_native_models = {MODEL}
    with pytest.raises(anthropic.BadRequestError, match="defer_loading"):
        claude.messages.create(model=MODEL, max_tokens=9, tools=DEFERRED, messages=[{"role": "user", "content": "hi"}])
    claude.messages.create(model=MODEL, max_tokens=9, tools=TOOLS, messages=[{"role": "user", "content": "hi"}])


FUNCTIONS = [{"type": "function", "name": t["name"], "parameters": t["input_schema"], "defer_loading": True}
             for t in TOOLS[1:]]
SEARCH = {"type": "tool_search", "execution": "client", "description": "Search tools.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}


def test_responses_tool_search_call_and_output_load_a_deferred_function(fake, gpt):
    fake.set_script([call("tool_search", {"query": "weather"}, times=1), call("get_weather", {}), reply("done")])
    first = gpt.responses.create(model="gpt-5.4", tools=[*FUNCTIONS, SEARCH], input="weather?")
    (search,) = first.output
    assert search.type == "tool_search_call" and search.execution == "client"
    assert fake.api_requests()[-1].tool_names == ["tool_search"]
    loaded = {k: v for k, v in FUNCTIONS[0].items() if k != "defer_loading"}
    second = gpt.responses.create(model="gpt-5.4", tools=[*FUNCTIONS, SEARCH], previous_response_id=first.id,
                                  input=[{"type": "tool_search_output", "call_id": search.call_id,
                                          "execution": "client", "status": "completed", "tools": [loaded]}])
    assert [i.name for i in second.output if i.type == "function_call"] == ["get_weather"]
    with pytest.raises(openai.BadRequestError, match="No tool search output"):
        gpt.responses.create(model="gpt-5.4", tools=[*FUNCTIONS, SEARCH], previous_response_id=first.id,
                             input="and?")


def test_responses_deferred_functions_need_a_tool_search_and_a_model_that_has_it(fake, gpt):
    with pytest.raises(openai.BadRequestError, match="require a `tool_search` tool"):
        gpt.responses.create(model="gpt-5.4", tools=FUNCTIONS, input="hi")
    fake.no_native_models = {"gpt-5"}
    with pytest.raises(openai.BadRequestError, match="defer_loading"):
        gpt.responses.create(model="gpt-5", tools=[*FUNCTIONS, SEARCH], input="hi")
