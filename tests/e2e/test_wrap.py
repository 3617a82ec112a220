"""``tooldisco wrap AGENT -- COMMAND``: the command runs with the agent's proxy and CA variables
against a mitmdump of its own, which stops when the command exits; then what it did is printed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import yaml
from tooldisco import demo

from tests.e2e.harness import REPO_ROOT, scrubbed_env

pytestmark = pytest.mark.e2e

# The "agent": sends one Messages request with the demo's tools through $HTTPS_PROXY (plain HTTP
# to the fake, so no CA is involved), checks the CA variable names a file, exits 3.
AGENT = textwrap.dedent("""
    import json, os, sys, urllib.request
    from tooldisco import demo
    assert os.path.isfile(os.environ["SSL_CERT_FILE"]), os.environ["SSL_CERT_FILE"]
    body = {"model": "claude-demo", "max_tokens": 64, "tools": demo.tools(),
            "messages": [{"role": "user", "content": "What's the weather in Paris?"}]}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": os.environ["HTTPS_PROXY"]}))
    request = urllib.request.Request(sys.argv[1] + "/v1/messages", json.dumps(body).encode(),
                                     {"content-type": "application/json", "x-api-key": "k"})
    print("agent got", len(json.load(opener.open(request, timeout=60))["content"]), "blocks")
    sys.exit(3)
""")


def test_wrap_runs_the_agent_through_its_own_proxy_and_reports(tmp_path) -> None:
    model = demo.FakeModel()
    try:
        config = tmp_path / "c.yaml"
        config.write_text(yaml.safe_dump({
            "pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "max_search_results": 3}},
            "hosts": ["127.0.0.1"], "sessions": {"dir": str(tmp_path / "sessions")}}))
        env = {**scrubbed_env(), "PYTHONPATH": str(REPO_ROOT / "addon"), "HOME": str(tmp_path)}
        done = subprocess.run([sys.executable, "-m", "tooldisco.cli", "wrap", "python", "--config", str(config),
                               "--confdir", str(tmp_path / "confdir"), "--",
                               sys.executable, "-c", AGENT, model.url],
                              capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env, check=False)
    finally:
        model.close()
    assert done.returncode == 3, done.stdout + done.stderr  # the agent's own exit status
    assert "agent got 1 blocks" in done.stdout
    assert len(model.requests) == 2  # the search's round: the proxy answered it and re-forwarded
    assert "tooldisco: 1 requests processed" in done.stderr and "fewer" in done.stderr
    assert "tooldisco: 1 searches answered by the proxy" in done.stderr
    assert "mcp__weather__get_forecast" in done.stderr
    assert (tmp_path / "confdir" / "mitmproxy-ca-cert.pem").is_file()
