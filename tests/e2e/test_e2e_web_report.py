"""The same turns, the same figures everywhere: a real mitmweb with the addon in front of the
fake provider runs a few turns (a classic JSON turn whose model searches, a native streamed
one, a call-through one, one that goes upstream as the client sent it); then mitmweb's flows
are read through its HTTP API (each flow's comment, and the "Tool discovery" view's header),
the telemetry file is read, ``tooldisco report --json`` runs over it, and every turn's figures
must agree: tokens sent / on the wire / in the prompt, searches and hits, upstream rounds, the
result in words, the times, the id that ties them together.

No browser: mitmweb's API is what its page shows (test_e2e_web.py reads the page itself).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import ADDON_PATH, REPO_ROOT, MitmDump, addon_config
from tests.fakeprovider import SEARCH_TOOL, call, reply, search
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

CONFIG = partial(addon_config, strategy="tool-search", max_search_results=3)
TARGET = "mcp__weather__get_forecast"
ANTHROPIC, CHAT = "https://api.anthropic.com/v1/messages", "https://api.openai.com/v1/chat/completions"
# The comment's figures (watch.summary: FlowSummary.comment).
TOKENS = re.compile(r"tool tokens ~([\d,]+) sent → ~([\d,]+) in the prompt(?:, ~([\d,]+) on the wire)?")
ROUNDS = re.compile(r" · (\d+) upstream rounds? · ")
TIME = re.compile(r" · ([\d.]+) ms total: upstream ([\d.]+) ms, proxy ([\d.]+) ms")
ID = re.compile(r" · id ([0-9a-f]{12}) · session ([^\s·]+)")


@pytest.fixture
def web(tmp_path: Path, fake) -> Iterator[MitmDump]:
    proxy = MitmDump(tmp_path / "mitmweb", fake.url, script=ADDON_PATH, config=CONFIG, name="mitmweb", web=True)
    proxy.start()
    fake.first_delay = 0.02  # every upstream answer takes its time: none may read "upstream 0.0 ms"
    try:
        yield proxy
    finally:
        fake.first_delay = 0.0
        proxy.stop()


def turn(proxy: MitmDump, fake, url: str, model: str, stream: bool = False, defers: bool = False) -> None:
    """One turn whose model searches, then calls the tool found; ``defers``: the client defers its
    tools itself (behind a search tool of its own), so the request goes as it sent it."""
    question = f"What's the forecast for Paris? [{uuid.uuid4().hex[:8]}]"
    fake.set_script([reply("sunny")] if defers else
                    [search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("sunny")])
    catalog = anthropic_tools(60)
    if defers:
        catalog = [{"name": "ToolSearch", "description": "Search deferred tools.",
                    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
                   *[{**t, "defer_loading": True} for t in catalog[:10]]]
    if url == CHAT:
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": question}],
                                "tools": [{"type": "function", "function": {
                                    "name": t["name"], "description": t["description"],
                                    "parameters": t["input_schema"]}} for t in catalog]}
        headers = {"authorization": "Bearer sk-test-web-report"}
    else:
        body = {"model": model, "max_tokens": 256, "stream": stream, "tools": catalog,
                "messages": [{"role": "user", "content": question}]}
        headers = {"x-api-key": "sk-ant-test-web-report"}
    with proxy.httpx_client() as client:
        r = client.post(url, json=body, headers=headers)
    assert r.status_code == 200 and SEARCH_TOOL not in r.text


def number(text: str | None) -> int | None:
    return None if text is None else int(text.replace(",", ""))


def test_the_report_mitmweb_and_telemetry_say_the_same_of_each_turn(web, fake, tmp_path):
    turn(web, fake, ANTHROPIC, "claude-x")  # classic, JSON
    turn(web, fake, ANTHROPIC, "claude-sonnet-4-5", stream=True)  # native, a live stream
    turn(web, fake, CHAT, "gpt-4o")  # call-through
    turn(web, fake, ANTHROPIC, "claude-sonnet-4-5", defers=True)  # as the client sent it
    records = {r["id"]: r for r in web.records(at_least=4)}
    assert len(records) == 4

    api = httpx.Client(base_url=f"http://127.0.0.1:{web.web_port}", headers={"Authorization": f"Bearer {web.web_token}"},
                       trust_env=False, timeout=30)
    flows = {}
    for f in api.get("/flows").raise_for_status().json():
        if m := ID.search(f.get("comment") or ""):
            flows[m.group(1)] = f
    assert set(flows) == set(records), "every turn's flow names its telemetry id in its comment"

    log = web.workdir / "tool_discovery.jsonl"
    done = subprocess.run([sys.executable, "-m", "tooldisco.cli", "report", str(log), "--json", "--quiet"],
                          capture_output=True, text=True, check=True, env=_env())
    report = json.loads(done.stdout)
    turns = {t["id"]: t for t in report["turns"]}
    assert set(turns) == set(records) and report["records"] == 4

    modes = set()
    for rid, record in records.items():
        flow, row = flows[rid], turns[rid]
        comment = flow["comment"]
        view = api.get(f"/flows/{flow['id']}/request/content/tool%20discovery.json").raise_for_status().json()
        assert view["view_name"].lower() == "tool discovery"
        header = view["text"].splitlines()
        # Tokens: sent / on the wire / in the prompt, and saved.
        sent, prompt, wire = (number(x) for x in TOKENS.search(comment).groups())
        wire = prompt if wire is None else wire
        assert (sent, wire, prompt) == (record["tool_tokens_before"], record["tool_tokens_wire"],
                                        record["tool_tokens_after"])
        assert row["tokens"] == {"sent": sent, "wire": wire, "prompt": prompt, "saved": sent - prompt}
        assert any(line.strip().startswith(TOKENS.search(comment).group(0)) and f"(~{sent - prompt:,} saved)" in line
                   for line in header)
        # Tools sent → loaded.
        assert f"{row['tools']['sent']} tools → {row['tools']['loaded']} loaded" in comment
        assert (row["tools"]["sent"], row["tools"]["loaded"]) == (record["total_tools"], record["kept_tools"])
        # Searches and hits.
        hits = sum(len(s["matched"]) for s in record["searches"])
        assert row["searches"] == len(record["searches"]) == comment.count(" · search '")
        assert row["hits"] == hits
        listed = [re.search(r"^\s*search \d+: .* → (\d+) hits?", line) for line in header]
        assert sum(int(m.group(1)) for m in listed if m) == hits
        # Upstream rounds.
        rounds = int(ROUNDS.search(comment).group(1))
        assert rounds == row["rounds"] == len(record["upstream"]) == (2 if record["searches"] else 1)
        assert any(f"{rounds} upstream round" in line for line in header if line.strip().startswith("result: "))
        # The result in words.
        result = next(line.strip()[len("result: "):] for line in header if line.strip().startswith("result: "))
        assert result.startswith(row["result"] + ";")
        if record["searches"]:
            assert row["result"] == "answered after 1 search" and " · answered after 1 search · " in comment
        else:
            assert row["result"] == "passed through: the client defers its tools itself (defer_loading)"
            assert "passed through (the client defers its tools itself (defer_loading))" in comment
        # The times, measured where they pass: every turn went upstream for a while.
        total, upstream, proxy = (float(x) for x in TIME.search(comment).groups())
        ms = row["ms"]
        assert (ms["total"], ms["upstream"]) == (record["total_ms"], record["upstream_ms"])
        assert (f"{total:.1f}", f"{upstream:.1f}", f"{proxy:.1f}") == (
            f"{ms['total']:.1f}", f"{ms['upstream']:.1f}", f"{ms['proxy']:.1f}")
        assert record["upstream_ms"] >= 20.0 * rounds, "the fake took 20 ms before each answer"
        assert record["total_ms"] >= record["upstream_ms"]
        # The ids and the mode.
        assert ID.search(comment).groups() == (rid, record["session"]) == (row["id"], row["session"])
        assert any(f"id {rid}" in line for line in header[:1])
        modes.add(row["mode"])
    assert modes == {"classic", "native", "call-through", "passed through"}
    assert report["by_mode"]["native"]["tokens"]["wire"] > report["by_mode"]["native"]["tokens"]["sent"]
    assert sum(m["turns"] for m in report["by_mode"].values()) == 4

    # The page lists the same turns by the same ids (the report extra is installed for the tests).
    page = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "tooldisco.cli", "report", str(log), "-o", str(page), "--quiet"],
                   capture_output=True, text=True, check=True, env=_env())
    text = page.read_text()
    assert all(rid in text for rid in records) and "<h2 id='words'>Words</h2>" in text
    assert "answered after 1 search" in text and "on the wire" in text


def _env() -> dict[str, str]:
    """The checkout's package first, as the addon script runs it."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT / "addon")}
