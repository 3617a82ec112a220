"""The glue's addons as mitmdump builds them, driven hook by hook in chain order."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

from mitmproxy import http
from mitmproxy.test import tflow, tutils

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "addon"))
import tool_discovery  # noqa: E402
from tooldisco.glue.buffered import Buffered  # noqa: E402
from tooldisco.glue.live import Live  # noqa: E402
from tooldisco.glue.options import Options  # noqa: E402
from tooldisco.glue.rewrite import Rewrite  # noqa: E402
from tooldisco.glue.upstream import Upstream  # noqa: E402
from tooldisco.glue.watching import Watching  # noqa: E402

from tests.support.catalog import anthropic_tools  # noqa: E402


class Chain:
    """``tool_discovery.build()``; each hook runs on every addon in order, as mitmproxy runs a
    script's addons. The router and the watcher, at the chain's end, are driven by the test."""

    def __init__(self) -> None:
        self.addons = tool_discovery.build()
        self.options: Options = self.get(Options)
        self.upstream: Upstream = self.get(Upstream)
        self.rewrite: Rewrite = self.get(Rewrite)
        self.live: Live = self.get(Live)
        self.buffered: Buffered = self.get(Buffered)
        self.watch = self.get(Watching).watch

    def get(self, kind: type) -> Any:
        return next(a for a in self.addons if isinstance(a, kind))

    @property
    def engine(self):
        return self.options.engine

    def _sync(self, name: str, *args: Any) -> None:
        for addon in self.addons:
            if hasattr(addon, name):
                getattr(addon, name)(*args)

    async def _async(self, name: str, flow: http.HTTPFlow) -> None:
        for addon in self.addons:
            if hasattr(addon, name):
                result = getattr(addon, name)(flow)
                if inspect.isawaitable(result):
                    await result

    def running(self) -> None:
        self._sync("running")

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self._sync("requestheaders", flow)

    async def request(self, flow: http.HTTPFlow) -> None:
        await self._async("request", flow)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        self._sync("responseheaders", flow)

    async def response(self, flow: http.HTTPFlow) -> None:
        await self._async("response", flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._sync("error", flow)


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return str(p)


def relevance_config(tmp_path: Path) -> str:
    return write(tmp_path, f"""
pipes: {{tool_discovery: {{enabled: true, strategy: relevance}}}}
sessions: {{dir: {tmp_path}/s}}
telemetry: {{path: {tmp_path}/t.jsonl}}
""")


def tool_search_config(tmp_path: Path, extra: str = "") -> str:
    return write(tmp_path, f"""
pipes: {{tool_discovery: {{enabled: true, strategy: tool-search}}}}
sessions: {{dir: {tmp_path}/s}}
telemetry: {{path: {tmp_path}/t.jsonl}}
{extra}
""")


def flow(host: str = "api.anthropic.com", path: str = "/v1/messages", body: bytes | None = None, n: int = 60,
         stream: bool = False) -> http.HTTPFlow:
    if body is None:
        payload: dict[str, Any] = {"model": "m", "max_tokens": 5, "tools": anthropic_tools(n),
                                   "messages": [{"role": "user", "content": "post to slack"}]}
        if stream:
            payload["stream"] = True
        body = json.dumps(payload).encode()
    req = tutils.treq(host=host, port=443, scheme=b"https", path=path.encode(), method=b"POST",
                      headers=[(b"content-type", b"application/json"), (b"x-api-key", b"k")], content=body)
    return tflow.tflow(req=req)
