"""The mitmproxy glue with mitmproxy's own test helpers (taddons, tflow)."""

import asyncio
import json
import sys
from pathlib import Path

import pytest
from mitmproxy import exceptions
from mitmproxy.addons import upstream_auth
from mitmproxy.test import taddons, tflow, tutils

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "addon"))
import tool_discovery  # noqa: E402

from tests.support.catalog import anthropic_tools  # noqa: E402


def write(tmp_path, text):
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return str(p)


def relevance_config(tmp_path):
    return write(tmp_path, f"""
pipes: {{tool_discovery: {{enabled: true, strategy: relevance}}}}
sessions: {{dir: {tmp_path}/s}}
telemetry: {{path: {tmp_path}/t.jsonl}}
""")


def test_bad_config_is_an_options_error_naming_the_key(tmp_path):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        with pytest.raises(exceptions.OptionsError, match=r"pipes.tool_discovery.max_tools: expected a whole number"):
            tctx.configure(addon, tool_discovery_config=write(tmp_path, "pipes: {tool_discovery: {max_tools: lots}}"))


def test_default_config_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=tool_discovery.DEFAULT_CONFIG)
        assert addon.engine is not None and addon.engine.config.tool_discovery.enabled


def flow(host="api.anthropic.com", path="/v1/messages", body=None, n=60):
    body = body if body is not None else json.dumps({
        "model": "m", "max_tokens": 5, "tools": anthropic_tools(n),
        "messages": [{"role": "user", "content": "post to slack"}]}).encode()
    req = tutils.treq(host=host, port=443, scheme=b"https", path=path.encode(), method=b"POST",
                      headers=[(b"content-type", b"application/json"), (b"x-api-key", b"k")], content=body)
    return tflow.tflow(req=req)


async def test_request_hook_filters_processed_hosts_only(tmp_path):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        addon.requestheaders(f)
        await addon.request(f)
        assert len(json.loads(f.request.content)["tools"]) == 25
        other = flow(host="example.com")
        before = other.request.content
        addon.requestheaders(other)
        await addon.request(other)
        assert other.request.content == before


async def test_map_remote_does_not_hide_the_original_host(tmp_path):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        addon.requestheaders(f)
        f.request.host = "127.0.0.1"  # what map_remote does in its request hook
        await addon.request(f)
        assert len(json.loads(f.request.content)["tools"]) == 25


async def test_undecodable_body_passes_through(tmp_path, caplog):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        f.request.headers["content-encoding"] = "gzip"
        f.request.raw_content = b"definitely not gzip"
        addon.requestheaders(f)
        await addon.request(f)
        assert f.request.raw_content == b"definitely not gzip"
        assert "cannot decode the request body" in caplog.text


async def test_compressed_bodies_are_decoded_within_the_cap(tmp_path, caplog):
    import brotli
    import gzip

    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        f.request.headers["content-encoding"] = "gzip, br"  # chained: sent plain once rewritten
        f.request.raw_content = brotli.compress(gzip.compress(f.request.raw_content))
        addon.requestheaders(f)
        await addon.request(f)
        assert "content-encoding" not in f.request.headers
        assert len(json.loads(f.request.raw_content)["tools"]) == 25

        bomb = flow()
        bomb.request.headers["content-encoding"] = "br"
        bomb.request.raw_content = brotli.compress(bomb.request.raw_content[:-1] + b',"x":"' + b" " * (40 << 20) + b'"}')
        sent = bomb.request.raw_content
        addon.requestheaders(bomb)
        await addon.request(bomb)
        assert bomb.request.raw_content == sent and bomb.request.headers["content-encoding"] == "br"
        assert "decoded body is larger than 33554432 bytes" in caplog.text


def test_streams_live_unless_the_loop_may_need_the_answer(tmp_path):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        f.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
        addon.requestheaders(f)
        addon.responseheaders(f)
        assert f.response.stream is True
        g = flow()
        g.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
        addon.requestheaders(g)
        g.metadata[tool_discovery.META_CONTEXT] = object()
        addon.responseheaders(g)
        assert not g.response.stream


def ws_flow(path="/v1/responses"):
    req = tutils.treq(host="api.openai.com", port=443, scheme=b"https", path=path.encode(), method=b"GET",
                      headers=[(b"upgrade", b"websocket"), (b"connection", b"Upgrade")], content=b"")
    return tflow.tflow(req=req)


