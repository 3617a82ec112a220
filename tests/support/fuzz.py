"""Hypothesis strategies for the fuzz suite (``tests/unit/test_fuzz.py``).

Why apart: valid requests and answers for each wire API, and the ways to break them
(fields removed, wrong types, unicode, huge numbers, deep nesting, truncation, stray
bytes), are building blocks every property shares; the test module keeps the properties.
Shapes follow ``shared/notes/providers.md``.

Strategies are built once, at import: structural choices go through one drawn
``Random`` (``st.randoms``, which Hypothesis still controls and shrinks), because
building strategies inside every draw costs more than the test itself.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from random import Random
from typing import Any

from hypothesis import strategies as st
from tooldisco.streams import sse
from tooldisco.streams.eventstream import EventStreamDecoder, EventStreamError, encode_frame
from tooldisco.streams.gemini import JSONArrayDecoder

Draw = Callable[[st.SearchStrategy[Any]], Any]

# Nesting the fuzz generates. Deeper documents make ``json.loads`` raise RecursionError, a
# known bug pinned by ``test_fuzz.test_nesting_past_the_parsers_limit_is_unsupported``.
MAX_DEPTH = 800

RANDOM = st.randoms(use_true_random=False)

# --- leaves ------------------------------------------------------------------------------

NAMES = st.text("abcdefghijklmnopqrstuvwxyz_ABC0123456789-", min_size=1, max_size=12)
# Any unicode (astral planes included) and now and then a lone surrogate, which JSON can
# carry as an escape (``"\ud800"``) but UTF-8 cannot.
TEXTS = st.text(max_size=24) | st.text(st.characters(categories=["Cs", "Lu", "Zs"]), max_size=4)
INTS = st.integers(-(2**70), 2**70) | st.sampled_from([0, -1, 2**63, 10**300, -(10**4000)])
FLOATS = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1e308, -0.0, 5e-324])
JSON = st.recursive(
    st.none() | st.booleans() | INTS | FLOATS | TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
    max_leaves=8,
)
IDS = st.text("abcdef0123456789", min_size=1, max_size=8).map(lambda s: f"id_{s}")
ARGS = st.dictionaries(NAMES, JSON, max_size=2)
SCHEMAS = st.fixed_dictionaries(
    {"type": st.just("object"),
     "properties": st.dictionaries(NAMES, st.fixed_dictionaries(
         {"type": st.sampled_from(["string", "integer"]), "description": TEXTS}), max_size=3)},
    optional={"required": st.lists(NAMES, max_size=2), "additionalProperties": st.booleans()},
)
TOOL_NAMES = st.lists(NAMES, unique=True, max_size=8)


def _optional(draw: Draw, rnd: Random, body: dict[str, Any], optional: dict[str, Any]) -> dict[str, Any]:
    """``body`` with some of ``optional`` (values or strategies), unknown extras (they must
    pass through byte-for-byte) and its members in a drawn order."""
    body = dict(body)
    for key, value in optional.items():
        if rnd.random() < 0.5:
            body[key] = draw(value) if isinstance(value, st.SearchStrategy) else value
    for key in draw(st.lists(NAMES, max_size=2)):
        body.setdefault(key if key not in optional else f"x_{key}", draw(JSON))
    keys = list(body)
    rnd.shuffle(keys)
    return {k: body[k] for k in keys}


def _with_tools(body: dict[str, Any], optional: dict[str, Any], key: str, tools: list[Any]) -> None:
    """Tools when there are some; else now and then an empty list, or no member at all."""
    if tools:
        body[key] = tools
    else:
        optional[key] = []


# --- requests, one strategy per wire API ---------------------------------------------------


@st.composite
def anthropic_request(draw: Draw, bedrock: bool = False) -> dict[str, Any]:
    rnd, names = draw(RANDOM), draw(TOOL_NAMES)
    tools: list[dict[str, Any]] = []
    for name in names:
        if rnd.random() < 0.15:  # a server tool: it has a type, and is never deferred
            tools.append({"type": "web_search_20250305", "name": name, "max_uses": draw(INTS)})
            continue
        tool = {"name": name, "description": draw(TEXTS), "input_schema": draw(SCHEMAS)}
        tools.append(_optional(draw, rnd, tool, {"cache_control": {"type": "ephemeral"},
                                                 "defer_loading": rnd.random() < 0.5, "strict": True}))
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(TEXTS)}]
    for call_id in draw(st.lists(IDS, unique=True, max_size=2)) if names else []:
        use = {"type": "tool_use", "id": call_id, "name": rnd.choice(names), "input": draw(ARGS)}
        messages.append({"role": "assistant", "content": [{"type": "text", "text": draw(TEXTS)}, use]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": draw(TEXTS)},
            {"type": "text", "text": draw(TEXTS)}]})
    choice = rnd.choice([{"type": "auto"}, {"type": "any"}, *({"type": "tool", "name": n} for n in names)])
    body: dict[str, Any] = {"max_tokens": rnd.randint(1, 10**6), "messages": messages}
    optional: dict[str, Any] = {"tool_choice": choice, "system": draw(TEXTS),
                                "metadata": {"user_id": json.dumps({"session_id": draw(IDS)})}}
    _with_tools(body, optional, "tools", tools)
    if bedrock:
        body["anthropic_version"] = "bedrock-2023-05-31"
    else:
        body["model"] = "claude-x"
        optional["stream"] = rnd.random() < 0.5
    return _optional(draw, rnd, body, optional)


@st.composite
def openai_chat_request(draw: Draw) -> dict[str, Any]:
    rnd, names = draw(RANDOM), draw(TOOL_NAMES)
    tools: list[dict[str, Any]] = []
    for name in names:
        if rnd.random() < 0.15:  # a non-function tool passes through
            tools.append({"type": "custom", "custom": {"name": name, "description": draw(TEXTS)}})
            continue
        function = {"name": name, "description": draw(TEXTS), "parameters": draw(SCHEMAS)}
        tools.append({"type": "function", "function": _optional(draw, rnd, function, {"strict": True})})
    messages: list[dict[str, Any]] = [{"role": "system", "content": draw(TEXTS)},
                                      {"role": "user", "content": draw(TEXTS)}]
    for call_id in draw(st.lists(IDS, unique=True, max_size=2)) if names else []:
        call = {"id": call_id, "type": "function",
                "function": {"name": rnd.choice(names), "arguments": json.dumps(draw(JSON))}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call_id, "content": draw(TEXTS)},
                     {"role": "user", "content": [{"type": "text", "text": draw(TEXTS)}]}]
    allowed = [{"type": "function", "function": {"name": n}} for n in names if rnd.random() < 0.3]
    choice = rnd.choice(["auto", "none", "required", *({"type": "function", "function": {"name": n}} for n in names),
                         {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": allowed}}])
    body: dict[str, Any] = {"model": "gpt-x", "messages": messages}
    optional: dict[str, Any] = {"tool_choice": choice, "stream": rnd.random() < 0.5, "prompt_cache_key": draw(IDS),
                                "stream_options": {"include_usage": True}, "parallel_tool_calls": False}
    _with_tools(body, optional, "tools", tools)
    return _optional(draw, rnd, body, optional)


@st.composite
def openai_responses_request(draw: Draw) -> dict[str, Any]:
    rnd, names = draw(RANDOM), draw(TOOL_NAMES)
    tools: list[dict[str, Any]] = []
    for name in names:
        function = {"type": "function", "name": name, "description": draw(TEXTS), "parameters": draw(SCHEMAS)}
        if rnd.random() < 0.15:  # Codex sends each MCP server as a namespace: it passes through
            tools.append({"type": "namespace", "name": name, "description": draw(TEXTS),
                          "tools": [{**function, "name": f"{name}_inner"}]})
            continue
        tools.append(_optional(draw, rnd, function, {"strict": True, "defer_loading": rnd.random() < 0.5}))
    if rnd.random() < 0.5:
        tools.append({"type": "web_search"})
    items: list[Any] = [{"role": "user", "content": draw(TEXTS)},
                        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": draw(TEXTS)}]}]
    for call_id in draw(st.lists(IDS, unique=True, max_size=2)) if names else []:
        items += [{"type": "function_call", "call_id": call_id, "name": rnd.choice(names),
                   "arguments": json.dumps(draw(JSON))},
                  {"type": "function_call_output", "call_id": call_id, "output": draw(TEXTS)}]
    choice = rnd.choice(["auto", "required", *({"type": "function", "name": n} for n in names)])
    body: dict[str, Any] = {"model": "gpt-x", "input": items if rnd.random() < 0.8 else draw(TEXTS)}
    optional: dict[str, Any] = {"tool_choice": choice, "stream": rnd.random() < 0.5, "store": rnd.random() < 0.5,
                                "previous_response_id": draw(IDS), "prompt_cache_key": draw(IDS),
                                "instructions": draw(TEXTS)}
    _with_tools(body, optional, "tools", tools)
    return _optional(draw, rnd, body, optional)


@st.composite
def gemini_request(draw: Draw) -> dict[str, Any]:
    rnd, names = draw(RANDOM), draw(TOOL_NAMES)
    declarations = [_optional(draw, rnd, {"name": n, "description": draw(TEXTS)},
                              {"parameters": SCHEMAS, "parametersJsonSchema": SCHEMAS}) for n in names]
    # Declarations in one entry or two (camelCase or snake_case), some beside other members,
    # among entries that are not function declarations.
    cut = rnd.randint(0, len(declarations))
    entries: list[dict[str, Any]] = []
    for group in (g for g in (declarations[:cut], declarations[cut:]) if g):
        entry: dict[str, Any] = {rnd.choice(["functionDeclarations", "function_declarations"]): group}
        if rnd.random() < 0.3:
            entry["googleSearch"] = {}
        entries.append(entry)
    entries += [rnd.choice([{"codeExecution": {}}, {"urlContext": {}}]) for _ in range(rnd.randint(0, 2))]
    rnd.shuffle(entries)
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": draw(TEXTS)}]}]
    for name in [rnd.choice(names) for _ in range(rnd.randint(0, 2))] if names else []:
        contents += [{"role": "model", "parts": [{"functionCall": {"name": name, "args": draw(ARGS)},
                                                  "thoughtSignature": "c2ln"}]},
                     {"role": "user", "parts": [{"functionResponse": {"name": name, "response": {"r": draw(TEXTS)}}}]}]
    allowed = [n for n in names if rnd.random() < 0.3]
    body: dict[str, Any] = {"contents": contents}
    optional: dict[str, Any] = {
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": allowed}},
        "systemInstruction": {"parts": [{"text": draw(TEXTS)}]},
        "generationConfig": {"temperature": 0.2},
    }
    _with_tools(body, optional, "tools", entries)
    return _optional(draw, rnd, body, optional)


@st.composite
def converse_request(draw: Draw) -> dict[str, Any]:
    rnd, names = draw(RANDOM), draw(TOOL_NAMES)
    tools: list[dict[str, Any]] = [
        {"toolSpec": {"name": n, "description": draw(TEXTS), "inputSchema": {"json": draw(SCHEMAS)}}} for n in names
    ]
    for _ in range(rnd.randint(0, 2)):  # cache points between tools or at the end
        tools.insert(rnd.randint(0, len(tools)), {"cachePoint": {"type": "default"}})
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": draw(TEXTS)}]}]
    for call_id in draw(st.lists(IDS, unique=True, max_size=2)) if names else []:
        use = {"toolUseId": call_id, "name": rnd.choice(names), "input": draw(ARGS)}
        result = {"toolUseId": call_id, "content": [{"text": draw(TEXTS)}], "status": "success"}
        messages += [{"role": "assistant", "content": [{"toolUse": use}]},
                     {"role": "user", "content": [{"toolResult": result}]}]
    config: dict[str, Any] = {"tools": tools}
    if names and rnd.random() < 0.5:
        config["toolChoice"] = rnd.choice([{"auto": {}}, {"any": {}}, {"tool": {"name": rnd.choice(names)}}])
    body: dict[str, Any] = {"messages": messages}
    if tools or rnd.random() < 0.5:
        body["toolConfig"] = config
    return _optional(draw, rnd, body, {"system": [{"text": draw(TEXTS)}], "inferenceConfig": {"maxTokens": 512}})


REQUESTS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "anthropic": anthropic_request(),
    "openai_chat": openai_chat_request(),
    "openai_responses": openai_responses_request(),
    "gemini": gemini_request(),
    "gemini_stream": gemini_request(),
    "bedrock_converse": converse_request(),
    "bedrock_invoke": anthropic_request(bedrock=True),
}


# --- serializing and damaging --------------------------------------------------------------

_STYLES: list[dict[str, Any]] = [
    {},
    {"separators": (",", ":")},
    {"separators": (",", ":"), "ensure_ascii": False},
    {"indent": 2, "ensure_ascii": False},
    {"indent": "\t"},
]


def dumps(value: Any, rnd: Random) -> str:
    """``value`` as JSON text in one of the styles clients use (spacing, escapes)."""
    style = rnd.choice(_STYLES)
    text = json.dumps(value, **style)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate can only travel escaped
        text = json.dumps(value, **{**style, "ensure_ascii": True})
    return _expand_deep(text)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (the root excluded)."""
    out: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        out.append((*prefix, key))
        out += _paths(child, (*prefix, key))
    return out


