"""What only the disk session store has: its cleanup, its transaction, its files; and
``SessionState`` alone. What both stores share is in state/test_store_contract.py."""

import contextlib
import os
import stat
from pathlib import Path

import diskcache
import pytest
from tooldisco.state import base as state_base
from tooldisco.state.base import SessionState
from tooldisco.state.disk import DiskSessionStore
from tooldisco.core.private import private_cache

from tests.support.semantic import needs_semantic
from tests.support.stores import fake_clock, hammer


# --- the disk store alone: its cleanup, its transaction ----------------------------------------


def test_expired_entries_stay_on_disk_until_the_periodic_cleanup(tmp_path, monkeypatch):
    now = fake_clock(monkeypatch)
    store = DiskSessionStore(tmp_path, ttl=60, cleanup_interval=200)
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
    store = DiskSessionStore(tmp_path)
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
    store = DiskSessionStore(root)
    names = [f"t{i}_{'d' * 3_000}" for i in range(300)]
    hammer(store, 4, 3, lambda i, r: lambda s: s.forwarded.update({f"l{i}_{r}": names}))
    store.update("k", lambda s: s.expand(["x" * 100_000]))  # values past diskcache's 32 KB file threshold
    store.link("tenant", "resp_1", "k", ["pending"] * 1_000)
    assert (root / "cache.db-wal").exists()
    assert_private(root)
    assert_private(tmp_path / "a")  # parents it created too
    store.close()
    reopened = DiskSessionStore(root)
    reopened.update("k2", lambda s: s.expand(["y"]))
    assert_private(root)


def test_an_existing_world_readable_store_is_tightened(tmp_path):
    root = tmp_path / "s"
    diskcache.Cache(str(root)).close()
    root.chmod(0o755)  # as an older version left it
    (root / "cache.db").chmod(0o644)
    DiskSessionStore(root).update("k", lambda s: s.expand(["a"]))
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
