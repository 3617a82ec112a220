"""The real rounds of a stitched turn, recorded by the runner (buffered and live) and restored
by the planner on the client's next request."""

import json

import pytest

from tooldisco.engine import rounds
from tooldisco.apis.anthropic.stream import encode

from tests.support.runner import (
    FORECAST, KEY, A, P, body, chunked, collect, decoded, engine, message, search_call, whole,  # noqa: F401
)

LOOKING = {"type": "text", "text": "looking"}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_r", "content": "sunny"}]}


def next_turn(shown_content, stream=False):
    """The client's next request: its first one, the answer it was shown, its tool's result."""
    data = json.loads(body(stream=stream))
    data["messages"] += [{"role": "assistant", "content": shown_content}, RESULT]
    return json.dumps(data, indent=2).encode()  # an SDK's own serialization


async def buffered_turn(engine, headers=KEY):
    """Round one searches, round two calls the found tool; the client's merged answer."""
    sent = []

    async def open_(b):
        sent.append(json.loads(b))
        return whole(message(FORECAST, msg_id="msg_2"))

    ctx = engine.prepare(A, headers, body()).context
    out = await engine.runner(ctx).buffered(whole(message(LOOKING, search_call())), open_)
    return json.loads(out.body), sent[-1]


def assert_restored(prepared, reforward, client):
    forwarded = json.loads(prepared.body)["messages"]
    real = reforward["messages"]  # the user turn, round one, the hidden search result
    assert forwarded[:len(real)] == real
    assert forwarded[len(real)] == {"role": "assistant", "content": [FORECAST]}  # round two, as the client saw it
    assert forwarded[len(real) + 1:] == [RESULT]
    assert prepared.context.record.restored == 1
    assert prepared.context.original == client  # the fail-open resend is the client's own body


async def test_buffered_turn_is_restored_on_the_next_request(engine):
    merged, reforward = await buffered_turn(engine)
    assert merged["content"] == [LOOKING, FORECAST]
    client = next_turn(merged["content"])
    assert_restored(engine.prepare(A, KEY, client), reforward, client)


async def test_live_turn_is_restored_on_the_next_request(engine):
    reforwards = []

    async def open_(b):
        reforwards.append(json.loads(b))
        return chunked(encode(message(FORECAST, msg_id="msg_2")))

    ctx = engine.prepare(A, KEY, body(stream=True)).context
    _, out = await collect(engine.runner(ctx).live(chunked(encode(message(LOOKING, search_call()))), open_))
    shown = decoded(out)["content"]  # what the client assembled from the stitched stream
    assert shown == [LOOKING, FORECAST]
    client = next_turn(shown, stream=True)
    assert_restored(engine.prepare(A, KEY, client), reforwards[-1], client)


async def test_an_edited_answer_passes_as_the_client_sent_it(engine):
    merged, _ = await buffered_turn(engine)
    client = next_turn([{"type": "text", "text": "looking (edited)"}, FORECAST])
    prepared = engine.prepare(A, KEY, client)
    assert prepared.context.record.restored == 0
    assert [m["role"] for m in json.loads(prepared.body)["messages"]] == ["user", "assistant", "user"]


async def test_another_tenant_never_gets_the_rounds(engine):
    merged, _ = await buffered_turn(engine)
    prepared = engine.prepare(A, {"x-api-key": "sk-other"}, next_turn(merged["content"]))
    assert prepared.context.record.restored == 0


async def test_rounds_over_the_cap_are_not_kept(engine, monkeypatch):
    monkeypatch.setattr(rounds, "MAX_ROUNDS_BYTES", 100)
    merged, _ = await buffered_turn(engine)
    assert engine.prepare(A, KEY, next_turn(merged["content"])).context.record.restored == 0


async def test_a_turn_without_a_search_keeps_nothing(engine, monkeypatch):
    kept = []
    monkeypatch.setattr(engine.store, "keep_rounds", lambda *a: kept.append(a))
    ctx = engine.prepare(A, KEY, body()).context
    await engine.runner(ctx).buffered(whole(message({"type": "text", "text": "hi"}, stop="end_turn")), None)
    assert kept == []


