"""Chat Completions stitcher: the rounds of a phantom loop as one live client stream.

Driven the way the runner drives it, with upstream rounds cut anywhere. Oracles: our own
decoder (the stitched stream decodes to ``merge`` of the stripped rounds, with round 1's
``created``: the client sees one completion), the openai SDK (``chat.completions.create(
stream=True)`` into ``ChatCompletionStreamState``, and ``chat.completions.stream``, through a
mock transport), and the grammar itself (one role, one id, consecutive tool-call indexes,
one finish_reason, ``[DONE]`` last). The scenarios every API shares run in
apis/test_stitch_contract.py on ``API``; here, what only Chat Completions streams have.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from tests.support.streams import fixture, openai_chat_final, strip_nones
from tooldisco.apis.base import Failure, RoundEnd

from tests.fakeprovider.model import ToolCall
from tests.support.stitch import CHUNKERS, P, Chunker, chunker_id, decoder_of, drive, every_byte, \
    random_splits, stitched, whole
from tests.support.stitch_openai_chat import (
    A,
    ANSWER_HEAD,
    API,
    BODY,
    DONE,
    ERROR,
    ROUND_ANSWER,
    ROUND_CALL,
    ROUND_SEARCH,
    ROUND_SEARCH_2,
    call,
    check_grammar,
    check_hidden,
    choice,
    chunk_event,
    fake_provider_round,
    fragment,
    head,
    merged,
    payloads,
    sdk_chunks,
    sdk_stream_final,
    sdk_view,
    upstream,
    usage_of,
)


# -- oracles --------------------------------------------------------------------------------
def run(rounds: list[bytes], chunker: Chunker = whole, failure: Failure | None = None) -> tuple[bytes, list[RoundEnd]]:
    return drive(A, rounds, chunker, failure, BODY)


def decoded(data: bytes) -> dict[str, Any]:
    return decoder_of(A, data).message()


def expected(rounds: list[bytes]) -> dict[str, Any]:
    return merged([decoded(r) for r in rounds])


# -- one event at a time ---------------------------------------------------------------------
def test_each_visible_chunk_leaves_with_the_feed_that_completed_it() -> None:
    """Fed one upstream event at a time: a visible chunk comes out of that very feed; the
    phantom call's fragments and the closing chunks wait."""
    data = upstream("Checking.", call("get_weather", "call_R", '{"city":"Oslo"}'), call(P, "call_S1"),
                    cid="chatcmpl-1", usage=usage_of(10, 5))
    stitcher = A.stitcher(P, "{}")
    events = [e + b"\n\n" for e in data.split(b"\n\n") if e]
    client = bytearray()
    for raw, payload in zip(events, payloads(data)):
        out = stitcher.feed(raw[:-1])  # the event's end is its blank line: not yet
        out += stitcher.feed(raw[-1:])
        client += out
        if payload == "[DONE]" or not payload["choices"] or payload["choices"][0]["finish_reason"]:
            assert out == b""  # closing: held
        elif any(tc["index"] == 1 for tc in payload["choices"][0]["delta"].get("tool_calls", [])):
            assert out == b""  # the phantom call's fragments
        else:
            assert out == raw
    assert stitcher.end_round().complete
    rest = stitcher.finish()
    assert [p if p == "[DONE]" else p["choices"] for p in payloads(rest)][-2:] == [[], "[DONE]"]
    assert bytes(client + rest) == b"".join(e for e in events if b"call_S1" not in e and b'"index":1,' not in e)


def test_one_search_joins_the_rounds_text_under_round_ones_identity() -> None:
    _, got, _ = stitched(API, [ROUND_SEARCH, ROUND_ANSWER])
    final = strip_nones(got)
    assert final["id"] == "chatcmpl-1" and final["created"] == 1763800000
    message = final["choices"][0]["message"]
    assert message == {"role": "assistant",
                       "content": "Let me look for a weather tool.\n\nIt is 21 °C in Zürich — sunny."}
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["usage"] == usage_of(400, 60, 100, 12)


