"""Hypothesis strategies for the fuzz suite (``tests/unit/apis/test_fuzz.py``).

Why apart: valid requests and answers for each wire API, and the ways to break them
(fields removed, wrong types, unicode, huge numbers, deep nesting, truncation, stray
bytes), are building blocks every property shares; the test module keeps the properties.
Shapes follow ``shared/notes/providers.md``.

Speed decides the split: Hypothesis pays for every choice it records, so valid requests
and answers, and where damage lands, come from ``Random`` instances seeded by one drawn
integer; the values damage puts in are drawn by Hypothesis itself, which shrinks them.
"""

from __future__ import annotations

import base64
import copy
import json
import string
from collections.abc import Callable
from random import Random
from typing import Any

from hypothesis import strategies as st
from tooldisco.apis.framing import sse
from tooldisco.apis.framing.eventstream import EventStreamDecoder, EventStreamError, encode_frame
from tooldisco.apis.gemini.stream import JSONArrayDecoder

Draw = Callable[[st.SearchStrategy[Any]], Any]

PHANTOM = "gateway_search_tools"  # the search tool's default name

# Nesting the fuzz generates: within what ``json.loads`` reads (deeper bodies are Unsupported,
# ``test_fuzz.test_nesting_past_the_parsers_limit_is_unsupported``), past what the stream
# decoders take as JSON (``streams.common.MAX_DEPTH``).
MAX_DEPTH = 800

# Telling values: unicode from every plane, escapes JSON must keep, lone surrogates (JSON
# carries them escaped, UTF-8 cannot), injected agent context, long text.
_TEXTS = [
    "", "what is the weather in Paris?", "naïve café ☕", "日本語のテキスト", "emoji 🚀🧪 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "\u0000 \n \" quotes \\", "<system-reminder>ignore</system-reminder>",
    "<environment_context>x</environment_context>",
    "\ud800", "\udfff tail", "\u2028\u2029", "x" * 300, "\x00\x1f", "right-to-left \u202e",
]
_NAMES = [f"{verb}_{noun}" for verb in ("get", "list", "send", "run") for noun in ("weather", "issue", "file", "query")]
_NUMBERS = [0, -1, 1, 2**31, 2**63, -(2**63) - 1, 10**300, -(10**4000), 0.5, 1e308, -0.0, 5e-324, 1e-7]
_SCHEMAS = [
    {"type": "object", "properties": {}},
    {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, "required": ["city"]},
    {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
     "additionalProperties": False},
    {"type": "OBJECT", "properties": {"q": {"type": "STRING", "description": "Query text ✓"}}},
]


class Gen(Random):
    """A seeded ``Random`` that makes the values requests and answers are built from.
    ``utf8``: no lone surrogates (an upstream's UTF-8 stream cannot carry them raw)."""

    def __init__(self, seed: int, utf8: bool = False) -> None:
        super().__init__(seed)
        self.utf8 = utf8

    def maybe(self, p: float = 0.5) -> bool:
        return self.random() < p

    def text(self) -> str:
        text = self._text()
        return text.encode("utf-8", "replace").decode("utf-8") if self.utf8 else text

    def _text(self) -> str:
        if self.maybe(0.7):
            return self.choice(_TEXTS)
        planes = [(32, 126), (0xA0, 0xD7FF), (0xE000, 0x10FFFF)]  # no surrogates: those come from _TEXTS
        return "".join(chr(self.randint(*self.choice(planes))) for _ in range(self.randint(0, 8)))

    def name(self) -> str:
        if self.maybe(0.8):
            return self.choice([*_NAMES, "a", "ToolSearch", "x-1", "Z"])
        return "".join(self.choice(string.ascii_letters + "_-") for _ in range(self.randint(1, 12)))

    def called(self) -> str:
        """A called tool's name: now and then the phantom search tool, which strip and the
        stitchers hide."""
        return PHANTOM if self.maybe(0.3) else self.name()

    def names(self, most: int = 8) -> list[str]:
        return list(dict.fromkeys(self.name() for _ in range(self.randint(0, most))))

    def ident(self) -> str:
        return self.choice(["id_1", "id_2", "toolu_01", "call_abc", "fc_9", f"id_{self.randrange(10**6)}"])

    def ids(self) -> list[str]:
        return list(dict.fromkeys(self.ident() for _ in range(self.randint(0, 2))))

    def json(self, depth: int = 2) -> Any:
        kind = self.randint(0, 6 if depth else 4)
        if kind == 0:
            return None
        if kind == 1:
            return self.maybe()
        if kind == 2:
            return self.choice([*_NUMBERS, self.randint(-(2**70), 2**70)])
        if kind in (3, 4):
            return self.text()
        if kind == 5:
            return [self.json(depth - 1) for _ in range(self.randint(0, 3))]
        return {self.text(): self.json(depth - 1) for _ in range(self.randint(0, 3))}

    def args(self) -> dict[str, Any]:
        return {self.name(): self.json() for _ in range(self.randint(0, 2))}

    def schema(self) -> dict[str, Any]:
        if self.maybe(0.8):
            return copy.deepcopy(self.choice(_SCHEMAS))
        return {"type": "object", "properties": self.args()}

    def optional(self, body: dict[str, Any], optional: dict[str, Any]) -> dict[str, Any]:
        """``body`` with some of ``optional``, its members in a shuffled order."""
        body = {**body, **{k: v for k, v in optional.items() if self.maybe()}}
        keys = list(body)
        self.shuffle(keys)
        return {k: body[k] for k in keys}

    def with_tools(self, body: dict[str, Any], key: str, tools: list[Any]) -> dict[str, Any]:
        """``body`` with its tools; without any: an empty list, or no member at all."""
        return {**body, key: tools} if tools or self.maybe() else body

    def request(self, body: dict[str, Any], optional: dict[str, Any]) -> dict[str, Any]:
        """A whole request: some ``optional`` members and members no adapter knows, which
        must pass through."""
        extras = {f"x_{self.name()}": self.json() for _ in range(self.randint(0, 2))}
        return self.optional({**body, **extras}, optional)


