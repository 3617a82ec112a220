"""Responses stitcher: the rounds of a phantom loop as one live client stream.

Driven the way the runner drives it, with upstream rounds cut anywhere. Oracles: our own
decoder (the stitched stream decodes to ``merge`` of the stripped rounds, with round 1's id
and the client's echoed tools), the openai SDK's stream parser (``responses.stream`` /
``responses.create(stream=True)`` through a mock transport), and the grammar itself
(sequence numbers, consecutive output indexes, every item's events under one index).
The scenarios every API shares run in apis/test_stitch_contract.py on ``API``; here, what only
Responses streams have.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from tests.support.adapters_responses import call, message, reasoning, usage_of
from tests.support.streams import fixture, openai_responses_final, strip_nones
from tooldisco.apis.base import Failure, RoundEnd

from tests.fakeprovider.model import Conversation, Reply, ToolCall, Usage
from tests.fakeprovider.providers.openai_responses import OpenAIResponses
from tests.support.stitch import CHUNKERS, P, Chunker, chunker_id, decoder_of, drive, every_byte, \
    random_splits, stitched, whole
from tests.support.stitch_openai_responses import (
    ANSWER_HEAD,
    API,
    BODY,
    ECHO,
    PATCH,
    R,
    ROUND_ANSWER,
    ROUND_CALL,
    ROUND_MIXED,
    ROUND_SEARCH,
    SDK_ADDED,
    SHELL,
    api,
    check_grammar,
    client_body,
    echo_of,
    error_event,
    events,
    merged,
    sdk_events,
    upstream,
)


# -- the runner and the oracles -------------------------------------------------------------
def run(rounds: list[bytes], chunker: Chunker = whole, body: str = BODY,
        failure: Failure | None = None) -> tuple[bytes, list[RoundEnd]]:
    return drive(R, rounds, chunker, failure, body)


def decoded(data: bytes) -> dict[str, Any]:
    return decoder_of(R, data).message()


def expected(rounds: list[bytes], body: str = BODY) -> dict[str, Any]:
    return merged([decoded(r) for r in rounds], body)


def check_hidden(data: bytes, *call_ids: str) -> None:
    assert P.encode() not in data
    for cid in call_ids:
        assert cid.encode() not in data


def fake_provider_round(text: str, calls: list[ToolCall], rid_usage: int) -> bytes:
    """A round as the fake provider streams it (word-split text, arguments cut anywhere)."""
    conv = Conversation(api="openai-responses", model="gpt-5-codex", stream=True, tools=["shell", P], calls=[],
                        results=[], last_user_text="hi", body={"model": "gpt-5-codex", "stream": True,
                                                              "tools": [SHELL, {"type": "function", "name": P}]})
    rendered = OpenAIResponses().render(Reply(text, calls, Usage(rid_usage, 10 + rid_usage)), conv)
    return b"".join(rendered.events)


# -- no search: the stream passes as it came ------------------------------------------------
@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_no_search_is_byte_identical(chunker: Chunker) -> None:
    """The fixture echoes the client's own tools: nothing to change, every byte as it came."""
    data = fixture("openai_responses_reasoning_tool.sse")
    original = decoded(data)
    body = client_body(tools=original["tools"], tool_choice=original["tool_choice"])
    out, (end,) = run([data], chunker, body)
    assert out == data
    assert end == RoundEnd(original, True, None)


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_no_search_changes_only_the_echoed_fields(chunker: Chunker) -> None:
    data = upstream(reasoning(), message("Hello — «done»."), call("shell", "call_R", '{"command":"ls"}'),
                    rid="resp_1")
    out, _ = run([data], chunker)
    ours, theirs = events(out), events(data)
    assert len(ours) == len(theirs)
    raw_ours, raw_theirs = out.split(b"\n\n"), data.split(b"\n\n")
    for (name, mine), (_, upstream_payload), a, b in zip(ours, theirs, raw_ours, raw_theirs):
        if "response" in upstream_payload:  # created, in_progress, completed: the echo restored
            assert mine == {**upstream_payload, "response": {**upstream_payload["response"], **ECHO}}
        else:
            assert a == b, name
    assert strip_nones(openai_responses_final(out, chunk=29), SDK_ADDED) == strip_nones(expected([data]))


