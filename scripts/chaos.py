#!/usr/bin/env python3
"""Chaos: faults and attacks against a real mitmdump + the addon, next to plain mitmdump.

    .venv/bin/python scripts/chaos.py [--only bombs,cut,...] [--json] [--strict]
        [--bomb-size 1G] [--heavy-tools 20000] [--big-answer 100M] [--relay-body 128M] ...

Both proxies are real mitmdump processes (``tests/e2e/harness.py``: clients use HTTPS through
the proxy with its CA, ``--map-remote`` sends the provider hosts to a local upstream), on
127.0.0.1 only. The upstream is this script's own small HTTP/1.1 server (``Upstream``), because
the faults need byte-level control: cut a body mid-way, hold a request and close without an
answer, watch when the proxy closes its connection. It speaks Anthropic's Messages format; a
request whose body says ``#search#`` gets a call of the addon's search tool, so the addon answers
it and re-forwards; the fault then hits the re-forward. Plain mitmdump has no search tool: there
the client says ``#fault-now#`` and the fault hits its first request, the analogous case.

One table line per scenario: the addon's figure, plain mitmdump's, the bound and the verdict.
Every loop is bounded in count and time; the whole run stops by itself. Exit code 0 unless
``--strict`` and a bound failed. ``--json`` prints the rows as JSON instead of the table.

Scenarios (``--only`` names):

- ``bombs``: request bodies to /v1/messages with content-encoding br, zstd, gzip that inflate to
  ``--bomb-size``; peak RSS of mitmdump (sampled every 20 ms) and the longest wait of small
  requests sent meanwhile on another connection. Bound: peak within 200 MB of plain's, no wait
  over 1 s. A proxy passing ``--rss-cap`` over its start is killed (and restarted) to protect the box.
- ``store``: the session store broken (garbage cache.db, read-only dir, database locked by
  another process for ``--lock-seconds``): does the addon start, do requests succeed, p95.
- ``heavy``: six requests of ``--heavy-tools`` tools at once from tenant A while tenant B sends
  small requests in a loop: B's p50/p95. Bound: B's p95 <= 500 ms.
- ``cut``: the upstream cuts the re-forward's body mid-way (JSON and stream): never a 200 whose
  body does not parse (a stream must end with message_stop or an error event).
- ``stall``: the upstream holds the re-forward ``--hold-seconds`` and closes without answering:
  exactly one arrival, a provider-format 5xx. ``leave``: the client goes away while the
  upstream holds the re-forward: the upstream sees its connection closed within 5 s.
- ``loop``: a model that searches on every round: the client still gets a non-empty turn.
- ``creds``: every credential form through ``--set flow_detail=4``: secrets found in the log.
- ``relay``: the addon's live relay port (found with psutil) without a token: 403, nothing
  forwarded, and a ``--relay-body`` body is not buffered (peak RSS).
- ``bigstream``: a ``--big-answer`` streamed answer: complete, peak RSS and RSS after.
- ``surrogate``: a search query with a lone surrogate: the telemetry record is still written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import brotli
import httpx
import zstandard

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from _bench import (MiB, Rss, listening_ports, mb, ms, parse_size, percentile, signed_mb,  # noqa: E402
                    start_addon, start_plain, table, workdir)
from tests.e2e.harness import MitmDump, connect  # noqa: E402
from tests.support.catalog import anthropic_tools  # noqa: E402

SEARCH_TOOL = "gateway_search_tools"  # the shipped config's search_tool_name
URL = "https://api.anthropic.com/v1/messages"
TOOLS = anthropic_tools(60)  # enough definitions for the shipped config to defer (min_tools, min_tokens)
SMALL_TOOLS = anthropic_tools(3)  # below min_tools: passes through the addon's hooks untouched
SCENARIOS = ("bombs", "store", "heavy", "cut", "stall", "leave", "loop", "creds", "relay", "bigstream", "surrogate")
BOMB_BOUND = 200 * MiB
WAIT_BOUND = 1.0
TENANT_P95_BOUND = 0.5
LEAVE_BOUND = 5.0
STORE_P95_BOUND = 1.0
RELAY_RSS_BOUND = 32 * MiB
BIG_PEAK_SLACK = 64 * MiB
BIG_AFTER_SLACK = 32 * MiB
TIMEOUT = 60.0


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the upstream ------------------------------------------------------------------------------------


@dataclass
class Arrival:
    """One request as the upstream saw it."""

    tag: str
    path: str
    reforward: bool  # carries a tool_result: the addon's own round after a search
    size: int
    arrived: float
    peer_closed: float | None = None  # when the proxy closed a held connection
    head: bytes = b""  # the first bytes of the body (for checks)


KEEP = 64 * MiB  # body bytes kept per request; the rest is read and dropped


class Upstream:
    """A scriptable Anthropic-format HTTP/1.1 server on 127.0.0.1, in its own thread and loop.

    ``mode`` says what the faulty request gets: a request is faulty when it re-forwards (its body
    has a ``tool_result``) or says ``#fault-now#``. Modes: ``normal`` (none faulty), ``cut``
    (half the body, then close), ``hold-close`` (hold ``hold`` s, then close unanswered),
    ``hold`` (wait up to ``hold`` s for the proxy to close; note when), ``loop`` (every answer
    is a search call), ``surrogate`` (the search query holds a lone surrogate). Outside faults:
    ``#search#`` gets a search call, ``#big#`` a ``big`` byte stream, anything else a short text.
    """

    def __init__(self) -> None:
        self.mode = "normal"
        self.hold = 5.0
        self.big = 0
        self.arrivals: list[Arrival] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="upstream")
        self._thread.start()
        self._ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, limit=1 << 20))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def seen(self, tag: str) -> list[Arrival]:
        with self._lock:
            return [a for a in self.arrivals if a.tag == tag]

    def clear(self) -> None:
        with self._lock:
            self.arrivals.clear()

    # --- one connection ---

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                _method, target, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body, size = await self._body(reader, headers)
                a = Arrival(headers.get("x-chaos-tag", ""), target, b'"tool_result"' in body, size,
                            time.monotonic(), head=body[:4096])
                with self._lock:
                    self.arrivals.append(a)
                if not await self._answer(a, body, reader, writer):
                    return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def _body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> tuple[bytes, int]:
        kept = bytearray()
        size = 0

        def keep(data: bytes) -> None:
            nonlocal size
            size += len(data)
            if len(kept) < KEEP:
                kept.extend(data[: KEEP - len(kept)])

        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                n = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if n == 0:
                    await reader.readuntil(b"\r\n")
                    break
                while n:
                    data = await reader.read(min(n, 1 << 20))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", n)
                    keep(data)
                    n -= len(data)
                await reader.readexactly(2)
        else:
            n = int(headers.get("content-length", "0"))
            while n:
                data = await reader.read(min(n, 1 << 20))
                if not data:
                    raise asyncio.IncompleteReadError(b"", n)
                keep(data)
                n -= len(data)
        return bytes(kept), size

    async def _answer(self, a: Arrival, body: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection stays open."""
        stream = re.search(rb'"stream"\s*:\s*true', body) is not None
        faulty = a.reforward or b"#fault-now#" in body
        mode = self.mode
        if mode == "loop":  # searches whenever it is offered the search tool, as a real model can only then
            try:
                offered = any(t.get("name") == SEARCH_TOOL for t in json.loads(body).get("tools") or [])
            except ValueError:
                offered = True
            return await self._reply(writer, stream, call="weather") if offered else \
                await self._reply(writer, stream, text="Here is what I found without searching.")
        if faulty and mode == "cut":
            payload = sse_answer(text="x" * 4000) if stream else json_answer(text="x" * 4000)
            await self._send_head(writer, stream, None if stream else len(payload))
            half = payload[: len(payload) // 2]
            writer.write(_chunk(half) if stream else half)
            await writer.drain()
            return False
        if faulty and mode in ("hold", "hold-close"):
            try:
                if await asyncio.wait_for(reader.read(1), self.hold) == b"":
                    a.peer_closed = time.monotonic()
            except asyncio.TimeoutError:
                pass
            return False
        if b"#big#" in body:
            await self._big(writer)
            return True
        if b"#search#" in body and not a.reforward:
            query = "weather \ud800 forecast" if mode == "surrogate" else "weather forecast"
            return await self._reply(writer, stream, call=query)
        return await self._reply(writer, stream, text="Done.")

    async def _send_head(self, writer: asyncio.StreamWriter, stream: bool, length: int | None) -> None:
        kind = "text/event-stream" if stream else "application/json"
        framing = "transfer-encoding: chunked" if length is None else f"content-length: {length}"
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\n{framing}\r\nrequest-id: req_chaos\r\n\r\n".encode())

    async def _reply(self, writer: asyncio.StreamWriter, stream: bool, text: str = "", call: str | None = None) -> bool:
        payload = sse_answer(text, call) if stream else json_answer(text, call)
        await self._send_head(writer, stream, None if stream else len(payload))
        writer.write(_chunk(payload) + b"0\r\n\r\n" if stream else payload)
        await writer.drain()
        return True

    async def _big(self, writer: asyncio.StreamWriter) -> None:
        await self._send_head(writer, True, None)
        writer.write(_chunk(sse_start()))
        delta = sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": "y" * 1000}})
        block = _chunk(delta * max(1, (64 * 1024) // len(delta)))
        sent = 0
        while sent < self.big:
            writer.write(block)
            sent += len(block)
            await writer.drain()
        writer.write(_chunk(sse_end("end_turn")) + b"0\r\n\r\n")
        await writer.drain()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _usage() -> dict[str, int]:
    return {"input_tokens": 100, "output_tokens": 5}


def sse_start() -> bytes:
    msg = {"id": f"msg_{secrets.token_hex(8)}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [], "stop_reason": None, "stop_sequence": None, "usage": _usage()}
    return (sse("message_start", {"type": "message_start", "message": msg})
            + sse("content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}}))


def sse_end(stop: str) -> bytes:
    return (sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            + sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                    "usage": {"output_tokens": 5}})
            + sse("message_stop", {"type": "message_stop"}))


def sse_answer(text: str = "", call: str | None = None) -> bytes:
    """A whole stream: a text block, or (``call``) a search call with that query."""
    if call is None:
        return (sse_start() + sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                          "delta": {"type": "text_delta", "text": text}})
                + sse_end("end_turn"))
    msg = {"id": f"msg_{secrets.token_hex(8)}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [], "stop_reason": None, "stop_sequence": None, "usage": _usage()}
    block = {"type": "tool_use", "id": f"toolu_{secrets.token_hex(8)}", "name": SEARCH_TOOL, "input": {}}
    return (sse("message_start", {"type": "message_start", "message": msg})
            + sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
            + sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                          "delta": {"type": "input_json_delta",
                                                    "partial_json": json.dumps({"query": call})}})
            + sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            + sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                                        "stop_sequence": None},
                                    "usage": {"output_tokens": 5}})
            + sse("message_stop", {"type": "message_stop"}))


