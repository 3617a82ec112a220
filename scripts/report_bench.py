#!/usr/bin/env python3
"""Peak memory and time of scripts/report.py over a large synthetic telemetry file.

    .venv/bin/python scripts/report_bench.py [--records 1000000] [--dir /tmp/report_bench]

Why: the report must stream any amount of telemetry in bounded memory. This writes
``--records`` records made with the engine's own ``Record``/``SearchRecord`` types (several
APIs, strategies, sessions, searches and fallbacks over a week), runs the report on them in a
child process, and prints the child's peak RSS and wall time, next to the same report over a
file one hundredth the size (the baseline: what the page costs whatever the input).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "addon"), str(ROOT / "scripts")]

from _bench import ratio, section  # noqa: E402

# addon modules (kept together: their paths move with the addon's layout)
from tooldisco.engine.telemetry import Record, SearchRecord  # noqa: E402

APIS = ["anthropic", "openai_chat", "openai_responses", "gemini", "bedrock_converse"]
STRATEGIES = ["tool-search", "tool-search", "relevance", "api", "passthrough"]
REASONS = ["below_threshold", "client_defers: defer_loading", "rewrite_400_original_sent", "no_tools"]
WEEK = 7 * 86400


def write(path: Path, n: int, seed: int = 1) -> None:
    rnd = random.Random(seed)
    start = time.time() - WEEK
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            strategy = rnd.choice(STRATEGIES)
            total = rnd.randint(5, 500)
            before = total * rnd.randint(50, 90)
            record = Record(provider=rnd.choice(APIS), strategy=strategy, session=f"{rnd.randrange(5000):012x}",
                            time=start + WEEK * i / n, total_tools=total, processing_ms=rnd.lognormvariate(1, 0.6),
                            tool_tokens_before=before, tool_tokens_after=before, kept_tools=total)
            if strategy in ("tool-search", "api", "relevance") and rnd.random() > 0.1:
                record.kept_tools = min(total, 8 + rnd.randrange(20))
                record.deferred_tools = total - record.kept_tools
                record.tool_tokens_after = record.kept_tools * 70 + (150 if strategy != "relevance" else 0)
            elif strategy != "passthrough":
                record.fallback_reason = rnd.choice(REASONS)
            if strategy in ("tool-search", "api"):
                for _ in range(min(int(rnd.expovariate(1.5)), 6)):
                    backend = "api" if strategy == "api" else rnd.choice(["bm25", "hybrid"])
                    record.searches.append(SearchRecord(
                        query="create github issue", matched=["mcp__github__create_issue"], backend=backend,
                        latency_ms=rnd.lognormvariate(0, 1), deferred=record.deferred_tools,
                        api_status=200 if backend == "api" else None,
                        api_ms=rnd.lognormvariate(2, 0.5) if backend == "api" else None))
                record.loops = len(record.searches)
                record.loop_added_ms = rnd.lognormvariate(0.5, 0.7) if record.searches else 0.0
            f.write(json.dumps(asdict(record), separators=(",", ":")) + "\n")


def run(path: Path, out: Path) -> tuple[float, float]:
    """(peak RSS MiB, seconds) of one report run in a fresh child process."""
    code = ("import os, resource, runpy, sys; sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
            "rc = 0\ntry: runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit as e: rc = e.code or 0\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "scripts" / "report.py"), str(path), "-o", str(out),
                           "--quiet"], capture_output=True, text=True, check=True)
    seconds = time.perf_counter() - t0
    return int(done.stderr.strip().splitlines()[-1]) / 1024, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/report_bench"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in (max(args.records // 100, 1), args.records):
        path = args.dir / f"telemetry_{n}.jsonl"
        if not path.exists() or sum(1 for _ in path.open()) != n:
            write(path, n)
        rss, seconds = run(path, args.dir / f"report_{n}.html")
        rows.append((n, path.stat().st_size / 2**20, rss, seconds))
    base_rss, base_s = rows[0][2], rows[0][3]
    section("scripts/report.py over synthetic telemetry (baseline: a file one hundredth the size, same run)",
            ["records:", "file MiB:", "peak RSS MiB:", "seconds:", "RSS / baseline:", "time / baseline:"],
            [(f"{n:,}", f"{size:,.1f}", f"{rss:,.0f}", f"{seconds:,.1f}", ratio(rss, base_rss), ratio(seconds, base_s))
             for n, size, rss, seconds in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
