"""The ``tool_discovery_config`` option, parsed once into the engine every other addon reads."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Optional
from urllib.parse import urlsplit

from loguru import logger
from mitmproxy import contentviews, ctx, exceptions

from tooldisco import userconfig
from tooldisco.config import Config, ConfigError, MetricsSettings, format_listen, load_config, parse_listen
from tooldisco.core import allocator
from tooldisco.engine.engine import Engine
from tooldisco.glue.background import Background
from tooldisco.watch.view import ToolsView

# Inside the package: an installed wheel carries its configs (package data). Used when neither the
# option, $TOOLDISCO_CONFIG nor the user's own config (``tooldisco init``) names another: ``userconfig``.
DEFAULT_CONFIG = str(userconfig.SHIPPED_DEFAULT)


def startup(config: Config, path: str) -> str:
    """The startup summary: whether it is on, the config file, strategy, deferral modes, search,
    hosts, session store and telemetry file. Names no credential: a Redis or selector URL is
    shown as its host and port only."""
    td = config.tool_discovery
    state = "on" if td.enabled else "off (set pipes.tool_discovery.enabled: true)"
    parts = [f"tool discovery: {state}", f"config {path}", f"strategy {td.strategy.value}"]
    if td.strategy.defers:
        native = [api for api in ("anthropic", "responses", "bedrock") if getattr(td.native, api)]
        modes = [f"native on {', '.join(native)} for the models in tool_discovery.native"] if native else []
        modes += [f"call-through on {', '.join(td.defer.call_through)}"] if td.defer.call_through else []
        parts.append("deferral " + "; ".join([*modes, "classic otherwise"]))
        parts.append(f"search {'api at ' + _host(td.api.endpoint) if td.strategy.remote else td.search.backend}")
    parts.append(f"hosts {', '.join(config.hosts)}")
    store = config.sessions
    parts.append(f"sessions redis at {_host(store.redis.url)}" if store.backend == "redis"
                 else f"sessions {store.directory()}")
    parts.append(f"telemetry {os.path.abspath(config.telemetry.path)}" if config.telemetry.enabled else "telemetry off")
    if (address := config.metrics.address) is not None:
        parts.append(f"metrics on {config.metrics.listen}" + (" (a free port)" if address[1] == 0 else ""))
    return " · ".join(parts)


def _host(url: str | None) -> str:
    """Host and port of a URL, without the credentials or path it may hold."""
    parts = urlsplit(url or "")
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.hostname or '?'}{port}"


class Options:
    """Declares the option in ``load`` and builds the engine in ``configure``: a bad config is an
    ``OptionsError`` naming the key, so mitmdump exits saying what to fix. ``engine`` is None
    until then; the other addons then let every flow pass."""

    name = "tooldisco_options"

    def __init__(self, background: Background) -> None:
        self.engine: Engine | None = None
        self.config_path = DEFAULT_CONFIG  # named in warnings that ask for a config change
        self._background = background

    def load(self, loader) -> None:
        loader.add_option("tool_discovery_config", Optional[str], None,
                          "Path of the tool discovery YAML config, or a shipped config's name (relevance, "
                          "tool-search, api, passthrough). Default: $TOOLDISCO_CONFIG, else your own "
                          "(tooldisco init writes it), else the shipped tool_discovery.yaml.")
        loader.add_option("tool_discovery_metrics", Optional[str], None,
                          "Serve Prometheus metrics on HOST:PORT (port 0: any free port), in place of the "
                          "config's metrics.listen.")
        contentviews.add(ToolsView)  # mitmweb and the console: a body's tools and tool calls
        allocator.return_large_blocks()  # a huge body's memory goes back to the OS with its flow
        allocator.trim_periodically()  # and the heaps' free pages every few seconds
        allocator.collect_less_often()  # a large body's decoding sets off no dozens of collections

    def configure(self, updated: set[str]) -> None:
        if not updated & {"tool_discovery_config", "tool_discovery_metrics"}:
            return
        try:
            found = userconfig.find(ctx.options.tool_discovery_config, os.environ, old_env=False,
                                    flag="tool_discovery_config")
        except userconfig.NotFound as e:
            raise exceptions.OptionsError(f"{e}; {e.fix}") from None
        path = found.path
        try:
            config = load_config(path)
        except ConfigError as e:
            raise exceptions.OptionsError(f"tool_discovery_config: {e}") from None
        if listen := ctx.options.tool_discovery_metrics:  # tooldisco run --metrics
            try:
                address = parse_listen(listen, "tool_discovery_metrics")
            except ConfigError as e:
                raise exceptions.OptionsError(str(e)) from None
            config = replace(config, metrics=MetricsSettings(format_listen(*address)))
        for warning in config.warnings:
            logger.warning(warning)
        self._close()
        self.engine = Engine(config)
        self.config_path = str(path)
        logger.info("{}", startup(config, str(path) if found.source == "option" else f"{path} ({found.why})"))

    @property
    def edit_hint(self) -> str:
        """Where a warning asks for a config change: the config in use, or for a shipped one
        (inside the installed package: a reinstall replaces it) a config of the user's own."""
        return userconfig.edit_hint(self.config_path)

    def done(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.engine:
            self._background.spawn(self.engine.selector.aclose())
            self.engine.close()
