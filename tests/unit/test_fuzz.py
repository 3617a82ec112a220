"""Property-based fuzzing of the adapters, the stream decoders and ``Engine.prepare``.

Why: bodies come from clients and streams from upstreams we do not control. Whatever
arrives, the engine must handle it or fail open (``Unsupported``, ``body=None``), and what
it rewrites must keep every byte it did not mean to change. Examples are derandomized
(the ``ci`` profile in tests/conftest.py): a failure reproduces as it was seen.

Generated cases per run (``max_examples`` below): parse 7 x 500, with_tools 7 x 250,
chunkings 7 x 200, damaged streams 7 x 400, prepare 7 APIs x 2 strategies x 60: 10,290.

Bugs the fuzz found are pinned at the end by strict xfail tests; until each is fixed the
properties step over exactly that failure (``KNOWN_BUGS``) and nothing else.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loguru import logger
from test_streams_support import fixture
from tooldisco import jsonspan
from tooldisco.config import parse as parse_config
from tooldisco.engine import Engine
from tooldisco.providers.anthropic import AnthropicAdapter
from tooldisco.providers.base import Adapter, RequestView, Unsupported
from tooldisco.providers.bedrock import ConverseAdapter, InvokeAdapter
from tooldisco.providers.gemini import GeminiAdapter
from tooldisco.providers.openai_chat import OpenAIChatAdapter
from tooldisco.providers.openai_responses import OpenAIResponsesAdapter
from tooldisco.streams import anthropic, bedrock, gemini, openai_chat, openai_responses
from tooldisco.streams.common import IncompleteStream, StreamError
from tooldisco.streams.eventstream import EventStreamError, encode_frame

from tests.support import fuzz

ADAPTERS: dict[str, Adapter] = {
    "anthropic": AnthropicAdapter(),
    "openai_chat": OpenAIChatAdapter(),
    "openai_responses": OpenAIResponsesAdapter(),
    "gemini": GeminiAdapter(stream=False),
    "gemini_stream": GeminiAdapter(stream=True, sse=True),
    "bedrock_converse": ConverseAdapter(stream=False),
    "bedrock_invoke": InvokeAdapter(stream=True),
}
APIS = list(ADAPTERS)
TOOLS_AT = {"bedrock_converse": ["toolConfig", "tools"]}  # the others: ["tools"]
DECLARATIONS = {"functionDeclarations", "function_declarations"}
PHANTOM = "gateway_search_tools"

# What a decoder may raise, as the stream modules document it: an upstream error event,
# a stream that never started a message, a corrupt AWS event-stream frame.
DECODE_ERRORS = (StreamError, IncompleteStream, EventStreamError)

# Each bug pinned by an xfail test at the end: (exception, file and function raising it,
# a piece of its message). The properties step over exactly these until they are fixed.
KNOWN_BUGS = [
    (TypeError, "openai_responses.py", "parse", "unhashable"),  # test_a_responses_item_type_of_any_json_type
    (TypeError, "gemini.py", "parse", "not iterable"),  # test_a_list_that_is_another_json_type_is_skipped
    (TypeError, "bedrock.py", "parse", "not iterable"),  # ditto
    (TypeError, "openai_chat.py", "parse", "not iterable"),  # ditto
    (TypeError, "openai_chat.py", "forced_names", "not iterable"),  # ditto
    (TypeError, "gemini.py", "_candidate", "not iterable"),  # test_a_streamed_list_that_is_another_json_type
    (TypeError, "openai_chat.py", "_chunk", "not iterable"),  # ditto
    (TypeError, "openai_chat.py", "_finish_choice", "not supported between"),  # test_a_chat_tool_call_index_...
    (AttributeError, "gemini.py", "_candidate", "has no attribute"),  # test_a_gemini_candidate_content_...
    (AttributeError, "bedrock.py", "_delta", "has no attribute"),  # test_a_converse_block_member_changing_type
    (UnicodeDecodeError, "planner.py", "prepare", "can't decode"),  # test_a_body_that_is_not_utf8_is_unsupported
]


def known_bug(error: BaseException) -> bool:
    where = traceback.extract_tb(error.__traceback__)[-1]
    return any(type(error) is kind and Path(where.filename).name == file and where.name == function
               and fragment in str(error) for kind, file, function, fragment in KNOWN_BUGS)


# --- (a) parse: a view, or Unsupported ---------------------------------------------------


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=500)
@given(data=st.data())
def test_parse_returns_a_view_or_raises_unsupported(api: str, data: st.DataObject) -> None:
    body = data.draw(fuzz.body_text(api), label="body")
    try:
        view = ADAPTERS[api].parse(body)
    except Unsupported:
        return
    except Exception as error:
        if known_bug(error):
            return
        raise
    assert isinstance(view, RequestView)
    names = view.names()
    assert len(names) == len(set(names))
    assert all(tool.raw in body for tool in view.tools)  # definitions are spans of the body


# --- (b) with_tools: the tools replaced, every other byte kept ---------------------------


def untouched(api: str, text: str) -> list[tuple[str, str]]:
    """The texts ``with_tools`` must keep byte-identical: every member outside the tools
    array; inside it, whatever is not a tool (Gemini's other entries and entry members,
    Bedrock's cachePoints, which may move with their anchor tool but never change)."""
    path = TOOLS_AT.get(api, ["tools"])
    out = [(k, text[a:b]) for k, (a, b) in jsonspan.members(text, jsonspan.root(text)) if k != path[0]]
    parent = jsonspan.find(text, path[:-1]) if len(path) > 1 else None
    if parent is not None:
        out += [(k, text[a:b]) for k, (a, b) in jsonspan.members(text, parent) if k != path[-1]]
    span = jsonspan.find(text, path)
    entries = [text[a:b] for a, b in jsonspan.elements(text, span)] if span else []
    if api.startswith("gemini"):
        out += [(k, e[a:b]) for e in entries for k, (a, b) in jsonspan.members(e, jsonspan.root(e))
                if k not in DECLARATIONS]
    if api == "bedrock_converse":
        out += sorted(("entry", e) for e in entries if "toolSpec" not in json.loads(e))
    return out


def _without_breakpoint(raw: str) -> Any:
    definition = json.loads(raw)
    definition.pop("cache_control", None)
    return definition


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=250)
@given(data=st.data())
def test_with_tools_replaces_the_tools_and_keeps_every_other_byte(api: str, data: st.DataObject) -> None:
    adapter = ADAPTERS[api]
    body = data.draw(fuzz.body_text(api, damage=False), label="body")
    view = adapter.parse(body)  # a valid body parses
    rnd = data.draw(fuzz.RANDOM, label="random")
    raws = rnd.sample([t.raw for t in view.tools], rnd.randint(0, len(view.tools)))  # kept, in any order
    if rnd.random() < 0.5:
        raws.insert(rnd.randint(0, len(raws)), adapter.phantom_tool(PHANTOM, "Search the deferred tools."))
    out = adapter.with_tools(body, raws)
    json.loads(out)
    assert untouched(api, out) == untouched(api, body)
    forwarded = [t.raw for t in adapter.parse(out).tools]
    if isinstance(adapter, AnthropicAdapter) and forwarded[-1:] != raws[-1:]:
        # A dropped tool's cache_control breakpoint moves to the last forwarded tool.
        assert forwarded[:-1] == raws[:-1] and "cache_control" in json.loads(forwarded[-1])
        assert _without_breakpoint(forwarded[-1]) == _without_breakpoint(raws[-1])
    else:
        assert forwarded == raws


