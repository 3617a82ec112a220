"""The providers' own usage of an answer: each adapter's ``usage`` (four parts that partition the
bill), and ``apis.usage_scan`` (the same numbers read off a relayed answer without decoding it).

Why against the recordings: the numbers must be the providers' exactly, and real answers are
where providers differ (cached tokens inside or beside the prompt count, reasoning inside or
beside the output count, usage in the choice or at the top, cumulative stream counts).
"""

from __future__ import annotations

import base64
import json
from functools import cache
from typing import Any

import pytest

from tests.conformance.replay import Recording, load
from tests.support.streams import random_chunkings
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.base import Adapter
from tooldisco.apis.bedrock.adapter import ConverseAdapter, InvokeAdapter
from tooldisco.apis.bedrock.stream import encode_converse, encode_invoke
from tooldisco.apis.framing.eventstream import encode_frame
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter
from tooldisco.apis.usage_scan import UsageScan, scanner_for
from tooldisco.core.types import TokenUsage


def adapter_for(rec: Recording) -> Adapter:
    if rec.api == "anthropic":
        return AnthropicAdapter()
    if rec.api == "openai_chat":
        return OpenAIChatAdapter()
    if rec.api == "openai_responses":
        return OpenAIResponsesAdapter()
    if rec.api == "gemini":
        return GeminiAdapter(stream=rec.stream, sse=rec.content_type.startswith("text/event-stream"))
    assert rec.api == "bedrock_converse", rec.api
    return ConverseAdapter(rec.stream)


def assembled(rec: Recording) -> dict[str, Any] | None:
    """The answer as the API's non-streaming object: the JSON body, or the stream put together by
    the adapter's own decoder (None when the stream does not assemble: an error event)."""
    if not rec.stream:
        return json.loads(rec.body)
    decoder = adapter_for(rec).decoder()
    decoder.feed(rec.body)
    decoder.feed(b"")
    try:
        return decoder.message()
    except Exception:
        return None


@cache
def answers() -> tuple[tuple[Recording, dict[str, Any]], ...]:
    out = []
    for rec in load():
        if rec.status == 200 and (message := assembled(rec)) is not None:
            out.append((rec, message))
    return tuple(out)


def named(api: str, suffix: str) -> tuple[Recording, dict[str, Any]]:
    found = [(r, m) for r, m in answers() if r.api == api and r.id.endswith(suffix)]
    assert len(found) == 1, (api, suffix, [r.id for r, _ in found])
    return found[0]


