"""The proxy's own HTTP client: every request the proxy makes itself goes out here.

Why one client: the live relay's first round, every phantom re-forward and every fail-open
resend must leave the way mitmproxy would send them (its upstream proxy and credentials,
its TLS verification options), and close cleanly when those options change or the proxy
stops. The addon translates mitmproxy's options into ``UpstreamOptions``; nothing here
imports mitmproxy.

Why aiohttp: these requests share the proxy's one event loop with every flow, and a
request's CPU is the proxy's capacity. aiohttp streams the same answer for a fraction of
httpx's CPU (``scripts/bench_load.py`` shows it per turn): httpx's pool looks at every
connection it holds each time a request comes or goes, and its HTTP/1.1 is pure Python,
where aiohttp's parser is C.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import AsyncIterator, Sequence

import aiohttp
import certifi
from loguru import logger
from yarl import URL

from tooldisco.core.answers import Answer, UpstreamFailed

# Request headers that belong to one hop, or that the client sets itself from the body it sends.
# Host is not one: the caller's goes upstream as mitmproxy would send it (the URL's authority, or
# the client's own where reverse mode's keep_host_header keeps it); aiohttp makes one only if none.
HOP_BY_HOP = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
     "proxy-authorization", "te", "trailer", "upgrade", "accept-encoding"}
)
# Headers aiohttp would add that the agent did not send: nothing goes upstream that it did not.
_NOT_OURS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")

# A request is sent again only when it provably never reached the server: no connection could
# be made, so not one byte of it was written. A connection that fails once the request was
# written (reset, closed without a status line, a timeout) says nothing of whether the server
# read it: a server may take a POST, work on it for a minute and then drop the connection, and
# a second send would be a second generation, billed twice. Nothing in aiohttp tells a request
# the kernel took but the server never read from one it did, so those failures go to the client
# as the API's retryable error, and stale kept-alive connections are avoided instead (``keepalive``).
NOT_SENT = aiohttp.ClientConnectorError
NEVER_RETRIED = (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)  # the same again
FAILED = (aiohttp.ClientError, asyncio.TimeoutError)


@dataclass(frozen=True)
class UpstreamOptions:
    proxy: str | None = None  # an upstream proxy URL (mitmproxy's upstream mode)
    proxy_auth: tuple[str, str] | None = None  # mitmproxy's upstream_auth, "user:pass"
    verify: bool = True  # False: ssl_insecure
    ca_file: str | None = None  # ssl_verify_upstream_trusted_ca
    ca_dir: str | None = None  # ssl_verify_upstream_trusted_confdir
    connect_timeout: float = 30.0
    read_timeout: float = 600.0  # between two chunks of an answer: models think
    # Seconds an idle connection is kept for reuse: below the common servers' own idle timeouts
    # (uvicorn and Node.js close idle connections after 5 s), so the proxy seldom writes a
    # request on a connection the server is closing; such a request is never sent again.
    keepalive: float = 4.0


class UpstreamClient:
    """One ``aiohttp.ClientSession`` with the proxy's upstream options, counted while in use
    so that a retired client (options changed) closes once its last answer is read. Made
    inside the event loop that uses it (aiohttp binds a session to its loop)."""

    def __init__(self, options: UpstreamOptions) -> None:
        self.options = options
        self._session = aiohttp.ClientSession(
            # no cap: mitmproxy has none either
            connector=aiohttp.TCPConnector(limit=0, ssl=_verify(options), keepalive_timeout=options.keepalive),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=options.connect_timeout,
                                          sock_read=options.read_timeout),
            trust_env=False,  # mitmproxy's options decide, not the proxy process's environment
            skip_auto_headers=_NOT_OURS,
            auto_decompress=True,
            # One session serves every agent: a cookie one answer sets must never ride on another's
            # request; the agent's own Cookie header goes as it sent it (no jar to look up, either).
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        self._proxy = options.proxy
        self._proxy_auth = aiohttp.BasicAuth(*options.proxy_auth) if options.proxy_auth else None
        self._in_use = 0
        self._retired = False

    async def open(self, url: str, headers: Sequence[tuple[str, str]], body: bytes) -> Answer:
        """POST ``body``; the answer's body is read as it arrives (decoded, no content-encoding).
        ``UpstreamFailed`` when no status line came; the body raises it when it breaks off.
        Cancelled (the client went away), the request ends with its connection."""
        sent = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP] + [("accept-encoding", "identity")]
        self._in_use += 1
        try:
            response = await self._send(url, sent, body)
        except FAILED as e:  # no answer at all: the caller answers with the API's retryable error
            await self._release()
            logger.warning("upstream request failed: {}", type(e).__name__)
            raise UpstreamFailed(f"the proxy could not reach the upstream ({type(e).__name__})") from e
        except BaseException:
            await self._release()
            raise
        closed = False

        async def close() -> None:
            nonlocal closed
            if not closed:
                closed = True
                if response.content.is_eof():
                    response.release()  # read to the end: the connection is kept alive for the next request
                else:
                    response.close()  # cut short (the client went away): the request ends with its connection
                await self._release()

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.content.iter_any():
                    yield chunk
            except FAILED as e:  # cut off mid-body: said to the reader, never a quiet (truncated) end
                logger.warning("upstream answer cut off: {}", type(e).__name__)
                raise UpstreamFailed(f"the upstream answer broke off ({type(e).__name__})") from e
            finally:
                await close()

        # The body is decoded here: its content-encoding header no longer applies.
        kept = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers
                if k.lower() != b"content-encoding"]
        return Answer(response.status, kept, chunks(), close)

    async def _send(self, url: str, headers: list[tuple[str, str]], body: bytes) -> aiohttp.ClientResponse:
        """Send once more only when no connection could be made (``NOT_SENT``): nothing of the
        request left the proxy. Any other failure, and a second one, is the caller's."""
        for attempt in (1, 2):
            try:
                return await self._session.post(
                    URL(url, encoded=True),  # as the client wrote it: nothing re-quoted
                    data=body, headers=headers, allow_redirects=False,
                    proxy=self._proxy, proxy_auth=self._proxy_auth,
                )
            except NOT_SENT as e:
                if attempt == 2 or isinstance(e, NEVER_RETRIED):
                    raise
                logger.debug("could not connect to the upstream ({}); trying once more", type(e).__name__)
        raise AssertionError("unreachable")

    async def _release(self) -> None:
        self._in_use -= 1
        if self._retired and self._in_use == 0:
            await self._session.close()

    async def retire(self) -> None:
        """Close now if idle, else when the last answer in flight is done."""
        self._retired = True
        if self._in_use == 0:
            await self._session.close()

    @property
    def closed(self) -> bool:
        return self._session.closed


def _verify(options: UpstreamOptions) -> ssl.SSLContext | bool:
    """mitmproxy's upstream verification: its CA options, else certifi's bundle (as mitmproxy's own)."""
    if not options.verify:
        return False
    if options.ca_file or options.ca_dir:
        return ssl.create_default_context(cafile=options.ca_file, capath=options.ca_dir)
    return ssl.create_default_context(cafile=certifi.where())
