"""The upstream sees one continuous conversation: a turn stitched from hidden rounds comes back
in the client's next request, and the proxy puts the real rounds back in its place.

Real SDKs through a real mitmdump (tool-search) against the fake with its prefix-cache model
on. Turn 1: the model searches, then calls the found tool; the client gets one answer with
the call. Turn 2: the client sends that answer back with the tool's result. What reaches the
fake on turn 2 must start with exactly what it received on turn 1's last round (round one,
the hidden search exchange), followed by its own round-two answer as the client kept it: its
prompt cache then reads through the end of the hidden exchange.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.genai import types as gt

from tests.e2e.harness import MitmDump
from tests.e2e.wire_apis import (  # noqa: F401 (fixtures)
    CATALOG, GEMINI, MODEL_ID, READ_FILE, TARGET, _proxy_fixture, _running, aws_chain,
    converse_tools, fk, fresh, gemini_tools, ok, plan_search_then_call, r_tool, responses_call,
)
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, RecordedRequest, call, calls, reply, search

pytestmark = pytest.mark.e2e

_restore_proxy = _proxy_fixture("tool-search")


@pytest.fixture
def proxy(_restore_proxy: MitmDump, fk: FakeProvider, aws_chain: Any) -> MitmDump:
    fk.prompt_cache = True
    plan_search_then_call(fk)
    return _running(_restore_proxy, aws_chain)


def check_continuous(fk: FakeProvider, api: str, path: str, call_id: str) -> RecordedRequest:
    """Turn 2 went upstream as the continuation of turn 1's last round; the fake's cache says so."""
    first, second, third = ok(fk.api_requests(api))
    assert SEARCH_TOOL in json.dumps(first.reply) and TARGET in json.dumps(second.reply)
    before, after = second.json[path], third.json[path]
    assert after[:len(before)] == before  # round one and the hidden search exchange, as the fake received them
    assert SEARCH_TOOL in json.dumps(before[1:])
    answer = json.dumps(after[len(before):])  # round two's answer as the client kept it, then the tool's result
    assert call_id in answer and TARGET in answer and SEARCH_TOOL not in answer
    assert third.prompt is not None and second.prompt is not None
    # Cached through the end of round one's exchange: all that turn 1's last request sent.
    assert third.prompt["hit_segments"] >= second.prompt["segments"], (third.prompt, second.prompt)
    assert third.reply is not None and "sunny" in third.reply["text"]
    return third


def check_restored_record(proxy: MitmDump) -> None:
    proxy.records("t.jsonl", where=lambda r: r.get("restored") == 1)


def anthropic_two_turns(proxy: MitmDump, stream: bool) -> str:
    """Turn 1 as scripted; turn 2 sends its answer back with the found tool's result. The call's id."""
    client = proxy.anthropic()
    tools = CATALOG + [READ_FILE]
    messages: list[dict[str, Any]] = [{"role": "user", "content": fresh("What's the forecast for Paris?")}]

    def ask() -> Any:
        kw = dict(model="claude-sonnet-4-5", max_tokens=256, tools=tools, messages=messages)
        if not stream:
            return client.messages.create(**kw)
        with client.messages.stream(**kw) as s:
            return s.get_final_message()

    msg = ask()
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == TARGET and SEARCH_TOOL not in msg.model_dump_json()
    messages += [{"role": "assistant", "content": msg.content},  # the SDK's own objects, re-serialized by it
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
    assert "sunny" in "".join(b.text for b in ask().content if b.type == "text")
    return use.id


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    check_continuous(fk, "anthropic", "messages", anthropic_two_turns(proxy, stream))
    check_restored_record(proxy)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    client = proxy.openai()
    tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                               "parameters": t["input_schema"]}} for t in CATALOG + [READ_FILE]]
    messages: list[Any] = [{"role": "user", "content": fresh("What's the forecast for Paris?")}]

    def ask() -> Any:
        if not stream:
            return client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools).choices[0].message
        with client.chat.completions.stream(model="gpt-4o", messages=messages, tools=tools) as s:
            return s.get_final_completion().choices[0].message

    msg = ask()
    (tc,) = msg.tool_calls
    assert tc.function.name == TARGET and SEARCH_TOOL not in msg.model_dump_json()
    messages += [msg.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}]
    assert "sunny" in ask().content
    check_continuous(fk, "openai-chat", "messages", tc.id)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_responses_store_false(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """Codex's way: ``store: false``, output items sent back without ids or statuses."""
    client = proxy.openai()
    tools = [r_tool(t) for t in CATALOG + [READ_FILE]]
    history: list[dict[str, Any]] = [{"role": "user", "content": fresh("What's the forecast for Paris?")}]
    res = responses_call(client, stream, model="gpt-5", input=history, tools=tools, store=False)
    (fc,) = [o for o in res.output if o.type == "function_call"]
    assert fc.name == TARGET and SEARCH_TOOL not in res.model_dump_json()
    history += [o.model_dump(mode="json", exclude_none=True, exclude={"id", "status"}) for o in res.output]
    history.append({"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"})
    assert "sunny" in responses_call(client, stream, model="gpt-5", input=history, tools=tools, store=False).output_text
    check_continuous(fk, "openai-responses", "input", fc.call_id)


