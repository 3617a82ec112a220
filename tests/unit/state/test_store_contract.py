"""The ``SessionStore`` protocol's contract, run on both implementations: diskcache and a real
redis-server (``backend``). What only one store has is in state/test_disk.py,
state/test_disk_failures.py and state/test_redis.py."""

import copy
import threading
from dataclasses import fields
from pathlib import Path

import pytest
import redis
from tooldisco.config import RedisSettings, parse
from tooldisco.core.tenants import tenant_of
from tooldisco.state.base import LEARNED_TTL, SessionState, SessionStore, learned_key, session_key
from tooldisco.state.disk import DiskSessionStore
from tooldisco.state.factory import open_store
from tooldisco.state.redis import RedisSessionStore

from tests.support.redis_server import redis_server  # noqa: F401 (a fixture)
from tests.support.stores import fake_clock, hammer


class DiskBackend:
    """Stores on one directory; time is ``fake_clock``'s, which diskcache's expiry follows."""

    def __init__(self, root: Path, now: list[float]):
        self.root, self.now, self.opened = root, now, []

    def open(self, ttl: float = 3600.0) -> DiskSessionStore:
        self.opened.append(DiskSessionStore(self.root, ttl=ttl))
        return self.opened[-1]

    def raw(self, key: str):
        return self.opened[-1]._cache.get(key)

    def remaining(self, key: str) -> float | None:
        """Seconds ``key`` has left (None: gone)."""
        value, expire = self.opened[-1]._cache.get(key, expire_time=True)
        assert value is None or expire is not None, f"{key} never expires"
        return None if value is None else expire - self.now[0]

    def advance(self, seconds: float) -> None:
        self.now[0] += seconds

    def broken(self) -> DiskSessionStore:
        """A store that cannot be opened: its directory would be inside a regular file."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        (self.root.parent / "a-file").write_text("")
        self.opened.append(DiskSessionStore(self.root.parent / "a-file" / "sessions", retry_after=60))
        return self.opened[-1]


class RedisBackend:
    """Stores on one redis-server under a prefix. Redis expires keys on its own clock, so
    ``advance`` moves the store's clock and takes ``seconds`` off every key's TTL (a key
    without one fails the test: everything a store writes must expire)."""

    PREFIX = "p:"

    def __init__(self, url: str, now: list[float]):
        self.url, self.now, self.opened = url, now, []
        self.admin = redis.Redis.from_url(url)

    def open(self, ttl: float = 3600.0) -> RedisSessionStore:
        self.opened.append(RedisSessionStore(RedisSettings(url=self.url, prefix=self.PREFIX), ttl=ttl))
        return self.opened[-1]

    def raw(self, key: str):
        return self.admin.get(self.PREFIX + key)

    def remaining(self, key: str) -> float | None:
        left = self.admin.pttl(self.PREFIX + key)
        assert left != -1, f"{key} never expires"
        return None if left == -2 else left / 1000

    def advance(self, seconds: float) -> None:
        self.now[0] += seconds
        for key in self.admin.scan_iter(match=self.PREFIX + "*"):
            left = self.admin.pttl(key)
            assert left != -1, f"{key!r} never expires"
            if left - seconds * 1000 <= 0:
                self.admin.delete(key)
            elif left > 0:
                self.admin.pexpire(key, int(left - seconds * 1000))

    def broken(self) -> RedisSessionStore:
        """A store whose Redis cannot be reached (nothing listens on port 1)."""
        self.opened.append(RedisSessionStore(RedisSettings(url="redis://127.0.0.1:1/0", timeout=0.2, retry_after=60)))
        return self.opened[-1]

    def close(self) -> None:
        self.admin.close()


@pytest.fixture(params=["disk", "redis"])
def backend(request, tmp_path, monkeypatch):
    """Where the stores of one test live (a directory, a Redis) and the clock they follow:
    ``open(ttl=...)`` a store there (anew at each call), ``advance`` the clock, a key's
    ``remaining`` life, its ``raw`` stored value."""
    now = fake_clock(monkeypatch)
    if request.param == "disk":
        place = DiskBackend(tmp_path / "sessions", now)
    else:
        place = RedisBackend(request.getfixturevalue("redis_server").url, now)
    yield place
    for store in place.opened:
        store.close()
    if isinstance(place, RedisBackend):
        place.close()


# --- tenants, restarts, updates ----------------------------------------------------------------


def test_session_keys_bind_the_tenant_and_the_client_session():
    k1 = session_key(tenant_of({"x-api-key": "k1"}, ""), None, "hi")
    k2 = session_key(tenant_of({"x-api-key": "k2"}, ""), None, "hi")
    assert k1 != k2
    assert session_key("t", "sid", "hi") != session_key("t", None, "hi")
    assert session_key("t", "sid", "hi") == session_key("t", "sid", "other first message")


def test_two_tenants_same_first_message_do_not_share(backend):
    store = backend.open()
    k1 = session_key(tenant_of({"x-api-key": "k1"}, ""), None, "hi")
    k2 = session_key(tenant_of({"x-api-key": "k2"}, ""), None, "hi")
    store.update(k1, lambda s: s.expand(["a"]))
    assert store.get(k2).expanded == [] and store.get(k1).expanded == ["a"]


def test_state_survives_a_new_store(backend):
    s1 = backend.open()
    s1.update("k", lambda s: (s.expand(["x", "y", "x"]), setattr(s, "upfront", ["u"])))
    s1.close()
    s2 = backend.open()
    st = s2.get("k")
    assert st.expanded == ["x", "y"] and st.upfront == ["u"]


def test_update_returns_the_change_result_and_an_unchanged_new_session_is_not_written(backend):
    store = backend.open()
    assert store.update("k", lambda s: len(s.expanded)) == 0
    assert len(store) == 0


def test_every_field_of_the_state_is_kept(backend):
    """A store keeps all that ``SessionState`` holds (through ``_entry``/``_state``)."""
    store = backend.open()
    want = SessionState(expanded=["b"], upfront=["u"], classic=["m"], forwarded={"l": ["a"]})
    blank = SessionState()
    unset = [f.name for f in fields(SessionState) if getattr(want, f.name) == getattr(blank, f.name)]
    assert not unset, f"SessionState has new fields: give them a value here ({unset})"
    store.update("k", lambda s: vars(s).update(copy.deepcopy(vars(want))))
    assert store.get("k") == want


def test_any_text_round_trips(backend):
    """Model input is untrusted: a name parsed from JSON may hold a lone surrogate (sent as
    ``\\ud800``)."""
    store = backend.open()
    odd = "weird\ud800 \u0000 \u2603 \U0001f600"
    store.update("k", lambda s: (s.forwarded.update({odd: [odd]}), s.expand(["\udfff"])))
    st = store.get("k")
    assert st.expanded == ["\udfff"] and st.forwarded == {odd: [odd]}


# --- expiry: a sliding TTL ---------------------------------------------------------------------


def test_a_session_and_its_links_expire_ttl_after_the_last_update(backend):
    store = backend.open(ttl=60)
    store.update("k", lambda s: s.expand(["a"]))
    store.link("t", "resp", "k", [])
    store.keep_rounds("t", "k", "d", ["r"])
    backend.advance(59)
    assert store.get("k").expanded == ["a"] and store.linked("t", "resp")  # within the TTL ...
    assert store.rounds("t", "k", "d") == ["r"]  # ... and kept rounds, read, have theirs extended
    backend.advance(2)
    assert store.get("k") == SessionState()  # a read did not extend it: it reads as a new session
    assert store.linked("t", "resp") is None
    assert store.rounds("t", "k", "d") == ["r"]


def test_an_unchanged_update_extends_the_ttl(backend):
    store = backend.open(ttl=60)
    store.update("k", lambda s: s.expand(["a"]))
    for _ in range(5):
        backend.advance(50)
        store.update("k", lambda s: s.expand(["a"]))
    assert store.get("k").expanded == ["a"]
    assert backend.remaining("k") == pytest.approx(60, abs=5)


# --- one transaction, merged: concurrent flows lose nothing ------------------------------------


def test_concurrent_updates_lose_no_expanded_name(backend):
    store = backend.open()
    hammer(store, 8, 15, lambda i, r: lambda s: s.expand([f"t{i}_{r}"]))
    assert sorted(store.get("k").expanded) == sorted(f"t{i}_{r}" for i in range(8) for r in range(15))


# --- links and rounds, per tenant --------------------------------------------------------------


def test_links_lead_back_to_their_session_per_tenant(backend):
    store = backend.open()
    store.link("tenant-a", "resp_1", "k", ["call_1"], head="resp_3")
    link = store.linked("tenant-a", "resp_1")
    assert (link.session, link.pending, link.head) == ("k", ["call_1"], "resp_3")
    assert store.linked("tenant-b", "resp_1") is None and store.linked("tenant-a", "resp_2") is None


def test_kept_rounds_come_back_for_their_session_only(backend):
    store = backend.open()
    store.keep_rounds("tenant-a", "k", "d1", ['{"role":"assistant"}', '{"role":"user"}'])
    assert store.rounds("tenant-a", "k", "d1") == ['{"role":"assistant"}', '{"role":"user"}']
    assert store.rounds("tenant-b", "k", "d1") is None and store.rounds("tenant-a", "k2", "d1") is None
    assert store.rounds("tenant-a", "k", "d2") is None


# --- learned priors, per tenant ----------------------------------------------------------------


def _count(data):
    return {"n": (data or {}).get("n", 0) + 1}


def test_learned_priors_are_per_tenant_and_survive_a_new_store(backend):
    store = backend.open()
    assert store.learned("tenant-a") is None
    assert store.learn("tenant-a", _count) == {"n": 1} and store.learn("tenant-a", _count) == {"n": 2}
    store.learn("tenant-b", _count)
    store.close()
    again = backend.open()
    assert again.learned("tenant-a") == {"n": 2} and again.learned("tenant-b") == {"n": 1}
    assert again.learned("tenant-c") is None


def test_concurrent_lessons_are_all_merged(backend):
    """Several proxies (threads here) merging into one tenant's priors lose none."""
    store = backend.open()
    start = threading.Barrier(6)

    def work() -> None:
        start.wait()
        for _ in range(10):
            store.learn("t", _count)

    pool = [threading.Thread(target=work) for _ in range(6)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert store.learned("t") == {"n": 60}


def test_forget_wipes_one_tenant_or_all_and_leaves_sessions(backend):
    store = backend.open()
    for tenant in ("a", "b", "c"):
        store.learn(tenant, _count)
    store.update("k", lambda s: s.expand(["x"]))
    assert store.forget("a") == 1 and store.forget("a") == 0
    assert store.learned("a") is None and store.learned("b") == {"n": 1}
    assert store.forget(None) == 2
    assert store.learned("b") is None and store.learned("c") is None
    assert store.get("k").expanded == ["x"]


def test_learned_priors_expire_only_after_months_without_a_lesson(backend):
    store = backend.open()
    store.learn("t", _count)
    key = learned_key("t")
    assert backend.remaining(key) > 90 * 86400
    backend.advance(LEARNED_TTL + 1)
    assert store.learned("t") is None


# --- the protocol, and failing open ------------------------------------------------------------


def test_both_stores_keep_the_protocol(backend):
    assert isinstance(backend.open(), SessionStore)


def test_a_store_that_cannot_be_used_reads_blank_and_writes_nothing(backend):
    """Fail open: no call raises; ``update`` runs ``change`` on a blank state and returns its
    result, so the request is planned as a new session's."""
    store = backend.broken()
    seen = []
    assert store.update("k", lambda s: (seen.append(copy.deepcopy(s)), s.expand(["a"]), "planned")[2]) == "planned"
    assert seen == [SessionState()]
    assert store.get("k") == SessionState()
    store.link("t", "resp", "k", ["call"])
    assert store.linked("t", "resp") is None
    store.keep_rounds("t", "k", "d", ["r"])
    assert store.rounds("t", "k", "d") is None
    assert store.learn("t", _count) is None and store.learned("t") is None and store.forget(None) == 0
    assert len(store) == 0


def test_the_store_is_built_from_config(tmp_path):
    disk = open_store(parse({"sessions": {"dir": str(tmp_path / "s")}}).sessions)
    assert isinstance(disk, DiskSessionStore)
    disk.close()
    cfg = parse({"sessions": {"backend": "redis", "redis": {"url": "redis://127.0.0.1:1/0", "timeout": "100ms"}}})
    store = open_store(cfg.sessions)
    assert isinstance(store, RedisSessionStore) and store.get("k") == SessionState()  # down: blank, no raise
    store.close()
