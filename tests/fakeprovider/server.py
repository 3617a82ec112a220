"""The fake provider HTTP server: routing, auth, recording, the script, paced streaming.

Plain HTTP/1.1 with keep-alive on 127.0.0.1. JSON responses carry Content-Length;
streams use chunked transfer encoding, one chunk per event, written and flushed as
produced, with ``stream_delay`` seconds between events.

WebSocket upgrades (Codex tries ``GET /v1/responses`` with ``Upgrade: websocket`` first)
are refused the way a server without WebSocket support refuses them: no ``101``, an
ordinary HTTP error (``websocket_status``, default 405 with ``Allow: POST``, what an
HTTP-only server says to a GET on a POST route). Codex 0.169 then retries the upgrade six
times (~7 s) before it falls back to HTTP SSE; with 426 it falls back at once. Upgrades are
recorded with ``api=None`` so they do not count as API requests (``nth``).

Control endpoints (for out-of-process use; never recorded):
``GET /_requests[?since=N]``, ``POST /_reset``, ``GET|POST /_script``,
``POST /_settings`` (``{"stream_delay": 0.05, "first_delay": 0, "websocket_status": 405, "prompt_cache": false,
"no_native_models": []}``),
``GET /_health``.

``prompt_cache`` turns on the prefix-cache model (``cache.py``): usage then reports the cached
part of each prompt the way the API does, and each record's ``prompt`` says what was read.
A reset turns it off and empties it, so no test inherits another's cache.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import select
import socket
import threading
import time
import traceback
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .cache import Bill, PromptCache, cache_key, tenant
from .model import DISPATCHER, ApiError, Conversation, JsonResponse, Response, StreamResponse, new_id
from .providers import PROVIDERS, Incoming, Provider
from .script import Rule, Script

log = logging.getLogger("fakeprovider")


@dataclass
class RecordedRequest:
    """One request the fake received on a non-control path."""

    index: int  # 1-based position among all recorded requests since the last reset
    method: str
    path: str  # without the query string
    query: str  # raw query string ("" if none)
    headers: list[tuple[str, str]]
    body: bytes  # as received (after de-chunking, before content-decoding)
    content: bytes  # body after content-decoding (what JSON parsing saw)
    json: Any = None  # parsed body, or None if it was not JSON
    api: str | None = None  # provider name, None if no API serves the path
    nth: int | None = None  # 1-based index among API requests (what ``Rule.nth`` matches)
    tool_names: list[str] | None = None  # tools offered, when the request validated
    status: int | None = None  # status the fake answered with
    error: str | None = None  # validation/scripted error message, or a server-side problem
    reply: dict[str, Any] | None = None  # what the scripted model answered (text, calls, usage)
    rule: dict[str, Any] | None = None  # the rule that produced the answer
    prompt: dict[str, Any] | None = None  # with the prompt cache on: the cache's Bill (tokens, cached, first_miss...)
    started_at: float = field(default_factory=time.monotonic)
    event_times: list[float] = field(default_factory=list)  # monotonic time each streamed event began to be written
    events_total: int | None = None  # how many events the stream had to write (None: not a stream)
    client_gone: bool = False  # a write failed: the client closed the connection before the answer was written
    finished_at: float | None = None  # monotonic time the last response byte was written (or the write failed)
    sent: bytearray = field(default_factory=bytearray, repr=False)  # the body as written (a stream: its events)
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def query_params(self) -> dict[str, list[str]]:
        return parse_qs(self.query, keep_blank_values=True)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        low = name.lower()
        return next((v for k, v in self.headers if k.lower() == low), None)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def can_call(self, name: str) -> bool:
        """Whether the model could call ``name`` in this request: offered in ``tools[]``, or
        through the proxy's dispatcher (call-through deferral) once a search result named it."""
        offered = self.tool_names or []
        return name in offered or (DISPATCHER in offered and name in self.text)

    def called(self) -> list[str]:
        """The tools the model called in its answer, a dispatcher call as the tool it names."""
        calls = (self.reply or {}).get("calls") or []
        return [c["arguments"]["name"] if c["name"] == DISPATCHER else c["name"] for c in calls]

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": [list(h) for h in self.headers],
            "body_b64": base64.b64encode(self.body).decode(),
            "text": self.text,
            "json": self.json,
            "api": self.api,
            "nth": self.nth,
            "tool_names": self.tool_names,
            "status": self.status,
            "error": self.error,
            "reply": self.reply,
            "rule": self.rule,
            "prompt": self.prompt,
            "started_at": self.started_at,
            "event_times": self.event_times,
            "events_total": self.events_total,
            "client_gone": self.client_gone,
            "finished_at": self.finished_at,
        }


