"""Property-based fuzzing of the adapters, the stream decoders and ``Engine.prepare``.

Why: bodies come from clients and streams from upstreams we do not control. Whatever
arrives, the engine must handle it or fail open (``Unsupported``, ``body=None``), and what
it rewrites must keep every byte it did not mean to change. Examples are derandomized
(the ``ci`` profile in tests/conftest.py): a failure reproduces as it was seen.

Generated cases per run (``max_examples`` below): parse 7 x 700, with_tools 7 x 300,
decoder chunkings 7 x 150, damaged streams 7 x 300, prepare 7 x 2 x 100: 11,550.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
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
from tooldisco.streams.eventstream import EventStreamError

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


# --- (a) parse: a view, or Unsupported ---------------------------------------------------


@pytest.mark.parametrize("api", APIS)
@settings(max_examples=700)
@given(data=st.data())
def test_parse_returns_a_view_or_raises_unsupported(api: str, data: st.DataObject) -> None:
    body = data.draw(fuzz.body_text(api), label="body")
    try:
        view = ADAPTERS[api].parse(body)
    except Unsupported:
        return
    assert isinstance(view, RequestView)
    names = view.names()
    assert len(names) == len(set(names))
    assert all(tool.raw in body for tool in view.tools)  # definitions are spans of the body


def test_nesting_within_the_parsers_limit_is_read() -> None:
    """The control for the xfail below: nesting the fuzz generates parses."""
    depth = fuzz.MAX_DEPTH
    body = '{"messages":[],"x":' + "[" * depth + "]" * depth + "}"
    assert ADAPTERS["anthropic"].parse(body).tools == ()


@pytest.mark.xfail(strict=True, raises=RecursionError, reason=(
    "adapters let json.loads' RecursionError escape on deeply nested bodies (providers.common."
    "load_object catches ValueError only), so parse raises something other than Unsupported"))
@pytest.mark.parametrize("api", APIS)
def test_nesting_past_the_parsers_limit_is_unsupported(api: str) -> None:
    depth = 100_000
    with pytest.raises(Unsupported):
        ADAPTERS[api].parse('{"x":' + "[" * depth + "]" * depth + "}")


# --- (b) with_tools: the tools replaced, every other byte kept ---------------------------


def _tools_path(api: str) -> list[str]:
    return TOOLS_AT.get(api, ["tools"])


def untouched(api: str, text: str) -> list[tuple[str, str]]:
    """The texts ``with_tools`` must keep byte-identical: every member outside the tools
    array; inside it, whatever is not a tool (Gemini's other entries and entry members,
    Bedrock's cachePoints, which may move with their anchor tool but never change)."""
    path = _tools_path(api)
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
@settings(max_examples=300)
@given(data=st.data())
def test_with_tools_replaces_the_tools_and_keeps_every_other_byte(api: str, data: st.DataObject) -> None:
    adapter = ADAPTERS[api]
    body = data.draw(fuzz.body_text(api, damage=False), label="body")
    view = adapter.parse(body)  # a valid body parses
    kept = data.draw(st.permutations([t.raw for t in view.tools]), label="order")
    raws = kept[: data.draw(st.integers(0, len(kept)), label="count")]
    if data.draw(st.booleans(), label="phantom"):
        raws.insert(data.draw(st.integers(0, len(raws))), adapter.phantom_tool(PHANTOM, "Search the deferred tools."))
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
        fuzz.UTF8_GENS.map(fuzz.anthropic_message).map(bedrock.encode_invoke) | st.just("bedrock_invoke_claude.bin").map(fixture),
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
@settings(max_examples=150)
@given(data=st.data())
def test_any_chunking_of_a_valid_stream_decodes_as_one_feed(name: str, data: st.DataObject) -> None:
    make, streams, _ = DECODERS[name]
    stream = data.draw(streams, label="stream")
    whole = outcome(make, [stream])
    assert outcome(make, data.draw(fuzz.chunked(stream), label="chunks")) == whole
    assert whole[1] is StreamError or isinstance(whole[1], dict)  # a valid stream assembles


def feed_all(make: Decoder, chunks: list[bytes]) -> Iterator[Any]:
    decoder = make()
    for chunk in [*chunks, b""]:
        yield from decoder.feed(chunk)
    yield decoder.message()


@pytest.mark.parametrize("name", list(DECODERS))
@settings(max_examples=300)
@given(data=st.data())
def test_damaged_streams_raise_only_the_documented_errors(name: str, data: st.DataObject) -> None:
    make, streams, hostile = DECODERS[name]
    stream = data.draw(streams, label="stream")
    damaged = data.draw(st.one_of(hostile(stream), fuzz.mutated_bytes(stream)), label="damaged")
    chunks = data.draw(fuzz.chunked(damaged), label="chunks")
    try:
        for _ in feed_all(make, chunks):
            pass
    except DECODE_ERRORS:
        pass


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
def swallowed() -> Iterator[list[str]]:
    """Exceptions the engine caught and logged while failing open: each one is a bug the
    fail-open path hides (``Unsupported`` is logged without one). Cleared per example."""
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m.record["exception"])), level="WARNING",
                      filter=lambda record: record["exception"] is not None)
    yield seen
    logger.remove(sink)


@pytest.mark.parametrize("strategy", ["tool-search", "relevance"])
@pytest.mark.parametrize("api", APIS)
@settings(max_examples=100)
@given(data=st.data())
def test_prepare_forwards_a_body_that_parses_or_nothing(
    api: str, strategy: str, engines: dict[str, Engine], swallowed: list[str], data: st.DataObject
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
    assert swallowed == []
