"""Live flows: streamed answers, routing to the relay at the chain's end (glue.live)."""

import json

from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils
from tooldisco.glue import metadata

from tests.unit.glue.chain import Chain, flow, relevance_config, tool_search_config


def test_streams_live_unless_the_loop_may_need_the_answer(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        f.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
        chain.requestheaders(f)
        chain.responseheaders(f)
        assert f.response.stream is True
        g = flow()
        g.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
        chain.requestheaders(g)
        metadata.of(g).held = metadata.Held(object(), None, (b"", http.Headers()), live=False)  # buffered
        chain.responseheaders(g)
        assert not g.response.stream
        other = flow(host="example.com")
        other.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
        chain.requestheaders(other)
        chain.responseheaders(other)
        assert not other.response.stream  # a host tool discovery does not handle: mitmproxy's default


async def test_a_streamed_tool_search_flow_is_routed_to_the_relay(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        f = flow(stream=True)
        chain.running()  # adds the router at the end of the addon chain
        assert tctx.master.addons.chain[-2:] == [chain.live.router, chain.watch]
        chain.requestheaders(f)
        await chain.request(f)
        assert f.request.pretty_host == "api.anthropic.com"  # routed only once every request hook ran
        assert metadata.of(f).live is not None
        f.request.url = "http://mapped.example:8080/v1/messages"  # e.g. map_remote, which runs after scripts
        f.request.authority = f.request.headers["host"] = "mapped.example:8080"  # HTTP/2's, HTTP/1's
        await chain.live.router.request(f)
        assert (f.request.host, f.request.port, f.request.scheme) == ("127.0.0.1", chain.live.relay.port, "http")
        assert f.request.headers["host"] == f.request.authority == f"127.0.0.1:{chain.live.relay.port}"
        assert len(f.request.headers["x-tooldisco-relay"]) == 32
        assert metadata.of(f).held is None
        f.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
        chain.responseheaders(f)
        assert f.response.stream is True
        await chain.response(f)  # mitmweb shows where the flow really went
        assert f.request.pretty_host == "mapped.example" and "x-tooldisco-relay" not in f.request.headers
        assert f.request.url == "http://mapped.example:8080/v1/messages"
        assert f.request.headers["host"] == f.request.authority == "mapped.example:8080"
        assert metadata.KEY not in f.metadata  # the record went with the flow
        await chain.live.relay.close()


async def test_a_relayed_flow_hands_its_body_over_and_the_hop_carries_none(tmp_path):
    """The relay gets the body in the process: the request mitmproxy sends to it is empty; once
    the relay answered, the flow shows the body and headers that really went upstream."""
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        f = flow(stream=True)
        chain.running()
        chain.requestheaders(f)
        await chain.request(f)
        body, length = f.request.raw_content, f.request.headers["content-length"]
        await chain.live.router.request(f)
        assert f.request.raw_content == b"" and f.request.headers["content-length"] == "0"
        job = chain.live.relay._jobs[f.request.headers["x-tooldisco-relay"]]
        assert job.body == body and job.size == 0 and len(body) == int(length) > 0
        f.response = tutils.tresp(headers=[(b"content-type", b"text/event-stream")])
        chain.responseheaders(f)
        assert f.request.raw_content == body and f.request.headers["content-length"] == length
        await chain.response(f)
        assert f.request.raw_content == body and "x-tooldisco-relay" not in f.request.headers
        g = flow(stream=True)  # the relay never answered: the flow's error shows it all the same
        chain.requestheaders(g)
        await chain.request(g)
        sent = g.request.raw_content
        await chain.live.router.request(g)
        g.error = tflow.terr()
        chain.live.error(g)
        assert g.request.raw_content == sent and g.request.pretty_host == "api.anthropic.com"
        await chain.live.relay.close()


async def test_a_flow_another_addon_answered_is_not_relayed(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        f = flow(stream=True)
        chain.requestheaders(f)
        await chain.request(f)
        f.response = tutils.tresp()  # e.g. a blocklist or mitmweb's intercept answered it
        await chain.live.router.request(f)
        assert f.request.pretty_host == "api.anthropic.com" and metadata.of(f).held is None
        assert "x-tooldisco-relay" not in f.request.headers and chain.live.relay.port is None  # never started


async def test_the_relay_failing_sends_the_clients_own_request(tmp_path, monkeypatch, caplog):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path))
        f = flow(stream=True)
        sent = f.request.raw_content
        chain.requestheaders(f)
        await chain.request(f)
        assert f.request.raw_content != sent

        async def broken() -> int:
            raise OSError("no port")

        monkeypatch.setattr(chain.live.relay, "start", broken)
        await chain.live.router.request(f)
        assert f.request.raw_content == sent and f.request.pretty_host == "api.anthropic.com"
        assert "live relay unavailable" in caplog.text
        assert len(json.loads(sent)["tools"]) == 60
