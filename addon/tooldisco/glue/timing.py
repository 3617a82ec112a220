"""The upstream time of the answers mitmproxy itself carried, read from the flow's timestamps.

Why here: the runner times every upstream round it makes (a live flow's all, a buffered flow's
search rounds), but two answers come through mitmproxy before any runner exists: a request
that went upstream as the client sent it (its record closed by ``glue.usage``), and a buffered
flow's first round (the loop runs over it in ``glue.buffered``). Without this their upstream
time read 0 ms while the upstream took its time.

mitmproxy stamps when the client's request was whole (before the request hooks, planning
included, ran) and when the answer's last byte came. The request went upstream once planning
was over: upstream time runs from the later of the two (planning's end is the record's
``time`` plus ``processing_ms``) to the answer's last byte. Nothing here touches the flow.
"""

from __future__ import annotations

import time

from loguru import logger
from mitmproxy import http

from tooldisco.engine.telemetry import Record
from tooldisco.glue import metadata



class Timing:
    """Before the record is closed (``UsageTap``) or the loop runs (``Buffered``): the first
    round's upstream time into the record, and a passed-through turn's total."""

    name = "tooldisco_timing"

    def response(self, flow: http.HTTPFlow) -> None:
        self._stamp(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._stamp(flow)

    @staticmethod
    def _stamp(flow: http.HTTPFlow) -> None:
        meta = metadata.of(flow)
        if meta is None:
            return
        try:
            if (held := meta.buffered) is not None:  # the runner adds its own rounds and the total
                held.context.record.upstream_ms = upstream_ms(flow, held.context.record)
                if flow.error is not None:  # the loop will not run: the record is closed as it is
                    held.context.record.total_ms = total_ms(held.context.record, flow)
            elif meta.passed is not None:
                record = meta.passed.record
                record.upstream_ms = upstream_ms(flow, record)
                record.total_ms = total_ms(record, flow)
        except Exception:  # a figure is lost, never a flow
            logger.opt(exception=True).debug("upstream time of flow {} not read", flow.id)


def upstream_ms(flow: http.HTTPFlow, record: Record) -> float:
    """From the request going upstream (after planning) to the answer's last byte; 0 without an answer."""
    response = flow.response
    if response is None or response.timestamp_start is None:
        return 0.0
    planned = record.time + record.processing_ms / 1000
    sent = max(flow.request.timestamp_end or flow.request.timestamp_start, planned)
    end = response.timestamp_end or time.time()
    return round(max(end - sent, 0.0) * 1000, 3)


def total_ms(record: Record, flow: http.HTTPFlow) -> float:
    """From the start of planning to the answer's last byte (or now, when the flow failed)."""
    end = flow.response.timestamp_end if flow.response is not None and flow.error is None else None
    return round(max((end or time.time()) - record.time, 0.0) * 1000, 3)
