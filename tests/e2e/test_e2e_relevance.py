"""Relevance filtering and passthrough through a real mitmdump, with the real SDKs."""

from __future__ import annotations

import json
import time
from functools import partial

import pytest

from tests.e2e.harness import addon_config
from tests.fakeprovider import reply
from tests.support.catalog import anthropic_tools, openai_tools
from tooldisco.policy.relevance import tokens

pytestmark = pytest.mark.e2e

CONFIG = partial(addon_config, strategy="relevance", min_tools=5, max_tools=25, target_ratio=0.8,
                 always_keep=["mcp__calendar__list_events"])


@pytest.fixture(scope="module")
def tool_discovery_config():
    return CONFIG


def forwarded_tools(rec) -> list[dict]:
    return rec.json.get("tools") or []


def test_anthropic_kept_set(mitm, fake, anthropic_client):
    tools = anthropic_tools(60)
    anthropic_client.messages.create(
        model="claude-x", max_tokens=64, tools=tools,
        messages=[{"role": "user", "content": "Please create a GitHub issue about the login bug"}],
    )
    rec = fake.last_request()
    names = [t["name"] for t in forwarded_tools(rec)]
    assert len(names) == 25
    assert {"mcp__github__create_issue", "mcp__calendar__list_events"} <= set(names)
    original = [t["name"] for t in tools]
    assert names == sorted(names, key=original.index)  # the client's order
    by_name = {t["name"]: t for t in tools}
    assert all(t == by_name[t["name"]] for t in forwarded_tools(rec))  # definitions untouched
    # The forwarded body keeps each kept definition as the SDK serialized it.
    client_body = rec.text
    for t in forwarded_tools(rec):
        assert json.dumps(t, separators=(",", ":"), ensure_ascii=False)[:40] in client_body


def test_openai_kept_set(mitm, fake, openai_client):
    tools = openai_tools(60)
    openai_client.chat.completions.create(
        model="gpt-x", tools=tools, messages=[{"role": "user", "content": "what's the weather forecast in Paris?"}],
    )
    names = [t["function"]["name"] for t in forwarded_tools(fake.last_request())]
    assert len(names) == 25 and "mcp__weather__get_forecast" in names


def test_telemetry_line_without_credentials(mitm, fake, anthropic_client):
    anthropic_client.messages.create(
        model="claude-x", max_tokens=64, tools=anthropic_tools(61),
        messages=[{"role": "user", "content": "telemetry check: list slack channels"}],
    )
    path = mitm.workdir / "tool_discovery.jsonl"
    # Lines are written in the background, the earlier tests' maybe after this one: 61 tools marks it.
    (rec,) = [r for r in mitm.records(where=lambda r: r.get("total_tools") == 61) if r.get("total_tools") == 61]
    assert rec["provider"] == "anthropic" and rec["strategy"] == "relevance"
    assert rec["kept_tools"] == 25 and rec["deferred_tools"] == 36
    assert rec["tool_tokens_after"] < rec["tool_tokens_before"] and rec["processing_ms"] >= 0
    text = path.read_text() + mitm.log_text()
    assert "sk-ant-test" not in text and "sk-test" not in text