# --- (c) stream decoders: any chunking, any damage ---------------------------------------

Decoder = Callable[[], Any]
DECODERS: dict[str, tuple[Decoder, st.SearchStrategy[bytes], Callable[[bytes], st.SearchStrategy[bytes]]]] = {
    "anthropic": (
        anthropic.AnthropicStreamDecoder,
        fuzz.UTF8_GENS.map(fuzz.anthropic_message).map(anthropic.encode)
        | st.sampled_from(["anthropic_thinking_tool.sse", "anthropic_server_tools_crlf.sse",
                           "anthropic_error.sse"]).map(fixture),
        fuzz.hostile_sse,
    ),
    "openai_chat": (
        openai_chat.ChatCompletionStreamDecoder,
        st.builds(openai_chat.encode, fuzz.UTF8_GENS.map(fuzz.chat_completion), st.booleans())
        | st.sampled_from(["openai_chat_tools_usage.sse", "openai_chat_refusal_no_usage.sse"]).map(fixture),
        fuzz.hostile_sse,
    ),
    "openai_responses": (
        openai_responses.ResponsesStreamDecoder,
        fuzz.UTF8_GENS.map(fuzz.responses_response).map(openai_responses.encode)
        | st.just("openai_responses_reasoning_tool.sse").map(fixture),
        fuzz.hostile_sse,
    ),
    "gemini_sse": (
        gemini.GeminiStreamDecoder,
        fuzz.UTF8_GENS.map(fuzz.gemini_response).map(gemini.encode) | st.just("gemini_thoughts_calls.sse").map(fixture),
        fuzz.hostile_sse,
    ),
    "gemini_array": (
        gemini.GeminiStreamDecoder,
        fuzz.UTF8_GENS.map(fuzz.gemini_response).map(lambda r: gemini.encode(r, sse=False))
        | st.just("gemini_text_array.json").map(fixture),
        fuzz.hostile_array,
    ),
    "bedrock_converse": (
        bedrock.ConverseStreamDecoder,
        fuzz.UTF8_GENS.map(fuzz.converse_response).map(bedrock.encode_converse)
        | st.sampled_from(["bedrock_converse_tool.bin", "bedrock_converse_throttled.bin"]).map(fixture),
        lambda stream: fuzz.hostile_frames(stream, invoke=False),
    ),
    "bedrock_invoke": (
        bedrock.InvokeStreamDecoder,
        fuzz.UTF8_GENS.map(fuzz.anthropic_message).map(bedrock.encode_invoke)
        | st.just("bedrock_invoke_claude.bin").map(fixture),
        lambda stream: fuzz.hostile_frames(stream, invoke=True),
    ),
}


