#!/usr/bin/env python3
"""Crash: kill -9 mitmdump under load, restart it on the same store; sessions resume, the store verifies.

    .venv/bin/python scripts/crash_test.py [--backend disk|redis|both] [--sessions 40] [--kills 3]

The workload of ``scripts/bench_load.py`` (four APIs, streaming and not, each answer echoing
its session's marker) through mitmdump + the addon (tool-search) with its sessions in
diskcache or on a redis-server. ``--kills`` times: every session plays four searching turns,
and once a quarter of them are answered mitmdump gets SIGKILL mid-load; it is started again
on the same port, config and store. Then:

- the store verifies: diskcache's own integrity check, and every session in it (or in Redis)
  reads, with every definition its catalog names;
- every session resumes with a turn that needs no search: that turn's request upstream must
  carry every tool the session found in its turns answered before the kill, and be a single
  round (no new search).

Requests cut by the kill (in flight, or sent while mitmdump was down) are counted apart; any
other error, lost or crossed answer, unreadable session or missing tool fails the run.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import diskcache
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "addon"), str(ROOT / "scripts")]

from _bench import table  # noqa: E402
from bench_load import LoadFake, Outcome, clients, close, drive, marker, searches, start_proxy  # noqa: E402
from tests.e2e.harness import MitmDump  # noqa: E402
from tests.fakeprovider import SEARCH_TOOL  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

# addon modules (kept together: their paths move with the addon's layout)
from tooldisco.config import RedisSettings  # noqa: E402
from tooldisco.state.redis import RedisSessionStore  # noqa: E402
from tooldisco.state.base import SessionState, SessionStore  # noqa: E402
from tooldisco.state.disk import DiskSessionStore  # noqa: E402

TURNS_PER_ROUND = 5  # four searching turns, then the resume turn (bench_load: t % 5 == 4 searches not)
SESSION_KEY = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Verdict:
    backend: str
    answered: int = 0
    cut: int = 0  # requests the kill cut (in flight or sent while down)
    outcome: Outcome = field(default_factory=Outcome)
    resumed: int = 0
    checked: int = 0  # resumed sessions that had found tools before the kill (their tools checked)
    resumed_without_found: list[str] = field(default_factory=list)
    searched_on_resume: list[str] = field(default_factory=list)
    sessions_read: int = 0
    unreadable: list[str] = field(default_factory=list)
    integrity: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        o = self.outcome
        return not (o.errors or o.lost or o.crossed or self.resumed_without_found or self.searched_on_resume
                    or self.unreadable or self.integrity) and self.checked > 0


def verify_disk(directory: Path, v: Verdict) -> None:
    """diskcache's integrity check, then every session read through the store."""
    with diskcache.Cache(str(directory)) as cache:
        v.integrity += [str(w.message) for w in cache.check()]
        keys = [k for k in cache.iterkeys() if isinstance(k, str) and SESSION_KEY.match(k)]
    store = DiskSessionStore(directory)
    try:
        check_sessions(store, keys, v)
    finally:
        store.close()


def verify_redis(url: str, v: Verdict) -> None:
    settings = RedisSettings(url=url)
    raw = redis.Redis.from_url(url)
    keys = [k.decode()[len(settings.prefix):] for k in raw.scan_iter(match=f"{settings.prefix}*", count=1000)]
    raw.close()
    store = RedisSessionStore(settings)
    try:
        check_sessions(store, [k for k in keys if SESSION_KEY.match(k)], v)
    finally:
        store.close()


def check_sessions(store: SessionStore, keys: list[str], v: Verdict) -> None:
    for key in keys:
        state = store.get(key)
        if state == SessionState():
            v.unreadable.append(f"{key}: reads as blank")
        v.sessions_read += 1


def tool_names(rec: dict) -> list[str]:
    return list(rec.get("tool_names") or [])


class Upstream:
    """The fake's records of this run, by (session, turn), fetched as they come (``?since=``)."""

    def __init__(self, fake: LoadFake, run: str):
        self.fake, self.run, self.last = fake, run, 0
        self.rounds: dict[tuple[int, int], list[dict]] = defaultdict(list)

    def fetch(self) -> None:
        for rec in self.fake.control.get("/_requests", params={"since": self.last}).json()["requests"]:
            self.last = max(self.last, rec["index"])
            if m := re.search(rf"\[bench-session {self.run}-(\d{{5}})\] turn (\d+)", rec.get("text") or ""):
                self.rounds[(int(m.group(1)), int(m.group(2)))].append(
                    {k: rec.get(k) for k in ("tool_names", "reply")})

    def found(self, answered: set[tuple[int, int]]) -> dict[int, set[str]]:
        """session -> the tools its answered searching turns found (what a turn's last round
        upstream had that its first had not)."""
        out: dict[int, set[str]] = defaultdict(set)
        for (s, t), recs in self.rounds.items():
            if (s, t) in answered and searches(t) and len(recs) >= 2:
                out[s] |= set(tool_names(recs[-1])) - set(tool_names(recs[0]))
        return out


