"""Bedrock adapters: Converse (boto3-shaped bodies, cachePoint placement, botocore's own
validation) and InvokeModel with Claude bodies; streams read back by boto3 and AnthropicBedrock."""

from __future__ import annotations

import copy
import json
from urllib.parse import quote

import pytest
from tests.support.streams import anthropic_bedrock_final, boto3_events
from tooldisco.engine.loop import Finish, Found, PhantomLoop, Send
from tooldisco.policy.modes import ClassicMode

from tests.support.loop_driver import Driver
from tooldisco.core.types import Tool, ToolCall, ToolResult, Unsupported
from tooldisco.apis.bedrock.adapter import ConverseAdapter, InvokeAdapter, place_structural
from tooldisco.apis.registry import detect
from tooldisco.apis.bedrock import stream as streams

from tests.support.catalog import anthropic_tools, tool_specs

boto3 = pytest.importorskip("boto3")

C = ConverseAdapter(stream=True)
P = "gateway_search_tools"
CACHE = {"cachePoint": {"type": "default"}}
SIGNATURE = "ErcBCkgIBhABGAIiQMx3bW9ja1NpZ25hdHVyZUZvclRlc3Rz"
ARN = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
ENCODED_ARN = quote(ARN, safe="")  # what boto3 puts in the path


def specs(n: int) -> list[dict]:
    return [{"toolSpec": {"name": name, "description": desc, "inputSchema": {"json": {
        "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in p.items()},
        "required": list(p)[:1]}}}} for name, desc, p in tool_specs(n)]


def converse_body(**over) -> str:
    """What boto3's ``converse`` serializes (modelId is in the path)."""
    body = {
        "messages": [
            {"role": "user", "content": [{"text": "which PRs are open on acme/shop?"}]},
            {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "List them.", "signature": SIGNATURE}}},
                {"toolUse": {"toolUseId": "tooluse_A1", "name": "mcp__github__list_pull_requests",
                             "input": {"repo": "acme/shop"}}},
                {"toolUse": {"toolUseId": "tooluse_B2", "name": "mcp__github__search_code", "input": {"query": "x"}}}]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "tooluse_A1", "content": [{"json": {"prs": [12]}}], "status": "success"}},
                {"toolResult": {"toolUseId": "tooluse_B2", "content": [{"text": "checkout.py"}]}}]},
            {"role": "assistant", "content": [{"text": "One open PR: #12."}]},
            {"role": "user", "content": [{"text": "merge #12 and post to slack"}, CACHE]},
        ],
        "system": [{"text": "You are a release assistant."}, CACHE],
        "inferenceConfig": {"maxTokens": 4096, "temperature": 0.2},
        "toolConfig": {"tools": [*specs(8), CACHE], "toolChoice": {"auto": {}}},
        "additionalModelRequestFields": {"thinking": {"type": "enabled", "budget_tokens": 2048}},
    }
    body.update(over)
    return json.dumps(body, indent=1)


def converse_answer(*content: dict, stop: str = "tool_use", tokens: int = 40) -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": list(content)}},
        "stopReason": stop,
        "usage": {"inputTokens": 1000, "outputTokens": tokens, "totalTokens": 1000 + tokens,
                  "cacheReadInputTokens": 800, "cacheWriteInputTokens": 0},
        "metrics": {"latencyMs": 900},
    }


def use(name: str = P, tid: str = "tooluse_S1", **inp) -> dict:
    return {"toolUse": {"toolUseId": tid, "name": name, "input": inp or {"query": "slack post message"}}}


def validate(body: str) -> None:
    """botocore's own validator for the Converse input (the body is its members but modelId)."""
    from botocore.validate import ParamValidator

    model = boto3.client("bedrock-runtime", region_name="us-east-1").meta.service_model
    shape = model.operation_model("Converse").input_shape
    report = ParamValidator().validate({"modelId": "m", **json.loads(body)}, shape)
    assert not report.has_errors(), report.generate_report()


