"""The phantom search tool's front end: untrusted arguments in, readable results out."""

from __future__ import annotations

import json
from typing import Any, Sequence

import pytest

from tooldisco.core.types import Tool
from tooldisco.search.factory import BACKENDS, make_searcher
from tooldisco.search.base import Ranking
from tooldisco.search.brief import first_sentence
from tooldisco.search.phantom_query import run_query
from tooldisco.search import hybrid_search


def tool(name: str, description: str, *params: str) -> Tool:
    raw = json.dumps({"name": name, "description": description,
                      "input_schema": {"type": "object", "properties": {p: {"type": "string"} for p in params}}})
    return Tool(name=name, raw=raw, description=description, params=tuple((p, "") for p in params))


CATALOG = (
    tool("get_weather", "Get the current weather for a city. Uses a free API.\nNo key needed.", "city"),
    tool("weather_forecast", "Get the weather forecast for the next 7 days.", "city", "days"),
    tool("send_message", "Send a message to a Slack channel.", "channel", "text"),
    tool("mcp__github__create_issue", "Create a new issue in a GitHub repository.", "repo", "title"),
    tool("mcp__github__list_pull_requests", "List open pull requests.", "repo"),
    tool("read_file", "Read a file.", "path"),
)


@pytest.fixture(autouse=True)
def no_embedding_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the front end: hybrid runs as BM25 here, without a model."""
    monkeypatch.setattr(hybrid_search, "load_embedder", lambda cache_dir=None: None)


def query(arguments: Any, backend: str = "bm25", limit: int = 5, always_keep: Sequence[str] = ()):
    return run_query(arguments, CATALOG, make_searcher(backend), limit, always_keep)


def test_search_injects_matches_and_describes_them_briefly() -> None:
    outcome = query({"query": "current weather"}, limit=5)
    assert not outcome.is_error
    assert outcome.matched[:2] == ["get_weather", "weather_forecast"]
    assert outcome.kind == "search" and outcome.backend == "bm25" and outcome.query == "current weather"
    result = json.loads(outcome.text)
    assert result["tools"][0] == {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": ["city"],
    }
    assert "now available" in result["message"] and "call them directly" in result["message"]


def test_limit_caps_the_search_hits() -> None:
    assert query({"query": "current weather"}, limit=1).matched == ["get_weather"]
    assert len(query({"query": "weather"}, limit=1).matched) == 1


def test_regex_fallback_is_reported_for_telemetry() -> None:
    outcome = query({"query": "wether("}, backend="regex")
    assert outcome.matched[0] == "get_weather"
    assert outcome.backend == "fuzzy" and outcome.fallback.startswith("invalid regex")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ("weather", "JSON object"),
        (["weather"], "JSON object"),
        (None, "JSON object"),
        ({}, "'query' argument is required"),
        ({"query": None}, "'query' argument is required"),
        ({"query": 42}, "'query' argument is required"),
        ({"query": ["weather"]}, "'query' argument is required"),
        ({"query": ""}, "query is empty"),
        ({"query": "   "}, "query is empty"),
        ({"query": "(a+)+" * 2000}, "10000 characters"),
    ],
)
def test_bad_arguments_are_readable_errors(backend: str, arguments: Any, fragment: str) -> None:
    outcome = query(arguments, backend=backend)
    assert outcome.is_error and outcome.matched == []
    assert fragment in json.loads(outcome.text)["error"]


def test_select_loads_named_tools_and_reports_unknown_ones() -> None:
    outcome = query({"query": "select: read_file , nope,send_message"})
    assert not outcome.is_error and outcome.kind == "select"
    assert outcome.matched == ["read_file", "send_message"]
    assert outcome.unknown == ["nope"]
    result = json.loads(outcome.text)
    assert result["unknown"] == ["nope"] and "'nope'" in result["message"]


def test_select_of_unknown_names_only_is_an_error() -> None:
    outcome = query({"query": "select:nope,nada"})
    assert outcome.is_error and outcome.matched == [] and outcome.unknown == ["nope", "nada"]
    assert "'nope'" in json.loads(outcome.text)["error"]
    assert query({"query": "select:"}).is_error


def test_listing_returns_every_name_and_injects_nothing() -> None:
    outcome = query({"query": " * "}, always_keep=["mcp__github__*"])
    assert not outcome.is_error and outcome.kind == "list" and outcome.matched == []
    result = json.loads(outcome.text)
    assert result["total"] == len(CATALOG)
    assert result["tools"] == sorted(t.name for t in CATALOG)


def test_always_keep_globs_join_the_matches() -> None:
    outcome = query({"query": "current weather"}, limit=1, always_keep=["mcp__github__*", "absent_tool", "read_file"])
    assert outcome.matched == [
        "get_weather",
        "mcp__github__create_issue",
        "mcp__github__list_pull_requests",
        "read_file",
    ]
    assert [t["name"] for t in json.loads(outcome.text)["tools"]] == outcome.matched
    selected = query({"query": "select:read_file"}, always_keep=["read_file", "send_*"])
    assert selected.matched == ["read_file", "send_message"]


def test_no_match_is_a_readable_result_with_a_hint() -> None:
    outcome = query({"query": "xyzzy plugh"}, always_keep=["read_file"])
    assert not outcome.is_error and outcome.matched == []
    result = json.loads(outcome.text)
    assert result["tools"] == [] and "No tools matched" in result["message"]
    assert "select:" in result["message"] and "'*'" in result["message"]


def test_a_failing_backend_is_an_error_result_not_an_exception() -> None:
    class Broken:
        name = "broken"

        def search(self, query: str, tools: Sequence[Tool], limit: int) -> list[str]:
            raise RuntimeError("boom")

        def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
            raise RuntimeError("boom")

    outcome = run_query({"query": "weather"}, CATALOG, Broken(), 5, ())
    assert outcome.is_error and outcome.backend == "broken"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Get weather. Then more.", "Get weather."),
        ("Line one.\nLine two. Three.", "Line one."),
        ("One sentence only.", "One sentence only."),
        ("no boundary here", "no boundary here"),
        ("  padded.  ", "padded."),
        ("", ""),
        ("x" * 300, "x" * 197 + "..."),
        ("y" * 250 + ". Short.", "y" * 197 + "..."),
    ],
)
def test_first_sentence(text: str, expected: str) -> None:
    assert first_sentence(text) == expected
    assert len(first_sentence(text)) <= 200


def test_listing_a_huge_catalog_is_capped() -> None:
    from tooldisco.search.phantom_query import MAX_LISTED

    big = [Tool(f"tool_{i:05d}", "{}", "does a thing") for i in range(MAX_LISTED + 50)]
    out = run_query({"query": "*"}, big, make_searcher("bm25"), 5)
    data = json.loads(out.text)
    assert data["total"] == MAX_LISTED + 50 and len(data["tools"]) == MAX_LISTED
    assert "search" in data["message"] and out.matched == []


def test_a_search_that_finds_nothing_offers_names_and_servers() -> None:
    result = json.loads(query({"query": "zzqx"}, backend="regex").text)
    assert result["tools"] == [] and result["suggestions"]
    assert result["servers"] == [{"server": "github", "tools": 2}] and "server's name" in result["message"]


def test_a_weak_best_hit_says_so_and_offers_servers() -> None:
    weak = json.loads(query({"query": "open a ticket for the outage in the tracker channel"}).text)
    assert weak["tools"] and weak["servers"] == [{"server": "github", "tools": 2}]
    assert "shares few of the query's words" in weak["message"]
    strong = json.loads(query({"query": "send a message to a channel"}).text)
    assert "servers" not in strong and "few of the query's words" not in strong["message"]
