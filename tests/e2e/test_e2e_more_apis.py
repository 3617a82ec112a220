"""Tool discovery through a real mitmdump for OpenAI Responses, Gemini and Bedrock (Converse
and InvokeModel), driven by the real SDKs (openai, google-genai, boto3) with their real
endpoints, streaming and not: passthrough, relevance and the phantom search loop.

One mitmdump per strategy is shared by the whole module. The proxy gets the fake's test AWS
credentials the way a user's proxy gets its own: from the standard AWS chain, here a shared
credentials file named by ``AWS_SHARED_CREDENTIALS_FILE`` (the harness scrubs the ``AWS_*``
key variables, not that one), so changed Bedrock bodies can be re-signed; the fake verifies
every SigV4 signature against the body it received (a 403 means re-signing failed).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import botocore.exceptions
import httpx
import openai
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer
from google import genai
from google.genai import types as gt

from tests.e2e.harness import ADDON_PATH, ConfigSpec, MitmDump, addon_config
from tests.fakeprovider import DISPATCHER, SEARCH_TOOL, FakeProvider, RecordedRequest, call, calls, fail, reply, search
from tests.fakeprovider.providers.bedrock import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

# --- configs and proxies ---------------------------------------------------------------------


def config(strategy: str) -> ConfigSpec:
    """``crm.*`` kept: the namespace's functions stay where the client put them."""
    return partial(addon_config, strategy=strategy, min_tools=5, max_tools=25, target_ratio=0.8, max_search_results=3,
                   always_keep=["read_file", "crm.*"], search={"backend": "bm25"}, telemetry="t.jsonl")


AWS_PROFILE = "tooldisco-e2e"
#: Variables that would put other credentials ahead of the shared credentials file in the
#: proxy's chain (or make it probe instance metadata).
AWS_CHAIN_OVERRIDES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_BEARER_TOKEN_BEDROCK",
)
STREAM_DELAY = 0.0  # the fake paces nothing: these tests check content, not timing


@pytest.fixture(scope="module")
def aws_chain(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """A context manager: while it is open, a child process's standard AWS chain resolves to the
    fake's test credentials (profile in a private shared-credentials file)."""
    d = tmp_path_factory.mktemp("aws")
    (d / "credentials").write_text(
        f"[{AWS_PROFILE}]\naws_access_key_id = {TEST_ACCESS_KEY_ID}\naws_secret_access_key = {TEST_SECRET_ACCESS_KEY}\n"
    )
    (d / "config").write_text(f"[profile {AWS_PROFILE}]\nregion = us-east-1\n")

    @contextlib.contextmanager
    def active() -> Iterator[None]:
        with pytest.MonkeyPatch.context() as mp:
            for name in AWS_CHAIN_OVERRIDES:
                mp.delenv(name, raising=False)
            mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(d / "credentials"))
            mp.setenv("AWS_CONFIG_FILE", str(d / "config"))
            mp.setenv("AWS_PROFILE", AWS_PROFILE)
            mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
            yield

    return active


def _proxy_fixture(strategy: str) -> Any:
    @pytest.fixture(scope="module")
    def proxy(
        fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory, aws_chain: Any
    ) -> Iterator[MitmDump]:
        mitm = MitmDump(
            tmp_path_factory.mktemp(strategy),
            fake_provider.url,
            script=ADDON_PATH,
            config=config(strategy),
            name=f"more_apis {strategy}",
        )
        with aws_chain():
            mitm.start()
        yield mitm
        mitm.stop()

    return proxy


_passthrough_proxy = _proxy_fixture("passthrough")
_relevance_proxy = _proxy_fixture("relevance")
_toolsearch_proxy = _proxy_fixture("tool-search")


def _running(mitm: MitmDump, aws_chain: Any) -> MitmDump:
    if not mitm.running:  # an earlier test killed it: start again, with the same environment
        with aws_chain():
            mitm.restart()
    return mitm


@pytest.fixture
def fk(fake: FakeProvider) -> FakeProvider:
    fake.stream_delay = STREAM_DELAY
    return fake


@pytest.fixture
def passthrough(_passthrough_proxy: MitmDump, fk: FakeProvider, aws_chain: Any) -> MitmDump:
    return _running(_passthrough_proxy, aws_chain)