@pytest.mark.parametrize(
    "path, kind",
    [("/model/anthropic.claude-sonnet-4-5-20250929-v1:0/converse", ("bedrock_converse", False)),
     ("/model/us.amazon.nova-pro-v1:0/converse-stream", ("bedrock_converse", True)),
     (f"/model/{ENCODED_ARN}/invoke", ("bedrock_invoke", False)),
     (f"/model/{ARN}/invoke-with-response-stream", ("bedrock_invoke", True)),
     (f"/bedrock/model/{ENCODED_ARN}/converse-stream?trace=1", ("bedrock_converse", True)),
     ("/model/m/count-tokens", None), ("/foundation-models", None), ("/model//converse", None)],
)
def test_detect(path, kind):
    a = detect("POST", path, "bedrock-runtime.us-west-2.amazonaws.com")
    assert ((a.api, a.stream) if a else None) == kind
    assert detect("GET", path) is None


def test_converse_parse():
    forced = {"tool": {"name": "mcp__slack__post_message"}}
    v = C.parse(converse_body(toolConfig={"tools": [*specs(8), CACHE], "toolChoice": forced}))
    assert (v.first_user, v.query) == ("which PRs are open on acme/shop?", "merge #12 and post to slack")
    assert v.used == {"mcp__github__list_pull_requests", "mcp__github__search_code"}
    assert v.forced == {"mcp__slack__post_message"} and v.stream
    assert [t.name for t in v.tools] == [s["toolSpec"]["name"] for s in specs(8)]  # the cachePoint is not a tool
    assert v.tools[0].params[0] == ("repo", "Repository owner/name")
    assert not ConverseAdapter().parse(converse_body(toolConfig=None)).tools


@pytest.mark.parametrize(
    "b, why",
    [('{"system":[]}', "no messages"), ('{"messages":[],"toolConfig":{"tools":[{"toolSpec":{}}]}}', "no name"),
     ('{"messages":[],"toolConfig":{"tools":[{"toolSpec":{"name":"a"}},{"toolSpec":{"name":"a"}}]}}', "duplicate")],
)
def test_converse_unsupported(b, why):
    with pytest.raises(Unsupported, match=why):
        C.parse(b)


def test_with_tools_keeps_a_trailing_cache_point_last_and_bytes_intact():
    b = converse_body()
    v = C.parse(b)
    raws = [v.tools[0].raw, v.tools[6].raw, C.phantom_tool(P, "Search.")]
    out = C.with_tools(b, raws)
    tools = json.loads(out)["toolConfig"]["tools"]
    assert tools == [json.loads(r) for r in raws] + [CACHE]
    assert all(r in out for r in raws)
    assert out.startswith(b.split('"tools"')[0]) and out.endswith(b.split('"toolChoice"')[1])
    validate(out)


def test_cache_points_between_tools_stay_with_their_group():
    s = [json.dumps(x) for x in specs(4)]
    cache = json.dumps(CACHE)
    original = [s[0], s[1], cache, s[2], s[3], cache]
    assert place_structural(original, [s[0], s[3], "PH"]) == [s[0], cache, s[3], "PH", cache]
    assert place_structural(original, [s[2], "PH"]) == [cache, s[2], "PH", cache]  # its group is gone: at the head
    assert place_structural([s[0]], [s[0], "PH"]) == [s[0], "PH"]


def test_with_tools_creates_a_tool_config():
    out = C.with_tools('{"messages":[{"role":"user","content":[{"text":"hi"}]}]}', [C.phantom_tool(P, "s")])
    assert [t["toolSpec"]["name"] for t in json.loads(out)["toolConfig"]["tools"]] == [P]
    validate(out)


def test_calls_continue_strip_merge():
    b = C.with_tools(converse_body(), [C.phantom_tool(P, "Search.")])
    first = converse_answer({"reasoningContent": {"reasoningText": {"text": "search", "signature": SIGNATURE}}},
                            {"text": "Looking for a Slack tool."}, use())
    (call,) = C.calls(first)
    assert call == ToolCall("tooluse_S1", P, {"query": "slack post message"})
    out = C.append_round(b, first, [ToolResult(call, "found mcp__slack__post_message")], [json.dumps(specs(6)[-1])])
    data = json.loads(out)
    assert data["messages"][-2] == first["output"]["message"]  # signed reasoning as it came
    assert data["messages"][-1] == {"role": "user", "content": [
        {"toolResult": {"toolUseId": "tooluse_S1", "content": [{"text": "found mcp__slack__post_message"}]}}]}
    assert data["toolConfig"]["tools"][-2:] == [specs(6)[-1], CACHE]  # found tool before the trailing cachePoint
    validate(out)
    stripped = C.strip(first, [P])
    assert stripped["stopReason"] == "end_turn" and len(stripped["output"]["message"]["content"]) == 2
    mixed = C.strip(converse_answer(use(), use("real", "tooluse_R", a="1")), [P])
    assert mixed["stopReason"] == "tool_use" and [c.name for c in C.calls(mixed)] == ["real"]
    second = converse_answer({"text": "Posted."}, stop="end_turn", tokens=10)
    merged = C.merge([stripped, second])
    assert [list(b) for b in merged["output"]["message"]["content"]] == [["reasoningContent"], ["text"], ["text"]]
    assert merged["usage"] == {"inputTokens": 2000, "outputTokens": 50, "totalTokens": 2050,
                               "cacheReadInputTokens": 1600, "cacheWriteInputTokens": 0}
    assert merged["metrics"] == {"latencyMs": 1800} and merged["stopReason"] == "end_turn"
    assert P in json.dumps(first)  # inputs untouched