def test_topic_changes_never_reorder_and_change_only_when_needed(mitm, fake, anthropic_client):
    tools = anthropic_tools(60)
    tools = tools[15:] + tools[:15]  # the named MCP tools last, so the first turn's fill misses them
    original = [t["name"] for t in tools]
    words = {t["name"]: tokens(t["name"] + " " + t["description"]) for t in tools}
    turns = [
        "Create a GitHub issue for the crash", "Thanks, that's helpful", "Create another GitHub issue",
        "Now post a message to the Slack channel", "Thanks", "Run a SQL query on the PostgreSQL database",
        "Great", "What's the weather forecast for Berlin?", "Thanks", "Thanks, that's all",
    ]
    messages: list[dict] = []
    seen: list[list[str]] = []
    for i, text in enumerate(turns):
        messages.append({"role": "user", "content": text})
        anthropic_client.messages.create(model="claude-x", max_tokens=64, tools=tools, messages=messages,
                                         metadata={"user_id": json.dumps({"session_id": "topic-session"})})
        names = [t["name"] for t in forwarded_tools(fake.last_request())]
        if not seen:
            assert names == sorted(names, key=original.index)  # the first fill: the client's order
        else:  # what was forwarded stays where it stood; additions only after it
            assert names[:len(seen[-1])] == seen[-1], f"turn {i} reordered or dropped a tool kept earlier"
            for added in set(names) - set(seen[-1]):  # a change must be caused by this turn's words
                assert words[added] & tokens(text), (i, added)
        seen.append(names)
        messages.append({"role": "assistant", "content": "ok"})
    changes = [i for i in range(1, len(seen)) if seen[i] != seen[i - 1]]
    assert changes and set(changes) <= {2, 3, 5, 7}, changes
    assert "mcp__slack__post_message" in seen[3] and "mcp__weather__get_forecast" in seen[7]
    assert len(seen[-1]) < 60


def test_passthrough_below_min_tools_is_byte_identical(mitm, fake):
    raw = b'{"model":"m","max_tokens":5,  "tools":[{"name":"a","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"hi \\u00e9"}]}'
    with mitm.httpx_client() as client:
        r = client.post("https://api.anthropic.com/v1/messages", content=raw,
                        headers={"x-api-key": "k", "content-type": "application/json"})
    assert r.status_code == 200
    assert fake.last_request().body == raw


@pytest.mark.parametrize("raw", [
    b'{"model":"m","tools":[{"name":"a"},{"name":"a"}],"messages":[]}',  # duplicate names
    b'{"model": "m", "messages": [ oops',  # not JSON
    b'{"model":"m","tools":[{"description":"nameless"}],"messages":[{"role":"user","content":"x"}]}',
])
def test_malformed_bodies_pass_through_unchanged(mitm, fake, raw):
    mark = mitm.log_offset()
    with mitm.httpx_client() as client:
        r = client.post("https://api.anthropic.com/v1/messages", content=raw,
                        headers={"x-api-key": "k", "content-type": "application/json"})
    assert r.status_code == 400  # the upstream's own verdict reaches the client
    assert fake.last_request().body == raw
    assert "tool discovery skipped" in mitm.wait_for_log("tool discovery skipped", since=mark).group(0)


def test_other_paths_and_hosts_are_untouched(mitm, fake):
    raw = json.dumps({"model": "m", "tools": anthropic_tools(60), "messages": [{"role": "user", "content": "x"}]}).encode()
    with mitm.httpx_client() as client:
        client.post("https://api.anthropic.com/v1/messages/count_tokens", content=raw,
                    headers={"x-api-key": "k", "content-type": "application/json"})
    assert fake.last_request().body == raw


def test_streaming_still_streams(mitm, fake, anthropic_client):
    fake.stream_delay = 0.2
    fake.set_script([reply("one two three four five six seven eight")])
    t0 = time.monotonic()
    first = None
    with anthropic_client.messages.stream(
        model="claude-x", max_tokens=64, tools=anthropic_tools(60),
        messages=[{"role": "user", "content": "stream please"}],
    ) as stream:
        for _event in stream:
            if first is None:
                first = time.monotonic()
        final = stream.get_final_message()
    rec = fake.last_request()
    assert final.content[0].text.startswith("one two")
    assert len(forwarded_tools(rec)) == 25
    assert first is not None and first < rec.event_times[-1], (first - t0, rec.event_times[-1] - t0)


def test_openai_streaming_still_streams(mitm, fake, openai_client):
    fake.stream_delay = 0.2
    fake.set_script([reply("alpha beta gamma delta epsilon")])
    first = None
    parts = []
    for chunk in openai_client.chat.completions.create(
        model="gpt-x", tools=openai_tools(60), stream=True, messages=[{"role": "user", "content": "stream"}],
    ):
        first = first or time.monotonic()
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    rec = fake.last_request()
    assert "".join(parts).startswith("alpha") and first < rec.event_times[-1]