@pytest.fixture
def relevance(_relevance_proxy: MitmDump, fk: FakeProvider, aws_chain: Any) -> MitmDump:
    return _running(_relevance_proxy, aws_chain)


@pytest.fixture
def toolsearch(_toolsearch_proxy: MitmDump, fk: FakeProvider, aws_chain: Any) -> MitmDump:
    return _running(_toolsearch_proxy, aws_chain)


# --- tool catalogs, per API ----------------------------------------------------------------------

CATALOG = anthropic_tools(60)  # MCP-style names, descriptions and JSON schemas
TARGET = "mcp__weather__get_forecast"
READ_FILE = {
    "name": "read_file",
    "description": "Read a local file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
GEMINI = "gemini-3-pro-preview"  # a model whose thought signatures the fake validates
MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
BEDROCK_PATH = "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0"
BEDROCK_URL = "https://bedrock-runtime.us-east-1.amazonaws.com" + BEDROCK_PATH
GEMINI_URL = f"https://generativelanguage.googleapis.com/v1beta/models/{GEMINI}"
SESSION_LOST = (
    "the found tool was not forwarded on the chained turn: its request has no user message, so the "
    "proxy keys it to another session (the tenant's empty-first-message session)"
)


def fresh(text: str) -> str:
    """A first user message no other test used: each test is its own session."""
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def r_tool(t: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}


R_WEB = {"type": "web_search"}
R_NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "CRM tools.",
    "tools": [
        {"type": "function", "name": "lookup", "description": "Look a contact up.", "parameters": {"type": "object"}}
    ],
}


def responses_tools(read_file: bool = True) -> list[dict[str, Any]]:
    """60 functions, then (read_file,) a hosted tool and a namespace (always kept): never deferred."""
    return [r_tool(t) for t in CATALOG] + ([r_tool(READ_FILE)] if read_file else []) + [R_WEB, R_NAMESPACE]


def g_decl(t: dict[str, Any]) -> gt.FunctionDeclaration:
    return gt.FunctionDeclaration(
        name=t["name"], description=t["description"], parameters_json_schema=t["input_schema"]
    )


def gemini_tools(read_file: bool = True) -> list[gt.Tool]:
    decls = [g_decl(t) for t in CATALOG] + ([g_decl(READ_FILE)] if read_file else [])
    return [gt.Tool(function_declarations=decls), gt.Tool(google_search=gt.GoogleSearch())]


