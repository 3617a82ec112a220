"""The stream path's rule, on real recordings and on the orders real providers send
(``apis.base``: a round that hides nothing passes every upstream byte as it came; a stitched
turn keeps every event it does not change, in its order; nothing is made up).

In-process: the stitchers of Anthropic, OpenAI Chat and Responses fed real recorded streams
(``tests/conformance/recordings``) cut anywhere, and hand-cut streams in the orders the real
providers were seen to send (a trailing moderation chunk, usage before the finish, an error
after two ``length`` finishes, ``event: error``, data-only Responses with ``[DONE]``, a
``message_start`` holding a call and no ``message_delta``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tooldisco.apis.anthropic.stitch import AnthropicStitcher
from tooldisco.apis.base import Stitcher
from tooldisco.apis.openai_chat.stitch import ChatStitcher
from tooldisco.apis.openai_responses.stitch import ResponsesStitcher
from tests.conformance.replay import Recording, echoing_request, load
from tests.support.streams import random_chunkings

PHANTOM = "gateway_search_tools"
MAKERS = {
    "anthropic": lambda rec: AnthropicStitcher(PHANTOM),
    "openai_chat": lambda rec: ChatStitcher(PHANTOM),
    "openai_responses": lambda rec: ResponsesStitcher(PHANTOM, echoing_request(rec)),
}
STREAMS = [r for r in load() if r.stream and r.status == 200 and r.api in MAKERS]


def one_round(stitcher: Stitcher, chunks: list[bytes]) -> bytes:
    """What the client gets of a turn whose only round is ``chunks`` (the runner's calls)."""
    out = b"".join(stitcher.feed(c) for c in chunks)
    end = stitcher.end_round()
    if (end.message is None or not end.complete) and not stitcher.untouched and end.error is None:
        return out + b"<the runner fails it>"
    return out + stitcher.finish()


@pytest.mark.parametrize("rec", STREAMS, ids=lambda r: r.id)
def test_a_recorded_stream_without_search_passes_byte_for_byte(rec: Recording) -> None:
    for chunks in random_chunkings(rec.body, count=3):
        stitcher = MAKERS[rec.api](rec)
        assert one_round(stitcher, chunks) == rec.body
        assert stitcher.untouched


def sse(*events: Any, named: bool = False, done: bool = False) -> bytes:
    out = b""
    for e in events:
        head = f"event: {e['type']}\n".encode() if named and isinstance(e, dict) and "type" in e else b""
        out += head + b"data: " + json.dumps(e).encode() + b"\n\n"
    return out + (b"data: [DONE]\n\n" if done else b"")


CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chat(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {**CHUNK, "choices": choices, **extra}


HELD_OUT_ORDERS = {
    # OpenAI: a moderation chunk after the finish and the usage chunk.
    "moderation after finish": sse(chat({"role": "assistant", "content": "hi"}), chat({}, "stop"),
                                   chat(None, usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
                                   {**CHUNK, "choices": [], "moderation": {"flagged": False}}, done=True),
    # OpenRouter: the usage chunk before the chunk with the finish reason.
    "usage before finish": sse(chat({"role": "assistant", "content": "hi"}),
                               chat({"content": ""}, usage={"prompt_tokens": 1, "completion_tokens": 1,
                                                            "total_tokens": 2}),
                               chat({}, "stop"), done=True),
    # An error chunk after two length finishes: the reasoning reaches the client first.
    "error after length": sse(chat({"role": "assistant", "reasoning": "think"}), chat({}, "length"),
                              chat({}, "length"), {"error": {"message": "boom", "code": 502}}, done=True),
    # Groq: an error event, and nothing after it.
    "groq event error": sse(chat({"role": "assistant", "content": "x"}))
    + b'event: error\ndata: {"error":{"message":"tool_use_failed","type":"invalid_request_error"}}\n\n',
}


@pytest.mark.parametrize("name", HELD_OUT_ORDERS)
def test_chat_orders_pass_as_sent(name: str) -> None:
    body = HELD_OUT_ORDERS[name]
    for chunks in random_chunkings(body, count=5):
        assert one_round(ChatStitcher(PHANTOM), chunks) == body


def test_a_data_only_responses_stream_keeps_its_framing_and_done() -> None:
    response = {"id": "r1", "object": "response", "status": "in_progress", "output": []}
    item = {"type": "message", "id": "m1", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
    body = sse({"type": "response.created", "response": response},
               {"type": "response.output_item.added", "output_index": 0, "item": item},
               {"type": "response.output_item.done", "output_index": 0, "item": item},
               {"type": "response.completed", "response": {**response, "status": "completed", "output": [item]}},
               done=True)
    for chunks in random_chunkings(body, count=5):
        assert one_round(ResponsesStitcher(PHANTOM, ""), chunks) == body


def test_a_responses_error_stream_keeps_its_failed_event_and_numbers() -> None:
    response = {"id": "r1", "object": "response", "status": "in_progress", "output": []}
    body = sse({"type": "response.created", "sequence_number": 5, "response": response},
               {"type": "error", "sequence_number": 9, "error": {"code": "insufficient_quota", "message": "q"}},
               {"type": "response.failed", "sequence_number": 12, "response": {**response, "status": "failed"}},
               named=True)
    assert one_round(ResponsesStitcher(PHANTOM, ""), [body]) == body


def test_a_call_in_message_start_without_message_delta_passes_and_survives_stitching() -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "rollDie", "input": {"player": "p2"},
            "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}}
    start = {"type": "message_start", "message": {"id": "msg_2", "type": "message", "role": "assistant",
                                                  "model": "claude-sonnet-4-5", "content": [call],
                                                  "stop_reason": "tool_use", "stop_sequence": None,
                                                  "usage": {"input_tokens": 0, "output_tokens": 0}}}
    round_two = sse(start, {"type": "message_stop"}, named=True)
    assert one_round(AnthropicStitcher(PHANTOM), [round_two]) == round_two

    search = {"type": "tool_use", "id": "toolu_s", "name": PHANTOM, "input": {}}
    round_one = sse({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                          "model": "m", "content": [], "stop_reason": None,
                                                          "usage": {"input_tokens": 5, "output_tokens": 1}}},
                    {"type": "content_block_start", "index": 0, "content_block": search},
                    {"type": "content_block_delta", "index": 0,
                     "delta": {"type": "input_json_delta", "partial_json": '{"query":"die"}'}},
                    {"type": "content_block_stop", "index": 0},
                    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
                    {"type": "message_stop"}, named=True)
    stitcher = AnthropicStitcher(PHANTOM)
    out = stitcher.feed(round_one)
    assert stitcher.end_round().complete
    stitcher.next_round()
    out += stitcher.feed(round_two)
    stitcher.end_round()
    out += stitcher.finish()
    from tests.support.streams import anthropic_final
    final = anthropic_final(out)
    assert final["content"] == [call]
    assert final["stop_reason"] == "tool_use"
    assert PHANTOM.encode() not in out


def test_chat_held_end_keeps_its_order_when_a_search_was_hidden() -> None:
    """A round that hid the search call holds its end; what came after the finish (the usage
    chunk, a moderation chunk) stays after it when the loop ends there."""
    call = {"index": 0, "id": "call_s", "type": "function", "function": {"name": PHANTOM, "arguments": "{}"}}
    usage = chat(None, usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2})
    moderation = {**CHUNK, "choices": [], "moderation": {"flagged": False}}
    body = sse(chat({"role": "assistant", "content": "hi", "tool_calls": [call]}), chat({}, "tool_calls"),
               usage, moderation, done=True)
    stitcher = ChatStitcher(PHANTOM)
    out = stitcher.feed(body)
    stitcher.end_round()
    out += stitcher.finish()
    kinds = [json.loads(line[6:]) if line != b"data: [DONE]" else "DONE"
             for line in out.split(b"\n\n") if line.startswith(b"data: ")]
    assert kinds[-1] == "DONE"
    assert kinds[-2] == moderation and kinds[-3]["usage"] and kinds[-4]["choices"][0]["finish_reason"] == "stop"
