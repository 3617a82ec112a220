#!/usr/bin/env python3
"""Does search that learns from its own traffic find tools better, and what does it cost?

    .venv/bin/python scripts/make_learning_data.py             # the data sets, from PyPI
    .venv/bin/python scripts/bench_learning.py --data ~/.cache/tooldisco-bench/learning_bfcl-multi-turn.json
    .venv/bin/python scripts/bench_learning.py --data tests/fixtures/learning_tiny.json --quick

Two real mitmdumps with the addon (Anthropic Messages, strategy tool-search, search backend
bm25, ``defer.upfront: 0`` so that every tool waits behind the search) replay the SAME
schedule over one catalog (the data set's tools), each under its own API key (one tenant):

- **learning**: ``pipes.tool_discovery.learning.enabled: true``;
- **baseline**: ``learning.enabled: false``.

A LEARNING turn is one fresh session (a new first message) carrying the whole catalog: the
fake model (in-process ``tests/fakeprovider``) searches with a LEARN phrasing of its target
tool; when the target is not among the tools found it searches again with the tool's name;
then it calls the target, the client answers with a tool result, and the model ends with
text. Turns run on ``--clients`` threads, each with one keep-alive connection.

At each checkpoint (after 0, 100, 1,000, 10,000 learning turns by default) each proxy is
restarted with ``learning.learn: false`` (priors used, nothing learned; same session store,
so the priors are those persisted), every EVAL phrasing (never one of LEARN) is searched once
in a fresh session, and the tools the search returned are read in rank order from the
proxy's telemetry (``searches[0].matched``) -> recall@1 and recall@5 (the search answers at
most ``max_search_results``: 5). Then it is restarted with learning on again.

Printed: recall per checkpoint and arm with the difference, the search latency (the
telemetry's ``latency_ms`` of the eval searches; p50 / p95) per checkpoint and arm, and per
window of learning turns how many searches a turn needed (1: the phrasing found the tool;
2: its name had to be searched too) and how often the target was never found.

Until the addon knows the ``learning`` keys it refuses them at start: the baseline then runs
without them, and the learning arm is skipped with that reason.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import _bench as bench  # noqa: E402
from tests.fakeprovider import SEARCH_TOOL, Call, Conversation, FakeProvider, Rule, Script  # noqa: E402

MODEL = "claude-sonnet-4-6"
MARK = re.compile(r"^\[#(\d+)\] ")  # the first message's session marker: "[#123] <phrasing>"
DONE, MISSED = "Done.", "No tool for that here."
RANKS = (1, 5)


@dataclass(frozen=True)
class Plan:
    """What the model does in one session: search ``query`` for ``tool``; ``learn``: also search
    the tool's name when the phrasing did not find it, then call the tool."""

    tool: str
    query: str
    learn: bool


@dataclass
class Session:
    plan: Plan
    searches: int = 0
    called: bool = False


class LearningModel(Script):
    """The fake's model: the session's plan, read from the marker of its first message."""

    def __init__(self) -> None:
        super().__init__()
        self.sessions: dict[int, Session] = {}
        self._lock = threading.Lock()

    def plan(self, sid: int, plan: Plan) -> None:
        with self._lock:
            self.sessions[sid] = Session(plan)

    def session(self, sid: int) -> Session:
        with self._lock:
            return self.sessions[sid]

    def choose(self, conv: Conversation, nth: int) -> Rule:
        messages = conv.body.get("messages") or [{}]
        first = messages[0].get("content")
        first = first if isinstance(first, str) else " ".join(
            b.get("text", "") for b in first or [] if isinstance(b, dict))
        mark = MARK.match(first)
        if mark is None:
            return Rule(text="Could you say that again?")
        state = self.session(int(mark.group(1)))
        plan = state.plan
        searched = [c.arguments.get("query") for c in conv.calls
                    if c.name == SEARCH_TOOL and isinstance(c.arguments, dict)]
        if conv.has_result_for(plan.tool):
            return Rule(text=DONE)
        if plan.learn and (conv.offered(plan.tool) or conv.through(plan.tool)):
            state.called = True
            return Rule(calls=[Call(plan.tool, {})])
        queries = [plan.query, plan.tool] if plan.learn else [plan.query]
        if len(searched) < len(queries) and conv.offered(SEARCH_TOOL):
            state.searches = max(state.searches, len(searched) + 1)  # a re-sent request is not a new search
            return Rule(calls=[Call(SEARCH_TOOL, {"query": queries[len(searched)]})])
        return Rule(text=MISSED if plan.learn else DONE)


