"""Anthropic stitcher: the rounds of a phantom loop as one live client SSE stream.

Oracles: our decoder (the stitched stream decodes to ``merge`` of the stripped rounds)
and the official SDK's ``messages.stream()`` (it accepts the stream, and its final
message has no phantom trace, consecutive indexes, summed usage, the right stop reason).
The scenarios every API shares run in apis/test_stitch_contract.py on ``API``; here, what only
Anthropic's stream has. The builders here are shared with the InvokeModel stitcher's tests.
"""

from __future__ import annotations

import copy
import json

import anthropic as anthropic_sdk
import pytest
from tests.support.streams import anthropic_final
from tooldisco.apis.base import Failure
from tooldisco.apis.anthropic import stream as anthropic
from tooldisco.apis.framing.sse import SSEDecoder

from tests.support.stitch import CHUNKERS, P, Chunker, chunker_id, decoder_of, drive, every_byte, stitched, whole
from tests.support.stitch_anthropic import (
    A,
    ANSWER_CALL,
    ANSWER_TEXT,
    API,
    SEARCH_1,
    UPSTREAM_ERROR,
    check_grammar,
    expected,
    sdk_view,
    sse_events,
)


# -- upstream rounds ---------------------------------------------------------------------------


# -- oracles -----------------------------------------------------------------------------------


# -- errors ------------------------------------------------------------------------------------


# -- what the client reads of each round -----------------------------------------------------------


def test_every_rounds_thinking_and_signatures_stay() -> None:
    _, got, _ = stitched(API, [API.rounds["search"], API.rounds["call"]])
    assert got["id"] == "msg_round1"
    assert [b["type"] for b in got["content"]] == ["thinking", "text", "thinking", "text", "tool_use"]
    assert got["content"][0]["signature"] == "SIG_one==" and got["content"][2]["signature"] == "SIG_three=="
    assert got["usage"]["input_tokens"] == 320 and got["usage"]["output_tokens"] == 70
    assert got["usage"]["cache_read_input_tokens"] == 2200 and got["usage"]["cache_creation_input_tokens"] == 14
    assert got["usage"]["server_tool_use"] == {"web_search_requests": 3}
    _, got, _ = stitched(API, [API.rounds["search"], API.rounds["search_2"], API.rounds["text"]])
    assert [b["type"] for b in got["content"]] == ["thinking", "text", "redacted_thinking", "text"]
    assert got["usage"]["input_tokens"] == 470 and got["usage"]["output_tokens"] == 57


def test_the_cache_creation_breakdown_stays_round_ones_in_the_sdk() -> None:
    """Documented limit: the SDK reads ``usage.cache_creation`` from message_start only."""
    rounds = copy.deepcopy([SEARCH_1, ANSWER_TEXT])
    for m in rounds:
        m["usage"]["cache_creation"] = {"ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 0}
    client, _ = drive(A, [anthropic.encode(m) for m in rounds])
    assert decoder_of(A, client).message()["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] == 14
    assert anthropic_final(client)["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] == 7


@pytest.mark.parametrize("chunker", [whole, every_byte], ids=chunker_id)
def test_mixed_round_renumbers_the_real_call_and_forwards_the_closing_events(chunker: Chunker) -> None:
    client, _, _ = stitched(API, [API.rounds["mixed"]], chunker)
    events = sse_events(client)
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert [(e["index"], e["content_block"].get("name")) for e in starts] == [(0, None), (1, "read_file")]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    upstream_closing = SSEDecoder().feed(API.rounds["mixed"])[-2:]
    assert client.endswith(b"".join(e.raw for e in upstream_closing))  # unchanged: forwarded as they came


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


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_an_unterminated_last_event_goes_out_terminated(chunker: Chunker) -> None:
    """The SSE decoder dispatches a last event without its blank line at the end of the body;
    its raw bytes would run into whatever follows, so it is re-encoded."""
    rounds = [API.rounds["search"], API.rounds["text"]]
    client, ends = drive(A, [body.removesuffix(b"\n\n") for body in rounds], chunker)
    assert all(end.complete for end in ends)
    assert client == drive(A, rounds)[0]
    got = decoder_of(A, client).message()
    assert sdk_view(anthropic_final(client)) == got == expected(A, [SEARCH_1, ANSWER_TEXT])


# -- errors ------------------------------------------------------------------------------------


def test_an_error_event_in_round_two_reaches_the_sdk_as_the_upstreams() -> None:
    client, ends = drive(A, [API.rounds["search"], API.error_round[0]], every_byte)
    assert ends[-1].error == UPSTREAM_ERROR
    assert client.endswith(anthropic.encode_event_object(UPSTREAM_ERROR))
    check_grammar(sse_events(client)[:-1], closed=False)
    assert b"It is sunny" in client
    with pytest.raises(anthropic_sdk.APIStatusError) as raised:
        anthropic_final(client, chunk=5)
    assert raised.value.body == UPSTREAM_ERROR


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
@pytest.mark.parametrize("chunker", [whole, every_byte], ids=chunker_id)
def test_fail_after_round_one_sends_the_providers_error(
    status: int, body: bytes, kind: str, text: str, chunker: Chunker
) -> None:
    client, ends = drive(A, [API.rounds["search"]], chunker, failure=Failure(status, body))
    assert ends[0].complete
    events = sse_events(client)
    check_grammar(events[:-1], closed=False)
    assert events[-1] == {"type": "error", "error": {"type": kind, "message": text}}
    assert "message_delta" not in [e["type"] for e in events]  # never an empty success
    with pytest.raises(anthropic_sdk.APIStatusError) as raised:
        anthropic_final(client)
    assert raised.value.body["error"]["type"] == kind


def test_a_truncated_round_ends_with_an_api_error() -> None:
    round2 = API.rounds["call"]
    client, _ = drive(A, [API.rounds["search"], round2[: len(round2) // 2]], every_byte)
    events = sse_events(client)
    assert events[-1] == EARLY_END
    check_grammar(events[:-1], closed=False)


def test_a_round_one_that_never_started_ends_as_the_upstream_ended_it() -> None:
    cut = b"event: message_start\ndata: {\"type\":\"mess"
    client, ends = drive(A, [cut])
    assert ends[0].message is None and not ends[0].complete
    assert client == cut  # nothing was changed: nothing is added


def test_a_cut_round_after_a_hidden_search_still_ends_with_an_error() -> None:
    client, ends = drive(A, [API.rounds["search"], b"event: message_start\ndata: {\"type\":\"mess"])
    assert ends[-1].message is None and not ends[-1].complete
    assert sse_events(client)[-1] == EARLY_END
    with pytest.raises(anthropic_sdk.APIStatusError):
        anthropic_final(client)


def test_a_visible_event_left_unterminated_by_a_truncated_round_goes_out_before_the_error() -> None:
    events = anthropic.stream_events(ANSWER_TEXT)[:4]  # ... the text delta, then the body ends
    round2 = b"".join(anthropic.encode_event_object(e) for e in events).removesuffix(b"\n\n")
    client, ends = drive(A, [API.rounds["search"], round2], every_byte)
    assert not ends[-1].complete
    kinds = [e["type"] for e in sse_events(client)]
    assert kinds[-2:] == ["content_block_delta", "error"] and b"It is sunny" in client
