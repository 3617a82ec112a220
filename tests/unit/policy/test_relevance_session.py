"""Relevance over whole sessions, through the engine and its session store: the forwarded
``tools[]`` is identical for identical requests, keeps its order, changes only when a turn
clearly needs a tool (appended at the end), and each tool list of a session (an agent and
its sub-agents) evolves on its own."""

import json

import pytest

from tooldisco.config import parse
from tooldisco.engine.engine import Engine
from tooldisco.apis.anthropic.adapter import AnthropicAdapter

from tests.support.catalog import anthropic_tools

RESULT = json.dumps({"rows": [{"id": i, "note": "a row of a long tool result " * 4} for i in range(120)]})


@pytest.fixture
def engine(tmp_path):
    config = parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "relevance", "max_tools": 4,
                                                 "min_tools": 3}},
                    "sessions": {"dir": str(tmp_path)}, "telemetry": {"enabled": False}})
    e = Engine(config)
    yield e
    e.close()


def body(messages, tools=None):
    return {"model": "m", "max_tokens": 50, "system": "You help.", "tools": tools or anthropic_tools(60),
            "messages": messages}


def forwarded(engine, request, session="s1"):
    """The names forwarded, and the bytes."""
    out = engine.prepare(AnthropicAdapter(), {"x-api-key": "k", "x-claude-code-session-id": session},
                         json.dumps(request).encode())
    assert out.body is not None
    return [t["name"] for t in json.loads(out.body)["tools"]], out.body


def history(*turns):
    """A conversation: each turn a user text, then a tool call with a long result, then an answer."""
    messages = []
    for i, (text, tool) in enumerate(turns):
        messages.append({"role": "user", "content": text})
        if tool:
            messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"c{i}", "name": tool,
                                                               "input": {}}]})
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{i}",
                                                          "content": RESULT}]})
        messages.append({"role": "assistant", "content": "Done."})
    return messages


def test_identical_requests_forward_identical_bodies(engine):
    first = body([{"role": "user", "content": "create a github issue for the login bug"}])
    bodies = [forwarded(engine, first)[1] for _ in range(3)]
    assert bodies[0] == bodies[1] == bodies[2]
    later = body(history(("create a github issue for the login bug", "mcp__github__create_issue"))
                 + [{"role": "user", "content": "now post a message to the slack channel"}])
    again = [forwarded(engine, later)[1] for _ in range(3)]
    assert again[0] == again[1] == again[2]
    # An earlier request sent again gets the session's list as it stands: never re-ranked back.
    assert forwarded(engine, first)[0] == forwarded(engine, later)[0]


def test_topic_drift_changes_nothing_a_new_need_is_appended(engine):
    turns = [("create a github issue for the login bug", "mcp__github__create_issue")]
    start, _ = forwarded(engine, body(history(*turns)[:1]))
    with_result, _ = forwarded(engine, body(history(*turns)[:3]))
    assert with_result == start  # the tool result changes nothing
    drift, _ = forwarded(engine, body(history(*turns) + [{"role": "user", "content": "is the invoice late again?"}]))
    assert drift == start  # one shared word behind a long conversation: not worth a break
    turns.append(("is the invoice late again?", None))
    need, _ = forwarded(engine, body(history(*turns) + [
        {"role": "user", "content": "post a message to the slack channel about it"}]))
    assert need[: len(start)] == start and "mcp__slack__post_message" in need[len(start):]


def test_the_order_never_changes_and_a_tool_the_client_stops_sending_just_drops_out(engine):
    # Topics in the reverse of the client's order: each turn's tools come earlier in the client's list.
    texts = ["create a calendar event with the attendees", "what will the weather forecast be in Oslo",
             "run a sql query listing the database tables", "post a message to the slack channel"]
    turns: list = []
    lists = []
    for text in texts:
        names, _ = forwarded(engine, body(history(*turns) + [{"role": "user", "content": text}]))
        if lists:
            assert names[: len(lists[-1])] == lists[-1] and len(names) > len(lists[-1])
        lists.append(names)
        turns.append((text, None))
    last = lists[-1]
    fewer = [t for t in anthropic_tools(60) if t["name"] != last[1]]
    names, _ = forwarded(engine, body(history(*turns[:-1]) + [{"role": "user", "content": texts[-1]}], fewer))
    assert names == [n for n in last if n != last[1]]


def test_sub_agents_each_keep_their_own_list(engine):
    main_tools = anthropic_tools(60)
    sub_tools = main_tools[:20]  # a sub-agent with fewer tools, same session id
    main1, _ = forwarded(engine, body([{"role": "user", "content": "create a github issue for the login bug"}]))
    sub1, _ = forwarded(engine, body([{"role": "user", "content": "find the weather forecast"}], sub_tools))
    sub2_request = body(history(("find the weather forecast", None))
                        + [{"role": "user", "content": "post a message to the slack channel"}], sub_tools)
    sub2, _ = forwarded(engine, sub2_request)
    assert sub2[: len(sub1)] == sub1 and "mcp__slack__post_message" in sub2[len(sub1):]
    main_again, _ = forwarded(engine, body([{"role": "user", "content": "create a github issue for the login bug"}]))
    assert main_again == main1  # the sub-agent's additions do not reach the main agent's list
    assert forwarded(engine, sub2_request)[0] == sub2
