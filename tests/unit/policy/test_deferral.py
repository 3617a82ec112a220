"""tool-search's upfront set: chosen on the session's first turn, never re-ranked, so the
forwarded ``tools[]`` changes only when a search finds tools (appended after the search tool)."""

import json

import pytest

from tooldisco.config import parse
from tooldisco.engine.engine import Engine
from tooldisco.core.types import RequestView, Tool
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.policy import deferral

from tests.support.catalog import openai_tools, tool_specs

SETTINGS = {"strategy": "tool-search", "always_keep": ["mcp__weather__get_forecast"],
            "defer": {"upfront": 3, "min_tools": 10}}


def cfg():
    return parse({"pipes": {"tool_discovery": {"enabled": True, **SETTINGS}}}).tool_discovery


def view(query, n=60, names=None):
    tools = tuple(Tool(name, f'{{"name":"{name}"}}', desc, tuple(p.items())) for name, desc, p in tool_specs(n)
                  if names is None or name in names)
    return RequestView(tools=tools, query=query)


def test_the_upfront_set_is_chosen_once_and_never_re_ranked():
    c = cfg()
    first = deferral.plan(view("create a github issue"), c, None, [], None)
    upfront = [t.name for t in first.kept]
    assert "mcp__github__create_issue" in upfront and "mcp__weather__get_forecast" in upfront
    later = deferral.plan(view("post a message to the slack channel"), c, upfront, [], None)
    assert later.kept == first.kept and later.deferred == first.deferred
    found = deferral.plan(view("post a message to the slack channel"), c, upfront, ["mcp__slack__post_message"], None)
    assert found.kept == first.kept and [t.name for t in found.expanded] == ["mcp__slack__post_message"]


def test_a_sub_agent_keeps_what_it_has_of_the_upfront_set():
    c = cfg()
    upfront = [t.name for t in deferral.plan(view("create a github issue"), c, None, [], None).kept]
    sub_names = {name for name, _, _ in tool_specs(60)[3:40]}
    sub = deferral.plan(view("what is the weather", names=sub_names), c, upfront, [], None)
    assert [t.name for t in sub.kept] == [n for n in upfront if n in sub_names]
    again = deferral.plan(view("create a github issue"), c, upfront, [], None)
    assert [t.name for t in again.kept] == upfront


@pytest.fixture
def engine(tmp_path):
    config = parse({"pipes": {"tool_discovery": {"enabled": True, **SETTINGS}},
                    "sessions": {"dir": str(tmp_path)}, "telemetry": {"enabled": False}})
    e = Engine(config)
    yield e
    e.close()


def forwarded(engine, messages, session="s1", tools=None):
    request = {"model": "gpt-5", "messages": messages, "tools": tools or openai_tools(60)}
    out = engine.prepare(OpenAIChatAdapter(), {"authorization": "Bearer k", "session_id": session},
                         json.dumps(request).encode())
    assert out.body is not None
    return json.loads(out.body)["tools"]


def test_tools_stay_byte_identical_across_topics_and_sub_agents(engine):
    """Deferral on Chat Completions (call-through): no search, no change, whatever the turns talk about."""
    messages = [{"role": "user", "content": "create a github issue for the login bug"}]
    first = forwarded(engine, messages)
    assert forwarded(engine, messages) == first
    sub = forwarded(engine, [{"role": "user", "content": "check the weather"}], tools=openai_tools(60)[5:])
    assert [t["function"]["name"] for t in sub][-2:] == ["gateway_search_tools", "gateway_call_tool"]
    for text in ("post a message to the slack channel", "run a sql query on the database", "what's the forecast?"):
        messages += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": text}]
        assert forwarded(engine, messages) == first