def gemini_raw_tools(read_file: bool = True) -> list[dict[str, Any]]:
    decls = [
        {"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
        for t in CATALOG + ([READ_FILE] if read_file else [])
    ]
    return [{"functionDeclarations": decls}, {"googleSearch": {}}]


def b_spec(t: dict[str, Any]) -> dict[str, Any]:
    return {
        "toolSpec": {"name": t["name"], "description": t["description"], "inputSchema": {"json": t["input_schema"]}}
    }


CACHE_POINT = {"cachePoint": {"type": "default"}}


def converse_tools(read_file: bool = True) -> dict[str, Any]:
    """toolConfig: 60 specs (, read_file), then a cachePoint caching the whole tool block."""
    return {"tools": [b_spec(t) for t in CATALOG] + ([b_spec(READ_FILE)] if read_file else []) + [CACHE_POINT]}


def invoke_tools(read_file: bool = True) -> list[dict[str, Any]]:
    return copy.deepcopy(CATALOG + ([READ_FILE] if read_file else []))


def invoke_body(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 256, "tools": tools, "messages": messages}


# --- clients -------------------------------------------------------------------------------------


def recording(sent: list[dict[str, Any]]) -> dict[str, Any]:
    """httpx ``event_hooks`` (for ``MitmDump.genai``) putting the JSON body of every request sent in ``sent``."""
    return {"request": [lambda req: sent.append(json.loads(req.content))]}


def capture_bodies(client: Any) -> list[bytes]:
    """The exact request bodies a boto3 client sends (after signing)."""
    bodies: list[bytes] = []

    def before_send(request: Any, **_: Any) -> None:
        body = request.body or b""
        bodies.append(body.encode() if isinstance(body, str) else bytes(body))

    client.meta.events.register("before-send.bedrock-runtime.*", before_send)
    return bodies


def signed_headers(url: str, body: bytes) -> dict[str, str]:
    """SigV4 headers for a raw Bedrock request, as boto3 would send them."""
    req = AWSRequest("POST", url, data=body, headers={"content-type": "application/json"})
    SigV4Auth(Credentials(TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY), "bedrock", "us-east-1").add_auth(req)
    return dict(req.headers.items())


def frames(raw: bytes) -> list[tuple[dict[str, Any], Any]]:
    """AWS event-stream frames (both CRCs checked by botocore) as (headers, JSON payload)."""
    buf = EventStreamBuffer()
    buf.add_data(raw)
    return [(m.headers, json.loads(m.payload)) for m in buf]


def responses_call(client: openai.OpenAI, stream: bool, **kw: Any) -> Any:
    """``responses.create`` or the ``responses.stream`` helper; the final Response either way."""
    if not stream:
        return client.responses.create(**kw)
    with client.responses.stream(**kw) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    return final


def gemini_call(
    client: genai.Client, stream: bool, contents: list[gt.Content], config: Any
) -> tuple[list[gt.Part], Any]:
    """The model turn's parts and its usage metadata (streamed: the chunks', in order, and the last usage)."""
    if not stream:
        res = client.models.generate_content(model=GEMINI, contents=contents, config=config)
        return list(res.candidates[0].content.parts or []), res.usage_metadata  # type: ignore[index,union-attr]
    chunks = list(client.models.generate_content_stream(model=GEMINI, contents=contents, config=config))
    parts = [p for c in chunks for p in (c.candidates[0].content.parts or [])]  # type: ignore[index,union-attr]
    return parts, chunks[-1].usage_metadata


def converse_call(client: Any, stream: bool, **kw: Any) -> dict[str, Any]:
    """A Converse-shaped response (``output.message``, ``stopReason``, ``usage``), streamed or not."""
    if not stream:
        return client.converse(**kw)
    blocks: dict[int, dict[str, Any]] = {}
    kinds: list[str] = []
    out: dict[str, Any] = {}
    for ev in client.converse_stream(**kw)["stream"]:
        ((kind, data),) = ev.items()
        kinds.append(kind)
        i = data.get("contentBlockIndex")
        if kind == "contentBlockStart":
            blocks[i] = {"toolUse": {**data["start"]["toolUse"], "raw": ""}}
        elif kind == "contentBlockDelta":
            if "text" in data["delta"]:
                blocks.setdefault(i, {"text": ""})["text"] += data["delta"]["text"]
            else:
                blocks[i]["toolUse"]["raw"] += data["delta"]["toolUse"]["input"]
        elif kind == "messageStop":
            out["stopReason"] = data["stopReason"]
        elif kind == "metadata":
            out["usage"] = data["usage"]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"], kinds
    for b in blocks.values():
        if "toolUse" in b:
            b["toolUse"]["input"] = json.loads(b["toolUse"].pop("raw"))
    out["output"] = {"message": {"role": "assistant", "content": [blocks[i] for i in sorted(blocks)]}}
    return out


def invoke_call(client: Any, stream: bool, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An Anthropic message from InvokeModel, and (streamed) the decoded stream events."""
    if not stream:
        res = client.invoke_model(modelId=MODEL_ID, body=json.dumps(body))
        return json.loads(res["body"].read()), []
    res = client.invoke_model_with_response_stream(modelId=MODEL_ID, body=json.dumps(body))
    events = [json.loads(e["chunk"]["bytes"]) for e in res["body"]]
    return anthropic_message(events), events


def anthropic_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Rebuild a Message from Anthropic stream events (what an SDK does)."""
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop", [e["type"] for e in events]
    msg = copy.deepcopy(events[0]["message"])
    raw: dict[int, str] = {}
    for e in events[1:]:
        if e["type"] == "content_block_start":
            msg["content"].append(copy.deepcopy(e["content_block"]))
        elif e["type"] == "content_block_delta":
            block, delta = msg["content"][e["index"]], e["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                raw[e["index"]] = raw.get(e["index"], "") + delta["partial_json"]
        elif e["type"] == "message_delta":
            msg["stop_reason"] = e["delta"].get("stop_reason")
            msg["usage"] = {**msg["usage"], **e.get("usage", {})}
    for i, text in raw.items():
        msg["content"][i]["input"] = json.loads(text) if text else {}
    return msg


# --- recorded-request helpers --------------------------------------------------------------------


def ok(recs: list[RecordedRequest]) -> list[RecordedRequest]:
    """``recs``, after checking the fake accepted each (a 403 on Bedrock: re-signing failed)."""
    assert [r.status for r in recs] == [200] * len(recs), [(r.status, r.error) for r in recs]
    return recs


def reply_calls(rec: RecordedRequest) -> list[str]:
    return [c["name"] for c in (rec.reply or {}).get("calls", [])]


def usage_sum(recs: list[RecordedRequest], key: str) -> int:
    return sum(r.reply["usage"][key] for r in recs if r.reply)  # type: ignore[index]


def r_names(rec: RecordedRequest) -> list[str]:
    return [t.get("name", f"<{t['type']}>") for t in rec.json.get("tools") or []]


def g_decls(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for entry in body.get("tools") or [] for d in entry.get("functionDeclarations", [])]


def b_specs(rec: RecordedRequest) -> list[dict[str, Any]]:
    return [t["toolSpec"] for t in rec.json["toolConfig"]["tools"] if "toolSpec" in t]


def assert_kept_subset(
    sent: list[dict[str, Any]], client: list[dict[str, Any]], name: Callable[[dict[str, Any]], str]
) -> list[str]:
    """What went upstream is a subset of the client's list, in the client's order, each
    definition equal to the client's own; returns the kept names."""
    by_name = {name(t): t for t in client}
    names = [name(t) for t in sent]
    order = [name(t) for t in client]
    assert names == sorted(names, key=order.index), names
    assert all(t == by_name[name(t)] for t in sent)
    return names


def plan_search_then_call(fake: FakeProvider) -> None:
    """Search while the forecast tool is not loaded, then call it, then answer with its result."""
    fake.set_script(
        [
            search("weather forecast", not_offered=[TARGET]),
            call(TARGET, {"city": "Paris"}, text="Checking the forecast."),
            reply("Forecast:", echo_last_result=True),
        ]
    )


def plan_mixed(fake: FakeProvider) -> None:
    """One turn with a search and a real call; then answer."""
    fake.set_script(
        [
            calls((SEARCH_TOOL, {"query": "slack message"}), ("read_file", {"path": "notes.txt"}), times=1),
            reply("Done:", echo_last_result=True),
        ]
    )


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


# =================================================================================================
# tool-search: OpenAI Responses
# =================================================================================================


def check_responses_rounds(recs: list[RecordedRequest], tools: list[dict[str, Any]]) -> None:
    """Round one offered the built-ins, read_file and the search tool; round two added the found
    definitions, the forecast one identical to the client's."""
    first, second = ok(recs)
    assert first.json["tools"] == [r_tool(READ_FILE), R_WEB, R_NAMESPACE, first.json["tools"][-1]]
    assert first.json["tools"][-1]["name"] == SEARCH_TOOL and reply_calls(first) == [SEARCH_TOOL]
    assert second.json["tools"][:4] == first.json["tools"]
    found = {t["name"]: t for t in second.json["tools"][4:]}
    assert TARGET in found and found[TARGET] == next(t for t in tools if t.get("name") == TARGET)
    assert reply_calls(second) == [TARGET]
    out = second.json["input"][-1]
    assert out["type"] == "function_call_output" and TARGET in out["output"]


def check_responses_client_view(res: Any, recs: list[RecordedRequest]) -> Any:
    """The client sees the forecast call and nothing of the search; usage is the rounds' sum."""
    dumped = res.model_dump_json()
    assert SEARCH_TOOL not in dumped
    fcs = [o for o in res.output if o.type == "function_call"]
    assert [f.name for f in fcs] == [TARGET] and json.loads(fcs[0].arguments) == {"city": "Paris"}
    assert res.usage.input_tokens == usage_sum(recs, "input_tokens")
    assert res.usage.output_tokens == usage_sum(recs, "output_tokens")
    assert res.usage.total_tokens == res.usage.input_tokens + res.usage.output_tokens
    return fcs[0]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_stateless_store_false(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """``store: false`` (Codex): the re-forward carries the full input; so does the next turn."""
    plan_search_then_call(fk)
    client, tools = toolsearch.openai(), responses_tools()
    history: list[dict[str, Any]] = [{"role": "user", "content": fresh("What's the forecast for Paris?")}]
    res = responses_call(client, stream, model="gpt-5", input=history, tools=tools, store=False)
    recs = fk.api_requests("openai-responses")
    check_responses_rounds(recs, tools)
    fc = check_responses_client_view(res, recs)
    replay = recs[1].json["input"]
    assert replay[0] == history[0] and [i["type"] for i in replay[1:]] == ["function_call", "function_call_output"]
    assert "id" not in replay[1]  # nothing was stored: no item id may be referenced
    history += [
        fc.model_dump(exclude_none=True, exclude={"id", "status"}),
        {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny, 24C"},
    ]
    res2 = responses_call(client, stream, model="gpt-5", input=history, tools=tools, store=False)
    assert res2.output_text == "Forecast:\nlast tool result: sunny, 24C"
    third = ok(fk.api_requests("openai-responses"))[2]
    assert reply_calls(third) == [] and TARGET in r_names(third)[4:]  # found tool carried, no new search
    assert third.json["input"] == history


@pytest.mark.parametrize("stream", [False, True])
def test_responses_stored_next_turn_chains_from_final_id(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """Stored (the default), first turn without ``previous_response_id``: the client's next turn
    chains from the id it got, which must be the stored round holding the forecast call."""
    plan_search_then_call(fk)
    client, tools = toolsearch.openai(), responses_tools()
    res = responses_call(client, stream, model="gpt-5", input=fresh("What's the forecast for Paris?"), tools=tools)
    recs = fk.api_requests("openai-responses")
    check_responses_rounds(recs, tools)
    fc = check_responses_client_view(res, recs)
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny, 24C"}]
    res2 = responses_call(client, stream, model="gpt-5", previous_response_id=res.id, input=output, tools=tools)
    assert res2.output_text == "Forecast:\nlast tool result: sunny, 24C"
    third = ok(fk.api_requests("openai-responses"))[2]
    if stream:
        # A live stream keeps round one's id from its response.created (the SDK insists on one
        # identity); the proxy continues the chain from the last round, which the fake holds
        # with the forecast call: it would answer "No tool output found" from round one.
        assert third.json["previous_response_id"] not in (res.id, None)
    else:
        assert third.json["previous_response_id"] == res.id
    assert third.json["input"] == output
    assert reply_calls(third) == []
    assert TARGET in r_names(third)[4:], (SESSION_LOST, r_names(third))  # the found tool rides along


@pytest.mark.parametrize("stream", [False, True])
def test_responses_search_on_a_chained_turn(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """The search happens on a turn that already chains with ``previous_response_id``: round two
    chains from round one and sends only the search output; the client's final response keeps
    its own ``previous_response_id``, and its id continues the chain on the next turn."""
    fk.set_script(
        [
            search("weather forecast", contains="Paris", not_offered=[TARGET]),
            call(TARGET, {"city": "Paris"}),
            reply("Forecast:", echo_last_result=True, has_result_for=[TARGET]),
            reply("Hello!"),
        ]
    )
    client, tools = toolsearch.openai(), responses_tools()
    hello = responses_call(client, stream, model="gpt-5", input=fresh("Hi there"), tools=tools)
    assert hello.output_text == "Hello!"
    question = [{"role": "user", "content": fresh("And what's the forecast for Paris?")}]
    res = responses_call(client, stream, model="gpt-5", previous_response_id=hello.id, input=question, tools=tools)
    recs = ok(fk.api_requests("openai-responses"))
    assert len(recs) == 3
    check_responses_rounds(recs[1:], tools)
    fc = check_responses_client_view(res, recs[1:])
    round1, round2 = recs[1:]
    assert round1.json["previous_response_id"] == hello.id
    assert round2.json["previous_response_id"] not in (None, hello.id)  # round one's own id
    phantom_id = round1.reply["calls"][0]["id"]  # type: ignore[index]
    assert [(i["type"], i["call_id"]) for i in round2.json["input"]] == [("function_call_output", phantom_id)]
    assert res.previous_response_id == hello.id
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny, 24C"}]
    res2 = responses_call(client, stream, model="gpt-5", previous_response_id=res.id, input=output, tools=tools)
    assert res2.output_text == "Forecast:\nlast tool result: sunny, 24C"
    last = ok(fk.api_requests("openai-responses"))[3]
    assert reply_calls(last) == []
    assert TARGET in r_names(last)[4:], (SESSION_LOST, r_names(last))


def test_responses_chained_turn_with_prompt_cache_key(toolsearch: MitmDump, fk: FakeProvider) -> None:
    """Control for the two tests above: with a client session id (``prompt_cache_key``) the
    chained turn finds the session, so the found tool rides along."""
    plan_search_then_call(fk)
    client, tools = toolsearch.openai(), responses_tools()
    key = f"pck-{uuid.uuid4().hex}"
    res = responses_call(
        client, False, model="gpt-5", input=fresh("What's the forecast for Paris?"), tools=tools, prompt_cache_key=key
    )
    fc = check_responses_client_view(res, fk.api_requests("openai-responses"))
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}]
    res2 = responses_call(
        client, False, model="gpt-5", previous_response_id=res.id, input=output, tools=tools, prompt_cache_key=key
    )
    assert res2.output_text == "Forecast:\nlast tool result: sunny"
    third = ok(fk.api_requests("openai-responses"))[2]
    assert reply_calls(third) == [] and TARGET in r_names(third)[4:]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_raw_bytes_hide_the_search(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_search_then_call(fk)
    body = {
        "model": "gpt-5",
        "input": fresh("What's the forecast for Paris?"),
        "tools": responses_tools(),
        "stream": stream,
    }
    with toolsearch.httpx_client() as http:
        r = http.post("https://api.openai.com/v1/responses", json=body, headers={"authorization": "Bearer sk-test"})
    assert r.status_code == 200 and len(fk.api_requests()) == 2
    assert SEARCH_TOOL not in r.text and TARGET in r.text
    if stream:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
        assert r.text.count("event: response.completed") == 1


def test_responses_mixed_turn_stateless(toolsearch: MitmDump, fk: FakeProvider) -> None:
    plan_mixed(fk)
    client, tools = toolsearch.openai(), responses_tools()
    history: list[dict[str, Any]] = [{"role": "user", "content": fresh("Read notes.txt and post it to Slack")}]
    res = responses_call(client, False, model="gpt-5", input=history, tools=tools, store=False)
    assert SEARCH_TOOL not in res.model_dump_json()
    (fc,) = [o for o in res.output if o.type == "function_call"]
    assert fc.name == "read_file"
    assert len(fk.api_requests()) == 1  # never re-forwarded without the real call's output
    history += [
        fc.model_dump(exclude_none=True, exclude={"id", "status"}),
        {"type": "function_call_output", "call_id": fc.call_id, "output": "hello"},
    ]
    res2 = responses_call(client, False, model="gpt-5", input=history, tools=tools, store=False)
    assert res2.output_text == "Done:\nlast tool result: hello"
    nxt = ok(fk.api_requests())[1]
    assert any(n.startswith("mcp__slack__") for n in r_names(nxt)[4:]), r_names(nxt)  # found tools ride along


def test_responses_mixed_turn_stored_chain(toolsearch: MitmDump, fk: FakeProvider) -> None:
    """Stored + ``previous_response_id``: the mixed round is the response the server stored, with
    the search call in it; the client's next turn chains from it and answers only its own call."""
    plan_mixed(fk)
    client, tools = toolsearch.openai(), responses_tools()
    res = responses_call(client, False, model="gpt-5", input=fresh("Read notes.txt and post it to Slack"), tools=tools)
    (fc,) = [o for o in res.output if o.type == "function_call"]
    assert fc.name == "read_file" and SEARCH_TOOL not in res.model_dump_json()
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "hello"}]
    try:
        res2 = responses_call(client, False, model="gpt-5", previous_response_id=res.id, input=output, tools=tools)
    except openai.BadRequestError as e:  # the stored phantom call has no output
        pytest.fail(f"the chained turn after a mixed turn was rejected upstream: {e}")
    assert res2.output_text == "Done:\nlast tool result: hello"


# =================================================================================================
# tool-search: Gemini
# =================================================================================================


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_search_then_call_with_signatures(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_search_then_call(fk)
    sent: list[dict[str, Any]] = []
    client = toolsearch.genai(event_hooks=recording(sent))
    config = gt.GenerateContentConfig(tools=gemini_tools())  # type: ignore[arg-type]
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh("What's the forecast for Paris?"))])]
    parts, usage = gemini_call(client, stream, contents, config)
    fcs = [p for p in parts if p.function_call]
    assert [p.function_call.name for p in fcs] == [TARGET]  # type: ignore[union-attr]
    assert fcs[0].thought_signature  # the model's signature reached the client
    assert SEARCH_TOOL not in json.dumps([p.model_dump(mode="json", exclude_none=True) for p in parts])
    first, second = recs = ok(fk.api_requests("gemini"))
    # Call-through (Gemini's default): the model calls the found tool through the dispatcher.
    assert reply_calls(first) == [SEARCH_TOOL] and reply_calls(second) == [DISPATCHER] and second.called() == [TARGET]
    client_decls = {d["name"]: d for d in g_decls(sent[0])}
    assert [d["name"] for d in g_decls(first.json)] == ["read_file", SEARCH_TOOL, DISPATCHER]
    assert [e for e in first.json["tools"] if "functionDeclarations" not in e] == [{"googleSearch": {}}]
    assert second.json["tools"] == first.json["tools"]  # never changes
    shown = found_definition(second.json, TARGET)  # the search result carried the client's own definition
    assert shown["description"] == client_decls[TARGET]["description"]
    assert shown["parameters"] == next(v for k, v in client_decls[TARGET].items() if k.startswith("parameters"))
    # The phantom step went back signed (gemini-3 validates it: the fake answered 200).
    model_turn, answer = second.json["contents"][-2:]
    assert model_turn["role"] == "model" and model_turn["parts"][-1]["functionCall"]["name"] == SEARCH_TOOL
    assert model_turn["parts"][-1]["thoughtSignature"]
    assert answer["parts"][0]["functionResponse"]["name"] == SEARCH_TOOL
    assert usage.prompt_token_count == usage_sum(recs, "input_tokens")
    assert usage.candidates_token_count == usage_sum(recs, "output_tokens")
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    # Next turn: the signed forecast call goes back with its result; no search (its definition is in the history).
    contents += [
        gt.Content(role="model", parts=parts),
        gt.Content(
            role="user",
            parts=[gt.Part(function_response=gt.FunctionResponse(name=TARGET, response={"output": "sunny"}))],
        ),
    ]
    parts2, _ = gemini_call(client, stream, contents, config)
    assert "".join(p.text or "" for p in parts2) == 'Forecast:\nlast tool result: {"output":"sunny"}'
    third = ok(fk.api_requests("gemini"))[2]
    assert reply_calls(third) == [] and third.json["tools"] == first.json["tools"]


def found_definition(body: dict[str, Any], name: str) -> dict[str, Any]:
    """What a Gemini request's search result (call-through) shows of the tool ``name``."""
    results = [json.loads(p["functionResponse"]["response"]["output"]) for c in body["contents"] for p in c["parts"]
               if p.get("functionResponse", {}).get("name") == SEARCH_TOOL]
    return next(t for r in results for t in r.get("tools", []) if t["name"] == name)


def gemini_raw_chunks(r: httpx.Response, method: str) -> list[dict[str, Any]]:
    """The response's GenerateContentResponse objects, read as the wire form the client asked for."""
    ctype = r.headers["content-type"]
    if method == ":generateContent":
        assert ctype.startswith("application/json")
        return [r.json()]
    if method.endswith("alt=sse"):
        assert ctype.startswith("text/event-stream")
        return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert ctype.startswith("application/json") and r.text.lstrip().startswith("[")  # the JSON-array stream
    return json.loads(r.text)


@pytest.mark.parametrize("method", [":generateContent", ":streamGenerateContent?alt=sse", ":streamGenerateContent"])
def test_gemini_raw_bytes(toolsearch: MitmDump, fk: FakeProvider, method: str) -> None:
    """Raw HTTP, each wire form (the JSON-array stream has no SDK): the re-encoded answer is in the
    form asked for, holds nothing of the search, and its signed call round-trips next turn."""
    plan_search_then_call(fk)
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": fresh("What's the forecast for Paris?")}]}],
        "tools": gemini_raw_tools(),
    }
    headers = {"x-goog-api-key": "test-gemini-key"}
    with toolsearch.httpx_client() as http:
        r = http.post(GEMINI_URL + method, json=body, headers=headers)
        assert r.status_code == 200, r.text
        assert SEARCH_TOOL not in r.text
        chunks = gemini_raw_chunks(r, method)
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        fcs = [p for p in parts if "functionCall" in p]
        assert [p["functionCall"]["name"] for p in fcs] == [TARGET] and fcs[0]["thoughtSignature"]
        recs = ok(fk.api_requests("gemini"))
        assert len(recs) == 2 and all(rec.query == recs[0].query for rec in recs)  # same framing each round
        assert chunks[-1]["usageMetadata"]["promptTokenCount"] == usage_sum(recs, "input_tokens")
        body["contents"] += [
            {"role": "model", "parts": parts},
            {"role": "user", "parts": [{"functionResponse": {"name": TARGET, "response": {"t": 1}}}]},
        ]
        r2 = http.post(GEMINI_URL + method, json=body, headers=headers)
    assert r2.status_code == 200, r2.text  # the signature survived the round trip
    text = "".join(
        p.get("text", "") for c in gemini_raw_chunks(r2, method) for p in c["candidates"][0]["content"]["parts"]
    )
    assert text == 'Forecast:\nlast tool result: {"t":1}'
    third = ok(fk.api_requests("gemini"))[2]
    assert reply_calls(third) == [] and third.json["tools"] == recs[0].json["tools"]  # call-through: never changes


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_mixed_turn(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_mixed(fk)
    client = toolsearch.genai()
    config = gt.GenerateContentConfig(tools=gemini_tools())  # type: ignore[arg-type]
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh("Read notes.txt and post it to Slack"))])]
    parts, _ = gemini_call(client, stream, contents, config)
    fcs = [p for p in parts if p.function_call]
    assert [p.function_call.name for p in fcs] == ["read_file"] and fcs[0].thought_signature  # type: ignore[union-attr]
    assert len(fk.api_requests()) == 1
    contents += [
        gt.Content(role="model", parts=parts),
        gt.Content(
            role="user",
            parts=[gt.Part(function_response=gt.FunctionResponse(name="read_file", response={"output": "hello"}))],
        ),
    ]
    parts2, _ = gemini_call(client, stream, contents, config)  # gemini-3: the kept call's signature is checked
    assert "last tool result" in "".join(p.text or "" for p in parts2)
    first, nxt = ok(fk.api_requests())
    assert nxt.json["tools"] == first.json["tools"]  # call-through: never changes (the model searches again)


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


# =================================================================================================
# an upstream failure in the middle of the loop
# =================================================================================================


def test_gemini_upstream_500_mid_loop(toolsearch: MitmDump, fk: FakeProvider) -> None:
    fk.set_script([search("forecast", times=1), fail(500, "overloaded", nth=2)])
    body = {"contents": [{"role": "user", "parts": [{"text": fresh("forecast?")}]}], "tools": gemini_raw_tools()}
    with toolsearch.httpx_client() as http:  # a hang would be the test's timeout, not a slow pass
        r = http.post(GEMINI_URL + ":streamGenerateContent?alt=sse", json=body, headers={"x-goog-api-key": "k"})
    # The stream started live; the upstream's own error ends it in-stream, as Gemini sends one.
    assert r.status_code == 200 and SEARCH_TOOL not in r.text
    last = json.loads(r.text.strip().splitlines()[-1].removeprefix("data:"))
    assert last["error"]["status"] == "INTERNAL" and last["error"]["code"] == 500
    assert [rec.status for rec in fk.api_requests()] == [200, 500]


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
