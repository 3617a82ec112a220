"""WebSocket upgrades to processed endpoints: refused, or let through and reported (glue.websocket_gate)."""

import pytest
from mitmproxy.test import taddons, tflow, tutils

from tests.unit.glue.chain import Chain, tool_search_config


def ws_flow(path="/v1/responses"):
    req = tutils.treq(host="api.openai.com", port=443, scheme=b"https", path=path.encode(), method=b"GET",
                      headers=[(b"upgrade", b"websocket"), (b"connection", b"Upgrade")], content=b"")
    return tflow.tflow(req=req)


@pytest.mark.parametrize("mode, refused", [("refuse", True), ("passthrough", False)])
def test_websocket_upgrade_refused_or_reported(tmp_path, caplog, mode, refused):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=tool_search_config(tmp_path, f"websocket: {mode}"))
        f = ws_flow()
        chain.requestheaders(f)
        assert (f.response is not None and f.response.status_code == 426) is refused
        if not refused:
            assert "passes through without tool discovery" in caplog.text
        other = ws_flow("/some/other/socket")
        chain.requestheaders(other)
        assert other.response is None
