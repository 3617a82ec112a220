"""The usage of answers the proxy does not otherwise read: a request that went upstream as the
client sent it (nothing to defer, a client that defers by itself, passthrough) still counts
what it cost, in the provider's own numbers, before its record is written.

Why a tap and not a parse: a stream passes to the client unbuffered, so its bytes are read as
they pass (``apis.usage_scan``: only the events that carry usage are parsed, and none is held);
a JSON answer is read once it is whole. Nothing the client gets is changed or delayed, and
whatever goes wrong here only loses that turn's usage.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Any

from loguru import logger
from mitmproxy import http

from tooldisco.apis.usage_scan import UsageScan
from tooldisco.core import bodies
from tooldisco.engine.accounting import Tally
from tooldisco.glue import metadata
from tooldisco.glue.options import Options

# How much of a compressed answer is inflated to be read: past it, its usage goes unread.
MAX_INFLATED = 64 * 1024 * 1024


class UsageTap:
    """Reads a passed-through answer's usage and closes its record."""

    name = "tooldisco_usage"

    def __init__(self, options: Options) -> None:
        self._options = options

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        meta = metadata.of(flow)
        passed = meta.passed if meta is not None else None
        if passed is None or flow.response is None or not flow.response.stream:
            return  # a whole answer is read in ``response``
        try:
            passed.scan = UsageScan(passed.adapter, list(flow.response.headers.items(multi=True)))
            inflate = _inflater(flow.response.headers.get("content-encoding", ""))
            flow.response.stream = _tap(flow.response.stream, passed.scan, inflate)
        except Exception:
            logger.opt(exception=True).debug("usage tap not set")

    async def response(self, flow: http.HTTPFlow) -> None:
        meta = metadata.of(flow)
        passed = meta.passed if meta is not None else None
        if passed is None or flow.response is None:
            return
        meta.passed = None
        usage = None
        try:
            if passed.scan is not None:
                usage = passed.scan.usage()
            elif flow.response.status_code == 200 and (raw := flow.response.raw_content) is not None:
                scan = UsageScan(passed.adapter, list(flow.response.headers.items(multi=True)))
                engine = self._options.engine
                cap = engine.config.max_body_bytes if engine else MAX_INFLATED
                # Decoded within the cap (``core.bodies``), off the event loop when it is encoded:
                # mitmproxy's ``get_content`` takes no cap.
                coding = flow.response.headers.get("content-encoding")
                body = await asyncio.to_thread(bodies.decode, raw, coding, cap) if coding else \
                    bodies.decode(raw, coding, cap)
                scan.feed(body)
                usage = scan.usage()
        except Exception:
            logger.opt(exception=True).debug("usage of a passed-through answer not read")
        self._close(passed, flow.response.status_code, usage)

    def error(self, flow: http.HTTPFlow) -> None:
        meta = metadata.of(flow)
        passed = meta.passed if meta is not None else None
        if passed is None:
            return
        meta.passed = None
        self._close(passed, flow.response.status_code if flow.response else None, None)

    def _close(self, passed: metadata.Passed, status: int | None, usage: Any) -> None:
        engine = self._options.engine
        if engine is None:
            return
        tally = Tally(passed.record)
        if status is not None:
            tally.answered(status, usage)
        engine.close_record(passed.record, tally)


def _tap(stream: Any, scan: UsageScan, inflate: Callable[[bytes], bytes] | None) -> Callable[[bytes], Any]:
    """A stream callable that reads each chunk and passes it on as ``stream`` would (``True``:
    as it came; a callable of another addon: through it)."""
    inner = stream if callable(stream) else None
    broken = False

    def tap(chunk: bytes) -> Any:
        nonlocal broken
        if not broken:
            try:
                scan.feed(inflate(chunk) if inflate is not None and chunk else chunk)
            except Exception:
                broken = True  # this answer's usage goes unread; its bytes go on
        return inner(chunk) if inner is not None else chunk

    return tap


def _inflater(encoding: str) -> Callable[[bytes], bytes] | None:
    """A streaming decoder for a compressed answer's chunks (gzip, deflate, br, zstd), bounded
    to ``MAX_INFLATED`` in all; None for an identity one."""
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        return None
    if coding in ("gzip", "x-gzip", "deflate"):
        inflater: Any = zlib.decompressobj(zlib.MAX_WBITS | (16 if "gzip" in coding else 0))
        step = inflater.decompress
    elif coding == "br":
        import brotli

        step = brotli.Decompressor().process
    elif coding == "zstd":
        import zstandard

        step = zstandard.ZstdDecompressor().decompressobj().decompress
    else:
        raise ValueError(f"unknown content-encoding {encoding!r}")
    total = 0

    def inflate(chunk: bytes) -> bytes:
        nonlocal total
        out = step(chunk)
        total += len(out)
        if total > MAX_INFLATED:
            raise ValueError("inflated past the bound")
        return out

    return inflate
