"""Helpers ``tests/unit/engine/test_runner.py`` and other unit tests share."""

from __future__ import annotations

import json
import pytest
from tooldisco.config import parse
from tooldisco.engine.engine import Engine
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.core.answers import Answer, Head
from tooldisco.apis.anthropic.stream import AnthropicStreamDecoder
from tests.support.catalog import anthropic_tools


A = AnthropicAdapter()


P = "gateway_search_tools"


KEY = {"x-api-key": "sk-test"}


@pytest.fixture
def engine(tmp_path):
    e = Engine(parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search",
                                                   "search": {"backend": "bm25"}}},
                      "sessions": {"dir": str(tmp_path / "s")}, "telemetry": {"path": str(tmp_path / "t.jsonl")}}))
    yield e
    e.close()


def body(text="forecast for Paris?", stream=False):
    return json.dumps({"model": "m", "max_tokens": 9, "tools": anthropic_tools(60), "stream": stream,
                       "messages": [{"role": "user", "content": text}]}).encode()


def message(*blocks, stop="tool_use", msg_id="msg_1"):
    return {"id": msg_id, "type": "message", "role": "assistant", "model": "m", "content": list(blocks),
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 2}}


def search_call(query="weather forecast"):
    return {"type": "tool_use", "id": "toolu_s", "name": P, "input": {"query": query}}


FORECAST = {"type": "tool_use", "id": "toolu_r", "name": "mcp__weather__get_forecast", "input": {"city": "Paris"}}


def whole(msg, status=200, headers=None):
    return Answer.whole(status, json.dumps(msg).encode(), headers or [("content-type", "application/json")])


def chunked(data: bytes, size: int = 7) -> Answer:
    async def gen():
        for i in range(0, len(data), size):
            yield data[i:i + size]

    closed = []

    async def close():
        closed.append(True)

    answer = Answer(200, [("content-type", "text/event-stream")], gen(), close)
    answer.closed = closed  # type: ignore[attr-defined]
    return answer


async def collect(items):
    head, out = None, []
    async for item in items:
        if isinstance(item, Head):
            head = item
        else:
            out.append(item)
    return head, b"".join(out)


def decoded(data: bytes):
    d = AnthropicStreamDecoder()
    d.feed(data)
    d.feed(b"")
    assert d.done
    return d.message()
