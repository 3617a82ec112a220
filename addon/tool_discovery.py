"""mitmproxy entry point: ``mitmdump -s addon/tool_discovery.py``.

Glue only, in the manner of mitmproxy's own addons: the option is declared in
``load``, parsed in ``configure`` (``OptionsError`` on a bad config, so mitmdump
exits naming the key), and the hooks hand bodies to the engine and its answers
back to the flow. Every decision lives in ``tooldisco``, which has no mitmproxy import.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import sys
from pathlib import Path
from typing import Any, Optional

import httpx
from loguru import logger
from mitmproxy import ctx, exceptions, http

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tooldisco import sigv4  # noqa: E402
from tooldisco.config import ConfigError, load_config  # noqa: E402
from tooldisco.engine import Engine, FlowContext, Reply  # noqa: E402
from tooldisco.providers.base import Adapter  # noqa: E402

DEFAULT_CONFIG = str(Path(__file__).resolve().parent.parent / "configs" / "tool_discovery.yaml")
META_HOST = "tool_discovery.host"  # the host the client asked for, before map_remote
META_CONTEXT = "tool_discovery.context"
HOP_BY_HOP = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
     "proxy-authorization", "te", "trailer", "upgrade", "content-encoding", "accept-encoding"}
)
STREAM_TYPES = ("text/event-stream", "application/vnd.amazon.eventstream")
log = logging.getLogger("tool_discovery")


def _to_logging(message: Any) -> None:
    """Engine logs (loguru) go to the logging module, which is what mitmproxy prints."""
    record = message.record
    level = logging.getLevelName(record["level"].name)
    log.log(level if isinstance(level, int) else logging.INFO, record["message"])


class ToolDiscovery:
    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.client: httpx.AsyncClient | None = None
        self._sink: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def load(self, loader) -> None:
        loader.add_option(
            "tool_discovery_config",
            Optional[str],
            DEFAULT_CONFIG,
            "Path of the tool discovery YAML config.",
        )
        if self._sink is None:
            try:
                logger.remove(0)  # loguru's own stderr sink would print everything twice
            except ValueError:
                pass
            self._sink = logger.add(_to_logging, level="DEBUG", format="{message}")

    def configure(self, updated: set[str]) -> None:
        if "tool_discovery_config" in updated:
            path = ctx.options.tool_discovery_config or DEFAULT_CONFIG
            try:
                config = load_config(path)
            except ConfigError as e:
                raise exceptions.OptionsError(f"tool_discovery_config: {e}") from None
            for warning in config.warnings:
                log.warning(warning)
            if self.engine:
                self.engine.close()
            self.engine = Engine(config)
            td = config.tool_discovery
            log.info(
                "tool discovery: %s, strategy %s, hosts %s",
                "on" if td.enabled else "off", td.strategy, ", ".join(config.hosts),
            )
        if updated & {"ssl_insecure", "ssl_verify_upstream_trusted_ca", "ssl_verify_upstream_trusted_confdir",
                      "mode", "tool_discovery_config"}:
            self.client = None  # rebuilt on next use with the new options

    def done(self) -> None:
        if self.engine:
            self.engine.close()

    # --- hooks -------------------------------------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        # map_remote rewrites the host in the request hook: remember what the client asked for.
        flow.metadata[META_HOST] = flow.request.pretty_host
        if flow.request.headers.get("upgrade", "").lower() == "websocket":
            self._websocket(flow)

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
                426,  # Upgrade Required: Codex falls back to HTTP after one attempt (measured)
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
        original = (flow.request.raw_content, flow.request.headers.copy())
        try:
            await self._rewrite(flow, engine, adapter)
        except Exception:  # fail open: the request goes out exactly as the client sent it
            log.exception("tool discovery failed; forwarding the request unchanged")
            flow.request.raw_content, flow.request.headers = original
            flow.metadata.pop(META_CONTEXT, None)

    async def _rewrite(self, flow: http.HTTPFlow, engine: Engine, adapter: Adapter) -> None:
        try:
            body = flow.request.get_content(strict=True)
        except ValueError as e:
            log.warning("tool discovery skipped: cannot decode the request body (%s)", e)
            return
        if not body:
            return
        headers = {k.lower(): v for k, v in flow.request.headers.items()}
        status, reason = sigv4.check(headers)
        if status is sigv4.Status.CANNOT:  # a changed body would fail the signature check
            log.warning("tool discovery skipped: %s", reason)
            return
        # In a worker thread: a first request on a large catalog may build a search index,
        # and a blocking call in a hook would stall every other flow of the proxy.
        prepared = await asyncio.to_thread(engine.prepare, adapter, headers, body)
        if prepared.body is not None:
            flow.request.content = prepared.body
            signed = self._signed(flow.request.url, flow.request.headers.items(multi=True), prepared.body)
            flow.request.headers = http.Headers([(k.encode(), v.encode()) for k, v in signed])
        if prepared.context is not None:
            flow.metadata[META_CONTEXT] = prepared.context
        if prepared.background is not None:
            task = asyncio.get_running_loop().create_task(prepared.background())
            self._tasks.add(task)  # keep a reference until it is done
            task.add_done_callback(self._tasks.discard)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.response is None or META_HOST not in flow.metadata or META_CONTEXT in flow.metadata:
            return  # flows that may need the phantom loop are buffered
        engine = self.engine
        host = flow.metadata[META_HOST]
        if engine and engine.config.handles_host(host):
            ctype = flow.response.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype in STREAM_TYPES:
                flow.response.stream = True  # live: first token reaches the client at once

    async def response(self, flow: http.HTTPFlow) -> None:
        context: FlowContext | None = flow.metadata.pop(META_CONTEXT, None)
        if context is None or self.engine is None or flow.response is None:
            return
        if flow.response.raw_content is None:  # streamed after all (stream_large_bodies)
            return
        try:
            body = flow.response.get_content(strict=True) or b""
        except ValueError as e:
            log.warning("phantom loop skipped: cannot decode the response body (%s)", e)
            return
        first = Reply(flow.response.status_code, body, flow.response.headers.get("content-type", ""))
        reply = await self.engine.complete(context, first, lambda b: self._send(flow, b))
        if reply is not None:
            self._answer(flow.response, reply)

    @staticmethod
    def _answer(response: http.Response, reply: Reply) -> None:
        """Put the engine's answer on the flow: a merged one over the first answer's headers,
        another one (an error passed on, the client's own request resent) with its own."""
        if reply.merged:
            for name, value in reply.headers or []:
                response.headers[name] = value
        else:
            kept = [(k.encode(), v.encode()) for k, v in reply.headers or [] if k.lower() not in HOP_BY_HOP]
            response.headers = http.Headers(kept)
        response.status_code = reply.status
        if reply.content_type:
            response.headers["content-type"] = reply.content_type
        response.content = reply.body

    # --- re-forwarding -----------------------------------------------------------------

    async def _send(self, flow: http.HTTPFlow, body: bytes) -> Reply:
        """Send ``body`` where the flow's request finally went, with its final headers."""
        headers = [(k, v) for k, v in flow.request.headers.items(multi=True) if k.lower() not in HOP_BY_HOP]
        headers = self._signed(flow.request.url, headers, body) + [("accept-encoding", "identity")]
        client = self.client or self._make_client()
        try:
            r = await client.post(flow.request.url, content=body, headers=headers)
        except httpx.HTTPError as e:
            log.warning("phantom re-forward failed: %s", e)
            return Reply(502, b'{"error":{"type":"proxy_error","message":"re-forward failed"}}')
        return Reply(r.status_code, r.content, r.headers.get("content-type", ""), list(r.headers.multi_items()))

    @staticmethod
    def _signed(url: str, headers, body: bytes) -> list[tuple[str, str]]:
        """Headers for ``body``: re-signed when the client used SigV4 (Bedrock), else as they are."""
        result = sigv4.resign("POST", url, list(headers), body)
        if result.status is sigv4.Status.CANNOT:
            log.warning("cannot re-sign the changed request: %s", result.reason)
        return list(result.headers)

    def _make_client(self) -> httpx.AsyncClient:
        """Honour mitmproxy's upstream-proxy mode and TLS options, as the proxy itself would."""
        opts = ctx.options
        verify: ssl.SSLContext | bool = True
        if opts.ssl_insecure:
            verify = False
        elif opts.ssl_verify_upstream_trusted_ca or opts.ssl_verify_upstream_trusted_confdir:
            verify = ssl.create_default_context(
                cafile=opts.ssl_verify_upstream_trusted_ca, capath=opts.ssl_verify_upstream_trusted_confdir
            )
        proxy = None
        for mode in opts.mode:
            if mode.startswith("upstream:"):
                proxy = mode.split(":", 1)[1]
        self.client = httpx.AsyncClient(
            verify=verify,
            proxy=proxy,
            timeout=httpx.Timeout(600.0, connect=30.0),
            trust_env=False,
        )
        return self.client


addons = [ToolDiscovery()]