def outcome(make: Decoder, chunks: list[bytes]) -> tuple[list[tuple[str, Any, bytes]], Any, bool]:
    """Every event, then the message (or the documented error's type), then ``done``."""
    decoder = make()
    events = [event for chunk in [*chunks, b""] for event in decoder.feed(chunk)]
    try:
        message: Any = decoder.message()
    except (StreamError, IncompleteStream) as error:
        message = type(error)
    return [(e.type, e.data, e.raw) for e in events], message, decoder.done


@pytest.mark.parametrize("name", list(DECODERS))
@settings(max_examples=200)
@given(data=st.data())
def test_any_chunking_of_a_valid_stream_decodes_as_one_feed(name: str, data: st.DataObject) -> None:
    make, streams, _ = DECODERS[name]
    stream = data.draw(streams, label="stream")
    whole = outcome(make, [stream])
    assert outcome(make, data.draw(fuzz.chunked(stream), label="chunks")) == whole
    assert whole[1] is StreamError or isinstance(whole[1], dict)  # a valid stream assembles


@pytest.mark.parametrize("name", list(DECODERS))
@settings(max_examples=400)
@given(data=st.data())
def test_damaged_streams_raise_only_the_documented_errors(name: str, data: st.DataObject) -> None:
    make, streams, hostile = DECODERS[name]
    stream = data.draw(streams, label="stream")
    damaged = data.draw(st.one_of(hostile(stream), fuzz.mutated_bytes(stream)), label="damaged")
    decoder = make()
    try:
        for chunk in [*data.draw(fuzz.chunked(damaged), label="chunks"), b""]:
            decoder.feed(chunk)
        decoder.message()
    except DECODE_ERRORS:
        pass
    except Exception as error:
        if not known_bug(error):
            raise


# --- (d) Engine.prepare: a body that parses, or forward unchanged ------------------------


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    made = {}
    for strategy in ("tool-search", "relevance"):
        tmp = tmp_path_factory.mktemp(strategy)
        made[strategy] = Engine(parse_config({
            "pipes": {"tool_discovery": {"enabled": True, "strategy": strategy, "min_tools": 1,
                                         "search": {"backend": "bm25"}}},
            "sessions": {"dir": str(tmp / "sessions")},
            "telemetry": {"path": str(tmp / "telemetry.jsonl")},
        }))
    yield made
    for engine in made.values():
        engine.close()


