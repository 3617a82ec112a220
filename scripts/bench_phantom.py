#!/usr/bin/env python3
"""What tool-search saves and what one phantom round costs, in process (no proxy, no network).

    .venv/bin/python scripts/bench_phantom.py [--rounds 50] [--tools 100,500]

Tokens: for each catalog size (Anthropic and OpenAI Chat bodies), the estimated tool tokens
the engine forwards with tool-search (everything deferred, and the shipped default with 8
upfront tools), each against the original request's (the baseline: what goes upstream without
the addon).

Latency: the wall time of the engine's loop runner (``Engine.runner(ctx).buffered`` for JSON,
``.live`` for SSE) on one client request, with an upstream that answers instantly (its answers
are bytes in memory), so only the proxy's own work is timed. Baselines from the same run: the
same runner on an answer without a search call (what every request pays: decode, find no
search, pass the bytes on), and the stdlib json floor (``json.loads`` of both answers and
``json.dumps`` of one: what any proxy that reads and rewrites an answer pays at least). A
phantom round adds: decode the first answer, search, build the continuation, decode the second
answer, merge and re-encode. The benchmark's overhead-free view; ``scripts/bench_ttfb.py``
times the same round through a real mitmdump with a paced upstream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "addon"), str(ROOT), str(ROOT / "scripts")]

from _bench import p50_p95, percentile, ratio, section  # noqa: E402
from tests.support.catalog import anthropic_tools, openai_tools  # noqa: E402

# addon modules (kept together: their paths move with the addon's layout)
from tooldisco.config import parse  # noqa: E402
from tooldisco.engine.engine import Engine  # noqa: E402
from tooldisco.apis.anthropic.adapter import AnthropicAdapter  # noqa: E402
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter  # noqa: E402
from tooldisco.core.answers import Answer, Head  # noqa: E402
from tooldisco.apis.anthropic.stream import encode as encode_sse  # noqa: E402

TARGET = "mcp__weather__get_forecast"
SEARCH_TOOL = "gateway_search_tools"
KEY = {"x-api-key": "bench"}


def engine(tmp: str, upfront: int) -> Engine:
    return Engine(parse({
        "pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "search": {"backend": "bm25"},
                                     "defer": {"upfront": upfront}}},
        "sessions": {"dir": tmp}, "telemetry": {"enabled": False}}))


def savings(sizes: list[int]) -> list[tuple[str, int, int, int, int]]:
    rows = []
    for api, adapter, make in [("anthropic", AnthropicAdapter(), anthropic_tools),
                               ("openai_chat", OpenAIChatAdapter(), openai_tools)]:
        for n in sizes:
            body = json.dumps({"model": "m", "max_tokens": 100, "tools": make(n),
                               "messages": [{"role": "user", "content": "weather forecast for Paris"}]}).encode()
            after, before = {}, 0
            for upfront in (0, 8):
                with tempfile.TemporaryDirectory() as tmp:
                    e = engine(tmp, upfront)
                    rec = e.prepare(adapter, KEY, body).context.record
                    after[upfront], before = rec.tool_tokens_after, rec.tool_tokens_before
                    e.close()
            rows.append((api, n, before, after[0], after[8]))
    return rows


def message(i: int, block: dict[str, Any], stop: str = "tool_use") -> dict[str, Any]:
    return {"id": f"msg_{i}", "type": "message", "role": "assistant", "model": "m", "content": [block],
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 1000, "output_tokens": 20}}


SEARCH = message(1, {"type": "tool_use", "id": "toolu_s", "name": SEARCH_TOOL, "input": {"query": "weather forecast"}})
FOUND = message(2, {"type": "tool_use", "id": "toolu_r", "name": TARGET, "input": {"city": "Paris"}})
TEXT = message(1, {"type": "text", "text": "It is sunny in Paris."}, stop="end_turn")


def answer(msg: dict[str, Any], stream: bool) -> Answer:
    """An upstream answer already in memory: the upstream's own time is nil by construction."""
    if stream:
        return Answer.whole(200, encode_sse(msg), [("content-type", "text/event-stream")])
    return Answer.whole(200, json.dumps(msg).encode(), [("content-type", "application/json")])


