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

Any local process can connect, so what a connection can hold is bounded before it has
shown a token: the token is checked on the request's head, before any of its body is read
(a request without a valid one is refused and its connection closed); the body of a valid
one is read up to the size registered with its token; a request head must arrive within
``head_timeout`` of its first byte, a kept-alive connection waiting for one is closed after
``idle_timeout``, and of the connections not serving a flow, past ``max_waiting`` the
longest waiting is closed for a new one (a flow's own connection never waits long: mitmproxy
sends the request the moment it connects).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Sequence

import h11
from loguru import logger

from tooldisco.core.answers import Head

HEADER = "x-tooldisco-relay"
JOB_TTL = 60.0  # seconds a registered flow may take to reach the relay
MAX_REQUEST_BYTES = 512 * 1024 * 1024  # a body registered without its size (mitmproxy already holds it)
IDLE_TIMEOUT = 30.0  # seconds a kept-alive connection waits for its next request
HEAD_TIMEOUT = 10.0  # seconds from a request's first byte to the end of its head
BODY_TIMEOUT = 30.0  # seconds a body being read may send nothing (mitmproxy sends it at once, from memory)
MAX_WAITING = 256  # connections not serving a flow (idle, or before their token is checked)
_SKIP_OUT = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection",
                       "trailer", "upgrade"})

_FAULT = b'{"error":{"type":"api_error","code":502,"message":"the tool discovery relay failed"}}'
Serve = Callable[[list[tuple[str, str]], bytes], AsyncIterator[Head | bytes]]


@dataclass
class _Job:
    serve: Serve
    size: int = MAX_REQUEST_BYTES  # the body mitmproxy will send: no more is read
    body: bytes | None = None  # the body handed over in the process: the request brings none
    created: float = field(default_factory=time.monotonic)


