"""Set-up for the end-to-end tests of OpenAI Responses, Gemini and Bedrock (Converse and
InvokeModel) through a real mitmdump, driven by the real SDKs (openai, google-genai, boto3) with
their real endpoints: configs, proxies, catalogs, clients and recorded-request helpers
(``test_e2e_passthrough``, ``test_e2e_relevance_wire_apis``, ``test_e2e_search_<api>``).

One mitmdump per strategy is shared by each test module that uses it. The proxy gets the fake's test AWS
credentials the way a user's proxy gets its own: from the standard AWS chain, here a shared
credentials file named by ``AWS_SHARED_CREDENTIALS_FILE`` (the harness scrubs the ``AWS_*``
key variables, not that one), so changed Bedrock bodies can be re-signed; the fake verifies
every SigV4 signature against the body it received (a 403 means re-signing failed).
"""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

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
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, RecordedRequest, call, calls, reply, search
from tests.fakeprovider.providers.bedrock import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY
from tests.support.catalog import anthropic_tools


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


def _proxy_fixture(strategy: str, spec: ConfigSpec | None = None) -> Any:
    """A module's mitmdump on ``config(strategy)``, or on ``spec`` (named ``strategy``) when given."""

    @pytest.fixture(scope="module")
    def proxy(
        fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory, aws_chain: Any
    ) -> Iterator[MitmDump]:
        mitm = MitmDump(
            tmp_path_factory.mktemp(strategy),
            fake_provider.url,
            script=ADDON_PATH,
            config=spec if spec is not None else config(strategy),
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
