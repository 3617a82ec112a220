"""The session store's semantics, one set run on both stores (diskcache and a real
redis-server: ``backend``), then what only the disk store has (its cleanup, its files)
and ``SessionState`` alone. What only Redis has is in state/test_redis.py."""

import contextlib
import copy
import os
import stat
import threading
import time
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import diskcache.core
import pytest
import redis
from tooldisco.state import base as state_base
from tooldisco.state import disk as sessions
from tooldisco.config import RedisSettings
from tooldisco.state.redis import RedisSessionStore
from tooldisco.state.base import SessionState, session_key
from tooldisco.state.disk import SessionStore
from tooldisco.core.private import private_cache
from tooldisco.core.tenants import tenant_of

from tests.support.redis_server import redis_server  # noqa: F401 (a fixture)
from tests.support.semantic import needs_semantic


def fake_clock(monkeypatch, start=1_000.0):
    """One clock for diskcache (wall time) and the store (wall and monotonic)."""
    now = [start]
    monkeypatch.setattr(diskcache.core, "time", SimpleNamespace(time=lambda: now[0], sleep=time.sleep))
    monkeypatch.setattr(sessions, "time", SimpleNamespace(time=lambda: now[0], monotonic=lambda: now[0]))
    return now


class DiskBackend:
    """Stores on one directory; time is ``fake_clock``'s, which diskcache's expiry follows."""

    def __init__(self, root: Path, now: list[float]):
        self.root, self.now, self.opened = root, now, []

    def open(self, ttl: float = 3600.0) -> SessionStore:
        self.opened.append(SessionStore(self.root, ttl=ttl))
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


def hammer(store, threads: int, rounds: int, change_for) -> None:
    """``threads`` threads, started together, each applying ``change_for(thread, round)``."""
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        start.wait()
        for r in range(rounds):
            change = change_for(i, r)

            def yielding(s, change=change):
                os.sched_yield()  # invite another thread in between the read and the write
                change(s)

            store.update("k", yielding)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


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


# --- the disk store alone: its cleanup, its transaction ----------------------------------------


def test_expired_entries_stay_on_disk_until_the_periodic_cleanup(tmp_path, monkeypatch):
    now = fake_clock(monkeypatch)
    store = SessionStore(tmp_path, ttl=60, cleanup_interval=200)
    store.update("k", lambda s: s.expand(["a"]))  # (the cleanup ran)
    store.link("t", "resp", "k", [])
    now[0] += 121
    assert store.get("k") == SessionState() and store.linked("t", "resp") is None
    assert len(store) == 2  # expired, still on disk: the last cleanup ran 121 s ago
    now[0] += 80
    store.get("other")
    assert len(store) == 0  # the periodic cleanup removed both


@pytest.fixture
def racing_store(tmp_path):
    store = SessionStore(tmp_path)
    yield store
    store.close()


def test_a_test_of_the_race_can_fail(racing_store, monkeypatch):
    """Without the transaction the same workload loses updates (the concurrency tests can fail)."""
    monkeypatch.setattr(racing_store._cache, "transact", contextlib.nullcontext)
    real_get = racing_store._cache.get

    def slow_get(key, *args, **kwargs):
        value = real_get(key, *args, **kwargs)
        os.sched_yield()
        return value

    monkeypatch.setattr(racing_store._cache, "get", slow_get)
    hammer(racing_store, 8, 15, lambda i, r: lambda s: s.expand([f"t{i}_{r}"]))
    assert len(racing_store.get("k").expanded) < 8 * 15


# --- SessionState alone ------------------------------------------------------------------------


def test_names_are_bounded_oldest_absent_first(monkeypatch):
    monkeypatch.setattr(state_base, "MAX_NAMES", 4)
    s = SessionState()
    s.expand(list("abcdef"))
    assert s.expanded == list("cdef")


# --- files 0600, directories 0700 ------------------------------------------------------------


@pytest.fixture(autouse=True)
def usual_umask():
    """The common umask (022), under which diskcache alone would make files 0644 and folders 0755."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def assert_private(root: Path) -> None:
    for name, mode in modes(root).items():
        is_dir = name == "." or (root / name).is_dir()
        assert mode == (0o700 if is_dir else 0o600), f"{name}: {oct(mode)}"


def test_the_store_is_private_after_a_workload(tmp_path):
    root = tmp_path / "a" / "sessions"
    store = SessionStore(root)
    names = [f"t{i}_{'d' * 3_000}" for i in range(300)]
    hammer(store, 4, 3, lambda i, r: lambda s: s.forwarded.update({f"l{i}_{r}": names}))
    store.update("k", lambda s: s.expand(["x" * 100_000]))  # values past diskcache's 32 KB file threshold
    store.link("tenant", "resp_1", "k", ["pending"] * 1_000)
    assert (root / "cache.db-wal").exists()
    assert_private(root)
    assert_private(tmp_path / "a")  # parents it created too
    store.close()
    reopened = SessionStore(root)
    reopened.update("k2", lambda s: s.expand(["y"]))
    assert_private(root)


def test_an_existing_world_readable_store_is_tightened(tmp_path):
    root = tmp_path / "s"
    diskcache.Cache(str(root)).close()
    root.chmod(0o755)  # as an older version left it
    (root / "cache.db").chmod(0o644)
    SessionStore(root).update("k", lambda s: s.expand(["a"]))
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / "cache.db").stat().st_mode) == 0o600


def test_private_cache_expands_the_home_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    private_cache(Path("~/cache")).close()
    assert (tmp_path / "cache" / "cache.db").exists() and not Path("~").exists()


@needs_semantic
def test_the_embedding_cache_is_private(tmp_path):
    from tooldisco.search.embeddings import Embedder, model_files

    embedder = Embedder(*model_files(), cache_dir=str(tmp_path / "vectors"))
    embedder.embed(["create a github issue", "weather in Paris"])
    assert embedder._disk.get(embedder._key("weather in Paris")) is not None
    assert_private(tmp_path / "vectors")
