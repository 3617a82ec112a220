"""The proxy's own upstream rounds, captured as they pass and shown as flows of their own.

Why a tee on the answer: the runner reads every round through an ``Answer`` (the first one
and each re-forward, the fail-open resend included); reading the same chunks as they go by
records the round exactly as the upstream sent it, without delaying or changing a byte. A
round keeps at most ``LIMIT`` bytes of its answer: a long stream is cut, and says so. The
same bound holds for what the client got of a live stream (``Kept``, ``tap``).

Why a tag: mitmweb shows no flow ids and makes no link of text, but it filters on comments
(``~comment``). A client flow and its rounds share one short tag, first in each comment, so
the flow list shows which flows belong together and ``~comment <tag>`` lists exactly them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterable, Sequence
from urllib.parse import quote, urlsplit

from mitmproxy import connection, http
from mitmproxy.proxy.mode_specs import ProxyMode

from tooldisco.net.upstream import HOP_BY_HOP
from tooldisco.core.redact import redact_header
from tooldisco.core.answers import Answer

LIMIT = 1 << 20  # bytes of one answer kept for the view (a round's, or what the client got of a stream)
ROUND_KEY = "tool_discovery.round"  # metadata of a round flow: which client flow it belongs to
MARK = ":gear:"  # the proxy's own flows
GEAR = "⚙"  # the same, in text
TAG_CHARS = 6  # hex digits of the client flow's id in its tag: "#b53850"


def tag(turn_id: str) -> str:
    """The short tag a client flow and its rounds share: ``#`` and the first digits of the turn's
    id (its telemetry record's, the one mitmdump's line and the report print; else the flow's)."""
    return "#" + turn_id.replace("-", "")[:TAG_CHARS]


def group_filter(turn: str) -> str:
    """mitmproxy's filter expression that selects a turn's flows: the client's and its rounds."""
    return f"~comment {turn}"


def web_link(base: str | None, turn: str, flow_id: str | None = None) -> str | None:
    """A mitmweb address that opens on the turn's flows (``#/flows?s=<filter>``), or on one of
    them, selected, with the others listed. The query string (``?turn=``) makes a pasted
    address load the page: mitmweb reads its hash once, when the page loads."""
    if not base:
        return None
    where = f"/flows/{flow_id}/request" if flow_id else "/flows"
    return f"{base}?turn={turn[1:]}#{where}?s={quote(group_filter(turn), safe='')}"


class Kept:
    """An answer's bytes, kept up to ``LIMIT``; how many there were in all."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0  # bytes seen, kept or not
        self.kept = 0  # of which kept, at most LIMIT

    @property
    def truncated(self) -> bool:
        return self.size > LIMIT

    def add(self, chunk: bytes) -> None:
        if (room := LIMIT - self.kept) > 0 and chunk:
            self.parts.append(chunk[:room])
            self.kept += len(self.parts[-1])
        self.size += len(chunk)

    def body(self) -> bytes:
        return b"".join(self.parts)


def tap(stream: Any, kept: Kept) -> Callable[[bytes], Any]:
    """A stream callable for ``flow.response.stream`` that keeps what the client gets: each
    chunk as ``stream`` passes it on (``True``: as it came; another addon's callable: what that
    returns). Nothing is changed or delayed."""
    inner = stream if callable(stream) else None

    def keep(chunk: bytes) -> Any:
        out = inner(chunk) if inner is not None else chunk
        if isinstance(out, (bytes, bytearray)):
            kept.add(bytes(out))
            return out
        out = list(out)  # an iterable of chunks: read once, passed on as a list
        for part in out:
            kept.add(bytes(part))
        return out

    return keep


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
    answer: Kept = field(default_factory=Kept)

    @property
    def truncated(self) -> bool:
        return self.answer.truncated

    @property
    def size(self) -> int:
        return self.answer.size

    @property
    def kept(self) -> int:
        return self.answer.kept

    @property
    def parts(self) -> list[bytes]:
        return self.answer.parts

    def add(self, chunk: bytes) -> None:
        self.answer.add(chunk)


def capture(url: str, headers: Sequence[tuple[str, str]], body: bytes, started: float,
            answer: Answer, whole: bytes | None = None) -> tuple[Round, Answer]:
    """A ``Round`` for this request, and ``answer`` with the same chunks, recorded as they are read.
    ``whole``: the body, when it is known already (a buffered answer, which may be closed unread)."""
    rnd = Round(url, _sent(headers), body, started, answer.status, list(answer.headers), answered=time.time())
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


def of_flow(flow: http.HTTPFlow, answer: Kept | None) -> Round:
    """The one round of a rewritten request that mitmproxy itself sent (no loop ran: nothing
    was teed): the request as it went, the answer as it came (``answer``: a stream's, kept
    as it passed), from the flow before its request is put back to the client's."""
    request, response = flow.request, flow.response
    rnd = Round(request.url, _sent(request.headers.items(multi=True)), request.get_content(strict=False) or b"",
                request.timestamp_start)
    if response is not None:
        rnd.status, rnd.response_headers = response.status_code, list(response.headers.items(multi=True))
        rnd.answered, rnd.ended = response.timestamp_start, response.timestamp_end
        if response.raw_content is not None:
            rnd.add(response.get_content(strict=False) or b"")
            plain = [(k, v) for k, v in rnd.response_headers if k.lower() != "content-encoding"]
            rnd.response_headers = plain
        elif answer is not None:
            rnd.answer = answer
    return rnd


def _sent(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, redact_header(k, v)) for k, v in headers if k.lower() not in HOP_BY_HOP]


def kind(index: int, rnd: Round, client_body: bytes) -> str:
    """What a round was, in words."""
    if index == 0:
        return "the rewritten request"
    if rnd.body == client_body:
        return "the client's own request, resent (fail-open)"
    return "re-forward with search results"


def to_flow(rnd: Round, client_flow: str, index: int, count: int, label: str, phantom: str,
            extra: dict[str, Any] | None = None, turn_id: str | None = None) -> http.HTTPFlow:
    """A finished round as a flow mitmweb and the console show like any other, marked as the
    proxy's own. ``extra``: what its view needs of the client's flow (the dispatcher);
    ``turn_id``: the turn's id (default: the client flow's)."""
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
    flow.response.raw_content = rnd.answer.body()  # as it came: decoded, or under the content-encoding it names
    flow.response.timestamp_start = rnd.answered or rnd.started
    flow.response.timestamp_end = rnd.ended or flow.response.timestamp_start
    flow.live = False
    cut = f" (answer cut to {LIMIT:,} of {rnd.size:,} bytes)" if rnd.truncated else ""
    turn = tag(turn_id or client_flow)
    # The turn's tag first (the flow list groups by it), then the figures: mitmweb's Comment
    # column shows about twenty characters. The whole id last: ``~comment <id>`` lists them too.
    whole = f" (id {turn_id})" if turn_id else ""
    flow.comment = (f"{turn} {GEAR} round {index + 1}/{count}: {label}{cut} · the proxy's own, "
                    f"for flow {turn}{whole}")
    flow.marked = MARK
    flow.metadata[ROUND_KEY] = {"client_flow": client_flow, "turn": turn, "round": index + 1, "rounds": count,
                                "kind": label, "phantom": phantom, "truncated": rnd.truncated, **(extra or {})}
    return flow


def _headers(pairs: Iterable[tuple[str, str]]) -> http.Headers:
    return http.Headers([(k.encode(), v.encode()) for k, v in pairs])