def _decode(body: bytes, encoding: str) -> bytes:
    """Undo a request Content-Encoding (gzip, deflate, zstd, br when available)."""
    for enc in reversed([e.strip().lower() for e in encoding.split(",") if e.strip()]):
        if enc in ("gzip", "x-gzip"):
            body = gzip.decompress(body)
        elif enc == "deflate":
            try:
                body = zlib.decompress(body)
            except zlib.error:
                body = zlib.decompress(body, -zlib.MAX_WBITS)
        elif enc == "zstd":
            import zstandard

            body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
        elif enc == "br":
            import brotli  # type: ignore[import-not-found,import-untyped,unused-ignore]

            body = brotli.decompress(body)
        elif enc != "identity":
            raise ValueError(f"unsupported content-encoding {enc!r}")
    return body


class _Server(ThreadingHTTPServer):
    # A real API's listen backlog: socketserver's default (5) drops connections under load.
    request_queue_size = 1024


class FakeProvider:
    """The fake LLM provider. Use in-process (``start()``/``stop()`` or ``with``) or via
    ``python -m tests.fakeprovider``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        stream_delay: float = 0.05,
        first_delay: float = 0.0,
        providers: list[Provider] | None = None,
        keep_requests: bool = True,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.stream_delay = stream_delay
        #: seconds before every API answer begins (JSON or stream): a model's time to first token
        self.first_delay = first_delay
        #: status for refused WebSocket upgrades (405: an HTTP-only server's "GET not allowed here")
        self.websocket_status = 405
        #: the prefix-cache model: off, so usage numbers stay the plain estimate
        self.prompt_cache = False
        #: models whose API answers native deferral fields (defer_loading, tool_search) with a 400
        self.no_native_models: set[str] = set()
        self.cache = PromptCache()
        self.providers = providers if providers is not None else PROVIDERS
        self.script = Script()
        #: False: requests are answered and counted but not kept, so a long benchmark's memory stays flat
        self.keep_requests = keep_requests
        self._recorded = 0
        self._requests: list[RecordedRequest] = []
        self._api_count = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> FakeProvider:
        """Bind and serve in a daemon thread; returns self."""
        handler = type("BoundHandler", (_Handler,), {"fake": self})
        server = _Server((self.host, self.requested_port), handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fakeprovider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # --- test API -----------------------------------------------------------------------

    def set_script(self, script: Script | list[Rule] | dict[str, Any]) -> None:
        """Replace the script (a Script, a list of rules, or the ``POST /_script`` JSON)."""
        if isinstance(script, list) and all(isinstance(r, Rule) for r in script):
            script = Script(script)
        elif not isinstance(script, Script):
            script = Script.from_dict(script)
        with self._lock:
            self.script = script

    def reset(self) -> None:
        """Forget recorded requests, restore the default script, turn the prompt cache off and
        empty it (keeps ``stream_delay``)."""
        with self._lock:
            self._requests.clear()
            self._recorded = 0
            self._api_count = 0
            self.script = Script()
            self.prompt_cache = False
            self.no_native_models = set()
        self.cache.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every recorded request since the last reset, oldest first."""
        with self._lock:
            return list(self._requests)

    def api_requests(self, api: str | None = None) -> list[RecordedRequest]:
        """Recorded requests that reached an API (optionally one: "anthropic", "openai-chat",
        "openai-responses", "gemini", "bedrock-converse", "bedrock-invoke")."""
        return [r for r in self.requests if r.api is not None and (api is None or r.api == api)]

    def last_request(self) -> RecordedRequest:
        reqs = self.requests
        assert reqs, "the fake provider has received no request"
        return reqs[-1]

    def wait_for_requests(self, count: int, timeout: float = 30.0) -> list[RecordedRequest]:
        """Block until at least ``count`` requests were recorded and answered; returns them."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                done = [r for r in self._requests if r.done.is_set()]
                if len(done) >= count:
                    return list(self._requests)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"expected {count} finished requests, have {len(done)} of {len(self._requests)}")
                self._changed.wait(left)

    # --- internals used by the handler --------------------------------------------------

    def _record(self, rec: RecordedRequest, is_api: bool) -> None:
        with self._lock:
            self._recorded += 1
            rec.index = self._recorded
            if is_api:
                self._api_count += 1
                rec.nth = self._api_count
            if self.keep_requests:
                self._requests.append(rec)
            self._changed.notify_all()

    def _finish(self, rec: RecordedRequest) -> None:
        with self._changed:
            rec.finished_at = time.monotonic()
            rec.done.set()
            self._changed.notify_all()

    def _choose(self, conv: Conversation, nth: int) -> Rule:
        with self._lock:
            script = self.script
        return script.choose(conv, nth)

    def _bill(self, provider: Provider, req: Incoming, conv: Conversation) -> Bill | None:
        """What the prompt cache read for this request (and now holds), when it is on."""
        if not self.prompt_cache:
            return None
        key = cache_key(tenant(req.headers, req.query), conv.model, conv.body)
        return self.cache.bill(key, provider.prompt_segments(conv))


class _Handler(BaseHTTPRequestHandler):
    """Per-connection handler; ``fake`` is bound by :meth:`FakeProvider.start`."""

    fake: FakeProvider
    protocol_version = "HTTP/1.1"
    server_version = "fakeprovider/1"
    timeout = 300  # idle keep-alive connections close after this

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    # --- request ------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        split = urlsplit(self.path)
        path, query = split.path, split.query
        body = self._read_body()
        if path.startswith("/_"):
            self._control(path, query, body)
            return
        fake = self.fake
        if self.headers.get("Upgrade", "").strip().lower() == "websocket":
            self._refuse_websocket(path, query, body)
            return
        provider, route = next(
            ((p, r) for p in fake.providers if (r := p.match(self.command, path)) is not None), (None, None)
        )
        rec = RecordedRequest(
            index=0,
            method=self.command,
            path=path,
            query=query,
            headers=list(self.headers.items()),
            body=body,
            content=body,
            api=provider.name if provider else None,
        )
        fake._record(rec, provider is not None)
        try:
            if provider is None or route is None:
                self._send_json(
                    rec,
                    JsonResponse(
                        404, {"error": {"type": "not_found_error", "message": f"no route for {self.command} {path}"}}
                    ),
                )
                return
            response = self._answer(provider, route, rec, query)
            if fake.first_delay > 0:  # the model reading the prompt before its first token
                time.sleep(fake.first_delay)
            rule = rec.rule or {}
            if rule.get("hold") and not self._hold(rec, float(rule["hold"])):
                return
            if rule.get("fault") == "close":  # no status line: the connection just ends
                rec.error = "fault: closed unanswered"
                self.close_connection = True
                return
            if rule.get("fault") == "cut":
                self._send_cut(rec, response)
                return
            if isinstance(response, StreamResponse):
                self._send_stream(rec, response)
            else:
                self._send_json(rec, response)
        except ConnectionError as exc:  # broken pipe, reset, aborted: the client went away
            rec.client_gone = True
            rec.error = rec.error or f"client disconnected: {exc!r}"
            self.close_connection = True
        except Exception:  # a bug in the fake: answer 500 and keep the trace in the record
            rec.error = traceback.format_exc()
            log.exception("fake provider failed on %s %s", self.command, path)
            if rec.status is not None:  # the response had begun: all we can do is cut it
                self.close_connection = True
                return
            try:
                self._send_json(rec, JsonResponse(500, {"error": {"type": "fake_provider_bug", "message": rec.error}}))
            except OSError:
                self.close_connection = True
        finally:
            fake._finish(rec)

    def _answer(self, provider: Provider, route: dict[str, str], rec: RecordedRequest, query: str) -> Response:
        """Auth, JSON, validation, then the script; errors in the provider's shape."""
        query_params = parse_qs(query, keep_blank_values=True)
        incoming = Incoming(self.command, rec.path, query_params, self.headers, rec.body, query)
        try:
            provider.check_auth(incoming)
            try:
                rec.content = _decode(rec.body, self.headers.get("Content-Encoding", ""))
                rec.json = json.loads(rec.content)
            except ValueError as exc:
                log.debug("invalid JSON: %s", exc)
                raise provider.invalid_json() from None
            conv = provider.parse(rec.json, incoming, route)
            if conv.model in self.fake.no_native_models and (refusal := provider.native_refusal(conv.body)):
                raise refusal
            rec.tool_names = list(conv.tools)
            conv.raw_text = rec.text
            assert rec.nth is not None
            rule = self.fake._choose(conv, rec.nth)
            rec.rule = rule.to_dict()
            if rule.error is not None:
                raise ApiError(rule.error.status, rule.error.message, rule.error.kind, rule.error.param)
            reply = rule.build_reply(conv, provider.call_id_prefix, new_id)
            if unloaded := [c.name for c in reply.calls if c.name in conv.meta.get("deferred", ())]:
                # A script error, not the API's: a model cannot call a tool it has not loaded.
                raise ApiError(400, f"fake: the scripted model called deferred tool(s) {unloaded} that no "
                               "tool search loaded (tool_reference / tool_search_output)")
            bill = self.fake._bill(provider, incoming, conv) if rule.usage is None else None
            if bill is not None:  # a rule's own usage wins
                reply.usage = bill.usage(reply.usage.output_tokens, provider.input_includes_cache)
                rec.prompt = bill.to_dict()
            rec.reply = reply.to_dict()
            response = provider.render(reply, conv)
            if isinstance(response, StreamResponse) and rule.delay is not None:
                response.delay = rule.delay
            return response
        except ApiError as err:
            rec.error = err.message
            return provider.error_response(err)

    def _refuse_websocket(self, path: str, query: str, body: bytes) -> None:
        """Answer an upgrade request as an HTTP-only server does (the client falls back to HTTP)."""
        rec = RecordedRequest(0, self.command, path, query, list(self.headers.items()), body, body)
        self.fake._record(rec, False)
        status = self.fake.websocket_status
        message = f"{self.command} {path}: WebSocket upgrades are not supported by this server"
        rec.error = message
        headers = {"Allow": "POST"} if status == 405 else {}
        try:
            self._send_json(
                rec, JsonResponse(status, {"error": {"type": "invalid_request_error", "message": message}}, headers)
            )
        finally:
            self.fake._finish(rec)

    # --- scripted faults ----------------------------------------------------------------

    def _hold(self, rec: RecordedRequest, seconds: float) -> bool:
        """Wait ``seconds`` before answering; False (recorded as ``client_gone``) when the client
        closes the connection meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.1))
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                rec.client_gone = True
                rec.error = "client closed the connection during the hold"
                self.close_connection = True
                return False
        return True

    def _send_cut(self, rec: RecordedRequest, response: Response) -> None:
        """The status line, the headers and half the body, then the connection drops."""
        rec.error = "fault: body cut"
        self.close_connection = True
        if isinstance(response, StreamResponse):
            events = list(response.events)
            rec.status = response.status
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in events[: len(events) // 2]:
                if event:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            return
        data = response.encode()
        rec.status = response.status
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()

    # --- response -----------------------------------------------------------------------

    def _send_json(self, rec: RecordedRequest | None, response: JsonResponse) -> None:
        data = response.encode()
        if rec is not None:
            rec.status = response.status
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in response.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            if rec is not None:
                rec.sent += data
            self.wfile.write(data)
        self.wfile.flush()

    def _send_stream(self, rec: RecordedRequest, response: StreamResponse) -> None:
        delay = self.fake.stream_delay if response.delay is None else response.delay
        events = list(response.events)
        rec.events_total = len(events)
        rec.status = response.status
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in response.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self._write_chunks(rec, events, delay)

    def _write_chunks(self, rec: RecordedRequest, events: Iterable[bytes], delay: float) -> None:
        for event in events:
            if rec.event_times and delay > 0:
                time.sleep(delay)
            rec.event_times.append(time.monotonic())
            if event:
                rec.sent += event
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # --- control endpoints --------------------------------------------------------------

    def _control(self, path: str, query: str, body: bytes) -> None:
        fake = self.fake
        status = 200
        out: dict[str, Any] = {"ok": True}
        try:
            data = json.loads(body) if body.strip() else {}
            if path == "/_health":
                out = {"ok": True, "url": fake.url}
            elif path == "/_requests" and self.command == "GET":
                since = int(parse_qs(query).get("since", ["0"])[0])
                out = {"requests": [r.to_json() for r in fake.requests if r.index > since]}
            elif path == "/_reset" and self.command == "POST":
                fake.reset()
            elif path == "/_script" and self.command == "POST":
                fake.set_script(data)
            elif path == "/_script" and self.command == "GET":
                out = fake.script.to_dict()
            elif path == "/_settings" and self.command == "POST":
                if "stream_delay" in data:
                    fake.stream_delay = float(data["stream_delay"])
                if "first_delay" in data:
                    fake.first_delay = float(data["first_delay"])
                if "websocket_status" in data:
                    fake.websocket_status = int(data["websocket_status"])
                if "no_native_models" in data:
                    fake.no_native_models = set(data["no_native_models"])
                if "prompt_cache" in data:
                    if not isinstance(data["prompt_cache"], bool):
                        raise ValueError("prompt_cache must be true or false")
                    fake.prompt_cache = data["prompt_cache"]
                out = {
                    "ok": True,
                    "stream_delay": fake.stream_delay,
                    "first_delay": fake.first_delay,
                    "websocket_status": fake.websocket_status,
                    "prompt_cache": fake.prompt_cache,
                    "no_native_models": sorted(fake.no_native_models),
                }
            else:
                status, out = 404, {"ok": False, "error": f"no control endpoint {self.command} {path}"}
        except (ValueError, TypeError, KeyError) as exc:
            status, out = 400, {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        self._send_json(None, JsonResponse(status, out))


__all__ = ["FakeProvider", "RecordedRequest"]