def test_gemini(proxy: MitmDump, fk: FakeProvider) -> None:
    """Gemini 3 checks thought signatures: the restored rounds carry each one where it came."""
    client = proxy.genai()
    config = gt.GenerateContentConfig(tools=gemini_tools())
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh("What's the forecast for Paris?"))])]
    res = client.models.generate_content(model=GEMINI, contents=contents, config=config)
    content = res.candidates[0].content
    (call,) = [p.function_call for p in content.parts if p.function_call]
    assert call.name == TARGET
    contents += [content, gt.Content(role="user", parts=[
        gt.Part.from_function_response(name=TARGET, response={"output": "sunny"})])]
    res2 = client.models.generate_content(model=GEMINI, contents=contents, config=config)
    assert "sunny" in res2.text
    check_continuous(fk, "gemini", "contents", TARGET)


def test_bedrock_converse(proxy: MitmDump, fk: FakeProvider) -> None:
    client = proxy.bedrock()
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": fresh("What's the forecast for Paris?")}]}]
    res = client.converse(modelId=MODEL_ID, messages=messages, toolConfig=converse_tools())
    message = res["output"]["message"]
    (use,) = [b["toolUse"] for b in message["content"] if "toolUse" in b]
    assert use["name"] == TARGET
    messages += [message, {"role": "user", "content": [
        {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"text": "sunny"}]}}]}]
    res2 = client.converse(modelId=MODEL_ID, messages=messages, toolConfig=converse_tools())
    assert "sunny" in res2["output"]["message"]["content"][0]["text"]
    check_continuous(fk, "bedrock-converse", "messages", use["toolUseId"])


def test_an_edited_answer_goes_upstream_as_the_client_sent_it(proxy: MitmDump, fk: FakeProvider) -> None:
    client = proxy.anthropic()
    tools = CATALOG + [READ_FILE]
    messages: list[dict[str, Any]] = [{"role": "user", "content": fresh("What's the forecast for Paris?")}]
    msg = client.messages.create(model="claude-sonnet-4-5", max_tokens=256, tools=tools, messages=messages)
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    edited = [b.model_dump(exclude_none=True) for b in msg.content] + [{"type": "text", "text": "(edited)"}]
    messages += [{"role": "assistant", "content": edited},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
    client.messages.create(model="claude-sonnet-4-5", max_tokens=256, tools=tools, messages=messages)
    third = ok(fk.api_requests("anthropic"))[2]
    assert third.json["messages"] == messages


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_two_searches_in_one_turn(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    fk.set_script([search("weather", nth=1), search("forecast", nth=2, no_result_for=[]), call(TARGET, {"city": "Paris"}, text="On it."),
                   reply("Forecast:", echo_last_result=True)])
    call_id = anthropic_two_turns(proxy, stream)
    recs = ok(fk.api_requests("anthropic"))
    assert len(recs) == 4
    before, after = recs[2].json["messages"], recs[3].json["messages"]
    assert after[:len(before)] == before and len(before) == 5  # the question, two searches and their results
    assert call_id in json.dumps(after[len(before)]) and recs[3].prompt["hit_segments"] >= recs[2].prompt["segments"]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_mixed_turn(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """Round two searched again and called the tool at once: the call went to the client, the
    search could not be answered upstream without the call's result. Turn 2 continues round
    one's exchange, then round two as the model made it, and the results turn answers both
    calls: the search's result first (the model reads what it found), the client's after."""
    fk.set_script([search("weather", nth=1),
                   calls((SEARCH_TOOL, {"query": "more"}), (TARGET, {"city": "Paris"}), text="On it.", nth=2, no_result_for=[]),
                   reply("Forecast:", echo_last_result=True)])
    call_id = anthropic_two_turns(proxy, stream)
    first, second, third = ok(fk.api_requests("anthropic"))
    assert [c["name"] for c in second.reply["calls"]] == [SEARCH_TOOL, TARGET]  # a mixed round
    before, after = second.json["messages"], third.json["messages"]
    assert after[:len(before)] == before
    made, answers = after[len(before)], after[len(before) + 1]
    assert [b["name"] for b in made["content"] if b["type"] == "tool_use"] == [SEARCH_TOOL, TARGET]
    assert [b["tool_use_id"] for b in answers["content"]] == [c["id"] for c in second.reply["calls"]]
    assert call_id == answers["content"][1]["tool_use_id"] and "sunny" in json.dumps(answers["content"][1])
    assert third.prompt["hit_segments"] >= second.prompt["segments"]
