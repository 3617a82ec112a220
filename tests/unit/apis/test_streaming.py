"""Shared codec machinery: SDK-style delta folding, fragment joining, snapshots, robustness."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from openai.lib.streaming._deltas import accumulate_delta
from tests.support.streams import decode, fixture
from tooldisco.apis.anthropic import stream as anthropic
from tooldisco.apis.bedrock import stream as bedrock
from tooldisco.apis.gemini import stream as gemini
from tooldisco.apis.openai_chat import stream as openai_chat
from tooldisco.apis.openai_responses import stream as openai_responses
from tooldisco.apis.streaming import (
    MAX_DEPTH,
    Fragments,
    IncompleteStream,
    StreamError,
    loads_or_text,
    merge_delta,
)

CASES = [
    (anthropic.AnthropicStreamDecoder, "anthropic_thinking_tool.sse"),
    (anthropic.AnthropicStreamDecoder, "anthropic_server_tools_crlf.sse"),
    (openai_chat.ChatCompletionStreamDecoder, "openai_chat_tools_usage.sse"),
    (openai_responses.ResponsesStreamDecoder, "openai_responses_reasoning_tool.sse"),
    (gemini.GeminiStreamDecoder, "gemini_thoughts_calls.sse"),
    (gemini.GeminiStreamDecoder, "gemini_text_array.json"),
    (bedrock.ConverseStreamDecoder, "bedrock_converse_tool.bin"),
    (bedrock.InvokeStreamDecoder, "bedrock_invoke_claude.bin"),
]
IDS = [name for _, name in CASES]


def merged(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    acc: dict[str, Any] = {}
    fragments = Fragments()
    for delta in deltas:
        merge_delta(acc, delta, fragments)
    fragments.flush()
    return acc


def test_merge_delta_folds_like_the_openai_sdk() -> None:
    deltas = [
        {"role": "assistant", "content": "", "refusal": None},
        {"content": "Hel", "tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "f"}}]},
        {
            "content": "lo",
            "tool_calls": [
                {"index": 0, "function": {"arguments": '{"a"'}},
                {"index": 1, "id": "c1", "type": "function", "function": {"name": "g", "arguments": ""}},
                {"index": 0, "function": {"arguments": ": 1}"}},
            ],
        },
        {"annotations": [{"type": "url_citation", "url": "u"}]},
        {"audio": {"id": "a1", "data": "AAA"}},
        {"audio": {"data": "BBB"}, "refusal": None},
    ]
    sdk: dict[object, object] = {}
    for delta in copy.deepcopy(deltas):
        sdk = accumulate_delta(sdk, delta)
    assert merged(copy.deepcopy(deltas)) == sdk
    # where the SDK raises (a second list of objects without "index"), we extend
    more = [{"annotations": [{"url": "u"}]}, {"annotations": [{"url": "v"}]}]
    assert merged(more) == {"annotations": [{"url": "u"}, {"url": "v"}]}


def test_replaced_keys_and_none_never_erases() -> None:
    acc: dict[str, Any] = {}
    fragments = Fragments()
    merge_delta(acc, {"role": "assistant", "content": "a"}, fragments, frozenset({"role"}))
    merge_delta(acc, {"role": "assistant", "content": None, "n": 1}, fragments, frozenset({"role"}))
    merge_delta(acc, {"n": 2, "content": "b"}, fragments, frozenset({"role"}))
    fragments.flush()
    assert acc == {"role": "assistant", "content": "ab", "n": 2}


def test_fragments_join_set_and_get() -> None:
    fragments = Fragments()
    target: dict[str, Any] = {"text": "a", "other": None}
    fragments.append(target, "text", "b")
    fragments.append(target, "other", "x")
    assert fragments.get(target, "text") == "ab"
    fragments.append(target, "text", "c")
    fragments.set(target, "other", "replaced")  # pending pieces of "other" are dropped
    fragments.flush()
    assert target == {"text": "abc", "other": "replaced"}


@pytest.mark.parametrize(("make", "name"), CASES, ids=IDS)
def test_snapshots_mid_stream_do_not_disturb_the_result(make: Any, name: str) -> None:
    body = fixture(name)
    expected = decode(make, [body])[0].message()
    decoder = make()
    pieces = [body[i : i + 37] for i in range(0, len(body), 37)]
    for piece in pieces:
        decoder.feed(piece)
        try:
            decoder.message()
        except IncompleteStream:
            pass
    decoder.feed(b"")
    assert decoder.message() == expected


@pytest.mark.parametrize(("make", "name"), [c for c in CASES if not c[1].endswith(".bin")], ids=IDS[:6])
def test_garbled_payloads_never_crash_the_text_decoders(make: Any, name: str) -> None:
    body = fixture(name)
    rng = random.Random(11)
    for _ in range(60):
        garbled = bytearray(body)
        for _ in range(rng.randint(1, 12)):
            position = rng.randrange(len(garbled))
            garbled[position] = rng.choice(b'{}[]":,0a \n\\')
        decoder, _ = decode(make, [bytes(garbled)])
        try:
            decoder.message()
        except (IncompleteStream, StreamError):
            pass


@pytest.mark.parametrize(("make", "name"), [c for c in CASES if not c[1].endswith(".bin")], ids=IDS[:6])
def test_structurally_wrong_events_never_crash(make: Any, name: str) -> None:
    """Valid JSON with the wrong shapes: every value replaced by one of another type."""
    decoder = make()
    values: list[Any] = [None, 1, "x", [], {}, [1], {"index": "0"}]
    events = decode(make, [fixture(name)])[1]
    for seed, event in enumerate(events):
        if not isinstance(event.data, dict):
            continue
        rng = random.Random(seed)
        data = json.loads(json.dumps(event.data))
        _scramble(data, rng, values)
        decoder.assembler.apply(None, data)
    try:
        decoder.message()
    except (IncompleteStream, StreamError):
        pass


def _scramble(value: Any, rng: random.Random, values: list[Any]) -> None:
    if isinstance(value, dict):
        for key in list(value):
            if key != "type" and rng.random() < 0.3:
                value[key] = rng.choice(values)
            else:
                _scramble(value[key], rng, values)
    elif isinstance(value, list):
        for item in value:
            _scramble(item, rng, values)


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("text, parsed", [
    (_nested(MAX_DEPTH), True),
    (_nested(MAX_DEPTH + 1), False),
    ("[" + ",".join("[[]]" for _ in range(MAX_DEPTH)) + "]", True),  # many brackets, shallow: walked
    ('"' + "[" * (MAX_DEPTH + 1) + '"', True),  # brackets in a string nest nothing
    ("[" * 20_000 + "]" * 20_000, False),  # past json.loads' own limit
    ("{", False),
])
def test_loads_or_text_takes_json_up_to_the_depth_the_assemblers_copy(text: str, parsed: bool) -> None:
    assert loads_or_text(text) == (json.loads(text) if parsed else text)


def test_fragments_keep_their_text_and_join_runs_as_they_come():
    from tooldisco.apis.streaming import Fragments

    f, target = Fragments(), {}
    pieces = [f"{i}," for i in range(5000)]
    for p in pieces:
        f.append(target, "text", p)
    assert len(f._pending[(id(target), "text")][2]) < 600  # runs of fragments joined, not 5,000 objects
    f.flush()
    assert target["text"] == "".join(pieces)


def test_fragments_past_the_limit_are_dropped_and_said():
    from tooldisco.apis.streaming import Fragments

    f, target = Fragments(limit=10), {}
    for p in ("abcd", "efgh", "ijkl"):
        f.append(target, "text", p)
    f.flush()
    assert target["text"] == "abcdefgh" and f.cut and f.size == 12


def test_copy_json_shares_nothing_mutable_with_its_source() -> None:
    """The assemblers copy each upstream value before they fold into it: the event objects
    the stitchers pass on (and compare by identity) must never change under them."""
    from tooldisco.apis.streaming import copy_json

    source = {"a": [1, {"b": "x", "c": [True, None, 2.5]}], "d": {"e": {}}, "t": (1, [2])}
    copied = copy_json(source)
    assert copied == source
    copied["a"][1]["c"].append(3)
    copied["d"]["e"]["f"] = 1
    copied["t"][1].append(3)  # not JSON (a tuple): deep-copied all the same
    assert source == {"a": [1, {"b": "x", "c": [True, None, 2.5]}], "d": {"e": {}}, "t": (1, [2])}
