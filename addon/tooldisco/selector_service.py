"""A reference tool selector: the backend that the ``api`` strategy calls.

Why: the ``api`` strategy moves ranking out of the proxy, so the proxy needs something
to call. This service implements the contract with the project's own search (hybrid by
default), so the strategy can be run end to end, and so a real backend has a working
reference for the edge cases. Stdlib HTTP only (``ThreadingHTTPServer``, HTTP/1.1
keep-alive); each catalog's index is built once, by the search package's cache.

    POST /v1/tool-discovery/search   Authorization: Bearer <key>
    {"pattern": str, "top_k": int, "always_keep": [str], "tools": [{name, description, definition?}]}
    -> 200 {"selected_names": [...]}
    GET /healthz -> 200 {"status": "ok", "backend": ...}   (no auth, for load balancers)

``top_k`` (default 5) and ``always_keep`` (default []) are optional, ``pattern`` and
``tools`` are required. ``definition`` may be in any provider's shape (Anthropic, OpenAI
Chat or Responses, Gemini, Bedrock, MCP); its parameters and ``enum`` values are
searched too. ``selected_names`` holds names from ``tools`` only, best first, at most
``top_k``.

``always_keep`` (exact names or fnmatch globs, case-sensitive) vs ``top_k``: the contract
says both "always_keep names are always included" and "respect top_k". Here top_k
wins, because the proxy caps what it injects at ``max_search_results`` anyway and
would cut the list arbitrarily. The always-keep tools present in ``tools`` (catalog
order) follow the best search hits and displace the lowest-ranked ones, but never the
best hit: with too many of them, the tail of that list is cut. They are only added to
a meaningful selection: when nothing matches the pattern the answer is ``[]`` (the
contract's "no useful match", on which the proxy fails open), as in the proxy's own
``run_query``.

Errors are ``{"error": {"type": ..., "message": ...}}``; see ``ApiError`` for the types.
"""

from __future__ import annotations

import argparse
import fnmatch
import hmac
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import urlsplit

from loguru import logger

from tooldisco.core.types import Tool
from tooldisco.apis.schema import params_of
from tooldisco.search.factory import BACKENDS, make_searcher
from tooldisco.search.base import MAX_QUERY_CHARS, QueryError, Ranking, Searcher

SEARCH_PATH = "/v1/tool-discovery/search"
HEALTH_PATH = "/healthz"
DEFAULT_BACKEND = "hybrid"
DEFAULT_TOP_K = 5
DEFAULT_API_KEY_ENV = "TOOL_DISCOVERY_API_KEY"
#: Seconds a kept-alive connection may sit idle (or a request take to arrive) before
#: its thread gives up on it.
IDLE_TIMEOUT = 60.0
_ROUTES: dict[str, tuple[str, ...]] = {SEARCH_PATH: ("POST",), HEALTH_PATH: ("GET", "HEAD")}


@dataclass(frozen=True)
class Limits:
    """Request size caps: a caller cannot make the service parse or rank without bound."""

    max_body_bytes: int = 8_000_000  # above the proxy's default api.max_request_bytes (4 MB)
    max_tools: int = 10_000
    max_pattern_chars: int = MAX_QUERY_CHARS  # the search package refuses longer queries
    max_top_k: int = 100
    max_always_keep: int = 256

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_tools", "max_pattern_chars", "max_top_k", "max_always_keep"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_pattern_chars > MAX_QUERY_CHARS:
            raise ValueError(f"max_pattern_chars cannot exceed the search limit of {MAX_QUERY_CHARS}")


class ApiError(Exception):
    """A request the service refuses, as the JSON error the client reads.

    Types: ``invalid_json``, ``invalid_request`` (body shape, Content-Length),
    ``missing_field``, ``invalid_type``, ``invalid_value``, ``duplicate_tool_name``
    (400); ``unauthorized`` (401); ``not_found`` (404); ``method_not_allowed`` (405);
    ``length_required`` (411); ``request_too_large``, ``too_many_tools`` (413);
    ``internal_error`` (500); ``http_<status>`` for what ``http.server`` itself rejects.
    """

    def __init__(self, status: int, type: str, message: str, headers: Iterable[tuple[str, str]] = ()):
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.headers = tuple(headers)

    def payload(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message}}


# --- the request ---------------------------------------------------------------------


@dataclass(frozen=True)
class SelectRequest:
    """A validated search request; ``tools`` are what the search backends read."""

    pattern: str
    top_k: int
    always_keep: tuple[str, ...]
    tools: tuple[Tool, ...]


