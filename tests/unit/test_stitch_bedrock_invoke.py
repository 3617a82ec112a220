"""InvokeModelWithResponseStream stitcher: Anthropic events in AWS event-stream frames.

Oracles: our decoder (``merge`` of the stripped rounds, invocation metrics summed),
botocore's event-stream parser as boto3 runs it (frames, CRCs, exception frames raise
``EventStreamError``) with the inner events folded by the anthropic SDK's own
``accumulate_event``, and the anthropic SDK's Bedrock client reading the whole stream.
The scenarios every API shares run in test_stitch_contract.py on ``API``; here, what only
InvokeModel's stream has.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import anthropic as anthropic_sdk
import botocore.exceptions
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from test_stitch_anthropic import ANSWER_CALL, ANSWER_TEXT, MIXED, PHANTOM_IDS, SEARCH_1, SEARCH_2, check_grammar, \
    expected, sdk_view
from test_streams_support import anthropic_bedrock_final, boto3_events, fixture
from tooldisco.apis.bedrock.adapter import InvokeAdapter
from tooldisco.apis.base import Failure
from tooldisco.apis.anthropic import stream as anthropic
from tooldisco.apis.bedrock.stream import METRICS, encode_invoke
from tooldisco.apis.framing.eventstream import EventStreamDecoder, EventStreamError, Frame, encode_frame

from tests.support.stitch import CHUNKERS, P, Api, Chunker, chunker_id, decoder_of, drive, every_byte, stitched, whole

INVOKE = InvokeAdapter(stream=True)


def metered(m: dict[str, Any], latency: int) -> dict[str, Any]:
    usage = m["usage"]
    metrics = {
        "inputTokenCount": usage["input_tokens"],
        "outputTokenCount": usage["output_tokens"],
        "invocationLatency": latency,
        "firstByteLatency": latency // 4,
    }
    return {**copy.deepcopy(m), METRICS: metrics}


R1, R2, R_CALL, R_TEXT, R_MIXED = (
    metered(m, 400 + 100 * i) for i, m in enumerate([SEARCH_1, SEARCH_2, ANSWER_CALL, ANSWER_TEXT, MIXED])
)


def chunk_frame(event: dict[str, Any], padding: str = "") -> bytes:
    """A chunk frame as Bedrock writes it: spaced inner JSON, a random ``p`` padding field."""
    payload: dict[str, Any] = {"bytes": base64.b64encode(json.dumps(event).encode()).decode()}
    if padding:
        payload["p"] = padding
    headers = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
    return encode_frame(headers, json.dumps(payload).encode())


def bedrock_body(m: dict[str, Any]) -> bytes:
    plain = {k: v for k, v in m.items() if k != METRICS}
    events = [e for e in anthropic.stream_events(plain) if e["type"] != "ping"]  # Bedrock sends no ping
    events[-1] = {**events[-1], METRICS: m[METRICS]}
    return b"".join(chunk_frame(e, "abcdefghij"[: i % 10]) for i, e in enumerate(events))


def unwrap(frame: Frame) -> dict[str, Any]:
    """The Anthropic event inside one chunk frame."""
    return json.loads(base64.b64decode(json.loads(frame.payload)["bytes"]))


def inner_events(body: bytes) -> list[dict[str, Any]]:
    """The Anthropic events boto3 parses out of the stream (raises on an exception frame)."""
    return [json.loads(event["chunk"]["bytes"]) for event in boto3_events("invoke", body, chunk=13)]


def sdk_accumulated(events: list[dict[str, Any]]) -> dict[str, Any]:
    snapshot = None
    for event in events:
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs={})  # type: ignore[arg-type]
    assert snapshot is not None
    return snapshot.to_dict()


def assert_no_phantom(client: bytes, events: list[dict[str, Any]]) -> None:
    text = json.dumps(events)
    assert P not in text and not any(call_id.decode() in text for call_id in PHANTOM_IDS)
    assert P.encode() not in client


def check(client: bytes, got: dict[str, Any]) -> None:
    events = inner_events(client)
    assert_no_phantom(client, events)
    check_grammar(events)
    assert events[-1][METRICS] == got[METRICS]
    plain = sdk_view({k: v for k, v in got.items() if k != METRICS})
    assert sdk_view(sdk_accumulated(events)) == plain
    assert sdk_view(anthropic_bedrock_final(client, chunk=9)) == plain


THROTTLED = {
    ":exception-type": "throttlingException",
    ":content-type": "application/json",
    ":message-type": "exception",
}
WAIT = "Too many requests, please wait before trying again."
OVERLOADED = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).encode()
TOO_MANY = encode_frame(THROTTLED, b'{"message":"Too many tokens, please wait."}')
TEXT_FRAMES = [f.raw for f in EventStreamDecoder().feed(encode_invoke(R_TEXT))]

API = Api(
    adapter=INVOKE,
    rounds={"search": encode_invoke(R1), "search_2": encode_invoke(R2), "call": encode_invoke(R_CALL),
            "text": encode_invoke(R_TEXT), "mixed": encode_invoke(R_MIXED)},
    error_round=(b"".join(TEXT_FRAMES[:3]) + TOO_MANY, b"".join(TEXT_FRAMES[3:])),
    plain=(fixture("bedrock_invoke_claude.bin"), encode_invoke(R_CALL), bedrock_body(R_TEXT)),
    hidden=tuple(PHANTOM_IDS),
    expected=lambda messages: expected(INVOKE, messages),
    check=check,
    sdk=anthropic_bedrock_final,
    sdk_error=anthropic_sdk.APIStatusError,
    stop=lambda m: m["stop_reason"],
    stops=("tool_use", "end_turn"),
    ident=lambda m: m["id"],
    usage=lambda m: {"usage": m["usage"], METRICS: m[METRICS]},
)


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
