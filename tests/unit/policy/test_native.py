"""Native deferral: tools[] byte-identical for a session, searches answered with tool_reference
blocks (Anthropic) or a tool_search_output (Responses), the classic fallback on a refusal.

Shapes are checked against the official SDKs' request types (pydantic over their TypedDicts)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import MessageParam, ToolParam
from openai.types.responses import ResponseInputItemParam, ToolSearchToolParam
from pydantic import TypeAdapter

from tooldisco.config import parse
from tooldisco.engine.engine import Engine
from tooldisco.apis.anthropic.adapter import AnthropicAdapter, _result_content, parse_tool
from tooldisco.core.types import ToolCall, ToolResult
from tooldisco.apis.catalogs import tool_spans
from tooldisco.apis.registry import detect
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter
from tooldisco.core.answers import Answer

from tests.support.catalog import anthropic_tools

A = AnthropicAdapter()
R = OpenAIResponsesAdapter()
P = "gateway_search_tools"
TOOLS = anthropic_tools(60)
NATIVE_CLAUDE = "claude-sonnet-4-5-20250929"
FUNCTIONS = [{"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
             for t in TOOLS]


def make_engine(tmp_path, **defer: Any) -> Engine:
    cfg = {"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "search": {"backend": "bm25"},
                                        "defer": {"upfront": 4, **defer}}},
           "sessions": {"dir": str(tmp_path / "s")}, "telemetry": {"enabled": False}}
    return Engine(parse(cfg))


@pytest.fixture
def engine(tmp_path):
    e = make_engine(tmp_path, native_upfront=True)
    yield e
    e.close()


HEADERS = {"x-api-key": "sk-test", "x-claude-code-session-id": "s1"}


def messages_body(text: str, model: str = NATIVE_CLAUDE, tools: list[dict] = TOOLS, **extra: Any) -> bytes:
    return json.dumps({"model": model, "max_tokens": 9, "tools": tools,
                       "messages": [{"role": "user", "content": text}], **extra}).encode()


def tool_texts(body: bytes | str) -> list[str]:
    text = body.decode() if isinstance(body, bytes) else body
    return tool_spans(text, ["tools"])


# --- Anthropic: what goes out ------------------------------------------------------------------


def test_native_deferral_keeps_no_upfront_set_unless_told(tmp_path):
    """A native search loads inline at the price of one cached round; a tool kept loaded is read
    with every request: by default native deferral defers every tool it may."""
    e = make_engine(tmp_path)
    try:
        client = messages_body("weather forecast for Paris")
        first = e.prepare(A, HEADERS, client)
        assert first.context.mode.name == "native"
        sent = [json.loads(t) for t in tool_texts(first.body)]
        assert [t["name"] for t in sent if not t.get("defer_loading")] == [P]
        again = e.prepare(A, HEADERS, messages_body("weather forecast for Paris"))
        assert again.body == first.body  # the session's tools[] does not change
        classic = e.prepare(A, HEADERS, messages_body("weather forecast for Paris", model="claude-3-5-haiku"))
        kept = [json.loads(t)["name"] for t in tool_texts(classic.body)]
        assert "mcp__weather__get_forecast" in kept  # classic deferral still keeps its upfront set
    finally:
        e.close()


def test_every_client_tool_goes_out_in_order_deferred_ones_marked_and_the_search_tool_last(engine):
    client = messages_body("weather forecast for Paris")
    prepared = engine.prepare(A, HEADERS, client)
    assert prepared.context.mode.name == "native" and prepared.context.record.deferral == "native"
    sent, original = tool_texts(prepared.body), tool_texts(client)
    assert len(sent) == len(original) + 1
    loaded = []
    for mine, theirs in zip(sent, original):  # the client's bytes, or exactly those plus the flag
        if mine != theirs:
            assert mine == theirs[:-1] + ',"defer_loading":true}'
        else:
            loaded.append(json.loads(mine)["name"])
    assert {"mcp__weather__get_forecast", "mcp__weather__get_current_weather"} <= set(loaded)
    assert len(loaded) < len(original) / 2  # most are deferred
    search = json.loads(sent[-1])
    assert search["name"] == P and "defer_loading" not in search
    TypeAdapter(list[ToolParam]).validate_python([json.loads(t) for t in sent])


def test_tools_stay_byte_identical_across_a_session_whatever_the_topic(engine):
    first = engine.prepare(A, HEADERS, messages_body("weather forecast for Paris")).body
    for text in ("post a slack message to the channels", "run a sql query on the postgresql tables"):
        later = engine.prepare(A, HEADERS, messages_body(text)).body
        assert tool_texts(later) == tool_texts(first)


def test_a_model_without_tool_search_gets_classic_deferral(engine):
    prepared = engine.prepare(A, HEADERS, messages_body("weather", model="claude-3-5-sonnet-20241022"))
    assert prepared.context.mode.name != "native" and prepared.context.record.deferral == "classic"
    assert not any('"defer_loading"' in t for t in tool_texts(prepared.body))


def test_native_off_by_config(tmp_path):
    cfg = {"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "native": {"anthropic": []}}},
           "sessions": {"dir": str(tmp_path / "s")}, "telemetry": {"enabled": False}}
    e = Engine(parse(cfg))
    try:
        assert e.prepare(A, HEADERS, messages_body("weather")).context.mode.name != "native"
    finally:
        e.close()


def test_a_tool_holding_the_clients_cache_breakpoint_is_never_deferred(engine):
    tools = [dict(t) for t in TOOLS]
    tools[-1]["cache_control"] = {"type": "ephemeral"}
    prepared = engine.prepare(A, HEADERS, messages_body("weather", tools=tools))
    assert tool_texts(prepared.body)[len(tools) - 1] == tool_texts(messages_body("x", tools=tools))[-1]


# --- Anthropic: a search -----------------------------------------------------------------------


def answer(content: list[dict], stop: str = "end_turn", mid: str = "msg_2") -> bytes:
    return json.dumps({"id": mid, "type": "message", "role": "assistant", "model": NATIVE_CLAUDE, "content": content,
                       "stop_reason": stop, "stop_sequence": None,
                       "usage": {"input_tokens": 10, "output_tokens": 2}}).encode()


async def run_search(engine, adapter=A, body: bytes | None = None, first: bytes | None = None,
                     then: bytes | None = None, path_headers: dict | None = None):
    prepared = engine.prepare(adapter, path_headers or HEADERS, body or messages_body("help me"))
    call = {"type": "tool_use", "id": "toolu_s", "name": P, "input": {"query": "select:mcp__svc0__get_invoice_0"}}
    sent: list[bytes] = []

    async def open_(b):
        sent.append(b)
        return Answer.whole(200, then or answer([{"type": "text", "text": "done"}]))

    reply = await engine.runner(prepared.context).buffered(
        Answer.whole(200, first or answer([call], "tool_use", "msg_1")), open_)
    return prepared, sent, reply


async def test_a_search_is_answered_with_tool_references_and_tools_never_change(engine):
    prepared, sent, reply = await run_search(engine)
    assert reply.status == 200 and P.encode() not in reply.body
    again = json.loads(sent[0])
    assert tool_texts(sent[0]) == tool_texts(prepared.body)
    result = again["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_s"
    # Only the references: a text repeating the definitions would be re-sent every later turn.
    assert result["content"] == [{"type": "tool_reference", "tool_name": "mcp__svc0__get_invoice_0"}]
    TypeAdapter(list[MessageParam]).validate_python(again["messages"])


def test_a_native_result_keeps_only_what_the_references_do_not_say():
    tool = parse_tool(json.dumps(TOOLS[0]))
    listed = json.dumps({"tools": [{"name": tool.name}], "more": ["mcp__svc0__x"], "message": "More tools, not loaded."})
    content = _result_content(ToolResult(ToolCall("c", P, {}), listed, loads=(tool,)))
    assert content[0]["type"] == "text" and json.loads(content[0]["text"]) == {
        "more": ["mcp__svc0__x"], "message": "More tools, not loaded."}
    assert content[1:] == [{"type": "tool_reference", "tool_name": tool.name}]
    assert _result_content(ToolResult(ToolCall("c", P, {}), "plain words", loads=(tool,)))[0]["text"] == "plain words"


async def test_bedrock_invoke_names_the_tool_search_beta_and_reads_the_model_from_the_path(engine):
    adapter = detect("POST", "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke")
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 9, "tools": TOOLS,
                       "messages": [{"role": "user", "content": "help me"}]}).encode()
    prepared, sent, _ = await run_search(engine, adapter, body)
    assert prepared.context.mode.name == "native"
    assert json.loads(prepared.body)["anthropic_beta"] == ["tool-search-tool-2025-10-19"]
    assert tool_texts(sent[0]) == tool_texts(prepared.body)


# --- the classic fallback ----------------------------------------------------------------------


async def test_a_refusal_of_the_native_fields_resends_classic_and_the_session_remembers(engine):
    prepared = engine.prepare(A, HEADERS, messages_body("help me"))
    refusal = json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                     "message": "tools.3.custom.defer_loading: Extra inputs are not permitted"}})
    sent: list[bytes] = []

    async def open_(b):
        sent.append(b)
        return Answer.whole(200, answer([{"type": "text", "text": "done"}]))

    reply = await engine.runner(prepared.context).buffered(Answer.whole(400, refusal.encode()), open_)
    assert reply.status == 200 and b"done" in reply.body
    assert len(sent) == 1 and b'"defer_loading"' not in sent[0] and P.encode() in sent[0]
    record = prepared.context.record
    assert record.deferral == "classic" and record.fallback_reason == "native_refused_400_classic_sent"
    later = engine.prepare(A, HEADERS, messages_body("and now?"))
    assert later.context.mode.name != "native" and later.context.record.deferral == "classic"


async def test_another_400_is_not_a_refusal_of_native_deferral(engine):
    prepared = engine.prepare(A, HEADERS, messages_body("help me"))
    other = json.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too big"}})
    sent: list[bytes] = []

    async def open_(b):
        sent.append(b)
        return Answer.whole(400, other.encode())

    reply = await engine.runner(prepared.context).buffered(Answer.whole(400, other.encode()), open_)
    # Nothing the rewrite changed: the client's own request would get it too, so nothing is resent.
    assert reply.status == 400 and reply.body == other.encode() and sent == []
    assert engine.prepare(A, HEADERS, messages_body("again")).context.mode.name == "native"


async def test_another_400_naming_a_deferred_tool_resends_the_clients_own(engine):
    prepared = engine.prepare(A, HEADERS, messages_body("help me"))
    deferred = next(iter(prepared.context.catalog))
    other = json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": f"Tool '{deferred}' has an invalid input_schema"}})
    sent: list[bytes] = []

    async def open_(b):
        sent.append(b)
        return Answer.whole(400, other.encode())

    reply = await engine.runner(prepared.context).buffered(Answer.whole(400, other.encode()), open_)
    assert reply.status == 400 and sent == [messages_body("help me")]  # the client's own
    assert prepared.context.record.fallback_reason == "rewrite_400_original_sent"
    assert engine.prepare(A, HEADERS, messages_body("again")).context.mode.name == "native"


# --- Responses ---------------------------------------------------------------------------------


def responses_body(text: str, model: str = "gpt-5.4", **extra: Any) -> bytes:
    return json.dumps({"model": model, "input": text, "tools": FUNCTIONS, "store": False, **extra}).encode()


def test_responses_native_tools_are_the_clients_plus_a_client_tool_search(engine):
    client = responses_body("weather forecast for Paris")
    prepared = engine.prepare(R, HEADERS, client)
    assert prepared.context.mode.name == "native" and prepared.context.phantom == "tool_search"
    sent, original = tool_texts(prepared.body), tool_texts(client)
    for mine, theirs in zip(sent, original):
        assert mine in (theirs, theirs[:-1] + ',"defer_loading":true}')
    search = json.loads(sent[-1])
    assert search["type"] == "tool_search" and search["execution"] == "client"
    TypeAdapter(ToolSearchToolParam).validate_python(search)
    later = engine.prepare(R, HEADERS, responses_body("post a slack message"))
    assert tool_texts(later.body) == sent


async def test_a_tool_search_call_is_answered_with_a_tool_search_output_and_hidden(engine):
    prepared = engine.prepare(R, HEADERS, responses_body("help me"))
    call = {"id": "tsc_1", "type": "tool_search_call", "call_id": "call_s", "execution": "client",
            "arguments": {"query": "select:mcp__svc0__get_invoice_0"}, "status": "completed"}
    final = {"id": "resp_2", "object": "response", "status": "completed", "model": "gpt-5.4", "store": False,
             "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": "done", "annotations": []}]}],
             "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}, "tools": [], "tool_choice": "auto"}
    first = {**final, "id": "resp_1", "output": [call]}
    sent: list[bytes] = []

    async def open_(b):
        sent.append(b)
        return Answer.whole(200, json.dumps(final).encode())

    reply = await engine.runner(prepared.context).buffered(Answer.whole(200, json.dumps(first).encode()), open_)
    shown = json.loads(reply.body)
    assert [i["type"] for i in shown["output"]] == ["message"]
    assert shown["tools"] == FUNCTIONS  # the client's own echo
    again = json.loads(sent[0])
    assert tool_texts(sent[0]) == tool_texts(prepared.body)
    output = again["input"][-1]
    assert output["type"] == "tool_search_output" and output["call_id"] == "call_s"
    assert output["tools"] == [next(f for f in FUNCTIONS if f["name"] == "mcp__svc0__get_invoice_0")]
    TypeAdapter(list[ResponseInputItemParam]).validate_python(again["input"])


def test_a_client_function_named_tool_search_is_never_shadowed_by_native_search(engine):
    """The name Responses' native search takes is the client's own search tool here: the request
    goes as the client made it (no native ``tool_search`` beside it, nothing deferred)."""
    tools = [*FUNCTIONS, {"type": "function", "name": "tool_search", "parameters": {"type": "object"}}]
    prepared = engine.prepare(R, HEADERS, json.dumps({"model": "gpt-5.4", "input": "help", "tools": tools}).encode())
    assert prepared.context is None or prepared.context.mode.name != "native"
    assert prepared.body is None and prepared.record.fallback_reason == "client_defers: search tool tool_search"


def test_functions_of_a_namespace_are_deferred_inside_it_and_loaded_in_their_namespace(engine):
    namespace = {"type": "namespace", "name": "mcp__crm__", "description": "CRM MCP server",
                 "tools": [{"type": "function", "name": f"lookup_{i}", "description": f"Look up CRM record kind {i}.",
                            "parameters": {"type": "object", "properties": {}}} for i in range(12)]}
    tools = [*FUNCTIONS, namespace]
    prepared = engine.prepare(R, HEADERS, json.dumps({"model": "gpt-5.4", "input": "hello", "tools": tools}).encode())
    assert prepared.context.mode.name == "native"
    sent = json.loads(prepared.body)["tools"]
    assert len(sent) == len(tools) + 1 and sent[len(FUNCTIONS)]["name"] == "mcp__crm__"
    inner = sent[len(FUNCTIONS)]["tools"]
    assert [f["name"] for f in inner] == [f["name"] for f in namespace["tools"]]
    assert all(f.get("defer_loading") is True for f in inner)
    assert "mcp__crm__.lookup_3" in prepared.context.catalog
    TypeAdapter(list[ResponseInputItemParam]).validate_python([json.loads(R.append_round(
        prepared.context.body, {"output": []},
        [ToolResult(ToolCall("call_1", "tool_search", {}), "", loads=(prepared.context.catalog["mcp__crm__.lookup_3"],))],
        []))["input"][-1]])


def test_native_config_takes_globs_per_api_and_empty_lists_turn_it_off():
    from tooldisco.config import ConfigError

    native = parse({"pipes": {"tool_discovery": {"native": {"responses": [], "anthropic": ["claude-test*"]}}}}
                   ).tool_discovery.native
    assert native.responses == () and native.applies("anthropic", "claude-test-1")
    assert not native.applies("anthropic", NATIVE_CLAUDE) and native.applies("bedrock", f"us.anthropic.{NATIVE_CLAUDE}")
    with pytest.raises(ConfigError, match="native.anthropic"):
        parse({"pipes": {"tool_discovery": {"native": {"anthropic": [3]}}}})
    with pytest.raises(ConfigError, match="native.gemini: unknown key"):
        parse({"pipes": {"tool_discovery": {"native": {"gemini": ["x"]}}}})


@pytest.mark.parametrize("api", ["anthropic", "responses"])
def test_the_last_reforward_drops_only_the_native_search_tool(engine, api):
    """At the loop limit the search tool goes; the deferred tools stay in ``tools[]`` as they
    were (the references in the history name them)."""
    if api == "anthropic":
        adapter, client = A, messages_body("weather forecast for Paris")
    else:
        adapter = R
        client = json.dumps({"model": "gpt-5.4", "input": "weather forecast for Paris", "tools": FUNCTIONS}).encode()
    prepared = engine.prepare(adapter, HEADERS, client)
    ctx = prepared.context
    assert ctx.mode.name == "native"
    loop = engine.runner(ctx).loop
    before = tool_texts(prepared.body)
    after = tool_texts(loop.without_search(prepared.body.decode()))
    assert len(after) == len(before) - 1 and after == before[:-1]  # the search tool was last
    assert any('"defer_loading"' in t for t in after)
