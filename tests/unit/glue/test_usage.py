"""The usage tap (``glue.usage``): a request that went upstream as the client sent it still gets
its answer's usage in its record, JSON (plain or compressed) and streams alike, and the bytes
the client gets are the upstream's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from mitmproxy.test import taddons, tutils

from tests.unit.glue.chain import Chain, flow, relevance_config

MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
           "content": [{"type": "text", "text": "done"}],
           "usage": {"input_tokens": 7, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 2,
                     "output_tokens": 3}}
STREAM = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
          b'"role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,'
          b'"usage":{"input_tokens":7,"cache_read_input_tokens":5,"cache_creation_input_tokens":2,'
          b'"output_tokens":1}}}\n\n'
          b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
          b'"content_block":{"type":"text","text":""}}\n\n'
          b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
          b'"delta":{"type":"text_delta","text":"done"}}\n\n'
          b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
          b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
          b'"usage":{"output_tokens":3}}\n\n'
          b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
USAGE = {"input": 7, "cache_read": 5, "cache_write": 2, "output": 3}


def records(chain: Chain, tmp_path: Path) -> list[dict]:
    chain.engine.telemetry.flush()
    path = tmp_path / "t.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def passed(chain: Chain, stream: bool = False):
    f = flow(n=2, stream=stream)  # below min_tools: passed as sent, its record closed with the answer
    chain.requestheaders(f)
    await chain.request(f)
    return f


async def test_a_json_answer_passed_through_carries_its_usage(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = await passed(chain)
        assert records(chain, tmp_path) == []  # open until the answer came
        body = json.dumps(MESSAGE).encode()
        f.response = tutils.tresp(headers=[(b"content-type", b"application/json")], content=body)
        chain.responseheaders(f)
        await chain.response(f)
        (rec,) = records(chain, tmp_path)
        assert rec["usage"] == USAGE and rec["upstream"] == [["client", 200]] and rec["usage_unreported"] == 0
        assert f.response.raw_content == body


async def test_a_compressed_json_answer_is_read_too(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = await passed(chain)
        raw = gzip.compress(json.dumps(MESSAGE).encode())
        f.response = tutils.tresp(headers=[(b"content-type", b"application/json"), (b"content-encoding", b"gzip")])
        f.response.raw_content = raw
        chain.responseheaders(f)
        await chain.response(f)
        (rec,) = records(chain, tmp_path)
        assert rec["usage"] == USAGE and f.response.raw_content == raw


async def test_a_stream_passed_through_is_read_as_it_passes(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = await passed(chain, stream=True)
        f.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")], content=b"")
        f.response.raw_content = None
        chain.responseheaders(f)
        tap = f.response.stream
        assert callable(tap)
        out = b"".join(tap(STREAM[i:i + 7]) for i in range(0, len(STREAM), 7)) + tap(b"")
        assert out == STREAM  # the client's bytes as they came
        await chain.response(f)
        (rec,) = records(chain, tmp_path)
        assert rec["usage"] == USAGE


async def test_an_answer_without_usage_is_unreported_and_an_error_closes_the_record(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = await passed(chain)
        f.response = tutils.tresp(headers=[(b"content-type", b"application/json")],
                                  content=json.dumps({**MESSAGE, "usage": None}).encode())
        chain.responseheaders(f)
        await chain.response(f)
        g = await passed(chain)
        chain.error(g)
        first, second = records(chain, tmp_path)
        assert first["usage"] is None and first["usage_unreported"] == 1
        assert second["upstream"] == [] and second["usage"] is None