def parse_request(data: Any, limits: Limits) -> SelectRequest:
    """Validate a decoded body; raise ``ApiError`` naming the offending field."""
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", "the body must be a JSON object")
    pattern = _field(data, "pattern", str)
    if not pattern.strip():
        raise ApiError(400, "invalid_value", "pattern is empty")
    if len(pattern) > limits.max_pattern_chars:
        raise ApiError(
            400, "invalid_value", f"pattern is {len(pattern)} characters; the limit is {limits.max_pattern_chars}"
        )
    top_k = _field(data, "top_k", int, DEFAULT_TOP_K)
    if not 1 <= top_k <= limits.max_top_k:
        raise ApiError(400, "invalid_value", f"top_k must be between 1 and {limits.max_top_k}, got {top_k}")
    always_keep = _field(data, "always_keep", list, [])
    if len(always_keep) > limits.max_always_keep:
        raise ApiError(
            400, "invalid_value", f"always_keep has {len(always_keep)} entries; the limit is {limits.max_always_keep}"
        )
    for i, entry in enumerate(always_keep):
        if not isinstance(entry, str):
            raise ApiError(400, "invalid_type", f"always_keep[{i}] must be a string")
    entries = _field(data, "tools", list)
    if len(entries) > limits.max_tools:
        raise ApiError(413, "too_many_tools", f"{len(entries)} tools; the limit is {limits.max_tools}")
    tools = tuple(tool_from_entry(entry, i) for i, entry in enumerate(entries))
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ApiError(400, "duplicate_tool_name", f"tool name {tool.name!r} appears more than once")
        seen.add(tool.name)
    return SelectRequest(pattern.strip(), top_k, tuple(always_keep), tools)


_MISSING = object()
_KIND_NAMES = {str: "a string", int: "an integer", list: "an array", dict: "an object"}


def _field(data: dict[str, Any], key: str, kind: type, default: Any = _MISSING, where: str = "") -> Any:
    """``data[key]`` checked against ``kind``; ``default`` when absent or null (if given)."""
    value = data.get(key)
    label = f"{where}{key}"
    if value is None:
        if default is _MISSING:
            raise ApiError(400, "missing_field", f"{label} is required")
        return default
    # bool is an int to Python, never to a JSON client.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ApiError(400, "invalid_type", f"{label} must be {_KIND_NAMES[kind]}")
    return value


def tool_from_entry(entry: Any, index: int) -> Tool:
    """A ``Tool`` from one ``tools[]`` entry, read from its definition where it has one.

    The given description wins; the definition's is used when it is blank (a proxy may
    send the definition alone). ``raw`` is the definition as JSON, so the searches also
    read its ``enum`` values.
    """
    where = f"tools[{index}]."
    if not isinstance(entry, dict):
        raise ApiError(400, "invalid_type", f"tools[{index}] must be an object")
    name = _field(entry, "name", str, where=where)
    if not name.strip():
        raise ApiError(400, "invalid_value", f"{where}name is empty")
    description = _field(entry, "description", str, "", where)
    definition = _field(entry, "definition", dict, None, where)
    if definition is None:
        return Tool(name, "", description)
    inner = _function_of(definition)
    if not description:
        found = inner.get("description")
        description = found if isinstance(found, str) else ""
    raw = json.dumps(definition, ensure_ascii=False, separators=(",", ":"))
    return Tool(name, raw, description, params_of(_schema_of(inner)))


def _function_of(definition: dict[str, Any]) -> dict[str, Any]:
    """The object holding description and schema: OpenAI Chat's ``function``, Bedrock's
    ``toolSpec``, or the definition itself (Anthropic, Responses, Gemini, MCP)."""
    for key in ("function", "toolSpec"):
        inner = definition.get(key)
        if isinstance(inner, dict):
            return inner
    return definition


def _schema_of(function: dict[str, Any]) -> Any:
    """The parameters' JSON schema under any provider's key."""
    for key in ("input_schema", "parameters", "parametersJsonSchema", "parameters_json_schema", "inputSchema"):
        schema = function.get(key)
        if isinstance(schema, dict):
            # Bedrock wraps it: inputSchema: {json: {...}}; MCP's inputSchema is the schema.
            wrapped = schema.get("json")
            return wrapped if key == "inputSchema" and isinstance(wrapped, dict) else schema
    return None


# --- selection -----------------------------------------------------------------------


