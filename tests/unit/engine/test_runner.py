"""The loop runner without a proxy: both consumers (buffered JSON, live stream), its fail-open paths."""

import asyncio
import json

import pytest

from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.bedrock.adapter import ConverseAdapter, InvokeAdapter
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter
from tooldisco.engine.loop import PhantomLoop
from tooldisco.core.answers import Answer, Head, UpstreamFailed
from tooldisco.search.base import Catalog
from tooldisco.apis.base import Failure
from tooldisco.apis.anthropic.stream import encode

from tests.support.runner import (
    A,
    FORECAST,
    KEY,
    P,
    body,
    chunked,
    collect,
    decoded,
    engine,  # noqa: F401 (a fixture)
    message,
    search_call,
    whole,
)


def last_record(engine):
    engine.telemetry.flush()
    return json.loads(engine.telemetry._path.read_text().splitlines()[-1])


def context(engine, stream=False):
    prepared = engine.prepare(A, KEY, body(stream=stream))
    assert prepared.context is not None
    return prepared.context


async def test_warm_up_builds_the_index_once_per_catalog(engine, monkeypatch):
    seen = []
    monkeypatch.setattr(engine.searcher, "rank", lambda q, tools, limit: seen.append(len(tools)))
    first = engine.prepare(A, KEY, body())
    second = engine.prepare(A, KEY, body("another conversation"))  # the same catalog
    await asyncio.gather(first.background(), second.background())  # the second awaits the first's
    assert seen == [60]
    await engine.searches.warm(Catalog(first.context.catalog.values()))  # a search's own wait: done already
    assert seen == [60]


async def test_no_phantom_call_passes_the_upstream_bytes(engine):
    raw = json.dumps(message({"type": "text", "text": "hi"}, stop="end_turn"), indent=1).encode()
    out = await engine.runner(context(engine)).buffered(Answer.whole(200, raw), None)
    assert out.status == 200 and out.body == raw


