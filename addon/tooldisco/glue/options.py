"""The ``tool_discovery_config`` option, parsed once into the engine every other addon reads."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from mitmproxy import contentviews, ctx, exceptions

from tooldisco.config import ConfigError, load_config
from tooldisco.core import allocator
from tooldisco.engine.engine import Engine
from tooldisco.glue.background import Background
from tooldisco.watch.view import ToolsView

# Inside the package: an installed wheel carries its configs (package data).
DEFAULT_CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "tool_discovery.yaml")
log = logging.getLogger("tool_discovery")


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
        loader.add_option("tool_discovery_config", Optional[str], DEFAULT_CONFIG,
                          "Path of the tool discovery YAML config.")
        contentviews.add(ToolsView)  # mitmweb and the console: a body's tools and tool calls
        allocator.return_large_blocks()  # a huge body's memory goes back to the OS with its flow
        allocator.trim_periodically()  # and the heaps' free pages every few seconds

    def configure(self, updated: set[str]) -> None:
        if "tool_discovery_config" not in updated:
            return
        path = ctx.options.tool_discovery_config or DEFAULT_CONFIG
        try:
            config = load_config(path)
        except ConfigError as e:
            raise exceptions.OptionsError(f"tool_discovery_config: {e}") from None
        for warning in config.warnings:
            log.warning(warning)
        self._close()
        self.engine = Engine(config)
        self.config_path = str(path)
        td = config.tool_discovery
        state = "on" if td.enabled else f"off (set pipes.tool_discovery.enabled: true in {path})"
        log.info("tool discovery: %s, strategy %s, hosts %s", state, td.strategy.value, ", ".join(config.hosts))

    def done(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.engine:
            self._background.spawn(self.engine.selector.aclose())
            self.engine.close()
