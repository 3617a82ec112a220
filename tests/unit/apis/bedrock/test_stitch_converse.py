"""ConverseStream stitcher: the rounds of a phantom loop as one live stream of event-stream frames.

Oracles: our decoder (the stitched stream decodes to ``merge`` of the stripped rounds) and
boto3's ``bedrock-runtime`` client reading the stream as it reads a real response
(``converse_stream``: botocore's ``EventStream`` with the service model's output shape and
its event-stream JSON parser; CRCs checked; an exception frame raises ``EventStreamError``).
The scenarios every API shares run in apis/test_stitch_contract.py on ``API``; here, what only
ConverseStream has.
"""

from __future__ import annotations

import json

import botocore.exceptions
import pytest
from tests.support.streams import fixture
from tooldisco.apis.base import Failure
from tooldisco.apis.bedrock.stream import encode_converse
from tooldisco.apis.framing.eventstream import EventStreamDecoder, EventStreamError, encode_frame

from tests.support.stitch import CHUNKERS, P, Chunker, chunker_id, drive, every_byte, stitched, whole
from tests.support.stitch_bedrock_converse import (
    ANSWER_CALL,
    ANSWER_TEXT,
    API,
    C,
    EVENT,
    EXCEPTION,
    MIXED,
    SEARCH_1,
    SEARCH_2,
    WAIT,
    bedrock,
    boto3_view,
    expected,
    frames,
    text,
    tool,
)


# -- upstream rounds ---------------------------------------------------------------------------


# -- oracles -----------------------------------------------------------------------------------


# -- stitched rounds ---------------------------------------------------------------------------


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_our_own_encoding_stitches_too(chunker: Chunker) -> None:
    """The rounds as ``encode_converse`` writes them (one delta per block, no padding)."""
    _, got, _ = stitched(API, [encode_converse(SEARCH_1), encode_converse(ANSWER_CALL)], chunker)
    assert got == expected([SEARCH_1, ANSWER_CALL])


def test_reasoning_signatures_usage_and_metrics_of_every_round() -> None:
    _, got, _ = stitched(API, [API.rounds["search"], API.rounds["call"]])
    assert [next(iter(b)) for b in got["output"]["message"]["content"]] == [
        "reasoningContent", "text", "reasoningContent", "text", "toolUse"
    ]
    assert got["output"]["message"]["content"][0] == SEARCH_1["output"]["message"]["content"][0]  # signature kept
    assert got["usage"] == {
        "inputTokens": 320,
        "outputTokens": 70,
        "totalTokens": 2590,
        "cacheReadInputTokens": 2200,
        "cacheWriteInputTokens": 0,
    }
    assert got["metrics"] == {"latencyMs": 1000}
    _, got, _ = stitched(API, [API.rounds["search"], API.rounds["search_2"], API.rounds["text"]])
    assert got["stopReason"] == "end_turn" and got["metrics"] == {"latencyMs": 400 + 500 + 700}
    assert got["usage"]["inputTokens"] == 100 + 160 + 210


def test_mixed_round_renumbers_the_real_call() -> None:
    client, got, _ = stitched(API, [API.rounds["mixed"]], every_byte)
    real = tool("tooluse_real_m", "read_file", {"path": "a.txt"})
    assert got["output"]["message"]["content"] == [text("Two things at once."), real]
    starts = [p for n, p in boto3_view(client) if n == "contentBlockStart"]
    assert [p["contentBlockIndex"] for p in starts] == [1]


def test_frames_go_out_with_the_feed_that_completes_them() -> None:
    stitcher = C.stitcher(P, "{}")
    for k, m in enumerate([SEARCH_1, SEARCH_2, MIXED], 1):
        hidden = {i for i, b in enumerate(m["output"]["message"]["content"]) if b.get("toolUse", {}).get("name") == P}
        for frame in EventStreamDecoder().feed(bedrock(m)):
            data = json.loads(frame.payload)
            visible = not (
                frame.event_type in ("messageStop", "metadata")
                or (frame.event_type == "messageStart" and k > 1)
                or data.get("contentBlockIndex") in hidden
            )
            returned = [stitcher.feed(frame.raw[i : i + 1]) for i in range(len(frame.raw))]
            assert not any(returned[:-1]) and bool(returned[-1]) == visible, (k, frame.event_type)
        assert stitcher.end_round().complete
        if k < 3:
            stitcher.next_round()
    closing = EventStreamDecoder().feed(stitcher.finish())
    assert [(f.event_type, json.loads(f.payload).get("stopReason")) for f in closing] == [
        ("messageStop", "tool_use"), ("metadata", None)
    ]


# -- errors ------------------------------------------------------------------------------------


