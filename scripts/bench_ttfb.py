#!/usr/bin/env python3
"""Time to first event and to last byte of a streamed answer, direct vs through the proxy.

    .venv/bin/python scripts/bench_ttfb.py [--runs 20] [--delay 0.1] [--tools 500] [--concurrency 4]

A fake provider (``tests/fakeprovider``, in its own process) streams every answer with
``--delay`` seconds between events. For each streaming API the project speaks, the same
request goes (a) straight to the fake, (b) through a plain mitmdump that streams responses,
(c) through mitmdump + the addon on the shipped ``configs/tool_discovery.yaml`` (only
``sessions.dir`` and ``telemetry.path`` moved into a temp dir); raw httpx streaming
clients, kept-alive connections, the proxies' CA.

Why (b) streams with a two-line script rather than ``--set stream_large_bodies=1``: that
option streams request bodies too, and a streamed request goes out before the ``request``
hook where ``--map-remote`` applies, so it would reach the real host (502); a threshold above
the request size never streams a chunked answer this small. The script does to every
response what ``stream_large_bodies=1`` does, and nothing to requests.

Two turns. Without a search the model answers text. With a search, round 1 calls
``gateway_search_tools`` and round 2 answers text: the addon hides round 1 and answers with
one stream; for direct and plain mitmdump the two rounds the addon really sent upstream
(captured once) are replayed one after the other and their times summed. The addon's search
time comes from its telemetry (``searches[].latency_ms``).

Runs come in waves, so the whole bench stays within minutes: each wave runs every
(turn, API, path) once, in shuffled order, at most ``--concurrency`` at a time and starts at
least ``--stagger`` seconds apart (a fraction of the delay, so two requests are rarely
processed at once); a paced stream is idle between events, and the three paths share the
same background load. ``--concurrency 1`` times each run alone (about a quarter of an hour
at the defaults). Prints markdown tables and PASS/FAIL per acceptance check; exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from _bench import p50_p95, percentile  # noqa: E402
from tests.e2e.harness import ADDON_PATH, MitmDump, scrubbed_env  # noqa: E402
from tests.fakeprovider import SEARCH_TOOL, reply, search  # noqa: E402
from tests.fakeprovider.providers.bedrock import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY  # noqa: E402
from tests.support.catalog import anthropic_tools  # noqa: E402

SHIPPED_CONFIG = ROOT / "configs" / "tool_discovery.yaml"
PATHS = ("direct", "mitmdump", "addon")
TURNS = ("plain", "search")
DONE = "bench-done"  # the answer's last word: the client saw the whole answer
ANSWER = f"Sunny in Paris today with a light breeze and a high of twenty one degrees, {DONE}"
QUESTION = "What's the weather forecast for Paris?"
BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1%3A0"
BEDROCK = f"https://bedrock-runtime.us-east-1.amazonaws.com/model/{BEDROCK_MODEL}"
GEMINI = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent"
SLACK_MS = 20.0  # the acceptance checks' allowance for the proxy's own time
FIRST_P50_MS, FIRST_P95_MS = 3.0, 6.0  # first event: the addon's allowance over plain mitmdump's, p50 and p95
RUN_ID = re.compile(r"plain-turn ([0-9a-f]{12})")
STREAM_RESPONSES = "def responseheaders(flow):\n    flow.response.stream = True\n"


# --- the APIs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Api:
    """One streaming API: its real endpoint (the proxies map it to the fake) and its request."""

    tag: str  # also the last word of the scripted search query, so telemetry names the API
    provider: str  # the addon's adapter (telemetry's ``provider``)
    label: str
    url: str
    body: Callable[[str, int], dict[str, Any]]  # (user text, tool count) -> request body
    headers: dict[str, str]
    sigv4: bool = False

    def direct_url(self, fake_url: str) -> str:
        parts = urlsplit(self.url)
        return fake_url + parts.path + (f"?{parts.query}" if parts.query else "")


@functools.cache
def catalog(n: int) -> list[dict[str, Any]]:
    """The first ``n`` catalog tools (Anthropic shape), built once: bodies are made while other runs stream."""
    return anthropic_tools(n)


def functions(n: int) -> list[dict[str, Any]]:
    return [{"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
            for t in catalog(n)]


def anthropic_body(text: str, n: int) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": True, "tools": catalog(n),
            "messages": [{"role": "user", "content": text}]}


def chat_body(text: str, n: int) -> dict[str, Any]:
    tools = [{"type": "function", "function": {k: v for k, v in f.items() if k != "type"}} for f in functions(n)]
    return {"model": "gpt-5", "stream": True, "stream_options": {"include_usage": True}, "tools": tools,
            "messages": [{"role": "user", "content": text}]}


def responses_body(text: str, n: int) -> dict[str, Any]:
    return {"model": "gpt-5", "stream": True, "store": False, "tools": functions(n), "input": text}


def gemini_body(text: str, n: int) -> dict[str, Any]:
    decls = [{"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
             for t in catalog(n)]
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], "tools": [{"functionDeclarations": decls}]}


def converse_body(text: str, n: int) -> dict[str, Any]:
    specs = [{"toolSpec": {"name": t["name"], "description": t["description"],
                           "inputSchema": {"json": t["input_schema"]}}} for t in catalog(n)]
    return {"messages": [{"role": "user", "content": [{"text": text}]}], "toolConfig": {"tools": specs}}


def invoke_body(text: str, n: int) -> dict[str, Any]:
    return {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1024, "tools": catalog(n),
            "messages": [{"role": "user", "content": text}]}


JSON = {"content-type": "application/json"}
OPENAI = {**JSON, "authorization": "Bearer sk-bench"}
GOOGLE = {**JSON, "x-goog-api-key": "bench-key"}
APIS = [
    Api("anthropic", "anthropic", "Anthropic SSE", "https://api.anthropic.com/v1/messages", anthropic_body,
        {**JSON, "x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01"}),
    Api("chat", "openai_chat", "OpenAI Chat SSE", "https://api.openai.com/v1/chat/completions", chat_body, OPENAI),
    Api("responses", "openai_responses", "OpenAI Responses SSE", "https://api.openai.com/v1/responses",
        responses_body, OPENAI),
    Api("gemini_sse", "gemini", "Gemini alt=sse", GEMINI + "?alt=sse", gemini_body, GOOGLE),
    Api("gemini_json", "gemini", "Gemini JSON array", GEMINI, gemini_body, GOOGLE),
    Api("converse", "bedrock_converse", "Bedrock ConverseStream", f"{BEDROCK}/converse-stream", converse_body,
        JSON, sigv4=True),
    Api("invoke", "bedrock_invoke", "Bedrock InvokeModel stream", f"{BEDROCK}/invoke-with-response-stream",
        invoke_body, JSON, sigv4=True),
]


def search_marker(api: Api) -> str:
    return f"search-turn-{api.tag}"


def script() -> dict[str, Any]:
    """The model: search once on a search turn (its query ends with the API's tag), else answer."""
    rules = [search(f"weather forecast {api.tag}", contains=search_marker(api)) for api in APIS]
    return {"rules": [r.to_dict() for r in rules], "default": reply(ANSWER).to_dict()}


def headers_for(api: Api, body: bytes) -> dict[str, str]:
    """The request headers; Bedrock's signed with SigV4 over this body, as boto3 signs them (the
    fake verifies against the real endpoint's host, the proxy re-signs with the same key)."""
    if not api.sigv4:
        return api.headers
    req = AWSRequest("POST", api.url, data=body, headers=dict(api.headers))
    SigV4Auth(Credentials(TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY), "bedrock", "us-east-1").add_auth(req)
    return dict(req.headers.items())


def visible(api: Api, raw: bytes) -> str:
    """What a client can read in the answer (event-stream payloads decoded, InvokeModel's base64 too)."""
    if not api.sigv4:
        return raw.decode("utf-8", "replace")
    buf = EventStreamBuffer()
    buf.add_data(raw)
    payloads = [m.payload.decode("utf-8", "replace") for m in buf]
    if api.tag == "invoke":
        payloads = [base64.b64decode(json.loads(p)["bytes"]).decode() if '"bytes"' in p else p for p in payloads]
    return "\n".join(payloads)


# --- the fake provider, in its own process (its threads never share a GIL with the clients) ----


class Fake:
    def __init__(self, delay: float, log: Path) -> None:
        env = scrubbed_env()
        env["PYTHONUNBUFFERED"] = "1"
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakeprovider", "--port", "0", "--stream-delay", str(delay)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self._log,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "listening at" not in line:
            raise RuntimeError(f"fake provider did not start: {line!r} (log: {log})")
        self.url = line.rsplit(" ", 1)[1].strip()
        self.control = httpx.Client(base_url=self.url, trust_env=False, timeout=30)

    def post(self, path: str, data: Any = None) -> Any:
        r = self.control.post(path, json=data or {})
        r.raise_for_status()
        return r.json()

    def requests(self) -> list[dict[str, Any]]:
        return [r for r in self.control.get("/_requests").json()["requests"] if r["api"]]

    def reset(self, delay: float) -> None:
        """Forget recorded requests (they hold every body), then restore the script and pacing."""
        self.post("/_reset")
        self.post("/_script", script())
        self.post("/_settings", {"stream_delay": delay})

    def stop(self) -> None:
        self.control.close()
        self.proc.terminate()
        self.proc.wait(10)
        self._log.close()


# --- timing -------------------------------------------------------------------------------------


class BenchError(Exception):
    """A run that did not go as scripted: it is reported, and left out of the tables."""


@dataclass
class Timing:
    """One run, in ms from the moment the client sent the request."""

    first: float  # to the first body byte
    last: float  # to the last body byte (a replayed search turn: both rounds summed)
    round1: float | None = None  # a replayed search turn: to round 1's last byte
    sent_at: float = 0.0  # time.monotonic() when the request went out
    run_id: str = ""  # in the user message: finds the request in the fake's record
    arrived: float | None = None  # the fake had read the request
    produced: float | None = None  # the fake wrote its first event

    def locate(self, rec: dict[str, Any]) -> None:
        """Place the fake's own times (the same monotonic clock, another process) on this run."""
        self.arrived = (rec["started_at"] - self.sent_at) * 1000
        self.produced = (rec["event_times"][0] - self.sent_at) * 1000 if rec["event_times"] else None


async def stream_once(client: httpx.AsyncClient, url: str, api: Api, body: bytes) -> tuple[Timing, str]:
    """One streamed request: when its first and last body bytes came, and what it said.
    ``time.monotonic`` is CLOCK_MONOTONIC, the clock the fake stamps its events with."""
    headers = headers_for(api, body)  # signing is the client's business, not the path's: outside the clock
    chunks: list[bytes] = []
    first = None
    t0 = time.monotonic()
    async with client.stream("POST", url, content=body, headers=headers) as r:
        async for chunk in r.aiter_raw():
            if chunk and first is None:
                first = time.monotonic()
            chunks.append(chunk)
        end = time.monotonic()
    raw = b"".join(chunks)
    if r.status_code != 200 or first is None:
        raise BenchError(f"{api.label} {url}: HTTP {r.status_code} {raw[:300]!r}")
    return Timing((first - t0) * 1000, (end - t0) * 1000, sent_at=t0), visible(api, raw)


def check_answer(api: Api, text: str, *, hidden: bool = True) -> None:
    """The whole answer arrived and, where the addon answered, nothing of the search shows.
    (A replayed round may mention the search tool: Responses echoes the request's tools.)"""
    if DONE not in text or hidden and SEARCH_TOOL in text:
        raise BenchError(f"{api.label}: the client did not get the plain answer: {text[:300]}")


@dataclass
class Route:
    """One way to the fake: its URL for an API, and how to make a client that goes that way."""

    url: Callable[[Api], str]
    client: Callable[[], httpx.AsyncClient]


@dataclass
class Rounds:
    """The two bodies the addon sent upstream for one search turn, replayed by direct and mitmdump."""

    first: bytes
    second: bytes


class Bench:
    """The runs: one (turn, API, path) at a time, or a wave of all of them."""

    def __init__(self, routes: dict[str, Route], tools: int, concurrency: int, stagger: float) -> None:
        self.routes = routes
        self.tools = tools
        self.concurrency = concurrency
        self.stagger = stagger
        self.rounds: dict[str, Rounds] = {}
        self.clients: dict[tuple[str, str, str], httpx.AsyncClient] = {}

    def client(self, turn: str, api: Api, path: str) -> httpx.AsyncClient:
        """One connection per (turn, API, path), opened in the warm-up wave and reused after."""
        key = (turn, api.tag, path)
        if key not in self.clients:
            self.clients[key] = self.routes[path].client()
        return self.clients[key]

    def body(self, turn: str, api: Api, run_id: str) -> bytes:
        """A first user message never sent before: each run is its own session for the addon."""
        marker = search_marker(api) if turn == "search" else "plain-turn"
        return json.dumps(api.body(f"{QUESTION} [{marker} {run_id}]", self.tools)).encode()

    async def run(self, turn: str, api: Api, path: str) -> Timing:
        client, url = self.client(turn, api, path), self.routes[path].url(api)
        if turn == "plain" or path == "addon":
            run_id = uuid.uuid4().hex[:12]
            timing, text = await stream_once(client, url, api, self.body(turn, api, run_id))
            check_answer(api, text)
            timing.run_id = run_id
            return timing
        rounds = self.rounds[api.tag]
        timing, text1 = await stream_once(client, url, api, rounds.first)
        second, text2 = await stream_once(client, url, api, rounds.second)
        if SEARCH_TOOL not in text1:
            raise BenchError(f"{api.label}: replayed round 1 did not search: {text1[:300]}")
        check_answer(api, text2, hidden=False)
        timing.round1, timing.last = timing.last, timing.last + second.last
        return timing

    async def wave(self, seed: int) -> list[tuple[tuple[str, str, str], Timing | BaseException]]:
        """Every (turn, API, path) once, shuffled; ``concurrency`` at a time, ``stagger`` apart."""
        jobs = [(turn, api, path) for turn in TURNS for api in APIS for path in PATHS]
        random.Random(seed).shuffle(jobs)
        slots = asyncio.Semaphore(self.concurrency)
        loop = asyncio.get_running_loop()
        next_start = loop.time()

        async def one(turn: str, api: Api, path: str) -> Timing:
            nonlocal next_start
            async with slots:
                now = loop.time()
                start = max(now, next_start)
                next_start = start + self.stagger
                await asyncio.sleep(start - now)
                return await self.run(turn, api, path)

        results = await asyncio.gather(*(one(*job) for job in jobs), return_exceptions=True)
        return [((turn, api.tag, path), res) for (turn, api, path), res in zip(jobs, results)]

    async def close(self) -> None:
        for client in self.clients.values():
            await client.aclose()


# --- set-up -------------------------------------------------------------------------------------


def addon_config(workdir: Path) -> str:
    """The shipped config with only the session store and the telemetry file moved into ``workdir``."""
    cfg = yaml.safe_load(SHIPPED_CONFIG.read_text())
    cfg.setdefault("sessions", {})["dir"] = str(workdir / "sessions")
    cfg.setdefault("telemetry", {})["path"] = str(workdir / "telemetry.jsonl")
    return yaml.safe_dump(cfg, sort_keys=False)


def aws_chain(tmp: Path) -> None:
    """Give mitmdump (started after this) the fake's test credentials through the standard AWS
    chain, as a user's proxy gets its own: it re-signs the Bedrock bodies it changes."""
    (tmp / "aws-credentials").write_text(
        f"[bench]\naws_access_key_id = {TEST_ACCESS_KEY_ID}\naws_secret_access_key = {TEST_SECRET_ACCESS_KEY}\n")
    (tmp / "aws-config").write_text("[profile bench]\nregion = us-east-1\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_BEARER_TOKEN_BEDROCK"):
        os.environ.pop(name, None)
    os.environ.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp / "aws-credentials"), AWS_CONFIG_FILE=str(tmp / "aws-config"),
                      AWS_PROFILE="bench", AWS_EC2_METADATA_DISABLED="true")


