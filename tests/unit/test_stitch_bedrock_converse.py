"""ConverseStream stitcher: the rounds of a phantom loop as one live stream of event-stream frames.

Oracles: our decoder (the stitched stream decodes to ``merge`` of the stripped rounds) and
boto3's ``bedrock-runtime`` client reading the stream as it reads a real response
(``converse_stream``: botocore's ``EventStream`` with the service model's output shape and
its event-stream JSON parser; CRCs checked; an exception frame raises ``EventStreamError``).
The scenarios every API shares run in test_stitch_contract.py on ``API``; here, what only
ConverseStream has.
"""

from __future__ import annotations

import json
from typing import Any

import botocore.exceptions
import pytest
from test_streams_support import boto3_events, fixture
from tooldisco.apis.bedrock.adapter import ConverseAdapter
from tooldisco.apis.base import Failure
from tooldisco.apis.bedrock.stream import ConverseStreamAssembler, converse_events, encode_converse
from tooldisco.apis.framing.eventstream import EventStreamDecoder, EventStreamError, Frame, encode_frame

from tests.support.stitch import CHUNKERS, P, Api, Chunker, chunker_id, drive, every_byte, stitched, whole

C = ConverseAdapter()


# -- upstream rounds ---------------------------------------------------------------------------


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def tool(id_: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": id_, "name": name, "input": arguments}}


def reasoning(value: str, signature: str) -> dict[str, Any]:
    return {"reasoningContent": {"reasoningText": {"text": value, "signature": signature}}}


def response(
    content: list[dict[str, Any]], stop: str, inp: int, out: int, latency: int, read: int = 0
) -> dict[str, Any]:
    usage = {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out + read}
    if read:
        usage |= {"cacheReadInputTokens": read, "cacheWriteInputTokens": 0}
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": usage,
        "metrics": {"latencyMs": latency},
    }


SEARCH_1 = response(
    [
        reasoning("I need a weather tool — none is loaded. 🌦", "SIG_one=="),
        text("Let me find the right tool."),
        tool("tooluse_phantom_1", P, {"query": "weather"}),
    ],
    "tool_use",
    100,
    30,
    400,
    read=1000,
)
SEARCH_2 = response([tool("tooluse_phantom_2", P, {"query": "forecast city"})], "tool_use", 160, 12, 500, read=1100)
ANSWER_CALL = response(
    [
        reasoning("Now get_weather is available.", "SIG_three=="),
        text("Found it: checking Paris."),
        tool("tooluse_weather", "get_weather", {"city": "Paris", "unit": "°C"}),
    ],
    "tool_use",
    220,
    40,
    600,
    read=1200,
)
ANSWER_TEXT = response([text("It is sunny in Paris, 21 °C.")], "end_turn", 210, 15, 700)
MIXED = response(
    [
        text("Two things at once."),
        tool("tooluse_phantom_m", P, {"query": "calendar"}),
        tool("tooluse_real_m", "read_file", {"path": "a.txt"}),
    ],
    "tool_use",
    90,
    25,
    300,
)
PHANTOM_IDS = (b"tooluse_phantom_1", b"tooluse_phantom_2", b"tooluse_phantom_m")
EVENT = {":content-type": "application/json", ":message-type": "event"}


def bedrock(m: dict[str, Any]) -> bytes:
    """The stream as Bedrock writes it: text and tool input in several deltas, spaced JSON,
    a random ``p`` padding field on every payload."""
    frames = []
    for number, (name, payload) in enumerate(converse_events(m)):
        delta = payload.get("delta", {})
        pieces = [payload]
        if "text" in delta or "toolUse" in delta:
            whole = delta["text"] if "text" in delta else delta["toolUse"]["input"]
            cut = len(whole) // 2
            wrap = (lambda s: {"text": s}) if "text" in delta else (lambda s: {"toolUse": {"input": s}})
            pieces = [{**payload, "delta": wrap(part)} for part in (whole[:cut], whole[cut:])]
        for piece in pieces:
            padded = {**piece, "p": "abcdefghijklmnopqrstuvwxyz"[: number % 26 + 1]}
            frames.append(encode_frame({":event-type": name, **EVENT}, json.dumps(padded).encode()))
    return b"".join(frames)


