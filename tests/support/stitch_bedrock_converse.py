"""Helpers ``tests/unit/apis/bedrock/test_stitch_converse.py`` and other unit tests share."""

from __future__ import annotations

import json
from typing import Any
import botocore.exceptions
from tests.support.streams import boto3_events, fixture
from tooldisco.apis.bedrock.adapter import ConverseAdapter
from tooldisco.apis.bedrock.stream import ConverseStreamAssembler, converse_events, encode_converse
from tooldisco.apis.framing.eventstream import EventStreamDecoder, Frame, encode_frame
from tests.support.stitch import P, Api


C = ConverseAdapter()


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
