"""Anthropic Messages stream codec: assembly, any chunking, SDK round trips, errors."""

from __future__ import annotations

import json

import pytest
from tests.support.streams import anthropic_final, decode, every_split, fixture, random_chunkings
from tooldisco.apis.anthropic import stream as anthropic
from tooldisco.apis.streaming import IncompleteStream, StreamError
from tooldisco.apis.framing.sse import SSEDecoder

FIXTURES = ["anthropic_thinking_tool.sse", "anthropic_server_tools_crlf.sse"]


def sdk_view(message: dict) -> dict:
    """The SDK always sets ``stop_details`` (None) on its snapshot; the wire need not carry it."""
    out = dict(message)
    if out.get("stop_details", 0) is None:
        del out["stop_details"]
    return out


def test_thinking_text_and_tool_calls_assemble() -> None:
    decoder, events = decode(anthropic.AnthropicStreamDecoder, [fixture("anthropic_thinking_tool.sse")])
    message = decoder.message()
    assert decoder.done and decoder.error is None
    assert [e.type for e in events][:3] == ["message_start", "ping", "content_block_start"]
    thinking, text, call, no_args = message["content"]
    assert thinking == {
        "type": "thinking",
        "thinking": "The user wants the weather in Paris. I should call get_weather — température en °C, 🌦.",
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds1KbZCbUXtRJZBcN3ntHhd6B9H5S4o0dxAqHD5=",
    }
    assert text == {"type": "text", "text": "Let me check the weather in Paris for you."}
    assert call["input"] == {"location": "Paris, France", "unit": "celsius"}
    assert no_args["input"] == {}  # an empty partial_json means no arguments
    assert message["stop_reason"] == "tool_use" and message["stop_sequence"] is None
    # message_delta usage is cumulative: it overwrites; fields it lacks keep message_start's
    assert message["usage"]["output_tokens"] == 89
    assert message["usage"]["service_tier"] == "standard"
    assert message["usage"]["cache_read_input_tokens"] == 1536


def test_server_tools_citations_redacted_thinking_kept() -> None:
    decoder, _events = decode(anthropic.AnthropicStreamDecoder, [fixture("anthropic_server_tools_crlf.sse")])
    redacted, search, result, text = decoder.message()["content"]
    assert redacted["type"] == "redacted_thinking" and redacted["data"].startswith("EmwK")
    assert search["input"] == {"query": "mitmproxy latest release"}
    assert result["content"][0]["page_age"] == "3 days ago"
    assert text["citations"][0]["cited_text"] == "mitmproxy 12.2 was released"
    assert decoder.message()["usage"]["server_tool_use"] == {"web_search_requests": 1, "web_fetch_requests": 0}


@pytest.mark.parametrize("name", FIXTURES)
def test_every_split_point_gives_the_same_message_and_events(name: str) -> None:
    body = fixture(name)
    decoder, expected = decode(anthropic.AnthropicStreamDecoder, [body])
    for chunks in every_split(body):
        other, events = decode(anthropic.AnthropicStreamDecoder, chunks)
        assert events == expected
        assert other.message() == decoder.message()


@pytest.mark.parametrize("name", FIXTURES)
def test_raw_bytes_forward_unchanged(name: str) -> None:
    body = fixture(name)
    for chunks in random_chunkings(body, count=5):
        _, events = decode(anthropic.AnthropicStreamDecoder, chunks)
        assert b"".join(e.raw for e in events) == body


@pytest.mark.parametrize("name", FIXTURES)
def test_matches_the_sdk_and_survives_the_sdk_round_trip(name: str) -> None:
    body = fixture(name)
    decoder, _ = decode(anthropic.AnthropicStreamDecoder, [body])
    message = decoder.message()
    assert sdk_view(anthropic_final(body, chunk=11)) == message
    reencoded = anthropic.encode(message)
    assert sdk_view(anthropic_final(reencoded, chunk=5)) == message


