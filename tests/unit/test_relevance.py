import pytest

from tooldisco.config import parse
from tooldisco.providers.base import RequestView, Tool
from tooldisco.strategies import deferral
from tooldisco.strategies.relevance import keep_count, scores, select, tokens

from tests.support.catalog import tool_specs


def cfg(**kw):
    return parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "relevance", **kw}}}).tool_discovery


def view(n=60, query="", **kw):
    tools = tuple(Tool(name, f'{{"name":"{name}"}}', desc, tuple((k, v) for k, v in p.items())) for name, desc, p in tool_specs(n))
    return RequestView(tools=kw.pop("tools", tools), query=query, **kw)


def test_tokens_drop_stop_words_and_short_words():
    assert tokens("Please create an issue on the GitHub repo") == {"create", "issue", "github", "repo"}


@pytest.mark.parametrize("total, kw, expected", [
    (60, {}, 25), (10, {}, 8), (4, {}, 5), (100, {"max_tools": 10}, 10), (60, {"target_ratio": 0.1}, 6),
    (20, {"target_ratio": 0.0, "min_tools": 3}, 3),
])
def test_keep_count(total, kw, expected):
    assert keep_count(total, cfg(**kw)) == expected


def test_seed_weights():
    v = view(query="mcp__slack__post_message please post a message to slack", used=frozenset({"mcp__postgres__run_query"}))
    c = cfg(always_keep=["mcp__weather__*"])
    s = scores(v.tools, v, c, expanded=["mcp__calendar__list_events"])
    assert s["mcp__calendar__list_events"] >= 1000
    assert s["mcp__weather__get_forecast"] >= 100 and s["mcp__postgres__run_query"] >= 100
    assert s["mcp__slack__post_message"] >= 50 + 10 * 2
    assert s["mcp__svc0__get_invoice_0"] == 0


def test_select_keeps_relevant_pinned_and_forced_in_original_order():
    tools = list(view().tools)
    tools[40] = Tool("web_search", "{}", pinned="server")
    v = view(tools=tuple(tools), query="create a github issue", forced=frozenset({tools[50].name}))
    sel = select(v, cfg(), keep=10)
    names = [t.name for t in sel.kept]
    assert "mcp__github__create_issue" in names and "web_search" in names and tools[50].name in names
    order = [t.name for t in tools]
    assert names == sorted(names, key=order.index)
    assert len(sel.kept) + len(sel.deferred) == 60 and len(sel.kept) == 10


def test_sticky_set_only_grows_when_the_topic_needs_it():
    c = cfg()
    first = select(view(query="create a github issue"), c, keep=10)
    kept = [t.name for t in first.kept]
    same = select(view(query="and another github issue please"), c, keep=10, sticky=kept)
    assert [t.name for t in same.kept] == kept  # nothing new is relevant: no change
    moved = select(view(query="now post a message to slack"), c, keep=10, sticky=kept)
    names = [t.name for t in moved.kept]
    assert set(kept) <= set(names) and "mcp__slack__post_message" in names
    gone = select(view(n=30, query="x"), c, keep=10, sticky=kept + ["not_sent_anymore"])
    assert "not_sent_anymore" not in [t.name for t in gone.kept]


def test_sticky_set_restarts_when_it_doubles():
    c = cfg()
    everything = [t.name for t in view().tools]
    sel = select(view(query="slack"), c, keep=10, sticky=everything)
    assert len(sel.kept) == 10


def test_deferral_plan_threshold_upfront_and_expanded():
    c = parse({"pipes": {"tool_discovery": {"strategy": "tool-search", "always_keep": ["mcp__weather__*"],
                                            "defer": {"upfront": 3, "min_tools": 10, "min_tokens": 100000}}}}).tool_discovery
    small = deferral.plan(view(n=8), c, [], [], None)
    assert small.skipped == "below_threshold"
    p = deferral.plan(view(query="create a github issue"), c, [], ["mcp__calendar__create_event"], None)
    kept = [t.name for t in p.kept]
    assert {"mcp__weather__get_forecast", "mcp__weather__get_current_weather", "mcp__github__create_issue"} <= set(kept)
    assert len(kept) == 2 + 3
    assert [t.name for t in p.expanded] == ["mcp__calendar__create_event"]
    assert len(p.kept) + len(p.deferred) + len(p.expanded) == 60


def test_phantom_description_names_groups():
    d = deferral.phantom_description(view().tools, "regex", 5)
    assert "Search 60 more tools" in d and "mcp__github__ (5)" in d and "select:" in d and "regular expression" in d


@pytest.mark.parametrize("scorer", ["bm25", "hybrid"])
def test_relevance_can_rank_with_a_search_backend(tmp_path, scorer):
    """Issue 6.4: ``scorer`` swaps the seed's word overlap for BM25 or hybrid ranking."""
    import json

    from tooldisco.engine import Engine
    from tooldisco.providers.anthropic import AnthropicAdapter
    from tests.support.catalog import anthropic_tools

    config = parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "relevance", "scorer": scorer,
                                                 "max_tools": 6}},
                    "sessions": {"dir": str(tmp_path)}, "telemetry": {"enabled": False}})
    engine = Engine(config)
    body = json.dumps({"model": "m", "max_tokens": 5, "tools": anthropic_tools(60),
                       "messages": [{"role": "user", "content": "I need the forecast: will it rain in Oslo tomorrow?"}]})
    kept = [t["name"] for t in json.loads(engine.prepare(AnthropicAdapter(), {}, body.encode()).body)["tools"]]
    engine.close()
    assert len(kept) == 6 and "mcp__weather__get_forecast" in kept
