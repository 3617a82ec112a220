"""The proxy's own HTTP client against a real socket server: a request is sent again only when
no connection could be made; every other failure, a body that breaks off included, is raised
(``UpstreamFailed``) for the runner to answer with the API's retryable error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from tooldisco.net.upstream import UpstreamClient, UpstreamOptions
from tooldisco.core.answers import UpstreamFailed

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}"


class Server:
    """Answers the first request of every connection and keeps it alive; a later request on
    the same connection is read and the connection closed unanswered (``drop_reused``), as
    a server does that times out an idle connection just as the client reuses it."""

    def __init__(self, drop_reused: bool = True, drop_all: bool = False) -> None:
        self.drop_reused, self.drop_all = drop_reused, drop_all
        self.partial = False  # answer with the first bytes of a longer body, then wait
        self.hang_up = False  # with partial: close at once instead of waiting
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
                    if not self.hang_up:
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


async def test_a_request_the_server_read_is_never_sent_again(serve):
    """A kept-alive connection closed unanswered after the server read the request: it may be
    working on it (a generation, billed), so the proxy does not send it a second time."""
    server = Server()
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions())
    first = await client.open(url, [("content-type", "application/json")], b"{}")
    assert first.status == 200 and await first.read() == b'{"ok":true}'
    with pytest.raises(UpstreamFailed, match="could not reach the upstream"):
        await client.open(url, [("content-type", "application/json")], b"{}")
    assert server.connections == 1 and server.requests == 2  # the dropped one, once
    await client.retire()


async def test_a_server_that_never_answers_gets_the_request_once(serve):
    server = Server(drop_all=True)
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions())
    with pytest.raises(UpstreamFailed):
        await client.open(url, [], b"{}")
    assert server.requests == 1
    await client.retire()


async def test_a_refused_connection_is_tried_once_more(serve, monkeypatch):
    """Nothing of the request left the proxy: the one case where it is sent again."""
    server = Server(drop_reused=False)
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions())
    post, attempts = client._session.post, []

    async def refused_once(*args, **kwargs):
        attempts.append(1)
        if len(attempts) == 1:
            raise aiohttp.ClientConnectorError(ConnectionKey("127.0.0.1", 1, False, True, None, None, None),
                                               ConnectionRefusedError(111, "refused"))
        return await post(*args, **kwargs)

    monkeypatch.setattr(client._session, "post", refused_once)
    answer = await client.open(url, [], b"{}")
    assert answer.status == 200 and await answer.read() == b'{"ok":true}'
    assert len(attempts) == 2 and server.requests == 1
    await client.retire()


async def test_a_body_that_breaks_off_raises_instead_of_ending_short(serve):
    server = Server(drop_reused=False)
    server.partial, server.hang_up = True, True
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions())
    answer = await client.open(url, [], b"{}")
    assert answer.status == 200
    with pytest.raises(UpstreamFailed, match="broke off"):
        await answer.read()
    await client.retire()
    assert client.closed


async def test_an_idle_connection_is_not_reused_past_the_keepalive(serve):
    """Servers close idle connections after a few seconds; the proxy lets them go first."""
    server = Server(drop_reused=False)
    url = await serve(server)
    client = UpstreamClient(UpstreamOptions(keepalive=0.2))
    for pause in (0.0, 0.6):
        await asyncio.sleep(pause)
        answer = await client.open(url, [], b"{}")
        assert await answer.read() == b'{"ok":true}'
    assert server.requests == 2 and server.connections == 2
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


async def test_a_cookie_the_upstream_sets_is_never_sent_by_the_proxy(serve):
    """The client is shared by every agent behind the proxy: a ``Set-Cookie`` one answer
    carries must not ride on the next request (another agent's, perhaps another tenant's).
    Only a cookie the agent itself sends goes upstream."""
    heads: list[bytes] = []

    class SettingCookies(Server):
        async def handle(self, reader, writer):
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                heads.append(head)
                await reader.readexactly(2)
                writer.write(b"HTTP/1.1 200 OK\r\nset-cookie: __cf_bm=abc; Path=/; HttpOnly\r\n"
                             b"content-length: 2\r\n\r\n{}")
                await writer.drain()
            writer.close()

    url = (await serve(SettingCookies())).replace("127.0.0.1", "localhost")  # a name: jars keep no IP's cookies
    client = UpstreamClient(UpstreamOptions())
    for sent in ([("x-api-key", "k")], [("x-api-key", "k")], [("cookie", "mine=1")]):
        answer = await client.open(url, sent, b"{}")
        assert await answer.read() == b"{}"
    cookies = [[line for line in head.decode().split("\r\n") if line.lower().startswith("cookie:")] for head in heads]
    assert cookies == [[], [], ["cookie: mine=1"]]
    await client.retire()
