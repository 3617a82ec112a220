"""Bedrock ConverseStream and InvokeModelWithResponseStream codecs, read back by boto3
and by the Anthropic SDK's Bedrock client."""

from __future__ import annotations

import base64
import json

import pytest
from tests.support.streams import (
    anthropic_bedrock_final,
    boto3_events,
    decode,
    every_split,
    fixture,
    random_chunkings,
)
from tooldisco.apis.anthropic import stream as anthropic
from tooldisco.apis.bedrock import stream as bedrock
from tooldisco.apis.streaming import StreamError
from tooldisco.apis.framing.eventstream import EventStreamDecoder, EventStreamError, encode_frame

pytest.importorskip("boto3")  # boto3 reads our streams back; a dev dependency of these tests


def converse() -> dict:
    decoder, _ = decode(bedrock.ConverseStreamDecoder, [fixture("bedrock_converse_tool.bin")])
    return decoder.message()


def from_boto3(events: list[dict]) -> dict:
    """boto3's parsed events ({name: payload}) folded by the assembler under test."""
    assembler = bedrock.ConverseStreamAssembler()
    for event in events:
        ((name, payload),) = event.items()
        assembler.apply(name, payload)
    return assembler.message()


def test_converse_stream_assembles_the_converse_response() -> None:
    decoder, events = decode(bedrock.ConverseStreamDecoder, [fixture("bedrock_converse_tool.bin")])
    assert decoder.done and events[0].type == "messageStart" and events[-1].type == "metadata"
    assert "p" not in events[0].data  # Bedrock's padding is dropped
    assert decoder.message() == {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "reasoningContent": {
                            "reasoningText": {
                                "text": "The user wants Paris weather; call get_weather — in °C.",
                                "signature": "ErcBCkgIBhABGAIiQMx3bW9ja1NpZ25hdHVyZUZvclRlc3Rz",
                            }
                        }
                    },
                    {"text": "Checking the weather in Paris — 🌦."},
                    {
                        "toolUse": {
                            "name": "get_weather",
                            "toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                            "input": {"location": "Paris", "unit": "celsius"},
                        }
                    },
                ],
            }
        },
        "stopReason": "tool_use",
        "metrics": {"latencyMs": 2318},
        "usage": {
            "cacheReadInputTokens": 1024,
            "cacheWriteInputTokens": 0,
            "inputTokens": 412,
            "outputTokens": 96,
            "totalTokens": 1532,
        },
    }


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("bedrock_converse_tool.bin", bedrock.ConverseStreamDecoder),
        ("bedrock_invoke_claude.bin", bedrock.InvokeStreamDecoder),
    ],
)
def test_every_split_point_gives_the_same_result(name: str, make: type) -> None:
    body = fixture(name)
    decoder, expected = decode(make, [body])
    for chunks in [*every_split(body), *random_chunkings(body, count=5)]:
        other, events = decode(make, chunks)
        assert events == expected and other.message() == decoder.message()


def test_boto3_reads_the_same_converse_response_before_and_after_re_encoding() -> None:
    response = converse()
    assert from_boto3(boto3_events("converse_stream", fixture("bedrock_converse_tool.bin"))) == response
    encoded = bedrock.encode_converse(response)
    parsed = boto3_events("converse_stream", encoded, chunk=5)
    assert from_boto3(parsed) == response
    # botocore's service model kept every field we sent: nothing unknown or misplaced
    assert [next(iter(event.items())) for event in parsed] == bedrock.converse_events(response)
    again, _ = decode(bedrock.ConverseStreamDecoder, [encoded])
    assert again.message() == response


def test_converse_encoded_grammar() -> None:
    frames = EventStreamDecoder().feed(bedrock.encode_converse(converse()))
    assert [f.event_type for f in frames] == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "contentBlockDelta",
        "contentBlockStop",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert {f.headers[":message-type"] for f in frames} == {"event"}
    assert {f.headers[":content-type"] for f in frames} == {"application/json"}
    start = json.loads(frames[6].payload)
    assert start == {
        "start": {"toolUse": {"name": "get_weather", "toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"}},
        "contentBlockIndex": 2,
    }
    assert json.loads(json.loads(frames[7].payload)["delta"]["toolUse"]["input"]) == {
        "location": "Paris",
        "unit": "celsius",
    }