# A marker string that ``dumps`` replaces with nested brackets: json.dumps itself would
# recurse as deep as the value.
_DEEP = "\u0000deep:"


def _expand_deep(text: str) -> str:
    marker = json.dumps(_DEEP)[:-1]  # the escaped marker, without its closing quote
    while (start := text.find(marker)) >= 0:
        end = text.index('"', start + len(marker))
        depth = int(text[start + len(marker) : end])
        text = text[:start] + "[" * depth + "]" * depth + text[end + 1 :]
    return text


@st.composite
def mutated(draw: Draw, value: Any) -> Any:
    """``value`` with 1-3 members removed or replaced: other types, unicode, huge numbers,
    deep nesting (once serialized by ``dumps``)."""
    rnd, value = draw(RANDOM), copy.deepcopy(value)
    for _ in range(rnd.randint(1, 3)):
        paths = _paths(value)
        if not paths:
            break
        *parent_path, key = rnd.choice(paths)
        parent = value
        for step in parent_path:
            parent = parent[step]
        op = rnd.choice(["remove", "replace", "replace", "deep"])
        if op == "remove":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(JSON)
        else:
            parent[key] = f"{_DEEP}{rnd.randint(2, MAX_DEPTH)}"
    return value


@st.composite
def mutated_text(draw: Draw, text: str) -> str:
    """Text-level damage: truncation, stray characters, a deleted or repeated slice, a
    number too long for ``int()`` (Python refuses more than 4300 digits)."""
    rnd = draw(RANDOM)
    for _ in range(rnd.randint(1, 2)):
        at = rnd.randint(0, len(text))
        op = rnd.choice(["truncate", "insert", "delete", "repeat", "bignum"])
        if op == "truncate":
            text = text[:at]
        elif op == "insert":
            text = text[:at] + rnd.choice([draw(TEXTS), '"', "{", "]", ",", "\\", ":"]) + text[at:]
        elif op in ("delete", "repeat"):
            end = rnd.randint(at, min(len(text), at + 40))
            text = text[:end] + text[at:] if op == "repeat" else text[:at] + text[end:]
        else:
            text = text[:at] + "9" * rnd.choice([20, 4301, 6000]) + text[at:]
    return text


