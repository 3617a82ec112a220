"""The priors each tenant's searches rank with, and the lessons its turns teach.

Why in memory first: a search must not wait on the store, and a store written on every turn
would be a write per request. So each tenant's priors are read once and kept for
``refresh_interval`` (then read again: another proxy sharing Redis may have learned), and
lessons gather in memory and are merged into the store by one writer thread every
``flush_interval``, in one atomic read-modify-write per tenant (several proxies learn
together). Everything here is bounded: tenants kept, lessons pending per tenant, and the
stored entry's bytes (``search.priors.Knowledge.bounded``). The store failing costs only
what is learned meanwhile: reads come back blank, the request goes on.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

from loguru import logger

from tooldisco.config import LearningConfig
from tooldisco.search.priors import Knowledge, Lesson, Priors, merge
from tooldisco.state.base import SessionStore

MAX_TENANTS = 1024  # tenants whose priors are kept in memory; the least recently used goes first
MAX_PENDING = 4096  # (terms, tool) pairs waiting per tenant; past it a turn's lesson is dropped
DAY = 86400.0
_EMPTY = Priors(Knowledge())


class Learner:
    """Per tenant: ``priors`` for ranking, ``observe`` for what a turn taught."""

    def __init__(self, config: LearningConfig, store: SessionStore, clock: Callable[[], float] = time.time):
        self.config = config
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshots: OrderedDict[str, tuple[Priors, float]] = OrderedDict()  # tenant -> (priors, read at)
        self._pending: dict[str, Lesson] = {}
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def priors(self, tenant: str) -> Priors | None:
        """The tenant's priors (None: learning off, or no tenant). Blocking when they are not in
        memory or are due a refresh: a store read, bounded by the store's own timeout. Call it
        from a planning thread, never the event loop."""
        if not self.config.enabled or not tenant:
            return None
        now = time.monotonic()
        with self._lock:
            held = self._snapshots.get(tenant)
            if held is not None:
                self._snapshots.move_to_end(tenant)
                if now - held[1] < self.config.refresh_interval:
                    return held[0]
        try:
            priors = Priors(Knowledge.decode(self._store.learned(tenant)))
        except Exception as e:  # a bug in decoding must not fail the request: rank without priors
            logger.opt(exception=e).warning("learned priors could not be read")
            priors = _EMPTY
        self._keep(tenant, priors, now)
        return priors

    def observe(self, tenant: str, lesson: Lesson) -> None:
        """Queue what a turn taught; written by the next flush. Never blocks on the store."""
        if not (self.config.enabled and self.config.learn and tenant and lesson):
            return
        with self._lock:
            pending = self._pending.setdefault(tenant, Lesson())
            if len(pending.positives) + len(pending.negatives) + len(pending.calls) >= MAX_PENDING:
                return
            pending.extend(lesson)
        self._start()

    def flush(self) -> None:
        """Merge every pending lesson into the store, one atomic update per tenant, and keep what
        was written as that tenant's priors."""
        with self._lock:
            pending, self._pending = self._pending, {}
        cfg = self.config
        for tenant, lesson in pending.items():
            try:
                now = self._clock()
                entry = self._store.learn(tenant, partial(_merged, lesson=lesson, now=now,
                                                          half_life=cfg.half_life_days * DAY, most=cfg.max_bytes))
                if entry is not None:
                    self._keep(tenant, Priors(Knowledge.decode(entry)), time.monotonic())
            except Exception as e:  # one tenant's failure must not stop the others' lessons
                logger.opt(exception=e).warning("lessons could not be stored")

    def forget(self, tenant: str | None) -> int:
        """Wipe one tenant's priors (or every tenant's, None), here and in the store."""
        with self._lock:
            if tenant is None:
                self._snapshots.clear()
                self._pending.clear()
            else:
                self._snapshots.pop(tenant, None)
                self._pending.pop(tenant, None)
        return self._store.forget(tenant)

    def close(self) -> None:
        """Write what is pending and stop the writer."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()

    def _keep(self, tenant: str, priors: Priors, at: float) -> None:
        with self._lock:
            self._snapshots[tenant] = (priors, at)
            self._snapshots.move_to_end(tenant)
            while len(self._snapshots) > MAX_TENANTS:
                self._snapshots.popitem(last=False)

    def _start(self) -> None:
        if self._thread is not None or self._closed:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tooldisco-learning", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.config.flush_interval)
            if self._closed:
                return
            self.flush()


def _merged(data: Any, lesson: Any, now: float, half_life: float, most: int) -> Any:
    """``merge`` as the store's change function (one lesson, its time, the settings)."""
    return merge(data, lesson, now, half_life, most)