def test_other_converse_blocks_round_trip() -> None:
    redacted = base64.b64encode(b"\x00\x01opaque").decode()
    response = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"redactedContent": redacted}},
                    {"toolUse": {"toolUseId": "t1", "name": "noargs", "input": {}}},
                    {
                        "toolResult": {
                            "toolUseId": "srv1",
                            "type": "web_search",
                            "status": "success",
                            "content": [{"text": "r"}],
                        }
                    },
                    {
                        "citationsContent": {
                            "content": [{"text": "Cited claim."}],
                            "citations": [
                                {
                                    "title": "Doc",
                                    "source": "s3://b/k",
                                    "location": {"documentChar": {"documentIndex": 0, "start": 0, "end": 5}},
                                }
                            ],
                        }
                    },
                ],
            }
        },
        "stopReason": "end_turn",
        "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3},
        "metrics": {"latencyMs": 10},
        "additionalModelResponseFields": {"stop_sequence": None},
    }
    encoded = bedrock.encode_converse(response)
    decoder, _ = decode(bedrock.ConverseStreamDecoder, [encoded])
    assert decoder.message() == response
    parsed = boto3_events("converse_stream", encoded)
    assert parsed[1]["contentBlockDelta"]["delta"]["reasoningContent"]["redactedContent"] == b"\x00\x01opaque"


def test_redacted_content_pieces_join_as_bytes() -> None:
    assembler = bedrock.ConverseStreamAssembler()
    assembler.apply("messageStart", {"role": "assistant"})
    for piece in (b"ab", b"cde"):
        delta = {"reasoningContent": {"redactedContent": base64.b64encode(piece).decode()}}
        assembler.apply("contentBlockDelta", {"contentBlockIndex": 0, "delta": delta})
    block = assembler.message()["output"]["message"]["content"][0]
    assert base64.b64decode(block["reasoningContent"]["redactedContent"]) == b"abcde"


def test_unexpressible_block_is_refused() -> None:
    response = {"output": {"message": {"role": "assistant", "content": [{"document": {"name": "x"}}]}}}
    with pytest.raises(ValueError, match="document"):
        bedrock.encode_converse(response)


def test_exception_frame_is_exposed() -> None:
    decoder, events = decode(bedrock.ConverseStreamDecoder, [fixture("bedrock_converse_throttled.bin")])
    assert events[-1].type == "throttlingException"
    assert decoder.error == {
        "type": "throttlingException",
        "message": "Too many requests, please wait before trying again.",
    }
    assert events[-1].raw == fixture("bedrock_converse_throttled.bin")[-len(events[-1].raw) :]
    with pytest.raises(StreamError):
        decoder.message()


def test_corrupt_frame_raises() -> None:
    body = bytearray(fixture("bedrock_converse_tool.bin"))
    body[100] ^= 0xFF
    with pytest.raises(EventStreamError):
        decode(bedrock.ConverseStreamDecoder, [bytes(body)])


def test_invoke_stream_reuses_the_anthropic_assembler() -> None:
    body = fixture("bedrock_invoke_claude.bin")
    decoder, events = decode(bedrock.InvokeStreamDecoder, [body])
    message = decoder.message()
    assert decoder.done and events[-1].type == "message_stop"
    assert "amazon-bedrock-invocationMetrics" in events[-1].data  # kept in the event
    assert message["content"][1]["input"] == {"query": "event stream"}
    assert message["usage"]["output_tokens"] == 57
    assert message[bedrock.METRICS] == events[-1].data[bedrock.METRICS]  # kept on the message too
    plain = {k: v for k, v in message.items() if k != bedrock.METRICS}
    assert anthropic_bedrock_final(body, chunk=9) == {**plain, "stop_details": None}


def test_invoke_round_trip_through_boto3_and_the_anthropic_bedrock_client() -> None:
    decoder, _ = decode(bedrock.InvokeStreamDecoder, [fixture("bedrock_invoke_claude.bin")])
    message = decoder.message()
    encoded = bedrock.encode_invoke(message)
    inner = [json.loads(event["chunk"]["bytes"]) for event in boto3_events("invoke", encoded)]
    plain = {k: v for k, v in message.items() if k != bedrock.METRICS}
    expected = anthropic.stream_events(plain)
    assert inner[:-1] == expected[:-1]
    assert inner[-1] == {**expected[-1], bedrock.METRICS: message[bedrock.METRICS]}  # back on message_stop
    assert anthropic_bedrock_final(encoded, chunk=4) == {**plain, "stop_details": None}
    again, _ = decode(bedrock.InvokeStreamDecoder, [encoded])
    assert again.message() == message


def test_invoke_exception_and_unknown_frames() -> None:
    body = encode_frame({":event-type": "somethingNew", ":message-type": "event"}, b"{}") + encode_frame(
        {":exception-type": "modelStreamErrorException", ":message-type": "exception"},
        b'{"message":"boom","originalStatusCode":500}',
    )
    decoder, events = decode(bedrock.InvokeStreamDecoder, [body])
    assert [e.type for e in events] == ["somethingNew", "modelStreamErrorException"]
    assert decoder.error == {"type": "modelStreamErrorException", "message": "boom", "originalStatusCode": 500}
