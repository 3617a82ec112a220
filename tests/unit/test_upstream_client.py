"""The proxy's own HTTP client against a real socket server: a kept-alive connection the
server drops unanswered is retried once on a new one; other failures come back as a 502."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tooldisco.net.upstream import UpstreamClient, UpstreamOptions

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}"


class Server:
    """Answers the first request of every connection and keeps it alive; a later request on
    the same connection is read and the connection closed unanswered (``drop_reused``), as
    a server does that times out an idle connection just as the client reuses it."""

    def __init__(self, drop_reused: bool = True, drop_all: bool = False) -> None:
        self.drop_reused, self.drop_all = drop_reused, drop_all
        self.connections = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                self.requests += 1
                if self.drop_all or (served and self.drop_reused):
                    return  # closed without a status line
                writer.write(OK)
                await writer.drain()
                served += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator:
    servers: list[asyncio.Server] = []

    async def start(server: Server) -> str:
        s = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        servers.append(s)
        return f"http://127.0.0.1:{s.sockets[0].getsockname()[1]}/v1/messages"

    yield start
    for s in servers:
        s.close()


async def test_a_kept_alive_connection_dropped_unanswered_is_retried_on_a_new_one(serve):
    server = Server()
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions(), pools=1)  # one pool: the second request reuses the connection
    first = await client.open(url, [("content-type", "application/json")], b"{}")
    assert first.status == 200 and await first.read() == b'{"ok":true}'
    second = await client.open(url, [("content-type", "application/json")], b"{}")
    assert second.status == 200 and await second.read() == b'{"ok":true}'
    assert server.connections == 2 and server.requests == 3  # the dropped one, then the new connection
    await client.retire()


async def test_a_server_that_never_answers_gets_one_retry_then_a_502(serve):
    server = Server(drop_all=True)
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions())
    answer = await client.open(url, [], b"{}")
    assert answer.status == 502 and b"could not reach the upstream" in await answer.read()
    assert server.requests == 2
    await client.retire()


async def test_a_session_keeps_to_its_pool(serve):
    """Each pool keeps its own connections, and a session's requests all go to the same one: its
    requests reuse one connection, and another session's pool opens its own."""
    server = Server(drop_reused=False)
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions(), pools=2)
    names = [f"session-{i}" for i in range(64)]  # hash() is seeded per process: two that split surely
    one = names[0]
    other = next(n for n in names if hash(n) % 2 != hash(one) % 2)
    for session in (one, one, one, other, other):
        answer = await client.open(url, [("content-type", "application/json")], b"{}", session)
        assert answer.status == 200 and await answer.read() == b'{"ok":true}'
    assert server.requests == 5 and server.connections == 2
    await client.retire()
    assert client.closed
