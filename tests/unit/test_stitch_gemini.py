"""Gemini stitcher: the rounds of a phantom loop as one live client stream, in both framings.

Oracles: our decoder (the stitched stream decodes to ``merge`` of the stripped rounds) and
google-genai's real client (``generate_content_stream`` over an ``httpx.MockTransport``): it
parses and validates every chunk into ``GenerateContentResponse`` and raises on an
``{"error": ...}`` chunk. The SDK asks only for ``alt=sse``; the JSON-array form is checked
as one JSON document whose elements go through the same client. Every case runs under
several chunkings (whole, every byte, seeded random splits).

Documented difference from ``merge``: ``merge`` keeps each round's parts apart, while the
client's assembler (ours, and Gemini CLI's) folds adjacent plain text parts of the same
kind across chunks, so the expected message is folded the same way (``folded``).
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from google.genai import errors as genai_errors
from test_streams_support import fixture, gemini_chunks
from tooldisco.providers.gemini import STAND_IN_SIGNATURE, GeminiAdapter
from tooldisco.stitch import Failure, RoundEnd
from tooldisco.streams import gemini
from tooldisco.streams.sse import encode_event

from tests.fakeprovider.model import Conversation, Reply, ToolCall, Usage
from tests.fakeprovider.providers.gemini import Gemini

P = "gateway_search_tools"
SSE = GeminiAdapter(stream=True, sse=True)
ARRAY = GeminiAdapter(stream=True, sse=False)
FORMS = [SSE, ARRAY]
Chunker = Callable[[bytes], list[bytes]]


def form_id(adapter: GeminiAdapter) -> str:
    return "sse" if adapter.sse else "array"


# -- upstream rounds ---------------------------------------------------------------------------


def text(value: str, thought: bool = False, signature: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"text": value}
    if thought:
        part["thought"] = True
    if signature:
        part["thoughtSignature"] = signature
    return part


def call(name: str, args: dict[str, Any], signature: str | None = None, id_: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": name, "args": args, **({"id": id_} if id_ else {})}}
    if signature:
        part["thoughtSignature"] = signature
    return part


def sig(label: str) -> str:
    """A thought signature: opaque base64 (google-genai validates it as bytes)."""
    return base64.b64encode(label.encode()).decode()


def usage(prompt: int, out: int, thoughts: int = 0, cached: int = 0) -> dict[str, Any]:
    u: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": out,
        "totalTokenCount": prompt + out + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if thoughts:
        u["thoughtsTokenCount"] = thoughts
    if cached:
        u["cachedContentTokenCount"] = cached
        u["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    return u


def response(rid: str, parts: list[dict[str, Any]], u: dict[str, Any]) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0, "finishReason": "STOP"}],
        "usageMetadata": u,
        "modelVersion": "gemini-3-pro-preview",
        "responseId": rid,
    }


SEARCH_1 = response(
    "resp_round1",
    [
        text("I need a weather tool; none is loaded. 🌦", thought=True),
        text("Let me look for the right tool. "),
        call(P, {"query": "weather"}, signature=sig("SIG_phantom_1")),
    ],
    usage(100, 20, thoughts=30, cached=50),
)
SEARCH_2 = response(
    "resp_round2", [call(P, {"query": "forecast"}, sig("SIG_phantom_2"), "call_phantom_2")], usage(150, 8)
)
ANSWER_CALL = response(
    "resp_round3",
    [
        text("Now get_weather is loaded.", thought=True),
        text("Checking Paris — un instant."),
        call("get_weather", {"city": "Paris", "unit": "°C"}, signature=sig("SIG_weather")),
    ],
    usage(220, 40, thoughts=12, cached=60),
)
ANSWER_TEXT = response("resp_round_text", [text("It is sunny in Paris, 21 °C ☀️.")], usage(210, 15))
MIXED = response(
    "resp_mixed",
    [
        text("Two things at once."),
        call(P, {"query": "calendar"}, sig("SIG_phantom_m"), "call_phantom_m"),
        call("read_file", {"path": "a.txt"}),
    ],
    usage(90, 25),
)
# The call first, the step's signature trailing on an empty text part in the finishing chunk.
CALL_FIRST = response(
    "resp_call_first",
    [call(P, {"query": "files"}, id_="call_phantom_f"), text("", signature=sig("SIG_tail"))],
    usage(80, 5),
)
PHANTOM_TRACES = [
    P,
    "call_phantom_2",
    "call_phantom_m",
    "call_phantom_f",
    *map(sig, ["SIG_phantom_1", "SIG_phantom_2", "SIG_phantom_m"]),
]


def realistic(m: dict[str, Any], sse: bool) -> bytes:
    """The stream as Google writes it: spaced JSON, a running usage on every chunk (prompt only
    until the last), CRLF SSE or an indented array with ``\\n,\\r\\n`` separators."""
    chunks = gemini.chunks(m)
    prompt_only = {k: v for k, v in m["usageMetadata"].items() if k.startswith("prompt")}
    for chunk in chunks[:-1]:
        chunk["usageMetadata"] = {**prompt_only, "totalTokenCount": prompt_only["promptTokenCount"]}
    if sse:
        return b"".join(encode_event(json.dumps(c, ensure_ascii=False), newline="\r\n") for c in chunks)
    return ("[" + "\n,\r\n".join(json.dumps(c, indent=2, ensure_ascii=False) for c in chunks) + "\n]").encode()


def fake(reply_text: str, calls: list[str], tokens: int, sse: bool) -> bytes:
    """One round written by the fake provider's own stream writer (LF SSE, ``\\r\\n,`` arrays)."""
    conv = Conversation(
        api="gemini",
        model="gemini-3-pro-preview",
        stream=True,
        tools=[P, "read_file"],
        calls=[],
        results=[],
        last_user_text="hi",
        body={},
        meta={"sse": sse},
    )
    reply = Reply(reply_text, [ToolCall("", name, {"query": name}) for name in calls], Usage(tokens, tokens // 4))
    return b"".join(Gemini().render(reply, conv).events)  # type: ignore[union-attr]


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
    adapter: GeminiAdapter,
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
        calls = adapter.calls(end.message or {})
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


def decoded(body: bytes) -> dict[str, Any]:
    decoder = gemini.GeminiStreamDecoder()
    decoder.feed(body)
    decoder.feed(b"")
    assert decoder.done
    return decoder.message()


def folded(m: dict[str, Any]) -> dict[str, Any]:
    """``m`` with adjacent text parts folded as a client's assembler folds streamed chunks."""
    return decoded(gemini.encode(m))


def expected(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return folded(SSE.merge([SSE.strip(m, [P]) for m in rounds]))


def elements(adapter: GeminiAdapter, client: bytes) -> list[dict[str, Any]]:
    """The client's chunks, framing checked: SSE events, or one JSON array document."""
    if adapter.sse:
        events = gemini.GeminiStreamDecoder().feed(client)
        assert b"".join(e.raw for e in events) == client  # every byte is in a whole event
        return [e.data for e in events]
    document = json.loads(client)
    assert isinstance(document, list)
    return document


def sdk(adapter: GeminiAdapter, client: bytes, chunk: int = 7) -> list[dict[str, Any]]:
    """google-genai's parse of the stream; raises its ``APIError`` on an error chunk. The SDK
    requests ``alt=sse`` only, so array elements are handed to it as SSE events."""
    if not adapter.sse:
        client = b"".join(encode_event(json.dumps(e)) for e in elements(adapter, client))
    chunks = gemini_chunks(client, chunk=chunk)
    for c in chunks:
        c.pop("sdkHttpResponse", None)
    return chunks


def assert_no_phantom(client: bytes) -> None:
    assert not any(trace.encode() in client for trace in PHANTOM_TRACES)


def check_sdk(chunks: list[dict[str, Any]], got: dict[str, Any]) -> None:
    """No phantom trace, one finishReason (last), round 1's id, usage only growing to the sum."""
    assert P not in json.dumps(chunks)
    finishing = [i for i, c in enumerate(chunks) if any("finishReason" in d for d in c.get("candidates", []))]
    assert finishing == [len(chunks) - 1] and chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert {c.get("responseId") for c in chunks} == {got["responseId"]}
    usages = [c["usageMetadata"] for c in chunks if "usageMetadata" in c]
    for key in ("promptTokenCount", "candidatesTokenCount", "totalTokenCount", "thoughtsTokenCount"):
        counts = [u.get(key, 0) for u in usages]
        assert counts == sorted(counts)
    assert usages[-1] == got["usageMetadata"]
    assembler = gemini.GeminiAssembler()
    for c in chunks:
        assembler.apply(None, c)
    assert same_signatures(assembler.message()) == same_signatures(got)


def signature_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_"))


def same_signatures(value: Any) -> Any:
    """``value`` with each thoughtSignature as its bytes: the SDK writes them back url-safe."""
    if isinstance(value, dict):
        return {k: signature_bytes(v) if k == "thoughtSignature" else same_signatures(v) for k, v in value.items()}
    if isinstance(value, list):
        return [same_signatures(v) for v in value]
    return value


def check_stitched(
    adapter: GeminiAdapter, rounds: list[dict[str, Any]], chunker: Chunker, **kwargs: Any
) -> tuple[bytes, dict[str, Any]]:
    """Both oracles on the stitched stream of ``rounds``; returns the client bytes and message."""
    client, ends = drive(adapter, [realistic(m, adapter.sse) for m in rounds], chunker, **kwargs)
    assert [end.message for end in ends] == rounds  # the decoder's own assembly, phantom calls included
    assert all(end.complete and end.error is None for end in ends)
    assert_no_phantom(client)
    elements(adapter, client)
    got = decoded(client)
    assert got == expected(rounds)
    check_sdk(sdk(adapter, client), got)
    return client, got


# -- no search: byte identity ------------------------------------------------------------------


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    ("adapter", "body"),
    [
        (SSE, fixture("gemini_thoughts_calls.sse")),
        (ARRAY, fixture("gemini_text_array.json")),
        (SSE, gemini.encode(ANSWER_CALL, sse=True)),
        (ARRAY, gemini.encode(ANSWER_CALL, sse=False)),
        (SSE, realistic(ANSWER_CALL, sse=True)),
        (ARRAY, realistic(ANSWER_TEXT, sse=False)),
        (SSE, fake("Here it is.", ["read_file"], 40, sse=True)),
        (ARRAY, fake("Here it is.", ["read_file"], 40, sse=False)),
    ],
    ids=["fixture-sse", "fixture-array", "encoded-sse", "encoded-array", "google-sse", "google-array",
         "fake-sse", "fake-array"],
)
def test_a_round_without_search_is_forwarded_byte_for_byte(
    adapter: GeminiAdapter, body: bytes, chunker: Chunker
) -> None:
    client, ends = drive(adapter, [body], chunker)
    assert client == body
    assert ends[0].message == decoded(body) and ends[0].complete


# -- stitched rounds ---------------------------------------------------------------------------


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_one_search_then_a_visible_call(adapter: GeminiAdapter, chunker: Chunker) -> None:
    client, got = check_stitched(adapter, [SEARCH_1, ANSWER_CALL], chunker)
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


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_two_searches_then_text(adapter: GeminiAdapter, chunker: Chunker) -> None:
    _, got = check_stitched(adapter, [SEARCH_1, SEARCH_2, ANSWER_TEXT], chunker)
    assert got["usageMetadata"]["promptTokenCount"] == 100 + 150 + 210
    assert not SSE.calls(got)


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_mixed_round_streams_the_real_call_with_the_step_signature(adapter: GeminiAdapter, chunker: Chunker) -> None:
    _, got = check_stitched(adapter, [MIXED], chunker)
    text_part, real = got["candidates"][0]["content"]["parts"]
    assert text_part == {"text": "Two things at once."}
    # The hidden phantom call held the step's signature: Gemini 3 wants one on the first call.
    assert real == {
        "functionCall": {"name": "read_file", "args": {"path": "a.txt"}},
        "thoughtSignature": STAND_IN_SIGNATURE,
    }


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_max_loops_ends_a_phantom_only_round_as_a_plain_stop(adapter: GeminiAdapter, chunker: Chunker) -> None:
    _, got = check_stitched(adapter, [SEARCH_1], chunker, max_rounds=1)
    assert got["usageMetadata"] == SEARCH_1["usageMetadata"]
    client, got = check_stitched(adapter, [SEARCH_1, SEARCH_2], chunker, max_rounds=2)
    last = elements(adapter, client)[-1]["candidates"][0]  # round 2 showed nothing but its finish
    assert last["content"]["parts"] == [] and last["finishReason"] == "STOP"


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_a_round_opening_with_the_phantom_call(adapter: GeminiAdapter, chunker: Chunker) -> None:
    """Round 1's first chunk is hidden: the array still opens with ``[`` on the first element the
    client gets, and the signature on the trailing empty text part survives."""
    client, got = check_stitched(adapter, [CALL_FIRST, ANSWER_TEXT], chunker)
    # The signed empty part opens the text that follows it (the assembler's folding rule).
    assert got["candidates"][0]["content"]["parts"] == [
        {"text": "It is sunny in Paris, 21 °C ☀️.", "thoughtSignature": sig("SIG_tail")}
    ]
    if not adapter.sse:
        assert client.startswith(b"[{")


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
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
    held one never; what ``next_round`` releases goes out with the next feed."""
    stitcher = adapter.stitcher(P, "{}")
    released = False  # the previous round's finishing chunk had a part to show
    for k, m in enumerate([CALL_FIRST, SEARCH_1, SEARCH_2, ANSWER_CALL], 1):
        body = realistic(m, adapter.sse)
        events = gemini.GeminiStreamDecoder().feed(body)
        for number, event in enumerate(events, 1):
            parts = event.data["candidates"][0]["content"]["parts"]
            visible = number < len(events) and not all(p.get("functionCall", {}).get("name") == P for p in parts)
            returned = [stitcher.feed(event.raw[i : i + 1]) for i in range(len(event.raw))]
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

OVERLOADED = {
    "error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}
}


def with_error(adapter: GeminiAdapter, m: dict[str, Any], error: dict[str, Any]) -> bytes:
    """``m``'s first chunk, then an in-stream error as Google writes it in each framing, then
    (which no client may see) the rest of ``m``."""
    events = gemini.GeminiStreamDecoder().feed(realistic(m, adapter.sse))
    head, rest = events[0].raw, b"".join(e.raw for e in events[1:])
    if adapter.sse:
        return head + encode_event(json.dumps(error), newline="\r\n") + rest
    return head + b"\n,\r\n" + json.dumps(error, indent=2).encode() + rest + b"\n]"


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_an_error_chunk_in_round_two_is_passed_on_at_once(adapter: GeminiAdapter, chunker: Chunker) -> None:
    rounds = [realistic(SEARCH_1, adapter.sse), with_error(adapter, ANSWER_CALL, OVERLOADED)]
    client, ends = drive(adapter, rounds, chunker)
    assert ends[-1].error == OVERLOADED and ends[-1].message is None
    assert elements(adapter, client)[-1] == OVERLOADED
    assert_no_phantom(client)
    with pytest.raises(genai_errors.ServerError) as raised:
        sdk(adapter, client)
    assert raised.value.code == 503 and raised.value.status == "UNAVAILABLE"


def test_the_error_goes_out_with_the_feed_that_completes_it() -> None:
    stitcher = ARRAY.stitcher(P, "{}")
    body = with_error(ARRAY, ANSWER_TEXT, OVERLOADED)
    cut = body.index(b"\n}", body.index(b'"error"')) + 2  # the error element is whole, nothing after it yet
    out = stitcher.feed(body[:cut])
    assert json.loads(out)[-1] == OVERLOADED  # the array is closed at once
    assert stitcher.feed(body[cut:]) == b"" and stitcher.end_round().error == OVERLOADED
    assert stitcher.fail(Failure(502)) == b"" and stitcher.finish() == b""


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
@pytest.mark.parametrize("chunker", [whole, every_byte], ids=lambda c: c.__name__)
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
    assert_no_phantom(client)
    with pytest.raises(kind) as raised:
        sdk(adapter, client)
    assert (raised.value.code, raised.value.status, raised.value.message) == (code, code_name, text)


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_fail_before_anything_was_shown_is_still_a_whole_stream(adapter: GeminiAdapter) -> None:
    client, _ = drive(adapter, [realistic(SEARCH_2, adapter.sse)], whole, failure=Failure(500))
    assert [list(c) for c in elements(adapter, client)] == [["error"]]
    with pytest.raises(genai_errors.ServerError):
        sdk(adapter, client)


@pytest.mark.parametrize("chunker", CHUNKERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_a_truncated_round_ends_with_an_error(adapter: GeminiAdapter, chunker: Chunker) -> None:
    round2 = realistic(ANSWER_CALL, adapter.sse)
    client, ends = drive(adapter, [realistic(SEARCH_1, adapter.sse), round2[: len(round2) * 2 // 3]], chunker)
    assert not ends[-1].complete and ends[-1].error is None
    error = elements(adapter, client)[-1]["error"]
    assert error == {"code": 502, "message": "upstream stream ended early", "status": "INTERNAL"}
    assert_no_phantom(client)
    with pytest.raises(genai_errors.ServerError) as raised:
        sdk(adapter, client)
    assert raised.value.code == 502


def test_an_unterminated_last_sse_event_is_re_encoded_whole() -> None:
    body = realistic(ANSWER_TEXT, sse=True).removesuffix(b"\r\n\r\n")
    client, ends = drive(SSE, [body], every_byte)
    assert ends[0].complete and client.endswith(b"\r\n\r\n")
    assert decoded(client) == ANSWER_TEXT and sdk(SSE, client)[-1]["candidates"][0]["finishReason"] == "STOP"


def test_an_event_without_json_passes_as_it_came() -> None:
    stitcher = SSE.stitcher(P, "{}")
    assert stitcher.feed(b": keep-alive\r\ndata: not json\r\n\r\n") == b": keep-alive\r\ndata: not json\r\n\r\n"