def test_an_exception_frame_in_round_two_reaches_boto3_as_it_came() -> None:
    """The exception frame as it came, and what the upstream sent after it too: nothing added."""
    upto_error, after = API.error_round
    client, ends = drive(C, [API.rounds["search"], upto_error + after], every_byte)
    assert ends[-1].error == {"type": "throttlingException", "message": WAIT}
    assert client.endswith(EXCEPTION + after)
    with pytest.raises(botocore.exceptions.EventStreamError) as raised:
        boto3_view(client)
    assert raised.value.response["Error"] == {"Code": "throttlingException", "Message": WAIT}


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_an_upstream_exception_in_round_one_passes_byte_for_byte(chunker: Chunker) -> None:
    body = fixture("bedrock_converse_throttled.bin")
    stitcher = C.stitcher(P, "{}")
    client = b"".join(stitcher.feed(chunk) for chunk in chunker(body))
    end = stitcher.end_round()
    assert client == body and end.error["type"] == "throttlingException" and not end.complete
    assert stitcher.finish() == b"" and stitcher.fail(Failure(502)) == b""  # the stream is over


@pytest.mark.parametrize(
    ("status", "body", "kind", "text"),
    [
        (429, json.dumps({"message": WAIT}).encode(), "throttlingException", WAIT),
        (429, b"", "throttlingException", "upstream answered HTTP 429"),
        (503, b'{"message":"Bedrock is unable to process your request."}', "serviceUnavailableException",
         "Bedrock is unable to process your request."),
        (529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
         "serviceUnavailableException", "Overloaded"),
        (500, b"oops", "internalServerException", "upstream answered HTTP 500"),
        (504, b"", "modelStreamErrorException", "upstream answered HTTP 504"),
        (400, b'{"message":"The model returned the following errors: bad input"}', "validationException",
         "The model returned the following errors: bad input"),
    ],
)
@pytest.mark.parametrize("chunker", [whole, every_byte], ids=chunker_id)
def test_fail_after_round_one_sends_an_exception_frame(
    status: int, body: bytes, kind: str, text: str, chunker: Chunker
) -> None:
    client, _ = drive(C, [API.rounds["search"]], chunker, failure=Failure(status, body))
    sent = frames(client)
    assert sent[-1].message_type == "exception" and sent[-1].headers[":exception-type"] == kind
    assert json.loads(sent[-1].payload) == {"message": text}
    assert all(f.message_type == "event" for f in sent[:-1])
    assert "messageStop" not in [f.event_type for f in sent]  # never an empty success
    with pytest.raises(botocore.exceptions.EventStreamError) as raised:
        boto3_view(client)
    assert raised.value.response["Error"] == {"Code": kind, "Message": text}


