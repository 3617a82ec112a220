"""The real agent CLIs (Claude Code, Codex CLI, Gemini CLI), headless, through mitmdump.

Every agent runs the same plan against the scripted fake: call the proxy's search tool
(only offered under ``tool-search``), then the agent's own file-reading tool on a file
holding a secret word, then answer echoing the tool result. The agent must print the
secret. Each agent runs under three proxies:

- ``plain``: mitmdump without the addon (proves the rig and the agent setup);
- ``passthrough``: the addon with ``strategy: passthrough`` (must forward tools unchanged);
- ``tool-search``: the addon deferring tools behind ``gateway_search_tools`` (bm25).

A recorder script loaded before the addon keeps every request as the agent sent it, so the
tests can check that the agent never saw the phantom tool. The CLIs are installed once per
session by ``scripts/install_agents`` (skipped only when npm is missing).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import agents
from tests.e2e.agents import AgentBinaries, AgentRun
from tests.e2e.harness import ConfigSpec, MitmDump, addon_config
from tests.fakeprovider import DISPATCHER, SEARCH_TOOL, FakeProvider, RecordedRequest, Rule, call, reply, search

pytestmark = [pytest.mark.e2e, pytest.mark.agents]

SECRET = "PAPAYA-42"
PROMPT = "What is the secret word in the file secret.txt? Read the file and tell me."
MODES = ("plain", "passthrough", "tool-search")


def agent_config(strategy: str) -> ConfigSpec:
    return partial(addon_config, strategy=strategy, search={"backend": "bm25"}, max_search_results=5)


@dataclass(frozen=True)
class AgentCase:
    """How to drive one agent and which of its tools reads the file."""

    name: str
    api_paths: tuple[str, ...]  # request paths that carry the model conversation
    reader: str  # the agent's own tool the script calls to read the file
    query: str  # what the scripted model searches for
    reader_args: Callable[[Path], dict[str, Any]]
    extra_rules: tuple[Rule, ...] = ()
    defers_itself: bool = False  # sends defer_loading tools behind its own search (Claude Code)

    def script(self, secret_file: Path) -> list[Rule]:
        return [
            *self.extra_rules,
            search(self.query, times=1),
            call(self.reader, self.reader_args(secret_file)),
            reply("The file says:", echo_last_result=True),
        ]

    def command(self, bins: AgentBinaries, home: Path, env: dict[str, str]) -> list[str]:
        if self.name == "claude":
            return agents.claude_command(bins, PROMPT, agents.prepare_claude(home, env))
        if self.name == "codex":
            agents.prepare_codex(bins, home, env)
            return agents.codex_command(bins, PROMPT)
        agents.prepare_gemini(home, env)
        return agents.gemini_command(bins, PROMPT)


CASES = {
    "claude": AgentCase(
        "claude", ("/v1/messages",), "Read", "read a file from the local filesystem", lambda p: {"file_path": str(p)},
        defers_itself=True,
    ),
    "codex": AgentCase(
        "codex", ("/v1/responses",), "exec_command", "run a shell command", lambda p: {"cmd": f"cat {p.name}"}
    ),
    "gemini": AgentCase(
        "gemini",
        ("/v1beta/models/",),
        "read_file",
        "read the content of a file",
        lambda p: {"file_path": str(p)},
        # Gemini CLI first asks a small model to rate the prompt's complexity (JSON) to pick a model.
        (reply('{"complexity_reasoning": "a simple lookup", "complexity_score": 5}', contains="complexity_score"),),
    ),
}


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=MODES)
def proxy(
    request: pytest.FixtureRequest, fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MitmDump]:
    """mitmdump with the client recorder first, then (unless ``plain``) the addon."""
    mode = request.param
    config = None if mode == "plain" else agent_config("passthrough" if mode == "passthrough" else "tool-search")
    proxy = agents.recorded_proxy(tmp_path_factory.mktemp(f"agents-{mode}"), fake_provider.url, config, name=mode)
    yield proxy.start()
    proxy.stop()


# --- the test ------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", list(CASES))
def test_agent_reads_secret_through_proxy(
    agent: str, proxy: MitmDump, fake: FakeProvider, agent_bins: AgentBinaries, tmp_path: Path
) -> None:
    case = CASES[agent]
    proxy.ensure_running()
    record_path = proxy.workdir / "client_requests.jsonl"
    record_path.write_text("")
    work = tmp_path / "work"
    work.mkdir()
    secret_file = work / "secret.txt"
    secret_file.write_text(f"The secret word is {SECRET}.\n")
    fake.set_script(case.script(secret_file))
    env = proxy.agent_env(home=tmp_path / "home")
    run = agents.run_agent(agent, case.command(agent_bins, tmp_path / "home", env), env=env, cwd=work)

    upstream = [r for r in fake.api_requests() if r.path.startswith(case.api_paths)]
    sent = [c for c in agents.client_requests(record_path) if c["json"] is not None and _is_api(c, case)]
    ws = [r for r in fake.requests if r.header("upgrade")]
    run.notes.append(_summary(upstream, sent) + f"\nWebSocket upgrade attempts that reached the fake: {len(ws)}")
    print(run.report())  # shown with -rP; failures show it in the assertion message
    assert not run.timed_out and run.returncode == 0, run.report()
    assert SECRET in run.stdout, run.report()
    called = [c["arguments"]["name"] if c["name"] == DISPATCHER else c["name"]
              for r in upstream if r.reply for c in r.reply["calls"]]
    assert case.reader in called, run.report()
    for c in sent:  # the agent never sees the proxy's tools, neither offered nor in its history
        for own in (SEARCH_TOOL, DISPATCHER):
            assert own not in json.dumps(c["json"]), f"client request to {c['url']} mentions {own}"
    # The agent's own tool set is screened clean: screening raises no false alarm on real agents.
    assert agents.screened(sent) == {}, run.report()

    if proxy.name == "tool-search" and not case.defers_itself:
        _check_tool_search(case, upstream, sent, run)
    elif proxy.name == "passthrough" or case.defers_itself:
        # A client with its own tool search gets no second one: the proxy stays out of its way.
        assert [r.json.get("tools") for r in upstream] == [c["json"].get("tools") for c in sent], run.report()


def _check_tool_search(
    case: AgentCase, upstream: list[RecordedRequest], sent: list[dict[str, Any]], run: AgentRun
) -> None:
    """Upstream first got the phantom instead of the reader, then the reader's own definition back."""
    first = next(i for i, r in enumerate(upstream) if SEARCH_TOOL in (r.tool_names or []))
    assert case.reader not in (upstream[first].tool_names or []), run.report()
    reply_calls = (upstream[first].reply or {}).get("calls") or [{}]
    assert reply_calls[0].get("name") == SEARCH_TOOL, run.report()
    if DISPATCHER in (upstream[first].tool_names or []):
        _check_call_through(case, upstream[first:], sent, run)
        return
    later = [r for r in upstream[first + 1 :] if case.reader in (r.tool_names or [])]
    assert later, f"{case.reader} was never re-injected\n{run.report()}"
    original = next(d for c in sent if (d := _tool_definition(case, c["json"])) is not None)
    assert _tool_definition(case, later[0].json) == original, "re-injected definition differs from the client's"


