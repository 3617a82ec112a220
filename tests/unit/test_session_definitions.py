"""A disk store extends each shared definition's expiry once per half TTL, not on every new
session's first turn (one SQLite statement per tool sat in the request's path)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tooldisco.sessions import SessionState, SessionStore


def catalog(n: int = 30) -> dict[str, str]:
    return {f"tool_{i}": '{"name": "tool_%d", "description": "%s"}' % (i, "x" * 40) for i in range(n)}


def open_session(store: SessionStore, key: str) -> None:
    def change(s: SessionState) -> None:
        s.remember("anthropic", catalog())
    store.update(key, change)


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SessionStore, list[str], list[float]]:
    store = SessionStore(tmp_path, ttl=60, cleanup_interval=1e9)
    touched: list[str] = []
    clock = [1_000.0]
    real_touch = store._cache.touch

    def touch(key: str, expire: float | None = None, **kw: object) -> bool:
        touched.append(key)
        return real_touch(key, expire=expire, **kw)

    monkeypatch.setattr(store._cache, "touch", touch)
    monkeypatch.setattr("tooldisco.sessions.time.monotonic", lambda: clock[0])
    return store, touched, clock


def test_a_second_session_sharing_the_catalog_does_not_touch_its_definitions_again(counted):
    store, touched, clock = counted
    open_session(store, "a")
    first = [k for k in touched if k.startswith("def:")]
    assert len(first) == 30  # each looked up once (then written)
    touched.clear()
    open_session(store, "b")
    assert [k for k in touched if k.startswith("def:")] == []
    # the definitions are there for session b
    digests = store.get("b").catalog.values()
    assert len(store.definitions(digests)) == 30


def test_after_half_a_ttl_the_definitions_are_extended_again(counted):
    store, touched, clock = counted
    open_session(store, "a")
    touched.clear()
    clock[0] += 31  # past ttl / 2
    open_session(store, "b")
    assert len([k for k in touched if k.startswith("def:")]) == 30