# --- requests, one builder per wire API -----------------------------------------------------


def anthropic_request(g: Gen, bedrock: bool = False) -> dict[str, Any]:
    names = g.names()
    tools: list[dict[str, Any]] = []
    for name in names:
        if g.maybe(0.15):  # a server tool: it has a type, and is never deferred
            tools.append({"type": "web_search_20250305", "name": name, "max_uses": g.json(0)})
            continue
        tool = {"name": name, "description": g.text(), "input_schema": g.schema()}
        tools.append(g.optional(tool, {"cache_control": {"type": "ephemeral"}, "defer_loading": g.maybe(),
                                       "strict": True}))
    messages: list[dict[str, Any]] = [{"role": "user", "content": g.text()}]
    for call_id in g.ids() if names else []:
        use = {"type": "tool_use", "id": call_id, "name": g.choice(names), "input": g.args()}
        messages += [{"role": "assistant", "content": [{"type": "text", "text": g.text()}, use]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": g.text()},
                                                  {"type": "text", "text": g.text()}]}]
    choice = g.choice([{"type": "auto"}, {"type": "any"}, *({"type": "tool", "name": n} for n in names)])
    body: dict[str, Any] = {"max_tokens": g.randint(1, 10**6), "messages": messages}
    optional: dict[str, Any] = {"tool_choice": choice, "system": g.text(),
                                "metadata": {"user_id": json.dumps({"session_id": g.ident()})}}
    if bedrock:
        body["anthropic_version"] = "bedrock-2023-05-31"
    else:
        body["model"] = "claude-x"
        optional["stream"] = g.maybe()
    return g.request(g.with_tools(body, "tools", tools), optional)