def routes(fake: Fake, plain: MitmDump, addon: MitmDump) -> dict[str, Route]:
    timeout = httpx.Timeout(60.0, connect=30.0)
    one = httpx.Limits(max_connections=1)

    def via(proxy: MitmDump) -> Callable[[], httpx.AsyncClient]:
        ctx = proxy.ssl_context()
        return lambda: httpx.AsyncClient(proxy=proxy.url, verify=ctx, trust_env=False, timeout=timeout, limits=one)

    return {
        "direct": Route(lambda api: api.direct_url(fake.url),
                        lambda: httpx.AsyncClient(trust_env=False, timeout=timeout, limits=one)),
        "mitmdump": Route(lambda api: api.url, via(plain)),
        "addon": Route(lambda api: api.url, via(addon)),
    }


async def capture(bench: Bench, fake: Fake) -> dict[str, dict[str, int]]:
    """Per API, one unpaced answer of each kind: what the addon sent upstream on a search turn
    (replayed later by the other paths), and how many events each answer has."""
    events: dict[str, dict[str, int]] = {}
    client = bench.routes["addon"].client()
    try:
        for api in APIS:
            fake.reset(0)
            await stream_once(client, api.url, api, bench.body("plain", api, "capture"))
            _, text = await stream_once(client, api.url, api, bench.body("search", api, "capture"))
            check_answer(api, text)
            recs = fake.requests()
            if [r["status"] for r in recs] != [200] * 3 or SEARCH_TOOL not in json.dumps(recs[1]["reply"]):
                raise BenchError(f"{api.label}: expected a plain answer and a search turn of two rounds upstream, "
                                 f"got {[(r['status'], r['error'], r['reply']) for r in recs]}")
            plain, first, second = recs
            bench.rounds[api.tag] = Rounds(base64.b64decode(first["body_b64"]), base64.b64decode(second["body_b64"]))
            events[api.tag] = {"plain": len(plain["event_times"]), "round1": len(first["event_times"]),
                               "round2": len(second["event_times"])}
    finally:
        await client.aclose()
    return events