def json_answer(text: str = "", call: str | None = None) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if call is None else [
        {"type": "tool_use", "id": f"toolu_{secrets.token_hex(8)}", "name": SEARCH_TOOL, "input": {"query": call}}]
    return json.dumps({"id": f"msg_{secrets.token_hex(8)}", "type": "message", "role": "assistant",
                       "model": "claude-sonnet-4-5", "content": content,
                       "stop_reason": "end_turn" if call is None else "tool_use", "stop_sequence": None,
                       "usage": _usage()}).encode()


# --- the client side ---------------------------------------------------------------------------------


def body(text: str, tools: list[dict[str, Any]] | None = None, stream: bool = False) -> bytes:
    return json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 256, "stream": stream,
                       "tools": TOOLS if tools is None else tools,
                       "messages": [{"role": "user", "content": text}]}).encode()


def headers(tag: str, key: str = "sk-ant-chaos-a", **extra: str) -> dict[str, str]:
    return {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": key,
            "x-chaos-tag": tag, "x-session-id": f"chaos-{tag}", **extra}


@dataclass
class Got:
    """What a client got back."""

    status: int | None = None
    parses: bool = False  # JSON: the body parses; stream: it ends with message_stop or an error event
    complete: bool = False  # stream: message_stop seen
    error_event: bool = False  # stream: an in-stream error event
    provider_error: bool = False  # a JSON body in the provider's error format
    nonempty: bool = False  # the turn has text or a tool call the client knows
    search_call: bool = False  # the turn calls the search tool (the addon's own: the client never offered it)
    transport: str | None = None
    nbytes: int = 0
    seconds: float = 0.0

    def describe(self) -> str:
        if self.status is None:
            return f"no answer ({self.transport})"
        parts = [str(self.status)]
        if self.status == 200:
            parts.append("parses" if self.parses else "UNPARSABLE")
        else:
            parts.append("provider error" if self.provider_error else "non-provider body")
        if self.error_event:
            parts.append("error event")
        if self.transport:
            parts.append(f"cut: {self.transport}")
        return " ".join(parts)


