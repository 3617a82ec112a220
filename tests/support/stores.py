"""What the session-store tests share: one fake clock for the disk store and diskcache, and
threads hammering one session."""

import os
import threading
import time
from types import SimpleNamespace

import diskcache.core

from tooldisco.state import disk


def fake_clock(monkeypatch, start=1_000.0):
    """One clock for diskcache (wall time) and the store (wall and monotonic)."""
    now = [start]
    monkeypatch.setattr(diskcache.core, "time", SimpleNamespace(time=lambda: now[0], sleep=time.sleep))
    monkeypatch.setattr(disk, "time", SimpleNamespace(time=lambda: now[0], monotonic=lambda: now[0]))
    return now


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