class Relay:
    def __init__(self, host: str = "127.0.0.1", *, idle_timeout: float = IDLE_TIMEOUT,
                 head_timeout: float = HEAD_TIMEOUT, body_timeout: float = BODY_TIMEOUT,
                 max_waiting: int = MAX_WAITING) -> None:
        self.host = host
        self.port: int | None = None
        self.idle_timeout, self.head_timeout, self.body_timeout = idle_timeout, head_timeout, body_timeout
        self.max_waiting = max_waiting
        self._server: asyncio.Server | None = None
        self._jobs: dict[str, _Job] = {}
        self._starting: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: dict[asyncio.Task[None], None] = {}  # connections not serving a flow, oldest first

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

    def register(self, serve: Serve, size: int | None = None, body: bytes | None = None) -> str:
        """A token for one flow: the relay serves it with ``serve(headers, body)``; ``size``: the
        length of the body the flow will bring (a longer one is refused unread). ``body``: the
        body itself, handed over in the process: the flow's request then brings none (a body
        it does bring is refused unread), so the body never crosses the loopback hop."""
        now = time.monotonic()
        for token in [t for t, job in self._jobs.items() if now - job.created > JOB_TTL]:
            del self._jobs[token]
        token = secrets.token_hex(16)
        if body is not None:
            size = 0
        self._jobs[token] = _Job(serve, MAX_REQUEST_BYTES if size is None else min(size, MAX_REQUEST_BYTES), body)
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
        if len(self._waiting) >= self.max_waiting:  # the longest waiting makes room for this one
            next(iter(self._waiting)).cancel()
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
            self._waiting.pop(task, None)
            writer.close()

    async def _exchange(self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        task: asyncio.Task[None]) -> bool:
        """Serve one request; whether the connection can take the next."""
        self._waiting[task] = None
        request = await self._read_head(conn, reader)
        if request is None:
            return False
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers]
        token = next((v for k, v in headers if k.lower() == HEADER), "")
        job = self._jobs.pop(token, None) if token else None
        if job is None:  # refused on its head: not one byte of its body is read
            await _refuse(writer, conn, 403)
            return False
        declared = next((v for k, v in headers if k.lower() == "content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > job.size:
            await _refuse(writer, conn, 413)
            return False
        self._waiting.pop(task, None)  # a flow's: its body is bounded by its size and ``body_timeout``
        body = await self._read_body(conn, reader, job.size)
        if body is None:
            return False
        if job.body is not None:
            body = job.body
        headers = [(k, v) for k, v in headers if k.lower() != HEADER]
        await self._serve(job.serve(headers, body), conn, reader, writer, task)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _read_head(self, conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
        """The next request's head, or None: the connection closed, or kept waiting past
        ``idle_timeout`` for a first byte or past ``head_timeout`` from it to the head's end
        (h11 bounds the head's size)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.head_timeout if conn.trailing_data[0] else None
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Request):
                return event
            if event is not h11.NEED_DATA:  # ConnectionClosed, PAUSED: nothing to serve
                return None
            wait = self.idle_timeout if deadline is None else deadline - loop.time()
            data = await _read(reader, wait)
            if not data:
                return None
            if deadline is None:
                deadline = loop.time() + self.head_timeout
            conn.receive_data(data)

    async def _read_body(self, conn: h11.Connection, reader: asyncio.StreamReader, limit: int) -> bytes | None:
        """The body, or None: longer than ``limit``, stalled for ``body_timeout``, or cut short."""
        parts: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await _read(reader, self.body_timeout)
                conn.receive_data(data)
                if not data and conn.their_state is not h11.DONE:
                    return None
                continue
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    return None
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:  # ConnectionClosed
                return None

    async def _serve(self, items: AsyncIterator[Head | bytes], conn: h11.Connection, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, task: asyncio.Task[None]) -> None:
        """Write what the runner yields as it yields it; a closed client cancels it all."""
        watcher = asyncio.create_task(_cancel_on_eof(reader, task))
        try:
            async for item in items:
                if isinstance(item, Head):
                    writer.write(_head(conn, item))
                    await writer.drain()
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


# RFC 9110 field names (tokens), one a line; what a field value never holds (a line end, NUL).
_NAMES = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+(?:\n[!#$%&'*+\-.^_`|~0-9A-Za-z]+)*")
_NOT_IN_VALUE = re.compile(r"[\x00\r\n]")


def _head(conn: h11.Connection, head: Head) -> bytes:
    """The response head's bytes. h11 decides the framing and keep-alive from the status and the
    request alone (``_out`` drops every framing header), so it is given none and writes only its
    status line and framing; the upstream's headers join them, checked in one pass over their
    names and one over their values. Why not through h11 whole: it validates every header three
    times as it sends a head. Headers that fail the check go through h11, which refuses them."""
    headers = _out(head.headers)
    names = "\n".join([k for k, _ in headers])
    block: bytes | None = None
    if not headers or (_NAMES.fullmatch(names) and names.count("\n") == len(headers) - 1
                       and not _NOT_IN_VALUE.search("".join([v for _, v in headers]))):
        try:  # latin-1: the upstream's bytes as they came (``UpstreamClient`` decodes them so)
            block = "".join([f"{k}: {v}\r\n" for k, v in headers]).encode("latin-1")
        except UnicodeEncodeError:
            block = None
    if block is None:
        return conn.send(h11.Response(status_code=head.status, headers=headers)) or b""
    framed = conn.send(h11.Response(status_code=head.status, headers=[])) or b""
    return framed[:-2] + block + b"\r\n"  # before the blank line that ends h11's head


async def _read(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """The next bytes, or b"" once ``timeout`` passed with none (the caller closes)."""
    if timeout <= 0:
        return b""
    try:
        return await asyncio.wait_for(reader.read(65536), timeout)
    except TimeoutError:
        return b""


async def _refuse(writer: asyncio.StreamWriter, conn: h11.Connection, status: int) -> None:
    """Answer ``status`` and close (the caller does): what the request still sends is never read."""
    await _send(writer, conn, h11.Response(status_code=status, headers=[("content-length", "0"),
                                                                         ("connection", "close")]))
    await _send(writer, conn, h11.EndOfMessage())


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