@pytest.mark.parametrize("chunker", CHUNKERS[:5], ids=chunker_id)
def test_two_searches_then_a_real_call(chunker: Chunker) -> None:
    first = upstream(None, call(P, "call_S1"), cid="chatcmpl-1", usage=usage_of(100, 20))
    _, got, _ = stitched(API, [first, ROUND_SEARCH_2, ROUND_CALL], chunker)
    message = got["choices"][0]["message"]
    assert message["content"] == "Still looking." and got["choices"][0]["finish_reason"] == "tool_calls"
    assert [tc["id"] for tc in message["tool_calls"]] == ["call_R"]
    assert got["usage"] == usage_of(600, 90, 110, 3)


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_fake_provider_rounds(chunker: Chunker) -> None:
    first = fake_provider_round("I will search for a tool.", [ToolCall("call_F1", P, {"query": "weather"})], 100)
    second = fake_provider_round("", [ToolCall("call_F2", P, {"query": "forecast"})], 200)
    third = fake_provider_round("Found it.", [ToolCall("call_F3", "get_weather", {"city": "Oslo"})], 300)
    _, got, _ = stitched(API, [first, second, third], chunker)
    assert got["choices"][0]["message"]["content"] == "I will search for a tool.\n\nFound it."
    assert got["usage"]["prompt_tokens"] == 600 and got["usage"]["prompt_tokens_details"]["cached_tokens"] == 300


