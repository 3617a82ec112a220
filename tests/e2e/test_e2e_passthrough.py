"""Passthrough through a real mitmdump for OpenAI Responses, Gemini and Bedrock, with the real
SDKs: the body goes upstream byte for byte.

Shared set-up (configs, proxies, catalogs, clients): ``tests/e2e/wire_apis.py``.
"""

from __future__ import annotations

import json

import pytest
from tests.e2e.harness import MitmDump
from tests.e2e.wire_apis import (  # noqa: F401 (fixtures are used by name)
    _passthrough_proxy,
    _relevance_proxy,
    _toolsearch_proxy,
    CATALOG,
    GEMINI_URL,
    MODEL_ID,
    aws_chain,
    capture_bodies,
    converse_tools,
    fk,
    fresh,
    invoke_body,
    invoke_tools,
    ok,
    passthrough,
    r_tool,
    relevance,
    toolsearch,
)
from tests.fakeprovider import FakeProvider

pytestmark = pytest.mark.e2e

# =================================================================================================
# passthrough: the body goes upstream byte for byte
# =================================================================================================

RAW_RESPONSES = (
    b'{"model":"gpt-5",  "input":"hi \\u00e9 [raw-r]","tools":['
    + b",".join(json.dumps(r_tool(t), indent=1).encode() for t in CATALOG)
    + b'],"stream":%s}'
)
RAW_GEMINI = (
    b'{ "contents":[{"role":"user","parts":[{"text":"hi \\u00e9 [raw-g]"}]}],"tools":[{"functionDeclarations":['
    + b",".join(
        json.dumps(
            {"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
        ).encode()
        for t in CATALOG
    )
    + b']},{"googleSearch":{}}]}'
)


@pytest.mark.parametrize("stream", [False, True])
def test_passthrough_responses_byte_identical(passthrough: MitmDump, fk: FakeProvider, stream: bool) -> None:
    raw = RAW_RESPONSES % (b"true" if stream else b"false")
    with passthrough.httpx_client() as http:
        r = http.post(
            "https://api.openai.com/v1/responses",
            content=raw,
            headers={"authorization": "Bearer sk-test", "content-type": "application/json"},
        )
    assert r.status_code == 200, r.text
    assert fk.last_request().body == raw
    assert r.text.startswith("event: response.created") if stream else r.json()["object"] == "response"


@pytest.mark.parametrize("method", [":generateContent", ":streamGenerateContent?alt=sse", ":streamGenerateContent"])
def test_passthrough_gemini_byte_identical(passthrough: MitmDump, fk: FakeProvider, method: str) -> None:
    with passthrough.httpx_client() as http:
        r = http.post(
            GEMINI_URL + method,
            content=RAW_GEMINI,
            headers={"x-goog-api-key": "test-gemini-key", "content-type": "application/json"},
        )
    assert r.status_code == 200, r.text
    assert fk.last_request().body == RAW_GEMINI


@pytest.mark.parametrize("op", ["converse", "converse_stream", "invoke_model", "invoke_model_with_response_stream"])
def test_passthrough_bedrock_byte_identical(passthrough: MitmDump, fk: FakeProvider, op: str) -> None:
    client = passthrough.bedrock()
    sent = capture_bodies(client)
    text = fresh("hi")
    if op.startswith("converse"):
        res = getattr(client, op)(
            modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": text}]}], toolConfig=converse_tools()
        )
        if op == "converse_stream":
            list(res["stream"])
    else:
        body = json.dumps(invoke_body([{"role": "user", "content": text}], invoke_tools()), indent=1)
        res = getattr(client, op)(modelId=MODEL_ID, body=body)
        if op == "invoke_model_with_response_stream":
            list(res["body"])
    (rec,) = ok(fk.api_requests())
    assert rec.body == sent[0] and len(rec.json.get("tools") or rec.json["toolConfig"]["tools"]) > 60