# --- statistics and report ----------------------------------------------------------------------


@dataclass
class Telemetry:
    """What the addon's own records say about the timed runs."""

    search_ms: dict[str, list[float]]  # per API tag: searches[].latency_ms
    deferred: dict[str, int]  # per API tag: tools deferred (the shipped config did defer)
    planner_ms: dict[str, list[float]]  # per adapter (``provider``), turns without a search: processing_ms
    unusual: Counter[tuple[str, str]]  # (provider, outcome) of records that did not end as planned

    @classmethod
    def read(cls, path: Path, since: float) -> Telemetry:
        out = cls(defaultdict(list), defaultdict(int), defaultdict(list), Counter())
        for line in path.read_text().splitlines() if path.exists() else []:
            rec = json.loads(line)
            if rec["time"] < since:
                continue
            if rec["outcome"] not in ("no_phantom", "done"):
                out.unusual[rec["provider"], str(rec["outcome"])] += 1
            if not rec["searches"]:
                out.planner_ms[rec["provider"]].append(rec["processing_ms"])
            for s in rec["searches"]:
                tag = (s["query"] or "").rsplit(" ", 1)[-1]
                out.search_ms[tag].append(s["latency_ms"])
                out.deferred[tag] = max(out.deferred[tag], rec["deferred_tools"])
        return out


