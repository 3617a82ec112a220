"""Named tools are never missed: every tool of BFCL and of a 500-tool MCP catalog, asked
for by full name, bare name, humanized name or server, comes first; select: takes bare
names; a search that finds nothing suggests names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pytest

from tooldisco.core.types import Tool
from tooldisco.search.factory import make_searcher
from tooldisco.search.phantom_query import run_query
from tooldisco.search.base import Ranking, SearcherBase
from tooldisco.search.names import MAX_NAMED, NamedFirst, name_forms, name_index
from tooldisco.search.tokens import words

from tests.support.mcp_catalog import mcp_catalog

BFCL = Path(__file__).resolve().parents[4] / "shared" / "bench" / "bfcl.json"


def tool(name: str, description: str = "", params: dict | None = None) -> Tool:
    definition = {"name": name, "description": description,
                  "parameters": {"type": "object", "properties": params or {}}}
    return Tool(name=name, raw=json.dumps(definition), description=description,
                params=tuple((p, str((s or {}).get("description", ""))) for p, s in (params or {}).items()))


def mcp_tools(style: str) -> tuple[tuple[Tool, ...], dict[str, tuple[str, str]]]:
    """The 500-tool MCP catalog as Claude Code (``mcp__s__t``) or Gemini CLI (``mcp_s_t``)
    names it, and each name's (server, bare name)."""
    tools, parts = [], {}
    for t in mcp_catalog():
        bare = t.name.removeprefix(f"mcp__{t.server}__")
        name = t.name if style == "claude" else f"mcp_{t.server}_{bare}"
        parts[name] = (t.server, bare)
        tools.append(tool(name, t.description, t.schema["properties"]))
    return tuple(tools), parts


class Nothing(SearcherBase):
    """A backend that never finds anything: whatever comes first came from the names."""

    name = "nothing"

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        return Ranking([], self.name)


def form_owners(tools: Sequence[Tool]) -> dict[tuple[str, ...], set[str]]:
    """Name form -> every tool that has it (what a query of those words names)."""
    out: dict[tuple[str, ...], set[str]] = {}
    for t in tools:
        fulls, bares, _servers = name_forms(t.name)
        for form in (*fulls, *bares):
            out.setdefault(form, set()).add(t.name)
    return out


def assert_named_first(searcher: SearcherBase, tools: Sequence[Tool], query: str, wanted: set[str]) -> None:
    names = searcher.rank(query, tools, 5).names
    assert names and names[0] in wanted and wanted <= set(names), (query, sorted(wanted), names[:8])


# --- every tool of the MCP catalog ----------------------------------------------------------


@pytest.mark.parametrize("style", ["claude", "gemini"])
@pytest.mark.parametrize("backend", ["bm25", "regex", "fuzzy", "nothing"])
def test_every_mcp_tool_by_full_bare_and_humanized_name(style: str, backend: str) -> None:
    """Every tool with BM25 and with a backend that finds nothing (so the names alone put
    them first); every fifth with the slower regex and fuzzy backends."""
    tools, parts = mcp_tools(style)
    searcher = NamedFirst(Nothing()) if backend == "nothing" else make_searcher(backend)
    step = 5 if backend in ("regex", "fuzzy") else 1
    for t in tools[::step]:
        assert_named_first(searcher, tools, t.name, {t.name})
    bares = sorted({bare for _server, bare in parts.values()})
    assert len(bares) < len(tools)  # some bare names are shared: they name every owner
    owners = form_owners(tools)
    for bare in bares[::step]:
        wanted = owners[tuple(words(bare))]
        assert wanted and len(wanted) <= MAX_NAMED
        assert_named_first(searcher, tools, bare, wanted)
        assert_named_first(searcher, tools, bare.replace("_", " "), wanted)


@pytest.mark.parametrize("style", ["claude", "gemini"])
def test_every_mcp_server_lists_all_its_tools(style: str) -> None:
    tools, parts = mcp_tools(style)
    searcher = NamedFirst(Nothing())
    for server in {s for s, _ in parts.values()}:
        mine = {name for name, (s, _) in parts.items() if s == server}
        for query in (server, server.replace("_", " "), f"list all {server} tools"):
            ranking = searcher.rank(query, tools, 5)
            assert ranking.group is not None and set(ranking.names) == mine, query


@pytest.mark.skipif(not BFCL.is_file(), reason=f"{BFCL} is not there")
def test_every_bfcl_tool_by_full_bare_and_humanized_name() -> None:
    data = json.loads(BFCL.read_text())
    tools = tuple(tool(d["name"], d.get("description") or "", (d.get("parameters") or {}).get("properties")) for d in data["tools"])
    searcher = make_searcher("bm25")
    owners = form_owners(tools)
    checked = 0
    for t in tools:
        assert_named_first(searcher, tools, t.name, {t.name})
        _fulls, bares, _servers = name_forms(t.name)
        for form in (bares or [tuple(words(t.name))]):
            wanted = owners[form]
            if len(wanted) <= MAX_NAMED:
                assert_named_first(searcher, tools, " ".join(form), wanted)
                checked += 1
    assert checked > len(tools) * 0.9


# --- how names are read -------------------------------------------------------------------


