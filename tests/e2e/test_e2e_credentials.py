"""Credential hygiene of the running proxy: no secret a client sends reaches anything the proxy
writes, and per-caller state never crosses callers.

One real mitmdump + the addon (tool-search, hybrid search so the embedding cache is written
too) runs every credential form the APIs accept, through the real client where one sends it:
Anthropic ``x-api-key`` (raw, as Claude Code sends it; the SDK sends a bearer token) and
``Authorization: Bearer``, OpenAI ``Bearer sk-…``, Gemini ``x-goog-api-key`` and ``?key=`` in
the URL, Bedrock SigV4 (the proxy re-signs changed bodies with the same key from its own AWS
chain), Azure OpenAI ``api-key``. Each form runs, JSON and streamed, a turn with a search (the
proxy's own re-forward), a 500 in the middle of the loop, and a 400 on the first request (the
proxy resends the client's original). Then the proxy is stopped (everything flushed) and every
file it wrote is searched, as bytes, for every secret: its stdout/stderr, the telemetry JSONL,
the session store's files (diskcache: SQLite and pickles), the search cache, and anything else
under its work dir.

The proxy runs with debug logging and a terminal 200 columns wide (``COLUMNS``), as a user
investigating a problem runs it: mitmdump's flow listing cuts URLs at the terminal's width, so
an 80-column default would hide what a real terminal shows.

Tenant isolation, end to end: two Gemini ``?key=`` callers opening with the same message share
no discovered tool, and a caller with no credential keeps no session.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anthropic
import botocore.exceptions
import openai
import pytest
from google.genai import errors as genai_errors
from google.genai import types as gt

from tests.e2e.harness import ADDON_PATH, SCRUBBED_ENV, MitmDump, addon_config
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, RecordedRequest, Rule, fail, reply, search
from tests.fakeprovider.providers import PROVIDERS, BedrockConverse, BedrockInvoke, Incoming, OpenAIChat
from tests.support.catalog import anthropic_tools, openai_tools

pytestmark = pytest.mark.e2e

# --- the secrets: distinctive, in each provider's real shape ------------------------------------

ANTHROPIC_KEY = "sk-ant-api03-tdCredXApiKey7f3a9c1e5b2d4f6a8c0e1357"
ANTHROPIC_TOKEN = "sk-ant-oat01-tdCredBearer5e7c9a1b3d5f7a9c1e3b2468"
OPENAI_KEY = "sk-proj-tdCredOpenAi2b4d6f8a0c2e4a6c8e0b2d4f6a8c"
GEMINI_HEADER_KEY = "AIzaSyTdCredHeaderKey0123456789abcdefgh"  # AIza + 35
GEMINI_QUERY_KEY = "AIzaSyTdCredQueryKey90123456789abcdefgh"
TENANT_A_KEY = "AIzaSyTdCredTenantAKey123456789abcdefgh"
TENANT_B_KEY = "AIzaSyTdCredTenantBKey123456789abcdefgh"
AWS_KEY_ID = "AKIATDCREDSIGV4TEST1"  # AKIA + 16
AWS_SECRET = "tdCredAwsSecret/0a1b2c3d4e5f6g7h8i9j0kLm"  # 40, with the "/" AWS secrets carry
AZURE_KEY = "7dc4ed5ecbe34c1f9a2b8d6e0f1a3c5e"  # 32 hex, as Azure issues them

AZURE_ENDPOINT = "https://tdcred.openai.azure.com"
AZURE_HOST_RE = r"[a-z0-9-]+\.openai\.azure\.com"
GEMINI_MODEL = "gemini-2.5-flash"
GEMINI_URL = f"https://generativelanguage.googleapis.com/v1beta/models/{GEMINI_MODEL}"
BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
TARGET = "mcp__weather__get_forecast"
CATALOG = anthropic_tools(60)
AWS_PROFILE = "tdcred"
COLUMNS = "200"

TELEMETRY = "telemetry.jsonl"
HOSTS = ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com", "bedrock-runtime.*.amazonaws.com",
         "*.openai.azure.com")


def config(d: Path) -> str:
    """Hybrid search, so the embedding cache is written too; the first search embeds the catalog:
    slow on a loaded machine, and not under test (a long search timeout). Classic deferral on
    every API: found tools then live in the session (appended to ``tools[]`` on later turns),
    which is what the tenant test checks is never shared."""
    search = {"backend": "hybrid", "cache_dir": str(d / "search-cache"), "timeout": "60s"}
    return addon_config(d, strategy="tool-search", max_search_results=3, search=search, hosts=HOSTS,
                        telemetry=TELEMETRY, defer={"call_through": []})


# Errors a client raises when the proxy passes an upstream failure on (the failure scenarios).
CLIENT_ERRORS = (anthropic.APIError, openai.APIError, genai_errors.APIError, botocore.exceptions.ClientError)


# --- the fake: every provider, Azure's deployment route, Bedrock with this module's AWS key -------


class AzureChat(OpenAIChat):
    """Azure OpenAI Chat Completions: the deployment in the path, the key in ``api-key``."""

    name = "azure-chat"
    _ROUTE = re.compile(r"^/openai/deployments/[^/]+/chat/completions$")

    def match(self, method: str, path: str) -> dict[str, str] | None:
        return {} if method == "POST" and self._ROUTE.match(path) else None

    def authenticated(self, req: Incoming) -> bool:
        return bool(req.headers.get("api-key"))


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    bedrock = [BedrockConverse(AWS_KEY_ID, AWS_SECRET), BedrockInvoke(AWS_KEY_ID, AWS_SECRET)]
    others = [p for p in PROVIDERS if not isinstance(p, (BedrockConverse, BedrockInvoke))]
    with FakeProvider(stream_delay=0.0, providers=[*others, *bedrock, AzureChat()]) as fake:
        yield fake


@pytest.fixture(scope="module")
def proxy(provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MitmDump]:
    """mitmdump + the addon; its AWS chain holds the clients' key (a private credentials file)."""
    aws = tmp_path_factory.mktemp("aws")
    (aws / "credentials").write_text(
        f"[{AWS_PROFILE}]\naws_access_key_id = {AWS_KEY_ID}\naws_secret_access_key = {AWS_SECRET}\n")
    (aws / "config").write_text(f"[profile {AWS_PROFILE}]\nregion = us-east-1\n")
    mitm = MitmDump(
        tmp_path_factory.mktemp("credentials"),
        provider.url,
        script=ADDON_PATH,
        config=config,
        extra_args=["--map-remote", f"|^https://{AZURE_HOST_RE}(?::443)?(?=/)|{provider.url}",
                    "--set", "termlog_verbosity=debug"],
        name="credentials",
    )
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                     "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                     "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_BEARER_TOKEN_BEDROCK"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(aws / "credentials"))
        mp.setenv("AWS_CONFIG_FILE", str(aws / "config"))
        mp.setenv("AWS_PROFILE", AWS_PROFILE)
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("COLUMNS", COLUMNS)
        mitm.start()
    yield mitm
    mitm.stop()