@st.composite
def body_text(draw: Draw, api: str, damage: bool = True) -> str:
    """A request body for ``api``: valid, or (``damage``) mutated in structure and/or text."""
    rnd, value = draw(RANDOM), draw(REQUESTS[api])
    if damage and rnd.random() < 0.5:
        value = draw(mutated(value))
    text = dumps(value, rnd)
    if damage and rnd.random() < 0.3:
        text = draw(mutated_text(text))
    return text


@st.composite
def mutated_bytes(draw: Draw, data: bytes) -> bytes:
    """Byte-level damage: truncation, random bytes (invalid UTF-8 too), flips, deleted or
    repeated slices."""
    rnd = draw(RANDOM)
    for _ in range(rnd.randint(1, 3)):
        at = rnd.randint(0, len(data))
        op = rnd.choice(["truncate", "insert", "flip", "delete", "repeat"])
        if op == "truncate":
            data = data[:at]
        elif op == "insert":
            data = data[:at] + rnd.randbytes(rnd.randint(1, 8)) + data[at:]
        elif op == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ rnd.randint(1, 255)]) + data[at + 1 :]
        elif op in ("delete", "repeat"):
            end = rnd.randint(at, min(len(data), at + 64))
            data = data[:end] + data[at:] if op == "repeat" else data[:at] + data[end:]
    return data


