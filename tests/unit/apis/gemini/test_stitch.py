"""Gemini stitcher: the rounds of a phantom loop as one live client stream, in both framings.

Oracles: our decoder (the stitched stream decodes to ``merge`` of the stripped rounds) and
google-genai's real client (``generate_content_stream`` over an ``httpx.MockTransport``): it
parses and validates every chunk into ``GenerateContentResponse`` and raises on an
``{"error": ...}`` chunk. The SDK asks only for ``alt=sse``; the JSON-array form is checked
as one JSON document whose elements go through the same client. The scenarios every API
shares run in apis/test_stitch_contract.py on ``API_SSE`` and ``API_ARRAY``; here, what only
Gemini's streams have.

Documented difference from ``merge``: ``merge`` keeps each round's parts apart, while the
client's assembler (ours, and Gemini CLI's) folds adjacent plain text parts of the same
kind across chunks, so the expected message is folded the same way (``folded``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.genai import errors as genai_errors
from tooldisco.apis.gemini.adapter import STAND_IN_SIGNATURE, GeminiAdapter
from tooldisco.apis.base import Failure
from tooldisco.apis.gemini import stream as gemini
from tooldisco.apis.framing.sse import encode_event

from tests.support.call_through import G_DISPATCH
from tests.support.stitch import CHUNKERS, P, Chunker, chunker_id, drive, every_byte, stitched, whole
from tests.support.stitch_gemini import (
    ANSWER_CALL,
    ANSWER_TEXT,
    API_ARRAY,
    API_SSE,
    ARRAY,
    MIXED,
    OVERLOADED,
    SEARCH_1,
    SEARCH_2,
    SSE,
    call,
    check_sdk,
    decoded,
    elements,
    expected,
    fake,
    realistic,
    response,
    sdk,
    sig,
    text,
    usage,
    with_error,
)

FORMS = [SSE, ARRAY]


def form_id(adapter: GeminiAdapter) -> str:
    return "sse" if adapter.sse else "array"


# -- upstream rounds ---------------------------------------------------------------------------


# The call first, the step's signature trailing on an empty text part in the finishing chunk.
CALL_FIRST = response(
    "resp_call_first",
    [call(P, {"query": "files"}, id_="call_phantom_f"), text("", signature=sig("SIG_tail"))],
    usage(80, 5),
)


# -- oracles -----------------------------------------------------------------------------------


# -- errors ------------------------------------------------------------------------------------


APIS = {SSE: API_SSE, ARRAY: API_ARRAY}


# -- stitched rounds ---------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_every_rounds_parts_stay_and_usage_adds_up(adapter: GeminiAdapter) -> None:
    _, got, _ = stitched(APIS[adapter], [realistic(SEARCH_1, adapter.sse), realistic(ANSWER_CALL, adapter.sse)])
    assert got["responseId"] == "resp_round1"
    parts = got["candidates"][0]["content"]["parts"]
    assert [p.get("text") or p["functionCall"]["name"] for p in parts] == [
        "I need a weather tool; none is loaded. 🌦",
        "Let me look for the right tool. ",
        "Now get_weather is loaded.",
        "Checking Paris — un instant.",
        "get_weather",
    ]
    assert parts[-1]["thoughtSignature"] == sig("SIG_weather")  # a visible call's signature, unchanged
    assert got["usageMetadata"] == {
        "promptTokenCount": 320,
        "candidatesTokenCount": 60,
        "totalTokenCount": 422,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 320}],
        "thoughtsTokenCount": 42,
        "cachedContentTokenCount": 110,
        "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 110}],
    }


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_mixed_round_streams_the_real_call_with_the_step_signature(adapter: GeminiAdapter) -> None:
    _, got, _ = stitched(APIS[adapter], [realistic(MIXED, adapter.sse)], every_byte)
    text_part, real = got["candidates"][0]["content"]["parts"]
    assert text_part == {"text": "Two things at once."}
    # The hidden phantom call held the step's signature: Gemini 3 wants one on the first call.
    assert real == {
        "functionCall": {"name": "read_file", "args": {"path": "a.txt"}},
        "thoughtSignature": STAND_IN_SIGNATURE,
    }


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_max_loops_after_two_searches_shows_round_two_as_its_finish_only(adapter: GeminiAdapter) -> None:
    client, _, _ = stitched(APIS[adapter], [realistic(SEARCH_1, adapter.sse), realistic(SEARCH_2, adapter.sse)])
    last = elements(adapter, client)[-1]["candidates"][0]  # round 2 showed nothing but its finish
    assert last["content"]["parts"] == [] and last["finishReason"] == "STOP"


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_a_round_opening_with_the_phantom_call(adapter: GeminiAdapter, chunker: Chunker) -> None:
    """Round 1's first chunk is hidden: the array still opens with ``[`` on the first element the
    client gets, and the signature on the trailing empty text part survives."""
    client, got, _ = stitched(APIS[adapter], [realistic(m, adapter.sse) for m in (CALL_FIRST, ANSWER_TEXT)], chunker)
    # The signed empty part opens the text that follows it (the assembler's folding rule).
    assert got["candidates"][0]["content"]["parts"] == [
        {"text": "It is sunny in Paris, 21 °C ☀️.", "thoughtSignature": sig("SIG_tail")}
    ]
    if not adapter.sse:
        assert client.startswith(b"[{")


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_rounds_written_by_the_fake_provider(adapter: GeminiAdapter, chunker: Chunker) -> None:
    rounds = [fake("Let me search first.", [P], 60, adapter.sse), fake("Found it: ", ["read_file"], 90, adapter.sse)]
    client, ends = drive(adapter, rounds, chunker)
    messages = [end.message for end in ends]
    assert P.encode() not in client
    got = decoded(client)
    assert got == expected(messages)  # type: ignore[arg-type]
    assert got["responseId"] == messages[0]["responseId"]  # type: ignore[index]
    check_sdk(sdk(adapter, client), got)


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_chunks_go_out_with_the_feed_that_completes_them(adapter: GeminiAdapter) -> None:
    """Byte by byte: a visible chunk comes back from the feed of its last byte, a hidden or
    held one never; what ``next_round`` releases goes out with the next feed. The array's ``[``
    goes out with the feed that brought it, as a plain proxy passes it on."""
    stitcher = adapter.stitcher(P, "{}")
    released = False  # the previous round's finishing chunk had a part to show
    for k, m in enumerate([CALL_FIRST, SEARCH_1, SEARCH_2, ANSWER_CALL], 1):
        body = realistic(m, adapter.sse)
        events = gemini.GeminiStreamDecoder().feed(body)
        for number, event in enumerate(events, 1):
            parts = event.data["candidates"][0]["content"]["parts"]
            visible = number < len(events) and not all(p.get("functionCall", {}).get("name") == P for p in parts)
            returned = [stitcher.feed(event.raw[i : i + 1]) for i in range(len(event.raw))]
            if not adapter.sse and k == 1 and number == 1:
                assert returned.pop(0) == b"["
            if number == 1 and k > 1:
                assert bool(returned.pop(0)) == released, k
            assert not any(returned[:-1]) and bool(returned[-1]) == visible, (k, number)
        if rest := body[sum(len(e.raw) for e in events) :]:  # the array's "]"
            assert stitcher.feed(rest) == b""
        assert stitcher.end_round().complete
        if k < 4:
            stitcher.next_round()
        released = m is CALL_FIRST  # its finishing chunk carries the step's signed empty part
    closing = stitcher.finish()
    assert b"finishReason" in closing and sig("SIG_weather").encode() in closing


def with_usage_tail(m: dict[str, Any]) -> bytes:
    """``m`` with one more chunk after the finishing one: the final usage alone (as Vertex may send it)."""
    tail = {"usageMetadata": m["usageMetadata"], "modelVersion": m["modelVersion"], "responseId": m["responseId"]}
    return realistic(m, sse=True) + encode_event(json.dumps(tail), newline="\r\n")


def test_chunks_after_the_finishing_one_are_held_with_it() -> None:
    stitcher = SSE.stitcher(P, "{}")
    round1, round2 = with_usage_tail(SEARCH_1), with_usage_tail(ANSWER_TEXT)
    events = gemini.GeminiStreamDecoder().feed(round1)
    assert stitcher.feed(b"".join(e.raw for e in events[:2])) == b"".join(e.raw for e in events[:2])
    assert stitcher.feed(b"".join(e.raw for e in events[2:])) == b""  # the phantom's finishing chunk, then usage
    assert stitcher.end_round().complete
    stitcher.next_round()  # round 1's closing chunks show nothing: no part, no finish, no usage
    assert stitcher.feed(round2) == b""  # round 2 is one finishing chunk and its usage tail
    assert stitcher.end_round().complete
    chunks = elements(SSE, stitcher.finish())
    assert [sorted(c) for c in chunks] == [["candidates", "modelVersion", "responseId", "usageMetadata"],
                                           ["modelVersion", "responseId", "usageMetadata"]]
    assert chunks[-1]["usageMetadata"]["promptTokenCount"] == 100 + 210 and chunks[-1]["responseId"] == "resp_round1"


def test_usage_is_a_running_total_across_rounds() -> None:
    client, _ = drive(SSE, [realistic(SEARCH_1, True), realistic(ANSWER_TEXT, True)], whole)
    chunks = elements(SSE, client)
    prompts = [c["usageMetadata"]["promptTokenCount"] for c in chunks]
    # Round 1 (its finishing chunk went out without usage), then round 2 on top of round 1's total.
    assert prompts == [100, 100, 100 + 210]
    assert chunks[-1]["usageMetadata"]["totalTokenCount"] == 150 + 225


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_an_error_chunk_in_round_two_reaches_the_sdk_with_its_code(adapter: GeminiAdapter) -> None:
    """The error goes out with the feed that completes it; what the upstream sends after it
    passes as it came (the array's own "]" included), and nothing is added."""
    upto_error, rest = with_error(adapter, ANSWER_CALL, OVERLOADED)
    client, ends = drive(adapter, [realistic(SEARCH_1, adapter.sse), upto_error + rest], every_byte)
    assert ends[-1].error == OVERLOADED
    if adapter.sse:
        error = encode_event(json.dumps(OVERLOADED), newline="\r\n")
    else:
        error = json.dumps(OVERLOADED, indent=2).encode()
    assert upto_error.endswith(error) and client.endswith(error + rest)
    assert OVERLOADED in elements(adapter, client)
    with pytest.raises(genai_errors.ServerError) as raised:
        sdk(adapter, client)
    assert raised.value.code == 503 and raised.value.status == "UNAVAILABLE"


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_an_error_chunk_in_round_one_and_all_after_it_pass_as_they_came(adapter: GeminiAdapter,
                                                                        chunker: Chunker) -> None:
    stitcher = adapter.stitcher(P, "{}")
    upto_error, rest = with_error(adapter, ANSWER_TEXT, OVERLOADED)
    client = b"".join(stitcher.feed(c) for c in chunker(upto_error))
    assert client == upto_error  # at once: the error with the feed that completes it
    client += b"".join(stitcher.feed(c) for c in chunker(rest))
    assert stitcher.end_round().error == OVERLOADED
    assert client + stitcher.finish() == upto_error + rest  # no end of ours: the array's is the upstream's
    assert stitcher.finish() == b"" and stitcher.fail(Failure(502)) == b""


def test_an_error_chunk_releases_what_was_held_before_it() -> None:
    """A finishing chunk held (the round hid a call), then an error: both go out, in their order."""
    finishing = realistic(SEARCH_1, True)
    error = encode_event(json.dumps(OVERLOADED), newline="\r\n")
    stitcher = SSE.stitcher(P, "{}")
    out = stitcher.feed(finishing)
    assert b"finishReason" not in out  # held: the round hid the search
    out += stitcher.feed(error)
    assert out.endswith(error) and b"finishReason" in out
    assert stitcher.end_round().error == OVERLOADED and stitcher.finish() == b""


RATE = {
    "error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}
}
LOCATION = {
    "error": {
        "code": 400,
        "message": "User location is not supported for the API use.",
        "status": "FAILED_PRECONDITION",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "LOCATION_NOT_SUPPORTED"}],
    }
}


