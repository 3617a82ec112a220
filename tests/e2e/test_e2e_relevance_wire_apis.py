"""The relevance strategy through a real mitmdump for OpenAI Responses, Gemini and Bedrock, with
the real SDKs: the kept subset, in client order, definitions and built-ins untouched, Bedrock
bodies re-signed.

Shared set-up (configs, proxies, catalogs, clients): ``tests/e2e/wire_apis.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.genai import types as gt
from tests.e2e.harness import MitmDump
from tests.e2e.wire_apis import (  # noqa: F401 (fixtures are used by name)
    _passthrough_proxy,
    _relevance_proxy,
    _toolsearch_proxy,
    CACHE_POINT,
    GEMINI_URL,
    MODEL_ID,
    R_NAMESPACE,
    R_WEB,
    TARGET,
    assert_kept_subset,
    aws_chain,
    b_specs,
    config,
    converse_call,
    converse_tools,
    fk,
    fresh,
    g_decls,
    gemini_call,
    gemini_raw_tools,
    gemini_tools,
    invoke_body,
    invoke_call,
    invoke_tools,
    ok,
    passthrough,
    recording,
    relevance,
    responses_call,
    responses_tools,
    toolsearch,
)
from tests.fakeprovider import FakeProvider, reply
from tests.fakeprovider.providers.bedrock import TEST_ACCESS_KEY_ID

pytestmark = pytest.mark.e2e

# =================================================================================================
# relevance: the kept subset, in client order, definitions and built-ins untouched
# =================================================================================================


@pytest.mark.parametrize("stream", [False, True])
def test_relevance_responses(relevance: MitmDump, fk: FakeProvider, stream: bool) -> None:
    fk.set_script([reply("Sunny.")])
    tools = responses_tools(read_file=False)
    res = responses_call(
        relevance.openai(), stream, model="gpt-5", tools=tools, input=fresh("What's the weather forecast for Paris?")
    )
    assert res.output_text == "Sunny."
    (rec,) = ok(fk.api_requests("openai-responses"))
    sent = rec.json["tools"]
    names = assert_kept_subset(sent, tools, lambda t: t.get("name", t["type"]))
    assert len(names) == 25 and TARGET in names
    assert sent[-2:] == [R_WEB, R_NAMESPACE]  # built-ins kept, where the client put them


@pytest.mark.parametrize("method", ["generate", "sse", "json-array"])
def test_relevance_gemini(relevance: MitmDump, fk: FakeProvider, method: str) -> None:
    fk.set_script([reply("Sunny.")])
    question = fresh("What's the weather forecast for Paris?")
    if method == "json-array":
        client_body = {"contents": [{"role": "user", "parts": [{"text": question}]}], "tools": gemini_raw_tools(False)}
        with relevance.httpx_client() as http:
            r = http.post(GEMINI_URL + ":streamGenerateContent", json=client_body, headers={"x-goog-api-key": "k"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in r.json()) == "Sunny."
    else:
        sent_by_client: list[dict[str, Any]] = []
        client = relevance.genai(event_hooks=recording(sent_by_client))
        config = gt.GenerateContentConfig(tools=gemini_tools(read_file=False))  # type: ignore[arg-type]
        contents = [gt.Content(role="user", parts=[gt.Part(text=question)])]
        parts, _ = gemini_call(client, method == "sse", contents, config)
        assert "".join(p.text or "" for p in parts) == "Sunny."
        (client_body,) = sent_by_client
    (rec,) = ok(fk.api_requests("gemini"))
    names = assert_kept_subset(g_decls(rec.json), g_decls(client_body), lambda d: d["name"])
    assert len(names) == 25 and TARGET in names
    # The googleSearch entry is untouched and where the client put it (google-genai puts it first).
    assert [list(e) for e in rec.json["tools"]] == [list(e) for e in client_body["tools"]]
    assert [e for e in rec.json["tools"] if "googleSearch" in e] == [{"googleSearch": {}}]
    assert {k: v for k, v in rec.json.items() if k != "tools"} == {k: v for k, v in client_body.items() if k != "tools"}


@pytest.mark.parametrize("stream", [False, True])
def test_relevance_bedrock_converse_resigned(relevance: MitmDump, fk: FakeProvider, stream: bool) -> None:
    fk.set_script([reply("Sunny.")])
    config = converse_tools(read_file=False)
    res = converse_call(
        relevance.bedrock(),
        stream,
        modelId=MODEL_ID,
        toolConfig=config,
        messages=[{"role": "user", "content": [{"text": fresh("What's the weather forecast for Paris?")}]}],
    )
    assert res["output"]["message"]["content"] == [{"text": "Sunny."}]
    (rec,) = ok(fk.api_requests("bedrock-converse"))  # a 403 here: the changed body was not re-signed
    assert rec.header("authorization").startswith(f"AWS4-HMAC-SHA256 Credential={TEST_ACCESS_KEY_ID}/")  # type: ignore[union-attr]
    sent = rec.json["toolConfig"]["tools"]
    names = assert_kept_subset(sent[:-1], config["tools"][:-1], lambda t: t["toolSpec"]["name"])
    assert len(names) == 25 and TARGET in names
    assert sent[-1] == CACHE_POINT  # still caching the whole (now smaller) tool block


@pytest.mark.parametrize("stream", [False, True])
def test_relevance_bedrock_invoke_resigned(relevance: MitmDump, fk: FakeProvider, stream: bool) -> None:
    fk.set_script([reply("Sunny.")])
    tools = invoke_tools(read_file=False)
    body = invoke_body([{"role": "user", "content": fresh("What's the weather forecast for Paris?")}], tools)
    msg, _ = invoke_call(relevance.bedrock(), stream, body)
    assert msg["content"][0]["text"] == "Sunny."
    (rec,) = ok(fk.api_requests("bedrock-invoke"))
    names = assert_kept_subset(rec.json["tools"], tools, lambda t: t["name"])
    assert len(names) == 25 and TARGET in names
    assert {k: v for k, v in rec.json.items() if k != "tools"} == {k: v for k, v in body.items() if k != "tools"}


def test_relevance_bedrock_api_key(relevance: MitmDump, fk: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Bedrock API key (``Authorization: Bearer``) signs nothing: the filtered body just goes."""
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "ABSKZmFrZS1rZXk=")
    fk.set_script([reply("Sunny.")])
    client = relevance.bedrock(aws_access_key_id=None, aws_secret_access_key=None)
    res = client.converse(
        modelId=MODEL_ID,
        toolConfig=converse_tools(read_file=False),
        messages=[{"role": "user", "content": [{"text": fresh("Weather forecast in Paris?")}]}],
    )
    assert res["output"]["message"]["content"] == [{"text": "Sunny."}]
    (rec,) = ok(fk.api_requests("bedrock-converse"))
    assert rec.header("authorization") == "Bearer ABSKZmFrZS1rZXk="
    assert len(b_specs(rec)) == 25 and TARGET in [s["name"] for s in b_specs(rec)]
