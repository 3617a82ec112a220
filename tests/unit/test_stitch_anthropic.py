"""Anthropic stitcher: the rounds of a phantom loop as one live client SSE stream.

Oracles: our decoder (the stitched stream decodes to ``merge`` of the stripped rounds)
and the official SDK's ``messages.stream()`` (it accepts the stream, and its final
message has no phantom trace, consecutive indexes, summed usage, the right stop reason).
Every case runs under several chunkings: whole, every byte, seeded random splits.
The builders here are shared with the InvokeModel stitcher's tests.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

import anthropic as anthropic_sdk
import pytest
from test_streams_support import anthropic_final, fixture
from tooldisco.providers.anthropic import AnthropicAdapter
from tooldisco.stitch import Failure, RoundEnd
from tooldisco.streams import anthropic
from tooldisco.streams.sse import SSEDecoder

P = "gateway_search_tools"
A = AnthropicAdapter()
Chunker = Callable[[bytes], list[bytes]]


# -- upstream rounds ---------------------------------------------------------------------------


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


# -- chunkings and the runner ------------------------------------------------------------------


def whole(body: bytes) -> list[bytes]:
    return [body]


def every_byte(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


def random_splits(seed: int) -> Chunker:
    def split(body: bytes) -> list[bytes]:
        rng = random.Random(seed + len(body))
        chunks, pos = [], 0
        while pos < len(body):
            step = rng.randint(1, rng.choice([3, 17, 200]))
            chunks.append(body[pos : pos + step])
            pos += step
        return chunks

    split.__name__ = f"random_{seed}"
    return split


CHUNKERS = [whole, every_byte, random_splits(1), random_splits(2), random_splits(3)]


def drive(
    adapter: Any,
    rounds: list[bytes],
    chunker: Chunker,
    max_rounds: int = 5,
    failure: Failure | None = None,
) -> tuple[bytes, list[RoundEnd]]:
    """Feed ``rounds`` the way the runner does. A phantom-only round with rounds left is
    re-forwarded; when no upstream round follows it, the re-forward answers ``failure``."""
    stitcher = adapter.stitcher(P, "{}")
    out = bytearray()
    ends: list[RoundEnd] = []
    for k, body in enumerate(rounds, 1):
        for chunk in chunker(body):
            out += stitcher.feed(chunk)
        end = stitcher.end_round()
        ends.append(end)
        if end.error is not None:
            break
        if not end.complete:
            out += stitcher.fail(Failure(502, message="upstream stream ended early"))
            break
        calls = adapter.calls(end.message)
        if not (calls and all(c.name == P for c in calls) and k < max_rounds):
            assert k == len(rounds), "the loop ended before every upstream round was used"
            out += stitcher.finish()
            break
        if k == len(rounds):
            assert failure is not None, "a re-forward needs an upstream round or a failure"
            out += stitcher.fail(failure)
            break
        stitcher.next_round()
    return bytes(out), ends


# -- oracles -----------------------------------------------------------------------------------


def decoded(adapter: Any, body: bytes) -> dict[str, Any]:
    decoder = adapter.decoder()
    decoder.feed(body)
    decoder.feed(b"")
    assert decoder.done
    return decoder.message()


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


def assert_no_phantom(client: bytes) -> None:
    assert P.encode() not in client
    assert not any(call_id in client for call_id in PHANTOM_IDS)


def check_stitched(rounds: list[dict[str, Any]], chunker: Chunker, **kwargs: Any) -> tuple[bytes, dict[str, Any]]:
    """Both oracles on the stitched stream of ``rounds``; returns the client bytes and message."""
    client, ends = drive(A, [anthropic.encode(m) for m in rounds], chunker, **kwargs)
    assert [end.message for end in ends] == rounds  # the decoder's own assembly, phantom calls included
    assert all(end.complete and end.error is None for end in ends)
    assert_no_phantom(client)
    check_grammar(sse_events(client))
    got = decoded(A, client)
    assert got == expected(A, rounds)
    assert sdk_view(anthropic_final(client, chunk=7)) == got
    return client, got


# -- no search: byte identity ------------------------------------------------------------------


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", ["anthropic_thinking_tool.sse", "anthropic_server_tools_crlf.sse"])
def test_a_round_without_search_is_forwarded_byte_for_byte(name: str, chunker: Chunker) -> None:
    body = fixture(name)
    client, ends = drive(A, [body], chunker)
    assert client == body
    assert ends[0].message == decoded(A, body)


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
def test_our_own_encoding_without_search_is_byte_identical(chunker: Chunker) -> None:
    body = anthropic.encode(ANSWER_CALL)
    assert drive(A, [body], chunker)[0] == body


# -- stitched rounds ---------------------------------------------------------------------------


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
def test_one_search_then_a_visible_call(chunker: Chunker) -> None:
    _, got = check_stitched([SEARCH_1, ANSWER_CALL], chunker)
    assert got["id"] == "msg_round1"
    assert [b["type"] for b in got["content"]] == ["thinking", "text", "thinking", "text", "tool_use"]
    assert got["content"][0]["signature"] == "SIG_one==" and got["content"][2]["signature"] == "SIG_three=="
    assert got["stop_reason"] == "tool_use"
    assert got["usage"]["input_tokens"] == 320 and got["usage"]["output_tokens"] == 70
    assert got["usage"]["cache_read_input_tokens"] == 2200 and got["usage"]["cache_creation_input_tokens"] == 14
    assert got["usage"]["server_tool_use"] == {"web_search_requests": 3}


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
def test_two_searches_then_text(chunker: Chunker) -> None:
    _, got = check_stitched([SEARCH_1, SEARCH_2, ANSWER_TEXT], chunker)
    assert [b["type"] for b in got["content"]] == ["thinking", "text", "redacted_thinking", "text"]
    assert got["stop_reason"] == "end_turn"
    assert got["usage"]["input_tokens"] == 470 and got["usage"]["output_tokens"] == 57


def test_the_sdk_final_usage_is_the_sum_over_rounds() -> None:
    client, _ = drive(A, [anthropic.encode(m) for m in (SEARCH_1, SEARCH_2, ANSWER_CALL)], whole)
    usage = anthropic_final(client)["usage"]
    assert usage["input_tokens"] == 480 and usage["output_tokens"] == 82
    assert usage["cache_creation_input_tokens"] == 21 and usage["cache_read_input_tokens"] == 3300
    assert usage["server_tool_use"] == {"web_search_requests": 3}


def test_the_cache_creation_breakdown_stays_round_ones_in_the_sdk() -> None:
    """Documented limit: the SDK reads ``usage.cache_creation`` from message_start only."""
    rounds = copy.deepcopy([SEARCH_1, ANSWER_TEXT])
    for m in rounds:
        m["usage"]["cache_creation"] = {"ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 0}
    client, _ = drive(A, [anthropic.encode(m) for m in rounds], whole)
    assert decoded(A, client)["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] == 14
    assert anthropic_final(client)["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] == 7


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
def test_mixed_round_streams_the_real_call_and_drops_the_phantom(chunker: Chunker) -> None:
    body = anthropic.encode(MIXED)
    client, _ = check_stitched([MIXED], chunker)
    events = sse_events(client)
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [(e["index"], e["content_block"].get("name")) for e in starts] == [(0, None), (1, "read_file")]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    upstream_closing = SSEDecoder().feed(body)[-2:]
    assert client.endswith(b"".join(e.raw for e in upstream_closing))  # unchanged: forwarded as they came


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
def test_max_loops_hides_the_search_and_ends_the_turn(chunker: Chunker) -> None:
    _, got = check_stitched([SEARCH_1], chunker, max_rounds=1)
    assert got["stop_reason"] == "end_turn"
    assert [b["type"] for b in got["content"]] == ["thinking", "text"]
    assert got["usage"] == SEARCH_1["usage"]


def test_events_go_out_with_the_feed_that_completes_them() -> None:
    """Live: each visible event is returned by the feed of its last byte, nothing earlier;
    phantom blocks and the closing events return nothing."""
    stitcher = A.stitcher(P, "{}")
    for k, m in enumerate([SEARCH_1, ANSWER_CALL], 1):
        body = anthropic.encode(m)
        hidden_index = next((i for i, b in enumerate(m["content"]) if b.get("name") == P), None)
        for event in SSEDecoder().feed(body):
            data = json.loads(event.data)
            visible = not (
                data["type"] in ("message_delta", "message_stop")
                or (data["type"] == "message_start" and k > 1)
                or ("index" in data and data["index"] == hidden_index)
            )
            returned = [stitcher.feed(event.raw[i : i + 1]) for i in range(len(event.raw))]
            assert not any(returned[:-1])
            assert bool(returned[-1]) == visible
            if visible:
                assert json.loads(SSEDecoder().feed(returned[-1])[0].data)["type"] == data["type"]
        assert stitcher.end_round().complete
        if k == 1:
            stitcher.next_round()
    closing = sse_events(stitcher.finish())
    assert [e["type"] for e in closing] == ["message_delta", "message_stop"]


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
def test_an_unterminated_last_event_goes_out_terminated(chunker: Chunker) -> None:
    """The SSE decoder dispatches a last event without its blank line at the end of the body;
    its raw bytes would run into whatever follows, so it is re-encoded."""
    rounds = [anthropic.encode(SEARCH_1), anthropic.encode(ANSWER_TEXT)]
    client, ends = drive(A, [body.removesuffix(b"\n\n") for body in rounds], chunker)
    assert all(end.complete for end in ends)
    assert client == drive(A, rounds, whole)[0]
    assert sdk_view(anthropic_final(client)) == decoded(A, client) == expected(A, [SEARCH_1, ANSWER_TEXT])


# -- errors ------------------------------------------------------------------------------------

UPSTREAM_ERROR = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
    "request_id": "req_1",
}


def broken(m: dict[str, Any], keep: int) -> bytes:
    """``m``'s first ``keep`` events, then an upstream ``error`` event."""
    events = anthropic.stream_events(m)[:keep] + [UPSTREAM_ERROR]
    return b"".join(anthropic.encode_event_object(e) for e in events)


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
def test_an_error_event_in_round_two_is_passed_on_at_once(chunker: Chunker) -> None:
    round2 = broken(ANSWER_TEXT, keep=4)  # message_start, ping, block start, text delta
    client, ends = drive(A, [anthropic.encode(SEARCH_1), round2], chunker)
    assert ends[-1].error == UPSTREAM_ERROR and ends[-1].message is None
    assert client.endswith(anthropic.encode_event_object(UPSTREAM_ERROR))
    assert_no_phantom(client)
    events = sse_events(client)
    check_grammar(events[:-1], closed=False)
    assert b"It is sunny" in client
    with pytest.raises(anthropic_sdk.APIStatusError) as raised:
        anthropic_final(client, chunk=5)
    assert raised.value.body == UPSTREAM_ERROR


