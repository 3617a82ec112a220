"""``tooldisco wrap`` tells the real cause of a run that processed nothing, from what its own
recorder saw (connections, requests, answers, errors), the telemetry and mitmdump's log; and it
stops waiting on an agent that retries silently. The runs end to end: tests/e2e/test_wrap.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tooldisco import cli
from tooldisco.config import parse

ROOT = Path(__file__).resolve().parents[2]
CONFIG = parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search"}},
                "hosts": ["api.anthropic.com"]}, env={})
WHERE = "/home/me/.config/tooldisco/config.yaml"


def request(n: int, host: str = "api.anthropic.com") -> dict:
    return {"e": "request", "id": f"f{n}", "host": host, "port": 443, "method": "POST", "path": "/v1/messages"}


def status(n: int, code: int, reason: str = "", host: str = "api.anthropic.com") -> dict:
    return {"e": "status", "id": f"f{n}", "host": host, "port": 443, "status": code, "reason": reason}


def causes(**run) -> list[str]:
    return cli.causes(cli.WrapRun(**{"status": 1, "seconds": 0.4, **run}), CONFIG, WHERE)


def test_an_agent_that_exits_before_any_request() -> None:
    assert causes(events=[{"e": "connect", "peer": 5000}], probes={5000}) == [
        "the agent exited (status 1) after 0.4 s, before any request reached the proxy: its own error says why "
        "(not logged in? a wrong flag or model?)"]
    assert causes(status=0)[0].startswith("the agent exited after 0.4 s without a request through the proxy: does it "
                                          "read HTTPS_PROXY")
    assert causes(events=[{"e": "connect", "peer": 6000}], probes={5000}) == [
        "the agent connected to the proxy but sent no request through it"]


def test_requests_that_never_reached_the_proxy_before_the_timeout() -> None:
    assert causes(status=None, timeout=120) == [
        "stopped the agent after 120 s without an answer from the provider (--timeout; 0 waits for ever)",
        "no request reached the proxy in 120 s: the agent does not use HTTPS_PROXY, or NO_PROXY covers its host "
        "(a client that ignores HTTPS_PROXY needs a base URL and reverse mode: docs/agents.md)"]


def test_a_ca_the_agent_does_not_trust() -> None:
    [line] = causes(events=[{"e": "tls_client", "host": "api.anthropic.com", "msg": "unknown ca"}] * 2)
    assert line.startswith("the agent refused the proxy's certificate for api.anthropic.com (2×): it does not trust "
                           "mitmproxy's CA")


def test_an_unreachable_upstream_names_the_server_and_the_error() -> None:
    events = [request(1), {"e": "unreachable", "host": "api.anthropic.com", "port": 443,
                           "msg": "[Errno 111] Connect call failed ('10.0.0.1', 443)"},
              {"e": "error", "id": "f1", "host": "api.anthropic.com", "port": 443, "msg": "Connect call failed"}]
    assert causes(events=events) == [
        "upstream unreachable: api.anthropic.com:443: [Errno 111] Connect call failed ('10.0.0.1', 443) (the network, "
        "a firewall, or an upstream proxy this machine needs)"]
    # Without the server hook's event, the flow's error says it.
    assert causes(events=events[::2])[0].startswith("upstream unreachable: api.anthropic.com:443: Connect call failed")


def test_an_upstream_refusing_says_the_status_and_what_it_likely_means() -> None:
    events = [request(1), status(1, 401, "Unauthorized"), request(2), status(2, 401, "Unauthorized"),
              request(3, "statsig.anthropic.com"), status(3, 404, host="statsig.anthropic.com")]  # not the model API
    assert causes(events=events) == [
        "upstream refused: api.anthropic.com answered 401 Unauthorized (2×): the key or login was refused: is the "
        "agent logged in, or its API key variable set?"]
    assert causes(events=[request(1), status(1, 529)])[0].endswith("answered 529: the provider's own error (most "
                                                                    "agents retry it)")
    assert "rate limited" in causes(events=[request(1), status(1, 429, "Too Many Requests")])[0]


def test_hosts_not_listed() -> None:
    log = ("[12:00:00.000] tool discovery: gateway.example.com is not in hosts: requests with tools to it pass "
           "unprocessed; add it (or a preset) to hosts: in /tmp/tooldisco-wrap-x/config.yaml\n")
    events = [request(1, "gateway.example.com"), status(1, 200, "OK", "gateway.example.com")]
    assert causes(events=events, log=log) == [
        f"hosts not listed: gateway.example.com got requests with tools, but the config's hosts: does not list it: "
        f"add it (or a preset) to hosts: in {WHERE}"]
    # No warning (no tools seen, or an unknown path): still, no request went to a listed host.
    assert causes(events=events) == [
        f"no request went to a host the config lists (api.anthropic.com); the agent's went to gateway.example.com: "
        f"add the model API's host (or a preset) to hosts: in {WHERE}"]


def test_answered_requests_without_tools() -> None:
    [line] = causes(status=0, events=[request(1), status(1, 200, "OK")])
    assert line.startswith("requests reached api.anthropic.com and were answered, but none carried tool definitions")


def test_a_processed_run_has_no_cause() -> None:
    assert causes(status=0, events=[request(1), status(1, 200, "OK")], records=[{"tool_tokens_before": 10}]) == []


def test_the_stall_arms_at_the_start_and_on_failures_and_waits_for_slow_answers(tmp_path) -> None:
    stall = cli._Stall(tmp_path / "events.jsonl", CONFIG, armed_at=0.0)
    assert not stall.stalled(10, 9.9) and stall.stalled(10, 10.0)  # nothing at all for 10 s
    stall.see(status(0, 200, host="statsig.anthropic.com"), 1.0)  # an answer, nothing failed yet: working
    assert not stall.stalled(10, 100.0)
    stall.see(request(1), 2.0)
    stall.see(status(1, 529), 3.0)  # the model API fails: armed again
    stall.see(status(2, 200, host="statsig.anthropic.com"), 4.0)  # another host's answer does not disarm
    assert stall.stalled(10, 13.0)
    stall.see(request(3), 12.5)  # a retry waiting for its answer (a model may think a while)
    assert not stall.stalled(10, 20.0) and stall.stalled(10, 22.5)
    stall.see(status(3, 200), 23.0)  # an answer from the model API: disarmed
    assert not stall.stalled(10, 1000.0)
    interactive = cli._Stall(tmp_path / "events.jsonl", CONFIG, armed_at=None)  # someone at the keyboard
    assert not interactive.stalled(10, 1000.0)
    interactive.see({"e": "unreachable", "host": "api.anthropic.com", "port": 443}, 5.0)
    assert interactive.stalled(10, 15.0)


def test_the_stall_reads_the_recorders_lines_as_they_come(tmp_path) -> None:
    path = tmp_path / "events.jsonl"
    stall = cli._Stall(path, CONFIG, armed_at=None)
    stall.read(0.0)  # no file yet
    path.write_text('{"e": "request", "id": "f1", "host": "api.anthropic.com"}\n{"e": "status", "id": "f1", "ho')
    stall.read(1.0)
    assert stall.inflight == {"f1": 1.0}
    with path.open("a") as f:
        f.write('st": "api.anthropic.com", "status": 503}\n')
    stall.read(2.0)
    assert stall.inflight == {} and stall.since == 2.0 and stall.failed


def test_the_summary_of_nothing_blames_nothing() -> None:
    assert cli.summary([]) == ["tooldisco: no request was processed"]


def test_an_agent_that_is_not_installed_is_named_before_any_proxy_starts(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLDISCO_CONFIG", "CONFIG", "XDG_CONFIG_HOME")}
    done = subprocess.run([sys.executable, "-m", "tooldisco.cli", "wrap", "codex", "--", "codex-not-installed-here",
                           "exec", "hi"], capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
                          env={**env, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "addon")})
    assert done.returncode == 127, done.stderr
    assert done.stderr.splitlines() == [
        "tooldisco wrap: agent not found: codex-not-installed-here is not on PATH",
        "  fix: install it (docs/agents.md), or give its path: tooldisco wrap codex -- /path/to/codex-not-installed-here ..."]
    assert not (tmp_path / ".mitmproxy").exists()  # no mitmdump ran
    missing = subprocess.run([sys.executable, "-m", "tooldisco.cli", "wrap", "codex", "--", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
                             env={**env, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT / "addon")})
    assert missing.returncode == 127 and f"agent not found: {tmp_path / 'nope'} does not exist" in missing.stderr


def test_a_stopped_run_names_the_requests_still_waiting() -> None:
    lines = causes(status=None, timeout=5, events=[request(1), status(1, 200, "OK"), request(2)])
    assert lines[1] == ("still waiting for an answer when stopped: api.anthropic.com (the proxy's log says whether "
                        "it was planning the request or waiting on the upstream)")


def test_the_summary_says_which_requests_got_no_answer() -> None:
    [first, _] = cli.summary([{"tool_tokens_before": 100, "tool_tokens_after": 10,
                               "outcome": "flow_error: [Errno 111] Connect call failed"}])
    assert first.endswith("(90% fewer); 1 of them got no answer from upstream (below)")