def test_each_visible_event_leaves_with_the_feed_that_completed_it() -> None:
    """Live: fed one upstream event at a time, a visible event comes out of that very feed;
    only the phantom call, the reasoning that awaits its next item and the terminal wait."""
    data = upstream(message("Let me look.", "msg_1"), reasoning("rs_1"), call(P, "call_S1"),
                    message("Searching.", "msg_2"), rid="resp_1")
    stitcher = R.stitcher(P, BODY)
    chunks = [e + b"\n\n" for e in data.split(b"\n\n") if e]
    client = bytearray()
    for chunk, (_, payload) in zip(chunks, events(data)):
        out = stitcher.feed(chunk)
        client += out
        got = [p for _, p in events(out)]
        item = payload.get("item") or {}
        if payload["type"] == "response.completed" or payload.get("item_id") == "fc_call_S1" \
                or item.get("id") == "fc_call_S1":
            assert out == b""
        elif payload.get("item_id") == "rs_1" or item.get("id") == "rs_1":
            assert out == b""  # held: is it followed by a visible item?
        elif payload["type"] == "response.output_item.added" and item.get("id") == "msg_2":
            # the message shows the reasoning led to something visible: it goes first
            assert [p.get("item_id", p.get("item", {}).get("id")) for p in got][-1] == "msg_2"
            assert {p.get("item_id", p.get("item", {}).get("id")) for p in got[:-1]} == {"rs_1"}
        else:
            assert [p["type"] for p in got] == [payload["type"]]
            assert {k: v for k, v in got[0].items() if k not in ("sequence_number", "output_index", "response")} == \
                   {k: v for k, v in payload.items() if k not in ("sequence_number", "output_index", "response")}
    assert stitcher.end_round().complete
    final = check_grammar(bytes(client + stitcher.finish()))
    assert [i["id"] for i in final[-1]["response"]["output"]] == ["msg_1", "rs_1", "msg_2"]


def test_one_search_keeps_round_ones_id_and_drops_reasoning_that_led_only_to_it() -> None:
    _, got, _ = stitched(API, [ROUND_SEARCH, ROUND_ANSWER])
    assert [i["id"] for i in got["output"]] == ["rs_2", "msg_2"]  # rs_1 led only to the search: gone
    assert got["id"] == "resp_1" and got["previous_response_id"] is None
    assert got["usage"] == usage_of(2200, 1800, 70, 35)


@pytest.mark.parametrize("chunker", CHUNKERS[:5], ids=chunker_id)
def test_two_searches_with_text_and_kept_reasoning(chunker: Chunker) -> None:
    first = upstream(reasoning("rs_1"), call(P, "call_S1"), message("Looking further.", "msg_1"), rid="resp_1")
    second = upstream(call(P, "call_S2", '{"query":"slack"}'), reasoning("rs_2"), rid="resp_2",
                      usage=usage_of(1100, 900, 10, 10))  # a reasoning item at the very end stays
    _, got, _ = stitched(API, [first, second, ROUND_CALL], chunker)
    assert [i["id"] for i in got["output"]] == ["rs_1", "msg_1", "rs_2", "rs_3", "fc_call_P"]
    assert got["usage"]["total_tokens"] == 1050 + 1110 + 1330
    assert got["usage"]["output_tokens_details"] == {"reasoning_tokens": 60}


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_fake_provider_rounds(chunker: Chunker) -> None:
    first = fake_provider_round("I will search for a tool.", [ToolCall("call_F1", P, {"query": "report"})], 100)
    second = fake_provider_round("", [ToolCall("call_F2", P, {"query": "post"})], 200)
    third = fake_provider_round("Done: the report is posted.", [ToolCall("call_F3", "shell", {"command": "ls"})], 300)
    _, got, _ = stitched(api(client_body(tools=[SHELL])), [first, second, third], chunker)
    assert [i["type"] for i in got["output"]] == ["message", "message", "function_call"]
    assert got["usage"]["input_tokens"] == 600


def test_a_mixed_round_keeps_the_reasoning_before_the_real_call_and_the_message() -> None:
    _, got, _ = stitched(API, [ROUND_MIXED])
    assert [i["id"] for i in got["output"]] == ["rs_1", "fc_call_R", "rs_2", "msg_1"]


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_reasoning_steps_decide_what_stays(chunker: Chunker) -> None:
    """rs_a's step is empty (another reasoning item follows): kept. rs_b led to the search only:
    dropped. rs_c led to the search and a message: kept, before the message."""
    steps = upstream(reasoning("rs_a"), reasoning("rs_b"), call(P, "call_S1"), reasoning("rs_c"),
                     call(P, "call_S2"), message("Searching twice.", "msg_1"), rid="resp_1")
    client, got, _ = stitched(API, [steps, ROUND_ANSWER], chunker)
    assert b"rs_b" not in client
    assert [i["id"] for i in got["output"]] == ["rs_a", "rs_c", "msg_1", "rs_2", "msg_2"]


