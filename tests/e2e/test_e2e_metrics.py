"""What a turn cost, end to end: every upstream answer's usage read, priced, written into the
telemetry and served as Prometheus metrics, through a real mitmdump in front of the fake provider,
driven by the official SDKs on every wire API (anthropic, openai Chat and Responses, google-genai,
boto3 Converse and InvokeModel), JSON and streamed.

One mitmdump for the module (tool-search, classic deferral or call-through, ``metrics.listen``
on a free port and a ``prices:`` row per model), one run of mixed traffic (the ``traffic``
fixture): on every API and in both forms, turns with a search (the fake's model searches, then
calls the tool it found: a hidden round) and turns without, once with the fake's prompt cache
off and once with it on (so cache reads and writes are reported); requests with few tools, which
go upstream as the client sent them (below ``defer.min_tools``: no loop, the usage read by the
tap); and Chat streams whose client did not ask for usage. The tests then hold the scrape of
``/metrics``, the telemetry and the fake's own account of what it answered against each other.

The fake reports usage the way each API does (``tests/fakeprovider/providers``, ``cache.py``
``Bill.usage``): OpenAI (Chat, Responses) and Gemini count cached tokens inside the input,
Anthropic and Bedrock (Converse, InvokeModel's Claude body) report input, cache reads and cache
writes apart. ``reported`` maps one recorded answer to the four types the proxy counts.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from google.genai import types as gt
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import ADDON_PATH, MitmDump, addon_config
from tests.e2e.wire_apis import (  # noqa: F401 (aws_chain is a fixture, used by name)
    CATALOG,
    GEMINI,
    READ_FILE,
    TARGET,
    anthropic_message,
    aws_chain,
    b_spec,
    converse_call,
    converse_tools,
    g_decl,
    gemini_call,
    gemini_tools,
    plan_search_then_call,
    r_tool,
    responses_call,
    responses_tools,
)
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, RecordedRequest, reply

pytestmark = pytest.mark.e2e

APIS = ("anthropic", "openai_chat", "openai_responses", "gemini", "bedrock_converse", "bedrock_invoke")
TYPES = ("input", "cache_read", "cache_write", "output")
#: One model per API, so each API's turns are priced by a row of their own.
MODELS = {
    "anthropic": "claude-metrics-test",
    "openai_chat": "gpt-metrics-chat",
    "openai_responses": "gpt-metrics-responses",
    "gemini": GEMINI,
    "bedrock_converse": "anthropic.claude-3-5-sonnet-20240620-v1:0",
    "bedrock_invoke": "anthropic.claude-3-haiku-20240307-v1:0",
}
#: $ per million tokens of (input, cache_read, cache_write, output): distinct per API and type.
PRICES = {
    "anthropic": (3.0, 0.3, 3.75, 15.0),
    "openai_chat": (2.0, 0.5, 2.5, 8.0),
    "openai_responses": (1.5, 0.15, 1.9, 12.0),
    "gemini": (2.5, 0.25, 4.5, 17.0),
    "bedrock_converse": (3.3, 0.33, 4.125, 16.5),
    "bedrock_invoke": (0.8, 0.08, 1.0, 4.0),
}
#: The APIs whose usage counts cached tokens inside the input tokens (the rest report them apart).
INPUT_INCLUDES_CACHE = {"openai_chat", "openai_responses", "gemini"}
FEW = [READ_FILE, CATALOG[0], CATALOG[1]]  # below defer.min_tools: goes upstream as the client sent it
MANY = CATALOG + [READ_FILE]


def config(workdir: Path) -> str:
    """tool-search (read_file and the Responses namespace kept); fewer than 10 deferrable tools go
    upstream as sent (``below_threshold``); metrics on a free port; a price row per model."""
    text = addon_config(workdir, strategy="tool-search", max_search_results=3, always_keep=["read_file", "crm.*"],
                        search={"backend": "bm25"}, defer={"min_tools": 10, "min_tokens": 10_000_000},
                        telemetry="t.jsonl")
    doc = yaml.safe_load(text)
    doc["metrics"] = {"listen": "127.0.0.1:0"}
    doc["prices"] = [
        {"match": [MODELS[api]], **dict(zip(TYPES, PRICES[api], strict=True))} for api in APIS
    ]
    return yaml.safe_dump(doc, sort_keys=False)


# --- the fake's account ----------------------------------------------------------------------------


def api_of(rec: RecordedRequest) -> str:
    assert rec.api is not None
    return rec.api.replace("-", "_")


def usage_requested(rec: RecordedRequest) -> bool:
    """Whether the answer carried usage on the wire: a Chat stream only with ``include_usage``."""
    if api_of(rec) != "openai_chat" or not rec.json.get("stream"):
        return True
    return bool((rec.json.get("stream_options") or {}).get("include_usage"))


def reported(rec: RecordedRequest) -> dict[str, int] | None:
    """The usage the fake put on the wire for this answer, in the proxy's four types (None: none)."""
    if rec.status != 200 or rec.reply is None or not usage_requested(rec):
        return None
    u = rec.reply["usage"]
    if api_of(rec) in INPUT_INCLUDES_CACHE:  # the cached part is inside the input: split out
        return {"input": u["input_tokens"] - u["cache_read_input_tokens"], "cache_read": u["cache_read_input_tokens"],
                "cache_write": 0, "output": u["output_tokens"]}
    return {"input": u["input_tokens"], "cache_read": u["cache_read_input_tokens"],
            "cache_write": u["cache_creation_input_tokens"], "output": u["output_tokens"]}


