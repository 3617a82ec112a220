#!/usr/bin/env python3
"""Soak: 10,000 requests with distinct messages through the addon; its RSS stays as flat as mitmdump's.

    .venv/bin/python scripts/soak.py [--requests 10000] [--sessions 50] [--backend disk|redis]

The workload of ``scripts/bench_load.py`` (four APIs, streaming and not, four turns in five
searching, every answer echoing its session's marker, every message distinct), ``--sessions``
sessions at once each playing its turns in order, through two real mitmdumps side by side:
plain, and with the addon (tool-search) on the chosen session store. Both load
``scripts/memtrace.py`` (inert until asked), which tells what the addon's byte-bounded caches
hold. Each mitmdump's RSS (psutil, ``bench_memory.Rss``) is read after a warm-up and after
every tenth of the requests, and sampled in between for the peak.

Flat, as ``scripts/bench_memory.py`` judges it, over the second half (the caches have filled
by then): ``addon growth - what its caches hold more <= 1.2 x plain growth + 8 MiB``. Any
error, lost or crossed answer fails the run too.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from _bench import p50_p95, percentile, ratio, table  # noqa: E402
from bench_load import LoadFake, Outcome, clients, close, drive, start_proxy  # noqa: E402
import bench_memory  # noqa: E402
from bench_memory import GROWTH_RATIO, NOISE, TRACE_SCRIPT, MiB, Rss, cached  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

STEPS = 10
WARMUP_TURNS = 2


@dataclass
class Soak:
    target: str
    outcome: Outcome = field(default_factory=Outcome)
    readings: list[tuple[int, int]] = field(default_factory=list)  # (requests so far, RSS)
    caches: list[int] = field(default_factory=list)  # the addon's cache bytes at each reading
    peak: int = 0

    def at(self, i: int) -> int:
        return self.readings[i][1]

    @property
    def half(self) -> int:
        return len(self.readings) // 2

    @property
    def second_half(self) -> int:
        """Growth over the second half, less what the addon's caches took on meanwhile."""
        return self.at(-1) - self.at(self.half) - (self.caches[-1] - self.caches[self.half])


def soak(target: str, fake: LoadFake, tmp: Path, sessions: int, turns_per_step: int, redis_url: str | None,
         step_done: threading.Barrier, steps: int = STEPS) -> Soak:
    """One proxy through the soak; ``step_done`` holds both proxies at each reading (the fake
    forgets its recorded requests there, with nothing in flight)."""
    proxy = start_proxy(target, fake, tmp / target, redis_url, extra_args=("-s", str(TRACE_SCRIPT)))
    rss = Rss(proxy.proc.pid)  # type: ignore[union-attr]
    out = Soak(target)
    run = uuid.uuid4().hex[:8]

    def read() -> None:
        out.readings.append((len(out.outcome.latencies) + len(out.outcome.errors), rss.settled()))
        out.caches.append(cached(proxy))

    async def play() -> None:
        pool = clients(proxy, range(sessions))
        try:
            await drive(pool, run, range(WARMUP_TURNS), Outcome())
            read()
            rss.peak = out.at(0)
            for step in range(steps):
                first = WARMUP_TURNS + step * turns_per_step
                await drive(pool, run, range(first, first + turns_per_step), out.outcome)
                step_done.wait()
                read()
        finally:
            await close(pool)

    try:
        asyncio.run(play())
    finally:
        out.peak = rss.peak
        rss.stop()
        proxy.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000, help="client requests (turns) through each proxy")
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--backend", choices=("disk", "redis"), default="disk")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run (2 sessions, 40 requests) that checks the script works: errors, lost and "
                         "crossed answers still fail it, the flatness bound is reported but not enforced")
    args = ap.parse_args()
    steps = 2 if args.smoke else STEPS  # each reading waits for the proxies to idle
    if args.smoke:
        args.requests, args.sessions = 16, 2
        bench_memory.SETTLE_S = 0.2  # RSS readings: nothing heavy runs in the background
    per_step = max(args.requests // args.sessions // steps, 1)
    with tempfile.TemporaryDirectory(prefix="soak-") as name:
        tmp = Path(name)
        fake = LoadFake(tmp / "fake.log")
        server = RedisServer(tmp / "redis").start() if args.backend == "redis" else None
        try:
            step_done = threading.Barrier(2, action=fake.reset)  # the fake keeps every request it saw
            with ThreadPoolExecutor(2) as pool:  # side by side: RSS is per process, the load drifts alike
                plain, addon = pool.map(lambda t: soak(t, fake, tmp, args.sessions, per_step,
                                                       server.url if server else None, step_done, steps),
                                        ("mitmdump", args.backend))
        finally:
            if server:
                server.stop()
            fake.stop()
    print(f"## soak: {args.sessions} sessions x {per_step * steps} turns through each proxy, "
          f"addon sessions on {args.backend}\n")
    print(table(["requests:", "mitmdump RSS MiB:", "addon RSS MiB:", "addon caches MiB:"],
                [(f"{n:,}", f"{p / MiB:,.1f}", f"{a / MiB:,.1f}", f"{c / MiB:,.1f}")
                 for (n, p), (_, a), c in zip(plain.readings, addon.readings, addon.caches)]))
    base = plain.outcome.latencies
    print()
    print(table(["proxy", "RSS first MiB:", "RSS last MiB:", "RSS max MiB:", "turns/s:", "p50 / p95 ms:",
                 "p95 / mitmdump:", "errors:", "lost:", "crossed:"],
                [(s.target, f"{s.at(0) / MiB:,.1f}", f"{s.at(-1) / MiB:,.1f}", f"{s.peak / MiB:,.1f}",
                  f"{len(s.outcome.latencies) / s.outcome.seconds:,.1f}", p50_p95(s.outcome.latencies, 1000, 0),
                  ratio(percentile(s.outcome.latencies, 95), percentile(base, 95)), len(s.outcome.errors),
                  len(s.outcome.lost), len(s.outcome.crossed)) for s in (plain, addon)]))
    for s in (plain, addon):
        o = s.outcome
        for what in (o.errors, o.lost, o.crossed):
            for line in what[:3]:
                print(f"  - {line}")
    limit = GROWTH_RATIO * max(plain.second_half, 0) + NOISE
    flat = addon.second_half <= limit
    print(f"\nSecond half: addon {addon.second_half / MiB:+,.1f} MiB outside its caches <= {GROWTH_RATIO} x "
          f"mitmdump's {plain.second_half / MiB:+,.1f} + {NOISE / MiB:.0f} = {limit / MiB:,.1f} MiB: "
          f"{'PASS' if flat else 'FAIL'}{' (not enforced: --smoke)' if args.smoke else ''}")
    o = addon.outcome
    ok = (flat or args.smoke) and not (o.errors or o.lost or o.crossed or plain.outcome.errors)
    print(f"\n{'PASS' if ok else 'FAIL'}: soak acceptance")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