@pytest.mark.parametrize("mode, refused", [("refuse", True), ("passthrough", False)])
def test_websocket_upgrade_refused_or_reported(tmp_path, caplog, mode, refused):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=write(tmp_path, f"""
pipes: {{tool_discovery: {{enabled: true, strategy: tool-search}}}}
websocket: {mode}
sessions: {{dir: {tmp_path}/s}}
"""))
        f = ws_flow()
        addon.requestheaders(f)
        assert (f.response is not None and f.response.status_code == 426) is refused
        if not refused:
            assert "passes through without tool discovery" in caplog.text
        other = ws_flow("/some/other/socket")
        addon.requestheaders(other)
        assert other.response is None


async def test_a_bug_in_the_rewrite_leaves_the_request_as_sent(tmp_path, monkeypatch, caplog):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path))
        monkeypatch.setattr(tool_discovery, "_signed", lambda *a: 1 / 0)
        f = flow()
        before = (f.request.raw_content, f.request.headers.copy())
        addon.requestheaders(f)
        await addon.request(f)
        assert (f.request.raw_content, f.request.headers) == before
        assert "forwarding the request unchanged" in caplog.text


@pytest.mark.parametrize("options, expected", [
    ({}, {"verify": True, "proxy": None}),
    ({"ssl_insecure": True}, {"verify": False, "proxy": None}),
    ({"mode": ["upstream:http://corp-proxy:3128"]}, {"proxy": "http://corp-proxy:3128"}),
    # mitmproxy's own grammar: "@9090" is where the proxy listens, not part of the upstream address
    ({"mode": ["upstream:http://p:3128@9090"]}, {"proxy": "http://p:3128"}),
    ({"mode": ["upstream:https://p:8443"], "upstream_auth": "me:s3cret"},
     {"proxy": "https://p:8443", "proxy_auth": ("me", "s3cret")}),
])
def test_the_proxys_own_requests_honour_upstream_mode_auth_and_tls(tmp_path, options, expected):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon, upstream_auth.UpstreamAuth()) as tctx:
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path), **options)
        got = tool_discovery._upstream_options()
    assert {k: getattr(got, k) for k in expected} == expected


def test_the_proxys_own_requests_trust_a_custom_upstream_ca(tmp_path):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        ca = tmp_path / "ca.pem"
        ca.write_text("x")
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path), ssl_verify_upstream_trusted_ca=str(ca))
        assert tool_discovery._upstream_options().ca_file == str(ca)


async def test_an_option_change_retires_the_upstream_client(tmp_path):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=relevance_config(tmp_path))
        first = addon._upstream()
        tctx.configure(addon, ssl_insecure=True)
        second = addon._upstream()
        await asyncio.sleep(0)  # the retirement task runs
        assert first is not second and first._retired and first.closed
        assert second.options.verify is False
        await second.retire()


async def test_a_streamed_tool_search_flow_is_routed_to_the_relay(tmp_path):
    addon = tool_discovery.ToolDiscovery()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, tool_discovery_config=write(tmp_path, f"""
pipes: {{tool_discovery: {{enabled: true, strategy: tool-search}}}}
sessions: {{dir: {tmp_path}/s}}
telemetry: {{path: {tmp_path}/t.jsonl}}
"""))
        f = flow(body=json.dumps({"model": "m", "max_tokens": 5, "stream": True, "tools": anthropic_tools(60),
                                  "messages": [{"role": "user", "content": "post to slack"}]}).encode())
        addon.running()  # adds the router at the end of the addon chain
        addon.requestheaders(f)
        await addon.request(f)
        assert f.request.pretty_host == "api.anthropic.com"  # routed only once every request hook ran
        f.request.host = "mapped.example"  # e.g. map_remote, which runs after scripts
        await addon.router.request(f)
        assert (f.request.host, f.request.port, f.request.scheme) == ("127.0.0.1", addon.relay.port, "http")
        assert len(f.request.headers["x-tooldisco-relay"]) == 32
        f.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
        addon.responseheaders(f)
        assert f.response.stream is True
        await addon.response(f)  # mitmweb shows where the flow really went
        assert f.request.pretty_host == "mapped.example" and "x-tooldisco-relay" not in f.request.headers
        await addon.relay.close()
