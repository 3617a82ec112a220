"""The engine: what to forward for a request, and what the client sees of the answer.

Why one façade: the addon stays glue (hooks, flags, bytes in and out) and everything
that decides is testable here without mitmproxy or a socket. Every public method
fails open: an exception anywhere means "forward unchanged", with a warning and a
telemetry reason, never a broken request.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from loguru import logger

from .config import Config
from .loop import Finish, Found, PhantomLoop, Search, Send
from .providers.base import Adapter, RequestView, Tool, ToolCall, ToolResult, Unsupported
from .providers.detect import detect
from .search import MAX_QUERY_CHARS, make_searcher, run_query
from .search.base import catalog_key
from .search.phantom_query import LIST_ALL, SELECT_PREFIX
from .selector_client import FixedRanking, SelectorClient
from .sessions import SessionState, SessionStore, session_key, tenant_of
from .strategies import deferral, relevance
from .telemetry import Record, SearchRecord, TelemetrySink, estimate_tokens

MAX_DEFERRED_PER_SESSION = 10_000


@dataclass
class Reply:
    """An upstream answer, or the one the client gets. ``body`` is decoded (no content-encoding)."""

    status: int
    body: bytes
    content_type: str = "application/json"
    # Upstream headers of this answer (an error passed on keeps its error type, request id and
    # retry-after); for a merged answer: only the headers to override on the first one.
    headers: list[tuple[str, str]] | None = None
    merged: bool = False

    @property
    def is_stream(self) -> bool:
        return self.content_type.split(";")[0].strip().lower() in (
            "text/event-stream",
            "application/vnd.amazon.eventstream",
        )


Upstream = Callable[[bytes], Awaitable[Reply]]


@dataclass
class FlowContext:
    """What the response phase needs to know about one request."""

    adapter: Adapter
    session: str
    body: str  # as forwarded
    original: bytes  # as the client sent it: the fail-open retry
    phantom: str
    catalog: dict[str, Tool]  # what a search may find
    forwarded: list[str]
    record: Record
    stream: bool = False  # the client asked for a stream (Gemini's JSON-array stream is application/json)
    tenant: str = ""


@dataclass
class Prepared:
    body: bytes | None = None  # the new body, or None to forward unchanged
    context: FlowContext | None = None  # set when the response needs the phantom loop
    background: Callable[[], Awaitable[None]] | None = None  # run without delaying the request


class Engine:
    def __init__(self, config: Config, store: SessionStore | None = None):
        self.config = config
        td = config.tool_discovery
        self.store = store or SessionStore(
            config.sessions.directory(), config.sessions.ttl, config.sessions.cleanup_interval
        )
        self.telemetry = TelemetrySink(config.telemetry.path if config.telemetry.enabled else None)
        self.searcher = make_searcher(td.search.backend, cache_dir=td.search.cache_dir)
        scorer = None if td.scorer == "overlap" else make_searcher(td.scorer, cache_dir=td.search.cache_dir)
        self.ranker = scorer.search if scorer else None
        self.selector = SelectorClient(td.api)
        self._warmed: dict[str, None] = {}  # catalogs whose index is built or being built

    # --- request phase ---------------------------------------------------------------

    def adapter_for(self, host: str, method: str, path: str) -> Adapter | None:
        td = self.config.tool_discovery
        if not td.enabled or not self.config.handles_host(host):
            return None
        return detect(method, path, host)

    def prepare(self, adapter: Adapter, headers: Mapping[str, str], body: bytes) -> Prepared:
        """Decide what to forward. ``headers`` keys must be lowercase."""
        td = self.config.tool_discovery
        started = time.perf_counter()
        record = Record(provider=adapter.api, strategy=td.strategy)
        try:
            text = body.decode("utf-8")
            view = adapter.parse(text)
            record.stream = view.stream
            record.total_tools = len(view.tools)
            before = sum(estimate_tokens(t.raw) for t in view.tools)
            record.tool_tokens_before = record.tool_tokens_after = before
            record.kept_tools = len(view.tools)
            tenant = tenant_of(headers)
            key, pending = self._session(view, headers, tenant)
            record.session = key[:12]
            if pending:  # results a stored chain still awaits from a mixed turn the client saw
                text = adapter.with_pending(text, pending)
                body = text.encode("utf-8")
            if td.strategy == "relevance":
                prepared = self._relevance(adapter, view, text, key, record)
            elif td.strategy in ("tool-search", "api"):
                prepared = self._deferral(adapter, view, text, body, key, record)
                if prepared.context:
                    prepared.context.tenant = tenant
            else:
                record.fallback_reason = "passthrough"
                prepared = Prepared()
            if pending and prepared.body is None:
                prepared.body = body
            return prepared
        except Unsupported as e:
            record.fallback_reason = f"unsupported: {e}"
            logger.warning("tool discovery skipped ({}): {}", adapter.api, e)
            return Prepared()
        except Exception as e:  # fail open: whatever went wrong, forward unchanged
            record.fallback_reason = f"error: {type(e).__name__}"
            logger.opt(exception=e).warning("tool discovery failed ({}); forwarding unchanged", adapter.api)
            return Prepared()
        finally:
            record.processing_ms = round((time.perf_counter() - started) * 1000, 3)
            if record.outcome != "pending":  # else the response phase completes the record
                self.telemetry.write(record)

    def _session(self, view: RequestView, headers: Mapping[str, str], tenant: str) -> tuple[str, list[str]]:
        """The session key, and results a chained-from response still awaits.

        A request chaining from a stored response belongs to that response's session; with no
        session id and no user text at all the request gets a session of its own rather than
        one shared by every such request of the tenant."""
        if view.continues and (linked := self.store.linked(tenant, view.continues)):
            return linked
        hint = view.session_hint or next(
            (headers[h] for h in self.config.sessions.session_headers if headers.get(h)), None
        )
        if not hint and not view.first_user:
            hint = f"chain:{view.continues}" if view.continues else f"once:{uuid.uuid4().hex}"
        return session_key(tenant, hint, view.first_user), []

    def _relevance(self, adapter: Adapter, view: RequestView, text: str, key: str, record: Record) -> Prepared:
        td = self.config.tool_discovery
        total = len(view.tools)
        keep = relevance.keep_count(total, td)
        if not total or total <= td.min_tools or keep >= total:
            record.fallback_reason = "no_tools" if not total else "below_min_tools"
            return Prepared()
        state = self.store.get(key)
        sel = relevance.select(view, td, keep, sticky=state.kept, expanded=state.expanded, ranker=self.ranker)
        self._remember(key, adapter, kept=[t.name for t in sel.kept])
        self._count(record, sel.kept, sel.deferred)
        if len(sel.kept) == total:
            return Prepared()
        return Prepared(adapter.with_tools(text, [t.raw for t in sel.kept]).encode("utf-8"))

    def _deferral(
        self, adapter: Adapter, view: RequestView, text: str, body: bytes, key: str, record: Record
    ) -> Prepared:
        td = self.config.tool_discovery
        phantom = td.search_tool_name
        if phantom in view.names():
            record.fallback_reason = "search_tool_name_taken"
            logger.warning("client already sends a tool named {}: not deferring", phantom)
            return Prepared()
        state = self.store.get(key)
        plan = deferral.plan(view, td, state.kept, state.expanded, self.ranker)
        if plan.skipped:
            record.fallback_reason = plan.skipped
            return Prepared()
        if td.strategy == "api" and (held := self._rollout(view, plan, key, record)) is not None:
            return held
        self._remember(key, adapter, kept=[t.name for t in plan.kept], deferred=plan.deferred)
        catalog = _earlier(adapter, state, set(view.names())) | {t.name: t for t in plan.deferred}
        backend = "api" if td.strategy == "api" else td.search.backend
        phantom_raw = adapter.phantom_tool(
            # Described over deferred + found: a discovery then leaves the search tool's text,
            # and so the cached prompt prefix up to it, unchanged.
            phantom, deferral.phantom_description(plan.deferred + plan.expanded, backend, td.max_search_results)
        )
        raws = [t.raw for t in plan.kept] + [phantom_raw] + [t.raw for t in plan.expanded]
        new = adapter.with_tools(text, raws)
        self._count(record, plan.kept + plan.expanded, plan.deferred, extra=estimate_tokens(phantom_raw))
        record.outcome = "pending"
        forwarded = [t.name for t in plan.kept + plan.expanded] + [phantom]
        ctx = FlowContext(adapter, key, new, body, phantom, catalog, forwarded, record, view.stream)
        return Prepared(new.encode("utf-8"), ctx, self._warm_up(list(catalog.values())))

    def _warm_up(self, tools: list[Tool]) -> Callable[[], Awaitable[None]] | None:
        """Build the search index of a catalog seen for the first time while the model is still
        answering, so the model's first search does not wait for it (hybrid embeds every tool)."""
        if self.config.tool_discovery.strategy == "api" or not tools:
            return None
        key = catalog_key(tools)
        if key in self._warmed:
            return None
        self._warmed[key] = None
        while len(self._warmed) > 256:
            self._warmed.pop(next(iter(self._warmed)))

        async def warm() -> None:
            try:
                await asyncio.to_thread(self.searcher.rank, "warm up", tools, 1)
            except Exception as e:  # the real search will report it
                logger.debug("index warm-up failed: {}", e)

        return warm

    def _rollout(self, view: RequestView, plan: deferral.DeferralPlan, key: str, record: Record) -> Prepared | None:
        """Seed 001 rollout. ``None``: this request gets the api strategy in full. Otherwise the
        request goes upstream unchanged; dark and shadow ask the selector in the background
        (pattern: the user's query) and log what it would have loaded."""
        api = self.config.tool_discovery.api
        record.rollout = api.rollout
        if api.rollout == "full":
            return None
        if api.rollout == "partial":
            bucket = int(key[:8], 16) % 10_000 / 100  # deterministic per session
            record.rollout = f"partial:{'in' if bucket < api.rollout_percent else 'out'}"
            if bucket < api.rollout_percent:
                return None
            record.fallback_reason = "rollout_excluded"
            return Prepared()
        record.outcome = "pending"  # the background task completes the record
        return Prepared(background=lambda: self._shadow(view, plan, record))

    async def _shadow(self, view: RequestView, plan: deferral.DeferralPlan, record: Record) -> None:
        td = self.config.tool_discovery
        try:
            sel = await self.selector.select(view.query, td.max_search_results, td.always_keep, plan.deferred)
            shadow: dict[str, Any] = {"pattern": view.query, "selected": sel.names, "status": sel.status,
                                      "ms": sel.ms, "fallback": sel.fallback, "deferred": len(plan.deferred)}
            if td.api.rollout == "shadow":
                keep = relevance.keep_count(len(view.tools), td)
                kept = [t.name for t in relevance.select(view, td, keep, ranker=self.ranker).kept]
                hits = [n for n in sel.names if n in kept]
                shadow |= {"relevance_kept": kept, "overlap": len(hits) / len(sel.names) if sel.names else None}
            record.shadow = shadow
            record.outcome = "shadow" if td.api.rollout == "shadow" else "dark"
        except Exception as e:  # observability must never hurt traffic
            record.outcome = f"error: {type(e).__name__}"
        finally:
            self.telemetry.write(record)

    def _count(self, record: Record, kept: tuple[Tool, ...], deferred: tuple[Tool, ...], extra: int = 0) -> None:
        record.kept_tools = len(kept)
        record.deferred_tools = len(deferred)
        record.tool_tokens_after = sum(estimate_tokens(t.raw) for t in kept) + extra

    def _remember(self, key: str, adapter: Adapter, kept: list[str], deferred: tuple[Tool, ...] = ()) -> None:
        """Record the kept set, and the deferred catalog a later search may reach (seed §6)."""

        def change(s: SessionState) -> bool:
            if s.api == adapter.api and s.kept == kept and all(s.deferred.get(t.name) == t.raw for t in deferred):
                return False
            s.api = adapter.api
            s.kept = kept
            for t in deferred:
                s.deferred[t.name] = t.raw
            for name in list(s.deferred)[: max(len(s.deferred) - MAX_DEFERRED_PER_SESSION, 0)]:
                del s.deferred[name]
            return True

        self.store.update(key, change)

    # --- response phase --------------------------------------------------------------

    async def complete(self, ctx: FlowContext, reply: Reply, send: Upstream) -> Reply | None:
        """Run the phantom loop on the first upstream reply; None means: pass it on unchanged."""
        record = ctx.record
        upstream_s = 0.0
        started = time.perf_counter()
        message: dict[str, Any] | None = None
        try:
            if reply.status != 200:
                record.outcome = f"upstream_{reply.status}"
                return None
            message = self._decode(ctx, reply)
            if message is None:
                record.outcome = "undecodable"
                return None
            loop = PhantomLoop(ctx.adapter, ctx.phantom, ctx.forwarded, self.config.tool_discovery.max_phantom_loops)
            action: Search | Send | Finish = loop.start(ctx.body, message)
            final_reply: Reply | None = None
            while not isinstance(action, Finish):
                if isinstance(action, Search):
                    action = loop.found([await self._search(ctx, call) for call in action.calls])
                    continue
                t0 = time.perf_counter()
                try:
                    answer = await send(action.body.encode("utf-8"))
                finally:
                    upstream_s += time.perf_counter() - t0
                if answer.status != 200:
                    final_reply = await self._upstream_failed(ctx, answer, send)
                    action = loop.fail()
                    break
                decoded = self._decode(ctx, answer)
                if decoded is None:
                    action = loop.fail()
                    break
                action = loop.receive(decoded)
            record.loops = loop.rounds
            record.outcome = action.reason if final_reply is None else f"fallback_{final_reply.status}"
            if loop.expanded:
                self.store.update(ctx.session, lambda s: s.expand(loop.expanded))
            if rid := ctx.adapter.response_id(action.message):
                pending = ctx.adapter.pending_items(ctx.body, loop.unanswered) if loop.unanswered else []
                self.store.link(ctx.tenant, rid, ctx.session, pending)
            if action.reason == "no_phantom":
                return None
            if final_reply is not None:
                return final_reply
            body = ctx.adapter.encode_stream(action.message) if self._streamed(ctx, reply) else _json(action.message)
            return Reply(200, body, reply.content_type, list(ctx.adapter.usage_headers(action.message).items()), True)
        except Exception as e:  # fail open: the first answer, without the search the client cannot run
            record.outcome = f"error: {type(e).__name__}"
            logger.opt(exception=e).warning("phantom loop failed; passing the first upstream answer on")
            return self._first_answer(ctx, reply, message)
        finally:
            total = time.perf_counter() - started
            record.upstream_ms = round(upstream_s * 1000, 3)
            record.loop_added_ms = round((total - upstream_s) * 1000, 3)
            self.telemetry.write(record)

    def _first_answer(self, ctx: FlowContext, reply: Reply, message: dict[str, Any] | None) -> Reply | None:
        """The first answer with the phantom calls removed; None (as it came) if even that fails."""
        if message is None:
            return None
        try:
            stripped = ctx.adapter.strip(message, [ctx.phantom])
            body = ctx.adapter.encode_stream(stripped) if self._streamed(ctx, reply) else _json(stripped)
            return Reply(200, body, reply.content_type, [], True)
        except Exception:
            return None

    async def _upstream_failed(self, ctx: FlowContext, answer: Reply, send: Upstream) -> Reply:
        """A re-forward failed. A 4xx may be ours: retry the client's own request, untouched.
        Anything else (5xx, 429) goes to the client as it is, so its retry logic applies."""
        logger.warning("upstream answered {} to a phantom re-forward", answer.status)
        if 400 <= answer.status < 500 and answer.status != 429:
            retry = await send(ctx.original)
            ctx.record.fallback_reason = f"reforward_{answer.status}_original_sent"
            return retry
        ctx.record.fallback_reason = f"reforward_{answer.status}"
        return answer

    @staticmethod
    def _streamed(ctx: FlowContext, reply: Reply) -> bool:
        return reply.is_stream or ctx.stream

    def _decode(self, ctx: FlowContext, reply: Reply) -> dict[str, Any] | None:
        adapter = ctx.adapter
        try:
            if self._streamed(ctx, reply):
                decoder = adapter.decoder()
                decoder.feed(reply.body)
                decoder.feed(b"")
                if not decoder.done:
                    logger.warning("the upstream stream ended early ({}); passing it through", adapter.api)
                    return None
                return decoder.message()
            data = json.loads(reply.body)
            return data if isinstance(data, dict) else None
        except Exception as e:
            logger.warning("could not decode the upstream answer ({}): {}", adapter.api, e)
            return None

    async def _search(self, ctx: FlowContext, call: ToolCall) -> Found:
        """Answer one phantom call: locally, or (api) with the selector service for plain queries."""
        td = self.config.tool_discovery
        t0 = time.perf_counter()
        catalog = list(ctx.catalog.values())
        record = SearchRecord(query=None, matched=[], backend=None, deferred=len(catalog))
        searcher = self.searcher
        query = _plain_query(call.arguments)
        if td.strategy == "api":
            searcher = FixedRanking([])  # select:, listing and bad arguments never need ranking
            if query is not None:
                sel = await self.selector.select(query, td.max_search_results, td.always_keep, catalog)
                record.api_status, record.api_ms, record.selected = sel.status, sel.ms, sel.raw
                if sel.fallback:
                    return self._restore_all(ctx, call, record, sel.fallback, t0)
                searcher = FixedRanking(sel.names)
        # A worker thread: building an index (embeddings) for a new catalog can take seconds.
        outcome = await asyncio.to_thread(run_query, call.arguments, catalog, searcher, td.max_search_results,
                                          td.always_keep)
        record.query, record.matched = outcome.query, list(outcome.matched)
        record.backend, record.fallback = outcome.backend, outcome.fallback
        record.error = outcome.text if outcome.is_error else None
        record.latency_ms = _ms(t0)
        ctx.record.searches.append(record)
        tools = [ctx.catalog[n] for n in outcome.matched if n in ctx.catalog]
        return Found(ToolResult(call, outcome.text, outcome.is_error), tools)

    def _restore_all(self, ctx: FlowContext, call: ToolCall, record: SearchRecord, reason: str, t0: float) -> Found:
        """Seed 000 §4.4 fail-open: the selector gave nothing usable, so every deferred tool
        comes back for the model rather than leaving it without the tool it needs."""
        logger.warning("tool selector failed ({}); restoring all {} deferred tools", reason, len(ctx.catalog))
        tools = list(ctx.catalog.values())
        record.query = call.arguments.get("query") if isinstance(call.arguments, dict) else None
        record.backend, record.fallback = "api", reason
        record.matched = [t.name for t in tools]
        record.latency_ms = _ms(t0)
        ctx.record.searches.append(record)
        ctx.record.fallback_reason = f"selector_{reason}"
        text = json.dumps({"message": f"Tool search is unavailable right now; all {len(tools)} tools are loaded "
                                      "and can be called directly."})
        return Found(ToolResult(call, text), tools)

    def close(self) -> None:
        self.store.close()


def _earlier(adapter: Adapter, state: SessionState, current: set[str]) -> dict[str, Tool]:
    """Tools deferred earlier in the session and absent now: searchable too (seed 000 §6)."""
    if state.api != adapter.api:
        return {}
    out = {}
    for name, raw in state.deferred.items():
        if name in current:
            continue
        try:
            out[name] = adapter.parse_tool(raw)
        except Exception:
            continue  # a stored definition we cannot read is skipped, not fatal
    return out


def _plain_query(arguments: Any) -> str | None:
    """The query when it asks for a ranked search (not ``select:``, ``*``, or malformed)."""
    query = arguments.get("query") if isinstance(arguments, dict) else None
    if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
        return None
    q = query.strip()
    return None if q == LIST_ALL or q.lower().startswith(SELECT_PREFIX) else q


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _json(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