@pytest.mark.parametrize("include_usage", [True, False])
def test_without_a_usage_chunk(include_usage: bool) -> None:
    first = upstream("Searching.", call(P, "call_S1"), cid="chatcmpl-1", include_usage=include_usage)
    second = upstream("Done.", cid="chatcmpl-2", include_usage=include_usage)
    _, got, _ = stitched(API, [first, second], every_byte)
    assert "usage" not in strip_nones(got)


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_fragments_of_several_calls_in_one_chunk(chunker: Chunker) -> None:
    """A compatible server packing fragments of several calls (the phantom's among them) and
    content into one chunk: the visible parts stay, renumbered, in the same chunk."""
    mixed = (
        chunk_event(choice({"role": "assistant", "content": ""}))
        + chunk_event(choice({"content": "Both.", "tool_calls": [head(0, "call_S1", P, '{"query"')]}))
        + chunk_event(choice({"tool_calls": [fragment(0, ':"x"}'), head(1, "call_A", "get_weather", '{"c')]}))
        + chunk_event(choice({"tool_calls": [fragment(0, "")]}), obfuscation="pad")  # phantom only: dropped
        + chunk_event(choice({"tool_calls": [fragment(1, 'ity":"Oslo"}')]}))
        + chunk_event(choice({}, "tool_calls"))
        + DONE
    )
    out, _ = run([mixed], chunker)
    chunks = check_grammar(out)
    assert len(chunks) == 5
    assert chunks[2]["choices"][0]["delta"]["tool_calls"] == [head(0, "call_A", "get_weather", '{"c')]
    check_hidden(out, "call_S1")
    assert decoded(out) == expected([mixed])
    assert sdk_view(openai_chat_final(out))["choices"][0]["message"]["tool_calls"] == [
        {"id": "call_A", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]


def test_later_rounds_keep_round_ones_identity_and_role() -> None:
    out, _ = run([ROUND_SEARCH, ROUND_ANSWER])
    chunks = check_grammar(out)
    assert {(c["id"], c["created"]) for c in chunks} == {("chatcmpl-1", 1763800000)}
    assert sum("role" in c["choices"][0]["delta"] for c in chunks if c["choices"]) == 1
    assert b"chatcmpl-2" not in out and b"1763800009" not in out
    assert {c.id for c in sdk_chunks(out)} == {"chatcmpl-1"}


def test_side_chunks_and_padding_pass_as_they_are() -> None:
    side = b'data: {"id":"","object":"","created":0,"model":"","choices":[],"prompt_filter_results":[]}\n\n'
    filt = (b'data: {"id":"","object":"","created":0,"model":"","choices":[{"index":0,"finish_reason":null,'
            b'"content_filter_results":{"hate":{"filtered":false}}}]}\n\n')
    second = side + ROUND_ANSWER.replace(b"data: [DONE]", filt.rstrip() + b"\n\ndata: [DONE]")
    out, _ = run([side + b": keep-alive\n\n" + ROUND_SEARCH, second], random_splits(1))
    assert out.count(side) == 2 and filt in out
    assert decoded(out) == expected([ROUND_SEARCH, ROUND_ANSWER])
    # chat.completions.stream skips side chunks (object ""); a bare ChatCompletionStreamState would not
    assert sdk_view(sdk_stream_final(out)) == strip_nones(expected([ROUND_SEARCH, ROUND_ANSWER]))
    padded = fixture("openai_chat_tools_usage.sse").replace(b'"name":"get_weather"', f'"name":"{P}"'.encode(), 1)
    out, _ = run([padded, ROUND_ANSWER])
    pads = [c.get("obfuscation") for c in payloads(out) if isinstance(c, dict)]
    assert pads[:4] == ["q9kWf", "V", "8Hc", "Zq1"]  # kept, on re-serialized chunks too ("Zq1": renumbered)


def test_several_choices_are_renumbered_each_on_its_own() -> None:
    """n=2: each choice's visible calls count from 0; the phantom's are dropped in both."""
    both = (
        chunk_event(choice({"role": "assistant", "content": ""}), choice({"role": "assistant", "content": ""}, index=1))
        + chunk_event(choice({"tool_calls": [head(0, "call_S1", P, "{}")]}),
                      choice({"tool_calls": [head(0, "call_B0", "get_time", "{}")]}, index=1))
        + chunk_event(choice({"tool_calls": [head(1, "call_A1", "get_weather", "{}")]}),
                      choice({"tool_calls": [head(1, "call_S2", P, "{}")]}, index=1))
        + chunk_event(choice({"tool_calls": [head(2, "call_A2", "get_weather", "{}")]}),
                      choice({"tool_calls": [head(2, "call_B2", "get_time", "{}")]}, index=1))
        + chunk_event(choice({}, "tool_calls"), choice({}, "tool_calls", index=1)) + DONE
    )
    out, _ = run([both], random_splits(4))
    check_hidden(out, "call_S1", "call_S2")
    final = sdk_view(sdk_stream_final(out))
    assert [[tc["id"] for tc in c["message"]["tool_calls"]] for c in final["choices"]] == [
        ["call_A1", "call_A2"], ["call_B0", "call_B2"]]
    heads = [(ch["index"], tc["index"]) for c in payloads(out)[:-1] for ch in c["choices"]
             for tc in ch["delta"].get("tool_calls", [])]
    assert heads == [(1, 0), (0, 0), (0, 1), (1, 1)]
    assert decoded(out)["choices"] == A.strip(decoded(both), [P])["choices"]


def test_reasoning_content_survives() -> None:
    """Compatible servers (DeepSeek, vLLM) stream ``reasoning_content``: it goes out live, so
    the client's text is both rounds' (merge keeps the last round's)."""
    first = upstream(None, call(P, "call_S1"), cid="chatcmpl-1", usage=usage_of(1, 1), reasoning_content="Need a tool.")
    second = upstream("Sunny.", cid="chatcmpl-2", usage=usage_of(2, 2), reasoning_content="Got it.")
    out, _ = run([first, second], random_splits(2))
    check_grammar(out)
    want = expected([first, second])
    want["choices"][0]["message"]["reasoning_content"] = "Need a tool.Got it."
    assert decoded(out) == want


def test_content_in_a_closing_chunk_is_not_lost() -> None:
    """Some servers send the last content with the finish_reason. Without a search it stays in
    the chunk as it came; when the loop goes on it goes out, unfinished, with the next bytes."""
    first = (chunk_event(choice({"role": "assistant", "content": "Let me "}))
             + chunk_event(choice({"tool_calls": [head(0, "call_S1", P, "{}")]}))
             + chunk_event(choice({"content": "check.", "role": "assistant"}, "tool_calls")) + DONE)
    out, _ = run([first], every_byte)
    assert decoded(out)["choices"][0]["message"]["content"] == "Let me check."
    out, _ = run([first, ROUND_ANSWER], every_byte)
    check_grammar(out)
    check_hidden(out, "call_S1")
    want = expected([first, ROUND_ANSWER])
    want["id"], want["created"] = "chatcmpl-h", 7
    assert decoded(out) == want
    assert want["choices"][0]["message"]["content"] == "Let me check.\n\nIt is 21 °C in Zürich — sunny."
    assert sdk_view(openai_chat_final(out)) == strip_nones(want)


def test_an_unterminated_last_event_still_ends_cleanly() -> None:
    out, (end,) = run([ROUND_ANSWER.rstrip(b"\n")])
    assert end.complete and decoded(out) == decoded(ROUND_ANSWER)
    cut = b"\n\n".join(ROUND_ANSWER.split(b"\n\n")[:2])  # the content chunk left open, no [DONE]
    out, (end,) = run([cut], every_byte)
    assert not end.complete
    assert out == cut  # nothing was changed: it ends as the upstream ended it
    out, ends = run([ROUND_SEARCH, cut], every_byte)  # after a hidden search it ends with an error
    assert not ends[-1].complete
    *chunks, error, done = payloads(out)
    assert chunks[-1]["choices"][0]["delta"]["content"].endswith("It is 21 °C in Zürich — sunny.")
    assert error["error"]["message"] == "upstream stream ended early" and done == "[DONE]"


def test_error_event_in_round_two_goes_out_as_it_came_after_the_live_text() -> None:
    out, ends = run([ROUND_SEARCH, ANSWER_HEAD + ERROR + DONE], every_byte)
    assert ends[-1].error == json.loads(ERROR[6:]) and ends[-1].message is None
    assert out.endswith(ERROR + DONE) and out.count(DONE) == 1
    chunks = payloads(out)
    assert chunks[-3]["choices"][0]["delta"] == {"content": "\n\nIt is 21 °C in Zürich — sunny."}  # went live
    with pytest.raises(openai.APIError, match="The server had an error") as raised:
        sdk_chunks(out)
    assert raised.value.type == "server_error"


RATE_LIMIT = json.dumps({"error": {"message": "Rate limit reached for gpt-4.1. Please try again in 1.5s.",
                                   "type": "requests", "param": None, "code": "rate_limit_exceeded"}}).encode()
OVERLOADED = json.dumps({"error": {"message": "The server is overloaded.", "type": "server_error",
                                   "param": None, "code": None}}).encode()


@pytest.mark.parametrize(("status", "body", "error"), [
    (429, RATE_LIMIT, json.loads(RATE_LIMIT)["error"]),
    (429, b"", {"message": "upstream answered HTTP 429", "type": "rate_limit_exceeded", "param": None,
                "code": "rate_limit_exceeded"}),
    (529, b"", {"message": "upstream answered HTTP 529", "type": "server_error", "param": None,
                "code": "server_error"}),
    (500, b"<html>Bad gateway</html>", {"message": "upstream answered HTTP 500", "type": "server_error",
                                        "param": None, "code": "server_error"}),
    (503, OVERLOADED, json.loads(OVERLOADED)["error"]),
    (400, b"", {"message": "upstream answered HTTP 400", "type": "invalid_request_error", "param": None,
                "code": "invalid_request_error"}),
])
@pytest.mark.parametrize("chunker", [whole, random_splits(3)], ids=chunker_id)
def test_fail_after_round_one(status: int, body: bytes, error: dict[str, Any], chunker: Chunker) -> None:
    out, _ = run([ROUND_SEARCH], chunker, failure=Failure(status, body))
    *chunks, last, done = payloads(out)
    assert last == {"error": error} and done == "[DONE]"
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": "", "refusal": None}, {"content": "Let me look for a weather tool."}]
    check_hidden(out, "call_S1")
    with pytest.raises(openai.APIError) as raised:
        sdk_chunks(out)
    assert raised.value.message == error["message"] and raised.value.code == error["code"]
    decoder = A.decoder()
    decoder.feed(out)
    assert decoder.error == {"error": error}  # our decoder sees the upstream-style error too


def test_a_truncated_round_still_hands_the_loop_what_it_has() -> None:
    second = ROUND_ANSWER.split(b'"finish_reason":"stop"')[0].rsplit(b"data: ", 1)[0]
    out, ends = run([ROUND_SEARCH, second], every_byte)
    assert not ends[-1].complete and ends[-1].message == decoded(second)
    *_, last, done = payloads(out)
    assert last["error"]["message"] == "upstream stream ended early" and done == "[DONE]"


def test_finish_after_an_incomplete_round_is_never_an_empty_success() -> None:
    stitcher = A.stitcher(P, "{}")
    stitcher.feed(ROUND_SEARCH)
    stitcher.end_round()
    stitcher.next_round()
    assert stitcher.feed(b"") == b""
    assert stitcher.end_round() == RoundEnd(None, False, None)
    out = stitcher.finish()
    assert payloads(out) == [{"error": {"message": "upstream stream ended early", "type": "server_error",
                                        "param": None, "code": "server_error"}}, "[DONE]"]
    with pytest.raises(openai.APIError, match="upstream stream ended early"):
        sdk_chunks(out)
