"""InvokeModelWithResponseStream stitcher: Anthropic events in AWS event-stream frames.

Oracles: our decoder (``merge`` of the stripped rounds, invocation metrics summed),
botocore's event-stream parser as boto3 runs it (frames, CRCs, exception frames raise
``EventStreamError``) with the inner events folded by the anthropic SDK's own
``accumulate_event``, and the anthropic SDK's Bedrock client reading the whole stream.
The scenarios every API shares run in apis/test_stitch_contract.py on ``API``; here, what only
InvokeModel's stream has.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic as anthropic_sdk
import botocore.exceptions
import pytest
from tests.support.stitch_anthropic import check_grammar, \
    expected
from tests.support.streams import anthropic_bedrock_final
from tooldisco.apis.base import Failure
from tooldisco.apis.bedrock.stream import METRICS, encode_invoke
from tooldisco.apis.framing.eventstream import EventStreamDecoder, EventStreamError, Frame

from tests.support.stitch import CHUNKERS, P, Chunker, chunker_id, decoder_of, drive, every_byte, stitched, whole
from tests.support.stitch_bedrock_invoke import (
    API,
    INVOKE,
    R1,
    R_CALL,
    R_TEXT,
    TOO_MANY,
    assert_no_phantom,
    bedrock_body,
    inner_events,
)


def unwrap(frame: Frame) -> dict[str, Any]:
    """The Anthropic event inside one chunk frame."""
    return json.loads(base64.b64decode(json.loads(frame.payload)["bytes"]))


WAIT = "Too many requests, please wait before trying again."
OVERLOADED = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).encode()


# -- stitched rounds ---------------------------------------------------------------------------


def test_invocation_metrics_are_summed_over_rounds() -> None:
    _, got, _ = stitched(API, [API.rounds["search"], API.rounds["call"]])
    assert got["id"] == "msg_round1" and got["stop_reason"] == "tool_use"
    assert [b["type"] for b in got["content"]] == ["thinking", "text", "thinking", "text", "tool_use"]
    assert got["usage"]["input_tokens"] == 320 and got["usage"]["output_tokens"] == 70
    sums = {"inputTokenCount": 320, "outputTokenCount": 70, "invocationLatency": 1000, "firstByteLatency": 250}
    assert got[METRICS] == sums
    _, got, _ = stitched(API, [API.rounds["search"], API.rounds["search_2"], API.rounds["text"]])
    assert got[METRICS]["invocationLatency"] == 400 + 500 + 700


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_padded_upstream_frames_stitch(chunker: Chunker) -> None:
    client, _ = drive(INVOKE, [bedrock_body(R1), bedrock_body(R_CALL)], chunker)
    events = inner_events(client)
    assert_no_phantom(client, events)
    check_grammar(events)
    assert decoder_of(INVOKE, client).message() == expected(INVOKE, [R1, R_CALL])


def test_frames_go_out_with_the_feed_that_completes_them() -> None:
    stitcher = INVOKE.stitcher(P, "{}")
    for k, m in enumerate([R1, R_CALL], 1):
        hidden = next((i for i, b in enumerate(m["content"]) if b.get("name") == P), None)
        for frame in EventStreamDecoder().feed(encode_invoke(m)):
            data = unwrap(frame)
            visible = not (
                data["type"] in ("message_delta", "message_stop")
                or (data["type"] == "message_start" and k > 1)
                or ("index" in data and data["index"] == hidden)
            )
            returned = [stitcher.feed(frame.raw[i : i + 1]) for i in range(len(frame.raw))]
            assert not any(returned[:-1]) and bool(returned[-1]) == visible
        assert stitcher.end_round().complete
        if k == 1:
            stitcher.next_round()
    closing = EventStreamDecoder().feed(stitcher.finish())
    assert [unwrap(f)["type"] for f in closing] == ["message_delta", "message_stop"]


# -- errors ------------------------------------------------------------------------------------


def test_an_exception_frame_in_round_two_reaches_both_sdks() -> None:
    client, ends = drive(INVOKE, [API.rounds["search"], API.error_round[0]], every_byte)
    assert ends[-1].error == {"type": "throttlingException", "message": "Too many tokens, please wait."}
    assert client.endswith(TOO_MANY)
    with pytest.raises(botocore.exceptions.EventStreamError) as raised:
        inner_events(client)
    assert raised.value.response["Error"]["Code"] == "throttlingException"
    with pytest.raises(anthropic_sdk.APIStatusError) as sdk_raised:
        anthropic_bedrock_final(client)
    assert sdk_raised.value.body["error"]["type"] == "throttlingException"


@pytest.mark.parametrize(
    ("status", "body", "kind", "text"),
    [
        (429, json.dumps({"message": WAIT}).encode(), "throttlingException", WAIT),
        (429, b"", "throttlingException", "upstream answered HTTP 429"),
        (503, b"", "serviceUnavailableException", "upstream answered HTTP 503"),
        (529, OVERLOADED, "serviceUnavailableException", "Overloaded"),
        (500, b"oops", "internalServerException", "upstream answered HTTP 500"),
        (504, b"", "modelTimeoutException", "upstream answered HTTP 504"),
        (400, b'{"message":"bad input"}', "validationException", "bad input"),
    ],
)
@pytest.mark.parametrize("chunker", [whole, every_byte], ids=chunker_id)
def test_fail_after_round_one_sends_an_exception_frame(
    status: int, body: bytes, kind: str, text: str, chunker: Chunker
) -> None:
    client, _ = drive(INVOKE, [API.rounds["search"]], chunker, failure=Failure(status, body))
    frames = EventStreamDecoder().feed(client)
    assert frames[-1].message_type == "exception" and frames[-1].headers[":exception-type"] == kind
    assert json.loads(frames[-1].payload) == {"message": text}
    assert all(f.message_type == "event" for f in frames[:-1])
    with pytest.raises(botocore.exceptions.EventStreamError) as raised:
        inner_events(client)
    assert raised.value.response["Error"] == {"Code": kind, "Message": text}
    with pytest.raises(anthropic_sdk.APIStatusError):
        anthropic_bedrock_final(client)


def test_a_round_ending_inside_a_frame_ends_with_an_internal_server_exception() -> None:
    round2 = API.rounds["call"]
    client, _ = drive(INVOKE, [API.rounds["search"], round2[: len(round2) // 2]], every_byte)
    frames = EventStreamDecoder().feed(client)
    assert frames[-1].headers[":exception-type"] == "internalServerException"
    assert json.loads(frames[-1].payload) == {"message": "upstream stream ended early"}
    with pytest.raises(botocore.exceptions.EventStreamError):
        inner_events(client)


def test_a_corrupt_frame_raises_for_the_runner_to_fail() -> None:
    stitcher = INVOKE.stitcher(P, "{}")
    body = bytearray(encode_invoke(R_TEXT))
    body[40] ^= 0xFF
    with pytest.raises(EventStreamError):
        stitcher.feed(bytes(body))
    frames = EventStreamDecoder().feed(stitcher.fail(Failure(502, message="tool discovery failed mid-stream")))
    assert frames[0].headers[":exception-type"] == "internalServerException"