# -- oracles -----------------------------------------------------------------------------------


def expected(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return C.merge([C.strip(m, [P]) for m in rounds])


def boto3_view(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The events boto3's ``converse_stream`` yields, as (name, payload); raises on an exception frame."""
    return [next(iter(event.items())) for event in boto3_events("converse_stream", body, chunk=11)]


def check_grammar(events: list[tuple[str, dict[str, Any]]]) -> None:
    """One messageStart first; block indexes 0..n-1 in order of first sight, each block's
    events together and closed by its stop; one messageStop then one metadata, last."""
    names = [name for name, _ in events]
    assert names[0] == "messageStart" and names.count("messageStart") == 1
    assert names[-2:] == ["messageStop", "metadata"] and names.count("messageStop") == names.count("metadata") == 1
    order: list[int] = []
    closed: set[int] = set()
    for name, payload in events:
        if "contentBlockIndex" in payload:
            index = payload["contentBlockIndex"]
            assert index not in closed
            if index not in order:
                assert index == len(order) and (not order or order[-1] in closed)
                order.append(index)
            if name == "contentBlockStop":
                closed.add(index)
    assert closed == set(order)


def boto3_message(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """boto3's parsed events folded by our assembler: what a boto3 user reads, as one response."""
    assembler = ConverseStreamAssembler()
    for name, payload in events:
        assembler.apply(name, payload)
    return assembler.message()


def check(client: bytes, got: dict[str, Any]) -> None:
    events = boto3_view(client)
    check_grammar(events)
    assert boto3_message(events) == got


def frames(body: bytes) -> list[Frame]:
    return EventStreamDecoder().feed(body)


THROTTLED = {
    ":exception-type": "throttlingException",
    ":content-type": "application/json",
    ":message-type": "exception",
}
WAIT = "Too many requests, please wait before trying again."
EXCEPTION = encode_frame(THROTTLED, json.dumps({"message": WAIT}).encode())
CALL_FRAMES = [f.raw for f in frames(bedrock(ANSWER_CALL))]

API = Api(
    adapter=C,
    rounds={"search": bedrock(SEARCH_1), "search_2": bedrock(SEARCH_2), "call": bedrock(ANSWER_CALL),
            "text": bedrock(ANSWER_TEXT), "mixed": bedrock(MIXED)},
    error_round=(b"".join(CALL_FRAMES[:4]) + EXCEPTION, b"".join(CALL_FRAMES[4:])),
    plain=(fixture("bedrock_converse_tool.bin"), encode_converse(ANSWER_CALL), bedrock(ANSWER_TEXT),
           bedrock(ANSWER_CALL)),
    hidden=PHANTOM_IDS,
    expected=expected,
    check=check,
    sdk=boto3_view,
    sdk_error=botocore.exceptions.EventStreamError,
    stop=lambda m: m["stopReason"],
    stops=("tool_use", "end_turn"),
    ident=lambda m: None,  # a Converse stream carries no id
    usage=lambda m: {"usage": m["usage"], "metrics": m["metrics"]},
)


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
    client, ends = drive(C, [API.rounds["search"], b"".join(API.error_round)], every_byte)
    assert ends[-1].error == {"type": "throttlingException", "message": WAIT}
    assert client.endswith(EXCEPTION)
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


def test_a_round_without_metadata_is_incomplete() -> None:
    round1 = b"".join(f.raw for f in frames(bedrock(ANSWER_TEXT)) if f.event_type != "metadata")
    client, ends = drive(C, [round1])
    assert not ends[0].complete and ends[0].message is not None
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