def cell(values: list[float]) -> str:
    return p50_p95(values)


def delta(values: list[float], baseline: list[float]) -> str:
    """``values`` minus ``baseline``, p50 / p95 (ms)."""
    if not values or not baseline:
        return "n/a"
    return (f"{percentile(values, 50) - percentile(baseline, 50):+.1f} / "
            f"{percentile(values, 95) - percentile(baseline, 95):+.1f}")


def report(results: dict[tuple[str, str, str], list[Timing]], events: dict[str, dict[str, int]],
           seen: Telemetry) -> None:
    def col(turn: str, tag: str, path: str, field: str) -> list[float]:
        return [getattr(t, field) for t in results.get((turn, tag, path), []) if getattr(t, field) is not None]

    print("## No search: the model answers text (ms, p50 / p95)\n")
    print("| API | events | first: direct | mitmdump | addon | addon − mitmdump p50 / p95 | addon − direct p95 "
          "| last: direct | mitmdump | addon | addon / direct p50 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for api in APIS:
        f = {p: col("plain", api.tag, p, "first") for p in PATHS}
        last = {p: col("plain", api.tag, p, "last") for p in PATHS}
        print(f"| {api.label} | {events[api.tag]['plain']} | {cell(f['direct'])} | {cell(f['mitmdump'])} "
              f"| {cell(f['addon'])} | {delta(f['addon'], f['mitmdump'])} "
              f"| {percentile(f['addon'], 95) - percentile(f['direct'], 95):+.1f} | {cell(last['direct'])} "
              f"| {cell(last['mitmdump'])} | {cell(last['addon'])} "
              f"| {percentile(last['addon'], 50) / percentile(last['direct'], 50):.3f} |")

    print("\n### Where the first event's time goes, no search (ms, p50 / p95)\n")
    print("*there*: from the client's send until the fake had read the request; *back*: from the fake "
          "writing its first event until the client had it (one monotonic clock across the processes); "
          "*planner*: the addon's `processing_ms` (telemetry, per adapter: both Gemini forms together).\n")
    print("| API | there: direct | mitmdump | addon | addon's planner | back: direct | mitmdump | addon |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for api in APIS:
        runs = {p: results.get(("plain", api.tag, p), []) for p in PATHS}
        there = [cell([t.arrived for t in runs[p] if t.arrived is not None]) for p in PATHS]
        back = [cell([t.first - t.produced for t in runs[p] if t.produced is not None]) for p in PATHS]
        print(f"| {api.label} | {' | '.join(there)} | {cell(seen.planner_ms.get(api.provider, []))} "
              f"| {' | '.join(back)} |")

    print("\n## Search: round 1 calls the search tool, round 2 answers (ms, p50 / p95)\n")
    print("direct and mitmdump replay the addon's two upstream rounds one after the other: *last* is "
          "their sum, *round 1 end* the first round's last byte. search = the addon's telemetry. "
          "*addon − mitmdump*: against the client's own request through mitmdump (the no-search turn's "
          "first event: the replayed round 1 carries the addon's reduced body).\n")
    print("| API | events r1 + r2 | deferred | first: direct | mitmdump | addon | addon − mitmdump p50 / p95 "
          "| round 1 end: direct | last: direct | mitmdump | addon | search | addon − direct p95 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for api in APIS:
        f = {p: col("search", api.tag, p, "first") for p in PATHS}
        last = {p: col("search", api.tag, p, "last") for p in PATHS}
        ev, round1 = events[api.tag], col("search", api.tag, "direct", "round1")
        print(f"| {api.label} | {ev['round1']} + {ev['round2']} | {seen.deferred.get(api.tag, 0)} "
              f"| {cell(f['direct'])} | {cell(f['mitmdump'])} | {cell(f['addon'])} "
              f"| {delta(f['addon'], col('plain', api.tag, 'mitmdump', 'first'))} | {cell(round1)} "
              f"| {cell(last['direct'])} | {cell(last['mitmdump'])} | {cell(last['addon'])} "
              f"| {cell(seen.search_ms.get(api.tag, []))} "
              f"| {percentile(last['addon'], 95) - percentile(last['direct'], 95):+.1f} |")

    print("\n## Acceptance checks (p95 unless said)\n")
    print("| API | check | measured ms | limit ms | result |\n|---|---|---:|---:|---|")
    for api in APIS:
        first = col("plain", api.tag, "addon", "first")
        direct_first = col("plain", api.tag, "direct", "first")
        s_first = col("search", api.tag, "addon", "first")
        round1 = col("search", api.tag, "direct", "round1")
        s_last = col("search", api.tag, "addon", "last")
        d_total = col("search", api.tag, "direct", "last")
        searched = seen.search_ms.get(api.tag, [])
        plain_first = col("plain", api.tag, "mitmdump", "first")
        plain_s_first = plain_first  # the client's own request through mitmdump (its replay sends round 1's body)
        checks = [
            (f"no search: first event ≤ mitmdump + {FIRST_P50_MS:g} ms (p50)", percentile(first, 50),
             percentile(plain_first, 50) + FIRST_P50_MS),
            (f"no search: first event ≤ mitmdump + {FIRST_P95_MS:g} ms", percentile(first, 95),
             percentile(plain_first, 95) + FIRST_P95_MS),
            (f"search: first event ≤ mitmdump + {FIRST_P50_MS:g} ms (p50)", percentile(s_first, 50),
             percentile(plain_s_first, 50) + FIRST_P50_MS),
            (f"search: first event ≤ mitmdump + {FIRST_P95_MS:g} ms", percentile(s_first, 95),
             percentile(plain_s_first, 95) + FIRST_P95_MS),
            ("no search: first event ≤ direct + 20 ms", percentile(first, 95), percentile(direct_first, 95) + SLACK_MS),
            ("search: first event before round 1 ends (direct p50)", percentile(s_first, 95), percentile(round1, 50)),
            ("search: last ≤ direct both rounds + 20 ms + search", percentile(s_last, 95),
             percentile(d_total, 95) + SLACK_MS + percentile(searched, 95)),
        ]
        for name, value, limit in checks:
            print(f"| {api.label} | {name} | {value:.1f} | {limit:.1f} | {'PASS' if value <= limit else 'FAIL'} |")


# --- main -----------------------------------------------------------------------------------------


async def measure(bench: Bench, fake: Fake, args: argparse.Namespace) -> tuple[dict, dict, float, list[str]]:
    events = await capture(bench, fake)
    fake.reset(args.delay)
    await bench.wave(seed=-1)  # warm-up: opens every connection the timed waves reuse
    since = time.time()
    results: dict[tuple[str, str, str], list[Timing]] = defaultdict(list)
    errors: list[str] = []
    for run in range(args.runs):
        fake.reset(args.delay)
        wave = await bench.wave(seed=run)
        recs = {m.group(1): r for r in fake.requests() if (m := RUN_ID.search(r["text"]))}
        for key, res in wave:
            if isinstance(res, Timing):
                if key[0] == "plain":
                    res.locate(recs[res.run_id])
                results[key].append(res)
            else:
                errors.append(f"{'/'.join(key)}: {res!r}"[:400])
        print(f"wave {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
    await bench.close()
    return results, events, since, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="timed runs of every (turn, API, path)")
    ap.add_argument("--delay", type=float, default=0.1, help="seconds the fake waits between streamed events")
    ap.add_argument("--tools", type=int, default=500, help="tools in every request (the shipped config defers them)")
    ap.add_argument("--concurrency", type=int, default=4, help="runs in flight at once")
    ap.add_argument("--stagger", type=float, default=None,
                    help="least seconds between two starts (default 0.37 × delay)")
    args = ap.parse_args()
    args.stagger = 0.37 * args.delay if args.stagger is None else args.stagger

    with tempfile.TemporaryDirectory(prefix="bench_ttfb_") as tmp_name:
        tmp = Path(tmp_name)
        aws_chain(tmp)
        fake = Fake(args.delay, tmp / "fake.log")
        (tmp / "stream_responses.py").write_text(STREAM_RESPONSES)
        plain = MitmDump(tmp / "plain", fake.url, script=tmp / "stream_responses.py", name="plain")
        addon = MitmDump(tmp / "addon", fake.url, script=ADDON_PATH, config=addon_config, name="addon")
        try:
            plain.start()
            addon.start()
            bench = Bench(routes(fake, plain, addon), args.tools, args.concurrency, args.stagger)
            t0 = time.monotonic()
            results, events, since, errors = asyncio.run(measure(bench, fake, args))
            elapsed = time.monotonic() - t0
        finally:
            plain.stop()
            addon.stop()  # graceful: the telemetry writer drains
            fake.stop()
        seen = Telemetry.read(addon.workdir / "telemetry.jsonl", since)

    print(f"# Time to first event, {args.runs} runs, {args.tools} tools, {args.delay * 1000:.0f} ms between events, "
          f"{args.concurrency} runs in flight, starts ≥ {args.stagger * 1000:.0f} ms apart ({elapsed:.0f} s, "
          f"load average {os.getloadavg()[1]:.2f} over the last 5 min on {os.cpu_count()} CPUs)\n")
    report(results, events, seen)
    if errors:
        print(f"\n{len(errors)} failed runs (left out of the tables):")
        for e in errors[:20]:
            print(f"- {e}")
    if seen.unusual:
        print("\nAddon telemetry outcomes other than `no_phantom` / `done`: "
              + ", ".join(f"{provider} {outcome} ×{n}" for (provider, outcome), n in seen.unusual.items()))


if __name__ == "__main__":
    main()