def _json_ok(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def judge(got: Got, raw: bytes, stream: bool) -> Got:
    if stream and got.status == 200:
        for line in raw.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            ev = _json_ok(line[5:])
            if not isinstance(ev, dict):
                continue
            kind = ev.get("type")
            if kind == "message_stop":
                got.complete = True
            elif kind == "error":
                got.error_event = True
            elif kind == "content_block_delta" and ev.get("delta", {}).get("text"):
                got.nonempty = True
            elif kind == "content_block_start":
                block = ev.get("content_block", {})
                if block.get("type") == "tool_use":
                    got.nonempty |= block.get("name") != SEARCH_TOOL
                    got.search_call |= block.get("name") == SEARCH_TOOL
        got.parses = (got.complete or got.error_event) and got.transport is None
        return got
    doc = _json_ok(raw) if got.transport is None else None
    got.parses = isinstance(doc, dict)
    if isinstance(doc, dict):
        # The SDKs read ``error.message`` (and the status) of an error body.
        error = doc.get("error")
        got.provider_error = isinstance(error, dict) and isinstance(error.get("message"), str)
        for block in doc.get("content") or []:
            if not isinstance(block, dict):
                continue
            called = block.get("name") if block.get("type") == "tool_use" else None
            got.nonempty |= bool(block.get("text")) or (called is not None and called != SEARCH_TOOL)
            got.search_call |= called == SEARCH_TOOL
    return got


def send(client: httpx.Client, data: bytes, hdrs: dict[str, str], *, stream: bool = False,
         url: str = URL, timeout: float = TIMEOUT) -> Got:
    """POST and read the whole answer, noting a transport failure instead of raising."""
    got = Got()
    raw = bytearray()
    t0 = time.perf_counter()
    try:
        with client.stream("POST", url, content=data, headers=hdrs, timeout=timeout) as r:
            got.status = r.status_code
            for piece in r.iter_bytes():
                got.nbytes += len(piece)
                if len(raw) < 4 * MiB:
                    raw.extend(piece)
                elif stream:  # keep the tail: message_stop comes last
                    raw[:] = raw[-MiB:] + piece
    except httpx.HTTPError as e:
        got.transport = type(e).__name__
    got.seconds = time.perf_counter() - t0
    return judge(got, bytes(raw), stream)


def tunnel(proxy: MitmDump, host: str = "api.anthropic.com") -> socket.socket:
    """A TLS connection to ``host`` through the proxy, as a client's CONNECT makes it."""
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)  # type: ignore[arg-type]
    connect(sock, host)
    return proxy.ssl_context().wrap_socket(sock, server_hostname=host)


def raw_post(path: str, data: bytes, hdrs: dict[str, str], host: str = "api.anthropic.com") -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(data)}"]
    lines += [f"{k}: {v}" for k, v in hdrs.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class Ticker:
    """Small requests one after another on their own connection until stopped: each one's wait."""

    def __init__(self, proxy: MitmDump, tag: str, key: str = "sk-ant-chaos-b", limit: float = 120.0) -> None:
        self.waits: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._deadline = time.monotonic() + limit
        self._thread = threading.Thread(target=self._run, args=(proxy, tag, key), daemon=True)
        self._thread.start()

    def _run(self, proxy: MitmDump, tag: str, key: str) -> None:
        data = body("hello, a small request", SMALL_TOOLS)
        with proxy.httpx_client() as client:
            while not self._stop.is_set() and time.monotonic() < self._deadline:
                got = send(client, data, headers(tag, key), timeout=TIMEOUT)
                self.waits.append(got.seconds)
                if got.status != 200 or not got.parses:
                    self.failures += 1
                self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT + 10)

    @property
    def longest(self) -> float:
        return max(self.waits) if self.waits else math.nan


# --- the run -----------------------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    addon: str
    plain: str
    bound: str
    ok: bool | None  # None: no bound (informational)
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return {True: "ok", False: "FAIL", None: "-"}[self.ok]


