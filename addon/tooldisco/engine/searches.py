"""Answering one phantom search call: locally, or (api strategy) with the selector service.

Why a service: the loop runner only needs "this call in, a result and tools out". Which
backend answers, the selector's fail-open rule (no usable selection: every deferred tool is
loaded), the wall-clock budget and the telemetry of each search live here once, off the
event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from loguru import logger

from tooldisco.config import ToolDiscovery
from tooldisco.engine.loop import Found
from tooldisco.core.types import ToolCall, ToolResult
from tooldisco.engine.selector_client import FixedRanking, SelectorClient
from tooldisco.engine.telemetry import SearchRecord
from tooldisco.search.base import MAX_QUERY_CHARS, WARM_UP_QUERY, Catalog, Searcher
from tooldisco.search.budget import run_query_async
from tooldisco.search.factory import with_priors
from tooldisco.search.phantom_query import LIST_ALL, SELECT_PREFIX

if TYPE_CHECKING:
    from tooldisco.engine.planner import FlowContext


MAX_WARMED = 256  # catalogs whose warm-up is remembered; a forgotten one is warmed again


class SearchService:
    def __init__(self, config: ToolDiscovery, searcher: Searcher, selector: SelectorClient) -> None:
        self.config = config
        self.searcher = searcher
        self.selector = selector
        # catalog -> its warm-up, running or done: every search awaits it, none repeats it.
        self._warming: dict[str, asyncio.Future[None]] = {}

    async def answer(self, ctx: FlowContext, call: ToolCall) -> Found:
        """The result the model reads for ``call`` and the tools to load; never raises."""
        td = self.config
        t0 = time.perf_counter()
        catalog = ctx.searchable
        record = SearchRecord(query=None, matched=[], backend=None, deferred=len(catalog))
        ctx.record.searches.append(record)
        # Every local answer ranks with what the tenant's traffic taught (the selector's are its own).
        learned = with_priors(self.searcher, ctx.priors)
        searcher: Searcher = learned
        query = plain_query(call.arguments)
        try:
            local = not td.strategy.remote
            if not local:
                searcher = FixedRanking([])  # select:, listing and bad arguments never need ranking
                if query is not None:
                    sel = await self.selector.select(query, td.max_search_results, td.always_keep, catalog)
                    record.api_status, record.api_ms, record.selected = sel.status, sel.ms, sel.raw
                    if sel.fallback and ctx.mode.loads_tools:
                        return self._restore_all(ctx, call, record, sel.fallback, t0)
                    # Call-through loads nothing: the local search answers in the selector's stead.
                    local = bool(sel.fallback)
                    searcher = learned if local else FixedRanking(sel.names)
                    if local:
                        ctx.record.fallback_reason = f"selector_{sel.fallback}_local_search"
            if local:
                # A catalog's first search may have to build its index (hybrid: load the model,
                # embed every tool): that is not the query's cost, so it runs before the budget.
                await self.warm(catalog)
            outcome = await run_query_async(call.arguments, catalog, searcher, td.max_search_results,
                                            td.always_keep, budget_s=td.search.timeout,
                                            through=ctx.mode.dispatcher)
        except Exception as e:  # the model reads an error and goes on; the flow never breaks
            logger.opt(exception=e).warning("search failed")
            record.error = f"search failed: {type(e).__name__}"
            record.latency_ms = _ms(t0)
            text = json.dumps({"error": "The tool search failed. Try again with other words, or "
                                        "'select:NAME' for a tool you know by name."})
            return Found(ToolResult(call, text, True), [])
        record.query, record.matched = outcome.query, list(outcome.matched)
        record.backend, record.fallback = outcome.backend, outcome.fallback
        record.error = outcome.text if outcome.is_error else None
        record.latency_ms = _ms(t0)
        tools = [ctx.catalog[n] for n in outcome.matched if n in ctx.catalog]
        return Found(ToolResult(call, outcome.text, outcome.is_error), tools)

    def _restore_all(self, ctx: FlowContext, call: ToolCall, record: SearchRecord, reason: str, t0: float) -> Found:
        """Fail open: the selector gave nothing usable, so every deferred tool comes back for
        the model rather than leaving it without the tool it needs."""
        logger.warning("tool selector failed ({}); restoring all {} deferred tools", reason, len(ctx.catalog))
        tools = list(ctx.catalog.values())
        record.query = plain_query(call.arguments)
        record.backend, record.fallback = "api", reason
        record.matched = [t.name for t in tools]
        record.latency_ms = _ms(t0)
        ctx.record.fallback_reason = f"selector_{reason}"
        text = json.dumps({"message": f"Tool search is unavailable right now; all {len(tools)} tools are loaded "
                                      "and can be called directly."})
        return Found(ToolResult(call, text), tools)

    async def warm(self, tools: Catalog) -> None:
        """Build a catalog's indexes once, ahead of its searches (hybrid embeds every tool): the
        planner starts it when it first sees the catalog, a search waits for it outside its
        budget."""
        running = self._warming.get(tools.key)
        if running is None:
            running = self._warming[tools.key] = asyncio.ensure_future(self._build(tools))
            while len(self._warming) > MAX_WARMED:
                self._warming.pop(next(iter(self._warming)))
        await asyncio.shield(running)

    def warmed(self, tools: Catalog) -> bool:
        """Whether ``tools``' warm-up has run: the planner then starts none (a task per request
        that only finds the index built is not free)."""
        running = self._warming.get(tools.key)
        return running is not None and running.done()

    async def _build(self, tools: Catalog) -> None:
        try:
            await asyncio.to_thread(self.searcher.rank, WARM_UP_QUERY, tools, 1)
        except Exception as e:  # the real search will report it
            logger.debug("index warm-up failed: {}", e)


def plain_query(arguments: Any) -> str | None:
    """The query when it asks for a ranked search (not ``select:``, ``*``, or malformed)."""
    query = arguments.get("query") if isinstance(arguments, dict) else None
    if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
        return None
    q = query.strip()
    return None if q == LIST_ALL or q.lower().startswith(SELECT_PREFIX) else q


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
