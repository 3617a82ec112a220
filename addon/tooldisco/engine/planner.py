"""The request phase: what to forward for one request, and what its answer will need.

Why apart from the runner: planning is pure given the session state (view in, body and
context out) and runs in a worker thread before the request leaves; the response phase
is async and owns the network. The two meet in ``FlowContext``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Awaitable, Callable, Mapping, Sequence, TypeVar

from loguru import logger

from tooldisco.config import Config, Strategy
from tooldisco.core import jsonspan
from tooldisco.engine import rounds
from tooldisco.engine.learning import Learner
from tooldisco.apis.base import Adapter, CallThrough, NativeDeferral
from tooldisco.core.types import RequestView, Tool, Unsupported
from tooldisco.search.base import Catalog
from tooldisco.search.priors import Priors
from tooldisco.state.base import SessionState, SessionStore, session_key
from tooldisco.policy import agents, call_through, deferral, native, rejection, relevance
from tooldisco.policy.modes import CallThroughMode, ClassicMode, DeferralMode, NativeMode, NoLoopMode
from tooldisco.engine.telemetry import Record, TelemetrySink
from tooldisco.core.tokens import estimate_tokens, tokens_for
from tooldisco.core.tenants import tenant_of

Ranker = Callable[..., object] | None
T = TypeVar("T")


@dataclass
class FlowContext:
    """What the response phase needs to know about one rewritten request."""

    adapter: Adapter
    session: str
    tenant: str
    persist: bool  # False: a caller without a credential, whose turns keep no state
    body: str  # as forwarded
    original: bytes  # as the client sent it: the fail-open resend, and what echoes show
    mode: DeferralMode[FlowContext]  # the deferral flavour (``policy.modes``): the loop, runner and searches ask it
    catalog: dict[str, Tool]  # what a search may find: deferred tools of this very request, never the session's
    forwarded: list[str]
    record: Record
    stream: bool = False  # the client asked for a stream (Gemini's JSON-array stream included)
    rewritten: bool = True  # the forwarded body differs from the client's
    priors: Priors | None = None  # the tenant's learned priors, which this request's searches rank with
    # Every tool the client sent, by name, when learning is on: what a called tool is learned as.
    offered: Mapping[str, Tool] = field(default_factory=dict)

    @property
    def phantom(self) -> str:
        """The search tool's name as the model calls it; "" when the strategy runs no loop."""
        return self.mode.search

    @property
    def client_body(self) -> str:
        return self.original.decode("utf-8", "replace")

    def rewrite_named(self, error: bytes, sent: str | None = None) -> str | None:
        """What an upstream 4xx ``error`` to ``sent`` (default: ``body``, the first round; a
        re-forward's own body otherwise) names that the proxy changed against the client's
        request, or None: then the client's own request would get the same answer, and is not
        sent (``policy.rejection``). Changed tools this flow knows by name: the search tool,
        the dispatcher, the deferred ones. Run when an error arrives, never on the way out; a
        fault of its own reads as the rewrite's (the client's own request is sent, as before)."""
        names = [self.mode.search, self.mode.dispatcher or "", *self.catalog]
        try:
            return rejection.rewrite_named(error, self.original, self.body if sent is None else sent, names)
        except Exception as e:
            logger.opt(exception=e).warning("could not tell what an upstream error names; taking it for the rewrite's")
            return "unknown"

    @cached_property
    def searchable(self) -> Catalog:
        """``catalog`` as searches take it: the warm-up and every search of this request share
        one catalog key (``search.base.Catalog``)."""
        return Catalog(self.catalog.values())


@dataclass
class Prepared:
    body: bytes | None = None  # the new body, or None to forward unchanged
    context: FlowContext | None = None  # set when the answer must go through the runner
    background: Callable[[], Awaitable[None]] | None = None  # run without delaying the request
    record: Record | None = None  # this request's telemetry (completed later when ``context`` is set)