def test_name_forms() -> None:
    assert name_forms("mcp__github__create_issue") == (
        [("mcp", "github", "create", "issue"), ("github", "create", "issue")], [("create", "issue")], [("github",)])
    fulls, bares, servers = name_forms("mcp_google_calendar_list_events")
    assert ("list", "events") in bares and ("calendar", "list", "events") in bares and ("events",) not in bares
    assert ("google", "calendar") in servers
    assert name_forms("mcp_github_search")[1] == [("search",)]  # a one-word server leaves a one-word tool
    assert name_forms("math.factorial")[1:] == ([("factorial",)], [("math",)])
    assert name_forms("github/create_issue")[1] == [("create", "issue")]
    assert name_forms("getMonarchOfYear") == ([("get", "monarch", "of", "year")], [], [])


def test_identifiers_name_tools_anywhere_plain_words_only_as_the_whole_query() -> None:
    tools = (tool("future_value", "Future value of an investment."), tool("calculate_interest", "Interest."),
             tool("mcp__codex__ask_codex", "Ask Codex."), tool("search_graph", "Search the code graph."))
    index = name_index(tools)
    assert set(index.match("Please use `search_graph` then ask_codex.").tiers) == {2, 3}
    assert set(index.match("search graph").tiers) == {3}
    assert set(index.match("the search graph tool").tiers) == {3}
    assert index.match("Calculate the future value of my savings").tiers == {}  # prose, not a request by name
    assert index.match("future value").tiers == {0: 1}
    assert index.match("mcp__codex__ask_codex").tiers == {2: 0}  # as written beats every form


def test_exact_spelling_wins_over_another_spelling_of_the_same_words() -> None:
    tools = (tool("getWeather", "Weather."), tool("get_weather", "Weather."), tool("weather.get_weather", "W."))
    searcher = NamedFirst(Nothing())
    assert searcher.rank("get_weather", tools, 3).names == ["get_weather", "getWeather", "weather.get_weather"]
    assert searcher.rank("getWeather", tools, 3).names[0] == "getWeather"


def test_a_phrase_many_tools_share_is_no_name() -> None:
    tools = tuple(tool(f"mcp__s{i}__get_status", "Status.") for i in range(MAX_NAMED + 1))
    assert name_index(tools).match("get_status").tiers == {}
    assert len(name_index(tools[:MAX_NAMED]).match("get_status").tiers) == MAX_NAMED


# --- what the model reads -----------------------------------------------------------------


def test_server_query_loads_the_limit_and_lists_the_rest() -> None:
    tools, parts = mcp_tools("claude")
    outcome = run_query({"query": "github"}, tools, make_searcher("bm25"), 5)
    github = {name for name, (s, _) in parts.items() if s == "github"}
    result = json.loads(outcome.text)
    assert len(outcome.matched) == 5 and set(outcome.matched) <= github
    assert set(result["more"]) | set(outcome.matched) == github and "select:" in result["message"]
    assert all(set(t) == {"name", "description", "parameters"} for t in result["tools"])
    assert outcome.text == json.dumps(result, ensure_ascii=False, separators=(",", ":"))  # re-sent every turn


def test_every_named_tool_is_loaded_even_past_the_limit_up_to_max_named() -> None:
    tools, _ = mcp_tools("claude")
    names = [t.name for t in tools[:7]]
    outcome = run_query({"query": " ".join(names)}, tools, make_searcher("bm25"), 5)
    assert set(outcome.matched) == set(names)
    many = [t.name for t in tools[: MAX_NAMED + 5]]
    outcome = run_query({"query": " ".join(many)}, tools, make_searcher("bm25"), 5)
    result = json.loads(outcome.text)
    assert len(outcome.matched) == MAX_NAMED and set(outcome.matched) | set(result["more"]) == set(many)


def test_select_takes_unambiguous_bare_names_and_explains_ambiguous_ones() -> None:
    tools, _ = mcp_tools("claude")
    outcome = run_query({"query": "select:create_pull_request,create_issue,nope"}, tools, make_searcher("bm25"), 5)
    assert outcome.matched == ["mcp__github__create_pull_request"]
    assert outcome.unknown == ["create_issue", "nope"]
    message = json.loads(outcome.text)["message"]
    assert "'create_issue' is the name of 4 tools" in message and "mcp__jira__create_issue" in message
    assert "No tool is named 'nope'" in message
    gemini, _ = mcp_tools("gemini")
    assert run_query({"query": "select:list_calendars"}, gemini, make_searcher("bm25"), 5).matched == [
        "mcp_google_calendar_list_calendars"]


def test_nothing_found_suggests_the_nearest_names() -> None:
    tools, _ = mcp_tools("claude")
    outcome = run_query({"query": "zzqx"}, tools, NamedFirst(Nothing()), 5)
    result = json.loads(outcome.text)
    assert outcome.matched == [] and not outcome.is_error
    assert len(result["suggestions"]) == 5 and set(result["suggestions"]) <= {t.name for t in tools}
    typo = json.loads(run_query({"query": "mcp__githb__create_isue"}, tools, NamedFirst(Nothing()), 5).text)
    assert typo["suggestions"][0] == "mcp__github__create_issue"


def test_a_pattern_too_costly_to_run_still_finds_the_tools_it_names() -> None:
    from tooldisco.search.base import QueryError
    from tooldisco.search.regex_search import RegexSearcher

    tools = (tool("search_graph", "Search the code graph."), tool("ask_codex", "Ask Codex."))
    starved = NamedFirst(RegexSearcher(time_budget=0.0))  # every regex run is over budget
    ranking = starved.rank("search_graph", tools, 5)
    assert ranking.names == ["search_graph"] and ranking.fallback and "names only" in ranking.fallback
    with pytest.raises(QueryError):
        starved.rank("graph", tools, 5)  # names nothing: the model reads the error
