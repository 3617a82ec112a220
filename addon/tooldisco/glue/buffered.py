"""Buffered flows: mitmproxy holds the whole answer, and the response hook runs the loop over
it (searches answered, re-forwarded) before the client gets the final one."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from loguru import logger
from mitmproxy import http
from mitmproxy.connection import ConnectionState

from tooldisco.core.answers import Answer
from tooldisco.glue import messages, metadata
from tooldisco.glue.options import Options
from tooldisco.glue.upstream import Upstream
from tooldisco.watch.watch import Watcher

CLIENT_POLL_S = 0.5  # how often a buffered flow's phantom loop checks that its client still waits
T = TypeVar("T")


class Buffered:
    """The last of the glue's hooks on a flow: it closes the flow's record when the flow ends."""

    name = "tooldisco_buffered"

    def __init__(self, options: Options, upstream: Upstream, watch: Watcher) -> None:
        self._options, self._upstream, self._watch = options, upstream, watch

    async def response(self, flow: http.HTTPFlow) -> None:
        try:
            await self._complete(flow)
        finally:
            metadata.close(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        meta, engine = metadata.of(flow), self._options.engine
        metadata.close(flow)
        held = meta.buffered if meta is not None else None
        if held is not None and engine is not None:
            record = held.context.record
            if record.outcome in ("", "pending"):  # "pending": the loop never ran to set one
                record.outcome = f"flow_error: {flow.error.msg if flow.error else ''}"[:200]
            engine.telemetry.submit(record)

    async def _complete(self, flow: http.HTTPFlow) -> None:
        meta, engine = metadata.of(flow), self._options.engine
        held = meta.buffered if meta is not None else None
        if held is None or engine is None or flow.response is None:
            return
        meta.held = None
        if flow.response.raw_content is None:  # streamed after all (stream_large_bodies)
            return
        body = await messages.decoded(flow.response, engine.config.max_body_bytes, "phantom loop skipped")
        if body is None:
            return
        request, headers = flow.request, list(flow.request.headers.items(multi=True))
        first = Answer.whole(flow.response.status_code, body, list(flow.response.headers.items(multi=True)))
        first = self._watch.tee(flow.id, request.url, headers, request.content or b"", request.timestamp_start,
                                first, whole=body)
        opener = self._upstream.opener(request.url, headers, held.aws, flow.id)
        reply = await while_client_waits(flow, engine.runner(held.context).buffered(first, opener))
        if reply is None:  # the client went away: nothing to answer, the re-forward is cancelled
            if flow.killable:
                flow.kill()
            return
        response = flow.response
        if (reply.body is body or reply.body == body) and reply.status == response.status_code:
            return  # the upstream's answer as it came (no search, nothing echoed): its bytes pass untouched
        if response.status_code != reply.status:  # HTTP/1's reason phrase goes with the status
            response.reason = http.status_codes.RESPONSES.get(reply.status, "")
        response.status_code = reply.status
        response.headers = messages.headers([(k, v) for k, v in reply.headers if k.lower() != "content-encoding"])
        response.content = reply.body


async def while_client_waits(flow: http.HTTPFlow, work: Coroutine[Any, Any, T]) -> T | None:
    """``work``'s result, or None once the client closed its connection: ``work`` (the loop's
    re-forwards) is then cancelled, which closes its upstream request, so no generation runs
    for a client that left.

    Why a poll of the connection: while a flow's response hook runs, mitmproxy holds that
    flow's own events (its ``error`` hook comes only after the hook returned), but it marks the
    client connection unreadable as soon as the client closes it; a client that sent its FIN
    wants no more data (mitmproxy's HTTP/1 layer ends the flow on it too). An HTTP/2 stream reset
    leaves the connection open and is not seen here."""
    task = asyncio.ensure_future(work)
    if task.done():  # run eagerly to its end (an answer that needs no round): nothing to wait for
        return task.result()
    try:
        while True:
            done, _ = await asyncio.wait([task], timeout=CLIENT_POLL_S)
            if done:
                return task.result()
            if not flow.client_conn.state & ConnectionState.CAN_READ:
                logger.info("client closed its connection; cancelling the phantom loop of {}", flow.request.pretty_url)
                task.cancel()
                await asyncio.wait([task])
                return None
    finally:
        task.cancel()  # the hook itself cancelled (shutdown): the work goes with it