# (api, recording id suffix) -> (input, cache_read, cache_write, output), read off the bytes.
EXPECTED = {
    # Anthropic: the counts are apart already.
    ("anthropic", "test_caching_tool/anthropic_beta_claude_sonnet_4_0.yaml#2of2"): (151, 4602, 0, 38),
    ("anthropic", "test_web_search_tool_stream/anthropic_beta_claude_sonnet_4_0.yaml#2of2"): (17, 16392, 24164, 594),
    ("anthropic", "test_anthropic_prompt_caching_async_stream_legacy.yaml#2of2"): (4, 1167, 0, 256),
    # message_delta restates input_tokens: cumulative counts overwrite message_start's.
    ("anthropic", "anthropic/anthropic-message-delta-input-tokens.chunks.txt"): (61, 0, 0, 2),
    ("anthropic", "anthropic/anthropic-code-execution-20260120-prompt-cache.1.chunks.txt"): (6, 6289, 3337, 198),
    # Compaction: a sampling step of its own, only in usage.iterations (top level 0/0 here).
    ("anthropic", "anthropic/tests/cassettes/test_compaction.yaml.gz#2of3"): (83555, 0, 0, 139),
    # Top level 682/1320 (the message) plus the compaction iteration's 60385/592.
    ("anthropic", "anthropic/anthropic-compaction.1.json"): (682 + 60385, 0, 0, 1320 + 592),
    # Chat: the prompt count includes the cached part.
    ("openai_chat", "test_schema_parsing_failures.yaml.gz#3of3"): (44, 0, 0, 402),  # reasoning inside
    ("openai_chat", "deepseek/chat/deepseek-json.json"): (175, 320, 0, 144),  # prompt_cache_hit/miss
    # xAI: completion_tokens leaves out the reasoning (12 + 2 + 340 = total 354).
    ("openai_chat", "openai-compatible/chat/xai-text.chunks.txt"): (1, 11, 0, 342),
    ("openai_chat", "moonshotai/moonshotai-reasoning.json"): (10, 10, 0, 30),  # top-level cached_tokens
    ("openai_chat", "test_openrouter_stream_with_native_options.yaml"): (1, 686, 0, 254),
    # Responses: input_tokens includes cached_tokens; output_tokens includes reasoning.
    ("openai_responses", "openai/responses/openai-web-search-tool.1.chunks.txt"): (31073 - 3712, 3712, 0, 4416),
    ("openai_responses", "openai/responses/openai-phase.1.json"): (7243 - 3072, 3072, 0, 423),
    ("openai_responses", "xai/responses/xai-text-streaming.1.chunks.txt"): (24, 192, 0, 863),
    # Gemini: built-in tools' prompt is input, thoughts are output (32 + 720, 341 + 103).
    ("gemini", "test_instrumentation/test_validate_token_counts.yaml"): (752, 0, 0, 444),
    ("gemini", "google/google-text.chunks.txt:sse"): (9, 0, 0, 23 + 185),
    ("gemini", "google/google-text.chunks.txt:json-array"): (9, 0, 0, 23 + 185),
    ("gemini", "test_call_with_thinking/google_gemini_2_5_flash/stream.yaml#1of2"): (30, 0, 0, 1947),
    # Bedrock Converse.
    ("bedrock_converse", "test_thinking[v1].yaml.gz#2of2"): (1373, 0, 0, 1190),
    ("bedrock_converse", "TestConverseStream.test_invoke_tool_message.yaml"): (353, 0, 0, 38),
}

# Answers that report no usage at all.
NO_USAGE = [
    ("openai_chat", "test_chat/test_chat_async_streaming.yaml#1of3"),  # no stream_options.include_usage
    ("bedrock_converse", "amazon-bedrock/amazon-bedrock-json-tool.1.chunks.txt"),  # no metadata frame
]


@pytest.mark.parametrize(("api", "suffix"), list(EXPECTED), ids=lambda v: str(v)[-60:])
def test_named_recordings(api: str, suffix: str) -> None:
    rec, message = named(api, suffix)
    assert adapter_for(rec).usage(message) == TokenUsage(*EXPECTED[(api, suffix)])


@pytest.mark.parametrize(("api", "suffix"), NO_USAGE)
def test_no_usage_object_is_none(api: str, suffix: str) -> None:
    rec, message = named(api, suffix)
    assert adapter_for(rec).usage(message) is None


def _stated_total(api: str, message: dict[str, Any]) -> Any:
    usage = message.get("usageMetadata" if api == "gemini" else "usage")
    if not isinstance(usage, dict):
        return None
    return usage.get({"gemini": "totalTokenCount", "bedrock_converse": "totalTokens"}.get(api, "total_tokens"))


def test_parts_partition_the_stated_total() -> None:
    """Where the provider states a total, the four parts add up to it, for every recording."""
    checked = 0
    for rec, message in answers():
        usage = adapter_for(rec).usage(message)
        total = _stated_total(rec.api, message)
        if usage is None or not isinstance(total, int):
            continue
        assert usage.input + usage.cache_read + usage.cache_write + usage.output == total, rec.id
        checked += 1
    assert checked > 200


def test_every_usage_object_is_read() -> None:
    """An answer with a usage object gets a TokenUsage; one without gets None."""
    for rec, message in answers():
        key = "usageMetadata" if rec.api == "gemini" else "usage"
        has = isinstance(message.get(key), dict) or any(
            isinstance(c, dict) and isinstance(c.get("usage"), dict) for c in message.get("choices") or [])
        assert (adapter_for(rec).usage(message) is not None) == has, rec.id


