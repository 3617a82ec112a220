#!/usr/bin/env python3
"""Memory of the running proxy: RSS growth over many distinct requests, and what huge bodies leave.

    .venv/bin/python scripts/bench_memory.py [--requests 10000] [--threads 6] [--huge 12] [--large 200] [--trace]

Three proxies, each a real mitmdump (``tests/e2e/harness.py``) in front of the fake provider
(``tests/fakeprovider``, in its own process, unpaced): plain mitmdump, mitmdump + the addon on
the shipped ``configs/tool_discovery.yaml`` (tool-search) and on ``configs/relevance.yaml``,
each with only ``sessions.dir`` and ``telemetry.path`` moved into a temp dir. The three run
side by side (two cores: one proxy alone leaves the other idle); RSS is each mitmdump
process's own, read with psutil, so they do not disturb each other's figures.

(a) Steady traffic: ``--requests`` requests from ``--threads`` kept-alive clients, every user
message distinct (2-5 KB, one in 2,000 of 300 KB), 60 tools, mixed APIs (Anthropic JSON and
SSE, Chat JSON and SSE, Gemini JSON), 16 API keys, one request in ten making the model search
(a phantom round under tool-search). RSS after a 200-request warm-up, halfway, at the end.
(b) Huge bodies: a fresh proxy, a short warm-up, then ``--huge`` requests of 30 MB one at a
time (a pasted log as the user message, or 60 tools with 500 KB descriptions), RSS sampled
throughout: the peak, and what is left once they are done.
(c) Distinct large messages: a fresh proxy, a short warm-up, then ``--large`` requests from
two kept-alive clients, each with a user message of 300 KB no other request has and the 60
tools (the APIs in turn). RSS after the warm-up, its peak, right after the last answer and
once settled. Its acceptance is the plain one: what the addon leaves is within plain
mitmdump's + 40 MiB, caches included (``LARGE_BOUND``).

Every proxy also loads ``scripts/memtrace.py`` (inert until asked), which reports what the
addon's byte-bounded caches (``tooldisco.core.bytecache``) hold, and at the end runs glibc's
``malloc_trim``: the RSS left after it is what live objects (and pymalloc) hold. (The addon
trims its heaps itself every 2 s, ``tooldisco.core.allocator``; plain mitmdump does not.)
Each reading waits until the proxy has been idle for a second ("busy after, s": an index
build of a huge catalog goes on after its request was answered), so it reads what is left,
not work in progress.

Acceptance, against plain mitmdump measured in the same run, for (a) the growth and for (b)
what is left behind (for (c), above): ``addon_growth - cache_growth <= 1.2 * plain_growth + 8 MiB``.
``cache_growth`` is what the addon's caches hold more at the end than at the start, as they
charge themselves (each has a byte budget; filling it is by design, so it is not counted);
everything else must track plain mitmdump. 8 MiB: two RSS readings of one steady state differ
by a few MiB (pymalloc frees a 1 MiB arena only when it is empty, glibc trims its heaps only
from the top); it is not sized to cover any measured excess.

``--trace`` adds tracemalloc over the second half of (a) (caches are full by then) and over all
of (b) and (c): the allocation sites that grew, and pymalloc's arenas against its live blocks. Slow,
and tracemalloc's own memory is in the RSS figures.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import _bench as bench  # noqa: E402
from tests.e2e.harness import ADDON_PATH, MitmDump, scrubbed_env  # noqa: E402
from tests.fakeprovider import reply, search  # noqa: E402
from tests.support.catalog import anthropic_tools  # noqa: E402

MiB = 1 << 20
# Two RSS readings of one steady state differ by a few MiB: pymalloc frees an arena (1 MiB)
# only when it is empty, glibc trims its heaps only from the top.
NOISE = 8 * MiB
GROWTH_RATIO = 1.2
WARMUP = 200
HUGE_BYTES = 30 * MiB
BIG_MESSAGE = 300 * 1024
BIG_EVERY = 2000  # one user message in this many is 300 KB
LARGE_CLIENTS = 2  # (c): kept-alive clients sending the distinct 300 KB messages
LARGE_BOUND = 40 * MiB  # (c): what the addon leaves, at most plain mitmdump's growth + this
SEARCH_EVERY = 10  # one request in this many makes the model search
TENANTS = 16
RESET_BYTES = 16 * MiB  # the fake keeps every request it saw: forget them after this many bytes
CLIENT_TIMEOUT_S = 600.0  # a 30 MB body through a traced proxy takes minutes
SETTLE_S = 2.0  # background work (telemetry writer, index builds) ends before a reading
IDLE_CPU_S = 0.05  # at most this much CPU in a second: the proxy is idle
MAX_SETTLE_S = 900.0
SEARCH_MARK = "#bench-search#"
TRACE_SCRIPT = ROOT / "scripts" / "memtrace.py"
TRACE_HOST = "memtrace.invalid"
CONFIGS = {"tool-search": ROOT / "configs" / "tool_discovery.yaml", "relevance": ROOT / "configs" / "relevance.yaml"}
TARGETS = ("mitmdump", "tool-search", "relevance")
WORDS = (
    "the deployment failed again after the config change please check the logs and tell me which service "
    "broke the build we need a summary of open tickets for the payments team and the invoice export plus "
    "the weather forecast for Paris next week and a list of calendar events with the customer contracts "
    "database query slow index missing on orders table cache eviction metric alert dashboard pipeline "
    "container volume snapshot certificate renewal dns record firewall rule queue backlog webhook retry"
).split()
GEMINI = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"


# --- traffic ------------------------------------------------------------------------------------


def message(i: int, size: int) -> str:
    """A user message no other request has: words drawn from a seed of ``i``, with ``i`` in it."""
    rng = random.Random(i)
    parts = [f"[request {i}]"] + ([SEARCH_MARK] if i % SEARCH_EVERY == 3 else [])
    length = sum(map(len, parts))
    while length < size:
        word = rng.choice(WORDS) if rng.random() < 0.8 else f"{rng.choice(WORDS)}{rng.randrange(10**6)}"
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts)


def pasted_log(i: int, size: int) -> str:
    """``size`` bytes of a distinct service log: what a user pastes; many distinct tokens."""
    line = 0
    out: list[str] = []
    length = 0
    while length < size:
        text = f"2026-11-03T12:{line // 3600 % 60:02d}:{line % 60:02d}Z worker-{line % 17} order {i}-{line} status ok\n"
        out.append(text)
        length += len(text)
        line += 1
    return "".join(out)


@dataclass(frozen=True)
class Api:
    """One request shape: where it goes and how its body wraps the tools and the user text."""

    name: str
    url: str
    body: Callable[[list[dict[str, Any]], str], dict[str, Any]]  # (anthropic-shaped tools, text) -> body
    headers: Callable[[str], dict[str, str]]  # API key -> headers


def _openai(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"]}} for t in tools]


def _anthropic_body(stream: bool) -> Callable[[list[dict[str, Any]], str], dict[str, Any]]:
    return lambda tools, text: {"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": stream, "tools": tools,
                                "messages": [{"role": "user", "content": text}]}


def _chat_body(stream: bool) -> Callable[[list[dict[str, Any]], str], dict[str, Any]]:
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    return lambda tools, text: {"model": "gpt-5", "stream": stream, **extra, "tools": _openai(tools),
                                "messages": [{"role": "user", "content": text}]}


def _gemini_body(tools: list[dict[str, Any]], text: str) -> dict[str, Any]:
    decls = [{"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
             for t in tools]
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], "tools": [{"functionDeclarations": decls}]}


JSON = {"content-type": "application/json"}
ANTHROPIC_HEADERS = lambda key: {**JSON, "x-api-key": f"sk-ant-{key}", "anthropic-version": "2023-06-01"}  # noqa: E731
OPENAI_HEADERS = lambda key: {**JSON, "authorization": f"Bearer sk-{key}"}  # noqa: E731
APIS = (
    Api("anthropic-json", "https://api.anthropic.com/v1/messages", _anthropic_body(False), ANTHROPIC_HEADERS),
    Api("anthropic-sse", "https://api.anthropic.com/v1/messages", _anthropic_body(True), ANTHROPIC_HEADERS),
    Api("chat-json", "https://api.openai.com/v1/chat/completions", _chat_body(False), OPENAI_HEADERS),
    Api("chat-sse", "https://api.openai.com/v1/chat/completions", _chat_body(True), OPENAI_HEADERS),
    Api("gemini-json", GEMINI, _gemini_body, lambda key: {**JSON, "x-goog-api-key": f"AIza-{key}"}),
)
TOOLS = anthropic_tools(60)


@dataclass(frozen=True)
class Request:
    url: str
    headers: dict[str, str]
    body: bytes


def steady(i: int) -> Request:
    """Request ``i`` of the steady traffic: API, tenant and message size all follow from ``i``."""
    api = APIS[i % len(APIS)]
    size = BIG_MESSAGE if i % BIG_EVERY == BIG_EVERY - 1 else 2000 + (i * 7919) % 3000
    body = json.dumps(api.body(TOOLS, message(i, size))).encode()
    return Request(api.url, api.headers(f"bench-tenant-{i % TENANTS}"), body)


def large(i: int) -> Request:
    """Request ``i`` of (c): a distinct 300 KB user message with the 60 tools, the APIs in turn."""
    api = APIS[i % len(APIS)]
    body = json.dumps(api.body(TOOLS, message(i, BIG_MESSAGE))).encode()
    return Request(api.url, api.headers(f"bench-tenant-{i % TENANTS}"), body)


def huge(i: int) -> Request:
    """Huge request ``i``: a 30 MB pasted log as the message (Anthropic JSON and SSE, Gemini), or
    the 60 tools with 500 KB descriptions each (Chat)."""
    api = (APIS[0], APIS[1], APIS[2], APIS[4])[i % 4]
    if api.name.startswith("chat"):
        per_tool = HUGE_BYTES // len(TOOLS)
        tools = [{**t, "description": pasted_log(i * 100 + k, per_tool)} for k, t in enumerate(TOOLS)]
        body = api.body(tools, message(i, 3000))
    else:
        body = api.body(TOOLS, pasted_log(i, HUGE_BYTES))
    return Request(api.url, api.headers(f"bench-tenant-{i % TENANTS}"), json.dumps(body).encode())


# --- the fake provider, in its own process (the clients' GIL is not its GIL) ----------------------


class Fake:
    def __init__(self, log: Path) -> None:
        env = scrubbed_env()
        env["PYTHONUNBUFFERED"] = "1"
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakeprovider", "--port", "0", "--stream-delay", "0"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self._log,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "listening at" not in line:
            raise RuntimeError(f"fake provider did not start: {line!r} (log: {log})")
        self.url = line.rsplit(" ", 1)[1].strip()
        self.control = httpx.Client(base_url=self.url, trust_env=False, timeout=60)
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget recorded requests (they hold every body); the model: search on a marked message."""
        with self._lock:
            self.control.post("/_reset").raise_for_status()
            rules = {"rules": [search("weather forecast", contains=SEARCH_MARK).to_dict()],
                     "default": reply("Done.").to_dict()}
            self.control.post("/_script", json=rules).raise_for_status()

    def stop(self) -> None:
        self.control.close()
        self.proc.terminate()
        self.proc.wait(10)
        self._log.close()


