"""Helpers ``tests/unit/apis/anthropic/test_stitch.py`` and other unit tests share."""

from __future__ import annotations

import json
from typing import Any
import anthropic as anthropic_sdk
from tests.support.streams import anthropic_final, fixture
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.anthropic import stream as anthropic
from tooldisco.apis.framing.sse import SSEDecoder
from tests.support.stitch import P, Api


A = AnthropicAdapter()


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def call(id_: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": id_, "name": name, "input": arguments}


def thinking(value: str, signature: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": signature}


def message(id_: str, content: list[dict[str, Any]], stop: str, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": id_,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def usage(inp: int, out: int, read: int = 0, searches: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "cache_creation_input_tokens": 7,
        "cache_read_input_tokens": read,
        "output_tokens": out,
        "server_tool_use": {"web_search_requests": searches},
        "service_tier": "standard",
    }


SEARCH_1 = message(
    "msg_round1",
    [
        thinking("I need a weather tool — none loaded. 🌦", "SIG_one=="),
        text("Let me find the right tool."),
        call("toolu_phantom_1", P, {"query": "weather"}),
    ],
    "tool_use",
    usage(100, 30, read=1000, searches=1),
)


SEARCH_2 = message(
    "msg_round2",
    [{"type": "redacted_thinking", "data": "EmwKAhgBEgy3"}, call("toolu_phantom_2", P, {"query": "forecast city"})],
    "tool_use",
    usage(160, 12, read=1100),
)


ANSWER_CALL = message(
    "msg_round3",
    [
        thinking("Now get_weather is available.", "SIG_three=="),
        text("Found it: checking Paris."),
        call("toolu_weather", "get_weather", {"city": "Paris", "unit": "°C"}),
    ],
    "tool_use",
    usage(220, 40, read=1200, searches=2),
)


ANSWER_TEXT = message("msg_round_text", [text("It is sunny in Paris, 21 °C.")], "end_turn", usage(210, 15, read=1200))


MIXED = message(
    "msg_mixed",
    [
        text("Two things at once."),
        call("toolu_phantom_m", P, {"query": "calendar"}),
        call("toolu_real_m", "read_file", {"path": "a.txt"}),
    ],
    "tool_use",
    usage(90, 25),
)


PHANTOM_IDS = [b"toolu_phantom_1", b"toolu_phantom_2", b"toolu_phantom_m"]


def expected(adapter: Any, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return adapter.merge([adapter.strip(m, [P]) for m in rounds])


def sse_events(body: bytes) -> list[dict[str, Any]]:
    events = SSEDecoder().feed(body) + SSEDecoder().feed(b"")
    parsed = [json.loads(e.data) for e in events]
    assert all(p["type"] == e.event for p, e in zip(parsed, events))
    return parsed


def check_grammar(events: list[dict[str, Any]], closed: bool = True) -> None:
    """One message_start first; block indexes 0..n-1 in order, each delta/stop on a started
    block; with ``closed``, exactly one message_delta and message_stop, last."""
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds.count("message_start") == 1
    starts = [e["index"] for e in events if e["type"] == "content_block_start"]
    assert starts == list(range(len(starts)))
    for position, event in enumerate(events):
        if event["type"] in ("content_block_delta", "content_block_stop"):
            assert event["index"] in [e["index"] for e in events[:position] if e["type"] == "content_block_start"]
    if closed:
        assert kinds.count("message_delta") == 1 and kinds.count("message_stop") == 1
        assert kinds[-2:] == ["message_delta", "message_stop"]


def sdk_view(message: dict[str, Any]) -> dict[str, Any]:
    """The SDK always sets ``stop_details`` (None) on its snapshot; the wire need not carry it."""
    out = dict(message)
    if out.get("stop_details", 0) is None:
        del out["stop_details"]
    return out


def check(client: bytes, got: dict[str, Any]) -> None:
    check_grammar(sse_events(client))
    assert sdk_view(anthropic_final(client, chunk=7)) == got


UPSTREAM_ERROR = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
    "request_id": "req_1",
}


def broken(m: dict[str, Any], keep: int) -> bytes:
    """``m``'s first ``keep`` events, then an upstream ``error`` event."""
    events = anthropic.stream_events(m)[:keep] + [UPSTREAM_ERROR]
    return b"".join(anthropic.encode_event_object(e) for e in events)


API = Api(
    adapter=A,
    rounds={"search": anthropic.encode(SEARCH_1), "search_2": anthropic.encode(SEARCH_2),
            "call": anthropic.encode(ANSWER_CALL), "text": anthropic.encode(ANSWER_TEXT),
            "mixed": anthropic.encode(MIXED)},
    error_round=(broken(ANSWER_TEXT, keep=4), anthropic.encode_event_object({"type": "ping"})),
    plain=(fixture("anthropic_thinking_tool.sse"), fixture("anthropic_server_tools_crlf.sse"),
           anthropic.encode(ANSWER_CALL)),
    hidden=tuple(PHANTOM_IDS),
    expected=lambda messages: expected(A, messages),
    check=check,
    sdk=lambda client: anthropic_final(client, chunk=5),
    sdk_error=anthropic_sdk.APIStatusError,
    stop=lambda m: m["stop_reason"],
    stops=("tool_use", "end_turn"),
    ident=lambda m: m["id"],
    usage=lambda m: m["usage"],
)
