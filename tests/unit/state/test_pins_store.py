"""Pinned tool definitions in the session store (``pins``, ``pin``, ``pin_entries``, ``pin_at``), run on
both stores through the contract's ``backend``: per tenant, across a restart, atomic under threads,
a year's sliding TTL, failing open; and the bytes both stores keep, the same."""

from __future__ import annotations

import json
import threading

import pytest
import redis
from tooldisco.config import RedisSettings
from tooldisco.core.types import Tool
from tooldisco.policy import pins as P
from tooldisco.state.base import (
    PINS_TTL,
    SessionStore,
    decode_entry,
    encode_entry,
    pins_key,
)
from tooldisco.state.disk import DiskSessionStore
from tooldisco.state.redis import RedisSessionStore

from tests.support.redis_server import redis_server  # noqa: F401 (a fixture)
from tests.unit.state.test_store_contract import backend  # noqa: F401 (a fixture: both stores)


def tool(name: str, description: str = "d") -> Tool:
    return Tool(name, json.dumps({"name": name, "description": description,
                                  "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}))


def checked(tools, now, **kw):
    """``change`` as the planner writes it: ``check``'s entry, or the one given when nothing changed."""
    return lambda entry: P.check(entry, tools, now, **kw)[0] or entry


def test_pins_are_per_tenant_and_survive_a_new_store(backend):  # noqa: F811
    store = backend.open()
    assert store.pins("tenant-a") is None
    written = store.pin("tenant-a", checked([tool("send")], 1000.0, tenant="aaaaaaaaaaaa"))
    assert written["tools"]["send"]["fp"] == P.fingerprint(tool("send"))
    store.pin("tenant-b", checked([tool("read")], 1000.0, tenant="bbbbbbbbbbbb"))
    store.close()
    again = backend.open()
    assert again.pins("tenant-a") == written
    assert set(again.pins("tenant-b")["tools"]) == {"read"}
    assert again.pins("tenant-c") is None


def test_a_change_is_pending_through_the_store_and_reported_once(backend):  # noqa: F811
    store = backend.open()
    store.pin("t", checked([tool("send")], 1000.0))
    seen = []

    def change(entry):
        written, changes, _ = P.check(entry, [tool("send", "poisoned")], 1001.0)
        seen.append(changes)
        return written or entry

    store.pin("t", change)
    store.pin("t", change)
    assert [c.kind for c in seen[0]] == ["changed"] and seen[-1] == ()
    assert store.pins("t")["tools"]["send"]["pending"]["what"] == ["description"]


def test_pin_returning_what_it_was_given_writes_nothing_but_slides_the_ttl(backend):  # noqa: F811
    store = backend.open()
    store.pin("t", lambda _: {"v": 1, "tools": {}})
    key = pins_key("t")
    assert backend.remaining(key) == pytest.approx(PINS_TTL, abs=60)
    backend.advance(PINS_TTL - 100)
    assert store.pin("t", lambda entry: entry) == {"v": 1, "tools": {}}
    assert backend.remaining(key) == pytest.approx(PINS_TTL, abs=60)
    backend.advance(PINS_TTL + 1)
    assert store.pins("t") is None


def test_pin_returning_none_writes_nothing(backend):  # noqa: F811
    store = backend.open()
    assert store.pin("t", lambda entry: None) is None
    assert store.pins("t") is None and store.pin_entries() == []


def test_concurrent_pins_lose_no_tool(backend):  # noqa: F811
    """Several proxies (threads here) pinning into one tenant's entry at once lose none of it."""
    store = backend.open()
    threads, rounds = 6, 10
    start = threading.Barrier(threads)
    runs = []

    def work(i: int) -> None:
        start.wait()
        for r in range(rounds):
            def change(entry, name=f"t{i}_{r}"):
                runs.append(1)
                written = P.check(entry, [tool(name)], 1000.0)[0] or entry
                threading.Event().wait(0.0005)  # between the read and the write: invite another writer in
                return written

            assert store.pin("t", change) is not None

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert set(store.pins("t")["tools"]) == {f"t{i}_{r}" for i in range(threads) for r in range(rounds)}
    assert len(runs) > threads * rounds, "no pin ever raced: this test proved nothing"


def test_pin_entries_list_every_tenant_and_pin_at_changes_one_by_its_key(backend):  # noqa: F811
    store = backend.open()
    for tenant, display in (("a", "aaaaaaaaaaaa"), ("b", "bbbbbbbbbbbb")):
        store.pin(tenant, checked([tool("send")], 1000.0, tenant=display))
        store.pin(tenant, checked([tool("send", "v2")], 1001.0, tenant=display))
    store.update("session", lambda s: s.expand(["x"]))
    store.learn("a", lambda _: {"n": 1})
    entries = dict(store.pin_entries())
    assert set(entries) == {pins_key("a"), pins_key("b")}
    assert entries[pins_key("a")]["tenant"] == "aaaaaaaaaaaa"
    written = store.pin_at(pins_key("b"), lambda entry: P.approve(entry, None, 2000.0)[0])
    assert written["tools"]["send"]["pending"] is None
    assert store.pins("b")["tools"]["send"]["fp"] == P.fingerprint(tool("send", "v2"))
    assert store.pins("a")["tools"]["send"]["pending"] is not None
    # Only a pins key: a session's or the learned priors' stay out of reach.
    for key in ("session", "learned:x", "pins:", "pins:../x", pins_key("a") + ":rev"):
        assert store.pin_at(key, lambda entry: {"v": 1, "tools": {}}) is None
    assert store.get("session").expanded == ["x"] and store.learned("a") == {"n": 1}


def test_any_text_round_trips(backend):  # noqa: F811
    store = backend.open()
    odd = "weird\ud800 \u0000 \u2603 \U0001f600"
    store.pin("t", checked([tool(odd, odd)], 1000.0))
    rec = store.pins("t")["tools"][odd]
    assert rec["def"]["description"] == odd and rec["fp"] == P.fingerprint(tool(odd, odd))


def test_a_store_that_cannot_be_used_reads_no_pins_and_writes_none(backend):  # noqa: F811
    store = backend.broken()
    calls = []
    assert store.pins("t") is None
    assert store.pin("t", lambda entry: calls.append(entry) or {"v": 1, "tools": {}}) is None
    assert store.pin_entries() == [] and store.pin_at(pins_key("t"), lambda entry: entry) is None
    assert isinstance(store, SessionStore)


def test_both_stores_keep_the_same_bytes(tmp_path, redis_server):  # noqa: F811
    """The codec is ``state.base``'s: the disk store's value is the Redis store's, byte for byte, and
    each reads the other's."""
    entry = P.check(None, [tool("send", "Sënd \U0001f600 \ud800")], 1000.0, tenant="0123456789ab")[0]
    disk = DiskSessionStore(tmp_path / "s")
    red = RedisSessionStore(RedisSettings(url=redis_server.url, prefix="p:"))
    admin = redis.Redis.from_url(redis_server.url)
    try:
        disk.pin("t", lambda _: entry)
        red.pin("t", lambda _: entry)
        on_disk = disk._cache.get(pins_key("t"))
        in_redis = admin.get("p:" + pins_key("t"))
        assert on_disk == in_redis == encode_entry(entry)
        assert decode_entry(on_disk) == decode_entry(in_redis) == entry
        disk._cache.set(pins_key("u"), in_redis)  # Redis's value, copied to disk
        assert disk.pins("u") == entry
        admin.set("p:" + pins_key("u"), on_disk)
        assert red.pins("u") == entry
    finally:
        admin.close()
        red.close()
        disk.close()


def test_an_unreadable_stored_value_reads_as_absent(tmp_path):
    store = DiskSessionStore(tmp_path / "s")
    try:
        store._cache.set(pins_key("t"), b"\xff not json")
        assert store.pins("t") is None
        assert store.pin_entries() == [(pins_key("t"), None)]
        written = store.pin("t", checked([tool("send")], 1000.0))
        assert set(written["tools"]) == {"send"} and store.pins("t") == written
    finally:
        store.close()


def test_two_redis_stores_share_pins(redis_server):  # noqa: F811
    """Two proxies on one Redis: what one pins, the other reads, lists and approves."""
    one = RedisSessionStore(RedisSettings(url=redis_server.url))
    two = RedisSessionStore(RedisSettings(url=redis_server.url))
    try:
        one.pin("t", checked([tool("send")], 1000.0, tenant="0123456789ab"))
        one.pin("t", checked([tool("send", "v2")], 1001.0, tenant="0123456789ab"))
        assert two.pins("t") == one.pins("t")
        [(key, entry)] = two.pin_entries()
        assert key == pins_key("t") and entry["tools"]["send"]["pending"]["fp"] == P.fingerprint(tool("send", "v2"))
        two.pin_at(key, lambda e: P.approve(e, ["send"], 2000.0)[0])
        assert one.pins("t")["tools"]["send"]["fp"] == P.fingerprint(tool("send", "v2"))
        assert P.check(one.pins("t"), [tool("send", "v2")], 2001.0) == (None, (), frozenset())
    finally:
        one.close()
        two.close()


def test_a_disk_store_pin_that_keeps_losing_races_runs_under_the_lock(tmp_path, monkeypatch):
    """Past ``PIN_ATTEMPTS`` lost races a pin is written inside the transaction: never dropped."""
    from tooldisco.state import disk

    store = DiskSessionStore(tmp_path / "s")
    other = DiskSessionStore(tmp_path / "s")
    runs = []

    def change(entry):
        runs.append(1)
        if len(runs) <= disk.PIN_ATTEMPTS:  # another writer comes in between, every optimistic try
            other.pin("t", lambda e: {"v": 1, "tools": {}, "n": len(runs)})
        return {"v": 1, "tools": {}, "mine": True}

    try:
        assert store.pin("t", change) == {"v": 1, "tools": {}, "mine": True}
        assert len(runs) == disk.PIN_ATTEMPTS + 1 and store.pins("t")["mine"] is True
    finally:
        store.close()
        other.close()