def test_converse_stream_through_the_loop_read_back_by_boto3():
    slack = Tool("mcp__slack__post_message", json.dumps(specs(6)[-1]))
    loop = Driver(PhantomLoop(C, ClassicMode(C, P), [P]), lambda c: Found(ToolResult(c, "loaded"), [slack]))
    body = C.with_tools(converse_body(), [C.phantom_tool(P, "Search.")])
    act = loop.start(body, converse_answer({"text": "Searching."}, use()))
    assert isinstance(act, Send)
    done = loop.receive(converse_answer(use(slack.name, "tooluse_P", channel="C1", text="merged")))
    assert isinstance(done, Finish) and P not in json.dumps(done.message)
    encoded = C.encode_stream(done.message)
    assembler = streams.ConverseStreamAssembler()
    for event in boto3_events("converse_stream", encoded, chunk=7):
        ((name, payload),) = event.items()
        assembler.apply(name, payload)
    assert assembler.message() == done.message
    decoder = C.decoder()
    decoder.feed(encoded)
    decoder.feed(b"")
    assert decoder.done and decoder.message() == done.message


def claude_body(**over) -> str:
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1024, "tools": anthropic_tools(6),
            "messages": [{"role": "user", "content": "post the release notes to slack"}]}
    body.update(over)
    return json.dumps(body, indent=1)


def test_invoke_parses_claude_bodies_only():
    streaming, plain = InvokeAdapter(stream=True), InvokeAdapter()
    v = streaming.parse(claude_body())
    assert v.stream and v.query == "post the release notes to slack" and len(v.tools) == 6
    assert not plain.parse(claude_body(stream=True)).stream  # the path decides, not the body
    for other in ('{"prompt":"<s>[INST] hi [/INST]","max_gen_len":64}',  # Llama
                  '{"schemaVersion":"messages-v1","messages":[{"role":"user","content":[{"text":"hi"}]}]}'):  # Nova
        with pytest.raises(Unsupported, match="not a Claude body"):
            plain.parse(other)


def test_invoke_stream_read_back_by_anthropic_bedrock():
    adapter = detect("POST", f"/model/{ENCODED_ARN}/invoke-with-response-stream")
    assert isinstance(adapter, InvokeAdapter)
    first = {"id": "msg_bdrk_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
             "content": [{"type": "text", "text": "Searching."},
                         {"type": "tool_use", "id": "toolu_1", "name": P, "input": {"query": "slack"}}],
             "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 500, "output_tokens": 20}}
    second = {**first, "id": "msg_bdrk_2", "content": [{"type": "text", "text": "Posted."}], "stop_reason": "end_turn",
              "usage": {"input_tokens": 600, "output_tokens": 5}}
    merged = adapter.merge([adapter.strip(first, [P]), second])
    encoded = adapter.encode_stream(merged)
    assert anthropic_bedrock_final(encoded, chunk=9) == {**merged, "stop_details": None}
    decoder = adapter.decoder()
    decoder.feed(encoded)
    decoder.feed(b"")
    assert decoder.done and decoder.message() == merged
    body = adapter.append_round(claude_body(), first, [ToolResult(adapter.calls(first)[0], "found")], [])
    assert json.loads(body)["messages"][-1]["content"][0]["tool_use_id"] == "toolu_1"


def test_adapter_does_not_mutate_inputs():
    m = converse_answer({"text": "a"}, use())
    before = copy.deepcopy(m)
    C.strip(m, [P])
    C.merge([m, m])
    C.append_round(converse_body(), m, [ToolResult(C.calls(m)[0], "x")], [])
    assert m == before
