import contextlib
import os
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import diskcache.core
import pytest
from tooldisco import sessions
from tooldisco.sessions import SessionState, SessionStore, private_cache, session_key
from tooldisco.tenants import tenant_of

from tests.support.semantic import needs_semantic


def defs(*names: str, size: int = 40) -> dict[str, str]:
    """name -> a definition of about ``size`` bytes."""
    return {n: f'{{"name":"{n}","description":"{"d" * size}"}}' for n in names}


def remember(names_seen, kept, deferred=None, api="anthropic"):
    return lambda s: s.remember(api, set(names_seen), kept, deferred)


def fake_clock(monkeypatch, start=1_000.0):
    """One clock for diskcache (wall time) and the store (wall and monotonic)."""
    now = [start]
    monkeypatch.setattr(diskcache.core, "time", SimpleNamespace(time=lambda: now[0], sleep=time.sleep))
    monkeypatch.setattr(sessions, "time", SimpleNamespace(time=lambda: now[0], monotonic=lambda: now[0]))
    return now


def test_two_tenants_same_first_message_do_not_share(tmp_path):
    store = SessionStore(tmp_path)
    k1 = session_key(tenant_of({"x-api-key": "k1"}, ""), None, "hi")
    k2 = session_key(tenant_of({"x-api-key": "k2"}, ""), None, "hi")
    assert k1 != k2
    store.update(k1, lambda s: s.expand(["a"]))
    assert store.get(k2).expanded == [] and store.get(k1).expanded == ["a"]
    assert session_key("t", "sid", "hi") != session_key("t", None, "hi")
    assert session_key("t", "sid", "hi") == session_key("t", "sid", "other first message")


def test_state_survives_restart(tmp_path):
    s1 = SessionStore(tmp_path)
    s1.update("k", lambda s: (s.expand(["x", "y", "x"]), s.remember("anthropic", {"x", "y"}, ["y"], defs("x"))))
    s1.close()
    s2 = SessionStore(tmp_path)
    st = s2.get("k")
    assert st.expanded == ["x", "y"] and st.kept == ["y"] and list(st.catalog) == ["x"]
    assert s2.definitions(st.catalog.values()) == {st.catalog["x"]: defs("x")["x"]}


def test_update_returns_the_change_result_and_an_unchanged_new_session_is_not_written(tmp_path):
    store = SessionStore(tmp_path)
    assert store.update("k", lambda s: len(s.kept)) == 0
    assert len(store) == 0


def test_ttl_expires_and_cleanup_removes(tmp_path, monkeypatch):
    now = fake_clock(monkeypatch)
    store = SessionStore(tmp_path, ttl=60, cleanup_interval=30)
    store.update("k", lambda s: s.expand(["a"]))
    now[0] += 59
    assert store.get("k").expanded == ["a"]  # within the TTL (a read does not extend it)
    now[0] += 2
    assert store.get("k").expanded == []  # expired: reads as a new session
    assert len(store) == 1  # still on disk: the last cleanup ran 2 s ago
    now[0] += 30
    store.get("other")
    assert len(store) == 0  # the periodic cleanup removed the expired entry


def test_an_unchanged_update_extends_the_ttl(tmp_path, monkeypatch):
    now = fake_clock(monkeypatch)
    store = SessionStore(tmp_path, ttl=60, cleanup_interval=1e9)
    store.update("k", lambda s: s.expand(["a"]))
    for _ in range(5):
        now[0] += 50
        store.update("k", lambda s: s.expand(["a"]))
    assert store.get("k").expanded == ["a"]


# --- one transaction, merged: concurrent flows lose nothing ---------------------------------


def hammer(store: SessionStore, threads: int, rounds: int, change_for) -> None:
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


@pytest.fixture
def racing_store(tmp_path):
    store = SessionStore(tmp_path)
    yield store
    store.close()


def test_concurrent_updates_lose_no_expanded_name(racing_store):
    hammer(racing_store, 8, 15, lambda i, r: lambda s: s.expand([f"t{i}_{r}"]))
    assert sorted(racing_store.get("k").expanded) == sorted(f"t{i}_{r}" for i in range(8) for r in range(15))


def test_concurrent_flows_lose_no_kept_name(racing_store):
    """Like the planner: each flow reads the sticky set and keeps it plus a tool of its own."""
    names = {f"t{i}_{r}" for i in range(8) for r in range(15)}

    def change(i, r):
        mine = f"t{i}_{r}"
        return lambda s: s.remember("anthropic", names, [*s.kept, mine], defs(f"d{i}_{r}"))

    hammer(racing_store, 8, 15, change)
    st = racing_store.get("k")
    assert sorted(st.kept) == sorted(names)
    assert len(st.catalog) == 8 * 15 and len(racing_store.definitions(st.catalog.values())) == 8 * 15