class Chaos:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.up = Upstream()
        self.rows: list[Row] = []
        self.proxies: dict[str, MitmDump] = {}

    # proxies shared by the scenarios; restarted when one died (a bomb, the RSS cap)
    def proxy(self, role: str) -> MitmDump:
        p = self.proxies.get(role)
        if p is None:
            wd = workdir(self.tmp, role)
            p = start_addon(self.up.url, wd) if role == "addon" else start_plain(self.up.url, wd)
            self.proxies[role] = p
        elif not p.running:
            log(f"{role} mitmdump was dead: restarting")
            p.restart(same_port=False)
        return p

    def close(self) -> None:
        for p in self.proxies.values():
            p.stop()
        self.up.stop()

    def add(self, row: Row) -> None:
        self.rows.append(row)
        log(f"{row.scenario}: addon {row.addon} | plain {row.plain} | {row.verdict}")

    def rss(self, p: MitmDump) -> Rss:
        return Rss(p.proc.pid, 0.02, cap=None)  # type: ignore[union-attr]

    # --- 1. decompression bombs ---

    def bombs(self) -> None:
        size = self.args.bomb_size
        for enc in ("br", "zstd", "gzip"):
            t0 = time.perf_counter()
            data = bomb(enc, size)
            res: dict[str, dict[str, Any]] = {}
            for role in ("addon", "plain"):
                p = self.proxy(role)
                rss = self.rss(p)
                base = rss.reset()
                rss.cap = base + self.args.rss_cap
                ticker = Ticker(p, f"bomb-tick-{role}")
                time.sleep(0.3)
                with p.httpx_client() as client:
                    got = send(client, data, headers(f"bomb-{enc}-{role}", **{"content-encoding": enc}),
                               timeout=self.args.bomb_timeout)
                ticker.stop()
                rss.now()
                rss.stop()
                res[role] = {"status": got.describe(), "peak": rss.peak - base, "longest_wait": ticker.longest,
                             "ticks": len(ticker.waits), "tick_failures": ticker.failures, "killed": rss.killed,
                             "seconds": got.seconds}
            a, pl = res["addon"], res["plain"]
            ok = (not a["killed"] and a["peak"] <= pl["peak"] + BOMB_BOUND and a["longest_wait"] <= WAIT_BOUND
                  and a["tick_failures"] == 0)

            def fmt(r: dict[str, Any]) -> str:
                killed = f" KILLED at +{mb(self.args.rss_cap)} cap" if r["killed"] else ""
                return (f"peak {signed_mb(r['peak'])}{killed}, longest other wait {ms(r['longest_wait'])}"
                        f" ({r['ticks']} reqs, {r['tick_failures']} failed), bomb got {r['status']}")

            self.add(Row(f"1 bomb {enc} {len(data) // 1024} KiB -> {mb(size)}", fmt(a), fmt(pl),
                         "peak <= plain+200 MB, waits <= 1 s", ok, time.perf_counter() - t0, res))

    # --- 2. session store faults ---

    def store(self) -> None:
        plain = self.proxy("plain")
        base = self._requests(plain, "store-plain", self.args.store_requests)
        plain_txt = f"starts: yes, {base['ok']}/{base['n']} ok, p95 {ms(base['p95'])}"
        for fault in ("garbage cache.db", "read-only dir", "locked db"):
            t1 = time.perf_counter()
            wd = workdir(self.tmp, "store")
            sessions = wd / "sessions"
            sessions.mkdir()
            mounted = False
            if fault == "garbage cache.db":
                (sessions / "cache.db").write_bytes(os.urandom(64 * 1024))
            elif fault == "read-only dir":
                if os.geteuid() == 0:  # root writes through mode bits: only a read-only mount stops it
                    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(sessions)],
                                       capture_output=True)
                    mounted = r.returncode == 0
                    if not mounted:
                        self.add(Row(f"2 store: {fault}", f"skipped (mount failed: {r.stderr.decode()[:80]})",
                                     plain_txt, "starts, all ok", None))
                        continue
                else:
                    sessions.chmod(0o555)
            proxy = start_addon(self.up.url, wd, start=False, name="store")
            try:
                try:
                    proxy.start()
                except (RuntimeError, TimeoutError) as e:
                    self.add(Row(f"2 store: {fault}", f"starts: NO ({_why(str(e))})", plain_txt,
                                 "starts, all ok", False, time.perf_counter() - t1))
                    continue
                if fault == "locked db":
                    self._requests(proxy, "store-warm", 1)  # the store exists and has its tables
                    res = self._locked(proxy, sessions / "cache.db")
                else:
                    res = self._requests(proxy, f"store-{fault[:4]}", self.args.store_requests)
                ok = res["ok"] == res["n"] and res["n"] > 0 and res["p95"] <= STORE_P95_BOUND
                bound = "starts, all ok, p95 <= 1 s" + (" while locked" if fault == "locked db" else "")
                self.add(Row(f"2 store: {fault}", f"starts: yes, {res['ok']}/{res['n']} ok, p95 {ms(res['p95'])}"
                             + (f" (lock held {self.args.lock_seconds:.0f} s)" if fault == "locked db" else ""),
                             plain_txt, bound, ok, time.perf_counter() - t1, {"addon": res, "plain": base}))
            finally:
                proxy.stop()
                if mounted:
                    subprocess.run(["umount", "-l", str(sessions)], capture_output=True)
                if fault == "read-only dir" and not mounted:
                    sessions.chmod(0o755)

    def _requests(self, p: MitmDump, tag: str, n: int) -> dict[str, Any]:
        """``n`` searching requests, each of a new session (so the store is written every time)."""
        waits: list[float] = []
        ok = 0
        with p.httpx_client() as client:
            for i in range(n):
                got = send(client, body(f"#search# weather please, request {i}"), headers(f"{tag}-{i}"))
                waits.append(got.seconds)
                ok += got.status == 200 and got.parses
        return {"n": n, "ok": ok, "p50": percentile(waits, 50), "p95": percentile(waits, 95)}

    def _locked(self, p: MitmDump, db: Path) -> dict[str, Any]:
        """Requests while another process holds the store's write lock (sqlite ``BEGIN IMMEDIATE``)."""
        held = threading.Event()
        hold = self.args.lock_seconds
        locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(db), str(hold)], stdout=subprocess.PIPE)
        assert locker.stdout is not None
        if locker.stdout.readline().strip() != b"locked":
            locker.wait(5)
            return {"n": 0, "ok": 0, "p50": math.nan, "p95": math.nan, "error": "could not lock"}
        held.set()
        t_end = time.monotonic() + hold
        waits: list[float] = []
        ok = n = 0

        def one(i: int) -> None:
            nonlocal ok, n
            with p.httpx_client() as client:
                got = send(client, body(f"#search# weather please, locked {i}"), headers(f"store-lock-{i}"),
                           timeout=hold + TIMEOUT)
            waits.append(got.seconds)
            n += 1
            ok += got.status == 200 and got.parses

        with ThreadPoolExecutor(4) as pool:
            i = 0
            futures = []
            while time.monotonic() < t_end and i < 40:
                futures.append(pool.submit(one, i))
                i += 1
                time.sleep(max(0.05, hold / 10))
            for f in futures:
                f.result()
        locker.wait(hold + 10)
        return {"n": n, "ok": ok, "p50": percentile(waits, 50), "p95": percentile(waits, 95)}

    # --- 3. heavy tenants ---

    def heavy(self) -> None:
        t0 = time.perf_counter()
        big = body("#heavy# pick the right tool for the invoice export", anthropic_tools(self.args.heavy_tools))
        res: dict[str, dict[str, Any]] = {}
        for role in ("addon", "plain"):
            p = self.proxy(role)
            ticker = Ticker(p, f"heavy-b-{role}", key="sk-ant-chaos-tenant-b", limit=self.args.heavy_timeout)
            time.sleep(0.3)

            def a_request(i: int, p: MitmDump = p, role: str = role) -> Got:
                with p.httpx_client() as client:
                    return send(client, big, headers(f"heavy-a-{role}-{i}", key="sk-ant-chaos-tenant-a"),
                                timeout=self.args.heavy_timeout)

            t1 = time.perf_counter()
            with ThreadPoolExecutor(6) as pool:
                heavy_got = list(pool.map(a_request, range(6)))
            a_seconds = time.perf_counter() - t1
            ticker.stop()
            res[role] = {"b_p50": percentile(ticker.waits, 50), "b_p95": percentile(ticker.waits, 95),
                         "b_n": len(ticker.waits), "b_failed": ticker.failures,
                         "a_ok": sum(g.status == 200 and g.parses for g in heavy_got), "a_seconds": a_seconds}

        def fmt(r: dict[str, Any]) -> str:
            return (f"B p50 {ms(r['b_p50'])} p95 {ms(r['b_p95'])} ({r['b_n']} reqs, {r['b_failed']} failed);"
                    f" A {r['a_ok']}/6 ok in {r['a_seconds']:.1f} s")

        a = res["addon"]
        ok = a["b_p95"] <= TENANT_P95_BOUND and a["b_failed"] == 0
        self.add(Row(f"3 heavy tenant A: 6 x {self.args.heavy_tools} tools", fmt(a), fmt(res["plain"]),
                     "B p95 <= 500 ms", ok, time.perf_counter() - t0, res))

    # --- 4. cut re-forward ---

    def cut(self) -> None:
        self.up.mode = "cut"
        try:
            for stream in (False, True):
                t0 = time.perf_counter()
                res = {}
                for role in ("addon", "plain"):
                    p = self.proxy(role)
                    tag = f"cut-{stream}-{role}"
                    text = "#search# weather" if role == "addon" else "#fault-now# weather"
                    with p.httpx_client() as client:
                        got = send(client, body(text, stream=stream), headers(tag), stream=stream)
                    faulty = [a for a in self.up.seen(tag) if a.reforward or role == "plain"]
                    res[role] = {"got": asdict(got), "upstream_faulty_arrivals": len(faulty)}
                    res[role]["text"] = f"{got.describe()}; upstream saw the cut request {len(faulty)}x"
                a = res["addon"]["got"]
                ok = not (a["status"] == 200 and not a["parses"])
                kind = "stream" if stream else "JSON"
                self.add(Row(f"4 cut re-forward ({kind})", res["addon"]["text"], res["plain"]["text"],
                             "never a 200 that does not parse" + (" (message_stop or error event)" if stream else ""),
                             ok, time.perf_counter() - t0, res))
        finally:
            self.up.mode = "normal"

    # --- 5. stalled re-forward, client leaving ---

    def stall(self) -> None:
        self.up.mode = "hold-close"
        self.up.hold = self.args.hold_seconds
        try:
            t0 = time.perf_counter()
            res = {}
            for role in ("addon", "plain"):
                p = self.proxy(role)
                tag = f"stall-{role}"
                text = "#search# weather" if role == "addon" else "#fault-now# weather"
                with p.httpx_client() as client:
                    got = send(client, body(text), headers(tag), timeout=self.args.hold_seconds + TIMEOUT)
                time.sleep(0.5)
                faulty = [a for a in self.up.seen(tag) if a.reforward or role == "plain"]
                gap = (f" (the 2nd {faulty[1].arrived - faulty[0].arrived:.1f} s after the 1st)"
                       if len(faulty) > 1 else "")
                res[role] = {"got": asdict(got), "arrivals": len(faulty),
                             "text": f"{len(faulty)} arrival(s) of the held POST{gap}; client got {got.describe()}"}
            a = res["addon"]
            ok = a["arrivals"] == 1 and (a["got"]["status"] or 0) >= 500 and a["got"]["provider_error"]
            self.add(Row(f"5 stalled re-forward (held {self.args.hold_seconds:.0f} s, closed)", a["text"],
                         res["plain"]["text"], "exactly 1 arrival, provider-format 5xx", ok,
                         time.perf_counter() - t0, res))
        finally:
            self.up.mode = "normal"

    def leave(self) -> None:
        self.up.mode = "hold"
        self.up.hold = self.args.leave_wait
        try:
            for stream in (False, True):
                t0 = time.perf_counter()
                res = {}
                for role in ("addon", "plain"):
                    res[role] = self._leave_once(self.proxy(role), role, stream)
                a = res["addon"]
                ok = a["closed_after"] is not None and a["closed_after"] <= LEAVE_BOUND
                kind = "stream" if stream else "JSON"
                self.add(Row(f"5 client leaves during held re-forward ({kind})", a["text"], res["plain"]["text"],
                             "upstream closed <= 5 s after the client left", ok, time.perf_counter() - t0, res))
        finally:
            self.up.mode = "normal"

    def _leave_once(self, p: MitmDump, role: str, stream: bool) -> dict[str, Any]:
        tag = f"leave-{stream}-{role}"
        text = "#search# weather" if role == "addon" else "#fault-now# weather"
        sock = tunnel(p)
        sock.sendall(raw_post("/v1/messages", body(text, stream=stream), headers(tag)))
        deadline = time.monotonic() + 30
        held: Arrival | None = None
        while time.monotonic() < deadline and held is None:
            held = next((a for a in self.up.seen(tag) if a.reforward or role == "plain"), None)
            time.sleep(0.02)
        if held is None:
            sock.close()
            return {"closed_after": None, "text": "the held request never reached the upstream"}
        time.sleep(0.3)
        sock.close()  # the client goes away
        left = time.monotonic()
        while time.monotonic() < left + self.args.leave_wait and held.peer_closed is None:
            time.sleep(0.02)
        if held.peer_closed is None:
            return {"closed_after": None, "text": f"upstream still open {self.args.leave_wait:.0f} s after"}
        after = max(0.0, held.peer_closed - left)
        return {"closed_after": after, "text": f"upstream closed {after:.2f} s after the client left"}

    # --- 6. loop limit ---

    def loop(self) -> None:
        self.up.mode = "loop"
        try:
            for stream in (False, True):
                t0 = time.perf_counter()
                res = {}
                for role in ("addon", "plain"):
                    p = self.proxy(role)
                    tag = f"loop-{stream}-{role}"
                    with p.httpx_client() as client:
                        got = send(client, body("#search# weather", stream=stream), headers(tag), stream=stream)
                    rounds = len(self.up.seen(tag))
                    turn = ("non-empty" if got.nonempty else "only-a-search-call" if got.search_call
                            else "EMPTY")
                    res[role] = {"got": asdict(got), "rounds": rounds,
                                 "text": f"{got.describe()}, {turn} turn, {rounds} upstream round(s)"}
                a = res["addon"]["got"]
                ok = a["status"] == 200 and a["parses"] and a["nonempty"]
                kind = "stream" if stream else "JSON"
                self.add(Row(f"6 loop limit: model always searches ({kind})", res["addon"]["text"],
                             res["plain"]["text"], "200, non-empty turn", ok, time.perf_counter() - t0, res))
        finally:
            self.up.mode = "normal"

    # --- 7. credentials at flow_detail 4 ---

    def creds(self) -> None:
        t0 = time.perf_counter()

        def run(role: str) -> dict[str, Any]:
            wd = workdir(self.tmp, f"creds-{role}")
            extra = ["--set", "flow_detail=4"]
            p = start_addon(self.up.url, wd, extra_args=extra, name="creds") if role == "addon" else \
                start_plain(self.up.url, wd, extra_args=extra, name="creds")
            try:
                return self._send_creds(p)
            finally:
                p.stop()

        with ThreadPoolExecutor(2) as pool:  # two starts at once: the run stays short
            res = dict(zip(("addon", "plain"), pool.map(run, ("addon", "plain"))))
        total = len(res["addon"]["secrets"])

        def fmt(r: dict[str, Any]) -> str:
            names = ", ".join(r["found"]) or "none"
            return f"{len(r['found'])}/{total} secrets in the log ({names})"

        self.add(Row("7 credentials at flow_detail=4", fmt(res["addon"]), fmt(res["plain"]), "0 found",
                     not res["addon"]["found"], time.perf_counter() - t0,
                     {k: {"found": v["found"]} for k, v in res.items()}))

    def _send_creds(self, p: MitmDump) -> dict[str, Any]:
        s = {name: secrets.token_hex(20) for name in
             ("x-api-key", "bearer", "x-goog-api-key", "?key=", "api-key", "sigv4-signature", "x-amz-security-token")}
        s["sigv4-signature"] = secrets.token_hex(32)
        gemini = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
        bedrock = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4-5/invoke"
        gem_body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                               "tools": [{"functionDeclarations": [
                                   {"name": t["name"], "description": t["description"],
                                    "parametersJsonSchema": t["input_schema"]} for t in TOOLS]}]}).encode()
        functions = [{"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
                     for t in TOOLS]
        chat = json.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}],
                           "tools": [{"type": "function", "function": f} for f in functions]}).encode()
        j = {"content-type": "application/json", "x-chaos-tag": "creds"}
        sigv4 = (f"AWS4-HMAC-SHA256 Credential=AKIACHAOSCHAOS/20261126/us-east-1/bedrock/aws4_request, "
                 f"SignedHeaders=content-type;host;x-amz-date, Signature={s['sigv4-signature']}")
        bedrock_body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "tools": TOOLS,
                                   "messages": [{"role": "user", "content": "hi"}]}).encode()
        sends = [
            (URL, body("hi"), {**headers("creds"), "x-api-key": f"sk-ant-{s['x-api-key']}"}),
            ("https://api.openai.com/v1/chat/completions", chat, {**j, "authorization": f"Bearer sk-{s['bearer']}"}),
            (gemini, gem_body, {**j, "x-goog-api-key": f"AIza{s['x-goog-api-key']}"}),
            (f"{gemini}?key=AIza{s['?key=']}", gem_body, j),
            ("https://api.openai.com/v1/chat/completions", chat, {**j, "api-key": s["api-key"]}),
            (bedrock, bedrock_body, {**j, "authorization": sigv4, "x-amz-date": "20261126T120000Z",
                                     "x-amz-security-token": s["x-amz-security-token"]}),
        ]
        with p.httpx_client() as client:
            for url, data, hdrs in sends:
                send(client, data, hdrs, url=url)
        time.sleep(0.5)
        p.stop()  # flush the log
        text = p.log_text()
        return {"secrets": list(s), "found": [name for name, v in s.items() if v in text]}

    # --- 8. the live relay without its token ---

    def relay(self) -> None:
        t0 = time.perf_counter()
        p = self.proxy("addon")
        with p.httpx_client() as client:  # a live stream starts the relay
            send(client, body("hello", stream=True), headers("relay-warm"), stream=True)
        ports = listening_ports(p.proc.pid) - {p.port}  # type: ignore[union-attr]
        if not ports:
            self.add(Row("8 relay without token", "relay port not found (left to unit tests)", "no relay",
                         "403, nothing forwarded", None, time.perf_counter() - t0))
            return
        port = min(ports)
        # (a) a well-formed request without a token
        small = body("steal a turn", stream=True)
        status = _raw_status(port, raw_post("/v1/messages", small, headers("relay-a"), host="api.anthropic.com"))
        time.sleep(0.3)
        arrivals = len(self.up.seen("relay-a"))
        # (b) a wrong token and a large body, sent in pieces
        rss = self.rss(p)
        base = rss.reset()
        n = self.args.relay_body
        head = (f"POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\nContent-Length: {n}\r\n"
                f"x-tooldisco-relay: {'0' * 32}\r\nx-chaos-tag: relay-b\r\n\r\n").encode()
        accepted, status_b = _push(port, head, n)
        time.sleep(0.3)
        rss.now()
        rss.stop()
        peak = rss.peak - base
        ok = status == 403 and arrivals == 0 and status_b in (403, None) and peak <= RELAY_RSS_BOUND
        txt = (f"port {port}: no token -> {status}, {arrivals} forwarded; wrong token + {mb(n)} body -> "
               f"{status_b}, {mb(accepted)} taken, peak {signed_mb(peak)}")
        self.add(Row("8 relay without token", txt, "no relay port", "403, 0 forwarded, body not buffered (<= +32 MB)",
                     ok, time.perf_counter() - t0,
                     {"port": port, "status": status, "arrivals": arrivals, "status_big": status_b,
                      "accepted": accepted, "peak": peak}))

    # --- 9. a big streamed answer ---

    def bigstream(self) -> None:
        t0 = time.perf_counter()
        self.up.big = self.args.big_answer
        res = {}
        for role in ("addon", "plain"):
            p = self.proxy(role)
            rss = self.rss(p)
            base = rss.settled(most=10)
            rss.reset()
            with p.httpx_client() as client:
                got = send(client, body("#big# tell me everything", stream=True), headers(f"big-{role}"),
                           stream=True, timeout=300)
            peak = rss.peak - base
            after = rss.settled(most=15) - base
            rss.stop()
            res[role] = {"got": asdict(got), "peak": peak, "after": after,
                         "text": f"{got.describe()}, {mb(got.nbytes)} read, peak {signed_mb(peak)},"
                                 f" after {signed_mb(after)}, {got.seconds:.1f} s"}
        a, pl = res["addon"], res["plain"]
        ok = (a["got"]["complete"] and a["peak"] <= max(pl["peak"], 0) + BIG_PEAK_SLACK
              and a["after"] <= max(pl["after"], 0) + BIG_AFTER_SLACK)
        self.add(Row(f"9 {mb(self.args.big_answer)} streamed answer", a["text"], pl["text"],
                     "complete, peak <= plain+64 MB, after <= plain+32 MB", ok, time.perf_counter() - t0, res))

    # --- 10. a lone surrogate in a search query ---

    def surrogate(self) -> None:
        t0 = time.perf_counter()
        self.up.mode = "surrogate"
        try:
            res = {}
            for role in ("addon", "plain"):
                p = self.proxy(role)
                tele = p.workdir / "tool_discovery.jsonl"
                before = _lines(tele)
                with p.httpx_client() as client:
                    got = send(client, body("#search# weather"), headers(f"surrogate-{role}"))
                deadline = time.monotonic() + self.args.settle
                while role == "addon" and _lines(tele) <= before and time.monotonic() < deadline:
                    time.sleep(0.1)
                added = _lines(tele) - before
                res[role] = {"got": asdict(got), "records": added,
                             "text": f"{got.describe()}, " + (f"+{added} telemetry record(s)" if role == "addon"
                                                              else "no telemetry")}
            a = res["addon"]
            ok = a["records"] >= 1 and a["got"]["status"] == 200 and a["got"]["parses"]
            self.add(Row("10 lone surrogate in a search query", a["text"], res["plain"]["text"],
                         "telemetry record written, 200 parses", ok, time.perf_counter() - t0, res))
        finally:
            self.up.mode = "normal"


