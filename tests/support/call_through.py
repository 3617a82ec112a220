"""Helpers ``tests/unit/policy/test_call_through.py`` and other unit tests share."""

from __future__ import annotations

import json
from typing import Any
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.search.base import Catalog
from tooldisco.policy.call_through import Dispatch
from tests.support.catalog import openai_tools, tool_specs


P = "gateway_search_tools"


D = "gateway_call_tool"


CHAT = OpenAIChatAdapter()


GEMINI = GeminiAdapter()


FORECAST = "mcp__weather__get_forecast"


RUN_QUERY = "mcp__postgres__run_query"


def chat_catalog() -> Catalog:
    """The deferred tools: the test catalog, plus a second ``create_issue`` (a bare name two tools share)."""
    raws = [json.dumps(t) for t in openai_tools(20)]
    raws.append(json.dumps({"type": "function", "function": {"name": "mcp__gitlab__create_issue", "parameters": {}}}))
    return Catalog(CHAT.parse_tool(raw) for raw in raws)


def gemini_declarations(n: int) -> list[dict[str, Any]]:
    return [{"name": name, "description": desc,
             "parameters": {"type": "OBJECT", "properties": {k: {"type": "STRING", "description": v}
                                                             for k, v in params.items()}}}
            for name, desc, params in tool_specs(n)]


def gemini_catalog() -> Catalog:
    return Catalog(GEMINI.parse_tool(json.dumps(d)) for d in gemini_declarations(20))


DISPATCH = Dispatch(D, P, chat_catalog(), ["read_file"])


G_DISPATCH = Dispatch(D, P, gemini_catalog(), ["read_file"])


def dispatcher_args(name: str, arguments: dict[str, Any]) -> str:
    """A dispatcher call's arguments as a model writes them in compact JSON."""
    return json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"), ensure_ascii=False)