# --- the data -------------------------------------------------------------------------------------------


@dataclass
class Data:
    name: str
    tools: list[dict[str, Any]]
    learn: list[tuple[str, str]]  # (tool, phrasing)
    eval: list[tuple[str, str]]
    source: dict[str, Any] = field(default_factory=dict)


def load(path: Path, quick: bool) -> Data:
    raw = json.loads(path.read_text())
    learn = [(q["tool"], q["query"]) for q in raw["learn"]]
    evaluate = [(q["tool"], q["query"]) for q in raw["eval"]]
    if quick:  # a few targets, each with its phrasings: the whole pipeline, in seconds
        targets = sorted({t for t, _ in evaluate})[:4]
        learn = [p for p in learn if p[0] in targets]
        evaluate = [p for p in evaluate if p[0] in targets][:12]
    return Data(raw.get("name", path.stem), raw["tools"], learn, evaluate, raw.get("source", {}))


def schedule(learn: Sequence[tuple[str, str]], turns: int, seed: int) -> list[tuple[str, str]]:
    """``turns`` LEARN phrasings: the whole set in a seeded order, again and again (each
    phrasing as often as every other, give or take one)."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    while len(out) < turns:
        cycle = list(learn)
        rng.shuffle(cycle)
        out += cycle
    return out[:turns]


# --- one arm: a proxy, its key, its turns ------------------------------------------------------------------


def overrides(learning: dict[str, Any] | None) -> dict[str, Any]:
    td: dict[str, Any] = {"strategy": "tool-search", "search": {"backend": "bm25"},
                          "defer": {"upfront": 0, "min_tools": 0, "min_tokens": 0}}
    if learning is not None:
        td["learning"] = learning
    return {"pipes": {"tool_discovery": td}}


class Refused(RuntimeError):
    """mitmdump would not start on this config (an addon without the learning keys)."""


@dataclass
class Window:
    """Learning turns between two checkpoints."""

    turns: int = 0
    searches: int = 0
    second: int = 0  # turns that searched the name too
    missed: int = 0  # turns whose target no search found
    errors: int = 0
    seconds: float = 0.0
    search: list[float] = field(default_factory=list)  # every search's latency (s), from the telemetry
    processing: list[float] = field(default_factory=list)  # every request's processing time in the addon (s)


@dataclass
class Checkpoint:
    turns: int
    recall: dict[int, float]
    latencies: list[float]
    unrecorded: int  # eval searches with no telemetry record
    failed: int  # eval sessions that failed (no record either)
    named_first: float = 1.0  # share of the targets whose exact name, searched, ranked them first


class Arm:
    def __init__(self, name: str, learning: bool | None, fake: FakeProvider, model: LearningModel, data: Data,
                 tmp: Path, clients: int, ids: itertools.count[int]) -> None:
        self.name = name
        self.learning = learning  # True/False: learning.enabled; None: keys left out
        self.fake, self.model, self.data = fake, model, data
        self.clients = clients
        self.ids = ids
        self.key = f"sk-ant-bench-{name}-{random.randrange(1 << 32):08x}"  # one tenant per arm
        self.proxy = bench.start_addon(fake.url, bench.workdir(tmp, name), self.config(learn=True), name=name,
                                       start=False)
        self._local = threading.local()
        self._head = (f'{{"model": {json.dumps(MODEL)}, "max_tokens": 512, "tools": {json.dumps(data.tools)}, '
                      '"messages": ').encode()
        self.learning_now = False
        self.windows: list[Window] = []
        self.checkpoints: list[Checkpoint] = []

    def config(self, learn: bool) -> dict[str, Any]:
        if self.learning is None:
            return overrides(None)
        return overrides({"enabled": self.learning, "learn": learn} if self.learning else {"enabled": False})

    def start(self, learn: bool) -> None:
        """(Re)start the proxy on the config; ``Refused`` when the addon rejects it."""
        if self.proxy.running:
            self.proxy.stop()
        self.proxy.config = bench.addon_config(self.config(learn))
        self._local = threading.local()  # connections to the old process are gone
        self.learning_now = learn
        try:
            self.proxy.start()
        except RuntimeError as exc:
            if self.learning is not None and "learning" in str(exc):
                raise Refused(_refusal(str(exc))) from None
            raise

    def stop(self) -> None:
        self.proxy.stop()

    # --- requests ---

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self.proxy.httpx_client()
        return client

    def _post(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        # The catalog is encoded once: the client's own CPU would otherwise pace the replay.
        body = self._head + json.dumps(messages).encode() + b"}"
        r = self._client().post("https://api.anthropic.com/v1/messages", content=body,
                                headers={"x-api-key": self.key, "anthropic-version": "2023-06-01",
                                         "content-type": "application/json"})
        r.raise_for_status()
        return r.json()

    def _session(self, plan: Plan) -> tuple[int, Session]:
        sid = next(self.ids)
        self.model.plan(sid, plan)
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"[#{sid}] {plan.query}"}]
        answer = self._post(messages)
        calls = [b for b in answer.get("content") or [] if b.get("type") == "tool_use"]
        if plan.learn and calls:  # the client runs the tool and answers with its result
            messages += [{"role": "assistant", "content": answer["content"]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": c["id"],
                                                       "content": f"{c['name']}: ok"} for c in calls]}]
            self._post(messages)
        return sid, self.model.session(sid)

    def learn(self, phrasings: Sequence[tuple[str, str]]) -> Window:
        window = Window(turns=len(phrasings))
        lock = threading.Lock()

        def turn(item: tuple[str, str]) -> None:
            try:
                _, state = self._session(Plan(item[0], item[1], learn=True))
            except Exception:  # noqa: BLE001 -- counted and reported: one failed turn must not end the run
                with lock:
                    window.errors += 1
                return
            with lock:
                window.searches += state.searches
                window.second += state.searches > 1
                window.missed += not state.called

        telemetry = self.proxy.workdir / "tool_discovery.jsonl"
        offset = telemetry.stat().st_size if telemetry.exists() else 0
        started = time.monotonic()
        with ThreadPoolExecutor(self.clients, thread_name_prefix=f"{self.name}-learn") as pool:
            list(pool.map(turn, phrasings))
        window.seconds = time.monotonic() - started
        for record in _records(telemetry, offset):  # what the writer thread has written by now
            window.processing.append(float(record.get("processing_ms") or 0.0) / 1000)
            window.search.extend(float(x.get("latency_ms") or 0.0) / 1000 for x in record.get("searches") or [])
        self.windows.append(window)
        return window

    def evaluate(self, turns: int) -> Checkpoint:
        """One first search per EVAL phrasing; ranks read from the telemetry."""
        telemetry = self.proxy.workdir / "tool_discovery.jsonl"
        offset = telemetry.stat().st_size if telemetry.exists() else 0

        def ask(item: tuple[str, str]) -> bool:
            try:
                self._session(Plan(item[0], item[1], learn=False))
            except Exception:  # noqa: BLE001 -- a failed eval session has no record: it counts as a miss
                return False
            return True

        # Each target's exact name too: what was learned must never outrank a tool the query names.
        named = [(tool, tool) for tool in sorted({t for t, _ in self.data.eval})]
        with ThreadPoolExecutor(self.clients, thread_name_prefix=f"{self.name}-eval") as pool:
            failed = sum(not ok for ok in pool.map(ask, [*self.data.eval, *named]))
        found = self._searches(telemetry, offset, {q for _, q in [*self.data.eval, *named]})
        hits = {k: 0.0 for k in RANKS}
        latencies = []
        for tool, query in self.data.eval:
            search = found.get(query)
            if search is None:
                continue
            latencies.append(float(search.get("latency_ms") or 0.0) / 1000)
            matched = search.get("matched") or []
            for k in RANKS:
                hits[k] += tool in matched[:k]
        n = len(self.data.eval)
        first = sum((found.get(tool) or {}).get("matched", [])[:1] == [tool] for tool, _ in named)
        point = Checkpoint(turns, {k: v / n for k, v in hits.items()}, latencies, n - len(latencies), failed,
                           first / len(named) if named else 1.0)
        self.checkpoints.append(point)
        return point

    @staticmethod
    def _searches(path: Path, offset: int, queries: set[str], timeout: float = 30.0) -> dict[str, dict[str, Any]]:
        """query -> the first search record with it, written after ``offset`` (the writer thread
        lags the answers: wait until each query has one, at most ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while True:
            found: dict[str, dict[str, Any]] = {}
            for record in _records(path, offset):
                for search in record.get("searches") or []:
                    found.setdefault(search.get("query"), search)
            if queries <= found.keys() or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


def _records(path: Path, offset: int) -> list[dict[str, Any]]:
    """The telemetry records written after byte ``offset`` (a line still being written is left out)."""
    if not path.exists():
        return []
    with open(path, "rb") as f:
        f.seek(offset)
        lines = f.read().decode().split("\n")[:-1]  # the last piece has no newline yet (or is empty)
    return [json.loads(line) for line in lines if line.strip()]


def _refusal(log: str) -> str:
    """The addon's own line about the refused key, else the log's last line."""
    lines = [line.strip() for line in log.splitlines() if "learning" in line]
    return (lines[-1] if lines else log.strip().splitlines()[-1])[:300]


# --- the run -----------------------------------------------------------------------------------------------


def run(data: Data, checkpoints: list[int], clients: int, seed: int, tmp: Path,
        say: Callable[[str], None]) -> tuple[list[Arm], dict[str, str]]:
    """Both arms through the schedule; returns them and the reason of each arm skipped."""
    fake = FakeProvider(stream_delay=0.0, keep_requests=False).start()
    model = LearningModel()
    fake.set_script(model)
    ids = itertools.count(1)
    arms = [Arm("learning", True, fake, model, data, tmp, clients, ids),
            Arm("baseline", False, fake, model, data, tmp, clients, ids)]
    skipped: dict[str, str] = {}
    live: list[Arm] = []
    first_learn = checkpoints[0] > 0  # an eval at 0 turns comes first: start on the eval config
    for arm in arms:
        try:
            arm.start(learn=first_learn)
        except Refused as why:
            if arm.name == "learning":
                skipped[arm.name] = f"the addon refused the learning config: {why}"
                say(f"... learning arm skipped: {skipped[arm.name]}")
                continue
            arm.learning = None  # an addon without the keys: the baseline is what it does anyway
            arm.start(learn=first_learn)
        live.append(arm)
    plan = schedule(data.learn, max(checkpoints), seed)
    failures: list[BaseException] = []

    def replay(arm: Arm) -> None:
        """The arm's whole schedule; the arms run side by side, so both see the same load."""
        try:
            done = 0
            for point in checkpoints:
                if point > done:
                    if not arm.learning_now:
                        arm.start(learn=True)
                    window = arm.learn(plan[done:point])
                    say(f"... {arm.name}: turns {done}-{point} in {window.seconds:.1f}s "
                        f"({window.turns / max(window.seconds, 1e-9):.1f} turns/s, {window.errors} errors)")
                    arm.start(learn=False)
                result = arm.evaluate(point)
                say(f"... {arm.name}: eval after {point} turns: recall@1 {result.recall[1]:.3f}, "
                    f"recall@5 {result.recall[5]:.3f}, p50 search {bench.percentile(result.latencies, 50) * 1e3:.1f} ms"
                    if result.latencies else f"... {arm.name}: eval after {point} turns: no search recorded")
                done = point
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    try:
        threads = [threading.Thread(target=replay, args=(arm,), name=arm.name) for arm in live]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for arm in live:
            arm.stop()
        fake.stop()
    if failures:
        raise failures[0]
    return live, skipped


def report(data: Data, arms: list[Arm], skipped: dict[str, str], checkpoints: list[int], took: float) -> None:
    by = {arm.name: arm for arm in arms}
    learning, baseline = by.get("learning"), by.get("baseline")
    src = data.source
    print(f"Data: {data.name} ({src.get('package', '?')} {src.get('version', '')}, {src.get('license', '')}): "
          f"{len(data.tools)} tools, {len({t for t, _ in data.learn})} targets, {len(data.learn)} LEARN and "
          f"{len(data.eval)} EVAL phrasings. Run took {took:.0f} s.")
    for name, why in skipped.items():
        print(f"\n{name} arm skipped: {why}")

    def cell(arm: Arm | None, i: int, k: int) -> str:
        return f"{arm.checkpoints[i].recall[k]:.3f}" if arm else "skipped"

    rows = []
    for i, point in enumerate(checkpoints):
        row: list[Any] = [point]
        for k in RANKS:
            row += [cell(learning, i, k), cell(baseline, i, k)]
            row.append(f"{learning.checkpoints[i].recall[k] - baseline.checkpoints[i].recall[k]:+.3f}"
                       if learning and baseline else "n/a")
        rows.append(row)
    bench.section(f"Recall over {len(data.eval)} EVAL phrasings (first search only) after N learning turns",
                  ["turns:", "recall@1 on:", "recall@1 off:", "Δ@1:", "recall@5 on:", "recall@5 off:", "Δ@5:"], rows,
                  "on: learning.enabled (learn: false while evaluated); off: learning.enabled: false. "
                  "Unrecorded eval searches count as misses: "
                  + ", ".join(f"{a.name} {sum(c.unrecorded for c in a.checkpoints)}" for a in arms) + ". "
                  "A target's exact name, searched, ranked it first: "
                  + ", ".join(f"{a.name} {min((c.named_first for c in a.checkpoints), default=1.0):.0%} (worst checkpoint)"
                              for a in arms) + ".")
    bench.section("Search latency of the eval searches (ms, p50 / p95, the telemetry's latency_ms)",
                  ["turns:", *[f"{a.name}:" for a in arms]],
                  [[point, *[bench.p50_p95(a.checkpoints[i].latencies, 1000, 2) for a in arms]]
                   for i, point in enumerate(checkpoints)])
    rows = []
    for arm in arms:
        for point, window in zip([p for p in checkpoints if p > 0], arm.windows):
            n = max(window.turns - window.errors, 1)
            rows.append([arm.name, f"…{point}", window.turns, f"{window.searches / n:.2f}",
                         f"{window.second / n:.1%}", f"{window.missed / n:.1%}", window.errors,
                         bench.p50_p95(window.search, 1000, 2), bench.p50_p95(window.processing, 1000, 2),
                         f"{window.turns / max(window.seconds, 1e-9):.1f}"])
    bench.section("Learning turns: searches per turn, share needing the name searched too, share never found; "
                  "the telemetry's search latency and request processing time (ms, p50 / p95)",
                  ["arm", "window", "turns:", "searches/turn:", "2nd search:", "not found:", "errors:",
                   "search ms:", "processing ms:", "turns/s:"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a make_learning_data.py JSON file")
    parser.add_argument("--turns", default="0,100,1000,10000", help="checkpoints: learning turns before each eval")
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 targets, 12 eval phrasings, turns 0,20")
    parser.add_argument("--clients", type=int, default=4, help="client threads (one keep-alive connection each)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    checkpoints = sorted({int(t) for t in ("0,20" if args.quick else args.turns).split(",")})
    data = load(args.data, args.quick)
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        arms, skipped = run(data, checkpoints, args.clients, args.seed, Path(tmp), say)
    report(data, arms, skipped, checkpoints, time.monotonic() - started)


if __name__ == "__main__":
    main()
