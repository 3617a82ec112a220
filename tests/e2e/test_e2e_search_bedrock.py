"""The phantom search loop through a real mitmdump for Bedrock Converse and InvokeModel (boto3),
SigV4 re-signed on every round, and an upstream failure mid-loop.

Shared set-up (configs, proxies, catalogs, clients): ``tests/e2e/wire_apis.py``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import botocore.exceptions
import pytest
from tests.e2e.harness import MitmDump
from tests.e2e.wire_apis import (  # noqa: F401 (fixtures are used by name)
    _passthrough_proxy,
    _relevance_proxy,
    _toolsearch_proxy,
    BEDROCK_URL,
    CACHE_POINT,
    CATALOG,
    MODEL_ID,
    TARGET,
    aws_chain,
    b_spec,
    b_specs,
    config,
    converse_call,
    converse_tools,
    fk,
    frames,
    fresh,
    invoke_body,
    invoke_call,
    invoke_tools,
    ok,
    passthrough,
    plan_search_then_call,
    relevance,
    reply_calls,
    signed_headers,
    toolsearch,
    usage_sum,
)
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, fail, search

pytestmark = pytest.mark.e2e

# =================================================================================================
# tool-search: Bedrock Converse and InvokeModel (SigV4 re-signed on every round)
# =================================================================================================


@pytest.mark.parametrize("stream", [False, True])
def test_bedrock_converse_search_then_call(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_search_then_call(fk)
    client, config = toolsearch.bedrock(), converse_tools()
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": fresh("What's the forecast for Paris?")}]}]
    res = converse_call(client, stream, modelId=MODEL_ID, messages=messages, toolConfig=config)
    assert SEARCH_TOOL not in json.dumps(res, default=str)
    content = res["output"]["message"]["content"]
    uses = [b["toolUse"] for b in content if "toolUse" in b]
    assert [u["name"] for u in uses] == [TARGET] and uses[0]["input"] == {"city": "Paris"}
    assert res["stopReason"] == "tool_use"
    first, second = recs = ok(fk.api_requests("bedrock-converse"))  # both rounds verified by SigV4
    assert [s["name"] for s in b_specs(first)] == ["read_file", SEARCH_TOOL]
    assert first.json["toolConfig"]["tools"][-1] == CACHE_POINT
    tools2 = second.json["toolConfig"]["tools"]
    assert tools2[-1] == CACHE_POINT and tools2[:2] == first.json["toolConfig"]["tools"][:2]
    assert b_spec(next(t for t in CATALOG if t["name"] == TARGET)) in tools2  # as the client defined it
    assert res["usage"]["inputTokens"] == usage_sum(recs, "input_tokens")
    assert res["usage"]["outputTokens"] == usage_sum(recs, "output_tokens")
    assert res["usage"]["totalTokens"] == res["usage"]["inputTokens"] + res["usage"]["outputTokens"]
    messages += [
        {"role": "assistant", "content": content},
        {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": uses[0]["toolUseId"], "content": [{"text": "sunny"}]}}],
        },
    ]
    res2 = converse_call(client, stream, modelId=MODEL_ID, messages=messages, toolConfig=config)
    assert res2["output"]["message"]["content"] == [{"text": "Forecast:\nlast tool result: sunny"}]
    third = ok(fk.api_requests("bedrock-converse"))[2]
    assert reply_calls(third) == [] and TARGET in [s["name"] for s in b_specs(third)]


@pytest.mark.parametrize("stream", [False, True])
def test_bedrock_invoke_search_then_call(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_search_then_call(fk)
    client, tools = toolsearch.bedrock(), invoke_tools()
    messages: list[dict[str, Any]] = [{"role": "user", "content": fresh("What's the forecast for Paris?")}]
    msg, events = invoke_call(client, stream, invoke_body(messages, tools))
    assert SEARCH_TOOL not in json.dumps(msg) + json.dumps(events)
    uses = [b for b in msg["content"] if b["type"] == "tool_use"]
    assert [u["name"] for u in uses] == [TARGET] and msg["stop_reason"] == "tool_use"
    first, second = recs = ok(fk.api_requests("bedrock-invoke"))
    assert [t["name"] for t in first.json["tools"]] == ["read_file", SEARCH_TOOL]
    found = {t["name"]: t for t in second.json["tools"][2:]}
    assert found[TARGET] == next(t for t in CATALOG if t["name"] == TARGET)
    assert "model" not in second.json and "stream" not in second.json  # still a valid Bedrock Claude body
    assert msg["usage"]["input_tokens"] == usage_sum(recs, "input_tokens")
    assert msg["usage"]["output_tokens"] == usage_sum(recs, "output_tokens")
    messages += [
        {"role": "assistant", "content": msg["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"], "content": "sunny"}]},
    ]
    msg2, _ = invoke_call(client, stream, invoke_body(messages, tools))
    assert msg2["content"][0]["text"] == "Forecast:\nlast tool result: sunny"
    third = ok(fk.api_requests("bedrock-invoke"))[2]
    assert reply_calls(third) == [] and TARGET in [t["name"] for t in third.json["tools"]]


def test_bedrock_invoke_stream_keeps_invocation_metrics(toolsearch: MitmDump, fk: FakeProvider) -> None:
    """Bedrock ends every InvokeModel stream with ``amazon-bedrock-invocationMetrics`` on
    ``message_stop`` (SDKs read usage there); the re-encoded stream must too, summed."""
    plan_search_then_call(fk)
    body = invoke_body([{"role": "user", "content": fresh("What's the forecast for Paris?")}], invoke_tools())
    _, events = invoke_call(toolsearch.bedrock(), True, body)
    recs = ok(fk.api_requests("bedrock-invoke"))
    metrics = events[-1].get("amazon-bedrock-invocationMetrics")
    assert metrics is not None, events[-1]
    assert metrics["inputTokenCount"] == usage_sum(recs, "input_tokens")
    assert metrics["outputTokenCount"] == usage_sum(recs, "output_tokens")


def test_bedrock_invoke_token_count_headers_are_summed(toolsearch: MitmDump, fk: FakeProvider) -> None:
    """InvokeModel reports usage in ``X-Amzn-Bedrock-*-Token-Count`` headers too: they must
    agree with the summed body usage, not describe round one only."""
    plan_search_then_call(fk)
    body = invoke_body([{"role": "user", "content": fresh("What's the forecast for Paris?")}], invoke_tools())
    res = toolsearch.bedrock().invoke_model(modelId=MODEL_ID, body=json.dumps(body))
    msg = json.loads(res["body"].read())
    headers = res["ResponseMetadata"]["HTTPHeaders"]
    assert int(headers["x-amzn-bedrock-input-token-count"]) == msg["usage"]["input_tokens"]
    assert int(headers["x-amzn-bedrock-output-token-count"]) == msg["usage"]["output_tokens"]


@pytest.mark.parametrize("op", ["converse", "converse-stream", "invoke", "invoke-with-response-stream"])
def test_bedrock_raw_bytes_hide_the_search(toolsearch: MitmDump, fk: FakeProvider, op: str) -> None:
    """Raw HTTP, SigV4-signed by hand: nothing of the search in the answer, and a re-encoded event
    stream is valid frames (both CRCs), nothing of the search even inside InvokeModel's base64 chunks."""
    plan_search_then_call(fk)
    text = fresh("What's the forecast for Paris?")
    if op.startswith("converse"):
        body = json.dumps({"messages": [{"role": "user", "content": [{"text": text}]}], "toolConfig": converse_tools()})
    else:
        body = json.dumps(invoke_body([{"role": "user", "content": text}], invoke_tools()))
    url = f"{BEDROCK_URL}/{op}"
    with toolsearch.httpx_client() as http:
        r = http.post(url, content=body.encode(), headers=signed_headers(url, body.encode()))
    assert r.status_code == 200, r.text
    assert len(ok(fk.api_requests())) == 2
    assert SEARCH_TOOL.encode() not in r.content
    if op in ("converse", "invoke"):
        assert r.headers["content-type"].startswith("application/json")
        assert TARGET in r.text
        return
    assert r.headers["content-type"] == "application/vnd.amazon.eventstream"
    decoded = frames(r.content)
    assert all(h[":message-type"] == "event" for h, _ in decoded)
    payloads = [p if op == "converse-stream" else json.loads(base64.b64decode(p["bytes"])) for _, p in decoded]
    assert SEARCH_TOOL not in json.dumps(payloads) and TARGET in json.dumps(payloads)


