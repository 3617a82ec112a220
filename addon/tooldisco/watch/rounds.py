"""The proxy's own upstream rounds, captured as they pass and shown as flows of their own.

Why a tee on the answer: the runner reads every round through an ``Answer`` (the first one
and each re-forward, the fail-open resend included); reading the same chunks as they go by
records the round exactly as the upstream sent it, without delaying or changing a byte. A
round keeps at most ``LIMIT`` bytes of its answer: a long stream is cut, and says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence
from urllib.parse import urlsplit

from mitmproxy import connection, http
from mitmproxy.proxy.mode_specs import ProxyMode

from tooldisco.net.upstream import HOP_BY_HOP
from tooldisco.core.redact import redact_header
from tooldisco.core.answers import Answer

LIMIT = 1 << 20  # bytes of one round's answer kept for the view
ROUND_KEY = "tool_discovery.round"  # metadata of a round flow: which client flow it belongs to
MARK = ":gear:"  # the proxy's own flows


@dataclass
class Round:
    """One request the proxy sent upstream for a client's flow, and its answer as received."""

    url: str
    headers: list[tuple[str, str]]  # as sent, credentials redacted
    body: bytes
    started: float
    status: int = 0
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    answered: float | None = None  # the answer's head arrived
    ended: float | None = None
    size: int = 0  # bytes of the answer seen, kept or not
    kept: int = 0  # of which kept, at most LIMIT
    parts: list[bytes] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return self.size > LIMIT

    def add(self, chunk: bytes) -> None:
        if (room := LIMIT - self.kept) > 0:
            self.parts.append(chunk[:room])
            self.kept += len(self.parts[-1])
        self.size += len(chunk)


def capture(url: str, headers: Sequence[tuple[str, str]], body: bytes, started: float,
            answer: Answer, whole: bytes | None = None) -> tuple[Round, Answer]:
    """A ``Round`` for this request, and ``answer`` with the same chunks, recorded as they are read.
    ``whole``: the body, when it is known already (a buffered answer, which may be closed unread)."""
    sent = [(k, redact_header(k, v)) for k, v in headers if k.lower() not in HOP_BY_HOP]
    rnd = Round(url, sent, body, started, answer.status, list(answer.headers), answered=time.time())
    if whole is not None:
        rnd.add(whole)
        rnd.ended = rnd.answered
        return rnd, answer

    async def chunks() -> AsyncIterator[bytes]:
        async for chunk in answer.chunks:
            rnd.add(chunk)
            yield chunk
        rnd.ended = time.time()

    async def close() -> None:
        if rnd.ended is None:
            rnd.ended = time.time()
        await answer.close()

    return rnd, Answer(answer.status, answer.headers, chunks(), close)


def kind(index: int, rnd: Round, client_body: bytes) -> str:
    """What a round was, in words."""
    if index == 0:
        return "the rewritten request"
    if rnd.body == client_body:
        return "the client's own request, resent (fail-open)"
    return "re-forward with search results"


def to_flow(rnd: Round, client_flow: str, index: int, count: int, label: str, phantom: str,
            extra: dict[str, Any] | None = None) -> http.HTTPFlow:
    """A finished round as a flow mitmweb and the console show like any other, marked as the
    proxy's own. ``extra``: what its view needs of the client's flow (its search hits, the dispatcher)."""
    parts = urlsplit(rnd.url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    client = connection.Client(peername=("127.0.0.1", 0), sockname=("127.0.0.1", 0), timestamp_start=rnd.started,
                               proxy_mode=ProxyMode.parse("regular"))
    server = connection.Server(address=(parts.hostname or "", port))
    flow = http.HTTPFlow(client, server)
    flow.request = http.Request.make("POST", rnd.url, b"", _headers(rnd.headers))
    flow.request.content = rnd.body
    flow.request.timestamp_start = flow.request.timestamp_end = rnd.started
    headers = [(k, redact_header(k, v)) for k, v in rnd.response_headers
               if k.lower() not in ("content-length", "transfer-encoding")]
    flow.response = http.Response.make(rnd.status, b"", _headers(headers))
    flow.response.content = b"".join(rnd.parts)
    flow.response.timestamp_start = rnd.answered or rnd.started
    flow.response.timestamp_end = rnd.ended or flow.response.timestamp_start
    flow.live = False
    cut = f" (answer cut to {LIMIT:,} of {rnd.size:,} bytes)" if rnd.truncated else ""
    # Short, the figures first: mitmweb's Comment column shows about twenty characters.
    flow.comment = f"round {index + 1}/{count}: {label}{cut} · the proxy's own, for flow {client_flow}"
    flow.marked = MARK
    flow.metadata[ROUND_KEY] = {"client_flow": client_flow, "round": index + 1, "rounds": count, "kind": label,
                                "phantom": phantom, "truncated": rnd.truncated, **(extra or {})}
    return flow


def _headers(pairs: Sequence[tuple[str, str]]) -> http.Headers:
    return http.Headers([(k.encode(), v.encode()) for k, v in pairs])
