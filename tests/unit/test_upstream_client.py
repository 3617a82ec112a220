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
        self.partial = False  # answer with the first bytes of a longer body, then wait
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
                if self.partial:
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n" + b"x" * 10)
                    await writer.drain()
                    await reader.read()  # until the client closes
                    return
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
    client = UpstreamClient(UpstreamOptions())
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


async def test_an_answer_read_to_its_end_keeps_the_connection_and_one_cut_short_closes_it(serve):
    server = Server(drop_reused=False)
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions())
    for _ in range(3):
        answer = await client.open(url, [("content-type", "application/json")], b"{}")
        assert answer.status == 200 and await answer.read() == b'{"ok":true}'
    assert server.requests == 3 and server.connections == 1
    server.partial = True
    answer = await client.open(url, [], b"{}")
    assert answer.status == 200
    await answer.close()  # the client went away while the answer still came
    server.partial = False
    answer = await client.open(url, [], b"{}")
    assert await answer.read() == b'{"ok":true}'
    assert server.requests == 5 and server.connections == 2
    await client.retire()
    assert client.closed


async def test_only_the_agents_headers_go_upstream(serve):
    """Nothing the agent did not send (no client User-Agent, Accept or Content-Type of our own);
    the agent's own headers keep their order and repeats."""
    heads: list[bytes] = []

    class Recording(Server):
        async def handle(self, reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            await reader.readexactly(2)
            writer.write(OK)
            await writer.drain()
            writer.close()

    url = await serve(Recording())
    client = UpstreamClient(UpstreamOptions())
    sent = [("x-api-key", "k"), ("anthropic-beta", "a"), ("anthropic-beta", "b"), ("host", "elsewhere"),
            ("connection", "close")]
    answer = await client.open(url + "?alt=sse&key=a%2Fb", sent, b"{}")
    assert await answer.read() == b'{"ok":true}'
    lines = heads[0].decode().split("\r\n")
    assert lines[0] == "POST /v1/messages?alt=sse&key=a%2Fb HTTP/1.1"
    names = [line.split(":")[0].lower() for line in lines[1:] if line]
    assert [n for n in names if n in ("x-api-key", "anthropic-beta")] == ["x-api-key", "anthropic-beta", "anthropic-beta"]
    assert not {"user-agent", "accept", "content-type", "connection"} & set(names)
    assert "accept-encoding: identity" in [line.lower() for line in lines]
    await client.retire()