async def run_once(e: Engine, n: int, i: int, stream: bool, first: dict[str, Any]) -> tuple[float, bytes]:
    """One client request through the runner: its wall time (s) and the client's bytes."""
    body = json.dumps({"model": "m", "max_tokens": 100, "stream": stream, "tools": anthropic_tools(n),
                       "messages": [{"role": "user", "content": f"weather forecast please #{i}"}]}).encode()
    prepared = e.prepare(AnthropicAdapter(), KEY, body)
    if prepared.background is not None:
        await prepared.background()  # the catalog's index, built off the request's path
    ctx = prepared.context

    async def open_(_body: bytes) -> Answer:
        return answer(FOUND, stream)

    began = time.perf_counter()
    runner = e.runner(ctx)
    if stream:
        out = b"".join([x async for x in runner.live(answer(first, True), open_) if not isinstance(x, Head)])
    else:
        out = (await runner.buffered(answer(first, False), open_)).body
    return time.perf_counter() - began, out


async def rounds(n: int, stream: bool, count: int) -> tuple[list[float], list[float]]:
    """(no-search pass-through, phantom round) wall times over ``count`` requests each."""
    plain, phantom = [], []
    with tempfile.TemporaryDirectory() as tmp:
        e = engine(tmp, 0)
        await run_once(e, n, -1, stream, SEARCH)  # warm-up: the catalog's index, imports
        for i in range(count):
            took, out = await run_once(e, n, i, stream, TEXT)
            assert b"sunny" in out, out[:200]
            plain.append(took)
            took, out = await run_once(e, n, count + i, stream, SEARCH)
            assert TARGET.encode() in out and SEARCH_TOOL.encode() not in out, out[:300]
            phantom.append(took)
        e.close()
    return plain, phantom


def json_floor(count: int) -> list[float]:
    """Decode both answers, re-encode one: the least any answer-rewriting proxy does."""
    first, second = json.dumps(SEARCH).encode(), json.dumps(FOUND).encode()
    took = []
    for _ in range(count):
        began = time.perf_counter()
        json.loads(first)
        json.dumps(json.loads(second)).encode()
        took.append(time.perf_counter() - began)
    return took


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=50, help="timed requests per row and per baseline")
    ap.add_argument("--tools", default="100,500", help="comma-separated catalog sizes")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.tools.split(",")]

    def share(part: int, whole: int) -> str:
        return f"{part:,} ({part / whole:.1%})"

    section("Forwarded tool tokens (estimated, 4 chars/token; baseline: the original request)",
            ["API", "tools:", "original:", "tool-search, all deferred:", "tool-search, 8 upfront (default):"],
            [(api, n, f"{before:,}", share(alld, before), share(up, before))
             for api, n, before, alld, up in savings(sizes)])
    floor = json_floor(max(args.rounds, 200))
    rows = []
    for n in sizes:
        for stream in (False, True):
            plain, phantom = asyncio.run(rounds(n, stream, args.rounds))
            added = percentile(phantom, 50) - percentile(plain, 50)
            rows.append((n, "SSE" if stream else "JSON", p50_p95(floor, 1000, 3), p50_p95(plain, 1000, 2),
                         p50_p95(phantom, 1000, 2), f"{added * 1000:+.2f}",
                         ratio(percentile(phantom, 50), percentile(plain, 50)),
                         ratio(percentile(phantom, 50), percentile(floor, 50), 0)))
    section("Proxy time for one request, upstream answering instantly (ms, p50 / p95)",
            ["tools:", "answer", "stdlib json floor:", "no search (baseline):", "one phantom round:",
             "added p50:", "phantom / no search p50:", "phantom / json floor p50:"], rows)


if __name__ == "__main__":
    main()
