"""The engine: the parts of tool discovery, put together for one config.

Why a composition root and nothing more: the addon stays glue (hooks, bytes in and out),
the planner decides what to forward, the runner drives the loop over the answer, the
search service answers searches, and this class only builds them and hands them out.
Every public entry point fails open (see ``Planner.prepare`` and ``LoopRunner``).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Mapping

from loguru import logger

from tooldisco.config import Config
from tooldisco.engine.executor import FairExecutor, Overloaded, set_switch_interval
from tooldisco.engine.accounting import Accounting, Tally
from tooldisco.engine.learning import Learner
from tooldisco.engine.metrics import Metrics
from tooldisco.engine.governance import Governance
from tooldisco.engine.planner import FlowContext, Planner, Prepared
from tooldisco.apis.base import Adapter
from tooldisco.apis.catalogs import set_catalog_budget
from tooldisco.core.bytecache import MiB
from tooldisco.core.types import RequestView
from tooldisco.apis.registry import detect
from tooldisco.engine.runner import LoopRunner
from tooldisco.search.base import MAX_QUERY_CHARS
from tooldisco.search.factory import make_searcher
from tooldisco.engine.searches import SearchService
from tooldisco.engine.selector_client import SelectorClient
from tooldisco.state.base import SessionStore
from tooldisco.state.factory import open_store
from tooldisco.policy import deferral, relevance
from tooldisco.policy.pricing import PriceTable
from tooldisco.engine.telemetry import Record, TelemetrySink
from tooldisco.core.tenants import tenant_of


class Engine:
    def __init__(self, config: Config, store: SessionStore | None = None):
        self.config = config
        td = config.tool_discovery
        self.store = store if store is not None else open_store(config.sessions)
        # Metrics only when served (``metrics.listen``): every record the sink takes is counted.
        self.metrics = Metrics(self.store, config.sessions.backend) if config.metrics.listen else None
        self.telemetry = TelemetrySink(config.telemetry.path if config.telemetry.enabled else None,
                                       [self.metrics.observe] if self.metrics is not None else ())
        # What a turn cost in the providers' numbers, and its tools' share of the context.
        self.accounting = Accounting(PriceTable.load(config.prices), td.context_warn_share)
        self.searcher = make_searcher(td.search.backend, cache_dir=td.search.cache_dir)
        scorer = None if td.scorer == "overlap" else make_searcher(td.scorer, cache_dir=td.search.cache_dir)
        self.ranker = scorer.search if scorer else None
        self.selector = SelectorClient(td.api)
        self.searches = SearchService(td, self.searcher, self.selector)
        self.learner = Learner(td.learning, self.store) if td.learning.enabled and td.strategy.defers else None
        self.governance = Governance(config, self.store)
        self.planner = Planner(config, self.store, self.telemetry, self.ranker, self.searches.warm, self._shadow,
                               self.learner, self.searches.warmed, self.governance)
        p = config.planning
        self.pool = FairExecutor(p.workers, p.per_tenant, p.queue, p.wait)
        set_switch_interval(p.switch_interval)
        set_catalog_budget(p.catalog_cache_mb * MiB)
        self._overloaded_logged = 0.0

    def adapter_for(self, host: str, method: str, path: str) -> Adapter | None:
        td = self.config.tool_discovery
        if not td.enabled or not self.config.handles_host(host):
            return None
        return detect(method, path, host)

    def prepare(self, adapter: Adapter, headers: Mapping[str, str], body: bytes, query: str = "",
                hold: bool = False) -> Prepared:
        """What to forward (blocking: call it from a worker thread). ``hold``: see ``Planner.prepare``."""
        return self.planner.prepare(adapter, headers, body, query, hold)

    def close_record(self, record: Record, tally: Tally | None = None) -> None:
        """A turn that went without the loop is over: priced from its answers (``tally``) and written."""
        self.accounting.complete(record, tally)
        self.telemetry.submit(record)

    async def plan(self, adapter: Adapter, headers: Mapping[str, str], body: bytes, query: str = "") -> Prepared:
        """``prepare`` on the planning pool, its tenant's share of it (``executor``). The pool
        over its bounds: the request goes unprocessed, as if tool discovery were off for it."""
        tenant = tenant_of(headers, query) or ""
        try:
            # Held: a request that goes without the loop is closed by the glue once its answer's
            # usage is read (``glue.usage``).
            return await self.pool.run(tenant, self.prepare, adapter, headers, body, query, True)
        except Overloaded as e:
            record = Record(provider=adapter.api, strategy=self.config.tool_discovery.strategy.value,
                            fallback_reason="overloaded")
            self.close_record(record)
            now = time.monotonic()
            if now - self._overloaded_logged > 10:  # one line per burst, not one per request
                self._overloaded_logged = now
                logger.warning("tool discovery skipped: planning is overloaded ({}); requests go through "
                               "unprocessed until it catches up (see planning: in the config)", e)
            return Prepared(record=record)

    def runner(self, ctx: FlowContext) -> LoopRunner:
        return LoopRunner(ctx, self.searches, self.store, self.telemetry, self.config.tool_discovery.max_phantom_loops,
                          self.learner, self.accounting)

    async def _shadow(self, view: RequestView, plan: deferral.DeferralPlan, record: Record) -> None:
        """api dark/shadow rollout: what the selector would have loaded, logged, traffic untouched.
        The query is capped as the selector's contract requires; it reaches telemetry only when
        ``telemetry.include_prompts`` asks for it."""
        td = self.config.tool_discovery
        try:
            query = view.query[:MAX_QUERY_CHARS]
            sel = await self.selector.select(query, td.max_search_results, td.always_keep, plan.deferred)
            shadow: dict[str, Any] = {"selected": sel.names, "status": sel.status, "ms": sel.ms,
                                      "fallback": sel.fallback, "deferred": len(plan.deferred)}
            if self.config.telemetry.include_prompts:
                shadow["pattern"] = query
            if td.api.rollout == "shadow":
                keep = relevance.keep_count(len(view.tools), td)
                # Ranking may embed every tool (hybrid): a planning worker, not the event loop.
                selection = await self.pool.run("", partial(relevance.select, ranker=self.ranker), view, td, keep)
                kept = [t.name for t in selection.kept]
                hits = [n for n in sel.names if n in kept]
                shadow |= {"relevance_kept": kept, "overlap": len(hits) / len(sel.names) if sel.names else None}
            record.shadow = shadow
            record.outcome = "shadow" if td.api.rollout == "shadow" else "dark"
        except Exception as e:  # observability must never hurt traffic
            logger.debug("rollout shadow failed: {}", e)
            record.outcome = f"error: {type(e).__name__}"
        finally:
            self.telemetry.submit(record)

    def close(self) -> None:
        self.pool.close()
        if self.learner is not None:  # what the last turns taught, written before the store closes
            self.learner.close()
        self.telemetry.close()
        self.store.close()
