"""Codex's ``namespace`` tools (one per MCP server) on the Responses adapter: each function is a
deferrable tool named ``namespace.name``; what is forwarded puts a namespace's functions back
in one entry; found functions go back into their namespace; calls read by that name. Shapes
checked against the openai SDK's own types."""

from __future__ import annotations

import json

from openai.types.responses import NamespaceTool, ResponseFunctionToolCall

from tooldisco.config import parse
from tooldisco.engine.engine import Engine
from tooldisco.core.types import ToolCall, ToolResult
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter

R = OpenAIResponsesAdapter()
P = "gateway_search_tools"


def fn(name: str, desc: str) -> dict:
    return {"type": "function", "name": name, "description": desc, "strict": False,
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"],
                           "additionalProperties": False}}


def namespace(server: str, names: list[str]) -> dict:
    """What Codex sends for one MCP server."""
    return {"type": "namespace", "name": f"mcp__{server}__", "description": f"Tools of the {server} MCP server.",
            "tools": [fn(n, f"{n.replace('_', ' ').capitalize()} in {server}.") for n in names]}


LINEAR = namespace("linear", ["create_ticket", "get_ticket", "list_tickets"])
GITHUB = namespace("github", ["create_issue", "list_pull_requests"])
SHELL = fn("shell", "Run a shell command.")
TOOLS = [SHELL, {"type": "web_search"}, LINEAR, GITHUB]


def body(tools=None, **extra) -> str:
    return json.dumps({"model": "gpt-5", "stream": True, "store": False, "tools": tools or TOOLS,
                       "input": [{"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": "file a linear ticket"}]}], **extra})


def forwarded_tools(text: str) -> list[dict]:
    tools = json.loads(text)["tools"]
    for t in tools:
        if t.get("type") == "namespace":
            NamespaceTool.model_validate(t)  # the SDK's own type: the shape the API takes
    return tools


def test_each_namespaced_function_is_a_tool_of_its_own():
    v = R.parse(body())
    assert v.names() == ["shell", "<web_search>", "mcp__linear__.create_ticket", "mcp__linear__.get_ticket",
                         "mcp__linear__.list_tickets", "mcp__github__.create_issue", "mcp__github__.list_pull_requests"]
    ticket = v.tools[2]
    assert ticket.pinned is None and ticket.description == "Create ticket in linear." and ticket.params
    # Its definition: its namespace around that one function, everything else of it as the client sent it.
    assert json.loads(ticket.raw) == {**LINEAR, "tools": [LINEAR["tools"][0]]}
    assert R.parse_tool(ticket.raw) == ticket  # its definition alone parses back to the same tool


def test_forwarded_namespaces_hold_the_kept_functions_and_vanish_when_none_is_kept():
    v = R.parse(body())
    by = {t.name: t.raw for t in v.tools}
    raws = [by["shell"], by["<web_search>"], by["mcp__linear__.create_ticket"], by["mcp__linear__.list_tickets"],
            R.phantom_tool(P, "Search more tools.")]
    tools = forwarded_tools(R.with_tools(body(), raws))
    assert tools[:2] == [SHELL, {"type": "web_search"}]
    assert tools[2] == {**LINEAR, "tools": [LINEAR["tools"][0], LINEAR["tools"][2]]}
    assert [t["name"] for t in tools[3:]] == [P]  # github: nothing kept, no empty namespace
    everything = forwarded_tools(R.with_tools(body(), [t.raw for t in v.tools]))
    assert everything == TOOLS


def test_found_functions_go_back_into_their_namespace_and_calls_read_by_namespaced_name():
    v = R.parse(body())
    by = {t.name: t.raw for t in v.tools}
    sent = R.with_tools(body(), [by["shell"], by["mcp__linear__.create_ticket"], R.phantom_tool(P, "Search.")])
    item = {"id": "fc_1", "type": "function_call", "call_id": "call_S", "name": P, "arguments": '{"query":"ticket"}',
            "status": "completed"}
    message = {"id": "resp_1", "object": "response", "output": [item]}
    result = ToolResult(ToolCall("call_S", P, {"query": "ticket"}), "Loaded: mcp__linear__.get_ticket")
    found = [by["mcp__linear__.get_ticket"], by["mcp__github__.create_issue"]]
    tools = forwarded_tools(R.append_round(sent, message, [result], found))
    assert tools[1] == {**LINEAR, "tools": [LINEAR["tools"][0], LINEAR["tools"][1]]}  # into its namespace
    assert tools[2]["name"] == P and tools[3] == {**GITHUB, "tools": [GITHUB["tools"][0]]}  # a new one appended
    call = {"id": "fc_2", "type": "function_call", "call_id": "call_T", "namespace": "mcp__linear__",
            "name": "get_ticket", "arguments": '{"id":"LIN-7"}', "status": "completed"}
    ResponseFunctionToolCall.model_validate(call)
    assert R.calls({"output": [call]}) == [ToolCall("call_T", "mcp__linear__.get_ticket", {"id": "LIN-7"})]
    later = json.loads(body())
    later["input"] += [{k: v for k, v in call.items() if k != "id"},
                       {"type": "function_call_output", "call_id": "call_T", "output": "LIN-7: open"}]
    assert R.parse(json.dumps(later)).used == {"mcp__linear__.get_ticket"}


def test_tool_search_defers_namespaced_functions(tmp_path):
    """Through the planner: kept and found functions stay in their namespaces, the rest is searchable."""
    config = parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "always_keep": ["shell"],
                                                 "defer": {"upfront": 1, "min_tools": 2}}},
                    "sessions": {"dir": str(tmp_path)}, "telemetry": {"enabled": False}})
    engine = Engine(config)
    try:
        out = engine.prepare(R, {"authorization": "Bearer k"}, body().encode())
    finally:
        engine.close()
    tools = forwarded_tools(out.body.decode())
    assert tools[:2] == [SHELL, {"type": "web_search"}] and tools[-1]["name"] == P
    assert tools[2] == {**LINEAR, "tools": [LINEAR["tools"][0]]}  # "file a linear ticket": the one upfront
    assert len(tools) == 4  # github's functions all deferred: its namespace is gone
    assert set(out.context.catalog) == {"mcp__linear__.get_ticket", "mcp__linear__.list_tickets",
                                        "mcp__github__.create_issue", "mcp__github__.list_pull_requests"}
