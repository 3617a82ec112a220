"""Each deferral mode answers the questions the loop, runner and searches ask of it."""

from __future__ import annotations

from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.bedrock.adapter import ConverseAdapter, InvokeAdapter
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter
from tooldisco.core.types import RequestView, Target, Tool, ToolCall, ToolResult
from tooldisco.policy.modes import CallThroughMode, ClassicMode, NativeMode, NoLoopMode
from tests.support.call_through import CHAT, D, DISPATCH, GEMINI, P

A = AnthropicAdapter()
SLACK = Tool(name="mcp__slack__post", description="", raw='{"name":"mcp__slack__post"}')


def found() -> tuple[list[ToolResult], list[list[Tool]]]:
    return [ToolResult(ToolCall("c1", P, {"query": "slack"}), "found")], [[SLACK]]


def test_classic_appends_found_tools_and_answers_only_its_search() -> None:
    mode = ClassicMode(A, P)
    results, appended = mode.loads_found(*found())
    assert appended == [SLACK.raw] and results[0].loads == ()
    assert mode.answers(ToolCall("c1", P, {})) and not mode.answers(ToolCall("c2", D, {}))
    assert mode.loads_tools and mode.fallback is None and mode.name == "classic"


def test_native_loads_found_tools_inline_and_falls_back() -> None:
    mode = NativeMode(A, "tool_search", "claude-x", fallback=lambda: "classic flow")
    results, appended = mode.loads_found(*found())
    assert appended == [] and results[0].loads == (SLACK,)
    assert mode.fallback is not None and mode.fallback() == "classic flow" and mode.refusal_key == "claude-x"


def test_no_loop_answers_nothing() -> None:
    mode = NoLoopMode(A)
    assert mode.search == "" and mode.name == "" and not mode.answers(ToolCall("c1", "", {}))


def test_call_through_names_found_tools_and_resolves_its_dispatcher() -> None:
    mode = CallThroughMode(CHAT, CHAT, DISPATCH)
    results, appended = mode.loads_found(*found())
    assert appended == [] and results[0].loads == () and not mode.loads_tools
    assert mode.search == P and mode.dispatcher == D and mode.answers(ToolCall("c2", D, {}))
    call = ToolCall("c2", D, {"name": "read_file", "arguments": {"path": "a"}})
    assert mode.targets([call, ToolCall("c3", "other", {})]) == {"c2": Target("read_file", {"path": "a"})}


def test_adapters_hand_out_the_sides_they_have() -> None:
    """The planner asks for a side instead of downcasting: present exactly where the API offers it."""
    for adapter in (A, OpenAIResponsesAdapter(), InvokeAdapter(False, "anthropic.claude-x")):
        side = adapter.native_deferral()
        assert side is adapter and adapter.call_through() is None
    assert InvokeAdapter(False, "m").native_model(RequestView(tools=(), model="body")) == "m"
    for adapter in (CHAT, GEMINI):
        assert adapter.call_through() is adapter and adapter.native_deferral() is None
    converse = ConverseAdapter()
    assert converse.native_deferral() is None and converse.call_through() is None
