"""The flow's record and the chain's order (glue.metadata, addon/tool_discovery.py)."""

from mitmproxy.test import taddons, tutils
from tooldisco.glue import metadata

from tests.unit.glue.chain import Chain, flow, relevance_config, tool_discovery


def test_the_addons_run_in_the_order_their_hooks_need():
    names = [type(a).__name__ for a in tool_discovery.build()]
    assert names == ["Options", "MetricsServer", "Redaction", "WebUI", "Upstream", "FlowRecord", "WebSocketGate",
                     "GeminiKey", "Rewrite", "Live", "Timing", "UsageTap", "Buffered", "Watching"]


def test_running_adds_the_router_then_the_watcher_at_the_chains_end():
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        chain.running()
        chain.running()  # a script reload runs it again: each is added once
        assert tctx.master.addons.chain[-2:] == [chain.live.router, chain.watch]


async def test_the_record_keeps_the_clients_host_until_the_flow_ends(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        f = flow()
        chain.requestheaders(f)
        f.request.host = "127.0.0.1"  # map_remote
        assert metadata.of(f).host == "api.anthropic.com"
        f.response = tutils.tresp()
        await chain.response(f)
        assert metadata.KEY not in f.metadata  # nothing of the glue is saved or copied with the flow
        g = flow()
        chain.requestheaders(g)
        chain.error(g)
        assert metadata.KEY not in g.metadata
