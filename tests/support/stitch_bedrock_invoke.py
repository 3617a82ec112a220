"""Helpers ``tests/unit/apis/bedrock/test_stitch_invoke.py`` and other unit tests share."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any
import anthropic as anthropic_sdk
from anthropic.lib.streaming._messages import accumulate_event
from tests.support.stitch_anthropic import ANSWER_CALL, ANSWER_TEXT, MIXED, PHANTOM_IDS, SEARCH_1, SEARCH_2, check_grammar, \
    expected, sdk_view
from tests.support.streams import anthropic_bedrock_final, boto3_events, fixture
from tooldisco.apis.bedrock.adapter import InvokeAdapter
from tooldisco.apis.anthropic import stream as anthropic
from tooldisco.apis.bedrock.stream import METRICS, encode_invoke
from tooldisco.apis.framing.eventstream import EventStreamDecoder, encode_frame
from tests.support.stitch import P, Api


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
