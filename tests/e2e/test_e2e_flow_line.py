"""A real mitmdump, at its default verbosity, says what the proxy did: a startup summary, then one
line per processed flow with the figures of its telemetry record, and never a credential or the
user's words."""

from __future__ import annotations

import uuid
from functools import partial
from pathlib import Path

import pytest

from tests.e2e.harness import ADDON_PATH, MitmDump, addon_config
from tests.fakeprovider import call, reply, search
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

TARGET = "mcp__weather__get_forecast"
KEY = "sk-ant-api03-tdFlowLineKey5e7c9a1b3d5f7a9c1e3b246"
REDIS_PASSWORD = "tdFlowLineRedisPassw0rd"
SECRET_QUESTION = "my private plans for Paris"


@pytest.fixture
def proxy(tmp_path: Path, fake) -> MitmDump:
    # A Redis store whose URL holds a password: the startup line names its host only. Nothing
    # listens there; the store fails open and the flows go on without session state.
    config = partial(addon_config, strategy="tool-search", max_search_results=3,
                     sessions={"backend": "redis", "redis": {"url": f"redis://:{REDIS_PASSWORD}@127.0.0.1:9/0",
                                                             "timeout": 0.2}})
    mitm = MitmDump(tmp_path / "mitmdump", fake.url, script=ADDON_PATH, config=config)  # no -q, no --set termlog
    mitm.start()
    yield mitm
    mitm.stop()


@pytest.mark.parametrize("model, how", [("claude-sonnet-4-5", "60 deferred natively · native"),
                                        ("claude-x", "60 deferred (search) · classic")])
def test_mitmdump_prints_a_startup_summary_and_a_line_per_flow(proxy, fake, model, how):
    start = proxy.log_text()
    summary = next(line for line in start.splitlines() if "tool discovery: on" in line)
    assert f"config {proxy.config_path}" in summary and "strategy tool-search" in summary
    assert "deferral native on anthropic, responses, bedrock" in summary and "call-through on openai_chat, gemini" in summary
    assert "search bm25" in summary and "hosts api.anthropic.com" in summary
    assert "sessions redis at 127.0.0.1:9" in summary and f"telemetry {proxy.workdir / 'tool_discovery.jsonl'}" in summary
    assert REDIS_PASSWORD not in start

    offset = proxy.log_offset()
    fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("sunny")])
    body = {"model": model, "max_tokens": 256, "tools": anthropic_tools(60),
            "messages": [{"role": "user", "content": f"{SECRET_QUESTION} [{uuid.uuid4().hex[:8]}]"}]}
    with proxy.httpx_client() as client:
        r = client.post("https://api.anthropic.com/v1/messages?beta=true", json=body, headers={"x-api-key": KEY})
    assert r.status_code == 200
    record = proxy.records(at_least=1)[-1]
    line = proxy.wait_for_log(r"tool discovery: POST api\.anthropic\.com/v1/messages .*", since=offset).group(0)
    saved = record["tool_tokens_before"] - record["tool_tokens_after"]
    assert line.startswith(f"tool discovery: POST api.anthropic.com/v1/messages [anthropic] · 60 tools → 0 loaded, {how} · "
                           f"1 search, 2 hits: {TARGET}, ")
    assert f"called {TARGET}" in line and f"~{saved:,} tok saved (tool tokens ~{record['tool_tokens_before']:,} sent → "
    assert f"~{record['tool_tokens_after']:,} in the prompt" in line
    # The end: the result in words, the upstream rounds, the times as the record measured them, its id.
    proxy_ms = record["processing_ms"] + record["loop_added_ms"]
    assert line.endswith(f" · answered after 1 search, 2 upstream rounds, {record['total_ms']:.1f} ms total: upstream "
                         f"{record['upstream_ms']:.1f} ms, proxy {proxy_ms:.1f} ms, id {record['id']}")
    assert record["upstream_ms"] > 0 and record["total_ms"] >= record["upstream_ms"]
    assert ("on the wire" in line) == (record["deferral"] == "native")
    out = proxy.log_text()
    assert KEY not in out and SECRET_QUESTION not in out and "weather forecast" not in out and "beta=true" not in line
