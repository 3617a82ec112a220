"""Buffered flows: the loop in the response hook, cancelled when the client leaves (glue.buffered)."""

import asyncio
import json

from mitmproxy import flow as mflow
from mitmproxy.connection import ConnectionState
from mitmproxy.test import taddons, tutils
from tooldisco.glue import buffered, metadata

from tests.unit.glue.chain import Chain, flow, tool_search_config


async def test_the_loop_is_cancelled_when_the_client_leaves(monkeypatch):
    monkeypatch.setattr(buffered, "CLIENT_POLL_S", 0.01)
    f = flow()
    cancelled = asyncio.Event()

    async def forever() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    waiting = asyncio.ensure_future(buffered.while_client_waits(f, forever()))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the client still waits
    f.client_conn.state = ConnectionState.CAN_WRITE  # it closed its side: no longer readable
    assert await asyncio.wait_for(waiting, 60) is None
    assert cancelled.is_set()


async def test_the_loops_result_while_the_client_waits():
    async def answer() -> str:
        return "final"

    assert await buffered.while_client_waits(flow(), answer()) == "final"


async def test_a_failed_buffered_flow_is_recorded_and_its_record_dropped(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        f = flow()
        chain.requestheaders(f)
        await chain.request(f)
        assert metadata.of(f).buffered is not None
        chain.engine.telemetry.flush()
        log = tmp_path / "t.jsonl"
        assert not log.exists() or not log.read_text()  # the loop would complete the record
        f.error = mflow.Error("connection reset")
        chain.error(f)
        assert metadata.KEY not in f.metadata
        chain.engine.telemetry.flush()
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(records) == 1 and records[0]["strategy"] == "tool-search"  # the failed flow still counts
        assert records[0]["outcome"] == "flow_error: connection reset"  # why, not "pending"


async def test_a_flow_streamed_after_all_is_left_as_it_came(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        f = flow()
        chain.requestheaders(f)
        await chain.request(f)
        f.response = tutils.tresp()
        f.response.stream = True
        f.response.raw_content = None  # stream_large_bodies switched it to streaming
        await chain.response(f)
        assert f.response.raw_content is None and metadata.KEY not in f.metadata