@pytest.mark.parametrize("name", FIXTURES)
def test_encode_decode_is_stable(name: str) -> None:
    decoder, _ = decode(anthropic.AnthropicStreamDecoder, [fixture(name)])
    message = decoder.message()
    encoded = anthropic.encode(message)
    again, _ = decode(anthropic.AnthropicStreamDecoder, [encoded])
    assert again.message() == message and again.done
    assert anthropic.encode(again.message()) == encoded


def test_encoded_grammar() -> None:
    decoder, _ = decode(anthropic.AnthropicStreamDecoder, [fixture("anthropic_thinking_tool.sse")])
    events = decode(SSEDecoder, [anthropic.encode(decoder.message())])[1]
    names = [e.event for e in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    payloads = [json.loads(e.data) for e in events]
    assert all(p["type"] == e.event for p, e in zip(payloads, events))
    start = payloads[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["stop_sequence"] is None
    starts = [p for p in payloads if p["type"] == "content_block_start"]
    assert [p["index"] for p in starts] == [0, 1, 2, 3]
    assert starts[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert starts[2]["content_block"]["input"] == {}
    kinds = [p["delta"]["type"] for p in payloads if p["type"] == "content_block_delta"]
    assert kinds == ["thinking_delta", "signature_delta", "text_delta", "input_json_delta", "input_json_delta"]
    delta = payloads[-2]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 89


def test_late_fields_travel_in_message_delta() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "pause_turn",
        "stop_sequence": None,
        "stop_details": {"type": "refusal", "category": None},
        "container": {"id": "cntr_1", "expires_at": "2026-11-22T12:00:00Z"},
        "context_management": {"applied_edits": []},
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    payloads = anthropic.stream_events(message)
    assert payloads[0]["message"]["stop_details"] is None
    assert payloads[-2]["delta"]["stop_details"] == {"type": "refusal", "category": None}
    assert payloads[-2]["delta"]["container"]["id"] == "cntr_1"
    assert payloads[-2]["context_management"] == {"applied_edits": []}
    decoder, _ = decode(anthropic.AnthropicStreamDecoder, [anthropic.encode(message)])
    assert decoder.message() == message


def test_error_after_200_is_exposed() -> None:
    decoder, events = decode(anthropic.AnthropicStreamDecoder, [fixture("anthropic_error.sse")])
    assert events[-1].type == "error"
    assert decoder.error == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }
    assert not decoder.done
    with pytest.raises(StreamError) as info:
        decoder.message()
    assert info.value.error is decoder.error
    assert events[-1].raw.startswith(b"event: error\n")  # forwardable as it came


def test_unknown_events_and_deltas_are_kept_without_crashing() -> None:
    body = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
        b'"role":"assistant","content":[],"model":"c","stop_reason":null,"stop_sequence":null,'
        b'"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
        b'event: brand_new\ndata: {"type":"brand_new","x":1}\n\n'
        b"event: weird\ndata: not json\n\n"
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"compaction","content":null}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"compaction_delta","content":"summary","encrypted_content":"abc"}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":9,'
        b'"delta":{"type":"text_delta","text":"orphan"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    )
    decoder, events = decode(anthropic.AnthropicStreamDecoder, [body])
    assert [e.type for e in events] == [
        "message_start",
        "brand_new",
        "weird",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
    ]
    assert events[2].data == "not json"
    assert decoder.message()["content"] == [{"type": "compaction", "content": "summary", "encrypted_content": "abc"}]
    assert not decoder.done


def test_truncated_stream_still_assembles_what_came() -> None:
    body = fixture("anthropic_thinking_tool.sse")
    cut = body.index(b"is, France")
    decoder, _ = decode(anthropic.AnthropicStreamDecoder, [body[:cut]])
    message = decoder.message()
    assert not decoder.done
    assert message["content"][2]["input"] == '{"location": "Par'  # unparsable text kept as text
    assert message["stop_reason"] is None


def test_message_before_start_raises() -> None:
    decoder = anthropic.AnthropicStreamDecoder()
    decoder.feed(b'event: ping\ndata: {"type":"ping"}\n\n')
    with pytest.raises(IncompleteStream):
        decoder.message()