ADAPTERS = [AnthropicAdapter(), OpenAIChatAdapter(), OpenAIResponsesAdapter(), GeminiAdapter(),
            ConverseAdapter(False), InvokeAdapter(False, "anthropic.claude-sonnet-4-5-20250929-v1:0")]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.api)
@pytest.mark.parametrize("message", [
    {}, {"usage": None}, {"usage": "12"}, {"usage": []}, {"usageMetadata": 3}, {"choices": "x"},
    {"choices": [None, {"usage": 5}]},
])
def test_no_usage_or_malformed_is_none(adapter: Adapter, message: dict[str, Any]) -> None:
    assert adapter.usage(message) is None


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.api)
def test_malformed_counts_are_zero_never_raise(adapter: Adapter) -> None:
    bad: dict[str, Any] = {
        k: v for k, v in zip(
            ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
             "prompt_tokens", "completion_tokens", "promptTokenCount", "candidatesTokenCount",
             "inputTokens", "outputTokens", "cacheReadInputTokens", "thoughtsTokenCount"],
            ["7", True, -5, None, [1], {"a": 1}, 2.5, float("nan"), -1, False, "x", 1e400])
    }
    bad["prompt_tokens_details"] = "cached"
    bad["iterations"] = [None, 3, {"type": "compaction", "input_tokens": "9"}]
    message = {"usage": bad, "usageMetadata": bad}
    assert adapter.usage(message) == TokenUsage()
    assert adapter.usage(["not", "a", "dict"]) is None  # type: ignore[arg-type]


def test_floats_that_are_whole_counts_are_read() -> None:
    assert AnthropicAdapter().usage({"usage": {"input_tokens": 12.0, "output_tokens": 3}}) == TokenUsage(12, 0, 0, 3)


def test_chat_usage_in_the_choice() -> None:
    """Moonshot's stream puts usage in the choice of its last chunk."""
    message = {"choices": [{"index": 0, "usage": {"prompt_tokens": 9, "completion_tokens": 12,
                                                  "total_tokens": 21, "cached_tokens": 4}}], "usage": None}
    assert OpenAIChatAdapter().usage(message) == TokenUsage(5, 4, 0, 12)


def test_chat_openrouter_cache_writes() -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010,
             "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300}}
    assert OpenAIChatAdapter().usage({"usage": usage}) == TokenUsage(100, 600, 300, 10)


def test_gemini_cached_content_is_inside_the_prompt() -> None:
    meta = {"promptTokenCount": 1000, "cachedContentTokenCount": 800, "candidatesTokenCount": 20,
            "thoughtsTokenCount": 30, "toolUsePromptTokenCount": 5, "totalTokenCount": 1055}
    assert GeminiAdapter().usage({"usageMetadata": meta}) == TokenUsage(205, 800, 0, 50)


def test_converse_cache_is_beside_input_tokens() -> None:
    """AWS: inputTokens is the uncached part; the total adds the cache."""
    usage = {"inputTokens": 4, "outputTokens": 120, "cacheReadInputTokens": 0, "cacheWriteInputTokens": 1095,
             "totalTokens": 1219}
    assert ConverseAdapter().usage({"usage": usage}) == TokenUsage(4, 0, 1095, 120)


def test_converse_cache_counted_inside_input_tokens_is_taken_out() -> None:
    """A stream that counted the cache inside inputTokens: its stated total says so."""
    usage = {"inputTokens": 4995, "outputTokens": 12, "cacheWriteInputTokens": 4993, "totalTokens": 5007}
    assert ConverseAdapter(True).usage({"usage": usage}) == TokenUsage(2, 0, 4993, 12)