def test_a_round_ending_inside_a_frame_ends_with_an_internal_server_exception() -> None:
    round2 = API.rounds["call"]
    client, _ = drive(C, [API.rounds["search"], round2[: len(round2) // 2]], every_byte)
    sent = frames(client)
    assert sent[-1].headers[":exception-type"] == "internalServerException"
    assert json.loads(sent[-1].payload) == {"message": "upstream stream ended early"}


def without_metadata(m: dict) -> bytes:
    return b"".join(f.raw for f in frames(bedrock(m)) if f.event_type != "metadata")


def metadata_first(m: dict) -> bytes:
    """``m`` with ``metadata`` before ``messageStop``, as some real streams send them."""
    sent = frames(bedrock(m))
    return b"".join(f.raw for f in sent[:-2] + [sent[-1], sent[-2]])


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
@pytest.mark.parametrize("shape", [without_metadata, metadata_first])
def test_a_round_ending_after_message_stop_without_metadata_or_before_it_is_complete(shape, chunker) -> None:
    body = shape(ANSWER_TEXT)
    client, ends = drive(C, [body], chunker)
    assert ends[0].complete and client == body  # passed as it came, nothing made up
    client, ends = drive(C, [API.rounds["search"], body], chunker)
    assert ends[-1].complete and ends[-1].message is not None
    sent = boto3_view(client)
    closing = [name for name, _ in sent if name in ("messageStop", "metadata")]
    assert closing == [f.event_type for f in frames(body) if f.event_type in ("messageStop", "metadata")]
    merged = expected([SEARCH_1, ANSWER_TEXT])
    if shape is without_metadata:  # no metadata made up: the client reads no usage
        merged = {k: v for k, v in merged.items() if k not in ("usage", "metrics")}
    assert decode(client) == merged


def decode(body: bytes) -> dict:
    decoder = C.decoder()
    decoder.feed(body)
    decoder.feed(b"")
    return decoder.message()


def test_a_round_is_complete_only_once_both_closing_frames_came_or_the_body_ended() -> None:
    sent = frames(bedrock(ANSWER_TEXT))
    decoder = C.decoder()
    decoder.feed(b"".join(f.raw for f in sent[:-1]))  # messageStop, not yet metadata
    assert not decoder.done
    decoder.feed(b"")
    assert decoder.done
    decoder = C.decoder()
    decoder.feed(b"".join(f.raw for f in sent[:-2] + [sent[-1]]))  # metadata, not yet messageStop
    assert not decoder.done
    decoder.feed(b"")
    assert not decoder.done  # a message never stopped is not complete


def test_a_round_without_message_stop_is_incomplete() -> None:
    round2 = b"".join(f.raw for f in frames(bedrock(ANSWER_TEXT)) if f.event_type != "messageStop")
    client, ends = drive(C, [API.rounds["search"], round2])
    assert not ends[-1].complete and ends[-1].message is not None
    assert frames(client)[-1].message_type == "exception"


def test_a_corrupt_frame_raises_for_the_runner_to_fail() -> None:
    stitcher = C.stitcher(P, "{}")
    body = bytearray(bedrock(ANSWER_TEXT))
    body[40] ^= 0xFF
    with pytest.raises(EventStreamError):
        stitcher.feed(bytes(body))
    sent = frames(stitcher.fail(Failure(502, message="tool discovery failed mid-stream")))
    assert sent[0].headers[":exception-type"] == "internalServerException"
    assert json.loads(sent[0].payload) == {"message": "tool discovery failed mid-stream"}


def test_changed_frames_drop_the_padding_and_keep_valid_crcs() -> None:
    client, _ = drive(C, [API.rounds["search"], API.rounds["call"]])
    sent = frames(client)  # raises on a bad CRC
    renumbered = [f for f in sent if json.loads(f.payload).get("contentBlockIndex", 0) >= 2]
    assert renumbered and all("p" not in json.loads(f.payload) for f in renumbered)
    assert all(f.headers == {":event-type": f.event_type, **EVENT} for f in sent)


# -- held frames -------------------------------------------------------------------------------


FUTURE = encode_frame({":event-type": "futureEvent", **EVENT}, b'{"x":1}')  # a frame we do not know


def with_future_frame(m: dict) -> bytes:
    """``m`` with an unknown frame between ``messageStop`` and ``metadata``."""
    sent = frames(bedrock(m))
    return b"".join(f.raw for f in sent[:-1]) + FUTURE + sent[-1].raw


def test_a_round_without_search_passes_its_closing_frames_at_once() -> None:
    stitcher = C.stitcher(P, "{}")
    for frame in frames(with_future_frame(ANSWER_TEXT)):
        assert stitcher.feed(frame.raw) == frame.raw
    assert stitcher.end_round().complete and stitcher.untouched and stitcher.finish() == b""


def test_once_a_round_hid_a_block_every_frame_from_its_first_closing_one_is_held_in_order() -> None:
    stitcher = C.stitcher(P, "{}")
    out = stitcher.feed(with_future_frame(SEARCH_1))
    assert b"messageStop" not in out and FUTURE not in out and b"metadata" not in out
    assert stitcher.end_round().complete and not stitcher.untouched
    closing = frames(stitcher.finish())
    assert [f.event_type for f in closing] == ["messageStop", "futureEvent", "metadata"]
    assert json.loads(closing[0].payload) == {"stopReason": "end_turn"}  # the client saw no call
    assert closing[1].raw == FUTURE and closing[2].raw == frames(bedrock(SEARCH_1))[-1].raw  # as they came


def test_next_round_drops_the_held_closing_frames_and_sends_the_others() -> None:
    stitcher = C.stitcher(P, "{}")
    stitcher.feed(with_future_frame(SEARCH_1))
    stitcher.end_round()
    stitcher.next_round()
    out = stitcher.feed(bedrock(ANSWER_TEXT))
    assert out.startswith(FUTURE)  # in the place of the closing frames, before round two's
    stitcher.end_round()
    names = [f.event_type for f in frames(out + stitcher.finish())]
    assert names.count("messageStop") == names.count("metadata") == 1 and names[-2:] == ["messageStop", "metadata"]


def test_an_exception_after_held_frames_follows_them() -> None:
    """The held closing frames go out in their place, then the upstream's exception: nothing of
    the stream is reordered, and nothing is added after it."""
    sent = frames(bedrock(SEARCH_1))
    stitcher = C.stitcher(P, "{}")
    out = stitcher.feed(b"".join(f.raw for f in sent[:-1]))  # up to messageStop: held
    assert b"messageStop" not in out
    out = stitcher.feed(EXCEPTION)
    assert [f.event_type or f.headers[":exception-type"] for f in frames(out)] == ["messageStop", "throttlingException"]
    assert stitcher.feed(sent[-1].raw) == sent[-1].raw  # after the exception: as it came
    assert stitcher.end_round().error == {"type": "throttlingException", "message": WAIT}
    assert stitcher.finish() == b"" and stitcher.fail(Failure(502)) == b""
