import pytest

from tooldisco.config import parse
from tooldisco.core.types import RequestView, Tool
from tooldisco.policy import deferral
from tooldisco.policy.relevance import MAX_LISTS, keep_count, recall, remember, scores, select, tokens

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


def test_weight_tiers():
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


def test_a_later_turn_keeps_the_order_and_appends_what_it_clearly_needs():
    c = cfg()
    first = [t.name for t in select(view(query="create a github issue"), c, keep=4).kept]
    same = select(view(query="and another github issue please"), c, keep=4, order=first)
    assert [t.name for t in same.kept] == first  # nothing new is needed: no change
    moved = [t.name for t in select(view(query="now post a message to the slack channel"), c, keep=4, order=first).kept]
    assert moved[: len(first)] == first and "mcp__slack__post_message" in moved[len(first):]
    gone = select(view(n=30, query="x"), c, keep=4, order=first + ["not_sent_anymore"])
    assert [t.name for t in gone.kept] == [n for n in first if n in {t.name for t in view(n=30).tools}]


def test_a_used_tool_is_forwarded_and_its_result_does_not_reshuffle_the_turn():
    c = cfg()
    first = [t.name for t in select(view(query="what will the weather be in Oslo"), c, keep=10).kept]
    used = frozenset({"mcp__postgres__run_query"})
    after = [t.name for t in select(view(query="what will the weather be in Oslo", used=used), c, keep=10,
                                    order=first, prompt_tokens=10**6).kept]
    assert after == first + ["mcp__postgres__run_query"]  # certain, whatever the cost; nothing else moves


def test_whether_a_change_pays_depends_on_the_cache_it_breaks():
    """Fair evidence (two shared words: p 0.4) pays early in a session, not behind a long conversation."""
    c = cfg()
    first = [t.name for t in select(view(query="weather"), c, keep=10).kept]
    v = view(query="any upcoming events?")
    tools = sum(len(t.raw) // 4 for t in v.tools)
    short = [t.name for t in select(v, c, keep=10, order=first, prompt_tokens=tools + 100).kept]
    long = [t.name for t in select(v, c, keep=10, order=first, prompt_tokens=tools + 200_000).kept]
    assert "mcp__calendar__list_events" in short[len(first):]
    assert long == first


def test_recall_starts_a_new_tool_list_from_the_closest_one_and_remember_is_bounded():
    lists: dict[str, list[str]] = {}
    assert recall(lists, {"a", "b"}) is None
    remember(lists, {"a", "b", "c"}, ["c", "a"])
    remember(lists, {"x", "y"}, ["y"])
    assert recall(lists, {"a", "b", "c"}) == ["c", "a"]
    assert recall(lists, {"a", "c", "z"}) == ["c", "a"]  # a sub-agent: the main list's places
    assert recall(lists, {"q"}) is None
    before = dict(lists)
    remember(lists, {"a", "b", "c"}, ["c", "a"])
    assert lists == before
    for i in range(MAX_LISTS + 3):
        remember(lists, {f"t{i}"}, [f"t{i}"])
    assert len(lists) == MAX_LISTS and recall(lists, {f"t{MAX_LISTS + 2}"}) == [f"t{MAX_LISTS + 2}"]


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
    """``scorer`` swaps the default word overlap for BM25 or hybrid ranking."""
    import json

    from tooldisco.engine.engine import Engine
    from tooldisco.apis.anthropic.adapter import AnthropicAdapter
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