class Selector:
    """Answers requests with one search backend (thread-safe, as backends are)."""

    def __init__(self, searcher: Searcher):
        self.searcher = searcher

    def select(self, request: SelectRequest) -> Ranking:
        """The selected names, and which backend ranked them (hybrid may hand over to BM25)."""
        ranking = self.searcher.rank(request.pattern, request.tools, request.top_k)
        names = with_always_keep(ranking.names[: request.top_k], request.tools, request.always_keep, request.top_k)
        return Ranking(names, ranking.backend, ranking.fallback)

    def warm_up(self) -> Ranking:
        """One search on a tiny catalog, so the embedding model loads before the first
        request rather than inside the proxy's timeout."""
        tools = (Tool("read_file", "", "Read the contents of a file."),)
        return self.searcher.rank("read a file", tools, 1)


def with_always_keep(hits: list[str], tools: Sequence[Tool], patterns: Sequence[str], top_k: int) -> list[str]:
    """``hits`` plus the always-keep tools, at most ``top_k`` (see the module doc)."""
    if not hits or not patterns:
        return hits
    exact = set(patterns)
    globs = [p for p in patterns if any(c in p for c in "*?[")]
    # One compiled alternation: a catalog of thousands times many globs stays cheap.
    glob = re.compile("|".join(fnmatch.translate(p) for p in globs)) if globs else None
    present = set(hits)
    kept = [
        t.name
        for t in tools
        if t.name not in present and (t.name in exact or (glob is not None and glob.match(t.name)))
    ]
    room = max(1, top_k - len(kept))
    return (hits[:room] + kept)[:top_k]


