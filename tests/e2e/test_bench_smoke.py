"""Smoke runs of every benchmark in ``scripts/``: each at its smallest size, against real mitmdump
processes where it measures one.

Only that the script runs and prints its table: the figures and their bounds are what the scripts
report, measured on purpose outside the test suite (timings flake on a loaded machine). What this
keeps from rotting is the scripts themselves: their use of the addon's API, of the harness, of the
fake provider and of the shipped configs. One figure is checked here because it does not depend
on the machine: ``bench_session``'s cost check (the proxy's reported cost, its telemetry's
``cost_usd``, against the fake provider's bill priced by the same table, within 1%), and
``tooldisco report --json`` over that run's telemetry summing the same money.
``scripts/chaos.py`` has its own smoke test (``test_chaos_smoke.py``); ``scripts/memtrace.py``
is the probe ``bench_memory.py`` and ``soak.py`` load into their proxies, so it runs here
through them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.e2e import agents  # noqa: E402
from tests.support.catalog import openai_tools  # noqa: E402

pytestmark = pytest.mark.e2e

# script -> its smallest arguments ("{tmp}" becomes the test's temp dir).
SMOKE: dict[str, list[str]] = {
    "bench_phantom": ["--rounds", "3", "--tools", "30"],
    "profile_prepare": ["200", "2", "--no-profile"],
    "bench_retrieval": ["--data", "{tmp}/bfcl.json", "--sets", "bfcl,multi-intent,named", "--backends", "bm25",
                        "--big", "300", "--latency-queries", "5", "--queries", "20", "--cache-dir", "{tmp}/cache"],
    "report_bench": ["--records", "2000", "--dir", "{tmp}/report"],
    "bench_overhead": ["--requests", "5", "--proxy-requests", "5", "--sizes", "50", "--cpu-tools", "30",
                       "--cpu-turns", "2", "--cpu-rounds", "2", "--cpu-apis", "anthropic,chat", "--cpu-metrics",
                       "--cpu-policy"],
    "profile_proxy": ["--tools", "30", "--turns", "2", "--apis", "anthropic,responses", "--top", "5"],
    "bench_fairness": ["--heavy", "1", "--tools", "200", "--seconds", "2", "--lock", "0.5"],
    "bench_stream_memory": ["--mib", "2", "--after", "0.5"],
    "bench_load": ["--smoke"],
    "soak": ["--smoke"],
    "crash_test": ["--backend", "disk", "--sessions", "4", "--kills", "1"],
    "bench_memory": ["--smoke"],
    "bench_ttfb": ["--runs", "1", "--delay", "0.01", "--concurrency", "2"],
    "bench_session": ["--plan", "release", "--turns", "3", "--paths", "mitmdump,tool-search",
                      "--telemetry", "{tmp}/telemetry"],
    "bench_agents": ["--smoke"],
    "bench_learning": ["--data", "tests/fixtures/learning_tiny.json", "--quick"],
}
# a harness, own smoke test, a probe, reports, the learning benchmark's data builder (it downloads from PyPI)
NOT_BENCHMARKS = {"_bench", "chaos", "memtrace", "report", "report_api", "make_learning_data"}


def tiny_bfcl(path: Path) -> None:
    """A BFCL-format file (``{tools, queries}``) over the test catalog: each tool's description
    as a query labelled with that tool, so bench_retrieval runs without the real data set."""
    tools = [t["function"] for t in openai_tools(120)]
    path.write_text(json.dumps({"tools": tools, "queries": [
        {"query": t["description"], "labels": [t["name"]]} for t in tools[:40]]}))


# bench_session's APIs, as the addon's telemetry names them
SESSION_APIS = {"anthropic": "anthropic", "chat": "openai_chat", "responses": "openai_responses", "gemini": "gemini"}
AGREE = Decimal("0.01")
USD = re.compile(r"^\$([\d,]+\.\d{4})$")


def dollars(cell: str) -> Decimal:
    m = USD.match(cell)
    assert m, f"not a dollar figure: {cell!r}"
    return Decimal(m.group(1).replace(",", ""))


def records(path: Path) -> list[dict]:
    """Telemetry lines, numbers as written (decimals: sums are exact, as the report's)."""
    return [json.loads(line, parse_float=Decimal) for line in path.read_text().splitlines() if line.strip()]


def report_json(*paths: Path) -> dict:
    """``tooldisco report --json`` over ``paths``, as a user runs it."""
    run = subprocess.run([sys.executable, "-m", "tooldisco.cli", "report", *map(str, paths), "--json", "--quiet"],
                         check=False, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def check_session_cost(stdout: str, tmp: Path) -> None:
    """The proxy reported what the provider billed, every API, and the report sums what it reported."""
    lines = stdout.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("| API | path | client requests (records)")))
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[head + 2:] if line.startswith("| ")]
    by_api = {r[0]: r for r in rows if r[1] == "tool-search"}
    assert set(by_api) == set(SESSION_APIS), stdout[-3000:]
    assert any(line.startswith(f"Cost check: ok, {len(rows)} of {len(rows)} runs") for line in lines), stdout[-3000:]
    log = records(tmp / "telemetry" / "tool-search.jsonl")
    for api, (_, _, requests, reported, billed, _, agree, without, _) in by_api.items():
        turns = [r for r in log if r["provider"] == SESSION_APIS[api]]
        assert requests == f"{len(turns)} ({len(turns)})" and agree == "yes", (api, requests, agree)
        assert all(isinstance(r["cost_usd"], Decimal) and r["model"] for r in turns), turns
        # what the table says the proxy reported is its telemetry's; within 1% of the bill (4-place rounding aside)
        spent = sum(r["cost_usd"] for r in turns)
        assert abs(spent - dollars(reported)) <= Decimal("0.00005"), (api, spent, reported)
        assert abs(dollars(reported) - dollars(billed)) <= AGREE * dollars(billed) + Decimal("0.0001"), \
            (api, reported, billed)
        assert abs(sum(r["cost_usd_without"] for r in turns) - dollars(without)) <= Decimal("0.00005")
    figures = report_json(tmp / "telemetry" / "tool-search.jsonl")
    money = figures["money"]
    spent, without = sum(r["cost_usd"] for r in log), sum(r["cost_usd_without"] for r in log)
    assert money["spent_usd"] == float(spent) and money["without_usd"] == float(without), (money, spent, without)
    assert money["saved_usd"] == float(without - spent) and money["priced_turns"] == len(log)
    assert money["unpriced_turns"] == 0 and figures["unmetered_records"] == 0


