"""``tooldisco wrap AGENT -- COMMAND``: the command runs with the agent's proxy and CA variables
against a mitmdump of its own, which stops when the command exits; then what it did is printed,
and when it did nothing, the real cause (an upstream unreachable or refusing, hosts not listed,
an agent that exited before any request or retried past --timeout) with the log kept."""

from __future__ import annotations

import http.server
import re
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

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
        env = {**scrubbed_env(), "PYTHONPATH": str(REPO_ROOT / "addon"), "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
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


# An "agent" that sends the demo's tools to the URL given, through $HTTPS_PROXY, and reports the
# answer's status on stderr (with --retry: again every 0.3 s, for ever, as agents retry silently,
# and without tools, which the proxy has nothing to plan for: quick on a loaded machine).
POSTING = textwrap.dedent("""
    import json, os, sys, time, urllib.error, urllib.request
    from tooldisco import demo
    body = json.dumps({"model": "claude-demo", "max_tokens": 64,
                       "tools": [] if "--retry" in sys.argv else demo.tools(),
                       "messages": [{"role": "user", "content": "What's the weather in Paris?"}]}).encode()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": os.environ["HTTPS_PROXY"]}))
    while True:
        request = urllib.request.Request(sys.argv[1] + "/v1/messages", body,
                                         {"content-type": "application/json", "x-api-key": "k"})
        try:
            opener.open(request, timeout=30)
            sys.exit(0)
        except urllib.error.HTTPError as e:
            print("agent: the API answered", e.code, file=sys.stderr)
        if "--retry" not in sys.argv:
            sys.exit(1)
        time.sleep(0.3)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wrap(tmp_path: Path, *agent: str, hosts: list[str] | None = None, options: tuple[str, ...] = ()) \
        -> subprocess.CompletedProcess[str]:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "max_search_results": 3}},
        "hosts": hosts or ["127.0.0.1"], "sessions": {"dir": str(tmp_path / "sessions")}}))
    env = {**scrubbed_env(), "PYTHONPATH": str(REPO_ROOT / "addon"), "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "tooldisco.cli", "wrap", "python", "--config", str(config),
                           "--confdir", str(tmp_path / "confdir"), *options, "--", sys.executable, *agent],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env, check=False,
                          stdin=subprocess.DEVNULL)


def _kept_log(err: str) -> Path:
    [path] = re.findall(r"^tooldisco wrap: mitmdump's log is kept: (\S+)$", err, re.M)
    assert Path(path).is_file() and "HTTP(S) proxy listening" in Path(path).read_text()
    return Path(path)


def test_wrap_names_an_unreachable_upstream_and_keeps_the_log(tmp_path) -> None:
    port = _free_port()  # nothing listens there: a listed host that cannot be reached
    done = _wrap(tmp_path, "-c", POSTING, f"http://127.0.0.1:{port}")
    err = done.stderr
    assert done.returncode == 1, err  # the agent's own status
    assert f"tooldisco wrap: upstream unreachable: 127.0.0.1:{port}: " in err, err
    assert "no request was processed (none reached" not in err  # the old, wrong blame
    assert "tooldisco wrap: the agent's stderr, last lines:\n  | agent: the API answered 502" in err, err
    assert "tooldisco wrap: mitmdump's log, last lines:" in err
    assert "Connect call failed" in _kept_log(err).read_text()


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b'{"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}'
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_wrap_names_an_upstream_refusing_with_its_status(tmp_path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = _wrap(tmp_path, "-c", POSTING, f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 1, done.stderr
    assert ("tooldisco wrap: upstream refused: 127.0.0.1 answered 401 Unauthorized: the key or login was refused"
            in done.stderr), done.stderr
    _kept_log(done.stderr)


def test_wrap_names_hosts_the_config_does_not_list(tmp_path) -> None:
    model = demo.FakeModel()
    try:
        done = _wrap(tmp_path, "-c", POSTING, model.url, hosts=["api.anthropic.com"])
    finally:
        model.close()
    assert done.returncode == 0, done.stderr
    assert "tooldisco: no request was processed" in done.stderr
    assert ("tooldisco wrap: hosts not listed: 127.0.0.1 got requests with tools, but the config's hosts: does not "
            f"list it: add it (or a preset) to hosts: in {tmp_path / 'c.yaml'}") in done.stderr, done.stderr
    _kept_log(done.stderr)


def test_wrap_names_an_agent_that_exits_before_any_request(tmp_path) -> None:
    done = _wrap(tmp_path, "-c", "import sys; print('Invalid API key · Please run /login', file=sys.stderr); sys.exit(1)")
    assert done.returncode == 1
    assert "tooldisco wrap: the agent exited (status 1) after" in done.stderr, done.stderr
    assert "before any request reached the proxy" in done.stderr
    assert "  | Invalid API key · Please run /login" in done.stderr


def test_wrap_stops_an_agent_that_retries_silently_past_the_timeout(tmp_path) -> None:
    port = _free_port()
    done = _wrap(tmp_path, "-c", POSTING, f"http://127.0.0.1:{port}", "--retry", options=("--timeout", "5"))
    err = done.stderr
    assert done.returncode == 124, err
    assert "tooldisco wrap: no answer from the provider for 5 s: stopping the agent" in err
    assert "tooldisco wrap: stopped the agent after 5 s without an answer from the provider" in err
    assert re.search(rf"upstream unreachable: 127\.0\.0\.1:{port} \(\d+×\)", err), err
    _kept_log(err)
