"""Keeps credentials out of everything the proxy prints: the engine's logs, mitmproxy's own log
lines, and mitmdump's flow listing (URLs with ``?key=``, headers in ``--flow-detail``)."""

from __future__ import annotations

import logging
from typing import Any

from loguru import logger
from mitmproxy import ctx

from tooldisco.core.redact import RedactingFilter, redact_printer

log = logging.getLogger("tool_discovery")


def _to_logging(message: Any) -> None:
    """Engine logs (loguru) go to the logging module, which is what mitmproxy prints,
    traceback included when there is one."""
    record = message.record
    level = logging.getLevelName(record["level"].name)
    exc = record["exception"]
    exc_info = (exc.type, exc.value, exc.traceback) if exc and exc.type else None
    log.log(level if isinstance(level, int) else logging.INFO, record["message"], exc_info=exc_info)


class Redaction:
    name = "tooldisco_redaction"

    def __init__(self) -> None:
        self._sink: int | None = None
        self._filter = RedactingFilter()

    def load(self, loader) -> None:
        if self._sink is None:
            try:
                logger.remove(0)  # loguru's own stderr sink would print everything twice
            except ValueError:
                pass
            # diagnose=False: loguru would otherwise print local variables (credentials) in tracebacks.
            self._sink = logger.add(_to_logging, level="DEBUG", format="{message}", diagnose=False, backtrace=False)
        for handler in logging.getLogger().handlers:  # mitmproxy's own output, too
            if self._filter not in handler.filters:
                handler.addFilter(self._filter)

    def running(self) -> None:
        redact_printer(ctx.master.addons.get("dumper"))  # mitmdump's flow listing bypasses logging

    def done(self) -> None:
        """A script reload builds a new instance: its sink replaces this one, no line printed twice."""
        if self._sink is not None:
            logger.remove(self._sink)
            self._sink = None
