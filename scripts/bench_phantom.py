#!/usr/bin/env python3
"""What tool-search saves and what one phantom round costs.

    .venv/bin/python scripts/bench_phantom.py [--rounds 50]

For 100 and 500 tools (Anthropic and OpenAI Chat bodies): estimated tool tokens forwarded
with tool-search (everything deferred, and the shipped default with 8 upfront tools)
against the original. Then the latency the proxy adds for one phantom round — decode the
first answer, search, build the continuation, decode the second answer, merge and
re-encode — with an upstream that answers instantly, so the upstream's own time is
excluded by construction; the upstream time measured inside the loop is reported too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "addon"), str(ROOT)]

from tests.support.catalog import anthropic_tools, openai_tools  # noqa: E402
from tooldisco.config import parse  # noqa: E402
from tooldisco.core.answers import Reply  # noqa: E402
from tooldisco.engine.engine import Engine  # noqa: E402
from tooldisco.apis.anthropic.adapter import AnthropicAdapter  # noqa: E402
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter  # noqa: E402
from tooldisco.apis.anthropic import stream as anthropic_stream  # noqa: E402

TARGET = "mcp__weather__get_forecast"


def engine(tmp: str, upfront: int, backend: str = "bm25") -> Engine:
    return Engine(parse({
        "pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "search": {"backend": backend},
                                     "defer": {"upfront": upfront}}},
        "sessions": {"dir": tmp}, "telemetry": {"enabled": False}}))


def savings() -> list[tuple[str, int, int, int, int]]:
    rows = []
    for api, adapter, make in [("anthropic", AnthropicAdapter(), anthropic_tools), ("openai_chat", OpenAIChatAdapter(), openai_tools)]:
        for n in (100, 500):
            body = json.dumps({"model": "m", "max_tokens": 100, "tools": make(n),
                               "messages": [{"role": "user", "content": "weather forecast for Paris"}]}).encode()
            after = {}
            for upfront in (0, 8):
                with tempfile.TemporaryDirectory() as tmp:
                    e = engine(tmp, upfront)
                    prepared = e.prepare(adapter, {"x-api-key": "bench"}, body)
                    rec = prepared.context.record
                    after[upfront] = rec.tool_tokens_after
                    before = rec.tool_tokens_before
                    e.close()
            rows.append((api, n, before, after[0], after[8]))
    return rows


def anthropic_message(i: int, block: dict) -> dict:
    return {"id": f"msg_{i}", "type": "message", "role": "assistant", "model": "m", "content": [block],
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1000, "output_tokens": 20}}


async def phantom_round(rounds: int, n: int, stream: bool) -> tuple[list[float], list[float]]:
    adapter = AnthropicAdapter()
    first = anthropic_message(1, {"type": "tool_use", "id": "toolu_s", "name": "gateway_search_tools",
                                  "input": {"query": "weather forecast"}})
    second = anthropic_message(2, {"type": "tool_use", "id": "toolu_r", "name": TARGET, "input": {"city": "Paris"}})
    ctype = "text/event-stream" if stream else "application/json"
    encode = anthropic_stream.encode if stream else (lambda m: json.dumps(m).encode())
    first_bytes, second_bytes = encode(first), encode(second)

    async def send(_body: bytes) -> Reply:
        return Reply(200, second_bytes, ctype)

    added, upstream = [], []
    with tempfile.TemporaryDirectory() as tmp:
        e = engine(tmp, 0)
        for i in range(rounds):
            body = json.dumps({"model": "m", "max_tokens": 100, "stream": stream, "tools": anthropic_tools(n),
                               "messages": [{"role": "user", "content": f"weather forecast please #{i}"}]}).encode()
            ctx = e.prepare(adapter, {"x-api-key": "bench"}, body).context
            out = await e.complete(ctx, Reply(200, first_bytes, ctype), send)
            assert out is not None and TARGET.encode() in out.body and b"gateway_search_tools" not in out.body
            added.append(ctx.record.loop_added_ms)
            upstream.append(ctx.record.upstream_ms)
        e.close()
    return added, upstream


def pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100)[int(p) - 1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    print("## Forwarded tool tokens (estimated, 4 chars/token)\n")
    print("| API | tools | original | tool-search (all deferred) | tool-search (8 upfront, default) |")
    print("|---|---:|---:|---:|---:|")
    for api, n, before, all_deferred, upfront in savings():
        print(f"| {api} | {n} | {before:,} | {all_deferred:,} ({all_deferred / before:.1%}) "
              f"| {upfront:,} ({upfront / before:.1%}) |")
    print("\n## Latency the proxy adds for one phantom round (upstream answers instantly)\n")
    print("| tools | response | added p50 ms | added p95 ms | upstream (stub) p50 ms |")
    print("|---:|---|---:|---:|---:|")
    for n in (100, 500):
        for stream in (False, True):
            added, upstream = asyncio.run(phantom_round(args.rounds, n, stream))
            print(f"| {n} | {'SSE' if stream else 'JSON'} | {pct(added, 50):.2f} | {pct(added, 95):.2f} "
                  f"| {pct(upstream, 50):.3f} |")


if __name__ == "__main__":
    main()
