"""The learner (``engine.learning``): lessons gathered in memory, merged into a real store per
tenant, read back as priors: on diskcache across a restart, and through Redis by two proxies."""

from __future__ import annotations

import json

import pytest
from tooldisco.config import LearningConfig, RedisSettings
from tooldisco.core.types import Tool
from tooldisco.engine.learning import Learner
from tooldisco.search import priors as P
from tooldisco.search.base import Catalog
from tooldisco.search.factory import make_searcher, with_priors
from tooldisco.state.disk import DiskSessionStore
from tooldisco.state.redis import RedisSessionStore

from tests.support.redis_server import redis_server  # noqa: F401 (a fixture)


def _tool(name: str, description: str) -> Tool:
    return Tool(name, json.dumps({"name": name}), description)


TOOLS = Catalog([_tool("create_incident", "Open an incident with a title and severity."),
                 _tool("send_message", "Send a chat message to a channel."),
                 _tool("get_weather", "Current weather for a city."),
                 _tool("list_incidents", "List open incidents.")])
BY_NAME = {t.name: t for t in TOOLS}
CONFIG = LearningConfig(refresh_interval=0.0)


def _teach(learner: Learner, tenant: str, query: str, target: str, times: int = 3) -> None:
    for _ in range(times):
        learner.observe(tenant, P.lesson([(query, [])], [target], BY_NAME))
    learner.flush()


def _first(learner: Learner, tenant: str, query: str) -> str:
    return with_priors(make_searcher("bm25"), learner.priors(tenant)).search(query, TOOLS, 2)[0]


def test_priors_never_cross_tenants(tmp_path) -> None:
    """Two tenants with opposite usage of the same words: each ranks its own tool first."""
    learner = Learner(CONFIG, DiskSessionStore(tmp_path / "s"))
    _teach(learner, "tenant-a", "ping the team", "send_message")
    _teach(learner, "tenant-b", "ping the team", "create_incident")
    assert _first(learner, "tenant-a", "ping the team") == "send_message"
    assert _first(learner, "tenant-b", "ping the team") == "create_incident"
    assert not learner.priors("tenant-c")


def test_priors_survive_a_restart(tmp_path) -> None:
    store = DiskSessionStore(tmp_path / "s")
    learner = Learner(CONFIG, store)
    learner.observe("t", P.lesson([("page the on-call", [])], ["create_incident"], BY_NAME))
    learner.close()  # what is pending is written on the way out
    store.close()
    again = Learner(CONFIG, DiskSessionStore(tmp_path / "s"))
    assert _first(again, "t", "page the on-call") == "create_incident"


def test_two_proxies_share_priors_through_redis(redis_server) -> None:  # noqa: F811
    settings = RedisSettings(url=redis_server.url, prefix="p:")
    one, two = Learner(CONFIG, RedisSessionStore(settings)), Learner(CONFIG, RedisSessionStore(settings))
    assert not two.priors("t")
    _teach(one, "t", "page the on-call", "create_incident")
    _teach(two, "t", "page the on-call", "create_incident")  # merged into one's, not over it
    assert _first(two, "t", "page the on-call") == "create_incident"
    entry = P.Knowledge.decode(RedisSessionStore(settings).learned("t"))
    assert entry.tools[BY_NAME["create_incident"].identity]["c"] == 6


def test_frozen_learning_ranks_but_learns_nothing(tmp_path) -> None:
    store = DiskSessionStore(tmp_path / "s")
    _teach(Learner(CONFIG, store), "t", "page the on-call", "create_incident")
    frozen = Learner(LearningConfig(learn=False, refresh_interval=0.0), store)
    before = store.learned("t")
    _teach(frozen, "t", "weather please", "get_weather")
    assert store.learned("t") == before
    assert _first(frozen, "t", "page the on-call") == "create_incident"


def test_learning_off_reads_and_writes_nothing(tmp_path) -> None:
    store = DiskSessionStore(tmp_path / "s")
    _teach(Learner(CONFIG, store), "t", "page the on-call", "create_incident")
    off = Learner(LearningConfig(enabled=False), store)
    assert off.priors("t") is None
    _teach(off, "t", "weather", "get_weather")
    assert P.Knowledge.decode(store.learned("t")).tools.keys() == {BY_NAME["create_incident"].identity}


def test_forget_wipes_one_tenant_here_and_in_the_store(tmp_path) -> None:
    store = DiskSessionStore(tmp_path / "s")
    learner = Learner(CONFIG, store)
    _teach(learner, "a", "page the on-call", "create_incident")
    _teach(learner, "b", "page the on-call", "create_incident")
    assert learner.forget("a") == 1
    assert not learner.priors("a") and learner.priors("b")
    assert store.learned("a") is None


def test_a_store_that_fails_costs_only_the_lessons(tmp_path) -> None:
    (tmp_path / "a-file").write_text("")
    broken = DiskSessionStore(tmp_path / "a-file" / "s", retry_after=60)
    learner = Learner(CONFIG, broken)
    _teach(learner, "t", "page the on-call", "create_incident")
    assert not learner.priors("t")


@pytest.mark.parametrize("pending", [10, 10_000])
def test_pending_lessons_are_bounded_per_tenant(tmp_path, pending: int) -> None:
    learner = Learner(LearningConfig(flush_interval=3600.0), DiskSessionStore(tmp_path / "s"))
    lesson = P.lesson([("page the on-call", [])], ["create_incident"], BY_NAME)
    for _ in range(pending):
        learner.observe("t", lesson)
    held = learner._pending["t"]
    assert len(held.positives) + len(held.calls) <= min(2 * pending, 4096 + 2)
