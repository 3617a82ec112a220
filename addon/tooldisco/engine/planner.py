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
from tooldisco.apis.base import Adapter, CallThrough
from tooldisco.core.types import RequestView, Tool, Unsupported
from tooldisco.search.base import Catalog
from tooldisco.search.priors import Priors
from tooldisco.state.base import SessionState, SessionStore, session_key
from tooldisco.policy import agents, deferral, native, rejection, relevance
from tooldisco.policy.modes import NOTHING, Built, CallThroughMode, ClassicMode, DeferralMode, NativeMode, NoLoopMode
from tooldisco.engine.governance import Governance, Review
from tooldisco.core.types import ToolCatalog
from tooldisco.engine.telemetry import Record, TelemetrySink
from tooldisco.core.tokens import estimate_tokens
from tooldisco.core.tenants import tenant_of

Ranker = relevance.Ranker | None
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
        text = error[:rejection.MAX_ERROR_CHARS].decode("utf-8", "replace")
        if any(f"{name}" in text for name in self.mode.withheld):
            # About a tool the policy withholds (a tool_choice forcing it): the request as the policy
            # lets it go (``original``) gets the same answer, so it is not sent again.
            return None
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
                 learner: Learner | None = None, warmed: Callable[[Catalog], bool] = lambda tools: False,
                 governance: Governance | None = None) -> None:
        self.config = config
        self.governance = governance if governance is not None and governance.active else None
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
        allowed: list[bytes] = []  # the body as the policy lets it go, once worked out: what a failure forwards
        try:
            text = _text(body)
            with jsonspan.reusing(text):  # the body's objects decoded once, however often searched
                return self._plan(adapter, headers, body, text, query, record, allowed)
        except Unsupported as e:
            record.fallback_reason = f"unsupported: {e}"
            logger.warning("tool discovery skipped ({}): {}", adapter.api, e)
            return Prepared(allowed[0] if allowed else None, record=record)
        except Exception as e:  # fail open: whatever went wrong, forward unchanged (less what the policy withholds)
            record.fallback_reason = f"error: {type(e).__name__}"
            logger.opt(exception=e).warning("tool discovery failed ({}); forwarding unchanged", adapter.api)
            return Prepared(allowed[0] if allowed else None, record=record)
        finally:
            record.processing_ms = round((time.perf_counter() - started) * 1000, 3)
            if record.outcome != "pending" and not hold:  # else the runner (or the rollout, or the caller) does
                self.telemetry.submit(record)

    def _plan(self, adapter: Adapter, headers: Mapping[str, str], body: bytes, text: str, query: str,
              record: Record, allowed: list[bytes]) -> Prepared:
        """``prepare``'s work on the decoded body; whatever it raises, ``prepare`` fails open
        (forwarding ``allowed``'s body once the policy has withheld tools from it)."""
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
        review = Review()
        if self.governance is not None:
            review = self.governance.review(view, headers, session.tenant if session.persist else None, record)
        if review.withheld:  # gone from the request before any strategy reads it
            view, text = _withhold(adapter, view, text, review.withheld)
            body = text.encode("utf-8")
            allowed.append(body)
        forwarded = text
        if session.persist and td.strategy.defers:  # the strategies that stitch
            # The upstream goes on from what it really produced, not from the message stitched for the client.
            lookup = partial(self.store.rounds, session.tenant, session.key)
            if review.withheld:  # rounds that loaded a tool withheld now stay as the client saw them
                lookup = partial(_unless_naming, lookup, tuple(f'"{n}"' for n in review.withheld))
            forwarded, record.restored = rounds.restore(adapter, text, lookup)
        if session.head:  # the client chains from the id it was shown; the server from the last round
            forwarded = adapter.chain_from(forwarded, session.head)
        if session.pending:  # results a stored chain still awaits from a mixed turn the client saw
            forwarded = adapter.with_owed_results(forwarded, session.pending)
        match td.strategy:
            case Strategy.PASSTHROUGH:
                record.fallback_reason = "passthrough"
                prepared = self._as_sent(adapter, view, forwarded, body, session, record, review)
            case _ if defers := deferral.client_defers(view, td):
                # The client searches its own deferred tools: a second search tool beside it could
                # only fail, and hiding more tools would put them where its search cannot look.
                record.fallback_reason = defers
                prepared = self._as_sent(adapter, view, forwarded, body, session, record, review)
            case Strategy.RELEVANCE:
                prepared = self._relevance(adapter, view, forwarded, body, session, record, review)
            case Strategy.TOOL_SEARCH | Strategy.API:
                prepared = self._deferral(adapter, view, forwarded, body, session, record, review)
        if (session.pending or session.head or record.restored or review.withheld) and prepared.body is None:
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

    def _context(self, build: Callable[..., Built[FlowContext]], session: _Session, record: Record,
                 view: RequestView, original: bytes, **context: object) -> FlowContext:
        """The flow context of one flavour's body (``Mode.build(**context)``), counted on ``record``."""
        built = build(view=view, **context)
        self._count(record, built.loaded, built.deferred, extra=built.extra)
        if built.wire is not None:
            record.tool_tokens_wire = built.wire
        ctx = FlowContext(built.mode.adapter, session.key, session.tenant, session.persist, built.body, original,
                          built.mode, built.catalog, built.forwarded, record, view.stream)
        if isinstance(built.mode, CallThroughMode):  # the dispatcher and the searches share one catalog
            ctx.searchable = built.mode.dispatch.catalog
        return ctx

    def _as_sent(self, adapter: Adapter, view: RequestView, text: str, original: bytes, session: _Session,
                 record: Record, review: Review) -> Prepared:
        """A request no strategy changes: as it came, unless the policy withheld tools from it;
        then the rest as sent, and a call of a withheld tool is answered in a hidden round."""
        if not review.withheld:
            return Prepared()
        record.outcome = "pending"
        ctx = self._context(NoLoopMode.build, session, record, view, original, adapter=adapter, kept=view.tools,
                            text=text, withheld=review.withheld)
        ctx.rewritten = True
        return Prepared(ctx.body.encode("utf-8"), ctx)

    def _relevance(self, adapter: Adapter, view: RequestView, text: str, original: bytes, session: _Session,
                   record: Record, review: Review) -> Prepared:
        td = review.settings or self.config.tool_discovery
        total = len(view.tools)
        keep = relevance.keep_count(total, td)
        if review.max_loaded is not None:
            keep = min(keep, review.max_loaded)
        if not total or total <= td.min_tools or keep >= total:
            record.fallback_reason = "no_tools" if not total else "below_min_tools"
            return self._as_sent(adapter, view, text, original, session, record, review)
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
            return self._as_sent(adapter, view, text, original, session, record, review)
        record.outcome = "pending"
        ctx = self._context(NoLoopMode.build, session, record, view, original, adapter=adapter, kept=sel.kept,
                            deferred=sel.deferred, text=text, withheld=review.withheld)
        return Prepared(ctx.body.encode("utf-8"), ctx)

    def _deferral(self, adapter: Adapter, view: RequestView, text: str, original: bytes, session: _Session,
                  record: Record, review: Review) -> Prepared:
        td = review.settings or self.config.tool_discovery
        phantom = td.search_tool_name
        seen = view.offered.name_set
        if phantom in seen:
            record.fallback_reason = "search_tool_name_taken"
            logger.warning("client already sends a tool named {}: not deferring", phantom)
            return self._as_sent(adapter, view, text, original, session, record, review)
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
            plan = deferral.plan(view, td, s.upfront, () if through_here is not None else s.expanded, ranker, learned,
                                 most=review.max_loaded)
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
            return self._as_sent(adapter, view, text, original, session, record, review)
        if td.strategy.remote and (held := self._rollout(view, plan, session.key, record)) is not None:
            if held.background is None:  # outside the rollout: as sent (less what the policy withholds)
                return self._as_sent(adapter, view, text, original, session, record, review)
            return held  # dark or shadow: the body as sent (``_plan`` applies the policy's)
        record.outcome = "pending"
        # Every flavour's build takes the same keyword context; each reads what it needs.
        context = dict(adapter=adapter, text=text, td=td, backend=self._backend(), withheld=review.withheld or NOTHING)

        def classic(key: str = model) -> FlowContext:
            return self._context(ClassicMode.build, session, record, view, original, plan=plan, model=key, **context)

        if calls_through is not None:
            # Refused (an API version without ``parametersJsonSchema``): this request the classic way.
            ctx = self._context(CallThroughMode.build, session, record, view, original, through=calls_through,
                                plan=plan, refusal_key=through_key, fallback=partial(classic, through_key), **context)
        elif natively is not None and natives is not None:
            # Refused: the classic request, which counts itself on the record again.
            ctx = self._context(NativeMode.build, session, record, view, original, natives=natives,
                                natively=natively, model=model, fallback=classic, **context)
        else:
            ctx = classic()
        record.deferral = ctx.mode.name
        if priors is not None:
            ctx.priors, ctx.offered = priors, view.offered.by_name
        return Prepared(ctx.body.encode("utf-8"), ctx, self._warm_up(ctx.searchable))

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


