"""Serves the engine's Prometheus metrics (``engine.metrics``) over HTTP on ``metrics.listen``.

prometheus_client's own server (``start_http_server``) answers scrapes on a thread of its own,
so a scrape never waits for the event loop and the event loop never waits for a scrape. It
serves whichever engine is current: a config reload that keeps ``metrics.listen`` keeps the
server (the counters start again with the new engine, which Prometheus reads as a reset); one
that changes it moves the server, off the event loop (the old server takes up to half a second
to stop). Failing open: an address that cannot be bound (a port in use) is one warning, and the
proxy runs on without metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric

from loguru import logger
from tooldisco.config import format_listen, parse_listen

if TYPE_CHECKING:
    from tooldisco.glue.options import Options



class _Current:
    """A collector that yields the current engine's metrics (none while there is no engine or
    its config serves none)."""

    def __init__(self, metrics: Callable[[], Any]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics()
        if metrics is not None:
            yield from metrics.registry.collect()


class MetricsServer:
    name = "tooldisco_metrics"

    def __init__(self, options: Options) -> None:
        self._options = options
        self.registry = CollectorRegistry()  # what the server serves: the current engine's registry
        self.registry.register(_Current(self._engine_metrics))
        self._running = False
        self._wanted: str | None = None  # the listen address asked for (None: off)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one start or stop at a time (a move runs on a thread of its own)
        self.url: str | None = None  # where the metrics are served (the real port when 0 was asked)

    def _engine_metrics(self) -> Any:
        engine = self._options.engine
        return engine.metrics if engine is not None else None

    def running(self) -> None:
        self._running = True
        self._sync()

    def configure(self, updated: set[str]) -> None:
        if self._running:  # the first start waits for running(): every addon is configured by then
            self._sync()

    def done(self) -> None:
        self._wanted = None
        self._apply(None)

    def _sync(self) -> None:
        """Start, stop or move the server to match the current engine's ``metrics.listen``."""
        metrics, engine = self._engine_metrics(), self._options.engine
        wanted = engine.config.metrics.listen if metrics is not None else None
        if wanted == self._wanted:
            return
        self._wanted = wanted
        if self._server is None:  # nothing to stop: binding is quick
            self._apply(wanted)
        else:
            threading.Thread(target=self._apply, args=(wanted,), name="tooldisco-metrics-move", daemon=True).start()

    def _apply(self, listen: str | None) -> None:
        with self._lock:
            if self._wanted != listen:  # asked for something else meanwhile: that call applies it
                return
            self._stop()
            if listen is not None:
                self._start(listen)

    def _start(self, listen: str) -> None:
        host, port = parse_listen(listen, "metrics.listen")
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as e:
            logger.warning("tool discovery: metrics not served: cannot listen on {} ({}); the proxy runs on "
                           "without them", listen, e.strerror or e)
            return
        bound = self._server.server_address
        self.url = f"http://{format_listen(host, bound[1])}/metrics"
        logger.info("tool discovery: metrics at {}", self.url)

    def _stop(self) -> None:
        server, thread, self._server, self._thread, self.url = self._server, self._thread, None, None, None
        if server is not None:
            server.shutdown()  # waits for the serving thread's poll (at most half a second)
            server.server_close()
            if thread is not None:
                thread.join(timeout=5)