LOCKER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
con.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
con.execute("ROLLBACK")
"""


def _why(text: str) -> str:
    """The exception line of a failed start's log (``sqlite3.DatabaseError: ...``), else its first line."""
    found = re.findall(r"^[\w.]*(?:Error|Exception): .*$", text, re.M)
    return (found[-1] if found else text.splitlines()[0] if text else "?")[:120]


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_bytes().splitlines() if line.strip()) if path.exists() else 0


def _raw_status(port: int, request: bytes) -> int | None:
    """Send ``request`` to the relay over plain HTTP; the status it answers (None: closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        return _read_status(sock)


def _read_status(sock: socket.socket) -> int | None:
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return int(m.group(1)) if m else None


def _push(port: int, head: bytes, n: int) -> tuple[int, int | None]:
    """Send ``head`` and ``n`` body bytes in 1 MiB pieces, stopping when the relay answers or
    closes; (bytes taken, status)."""
    piece = b"\0" * MiB
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(head)
            sock.setblocking(False)
            early = b""
            while sent < n:
                try:
                    early += sock.recv(4096)
                    if early:
                        break
                except BlockingIOError:
                    pass
                sock.setblocking(True)
                sock.sendall(piece[: n - sent])
                sent += min(len(piece), n - sent)
                sock.setblocking(False)
            sock.setblocking(True)
            if early:
                m = re.match(rb"HTTP/1\.[01] (\d{3})", early)
                return sent, int(m.group(1)) if m else None
        except OSError:
            sock.setblocking(True)
        return sent, _read_status(sock)


# --- bombs -------------------------------------------------------------------------------------------

_BOMBS: dict[tuple[str, int], bytes] = {}


def bomb(enc: str, size: int) -> bytes:
    """A Messages request (60 tools, one huge user message) of ``size`` bytes once decoded, compressed
    with ``enc`` piece by piece so the decoded body is never in memory here."""
    if (enc, size) in _BOMBS:
        return _BOMBS[(enc, size)]
    prefix = body("@@FILL@@").split(b"@@FILL@@")
    head, tail = prefix[0], prefix[1]
    if enc == "gzip":
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        feed, finish = z.compress, z.flush
    elif enc == "br":
        b = brotli.Compressor(quality=5, lgwin=24)
        feed, finish = b.process, b.finish
    else:
        c = zstandard.ZstdCompressor(level=3).compressobj()
        feed, finish = c.compress, c.flush
    out = [feed(head)]
    fill = b"A" * MiB
    left = max(0, size - len(head) - len(tail))
    while left:
        out.append(feed(fill[:left]))
        left -= min(left, len(fill))
    out += [feed(tail), finish()]
    data = b"".join(out)
    _BOMBS[(enc, size)] = data
    return data


# --- main --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated subset of {','.join(SCENARIOS)}")
    ap.add_argument("--bomb-size", type=parse_size, default=parse_size("1G"), help="decoded size of each bomb")
    ap.add_argument("--bomb-timeout", type=float, default=90.0)
    ap.add_argument("--rss-cap", type=parse_size, default=parse_size("2G"),
                    help="kill a proxy whose RSS grows more than this during a bomb")
    ap.add_argument("--heavy-tools", type=int, default=20000)
    ap.add_argument("--heavy-timeout", type=float, default=180.0)
    ap.add_argument("--store-requests", type=int, default=10)
    ap.add_argument("--lock-seconds", type=float, default=5.0)
    ap.add_argument("--hold-seconds", type=float, default=5.0)
    ap.add_argument("--leave-wait", type=float, default=15.0, help="how long the upstream waits for a close")
    ap.add_argument("--relay-body", type=parse_size, default=parse_size("128M"))
    ap.add_argument("--big-answer", type=parse_size, default=parse_size("100M"))
    ap.add_argument("--settle", type=float, default=10.0, help="how long to wait for a telemetry record")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a markdown table")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a bound fails")
    args = ap.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="chaos-"))
    chaos = Chaos(args, tmp)
    try:
        try:
            with ThreadPoolExecutor(2) as pool:  # the shared pair, started at once
                list(pool.map(chaos.proxy, ("addon", "plain")))
        except Exception as e:  # each scenario tries again and reports its own failure
            log(f"starting the proxies failed: {e!r}"[:500])
        for name in SCENARIOS:
            if name not in chosen:
                continue
            t0 = time.perf_counter()
            log(f"scenario {name}")
            try:
                getattr(chaos, name)()
            except Exception as e:  # one broken scenario must not hide the others' figures
                chaos.add(Row(name, f"scenario error: {type(e).__name__}: {str(e)[:200]}", "", "", False,
                              time.perf_counter() - t0))
    finally:
        chaos.close()
        shutil.rmtree(tmp, ignore_errors=True)
    total = time.perf_counter() - started
    if args.json:
        print(json.dumps({"seconds": total, "rows": [asdict(r) | {"verdict": r.verdict} for r in chaos.rows]},
                         default=str, indent=1))
    else:
        print(table(("scenario", "addon", "plain mitmdump", "bound", "verdict", "s"),
                    [(r.scenario, r.addon, r.plain, r.bound, r.verdict, f"{r.seconds:.0f}") for r in chaos.rows]))
        print(f"\n{sum(r.ok is False for r in chaos.rows)} bound(s) failed; {total:.0f} s in all")
    return 1 if args.strict and any(r.ok is False for r in chaos.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