@st.composite
def chunked(draw: Draw, data: bytes) -> list[bytes]:
    """``data`` cut at arbitrary points into non-empty pieces (``feed(b"")`` means the end):
    single bytes, inside UTF-8 characters, CRLFs and frames."""
    rnd = draw(RANDOM)
    if len(data) < 2:
        return [data] if data else []
    cuts = sorted({rnd.randint(1, len(data) - 1) for _ in range(rnd.randint(0, 24))})
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


# --- answers, one strategy per stream decoder ------------------------------------------------

USAGE = st.fixed_dictionaries({"input_tokens": st.integers(0, 10**6), "output_tokens": st.integers(0, 10**6)})

ANTHROPIC_MESSAGES = st.fixed_dictionaries({
    "id": IDS, "type": st.just("message"), "role": st.just("assistant"), "model": st.just("claude-x"),
    "content": st.lists(st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, TEXTS),
        st.builds(lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a}, IDS, NAMES, ARGS),
        st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, TEXTS, IDS),
        st.just({"type": "redacted_thinking", "data": "abc"}),
    ), max_size=4),
    "stop_reason": st.sampled_from(["end_turn", "tool_use", "max_tokens"]), "stop_sequence": st.none(),
    "usage": USAGE,
})


def _chat(calls: list[dict[str, Any]], content: str | None, usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x", "usage": usage,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}]}


CHAT_COMPLETIONS = st.builds(
    _chat,
    st.lists(st.builds(lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}},
                       IDS, NAMES, JSON), max_size=3),
    st.none() | TEXTS,
    st.fixed_dictionaries({"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6)}),
)

RESPONSES = st.fixed_dictionaries({
    "id": IDS, "object": st.just("response"), "created_at": st.just(1), "status": st.just("completed"),
    "model": st.just("gpt-x"),
    "output": st.lists(st.one_of(
        st.builds(lambda i, t: {"type": "message", "id": i, "status": "completed", "role": "assistant",
                                "content": [{"type": "output_text", "text": t, "annotations": []}]}, IDS, TEXTS),
        st.builds(lambda i, c, n, a: {"type": "function_call", "id": i, "call_id": c, "name": n,
                                      "arguments": json.dumps(a), "status": "completed"}, IDS, IDS, NAMES, JSON),
        st.builds(lambda i, t: {"type": "reasoning", "id": i, "summary": [{"type": "summary_text", "text": t}]},
                  IDS, TEXTS),
    ), max_size=4),
    "usage": st.fixed_dictionaries({k: st.integers(0, 10**6) for k in ("input_tokens", "output_tokens", "total_tokens")}),
})

GEMINI_RESPONSES = st.builds(
    lambda parts, usage: {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                                          "index": 0}], "usageMetadata": usage, "modelVersion": "gemini-x"},
    st.lists(st.one_of(
        st.builds(lambda t: {"text": t}, TEXTS),
        st.builds(lambda t: {"text": t, "thought": True}, TEXTS),
        st.builds(lambda n, a: {"functionCall": {"name": n, "args": a}, "thoughtSignature": "c2ln"}, NAMES, ARGS),
    ), min_size=1, max_size=4),
    st.fixed_dictionaries({"promptTokenCount": st.integers(0, 10**6), "candidatesTokenCount": st.integers(0, 10**6)}),
)