def test_invoke_is_anthropic_shaped() -> None:
    body = {"type": "message", "content": [], "usage": {"input_tokens": 10, "cache_read_input_tokens": 20,
                                                       "cache_creation_input_tokens": 30, "output_tokens": 40}}
    assert InvokeAdapter(False, "anthropic.claude-x").usage(body) == TokenUsage(10, 20, 30, 40)


# -- the scanner ------------------------------------------------------------------------------

def _scan(adapter: Adapter, chunks: Any, headers: Any = (), limit: int | None = None, end: bool = True) -> TokenUsage | None:
    scan = UsageScan(adapter, headers) if limit is None else UsageScan(adapter, headers, limit=limit)
    for chunk in chunks:
        scan.feed(chunk)
    if end:
        scan.feed(b"")
    return scan.usage()


def _headers(rec: Recording) -> list[tuple[str, str]]:
    return [("Content-Type", rec.content_type)]


def _streams() -> list[tuple[Recording, dict[str, Any]]]:
    return [(r, m) for r, m in answers() if r.stream]


@pytest.mark.parametrize("index", range(len(_streams())), ids=lambda i: _streams()[i][0].id[-50:])
def test_scanner_equals_the_assembled_stream(index: int) -> None:
    rec, message = _streams()[index]
    adapter = adapter_for(rec)
    expected = adapter.usage(message)
    for chunks in random_chunkings(rec.body, count=3):
        assert _scan(adapter, chunks, _headers(rec)) == expected
    assert scanner_for(adapter, _headers(rec)) is not None


def test_scanner_reads_json_answers() -> None:
    for rec, message in answers():
        if not rec.stream:
            adapter = adapter_for(rec)
            for chunks in random_chunkings(rec.body, count=2):
                assert _scan(adapter, chunks, _headers(rec)) == adapter.usage(message), rec.id


def test_scanner_reads_events_past_the_limit_by_their_members() -> None:
    """An event too big to keep is read member by member (here every event is): the same usage."""
    for rec, message in answers():
        if rec.api == "bedrock_converse":
            continue  # frames past the limit are skipped, by design
        adapter = adapter_for(rec)
        for chunks in random_chunkings(rec.body, count=1, seed=3):
            assert _scan(adapter, chunks, _headers(rec), limit=64) == adapter.usage(message), rec.id


def test_scanner_without_the_end_marker_and_without_headers() -> None:
    """The runner asks ``usage()`` without ``feed(b"")``; a gateway may drop the content type."""
    rec, message = named("anthropic", "test_web_search_tool_stream/anthropic_beta_claude_sonnet_4_0.yaml#2of2")
    assert _scan(AnthropicAdapter(), [rec.body], end=False) == TokenUsage(17, 16392, 24164, 594)
    rec, message = named("bedrock_converse", "TestConverseStream.test_invoke_tool_message.yaml")
    assert _scan(ConverseAdapter(True), [rec.body]) == TokenUsage(353, 0, 0, 38)


def test_scanner_invoke_stream() -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
               "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": 11, "cache_read_input_tokens": 22, "cache_creation_input_tokens": 33,
                         "output_tokens": 44}}
    body = encode_invoke(message)
    adapter = InvokeAdapter(True, "anthropic.claude-sonnet-4-5-20250929-v1:0")
    decoder = adapter.decoder()
    decoder.feed(body)
    decoder.feed(b"")
    expected = adapter.usage(decoder.message())
    assert expected == TokenUsage(11, 22, 33, 44)
    for chunks in random_chunkings(body, count=5):
        assert _scan(adapter, chunks, [("content-type", "application/vnd.amazon.eventstream")]) == expected


def test_scanner_skips_frames_past_the_limit() -> None:
    response = {"output": {"message": {"role": "assistant", "content": [{"text": "x" * 5000}]}},
                "stopReason": "end_turn", "usage": {"inputTokens": 5, "outputTokens": 6, "totalTokens": 11}}
    body = encode_converse(response)
    assert _scan(ConverseAdapter(True), [body], limit=1024) == TokenUsage(5, 0, 0, 6)


