"""Worker threads for request planning, shared fairly between tenants and bounded.

Why not ``asyncio.to_thread``: its default pool is one first-come queue shared by the
whole proxy, so one tenant's burst of heavy requests (tens of thousands of tools each)
would make every other tenant's small request wait behind it. Here:

- a tenant occupies at most ``per_tenant`` of the ``workers`` threads, and a free worker
  takes the oldest waiting job of the tenant running the fewest, among equals the one
  served least recently (round robin), so another tenant's request starts at once while a
  heavy one holds its share, and goes before that tenant's backlog;
- each tenant may have at most ``queue`` jobs waiting, and a job not started within
  ``wait`` seconds is given up: either way the caller gets ``Overloaded`` and forwards the
  request unprocessed (fail open) instead of waiting without bound.

Session-store writes after an answer (``run_store``) get a small pool of their own: each is
bounded by the store's timeout, and none waits behind planning or search work.

Why ``switch_interval``: planning is Python holding the GIL, and mitmproxy's one event loop
serves every flow; each time the loop wakes (a socket ready, a TLS record) it waits for the
GIL up to the interpreter's switch interval (5 ms by default), so a small request's dozens
of loop steps queue behind each busy planning thread. A shorter interval hands the GIL back
sooner (``sys.setswitchinterval``: process-wide, it is the proxy's process).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class Overloaded(Exception):
    """The job was not run: its tenant's queue was full, or it waited past ``wait``."""


@dataclass
class _Job:
    seq: int
    tenant: str
    fn: Callable[[], Any]
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)


class FairExecutor:
    """``workers`` threads; per tenant at most ``per_tenant`` running and ``queue`` waiting."""

    def __init__(self, workers: int = 4, per_tenant: int = 1, queue: int = 32, wait: float = 30.0,
                 name: str = "tooldisco-plan") -> None:
        self.workers, self.per_tenant, self.queue, self.wait = workers, max(1, min(per_tenant, workers)), queue, wait
        self._name = name
        self._cond = threading.Condition()
        self._waiting: dict[str, deque[_Job]] = {}  # tenant -> its jobs not started, oldest first
        self._running: dict[str, int] = {}  # tenant -> its jobs running now
        self._served: dict[str, int] = {}  # tenant with jobs running or waiting -> when its last job started
        self._starts = itertools.count(1)
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._seq = itertools.count()
        self._closed = False

    def submit(self, tenant: str, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """Queue ``fn(*args)`` for ``tenant``; raises ``Overloaded`` when its queue is full."""
        with self._cond:
            if self._closed:
                raise Overloaded("the planning pool is closed")
            waiting = self._waiting.setdefault(tenant, deque())
            if len(waiting) >= self.queue:
                raise Overloaded(f"{len(waiting)} requests of this tenant already wait for planning")
            job = _Job(next(self._seq), tenant, partial(fn, *args))
            waiting.append(job)
            if self._idle == 0 and len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            else:
                self._cond.notify()
        return job.future

    async def run(self, tenant: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker; ``Overloaded`` when it could not start within ``wait``
        seconds. A job once started is awaited to its end (it may hold the session store).
        One timer, not ``wait_for`` over ``shield``: two futures and a timeout scope fewer per request."""
        future = self.submit(tenant, fn, *args)
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = future.cancel()  # only a job that has not started can be

        timer = asyncio.get_running_loop().call_later(self.wait, expire)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if expired and not (task is not None and task.cancelling()):
                raise Overloaded(f"not started within {self.wait:g} s") from None
            future.cancel()  # the flow is gone: a job not started yet never runs
            raise
        finally:
            timer.cancel()

    def _next(self) -> _Job | None:
        """The oldest waiting job of the tenant running the fewest, among equals the one served
        least recently; tenants at their cap wait."""
        best: tuple[int, int, int, str] | None = None
        for tenant, jobs in self._waiting.items():
            if not jobs:
                continue
            running = self._running.get(tenant, 0)
            if running >= self.per_tenant:
                continue
            rank = (running, self._served.get(tenant, 0), jobs[0].seq, tenant)
            if best is None or rank < best:
                best = rank
        if best is None:
            return None
        tenant = best[3]
        self._served[tenant] = next(self._starts)
        job = self._waiting[tenant].popleft()
        if not self._waiting[tenant]:
            del self._waiting[tenant]
        self._running[tenant] = self._running.get(tenant, 0) + 1
        return job

    def _work(self) -> None:
        while True:
            with self._cond:
                while (job := self._next()) is None:
                    if self._closed:
                        return
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
            tenant = job.tenant
            try:
                if job.future.set_running_or_notify_cancel():
                    try:
                        job.future.set_result(job.fn())
                    except BaseException as e:  # the caller gets it, as from to_thread
                        job.future.set_exception(e)
            finally:
                with self._cond:
                    self._running[tenant] -= 1
                    if not self._running[tenant]:
                        del self._running[tenant]
                        if tenant not in self._waiting:
                            del self._served[tenant]  # nothing left: its next request is new work
                    if self._waiting:  # a job its cap held back may go now (else waking a worker is waste)
                        self._cond.notify()

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {"threads": len(self._threads), "running": sum(self._running.values()),
                    "waiting": sum(map(len, self._waiting.values()))}

    def close(self) -> None:
        """Workers end once the jobs already queued are done."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def set_switch_interval(seconds: float) -> None:
    """The interpreter's GIL switch interval (see the module doc); never raised above the current one."""
    if 0 < seconds < sys.getswitchinterval():
        sys.setswitchinterval(seconds)


_STORE_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="tooldisco-store")


async def run_store(fn: Callable[..., T], *args: Any) -> T:
    """A session-store call off the event loop, on the store's own threads (see the module doc)."""
    return await asyncio.get_running_loop().run_in_executor(_STORE_POOL, partial(fn, *args))
