"""The proxy's own HTTP client: every request the proxy makes itself goes out here.

Why one client: the live relay's first round, every phantom re-forward and every fail-open
resend must leave the way mitmproxy would send them (its upstream proxy and credentials,
its TLS verification options), and close cleanly when those options change or the proxy
stops. The addon translates mitmproxy's options into ``UpstreamOptions``; nothing here
imports mitmproxy.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import AsyncIterator, Sequence

import httpx
from loguru import logger

from ..runner import Answer

# Request headers that belong to one hop, or that httpx sets itself from the body it sends.
HOP_BY_HOP = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
     "proxy-authorization", "te", "trailer", "upgrade", "accept-encoding"}
)
# httpx logs every request line at INFO, query string included (Gemini's ?key=…).
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.WARNING)

# What a server closing a kept-alive connection under our request looks like: no status line
# read (RemoteProtocolError "Server disconnected without sending a response"), or the socket
# reset while we wrote or read. Never a timeout: a slow server may be working on it.
STALE = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
UNREACHABLE = b'{"error":{"type":"api_error","code":502,"message":"the proxy could not reach the upstream"}}'


@dataclass(frozen=True)
class UpstreamOptions:
    proxy: str | None = None  # an upstream proxy URL (mitmproxy's upstream mode)
    proxy_auth: tuple[str, str] | None = None  # mitmproxy's upstream_auth, "user:pass"
    verify: bool = True  # False: ssl_insecure
    ca_file: str | None = None  # ssl_verify_upstream_trusted_ca
    ca_dir: str | None = None  # ssl_verify_upstream_trusted_confdir
    connect_timeout: float = 30.0
    read_timeout: float = 600.0  # between two chunks of an answer: models think


# Connection pools the client's requests are spread over, a session's always in the same one
# (so its rounds and turns reuse its kept-alive connection, as with one pool). httpcore's pool
# looks at every connection it holds each time a request comes or goes (a readability check
# per idle socket, and a count of all of them per idle one): with a hundred agents streaming
# at once that was 15% of the proxy's CPU (py-spy, ``scripts/bench_load.py``). Eight pools of a
# few connections each cost a fraction of that.
POOLS = 8


class UpstreamClient:
    """``httpx.AsyncClient``s (``POOLS`` of them, one per session) with the proxy's upstream
    options, counted while in use so that a retired client (options changed) closes once its
    last answer is read."""

    def __init__(self, options: UpstreamOptions, transport: httpx.AsyncBaseTransport | None = None,
                 pools: int = POOLS) -> None:
        self.options = options
        verify = _verify(options)  # one TLS context for every pool: it loads the CA store
        self._clients = [httpx.AsyncClient(
            verify=verify,
            proxy=_proxy(options),
            timeout=httpx.Timeout(options.read_timeout, connect=options.connect_timeout),
            trust_env=False,  # mitmproxy's options decide, not the proxy process's environment
            transport=transport,
        ) for _ in range(1 if transport is not None else pools)]
        self._in_use = 0
        self._retired = False

    async def open(self, url: str, headers: Sequence[tuple[str, str]], body: bytes, session: str = "") -> Answer:
        """POST ``body`` (on ``session``'s pool); the answer's body is read as it arrives
        (decoded, no content-encoding)."""
        sent = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP] + [("accept-encoding", "identity")]
        self._in_use += 1
        try:
            response = await self._send(self._clients[hash(session) % len(self._clients)], url, sent, body)
        except httpx.HTTPError as e:  # no answer at all: a 502 in the common error shape, so clients retry
            await self._release()
            logger.warning("upstream request failed: {}", type(e).__name__)
            return Answer.whole(502, UNREACHABLE, [("content-type", "application/json")])
        except BaseException:
            await self._release()
            raise
        closed = False

        async def close() -> None:
            nonlocal closed
            if not closed:
                closed = True
                await response.aclose()
                await self._release()

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_bytes():
                    yield chunk
            except httpx.HTTPError as e:  # cut off mid-body: the reader sees a truncated answer
                logger.warning("upstream answer cut off: {}", type(e).__name__)
            finally:
                await close()

        # The body is decoded here: its content-encoding header no longer applies.
        kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-encoding"]
        return Answer(response.status_code, kept, chunks(), close)

    @staticmethod
    async def _send(client: httpx.AsyncClient, url: str, headers: list[tuple[str, str]], body: bytes) -> httpx.Response:
        """Send once more on a new connection when the server closed a kept-alive one without
        answering (``STALE``): it dropped an idle connection as we reused it, which says nothing
        of the request. Any other failure, and a second one, is the caller's."""
        for attempt in (1, 2):
            request = client.build_request("POST", url, headers=headers, content=body)
            try:
                return await client.send(request, stream=True)
            except STALE as e:
                if attempt == 2:
                    raise
                logger.debug("upstream closed a kept-alive connection unanswered ({}); sending again", type(e).__name__)
        raise AssertionError("unreachable")

    async def _release(self) -> None:
        self._in_use -= 1
        if self._retired and self._in_use == 0:
            await self._close()

    async def retire(self) -> None:
        """Close now if idle, else when the last answer in flight is done."""
        self._retired = True
        if self._in_use == 0:
            await self._close()

    async def _close(self) -> None:
        for client in self._clients:
            await client.aclose()

    @property
    def closed(self) -> bool:
        return all(client.is_closed for client in self._clients)


def _verify(options: UpstreamOptions) -> ssl.SSLContext | bool:
    if not options.verify:
        return False
    if options.ca_file or options.ca_dir:
        return ssl.create_default_context(cafile=options.ca_file, capath=options.ca_dir)
    return True


def _proxy(options: UpstreamOptions) -> httpx.Proxy | None:
    if not options.proxy:
        return None
    return httpx.Proxy(options.proxy, auth=options.proxy_auth)