@pytest.mark.parametrize(
    ("status", "body", "kind", "code", "code_name", "text"),
    [
        (429, json.dumps(RATE).encode(), genai_errors.ClientError, 429, "RESOURCE_EXHAUSTED", RATE["error"]["message"]),
        (503, json.dumps([OVERLOADED]).encode(), genai_errors.ServerError, 503, "UNAVAILABLE",
         OVERLOADED["error"]["message"]),
        (400, json.dumps(LOCATION).encode(), genai_errors.ClientError, 400, "FAILED_PRECONDITION",
         LOCATION["error"]["message"]),
        (529, b"", genai_errors.ServerError, 529, "UNAVAILABLE", "upstream answered HTTP 529"),
        (429, b"", genai_errors.ClientError, 429, "RESOURCE_EXHAUSTED", "upstream answered HTTP 429"),
        (500, b"oops", genai_errors.ServerError, 500, "INTERNAL", "upstream answered HTTP 500"),
        (504, b"", genai_errors.ServerError, 504, "DEADLINE_EXCEEDED", "upstream answered HTTP 504"),
        (529, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
         genai_errors.ServerError, 529, "UNAVAILABLE", "Overloaded"),
    ],
)
@pytest.mark.parametrize("chunker", [whole, every_byte], ids=chunker_id)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_fail_after_round_one_sends_a_gemini_error(
    adapter: GeminiAdapter,
    chunker: Chunker,
    status: int,
    body: bytes,
    kind: type[genai_errors.APIError],
    code: int,
    code_name: str,
    text: str,
) -> None:
    client, _ = drive(adapter, [realistic(SEARCH_1, adapter.sse)], chunker, failure=Failure(status, body))
    chunks = elements(adapter, client)
    error = chunks[-1]["error"]
    assert (error["code"], error["status"], error["message"]) == (code, code_name, text)
    upstream = Failure(status, body).upstream_error()
    assert upstream is None or error.items() >= upstream.items()  # Google's own error object, details and all
    assert all("error" not in c for c in chunks[:-1]) and len(chunks) == 3  # round 1's visible chunks first
    with pytest.raises(kind) as raised:
        sdk(adapter, client)
    assert (raised.value.code, raised.value.status, raised.value.message) == (code, code_name, text)


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_fail_before_anything_was_shown_is_still_a_whole_stream(adapter: GeminiAdapter) -> None:
    client, _ = drive(adapter, [realistic(SEARCH_2, adapter.sse)], whole, failure=Failure(500))
    assert [list(c) for c in elements(adapter, client)] == [["error"]]
    with pytest.raises(genai_errors.ServerError):
        sdk(adapter, client)


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_a_truncated_round_ends_with_a_502_internal_error(adapter: GeminiAdapter) -> None:
    round2 = realistic(ANSWER_CALL, adapter.sse)
    client, _ = drive(adapter, [realistic(SEARCH_1, adapter.sse), round2[: len(round2) * 2 // 3]], every_byte)
    error = elements(adapter, client)[-1]["error"]
    assert error == {"code": 502, "message": "upstream stream ended early", "status": "INTERNAL"}
    with pytest.raises(genai_errors.ServerError) as raised:
        sdk(adapter, client)
    assert raised.value.code == 502


def test_an_unterminated_last_sse_event_passes_as_it_came_in_a_plain_round() -> None:
    body = realistic(ANSWER_TEXT, sse=True).removesuffix(b"\r\n\r\n")
    client, ends = drive(SSE, [body], every_byte)
    assert ends[0].complete and client == body


def test_an_unterminated_last_sse_event_of_a_stitched_round_is_re_encoded_whole() -> None:
    body = realistic(ANSWER_TEXT, sse=True).removesuffix(b"\r\n\r\n")
    client, ends = drive(SSE, [realistic(SEARCH_1, True), body], every_byte)
    assert ends[-1].complete and client.endswith(b"\r\n\r\n")
    assert decoded(client) == expected([SEARCH_1, ANSWER_TEXT])
    assert sdk(SSE, client)[-1]["candidates"][0]["finishReason"] == "STOP"


def test_an_event_without_json_passes_as_it_came() -> None:
    stitcher = SSE.stitcher(P, "{}")
    assert stitcher.feed(b": keep-alive\r\ndata: not json\r\n\r\n") == b": keep-alive\r\ndata: not json\r\n\r\n"


def test_the_array_opens_at_once_when_round_one_is_only_a_search() -> None:
    """The client's first byte is the upstream's ``[``, not held until a round whose only
    element is the search (hidden) has ended and the next round brought something to show;
    the stream is still one valid array."""
    stitcher = ARRAY.stitcher(P, "{}")
    first = realistic(SEARCH_1, False)
    assert stitcher.feed(first[:1]) == b"["
    client = b"[" + stitcher.feed(first[1:])
    assert P.encode() not in client
    stitcher.end_round()
    stitcher.next_round()
    client += stitcher.feed(realistic(ANSWER_CALL, False))
    stitcher.end_round()
    client += stitcher.finish()
    assert isinstance(json.loads(client), list) and json.loads(client)


# -- held chunks -------------------------------------------------------------------------------


UNKNOWN = b"data: not json\r\n\r\n"  # an event we do not understand


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_a_round_without_search_passes_its_finishing_chunk_at_once(adapter: GeminiAdapter) -> None:
    body = realistic(ANSWER_CALL, adapter.sse)
    events = gemini.GeminiStreamDecoder().feed(body)
    stitcher = adapter.stitcher(P, "{}")
    out = b"".join(stitcher.feed(e.raw) for e in events)
    assert out == b"".join(e.raw for e in events)  # the finishing chunk with the feed that completed it
    end = body[len(out):]  # the array's own "]"
    assert stitcher.feed(end) == b"" and stitcher.end_round().complete and stitcher.untouched
    assert stitcher.finish() == end


def test_chunks_after_the_finishing_one_pass_at_once_in_a_round_without_search() -> None:
    stitcher = SSE.stitcher(P, "{}")
    for event in gemini.GeminiStreamDecoder().feed(with_usage_tail(ANSWER_TEXT) + UNKNOWN):
        assert stitcher.feed(event.raw) == event.raw
    assert stitcher.end_round().complete and stitcher.finish() == b""


def test_once_a_round_hid_a_call_its_finishing_chunk_and_all_after_it_are_held_in_order() -> None:
    stitcher = SSE.stitcher(P, "{}")
    round1 = with_usage_tail(SEARCH_1) + UNKNOWN
    out = stitcher.feed(round1)
    assert UNKNOWN not in out and b"finishReason" not in out
    assert stitcher.end_round().complete and not stitcher.untouched
    rest = stitcher.finish()
    events = gemini.GeminiStreamDecoder().feed(rest)
    assert [e.type for e in events] == ["chunk", "chunk", "unknown"] and rest.endswith(UNKNOWN)
    assert "finishReason" in events[0].data["candidates"][0] and "usageMetadata" in events[1].data


def test_next_round_sends_a_held_chunk_it_does_not_understand_in_its_place() -> None:
    stitcher = SSE.stitcher(P, "{}")
    stitcher.feed(realistic(SEARCH_1, True) + UNKNOWN)
    stitcher.end_round()
    stitcher.next_round()
    assert stitcher.feed(realistic(ANSWER_TEXT, True)) == UNKNOWN  # round two's only chunk finishes: held
    stitcher.end_round()
    assert b"finishReason" in stitcher.finish()


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_a_round_that_hid_a_dispatcher_call_holds_its_finishing_chunk(adapter: GeminiAdapter) -> None:
    """Call-through: a round that showed a dispatcher call as its real tool is not the upstream's
    stream any more, so its closing waits for the runner too."""
    body = realistic(response("resp_d", [call(G_DISPATCH.name, {"name": "get_weather", "arguments": {}})],
                              usage(10, 2)), adapter.sse)
    stitcher = adapter.stitcher(P, "{}", G_DISPATCH)
    out = stitcher.feed(body)
    assert b"finishReason" not in out and not stitcher.untouched
    stitcher.end_round()
    assert b"finishReason" in stitcher.finish()