#: What a round that loads tools natively carries: Anthropic's (and Bedrock's) ``tool_reference``
#: blocks, a Responses ``tool_search_output`` with the definitions.
_LOADS = ("tool_reference", "tool_search_output")


def _unless_naming(lookup: Callable[[str], list[str] | None], quoted: tuple[str, ...], digest: str
                   ) -> list[str] | None:
    """``lookup``'s rounds, unless one loads a tool the policy withholds now (a native reference to
    it, a search output carrying its definition: a tool held after a search found it): restored,
    they would put back upstream what the policy keeps out, and reference a tool no longer in
    ``tools[]``. Rounds that only call one (answered with the policy's error) are restored."""
    found = lookup(digest)
    if found is not None and any(any(m in entry for m in _LOADS) and any(q in entry for q in quoted)
                                 for entry in found):
        return None
    return found


def _withhold(adapter: Adapter, view: RequestView, text: str, withheld: Mapping[str, str]) -> tuple[RequestView, str]:
    """``view`` and ``text`` without the tools the policy withholds. The smaller catalog is kept on
    the client's (``ToolCatalog.derived``), so a session's later turns reuse it and what is
    derived from it, like any catalog."""
    offered = view.offered
    gone = frozenset(n for n in withheld if n in offered.by_name)
    if not gone:
        return view, text

    def smaller() -> ToolCatalog:
        kept = tuple(t for t in offered.tools if t.name not in gone)
        return ToolCatalog(kept, tuple(t.raw for t in kept))

    catalog = offered.derived(("withheld", gone), smaller, per_set=True)
    return replace(view, tools=catalog.tools, catalog=catalog), adapter.with_tools(text, catalog.raws)


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