# --- the clients, one per credential form ---------------------------------------------------------


def fresh(text: str) -> str:
    """A first user message no other run used: each run is its own session."""
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def gemini_tools() -> list[dict[str, Any]]:
    return [{"functionDeclarations": [{"name": t["name"], "description": t["description"],
                                       "parametersJsonSchema": t["input_schema"]} for t in CATALOG]}]


def send_chat(client: openai.OpenAI, text: str, stream: bool) -> None:
    kw: dict[str, Any] = dict(model="gpt-5", tools=openai_tools(60), messages=[{"role": "user", "content": text}])
    if stream:
        for _ in client.chat.completions.create(stream=True, **kw):
            pass
    else:
        client.chat.completions.create(**kw)


def anthropic_key(mitm: MitmDump, text: str, stream: bool) -> None:
    """``x-api-key``, as Claude Code and curl send it (the SDK now sends its key as a bearer token)."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": stream, "tools": CATALOG,
            "messages": [{"role": "user", "content": text}]}
    with mitm.httpx_client() as http:
        http.post("https://api.anthropic.com/v1/messages", json=body,
                  headers={"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"})


def anthropic_bearer(mitm: MitmDump, text: str, stream: bool) -> None:
    kw: dict[str, Any] = dict(model="claude-sonnet-4-5", max_tokens=256, tools=CATALOG,
                              messages=[{"role": "user", "content": text}])
    with mitm.anthropic(api_key=None, auth_token=ANTHROPIC_TOKEN) as client:
        if stream:
            with client.messages.stream(**kw) as s:
                s.get_final_message()
        else:
            client.messages.create(**kw)


def openai_bearer(mitm: MitmDump, text: str, stream: bool) -> None:
    with mitm.openai(api_key=OPENAI_KEY) as client:
        send_chat(client, text, stream)


def azure_key(mitm: MitmDump, text: str, stream: bool) -> None:
    http = openai.DefaultHttpxClient(proxy=mitm.url, verify=mitm.ssl_context(), trust_env=False)
    with openai.AzureOpenAI(api_key=AZURE_KEY, azure_endpoint=AZURE_ENDPOINT, api_version="2024-10-21",
                            http_client=http, max_retries=0, timeout=60) as client:
        send_chat(client, text, stream)


def gemini_header(mitm: MitmDump, text: str, stream: bool) -> None:
    client = mitm.genai(api_key=GEMINI_HEADER_KEY)
    decls = [gt.FunctionDeclaration(name=t["name"], description=t["description"], parameters_json_schema=t["input_schema"])
             for t in CATALOG]
    config = gt.GenerateContentConfig(tools=[gt.Tool(function_declarations=decls)])
    if stream:
        for _ in client.models.generate_content_stream(model=GEMINI_MODEL, contents=text, config=config):
            pass
    else:
        client.models.generate_content(model=GEMINI_MODEL, contents=text, config=config)


def gemini_query(mitm: MitmDump, text: str, stream: bool, key: str = GEMINI_QUERY_KEY,
                 contents: list[dict[str, Any]] | None = None) -> int:
    """Gemini's REST form with ``?key=`` in the URL (no SDK sends it; curl recipes and older
    clients do). Returns the status the client saw."""
    method = f":streamGenerateContent?alt=sse&key={key}" if stream else f":generateContent?key={key}"
    body = {"contents": contents or [{"role": "user", "parts": [{"text": text}]}], "tools": gemini_tools()}
    with mitm.httpx_client() as http:
        return http.post(GEMINI_URL + method, json=body).status_code


def bedrock_sigv4(mitm: MitmDump, text: str, stream: bool, signatures: list[str]) -> None:
    """boto3 signs with SigV4; every Authorization it sends goes to ``signatures``."""
    client = mitm.bedrock(aws_access_key_id=AWS_KEY_ID, aws_secret_access_key=AWS_SECRET)

    def keep_signature(request: Any, **_: Any) -> None:
        value = request.headers["Authorization"]
        signatures.append(value.decode() if isinstance(value, bytes) else value)

    client.meta.events.register("before-send.bedrock-runtime.*", keep_signature)
    tools = {"tools": [{"toolSpec": {"name": t["name"], "description": t["description"],
                                     "inputSchema": {"json": t["input_schema"]}}} for t in CATALOG]}
    kw = dict(modelId=BEDROCK_MODEL, messages=[{"role": "user", "content": [{"text": text}]}], toolConfig=tools)
    if stream:
        for _ in client.converse_stream(**kw)["stream"]:
            pass
    else:
        client.converse(**kw)


@dataclass(frozen=True)
class Form:
    """One way a client proves who it is: the secrets it carries and how it sends a turn."""

    name: str
    secrets: tuple[str, ...]
    send: Callable[..., Any]
    arrives: Callable[[RecordedRequest], bool]  # the upstream request carries the credential in this form


FORMS = (
    Form("anthropic x-api-key", (ANTHROPIC_KEY,), anthropic_key, lambda r: r.header("x-api-key") == ANTHROPIC_KEY),
    Form("anthropic bearer", (ANTHROPIC_TOKEN,), anthropic_bearer,
         lambda r: r.header("authorization") == f"Bearer {ANTHROPIC_TOKEN}" and r.header("x-api-key") is None),
    Form("openai bearer", (OPENAI_KEY,), openai_bearer, lambda r: r.header("authorization") == f"Bearer {OPENAI_KEY}"),
    Form("gemini x-goog-api-key", (GEMINI_HEADER_KEY,), gemini_header,
         lambda r: r.header("x-goog-api-key") == GEMINI_HEADER_KEY and "key" not in r.query_params),
    Form("gemini ?key=", (GEMINI_QUERY_KEY, TENANT_A_KEY, TENANT_B_KEY), gemini_query,
         # moved into the header the API reads the same way, so mitmproxy's flow listing never prints it
         lambda r: r.header("x-goog-api-key") == GEMINI_QUERY_KEY and "key" not in r.query_params),
    Form("bedrock sigv4", (AWS_KEY_ID, AWS_SECRET), bedrock_sigv4,
         lambda r: (r.header("authorization") or "").startswith(f"AWS4-HMAC-SHA256 Credential={AWS_KEY_ID}/")),
    Form("azure api-key", (AZURE_KEY,), azure_key,
         lambda r: r.header("api-key") == AZURE_KEY and r.header("authorization") is None),
)
BY_NAME = {f.name: f for f in FORMS}

# scenario -> (script, statuses the fake answers in order)
SCENARIOS: dict[str, tuple[Callable[[], list[Rule]], list[int]]] = {
    "search": (lambda: [search("weather forecast"), reply("Sunny.")], [200, 200]),
    "500 mid-loop": (lambda: [search("weather forecast"), fail(500, "overloaded", nth=2)], [200, 500]),
    "400 first, original resent": (lambda: [fail(400, "tools rejected", nth=1), reply("Sunny.")], [400, 200]),
}


# --- the traffic, run once; the tests below read what it left ------------------------------------


@dataclass
class Run:
    requests: list[RecordedRequest]
    error: str | None = None


@dataclass
class Traffic:
    workdir: Path
    log: Path
    runs: dict[tuple[str, str, bool], Run] = field(default_factory=dict)
    tenants: dict[str, list[RecordedRequest]] = field(default_factory=dict)
    sessions: dict[str, list[str]] = field(default_factory=dict)  # telemetry session of each request
    signatures: list[str] = field(default_factory=list)  # every SigV4 signature seen on the wire


def recorded(fake: FakeProvider, count: int) -> list[RecordedRequest]:
    return [r for r in fake.wait_for_requests(count) if r.api is not None]


def run_scenario(mitm: MitmDump, fake: FakeProvider, form: Form, scenario: str, stream: bool,
                 signatures: list[str]) -> Run:
    script, statuses = SCENARIOS[scenario]
    fake.reset()
    fake.set_script(script())
    extra = (signatures,) if form.send is bedrock_sigv4 else ()
    error = None
    try:
        form.send(mitm, fresh("What's the weather forecast for Paris?"), stream, *extra)
    except CLIENT_ERRORS as e:
        error = f"{type(e).__name__}: {e}"[:500]
    return Run(recorded(fake, len(statuses)), error)


def telemetry_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def session_of(mitm: MitmDump, key: str | None, text: str) -> str:
    """The telemetry session of one Gemini turn sent with ``?key=key`` (None: no credential)."""
    seen = len(mitm.records(TELEMETRY, at_least=0))
    method = f":generateContent?key={key}" if key else ":generateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": text}]}], "tools": gemini_tools()}
    sent = time.time()
    with mitm.httpx_client() as http:
        http.post(GEMINI_URL + method, json=body)
    # This turn's record: the first one begun after it was sent (an earlier turn's may be written later).
    for _ in range(300):
        fresh = [r for r in mitm.records(TELEMETRY, at_least=seen + 1, timeout=30.0)[seen:] if r["time"] >= sent]
        if fresh:
            return fresh[0]["session"]
        time.sleep(0.1)
    raise AssertionError("no telemetry record of the turn")


def run_tenants(mitm: MitmDump, fake: FakeProvider, traffic: Traffic) -> None:
    """Caller A searches and finds TARGET, then sends a second turn (its session loads TARGET
    upfront: the control). Caller B, another key, sends the same conversation."""
    opening = fresh("What's the weather forecast for Paris?")
    second_turn = [{"role": "user", "parts": [{"text": opening}]}, {"role": "model", "parts": [{"text": "Sunny."}]},
                   {"role": "user", "parts": [{"text": "And tomorrow?"}]}]
    fake.reset()
    fake.set_script([search("weather forecast"), reply("Sunny.")])
    assert gemini_query(mitm, opening, False, TENANT_A_KEY) == 200
    traffic.tenants["a first turn"] = recorded(fake, 2)
    for name, key in (("a second turn", TENANT_A_KEY), ("b same conversation", TENANT_B_KEY)):
        fake.reset()
        fake.set_script([reply("Sunny again.")])
        assert gemini_query(mitm, opening, False, key, contents=second_turn) == 200
        traffic.tenants[name] = recorded(fake, 1)


@pytest.fixture(scope="module")
def traffic(proxy: MitmDump, provider: FakeProvider) -> Traffic:
    """Every form x scenario x (JSON, stream), the tenant runs; then the proxy stops, flushing all."""
    result = Traffic(proxy.workdir, proxy.log_path)
    with pytest.MonkeyPatch.context() as mp:
        for name in SCRUBBED_ENV:  # the SDKs would add credentials of their own from the environment
            mp.delenv(name, raising=False)
        for form in FORMS:
            for scenario in SCENARIOS:
                for stream in (False, True):
                    result.runs[(form.name, scenario, stream)] = run_scenario(
                        proxy, provider, form, scenario, stream, result.signatures)
    run_tenants(proxy, provider, result)
    provider.reset()
    provider.set_script([reply("Hi.")])
    opening = fresh("hello")
    result.sessions["no credential"] = [session_of(proxy, None, opening) for _ in range(2)]
    result.sessions["one key"] = [session_of(proxy, TENANT_A_KEY, opening) for _ in range(2)]
    for run in result.runs.values():  # the proxy's own signatures (re-signed bodies) too
        result.signatures += [r.header("authorization") or "" for r in run.requests]
    proxy.stop()
    return result


# --- the scenarios really ran: every form went through the re-forward and the resend --------------


def tool_names(rec: RecordedRequest) -> list[str]:
    return rec.tool_names or []


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("form", [f.name for f in FORMS])
def test_scenario_ran(traffic: Traffic, form: str, scenario: str, stream: bool) -> None:
    run = traffic.runs[(form, scenario, stream)]
    assert [r.status for r in run.requests] == SCENARIOS[scenario][1], [(r.status, r.error) for r in run.requests]
    assert all(BY_NAME[form].arrives(r) for r in run.requests), [r.headers for r in run.requests]
    first, second = run.requests
    if scenario == "400 first, original resent":
        assert run.error is None, run.error
        assert SEARCH_TOOL in tool_names(first) and len(tool_names(second)) == len(CATALOG)
    else:
        assert tool_names(first) == [SEARCH_TOOL] and TARGET in tool_names(second)
    if scenario == "search":
        assert run.error is None, run.error


# --- nothing the proxy wrote holds a secret ----------------------------------------------------------


def files(traffic: Traffic, artifact: str) -> list[Path]:
    """The files of one artifact; "other files" is everything else under the proxy's work dir."""
    named = {
        "mitmdump log": [traffic.log],
        "telemetry": [traffic.workdir / TELEMETRY],
        "sessions": sorted(p for p in (traffic.workdir / "sessions").rglob("*") if p.is_file()),
        "search cache": sorted(p for p in (traffic.workdir / "search-cache").rglob("*") if p.is_file()),
    }
    if artifact in named:
        return named[artifact]
    claimed = {p for group in named.values() for p in group}
    return sorted(p for p in traffic.workdir.rglob("*") if p.is_file() and p not in claimed)


