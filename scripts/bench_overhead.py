#!/usr/bin/env python3
"""The addon's own cost: engine time per request, and the mitmdump process's CPU and latency per
turn with vs without it.

    .venv/bin/python scripts/bench_overhead.py [--requests 200] [--proxy-requests 300] [--sizes 500,5000,20000]
        [--cpu-tools 500] [--cpu-turns 20] [--cpu-rounds 6] [--cpu-apis anthropic,chat,responses,gemini,converse]
        [--cpu-metrics]

Part 1 times ``Engine.prepare`` (parse, score, session read/write, rewrite) on Anthropic
bodies with 500, 5,000 and 20,000 tools, per strategy, against the stdlib json floor measured
in the same run (``json.loads`` and ``json.dumps`` of the same body: the least any proxy that
rewrites a body pays), each request right after its floor, so both see the same load: p50 and
p95 of each, and their ratios. Requests come from 20 sessions in turn, so the first turn of
each (which chooses the session's loaded tools) is among them; the process's first request
with a catalog works out what later ones reuse. Part 2 starts the fake provider and two real mitmdump processes, one
plain and one with the addon (the shipped config on relevance, 60 tools), and sends the same
requests through each in the same run: req/s and latency p50/p95, and the ratios.

Part 3, CPU per turn: the fake provider (its own process, unpaced) behind a plain mitmdump and
a mitmdump + the addon on the shipped config, both up at once; per API and per answer kind
(JSON, streamed), ``--cpu-rounds`` rounds of ``--cpu-turns`` sequential turns on one kept-alive
client per proxy, the two proxies alternating block by block (the order swapped every round),
each turn with ``--cpu-tools`` tools and no search, in sessions of ``--cpu-session-turns`` turns
(``x-session-id``; 1 makes every turn a new session's first). Per turn: the
mitmdump process's CPU time (user + system, every thread: ``psutil``), the client's latency
and the sequential throughput; every figure against plain mitmdump's in the same run. The
plain mitmdump streams an event stream as it comes, as the addon does (a two-line script),
and buffers JSON, as both do. ``--cpu-metrics`` runs a third mitmdump beside them, the addon on
the same config plus ``metrics: {listen: 127.0.0.1:0}`` (Prometheus metrics, ``engine.metrics``),
in the same alternation, and reports its CPU per turn beside the addon's without metrics; its
metrics are scraped once at the end, and their request count checked against the turns sent.
``--cpu-policy`` runs two more beside them: the addon with a ``policy:`` of 50 globs (deny and
always_load globs and client entries; ``policy_config``) and the addon without pins and screening
(``policy: {pin: off, screen: false}``), to show what the policy and the default pinning and
screening add per turn.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "addon"), str(ROOT), str(ROOT / "scripts")]

from _bench import p50_p95, percentile, plain_and_addon, ratio, section  # noqa: E402
from tests.support.catalog import anthropic_tools  # noqa: E402

# addon modules (kept together: their paths move with the addon's layout)
from tooldisco.config import parse  # noqa: E402
from tooldisco.engine.engine import Engine  # noqa: E402
from tooldisco.apis.anthropic.adapter import AnthropicAdapter  # noqa: E402

QUERIES = ["create a github issue for the bug", "post the summary to slack", "what is the weather in Paris",
           "list the tables in the database", "schedule a meeting tomorrow", "export the invoice records"]


def engine_bench(requests: int, sizes: list[int]) -> list[tuple[str, int, list[float], list[float]]]:
    """(strategy, tools, prepare times, json floor times), times in s."""
    rows = []
    adapter = AnthropicAdapter()
    for strategy, extra in [("relevance", {}), ("tool-search", {"defer": {"upfront": 8}, "search": {"backend": "bm25"}})]:
        for n in sizes:
            tools = anthropic_tools(n)
            with tempfile.TemporaryDirectory() as tmp:
                cfg = parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": strategy, **extra}},
                             "sessions": {"dir": tmp}, "telemetry": {"enabled": False}})
                engine = Engine(cfg)
                times, floor = [], []
                for i in range(requests):
                    body = json.dumps({"model": "m", "max_tokens": 100, "tools": tools, "messages": [
                        {"role": "user", "content": f"conversation {i % 20}"},
                        {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": QUERIES[i % len(QUERIES)]}]}).encode()
                    t0 = time.perf_counter()
                    engine.prepare(adapter, {"x-api-key": "bench"}, body)
                    times.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    json.dumps(json.loads(body)).encode()
                    floor.append(time.perf_counter() - t0)
                engine.close()
            rows.append((strategy, n, times, floor))
    return rows


def proxy_bench(requests: int) -> list[tuple[str, float, list[float]]]:
    """(proxy, req/s, latencies in s) for plain mitmdump, then the addon."""
    import httpx

    from tests.fakeprovider import FakeProvider

    body = {"model": "claude", "max_tokens": 64, "tools": anthropic_tools(60),
            "messages": [{"role": "user", "content": "post the summary to slack"}]}
    rows = []
    with FakeProvider(stream_delay=0) as fake, tempfile.TemporaryDirectory() as tmp:
        relevance = {"pipes": {"tool_discovery": {"strategy": "relevance"}}, "telemetry": {"enabled": False}}
        for label, proxy in plain_and_addon(fake.url, Path(tmp), relevance):
            proxy.start()
            try:
                with httpx.Client(proxy=proxy.url, verify=proxy.ssl_context(), timeout=60) as client:
                    send = lambda: client.post("https://api.anthropic.com/v1/messages", json=body,  # noqa: E731
                                               headers={"x-api-key": "bench"})
                    for _ in range(10):  # warm-up: TLS, connections
                        send()
                    lat = []
                    t0 = time.perf_counter()
                    for _ in range(requests):
                        t = time.perf_counter()
                        send().raise_for_status()
                        lat.append(time.perf_counter() - t)
                    elapsed = time.perf_counter() - t0
            finally:
                proxy.stop()
            rows.append((label, requests / elapsed, lat))
    return rows


# --- part 3: CPU per turn -----------------------------------------------------------------------

# Plain mitmdump streaming an event stream as it comes (``stream_large_bodies`` would stream the
# request too, before map_remote routes it), buffering everything else: what the addon does with
# an answer it does not process.
STREAM_EVENTS = ("def responseheaders(flow):\n"
                 "    ctype = flow.response.headers.get('content-type', '').split(';')[0].strip().lower()\n"
                 "    if ctype in ('text/event-stream', 'application/vnd.amazon.eventstream'):\n"
                 "        flow.response.stream = True\n")
CPU_APIS = ("anthropic", "chat", "responses", "gemini", "converse", "invoke")
KINDS = ("json", "stream")


@dataclass(frozen=True)
class TurnRequest:
    url: str
    headers: dict[str, str]
    body: bytes


def api_of(tag: str):
    import bench_ttfb

    return next(a for a in bench_ttfb.APIS if a.tag == ("gemini_sse" if tag == "gemini" else tag))


def turn_request(tag: str, stream: bool, text: str, tools: int) -> TurnRequest:
    """One turn of API ``tag`` (``bench_ttfb``'s APIs), as a JSON or a streamed request."""
    import bench_ttfb

    api = api_of(tag)
    body = api.body(text, tools)
    url = api.url
    if tag in ("anthropic", "chat", "responses"):
        body["stream"] = stream
        if not stream:
            body.pop("stream_options", None)
    elif tag == "gemini":
        url = url if stream else bench_ttfb.GEMINI.replace(":streamGenerateContent", ":generateContent")
    elif tag == "converse":
        url = url if stream else url.removesuffix("-stream")
    elif tag == "invoke":
        url = url if stream else url.removesuffix("-with-response-stream")
    raw = json.dumps(body).encode()
    return TurnRequest(url, bench_ttfb.headers_for(dataclasses.replace(api, url=url), raw), raw)


@dataclass
class Cell:
    """One (API, kind) through one proxy: CPU seconds and wall seconds per block, latencies per turn."""

    cpu: list[float] = field(default_factory=list)  # per block: CPU s per turn
    wall: list[float] = field(default_factory=list)  # per block: wall s per turn
    latencies: list[float] = field(default_factory=list)  # per turn, s
    cpu_total: float = 0.0
    wall_total: float = 0.0
    turns: int = 0


def metrics_config(workdir: Path) -> str:
    """The addon's config (``bench_ttfb.addon_config``) serving its metrics on a free loopback port."""
    import bench_ttfb
    import yaml

    cfg = yaml.safe_load(bench_ttfb.addon_config(workdir))
    cfg["metrics"] = {"listen": "127.0.0.1:0"}
    return yaml.safe_dump(cfg, sort_keys=False)


def policy_config(workdir: Path) -> str:
    """The addon's config with a team's policy of 50 globs: 40 deny and 6 always_load globs over
    names no catalog tool has (the request forwards the same tools, so the CPU compared is the
    policy's alone), and two client entries matched by user agent and header."""
    import bench_ttfb
    import yaml

    cfg = yaml.safe_load(bench_ttfb.addon_config(workdir))
    cfg["policy"] = {"deny": [f"mcp__forbidden{i}__*" for i in range(40)],
                     "always_load": [f"mcp__pinned{i}__*" for i in range(4)], "max_loaded": 400,
                     "clients": [{"match": {"user_agent": "nobody-agent/*"}, "deny": ["mcp__x__*", "mcp__y__*"]},
                                 {"match": {"header": {"x-team": "none"}}, "always_load": ["mcp__z__*", "mcp__w__*"]}]}
    return yaml.safe_dump(cfg, sort_keys=False)


def ungoverned_config(workdir: Path) -> str:
    """The addon's config without pinned definitions and screening (both on by default)."""
    import bench_ttfb
    import yaml

    cfg = yaml.safe_load(bench_ttfb.addon_config(workdir))
    cfg["policy"] = {"pin": "off", "screen": False}
    return yaml.safe_dump(cfg, sort_keys=False)


def scraped_requests(log: Path) -> float | None:
    """``tooldisco_requests_total`` summed, scraped from the URL the proxy's log names; None: not served."""
    import httpx

    urls = [line.split("metrics at ", 1)[1].strip() for line in log.read_text(errors="replace").splitlines()
            if "tool discovery: metrics at " in line]
    if not urls:
        return None
    text = httpx.get(urls[-1], timeout=10, trust_env=False).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tooldisco_requests_total{"))


def cpu_bench(tools: int, turns: int, rounds: int, apis: list[str], session_turns: int, metrics: bool = False,
              policy: bool = False) -> tuple[dict[tuple[str, str, str], Cell], dict[str, Counter[str]],
                         dict[tuple[str, bool], list[float]], float]:
    """(cells by (api, kind, proxy), the addon's deferral modes per provider, its planning times
    (telemetry's ``processing_ms``, s) per provider and streaming, load average). ``metrics``: a
    third proxy, ``addon+metrics``, the addon serving its metrics."""
    import httpx
    import psutil

    import bench_ttfb
    from tests.e2e.harness import ADDON_PATH, MitmDump

    cells: dict[tuple[str, str, str], Cell] = defaultdict(Cell)
    with tempfile.TemporaryDirectory(prefix="bench_cpu_") as name:
        tmp = Path(name)
        bench_ttfb.aws_chain(tmp)
        fake = bench_ttfb.Fake(0.0, tmp / "fake.log")
        (tmp / "stream_events.py").write_text(STREAM_EVENTS)
        proxies = {"mitmdump": MitmDump(tmp / "plain", fake.url, script=tmp / "stream_events.py", name="plain"),
                   "addon": MitmDump(tmp / "addon", fake.url, script=ADDON_PATH, config=bench_ttfb.addon_config,
                                     name="addon")}
        if metrics:
            proxies["addon+metrics"] = MitmDump(tmp / "metrics", fake.url, script=ADDON_PATH, config=metrics_config,
                                                name="addon+metrics")
        if policy:
            proxies["addon+policy"] = MitmDump(tmp / "policy", fake.url, script=ADDON_PATH, config=policy_config,
                                               name="addon+policy")
            proxies["addon-nopins"] = MitmDump(tmp / "ungoverned", fake.url, script=ADDON_PATH,
                                             config=ungoverned_config, name="addon without pins and screening")
        try:
            for proxy in proxies.values():
                proxy.start()
            procs = {k: psutil.Process(p.proc.pid) for k, p in proxies.items()}  # type: ignore[union-attr]
            clients = {k: httpx.Client(proxy=p.url, verify=p.ssl_context(), trust_env=False,
                                       timeout=httpx.Timeout(120.0, connect=30.0)) for k, p in proxies.items()}

            def cpu(key: str) -> float:
                t = procs[key].cpu_times()
                return t.user + t.system

            sessions: Counter[str] = Counter()  # proxy -> turns sent: a new session every ``session_turns``

            def one(key: str, tag: str, stream: bool) -> float:
                n = sessions[key]
                sessions[key] += 1
                req = turn_request(tag, stream, f"{bench_ttfb.QUESTION} [plain-turn {uuid.uuid4().hex[:12]}]", tools)
                headers = {**req.headers, "x-session-id": f"bench-{key}-{n // session_turns}"}
                t0 = time.perf_counter()
                with clients[key].stream("POST", req.url, content=req.body, headers=headers) as r:
                    raw = r.read()
                took = time.perf_counter() - t0
                text = bench_ttfb.visible(api_of(tag), raw) if stream else raw.decode("utf-8", "replace")
                if r.status_code != 200 or bench_ttfb.DONE not in text:
                    raise RuntimeError(f"{tag} {'stream' if stream else 'json'} via {key}: HTTP {r.status_code} "
                                       f"{raw[:300]!r}")
                return took

            for tag in apis:
                for kind in KINDS:
                    stream = kind == "stream"
                    fake.reset(0.0)
                    for key in proxies:  # warm-up: connections, the catalog's first index
                        for _ in range(3):
                            one(key, tag, stream)
                    keys = list(proxies)
                    for r in range(rounds):
                        # Each proxy first in turn (two: the order swapped every round).
                        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                            cell = cells[tag, kind, key]
                            c0, w0 = cpu(key), time.perf_counter()
                            cell.latencies += [one(key, tag, stream) for _ in range(turns)]
                            c, w = cpu(key) - c0, time.perf_counter() - w0
                            cell.cpu.append(c / turns)
                            cell.wall.append(w / turns)
                            cell.cpu_total += c
                            cell.wall_total += w
                            cell.turns += turns
                        fake.reset(0.0)  # the fake keeps every request it saw
                    print(f"cpu: {tag} {kind} done", file=sys.stderr, flush=True)
            for client in clients.values():
                client.close()
            if metrics:
                sent, deadline = sessions["addon+metrics"], time.monotonic() + 10
                # A stream's record closes just after the client read its end: the last may come a moment later.
                while (counted := scraped_requests(proxies["addon+metrics"].log_path)) != sent \
                        and time.monotonic() < deadline:
                    time.sleep(0.1)
                print(f"cpu: addon+metrics counted {counted} requests of {sent} sent", file=sys.stderr, flush=True)
                if counted != sent:
                    raise RuntimeError(f"the metrics counted {counted} requests, {sent} were sent")
        finally:
            for proxy in proxies.values():
                proxy.stop()
            fake.stop()
        modes: dict[str, Counter[str]] = defaultdict(Counter)
        planning: dict[tuple[str, bool], list[float]] = defaultdict(list)
        telemetry = proxies["addon"].workdir / "telemetry.jsonl"
        for line in telemetry.read_text().splitlines() if telemetry.exists() else []:
            rec = json.loads(line)
            modes[rec["provider"]][rec.get("deferral") or rec.get("fallback_reason") or "unprocessed"] += 1
            planning[rec["provider"], bool(rec.get("stream"))].append(rec["processing_ms"] / 1000)
    return cells, modes, planning, os.getloadavg()[1]


PROVIDER = {"anthropic": "anthropic", "chat": "openai_chat", "responses": "openai_responses", "gemini": "gemini",
            "converse": "bedrock_converse", "invoke": "bedrock_invoke"}


def cpu_report(cells: dict[tuple[str, str, str], Cell], modes: dict[str, Counter[str]],
               planning: dict[tuple[str, bool], list[float]], load: float, tools: int, turns: int, rounds: int,
               session_turns: int) -> None:
    rows = []
    metrics_rows = []
    policy_rows = []
    for tag in dict.fromkeys(k[0] for k in cells):
        mode = ", ".join(m for m, _ in modes.get(PROVIDER[tag], Counter()).most_common()) or "?"
        for kind in KINDS:
            plain, addon = cells.get((tag, kind, "mitmdump")), cells.get((tag, kind, "addon"))
            if plain is None or addon is None:
                continue
            plan = planning.get((PROVIDER[tag], kind == "stream"), [])
            extra = addon.cpu_total / addon.turns - plain.cpu_total / plain.turns
            rows.append((tag, mode, kind, p50_p95(plain.cpu, 1000), p50_p95(addon.cpu, 1000),
                         ratio(addon.cpu_total / addon.turns, plain.cpu_total / plain.turns),
                         f"{extra * 1000:+.1f}", p50_p95(plan, 1000),
                         f"{(extra - percentile(plan, 50)) * 1000:+.1f}" if plan else "n/a",
                         p50_p95(plain.latencies, 1000), p50_p95(addon.latencies, 1000),
                         f"{(percentile(addon.latencies, 50) - percentile(plain.latencies, 50)) * 1000:+.1f} / "
                         f"{(percentile(addon.latencies, 95) - percentile(plain.latencies, 95)) * 1000:+.1f}",
                         ratio(plain.wall_total / plain.turns, addon.wall_total / addon.turns)))
            governed, bare = cells.get((tag, kind, "addon+policy")), cells.get((tag, kind, "addon-nopins"))
            if governed is not None and bare is not None:
                per = {k: c.cpu_total / c.turns for k, c in (("policy", governed), ("addon", addon), ("bare", bare))}
                policy_rows.append((tag, kind, p50_p95(bare.cpu, 1000), p50_p95(addon.cpu, 1000),
                                    p50_p95(governed.cpu, 1000), f"{(per['addon'] - per['bare']) * 1000:+.2f}",
                                    f"{(per['policy'] - per['addon']) * 1000:+.2f}",
                                    ratio(per["policy"], per["addon"])))
            if (served := cells.get((tag, kind, "addon+metrics"))) is not None:
                more = served.cpu_total / served.turns - addon.cpu_total / addon.turns
                metrics_rows.append((tag, kind, p50_p95(addon.cpu, 1000), p50_p95(served.cpu, 1000),
                                     ratio(served.cpu_total / served.turns, addon.cpu_total / addon.turns),
                                     f"{more * 1000:+.2f}", p50_p95(served.latencies, 1000),
                                     ratio(served.cpu_total / served.turns, plain.cpu_total / plain.turns)))
    section(f"CPU per turn of the mitmdump process, {tools} tools, no search, sessions of {session_turns} turns, "
            f"kept-alive client ({rounds} rounds of {turns} turns per proxy, alternating; load average {load:.2f} "
            f"on {os.cpu_count()} CPUs)",
            ["API", "addon's deferral", "answer", "plain CPU ms/turn p50 / p95:", "addon CPU ms/turn p50 / p95:",
             "addon / plain CPU:", "addon − plain CPU ms:", "of it planning ms p50 / p95:", "rest ms:",
             "plain latency ms p50 / p95:", "addon latency ms:", "addon − plain ms p50 / p95:",
             "throughput addon / plain:"], rows,
            "CPU p50 / p95 over the blocks of turns; the ratio and the difference are of all turns' CPU. *planning*: "
            "`Engine.prepare` (telemetry's `processing_ms`, wall time on a planning thread, so about its CPU when "
            "turns come one at a time); *rest*: the addon's CPU beyond plain's and the planning's median (hooks, "
            "relay, upstream client, stream codecs, loop, telemetry, log line). Acceptance: CPU ≤ 1.5 × plain's, "
            "sequential throughput ≥ 0.9 × plain's.")
    if policy_rows:
        section(f"CPU per turn of the policy, {tools} tools, same run",
                ["API", "answer", "without pins, screening ms p50 / p95:", "addon (default) ms p50 / p95:",
                 "addon + 50-glob policy ms p50 / p95:", "pins + screening ms:", "policy ms:",
                 "policy / addon CPU:"], policy_rows,
                "The same turns through the addon without pinned definitions and screening (`policy: {pin: off, "
                "screen: false}`), the addon as shipped (both on) and the addon with a 50-glob policy "
                "(`policy_config`: deny, always_load, two client entries). Compare each difference with the "
                "blocks' p50–p95 spread: below it, it is noise.")
    if metrics_rows:
        section(f"CPU per turn with Prometheus metrics on (metrics.listen), {tools} tools, same run",
                ["API", "answer", "addon CPU ms/turn p50 / p95:", "addon+metrics CPU ms/turn p50 / p95:",
                 "metrics / addon CPU:", "metrics − addon CPU ms:", "addon+metrics latency ms p50 / p95:",
                 "addon+metrics / plain CPU:"], metrics_rows,
                "The same turns through a third mitmdump, the addon with `metrics: {listen: 127.0.0.1:0}`: every "
                "record counted (`Metrics.observe`), the server up, scraped once after the run (its request count "
                "checked against the turns sent). Compare the difference with the blocks' p50–p95 spread: "
                "below it, it is noise.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="engine calls per size")
    ap.add_argument("--proxy-requests", type=int, default=300, help="requests through each proxy")
    ap.add_argument("--sizes", default="500,5000,20000", help="comma-separated tool counts for the engine part")
    ap.add_argument("--cpu-tools", type=int, default=500, help="tools in every request of the CPU part")
    ap.add_argument("--cpu-turns", type=int, default=20, help="turns per block in the CPU part")
    ap.add_argument("--cpu-rounds", type=int, default=6, help="blocks per proxy, API and answer kind")
    ap.add_argument("--cpu-session-turns", type=int, default=5,
                    help="turns per session in the CPU part (its x-session-id); 1: every turn a new session")
    ap.add_argument("--cpu-apis", default=",".join(CPU_APIS), help="comma-separated, of " + ", ".join(CPU_APIS))
    ap.add_argument("--cpu-metrics", action="store_true",
                    help="CPU part: also the addon with metrics.listen set (Prometheus metrics), beside it")
    ap.add_argument("--cpu-policy", action="store_true",
                    help="CPU part: also the addon with a 50-glob policy, and without pins and screening, beside it")
    ap.add_argument("--only", choices=("engine", "proxy", "cpu"), help="run one part only")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    apis = [a for a in args.cpu_apis.split(",") if a]
    if unknown := set(apis) - set(CPU_APIS):
        ap.error(f"unknown --cpu-apis: {', '.join(sorted(unknown))}")
    if args.only in (None, "engine"):
        section("Engine processing time per request (Engine.prepare; ms, p50 / p95)",
                ["strategy", "tools:", "stdlib json floor:", "Engine.prepare:", "prepare / floor p50:",
                 "prepare / floor p95:"],
                [(strategy, f"{n:,}", p50_p95(floor, 1000, 2), p50_p95(times, 1000, 2),
                  ratio(percentile(times, 50), percentile(floor, 50), 2),
                  ratio(percentile(times, 95), percentile(floor, 95), 2))
                 for strategy, n, times, floor in engine_bench(args.requests, sizes)])
    if args.only in (None, "proxy"):
        rows = proxy_bench(args.proxy_requests)
        base_rps, base_lat = rows[0][1], rows[0][2]
        section("Proxy throughput, sequential requests, 60 tools, relevance (ms; same run)",
                ["proxy", "req/s:", "p50 / p95:", "req/s / plain:", "p50 / plain:"],
                [(label, f"{rps:.1f}", p50_p95(lat, 1000, 2), ratio(rps, base_rps),
                  ratio(percentile(lat, 50), percentile(base_lat, 50))) for label, rps, lat in rows])
    if args.only in (None, "cpu"):
        cpu_report(*cpu_bench(args.cpu_tools, args.cpu_turns, args.cpu_rounds, apis, args.cpu_session_turns,
                              args.cpu_metrics, args.cpu_policy),
                   args.cpu_tools, args.cpu_turns, args.cpu_rounds, args.cpu_session_turns)


if __name__ == "__main__":
    main()
