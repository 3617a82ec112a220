"""Smoke runs of every benchmark in ``scripts/``: each at its smallest size, against real mitmdump
processes where it measures one.

Only that the script runs and prints its table: the figures and their bounds are what the scripts
report, measured on purpose outside the test suite (timings flake on a loaded machine). What this
keeps from rotting is the scripts themselves: their use of the addon's API, of the harness, of the
fake provider and of the shipped configs. ``scripts/chaos.py`` has its own smoke test
(``test_chaos_smoke.py``); ``scripts/memtrace.py`` is the probe ``bench_memory.py`` and
``soak.py`` load into their proxies, so it runs here through them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
                       "--cpu-turns", "2", "--cpu-rounds", "2", "--cpu-apis", "anthropic,chat", "--cpu-metrics"],
    "profile_proxy": ["--tools", "30", "--turns", "2", "--apis", "anthropic,responses", "--top", "5"],
    "bench_fairness": ["--heavy", "1", "--tools", "200", "--seconds", "2", "--lock", "0.5"],
    "bench_stream_memory": ["--mib", "2", "--after", "0.5"],
    "bench_load": ["--smoke"],
    "soak": ["--smoke"],
    "crash_test": ["--backend", "disk", "--sessions", "4", "--kills", "1"],
    "bench_memory": ["--smoke"],
    "bench_ttfb": ["--runs", "1", "--delay", "0.01", "--concurrency", "2"],
    "bench_session": ["--plan", "release", "--turns", "3", "--apis", "anthropic", "--paths", "mitmdump,tool-search"],
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