def test_an_incomplete_last_round_ends_the_stream_as_incomplete() -> None:
    last = upstream(message("Cut short", "msg_2"), rid="resp_2", status="incomplete",
                    incomplete_details={"reason": "max_output_tokens"})
    out, _ = run([ROUND_SEARCH, last], every_byte)
    payloads = check_grammar(out)
    assert payloads[-1]["type"] == "response.incomplete" and payloads[-1]["response"]["status"] == "incomplete"
    assert decoded(out) == expected([ROUND_SEARCH, last])
    assert sdk_events(out)[-1].response.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize(("sent", "echo"), [
    (client_body(tools=None, tool_choice=None), {"tools": [], "tool_choice": "auto"}),  # what the API echoes
    (client_body(tool_choice={"type": "function", "name": "shell"}),
     {"tools": [SHELL, PATCH], "tool_choice": {"type": "function", "name": "shell"}}),
])
def test_every_response_object_echoes_the_clients_request(sent: str, echo: dict[str, Any]) -> None:
    assert echo_of(sent) == echo
    stitched(api(sent), [ROUND_SEARCH, ROUND_ANSWER])


def test_an_error_event_in_round_two_is_renumbered_and_nothing_else() -> None:
    out, ends = run([ROUND_SEARCH, ANSWER_HEAD + error_event(11)], every_byte)  # the round's next number
    assert ends[-1].error == json.loads(error_event(11).split(b"data: ")[1])
    assert ends[-1].message is None and not ends[-1].complete
    payloads = check_grammar(out)
    assert payloads[-1] == {**ends[-1].error, "sequence_number": len(payloads) - 1}  # the count, nothing else
    assert [p["type"] for p in payloads].count("response.output_text.delta") == 1  # round 2's text went live


RATE_LIMIT = json.dumps({"error": {"message": "Rate limit reached for gpt-5. Please try again in 1.5s.",
                                   "type": "requests", "param": None, "code": "rate_limit_exceeded"}}).encode()
OVERLOADED = json.dumps({"error": {"message": "The server is overloaded.", "type": "server_error",
                                   "param": None, "code": None}}).encode()


@pytest.mark.parametrize(("status", "body", "code", "kind", "text"), [
    (429, RATE_LIMIT, "rate_limit_exceeded", "requests", "Rate limit reached for gpt-5. Please try again in 1.5s."),
    (429, b"", "rate_limit_exceeded", "rate_limit_exceeded", "upstream answered HTTP 429"),
    (529, b"", "server_error", "server_error", "upstream answered HTTP 529"),
    (500, b"<html>Bad gateway</html>", "server_error", "server_error", "upstream answered HTTP 500"),
    (503, OVERLOADED, "server_error", "server_error", "The server is overloaded."),
    (400, b"", "invalid_request_error", "invalid_request_error", "upstream answered HTTP 400"),
])
@pytest.mark.parametrize("chunker", [whole, random_splits(3)], ids=chunker_id)
def test_fail_after_round_one(status: int, body: bytes, code: str, kind: str, text: str, chunker: Chunker) -> None:
    visible = upstream(message("Searching.", "msg_1"), call(P, "call_S1"), rid="resp_1")
    out, _ = run([visible], chunker, failure=Failure(status, body))
    payloads = check_grammar(out)
    error, failed = payloads[-2:]
    assert error == {"type": "error", "sequence_number": len(payloads) - 2, "code": code, "message": text,
                     "param": None, "error": {"type": kind, "code": code, "message": text, "param": None}}
    assert failed["type"] == "response.failed"
    response_failed = failed["response"]
    assert response_failed["status"] == "failed" and response_failed["error"] == {"code": code, "message": text}
    assert response_failed["id"] == "resp_1" and [i["id"] for i in response_failed["output"]] == ["msg_1"]
    check_hidden(out, "call_S1")
    with pytest.raises(openai.APIError) as raised:
        sdk_events(out)
    assert raised.value.message == text and raised.value.code == code
    decoder = R.decoder()
    decoder.feed(out)
    assert decoder.error == error  # our decoder sees the upstream-style error too


