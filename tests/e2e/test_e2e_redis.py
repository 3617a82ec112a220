"""Several proxies on one Redis, through real mitmdumps, a real redis-server and the real SDK.

A session whose turns alternate between two proxies: the tool found through the first is
loaded by the second, with no second search. Redis killed mid-session: every request still
gets its answer (fail-open, one warning); restarted: sessions are kept again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.e2e.harness import ConfigSpec, MitmDump, addon_config
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, call, reply, search
from tests.support.catalog import anthropic_tools
from tests.support.redis_server import REDIS_SERVER, RedisServer

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server not installed")]

TARGET = "mcp__weather__get_forecast"
READ_FILE = {"name": "read_file", "description": "Read a local file.",
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
TOOLS = anthropic_tools(60) + [READ_FILE]


def config(backend: str) -> ConfigSpec:
    redis = {"url": "${TOOLDISCO_TEST_REDIS_URL}", "timeout": "500ms", "retry_after": "500ms"}
    return partial(addon_config, strategy="tool-search", max_search_results=3, always_keep=["read_file"],
                   sessions={"backend": backend, "redis": redis})


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def proxies(redis_server: RedisServer, mitm_factory: Any, monkeypatch: pytest.MonkeyPatch) -> list[MitmDump]:
    """Two mitmdumps with the addon on the one Redis (its URL from the environment, as a
    deployment passes a password)."""
    if not redis_server.running:
        redis_server.start()
    monkeypatch.setenv("TOOLDISCO_TEST_REDIS_URL", redis_server.url)
    return [mitm_factory(config=config("redis")) for _ in range(2)]


def names(rec: Any) -> list[str]:
    return [t["name"] for t in rec.json.get("tools") or []]


def searches(fake: FakeProvider) -> int:
    return sum(1 for r in fake.api_requests("anthropic") if r.reply and any(
        c.get("name") == SEARCH_TOOL for c in r.reply.get("calls") or []))


def send(proxy: MitmDump, messages: list[dict[str, Any]], stream: bool) -> Any:
    """One request through ``proxy`` with the real SDK, streamed or not: the message the client gets."""
    with proxy.anthropic() as client:
        if stream:
            with client.messages.stream(model="claude-x", max_tokens=256, tools=TOOLS, messages=messages) as s:
                return s.get_final_message()
        return client.messages.create(model="claude-x", max_tokens=256, tools=TOOLS, messages=messages)


def turn_one(proxy: MitmDump, fake: FakeProvider, stream: bool) -> tuple[list[dict[str, Any]], Any]:
    """The model searches, then calls the tool it found; the client gets the call."""
    fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}),
                     reply("It will be sunny: ", echo_last_result=True)])
    messages = [{"role": "user", "content": f"What's the forecast for Paris? [{uuid.uuid4().hex[:8]}]"}]
    msg = send(proxy, messages, stream)
    uses = [b for b in msg.content if b.type == "tool_use"]
    assert [u.name for u in uses] == [TARGET] and len(fake.api_requests("anthropic")) == 2
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "sunny"}]}]
    return messages, msg


def next_turn(proxy: MitmDump, messages: list[dict[str, Any]], stream: bool = False) -> str:
    msg = send(proxy, messages, stream)
    text = "".join(b.text for b in msg.content if b.type == "text")
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                 {"role": "user", "content": "Thanks. And tomorrow?"}]
    return text


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_found_through_one_proxy_is_loaded_by_the_other(proxies: list[MitmDump], fake: FakeProvider,
                                                                 stream: bool) -> None:
    a, b = proxies
    messages, _ = turn_one(a, fake, stream)
    assert "sunny" in next_turn(b, messages, stream)  # turn 2 through the other proxy
    next_turn(a, messages, not stream)  # turn 3 back through the first
    next_turn(b, messages, stream)  # turn 4
    reqs = fake.api_requests("anthropic")
    assert len(reqs) == 5 and searches(fake) == 1  # one search, in turn 1: none later
    for later in reqs[2:]:
        assert TARGET in names(later) and names(later)[:2] == ["read_file", SEARCH_TOOL]


def test_without_a_shared_store_the_other_proxy_does_not_know(proxies: list[MitmDump], fake: FakeProvider,
                                                              mitm_factory: Any) -> None:
    """The control: a proxy on its own disk store never saw the discovery (the test above can fail)."""
    messages, _ = turn_one(proxies[0], fake, False)
    next_turn(mitm_factory(config=config("disk")), messages)
    assert TARGET not in names(fake.api_requests("anthropic")[-1])


def test_redis_killed_and_restarted_mid_session(proxies: list[MitmDump], fake: FakeProvider,
                                                redis_server: RedisServer) -> None:
    a, b = proxies
    messages, _ = turn_one(a, fake, True)
    mark = [p.log_offset() for p in proxies]
    redis_server.kill()
    for i in range(6):  # traffic flows, alternating proxies, streaming and not: no state, no failure
        assert next_turn(proxies[i % 2], messages, stream=bool(i % 3))
    for p, since in zip(proxies, mark):
        log = p.log_text(since)
        assert log.count("is unavailable") == 1, log  # one warning per outage, saying why
        assert "ConnectionError" in log and "without session state" in log
    redis_server.start()  # empty: a kill loses what it held (nothing is persisted)
    time.sleep(1.0)  # past retry_after: the next request tries Redis again (not a timing assertion)
    fake.reset()
    messages, _ = turn_one(b, fake, False)  # a new session, after retry_after: kept again
    next_turn(a, messages)
    reqs = fake.api_requests("anthropic")
    assert searches(fake) == 1 and TARGET in names(reqs[-1])
    for p, since in zip(proxies, mark):
        p.wait_for_log("Redis at redis://127.0.0.1:\\d+/0 is back", since=since)


def test_what_one_proxy_learned_ranks_the_other_proxys_search(redis_server, mitm_factory, monkeypatch, fake) -> None:
    """Learning on one Redis: the model's words lead to a tool through proxy A; a new session
    through proxy B finds it with other words like them at its first search."""
    if not redis_server.running:
        redis_server.start()
    monkeypatch.setenv("TOOLDISCO_TEST_REDIS_URL", redis_server.url)
    shared = partial(config("redis"), defer={"upfront": 0},
                     learning={"flush_interval": "100ms", "refresh_interval": "100ms"})
    a, b = mitm_factory(config=shared), mitm_factory(config=shared)
    incident = {"name": "create_incident", "description": "Open a record in the tracker with a title.",
                "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}}}

    def first_search(proxy: MitmDump, query: str, then: list) -> list[str]:
        fake.set_script([search(query, times=1), *then, reply("done")])
        start = len(fake.requests)
        body = {"model": "claude-x", "max_tokens": 64, "tools": TOOLS + [incident],
                "messages": [{"role": "user", "content": f"Wake someone [{uuid.uuid4().hex[:8]}]"}]}
        with proxy.httpx_client() as client:
            r = client.post("https://api.anthropic.com/v1/messages", json=body,
                            headers={"x-api-key": "sk-ant-shared"}, timeout=60)
        assert r.status_code == 200, r.text
        return names(fake.requests[start + 1])

    assert "create_incident" not in first_search(b, "page the on call engineer", [])
    for _ in range(3):
        first_search(a, "page whoever is on call tonight",
                     [search("create_incident", times=1, no_result_for=[]), call("create_incident", {"title": "x"})])
    deadline = time.monotonic() + 15
    while "create_incident" not in first_search(b, "page the on call engineer", []):
        assert time.monotonic() < deadline, "proxy B never ranked with what proxy A learned"
        time.sleep(0.3)
