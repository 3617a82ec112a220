"""The real agent CLIs with the 125-tool MCP catalog (five stdio servers), through mitmdump.

The task needs one MCP tool (``cloud`` / ``get_secret``); the MCP server's answer carries a
marker derived from the call, which the agent must print. The fake's model searches while the
tool is not loaded — with the client's own search tool when the client defers its tools itself
(Claude Code's ``ToolSearch``, Codex's client-executed ``tool_search``, Qwen Code's ``tool_search``
function, whose finds it calls through its own ``tool_call``), else with the proxy's
``gateway_search_tools`` — then calls the tool and echoes its result. Each case runs twice:

- ``plain``: mitmdump without the addon (going direct; proves the rig);
- ``tool-search``: the addon deferring behind its search (bm25, nothing kept upfront, so the
  model must search).

Every run: the agent exits 0 with the marker, the MCP tool was called, and no upstream request
carries two search tools. A client that defers itself gets its requests through unchanged;
one that does not finds the tool with the proxy's search and never sees that tool.
``scripts/bench_agents.py`` measures tool bytes and billed input of the same runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.e2e import agents
from tests.e2e.agents import MCP_CASES, PROXY_SEARCHES, AgentBinaries, McpRun
from tests.e2e.harness import MitmDump, addon_config
from tests.e2e.mcp_server import CATALOG, tools_for
from tests.fakeprovider import DISPATCHER, SEARCH_TOOL, FakeProvider
from tests.fakeprovider.providers.openai_responses import OpenAIResponses

pytestmark = [pytest.mark.e2e, pytest.mark.agents]

MODES = ("plain", "tool-search")
CONFIG = partial(addon_config, strategy="tool-search", search={"backend": "bm25"}, max_search_results=5,
                 defer={"upfront": 0})


#: Agents whose next request gets the proxy's hidden search round restored: every one the proxy
#: defers for (Gemini CLI gives a ``functionCall`` that came without an ``id`` one of its own: the
#: proxy compares calls without ids and carries the client's onto the restored turn).
RESTORED = {"claude", "codex", "gemini", "opencode", "qwen", "openai-agents", "cline", "copilot", "pi"}


def test_catalog_has_more_than_a_hundred_tools_on_several_servers() -> None:
    assert len(CATALOG) >= 5 and sum(len(tools_for(s)) for s in CATALOG) >= 100


@pytest.fixture(scope="module", params=MODES)
def proxy(
    request: pytest.FixtureRequest, fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MitmDump]:
    mode = request.param
    config = None if mode == "plain" else CONFIG
    proxy = agents.recorded_proxy(tmp_path_factory.mktemp(f"mcp-{mode}"), fake_provider.url, config, name=mode)
    yield proxy.start()
    proxy.stop()


@pytest.mark.parametrize("name", list(MCP_CASES))
def test_agent_calls_an_mcp_tool(
    name: str, proxy: MitmDump, fake: FakeProvider, agent_bins: AgentBinaries, tmp_path: Path
) -> None:
    case = MCP_CASES[name]
    proxy.ensure_running()
    fake.prompt_cache = True  # token counts below are what a provider with prefix caching bills
    out = agents.run_mcp_case(case, proxy, fake, agent_bins, tmp_path)
    print(out.report())  # shown with -rP: per request, tools[] bytes and prompt tokens / cached
    assert not out.run.timed_out and out.run.returncode == 0, out.report()
    assert case.marker in out.run.stdout, out.report()
    called = [name for r in out.upstream for name in case.called(r)]
    assert case.target in called, out.report()
    for r in out.upstream:  # never the proxy's search beside the client's own
        assert len(agents.search_tools(r.json)) <= 1, out.report()
    # The agent's own tools and the MCP servers' are screened clean: no false alarm on real agents.
    assert agents.screened(out.sent) == {}, out.report()
    for c in out.sent:  # the client never sees the proxy's tools, offered or in its history
        for own in (SEARCH_TOOL, DISPATCHER):
            assert own not in json.dumps(c["json"]), f"client request to {c['url']} mentions {own}"
        if case.own_search is None:  # nor a native one (a Responses tool_search and its items)
            assert not agents.search_tools(c["json"]) and '"tool_search_' not in json.dumps(c["json"]), c["url"]

    if case.own_search is not None:
        _check_stays_out(out)
    elif proxy.name == "tool-search":
        _check_defers(out, fake)
        if case.mixed is not None:
            _check_mixed(out)


def _check_stays_out(out: McpRun) -> None:
    """The client searched with its own tool and every request went upstream with its own tools."""
    assert [r.json.get("tools") for r in out.upstream] == [c["json"].get("tools") for c in out.sent], out.report()
    assert not any(SEARCH_TOOL in r.text for r in out.upstream), out.report()
    called = [c["name"] for r in out.upstream if r.reply for c in r.reply["calls"]]
    assert out.case.own_search is not None and out.case.own_search.name in called, out.report()


def _check_defers(out: McpRun, fake: FakeProvider) -> None:
    """The client sent the tool in full; upstream got it deferred behind the proxy's search (classic,
    or native: ``defer_loading`` behind a tool the fake offers as ``tool_search``), the model
    searched, then the tool was loaded (in ``tools[]``, by reference, or by a tool search output)
    and called, or (call-through) called through the dispatcher after the search showed it. A
    request chained by ``previous_response_id`` continues the conversation the fake stored."""
    target = out.case.target
    assert any(target in _offered(out.case.api, c["json"]) for c in out.sent), "the client never sent the tool"
    first = next(r for r in out.upstream if set(PROXY_SEARCHES) & set(r.tool_names or []))
    assert target not in (first.tool_names or []), out.report()
    assert set(PROXY_SEARCHES) & {c["name"] for c in (first.reply or {}).get("calls", [])}, out.report()
    calling = next(r for r in out.upstream if target in r.called())
    assert calling.nth > first.nth and calling.can_call(target), out.report()
    if DISPATCHER in (first.tool_names or []):  # call-through: tools[] never changed
        assert all(r.json.get("tools") == first.json.get("tools") for r in out.upstream if r.nth >= first.nth)
    if out.case.agent in RESTORED:  # the next request continues the conversation the upstream really had
        after = out.upstream[-1]
        history = json.dumps(after.json.get("messages") or after.json.get("input") or after.json.get("contents"))
        if after.json.get("previous_response_id"):  # the history before this request's input is the API's
            history += json.dumps(_responses(fake).stored_items(after.json["previous_response_id"]))
        assert after.nth > calling.nth and (SEARCH_TOOL in history or '"tool_search_call"' in history), out.report()


def _responses(fake: FakeProvider) -> OpenAIResponses:
    return next(p for p in fake.providers if isinstance(p, OpenAIResponses))


def _check_mixed(out: McpRun) -> None:
    """The model called the tool it found and searched again in one step: the client ran the
    tool, and its next request went upstream with that step as the model made it and both
    answers, the search's first; the search was not made a third time."""
    made = [c["name"] for r in out.upstream if r.reply for c in r.reply["calls"]]
    assert made.count(SEARCH_TOOL) == 2, out.report()
    step = [SEARCH_TOOL, DISPATCHER]
    mixed = next(r for r in out.upstream if r.reply and [c["name"] for c in r.reply["calls"]] == step)
    answered = _answers(out.case.api, next(r for r in out.upstream if r.nth > mixed.nth).json, step)
    assert [name for name, _ in answered] == step, out.report()
    assert out.case.marker in answered[1][1] and "read" in answered[0][1], out.report()


