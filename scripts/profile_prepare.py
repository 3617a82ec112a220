"""Profile ``Engine.prepare`` on one large Anthropic tool-search request (cProfile).

Usage: python scripts/profile_prepare.py [TOOLS] [REPEATS] [--no-profile]. Prints a table of
the wall time of each call (turns of one session: the first builds and stores what later ones
reuse) against the stdlib json floor on the same body (``json.loads`` + ``json.dumps``, timed
in the same run) and, profiled, the top functions by cumulative time, so a hot spot that grows
faster than the body shows up.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "addon"), str(ROOT), str(ROOT / "scripts")]

from _bench import ratio, section  # noqa: E402
from tests.support.catalog import anthropic_tools  # noqa: E402

# addon modules (kept together: their paths move with the addon's layout)
from tooldisco.config import parse  # noqa: E402
from tooldisco.engine.engine import Engine  # noqa: E402
from tooldisco.apis.registry import detect  # noqa: E402


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    profile = "--no-profile" not in sys.argv
    n = int(args[0]) if args else 20_000
    repeats = int(args[1]) if len(args) > 1 else 3
    tools = anthropic_tools(n)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "search": {"backend": "bm25"}}},
               "sessions": {"dir": f"{tmp}/s"}, "telemetry": {"enabled": False}}
        engine = Engine(parse(cfg))
        adapter = detect("POST", "/v1/messages", "api.anthropic.com")
        prof = cProfile.Profile()
        rows = []
        for i in range(repeats):
            body = json.dumps({"model": "m", "max_tokens": 9, "tools": tools, "messages": [
                {"role": "user", "content": f"weather forecast for Paris {uuid.uuid4().hex}"}]}).encode()
            headers = {"x-api-key": "sk-profile", "x-claude-code-session-id": "one-session"}  # its turns
            began = time.perf_counter()
            if profile:
                prof.enable()
            prepared = engine.prepare(adapter, headers, body)
            if profile:
                prof.disable()
            took = time.perf_counter() - began
            began = time.perf_counter()
            json.dumps(json.loads(body)).encode()
            floor = time.perf_counter() - began
            rows.append((i, f"{took * 1000:.1f}", f"{floor * 1000:.1f}", ratio(took, floor, 1), f"{len(body):,}",
                         f"{len(prepared.body or b''):,}",
                         (prepared.record.fallback_reason if prepared.record else "") or ""))
        engine.close()
    section(f"Engine.prepare, {n:,} tools, one session (ms; baseline: the stdlib json floor on the same body)",
            ["call:", "prepare:", "json floor:", "prepare / floor:", "bytes in:", "bytes out:", "fallback"], rows)
    if profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
