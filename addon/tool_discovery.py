"""mitmproxy entry point: ``mitmdump -s addon/tool_discovery.py``.

Glue only, in the manner of mitmproxy's own addons: the option is declared in
``load``, parsed in ``configure`` (``OptionsError`` on a bad config, so mitmdump
exits naming the key), and the hooks hand bodies to the engine and its answers
back to the flow. Every decision lives in ``tooldisco``, which has no mitmproxy import.

Two ways an answer comes back through the loop:
- a JSON answer is buffered by mitmproxy, and the ``response`` hook runs the loop over it;
- a stream is served live: the ``request`` hook routes the flow to the in-process relay
  (``tooldisco.net.relay``), which makes the upstream calls itself and writes each visible
  event as it comes; mitmproxy streams the relay's answer to the client unbuffered.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Coroutine, Optional, TypeVar
from urllib.parse import urlsplit

from loguru import logger
from mitmproxy import connection, contentviews, ctx, exceptions, http
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy.mode_specs import ProxyMode, UpstreamMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tooldisco.core import allocator, bodies
from tooldisco.net import sigv4  # noqa: E402
from tooldisco.config import ConfigError, load_config  # noqa: E402
from tooldisco.engine.engine import Engine  # noqa: E402
from tooldisco.net import relay as relay_mod  # noqa: E402
from tooldisco.net.relay import Relay  # noqa: E402
from tooldisco.net.upstream import UpstreamClient, UpstreamOptions  # noqa: E402
from tooldisco.apis.base import Adapter  # noqa: E402
from tooldisco.core.redact import RedactingFilter, redact_printer  # noqa: E402
from tooldisco.core.answers import Answer, Head  # noqa: E402
from tooldisco.watch.view import ToolsView  # noqa: E402
from tooldisco.watch.watch import Watcher  # noqa: E402

DEFAULT_CONFIG = str(Path(__file__).resolve().parent.parent / "configs" / "tool_discovery.yaml")
META_HOST = "tool_discovery.host"  # the host the client asked for, before map_remote
META_CONTEXT = "tool_discovery.context"  # a buffered flow the response hook completes
META_LIVE = "tool_discovery.live"  # a live flow, until the router sends it to the relay
META_RELAY = "tool_discovery.relay"  # a live flow: the URL it really went to
STREAM_TYPES = ("text/event-stream", "application/vnd.amazon.eventstream")
REENCODABLE = frozenset({"gzip", "deflate", "br", "zstd", "identity"})  # a single one mitmproxy re-applies on set
UPSTREAM_OPTIONS = frozenset({"ssl_insecure", "ssl_verify_upstream_trusted_ca", "ssl_verify_upstream_trusted_confdir",
                              "mode", "upstream_auth"})
CLIENT_POLL_S = 0.5  # how often a buffered flow's phantom loop checks that its client still waits
T = TypeVar("T")
log = logging.getLogger("tool_discovery")


def _to_logging(message: Any) -> None:
    """Engine logs (loguru) go to the logging module, which is what mitmproxy prints,
    traceback included when there is one."""
    record = message.record
    level = logging.getLevelName(record["level"].name)
    exc = record["exception"]
    exc_info = (exc.type, exc.value, exc.traceback) if exc and exc.type else None
    log.log(level if isinstance(level, int) else logging.INFO, record["message"], exc_info=exc_info)


class ToolDiscovery:
    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.upstream: UpstreamClient | None = None
        self.relay = Relay()
        self.router: LiveRouter | None = None
        self._sink: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._filter = RedactingFilter()
        self.watch = Watcher(lambda: self.engine.config.tool_discovery if self.engine else None)
        self._watching = False

    def load(self, loader) -> None:
        loader.add_option(
            "tool_discovery_config",
            Optional[str],
            DEFAULT_CONFIG,
            "Path of the tool discovery YAML config.",
        )
        contentviews.add(ToolsView)  # mitmweb and the console: a body's tools and tool calls
        allocator.return_large_blocks()  # a huge body's memory goes back to the OS with its flow
        allocator.trim_periodically()  # and the heaps' free pages every few seconds
        if self._sink is None:
            try:
                logger.remove(0)  # loguru's own stderr sink would print everything twice
            except ValueError:
                pass
            # diagnose=False: loguru would otherwise print local variables (credentials) in tracebacks.
            self._sink = logger.add(_to_logging, level="DEBUG", format="{message}", diagnose=False, backtrace=False)
        for handler in logging.getLogger().handlers:  # mitmproxy's own output, too
            if self._filter not in handler.filters:
                handler.addFilter(self._filter)

    def configure(self, updated: set[str]) -> None:
        if "tool_discovery_config" in updated:
            path = ctx.options.tool_discovery_config or DEFAULT_CONFIG
            try:
                config = load_config(path)
            except ConfigError as e:
                raise exceptions.OptionsError(f"tool_discovery_config: {e}") from None
            for warning in config.warnings:
                log.warning(warning)
            self._close_engine()
            self.engine = Engine(config)
            td = config.tool_discovery
            log.info(
                "tool discovery: %s, strategy %s, hosts %s",
                "on" if td.enabled else "off", td.strategy, ", ".join(config.hosts),
            )
        if updated & UPSTREAM_OPTIONS:
            self._retire_upstream()  # rebuilt on next use with the new options

    def done(self) -> None:
        self._close_engine()
        self._retire_upstream()
        self._spawn(self.relay.close())

    # --- hooks -------------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        # map_remote rewrites the host in the request hook: remember what the client asked for.
        flow.metadata[META_HOST] = flow.request.pretty_host
        if flow.request.headers.get("upgrade", "").lower() == "websocket":
            self._websocket(flow)
        self._key_to_header(flow)

    def _key_to_header(self, flow: http.HTTPFlow) -> None:
        """Gemini's ``?key=`` moved into ``x-goog-api-key``, which the API reads the same way.

        Why: mitmproxy keeps every flow's URL, query string included, in saved flows and
        mitmweb, and prints it (redacted: ``redact_printer``). In a header the key is where
        every other provider's key is. A request that names its key both ways is left alone."""
        engine = self.engine
        host = flow.metadata[META_HOST]
        if engine is None or not host.endswith(".googleapis.com") or not engine.config.handles_host(host):
            return
        keys = flow.request.query.get_all("key")
        if len(keys) != 1 or "x-goog-api-key" in flow.request.headers:
            return
        flow.request.headers["x-goog-api-key"] = keys[0]
        del flow.request.query["key"]

    def _websocket(self, flow: http.HTTPFlow) -> None:
        """Codex opens a WebSocket to ``/v1/responses`` first; tool discovery runs on HTTP only.
        Refusing the upgrade makes it fall back to HTTP SSE; ``websocket: passthrough`` lets it
        through unprocessed, and says so."""
        engine = self.engine
        host = flow.metadata[META_HOST]
        if engine is None or not engine.adapter_for(host, "POST", flow.request.path):
            return
        if engine.config.websocket == "refuse":
            log.info("refusing a WebSocket upgrade to %s%s: clients fall back to HTTP", host, flow.request.path)
            flow.response = http.Response.make(
                426,  # Upgrade Required (RFC 9110 §15.5.22): Codex then falls back to HTTP, no retry
                b'{"error":{"type":"invalid_request_error","message":"WebSocket transport is not available '
                b'through this proxy; use HTTP"}}',
                {"content-type": "application/json"},
            )
        else:
            log.warning("WebSocket to %s%s passes through without tool discovery (websocket: passthrough)",
                        host, flow.request.path)

    async def request(self, flow: http.HTTPFlow) -> None:
        engine = self.engine
        if engine is None or flow.response or flow.error or not flow.live or flow.is_replay == "request":
            return
        host = flow.metadata.get(META_HOST, flow.request.pretty_host)
        adapter = engine.adapter_for(host, flow.request.method, flow.request.path)
        if adapter is None:
            return
        original = (flow.request.raw_content, flow.request.headers.copy(), flow.request.url, flow.server_conn)
        try:
            await self._rewrite(flow, engine, adapter)
        except Exception:  # fail open: the request goes out exactly as the client sent it
            log.exception("tool discovery failed; forwarding the request unchanged")
            self.watch.forget(flow)
            flow.request.raw_content, flow.request.headers, flow.request.url, flow.server_conn = original
            flow.metadata.pop(META_CONTEXT, None)
            flow.metadata.pop(META_LIVE, None)

    async def _rewrite(self, flow: http.HTTPFlow, engine: Engine, adapter: Adapter) -> None:
        body = await _decoded(flow.request, engine.config.max_body_bytes, "tool discovery skipped")
        if not body:
            return
        headers = {k.lower(): v for k, v in flow.request.headers.items()}
        aws = None
        if sigv4.is_signed(flow.request.url, flow.request.headers.items(multi=True)):  # a changed body needs the client's signature re-made by us
            aws = await sigv4.credentials()
            status, reason = sigv4.check("POST", flow.request.url, flow.request.headers.items(multi=True),
                                         flow.request.raw_content or b"", aws)
            if status is sigv4.Status.CANNOT:
                log.warning("tool discovery skipped: %s", reason)
                return
        # On the planning pool (its tenant's share of worker threads): a first request on a large
        # catalog may build a search index, and session reads are disk I/O; a blocking call in a
        # hook would stall every flow.
        sent = (flow.request.raw_content, flow.request.headers.copy())
        prepared = await engine.plan(adapter, headers, body, urlsplit(flow.request.path).query)
        if prepared.background is not None:
            self._spawn(prepared.background())
        self.watch.begin(flow, adapter, body, prepared.body, prepared.record,
                         prepared.context.phantom if prepared.context else "")
        if prepared.body is None:
            return
        codings = bodies.codings(flow.request.headers.get("content-encoding"))
        if len(codings) > 1 or not set(codings) <= REENCODABLE:
            del flow.request.headers["content-encoding"]  # codings mitmproxy cannot re-apply: sent plain
        flow.request.content = prepared.body
        flow.request.headers = _headers(_signed(flow.request.url, flow.request.headers.items(multi=True),
                                                flow.request.raw_content or b"", aws))
        ctx_ = prepared.context
        if ctx_ is None:
            return
        # Live flows are routed by ``LiveRouter`` at the end of the chain, where the URL is final.
        flow.metadata[META_LIVE if ctx_.stream else META_CONTEXT] = (ctx_, aws, sent)

    # --- live: the relay serves the stream ------------------------------------------------

    def running(self) -> None:
        redact_printer(ctx.master.addons.get("dumper"))  # mitmdump's flow listing bypasses logging
        if self.router is None:
            self.router = LiveRouter(self)
            ctx.master.addons.add(self.router)
        if not self._watching:  # at the chain's end too: it annotates flows once everything else ran
            self._watching = True
            ctx.master.addons.add(self.watch)

    async def route_live(self, flow: http.HTTPFlow) -> None:
        """Send a live flow to the relay, which runs it (and every round after it) upstream."""
        held = flow.metadata.pop(META_LIVE, None)
        if held is None or self.engine is None:
            return
        ctx_, aws, _ = held
        runner = self.engine.runner(ctx_)
        url, flow_id = flow.request.url, flow.id
        client = self._upstream()

        async def serve(headers: list[tuple[str, str]], body: bytes) -> AsyncIterator[Head | bytes]:
            # The Host mitmproxy sent names the relay; the real one comes from ``url``.
            headers = [(k, v) for k, v in headers if k.lower() != "host"]
            started = time.time()
            first = self.watch.tee(flow_id, url, headers, body, started,
                                   await runner.timed(client.open(url, headers, body)))
            async for item in runner.live(first, self._opener(url, headers, aws, client, flow_id)):
                yield item

        port = await self.relay.start()
        raw = flow.request.raw_content
        token = self.relay.register(serve, None if raw is None else len(raw))  # a longer body is refused unread
        flow.metadata[META_RELAY] = url
        if flow.server_conn.via is not None:  # upstream mode: the relay is reached directly, it uses the proxy
            flow.server_conn = connection.Server(address=("127.0.0.1", port))
        flow.request.scheme, flow.request.host, flow.request.port = "http", "127.0.0.1", port
        flow.request.headers[relay_mod.HEADER] = token

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is None or META_HOST not in flow.metadata or META_CONTEXT in flow.metadata:
            return  # a buffered flow's answer goes through the loop whole
        if META_RELAY in flow.metadata:
            flow.response.stream = True  # the relay writes each event when it is visible
            return
        engine = self.engine
        if engine and engine.config.handles_host(flow.metadata[META_HOST]):
            ctype = flow.response.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype in STREAM_TYPES:
                flow.response.stream = True  # live: first token reaches the client at once

    # --- buffered: the response hook runs the loop ----------------------------------------

    async def response(self, flow: http.HTTPFlow) -> None:
        self._show_real_url(flow)
        _ended(flow)
        held = flow.metadata.pop(META_CONTEXT, None)
        if held is None or self.engine is None or flow.response is None:
            return
        ctx_, aws, _ = held
        if flow.response.raw_content is None:  # streamed after all (stream_large_bodies)
            return
        body = await _decoded(flow.response, self.engine.config.max_body_bytes, "phantom loop skipped")
        if body is None:
            return
        first = Answer.whole(flow.response.status_code, body, list(flow.response.headers.items(multi=True)))
        first = self.watch.tee(flow.id, flow.request.url, list(flow.request.headers.items(multi=True)),
                               flow.request.content or b"", flow.request.timestamp_start, first, whole=body)
        opener = self._opener(flow.request.url, list(flow.request.headers.items(multi=True)), aws, self._upstream(),
                              flow.id)
        reply = await _while_client_waits(flow, self.engine.runner(ctx_).buffered(first, opener))
        if reply is None:  # the client went away: nothing to answer, the re-forward is cancelled
            if flow.killable:
                flow.kill()
            return
        response = flow.response
        if response.status_code != reply.status:  # HTTP/1's reason phrase goes with the status
            response.reason = http.status_codes.RESPONSES.get(reply.status, "")
        response.status_code = reply.status
        response.headers = _headers([(k, v) for k, v in reply.headers if k.lower() != "content-encoding"])
        response.content = reply.body

    def error(self, flow: http.HTTPFlow) -> None:
        self._show_real_url(flow)
        _ended(flow)
        held = flow.metadata.pop(META_CONTEXT, None)
        if held is not None and self.engine is not None:
            record = held[0].record
            record.outcome = record.outcome or f"flow_error: {flow.error.msg if flow.error else ''}"[:200]
            self.engine.telemetry.submit(record)

    @staticmethod
    def _show_real_url(flow: http.HTTPFlow) -> None:
        """A relayed flow was sent to the loopback relay; show where it really went."""
        url = flow.metadata.pop(META_RELAY, None)
        if url is not None:
            flow.request.url = url
            flow.request.headers.pop(relay_mod.HEADER, None)

    # --- the proxy's own requests ---------------------------------------------------------

    def _opener(self, url: str, headers: list[tuple[str, str]], aws: Any, client: UpstreamClient, flow_id: str):
        """How the runner sends a body where this flow went: the flow's final headers, the
        body plain (so no content-encoding), re-signed when the client used SigV4. Each round
        is shown in mitmweb as the proxy's own flow (``tooldisco.watch``)."""
        base = [(k, v) for k, v in headers if k.lower() not in ("content-encoding", relay_mod.HEADER)]

        async def open_(body: bytes) -> Answer:
            sent, started = _signed(url, base, body, aws), time.time()
            return self.watch.tee(flow_id, url, sent, body, started, await client.open(url, sent, body))

        return open_

    def _upstream(self) -> UpstreamClient:
        if self.upstream is None:
            self.upstream = UpstreamClient(_upstream_options())
        return self.upstream

    def _close_engine(self) -> None:
        if self.engine:
            self._spawn(self.engine.selector.aclose())
            self.engine.close()

    def _retire_upstream(self) -> None:
        if self.upstream is not None:
            old, self.upstream = self.upstream, None
            self._spawn(old.retire())

    def _spawn(self, coro) -> None:
        """Run ``coro`` beside the flows; keep a reference until it is done."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            return
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class LiveRouter:
    """The last addon of the chain: routes live flows to the relay once every other addon's
    ``request`` hook ran (map_remote, modify_headers…), so the relay sends them where
    mitmproxy would have. Scripts run early in mitmproxy's chain; this one is added at its end."""

    def __init__(self, owner: ToolDiscovery) -> None:
        self.owner = owner

    async def request(self, flow: http.HTTPFlow) -> None:
        held = flow.metadata.get(META_LIVE)
        if held is None:
            return
        if flow.response or flow.error:  # another addon answered it: nothing to relay
            flow.metadata.pop(META_LIVE, None)
            return
        try:
            await self.owner.route_live(flow)
        except Exception:  # fail open: the client's own request goes out, untouched
            log.exception("live relay unavailable; forwarding the request unchanged")
            self.owner.watch.forget(flow)
            flow.metadata.pop(META_LIVE, None)
            flow.metadata.pop(META_RELAY, None)
            flow.request.raw_content, flow.request.headers = held[2]


