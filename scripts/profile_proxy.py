#!/usr/bin/env python3
"""Where a real mitmdump + the addon spends its CPU under a load of large-catalog turns (py-spy).

    .venv/bin/python scripts/profile_proxy.py [--tools 500] [--turns 40] [--apis anthropic,chat,...]
        [--kinds json,stream] [--rate 500] [--top 30] [--raw FILE]

The fake provider (its own process, unpaced) behind mitmdump + the addon on the shipped config,
mitmdump started under ``py-spy record`` (sampling every thread, idle ones left out, so a sample
is CPU spent). One kept-alive client sends ``--turns`` turns per API and answer kind (JSON,
streamed; ``bench_overhead``'s workload: no search, sessions of ``--session-turns`` turns). Prints
the samples by part of the proxy and the hottest functions, with the planning of requests
(``Engine.prepare``: its own profile is ``scripts/profile_prepare.py``) counted apart, so what
is left is the hooks, the relay, the stream codecs, the loop, telemetry, logging and mitmproxy
itself. ``--raw`` keeps py-spy's collapsed stacks (a flame graph's input).

py-spy is in the dev extra; it starts mitmdump itself (attaching to a running process needs
ptrace rights a container may not give).
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "addon"), str(ROOT), str(ROOT / "scripts")]

import bench_ttfb  # noqa: E402
from _bench import section  # noqa: E402
from bench_overhead import CPU_APIS, KINDS, STREAM_EVENTS, api_of, turn_request  # noqa: E402
from tests.e2e.harness import ADDON_PATH, MitmDump  # noqa: E402

PY_SPY = Path(sys.executable).parent / "py-spy"
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")
# The planning of a request: the lead's half, profiled by itself in scripts/profile_prepare.py.
PLANNING = ("Planner.prepare (tooldisco/engine/planner.py", "Engine.prepare (tooldisco/engine/engine.py")
STARTUP = ("Script.loadscript (mitmproxy/addons/script.py", "_find_and_load (<frozen importlib._bootstrap>")


class SpiedMitmDump(MitmDump):
    """mitmdump started under ``py-spy record``; ``stop`` ends mitmdump, then py-spy writes."""

    def __init__(self, *args, output: Path, rate: int, gil: bool, native: bool, **kw) -> None:
        super().__init__(*args, **kw)
        self.output, self.rate, self.gil, self.native = output, rate, gil, native

    def command(self, port: int = 0) -> list[str]:
        return [str(PY_SPY), "record", "--format", "raw", "--output", str(self.output), "--rate", str(self.rate),
                *(["--native"] if self.native else ["--nonblocking"]), "--threads",
                *(["--gil"] if self.gil else []), "--", *super().command(port)]

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.proc is not None and self.proc.poll() is None:
            for child in psutil.Process(self.proc.pid).children():
                child.send_signal(signal.SIGTERM)  # mitmdump's done hooks run; py-spy then writes its file
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return super().stop(timeout)


def load(proxy: MitmDump, tools: int, turns: int, apis: list[str], kinds: list[str], session_turns: int) -> int:
    sent = 0
    with httpx.Client(proxy=proxy.url, verify=proxy.ssl_context(), trust_env=False,
                      timeout=httpx.Timeout(120.0, connect=30.0)) as client:
        for tag in apis:
            for kind in kinds:
                for i in range(turns):
                    req = turn_request(tag, kind == "stream",
                                       f"{bench_ttfb.QUESTION} [plain-turn {uuid.uuid4().hex[:12]}]", tools)
                    if i % session_turns == 0:
                        session = uuid.uuid4().hex
                    headers = {**req.headers, "x-session-id": session}
                    with client.stream("POST", req.url, content=req.body, headers=headers) as r:
                        raw = r.read()
                    text = bench_ttfb.visible(api_of(tag), raw) if kind == "stream" else raw.decode("utf-8", "replace")
                    if r.status_code != 200 or bench_ttfb.DONE not in text:
                        raise RuntimeError(f"{tag} {kind}: HTTP {r.status_code} {raw[:300]!r}")
                    sent += 1
    return sent


def frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) of each frame, outermost first; the thread's own frame dropped."""
    out = []
    for part in stack.split(";"):
        m = FRAME.match(part)
        if m:
            out.append((m.group("func"), m.group("file")))
    return out


def ours(file: str) -> bool:
    return file.startswith("tooldisco/") or "/tooldisco/" in file