CONVERSE_RESPONSES = st.fixed_dictionaries({
    "output": st.builds(lambda blocks: {"message": {"role": "assistant", "content": blocks}}, st.lists(st.one_of(
        st.builds(lambda t: {"text": t}, TEXTS),
        st.builds(lambda i, n, a: {"toolUse": {"toolUseId": i, "name": n, "input": a}}, IDS, NAMES, ARGS),
    ), max_size=4)),
    "stopReason": st.sampled_from(["end_turn", "tool_use"]),
    "usage": st.fixed_dictionaries({k: st.integers(0, 10**6) for k in ("inputTokens", "outputTokens", "totalTokens")}),
    "metrics": st.fixed_dictionaries({"latencyMs": st.integers(0, 10**5)}),
})


# --- valid framing around hostile payloads ---------------------------------------------------


def _sse_events(stream: bytes) -> list[sse.SSEEvent]:
    decoder = sse.SSEDecoder()
    return [*decoder.feed(stream), *decoder.feed(b"")]


@st.composite
def hostile_sse(draw: Draw, stream: bytes) -> bytes:
    """The SSE events of ``stream`` framed correctly around mutated JSON payloads, so the
    damage reaches the assembler rather than the framing."""
    rnd, out = draw(RANDOM), []
    for event in _sse_events(stream):
        data = event.data
        if data.startswith("{") and rnd.random() < 0.3:
            data = dumps(draw(mutated(json.loads(data))), rnd)
        out.append(sse.encode_event(data, event.event))
    return b"".join(out)


