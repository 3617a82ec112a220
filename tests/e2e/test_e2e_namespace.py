"""Codex-style ``namespace`` tools through the real proxy: the functions of each MCP server's
namespace are deferred behind the search tool, a found one goes back into its namespace, and the
model calls it by its namespace, which the client (the real openai SDK) reads as Codex does."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import pytest
from openai.types.responses import NamespaceTool

from tests.e2e.harness import MitmDump, addon_config
from tests.fakeprovider import FakeProvider, call, reply, search
from tests.support.mcp_catalog import mcp_catalog, responses_tools

pytestmark = pytest.mark.e2e

SHELL = {"type": "function", "name": "shell", "description": "Run a shell command.",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
TARGET = "mcp__github__.create_issue"


@pytest.fixture(scope="module")
def tool_discovery_config() -> Any:
    return partial(addon_config, strategy="tool-search", max_search_results=3, always_keep=["shell"],
                   search={"backend": "bm25"}, telemetry="t.jsonl")


def namespaces(servers: int = 4) -> list[dict[str, Any]]:
    """One namespace per MCP server, its functions named without the server prefix, as Codex sends them."""
    out: dict[str, dict[str, Any]] = {}
    for t in responses_tools(mcp_catalog(servers)):
        _, server, name = t["name"].split("__", 2)
        ns = out.setdefault(server, {"type": "namespace", "name": f"mcp__{server}__",
                                     "description": f"Tools of the {server} MCP server.", "tools": []})
        ns["tools"].append({**t, "name": name})
    return list(out.values())


def in_namespaces(tools: list[dict[str, Any]]) -> list[str]:
    """``namespace.function`` for every function inside a namespace, each namespace checked by the SDK's type."""
    names = []
    for t in tools:
        if t.get("type") == "namespace":
            NamespaceTool.model_validate(t)
            names += [f"{t['name']}.{f['name']}" for f in t["tools"]]
    return names


@pytest.mark.parametrize("stream", [False, True])
def test_namespaced_functions_are_deferred_found_and_called(mitm: MitmDump, fake: FakeProvider,
                                                            openai_client: Any, stream: bool) -> None:
    fake.set_script([
        search("github create issue", not_offered=[TARGET]),
        call(TARGET, {"owner": "acme", "repo": "shop", "title": "Checkout fails"}),
        reply("Filed:", echo_last_result=True),
    ])
    tools = [SHELL, {"type": "web_search"}, *namespaces()]
    history: list[dict[str, Any]] = [{"role": "user", "content": f"File a GitHub issue [{uuid.uuid4().hex[:8]}]"}]
    request = {"model": "gpt-5", "input": history, "tools": tools, "store": False}
    if stream:
        with openai_client.responses.stream(**request) as s:
            res = s.get_final_response()
    else:
        res = openai_client.responses.create(**request)

    first, second = fake.api_requests("openai-responses")
    assert [r.status for r in (first, second)] == [200, 200]
    assert first.json["tools"][:2] == [SHELL, {"type": "web_search"}]
    assert in_namespaces(first.json["tools"]) == []  # every namespaced function deferred: no namespace left
    assert first.json["tools"][-1]["name"] == "gateway_search_tools"
    assert second.json["tools"][:3] == first.json["tools"]
    found = in_namespaces(second.json["tools"][3:])
    assert TARGET in found and len(found) <= 3
    github = next(t for t in second.json["tools"] if t.get("name") == "mcp__github__")
    original = next(t for t in tools if t.get("name") == "mcp__github__")
    assert {k: v for k, v in github.items() if k != "tools"} == {k: v for k, v in original.items() if k != "tools"}
    assert all(f in original["tools"] for f in github["tools"])  # definitions as the client sent them

    (fc,) = [o for o in res.output if o.type == "function_call"]  # the search is nowhere to be seen
    assert (fc.namespace, fc.name) == ("mcp__github__", "create_issue")

    history += [fc.model_dump(exclude_none=True, exclude={"id", "status"}),
                {"type": "function_call_output", "call_id": fc.call_id, "output": "issue #7 created"}]
    res2 = openai_client.responses.create(**{**request, "input": history})
    assert res2.output_text == "Filed:\nlast tool result: issue #7 created"
    third = fake.api_requests("openai-responses")[2]
    assert third.status == 200 and third.json["tools"] == second.json["tools"]  # found function stays, in place
