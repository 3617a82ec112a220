"""The request hook: decode within the cap, plan through the engine, fail open (glue.rewrite)."""

import gzip
import json

import brotli
from mitmproxy import http
from mitmproxy.test import taddons
from tooldisco.glue import messages, metadata

from tests.unit.glue.chain import Chain, flow, relevance_config, tool_search_config


async def test_request_hook_filters_processed_hosts_only(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        chain.requestheaders(f)
        await chain.request(f)
        assert len(json.loads(f.request.content)["tools"]) == 25
        other = flow(host="example.com")
        before = other.request.content
        chain.requestheaders(other)
        await chain.request(other)
        assert other.request.content == before


async def test_map_remote_does_not_hide_the_original_host(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        chain.requestheaders(f)
        f.request.host = "127.0.0.1"  # what map_remote does in its request hook
        await chain.request(f)
        assert len(json.loads(f.request.content)["tools"]) == 25


async def test_undecodable_body_passes_through(tmp_path, caplog):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        f.request.headers["content-encoding"] = "gzip"
        f.request.raw_content = b"definitely not gzip"
        chain.requestheaders(f)
        await chain.request(f)
        assert f.request.raw_content == b"definitely not gzip"
        assert "cannot decode the request body" in caplog.text


async def test_compressed_bodies_are_decoded_within_the_cap(tmp_path, caplog):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        f.request.headers["content-encoding"] = "gzip, br"  # chained: sent plain once rewritten
        f.request.raw_content = brotli.compress(gzip.compress(f.request.raw_content))
        chain.requestheaders(f)
        await chain.request(f)
        assert "content-encoding" not in f.request.headers
        assert len(json.loads(f.request.raw_content)["tools"]) == 25

        bomb = flow()
        bomb.request.headers["content-encoding"] = "br"
        bomb.request.raw_content = brotli.compress(bomb.request.raw_content[:-1] + b',"x":"' + b" " * (40 << 20) + b'"}')
        sent = bomb.request.raw_content
        chain.requestheaders(bomb)
        await chain.request(bomb)
        assert bomb.request.raw_content == sent and bomb.request.headers["content-encoding"] == "br"
        assert "decoded body is larger than 33554432 bytes" in caplog.text


async def test_a_bug_in_the_rewrite_leaves_the_request_as_sent(tmp_path, monkeypatch, caplog):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        # A failure after the body was changed: when the flow is held for the loop.
        monkeypatch.setattr(metadata, "Held", lambda *a, **k: 1 / 0)
        f = flow()
        before = (f.request.raw_content, f.request.headers.copy())
        chain.requestheaders(f)
        await chain.request(f)
        assert (f.request.raw_content, f.request.headers) == before
        assert "forwarding the request unchanged" in caplog.text
        assert metadata.of(f).held is None  # nothing left for the router or the loop


async def test_a_replayed_or_answered_flow_is_left_alone(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        replay = flow()
        replay.is_replay = "request"  # the proxy's own replay: it went through the rewrite already
        chain.requestheaders(replay)
        before = replay.request.content
        await chain.request(replay)
        assert replay.request.content == before


async def test_unlisted_host_with_tools_warns_once_per_host(tmp_path, caplog):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        path = relevance_config(tmp_path)
        tctx.configure(chain.options, tool_discovery_config=path)
        for host in ("api.example.com", "api.example.com", "other.example.com"):
            f = flow(host=host)
            before = f.request.content
            chain.requestheaders(f)
            await chain.request(f)
            assert f.request.content == before
        no_tools = flow(host="third.example.com", body=b'{"messages":[]}')
        chain.requestheaders(no_tools)
        await chain.request(no_tools)
    lines = [r.getMessage() for r in caplog.records if "is not in hosts" in r.getMessage()]
    assert lines == [
        f"tool discovery: {h} is not in hosts: requests with tools to it pass unprocessed; "
        f"add it (or a preset) to hosts: in {path}" for h in ("api.example.com", "other.example.com")]


async def test_unlisted_host_warnings_are_bounded(tmp_path, caplog, monkeypatch):
    from tooldisco.glue import rewrite
    monkeypatch.setattr(rewrite, "WARNED_HOSTS_MAX", 2)
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        for i in range(4):
            f = flow(host=f"h{i}.example.com")
            chain.requestheaders(f)
            await chain.request(f)
    assert sum("is not in hosts" in r.getMessage() for r in caplog.records) == 2
    assert len(chain.rewrite._warned) == 2


async def test_unlisted_host_warning_names_where_the_flow_goes(tmp_path, caplog):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = flow(host="proxy.example.com")
        chain.requestheaders(f)
        f.request.host = "upstream.example.com"  # map_remote, or reverse mode keeping the Host header
        await chain.request(f)
    assert "proxy.example.com (sent on to upstream.example.com) is not in hosts" in caplog.text


def test_headers_by_name_join_a_repeated_name_as_mitmproxy_does() -> None:
    headers = http.Headers([(b"X-Tenant", b"a"), (b"Content-Type", b"application/json"), (b"x-tenant", b"b")])
    assert messages.by_name(headers) == {k.lower(): v for k, v in headers.items()}
    assert messages.by_name(headers) == {"x-tenant": "a, b", "content-type": "application/json"}
