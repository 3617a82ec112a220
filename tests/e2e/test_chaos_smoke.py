"""Smoke run of ``scripts/chaos.py``: every scenario at tiny sizes, against real mitmdump processes.

It checks only that each scenario ran and produced its figures for both proxies, not the
bounds: the bounds are the script's verdict (``--strict``), measured on purpose outside the
test suite. What this keeps from rotting is the script itself: its upstream, its clients,
its use of the harness and of the addon's config.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from chaos import SCENARIOS  # noqa: E402

pytestmark = pytest.mark.e2e

TINY = ["--bomb-size", "1M", "--heavy-tools", "200", "--store-requests", "2", "--lock-seconds", "1",
        "--hold-seconds", "0.5", "--leave-wait", "2", "--relay-body", "2M", "--big-answer", "1M", "--settle", "2"]
# One row per scenario, several for some; the row names start with these.
ROWS = {"bombs": ("1 bomb br", "1 bomb zstd", "1 bomb gzip"),
        "store": ("2 store: garbage", "2 store: read-only", "2 store: locked"),
        "heavy": ("3 heavy",), "cut": ("4 cut re-forward (JSON)", "4 cut re-forward (stream)"),
        "stall": ("5 stalled",), "leave": ("5 client leaves during held re-forward (JSON)",
                                           "5 client leaves during held re-forward (stream)"),
        "loop": ("6 loop limit: model always searches (JSON)", "6 loop limit: model always searches (stream)"),
        "creds": ("7 credentials",), "relay": ("8 relay",), "bigstream": ("9 ",), "surrogate": ("10 lone",)}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "chaos.py"), "--json", *TINY],
                         capture_output=True, text=True, timeout=270, cwd=ROOT)  # under pytest's own 300 s
    assert run.returncode == 0, run.stderr[-5000:]
    return json.loads(run.stdout)["rows"]


def test_every_scenario_is_covered() -> None:
    assert set(ROWS) == set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_produced_figures(rows: list[dict], scenario: str) -> None:
    for prefix in ROWS[scenario]:
        row = next((r for r in rows if r["scenario"].startswith(prefix)), None)
        assert row is not None, f"no row {prefix!r} in {[r['scenario'] for r in rows]}"
        assert row["addon"] and not row["addon"].startswith("scenario error"), row
        assert row["plain"], row
        assert row["bound"], row
        assert row["verdict"] in ("ok", "FAIL", "-"), row
