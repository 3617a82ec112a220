#!/usr/bin/env python3
"""The addon's own cost: engine time per request, and proxy throughput with vs without it.

    .venv/bin/python scripts/bench_overhead.py [--requests 200] [--proxy-requests 300]

Part 1 times ``Engine.prepare`` (parse, score, session read/write, rewrite) on Anthropic
bodies with 50, 500 and 5,000 tools, per strategy. Part 2 starts the fake provider and two
real mitmdump processes, one plain and one with the addon (relevance, 60 tools), and sends
the same requests through each in the same run: req/s and latency p50/p95, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "addon"), str(ROOT)]

from tests.support.catalog import anthropic_tools  # noqa: E402
from tooldisco.config import parse  # noqa: E402
from tooldisco.engine.engine import Engine  # noqa: E402
from tooldisco.apis.anthropic.adapter import AnthropicAdapter  # noqa: E402

QUERIES = ["create a github issue for the bug", "post the summary to slack", "what is the weather in Paris",
           "list the tables in the database", "schedule a meeting tomorrow", "export the invoice records"]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def engine_bench(requests: int) -> list[tuple[str, int, float, float]]:
    rows = []
    adapter = AnthropicAdapter()
    for strategy, extra in [("relevance", {}), ("tool-search", {"defer": {"upfront": 8}, "search": {"backend": "bm25"}})]:
        for n in (50, 500, 5000):
            tools = anthropic_tools(n)
            with tempfile.TemporaryDirectory() as tmp:
                cfg = parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": strategy, **extra}},
                             "sessions": {"dir": tmp}, "telemetry": {"enabled": False}})
                engine = Engine(cfg)
                times = []
                for i in range(requests):
                    body = json.dumps({"model": "m", "max_tokens": 100, "tools": tools, "messages": [
                        {"role": "user", "content": f"conversation {i % 20}"},
                        {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": QUERIES[i % len(QUERIES)]}]}).encode()
                    t0 = time.perf_counter()
                    engine.prepare(adapter, {"x-api-key": "bench"}, body)
                    times.append((time.perf_counter() - t0) * 1000)
                engine.close()
            rows.append((strategy, n, pct(times, 50), pct(times, 95)))
    return rows


def proxy_bench(requests: int) -> list[tuple[str, float, float, float]]:
    import httpx

    from tests.e2e.harness import MitmDump  # the same rig the end-to-end tests use
    from tests.fakeprovider import FakeProvider

    body = {"model": "claude", "max_tokens": 64, "tools": anthropic_tools(60),
            "messages": [{"role": "user", "content": "post the summary to slack"}]}
    rows = []
    with FakeProvider(stream_delay=0) as fake, tempfile.TemporaryDirectory() as tmp:
        config = (f"pipes:\n  tool_discovery:\n    enabled: true\n    strategy: relevance\n"
                  f"sessions:\n  dir: {tmp}/sessions\ntelemetry:\n  enabled: false\n")
        for label, script in [("mitmdump alone", None), ("mitmdump + addon", ROOT / "addon" / "tool_discovery.py")]:
            proxy = MitmDump(Path(tmp) / label.replace(" ", "_"), fake.url, script=script,
                             config=config if script else None)
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
                        lat.append((time.perf_counter() - t) * 1000)
                    elapsed = time.perf_counter() - t0
            finally:
                proxy.stop()
            rows.append((label, requests / elapsed, pct(lat, 50), pct(lat, 95)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200, help="engine calls per size")
    ap.add_argument("--proxy-requests", type=int, default=300, help="requests through each proxy")
    args = ap.parse_args()
    print("## Engine processing time per request (Engine.prepare)\n")
    print("| strategy | tools | p50 ms | p95 ms |\n|---|---:|---:|---:|")
    for strategy, n, p50, p95 in engine_bench(args.requests):
        print(f"| {strategy} | {n:,} | {p50:.2f} | {p95:.2f} |")
    print("\n## Proxy throughput, sequential requests, 60 tools, relevance (same run)\n")
    print("| proxy | req/s | p50 ms | p95 ms |\n|---|---:|---:|---:|")
    rows = proxy_bench(args.proxy_requests)
    for label, rps, p50, p95 in rows:
        print(f"| {label} | {rps:.1f} | {p50:.2f} | {p95:.2f} |")
    print(f"\nthroughput ratio (addon / alone): {rows[1][1] / rows[0][1]:.2f}")


if __name__ == "__main__":
    main()
