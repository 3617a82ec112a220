"""A client's own tool search is recognised by what it is, and such a request goes through as made."""

from __future__ import annotations

import json

import pytest

from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.config import ToolDiscovery
from tooldisco.core.types import Tool
from tooldisco.policy.client_search import is_client_search, normalised
from tooldisco.policy.deferral import client_defers

KNOWN = ToolDiscovery.client_search_tools
QWEN_DESCRIPTION = ("Reviews function declarations for deferred tools without changing the active tool list. "
                    "Deferred tools appear by name in the deferred-tools startup reminder.")


def tool(name: str, description: str = "", params: tuple[tuple[str, str], ...] = ()) -> Tool:
    return Tool(name, json.dumps({"name": name, "description": description}), description, params)


@pytest.mark.parametrize("t", [
    tool("tool_search", QWEN_DESCRIPTION),  # Qwen Code
    tool("ToolSearch", "Fetches full schema definitions for deferred tools so they can be called."),  # Claude Code
    tool("Tool-Search"),  # a known name, however written
    tool("find_tools", "Finds tools that are not yet loaded and loads their schemas."),  # an unknown agent's
    tool("loadTools", "Load the definitions of hidden tools by name."),
    tool("discover_functions", "", (("query", "Keywords matching the lazy-loaded functions"),)),
])
def test_a_clients_own_search_is_recognised(t: Tool) -> None:
    assert is_client_search(t, KNOWN)


@pytest.mark.parametrize("t", [
    tool("web_search", "Search the web."),
    tool("search_files", "Search files for a pattern; hidden files are skipped."),
    tool("jira_search", "Search Jira issues with JQL."),
    tool("search_tools_catalog", "Search the company's hardware tools catalog for a part."),  # no deferred tools
    tool("deferred_payment", "Create a deferred payment for tools bought."),  # not named for finding tools
    tool("get_weather", "Deferred tools are listed below."),
])
def test_other_tools_are_not(t: Tool) -> None:
    assert not is_client_search(t, KNOWN)


def test_names_compare_without_case_or_separators() -> None:
    assert normalised("ToolSearch") == normalised("tool_search") == normalised("TOOL-SEARCH")


def test_the_configured_list_decides_for_names() -> None:
    t = tool("lookup", "Look something up.")
    assert not is_client_search(t, KNOWN) and is_client_search(t, ("lookup",))


def test_a_hostile_description_is_read_only_so_far() -> None:
    t = tool("find_tools", "x " * 100_000 + "deferred tools")
    assert not is_client_search(t, KNOWN)


def qwen_chat_request() -> str:
    """Qwen Code on Chat Completions: its built-ins and its own tool_search; MCP tools kept out."""
    builtins = [{"type": "function", "function": {"name": n, "description": f"{n} tool",
                                                   "parameters": {"type": "object", "properties": {}}}}
                for n in ("read_file", "write_file", "edit", "run_shell_command", "glob", "grep_search",
                          "list_directory", "web_fetch", "todo_write", "save_memory", "task", "skill",
                          "exit_plan_mode", "tool_call")]
    search = {"type": "function", "function": {"name": "tool_search", "description": QWEN_DESCRIPTION,
                                               "parameters": {"type": "object", "properties": {
                                                   "query": {"type": "string",
                                                             "description": "Query to find deferred tools."}}}}}
    return json.dumps({"model": "qwen3-coder", "messages": [{"role": "user", "content": "list my open PRs"}],
                       "tools": builtins + [search]})


def test_a_request_with_the_clients_own_search_goes_through() -> None:
    view = OpenAIChatAdapter().parse(qwen_chat_request())
    assert client_defers(view, ToolDiscovery()) == "client_defers: search tool tool_search"


def test_a_request_without_one_is_ours_to_defer() -> None:
    body = json.loads(qwen_chat_request())
    body["tools"] = body["tools"][:-1]
    assert client_defers(OpenAIChatAdapter().parse(json.dumps(body)), ToolDiscovery()) is None
