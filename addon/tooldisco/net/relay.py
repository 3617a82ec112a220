"""The live relay: a loopback HTTP/1.1 server that serves the streams of the phantom loop.

Why: mitmproxy streams a response live only as it reads it from a server, and its stream
callback cannot await, so it cannot append the answer of a re-forward it has not made yet.
The addon therefore routes a flow that may need the loop, and asks for a stream, to this
server in the proxy's own process. mitmproxy connects here like to any upstream and
streams whatever we write as it comes; we make the upstream calls (``UpstreamClient``),
stitch the rounds (``LoopRunner.live``) and write each visible event at once.

Each routed flow carries a one-time random token in ``x-tooldisco-relay``; anything else
that reaches the port gets a 403, so no other local process can use the proxy's
credentials or signing through it. When the client goes away mitmproxy closes its
connection to us; the relay then cancels the serving task, which closes the upstream
request. HTTP/1.1 framing is h11's; connections are kept alive between flows.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Sequence

import h11
from loguru import logger

from ..runner import Head

HEADER = "x-tooldisco-relay"
JOB_TTL = 60.0  # seconds a registered flow may take to reach the relay
MAX_REQUEST_BYTES = 512 * 1024 * 1024  # mitmproxy already holds the body; this only bounds ours
_SKIP_OUT = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection",
                       "trailer", "upgrade"})

_FAULT = b'{"error":{"type":"api_error","code":502,"message":"the tool discovery relay failed"}}'
Serve = Callable[[list[tuple[str, str]], bytes], AsyncIterator[Head | bytes]]


@dataclass
class _Job:
    serve: Serve
    created: float = field(default_factory=time.monotonic)


class Relay:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port: int | None = None
        self._server: asyncio.Server | None = None
        self._jobs: dict[str, _Job] = {}
        self._starting: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen on a free loopback port (once); returns the port."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._server is None:
                self._server = await asyncio.start_server(self._handle, self.host, 0)
                self.port = self._server.sockets[0].getsockname()[1]
                logger.debug("live relay listening on {}:{}", self.host, self.port)
        assert self.port is not None
        return self.port

    def register(self, serve: Serve) -> str:
        """A token for one flow: the relay serves it with ``serve(headers, body)``."""
        now = time.monotonic()
        for token in [t for t, job in self._jobs.items() if now - job.created > JOB_TTL]:
            del self._jobs[token]
        token = secrets.token_hex(16)
        self._jobs[token] = _Job(serve)
        return token

    def forget(self, token: str) -> None:
        self._jobs.pop(token, None)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await self._server.wait_closed()
            self._server = None
        self._jobs.clear()

    # --- one connection: one request -------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = h11.Connection(h11.SERVER)
        try:
            # Kept alive: mitmproxy reuses its connection for the next live flow. One exchange
            # per call, so nothing of a served flow (its body, its runner) outlives it while
            # the connection waits for the next one.
            while await self._exchange(conn, reader, writer, task):
                conn.start_next_cycle()
        except (ConnectionError, asyncio.IncompleteReadError, h11.ProtocolError) as e:
            logger.debug("relay connection ended: {}", type(e).__name__)
        except asyncio.CancelledError:
            pass
        except Exception as e:  # a fault of ours: said, with its traceback; the client's stream ends here
            logger.opt(exception=e).warning("live relay failed while serving a flow")
            if conn.our_state is h11.SEND_RESPONSE:  # nothing went out yet: an answer the client retries
                await _send(writer, conn, h11.Response(status_code=502, headers=[
                    ("content-type", "application/json"), ("content-length", str(len(_FAULT)))]))
                await _send(writer, conn, h11.Data(data=_FAULT))
                await _send(writer, conn, h11.EndOfMessage())
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _exchange(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        task: asyncio.Task[None]) -> bool:
        """Serve one request; whether the connection can take the next."""
        request, body = await self._read_request(conn, reader)
        if request is None:
            return False
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers]
        token = next((v for k, v in headers if k.lower() == HEADER), "")
        job = self._jobs.pop(token, None)
        if job is None:
            await _send(writer, conn, h11.Response(status_code=403, headers=[("content-length", "0"),
                                                                             ("connection", "close")]))
            await _send(writer, conn, h11.EndOfMessage())
            return False
        headers = [(k, v) for k, v in headers if k.lower() != HEADER]
        await self._serve(job.serve(headers, body), conn, reader, writer, task)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader
                            ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        parts: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                if not data and conn.their_state is not h11.DONE:
                    return None, b""
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_REQUEST_BYTES:
                    return None, b""
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return request, b"".join(parts)
            elif isinstance(event, h11.ConnectionClosed):
                return None, b""

    async def _serve(self, items: AsyncIterator[Head | bytes], conn: h11.Connection, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, task: asyncio.Task[None]) -> None:
        """Write what the runner yields as it yields it; a closed client cancels it all."""
        watcher = asyncio.create_task(_cancel_on_eof(reader, task))
        try:
            async for item in items:
                if isinstance(item, Head):
                    await _send(writer, conn, h11.Response(status_code=item.status, headers=_out(item.headers)))
                elif item:
                    await _send(writer, conn, h11.Data(data=item))
            await _send(writer, conn, h11.EndOfMessage())
        finally:
            if watcher.done() and not watcher.cancelled():
                conn.receive_data(watcher.result())  # the next request came early: h11 keeps it
            else:
                # Wait for it to be gone: the next request on this connection reads the same
                # stream, and a reader allows one waiting coroutine at a time.
                watcher.cancel()
                await asyncio.wait([watcher])
            await items.aclose()  # type: ignore[attr-defined]


def _out(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The upstream's headers minus this hop's framing: h11 frames the body itself (chunked)."""
    return [(k, v) for k, v in headers if k.lower() not in _SKIP_OUT]


async def _send(writer: asyncio.StreamWriter, conn: h11.Connection, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        writer.write(data)
        await writer.drain()


async def _cancel_on_eof(reader: asyncio.StreamReader, task: asyncio.Task[None]) -> bytes:
    """While a response is written mitmproxy sends nothing: EOF means the client is gone and
    cancels ``task``. Bytes that do come are the next request on this kept-alive connection
    (sent the moment our answer ended): they are returned, not lost."""
    try:
        data = await reader.read(65536)
    except (ConnectionError, OSError):
        data = b""
    if not data:
        task.cancel()
    return data
