"""A real mitmdump in reverse mode in front of a host ``hosts:`` does not list: requests with
tools pass unprocessed, and mitmdump says so once for the host, naming it and the config."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from tests.e2e.harness import ADDON_PATH, MITMDUMP, REPO_ROOT, STARTUP_TIMEOUT, addon_config, scrubbed_env
from tests.fakeprovider import FakeProvider

pytestmark = pytest.mark.e2e

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"type": "function", "function": {"name": f"t{i}", "description": "d",
                                                               "parameters": {"type": "object"}}}
                             for i in range(30)]}).encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_reverse_proxy_to_an_unlisted_host_warns_once(tmp_path: Path, fake: FakeProvider) -> None:
    config = tmp_path / "tool_discovery.yaml"
    config.write_text(addon_config(tmp_path, strategy="relevance"))  # hosts: the default list
    port = _free_port()
    log_path = tmp_path / "mitmdump.log"
    cmd = [str(MITMDUMP), "--set", f"confdir={tmp_path / 'confdir'}", "--mode", f"reverse:{fake.url}",
           "--listen-host", "127.0.0.1", "--listen-port", str(port), "-s", str(ADDON_PATH),
           "--set", f"tool_discovery_config={config}"]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=scrubbed_env() | {"PYTHONUNBUFFERED": "1"},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while "listening at" not in log_path.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.05)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for _ in range(2):
                r = client.post("/v1/chat/completions", content=BODY,
                                headers={"authorization": "Bearer sk-test", "content-type": "application/json"})
                assert r.status_code == 200, r.text
                assert fake.last_request().body == BODY  # unprocessed: byte for byte
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log_path.read_text(errors="replace")
    warning = re.escape("tool discovery: 127.0.0.1 is not in hosts: requests with tools to it pass "
                        f"unprocessed; add it (or a preset) to hosts: in {config}")
    assert len(re.findall(warning, text)) == 1, text
