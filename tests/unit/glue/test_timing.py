"""Time measured where it passes (glue.timing, engine.runner): a request that went upstream as
the client sent it, and a buffered flow's first round, which mitmproxy carried, get their
upstream time from the flow's timestamps; the runner adds its own rounds; the total runs from
planning's start to the turn's end. Never ``upstream 0.0 ms`` for an upstream that took its time."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from mitmproxy import flow as mflow
from mitmproxy.test import taddons, tutils
from tooldisco.glue import metadata
from tooldisco.net.upstream import UpstreamClient, UpstreamOptions
from tooldisco.watch.summary import FlowSummary

from tests.unit.glue.chain import Chain, flow, tool_search_config, write

SEARCH = "gateway_search_tools"
JSON = [(b"content-type", b"application/json")]


def message(content, stop="end_turn", id_="msg_1"):
    return {"id": id_, "type": "message", "role": "assistant", "model": "m", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


TEXT = message([{"type": "text", "text": "hello"}])
SEARCHED = message([{"type": "tool_use", "id": "toolu_1", "name": SEARCH, "input": {"query": "post slack message"}}],
                   "tool_use")


def answered(f, planned: float, first_byte_s: float, last_byte_s: float, body: dict) -> None:
    """The upstream's answer to ``f``, its first and last byte that long after planning ended."""
    f.response = tutils.tresp(content=json.dumps(body).encode(), headers=JSON)
    f.response.timestamp_start, f.response.timestamp_end = planned + first_byte_s, planned + last_byte_s


def passthrough_config(tmp_path) -> str:
    return write(tmp_path, f"""
pipes: {{tool_discovery: {{enabled: true, strategy: passthrough}}}}
sessions: {{dir: {tmp_path}/s}}
telemetry: {{path: {tmp_path}/t.jsonl}}
""")


def records(tmp_path, chain) -> list[dict]:
    chain.engine.telemetry.flush()
    return [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]


async def test_a_request_passed_as_sent_says_its_upstream_time(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=passthrough_config(tmp_path))
        f = flow()  # upstream as the client sent it
        chain.requestheaders(f)
        await chain.request(f)
        record = metadata.of(f).passed.record
        planned = record.time + record.processing_ms / 1000
        assert f.request.timestamp_end < planned  # the test request's stamps are older: sent after planning
        answered(f, planned, 0.010, 0.018, TEXT)
        await chain.response(f)
        [written] = records(tmp_path, chain)
    assert written["fallback_reason"] == "passthrough" and written["id"] == record.id and len(written["id"]) == 12
    assert written["upstream_ms"] == pytest.approx(18.0, abs=0.01)
    assert written["total_ms"] == pytest.approx(written["processing_ms"] + 18.0, abs=0.01)
    said = FlowSummary.of(written)
    assert said.upstream_ms == pytest.approx(18.0, abs=0.01) and "upstream 18.0 ms" in said.line("x")


async def test_a_failed_flow_passed_as_sent_has_a_total_and_no_upstream_time(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=passthrough_config(tmp_path))
        f = flow()
        chain.requestheaders(f)
        await chain.request(f)
        f.error = mflow.Error("connection reset")
        chain.error(f)
        [written] = records(tmp_path, chain)
    assert written["upstream_ms"] == 0.0 and written["total_ms"] >= written["processing_ms"] > 0


async def test_a_buffered_turn_counts_its_first_round_and_its_search_rounds(tmp_path):
    """The first round came through mitmproxy (20 ms to its last byte); the search round the
    proxy made itself took 50 ms: upstream is both, answering neither."""
    async def upstream(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(0.05)
        return web.json_response(message([{"type": "text", "text": "posted"}], id_="msg_2"))

    app = web.Application()
    app.router.add_post("/v1/messages", upstream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    chain = Chain()
    try:
        with taddons.context(*chain.addons) as tctx:
            tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
            client = chain.upstream._client = UpstreamClient(UpstreamOptions())
            f = flow()
            chain.requestheaders(f)
            await chain.request(f)
            record = metadata.of(f).buffered.context.record
            planned = record.time + record.processing_ms / 1000
            f.request.url = f"http://127.0.0.1:{port}/v1/messages"  # where the search round goes (map_remote)
            await asyncio.sleep(0.025)  # the first round's answer ends 20 ms after planning: before its hook
            answered(f, planned, 0.015, 0.020, SEARCHED)
            await chain.response(f)
            [written] = records(tmp_path, chain)
            await client.retire()
    finally:
        await runner.cleanup()
    assert written["outcome"] == "done" and written["loops"] == 1 and len(written["upstream"]) == 2
    assert 20.0 + 50.0 <= written["upstream_ms"] < 20.0 + 50.0 + 1000
    # Each part measured apart: the upstream's waits are not the proxy's, and the parts fit in the total.
    parts = written["processing_ms"] + written["upstream_ms"] + written["loop_added_ms"]
    assert written["total_ms"] >= parts - 1.0
    said = FlowSummary.of(written)
    assert said.result == "answered after 1 search" and said.rounds == 2


async def test_a_buffered_turn_without_a_search_is_timed_too(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        f = flow()
        chain.requestheaders(f)
        await chain.request(f)
        record = metadata.of(f).buffered.context.record
        answered(f, record.time + record.processing_ms / 1000, 0.012, 0.018, TEXT)
        await chain.response(f)
        [written] = records(tmp_path, chain)
    assert written["outcome"] == "no_phantom" and written["upstream_ms"] == pytest.approx(18.0, abs=0.01)
    assert FlowSummary.of(written).result == "answered without a search"