@pytest.fixture(scope="module")
def swallowed() -> Iterator[list[BaseException]]:
    """Exceptions the engine caught and logged while failing open: each one is a bug the
    fail-open path hides (``Unsupported`` is logged without one). Cleared per example."""
    seen: list[BaseException] = []
    sink = logger.add(lambda m: seen.append(m.record["exception"].value), level="WARNING",
                      filter=lambda record: record["exception"] is not None)
    yield seen
    logger.remove(sink)


@pytest.mark.parametrize("strategy", ["tool-search", "relevance"])
@pytest.mark.parametrize("api", APIS)
@settings(max_examples=60)
@given(data=st.data())
def test_prepare_forwards_a_body_that_parses_or_nothing(
    api: str, strategy: str, engines: dict[str, Engine], swallowed: list[BaseException], data: st.DataObject
) -> None:
    adapter = ADAPTERS[api]
    body = data.draw(fuzz.body_text(api), label="body").encode("utf-8")
    if data.draw(st.integers(0, 3), label="bytes damaged") == 0:
        body = data.draw(fuzz.mutated_bytes(body), label="damaged")
    swallowed.clear()
    prepared = engines[strategy].prepare(adapter, {"x-api-key": "k"}, body)
    if prepared.body is not None:
        forwarded = prepared.body.decode("utf-8")
        json.loads(forwarded)
        assert isinstance(adapter.parse(forwarded), RequestView)
    assert [error for error in swallowed if not known_bug(error)] == []


# --- bugs the fuzz found (strict xfail: each passes once fixed; then drop it from KNOWN_BUGS)


@pytest.mark.xfail(strict=True, raises=TypeError, reason=(
    "OpenAIResponsesAdapter.parse tests an input item's `type` with `in _CALLS`: a list or object "
    "there raises TypeError (unhashable) instead of Unsupported or being skipped"))
def test_a_responses_item_type_of_any_json_type_is_read() -> None:
    ADAPTERS["openai_responses"].parse('{"input": [{"type": []}]}')


@pytest.mark.xfail(strict=True, raises=TypeError, reason=(
    "adapters iterate `value or []` where the body may hold any truthy JSON value: a number or "
    "`true` instead of a list raises TypeError instead of being skipped or Unsupported"))
@pytest.mark.parametrize("api, body", [
    ("gemini", '{"contents": [{"role": "user", "parts": true}]}'),
    ("gemini", '{"contents": [], "toolConfig": {"functionCallingConfig": {"allowedFunctionNames": 5}}}'),
    ("bedrock_converse", '{"messages": [{"role": "user", "content": true}]}'),
    ("openai_chat", '{"messages": [{"role": "assistant", "tool_calls": 1}]}'),
    ("openai_chat", '{"messages": [], "tool_choice": {"type": "allowed_tools", "allowed_tools": {"tools": 1}}}'),
], ids=["gemini-parts", "gemini-allowed-names", "converse-content", "chat-tool-calls", "chat-allowed-tools"])
def test_a_list_that_is_another_json_type_is_skipped(api: str, body: str) -> None:
    ADAPTERS[api].parse(body)


@pytest.mark.xfail(strict=True, raises=RecursionError, reason=(
    "providers.common.load_object catches ValueError only: json.loads' RecursionError on deeply "
    "nested bodies escapes parse instead of becoming Unsupported (a 40 KB body is enough)"))
@pytest.mark.parametrize("api", APIS)
def test_nesting_past_the_parsers_limit_is_unsupported(api: str) -> None:
    depth = 20_000
    with pytest.raises(Unsupported):
        ADAPTERS[api].parse('{"x": ' + "[" * depth + "]" * depth + "}")


def test_nesting_the_fuzz_generates_is_read() -> None:
    """The control for the xfail above: ``fuzz.MAX_DEPTH`` parses."""
    depth = fuzz.MAX_DEPTH
    assert ADAPTERS["anthropic"].parse('{"messages": [], "x": ' + "[" * depth + "]" * depth + "}").tools == ()