def test_a_truncated_round_fails_with_what_streamed_and_round_ones_usage() -> None:
    second = ROUND_ANSWER.split(b"event: response.content_part.done")[0]
    out, ends = run([ROUND_SEARCH, second], every_byte)
    assert not ends[-1].complete and ends[-1].message == decoded(second)
    payloads = check_grammar(out)
    assert [p["type"] for p in payloads[-2:]] == ["error", "response.failed"]
    output = payloads[-1]["response"]["output"]
    assert [(i["id"], i.get("status")) for i in output] == [("rs_2", None), ("msg_2", "in_progress")]
    assert payloads[-1]["response"]["usage"] == usage_of(1000, 800, 50, 30)  # round 1's: round 2 never ended


def test_an_empty_body_passes_as_it_came() -> None:
    out, (end,) = run([b""])
    assert end == RoundEnd(None, False, None) and out == b""


def test_failure_before_any_byte_still_opens_the_stream() -> None:
    stitcher = R.stitcher(P, BODY)
    out = stitcher.fail(Failure(502, message="upstream stream ended early"))
    payloads = check_grammar(out)
    assert [p["type"] for p in payloads] == ["response.created", "error", "response.failed"]
    assert payloads[0]["response"]["id"] == payloads[2]["response"]["id"]
    assert payloads[0]["response"]["model"] == "gpt-5-codex"
    with pytest.raises(openai.APIError, match="upstream stream ended early"):
        sdk_events(out)


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_upstream_response_failed_is_stitched_and_reported(chunker: Chunker) -> None:
    error = {"code": "server_error", "message": "The model failed."}
    second = upstream(message("Partial.", "msg_2"), rid="resp_2", status="failed", error=error,
                      usage=usage_of(10, 0, 1, 0))
    out, ends = run([ROUND_SEARCH, second], chunker)
    assert ends[-1].error["type"] == "response.failed" and ends[-1].complete
    payloads = check_grammar(out)
    final = payloads[-1]["response"]
    assert payloads[-1]["type"] == "response.failed" and final["error"] == error
    assert decoded(out) == expected([ROUND_SEARCH, second])
    assert final["usage"]["input_tokens"] == 1010


def test_the_echo_goes_out_as_the_client_wrote_it() -> None:
    """The echoed ``tools`` are the client's own bytes (its escapes, its spacing), spliced into
    the events that carry them, not parsed and re-serialized: a catalog of thousands of tools
    costs no JSON work per event. The SDK reads the same values."""
    tools = '[ {"type": "function", "name": "shell", "description": "caf\\u00e9 \\/ runs", "parameters": {}} ]'
    body = '{"model": "gpt-5-codex", "input": "hi", "stream": true, "tools": ' + tools + ', "tool_choice": "auto"}'
    data = upstream(message("Hello.", "msg_1"), rid="resp_1")
    out, _ = run([data], whole, body)
    carrying = [e for e in out.split(b"\n\n") if b'"response"' in e]
    assert len(carrying) == 3  # created, in_progress, completed
    assert all(tools.encode() in e for e in carrying)
    final = openai_responses_final(out, chunk=29)
    assert final["tools"] == json.loads(tools) and P.encode() not in out


@pytest.mark.parametrize("rounds", [[ROUND_ANSWER], [ROUND_SEARCH, ROUND_ANSWER], [ROUND_MIXED]],
                         ids=["answer", "search", "mixed"])
def test_the_stitcher_assembles_what_the_client_assembles(rounds: list[bytes]) -> None:
    """``shown()``: the client's message assembled from the events as they were emitted, so the
    runner does not parse the stitched stream (whose lifecycle events carry the whole catalog)
    a second time. Its output and id are the client's; its echo is not kept."""
    stitcher = R.stitcher(P, BODY)
    out = bytearray()
    for i, data in enumerate(rounds):
        if i:
            stitcher.next_round()
        out += stitcher.feed(data)
        stitcher.end_round()
    out += stitcher.finish()
    client, ours = decoder_of(R, bytes(out)).message(), stitcher.shown().message()
    assert ours["output"] == client["output"] and ours["id"] == client["id"] and ours["usage"] == client["usage"]
