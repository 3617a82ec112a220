"""The live relay on its own: tokens, kept-alive connections, a client that goes away."""

import asyncio

import pytest

from tooldisco.net.relay import HEADER, Relay
from tooldisco.core.answers import Head


def request(token: str, body: bytes = b"{}") -> bytes:
    return (f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\n{HEADER}: {token}\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    if b"content-length: 0" in head.lower():
        return head
    body = b""
    while not body.endswith(b"0\r\n\r\n"):
        chunk = await reader.read(65536)
        if not chunk:  # closed early: what came is the answer
            break
        body += chunk
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


# --- what a connection can hold before it has shown a token -----------------------------------

BIG = 300 * 1024 * 1024


def head(token: str | None, length: int = BIG) -> bytes:
    auth = f"{HEADER}: {token}\r\n" if token is not None else ""
    return f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\n{auth}content-length: {length}\r\n\r\n".encode()


async def closed(reader: asyncio.StreamReader, timeout: float = 10.0) -> bytes:
    """Everything the relay sends until it closes the connection (a reset counts as closed)."""
    out = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), timeout):
            out += chunk
    except ConnectionResetError:
        pass
    return out


@pytest.mark.parametrize("token", [None, "", "0" * 32], ids=["none", "empty", "unknown"])
async def test_a_request_without_a_valid_token_is_refused_on_its_head(relay, token):
    """Refused and closed at once: the relay never waits for (or reads) the 300 MB it announced."""
    relay.register(echo([]))
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    writer.write(head(token) + b"x" * 1000)  # the head and the body's first bytes, no more
    answer = await closed(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 403") and b"connection: close" in answer.lower()


async def test_a_body_longer_than_its_flow_registered_is_refused_unread(relay):
    seen = []
    token = relay.register(echo(seen), size=10)
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    writer.write(head(token))  # declares 300 MB
    assert (await closed(reader)).startswith(b"HTTP/1.1 413")
    writer.close()
    token = relay.register(echo(seen), size=10)
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    writer.write(f"POST /v1/messages HTTP/1.1\r\nhost: x\r\n{HEADER}: {token}\r\ntransfer-encoding: chunked\r\n\r\n"
                 "20\r\n".encode() + b"y" * 32 + b"\r\n")  # chunked: no length announced, 32 bytes sent
    assert await closed(reader) == b""
    writer.close()
    assert not seen


async def test_an_idle_connection_is_closed_after_the_idle_timeout():
    relay = Relay(idle_timeout=0.3)
    await relay.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)  # sends nothing
        assert await closed(reader) == b""
        writer.close()
        seen = []
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        writer.write(request(relay.register(echo(seen))))
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
        assert await closed(reader) == b""  # kept alive after a flow, then idle: closed too
        writer.close()
    finally:
        await relay.close()


async def test_a_request_head_trickled_in_is_cut_off_at_the_head_timeout():
    relay = Relay(idle_timeout=60, head_timeout=0.5)
    await relay.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        writer.write(b"POST /v1/messages HTTP/1.1\r\n")
        gone = asyncio.ensure_future(closed(reader, timeout=30))
        for i in range(300):  # a header byte every 0.05 s: 15 s if nothing cut it off
            if gone.done():
                break
            try:
                writer.write(b"x-slow-%d: 1\r\n" % i)
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.sleep(0.05)
        assert await gone == b"" and i < 250
        writer.close()
    finally:
        await relay.close()


async def test_connections_not_serving_a_flow_are_bounded_the_longest_waiting_goes_first():
    relay = Relay(max_waiting=3)
    await relay.start()
    try:
        idle = [await asyncio.open_connection("127.0.0.1", relay.port) for _ in range(5)]
        for reader, _ in idle[:2]:  # the two longest waiting made room for the last two
            assert await closed(reader) == b""
        seen = []
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        writer.write(request(relay.register(echo(seen))))  # a flow still gets through
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200") and seen
        writer.close()
        for reader, _ in idle[2:3]:  # and the flow's connection pushed out the next longest waiting
            assert await closed(reader) == b""
        for _, w in idle:
            w.close()
    finally:
        await relay.close()


async def test_a_body_handed_over_is_served_and_one_the_request_brings_is_refused(relay):
    """A flow whose body was handed over in the process is served with it; its request brings
    none, and one that brings a body anyway is refused unread."""
    seen = []
    token = relay.register(echo(seen), body=b'{"whole": "catalog"}')
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    writer.write(request(token, b""))
    answer = await read_response(reader)
    assert answer.startswith(b"HTTP/1.1 200") and seen[0][1] == b'{"whole": "catalog"}'
    token = relay.register(echo(seen), body=b"{}")
    writer.write(request(token, b'{"a":1}'))
    assert (await closed(reader)).startswith(b"HTTP/1.1 413")
    writer.close()
    assert len(seen) == 1


@pytest.mark.parametrize("connection", ["keep-alive", "close"])
async def test_the_upstreams_headers_go_out_as_they_came_and_framing_is_the_relays(relay, connection):
    """Every header the upstream sent, in order, repeats and raw (obs-text) bytes included, as
    ``UpstreamClient`` hands them over (latin-1); its framing and hop headers are replaced by the
    relay's own. A request that asks to close gets its answer framed and the connection closed."""
    upstream = [("Content-Type", "text/event-stream"), ("x-note", "caf\xe9"), ("set-cookie", "a=1"),
                ("set-cookie", "b=2"), ("Transfer-Encoding", "chunked"), ("keep-alive", "timeout=5"),
                ("x-empty", "")]

    async def serve(headers, body):
        yield Head(200, upstream)
        yield b"data: one\n\n"

    token = relay.register(serve)
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    writer.write(request(token).replace(b"\r\n\r\n", f"\r\nconnection: {connection}\r\n\r\n".encode(), 1))
    answer = await asyncio.wait_for(read_response(reader), 10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 200 "
    assert [line for line in lines[1:] if not line.lower().startswith((b"transfer-encoding", b"connection"))] == [
        b"Content-Type: text/event-stream", b"x-note: caf\xe9", b"set-cookie: a=1", b"set-cookie: b=2", b"x-empty: "]
    assert [line.lower() for line in lines[1:] if line.lower().startswith(b"transfer-encoding")] == [
        b"transfer-encoding: chunked"]
    assert (b"connection: close" in head.lower()) == (connection == "close")
    assert body == b"b\r\ndata: one\n\n\r\n0\r\n\r\n"


async def test_a_header_that_would_split_the_response_never_reaches_the_wire(relay):
    """A value holding a line break, or a name that is no token, never becomes a header line
    of its own: h11 refuses it and the connection closes with nothing sent (mitmproxy then
    answers the client with its own error: never a success the upstream did not send)."""
    for bad in [("x-bad", "a\r\nx-injected: 1"), ("x-injected: 1\r\nx-bad", "a"), ("x-injected: 1", "a")]:
        async def serve(headers, body, bad=bad):
            yield Head(200, [("content-type", "text/event-stream"), bad])
            yield b"data: one\n\n"

        token = relay.register(serve)
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        writer.write(request(token))
        sent = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert b"injected" not in sent and b"200" not in sent, bad
