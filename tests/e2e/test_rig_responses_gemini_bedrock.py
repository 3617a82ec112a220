"""Smoke tests of the fake's OpenAI Responses, Gemini and Bedrock modules through plain
mitmdump (no addon), driven by the official SDKs with their real endpoints (map-remote)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import httpx
import openai
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from google import genai
from google.genai import types as gt

from tests.e2e.harness import MitmDump
from tests.e2e.wire_apis import converse_call
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, Usage, call, reply, search
from tests.fakeprovider.providers.bedrock import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY
from tests.fakeprovider.providers.gemini import thought_signature

pytestmark = pytest.mark.e2e

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
R_WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.", "parameters": SCHEMA}
R_SEARCH = {"type": "function", "name": SEARCH_TOOL, "parameters": {"type": "object", "properties": {"query": {}}}}
R_NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "CRM tools.",
    "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
}
R_TOOLS = [R_WEATHER, R_SEARCH, R_NAMESPACE, {"type": "web_search"}]
MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"  # botocore sends the ":" as %3A
GEMINI = "gemini-3-pro-preview"
PLAN = [search("weather", times=1), call("get_weather", {"city": "Paris"}), reply("Done:", echo_last_result=True)]


@pytest.fixture(scope="module")
def addon_script() -> None:
    """This module runs plain mitmdump."""


@pytest.fixture
def genai_client(mitm: MitmDump) -> genai.Client:
    return mitm.genai()


@pytest.fixture
def bedrock(mitm: MitmDump) -> Iterator[Any]:
    client = mitm.bedrock()
    yield client
    client.close()


# --- OpenAI Responses ----------------------------------------------------------------------


def test_responses_tool_loop_chained_by_previous_response_id(openai_client: openai.OpenAI, fake: FakeProvider) -> None:
    fake.set_script(PLAN)
    res = openai_client.responses.create(model="gpt-5", input="Weather in Paris?", tools=R_TOOLS)  # type: ignore[arg-type]
    results = {SEARCH_TOOL: "found get_weather", "get_weather": "22C"}
    res_ids = [res.id]
    for _ in range(3):
        calls = [o for o in res.output if o.type == "function_call"]
        if not calls:
            break
        outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": results[c.name]} for c in calls]
        res = openai_client.responses.create(
            model="gpt-5",
            previous_response_id=res.id,
            input=outputs,  # type: ignore[arg-type]
            tools=R_TOOLS,  # type: ignore[arg-type]
        )
        res_ids.append(res.id)
    assert res.output_text == "Done:\nlast tool result: 22C"
    recs = fake.api_requests("openai-responses")
    assert [r.reply["calls"][0]["name"] if r.reply and r.reply["calls"] else None for r in recs] == [
        SEARCH_TOOL,
        "get_weather",
        None,
    ]
    assert recs[0].tool_names == ["get_weather", SEARCH_TOOL, "crm.lookup"]  # web_search offers no name
    assert [r.json.get("previous_response_id") for r in recs] == [None, res_ids[0], res_ids[1]]


def test_responses_stream_grammar(mitm: MitmDump, openai_client: openai.OpenAI, fake: FakeProvider) -> None:
    fake.set_script([call("get_weather", {"city": "Oslo"}, text="Checking the weather now.", usage=Usage(30, 9))])
    events: list[Any] = list(
        openai_client.responses.create(
            model="gpt-5",
            input="weather?",
            tools=R_TOOLS,  # type: ignore[arg-type]
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds[2:6] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
    ]
    assert kinds.index("response.output_text.done") < kinds.index("response.content_part.done")
    assert "response.function_call_arguments.done" in kinds and kinds.count("response.output_item.done") == 2
    assert [e.sequence_number for e in events] == list(range(len(events)))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert json.loads(args) == {"city": "Oslo"} and final.output[1].arguments == args
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (30, 9)
    with mitm.httpx_client() as http:  # raw: SSE with event lines, no [DONE] terminator
        fake.set_script([reply("plain")])
        raw = http.post(
            "https://api.openai.com/v1/responses",
            json={"model": "gpt-5", "input": "x", "stream": True},
            headers={"authorization": "Bearer sk-test"},
        )
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.startswith("event: response.created\ndata: {") and "[DONE]" not in raw.text


def test_responses_namespaced_call(openai_client: openai.OpenAI, fake: FakeProvider) -> None:
    fake.set_script([call("crm.lookup", {"id": 7})])
    res = openai_client.responses.create(model="gpt-5", input="who is 7?", tools=R_TOOLS)  # type: ignore[arg-type]
    fc: Any = res.output[0]
    assert len(res.output) == 1
    assert (fc.type, fc.namespace, fc.name, fc.arguments) == ("function_call", "crm", "lookup", '{"id":7}')
    history = [{"role": "user", "content": "who is 7?"}, fc.model_dump(exclude_none=True)]
    history.append({"type": "function_call_output", "call_id": fc.call_id, "output": "Ada"})
    fake.set_script([reply("ok", echo_last_result=True)])
    res = openai_client.responses.create(model="gpt-5", input=history, tools=R_TOOLS, store=False)  # type: ignore[arg-type]
    assert res.output_text == "ok\nlast tool result: Ada"
    assert fake.last_request().json["input"][1]["namespace"] == "crm"


def _responses_post(fake: FakeProvider, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{fake.url}/v1/responses", json=body, headers={"authorization": "Bearer k"}, trust_env=False)


FC = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"input": [{"role": "user", "content": "q"}, FC]}, "No tool output found for function call call_1."),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_9", "output": "x"}]},
            "No tool call found for function call output with call_id call_9.",
        ),
        ({"previous_response_id": "resp_nope"}, "Previous response with id 'resp_nope' not found."),
        ({"tool_choice": {"type": "function", "name": "nope"}}, "Tool choice 'nope' not found"),
        ({"tools": [R_WEATHER, R_WEATHER]}, "Tool names must be unique"),
        ({"tools": [{"type": "teleport"}]}, "Invalid value: 'teleport'"),
        ({"tools": [{**R_NAMESPACE, "tools": [{"type": "web_search"}]}]}, "expected 'function' or 'custom'"),
        ({"model": None}, "Missing required parameter: 'model'."),
    ],
)
def test_responses_validation(fake: FakeProvider, body: dict[str, Any], error: str) -> None:
    full = {k: v for k, v in {"model": "gpt-5", "input": "q", "tools": [R_WEATHER], **body}.items() if v is not None}
    res = _responses_post(fake, full)
    assert res.status_code == 400, res.text
    assert res.json()["error"]["type"] == "invalid_request_error" and error in res.json()["error"]["message"]


def test_responses_chain_with_unanswered_call_is_rejected(fake: FakeProvider) -> None:
    fake.set_script([call("get_weather", {"city": "Rome"})])
    first = _responses_post(fake, {"model": "gpt-5", "input": "q", "tools": [R_WEATHER]}).json()
    res = _responses_post(fake, {"model": "gpt-5", "previous_response_id": first["id"], "input": "and?"})
    assert res.status_code == 400
    assert res.json()["error"]["message"] == f"No tool output found for function call {first['output'][0]['call_id']}."
    unstored = _responses_post(fake, {"model": "gpt-5", "input": "q", "store": False}).json()
    res = _responses_post(fake, {"model": "gpt-5", "previous_response_id": unstored["id"], "input": "x"})
    assert res.status_code == 400 and "not found" in res.json()["error"]["message"]


def test_responses_websocket_upgrade_refused(mitm: MitmDump, fake: FakeProvider) -> None:
    """Codex tries a WebSocket first; the fake answers like an HTTP-only server (no 101)."""
    headers = {
        "connection": "Upgrade",
        "upgrade": "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": base64.b64encode(b"0123456789abcdef").decode(),
        "authorization": "Bearer sk-test",
    }
    with mitm.httpx_client() as http:
        res = http.get("https://api.openai.com/v1/responses", headers=headers)
    assert res.status_code == fake.websocket_status == 405 and res.headers["allow"] == "POST"
    rec = fake.last_request()
    assert (rec.method, rec.path, rec.api, rec.nth, rec.status) == ("GET", "/v1/responses", None, None, 405)


# --- Gemini --------------------------------------------------------------------------------

G_TOOLS = [
    gt.Tool(function_declarations=[gt.FunctionDeclaration(name="get_weather", parameters_json_schema=SCHEMA)]),
    gt.Tool(function_declarations=[gt.FunctionDeclaration(name=SEARCH_TOOL, parameters_json_schema={})]),
    gt.Tool(google_search=gt.GoogleSearch()),
]


def _gemini_loop(client: genai.Client, stream: bool) -> str:
    config = gt.GenerateContentConfig(tools=G_TOOLS)  # type: ignore[arg-type]
    contents: list[gt.Content] = [gt.Content(role="user", parts=[gt.Part(text="Weather in Paris?")])]
    results: dict[str | None, dict[str, Any]] = {
        SEARCH_TOOL: {"found": ["get_weather"]},
        "get_weather": {"temp": "22C"},
    }
    for _ in range(4):
        if stream:
            chunks = list(client.models.generate_content_stream(model=GEMINI, contents=contents, config=config))
            parts = [p for c in chunks for p in (c.candidates[0].content.parts or [])]  # type: ignore[index,union-attr]
        else:
            res = client.models.generate_content(model=GEMINI, contents=contents, config=config)
            parts = res.candidates[0].content.parts  # type: ignore[index,union-attr,assignment]
        calls = [p.function_call for p in parts if p.function_call]
        if not calls:
            return "".join(p.text or "" for p in parts)
        contents.append(gt.Content(role="model", parts=parts))  # signatures kept as the SDK got them
        responses = [
            gt.Part(function_response=gt.FunctionResponse(name=c.name, response=results[c.name])) for c in calls
        ]  # type: ignore[index]
        contents.append(gt.Content(role="user", parts=responses))
    raise AssertionError("tool loop did not finish")


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_tool_loop_with_thought_signatures(genai_client: genai.Client, fake: FakeProvider, stream: bool) -> None:
    fake.set_script(PLAN)
    text = _gemini_loop(genai_client, stream)
    assert text == 'Done:\nlast tool result: {"temp":"22C"}'
    recs = fake.api_requests("gemini")
    method = "streamGenerateContent" if stream else "generateContent"
    # google-genai 2.x calls /v1beta, 3.x /v1: both are the Gemini API
    assert all(r.path in (f"/v1beta/models/{GEMINI}:{method}", f"/v1/models/{GEMINI}:{method}") for r in recs)
    assert all(r.query_params.get("alt") == (["sse"] if stream else None) for r in recs)
    assert recs[0].header("x-goog-api-key") == "test-gemini-key"
    assert recs[0].tool_names == ["get_weather", SEARCH_TOOL]
    sent = recs[-1].json["contents"][1]["parts"][0]
    assert sent["functionCall"]["name"] == SEARCH_TOOL and sent["thoughtSignature"]


def test_gemini_usage_and_json_array_stream(mitm: MitmDump, genai_client: genai.Client, fake: FakeProvider) -> None:
    fake.set_script([reply("Four words right here.", usage=Usage(12, 4))])
    res = genai_client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert res.text == "Four words right here."
    assert res.usage_metadata is not None and res.usage_metadata.total_token_count == 16
    assert res.candidates and res.candidates[0].finish_reason == gt.FinishReason.STOP
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    url = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=k"
    with mitm.httpx_client() as http:
        raw = http.post(url, json=body)
    chunks = json.loads(raw.text)
    assert raw.headers["content-type"].startswith("application/json") and len(chunks) == 4
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == "Four words right here."
    assert chunks[-1]["usageMetadata"]["candidatesTokenCount"] == 4


def _gemini_post(
    fake: FakeProvider, body: dict[str, Any], model: str = GEMINI, key: str | None = "k"
) -> httpx.Response:
    headers = {"x-goog-api-key": key} if key else {}
    url = f"{fake.url}/v1beta/models/{model}:generateContent"
    return httpx.post(url, json=body, headers=headers, trust_env=False)


USER = {"role": "user", "parts": [{"text": "weather?"}]}
DECL = {"functionDeclarations": [{"name": "get_weather", "parameters": SCHEMA}]}
FC_PART = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
FR = {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"t": 1}}}]}


@pytest.mark.parametrize(
    ("body", "model", "error"),
    [
        ({"contents": [USER, {"role": "model", "parts": [FC_PART]}, FR]}, GEMINI, "missing a thought_signature"),
        (
            {"contents": [USER, {"role": "model", "parts": [{**FC_PART, "thoughtSignature": "Zm9v"}]}, FR]},
            GEMINI,
            "Corrupted thought signature",
        ),
        (
            {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["nope"]}}},
            GEMINI,
            "function 'nope' is not declared",
        ),
        ({"tools": [DECL, DECL]}, GEMINI, "Duplicate function declaration found: get_weather"),
        (
            {"tools": [{"functionDeclarations": [{"name": "f", "parameters": {}, "parametersJsonSchema": {}}]}]},
            GEMINI,
            "cannot both be set",
        ),
        ({"contents": []}, GEMINI, "contents is not specified"),
        (
            {"contents": [USER, {"role": "model", "parts": [FC_PART, FC_PART]}, FR]},
            "gemini-2.5-flash",
            "number of function response parts is equal",
        ),
    ],
)
def test_gemini_validation(fake: FakeProvider, body: dict[str, Any], model: str, error: str) -> None:
    res = _gemini_post(fake, {"contents": [USER], "tools": [DECL], **body}, model)
    assert res.status_code == 400, res.text
    assert res.json()["error"]["status"] == "INVALID_ARGUMENT" and error in res.json()["error"]["message"]


def test_gemini_signature_rules(fake: FakeProvider) -> None:
    signed = {**FC_PART, "thoughtSignature": thought_signature("get_weather", {"city": "Paris"})}
    unsigned_old_turn = [USER, {"role": "model", "parts": [FC_PART]}, FR, {"role": "model", "parts": [{"text": "k"}]}]
    ok = [
        (GEMINI, [USER, {"role": "model", "parts": [signed]}, FR]),
        (
            GEMINI,
            [
                USER,
                {"role": "model", "parts": [{**FC_PART, "thoughtSignature": "skip_thought_signature_validator"}]},
                FR,
            ],
        ),
        (GEMINI, [*unsigned_old_turn, {"role": "user", "parts": [{"text": "new question"}]}]),  # only the current turn
        ("gemini-2.5-flash", [USER, {"role": "model", "parts": [FC_PART]}, FR]),  # 2.x does not check
    ]
    for model, contents in ok:
        res = _gemini_post(fake, {"contents": contents, "tools": [DECL]}, model)
        assert res.status_code == 200, (model, res.text)
    assert _gemini_post(fake, {"contents": [USER]}, key=None).status_code == 403
    url = f"{fake.url}/v1beta/models/{GEMINI}:generateContent?key=via-query"
    assert httpx.post(url, json={"contents": [USER]}, trust_env=False).status_code == 200


# --- Bedrock -------------------------------------------------------------------------------

B_TOOLS: dict[str, Any] = {
    "tools": [
        {"toolSpec": {"name": "get_weather", "inputSchema": {"json": SCHEMA}}},
        {"toolSpec": {"name": SEARCH_TOOL, "inputSchema": {"json": {"type": "object"}}}},
        {"cachePoint": {"type": "default"}},
    ]
}


def _converse_loop(client: Any, stream: bool) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": "Weather in Paris?"}]}]
    results = {SEARCH_TOOL: "found get_weather", "get_weather": "22C"}
    for _ in range(4):
        res = converse_call(client, stream, modelId=MODEL_ID, messages=messages, toolConfig=B_TOOLS)
        content = res["output"]["message"]["content"]
        uses = [b["toolUse"] for b in content if "toolUse" in b]
        if not uses:
            return "".join(b.get("text", "") for b in content)
        messages.append({"role": "assistant", "content": content})
        answers = [
            {"toolResult": {"toolUseId": u["toolUseId"], "content": [{"text": results[u["name"]]}]}} for u in uses
        ]
        messages.append({"role": "user", "content": answers})
    raise AssertionError("tool loop did not finish")


@pytest.mark.parametrize("stream", [False, True])
def test_bedrock_converse_tool_loop(bedrock: Any, fake: FakeProvider, stream: bool) -> None:
    fake.set_script(PLAN)
    assert _converse_loop(bedrock, stream) == "Done:\nlast tool result: 22C"
    recs = fake.api_requests("bedrock-converse")
    suffix = "converse-stream" if stream else "converse"
    assert [r.path for r in recs] == [f"/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/{suffix}"] * 3
    assert recs[0].tool_names == ["get_weather", SEARCH_TOOL]
    # the client signed the real host; the fake received 127.0.0.1 and still verified the signature
    assert (recs[0].header("host") or "").startswith("127.0.0.1")
    assert (recs[0].header("authorization") or "").startswith("AWS4-HMAC-SHA256 Credential=AKIDTESTFAKE/")


def test_bedrock_invoke_model(bedrock: Any, fake: FakeProvider) -> None:
    fake.set_script([call("get_weather", {"city": "Oslo"}, text="Let me check."), reply("It is 3C.")])
    body: dict[str, Any] = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 100,
        "tools": [{"name": "get_weather", "input_schema": SCHEMA}],
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
    }
    res = bedrock.invoke_model(modelId=MODEL_ID, body=json.dumps(body))
    msg = json.loads(res["body"].read())
    assert msg["stop_reason"] == "tool_use" and msg["content"][1]["input"] == {"city": "Oslo"}
    assert res["ResponseMetadata"]["HTTPHeaders"]["x-amzn-bedrock-output-token-count"]
    body["messages"] += [
        {"role": "assistant", "content": msg["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": msg["content"][1]["id"], "content": "3C"}]},
    ]
    stream = bedrock.invoke_model_with_response_stream(modelId=MODEL_ID, body=json.dumps(body))
    events = [json.loads(e["chunk"]["bytes"]) for e in stream["body"]]  # botocore decoded the base64 blob
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    assert "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta") == "It is 3C."
    assert events[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] > 0
    assert [r.api for r in fake.api_requests()] == ["bedrock-invoke", "bedrock-invoke"]


def test_bedrock_wrong_secret_is_rejected(mitm: MitmDump, fake: FakeProvider) -> None:
    client = mitm.bedrock(aws_secret_access_key="not-the-secret")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        client.converse(modelId=MODEL_ID, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert exc.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert fake.last_request().status == 403


def test_bedrock_body_changed_after_signing_is_rejected(mitm: MitmDump, fake: FakeProvider) -> None:
    """What a proxy that rewrites the body without re-signing would cause."""
    url = f"https://bedrock-runtime.us-east-1.amazonaws.com/model/{MODEL_ID.replace(':', '%3A')}/converse"
    body = json.dumps({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}).encode()
    signed = AWSRequest("POST", url, data=body, headers={"content-type": "application/json"})
    SigV4Auth(Credentials(TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY), "bedrock", "us-east-1").add_auth(signed)
    headers = dict(signed.headers.items())
    with mitm.httpx_client() as http:
        assert http.post(url, content=body, headers=headers).status_code == 200
        changed = body.replace(b'"hi"', b'"hi!"')
        res = http.post(url, content=changed, headers=headers)
    assert res.status_code == 403 and res.headers["x-amzn-errortype"].startswith("InvalidSignatureException")
    assert "signature we calculated does not match" in res.json()["message"]


B_BASE = "https://bedrock-runtime.us-west-2.amazonaws.com/model/m1"
B_USER = {"role": "user", "content": [{"text": "q"}]}
B_USE = {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {}}}]}
A_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}
BEARER = {"authorization": "Bearer ABSKZmFrZS1rZXk="}  # a Bedrock API key needs no signature


@pytest.mark.parametrize(
    ("op", "body", "headers", "status", "error"),
    [
        ("converse", {"messages": [B_USER]}, {}, 403, "MissingAuthenticationTokenException"),
        ("converse", {"messages": [B_USER]}, BEARER, 200, None),
        ("converse", {"messages": [B_USER, B_USE, B_USER], "toolConfig": B_TOOLS}, BEARER, 400, "Expected toolResult"),
        ("converse", {"messages": [B_USER, B_USE]}, BEARER, 400, "toolConfig field must be defined"),
        ("converse", {"messages": [B_USE]}, BEARER, 400, "must start with a user message"),
        (
            "converse",
            {"messages": [B_USER], "toolConfig": {**B_TOOLS, "toolChoice": {"tool": {"name": "x"}}}},
            BEARER,
            400,
            "Tool 'x' not found",
        ),
        ("invoke", {"max_tokens": 5, "messages": [{"role": "user", "content": "q"}]}, BEARER, 400, "anthropic_version"),
        (
            "invoke",
            {
                "anthropic_version": "bedrock-2023-05-31",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "q"}, A_USE],
            },
            BEARER,
            400,
            "`tool_use` ids were found without `tool_result`",
        ),
    ],
)
def test_bedrock_api_key_and_validation(
    mitm: MitmDump,
    fake: FakeProvider,
    op: str,
    body: dict[str, Any],
    headers: dict[str, str],
    status: int,
    error: str | None,
) -> None:
    with mitm.httpx_client() as http:
        res = http.post(f"{B_BASE}/{op}", json=body, headers=headers)
    assert res.status_code == status, res.text
    if error:
        assert error in res.json()["message"] + res.headers.get("x-amzn-errortype", ""), res.text
