"""The layout's import rules hold: the import-linter contracts (pyproject.toml), no import
cycle at file level, and no project import hidden inside a function without its reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import imports

ROOT = Path(__file__).resolve().parents[2]
ADDON = ROOT / "addon"


def test_import_contracts_are_kept() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter is not installed (the dev extra)")
    env = {**os.environ, "PYTHONPATH": str(ADDON)}
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_import_cycles() -> None:
    assert imports.cycles(ADDON) == []


def test_the_cycle_check_sees_a_lazy_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from p import b\n")
    (pkg / "b.py").write_text("def f():\n    from p.a import x\n")
    assert imports.cycles(tmp_path) == [["p.a", "p.b"]]


def test_project_imports_are_at_the_top() -> None:
    assert imports.local_imports(ADDON) == []