def _check_call_through(
    case: AgentCase, upstream: list[RecordedRequest], sent: list[dict[str, Any]], run: AgentRun
) -> None:
    """Call-through (Gemini): tools[] never changed, the search result carried the reader's own
    definition, the model called it through the dispatcher, and the agent ran the real call."""
    assert all(r.json.get("tools") == upstream[0].json.get("tools") for r in upstream), run.report()
    through = [c["arguments"] for r in upstream if r.reply for c in r.reply["calls"] if c["name"] == DISPATCHER]
    assert through and through[0]["name"] == case.reader, run.report()
    original = next(d for c in sent if (d := _tool_definition(case, c["json"])) is not None)
    results = _search_results(upstream[1].json)
    shown = next(t for r in results for t in r.get("tools", []) if t["name"] == case.reader)
    assert shown["description"] == original["description"], run.report()
    assert shown["parameters"] == original.get("parametersJsonSchema", original.get("parameters")), run.report()
    ran = [p["functionCall"] for c in sent for content in c["json"]["contents"] for p in content["parts"]
           if "functionCall" in p]
    assert [f["name"] for f in ran] == [case.reader], run.report()


def _search_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The search results a Gemini request carries (functionResponse parts of the search tool)."""
    return [json.loads(p["functionResponse"]["response"]["output"]) for content in body["contents"]
            for p in content["parts"] if p.get("functionResponse", {}).get("name") == SEARCH_TOOL]


def _tool_definition(case: AgentCase, body: dict[str, Any]) -> Any:
    """The reader's definition as it appears in a request body of this agent's API."""
    if case.name == "gemini":
        decls = [d for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []]
        return next((d for d in decls if d.get("name") == case.reader), None)
    return next((t for t in body.get("tools") or [] if t.get("name") == case.reader), None)


def _is_api(recorded: dict[str, Any], case: AgentCase) -> bool:
    path = recorded["url"].split("://", 1)[-1].split("/", 1)[-1]
    return recorded["method"] == "POST" and ("/" + path).startswith(case.api_paths)


def _summary(upstream: list[RecordedRequest], sent: list[dict[str, Any]]) -> str:
    lines = [f"client sent {len(sent)} API requests; upstream got {len(upstream)}:"]
    for r in upstream:
        calls = [c["name"] for c in r.reply["calls"]] if r.reply else None
        lines.append(
            f"  #{r.index} {r.path} -> {r.status} tools={len(r.tool_names or [])} calls={calls} {(r.error or '')[:300]}"
        )
    return "\n".join(lines)