SIGNATURES = "sigv4 signatures"
KINDS = (*BY_NAME, SIGNATURES)


def needles(traffic: Traffic, kind: str) -> list[bytes]:
    """A form's secrets as they could appear: as sent, and percent-encoded (an AWS secret has
    a "/"). SigV4 signatures apart: every one seen on the wire, the client's and the proxy's
    (one replays its request for minutes), none of them a long-lived key."""
    if kind == SIGNATURES:
        values = [m.group(1) for a in traffic.signatures if (m := re.search(r"Signature=([0-9a-f]+)", a))]
    else:
        values = list(BY_NAME[kind].secrets)
    return sorted({v.encode() for s in values for v in (s, quote(s, safe=""))})


ARTIFACTS = ("mitmdump log", "telemetry", "sessions", "search cache", "other files")


def secret_cases() -> list[Any]:
    return [pytest.param(a, k, id=f"{a}-{k}") for a in ARTIFACTS for k in KINDS]


@pytest.mark.parametrize(("artifact", "kind"), secret_cases())
def test_no_secret_written(traffic: Traffic, artifact: str, kind: str) -> None:
    found = []
    for path in files(traffic, artifact):
        data = path.read_bytes()
        found += [f"{path.relative_to(traffic.workdir)}: {n.decode()}" for n in needles(traffic, kind) if n in data]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("artifact", ARTIFACTS[:4])