def test_scanner_chat_usage_in_the_choice() -> None:
    chunks = [
        b'data: {"id":"1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
        b'data: {"id":"1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop",'
        b'"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"cached_tokens":4}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    adapter = OpenAIChatAdapter()
    decoder = adapter.decoder()
    for chunk in chunks:
        decoder.feed(chunk)
    decoder.feed(b"")
    assert adapter.usage(decoder.message()) == _scan(adapter, chunks) == TokenUsage(5, 4, 0, 12)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.api)
@pytest.mark.parametrize("body", [
    b"", b"   ", b"\x00\x00\x00\x05garbage", b"data: {not json\n\n", b'{"usage": {"input_tokens": ',
    b'[{"usageMetadata": 1}', b"\xff\xfe" * 100, b'event: x\ndata: {"type":"message_start","message":[]}\n\n',
    b'{"usage": [1, 2], "usage": "x"}', b"}}]]::,,\"\\",
])
def test_scanner_never_raises(adapter: Adapter, body: bytes) -> None:
    for chunks in random_chunkings(body, count=3):
        _scan(adapter, chunks)
        _scan(adapter, chunks, [("content-type", "application/vnd.amazon.eventstream")])


def test_scanner_keeps_no_body() -> None:
    """A long stream of events without usage leaves nothing held; one big event is not kept whole."""
    adapter = AnthropicAdapter()
    scan = UsageScan(adapter, [("content-type", "text/event-stream")], limit=4096)
    delta = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"' + b"x" * 500 + b'"}}\n\n'
    scan.feed(b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}\n\n')
    for _ in range(2000):
        scan.feed(delta)
    huge = b'event: content_block_start\ndata: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":"' + b"y" * 100_000
    scan.feed(huge)
    framing = scan._framing
    assert len(framing._buffer) <= 4096  # type: ignore[union-attr]
    scan.feed(b'"}}\n\nevent: message_delta\ndata: {"type":"message_delta","delta":{},"usage":{"output_tokens":900}}\n\n')
    assert scan.usage() == TokenUsage(3, 0, 0, 900)


def test_scanner_gemini_array_keeps_only_usage() -> None:
    elements = [{"candidates": [{"content": {"parts": [{"text": "a" * 3000}]}}],
                 "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": i}} for i in range(1, 4)]
    body = ("[" + ",\r\n".join(json.dumps(e) for e in elements) + "]").encode()
    adapter = GeminiAdapter(stream=True, sse=False)
    for chunks in random_chunkings(body, count=5):
        assert _scan(adapter, chunks, [("content-type", "application/json")]) == TokenUsage(5, 0, 0, 3)


def test_invoke_chunk_payload_is_base64() -> None:
    event = {"type": "message_start", "message": {"usage": {"input_tokens": 1, "output_tokens": 2}}}
    frame = encode_frame({":event-type": "chunk", ":message-type": "event"},
                         json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode())
    assert _scan(InvokeAdapter(True, "m"), [frame]) == TokenUsage(1, 0, 0, 2)


def test_scanner_parses_only_usage_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cheap: of a recorded stream, only the events that carry usage are JSON-parsed."""
    from tooldisco.apis import usage_scan

    parsed: list[str] = []
    real = usage_scan.loads_or_text
    monkeypatch.setattr(usage_scan, "loads_or_text", lambda text: parsed.append(text) or real(text))
    rec, _ = named("anthropic", "test_web_search_tool_stream/anthropic_beta_claude_sonnet_4_0.yaml#2of2")
    assert rec.body.count(b"\n\n") > 20
    assert _scan(AnthropicAdapter(), [rec.body]) is not None
    assert [json.loads(text)["type"] for text in parsed] == ["message_start", "message_delta"]
    parsed.clear()
    rec, _ = named("openai_responses", "openai/responses/openai-web-search-tool.1.chunks.txt")
    assert _scan(OpenAIResponsesAdapter(), [rec.body]) is not None
    assert [json.loads(text)["type"] for text in parsed] == ["response.completed"]
