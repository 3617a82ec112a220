"""The session store never stops, stalls or fails the proxy, through a real mitmdump.

A ``cache.db`` that is not a database, a directory no one may write, another process
holding SQLite's write lock: mitmdump starts, requests are answered (planned without state
when the store is unusable), and the store is used again once it can be. One tenant's
burst of huge requests does not hold another tenant's small one.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ConfigSpec, MitmDump, addon_config
from tests.fakeprovider import SEARCH_TOOL, FakeProvider
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

TOOLS = anthropic_tools(60)
SESSIONS = {"timeout": "300ms", "retry_after": "500ms"}


def config(prepare: Any = None, **sessions: Any) -> ConfigSpec:
    """tool-search over ``TOOLS``; ``prepare(sessions_dir)`` runs before mitmdump starts."""

    def make(workdir: Path) -> str:
        if prepare is not None:
            directory = workdir / "sessions"
            directory.mkdir(parents=True, exist_ok=True)
            prepare(directory)
        return addon_config(workdir, strategy="tool-search", max_search_results=3,
                            sessions={**SESSIONS, **sessions})

    return make


def body(text: str, tools: list[dict[str, Any]] = TOOLS) -> bytes:
    return json.dumps({"model": "claude-x", "max_tokens": 64, "tools": tools,
                       "messages": [{"role": "user", "content": text}]}).encode()


def post(proxy: MitmDump, data: bytes, key: str = "sk-ant-tenant-a", timeout: float = 120.0) -> float:
    """One Messages request through ``proxy``; the seconds it took. Asserts a 200."""
    began = time.monotonic()
    with proxy.httpx_client(timeout=timeout) as http:
        r = http.post("https://api.anthropic.com/v1/messages", content=data,
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01",
                               "content-type": "application/json"})
    assert r.status_code == 200, r.text[:500]
    return time.monotonic() - began


def forwarded_names(fake: FakeProvider) -> list[str]:
    return [t["name"] for t in fake.api_requests("anthropic")[-1].json.get("tools") or []]


def store_warnings(proxy: MitmDump, since: int = 0) -> list[str]:
    return [line for line in proxy.log_text(since).splitlines() if "session store" in line and "unavailable" in line
            or "moved aside" in line]


def test_a_cache_db_that_is_not_a_database_is_moved_aside_and_the_proxy_starts(mitm_factory: Any,
                                                                               fake: FakeProvider) -> None:
    garbage = b"\x00not a database: a crash, a full disk, a bad copy\n" * 200
    proxy = mitm_factory(config=config(lambda d: (d / "cache.db").write_bytes(garbage)))
    post(proxy, body(f"weather in Paris [{uuid.uuid4().hex[:8]}]"))
    assert SEARCH_TOOL in forwarded_names(fake)  # processed, on a fresh store
    directory = proxy.workdir / "sessions"
    aside = list(directory.glob("cache.db.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == garbage  # kept, never deleted
    assert len(store_warnings(proxy)) == 1, proxy.log_text()


def _immutable(directory: Path, on: bool) -> None:
    subprocess.run(["chattr", "+i" if on else "-i", str(directory)], check=True, capture_output=True)


def test_a_directory_no_one_may_write_stops_nothing_and_the_store_comes_back(mitm_factory: Any,
                                                                             fake: FakeProvider,
                                                                             tmp_path: Path) -> None:
    """Read-only (immutable: running as root ignores file modes): requests go through without
    session state, one warning; made writable, the store is used again."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr not installed")
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        _immutable(probe, True)
        _immutable(probe, False)
    except subprocess.CalledProcessError:
        pytest.skip("chattr +i not permitted here")
    locked: list[Path] = []

    def read_only(directory: Path) -> None:
        _immutable(directory, True)
        locked.append(directory)

    try:
        proxy = mitm_factory(config=config(read_only))
        for i in range(3):
            post(proxy, body(f"weather in Paris, try {i} [{uuid.uuid4().hex[:8]}]"))
            assert SEARCH_TOOL in forwarded_names(fake)  # still processed, without state
        assert len(store_warnings(proxy)) == 1, proxy.log_text()
        assert not (locked[0] / "cache.db").exists()
    finally:
        for directory in locked:
            _immutable(directory, False)
    mark = proxy.log_offset()
    time.sleep(0.6)  # retry_after
    post(proxy, body(f"weather in Paris, writable again [{uuid.uuid4().hex[:8]}]"))
    proxy.wait_for_log("session store at .* is back", since=mark)
    assert (locked[0] / "cache.db").exists()


def test_another_process_holding_the_write_lock_costs_a_request_its_timeout_only(mitm_factory: Any,
                                                                                 fake: FakeProvider) -> None:
    """diskcache alone waits 60 s for the lock (and its setup retries another 60): every
    request of every tenant would be held. With ``sessions.timeout`` the request goes on without
    state past it, and later ones skip the store until ``retry_after``."""
    proxy = mitm_factory(config=config())
    post(proxy, body(f"hello [{uuid.uuid4().hex[:8]}]"))  # the store exists
    other = sqlite3.connect(proxy.workdir / "sessions" / "cache.db", isolation_level=None, timeout=5)
    other.execute("BEGIN IMMEDIATE")
    try:
        took = [post(proxy, body(f"weather in Paris [{uuid.uuid4().hex[:8]}]", tools=TOOLS),
                     key=f"sk-ant-{i}", timeout=60) for i in range(3)]
        assert SEARCH_TOOL in forwarded_names(fake)
        assert max(took) < 10, took  # 300 ms and a generous margin for a loaded machine; diskcache alone waits 60 s
    finally:
        other.execute("ROLLBACK")
        other.close()
    mark = proxy.log_offset()
    time.sleep(0.6)
    post(proxy, body(f"after the lock [{uuid.uuid4().hex[:8]}]"))
    proxy.wait_for_log("session store at .* is back", since=mark)


def test_a_light_tenant_is_not_held_by_a_heavy_tenants_huge_requests(mitm_factory: Any, fake: FakeProvider) -> None:
    """Six requests of 20,000 tools from one tenant in flight; another tenant's small requests
    get their answers meanwhile (the p95 is measured by scripts/bench_fairness.py)."""
    proxy = mitm_factory(config=config())
    heavy_tools = anthropic_tools(20_000)
    # Each its own catalog (its first definition differs), so none is found parsed already:
    # every one is a new catalog's full decode and index work.
    heavy_bodies = [body(f"heavy {i} [{uuid.uuid4().hex}]",
                         [{**heavy_tools[0], "description": f"{heavy_tools[0]['description']} ({i})"},
                          *heavy_tools[1:]]) for i in range(6)]
    heavy_done: list[float] = []
    errors: list[BaseException] = []

    def heavy(data: bytes) -> None:
        try:
            post(proxy, data, key="sk-ant-heavy", timeout=300)
            heavy_done.append(time.monotonic())
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=heavy, args=(data,)) for data in heavy_bodies]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the heavy bodies are on their way
    light_done, light_took = [], []
    for i in range(3):
        light_took.append(post(proxy, body(f"light {i} [{uuid.uuid4().hex[:8]}]"), key="sk-ant-light", timeout=120))
        light_done.append(time.monotonic())
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert len(heavy_done) == 6
    # Answered while the heavy ones still ran, each well within a generous bound.
    assert light_done[-1] < max(heavy_done), (light_took, sorted(heavy_done))
    assert max(light_took) < 30, light_took
