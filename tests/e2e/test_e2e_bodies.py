"""Bodies the proxy must not be hurt by, or change, through a real mitmdump with the addon.

- Decompression bombs: a small compressed request body that expands to 1 GiB goes upstream as
  the client sent it, the proxy's memory stays far below the expanded size, and a request on
  another connection is answered meanwhile.
- Answers the addon cannot improve reach the client as the upstream sent them: a JSON answer to
  a request that asked for a stream, a JSON answer nested deeper than any parser goes.
- A long streamed answer is relayed whole, in memory far below its size.

The upstream is a raw recorder (``Upstream``), not the fake provider: it must see the exact
bytes that left the proxy, and never decode a bomb itself.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import brotli
import httpx
import psutil
import pytest
import zstandard

from tests.e2e.harness import ADDON_PATH, MitmDump, addon_config
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

URL = "https://api.anthropic.com/v1/messages"
HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01", "content-type": "application/json"}
GiB, MiB = 1 << 30, 1 << 20


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes


Answer = Callable[[BaseHTTPRequestHandler, Seen], None]


@dataclass
class Upstream:
    """A loopback HTTP server that records every request's raw bytes and answers with ``answer``."""

    answer: Answer | None = None
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length))
                upstream.seen.append(seen)
                (upstream.answer or ordinary)(self, seen)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str = "application/json",
         extra: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    handler.send_header("content-type", ctype)
    handler.send_header("content-length", str(len(body)))
    for k, v in (extra or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(body)


MESSAGE = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
           "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn", "stop_sequence": None,
           "usage": {"input_tokens": 10, "output_tokens": 1}}


def ordinary(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
    """An Anthropic answer; a compressed request is refused as an API refuses a body it cannot read."""
    if seen.headers.get("content-encoding"):
        send(handler, 400, b'{"type":"error","error":{"type":"invalid_request_error","message":"bad body"}}')
    else:
        send(handler, 200, json.dumps(MESSAGE).encode())


def request_body(stream: bool = False, filler: int = 0) -> bytes:
    """A first turn with 60 tools: the proxy defers them (the body changes upstream)."""
    text = f"what is the weather in Paris [{uuid.uuid4().hex[:8]}]" + " pad" * filler
    return json.dumps({"model": "claude-test", "max_tokens": 100, "stream": stream,
                       "tools": anthropic_tools(60), "messages": [{"role": "user", "content": text}]}).encode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    up = Upstream()
    yield up
    up.close()


@pytest.fixture(scope="module")
def proxy(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MitmDump]:
    mitm = MitmDump(tmp_path_factory.mktemp("bodies"), upstream.url, script=ADDON_PATH,
                    config=partial(addon_config, strategy="tool-search", search={"backend": "bm25"}), name="bodies")
    mitm.start()
    yield mitm
    mitm.stop()


@pytest.fixture
def px(proxy: MitmDump, upstream: Upstream) -> MitmDump:
    upstream.seen.clear()
    upstream.answer = None
    if not proxy.running:
        proxy.restart()
    return proxy


def rss(mitm: MitmDump) -> int:
    assert mitm.proc is not None
    return psutil.Process(mitm.proc.pid).memory_info().rss


class Sampler:
    """The highest RSS of a process while a block runs, sampled every few milliseconds."""

    def __init__(self, pid: int) -> None:
        self.process, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.005)

    def __enter__(self) -> Sampler:
        self.peak = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


# --- decompression bombs -------------------------------------------------------------------


