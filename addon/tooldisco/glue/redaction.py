"""Keeps credentials out of everything the proxy prints: the engine's logs, mitmproxy's own log
lines, and mitmdump's flow listing (URLs with ``?key=``, headers in ``--flow-detail``)."""

from __future__ import annotations

import logging
import threading
import traceback
from typing import Any

from loguru import logger
from mitmproxy import ctx

from tooldisco.core.redact import REDACTED, RedactingFilter, redact, redact_printer

log = logging.getLogger("tool_discovery")  # what mitmproxy prints: the one sink below feeds it


def _to_logging(message: Any) -> None:
    """The one sink of the engine's and the addons' logs (loguru): each record, redacted here once
    (its traceback included, as text), goes to the logging module, which is what mitmproxy
    prints; mitmproxy's handlers then know it is redacted (``redact.REDACTED``) and leave it."""
    record = message.record
    text = redact(record["message"])
    exc = record["exception"]
    if exc is not None and exc.type is not None:
        text += "\n" + redact("".join(traceback.format_exception(exc.type, exc.value, exc.traceback))).rstrip()
    log.log(record["level"].no, "%s", text, extra={REDACTED: True})


class Sink:
    """The process's one sink of the engine's and the addons' logs, shared by whoever needs it (the
    addon, a reloaded addon, a test) and removed with its last holder: two would print each line
    twice."""

    _lock = threading.Lock()
    _id: int | None = None
    _holders = 0

    @classmethod
    def hold(cls) -> None:
        with cls._lock:
            if cls._id is None:
                try:
                    logger.remove(0)  # loguru's own stderr sink would print everything twice
                except ValueError:
                    pass
                # diagnose=False: loguru would otherwise print local variables (credentials) in tracebacks.
                cls._id = logger.add(_to_logging, level="DEBUG", format="{message}", diagnose=False, backtrace=False)
            cls._holders += 1

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            cls._holders = max(0, cls._holders - 1)
            if not cls._holders and cls._id is not None:
                logger.remove(cls._id)
                cls._id = None


class Redaction:
    name = "tooldisco_redaction"

    def __init__(self) -> None:
        self._holding = False
        self._filter = RedactingFilter()

    def load(self, loader) -> None:
        if not self._holding:
            Sink.hold()
            self._holding = True
        for handler in logging.getLogger().handlers:  # mitmproxy's own output, too
            if self._filter not in handler.filters:
                handler.addFilter(self._filter)

    def running(self) -> None:
        redact_printer(ctx.master.addons.get("dumper"))  # mitmdump's flow listing bypasses logging

    def done(self) -> None:
        """A script reload builds a new instance, which holds the one sink in its turn."""
        if self._holding:
            Sink.release()
            self._holding = False
