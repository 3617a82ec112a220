"""Gemini's ``?key=`` moved into ``x-goog-api-key``, which the API reads the same way."""

from __future__ import annotations

from mitmproxy import http

from tooldisco.glue import metadata
from tooldisco.glue.options import Options


class GeminiKey:
    """Why: mitmproxy keeps every flow's URL, query string included, in saved flows and mitmweb,
    and prints it (redacted: ``redaction``). In a header the key is where every other provider's
    key is. A request that names its key both ways is left alone."""

    name = "tooldisco_gemini_key"

    def __init__(self, options: Options) -> None:
        self._options = options

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        engine, meta = self._options.engine, metadata.of(flow)
        if engine is None or meta is None:
            return
        if not meta.host.endswith(".googleapis.com") or not engine.config.handles_host(meta.host):
            return
        keys = flow.request.query.get_all("key")
        if len(keys) != 1 or "x-goog-api-key" in flow.request.headers:
            return
        flow.request.headers["x-goog-api-key"] = keys[0]
        del flow.request.query["key"]