# --- HTTP ----------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # an idle keep-alive connection must not block shutdown

    def __init__(self, address: tuple[str, int], selector: Selector, limits: Limits, api_key: str | None):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.selector = selector
        self.limits = limits
        self.api_key = api_key.encode("utf-8") if api_key else None
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every response has a Content-Length
    server_version = "tooldisco-selector"
    timeout = IDLE_TIMEOUT
    # Headers and body are two writes: with Nagle, the body would wait for the client's
    # delayed ACK of the headers, about 40 ms on every kept-alive request.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def do_POST(self) -> None:
        self._dispatch()

    do_GET = do_HEAD = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_POST

    def _dispatch(self) -> None:
        self._body_read = False
        started = time.perf_counter()
        try:
            status, payload, headers = self._route()
        except ApiError as exc:
            status, payload, headers = exc.status, exc.payload(), exc.headers
            logger.info("{} {} -> {} {}", self.command, self.path, status, exc.type)
        except Exception:  # a bug must answer 500, not drop the connection
            logger.exception("selector failed on {} {}", self.command, self.path)
            status, payload, headers = 500, ApiError(500, "internal_error", "the selector failed").payload(), ()
        self._send(status, payload, headers)
        logger.debug("{} {} -> {} in {:.1f} ms", self.command, self.path, status, (time.perf_counter() - started) * 1e3)

    def _route(self) -> tuple[int, dict[str, Any], tuple[tuple[str, str], ...]]:
        path = urlsplit(self.path).path
        methods = _ROUTES.get(path)
        if methods is None:
            raise ApiError(404, "not_found", f"no such path {path!r}; the search is POST {SEARCH_PATH}")
        if self.command not in methods:
            raise ApiError(
                405, "method_not_allowed", f"{path} accepts {', '.join(methods)}", [("Allow", ", ".join(methods))]
            )
        selector = self.server.selector
        if path == HEALTH_PATH:
            return 200, {"status": "ok", "backend": selector.searcher.name}, ()
        self._authenticate()
        request = parse_request(self._read_json(), self.server.limits)
        started = time.perf_counter()
        try:
            ranking = selector.select(request)
        except QueryError as exc:
            raise ApiError(400, "invalid_value", f"pattern: {exc}") from None
        logger.info(
            "selected {} of {} tools (top_k {}) with {} in {:.1f} ms{}",
            len(ranking.names),
            len(request.tools),
            request.top_k,
            ranking.backend,
            (time.perf_counter() - started) * 1e3,
            f" ({ranking.fallback})" if ranking.fallback else "",
        )
        return 200, {"selected_names": ranking.names}, (("X-Selector-Backend", ranking.backend),)

    def _authenticate(self) -> None:
        """Bearer token, compared in constant time; the key itself is never logged."""
        key = self.server.api_key
        if key is None:
            return
        scheme, _, token = (self.headers.get("Authorization") or "").strip().partition(" ")
        challenge = [("WWW-Authenticate", 'Bearer realm="tool-discovery"')]
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer <key>)", challenge)
        # Header text is the wire bytes decoded as latin-1; back to those bytes to compare.
        if not hmac.compare_digest(token.strip().encode("latin-1"), key):
            raise ApiError(401, "unauthorized", "invalid bearer token", challenge)

    def _read_json(self) -> Any:
        if "Transfer-Encoding" in self.headers:
            raise ApiError(411, "length_required", "send the body with Content-Length; chunked encoding is not supported")
        declared = self.headers.get("Content-Length")
        if declared is None:
            raise ApiError(411, "length_required", "a Content-Length header is required")
        try:
            length = int(declared)
            if length < 0:
                raise ValueError
        except ValueError:
            raise ApiError(400, "invalid_request", f"invalid Content-Length {declared!r}") from None
        limit = self.server.limits.max_body_bytes
        if length > limit:
            raise ApiError(413, "request_too_large", f"the body is {length} bytes; the limit is {limit}")
        body = self.rfile.read(length)
        self._body_read = True
        if len(body) < length:
            self.close_connection = True
            raise ApiError(400, "invalid_request", "the body ended before Content-Length bytes")
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None

    def _send(self, status: int, payload: dict[str, Any], headers: Iterable[tuple[str, str]] = ()) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        # A body left unread would be parsed as the next request: close instead.
        close = self.close_connection or (self._has_body() and not getattr(self, "_body_read", False))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _has_body(self) -> bool:
        headers = getattr(self, "headers", None)
        if headers is None:
            return False
        return "Transfer-Encoding" in headers or headers.get("Content-Length", "0").strip() not in ("", "0")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What ``http.server`` rejects itself (bad request line, unknown method, huge
        headers) also answers in the JSON error shape, and closes."""
        self.close_connection = True
        self._send(code, ApiError(code, f"http_{code}", message or self.responses.get(code, ("",))[0]).payload())

    def version_string(self) -> str:
        return self.server_version  # no Python version in the Server header

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("{} {}", self.address_string(), format % args)


# --- running it ----------------------------------------------------------------------


class SelectorServer:
    """The service on a background thread: ``with SelectorServer(port=0) as s: s.url``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        backend: str = DEFAULT_BACKEND,
        api_key: str | None = None,
        cache_dir: str | None = None,
        limits: Limits = Limits(),
        searcher: Searcher | None = None,
    ):
        self._selector = Selector(searcher or make_searcher(backend, cache_dir=cache_dir))
        self._address = (host, port)
        self._limits = limits
        self._api_key = api_key or None
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, warm_up: bool = True) -> Self:
        if self._api_key is None:
            logger.warning("no API key configured: the selector accepts unauthenticated requests")
        if warm_up:
            ranking = self._selector.warm_up()
            if ranking.fallback:
                logger.warning(
                    "backend {} answers with {} ({})", self._selector.searcher.name, ranking.backend, ranking.fallback
                )
        self._httpd = _HTTPServer(self._address, self._selector, self._limits, self._api_key)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="selector", daemon=True
        )
        self._thread.start()
        logger.info("tool selector on {} (backend {})", self.search_url, self._selector.searcher.name)
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self._httpd = self._thread = None

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the selector is not running")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8765``."""
        host = self._address[0]
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def search_url(self) -> str:
        """What the proxy's ``api.endpoint`` should be."""
        return self.url + SEARCH_PATH

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    defaults = Limits()
    parser = argparse.ArgumentParser(
        prog="python -m tooldisco.selector_service",
        description=f"Reference tool selector for the api strategy: POST {SEARCH_PATH}.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND)
    parser.add_argument("--cache-dir", help="disk cache of tool embeddings (hybrid), kept across restarts")
    parser.add_argument(
        "--api-key-env",
        default=DEFAULT_API_KEY_ENV,
        metavar="NAME",
        help="environment variable holding the bearer key; unset or empty: no auth (default %(default)s)",
    )
    parser.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes)
    parser.add_argument("--max-tools", type=int, default=defaults.max_tools)
    parser.add_argument("--max-top-k", type=int, default=defaults.max_top_k)
    parser.add_argument("--max-pattern-chars", type=int, default=defaults.max_pattern_chars)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    try:
        limits = Limits(
            max_body_bytes=args.max_body_bytes,
            max_tools=args.max_tools,
            max_top_k=args.max_top_k,
            max_pattern_chars=args.max_pattern_chars,
        )
    except ValueError as exc:
        parser.error(str(exc))
    logger.remove()
    logger.add(sys.stderr, level=args.log_level.upper())

    server = SelectorServer(
        args.host,
        args.port,
        backend=args.backend,
        api_key=os.environ.get(args.api_key_env),
        cache_dir=args.cache_dir,
        limits=limits,
    )
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop on TERM as on Ctrl-C
    with server:
        print(f"tool selector listening on {server.search_url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            logger.info("stopping")
    return 0


if __name__ == "__main__":
    sys.exit(main())