@st.composite
def hostile_array(draw: Draw, stream: bytes) -> bytes:
    """Gemini's JSON-array stream with some elements mutated."""
    rnd = draw(RANDOM)
    elements = [text for text, _ in JSONArrayDecoder().feed(stream)]
    out = [dumps(draw(mutated(json.loads(e))), rnd) if rnd.random() < 0.3 else e for e in elements]
    return ("[" + ",".join(out) + "]").encode("utf-8")


@st.composite
def hostile_frames(draw: Draw, stream: bytes, invoke: bool) -> bytes:
    """AWS event-stream frames with valid CRCs around mutated payloads (for InvokeModel, the
    Anthropic event inside the base64 ``bytes``)."""
    rnd = draw(RANDOM)
    try:
        frames = EventStreamDecoder().feed(stream)
    except EventStreamError:
        return stream
    out = []
    for frame in frames:
        payload = frame.payload
        if rnd.random() < 0.3:
            outer = json.loads(payload)
            if invoke and isinstance(outer.get("bytes"), str):
                inner = dumps(draw(mutated(json.loads(base64.b64decode(outer["bytes"])))), rnd)
                payload = json.dumps({"bytes": base64.b64encode(inner.encode("utf-8")).decode("ascii")}).encode()
            else:
                payload = dumps(draw(mutated(outer)), rnd).encode("utf-8")
        out.append(encode_frame(frame.headers, payload))
    return b"".join(out)
