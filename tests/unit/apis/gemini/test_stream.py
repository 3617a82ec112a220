"""Gemini stream codec: both framings, part merging, any chunking, google-genai round trips."""

from __future__ import annotations

import json

import pytest
from tests.support.streams import decode, every_split, fixture, gemini_chunks, random_chunkings
from tooldisco.apis.gemini import stream as gemini
from tooldisco.apis.streaming import StreamError
from tests.support.streams_gemini import (
    assemble,
)

FIXTURES = ["gemini_thoughts_calls.sse", "gemini_text_array.json"]


def test_sse_thoughts_text_and_calls_assemble() -> None:
    decoder, events = decode(gemini.GeminiStreamDecoder, [fixture("gemini_thoughts_calls.sse")])
    assert decoder.sse is True and decoder.done and [e.type for e in events] == ["chunk"] * 6
    response = decoder.message()
    (candidate,) = response["candidates"]
    thought, text, call, call2 = candidate["content"]["parts"]
    assert thought == {
        "text": "**Weighing the request**\n\nThe user asks for the weather; I will call get_weather for Paris.",
        "thought": True,
    }
    assert text == {"text": "Je vérifie la météo à Paris — un instant ☀️."}
    assert call["thoughtSignature"] == "CiQB0e2Kb7oK3pQ9bXQ1c2lnbmF0dXJlLW9uZQ=="
    assert call["functionCall"] == {"name": "get_weather", "args": {"location": "Paris", "unit": "celsius"}}
    assert call2 == {"functionCall": {"name": "get_time", "args": {}}}  # the trailing empty text part is gone
    assert candidate["finishReason"] == "STOP" and candidate["content"]["role"] == "model"
    assert response["usageMetadata"]["thoughtsTokenCount"] == 212  # from the last chunk
    assert response["modelVersion"] == "gemini-3-pro-preview"


def test_json_array_form_and_trailing_signature() -> None:
    decoder, events = decode(gemini.GeminiStreamDecoder, [fixture("gemini_text_array.json")])
    assert decoder.sse is False and len(events) == 3
    (part,) = decoder.message()["candidates"][0]["content"]["parts"]
    assert part == {
        "text": 'Un mot: « bonjour » — and 日本語 "quoted" {braces} [brackets] \\ backslash.',
        "thoughtSignature": "CiIBVKhc7tK1ZW5kLXNpZ25hdHVyZQ==",
    }
    assert b"".join(e.raw for e in events) + b"\n]" == fixture("gemini_text_array.json")


@pytest.mark.parametrize("name", FIXTURES)
def test_every_split_point_gives_the_same_result(name: str) -> None:
    body = fixture(name)
    decoder, expected = decode(gemini.GeminiStreamDecoder, [body])
    for chunks in every_split(body):
        other, events = decode(gemini.GeminiStreamDecoder, chunks)
        assert events == expected and other.message() == decoder.message()
    for chunks in random_chunkings(body, count=5):
        assert decode(gemini.GeminiStreamDecoder, chunks)[1] == expected


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("sse", [True, False])
def test_encode_decode_in_either_form(name: str, sse: bool) -> None:
    decoder, _ = decode(gemini.GeminiStreamDecoder, [fixture(name)])
    response = decoder.message()
    encoded = gemini.encode(response, sse=sse)
    again, _ = decode(gemini.GeminiStreamDecoder, [encoded])
    assert again.sse is sse and again.message() == response
    if not sse:
        assert isinstance(json.loads(encoded), list)  # the array form is one JSON document
    else:
        assert encoded.endswith(b"}\r\n\r\n")


@pytest.mark.parametrize("name", FIXTURES)
def test_google_genai_reads_the_same_response(name: str) -> None:
    decoder, _ = decode(gemini.GeminiStreamDecoder, [fixture(name)])
    response = decoder.message()
    if name.endswith(".sse"):
        assert assemble(gemini_chunks(fixture(name), chunk=13)) == response
    assert assemble(gemini_chunks(gemini.encode(response), chunk=7)) == response


def test_encoded_chunks_put_fields_on_the_last_chunk() -> None:
    decoder, _ = decode(gemini.GeminiStreamDecoder, [fixture("gemini_thoughts_calls.sse")])
    chunks = gemini.chunks(decoder.message())
    assert [len(c["candidates"][0]["content"]["parts"]) for c in chunks] == [1, 1, 1, 1]
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert all("usageMetadata" not in c for c in chunks[:-1]) and "usageMetadata" in chunks[-1]
    assert {c["responseId"] for c in chunks} == {"p5kdaZ2xNKqWz7IP2Nir4Qg"}


def test_part_merging_rules() -> None:
    assembler = gemini.GeminiAssembler()
    for parts in (
        [{"text": "A", "thoughtSignature": "s1"}],
        [{"text": "B"}],  # joins the signed part: the signature may come first
        [{"text": "C", "thoughtSignature": "s2"}],  # a second signature starts a new part
        [{"text": "t", "thought": True}],  # thought text never joins answer text
        [{"inlineData": {"mimeType": "image/png", "data": "iVBO"}}],
        [{"text": ""}],  # empty text: dropped
    ):
        assembler.apply(None, {"candidates": [{"content": {"parts": parts, "role": "model"}}]})
    assert assembler.message()["candidates"][0]["content"]["parts"] == [
        {"text": "AB", "thoughtSignature": "s1"},
        {"text": "C", "thoughtSignature": "s2"},
        {"text": "t", "thought": True},
        {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
    ]


def test_several_candidates_are_kept_apart() -> None:
    def chunk(i, text, **extra):
        return {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "index": i, **extra}]}
    assembler = gemini.GeminiAssembler()
    for item in (
        chunk(0, "a"),
        chunk(1, "x"),
        chunk(0, "b", finishReason="STOP"),
        chunk(1, "y", finishReason="MAX_TOKENS"),
    ):
        assembler.apply(None, item)
    response = assembler.message()
    assert [c["content"]["parts"][0]["text"] for c in response["candidates"]] == ["ab", "xy"]
    again, _ = decode(gemini.GeminiStreamDecoder, [gemini.encode(response)])
    assert again.message() == response


def test_error_in_either_form() -> None:
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    first = {"candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "model"}, "index": 0}]}
    for body in (
        b"data: " + json.dumps(first).encode() + b"\r\n\r\ndata: " + json.dumps(error).encode() + b"\r\n\r\n",
        b"[" + json.dumps(first).encode() + b",\r\n" + json.dumps(error, indent=2).encode() + b"]",
    ):
        decoder, events = decode(gemini.GeminiStreamDecoder, [body])
        assert [e.type for e in events] == ["chunk", "error"] and decoder.error == error
        with pytest.raises(StreamError):
            decoder.message()


def test_truncated_array_element_is_reported_not_lost() -> None:
    decoder, events = decode(gemini.GeminiStreamDecoder, [b'  [{"candidates": []},\n{"candid'])
    assert [e.type for e in events] == ["chunk", "unknown"]
    assert events[-1].raw == b',\n{"candid'
    assert decoder.message() == {"candidates": []}
