"""The api strategy through a real mitmdump: the reference selector, fault-injecting
selectors that must all fail open, and the rollout modes, judged by what upstream receives."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

import pytest

from tests.e2e.harness import REPO_ROOT, ConfigSpec, addon_config
from tests.fakeprovider import SEARCH_TOOL, call, reply, search
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e
TARGET = "mcp__weather__get_forecast"
KEY = "selector-test-key"


class FaultySelector:
    """A selector whose answer each test sets: a status and body, or a delay."""

    def __init__(self) -> None:
        self.behaviour: Callable[[dict], tuple[int, bytes, float]] = lambda req: (200, b'{"selected_names":[]}', 0)
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else each kept-alive answer waits for a delayed ACK

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.requests.append({"auth": self.headers.get("authorization"), "body": body})
                status, payload, delay = outer.behaviour(body)
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the proxy gave up waiting

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/tool-discovery/search"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="module")
def faulty() -> Iterator[FaultySelector]:
    s = FaultySelector()
    yield s
    s.close()


def api_config(endpoint: str, rollout: str = "full", percent: float = 100, timeout: str = "1s") -> ConfigSpec:
    api = {"endpoint": endpoint, "api_key": KEY, "timeout": timeout, "max_response_bytes": 4096, "rollout": rollout,
           "rollout_percent": percent}
    return partial(addon_config, strategy="api", max_search_results=3, api=api, telemetry="t.jsonl")


def fresh(text: str) -> str:
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def ask(proxy, text: str = "What's the forecast for Paris?", n: int = 60):
    with proxy.anthropic() as client:
        return client.messages.create(model="m", max_tokens=128, tools=anthropic_tools(n),
                                      messages=[{"role": "user", "content": fresh(text)}])


def names(rec) -> list[str]:
    return [t["name"] for t in rec.json.get("tools") or []]


def telemetry(proxy, where=None, at_least: int = 1) -> list[dict]:
    return proxy.records("t.jsonl", where=where, at_least=at_least)


def test_reference_selector_end_to_end(mitm_factory, fake, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "tooldisco.selector_service", "--host", "127.0.0.1", "--port", "0",
         "--backend", "bm25", "--api-key-env", "SELECTOR_KEY"],
        cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT / "addon"), "SELECTOR_KEY": KEY, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("tool selector listening on "):
                url = line.split()[-1]
        assert url, "selector did not start"
        proxy = mitm_factory(config=api_config(url))
        fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("done")])
        msg = ask(proxy)
        assert [b.name for b in msg.content if b.type == "tool_use"] == [TARGET]
        first, second = fake.api_requests("anthropic")
        assert names(first) == [SEARCH_TOOL] and TARGET in names(second) and len(names(second)) <= 4
        rec = [r for r in telemetry(proxy, where=lambda r: r.get("searches")) if r.get("searches")][-1]
        s = rec["searches"][0]
        assert s["backend"] == "api" and s["api_status"] == 200 and TARGET in s["matched"] and s["api_ms"] > 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("behaviour, reason", [
    (lambda b: (200, b'{"selected_names":[]}', 0), "empty_selection"),
    (lambda b: (200, b'{"selected_names":["ghost"]}', 0), "unknown_names"),
    (lambda b: (200, b"<html>oops", 0), "malformed_json"),
    (lambda b: (500, b'{"error":"boom"}', 0), "http_500"),
    (lambda b: (200, b'{"selected_names":["x"]}', 3.0), "timeout"),
    (lambda b: (200, json.dumps({"selected_names": [t["name"] for t in b["tools"]] * 20}).encode(), 0),
     "response_too_large"),
], ids=["empty", "unknown", "malformed", "500", "slow", "oversized"])
def test_every_selector_failure_fails_open(mitm_factory, fake, faulty, behaviour, reason):
    faulty.behaviour = behaviour
    proxy = mitm_factory(config=api_config(faulty.url, timeout="1s"))
    fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("done")])
    msg = ask(proxy)
    assert [b.name for b in msg.content if b.type == "tool_use"] == [TARGET]  # the model still got its tool
    second = fake.api_requests("anthropic")[1]
    assert len(names(second)) == 61  # every deferred tool restored, plus the search tool
    assert faulty.requests[-1]["auth"] == f"Bearer {KEY}"
    rec = [r for r in telemetry(proxy, where=lambda r: r.get("searches")) if r.get("searches")][-1]
    assert rec["searches"][0]["fallback"] == reason and rec["fallback_reason"] == f"selector_{reason}"


def test_no_endpoint_fails_open(mitm_factory, fake):
    proxy = mitm_factory(config=api_config("http://127.0.0.1:9/unreachable", timeout="1s"))
    fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("done")])
    msg = ask(proxy)
    assert [b.name for b in msg.content if b.type == "tool_use"] == [TARGET]


@pytest.mark.parametrize("mode", ["dark", "shadow"])
def test_dark_and_shadow_leave_tools_alone_and_log(mitm_factory, fake, faulty, mode):
    faulty.behaviour = lambda b: (200, json.dumps({"selected_names": [TARGET, "mcp__weather__get_current_weather"]}).encode(), 0)
    proxy = mitm_factory(config=api_config(faulty.url, rollout=mode))
    fake.set_script([reply("hello")])
    tools = anthropic_tools(60)
    ask(proxy, "weather forecast for Paris")
    assert fake.api_requests("anthropic")[-1].json["tools"] == tools  # unaltered
    rec = [r for r in telemetry(proxy, where=lambda r: r.get("shadow")) if r.get("shadow")][-1]
    assert rec["rollout"] == mode and rec["shadow"]["selected"][0] == TARGET
    assert "weather forecast for Paris" in faulty.requests[-1]["body"]["pattern"]
    if mode == "shadow":
        assert TARGET in rec["shadow"]["relevance_kept"] and rec["shadow"]["overlap"] == 1.0


@pytest.mark.parametrize("percent, deferred", [(0, False), (100, True)])
def test_partial_rollout_is_per_session(mitm_factory, fake, faulty, percent, deferred):
    faulty.behaviour = lambda b: (200, json.dumps({"selected_names": [TARGET]}).encode(), 0)
    proxy = mitm_factory(config=api_config(faulty.url, rollout="partial", percent=percent))
    fake.set_script([reply("hello")])
    for _ in range(3):
        ask(proxy)
        assert (names(fake.api_requests("anthropic")[-1]) == [SEARCH_TOOL]) is deferred
    assert {r["rollout"] for r in telemetry(proxy, at_least=3)} == {f"partial:{'in' if deferred else 'out'}"}


def test_report_over_a_real_run(mitm_factory, fake, faulty):
    faulty.behaviour = lambda b: (200, json.dumps({"selected_names": [TARGET]}).encode(), 0)
    proxy = mitm_factory(config=api_config(faulty.url))
    for _ in range(4):
        fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("done")])
        ask(proxy)
    faulty.behaviour = lambda b: (500, b"{}", 0)
    fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("done")])
    ask(proxy)
    telemetry(proxy, at_least=5)  # every record written
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "report_api.py"), str(proxy.workdir / "t.jsonl")],
                         capture_output=True, text=True, check=True).stdout
    assert "80" in out and "http_500" in out  # 4 of 5 searches succeeded


def test_a_slow_selector_within_the_timeout_is_used(mitm_factory, fake, faulty):
    faulty.behaviour = lambda b: (200, json.dumps({"selected_names": [TARGET]}).encode(), 0.6)
    proxy = mitm_factory(config=api_config(faulty.url, timeout="2s"))
    fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("done")])
    msg = ask(proxy)
    assert [b.name for b in msg.content if b.type == "tool_use"] == [TARGET]
    assert names(fake.api_requests("anthropic")[1]) == [SEARCH_TOOL, TARGET]  # the selection, not everything
    s = [r for r in telemetry(proxy, where=lambda r: r.get("searches")) if r.get("searches")][-1]["searches"][0]
    assert s["fallback"] is None and s["api_ms"] >= 600
