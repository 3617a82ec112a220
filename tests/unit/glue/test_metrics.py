"""The metrics server (glue.metrics): started when mitmproxy runs, kept across a reload, moved,
stopped, and failing open when its port is taken."""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from tooldisco.config import parse
from tooldisco.engine.metrics import Metrics
from tooldisco.glue.metrics import MetricsServer

from tests.support import records as sample


def engine(listen: str | None) -> SimpleNamespace:
    """What the server reads of an engine: its config and its metrics (made only when served)."""
    config = parse({"metrics": {"listen": listen}} if listen else {})
    return SimpleNamespace(config=config, metrics=Metrics() if listen else None)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def requests_total(text: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tooldisco_requests_total{"))


@pytest.fixture
def server():
    options = SimpleNamespace(engine=None)
    addon = MetricsServer(options)  # type: ignore[arg-type]
    yield addon, options
    addon.done()


def test_served_once_running_on_a_free_port_then_stopped(server, caplog):
    addon, options = server
    options.engine = engine("127.0.0.1:0")
    addon.configure({"tool_discovery_config"})  # not running yet: nothing bound
    assert addon.url is None
    with caplog.at_level(logging.INFO, logger="tool_discovery"):
        addon.running()
    assert addon.url is not None and not addon.url.endswith(":0/metrics")
    assert [r.getMessage() for r in caplog.records] == [f"tool discovery: metrics at {addon.url}"]
    options.engine.metrics.observe(sample.deferred_turn())
    text = scrape(addon.url)
    assert requests_total(text) == 1 and "tooldisco_search_duration_seconds_bucket" in text
    url = addon.url
    addon.done()
    assert addon.url is None
    with pytest.raises(urllib.error.URLError):
        scrape(url)


def test_a_reload_that_keeps_the_address_keeps_the_server_and_serves_the_new_engine(server):
    addon, options = server
    options.engine = engine("127.0.0.1:0")
    addon.running()
    url = addon.url
    options.engine.metrics.observe(sample.deferred_turn())
    options.engine = engine("127.0.0.1:0")
    addon.configure({"tool_discovery_config"})
    assert addon.url == url
    assert requests_total(scrape(url)) == 0  # the new engine's counters
    options.engine.metrics.observe(sample.deferred_turn())
    options.engine.metrics.observe(sample.native_turn())
    assert requests_total(scrape(url)) == 2


def test_a_reload_that_changes_the_address_moves_the_server_off_the_event_loop(server):
    addon, options = server
    options.engine = engine("127.0.0.1:0")
    addon.running()
    first = addon.url
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options.engine = engine(f"127.0.0.1:{port}")
    started = time.monotonic()
    addon.configure({"tool_discovery_config"})
    assert time.monotonic() - started < 0.2  # the old server's stop waits on a thread of its own
    deadline = time.monotonic() + 10
    while addon.url != f"http://127.0.0.1:{port}/metrics" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert addon.url == f"http://127.0.0.1:{port}/metrics"
    assert "tooldisco_requests" in scrape(addon.url)
    with pytest.raises(urllib.error.URLError):
        scrape(first)
    options.engine = engine(None)  # metrics off in the next config: the server goes
    addon.configure({"tool_discovery_config"})
    deadline = time.monotonic() + 10
    while addon.url is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert addon.url is None


def test_a_port_in_use_is_one_warning_and_no_metrics(server, caplog):
    addon, options = server
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        options.engine = engine(f"127.0.0.1:{port}")
        with caplog.at_level(logging.INFO, logger="tool_discovery"):
            addon.running()
            addon.configure({"tool_discovery_config"})  # the same address again: not tried again
    assert addon.url is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"cannot listen on 127.0.0.1:{port}" in warnings[0].getMessage()
    assert "runs on without them" in warnings[0].getMessage()


def test_no_engine_or_no_metrics_serves_nothing(server):
    addon, options = server
    addon.running()
    assert addon.url is None
    options.engine = engine(None)
    addon.configure({"tool_discovery_config"})
    assert addon.url is None


async def test_the_option_serves_the_engines_metrics_and_a_request_is_counted(tmp_path, caplog):
    from mitmproxy.test import taddons, tutils

    from tests.unit.glue.chain import Chain, flow, relevance_config

    chain = Chain()
    server = chain.get(MetricsServer)
    with taddons.context(*chain.addons) as tctx:
        with caplog.at_level(logging.INFO, logger="tool_discovery"):
            tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path),
                           tool_discovery_metrics="127.0.0.1:0")
            assert chain.engine.metrics is not None and chain.engine.config.metrics.listen == "127.0.0.1:0"
            chain.running()
        try:
            lines = [r.getMessage() for r in caplog.records]
            assert any(line.startswith("tool discovery: on")
                       and line.endswith(" · metrics on 127.0.0.1:0 (a free port)") for line in lines), lines
            assert f"tool discovery: metrics at {server.url}" in lines
            f = flow(n=2)  # below min_tools: passed as sent, its record closed with the answer
            chain.requestheaders(f)
            await chain.request(f)
            f.response = tutils.tresp(headers=[(b"content-type", b"application/json")], content=json.dumps(
                {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
                 "content": [{"type": "text", "text": "done"}],
                 "usage": {"input_tokens": 7, "output_tokens": 3}}).encode())
            chain.responseheaders(f)
            await chain.response(f)
            text = scrape(server.url)
            series = 'tooldisco_requests_total{api="anthropic",mode="none",outcome="kept_whole",strategy="relevance"}'
            assert f"{series} 1.0" in text, text
            assert 'tooldisco_upstream_requests_total{api="anthropic",kind="client",status="200"} 1.0' in text
            assert 'tooldisco_session_store_up{backend="disk"} 1.0' in text
        finally:
            server.done()


def test_a_bad_metrics_option_names_the_option(tmp_path):
    from mitmproxy import exceptions
    from mitmproxy.test import taddons

    from tests.unit.glue.chain import Chain, relevance_config

    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        with pytest.raises(exceptions.OptionsError, match=r"^tool_discovery_metrics: expected HOST:PORT"):
            tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path),
                           tool_discovery_metrics=":9464")


def test_without_the_option_or_metrics_listen_the_engine_counts_nothing(tmp_path):
    from mitmproxy.test import taddons

    from tests.unit.glue.chain import Chain, relevance_config

    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        assert chain.engine.metrics is None and chain.engine.telemetry.observers == ()