def test_nothing_follows_an_upstream_error() -> None:
    stitcher = A.stitcher(P, "{}")
    body = broken(ANSWER_TEXT, keep=2) + anthropic.encode_event_object({"type": "ping"})
    out = stitcher.feed(body)
    assert out.endswith(anthropic.encode_event_object(UPSTREAM_ERROR))
    assert stitcher.end_round().error == UPSTREAM_ERROR
    assert stitcher.fail(Failure(502)) == b"" and stitcher.finish() == b""


OVERLOADED_BODY = json.dumps(UPSTREAM_ERROR).encode()
SLOW_BODY = json.dumps({"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}).encode()
EARLY_END = {"type": "error", "error": {"type": "api_error", "message": "upstream stream ended early"}}


@pytest.mark.parametrize(
    ("status", "body", "kind", "text"),
    [
        (529, OVERLOADED_BODY, "overloaded_error", "Overloaded"),
        (529, b"", "overloaded_error", "upstream answered HTTP 529"),
        (429, SLOW_BODY, "rate_limit_error", "slow"),
        (429, b"", "rate_limit_error", "upstream answered HTTP 429"),
        (500, b"<html>bad gateway</html>", "api_error", "upstream answered HTTP 500"),
        (504, b"", "timeout_error", "upstream answered HTTP 504"),
    ],
)
@pytest.mark.parametrize("chunker", [whole, every_byte], ids=lambda c: c.__name__)
def test_fail_after_round_one_sends_the_providers_error(
    status: int, body: bytes, kind: str, text: str, chunker: Chunker
) -> None:
    client, ends = drive(A, [anthropic.encode(SEARCH_1)], chunker, failure=Failure(status, body))
    assert ends[0].complete
    assert_no_phantom(client)
    events = sse_events(client)
    check_grammar(events[:-1], closed=False)
    assert events[-1] == {"type": "error", "error": {"type": kind, "message": text}}
    assert "message_delta" not in [e["type"] for e in events]  # never an empty success
    with pytest.raises(anthropic_sdk.APIStatusError) as raised:
        anthropic_final(client)
    assert raised.value.body["error"]["type"] == kind


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
def test_a_truncated_round_ends_with_an_api_error(chunker: Chunker) -> None:
    round2 = anthropic.encode(ANSWER_CALL)
    client, ends = drive(A, [anthropic.encode(SEARCH_1), round2[: len(round2) // 2]], chunker)
    assert not ends[-1].complete and ends[-1].error is None
    events = sse_events(client)
    assert events[-1] == EARLY_END
    check_grammar(events[:-1], closed=False)
    with pytest.raises(anthropic_sdk.APIStatusError):
        anthropic_final(client)


def test_a_round_one_that_never_started_still_ends_with_an_error() -> None:
    client, ends = drive(A, [b"event: message_start\ndata: {\"type\":\"mess"], whole)
    assert ends[0].message is None and not ends[0].complete
    assert sse_events(client) == [EARLY_END]
    with pytest.raises(anthropic_sdk.APIStatusError):
        anthropic_final(client)


def test_a_visible_event_left_unterminated_by_a_truncated_round_goes_out_before_the_error() -> None:
    events = anthropic.stream_events(ANSWER_TEXT)[:4]  # ... the text delta, then the body ends
    round2 = b"".join(anthropic.encode_event_object(e) for e in events).removesuffix(b"\n\n")
    client, ends = drive(A, [anthropic.encode(SEARCH_1), round2], every_byte)
    assert not ends[-1].complete
    kinds = [e["type"] for e in sse_events(client)]
    assert kinds[-2:] == ["content_block_delta", "error"] and b"It is sunny" in client