def bomb(coding: str, size: int) -> bytes:
    """A JSON request body padded with ``size`` spaces, compressed as a stream (never held whole here)."""
    head, tail, block = request_body()[:-1] + b',"pad":"', b'"}', b" " * MiB
    if coding == "gzip":
        z = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS)
        return z.compress(head) + b"".join(z.compress(block) for _ in range(size // MiB)) + z.compress(tail) + z.flush()
    if coding == "br":
        b = brotli.Compressor(quality=5)
        return b.process(head) + b"".join(b.process(block) for _ in range(size // MiB)) + b.process(tail) + b.finish()
    c = zstandard.ZstdCompressor(level=3).compressobj()
    return c.compress(head) + b"".join(c.compress(block) for _ in range(size // MiB)) + c.compress(tail) + c.flush()


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip"])
def test_a_bomb_goes_upstream_untouched_in_bounded_memory(px: MitmDump, upstream: Upstream, coding: str) -> None:
    body = bomb(coding, GiB)
    before = rss(px)
    result: dict[str, object] = {}

    def fire() -> None:
        with px.httpx_client() as client:
            result["response"] = client.post(URL, content=body, headers={**HEADERS, "content-encoding": coding})

    with Sampler(px.proc.pid) as sampler:  # type: ignore[union-attr]
        bomber = threading.Thread(target=fire)
        bomber.start()
        time.sleep(0.05)  # the bomb is in the proxy; an ordinary request on its own connection now
        with px.httpx_client() as client:
            t0 = time.monotonic()
            ordinary_answer = client.post(URL, content=request_body(), headers=HEADERS)
            waited = time.monotonic() - t0
        bomber.join(60)
    assert ordinary_answer.status_code == 200, ordinary_answer.text
    assert waited < 2.0, f"an ordinary request waited {waited:.1f}s behind the bomb"
    response = result["response"]
    assert isinstance(response, httpx.Response)
    assert response.status_code == 400  # the upstream's own refusal, passed on
    bombs = [s for s in upstream.seen if s.headers.get("content-encoding")]
    assert len(bombs) == 1 and bombs[0].body == body  # the client's bytes, as they were
    assert bombs[0].headers["content-encoding"] == coding
    growth = sampler.peak - before
    assert growth < 300 * MiB, f"the proxy grew by {growth / MiB:.0f} MiB for a {len(body)}-byte bomb"
    assert "larger than" in px.log_text()  # said, once, as a warning


def test_a_bomb_answer_reaches_the_client_untouched_in_bounded_memory(px: MitmDump, upstream: Upstream) -> None:
    z = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS)
    block = b" " * MiB
    answer = z.compress(json.dumps(MESSAGE).encode()[:-1] + b',"pad":"') + b"".join(
        z.compress(block) for _ in range(GiB // MiB)) + z.compress(b'"}') + z.flush()
    upstream.answer = lambda h, seen: send(h, 200, answer, extra={"content-encoding": "gzip"})
    before = rss(px)
    with Sampler(px.proc.pid) as sampler, px.httpx_client() as client:  # type: ignore[union-attr]
        with client.stream("POST", URL, content=request_body(), headers=HEADERS) as response:
            raw = b"".join(response.iter_raw())
    assert response.status_code == 200 and response.headers["content-encoding"] == "gzip"
    assert raw == answer
    assert b"gateway_search_tools" in upstream.seen[-1].body  # the request was rewritten: the hook had it
    growth = sampler.peak - before
    assert growth < 300 * MiB, f"the proxy grew by {growth / MiB:.0f} MiB for a {len(answer)}-byte answer"


# --- answers the addon cannot improve pass as they came -------------------------------------


def test_a_json_answer_to_a_stream_request_passes_as_sent(px: MitmDump, upstream: Upstream) -> None:
    sent = json.dumps({**MESSAGE, "id": "msg_json_not_stream"}).encode()
    upstream.answer = lambda h, seen: send(h, 200, sent, extra={"x-upstream": "yes"})
    with px.httpx_client() as client:
        response = client.post(URL, content=request_body(stream=True), headers=HEADERS)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-upstream"] == "yes"
    assert response.content == sent


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_nested_past_the_parser_passes_as_sent(px: MitmDump, upstream: Upstream, stream: bool) -> None:
    # A search call in it: an answer the proxy would have to change, could it read it.
    deep = (b'{"type":"message","content":[{"type":"tool_use","name":"gateway_search_tools","input":'
            + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}]}")
    upstream.answer = lambda h, seen: send(h, 200, deep)
    with px.httpx_client() as client:
        response = client.post(URL, content=request_body(stream=stream), headers=HEADERS)
    assert response.status_code == 200
    assert response.content == deep


# --- a long stream, relayed in bounded memory ------------------------------------------------


def long_stream(handler: BaseHTTPRequestHandler, size: int) -> None:
    """An Anthropic stream whose text is ``size`` bytes (a multiple of 64 KiB), in small deltas."""
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("transfer-encoding", "chunked")
    handler.end_headers()

    def event(data: dict) -> bytes:
        return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

    def write(data: bytes) -> None:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    start = {**MESSAGE, "content": [], "stop_reason": None}
    write(event({"type": "message_start", "message": start})
          + event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))
    delta = event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "z" * 256}})
    batch = delta * 256
    for _ in range(size // (256 * 256)):
        write(batch)
    write(event({"type": "content_block_stop", "index": 0})
          + event({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                   "usage": {"output_tokens": 5}})
          + event({"type": "message_stop"}))
    handler.wfile.write(b"0\r\n\r\n")


def test_a_long_stream_is_relayed_whole_in_bounded_memory(px: MitmDump, upstream: Upstream) -> None:
    text_size = int(os.environ.get("BODIES_STREAM_MIB", "48")) * MiB
    upstream.answer = lambda h, seen: long_stream(h, 1 << 16)
    with px.httpx_client() as client:  # warm: the first flow builds the catalog's index
        assert b"message_stop" in client.post(URL, content=request_body(stream=True), headers=HEADERS).content
    upstream.answer = lambda h, seen: long_stream(h, text_size)
    before = rss(px)
    text = 0
    with Sampler(px.proc.pid) as sampler, px.httpx_client() as client:  # type: ignore[union-attr]
        with client.stream("POST", URL, content=request_body(stream=True), headers=HEADERS) as response:
            assert response.status_code == 200
            tail = b""
            for chunk in response.iter_bytes():
                text += chunk.count(b"z")
                tail = (tail + chunk)[-200:]
    assert text == text_size
    assert b"event: message_stop" in tail
    growth = sampler.peak - before
    # The stream's bytes pass through the proxy; what it keeps of them is bounded (the text a
    # round's message keeps, twice), not the answer's size.
    assert growth < text_size // 2, f"the proxy grew by {growth / MiB:.0f} MiB for a {text_size / MiB:.0f} MiB stream"
