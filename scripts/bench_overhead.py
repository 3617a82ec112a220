#!/usr/bin/env python3
"""The addon's own cost: engine time per request, and proxy throughput with vs without it.

    .venv/bin/python scripts/bench_overhead.py [--requests 200] [--proxy-requests 300] [--sizes 500,5000,20000]

Part 1 times ``Engine.prepare`` (parse, score, session read/write, rewrite) on Anthropic
bodies with 500, 5,000 and 20,000 tools, per strategy, against the stdlib json floor measured
in the same run (``json.loads`` and ``json.dumps`` of the same body: the least any proxy that
rewrites a body pays), each request right after its floor, so both see the same load: p50 and
p95 of each, and their ratios. Requests come from 20 sessions in turn, so the first turn of
each (which chooses the session's loaded tools) is among them; the process's first request
with a catalog works out what later ones reuse. Part 2 starts the fake provider and two real mitmdump processes, one
plain and one with the addon (the shipped config on relevance, 60 tools), and sends the same
requests through each in the same run: req/s and latency p50/p95, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="engine calls per size")
    ap.add_argument("--proxy-requests", type=int, default=300, help="requests through each proxy")
    ap.add_argument("--sizes", default="500,5000,20000", help="comma-separated tool counts for the engine part")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    section("Engine processing time per request (Engine.prepare; ms, p50 / p95)",
            ["strategy", "tools:", "stdlib json floor:", "Engine.prepare:", "prepare / floor p50:",
             "prepare / floor p95:"],
            [(strategy, f"{n:,}", p50_p95(floor, 1000, 2), p50_p95(times, 1000, 2),
              ratio(percentile(times, 50), percentile(floor, 50), 2), ratio(percentile(times, 95), percentile(floor, 95), 2))
             for strategy, n, times, floor in engine_bench(args.requests, sizes)])
    rows = proxy_bench(args.proxy_requests)
    base_rps, base_lat = rows[0][1], rows[0][2]
    section("Proxy throughput, sequential requests, 60 tools, relevance (ms; same run)",
            ["proxy", "req/s:", "p50 / p95:", "req/s / plain:", "p50 / plain:"],
            [(label, f"{rps:.1f}", p50_p95(lat, 1000, 2), ratio(rps, base_rps),
              ratio(percentile(lat, 50), percentile(base_lat, 50))) for label, rps, lat in rows])


if __name__ == "__main__":
    main()
