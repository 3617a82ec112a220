"""``tooldisco demo``: offline, without an API key, one turn through a real mitmdump; it prints
the turn's before and after from what the fake model received and the proxy recorded, and keeps
the turn's telemetry where ``tooldisco report`` (the command it prints) reads it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from tests.e2e.harness import REPO_ROOT, scrubbed_env

pytestmark = pytest.mark.e2e


def test_demo_prints_the_turn_before_and_after(tmp_path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {**scrubbed_env(), "PYTHONPATH": str(REPO_ROOT / "addon"), "HOME": str(home)}
    env.pop("XDG_CACHE_HOME", None)
    done = subprocess.run([sys.executable, "-m", "tooldisco.cli", "demo"], capture_output=True, text=True,
                          timeout=180, cwd=work, env=env, check=False)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "client: anthropic SDK" in out
    lines = {line.split(":", 1)[0]: line for line in out.splitlines()}
    assert lines["before"].startswith("before: the client sent 33 tools")
    assert "gateway_search_tools" in lines["after"] and "fewer" in lines["after"]
    assert "mcp__weather__get_forecast" in lines["search"]
    assert "the search hidden from the client" in lines["then"]
    assert lines["answer"].startswith("answer: Found what I need")
    assert not os.listdir(work)  # its temp files are gone, nothing written in the working directory
    # Its telemetry stays in the user's cache, and the exact command that reads it is printed.
    kept = home / ".cache" / "tooldisco" / "demo.jsonl"
    assert lines["report"] == ("report: the turn's telemetry is in ~/.cache/tooldisco/demo.jsonl: tooldisco report "
                               "~/.cache/tooldisco/demo.jsonl makes a page of it (the report extra), tooldisco report "
                               "--json ~/.cache/tooldisco/demo.jsonl prints its figures")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    report = subprocess.run([sys.executable, "-m", "tooldisco.cli", "report", "--json", str(kept)],
                            capture_output=True, text=True, timeout=120, cwd=work, env=env, check=False)
    assert report.returncode == 0, report.stderr
    figures = json.loads(report.stdout)
    assert figures["records"] == 1 and figures["tool_tokens"]["saved"] > 0
    before = lines["before"].split("~")[1].split()[0]
    assert figures["tool_tokens"]["before"] == int(before)  # the turn the demo printed
