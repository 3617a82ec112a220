"""The disk session store fails open: a store that cannot be opened (not a database,
read-only, locked) or breaks while in use leaves requests planned without state, each call
waiting at most ``timeout``; it is tried again every ``retry_after`` seconds and recovers."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from tooldisco.state.disk import DiskSessionStore
from tooldisco.core.private import private_cache


@pytest.fixture
def logs() -> Iterator[list[str]]:
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(f"{m.record['level'].name} {m.record['message']}"), level="INFO")
    yield seen
    logger.remove(sink)


def warnings(logs: list[str]) -> list[str]:
    return [line for line in logs if line.startswith("WARNING")]


def found(store: DiskSessionStore, key: str = "k") -> list[str]:
    return store.get(key).expanded


def test_a_file_that_is_not_a_database_is_moved_aside_and_a_fresh_store_made(tmp_path: Path, logs: list[str]) -> None:
    (tmp_path / "cache.db").write_bytes(b"this is not a database\n" * 100)
    store = DiskSessionStore(tmp_path)
    store.update("k", lambda s: s.expand(["a"]))
    assert found(store) == ["a"] and store.available
    aside = list(tmp_path.glob("cache.db.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not a database")
    assert len(warnings(logs)) == 1 and "moved aside" in warnings(logs)[0]
    store.close()


def test_a_store_that_cannot_be_opened_goes_without_state_then_recovers(tmp_path: Path, logs: list[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-only (simulated: running as root ignores file modes): every call answers blank at
    once, one warning; once the directory is usable, a later call opens it."""
    from tooldisco.state import disk as sessions

    real = sessions.private_cache
    refused = [True]

    def private_cache(directory: Path, timeout: float = 60.0):
        if refused[0]:
            raise PermissionError(13, "Permission denied", str(directory))
        return real(directory, timeout)

    monkeypatch.setattr(sessions, "private_cache", private_cache)
    store = DiskSessionStore(tmp_path / "s", retry_after=0.2)
    assert store.update("k", lambda s: s.expand(["a"]) or "planned") == "planned"  # planned, state blank
    assert found(store) == [] and not store.available
    assert len(warnings(logs)) == 1 and "sessions.dir" in warnings(logs)[0]
    refused[0] = False
    store.update("k", lambda s: s.expand(["a"]))  # within retry_after: not tried
    assert not store.available
    time.sleep(0.25)
    store.update("k", lambda s: s.expand(["b"]))
    assert store.available and found(store) == ["b"]
    assert len(warnings(logs)) == 1 and any("is back" in line for line in logs)
    store.close()


@pytest.mark.skipif(shutil.which("chattr") is None, reason="chattr not installed")
def test_an_immutable_directory_stops_nothing(tmp_path: Path, logs: list[str]) -> None:
    """A directory no one may write (immutable: even root), with a store in it already."""
    root = tmp_path / "s"
    DiskSessionStore(root).close()
    if subprocess.run(["chattr", "+i", str(root)], capture_output=True).returncode:
        pytest.skip("chattr +i not permitted here")
    try:
        store = DiskSessionStore(root, retry_after=0.2)
        assert store.update("k", lambda s: s.expand(["a"]) or "planned") == "planned"
        assert len(warnings(logs)) == 1
    finally:
        subprocess.run(["chattr", "-i", str(root)], check=True)
    time.sleep(0.25)
    store.update("k", lambda s: s.expand(["a"]))
    assert found(store) == ["a"]
    store.close()