def test_a_test_of_the_race_can_fail(racing_store, monkeypatch):
    """Without the transaction the same workload loses updates (the tests above can fail)."""
    monkeypatch.setattr(racing_store._cache, "transact", contextlib.nullcontext)
    real_get = racing_store._cache.get

    def slow_get(key, *args, **kwargs):
        value = real_get(key, *args, **kwargs)
        os.sched_yield()
        return value

    monkeypatch.setattr(racing_store._cache, "get", slow_get)
    hammer(racing_store, 8, 15, lambda i, r: lambda s: s.expand([f"t{i}_{r}"]))
    assert len(racing_store.get("k").expanded) < 8 * 15


def test_kept_names_a_request_did_not_see_stay():
    s = SessionState()
    s.remember("anthropic", {"a", "b", "c"}, ["a", "b"])
    s.remember("anthropic", {"x", "y"}, ["y"])  # another sub-agent
    s.remember("anthropic", {"a", "b", "c"}, ["c", "a"])  # b seen and not kept: dropped
    assert s.kept == ["a", "y", "c"]


# --- catalogs stored once, by content --------------------------------------------------------


def test_definitions_are_stored_once_across_sessions_and_tenants(tmp_path):
    store = SessionStore(tmp_path)
    catalog = defs(*(f"t{i}" for i in range(50)), size=2_000)
    for key in ("s1", "s2", "s3"):
        store.update(key, remember(catalog, [], catalog))
    assert len(store) == 3 + 50
    entry = store._cache.get("s1")
    assert "d" * 2_000 not in repr(entry)  # the session holds digests only
    st = store.get("s2")
    assert store.definitions(st.catalog.values()) == {st.catalog[n]: raw for n, raw in catalog.items()}


def test_a_changed_definition_gets_a_new_entry(tmp_path):
    store = SessionStore(tmp_path)
    store.update("k", remember({"a"}, [], {"a": '{"v":1}'}))
    store.update("k", remember({"a"}, [], {"a": '{"v":2}'}))
    st = store.get("k")
    assert store.definitions(st.catalog.values()) == {st.catalog["a"]: '{"v":2}'}


def test_an_oversized_definition_is_not_kept(tmp_path):
    store = SessionStore(tmp_path)
    store.update("k", remember({"a", "big"}, [], {"a": "{}", "big": "{}"}))
    huge = '"' + "x" * sessions.MAX_DEFINITION_BYTES + '"'
    store.update("k", remember({"a", "big"}, [], {"a": "{}", "big": huge}))
    assert list(store.get("k").catalog) == ["a"]  # its older, smaller definition went too


def test_names_are_bounded_oldest_absent_first(monkeypatch):
    monkeypatch.setattr(sessions, "MAX_NAMES", 4)
    s = SessionState()
    s.remember("anthropic", set("abc"), [], defs(*"abc"))
    s.remember("anthropic", set("cde"), [], defs(*"cde"))
    assert list(s.catalog) == ["b", "c", "d", "e"]  # a, absent from the request, went first
    s.remember("anthropic", set("vwxyz"), [], defs(*"vwxyz"))
    assert list(s.catalog) == list("vwxy")  # a request alone over the bound keeps its first names
    s.expand(list("abcdef"))
    assert s.expanded == list("cdef")


def test_another_api_starts_a_new_catalog():
    s = SessionState()
    s.remember("anthropic", {"a"}, [], defs("a"))
    s.remember("openai-chat", {"b"}, ["b"], defs("c"))
    assert list(s.catalog) == ["c"] and s.earlier({"b"}) == {"c": s.catalog["c"]}


def test_definitions_outlive_their_sessions_then_expire(tmp_path, monkeypatch):
    now = fake_clock(monkeypatch)
    store = SessionStore(tmp_path, ttl=100, cleanup_interval=1e9)
    store.update("k", remember({"a"}, [], defs("a")))
    digest = store.get("k").catalog["a"]
    touched = []
    real_touch = store._cache.touch
    monkeypatch.setattr(store._cache, "touch", lambda key, **kw: touched.append(key) or real_touch(key, **kw))
    for _ in range(20):  # a session kept alive for 18 TTLs, by turns that change nothing
        now[0] += 90
        store.update("k", remember({"a"}, [], defs("a")))
        assert store.definitions([digest]) == {digest: defs("a")["a"]}
    assert touched.count(f"def:{digest}") <= 10  # refreshed about once a TTL, not every turn
    now[0] += 100
    assert store.get("k").catalog == {}  # the session expired ...
    assert store.definitions([digest])  # ... before its definitions
    now[0] += 101
    store._cache.expire()
    assert store.definitions([digest]) == {} and len(store) == 0


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
    big = defs(*(f"t{i}" for i in range(300)), size=3_000) | defs("huge", size=100_000)
    hammer(store, 4, 3, lambda i, r: remember(big, [f"t{i}"], big))
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
