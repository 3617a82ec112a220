"""The planning pool: tenants share its workers fairly, its queues are bounded, and a job
that cannot start in time is given up (the request then goes unprocessed)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tooldisco.engine.executor import FairExecutor, Overloaded


class Gate:
    """Jobs that block until released, recording the order they started in."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = threading.Event()
        self._lock = threading.Lock()

    def job(self, name: str) -> str:
        with self._lock:
            self.started.append(name)
        assert self.release.wait(10)
        return name


def wait_until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_heavy_tenant_holds_at_most_its_share_and_another_tenant_goes_first() -> None:
    pool = FairExecutor(workers=3, per_tenant=2, queue=10, wait=10)
    gate = Gate()
    heavy = [pool.submit("heavy", gate.job, f"h{i}") for i in range(6)]
    wait_until(lambda: len(gate.started) == 2)
    time.sleep(0.05)
    assert gate.started == ["h0", "h1"]  # its cap: the third worker stays free
    light = pool.submit("light", gate.job, "l0")
    wait_until(lambda: len(gate.started) == 3)
    assert gate.started[2] == "l0"  # started at once, ahead of the heavy tenant's queued jobs
    gate.release.set()
    assert [f.result(5) for f in heavy] == [f"h{i}" for i in range(6)] and light.result(5) == "l0"
    pool.close()


def test_a_freed_worker_takes_the_tenant_running_the_fewest() -> None:
    pool = FairExecutor(workers=1, per_tenant=1, queue=10, wait=10)
    gate = Gate()
    jobs = [pool.submit("a", gate.job, "a0"), pool.submit("a", gate.job, "a1"), pool.submit("a", gate.job, "a2")]
    wait_until(lambda: gate.started == ["a0"])
    jobs.append(pool.submit("b", gate.job, "b0"))
    gate.release.set()
    for f in jobs:
        f.result(5)
    assert gate.started.index("b0") == 1  # the oldest job among the tenants running fewest: b's, not a's next


def test_a_full_tenant_queue_refuses_only_that_tenant() -> None:
    pool = FairExecutor(workers=1, per_tenant=1, queue=2, wait=10)
    gate = Gate()
    held = [pool.submit("heavy", gate.job, "h0")]
    wait_until(lambda: gate.started == ["h0"])
    held += [pool.submit("heavy", gate.job, f"h{i}") for i in (1, 2)]  # one running, two waiting
    with pytest.raises(Overloaded):
        pool.submit("heavy", gate.job, "h3")
    other = pool.submit("light", gate.job, "l0")  # its own queue: accepted
    gate.release.set()
    assert other.result(5) == "l0" and [f.result(5) for f in held] == ["h0", "h1", "h2"]


async def test_a_job_not_started_within_wait_is_given_up_and_never_runs() -> None:
    pool = FairExecutor(workers=1, per_tenant=1, queue=5, wait=0.2)
    gate = Gate()
    first = asyncio.ensure_future(pool.run("a", gate.job, "a0"))
    await asyncio.sleep(0.05)
    began = time.monotonic()
    with pytest.raises(Overloaded):
        await pool.run("b", gate.job, "b0")
    assert time.monotonic() - began < 2
    gate.release.set()
    assert await first == "a0"  # started before its wait ran out: awaited to its end
    await asyncio.sleep(0.05)
    assert gate.started == ["a0"]


async def test_a_caller_that_goes_away_cancels_its_job_only_if_it_has_not_started() -> None:
    pool = FairExecutor(workers=1, per_tenant=1, queue=5, wait=10)
    gate = Gate()
    running = asyncio.ensure_future(pool.run("a", gate.job, "a0"))
    await asyncio.sleep(0.05)
    queued = asyncio.ensure_future(pool.run("b", gate.job, "b0"))
    await asyncio.sleep(0.05)
    queued.cancel()
    running.cancel()
    for task in (queued, running):  # the caller's own cancellation, not ``Overloaded``
        with pytest.raises(asyncio.CancelledError):
            await task
    gate.release.set()
    await asyncio.sleep(0.1)
    assert gate.started == ["a0"]  # the started one ran on; the queued one never ran
    assert await pool.run("c", lambda: "c0") == "c0"  # and the worker is free again


async def test_results_and_errors_come_back_as_from_to_thread() -> None:
    pool = FairExecutor(workers=2)

    def boom() -> None:
        raise ValueError("x")

    assert await pool.run("t", lambda a, b: a + b, 1, 2) == 3
    with pytest.raises(ValueError):
        await pool.run("t", boom)
    assert pool.stats()["threads"] <= 2


async def test_a_request_the_pool_cannot_take_goes_through_unprocessed(tmp_path) -> None:
    """Engine.plan: its tenant's queue full, the request is forwarded as the client sent it."""
    import json

    from tooldisco.config import parse
    from tooldisco.engine.engine import Engine
    from tooldisco.apis.registry import detect
    from tooldisco.core.tenants import tenant_of

    from tests.support.catalog import anthropic_tools

    engine = Engine(parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search"}},
                           "sessions": {"dir": str(tmp_path)}, "telemetry": {"enabled": False},
                           "planning": {"workers": 2, "per_tenant": 1, "queue": 1}}))
    adapter = detect("POST", "/v1/messages", "api.anthropic.com")
    body = json.dumps({"model": "m", "max_tokens": 9, "tools": anthropic_tools(60),
                       "messages": [{"role": "user", "content": "weather in Paris"}]}).encode()
    headers = {"x-api-key": "sk-busy"}
    gate = Gate()
    busy = tenant_of(headers, "")
    held = [engine.pool.submit(busy, gate.job, "running")]
    wait_until(lambda: gate.started == ["running"])
    held.append(engine.pool.submit(busy, gate.job, "waiting"))  # its queue (1) is full now
    try:
        refused = await engine.plan(adapter, headers, body)
        assert refused.body is None and refused.context is None and refused.record.fallback_reason == "overloaded"
        other = await engine.plan(adapter, {"x-api-key": "sk-other"}, body)  # another tenant: planned at once
        assert other.body is not None and b"gateway_search_tools" in other.body
    finally:
        gate.release.set()
        for f in held:
            f.result(5)
        engine.close()