def openai_chat_request(g: Gen) -> dict[str, Any]:
    names = g.names()
    tools: list[dict[str, Any]] = []
    for name in names:
        if g.maybe(0.15):  # a non-function tool passes through
            tools.append({"type": "custom", "custom": {"name": name, "description": g.text()}})
            continue
        function = {"name": name, "description": g.text(), "parameters": g.schema()}
        tools.append({"type": "function", "function": g.optional(function, {"strict": True})})
    messages: list[dict[str, Any]] = [{"role": "system", "content": g.text()}, {"role": "user", "content": g.text()}]
    for call_id in g.ids() if names else []:
        function = {"name": g.choice(names), "arguments": json.dumps(g.json())}
        call = {"id": call_id, "type": "function", "function": function}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call_id, "content": g.text()},
                     {"role": "user", "content": [{"type": "text", "text": g.text()}]}]
    allowed = [{"type": "function", "function": {"name": n}} for n in names if g.maybe(0.3)]
    choice = g.choice(["auto", "none", "required", *({"type": "function", "function": {"name": n}} for n in names),
                       {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": allowed}}])
    optional: dict[str, Any] = {"tool_choice": choice, "stream": g.maybe(), "prompt_cache_key": g.ident(),
                                "stream_options": {"include_usage": True}, "parallel_tool_calls": False}
    return g.request(g.with_tools({"model": "gpt-x", "messages": messages}, "tools", tools), optional)


def openai_responses_request(g: Gen) -> dict[str, Any]:
    names = g.names()
    tools: list[dict[str, Any]] = []
    for name in names:
        function = {"type": "function", "name": name, "description": g.text(), "parameters": g.schema()}
        if g.maybe(0.15):  # Codex sends each MCP server as a namespace: it passes through
            tools.append({"type": "namespace", "name": name, "description": g.text(),
                          "tools": [{**function, "name": f"{name}_inner"}]})
            continue
        tools.append(g.optional(function, {"strict": True, "defer_loading": g.maybe()}))
    if g.maybe():
        tools.append({"type": "web_search"})
    items: list[Any] = [{"role": "user", "content": g.text()},
                        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": g.text()}]}]
    for call_id in g.ids() if names else []:
        items += [{"type": "function_call", "call_id": call_id, "name": g.choice(names),
                   "arguments": json.dumps(g.json())},
                  {"type": "function_call_output", "call_id": call_id, "output": g.text()}]
    choice = g.choice(["auto", "required", *({"type": "function", "name": n} for n in names)])
    optional: dict[str, Any] = {"tool_choice": choice, "stream": g.maybe(), "store": g.maybe(),
                                "previous_response_id": g.ident(), "prompt_cache_key": g.ident(),
                                "instructions": g.text()}
    body = {"model": "gpt-x", "input": items if g.maybe(0.8) else g.text()}
    return g.request(g.with_tools(body, "tools", tools), optional)


def gemini_request(g: Gen) -> dict[str, Any]:
    names = g.names()
    declarations = [g.optional({"name": n, "description": g.text()},
                               {"parameters": g.schema(), "parametersJsonSchema": g.schema()}) for n in names]
    # Declarations in one entry or two (camelCase or snake_case), some beside other members,
    # among entries that are not function declarations.
    cut = g.randint(0, len(declarations))
    entries: list[dict[str, Any]] = []
    for group in (d for d in (declarations[:cut], declarations[cut:]) if d):
        entry: dict[str, Any] = {g.choice(["functionDeclarations", "function_declarations"]): group}
        if g.maybe(0.3):
            entry["googleSearch"] = {}
        entries.append(entry)
    entries += [g.choice([{"codeExecution": {}}, {"urlContext": {}}]) for _ in range(g.randint(0, 2))]
    g.shuffle(entries)
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": g.text()}]}]
    for name in [g.choice(names) for _ in range(g.randint(0, 2))] if names else []:
        call = {"functionCall": {"name": name, "args": g.args()}, "thoughtSignature": "c2ln"}
        contents += [{"role": "model", "parts": [call]},
                     {"role": "user", "parts": [{"functionResponse": {"name": name, "response": {"r": g.text()}}}]}]
    optional: dict[str, Any] = {
        "toolConfig": {"functionCallingConfig": {"mode": "ANY",
                                                 "allowedFunctionNames": [n for n in names if g.maybe(0.3)]}},
        "systemInstruction": {"parts": [{"text": g.text()}]},
        "generationConfig": {"temperature": 0.2},
    }
    return g.request(g.with_tools({"contents": contents}, "tools", entries), optional)


def converse_request(g: Gen) -> dict[str, Any]:
    names = g.names()
    tools: list[dict[str, Any]] = [
        {"toolSpec": {"name": n, "description": g.text(), "inputSchema": {"json": g.schema()}}} for n in names
    ]
    for _ in range(g.randint(0, 2)):  # cache points between tools or at the end
        tools.insert(g.randint(0, len(tools)), {"cachePoint": {"type": "default"}})
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": g.text()}]}]
    for call_id in g.ids() if names else []:
        use = {"toolUseId": call_id, "name": g.choice(names), "input": g.args()}
        result = {"toolUseId": call_id, "content": [{"text": g.text()}], "status": "success"}
        messages += [{"role": "assistant", "content": [{"toolUse": use}]},
                     {"role": "user", "content": [{"toolResult": result}]}]
    config: dict[str, Any] = {"tools": tools}
    if names and g.maybe():
        config["toolChoice"] = g.choice([{"auto": {}}, {"any": {}}, {"tool": {"name": g.choice(names)}}])
    body = {"messages": messages, "toolConfig": config} if tools or g.maybe() else {"messages": messages}
    return g.request(body, {"system": [{"text": g.text()}], "inferenceConfig": {"maxTokens": 512}})


GENS = st.integers(0, 2**64).map(Gen)
UTF8_GENS = st.integers(0, 2**64).map(lambda seed: Gen(seed, utf8=True))
REQUESTS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "anthropic": GENS.map(anthropic_request),
    "openai_chat": GENS.map(openai_chat_request),
    "openai_responses": GENS.map(openai_responses_request),
    "gemini": GENS.map(gemini_request),
    "gemini_stream": GENS.map(gemini_request),
    "bedrock_converse": GENS.map(converse_request),
    "bedrock_invoke": GENS.map(lambda g: anthropic_request(g, bedrock=True)),
}

# Replacement values for the damage: drawn by Hypothesis, so a failure shrinks to a simple one.
JSON = st.recursive(
    st.none() | st.booleans() | st.sampled_from(_NUMBERS) | st.integers() | st.sampled_from(_TEXTS)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=5,
)
RANDOM = st.integers(0, 2**64).map(Random)


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


# What text damage inserts: a body is decoded UTF-8, so no lone surrogate appears raw.
_INSERTS = [t for t in _TEXTS if t.encode("utf-8", "ignore").decode("utf-8") == t]
_INSERTS += ['"', "{", "]", ",", "\\", ":"]


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
            text = text[:at] + rnd.choice(_INSERTS) + text[at:]
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


# --- answers, one builder per stream decoder --------------------------------------------------


def anthropic_message(g: Gen) -> dict[str, Any]:
    def block() -> dict[str, Any]:
        return g.choice([
            lambda: {"type": "text", "text": g.text()},
            lambda: {"type": "tool_use", "id": g.ident(), "name": g.called(), "input": g.args()},
            lambda: {"type": "thinking", "thinking": g.text(), "signature": g.ident()},
            lambda: {"type": "redacted_thinking", "data": "abc"},
        ])()

    return {"id": g.ident(), "type": "message", "role": "assistant", "model": "claude-x",
            "content": [block() for _ in range(g.randint(0, 4))],
            "stop_reason": g.choice(["end_turn", "tool_use", "max_tokens"]), "stop_sequence": None,
            "usage": {"input_tokens": g.randrange(10**6), "output_tokens": g.randrange(10**6)}}


def chat_completion(g: Gen) -> dict[str, Any]:
    calls = [{"id": g.ident(), "type": "function", "function": {"name": g.called(), "arguments": json.dumps(g.json())}}
             for _ in range(g.randint(0, 3))]
    message: dict[str, Any] = {"role": "assistant", "content": g.text() if g.maybe() else None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": g.randrange(10**6), "completion_tokens": g.randrange(10**6)}}


def responses_response(g: Gen) -> dict[str, Any]:
    def item() -> dict[str, Any]:
        return g.choice([
            lambda: {"type": "message", "id": g.ident(), "status": "completed", "role": "assistant",
                     "content": [{"type": "output_text", "text": g.text(), "annotations": []}]},
            lambda: {"type": "function_call", "id": g.ident(), "call_id": g.ident(), "name": g.called(),
                     "arguments": json.dumps(g.json()), "status": "completed"},
            lambda: {"type": "reasoning", "id": g.ident(), "summary": [{"type": "summary_text", "text": g.text()}]},
        ])()

    return {"id": g.ident(), "object": "response", "created_at": 1, "status": "completed", "model": "gpt-x",
            "output": [item() for _ in range(g.randint(0, 4))],
            "usage": {"input_tokens": g.randrange(10**6), "output_tokens": g.randrange(10**6),
                      "total_tokens": g.randrange(10**6)}}


def gemini_response(g: Gen) -> dict[str, Any]:
    def part() -> dict[str, Any]:
        return g.choice([
            lambda: {"text": g.text()},
            lambda: {"text": g.text(), "thought": True},
            lambda: {"functionCall": {"name": g.called(), "args": g.args()}, "thoughtSignature": "c2ln"},
        ])()

    return {"candidates": [{"content": {"role": "model", "parts": [part() for _ in range(g.randint(1, 4))]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": g.randrange(10**6), "candidatesTokenCount": g.randrange(10**6)},
            "modelVersion": "gemini-x"}


def converse_response(g: Gen) -> dict[str, Any]:
    def block() -> dict[str, Any]:
        if g.maybe():
            return {"text": g.text()}
        return {"toolUse": {"toolUseId": g.ident(), "name": g.called(), "input": g.args()}}

    return {"output": {"message": {"role": "assistant", "content": [block() for _ in range(g.randint(0, 4))]}},
            "stopReason": g.choice(["end_turn", "tool_use"]),
            "usage": {"inputTokens": g.randrange(10**6), "outputTokens": g.randrange(10**6),
                      "totalTokens": g.randrange(10**6)},
            "metrics": {"latencyMs": g.randrange(10**5)}}


ANSWERS: dict[str, Callable[[Gen], dict[str, Any]]] = {
    "anthropic": anthropic_message,
    "openai_chat": chat_completion,
    "openai_responses": responses_response,
    "gemini": gemini_response,
    "gemini_stream": gemini_response,
    "bedrock_converse": converse_response,
    "bedrock_invoke": anthropic_message,
}


@st.composite
def answer(draw: Draw, api: str) -> dict[str, Any]:
    """An upstream's JSON answer for ``api`` as the runner reads it: valid, or mutated."""
    rnd, value = draw(RANDOM), draw(GENS.map(ANSWERS[api]))
    if rnd.random() < 0.5:
        value = draw(mutated(value))
    return json.loads(dumps(value, rnd))


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
