#!/usr/bin/env python3
"""Fairness and store faults: one tenant's huge requests against another's small ones, and a
session store locked by another process, through a real mitmdump with the addon.

    .venv/bin/python scripts/bench_fairness.py [--heavy 6] [--tools 20000] [--seconds 30]
        [--lock 10] [--addon PATH]

- fairness: ``--heavy`` requests of ``--tools`` tools each (tenant A, Anthropic tool-search,
  each its own session, sent again as soon as answered) stay in flight for ``--seconds``
  while tenant B sends small requests (60 tools) one after the other. Reported: B's latency
  p50/p95/max and A's, against B's own latency with nothing else in flight (the baseline,
  measured first on the same proxy). Acceptance: B's p95 <= 500 ms.
- lock: another process holds SQLite's write lock on ``cache.db`` (``BEGIN IMMEDIATE``) for
  ``--lock`` seconds while tenant B keeps sending; reported: B's latency max (acceptance: the
  store's timeout plus normal latency).

``--addon``: another checkout's ``addon/tool_discovery.py`` (e.g. the code before a fix) to
compare; its config then leaves out keys it may not know.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from _bench import percentile, ratio, section  # noqa: E402
from tests.e2e.harness import ADDON_PATH, MitmDump  # noqa: E402
from tests.fakeprovider import FakeProvider  # noqa: E402
from tests.support.catalog import anthropic_tools  # noqa: E402


def body(text: str, tools: list[dict]) -> bytes:
    return json.dumps({"model": "claude-x", "max_tokens": 64, "tools": tools,
                       "messages": [{"role": "user", "content": text}]}).encode()


def row(name: str, took: list[float], baseline: list[float]) -> tuple:
    return (name, len(took), f"{percentile(took, 50) * 1000:.0f}", f"{percentile(took, 95) * 1000:.0f}",
            f"{max(took, default=float('nan')) * 1000:.0f}",
            ratio(percentile(took, 95), percentile(baseline, 95)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heavy", type=int, default=6)
    ap.add_argument("--tools", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--lock", type=float, default=10)
    ap.add_argument("--addon", type=Path, default=ADDON_PATH)
    ap.add_argument("--extra", default="", help="YAML appended to the addon's config (e.g. a planning: section)")
    args = ap.parse_args()
    light_tools = anthropic_tools(60)
    heavy_tools = anthropic_tools(args.tools)
    with FakeProvider(stream_delay=0) as fake, tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        config = (f"pipes:\n  tool_discovery:\n    enabled: true\n    strategy: tool-search\n"
                  f"sessions:\n  dir: {tmp}/sessions\ntelemetry:\n  enabled: false\n{args.extra}")
        proxy = MitmDump(Path(tmp) / "mitm", fake.url, script=args.addon, config=config).start()
        import httpx

        def post(data: bytes, key: str, timeout: float = 300) -> float:
            began = time.monotonic()
            with httpx.Client(proxy=proxy.url, verify=proxy.ssl_context(), timeout=timeout, trust_env=False) as c:
                r = c.post("https://api.anthropic.com/v1/messages", content=data,
                           headers={"x-api-key": key, "anthropic-version": "2023-06-01",
                                    "content-type": "application/json"})
            if r.status_code != 200:
                print("error", r.status_code, r.text[:200])
            return time.monotonic() - began

        try:
            post(body("warm-up", light_tools), "sk-ant-light")
            # --- baseline: the light tenant alone
            alone: list[float] = []
            stop = time.monotonic() + max(1.0, args.seconds / 3)
            while time.monotonic() < stop:
                alone.append(post(body(f"alone [{uuid.uuid4().hex[:8]}]", light_tools), "sk-ant-light"))
                time.sleep(0.1)
            # --- fairness
            stop = time.monotonic() + args.seconds
            heavy_took: list[float] = []
            light_took: list[float] = []

            def heavy(i: int) -> None:
                data = body(f"heavy session {i} [{uuid.uuid4().hex}]", heavy_tools)  # its turns: one session
                while time.monotonic() < stop:
                    heavy_took.append(post(data, "sk-ant-heavy"))

            threads = [threading.Thread(target=heavy, args=(i,)) for i in range(args.heavy)]
            for t in threads:
                t.start()
            time.sleep(min(2.0, args.seconds / 3))  # the heavy requests are in flight
            while time.monotonic() < stop or not light_took:
                light_took.append(post(body(f"light [{uuid.uuid4().hex[:8]}]", light_tools), "sk-ant-light"))
                time.sleep(0.1)
            for t in threads:
                t.join()
            # --- lock
            db = Path(tmp) / "sessions" / "cache.db"
            other = sqlite3.connect(db, isolation_level=None, timeout=30)
            other.execute("BEGIN IMMEDIATE")
            locked_took: list[float] = []
            try:
                stop = time.monotonic() + args.lock
                while time.monotonic() < stop or not locked_took:
                    locked_took.append(post(body(f"locked [{uuid.uuid4().hex[:8]}]", light_tools), "sk-ant-light",
                                            timeout=120))
            finally:
                other.execute("ROLLBACK")
                other.close()
            section("Latency (ms; baseline: the light tenant alone on the same proxy)",
                    ["run", "requests:", "p50:", "p95:", "max:", "p95 / alone:"],
                    [row("light tenant alone (baseline)", alone, alone),
                     row(f"light tenant, {args.heavy} x {args.tools}-tool requests of another in flight",
                         light_took, alone),
                     row("heavy tenant", heavy_took, alone),
                     row(f"light tenant, store locked by another process for {args.lock:g} s", locked_took, alone)])
            log = proxy.log_text()
            print(f"\nlog: {log.count('planning is overloaded')} overload warnings, "
                  f"{log.count('forwarding the request unchanged')} failures, "
                  f"{log.count('session store at')} store lines")
        finally:
            proxy.stop()


if __name__ == "__main__":
    main()
