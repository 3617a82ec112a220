"""What the runner relies on from every stitcher (``tooldisco.apis.base``), one set of
scenarios run on every API: each API's rounds written as its provider writes them, every
chunking, and the API's own decoder, grammar and official SDK as oracles (``Api``, built in
test_stitch_<api>.py, which also holds what only that API has)."""

import re
from typing import Any

import pytest
from tests.support.stitch_anthropic import API as ANTHROPIC
from tests.support.stitch_bedrock_converse import API as CONVERSE
from tests.support.stitch_bedrock_invoke import API as INVOKE
from tests.support.stitch_gemini import API_ARRAY as GEMINI_ARRAY
from tests.support.stitch_gemini import API_SSE as GEMINI_SSE
from tests.support.stitch_openai_chat import API as CHAT
from tests.support.stitch_openai_responses import API as RESPONSES
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter
from tooldisco.apis.base import Failure

from tests.support.stitch import CHUNKERS, P, Api, Chunker, chunker_id, decoder_of, drive, every_byte, stitched, \
    summed, whole

APIS = {"anthropic": ANTHROPIC, "chat": CHAT, "responses": RESPONSES, "gemini-sse": GEMINI_SSE,
        "gemini-array": GEMINI_ARRAY, "converse": CONVERSE, "invoke": INVOKE}


@pytest.fixture(params=list(APIS))
def api(request) -> Api:
    return APIS[request.param]


def names(api: Api, message: dict[str, Any]) -> list[str]:
    return [c.name for c in api.adapter.calls(message)]


def visible(api: Api, messages: list[dict[str, Any]]) -> list[str]:
    """The calls the client must see: the last round's, but the search's."""
    return [n for n in names(api, messages[-1]) if n != P]


def error_text(error: Any) -> str:
    """The human-readable message in an API's error payload, wherever the API puts it."""
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return error["message"]
        for value in error.values():
            if text := error_text(value):
                return text
    return ""


def the_same_error(client: Any, upstream: Any) -> bool:
    """The client's error event is the upstream's (its ``sequence_number`` is the client stream's: Responses)."""
    def plain(e: Any) -> Any:
        return {k: v for k, v in e.items() if k != "sequence_number"} if isinstance(e, dict) else e

    return plain(client) == plain(upstream)


def raises_with(api: Api, client: bytes, text: str) -> None:
    """The API's SDK reading ``client`` raises its error, saying ``text``."""
    with pytest.raises(api.sdk_error, match=re.escape(text)):
        api.sdk(client)


# -- no search: byte identity ---------------------------------------------------------------------


PLAIN = [(APIS[name], body) for name in APIS for body in APIS[name].plain]
PLAIN_IDS = [f"{name}-{i}" for name in APIS for i in range(len(APIS[name].plain))]


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
@pytest.mark.parametrize(("plain", "body"), PLAIN, ids=PLAIN_IDS)
def test_a_round_without_search_is_forwarded_byte_for_byte(plain: Api, body: bytes, chunker: Chunker) -> None:
    client, (end,) = drive(plain.adapter, [body], chunker, body=plain.body)
    assert client == body
    assert end.complete and end.error is None and end.message == decoder_of(plain.adapter, body).message()


