"""scripts/_bench.py's pure helpers, which every benchmark's figures go through."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import _bench  # noqa: E402


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert _bench.percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5
    assert _bench.percentile([7.0], 95) == 7.0
    assert _bench.percentile(list(range(1, 101)), 95) == 95.05
    assert math.isnan(_bench.percentile([], 50))


def test_p50_p95_and_ratio_cells() -> None:
    assert _bench.p50_p95([0.001, 0.002, 0.003], 1000) == "2.0 / 2.9"
    assert _bench.p50_p95([]) == "n/a"
    assert _bench.ratio(3.0, 2.0) == "1.50x"
    assert _bench.ratio(1.0, 0.0) == "n/a" and _bench.ratio(1.0, math.nan) == "n/a"


def test_table_right_aligns_the_columns_marked_numeric() -> None:
    out = _bench.table(["proxy", "req/s:"], [("a|b", 1.5)]).splitlines()
    assert out == ["| proxy | req/s |", "|---|---:|", "| a\\|b | 1.5 |"]


def test_importing_it_leaves_out_the_test_rig() -> None:
    """report_api.py imports it for percentiles: no harness, no psutil until a proxy is started."""
    code = ("import sys; import _bench; "
            "sys.exit(sorted(m for m in ('tests.e2e.harness', 'psutil') if m in sys.modules) or 0)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "scripts", capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
