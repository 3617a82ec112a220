"""The proxy's own upstream client: it makes the loop's rounds, so it must go where mitmproxy
would, with mitmproxy's options (upstream mode and its auth, TLS verification, custom CAs)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from botocore.credentials import ReadOnlyCredentials
from mitmproxy import ctx
from mitmproxy.proxy.mode_specs import ProxyMode, UpstreamMode

from tooldisco.core.answers import Answer
from tooldisco.glue import messages
from tooldisco.glue.background import Background
from tooldisco.net import relay
from tooldisco.net.upstream import UpstreamClient, UpstreamOptions
from tooldisco.watch.watch import Watcher

# upstream_auth is declared by mitmproxy's upstream_auth addon
OPTIONS = frozenset({"ssl_insecure", "ssl_verify_upstream_trusted_ca", "ssl_verify_upstream_trusted_confdir",
                     "mode", "upstream_auth"})


def upstream_options() -> UpstreamOptions:
    """mitmproxy's options, as the proxy's own client must honour them."""
    opts = ctx.options
    proxy = None
    for spec in opts.mode:
        mode = ProxyMode.parse(spec)
        if isinstance(mode, UpstreamMode):
            host, port = mode.address
            proxy = f"{mode.scheme}://{host}:{port}"
    auth = None
    spec = getattr(opts, "upstream_auth", None)
    if spec and ":" in spec:
        user, _, password = spec.partition(":")
        auth = (user, password)
    return UpstreamOptions(proxy=proxy, proxy_auth=auth, verify=not opts.ssl_insecure,
                           ca_file=opts.ssl_verify_upstream_trusted_ca,
                           ca_dir=opts.ssl_verify_upstream_trusted_confdir)


class Upstream:
    """Builds the client on first use; an option change retires it (requests under way finish
    on the old one) and the next use builds one with the new options."""

    name = "tooldisco_upstream"

    def __init__(self, background: Background, watch: Watcher) -> None:
        self._client: UpstreamClient | None = None
        self._background = background
        self._watch = watch

    def configure(self, updated: set[str]) -> None:
        if updated & OPTIONS:
            self._retire()

    def done(self) -> None:
        self._retire()

    def client(self) -> UpstreamClient:
        if self._client is None:
            self._client = UpstreamClient(upstream_options())
        return self._client

    def opener(self, url: str, headers: list[tuple[str, str]], aws: ReadOnlyCredentials | None,
               flow_id: str, client: UpstreamClient | None = None) -> Callable[[bytes], Awaitable[Answer]]:
        """How the runner sends a body where this flow went: the flow's final headers, the
        body plain (so no content-encoding), re-signed when the client used SigV4. Each round
        is shown in mitmweb as the proxy's own flow (``tooldisco.watch``)."""
        base = [(k, v) for k, v in headers if k.lower() not in ("content-encoding", relay.HEADER)]
        client, watch = client or self.client(), self._watch

        async def open_(body: bytes) -> Answer:
            sent, started = messages.signed(url, base, body, aws), time.time()
            return watch.tee(flow_id, url, sent, body, started, await client.open(url, sent, body))

        return open_

    def _retire(self) -> None:
        if self._client is not None:
            old, self._client = self._client, None
            self._background.spawn(old.retire())
