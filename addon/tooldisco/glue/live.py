"""Live flows: a stream is served by the in-process relay (``tooldisco.net.relay``), which makes
the upstream calls itself and writes each visible event as it comes; mitmproxy streams the
relay's answer to the client unbuffered."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from loguru import logger
from mitmproxy import connection, ctx, http

from tooldisco.core.answers import Head
from tooldisco.glue import metadata
from tooldisco.glue.background import Background
from tooldisco.glue.options import Options
from tooldisco.glue.upstream import Upstream
from tooldisco.net import relay as relay_mod
from tooldisco.net.relay import Relay
from tooldisco.watch.watch import Watcher

STREAM_TYPES = ("text/event-stream", "application/vnd.amazon.eventstream")


class Live:
    """Owns the relay; adds ``LiveRouter`` at the chain's end once mitmproxy runs; streams the
    answers of live flows; shows a relayed flow's real URL when it ends."""

    name = "tooldisco_live"

    def __init__(self, options: Options, upstream: Upstream, background: Background, watch: Watcher) -> None:
        self._options = options
        self._background = background
        self.relay = Relay()
        self.router = LiveRouter(options, upstream, self.relay, watch)
        self._routing = False

    def running(self) -> None:
        if not self._routing:
            self._routing = True
            ctx.master.addons.add(self.router)

    def done(self) -> None:
        self._background.spawn(self.relay.close())

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        meta = metadata.of(flow)
        if flow.response is None or meta is None or meta.buffered is not None:
            return  # a buffered flow's answer goes through the loop whole
        if meta.relayed_to is not None:
            flow.response.stream = True  # the relay writes each event when it is visible
            self._restore_request(flow, meta)
            return
        engine = self._options.engine
        if engine and engine.config.handles_host(meta.host):
            ctype = flow.response.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype in STREAM_TYPES:
                flow.response.stream = True  # live: first token reaches the client at once

    def response(self, flow: http.HTTPFlow) -> None:
        self._show_real_url(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._show_real_url(flow)

    @staticmethod
    def _show_real_url(flow: http.HTTPFlow) -> None:
        """A relayed flow was sent to the loopback relay; show where it really went, and what."""
        meta = metadata.of(flow)
        if meta is not None and meta.relayed_to is not None:
            Live._restore_request(flow, meta)
            (scheme, host, port), meta.relayed_to = meta.relayed_to, None
            _set_address(flow.request, scheme, host, port)
            flow.request.headers.pop(relay_mod.HEADER, None)

    @staticmethod
    def _restore_request(flow: http.HTTPFlow, meta: metadata.FlowMeta) -> None:
        """The body (and its framing headers) the hop to the relay did not carry, back in the flow."""
        if meta.relayed_request is not None:
            (flow.request.raw_content, headers), meta.relayed_request = meta.relayed_request, None
            flow.request.headers = headers


class LiveRouter:
    """The last addon of the chain: routes live flows to the relay once every other addon's
    ``request`` hook ran (map_remote, modify_headers…), so the relay sends them where
    mitmproxy would have. Scripts run early in mitmproxy's chain; this one is added at its end."""

    name = "tooldisco_live_router"

    def __init__(self, options: Options, upstream: Upstream, relay: Relay, watch: Watcher) -> None:
        self._options, self._upstream, self._relay, self._watch = options, upstream, relay, watch

    async def request(self, flow: http.HTTPFlow) -> None:
        meta = metadata.of(flow)
        held = meta.live if meta is not None else None
        if meta is None or held is None:
            return
        meta.held = None
        if flow.response or flow.error or self._options.engine is None:  # another addon answered it
            return
        try:
            await self._route(flow, meta, held)
        except Exception:  # fail open: the client's own request goes out, untouched
            logger.exception("live relay unavailable; forwarding the request unchanged")
            self._watch.forget(flow)
            meta.relayed_to = meta.relayed_request = None
            flow.request.raw_content, flow.request.headers = held.sent

    async def _route(self, flow: http.HTTPFlow, meta: metadata.FlowMeta, held: metadata.Held) -> None:
        """Send a live flow to the relay, which runs it (and every round after it) upstream."""
        runner = self._options.engine.runner(held.context)
        url, flow_id, watch = flow.request.url, flow.id, self._watch
        # The Host mitmproxy would send upstream: the client's own where an option keeps it
        # (reverse mode's keep_host_header), else the URL's authority.
        host = flow.request.host_header
        client = self._upstream.client()

        async def serve(headers: list[tuple[str, str]], body: bytes) -> AsyncIterator[Head | bytes]:
            # The Host mitmproxy sent names the relay: the upstream gets the one it would have had.
            headers = [(k, v) for k, v in headers if k.lower() != "host"]
            if host:
                headers.insert(0, ("Host", host))
            first = watch.tee(flow_id, url, headers, body, time.time(),
                              await runner.timed(client.open(url, headers, body)))
            async for item in runner.live(first, self._upstream.opener(url, headers, held.aws, flow_id, client)):
                yield item

        port = await self._relay.start()
        raw = flow.request.raw_content
        # The body is handed to the relay in the process: the hop to it carries none, so the
        # request (a whole catalog) is not written to and read back from a loopback socket.
        token = self._relay.register(serve, body=raw) if raw is not None else self._relay.register(serve)
        meta.relayed_to = (flow.request.scheme, flow.request.host, flow.request.port)
        if flow.server_conn.via is not None:  # upstream mode: the relay is reached directly, it uses the proxy
            flow.server_conn = connection.Server(address=("127.0.0.1", port))
        _set_address(flow.request, "http", "127.0.0.1", port)
        if raw is not None:
            meta.relayed_request = (raw, flow.request.headers.copy())
            flow.request.headers.pop("transfer-encoding", None)
            flow.request.headers["content-length"] = "0"
            flow.request.raw_content = b""
        flow.request.headers[relay_mod.HEADER] = token


def _set_address(request: http.Request, scheme: str, host: str, port: int) -> None:
    """Where ``request`` goes, its Host header (and HTTP/2 authority) following, as mitmproxy's
    own setters do it; the port first, so the header is worked out once, not per attribute."""
    request.scheme = scheme
    request.data.port = port
    request.host = host
