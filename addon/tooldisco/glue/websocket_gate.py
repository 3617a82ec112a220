"""Codex opens a WebSocket to ``/v1/responses`` first; tool discovery runs on HTTP only."""

from __future__ import annotations


from loguru import logger
from mitmproxy import http

from tooldisco.glue import metadata
from tooldisco.glue.options import Options

REFUSAL = (b'{"error":{"type":"invalid_request_error","message":"WebSocket transport is not available '
           b'through this proxy; use HTTP"}}')


class WebSocketGate:
    """Refusing the upgrade makes the client fall back to HTTP SSE; ``websocket: passthrough``
    lets it through unprocessed, and says so. Only on endpoints tool discovery processes."""

    name = "tooldisco_websocket_gate"

    def __init__(self, options: Options) -> None:
        self._options = options

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        engine, meta = self._options.engine, metadata.of(flow)
        if flow.request.headers.get("upgrade", "").lower() != "websocket" or engine is None or meta is None:
            return
        if not engine.adapter_for(meta.host, "POST", flow.request.path):
            return
        if engine.config.websocket == "refuse":
            logger.info("refusing a WebSocket upgrade to {}{}: clients fall back to HTTP", meta.host, flow.request.path)
            # 426 Upgrade Required (RFC 9110 §15.5.22): Codex then falls back to HTTP, no retry
            flow.response = http.Response.make(426, REFUSAL, {"content-type": "application/json"})
        else:
            logger.warning("WebSocket to {}{} passes through without tool discovery (websocket: passthrough)",
                           meta.host, flow.request.path)
