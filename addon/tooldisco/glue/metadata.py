"""What the glue knows about one flow between its hooks: one record under one key of ``flow.metadata``.

Why a record: a flow's hooks run in different addons (the rewrite, the router at the chain's
end, the response loop), each reading the fields it needs by name. Why it goes when the flow
ends: mitmproxy saves ``flow.metadata`` with a flow (``-w``, mitmweb's export) and copies it on
replay, and the record holds live objects (the loop's context, AWS credentials).
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.credentials import ReadOnlyCredentials
from mitmproxy import http

from tooldisco.apis.base import Adapter
from tooldisco.apis.usage_scan import UsageScan
from tooldisco.core import allocator
from tooldisco.engine.planner import FlowContext
from tooldisco.engine.telemetry import Record

KEY = "tool_discovery.glue"


@dataclass(slots=True)
class Held:
    """A request the engine changed, whose answer goes through the loop."""

    context: FlowContext
    aws: ReadOnlyCredentials | None  # the client signed with SigV4: every changed body is re-signed
    sent: tuple[bytes | None, http.Headers]  # the request as the client sent it, restored on failure
    live: bool  # a stream, served by the relay; else buffered, completed in the response hook


@dataclass(slots=True)
class Passed:
    """A request that went upstream as the client sent it (nothing to defer, the client
    defers by itself, passthrough): its record waits for the answer, whose usage it carries."""

    record: Record
    adapter: Adapter
    scan: UsageScan | None = None  # a streamed answer's usage, read as it passes


@dataclass(slots=True)
class FlowMeta:
    host: str  # the host the client asked for: map_remote rewrites it in the request hook
    held: Held | None = None  # until the router (live) or the response hook (buffered) takes it
    # A relayed flow went to the loopback relay; the (scheme, host, port) it really went to.
    relayed_to: tuple[str, str, int] | None = None
    # A relayed flow's body and headers as they would have gone: the relay got the body in the
    # process, the hop to it carried none. Put back once the relay answered.
    relayed_request: tuple[bytes, http.Headers] | None = None
    passed: Passed | None = None  # until the usage tap closes its record (``glue.usage``)

    @property
    def buffered(self) -> Held | None:
        return self.held if self.held is not None and not self.held.live else None

    @property
    def live(self) -> Held | None:
        return self.held if self.held is not None and self.held.live else None


def of(flow: http.HTTPFlow) -> FlowMeta | None:
    meta = flow.metadata.get(KEY)
    return meta if isinstance(meta, FlowMeta) else None


class FlowRecord:
    """Opens each flow's record before any other hook of the glue reads it, and asks for the
    cycles around a large body to be collected when the flow ends (``allocator``)."""

    name = "tooldisco_flow_record"

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        flow.metadata[KEY] = FlowMeta(host=flow.request.pretty_host)

    def response(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    @staticmethod
    def _ended(flow: http.HTTPFlow) -> None:
        if of(flow) is not None:
            response = flow.response.raw_content if flow.response else None
            allocator.collect_soon(len(flow.request.raw_content or b"") + len(response or b""))


def close(flow: http.HTTPFlow) -> None:
    """The flow ended: its record goes (see the module's docstring)."""
    flow.metadata.pop(KEY, None)