# --- proxies and readings -------------------------------------------------------------------------


def config_for(target: str) -> Callable[[Path], str] | None:
    """The shipped config with only the session store and the telemetry file moved into the work dir."""
    if target == "mitmdump":
        return None

    def write(workdir: Path) -> str:
        cfg = yaml.safe_load(CONFIGS[target].read_text())
        cfg.setdefault("sessions", {})["dir"] = str(workdir / "sessions")
        cfg.setdefault("telemetry", {})["path"] = str(workdir / "telemetry.jsonl")
        return yaml.safe_dump(cfg, sort_keys=False)

    return write


def start_proxy(target: str, fake: Fake, tmp: Path) -> MitmDump:
    """A mitmdump for ``target``, with ``scripts/memtrace.py`` (inert until asked) in every one."""
    script = None if target == "mitmdump" else ADDON_PATH
    workdir = Path(tempfile.mkdtemp(prefix=f"{target}-", dir=tmp))
    return MitmDump(workdir, fake.url, script=script, config=config_for(target),
                    extra_args=["-s", str(TRACE_SCRIPT)], name=target).start()


def probe(proxy: MitmDump, what: str) -> str:
    """Ask ``scripts/memtrace.py`` inside the proxy (``caches``, ``snapshot``, ``trim``)."""
    with httpx.Client(proxy=proxy.url, trust_env=False, timeout=CLIENT_TIMEOUT_S) as client:
        r = client.get(f"http://{TRACE_HOST}/{what}")
        r.raise_for_status()
        return r.text