def run_backend(backend: str, sessions: int, kills: int, tmp: Path) -> Verdict:
    v = Verdict(backend)
    fake = LoadFake(tmp / f"fake-{backend}.log")
    server = RedisServer(tmp / f"redis-{backend}").start() if backend == "redis" else None
    proxy = start_proxy(backend, fake, tmp / backend, server.url if server else None)
    run = uuid.uuid4().hex[:8]
    upstream = Upstream(fake, run)
    answered: set[tuple[int, int]] = set()
    try:
        for k in range(kills):
            first = k * TURNS_PER_ROUND
            asyncio.run(load_and_kill(proxy, run, sessions, range(first, first + TURNS_PER_ROUND - 1), answered, v))
            proxy.start(port=proxy.port)  # same port, config and store
            if backend == "disk":
                verify_disk(tmp / backend / "sessions", v)
            else:
                verify_redis(server.url, v)  # type: ignore[union-attr]
            upstream.fetch()
            found = upstream.found(answered)
            resume = first + TURNS_PER_ROUND - 1
            assert not searches(resume)
            asyncio.run(resume_all(proxy, run, sessions, resume, v))
            upstream.fetch()
            check_resumed(upstream, found, resume, v)
    finally:
        proxy.stop()
        if server:
            server.stop()
        fake.stop()
    return v


async def load_and_kill(proxy: MitmDump, run: str, sessions: int, turns: range, answered: set[tuple[int, int]],
                        v: Verdict) -> None:
    """All sessions play ``turns``; once a quarter of those turns are answered, SIGKILL."""
    done = 0
    killed = False

    def after_turn(s: int, t: int, ok: bool) -> None:
        nonlocal done
        if ok:
            answered.add((s, t))
            v.answered += 1
        done += 1

    pool = clients(proxy, range(sessions))
    out = Outcome()
    load = asyncio.ensure_future(drive(pool, run, turns, out, after_turn=after_turn, stop=lambda: killed))
    while done < sessions * len(turns) // 4 and not load.done():
        await asyncio.sleep(0.01)
    await asyncio.to_thread(proxy.kill)
    killed = True
    await load
    await close(pool)
    v.cut += len(out.errors)  # only the kill can have cut them: anything else would have shown before it
    v.outcome.lost += out.lost
    v.outcome.crossed += out.crossed


async def resume_all(proxy: MitmDump, run: str, sessions: int, turn: int, v: Verdict) -> None:
    pool = clients(proxy, range(sessions))
    out = Outcome()

    def after_turn(s: int, t: int, ok: bool) -> None:
        v.resumed += ok

    await drive(pool, run, range(turn, turn + 1), out, after_turn=after_turn)
    await close(pool)
    v.outcome.errors += out.errors
    v.outcome.lost += out.lost
    v.outcome.crossed += out.crossed


def check_resumed(upstream: Upstream, found: dict[int, set[str]], turn: int, v: Verdict) -> None:
    for s, tools in found.items():
        v.checked += 1
        recs = upstream.rounds.get((s, turn), [])
        if len(recs) != 1 or any(c.get("name") == SEARCH_TOOL for c in (recs[0].get("reply") or {}).get("calls", [])):
            v.searched_on_resume.append(f"{marker(upstream.run, s)}: {len(recs)} rounds upstream")
        elif missing := tools - set(tool_names(recs[0])):
            v.resumed_without_found.append(f"{marker(upstream.run, s)}: {sorted(missing)} not loaded")


def report(verdicts: list[Verdict], sessions: int, kills: int) -> bool:
    print(f"## kill -9 under load: {sessions} sessions, {kills} kills per store\n")
    print(table(["store", "turns answered:", "cut by the kills:", "other errors:", "lost:", "crossed:",
                 "sessions resumed:", "with found tools:", "of them without one loaded:", "new searches on resume:",
                 "sessions read back:", "unreadable:", "integrity"],
                [(v.backend, v.answered, v.cut, len(v.outcome.errors), len(v.outcome.lost), len(v.outcome.crossed),
                  v.resumed, v.checked, len(v.resumed_without_found), len(v.searched_on_resume), v.sessions_read,
                  len(v.unreadable), "ok" if not v.integrity else "; ".join(v.integrity)[:200]) for v in verdicts]))
    print()
    for v in verdicts:
        print(f"- {v.backend}: {'PASS' if v.ok else 'FAIL'}")
        for what in (v.outcome.errors, v.outcome.lost, v.outcome.crossed, v.resumed_without_found,
                     v.searched_on_resume, v.unreadable):
            for line in what[:3]:
                print(f"  - {line}")
    return all(v.ok for v in verdicts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("disk", "redis", "both"), default="both")
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--kills", type=int, default=3)
    args = ap.parse_args()
    backends = ("disk", "redis") if args.backend == "both" else (args.backend,)
    with tempfile.TemporaryDirectory(prefix="crash-test-") as name:
        verdicts = [run_backend(b, args.sessions, args.kills, Path(name)) for b in backends]
    ok = report(verdicts, args.sessions, args.kills)
    print(f"\n{'PASS' if ok else 'FAIL'}: crash acceptance")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