def test_a_held_lock_costs_a_call_its_timeout_then_calls_skip_the_store(tmp_path: Path, logs: list[str]) -> None:
    store = DiskSessionStore(tmp_path, timeout=0.2, retry_after=0.5)
    store.update("k", lambda s: s.expand(["a"]))
    other = sqlite3.connect(tmp_path / "cache.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing
    try:
        began = time.monotonic()
        result: list[list[str]] = []
        # A fresh thread: diskcache opens a connection per thread, and its setup must not wait 60 s either.
        # A turn that changes nothing only reads, which a writer elsewhere does not hold up.
        worker = threading.Thread(target=lambda: result.append(store.update("k", lambda s: list(s.expanded))))
        worker.start()
        worker.join(10)
        assert result == [["a"]] and not warnings(logs)
        # A turn that changes the state waits for the lock at most the timeout; its change is dropped.
        began = time.monotonic()
        worker = threading.Thread(target=lambda: result.append(
            store.update("k", lambda s: (s.expand(["c"]), list(s.expanded))[1])))
        worker.start()
        worker.join(10)
        assert result[1] == ["a", "c"]  # planned on the state as read
        assert time.monotonic() - began < 2.0  # the timeout (0.2 s) and a generous margin, not diskcache's 60 s
        began = time.monotonic()
        assert store.update("k", lambda s: "skipped") == "skipped" and time.monotonic() - began < 0.1
        assert len(warnings(logs)) == 1 and "lock" in warnings(logs)[0]
    finally:
        other.execute("ROLLBACK")
        other.close()
    time.sleep(0.55)
    store.update("k", lambda s: s.expand(["b"]))
    assert found(store) == ["a", "b"] and store.available
    store.close()


def test_a_store_file_removed_while_in_use_is_made_again(tmp_path: Path, logs: list[str]) -> None:
    store = DiskSessionStore(tmp_path, retry_after=0.1)
    store.update("k", lambda s: s.expand(["a"]))
    for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    time.sleep(0.15)
    store.update("k", lambda s: s.expand(["b"]))
    assert (tmp_path / "cache.db").exists() and found(store) == ["b"]  # a fresh store, really on disk
    assert DiskSessionStore(tmp_path).get("k").expanded == ["b"]
    store.close()


def test_a_store_that_breaks_while_in_use_degrades_and_recovers(tmp_path: Path, logs: list[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Disk full (or the directory made read-only) mid-run: the write fails, the request goes on."""
    store = DiskSessionStore(tmp_path, retry_after=0.2)
    store.update("k", lambda s: s.expand(["a"]))
    cache = store._cache
    real_set = cache.set

    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(cache, "set", full)
    assert store.update("k", lambda s: s.expand(["b"]) or len(s.expanded)) == 2  # the state it read, then dropped
    assert "disk space" in warnings(logs)[0] and not store.available
    monkeypatch.setattr(cache, "set", real_set)
    time.sleep(0.25)
    store.update("k", lambda s: s.expand(["c"]))
    assert found(store) == ["a", "c"] and len(warnings(logs)) == 1
    store.close()


def test_a_store_found_corrupt_while_in_use_is_moved_aside_and_made_again(tmp_path: Path, logs: list[str]) -> None:
    """Its header intact, so it opens again, its pages not: reopening alone would fail forever."""
    store = DiskSessionStore(tmp_path, retry_after=0.1)
    for i in range(300):
        store.update(f"filler{i}", lambda s: s.expand([f"tool_{n}_{'x' * 200}" for n in range(20)]))
    store.update("k", lambda s: s.expand(["a"]))
    store._cache._sql("PRAGMA wal_checkpoint(TRUNCATE)")
    store._cache.close()  # this thread's connection: the next call reads the file again
    size = (tmp_path / "cache.db").stat().st_size
    with open(tmp_path / "cache.db", "r+b") as f:  # the last pages (the newest session's), not the schema's
        f.seek(size - 16384)
        f.write(b"\xff" * 16384)
    private_cache(tmp_path).close()  # it still opens
    assert store.update("k", lambda s: list(s.expanded)) == []  # this request: without state
    store.update("k", lambda s: s.expand(["b"]))  # the next: a fresh store
    assert found(store) == ["b"] and store.available
    assert len(list(tmp_path.glob("cache.db.corrupt-*"))) == 1
    store.close()


@pytest.mark.skipif(shutil.which("chattr") is None, reason="chattr not installed")
def test_a_store_made_read_only_while_in_use_degrades_and_recovers(tmp_path: Path, logs: list[str]) -> None:
    store = DiskSessionStore(tmp_path, retry_after=0.2)
    store.update("k", lambda s: s.expand(["a"]))
    # Not cache.db-shm: SQLite maps it, and a mapped file made immutable under it ends the process (SIGBUS).
    files = [str(tmp_path / "cache.db"), str(tmp_path / "cache.db-wal"), str(tmp_path)]
    if subprocess.run(["chattr", "+i", *files], capture_output=True).returncode:
        subprocess.run(["chattr", "-i", *files], capture_output=True)
        pytest.skip("chattr +i not permitted here")
    try:
        assert store.update("k", lambda s: s.expand(["b"]) or "planned") == "planned"
        assert len(warnings(logs)) == 1 and not store.available
    finally:
        subprocess.run(["chattr", "-i", *files], check=True)
    time.sleep(0.25)
    store.update("k", lambda s: s.expand(["c"]))
    assert found(store) == ["a", "c"] and store.available
    store.close()