async def _while_client_waits(flow: http.HTTPFlow, work: Coroutine[Any, Any, T]) -> T | None:
    """``work``'s result, or None once the client closed its connection: ``work`` (the loop's
    re-forwards) is then cancelled, which closes its upstream request, so no generation runs
    for a client that left.

    Why a poll of the connection: while a flow's response hook runs, mitmproxy holds that
    flow's own events (its ``error`` hook comes only after the hook returned), but it marks the
    client connection unreadable as soon as the client closes it; a client that sent its FIN
    wants no more data (mitmproxy's HTTP/1 layer ends the flow on it too). An HTTP/2 stream reset
    leaves the connection open and is not seen here."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait([task], timeout=CLIENT_POLL_S)
            if done:
                return task.result()
            if not flow.client_conn.state & ConnectionState.CAN_READ:
                log.info("client closed its connection; cancelling the phantom loop of %s", flow.request.pretty_url)
                task.cancel()
                await asyncio.wait([task])
                return None
    finally:
        task.cancel()  # the hook itself cancelled (shutdown): the work goes with it


def _ended(flow: http.HTTPFlow) -> None:
    """A flow that carried a large body asks for the cycles around it to be collected (``allocator``)."""
    if META_HOST in flow.metadata:
        response = flow.response.raw_content if flow.response else None
        allocator.collect_soon(len(flow.request.raw_content or b"") + len(response or b""))


async def _decoded(message: http.Message, cap: int, skipped: str) -> bytes | None:
    """The body decoded, or None when it cannot be within ``cap`` (the flow then passes as
    mitmproxy carries it, raw bytes untouched). Not ``get_content``: that decodes all of a
    bomb at once. In a worker thread: up to ``cap`` bytes of decoding must not stall other flows."""
    raw = message.raw_content
    if raw is None:  # streamed (stream_large_bodies): nothing held to decode
        return None
    coding = message.headers.get("content-encoding")
    try:
        if not coding:
            return bodies.decode(raw, coding, cap)  # plain: only its size is checked
        return await asyncio.to_thread(bodies.decode, raw, coding, cap)
    except bodies.BodyError as e:
        log.warning("%s: cannot decode the %s body (%s)", skipped,
                    "request" if isinstance(message, http.Request) else "response", e)
        return None


def _signed(url: str, headers, body: bytes, aws: Any) -> list[tuple[str, str]]:
    """Headers for ``body``: re-signed when the client used SigV4 (Bedrock), else as they are."""
    pairs = list(headers)
    if aws is None:
        return pairs
    result = sigv4.resign("POST", url, pairs, body, aws)
    if result.status is sigv4.Status.CANNOT:
        log.warning("cannot re-sign the changed request: %s", result.reason)
    return list(result.headers)


def _headers(pairs) -> http.Headers:
    return http.Headers([(k.encode(), v.encode()) for k, v in pairs])


def _upstream_options() -> UpstreamOptions:
    """mitmproxy's options, as the proxy's own client must honour them."""
    opts = ctx.options
    proxy = None
    for spec in opts.mode:
        mode = ProxyMode.parse(spec)
        if isinstance(mode, UpstreamMode):
            host, port = mode.address
            proxy = f"{mode.scheme}://{host}:{port}"
    auth = None
    spec = getattr(opts, "upstream_auth", None)  # declared by mitmproxy's upstream_auth addon
    if spec and ":" in spec:
        user, _, password = spec.partition(":")
        auth = (user, password)
    return UpstreamOptions(
        proxy=proxy,
        proxy_auth=auth,
        verify=not opts.ssl_insecure,
        ca_file=opts.ssl_verify_upstream_trusted_ca,
        ca_dir=opts.ssl_verify_upstream_trusted_confdir,
    )


addons = [ToolDiscovery()]
