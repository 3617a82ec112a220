"""The addon as a process: start-up validation, restarts, the shipped default config."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.e2e.harness import ADDON_PATH, MITMDUMP, REPO_ROOT, addon_config
from tests.fakeprovider import SEARCH_TOOL, call, reply, search
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("text, message", [
    ("pipes:\n  tool_discovery:\n    max_tools: lots\n", "pipes.tool_discovery.max_tools: expected a whole number"),
    ("pipes:\n  tool_discovery:\n    strategy: tool-search\n    search: {backend: psychic}\n",
     "pipes.tool_discovery.search.backend: must be one of"),
    ("sessions:\n  ttl: forever\n", "sessions.ttl: expected a duration"),
])
def test_invalid_config_stops_mitmdump_naming_the_key(tmp_path, text, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    proc = subprocess.run(
        [str(MITMDUMP), "--set", f"confdir={tmp_path}/conf", "--listen-host", "127.0.0.1", "--listen-port", "0",
         "-s", str(ADDON_PATH), "--set", f"tool_discovery_config={cfg}"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


def deferral_config(d: Path) -> str:
    return addon_config(d, strategy="tool-search", search={"backend": "bm25"}, telemetry="t.jsonl")


def passthrough_config(d: Path) -> str:
    return addon_config(d, strategy="passthrough", sessions={"dir": str(d / "s")}, telemetry="t.jsonl")


def test_found_tools_survive_a_restart(mitm_factory, fake):
    proxy = mitm_factory(config=deferral_config)
    fake.set_script([search("weather forecast", times=1), call("mcp__weather__get_forecast", {"city": "Oslo"}),
                     reply("fine")])
    tools = anthropic_tools(60)
    first = f"forecast for Oslo? {uuid.uuid4().hex}"
    with proxy.anthropic() as client:
        msg = client.messages.create(model="m", max_tokens=64, tools=tools, messages=[{"role": "user", "content": first}])
    use = next(b for b in msg.content if b.type == "tool_use")
    proxy.restart()
    with proxy.anthropic() as client:
        client.messages.create(model="m", max_tokens=64, tools=tools, messages=[
            {"role": "user", "content": first},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "cold"}]}])
    reqs = fake.api_requests("anthropic")
    names = [t["name"] for t in reqs[-1].json["tools"]]
    assert len(reqs) == 3 and names[0] == SEARCH_TOOL and "mcp__weather__get_forecast" in names[1:]


def test_two_tenants_with_the_same_first_message_do_not_share(mitm_factory, fake):
    proxy = mitm_factory(config=deferral_config)
    fake.set_script([search("weather forecast", times=1), call("mcp__weather__get_forecast", {"city": "Oslo"}),
                     reply("fine")])
    tools = anthropic_tools(60)
    first = f"forecast? {uuid.uuid4().hex}"
    with proxy.anthropic(api_key="sk-ant-tenant-one") as client:
        client.messages.create(model="m", max_tokens=64, tools=tools, messages=[{"role": "user", "content": first}])
    fake.set_script([reply("hi")])
    with proxy.anthropic(api_key="sk-ant-tenant-two") as client:
        client.messages.create(model="m", max_tokens=64, tools=tools, messages=[{"role": "user", "content": first}])
    assert [t["name"] for t in fake.api_requests("anthropic")[-1].json["tools"]] == [SEARCH_TOOL]


def test_shipped_default_config_keeps_likely_tools_upfront(mitm_factory, fake, tmp_path):
    default = (REPO_ROOT / "configs" / "tool_discovery.yaml").read_text()
    proxy = mitm_factory(config=lambda d: default.replace("path: tool_discovery.jsonl", f"path: {d}/t.jsonl")
                         .replace("sessions:\n", f"sessions:\n  dir: {d}/sessions\n"))
    fake.set_script([reply("ok")])
    with proxy.anthropic() as client:
        client.messages.create(model="m", max_tokens=64, tools=anthropic_tools(60),
                               messages=[{"role": "user", "content": f"create a github issue {uuid.uuid4().hex}"}])
        names = [t["name"] for t in fake.api_requests("anthropic")[-1].json["tools"]]
        assert len(names) == 9 and names[-1] == SEARCH_TOOL and "mcp__github__create_issue" in names
        client.messages.create(model="m", max_tokens=64, tools=anthropic_tools(6),
                               messages=[{"role": "user", "content": f"small catalog {uuid.uuid4().hex}"}])
        names = [t["name"] for t in fake.api_requests("anthropic")[-1].json["tools"]]
        assert len(names) == 6 and SEARCH_TOOL not in names  # below 10 tools and 10K tokens: nothing deferred


@pytest.mark.parametrize("path, headers", [
    ("https://api.anthropic.com/v1/messages?beta=true", {"x-api-key": "k"}),
    ("https://api.openai.com/v1/chat/completions", {"authorization": "Bearer k"}),
])
def test_passthrough_strategy_forwards_bytes_untouched(mitm_factory, fake, path, headers):
    proxy = mitm_factory(config=passthrough_config)
    tools = anthropic_tools(60) if "anthropic" in path else [
        {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
        for t in anthropic_tools(60)]
    raw = ('{"model": "m",  "max_tokens": 9, "tools": ' + __import__("json").dumps(tools, indent=2)
           + ', "messages": [{"role": "user", "content": "caf\\u00e9 \u00e9"}]}').encode()
    with proxy.httpx_client() as client:
        r = client.post(path, content=raw, headers={**headers, "content-type": "application/json"})
    assert r.status_code == 200 and fake.last_request().body == raw