@dataclass
class _Session:
    key: str
    tenant: str
    persist: bool
    pending: list[str] = field(default_factory=list)  # results a stored chain still awaits
    head: str | None = None  # the stored response the chain really continues from


class Planner:
    def __init__(self, config: Config, store: SessionStore, telemetry: TelemetrySink,
                 ranker: Ranker, warm: Callable[[Catalog], Awaitable[None]],
                 shadow: Callable[[RequestView, deferral.DeferralPlan, Record], Awaitable[None]],
                 learner: Learner | None = None, warmed: Callable[[Catalog], bool] = lambda tools: False) -> None:
        self.config = config
        self.store = store
        self.learner = learner
        self.telemetry = telemetry
        self.ranker = ranker
        self._warm, self._warmed = warm, warmed
        self._shadow = shadow

    def prepare(self, adapter: Adapter, headers: Mapping[str, str], body: bytes, query: str = "",
                hold: bool = False) -> Prepared:
        """Decide what to forward. ``headers`` keys must be lowercase; ``query`` is the URL's.
        ``hold``: a request that goes without the loop keeps its record open (``Prepared.record``)
        for the caller to close once the answer's usage is known; else it is written here."""
        td = self.config.tool_discovery
        started = time.perf_counter()
        record = Record(provider=adapter.api, strategy=td.strategy.value)
        try:
            text = _text(body)
            with jsonspan.reusing(text):  # the body's objects decoded once, however often searched
                return self._plan(adapter, headers, body, text, query, record)
        except Unsupported as e:
            record.fallback_reason = f"unsupported: {e}"
            logger.warning("tool discovery skipped ({}): {}", adapter.api, e)
            return Prepared(record=record)
        except Exception as e:  # fail open: whatever went wrong, forward unchanged
            record.fallback_reason = f"error: {type(e).__name__}"
            logger.opt(exception=e).warning("tool discovery failed ({}); forwarding unchanged", adapter.api)
            return Prepared(record=record)
        finally:
            record.processing_ms = round((time.perf_counter() - started) * 1000, 3)
            if record.outcome != "pending" and not hold:  # else the runner (or the rollout, or the caller) does
                self.telemetry.submit(record)

    def _plan(self, adapter: Adapter, headers: Mapping[str, str], body: bytes, text: str, query: str,
              record: Record) -> Prepared:
        """``prepare``'s work on the decoded body; whatever it raises, ``prepare`` fails open."""
        td = self.config.tool_discovery
        view = adapter.parse(text)
        record.stream = view.stream
        record.total_tools = len(view.tools)
        before = view.offered.tokens  # what depends on the tools alone: once per catalog (``ToolCatalog``)
        record.tool_tokens_before = record.tool_tokens_after = record.tool_tokens_wire = before
        record.client_deferred = view.offered.client_deferred
        record.kept_tools = len(view.tools) - record.client_deferred
        session = self._session(view, headers, query)
        record.session = session.key[:12]
        record.model = view.model or record.model
        record.tenant = session.tenant[:12]
        record.agent = agents.family(headers.get("user-agent"))
        forwarded = text
        if session.persist and td.strategy.defers:  # the strategies that stitch
            # The upstream goes on from what it really produced, not from the message stitched for the client.
            forwarded, record.restored = rounds.restore(
                adapter, text, lambda digest: self.store.rounds(session.tenant, session.key, digest))
        if session.head:  # the client chains from the id it was shown; the server from the last round
            forwarded = adapter.chain_from(forwarded, session.head)
        if session.pending:  # results a stored chain still awaits from a mixed turn the client saw
            forwarded = adapter.with_owed_results(forwarded, session.pending)
        match td.strategy:
            case Strategy.PASSTHROUGH:
                record.fallback_reason = "passthrough"
                prepared = Prepared()
            case _ if defers := deferral.client_defers(view, td):
                # The client searches its own deferred tools: a second search tool beside it could
                # only fail, and hiding more tools would put them where its search cannot look.
                record.fallback_reason = defers
                prepared = Prepared()
            case Strategy.RELEVANCE:
                prepared = self._relevance(adapter, view, forwarded, body, session, record)
            case Strategy.TOOL_SEARCH | Strategy.API:
                prepared = self._deferral(adapter, view, forwarded, body, session, record)
        if (session.pending or session.head or record.restored) and prepared.body is None:
            prepared.body = forwarded.encode("utf-8")
        prepared.record = record
        return prepared

    def _session(self, view: RequestView, headers: Mapping[str, str], query: str) -> _Session:
        """The session key, and results a chained-from response still awaits.

        A request chaining from a stored response belongs to that response's session. A
        caller without any credential keeps no state across requests: its session is its
        own request. With no session id and no user text the request gets a session of its
        own rather than one shared by every such request of the tenant."""
        tenant = tenant_of(headers, query)
        if tenant is None:
            return _Session(f"anon:{uuid.uuid4().hex}", "", False)
        if view.continues and (link := self.store.linked(tenant, view.continues)):
            return _Session(link.session, tenant, True, link.pending, link.head)
        hint = view.session_hint or next(
            (headers[h] for h in self.config.sessions.session_headers if headers.get(h)), None
        )
        if not hint and not view.first_user:
            hint = f"chain:{view.continues}" if view.continues else f"once:{uuid.uuid4().hex}"
        return _Session(session_key(tenant, hint, view.first_user), tenant, True)

    def _decide(self, session: _Session, decide: Callable[[SessionState], T]) -> T:
        """Run ``decide`` over the session's state, keeping what it records, in one transaction:
        flows of one session overlap (sub-agents), and a read apart from its write would lose
        the update of a flow in between. A caller without a credential gets a blank state,
        kept nowhere."""
        if not session.persist:
            return decide(SessionState())
        return self.store.update(session.key, decide)

    def _relevance(self, adapter: Adapter, view: RequestView, text: str, original: bytes, session: _Session,
                   record: Record) -> Prepared:
        td = self.config.tool_discovery
        total = len(view.tools)
        keep = relevance.keep_count(total, td)
        if not total or total <= td.min_tools or keep >= total:
            record.fallback_reason = "no_tools" if not total else "below_min_tools"
            return Prepared()
        ranker = _ranked_now(self.ranker, view)
        seen = view.offered.name_set
        listed = view.offered.derived("tool list key", lambda: relevance.tool_list_key(seen))
        size = estimate_tokens(text)

        def decide(s: SessionState) -> relevance.Selection:
            order = relevance.recall(s.forwarded, seen, listed)
            sel = relevance.select(view, td, keep, order, s.expanded, ranker, size)
            relevance.remember(s.forwarded, seen, [t.name for t in sel.kept], listed)
            return sel

        sel = self._decide(session, decide)
        self._count(record, sel.kept, sel.deferred)
        if len(sel.kept) == total and tuple(t.name for t in sel.kept) == view.offered.names:
            return Prepared()
        new = adapter.with_tools(text, [t.raw for t in sel.kept])
        record.outcome = "pending"
        ctx = FlowContext(adapter, session.key, session.tenant, session.persist, new, original, NoLoopMode(adapter),
                          {}, [t.name for t in sel.kept], record, view.stream)
        return Prepared(new.encode("utf-8"), ctx)

    def _deferral(self, adapter: Adapter, view: RequestView, text: str, original: bytes, session: _Session,
                  record: Record) -> Prepared:
        td = self.config.tool_discovery
        phantom = td.search_tool_name
        seen = view.offered.name_set
        if phantom in seen:
            record.fallback_reason = "search_tool_name_taken"
            logger.warning("client already sends a tool named {}: not deferring", phantom)
            return Prepared()
        ranker = _ranked_now(self.ranker, view) if td.defer.upfront else None
        applies = not td.strategy.remote or self._in_rollout(session.key)  # else the request goes unchanged
        natives = adapter.native_deferral()
        model = natives.native_model(view) if natives is not None else ""
        # Responses names its native search call itself: a client function of that name would be mistaken for it.
        natives = natives if natives is not None and natives.native_search(phantom) not in seen else None
        # Call-through: found tools stay deferred (called through the dispatcher), so tools[] never grows.
        through = adapter.call_through() if adapter.api in td.defer.call_through else None
        through = through if td.call_tool_name not in seen else None

        # The key a refusal of call-through is remembered by: the model, or the API (Gemini names it in the path).
        through_key = view.model or adapter.api
        # Read before the session's transaction (a store read of its own); searches rank with them too.
        priors = self.learner.priors(session.tenant) if self.learner is not None and session.persist else None
        bonus = partial(priors.bonus, view.query, view.tools, relevance.W_LEARNED) if priors and td.defer.upfront else None

        def decide(s: SessionState) -> tuple[deferral.DeferralPlan, deferral.DeferralPlan | None, CallThrough | None]:
            through_here = through if through_key not in s.classic else None
            # The session's first turn chooses what stays loaded, with what the tenant's traffic
            # learned; later turns reuse that choice.
            learned = bonus() if bonus is not None and not s.upfront else None
            plan = deferral.plan(view, td, s.upfront, () if through_here is not None else s.expanded, ranker, learned)
            if plan.skipped or not applies:
                return plan, None, None
            if not s.upfront:  # chosen once per session, never re-ranked (see deferral.plan)
                s.upfront = [t.name for t in plan.kept]
            natively = None
            if natives is not None and native.applies(natives, model, td, s.classic):
                natively = native.plan(view, td, (s.upfront or ()) if td.defer.native_upfront else ())
                natively = None if natively.skipped else natively
            return plan, natively, through_here

        plan, natively, calls_through = self._decide(session, decide)  # calls_through: the adapter's side
        if plan.skipped:
            record.fallback_reason = plan.skipped
            return Prepared()
        if td.strategy.remote and (held := self._rollout(view, plan, session.key, record)) is not None:
            return held
        record.outcome = "pending"
        classic = partial(self._classic, adapter, plan, text, original, session, record, view)
        if calls_through is not None:
            # Refused (an API version without ``parametersJsonSchema``): this request the classic way.
            ctx = self._through(adapter, calls_through, plan, text, original, session, record, view,
                                through_key, classic)
        elif natively is not None and natives is not None:
            ctx = self._native(adapter, natives, natively, plan, text, original, session, record, view, model,
                               classic)
        else:
            ctx = classic(model)
        record.deferral = ctx.mode.name
        if priors is not None:
            ctx.priors, ctx.offered = priors, view.offered.by_name
        return Prepared(ctx.body.encode("utf-8"), ctx, self._warm_up(ctx.searchable))

    def _tools(self, adapter: Adapter, plan: deferral.DeferralPlan, text: str, added: list[str], record: Record
               ) -> str:
        """The forwarded body: kept tools, ``added`` (ours), tools found earlier; counted."""
        new = adapter.with_tools(text, [t.raw for t in plan.kept] + added + [t.raw for t in plan.expanded])
        self._count(record, plan.kept + plan.expanded, plan.deferred, extra=sum(map(estimate_tokens, added)))
        return new

    def _search_tool(self, adapter: Adapter, plan: deferral.DeferralPlan, view: RequestView,
                     dispatcher: str | None = None) -> str:
        """The search tool, described over deferred + found: a discovery then leaves its text,
        and so the cached prompt prefix up to it, unchanged."""
        td = self.config.tool_discovery
        description = deferral.described(view.offered, plan, self._backend(), td.max_search_results, dispatcher)
        return adapter.phantom_tool(td.search_tool_name, description)

    def _classic(self, adapter: Adapter, plan: deferral.DeferralPlan, text: str, original: bytes,
                 session: _Session, record: Record, view: RequestView, model: str = "") -> FlowContext:
        """Classic deferral: kept tools, the search tool, tools found earlier; a discovery appends.

        Searchable are the deferred tools of this request alone: a session may be shared by
        clients with other tools (one credential, the same first message), and a definition
        only another client sent must never reach this one's model (``sessions``)."""
        phantom = self.config.tool_discovery.search_tool_name
        new = self._tools(adapter, plan, text, [self._search_tool(adapter, plan, view)], record)
        loaded = [t.name for t in plan.kept + plan.expanded]
        return FlowContext(adapter, session.key, session.tenant, session.persist, new, original,
                           ClassicMode(adapter, phantom, model), {t.name: t for t in plan.deferred},
                           loaded + [phantom], record, view.stream)

    def _through(self, adapter: Adapter, through: CallThrough, plan: deferral.DeferralPlan, text: str,
                 original: bytes, session: _Session, record: Record, view: RequestView, key: str,
                 classic: Callable[[str], FlowContext]) -> FlowContext:
        """Call-through (``policy.call_through``): kept tools, the search tool and the
        dispatcher, the same for the whole session; found tools are called through the
        dispatcher, and the history's calls of deferred tools go upstream as the dispatcher
        calls they were made as. ``classic``: this request deferred the classic way, should
        the upstream refuse the dispatcher."""
        td = self.config.tool_discovery
        phantom, dispatcher = td.search_tool_name, td.call_tool_name
        catalog = {t.name: t for t in plan.deferred}
        added = [self._search_tool(adapter, plan, view, dispatcher),
                 through.dispatcher_tool(dispatcher, call_through.description(phantom))]
        new = self._tools(adapter, plan, through.wrap(text, catalog.keys(), dispatcher), added, record)
        loaded = [t.name for t in plan.kept + plan.expanded]
        ctx = FlowContext(adapter, session.key, session.tenant, session.persist, new, original,
                          ClassicMode(adapter, phantom), catalog, loaded + [phantom, dispatcher], record, view.stream)
        # The dispatcher resolves names over the very catalog the searches use.
        dispatch = call_through.Dispatch(dispatcher, phantom, ctx.searchable, loaded)
        ctx.mode = CallThroughMode(adapter, through, dispatch, key, partial(classic, key))
        return ctx

    def _native(self, adapter: Adapter, natives: NativeDeferral, natively: deferral.DeferralPlan,
                plan: deferral.DeferralPlan, text: str, original: bytes, session: _Session, record: Record,
                view: RequestView, model: str, classic: Callable[[str], FlowContext]) -> FlowContext:
        """Native deferral (``policy.native``): the client's tools as they are, deferred ones
        marked, the search tool last; searchable are the deferred tools of this request only
        (a reference must name a tool in ``tools[]``). Tools found on earlier turns stay deferred:
        their loading references are in hidden rounds the client's history lacks (restoring those
        rounds brings them back), and loading them here would change ``tools[]``. ``classic``
        makes this request deferred the classic way (``plan``), should the upstream refuse the
        native form: only then, since it is a whole body of its own."""
        td = self.config.tool_discovery
        description = deferral.described(view.offered, natively, self._backend(), td.max_search_results, natively=True)
        search = natives.native_search_tool(td.search_tool_name, description)
        body = natives.native_tools(text, [t.name for t in natively.deferred], search)
        self._count(record, natively.kept, natively.deferred, extra=estimate_tokens(search))
        # The deferred definitions still go upstream (marked): on the wire, not in the prompt. Counted
        # from the definitions, not by parsing the forwarded body again (each marked one: its text and the mark).
        record.tool_tokens_wire = record.tool_tokens_before + estimate_tokens(search) + _marks(view, natively)
        name = natives.native_search(td.search_tool_name)
        # Refused: the classic request, which counts itself on the record again.
        mode: NativeMode[FlowContext] = NativeMode(adapter, name, model, fallback=lambda: classic(model))
        return FlowContext(adapter, session.key, session.tenant, session.persist, body, original, mode,
                           {t.name: t for t in natively.deferred}, [t.name for t in natively.kept] + [name],
                           record, view.stream)

    def _backend(self) -> str:
        """The search backend named in the search tool's description."""
        td = self.config.tool_discovery
        return "api" if td.strategy.remote else td.search.backend

    def _warm_up(self, tools: Catalog) -> Callable[[], Awaitable[None]] | None:
        """Build the catalog's search index while the model is still answering, so its first
        search does not wait for it (the search service builds each catalog's once)."""
        if self.config.tool_discovery.strategy.remote or not tools or self._warmed(tools):
            return None
        return lambda: self._warm(tools)

    def _rollout(self, view: RequestView, plan: deferral.DeferralPlan, key: str, record: Record) -> Prepared | None:
        """The api strategy's staged rollout (``api.rollout``). ``None``: this request gets the
        api strategy in full. Otherwise the request goes upstream unchanged; dark and shadow
        ask the selector in the background and log what it would have loaded."""
        api = self.config.tool_discovery.api
        record.rollout = api.rollout
        if api.rollout == "full":
            return None
        if api.rollout == "partial":
            inside = self._in_rollout(key)
            record.rollout = f"partial:{'in' if inside else 'out'}"
            if inside:
                return None
            record.fallback_reason = "rollout_excluded"
            return Prepared()
        record.outcome = "pending"  # the background task completes the record
        return Prepared(background=lambda: self._shadow(view, plan, record))

    def _in_rollout(self, key: str) -> bool:
        """Whether the api strategy applies to this session (a hash bucket: a session stays in or out)."""
        api = self.config.tool_discovery.api
        bucket = int(key[:8], 16) % 10_000 / 100
        return api.rollout == "full" or (api.rollout == "partial" and bucket < api.rollout_percent)

    def _count(self, record: Record, kept: tuple[Tool, ...], deferred: tuple[Tool, ...], extra: int = 0) -> None:
        record.kept_tools = len(kept)
        record.deferred_tools = len(deferred)
        record.tool_tokens_after = record.tool_tokens_wire = sum(estimate_tokens(t.raw) for t in kept) + extra


