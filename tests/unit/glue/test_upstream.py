"""The proxy's own upstream client honours mitmproxy's options (glue.upstream)."""

import asyncio

import pytest
from mitmproxy.addons import upstream_auth
from mitmproxy.test import taddons
from tooldisco.glue import upstream

from tests.unit.glue.chain import Chain, relevance_config


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
    chain = Chain()
    with taddons.context(*chain.addons, upstream_auth.UpstreamAuth()) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path), **options)
        got = upstream.upstream_options()
    assert {k: getattr(got, k) for k in expected} == expected


def test_the_proxys_own_requests_trust_a_custom_upstream_ca(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        ca = tmp_path / "ca.pem"
        ca.write_text("x")
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path),
                       ssl_verify_upstream_trusted_ca=str(ca))
        assert upstream.upstream_options().ca_file == str(ca)


async def test_an_option_change_retires_the_upstream_client(tmp_path):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=relevance_config(tmp_path))
        first = chain.upstream.client()
        tctx.configure(chain.options, ssl_insecure=True)
        second = chain.upstream.client()
        await asyncio.sleep(0)  # the retirement task runs
        assert first is not second and first._retired and first.closed
        assert second.options.verify is False
        assert chain.upstream.client() is second  # until the next change, one client
        await second.retire()