def test_bedrock_api_key_search_then_call(
    toolsearch: MitmDump, fk: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bearer-authenticated Converse: nothing to sign, the loop works the same."""
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "ABSKZmFrZS1rZXk=")
    plan_search_then_call(fk)
    client = toolsearch.bedrock(aws_access_key_id=None, aws_secret_access_key=None)
    res = client.converse(
        modelId=MODEL_ID,
        toolConfig=converse_tools(),
        messages=[{"role": "user", "content": [{"text": fresh("What's the forecast for Paris?")}]}],
    )
    assert [b["toolUse"]["name"] for b in res["output"]["message"]["content"] if "toolUse" in b] == [TARGET]
    recs = ok(fk.api_requests("bedrock-converse"))
    assert len(recs) == 2 and all(r.header("authorization") == "Bearer ABSKZmFrZS1rZXk=" for r in recs)


# An upstream failure in the middle of the loop.
@pytest.mark.parametrize("stream", [False, True])
def test_bedrock_converse_upstream_500_mid_loop(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """boto3 must see the upstream's error as Bedrock sent it (``x-amzn-ErrorType`` names the
    exception: retry and error handling depend on it)."""
    fk.set_script([search("forecast", times=1), fail(500, "overloaded", nth=2)])
    client = toolsearch.bedrock()
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        converse_call(
            client,
            stream,
            modelId=MODEL_ID,
            toolConfig=converse_tools(),
            messages=[{"role": "user", "content": [{"text": fresh("forecast?")}]}],
        )
    assert [rec.status for rec in fk.api_requests()] == [200, 500]
    err = exc.value.response
    assert SEARCH_TOOL not in str(err)
    if stream:  # the stream had started: an exception frame of the stream's own grammar
        assert isinstance(exc.value, botocore.exceptions.EventStreamError)
        assert err["Error"]["Code"] == "internalServerException", err
        return
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert err["Error"]["Code"] == "InternalServerException", err