@pytest.mark.parametrize("stream", [False, True])
async def test_the_record_is_written_before_the_client_has_the_answer(engine, monkeypatch, stream):
    """The client may send its next turn the moment it reads the end of this one."""
    kept = []
    real = engine.store.keep_rounds
    monkeypatch.setattr(engine.store, "keep_rounds", lambda *a: (kept.append(a), real(*a)))

    async def open_(b):
        if stream:
            return chunked(encode(message(FORECAST, msg_id="msg_2")))
        return whole(message(FORECAST, msg_id="msg_2"))

    ctx = engine.prepare(A, KEY, body(stream=stream)).context
    runner = engine.runner(ctx)
    if stream:
        items = runner.live(chunked(encode(message(LOOKING, search_call()))), open_)
        async for item in items:
            if isinstance(item, bytes) and b"message_stop" in item:
                assert kept  # written before the closing event went out
    else:
        await runner.buffered(whole(message(LOOKING, search_call())), open_)
    assert len(kept) == 1 and P in kept[0][3][0]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_mixed_turn_goes_on_with_its_search_answered(engine, stream):
    """Round one searched and called a client tool at once: nothing is re-forwarded, the
    client gets the call. On its next request the model's turn goes upstream as it was
    made, the search's result first in the client's results turn."""
    mixed = message(LOOKING, search_call(), FORECAST)

    async def never(b):
        raise AssertionError("a mixed round is never re-forwarded")

    ctx = engine.prepare(A, KEY, body(stream=stream)).context
    runner = engine.runner(ctx)
    if stream:
        _, out = await collect(runner.live(chunked(encode(mixed)), never))
        shown = decoded(out)["content"]
    else:
        shown = json.loads((await runner.buffered(whole(mixed), never)).body)["content"]
    assert shown == [LOOKING, FORECAST]
    prepared = engine.prepare(A, KEY, next_turn(shown, stream=stream))
    assert prepared.context.record.restored == 1
    sent = json.loads(prepared.body)["messages"]
    assert sent[1] == {"role": "assistant", "content": [LOOKING, search_call(), FORECAST]}
    results = sent[2]["content"]
    assert [b["tool_use_id"] for b in results] == ["toolu_s", "toolu_r"]
    assert "mcp__weather__get_forecast" in json.dumps(results[0]) and results[1] == RESULT["content"][0]


async def test_live_chat_turn_matches_what_the_client_assembled(engine):
    """A stream's text is what the client reads from it (rounds' texts run on), not a JSON
    answer's merge: the record is keyed by the client's own assembly of the stitched stream."""
    from tests.support.catalog import openai_tools
    from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter

    chat = OpenAIChatAdapter()

    def completion(text, call, cid):
        msg = {"role": "assistant", "content": text,
               "tool_calls": [{"id": cid, "type": "function", "function": {"name": call, "arguments": '{"query":"x"}'}}]}
        return {"id": cid, "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}

    first = {"model": "m", "stream": True, "tools": openai_tools(60),
             "messages": [{"role": "user", "content": "forecast for Paris?"}]}

    async def open_(b):
        return chunked(chat.encode_stream(completion("Calling.", "mcp__weather__get_forecast", "c2")))

    ctx = engine.prepare(chat, KEY, json.dumps(first).encode()).context
    _, out = await collect(engine.runner(ctx).live(chunked(chat.encode_stream(completion("Looking.", P, "c1"))), open_))
    d = chat.decoder()
    d.feed(out)
    d.feed(b"")
    shown = d.message()["choices"][0]["message"]
    client = dict(first, messages=first["messages"] + [
        {"role": "assistant", "content": shown["content"],
         "tool_calls": [{"id": tc["id"], "type": "function", "function": tc["function"]} for tc in shown["tool_calls"]]},
        {"role": "tool", "tool_call_id": "c2", "content": "sunny"}])
    prepared = engine.prepare(chat, KEY, json.dumps(client).encode())
    assert prepared.context.record.restored == 1
    sent = json.loads(prepared.body)["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == P and sent[1]["content"] == "Looking."
