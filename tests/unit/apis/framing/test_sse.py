"""SSE framing: the spec's field rules, any chunking, raw bytes kept, encoder."""

from __future__ import annotations

from openai._streaming import SSEDecoder as OpenAISSEDecoder
from tests.support.streams import decode, every_split, fixture, random_chunkings
from tooldisco.apis.framing.sse import SSEDecoder, SSEEvent, encode_event

MIXED = (
    b"\xef\xbb\xbf: leading comment\r\n"
    b"event: first\r\n"
    b"data: line one\r\n"
    b"data:line two\r\n"
    b"id: 42\r\n"
    b"retry: 1500\r\n"
    b"\r\n"
    b"data: caf\xc3\xa9 \xf0\x9f\x8c\xa6\r"
    b"\r"
    b"event: empty-data\n"
    b"data\n"
    b"unknown: ignored\n"
    b"\n"
    b": only a comment\n\n"
    b"data:  two spaces keep one\n"
    b"retry: soon\n"
    b"\n"
)


def summary(events: list[SSEEvent]) -> list[tuple[str | None, str, str | None, int | None]]:
    return [(e.event, e.data, e.id, e.retry) for e in events]


def test_fields_comments_line_endings() -> None:
    _, events = decode(SSEDecoder, [MIXED])
    assert summary(events) == [
        ("first", "line one\nline two", "42", 1500),
        (None, "café 🌦", "42", None),  # the last event id persists, as the spec says
        ("empty-data", "", "42", None),
        (None, " two spaces keep one", "42", None),
    ]


def test_raw_bytes_concatenate_to_the_stream() -> None:
    _, events = decode(SSEDecoder, [MIXED])
    assert b"".join(e.raw for e in events) == MIXED


def test_every_split_point_gives_the_same_events() -> None:
    _, expected = decode(SSEDecoder, [MIXED])
    for chunks in every_split(MIXED):
        assert decode(SSEDecoder, chunks)[1] == expected, chunks


def test_random_chunkings_of_a_real_stream() -> None:
    body = fixture("anthropic_server_tools_crlf.sse")
    _, expected = decode(SSEDecoder, [body])
    assert len(expected) == 16
    for chunks in random_chunkings(body):
        assert decode(SSEDecoder, chunks)[1] == expected


def test_same_events_as_the_openai_sdk_decoder() -> None:
    for name in ("anthropic_thinking_tool.sse", "anthropic_server_tools_crlf.sse", "openai_chat_tools_usage.sse"):
        body = fixture(name)
        sdk = [(s.event, s.data) for s in OpenAISSEDecoder().iter_bytes(iter([body]))]
        ours = [(e.event, e.data) for e in decode(SSEDecoder, [body])[1]]
        assert ours == sdk


def test_unterminated_last_event_is_flushed_at_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"event: a\ndata: {}\n\nevent: b\ndata: tail") == [
        SSEEvent(data="{}", event="a", raw=b"event: a\ndata: {}\n\n")
    ]
    assert decoder.feed(b"") == [SSEEvent(data="tail", event="b", raw=b"event: b\ndata: tail")]


def test_cr_at_chunk_end_waits_for_a_possible_lf() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\n\r") == []  # the blank line's CR may still be half of a CRLF
    assert decoder.feed(b"\ndata: y\r") == [SSEEvent(data="x", raw=b"data: x\r\n\r\n")]
    assert decoder.feed(b"\r") == []
    assert decoder.feed(b"") == [SSEEvent(data="y", raw=b"data: y\r\r")]


def test_invalid_utf8_does_not_raise() -> None:
    _, events = decode(SSEDecoder, [b"data: \xff\xfe ok\n\n"])
    assert events[0].data == "\ufffd\ufffd ok"


def test_encoder_round_trip() -> None:
    body = encode_event("a\nb\r\nc", "evt", id="7", retry=10) + encode_event("{}", newline="\r\n")
    assert body == b"event: evt\nid: 7\nretry: 10\ndata: a\ndata: b\ndata: c\n\ndata: {}\r\n\r\n"
    _, events = decode(SSEDecoder, [body])
    assert summary(events) == [("evt", "a\nb\nc", "7", 10), (None, "{}", "7", None)]