def _answers(api: str, body: dict, step: list[str]) -> list[tuple[str, str]]:
    """The answers that follow the model's step calling ``step`` in ``body``'s history, in order,
    as (tool name, answer as JSON text)."""
    if api == "gemini":
        contents = body["contents"]
        i = next(i for i, c in enumerate(contents)
                 if [p["functionCall"]["name"] for p in c["parts"] if "functionCall" in p] == step)
        return [(p["functionResponse"]["name"], json.dumps(p["functionResponse"])) for p in contents[i + 1]["parts"]]
    messages = body["messages"]  # Chat: the assistant message, then one tool message per call
    i = next(i for i, m in enumerate(messages)
             if [c["function"]["name"] for c in m.get("tool_calls") or []] == step)
    names = {c["id"]: c["function"]["name"] for c in messages[i]["tool_calls"]}
    answers = []
    for m in messages[i + 1:]:
        if m.get("role") != "tool":
            break
        answers.append((names.get(m.get("tool_call_id"), "?"), json.dumps(m.get("content"))))
    return answers


def _offered(api: str, body: dict) -> list[str]:
    """Tool names a client request offers, as the model calls them (``ns.fn`` inside a namespace)."""
    names = []
    for tool in body.get("tools") or []:
        if api == "gemini":
            names += [d["name"] for d in tool.get("functionDeclarations") or []]
        elif isinstance(tool.get("function"), dict):  # Chat Completions
            names.append(tool["function"].get("name"))
        elif tool.get("type") == "namespace":
            names += [f"{tool['name']}.{t['name']}" for t in tool.get("tools") or []]
        elif "name" in tool:
            names.append(tool["name"])
    return names
