"""``tooldisco demo``: offline, without an API key, one turn through a real mitmdump; it prints
the turn's before and after from what the fake model received and the proxy recorded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.e2e.harness import REPO_ROOT, scrubbed_env

pytestmark = pytest.mark.e2e


def test_demo_prints_the_turn_before_and_after(tmp_path) -> None:
    env = {**scrubbed_env(), "PYTHONPATH": str(REPO_ROOT / "addon"), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "tooldisco.cli", "demo"], capture_output=True, text=True,
                          timeout=180, cwd=tmp_path, env=env, check=False)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "client: anthropic SDK" in out
    lines = {line.split(":", 1)[0]: line for line in out.splitlines()}
    assert lines["before"].startswith("before: the client sent 33 tools")
    assert "gateway_search_tools" in lines["after"] and "fewer" in lines["after"]
    assert "mcp__weather__get_forecast" in lines["search"]
    assert "the search hidden from the client" in lines["then"]
    assert lines["answer"].startswith("answer: Found what I need")
    assert not os.listdir(tmp_path)  # its temp files are gone, nothing written in the working directory