def priced(api: str, usage: dict[str, int]) -> float:
    """``usage`` at the test's own prices for ``api``'s model, in US dollars."""
    return sum(usage[t] * rate for t, rate in zip(TYPES, PRICES[api], strict=True)) / 1_000_000


def added(usages: list[dict[str, int] | None]) -> dict[str, int] | None:
    present = [u for u in usages if u is not None]
    return {t: sum(u[t] for u in present) for t in TYPES} if present else None


# --- the metrics ------------------------------------------------------------------------------------


@dataclass
class Scrape:
    """The samples of one scrape, by sample name."""

    samples: dict[str, list[tuple[dict[str, str], float]]]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[s.name].append((dict(s.labels), s.value))
        return cls(dict(samples))

    def total(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels``."""
        return sum(v for ls, v in self.samples.get(name, []) if all(ls.get(k) == x for k, x in labels.items()))

    def labelled(self, name: str) -> list[dict[str, str]]:
        return [ls for ls, _ in self.samples.get(name, [])]


def scrape(url: str) -> Scrape:
    with httpx.Client(trust_env=False, timeout=10) as http:
        r = http.get(url)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    return Scrape.parse(r.text)


# --- driving the APIs -------------------------------------------------------------------------------


@dataclass
class Turn:
    """One client request and what came of it."""

    api: str
    stream: bool
    kind: str  # "search": a hidden round; "plain": one round, tools deferred; "passed": few tools, no loop
    fake: list[RecordedRequest]  # the fake's API requests of this turn, in order
    record: dict[str, Any] = field(default_factory=dict)
    raw: bytes | None = None  # the client's body, for the Chat streams read as bytes
    usage_asked: bool = True


def fresh(text: str) -> str:
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"]}} for t in tools]


class Driver:
    """Sends one client request per ``turn`` with the official SDK of its API."""

    def __init__(self, mitm: MitmDump, fake: FakeProvider) -> None:
        self.mitm, self.fake = mitm, fake
        self.ant = mitm.anthropic()
        self.oai = mitm.openai()
        self.gen = mitm.genai()
        self.aws = mitm.bedrock()
        self.turns: list[Turn] = []

    def close(self) -> None:
        self.ant.close()
        self.oai.close()

    def turn(self, api: str, stream: bool, kind: str, *, usage: bool = True) -> Turn:
        """One turn; waits for its telemetry record, so the records come in the order of the turns."""
        if kind == "search":
            plan_search_then_call(self.fake)
        else:
            self.fake.set_script([reply("A plain answer.")])
        before = len(self.fake.api_requests())
        tools = FEW if kind == "passed" else MANY
        text = fresh("What's the weather forecast for Paris?")
        raw = getattr(self, api)(stream, tools, text, usage)
        turn = Turn(api, stream, kind, self.fake.api_requests()[before:], raw=raw, usage_asked=usage)
        assert turn.fake and all(r.status == 200 for r in turn.fake), [(r.status, r.error) for r in turn.fake]
        if kind == "search":  # the search, then the tool it found
            assert [r.called() for r in turn.fake] == [[SEARCH_TOOL], [TARGET]], [r.reply for r in turn.fake]
        else:
            assert len(turn.fake) == 1 and turn.fake[0].called() == [], [r.reply for r in turn.fake]
        self.turns.append(turn)
        turn.record = self.mitm.records("t.jsonl", at_least=len(self.turns))[len(self.turns) - 1]
        return turn

    # One method per API: (stream, the client's tools in Anthropic's shape, user text, usage asked
    # for) -> the client's raw body where it is read as bytes, else None.

    def anthropic(self, stream: bool, tools: list[dict[str, Any]], text: str, usage: bool) -> None:
        kw: dict[str, Any] = {"model": MODELS["anthropic"], "max_tokens": 256, "tools": tools,
                              "messages": [{"role": "user", "content": text}]}
        if not stream:
            self.ant.messages.create(**kw)
            return
        with self.ant.messages.stream(**kw) as s:
            s.get_final_message()

    def openai_chat(self, stream: bool, tools: list[dict[str, Any]], text: str, usage: bool) -> bytes | None:
        kw: dict[str, Any] = {"model": MODELS["openai_chat"], "tools": chat_tools(tools),
                              "messages": [{"role": "user", "content": text}]}
        if not stream:
            self.oai.chat.completions.create(**kw)
            return None
        if usage:
            kw["stream_options"] = {"include_usage": True}
        with self.oai.chat.completions.with_streaming_response.create(stream=True, **kw) as r:
            return b"".join(r.iter_bytes())

    def openai_responses(self, stream: bool, tools: list[dict[str, Any]], text: str, usage: bool) -> None:
        r_tools = responses_tools() if tools is MANY else [r_tool(t) for t in tools]
        responses_call(self.oai, stream, model=MODELS["openai_responses"], input=text, tools=r_tools, store=False)

    def gemini(self, stream: bool, tools: list[dict[str, Any]], text: str, usage: bool) -> None:
        g_tools = gemini_tools() if tools is MANY else [gt.Tool(function_declarations=[g_decl(t) for t in tools])]
        config = gt.GenerateContentConfig(tools=g_tools)  # type: ignore[arg-type]
        gemini_call(self.gen, stream, [gt.Content(role="user", parts=[gt.Part(text=text)])], config)

    def bedrock_converse(self, stream: bool, tools: list[dict[str, Any]], text: str, usage: bool) -> None:
        tool_config = converse_tools() if tools is MANY else {"tools": [b_spec(t) for t in tools]}
        converse_call(self.aws, stream, modelId=MODELS["bedrock_converse"], toolConfig=tool_config,
                      messages=[{"role": "user", "content": [{"text": text}]}])

    def bedrock_invoke(self, stream: bool, tools: list[dict[str, Any]], text: str, usage: bool) -> None:
        body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 256, "tools": tools,
                           "messages": [{"role": "user", "content": text}]})
        model = MODELS["bedrock_invoke"]
        if not stream:
            json.loads(self.aws.invoke_model(modelId=model, body=body)["body"].read())
            return
        res = self.aws.invoke_model_with_response_stream(modelId=model, body=body)
        anthropic_message([json.loads(e["chunk"]["bytes"]) for e in res["body"]])


# --- the run ----------------------------------------------------------------------------------------


@dataclass
class Traffic:
    turns: list[Turn]
    fake: list[RecordedRequest]  # every API request the fake answered
    records: list[dict[str, Any]]
    metrics: Scrape
    url: str


@pytest.fixture(scope="module")
def proxy(fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory,
          aws_chain: Callable[[], Any]) -> Iterator[MitmDump]:  # noqa: F811 (the fixture imported above)
    """One mitmdump for the module; the AWS chain gives it the fake's key to re-sign Bedrock rounds."""
    mitm = MitmDump(tmp_path_factory.mktemp("metrics"), fake_provider.url, script=ADDON_PATH, config=config,
                    name="metrics")
    with aws_chain():
        mitm.start()
    yield mitm
    mitm.stop()


@pytest.fixture(scope="module")
def traffic(proxy: MitmDump, fake_provider: FakeProvider) -> Iterator[Traffic]:
    """The module's one run of mixed traffic (the module docstring), then one scrape of it."""
    fake = fake_provider
    fake.reset()
    delay, fake.stream_delay = fake.stream_delay, 0.0
    url = proxy.wait_for_log(r"tool discovery: metrics at (http://\S+/metrics)").group(1)
    driver = Driver(proxy, fake)
    try:
        for cache in (False, True):
            fake.prompt_cache = cache
            for api in APIS:
                for stream in (False, True):
                    for kind in ("search", "plain"):
                        driver.turn(api, stream, kind)
        fake.prompt_cache = True
        for api, stream in [("anthropic", False), ("anthropic", True), ("openai_responses", True),
                            ("gemini", False), ("bedrock_converse", True), ("bedrock_invoke", True)]:
            driver.turn(api, stream, "passed")
        # Chat streams whose client did not ask for usage: deferred, passed through, with a hidden round.
        for kind in ("plain", "passed", "search"):
            driver.turn("openai_chat", True, kind, usage=False)
        records = proxy.records("t.jsonl", at_least=len(driver.turns))
        deadline = time.monotonic() + 10
        while (metrics := scrape(url)).total("tooldisco_requests_total") < len(records) and time.monotonic() < deadline:
            time.sleep(0.1)
        yield Traffic(driver.turns, fake.api_requests(), records, metrics, url)
    finally:
        driver.close()
        fake.reset()
        fake.stream_delay = delay


# --- the checks -------------------------------------------------------------------------------------


def expected_usage(recs: list[RecordedRequest], api: str | None = None) -> dict[str, int]:
    """What the fake reported over ``recs`` (of ``api``), by type."""
    return added([reported(r) for r in recs if api is None or api_of(r) == api]) or dict.fromkeys(TYPES, 0)


def test_metrics_served_where_the_log_says(traffic: Traffic) -> None:
    assert traffic.url.startswith("http://127.0.0.1:") and not traffic.url.startswith("http://127.0.0.1:0/")
    assert traffic.metrics.total("tooldisco_metrics_errors_total") == 0
    # Bounded labels: every api label is one of the six, no model or session anywhere.
    apis = {ls.get("api") for ls in traffic.metrics.labelled("tooldisco_requests_total")}
    assert apis == set(APIS), apis


def test_each_request_counted_once(traffic: Traffic) -> None:
    """One count per client request with tools to a listed host, one telemetry record each."""
    m, turns = traffic.metrics, traffic.turns
    assert len(traffic.records) == len(turns)
    assert m.total("tooldisco_requests_total") == len(turns)
    for api in APIS:
        assert m.total("tooldisco_requests_total", api=api) == sum(t.api == api for t in turns), api
    assert [t.record["provider"] for t in turns] == [t.api for t in turns]
    passed = sum(t.kind == "passed" for t in turns)
    assert m.total("tooldisco_requests_total", outcome="deferred") == len(turns) - passed
    assert m.total("tooldisco_requests_total", outcome="kept_whole") == passed
    assert m.total("tooldisco_fallbacks_total", reason="below_threshold") == passed
    assert m.total("tooldisco_fallbacks_total") == passed
    assert m.total("tooldisco_searches_total", outcome="hit") == sum(t.kind == "search" for t in turns)


def test_upstream_answers_by_kind(traffic: Traffic) -> None:
    """The client's request is one ``client`` answer each; every other request the fake got is
    the proxy's own (a hidden round)."""
    m, turns = traffic.metrics, traffic.turns
    assert m.total("tooldisco_upstream_requests_total", kind="client") == len(turns)
    assert m.total("tooldisco_upstream_requests_total", kind="hidden") == len(traffic.fake) - len(turns)
    assert m.total("tooldisco_upstream_requests_total") == m.total("tooldisco_upstream_requests_total", status="200")
    for api in APIS:
        mine = [t for t in turns if t.api == api]
        sent = sum(api_of(r) == api for r in traffic.fake)
        assert m.total("tooldisco_upstream_requests_total", api=api, kind="client") == len(mine), api
        assert m.total("tooldisco_upstream_requests_total", api=api, kind="hidden") == sent - len(mine), api
    for t in turns:
        assert t.record["upstream"] == [["client", 200]] + [["hidden", 200]] * (len(t.fake) - 1), (t.kind, t.record)


def test_usage_tokens_are_what_the_fake_reported(traffic: Traffic) -> None:
    """Exactly the usage the fake put on the wire over all its answers, per API and type, hidden
    rounds and passed-through answers included; each turn's record holds its own answers' sum."""
    m = traffic.metrics
    for api in APIS:
        want = expected_usage(traffic.fake, api)
        got = {t: m.total("tooldisco_usage_tokens_total", api=api, type=t) for t in TYPES}
        assert got == want, api
        assert want["cache_read"] > 0, api  # the prompt cache was on for half the turns
        if api not in INPUT_INCLUDES_CACHE:
            assert want["cache_write"] > 0, api
    total = expected_usage(traffic.fake)
    assert {t: m.total("tooldisco_usage_tokens_total", type=t) for t in TYPES} == total
    for t in traffic.turns:
        assert t.record["usage"] == added([reported(r) for r in t.fake]), (t.api, t.stream, t.kind)
    # OpenTelemetry's histogram: one observation per turn with usage; input counts the cache too.
    prompt = sum(total[k] for k in ("input", "cache_read", "cache_write"))
    assert m.total("gen_ai_client_token_usage_sum", gen_ai_token_type="input") == prompt
    assert m.total("gen_ai_client_token_usage_sum", gen_ai_token_type="output") == total["output"]
    with_usage = sum(t.record["usage"] is not None for t in traffic.turns)
    assert m.total("gen_ai_client_token_usage_count", gen_ai_token_type="input") == with_usage


def test_telemetry_agrees_with_the_metrics(traffic: Traffic) -> None:
    m, records = traffic.metrics, traffic.records
    for api in APIS:
        mine = [r for r in records if r["provider"] == api]
        for kind in TYPES:
            summed = sum((r["usage"] or {}).get(kind, 0) for r in mine)
            assert summed == m.total("tooldisco_usage_tokens_total", api=api, type=kind), (api, kind)
        unreported = sum(r["usage_unreported"] for r in mine)
        assert unreported == m.total("tooldisco_usage_unreported_total", api=api), api
        for kind in ("actual", "without"):
            key = "cost_usd" if kind == "actual" else "cost_usd_without"
            summed = sum(r[key] or 0 for r in mine)
            assert m.total("tooldisco_cost_usd_total", api=api, kind=kind) == pytest.approx(summed, rel=1e-6)
        assert {r["model"] for r in mine} == {MODELS[api]}
        assert sum(r["total_tools"] for r in mine) == m.total("tooldisco_tool_definitions_total", api=api, stage="sent")


def test_cost_is_the_reported_usage_priced(traffic: Traffic) -> None:
    """``actual`` is the sum of the records' ``cost_usd`` and the fake's usage at the test's prices."""
    m = traffic.metrics
    assert m.total("tooldisco_cost_unpriced_total") == 0
    actual = m.total("tooldisco_cost_usd_total", kind="actual")
    assert actual > 0
    assert actual == pytest.approx(sum(r["cost_usd"] or 0 for r in traffic.records), rel=0.01)
    mine = sum(priced(api_of(r), u) for r in traffic.fake if (u := reported(r)) is not None)
    assert actual == pytest.approx(mine, rel=0.01)
    for api in APIS:
        want = sum(priced(api, u) for r in traffic.fake if api_of(r) == api and (u := reported(r)) is not None)
        assert m.total("tooldisco_cost_usd_total", api=api, kind="actual") == pytest.approx(want, rel=0.01), api
    for t in traffic.turns:
        usage = t.record["usage"]
        if usage is None:
            assert t.record["cost_usd"] is None and t.record["cost_usd_without"] is None
        else:
            assert t.record["cost_usd"] == pytest.approx(priced(t.api, usage), rel=0.01, abs=1e-8), t.record


def test_without_exceeds_actual_where_tools_were_cut(traffic: Traffic) -> None:
    """A turn whose many tools were deferred and that needed no search costs less than the
    client's own request would have; one that went as sent costs the same."""
    m = traffic.metrics
    cut = [t for t in traffic.turns if t.kind == "plain" and t.usage_asked]
    assert len(cut) == 2 * 2 * len(APIS)
    for t in cut:
        r = t.record
        assert r["deferred_tools"] > 0 and r["tool_tokens_before"] > r["tool_tokens_after"], r
        assert r["cost_usd_without"] > r["cost_usd"] > 0, (t.api, t.stream, r)
    for t in traffic.turns:
        if t.kind == "passed" and t.record["usage"] is not None:
            assert t.record["deferred_tools"] == 0
            assert t.record["cost_usd_without"] == pytest.approx(t.record["cost_usd"]), t.record
    without = m.total("tooldisco_cost_usd_total", kind="without")
    assert without > m.total("tooldisco_cost_usd_total", kind="actual")
    for api in APIS:
        assert m.total("tooldisco_cost_usd_total", api=api, kind="without") > \
            m.total("tooldisco_cost_usd_total", api=api, kind="actual"), api


def test_chat_stream_without_usage_is_unreported_and_untouched(traffic: Traffic) -> None:
    """A Chat stream whose client did not ask for usage: nothing is added to the request to get
    it (no ``stream_options``, hidden rounds included), the client's bytes are the upstream's,
    and every answer counts as unreported."""
    m = traffic.metrics
    turns = [t for t in traffic.turns if not t.usage_asked]
    assert [t.kind for t in turns] == ["plain", "passed", "search"]
    for t in turns:
        assert all("stream_options" not in r.json for r in t.fake), [r.json.get("stream_options") for r in t.fake]
        assert t.record["usage"] is None and t.record["usage_unreported"] == len(t.fake), t.record
        assert t.record["cost_usd"] is None and t.record["cost_usd_without"] is None
        assert t.raw is not None and b'"usage"' not in t.raw
        if t.kind != "search":  # one round that hides nothing: byte for byte what the fake sent
            assert t.raw == bytes(t.fake[0].sent)
        else:
            assert SEARCH_TOOL.encode() not in t.raw and TARGET.encode() in t.raw
    unreported = sum(len(t.fake) for t in turns)
    assert m.total("tooldisco_usage_unreported_total", api="openai_chat") == unreported == 4
    assert m.total("tooldisco_usage_unreported_total") == unreported
    # With usage asked for, the same stream reports it and the client gets it.
    asked = [t for t in traffic.turns if t.api == "openai_chat" and t.stream and t.usage_asked]
    assert asked and all(t.raw is not None and b'"usage":{' in t.raw for t in asked)