def check_memory_parts(stdout: str, tmp: Path) -> None:
    """Every part of bench_memory ran: steady traffic, huge bodies, distinct large messages."""
    for part in ("## (a)", "## (b)", "## (c)"):
        assert any(line.startswith(part) for line in stdout.splitlines()), (part, stdout[-3000:])


# script -> what its output must show beyond a table (stdout, the test's temp dir)
CHECKS = {"bench_session": check_session_cost, "bench_memory": check_memory_parts}


def test_every_benchmark_has_a_smoke_run() -> None:
    scripts = {p.stem for p in (ROOT / "scripts").glob("*.py")} - NOT_BENCHMARKS
    assert scripts == set(SMOKE)


@pytest.mark.parametrize("script", SMOKE)
def test_benchmark_runs_and_prints_its_table(script: str, tmp_path: Path) -> None:
    if script == "bench_agents" and not agents.npm_available():
        pytest.skip("npm/node are not installed: the agent CLIs cannot be installed")
    if script == "bench_retrieval":
        tiny_bfcl(tmp_path / "bfcl.json")
    args = [a.replace("{tmp}", str(tmp_path)) for a in SMOKE[script]]
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / f"{script}.py"), *args], capture_output=True,
                         text=True, timeout=240, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert run.returncode == 0, f"{script} exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    lines = run.stdout.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith("| ")), None)
    assert header is not None, f"{script} printed no table:\n{run.stdout[-3000:]}"
    assert lines[header + 1].startswith("|---") and lines[header + 2].startswith("| "), run.stdout[-3000:]
    if script in CHECKS:
        CHECKS[script](run.stdout, tmp_path)