def part_of(stack: list[tuple[str, str]]) -> str:
    """Which part of the proxy a sample's innermost frame of the addon belongs to."""
    text = [f"{func} ({file}" for func, file in stack]
    if any(t.startswith(STARTUP) for t in text):
        return "startup (imports, config, scripts loading)"
    if any(t.startswith(PLANNING) for t in text):
        return "planning (Engine.prepare)"
    for _, file in reversed(stack):
        if ours(file):
            return "tooldisco/" + file.rpartition("tooldisco/")[2]
    if any(file.startswith("mitmproxy/") for _, file in stack):
        return "mitmproxy (no tooldisco frame)"
    return "other (no tooldisco or mitmproxy frame)"


def report(raw: Path, turns: int, top: int) -> None:
    samples: list[tuple[list[tuple[str, str]], int]] = []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            samples.append((frames(stack), int(count)))
    total = sum(n for _, n in samples) or 1
    parts: Counter[str] = Counter()
    own: Counter[str] = Counter()  # self samples, planning left out
    inclusive: Counter[str] = Counter()  # tooldisco functions, planning left out
    for stack, n in samples:
        part = part_of(stack)
        parts[part] += n
        if part.startswith(("planning", "startup")) or not stack:
            continue
        func, file = stack[-1]
        own[f"{func} ({short(file)})"] += n
        for name in {f"{func} ({short(file)})" for func, file in stack if ours(file)}:
            inclusive[name] += n

    section(f"Samples by part of the proxy ({total:,} samples, {turns} turns; a share of the process's CPU)",
            ["part", "samples:", "share:"], [(p, f"{n:,}", f"{n / total:.1%}") for p, n in parts.most_common()])
    section(f"Hottest functions by own time, planning left out (top {top})",
            ["function", "samples:", "share:"], [(f, f"{n:,}", f"{n / total:.1%}") for f, n in own.most_common(top)])
    section(f"tooldisco functions by inclusive time, planning left out (top {top})",
            ["function", "samples:", "share:"],
            [(f, f"{n:,}", f"{n / total:.1%}") for f, n in inclusive.most_common(top)])


def short(file: str) -> str:
    return file.rpartition("tooldisco/")[2] if ours(file) else file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", type=int, default=500)
    ap.add_argument("--turns", type=int, default=40, help="turns per API and answer kind")
    ap.add_argument("--apis", default=",".join(CPU_APIS), help="comma-separated, of " + ", ".join(CPU_APIS))
    ap.add_argument("--kinds", default=",".join(KINDS), help="json, stream or both")
    ap.add_argument("--session-turns", type=int, default=5, help="turns per session (1: every turn a new session)")
    ap.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--gil", action="store_true",
                    help="sample only the thread holding the GIL (Python's own CPU, attributed exactly; the time "
                         "threads spend waiting for the GIL, and C code that released it, left out)")
    ap.add_argument("--native", action="store_true",
                    help="C frames too (the garbage collector, TLS, the JSON scanner); py-spy then pauses the "
                         "process at each sample")
    ap.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks in this file")
    ap.add_argument("--plain", action="store_true",
                    help="profile plain mitmdump instead (bench_overhead's baseline: it only streams event streams)")
    args = ap.parse_args()
    apis, kinds = [a for a in args.apis.split(",") if a], [k for k in args.kinds.split(",") if k]
    if not PY_SPY.exists():
        sys.exit(f"py-spy is not installed in {sys.prefix}: pip install py-spy (the dev extra has it)")
    with tempfile.TemporaryDirectory(prefix="profile_proxy_") as name:
        tmp = Path(name)
        bench_ttfb.aws_chain(tmp)
        fake = bench_ttfb.Fake(0.0, tmp / "fake.log")
        raw = args.raw or tmp / "stacks.txt"
        if args.plain:
            (tmp / "stream_events.py").write_text(STREAM_EVENTS)
            setup = {"script": tmp / "stream_events.py", "name": "plain"}
        else:
            setup = {"script": ADDON_PATH, "config": bench_ttfb.addon_config, "name": "addon"}
        proxy = SpiedMitmDump(tmp / "proxy", fake.url, output=raw, rate=args.rate, gil=args.gil,
                              native=args.native, **setup)
        try:
            fake.reset(0.0)
            proxy.start()
            load(proxy, args.tools, 2, apis, kinds, args.session_turns)  # warm-up: imports, connections, first index builds
            t0 = time.monotonic()
            sent = load(proxy, args.tools, args.turns, apis, kinds, args.session_turns)
            print(f"{sent} turns in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        finally:
            proxy.stop()
            fake.stop()
        deadline = time.monotonic() + 30
        while not raw.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not raw.exists():
            sys.exit(f"py-spy wrote nothing; mitmdump's log:\n{proxy.log_text()[-3000:]}")
        report(raw, sent, args.top)


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as e:
        sys.exit(str(e))
