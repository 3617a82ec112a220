"""Chat Completions stream codec: assembly, any chunking, SDK round trips, grammar."""

from __future__ import annotations

import json

import pytest
from tests.support.streams import decode, every_split, fixture, openai_chat_final, random_chunkings, strip_nones
from tooldisco.apis.openai_chat import stream as openai_chat
from tooldisco.apis.streaming import StreamError
from tooldisco.apis.framing.sse import SSEDecoder

FIXTURES = [("openai_chat_tools_usage.sse", True), ("openai_chat_refusal_no_usage.sse", False)]
# Fields the SDK's parsed models add on top of the wire object.
SDK_ADDED = frozenset({"parsed", "parsed_arguments"})


def sdk_view(completion: dict) -> dict:
    view = strip_nones(completion, SDK_ADDED)
    for choice in view["choices"]:
        for call in choice["message"].get("tool_calls", []):
            call.pop("index", None)
    return view


def chunk(choices: list, **extra: object) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt", "choices": choices}
    return b"data: " + json.dumps({**body, **extra}).encode() + b"\n\n"


def test_text_and_parallel_tool_calls_assemble() -> None:
    decoder, events = decode(openai_chat.ChatCompletionStreamDecoder, [fixture("openai_chat_tools_usage.sse")])
    completion = decoder.message()
    assert decoder.done and [e.type for e in events][-1] == "done"
    assert completion["object"] == "chat.completion"
    assert completion["id"] == "chatcmpl-CeQx9ZbHbVg3Sx1KZr5Q0Wq7aY2m"
    assert completion["service_tier"] == "default" and completion["system_fingerprint"] == "fp_b3f1157249"
    assert "obfuscation" not in completion
    (choice,) = completion["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["logprobs"] is None
    message = choice["message"]
    assert message["role"] == "assistant" and message["refusal"] is None
    assert message["content"] == "Checking both cities — Zürich and 東京."
    assert message["tool_calls"] == [
        {
            "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"location": "Zürich"}'},
        },
        {
            "id": "call_7QWlkPYnC3Xq2mZ0sR8tU4vB",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"location": "東京"}'},
        },
    ]
    assert completion["usage"]["total_tokens"] == 142


def test_refusal_without_usage() -> None:
    decoder, _ = decode(openai_chat.ChatCompletionStreamDecoder, [fixture("openai_chat_refusal_no_usage.sse")])
    message = decoder.message()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": None, "refusal": "I'm sorry, I can't help with that."}
    assert decoder.message()["usage"] is None


@pytest.mark.parametrize("name", [name for name, _ in FIXTURES])
def test_every_split_point_gives_the_same_result(name: str) -> None:
    body = fixture(name)
    decoder, expected = decode(openai_chat.ChatCompletionStreamDecoder, [body])
    for chunks in every_split(body):
        other, events = decode(openai_chat.ChatCompletionStreamDecoder, chunks)
        assert events == expected and other.message() == decoder.message()
    for chunks in random_chunkings(body, count=5):
        assert b"".join(e.raw for e in decode(openai_chat.ChatCompletionStreamDecoder, chunks)[1]) == body


@pytest.mark.parametrize(("name", "include_usage"), FIXTURES)
def test_matches_the_sdk_and_survives_the_sdk_round_trip(name: str, include_usage: bool) -> None:
    body = fixture(name)
    decoder, _ = decode(openai_chat.ChatCompletionStreamDecoder, [body])
    completion = decoder.message()
    assert sdk_view(openai_chat_final(body, chunk=13)) == strip_nones(completion)
    reencoded = openai_chat.encode(completion, include_usage)
    assert sdk_view(openai_chat_final(reencoded, chunk=3)) == strip_nones(completion)
    again, _ = decode(openai_chat.ChatCompletionStreamDecoder, [reencoded])
    assert again.message() == completion


@pytest.mark.parametrize("include_usage", [True, False])
def test_encoded_grammar(include_usage: bool) -> None:
    decoder, _ = decode(openai_chat.ChatCompletionStreamDecoder, [fixture("openai_chat_tools_usage.sse")])
    events = decode(SSEDecoder, [openai_chat.encode(decoder.message(), include_usage)])[1]
    assert all(e.event is None for e in events)
    assert events[-1].data == "[DONE]"
    chunks = [json.loads(e.data) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["id"] for c in chunks} == {"chatcmpl-CeQx9ZbHbVg3Sx1KZr5Q0Wq7aY2m"}
    if include_usage:
        assert all(c["usage"] is None for c in chunks[:-1])
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 142
        chunks = chunks[:-1]
    else:
        assert all("usage" not in c for c in chunks)
    deltas = [c["choices"][0] for c in chunks]
    assert deltas[0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert deltas[-1] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
    assert all(d["finish_reason"] is None for d in deltas[:-1])
    heads = [d["delta"]["tool_calls"][0] for d in deltas if "id" in d["delta"].get("tool_calls", [{}])[0]]
    assert [h["index"] for h in heads] == [0, 1]
    assert heads[0]["function"] == {"name": "get_weather", "arguments": ""}


def test_several_choices_interleaved_and_logprobs() -> None:
    token = {"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}
    body = (
        chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
        + chunk([{"index": 1, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
        + chunk([{"index": 1, "delta": {"content": "B"}, "logprobs": {"content": [token], "refusal": None}}])
        + chunk([{"index": 0, "delta": {"content": "A"}, "logprobs": None, "finish_reason": None}])
        + chunk([{"index": 1, "delta": {"content": "b"}, "logprobs": {"content": [token], "refusal": None}}])
        + chunk(
            [
                {"index": 0, "delta": {}, "finish_reason": "tool_calls"},
                {"index": 1, "delta": {}, "finish_reason": "stop"},
            ]
        )
        + b"data: [DONE]\n\n"
    )
    decoder, _ = decode(openai_chat.ChatCompletionStreamDecoder, [body])
    first, second = decoder.message()["choices"]
    assert (first["message"]["content"], first["finish_reason"]) == ("A", "tool_calls")
    assert (second["message"]["content"], second["finish_reason"]) == ("Bb", "stop")
    assert second["logprobs"] == {"content": [token, token], "refusal": None}
    completion = decoder.message()
    assert sdk_view(openai_chat_final(openai_chat.encode(completion, False))) == strip_nones(completion)


def test_error_after_200_is_exposed() -> None:
    body = chunk([{"index": 0, "delta": {"role": "assistant", "content": "x"}}]) + (
        b'data: {"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}\n\n'
    )
    decoder, events = decode(openai_chat.ChatCompletionStreamDecoder, [body])
    assert events[-1].type == "error"
    assert decoder.error["error"]["type"] == "server_error"
    with pytest.raises(StreamError):
        decoder.message()


def test_side_chunks_comments_and_garbage_do_not_break_assembly() -> None:
    body = (
        b": OPENROUTER PROCESSING\n\n"
        b'data: {"id":"","object":"","created":0,"model":"","choices":[],"prompt_filter_results":[]}\n\n'
        + chunk([{"index": 0, "delta": {"role": "assistant", "content": "ok"}}])
        + b"data: {not json\n\n"
        + chunk([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": "stop"}])
        + b"data: [DONE]\n\n"
    )
    decoder, events = decode(openai_chat.ChatCompletionStreamDecoder, [body])
    assert [e.type for e in events] == ["chunk", "chunk", "unknown", "chunk", "done"]
    completion = decoder.message()
    assert completion["id"] == "c1"
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": "ok", "refusal": None}