# -- stitched rounds ------------------------------------------------------------------------------


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_one_search_then_a_visible_call(api: Api, chunker: Chunker) -> None:
    _, got, ends = stitched(api, [api.rounds["search"], api.rounds["call"]], chunker)
    messages = [end.message for end in ends]
    assert names(api, got) == visible(api, messages) and names(api, got)
    assert api.stop(got) == api.stops[0]
    assert api.ident(got) == api.ident(messages[0])  # one response: round one's identity
    assert api.usage(got) == summed([api.usage(m) for m in messages])


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_two_searches_then_text(api: Api, chunker: Chunker) -> None:
    _, got, ends = stitched(api, [api.rounds["search"], api.rounds["search_2"], api.rounds["text"]], chunker)
    messages = [end.message for end in ends]
    assert names(api, got) == [] and api.stop(got) == api.stops[1]
    assert api.ident(got) == api.ident(messages[0])
    assert api.usage(got) == summed([api.usage(m) for m in messages])


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_a_mixed_round_streams_the_real_call_and_hides_the_search(api: Api, chunker: Chunker) -> None:
    _, got, ends = stitched(api, [api.rounds["mixed"]], chunker)
    assert P in names(api, ends[0].message)  # the round had a search call ...
    assert names(api, got) == visible(api, [ends[0].message]) and names(api, got)  # ... the client sees the rest
    assert api.stop(got) == api.stops[0]


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
@pytest.mark.parametrize("searches", [1, 2])
def test_max_loops_ends_a_search_only_round_as_a_plain_stop(api: Api, chunker: Chunker, searches: int) -> None:
    rounds = [api.rounds["search"], api.rounds["search_2"]][:searches]
    _, got, ends = stitched(api, rounds, chunker)
    messages = [end.message for end in ends]
    assert names(api, got) == [] and api.stop(got) == api.stops[1]
    assert api.usage(got) == summed([api.usage(m) for m in messages])


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_an_error_event_in_round_two_is_passed_on_at_once(api: Api, chunker: Chunker) -> None:
    """The upstream's own error reaches the client with the feed that completes it; what the
    upstream sends after it passes as it came, and the stitcher adds nothing of its own."""
    upto_error, after = api.error_round
    stitcher = api.adapter.stitcher(P, api.body)
    client = bytearray()
    for chunk in chunker(api.rounds["search"]):
        client += stitcher.feed(chunk)
    assert stitcher.end_round().complete
    stitcher.next_round()
    for chunk in chunker(upto_error):
        client += stitcher.feed(chunk)
    shown = decoder_of(api.adapter, bytes(client)).error
    assert shown is not None  # at once: before the round ends
    client += stitcher.feed(after)
    end = stitcher.end_round()
    assert end.error is not None and end.message is None and the_same_error(shown, end.error)
    client += stitcher.finish()
    assert stitcher.finish() == b"" and stitcher.fail(Failure(502)) == b""
    assert P.encode() not in client and not any(trace in client for trace in api.hidden)
    raises_with(api, bytes(client), error_text(end.error))


@pytest.mark.parametrize("chunker", [whole, every_byte], ids=chunker_id)
@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_failed_re_forward_ends_the_stream_with_the_providers_error(api: Api, chunker: Chunker, status: int) -> None:
    """Never an empty success: round one's visible events, then the API's error for the status."""
    client, (end,) = drive(api.adapter, [api.rounds["search"]], chunker, failure=Failure(status), body=api.body)
    assert end.complete
    decoder = decoder_of(api.adapter, client)
    assert error_text(decoder.error) == f"upstream answered HTTP {status}"
    assert P.encode() not in client and not any(trace in client for trace in api.hidden)
    raises_with(api, client, f"upstream answered HTTP {status}")


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_a_truncated_round_ends_with_an_error(api: Api, chunker: Chunker) -> None:
    """The round is cut inside an event: what the client gets still parses up to the error."""
    call = api.rounds["call"]
    client, ends = drive(api.adapter, [api.rounds["search"], call[: len(call) * 2 // 3]], chunker, body=api.body)
    assert not ends[-1].complete and ends[-1].error is None
    assert error_text(decoder_of(api.adapter, client).error) == "upstream stream ended early"
    assert P.encode() not in client and not any(trace in client for trace in api.hidden)
    raises_with(api, client, "upstream stream ended early")


# -- an error event left unterminated (SSE framings) ----------------------------------------------

UNTERMINATED = {
    "anthropic": (AnthropicAdapter(), b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
                  b'"type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,'
                  b'"usage":{"input_tokens":1,"output_tokens":0}}}\n\n',
                  b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}'),
    "chat": (OpenAIChatAdapter(), b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"x",'
             b'"choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}\n\n',
             b'data: {"error":{"message":"busy","type":"server_error"}}'),
    "responses": (OpenAIResponsesAdapter(), b'event: response.created\ndata: {"type":"response.created",'
                  b'"sequence_number":0,"response":{"id":"r","object":"response","status":"in_progress","output":[]}}\n\n',
                  b'event: error\ndata: {"type":"error","code":"server_error","message":"busy","sequence_number":1}'),
    "gemini": (GeminiAdapter(stream=True, sse=True), b'data: {"candidates":[{"content":{"role":"model","parts":'
               b'[{"text":"hi"}]}}],"responseId":"g"}\r\n\r\n',
               b'data: {"error":{"code":500,"message":"busy","status":"INTERNAL"}}'),
}


@pytest.mark.parametrize("name", UNTERMINATED)
def test_an_unterminated_error_event_still_reaches_the_client_and_nothing_after_it(name):
    adapter, start, error = UNTERMINATED[name]
    st = adapter.stitcher(P, "{}")
    out = st.feed(start) + st.feed(error)
    end = st.end_round()
    assert end.error is not None
    out += st.finish()  # what the runner sends after an error: only what is still owed
    tail = out.split(b"busy", 1)[1]
    assert out.count(b"busy") == 1 and b"data: {" not in tail  # at most the stream's own end marker
    assert st.finish() == b""