def _decode(decoder: Any, *chunks: bytes) -> Any:
    for chunk in [*chunks, b""]:
        decoder.feed(chunk)
    return decoder.message()


@pytest.mark.xfail(strict=True, raises=TypeError, reason=(
    "stream assemblers iterate `value or []` too: `choices: true` in a chat chunk or `parts: 1` in a "
    "Gemini candidate raises TypeError instead of being skipped or a documented decode error"))
@pytest.mark.parametrize("make, chunk", [
    (openai_chat.ChatCompletionStreamDecoder, b'data: {"id": "c", "choices": true}\n\n'),
    (gemini.GeminiStreamDecoder, b'data: {"candidates": [{"content": {"parts": 1}}]}\n\n'),
], ids=["chat-choices", "gemini-parts"])
def test_a_streamed_list_that_is_another_json_type_is_skipped(make: Decoder, chunk: bytes) -> None:
    _decode(make(), chunk)


@pytest.mark.xfail(strict=True, raises=TypeError, reason=(
    "streams.openai_chat._finish_choice sorts tool calls by their `index`: a non-number index "
    "from the upstream raises TypeError in sort instead of a documented decode error"))
def test_a_chat_tool_call_index_that_is_not_a_number() -> None:
    calls = [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
             {"index": [1], "id": "b", "function": {"name": "g", "arguments": ""}}]
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": calls}}]}
    _decode(openai_chat.ChatCompletionStreamDecoder(), f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())


@pytest.mark.xfail(strict=True, raises=AttributeError, reason=(
    "streams.gemini GeminiAssembler._candidate keeps a non-object `content` as it came, then a "
    "later chunk's object content calls .get on it: AttributeError"))
def test_a_gemini_candidate_content_changing_type() -> None:
    _decode(gemini.GeminiStreamDecoder(), b'data: {"candidates": [{"content": []}]}\n\n',
            b'data: {"candidates": [{"content": {"parts": [{"text": "a"}]}}]}\n\n')


@pytest.mark.xfail(strict=True, raises=AttributeError, reason=(
    "streams.bedrock ConverseStreamAssembler._delta assumes a block member keeps the type it "
    "streams with: a contentBlockStart giving reasoningContent (or toolResult) as a list makes "
    "the next delta call setdefault on it: AttributeError"))
def test_a_converse_block_member_changing_type() -> None:
    def frame(kind: str, payload: dict[str, Any]) -> bytes:
        headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
        return encode_frame(headers, json.dumps(payload).encode())

    _decode(bedrock.ConverseStreamDecoder(), frame("messageStart", {"role": "assistant"}),
            frame("contentBlockStart", {"contentBlockIndex": 0, "start": {"reasoningContent": []}}),
            frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "a"}}}))


@pytest.mark.xfail(strict=True, raises=UnicodeEncodeError, reason=(
    "every stream encoder writes JSON with ensure_ascii=False then encodes UTF-8: a lone surrogate, "
    "which an upstream may send escaped (\\ud800) and the decoders faithfully keep, cannot be "
    "re-encoded, so a merged or stitched answer carrying one fails"))
def test_a_lone_surrogate_the_upstream_escaped_is_re_encoded() -> None:
    message = {"id": "m", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
               "content": [{"type": "text", "text": "x"}], "usage": {"input_tokens": 1, "output_tokens": 1}}
    stream = anthropic.encode(message).replace(b'"text":"x"', b'"text":"\\ud800"')
    anthropic.encode(_decode(anthropic.AnthropicStreamDecoder(), stream))


@pytest.mark.xfail(strict=True, reason=(
    "Planner.prepare decodes the body inside its catch-all: a body that is not UTF-8 is logged as "
    "an internal failure with a traceback (fallback `error: UnicodeDecodeError`) instead of "
    "being Unsupported like any other body we cannot read"))
def test_a_body_that_is_not_utf8_is_unsupported(engines: dict[str, Engine], swallowed: list[BaseException]) -> None:
    swallowed.clear()
    body = b'{"messages": [], "x": "\xff"}'
    prepared = engines["tool-search"].prepare(ADAPTERS["anthropic"], {"x-api-key": "k"}, body)
    assert prepared.body is None
    assert swallowed == []
