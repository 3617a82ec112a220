"""The live relay on its own: tokens, kept-alive connections, a client that goes away."""

import asyncio

import pytest

from tooldisco.net.relay import HEADER, Relay
from tooldisco.runner import Head


def request(token: str, body: bytes = b"{}") -> bytes:
    return (f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\n{HEADER}: {token}\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    if b"content-length: 0" in head.lower():
        return head
    body = b""
    while not body.endswith(b"0\r\n\r\n"):
        body += await reader.read(65536)
    return head + body


@pytest.fixture
async def relay():
    r = Relay()
    await r.start()
    yield r
    await r.close()


def echo(seen):
    async def serve(headers, body):
        seen.append((dict(headers), body))
        yield Head(200, [("content-type", "text/event-stream"), ("content-length", "999")])
        yield b"data: one\n\n"
        yield b"data: two\n\n"

    return serve


async def test_a_token_is_served_once_and_connections_are_kept_alive(relay):
    seen = []
    first, second = relay.register(echo(seen)), relay.register(echo(seen))
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    writer.write(request(first, b'{"a":1}'))
    one = await read_response(reader)
    writer.write(request(second))  # the same connection, the next flow
    two = await read_response(reader)
    writer.write(request(first))  # a token is good once
    three = await read_response(reader)
    writer.close()
    assert one.startswith(b"HTTP/1.1 200") and b"data: one\n\n" in one and b"data: two\n\n" in one
    assert b"transfer-encoding: chunked" in one.lower() and b"999" not in one  # the relay frames the body
    assert two.startswith(b"HTTP/1.1 200") and three.startswith(b"HTTP/1.1 403")
    assert seen[0][1] == b'{"a":1}' and HEADER not in {k.lower() for k in seen[0][0]}


async def test_a_client_that_goes_away_cancels_the_serving(relay):
    release, closed = asyncio.Event(), asyncio.Event()

    async def serve(headers, body):
        try:
            yield Head(200, [])
            yield b"data: first\n\n"
            await release.wait()  # e.g. waiting for the upstream's next event
            yield b"data: never\n\n"
        finally:
            closed.set()

    token = relay.register(serve)
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    writer.write(request(token))
    await reader.readuntil(b"data: first\n\n")
    writer.close()
    await asyncio.wait_for(closed.wait(), 10)
    assert not release.is_set()


async def test_a_fault_before_any_byte_is_a_502_the_client_can_retry(relay):
    async def serve(headers, body):
        raise RuntimeError("boom")
        yield  # an async generator

    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    writer.write(request(relay.register(serve)))
    head = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    assert head.startswith(b"HTTP/1.1 502")