def anthropic_400(text: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": text}}).encode()


# The hidden round a re-forward adds, refused: the re-forward's own doing.
HIDDEN_ROUND_REFUSED = ("messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_s. "
                        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.")
# Refused whatever the proxy did: the client's own request gets the same answer.
MAX_TOKENS_REFUSED = "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-x"


@pytest.mark.parametrize("refusal", [HIDDEN_ROUND_REFUSED, "tools.61.name: String should match pattern",
                                     f"Tool reference '{FORECAST['name']}' not found"])
async def test_a_4xx_on_a_reforward_naming_the_rewrite_resends_the_clients_own_request(engine, refusal):
    ctx = context(engine)
    sent = []

    async def open_(b):
        sent.append(b)
        if len(sent) == 1:
            return Answer.whole(400, anthropic_400(refusal), [("request-id", "r1")])
        return whole(message({"type": "text", "text": "plain answer"}, stop="end_turn"))

    out = await engine.runner(ctx).buffered(whole(message(search_call())), open_)
    assert len(sent) == 2 and sent[1] == body() and json.loads(out.body)["content"][0]["text"] == "plain answer"
    assert last_record(engine)["fallback_reason"] == "reforward_400_original_sent"


@pytest.mark.parametrize("refusal", ["prompt is too long: 201234 tokens > 200000 maximum", MAX_TOKENS_REFUSED])
async def test_a_4xx_on_a_reforward_naming_nothing_it_changed_passes_as_sent(engine, refusal):
    sent = []
    error = anthropic_400(refusal)

    async def open_(b):
        sent.append(b)
        return Answer.whole(400, error, [("request-id", "r1")])

    out = await engine.runner(context(engine)).buffered(whole(message(search_call())), open_)
    assert len(sent) == 1 and sent[0] != body()  # the re-forward alone: the client's own request never went
    assert out.status == 400 and out.body == error and out.headers == [("request-id", "r1")]
    record = last_record(engine)
    assert record["fallback_reason"] == "reforward_400" and record["outcome"] == "fallback_400"


@pytest.mark.parametrize("refusal", ["tools", "tools.60.input_schema: JSON schema is invalid",
                                     f"tools.60.name: '{P}' is a reserved name"])
async def test_a_rejected_rewrite_resends_the_clients_own_request(engine, refusal):
    ctx = context(engine)
    sent = []

    async def open_(b):
        sent.append(b)
        return whole(message({"type": "text", "text": "fine"}, stop="end_turn"))

    rejected = Answer.whole(400, anthropic_400(refusal))
    out = await engine.runner(ctx).buffered(rejected, open_)
    assert sent == [body()] and out.status == 200 and json.loads(out.body)["content"][0]["text"] == "fine"
    assert last_record(engine)["fallback_reason"] == "rewrite_400_original_sent"


@pytest.mark.parametrize("status, error", [
    (400, anthropic_400(MAX_TOKENS_REFUSED)),
    (400, anthropic_400("messages.1.role: Input should be 'user' or 'assistant'")),  # the client's messages
    (422, b'{"detail": "model claude-9 not found"}'),
    (400, b"<html><body>400 Bad Request</body></html>"),
])
async def test_a_4xx_naming_nothing_the_rewrite_changed_passes_once_as_sent(engine, status, error):
    sent = []

    async def open_(b):
        sent.append(b)
        return whole(message({"type": "text", "text": "never"}, stop="end_turn"))

    headers = [("content-type", "application/json"), ("request-id", "req_1")]
    out = await engine.runner(context(engine)).buffered(Answer.whole(status, error, headers), open_)
    assert sent == [] and (out.status, out.headers, out.body) == (status, headers, error)
    record = last_record(engine)
    assert record["fallback_reason"] is None and record["outcome"] == f"upstream_{status}"


async def test_a_passed_4xx_past_what_is_read_reaches_the_client_whole(engine):
    """The decision reads 1 MiB at most; a longer error still goes on byte for byte."""
    error = anthropic_400(MAX_TOKENS_REFUSED + " " + "x" * (3 << 20))
    first = chunked(error, 64 * 1024)
    first.status, first.headers = 400, [("content-type", "application/json")]
    out = await engine.runner(context(engine)).buffered(first, None)
    assert out.status == 400 and out.body == error and first.closed


async def test_live_a_4xx_naming_nothing_the_rewrite_changed_passes_once_as_sent(engine):
    error = anthropic_400(MAX_TOKENS_REFUSED)
    first = chunked(error, 5)
    first.status, first.headers = 400, [("content-type", "application/json"), ("request-id", "req_1")]

    async def open_(b):
        raise AssertionError("nothing is sent again")

    head, out = await collect(engine.runner(context(engine, True)).live(first, open_))
    assert (head.status, head.headers, out) == (400, first.headers, error) and first.closed
    assert last_record(engine)["outcome"] == "upstream_400" and last_record(engine)["fallback_reason"] is None


async def test_a_4xx_whose_body_breaks_off_is_a_5xx_in_the_apis_format(engine):
    async def open_(b):
        raise AssertionError("nothing is sent again")

    out = await engine.runner(context(engine)).buffered(broken(anthropic_400(MAX_TOKENS_REFUSED), 400), open_)
    assert "broke off" in anthropic_error(out)["error"]["message"]
    assert last_record(engine)["outcome"] == "upstream_failed"


async def test_a_5xx_on_a_reforward_reaches_the_client_with_its_headers(engine):
    async def open_(b):
        return Answer.whole(529, b'{"type":"error","error":{"type":"overloaded_error"}}', [("retry-after", "3")])

    out = await engine.runner(context(engine)).buffered(whole(message(search_call())), open_)
    assert out.status == 529 and ("retry-after", "3") in out.headers and P.encode() not in out.body


async def test_an_undecodable_first_answer_passes_through(engine):
    out = await engine.runner(context(engine)).buffered(Answer.whole(200, b"not json"), None)
    assert out.body == b"not json"


async def test_an_undecodable_answer_holding_the_search_call_becomes_an_error(engine):
    cut = json.dumps(message(search_call())).encode()[:-20]
    out = await engine.runner(context(engine)).buffered(Answer.whole(200, cut), None)
    assert out.status == 502 and P.encode() not in out.body


async def test_a_merged_answer_sums_usage_and_hides_the_search(engine):
    async def open_(b):
        sent = json.loads(b)
        assert "mcp__weather__get_forecast" in [t["name"] for t in sent["tools"]]
        return whole(message(FORECAST))

    out = await engine.runner(context(engine)).buffered(whole(message(search_call())), open_)
    data = json.loads(out.body)
    assert data["usage"] == {"input_tokens": 20, "output_tokens": 4} and P not in out.body.decode()


async def test_a_bug_mid_loop_still_hides_the_search(engine):
    async def open_(b):
        raise RuntimeError("network stack exploded")

    first = message({"type": "text", "text": "let me look"}, search_call())
    out = await engine.runner(context(engine)).buffered(whole(first), open_)
    data = json.loads(out.body)
    assert data["content"] == [{"type": "text", "text": "let me look"}] and data["stop_reason"] == "end_turn"


# --- live ----------------------------------------------------------------------------------


async def test_live_without_a_search_is_the_upstream_stream(engine):
    upstream = encode(message({"type": "text", "text": "hello"}, stop="end_turn"))
    head, out = await collect(engine.runner(context(engine, True)).live(chunked(upstream), None))
    assert head.status == 200 and out == upstream


async def test_live_with_a_search_stitches_one_stream(engine):
    bodies = []

    async def open_(b):
        bodies.append(json.loads(b))
        return chunked(encode(message(FORECAST, msg_id="msg_2")))

    first = encode(message({"type": "text", "text": "looking"}, search_call()))
    head, out = await collect(engine.runner(context(engine, True)).live(chunked(first), open_))
    got = decoded(out)
    assert [b["type"] for b in got["content"]] == ["text", "tool_use"] and got["id"] == "msg_1"
    assert got["stop_reason"] == "tool_use" and got["usage"]["input_tokens"] == 20
    assert P.encode() not in out and b"toolu_s" not in out
    assert bodies[0]["messages"][-1]["content"][0]["tool_use_id"] == "toolu_s"


async def test_live_error_on_a_reforward_ends_the_stream_with_the_providers_error(engine):
    async def open_(b):
        return Answer.whole(529, b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}')

    first = encode(message({"type": "text", "text": "looking"}, search_call()))
    _, out = await collect(engine.runner(context(engine, True)).live(chunked(first), open_))
    assert out.rstrip().endswith(b'"message":"busy"}}') and b"event: error" in out
    assert P.encode() not in out


async def test_live_a_round_the_upstream_ended_early_ends_as_it_did_when_nothing_was_changed(engine):
    """The client has had every byte as it came: the stream ends where the upstream ended it,
    nothing added (plain mitmdump would pass the same bytes); the record says so."""
    first = encode(message({"type": "text", "text": "partial answer"}, stop="end_turn"))
    _, out = await collect(engine.runner(context(engine, True)).live(chunked(first[:-40]), None))
    assert out == first[:-40]
    record = last_record(engine)
    assert record["outcome"] == "upstream_unfinished" and record["passage"] == "untouched"


async def test_live_rejected_rewrite_streams_the_clients_own_request(engine):
    upstream = encode(message({"type": "text", "text": "fine"}, stop="end_turn"))
    sent = []

    async def open_(b):
        sent.append(b)
        return chunked(upstream)

    rejected = Answer.whole(422, anthropic_400("tools.60.custom.input_schema: Field required"))
    head, out = await collect(engine.runner(context(engine, True)).live(rejected, open_))
    assert sent == [body(stream=True)] and head.status == 200 and out == upstream


async def test_live_client_gone_closes_the_upstream(engine):
    first = chunked(encode(message({"type": "text", "text": "a long answer " * 50}, stop="end_turn")), 5)
    items = engine.runner(context(engine, True)).live(first, None)
    assert isinstance(await items.__anext__(), Head)
    await items.__anext__()
    await items.aclose()
    assert first.closed and last_record(engine)["outcome"] == "client_gone"


# --- a re-forward that fails, a model that only searches -------------------------------------


def broken(data: bytes, status: int = 200) -> Answer:
    """An answer whose body breaks off halfway, as the upstream client reports it."""
    async def gen():
        yield data[: len(data) // 2]
        raise UpstreamFailed("the upstream answer broke off (ClientPayloadError)")

    return Answer(status, [("content-type", "application/json")], gen())


def anthropic_error(out) -> dict:
    assert out.status == 502 and ("content-type", "application/json") in out.headers
    error = json.loads(out.body)
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    return error


async def test_a_reforward_that_breaks_off_is_a_5xx_in_the_apis_format_not_a_cut_success(engine):
    async def open_(b):
        return broken(json.dumps(message({"type": "text", "text": "the forecast is sunny"}, stop="end_turn")).encode())

    out = await engine.runner(context(engine)).buffered(whole(message(search_call())), open_)
    assert "broke off" in anthropic_error(out)["error"]["message"]
    assert last_record(engine)["outcome"] == "upstream_failed"


async def test_a_reforward_without_any_answer_is_a_5xx_in_the_apis_format(engine):
    async def open_(b):
        raise UpstreamFailed("the proxy could not reach the upstream (ServerDisconnectedError)")

    out = await engine.runner(context(engine)).buffered(whole(message(search_call())), open_)
    assert "could not reach" in anthropic_error(out)["error"]["message"]


async def test_an_unreadable_200_on_a_reforward_is_a_5xx_not_a_success(engine):
    async def open_(b):
        return Answer.whole(200, b'{"id":"msg_2","content":[{"type":"te')

    out = await engine.runner(context(engine)).buffered(whole(message(search_call())), open_)
    anthropic_error(out)


async def test_live_reforward_that_breaks_off_ends_with_the_in_stream_error(engine):
    async def open_(b):
        return broken(encode(message({"type": "text", "text": "the forecast is sunny"}, stop="end_turn")))

    first = encode(message({"type": "text", "text": "looking"}, search_call()))
    head, out = await collect(engine.runner(context(engine, True)).live(chunked(first), open_))
    assert head.status == 200 and b"event: error" in out and b"broke off" in out
    assert b"message_stop" not in out and P.encode() not in out


def always_search(bodies):
    """A model that calls the search tool whenever it is offered, and answers otherwise."""
    async def open_(b):
        sent = json.loads(b)
        bodies.append(sent)
        if P in [t["name"] for t in sent["tools"]]:
            return whole(message(search_call(f"again {len(bodies)}"), msg_id=f"msg_{len(bodies) + 1}"))
        return whole(message({"type": "text", "text": "Here is what I have."}, stop="end_turn"))

    return open_


async def test_at_the_loop_limit_the_model_answers_without_the_search_tool(engine):
    bodies: list = []
    out = await engine.runner(context(engine)).buffered(whole(message(search_call())), always_search(bodies))
    limit = engine.config.tool_discovery.max_phantom_loops
    assert len(bodies) == limit
    assert all(P in [t["name"] for t in b["tools"]] for b in bodies[:-1])
    assert P not in [t["name"] for t in bodies[-1]["tools"]] and bodies[-1]["tools"]
    got = json.loads(out.body)
    assert out.status == 200 and got["content"] == [{"type": "text", "text": "Here is what I have."}]


async def test_live_at_the_loop_limit_the_model_answers_without_the_search_tool(engine):
    bodies: list = []
    open_ = always_search(bodies)

    async def streamed(b):
        answer = await open_(b)
        return chunked(encode(json.loads(await answer.read())))

    first = encode(message(search_call()))
    head, out = await collect(engine.runner(context(engine, True)).live(chunked(first), streamed))
    assert P not in [t["name"] for t in bodies[-1]["tools"]]
    assert decoded(out)["content"] == [{"type": "text", "text": "Here is what I have."}]


async def test_a_turn_left_empty_at_the_limit_is_an_error_never_an_empty_success(engine, monkeypatch):
    """Should the model search even without the tool (the adapter could not take it out), the
    client gets the API's retryable error, never ``content: []``."""
    monkeypatch.setattr(PhantomLoop, "without_search", lambda self, body: body)
    out = await engine.runner(context(engine)).buffered(whole(message(search_call())), always_search([]))
    anthropic_error(out)
    assert last_record(engine)["outcome"] == "max_loops_empty"

    async def streamed(b):
        return chunked(encode(message(search_call("again"), msg_id="msg_n")))

    first = encode(message(search_call()))
    _, out = await collect(engine.runner(context(engine, True)).live(chunked(first), streamed))
    assert b"event: error" in out and b"message_stop" not in out


@pytest.mark.parametrize("adapter, shape", [
    (AnthropicAdapter(), lambda b, h: b["type"] == "error" and b["error"] == {"type": "api_error", "message": "cut"}),
    (OpenAIChatAdapter(), lambda b, h: b["error"]["type"] == "server_error" and b["error"]["message"] == "cut"),
    (OpenAIResponsesAdapter(), lambda b, h: b["error"]["code"] == "server_error" and b["error"]["message"] == "cut"),
    (GeminiAdapter(), lambda b, h: b["error"] == {"code": 502, "message": "cut", "status": "INTERNAL"}),
    (ConverseAdapter(), lambda b, h: b == {"message": "cut"} and h["x-amzn-ErrorType"] == "InternalServerException"),
    (InvokeAdapter(), lambda b, h: b == {"message": "cut"} and h["x-amzn-ErrorType"] == "InternalServerException"),
])
def test_the_proxys_own_errors_take_each_apis_format(adapter, shape):
    headers, body = adapter.error_body(Failure(502, message="cut"))
    assert shape(json.loads(body), dict(headers)) and dict(headers)["content-type"] == "application/json"


# --- answers the loop cannot improve pass as they came ----------------------------------------


def nested_call(depth: int = 50_000) -> bytes:
    """An answer holding a search call, nested past what any JSON parser reads."""
    return (b'{"type":"message","content":[{"type":"tool_use","name":"' + P.encode() + b'","input":'
            + b'{"a":' * depth + b"1" + b"}" * depth + b"}]}")


async def test_an_answer_nested_past_the_parser_passes_as_sent(engine):
    raw = nested_call()
    out = await engine.runner(context(engine)).buffered(Answer.whole(200, raw, [("x-up", "1")]), None)
    assert out.status == 200 and out.body == raw and ("x-up", "1") in out.headers


async def test_a_fault_on_an_answer_without_a_search_passes_it_as_sent(engine, monkeypatch):
    raw = json.dumps(message({"type": "text", "text": "hi"}, stop="end_turn"), indent=1).encode()
    runner = engine.runner(context(engine))

    async def broken(message):
        raise RecursionError("deep inside the adapter")

    monkeypatch.setattr(runner, "step", broken)
    out = await runner.buffered(Answer.whole(200, raw, [("x-up", "1")]), None)
    assert out.status == 200 and out.body == raw and ("x-up", "1") in out.headers


@pytest.mark.parametrize("raw", [
    json.dumps(message({"type": "text", "text": "not a stream"}, stop="end_turn")).encode(),
    nested_call(),
    b"<html>upstream says hi</html>",
])
async def test_live_an_answer_that_is_no_stream_passes_as_sent(engine, raw):
    answer = chunked(raw, 1000)
    answer.headers = [("content-type", "application/json"), ("x-up", "1")]
    head, out = await collect(engine.runner(context(engine, True)).live(answer, None))
    assert head.status == 200 and ("x-up", "1") in head.headers and out == raw


# --- a long stream is relayed without being kept ----------------------------------------------


async def test_live_a_stream_longer_than_what_is_kept_is_relayed_whole(engine, monkeypatch):
    monkeypatch.setattr("tooldisco.apis.streaming.MAX_ASSEMBLED_TEXT", 1000)
    upstream = encode(message({"type": "text", "text": "long " * 2000}, stop="end_turn"))
    head, out = await collect(engine.runner(context(engine, True)).live(chunked(upstream, 300), None))
    assert head.status == 200 and out == upstream


async def test_live_a_search_after_more_text_than_is_kept_ends_with_an_error(engine, monkeypatch):
    monkeypatch.setattr("tooldisco.apis.streaming.MAX_ASSEMBLED_TEXT", 1000)
    sent = []

    async def open_(b):
        sent.append(b)
        return chunked(encode(message(FORECAST, msg_id="msg_2")))

    first = encode(message({"type": "text", "text": "long " * 2000}, search_call()))
    _, out = await collect(engine.runner(context(engine, True)).live(chunked(first, 300), open_))
    assert sent == []  # the model's message, cut, never goes back upstream as if it were whole
    assert b"event: error" in out and b"too large" in out and P.encode() not in out


async def test_live_an_event_stream_cut_before_its_first_event_passes_as_it_came(engine):
    cut = b"event: message_start\ndata: {\"type\":\"message_st"
    _, out = await collect(engine.runner(context(engine, True)).live(chunked(cut), None))  # says text/event-stream
    assert out == cut


async def test_a_turn_with_nothing_to_keep_makes_no_store_hand_off(engine, monkeypatch):
    """A turn that found nothing, chains nothing and hid nothing writes nothing to the session:
    no job goes to the store's threads (each hand-off is a thread wake-up on every request)."""
    from tooldisco.engine import runner as runner_mod

    jobs = []

    async def recorded(fn, *args):
        jobs.append(fn)
        return fn(*args)

    monkeypatch.setattr(runner_mod, "run_store", recorded)
    raw = json.dumps(message({"type": "text", "text": "hi"}, stop="end_turn")).encode()
    out = await engine.runner(context(engine)).buffered(Answer.whole(200, raw), None)
    assert out.status == 200 and jobs == []