def cached(proxy: MitmDump) -> int:
    """Bytes the addon's byte-bounded caches hold, as they charge themselves."""
    return int(probe(proxy, "caches").split()[0])


class Rss(bench.Rss):
    """``_bench.Rss`` whose ``settled`` waits out the addon's background work first."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(pid, interval)
        self.waited = 0.0  # seconds the last ``settled`` waited

    def settled(self) -> int:  # type: ignore[override]
        """RSS once background work has ended: ``SETTLE_S``, then until a second passes in which
        the process is idle (an index build of a 30 MB catalog goes on for tens of seconds after
        its request was answered). ``waited`` says how long that took."""
        t0 = time.perf_counter()
        time.sleep(SETTLE_S)
        cpu = self.cpu()
        while time.perf_counter() - t0 < MAX_SETTLE_S:
            time.sleep(1.0)
            now = self.cpu()
            if now - cpu < IDLE_CPU_S:
                break
            cpu = now
        self.waited = time.perf_counter() - t0
        return self.now()


@dataclass
class Drive:
    """The outcome of a batch of requests through one proxy."""

    done: int = 0
    unreset: int = 0  # bytes sent since the fake last forgot its requests
    errors: list[str] = field(default_factory=list)
    midway: Any = None  # what ``halfway`` returned


def drive(proxy: MitmDump, fake: Fake, requests: Iterable[Request], count: int, threads: int,
          halfway: Callable[[], Any] | None = None) -> Drive:
    """Send ``count`` requests from ``threads`` kept-alive clients; read every answer whole."""
    out = Drive()
    lock = threading.Lock()
    source = iter(requests)

    def worker() -> None:
        with proxy.httpx_client(timeout=httpx.Timeout(CLIENT_TIMEOUT_S, connect=30.0)) as client:
            while True:
                with lock:
                    req = next(source, None)
                if req is None:
                    return
                try:
                    r = client.post(req.url, content=req.body, headers=req.headers)
                    error = f"HTTP {r.status_code} {r.text[:200]}" if r.status_code != 200 else None
                except httpx.HTTPError as e:
                    error = f"{type(e).__name__}: {e}"
                with lock:
                    out.done += 1
                    out.unreset += len(req.body)
                    if error:
                        out.errors.append(f"{req.url}: {error}")
                    if halfway is not None and out.done == count // 2:
                        out.midway = halfway()
                    if out.unreset > RESET_BYTES:
                        fake.reset()
                        out.unreset = 0

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return out


@dataclass
class Reading:
    """One proxy through one part: RSS from the start of the measured traffic to its end."""

    target: str
    start: int
    end: int
    peak: int
    cache_growth: int  # bytes the addon's caches hold now, minus what they held at the start
    trimmed: int  # RSS after malloc_trim: what the allocator kept free is gone
    seconds: float
    errors: list[str]
    notes: str  # --trace: the allocation sites that grew; pymalloc and malloc_trim figures
    midway: int = 0
    cpu: float = 0.0  # mitmdump's CPU seconds (user + system) over the measured traffic
    settle_s: float = 0.0  # how long the proxy stayed busy after the last answer (see ``Rss.settled``)
    after_run: int = 0  # (c): RSS right after the last answer, before settling

    @property
    def growth(self) -> int:
        return self.end - self.start

    @property
    def outside_caches(self) -> int:
        return self.growth - self.cache_growth


def finish(proxy: MitmDump, rss: Rss, trace: bool) -> tuple[int, int, str]:
    """The end RSS, the RSS after malloc_trim, and (traced) the report of what grew."""
    end = rss.settled()
    grown = probe(proxy, "snapshot") if trace else ""
    trimmed = probe(proxy, "trim")
    return end, rss.now(), (grown + trimmed) if trace else ""


def run_steady(target: str, fake: Fake, tmp: Path, n: int, threads: int, trace: bool) -> Reading:
    """Part (a) for one proxy. Traced, tracemalloc runs over the second half only: by then the
    caches are full, so the sites that grew name what keeps growing (and what churns)."""
    proxy = start_proxy(target, fake, tmp)
    rss = Rss(proxy.proc.pid)  # type: ignore[union-attr]

    def halfway() -> int:
        if trace:
            probe(proxy, "snapshot")
        return rss.now()

    try:
        errors = drive(proxy, fake, map(steady, range(10**7, 10**7 + WARMUP)), WARMUP, threads).errors
        start, cache0 = rss.settled(), cached(proxy)
        rss.peak = start
        t0, cpu0 = time.perf_counter(), rss.cpu()
        run = drive(proxy, fake, map(steady, range(n)), n, threads, halfway)
        seconds, cpu = time.perf_counter() - t0, rss.cpu() - cpu0
        cache_growth = cached(proxy) - cache0
        end, trimmed, notes = finish(proxy, rss, trace)
        return Reading(target, start, end, rss.peak, cache_growth, trimmed, seconds, errors + run.errors, notes,
                       run.midway or end, cpu, rss.waited)
    finally:
        rss.stop()
        proxy.stop()


def warmed(proxy: Any, fake: Fake, rss: Rss, trace: bool) -> tuple[int, int, int]:
    """A fresh proxy after 50 small requests: (their errors, resident MB settled, cached MB); the
    peak starts there, and a tracemalloc snapshot is taken with ``trace``."""
    errors = drive(proxy, fake, map(steady, range(10**7, 10**7 + 50)), 50, 2).errors
    start, cache0 = rss.settled(), cached(proxy)
    if trace:
        probe(proxy, "snapshot")
    rss.peak = start
    return errors, start, cache0


def run_huge(target: str, fake: Fake, tmp: Path, count: int, trace: bool) -> Reading:
    """Part (b) for one proxy: a fresh process, a short warm-up, then the huge bodies one at a time."""
    proxy = start_proxy(target, fake, tmp)
    rss = Rss(proxy.proc.pid)  # type: ignore[union-attr]
    try:
        errors, start, cache0 = warmed(proxy, fake, rss, trace)
        t0 = time.perf_counter()
        for i in range(count):
            errors += drive(proxy, fake, [huge(i)], 1, 1).errors
        seconds = time.perf_counter() - t0
        cache_growth = cached(proxy) - cache0
        end, trimmed, notes = finish(proxy, rss, trace)
        return Reading(target, start, end, rss.peak, cache_growth, trimmed, seconds, errors, notes,
                       settle_s=rss.waited)
    finally:
        rss.stop()
        proxy.stop()


def run_large(target: str, fake: Fake, tmp: Path, count: int, trace: bool) -> Reading:
    """Part (c) for one proxy: a fresh process, a short warm-up, then ``count`` distinct 300 KB
    messages from ``LARGE_CLIENTS`` clients."""
    proxy = start_proxy(target, fake, tmp)
    rss = Rss(proxy.proc.pid)  # type: ignore[union-attr]
    try:
        errors, start, cache0 = warmed(proxy, fake, rss, trace)
        t0, cpu0 = time.perf_counter(), rss.cpu()
        run = drive(proxy, fake, map(large, range(count)), count, LARGE_CLIENTS)
        seconds, cpu, after_run = time.perf_counter() - t0, rss.cpu() - cpu0, rss.now()
        cache_growth = cached(proxy) - cache0
        end, trimmed, notes = finish(proxy, rss, trace)
        return Reading(target, start, end, rss.peak, cache_growth, trimmed, seconds, errors + run.errors, notes,
                       after_run=after_run, cpu=cpu, settle_s=rss.waited)
    finally:
        rss.stop()
        proxy.stop()


# --- report ---------------------------------------------------------------------------------------


def mb(n: int) -> str:
    return f"{n / MiB:,.0f}"


def signed(n: int) -> str:
    return f"{n / MiB:+,.0f}"


def check(rows: dict[str, Reading], what: str) -> bool:
    """``growth outside caches <= GROWTH_RATIO * plain growth + NOISE`` for each addon proxy."""
    plain = rows["mitmdump"].growth
    limit = int(GROWTH_RATIO * max(plain, 0) + NOISE)  # a shrinking plain mitmdump counts as flat
    ok = True
    for r in rows.values():
        if r.target != "mitmdump":
            passed = r.outside_caches <= limit
            ok &= passed
            print(f"- {'PASS' if passed else 'FAIL'} {r.target} {what}: {signed(r.growth)} - {mb(r.cache_growth)} "
                  f"in caches = {signed(r.outside_caches)} MiB <= {GROWTH_RATIO} x {signed(plain)} + {mb(NOISE)} "
                  f"= {mb(limit)} MiB")
    return ok


def report_steady(rows: dict[str, Reading], n: int) -> bool:
    print(f"## (a) {n:,} distinct requests (after a {WARMUP}-request warm-up), RSS in MiB\n")
    plain = rows["mitmdump"]
    print(bench.table(
        ["proxy", "before:", "halfway:", "after:", "peak:", "growth:", "in caches:", "outside caches:",
         "after malloc_trim:", "req/s:", "req/s / mitmdump:", "CPU ms/req:", "CPU / mitmdump:", "busy after, s:",
         "errors:"],
        [(r.target, mb(r.start), mb(r.midway), mb(r.end), mb(r.peak), signed(r.growth), signed(r.cache_growth),
          signed(r.outside_caches), mb(r.trimmed), f"{n / r.seconds:,.0f}", bench.ratio(plain.seconds, r.seconds),
          f"{r.cpu / n * 1000:.1f}", bench.ratio(r.cpu, plain.cpu), f"{r.settle_s:.0f}", len(r.errors))
         for r in rows.values()]))
    print(f"\nAcceptance: growth - what the addon's byte-bounded caches hold more <= {GROWTH_RATIO} x mitmdump's "
          f"growth + {mb(NOISE)} MiB\n")
    return check(rows, "growth")


def report_huge(rows: dict[str, Reading], count: int) -> bool:
    print(f"\n## (b) {count} requests of {HUGE_BYTES // MiB} MB, one at a time, RSS in MiB\n")
    plain = rows["mitmdump"]
    print(bench.table(
        ["proxy", "before:", "peak:", "peak over before:", "peak over / mitmdump's:", "after:", "left behind:",
         "in caches:", "outside caches:", "after malloc_trim:", "s:", "s / mitmdump:", "busy after, s:", "errors:"],
        [(r.target, mb(r.start), mb(r.peak), signed(r.peak - r.start),
          bench.ratio(max(r.peak - r.start, MiB), max(plain.peak - plain.start, MiB)), mb(r.end), signed(r.growth),
          signed(r.cache_growth), signed(r.outside_caches), mb(r.trimmed), f"{r.seconds:.1f}",
          bench.ratio(r.seconds, plain.seconds), f"{r.settle_s:.0f}", len(r.errors)) for r in rows.values()]))
    print(f"\nAcceptance: left behind - what the addon's caches hold more <= {GROWTH_RATIO} x mitmdump's "
          f"+ {mb(NOISE)} MiB\n")
    return check(rows, "left behind")


def report_large(rows: dict[str, Reading], count: int) -> bool:
    print(f"\n## (c) {count} distinct {BIG_MESSAGE // 1024} KB messages, {LARGE_CLIENTS} clients, RSS in MiB\n")
    plain = rows["mitmdump"]
    print(bench.table(
        ["proxy", "after warm-up:", "peak:", "after the run:", "settled:", "left behind:", "over mitmdump's:",
         "in caches:", "outside caches:", "after malloc_trim:", "CPU ms/req:", "busy after, s:", "errors:"],
        [(r.target, mb(r.start), mb(r.peak), mb(r.after_run), mb(r.end), signed(r.growth),
          signed(r.growth - plain.growth) if r is not plain else "", signed(r.cache_growth), signed(r.outside_caches),
          mb(r.trimmed), f"{r.cpu / max(count, 1) * 1000:.0f}", f"{r.settle_s:.0f}", len(r.errors))
         for r in rows.values()]))
    limit = max(plain.growth, 0) + LARGE_BOUND
    print(f"\nAcceptance: left behind (settled, caches included) <= mitmdump's + {mb(LARGE_BOUND)} MiB\n")
    ok = True
    for r in rows.values():
        if r is not plain:
            passed = r.growth <= limit
            ok &= passed
            print(f"- {'PASS' if passed else 'FAIL'} {r.target} left behind: {signed(r.growth)} MiB <= "
                  f"{signed(plain.growth)} + {mb(LARGE_BOUND)} = {mb(limit)} MiB")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000, help="requests in part (a); 0 skips it")
    ap.add_argument("--threads", type=int, default=6, help="concurrent clients per proxy")
    ap.add_argument("--huge", type=int, default=12, help="30 MB requests in part (b); 0 skips it")
    ap.add_argument("--large", type=int, default=200, help="distinct 300 KB messages in part (c); 0 skips it")
    ap.add_argument("--trace", action="store_true", help="tracemalloc: the allocation sites that grew (slow)")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run (40 requests, one 2 MB 'huge' request, four 300 KB messages; plain mitmdump and "
                         "the shipped config) "
                         "that checks the script works; the growth bounds are reported, not meaningful at that size")
    args = ap.parse_args()
    if args.smoke:
        global WARMUP, HUGE_BYTES, SETTLE_S
        WARMUP, HUGE_BYTES, SETTLE_S = 10, 2 * MiB, 0.2
        args.requests, args.threads, args.huge, args.large = 40, 2, 1, 4
    targets = TARGETS[:2] if args.smoke else TARGETS  # plain mitmdump, the shipped config
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as name:
        tmp = Path(name)
        fake = Fake(tmp / "fake.log")
        try:
            with ThreadPoolExecutor(len(targets)) as pool:  # side by side: two cores, and RSS is per process
                steady_rows = dict(zip(targets, pool.map(
                    lambda t: run_steady(t, fake, tmp, args.requests, args.threads, args.trace),
                    targets))) if args.requests else {}
                huge_rows = dict(zip(targets, pool.map(
                    lambda t: run_huge(t, fake, tmp, args.huge, args.trace), targets))) if args.huge else {}
                large_rows = dict(zip(targets, pool.map(
                    lambda t: run_large(t, fake, tmp, args.large, args.trace), targets))) if args.large else {}
        finally:
            fake.stop()
    if args.trace:
        print("(--trace: tracemalloc ran over (a)'s second half and all of (b) and (c); its own memory is in these "
              "figures)\n")
    ok = True
    if steady_rows:
        ok &= report_steady(steady_rows, args.requests)
    if huge_rows:
        ok &= report_huge(huge_rows, args.huge)
    if large_rows:
        ok &= report_large(large_rows, args.large)
    rows = [("(a)", r) for r in steady_rows.values()] + [("(b)", r) for r in huge_rows.values()] + \
        [("(c)", r) for r in large_rows.values()]
    for part, r in rows:
        for e in r.errors[:3]:
            print(f"\n{part} {r.target} error: {e}")
    for part, r in rows:
        if r.notes:
            print(f"\n## {part} {r.target}: what grew while traced\n\n```\n{r.notes}```")
    print(f"\n{'PASS' if ok else 'FAIL'}: memory acceptance")


if __name__ == "__main__":
    main()