def test_a_one_line_payload_is_framed_without_a_regex_pass(monkeypatch):
    """An event's payload may hold a whole catalog (a Responses echo): one without line breaks
    is framed as it is, not scanned by the line-splitting regex; one with them still splits."""
    from tooldisco.apis.framing import sse as sse_mod

    calls = []
    split = sse_mod.re.split
    monkeypatch.setattr(sse_mod.re, "split", lambda *a, **k: calls.append(a) or split(*a, **k))
    assert sse_mod.encode_event('{"a":1}', "x") == b'event: x\ndata: {"a":1}\n\n'
    assert calls == []
    assert sse_mod.encode_event('{"a":\r\n1}') == b'data: {"a":\ndata: 1}\n\n'
    assert len(calls) == 1


def _reference(body: bytes) -> list[SSEEvent]:
    """The spec's rules written out plainly over a whole body, one line at a time: what the
    decoder must give for any chunking. Raw bytes run from the end of the last event."""
    import re

    events: list[SSEEvent] = []
    pending, event, data, last_id, retry, raw_from = False, None, [], None, None, 0
    pos = 0
    pieces = [(m.start(), m.end()) for m in re.finditer(rb"\r\n|\r|\n", body)]
    lines = []
    for start, end in pieces:
        lines.append((body[pos:start], end))
        pos = end
    if pos < len(body):
        lines.append((body[pos:], len(body)))
    for line, end in lines:
        if not line:
            if pending:
                events.append(SSEEvent("\n".join(data), event, last_id, retry, body[raw_from:end]))
                pending, event, data, retry, raw_from = False, None, [], None, end
            continue
        text = line.decode("utf-8", "replace")
        if text.startswith(":"):
            continue
        name, _, value = text.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            retry = int(value)
        else:
            continue
        pending = True
    if pending:
        events.append(SSEEvent("\n".join(data), event, last_id, retry, body[raw_from:]))
    return events


def _random_stream(rng, line_ends: list[bytes]) -> bytes:
    """Events of one to three fields and comments, extra blank lines between them, each
    line ended by a choice from ``line_ends``; sometimes a last event with no blank line."""
    out = bytearray()
    for _ in range(rng.randint(1, 6)):
        for _ in range(rng.randint(0, 1)):
            out += b": keep-alive" + rng.choice(line_ends)
        for _ in range(rng.randint(1, 3)):
            out += rng.choice([b"data: {\"a\": \"caf\xc3\xa9\"}", b"data:x", b"data", b"event: ping",
                               b"id: 7", b"retry: 12", b"retry: x", b"other: y"]) + rng.choice(line_ends)
        out += rng.choice(line_ends) * rng.randint(1, 2)
    if rng.random() < 0.3:
        out += b"data: tail"
        if rng.random() < 0.5:
            out += rng.choice(line_ends)
    return bytes(out)


def test_streams_of_every_line_end_match_the_spec_in_any_chunking() -> None:
    """LF-only and CRLF-only streams take the decoder's split-at-once path, mixed and
    lone-CR ones its line-by-line path, and a chunk may switch between them mid-stream:
    every chunking gives the spec's events, their raw bytes the stream's, in order."""
    import random

    rng = random.Random(11)
    for line_ends in ([b"\n"], [b"\r\n"], [b"\r"], [b"\n", b"\r\n"], [b"\r", b"\n", b"\r\n"]):
        for _ in range(30):
            body = _random_stream(rng, line_ends)
            expected = _reference(body)
            assert decode(SSEDecoder, [body])[1] == expected, body
            for chunks in random_chunkings(body, count=4, seed=rng.randint(0, 1000)):
                events = decode(SSEDecoder, chunks)[1]
                assert events == expected, chunks
                assert body.startswith(b"".join(e.raw for e in events))  # what follows the last is no event


def test_crlf_stream_split_inside_its_line_ends() -> None:
    body = b"event: a\r\ndata: 1\r\n\r\n: note\r\ndata: 2\r\ndata: 3\r\n\r\ndata: end"
    expected = _reference(body)
    assert [e.data for e in expected] == ["1", "2\n3", "end"]
    for chunks in every_split(body):
        assert decode(SSEDecoder, chunks)[1] == expected, chunks


def test_non_ascii_digits_are_no_retry() -> None:
    _, events = decode(SSEDecoder, [b"retry: \xc2\xb2\ndata: x\n\n"])
    assert summary(events) == [(None, "x", None, None)]
