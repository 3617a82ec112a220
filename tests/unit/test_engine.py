"""The engine façade without a proxy: prepare, the loop driver, fail-open paths, warm-up."""

import json

import pytest

from tooldisco.config import parse
from tooldisco.engine import Engine, Reply
from tooldisco.providers.anthropic import AnthropicAdapter

from tests.support.catalog import anthropic_tools

A = AnthropicAdapter()
P = "gateway_search_tools"


@pytest.fixture
def engine(tmp_path):
    e = Engine(parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search",
                                                   "search": {"backend": "bm25"}}},
                      "sessions": {"dir": str(tmp_path / "s")}, "telemetry": {"path": str(tmp_path / "t.jsonl")}}))
    yield e
    e.close()


def body(text="forecast for Paris?"):
    return json.dumps({"model": "m", "max_tokens": 9, "tools": anthropic_tools(60),
                       "messages": [{"role": "user", "content": text}]}).encode()


def message(*blocks, stop="tool_use"):
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": list(blocks),
            "stop_reason": stop, "usage": {"input_tokens": 10, "output_tokens": 2}}


def search_call(query="weather forecast"):
    return {"type": "tool_use", "id": "toolu_s", "name": P, "input": {"query": query}}


def reply(msg, status=200):
    return Reply(status, json.dumps(msg).encode(), "application/json")


async def test_warm_up_builds_the_index_once_per_catalog(engine, monkeypatch):
    seen = []
    monkeypatch.setattr(engine.searcher, "rank", lambda q, tools, limit: seen.append(len(tools)))
    first = engine.prepare(A, {}, body())
    assert first.background is not None
    await first.background()
    assert seen == [60]
    assert engine.prepare(A, {}, body("another conversation")).background is None  # same catalog


async def test_no_phantom_call_leaves_the_answer_alone(engine):
    ctx = engine.prepare(A, {}, body()).context
    assert await engine.complete(ctx, reply(message({"type": "text", "text": "hi"}, stop="end_turn")), None) is None


async def test_a_4xx_on_a_reforward_resends_the_clients_own_request(engine):
    prepared = engine.prepare(A, {}, body())
    sent = []

    async def send(b):
        sent.append(b)
        if len(sent) == 1:
            return Reply(400, b'{"type":"error","error":{"type":"invalid_request_error","message":"no"}}',
                         "application/json", [("request-id", "r1")])
        return reply(message({"type": "text", "text": "plain answer"}, stop="end_turn"))

    out = await engine.complete(prepared.context, reply(message(search_call())), send)
    assert sent[1] == body() and json.loads(out.body)["content"][0]["text"] == "plain answer"
    assert not out.merged
    rec = json.loads(engine.telemetry._path.read_text().splitlines()[-1])
    assert rec["fallback_reason"] == "reforward_400_original_sent"


async def test_a_5xx_on_a_reforward_reaches_the_client_with_its_headers(engine):
    prepared = engine.prepare(A, {}, body())

    async def send(b):
        return Reply(529, b'{"type":"error","error":{"type":"overloaded_error"}}', "application/json",
                     [("retry-after", "3")])

    out = await engine.complete(prepared.context, reply(message(search_call())), send)
    assert out.status == 529 and ("retry-after", "3") in out.headers and P.encode() not in out.body


async def test_an_undecodable_first_answer_passes_through(engine):
    ctx = engine.prepare(A, {}, body()).context
    assert await engine.complete(ctx, Reply(200, b"not json", "application/json"), None) is None


async def test_a_merged_answer_sums_usage_and_hides_the_search(engine):
    prepared = engine.prepare(A, {}, body())

    async def send(b):
        sent = json.loads(b)
        assert "mcp__weather__get_forecast" in [t["name"] for t in sent["tools"]]
        return reply(message({"type": "tool_use", "id": "toolu_r", "name": "mcp__weather__get_forecast",
                              "input": {"city": "Paris"}}))

    out = await engine.complete(prepared.context, reply(message(search_call())), send)
    data = json.loads(out.body)
    assert out.merged and data["usage"] == {"input_tokens": 20, "output_tokens": 4} and P not in out.body.decode()


async def test_a_bug_mid_loop_still_hides_the_search(engine, monkeypatch):
    prepared = engine.prepare(A, {}, body())

    async def send(b):
        raise RuntimeError("network stack exploded")

    first = message({"type": "text", "text": "let me look"}, search_call())
    out = await engine.complete(prepared.context, reply(first), send)
    data = json.loads(out.body)
    assert data["content"] == [{"type": "text", "text": "let me look"}] and data["stop_reason"] == "end_turn"