def test_artifacts_were_written(traffic: Traffic, artifact: str) -> None:
    """The searches above looked at real output: each artifact exists and holds data."""
    paths = files(traffic, artifact)
    assert paths and sum(p.stat().st_size for p in paths) > 0, artifact
    if artifact == "mitmdump log":
        text = traffic.log.read_text()
        assert ":generateContent" in text and "/v1/messages" in text  # the flow listing is there
    if artifact == "telemetry":
        records = telemetry_lines(paths[0])
        assert any(r["searches"] for r in records) and any(r["fallback_reason"] for r in records)


def test_signatures_were_collected(traffic: Traffic) -> None:
    """Bedrock turns ran 6 times, each signed by the client and re-signed by the proxy."""
    assert len(needles(traffic, SIGNATURES)) >= 12


# --- tenants ---------------------------------------------------------------------------------------------


def test_tenants_with_the_same_opening_share_no_found_tool(traffic: Traffic) -> None:
    """Caller A found TARGET; its next turn carries it (the session works); caller B, with another
    ``?key=`` and the very same conversation, does not get it."""
    first = traffic.tenants["a first turn"]
    assert TARGET not in tool_names(first[0]) and TARGET in tool_names(first[1])
    (a_again,) = traffic.tenants["a second turn"]
    assert TARGET in tool_names(a_again)
    (b,) = traffic.tenants["b same conversation"]
    assert TARGET not in tool_names(b) and tool_names(b) == [SEARCH_TOOL]


def test_no_credential_keeps_no_session(traffic: Traffic) -> None:
    """The same opening twice: one key maps both requests to one session (the control); without a
    credential each request is a session of its own."""
    keyed, anonymous = traffic.sessions["one key"], traffic.sessions["no credential"]
    assert keyed[0] == keyed[1]
    assert anonymous[0] != anonymous[1]