_MARK = ',"defer_loading":true'  # what native deferral adds to a definition (``common.deferred_text``)


def _marked_extra(tool: Tool) -> int:
    """The estimated tokens the mark adds to ``tool``'s definition (none when it has one)."""
    if '"defer_loading"' in tool.raw:
        return 0
    return tokens_for(len(tool.raw) + len(_MARK)) - tokens_for(len(tool.raw))


def _marks(view: RequestView, plan: deferral.DeferralPlan) -> int:
    """What marking the plan's deferred tools adds (``_marked_extra``): the catalog's total (once)
    less the few tools left loaded."""
    offered = view.offered
    if len(plan.kept) + len(plan.deferred) + len(plan.expanded) != len(offered.tools):  # not a plan over it
        return sum(map(_marked_extra, plan.deferred))
    total = offered.derived("marks", lambda: sum(map(_marked_extra, offered.tools)))
    return total - sum(map(_marked_extra, plan.kept + plan.expanded))


def _text(body: bytes) -> str:
    """The body as the adapters read it: a JSON body is UTF-8 (RFC 8259 §8.1), any other we
    cannot read, like a body no adapter parses."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unsupported(f"body is not UTF-8: {e.reason} at byte {e.start}") from None


def _ranked_now(ranker: Ranker, view: RequestView) -> Ranker:
    """``ranker``'s order over the request's whole catalog, computed now, before the session
    transaction: ranking may build an index or embed a catalog, never while the store is
    locked. Ranking a subset (deferral ranks the tools not found yet) reads it filtered."""
    if ranker is None or not view.query.strip():
        return ranker
    order = ranker(view.query, view.tools, len(view.tools))

    def ranked(query: str, tools: Sequence[Tool], limit: int) -> list[str]:
        names = {t.name for t in tools}
        return [n for n in order if n in names][:limit]

    return ranked
