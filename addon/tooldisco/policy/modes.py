"""The deferral flavour of one flow, as one object the planner chooses and the rest asks.

Why objects: the loop, the runner, the search service and the stitchers each differ by
flavour in a few small ways (how found tools reach the model, which calls the client sees
as made, which stitcher, what to send when the upstream refuses the flavour's fields).
Each flavour says so itself here, once, instead of every caller testing flags:

- ``ClassicMode``: found tools are appended to ``tools[]`` (``policy.deferral``);
- ``NativeMode``: found tools load inline, ``tools[]`` never changes (``policy.native``);
- ``CallThroughMode``: found tools are called through a dispatcher (``policy.call_through``);
- ``NoLoopMode``: no search tool at all (relevance, passthrough): the loop answers only the
  calls of tools the policy withholds.

Each flavour also builds its own forwarded body: ``Mode.build(**context)`` takes the request
(``adapter``, ``view``, ``text``), the plan, the settings and what the policy withholds, and
returns a ``Built`` (the body, the mode object, what a search may find, what was loaded), so
the planner has one call for every flavour and the policy lands in one place.

``withheld``: tools of the client's the policy keeps from this request (denied, or held for
review), by name, with the error the model reads should it call one anyway: the proxy answers
that call in a hidden round, like a search, and the client never sees it.

``F`` is what a refused flavour falls back to (the engine's flow context, built by the
planner): the policy never sees the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

from tooldisco.apis.base import Adapter, CallThrough, NativeDeferral, Stitcher
from tooldisco.config import ToolDiscovery
from tooldisco.core.tokens import estimate_tokens, tokens_for
from tooldisco.core.types import RequestView, Target, Tool, ToolCall, ToolResult
from tooldisco.policy import call_through, deferral
from tooldisco.policy.call_through import Dispatch
from tooldisco.policy.deferral import DeferralPlan
from tooldisco.search.base import Catalog

NOTHING: Mapping[str, str] = MappingProxyType({})

F = TypeVar("F")
F_co = TypeVar("F_co", covariant=True)


class DeferralMode(Protocol[F_co]):
    """What the loop, the runner, the searches and the stitchers ask of a flow's flavour."""

    @property
    def name(self) -> str:
        """The telemetry's ``deferral``: "classic", "native", "call-through"; "" without a loop."""
        ...

    @property
    def search(self) -> str:
        """The search tool's name as the model calls it; "" without a loop."""
        ...

    @property
    def refusal_key(self) -> str:
        """What the session remembers a refusal by (the model, or the API)."""
        ...

    @property
    def withheld(self) -> Mapping[str, str]:
        """The client's tools kept from this request, with the error the model reads."""
        ...

    @property
    def adapter(self) -> Adapter:
        """The wire API the flow speaks."""
        ...

    @property
    def fallback(self) -> Callable[[], F_co] | None:
        """The same request deferred the classic way, made when the upstream refuses this
        flavour's fields; None when there is nothing to fall back to."""
        ...

    @property
    def loads_tools(self) -> bool:
        """Whether a search result brings tools into the model's reach (call-through's only
        name them): a failed selector then loads every deferred one instead."""
        ...

    @property
    def dispatcher(self) -> str | None:
        """Call-through's dispatcher name (what a search result tells the model to call)."""
        ...

    @property
    def hidden(self) -> tuple[str, ...]:
        """The names whose calls the client never sees: the search tool's and the withheld tools'."""
        ...

    def answers(self, call: ToolCall) -> bool:
        """Whether the proxy answers ``call`` itself (a search, a dispatcher call, a withheld tool's)."""
        ...

    def targets(self, calls: Sequence[ToolCall]) -> Mapping[str, Target | str]:
        """Dispatcher calls by id, with the real call each stands for or the error the model
        reads; calls of withheld tools by id, with theirs."""
        ...

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` with the calls as the client is shown them (search calls still in)."""
        ...

    def hide(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` as the upstream's conversation goes on when the client answers only its
        real calls: without the calls the proxy answered in a hidden round (searches apart)."""
        ...

    def loads_found(self, results: Sequence[ToolResult], found: Sequence[Sequence[Tool]]
                    ) -> tuple[list[ToolResult], list[str]]:
        """The results to send back and the definitions to append to ``tools[]``, for the
        search ``results`` and the tools new to the model each found."""
        ...

    def stitcher(self, body: str) -> Stitcher:
        """The live stream stitcher of this flow; ``body``: the request as the client sent it."""
        ...


@dataclass(frozen=True)
class Built(Generic[F]):
    """What a flavour's ``build`` makes of one request."""

    body: str  # as forwarded
    mode: DeferralMode[F]
    catalog: dict[str, Tool]  # what a search may find: deferred tools of this very request
    forwarded: list[str]  # names loaded in the forwarded list, the proxy's own included
    loaded: tuple[Tool, ...]  # the client's tools in the model's prompt
    deferred: tuple[Tool, ...]
    extra: int = 0  # estimated tokens of the proxy's own tools
    wire: int | None = None  # estimated tool tokens on the wire, when more than in the prompt (native)


def _withheld_targets(withheld: Mapping[str, str], calls: Sequence[ToolCall]) -> dict[str, Target | str]:
    return {c.id: withheld[c.name] for c in calls if c.name in withheld} if withheld else {}


def _search_tool(adapter: Adapter, plan: DeferralPlan, view: RequestView, td: ToolDiscovery, backend: str,
                 dispatcher: str | None = None) -> str:
    """The search tool, described over deferred + found: a discovery then leaves its text,
    and so the cached prompt prefix up to it, unchanged."""
    description = deferral.described(view.offered, plan, backend, td.max_search_results, dispatcher)
    return adapter.phantom_tool(td.search_tool_name, description)


def _with_tools(adapter: Adapter, plan: DeferralPlan, text: str, added: list[str]) -> str:
    """The forwarded body: kept tools, ``added`` (ours), tools found earlier."""
    return adapter.with_tools(text, [t.raw for t in plan.kept] + added + [t.raw for t in plan.expanded])


@dataclass(frozen=True)
class ClassicMode(Generic[F]):
    """Classic deferral: found tools are appended to ``tools[]``."""

    adapter: Adapter
    search: str
    refusal_key: str = ""
    name: str = "classic"
    fallback: Callable[[], F] | None = None
    loads_tools: bool = True
    dispatcher: str | None = None
    withheld: Mapping[str, str] = NOTHING

    @classmethod
    def build(cls, *, adapter: Adapter, plan: DeferralPlan, text: str, view: RequestView, td: ToolDiscovery,
              backend: str, model: str = "", withheld: Mapping[str, str] = NOTHING, **_: Any) -> Built[F]:
        """Kept tools, the search tool, tools found earlier; a discovery appends.

        Searchable are the deferred tools of this request alone: a session may be shared by
        clients with other tools (one credential, the same first message), and a definition
        only another client sent must never reach this one's model."""
        search = _search_tool(adapter, plan, view, td, backend)
        loaded = plan.kept + plan.expanded
        return Built(_with_tools(adapter, plan, text, [search]),
                     ClassicMode(adapter, td.search_tool_name, model, withheld=withheld),
                     {t.name: t for t in plan.deferred}, [t.name for t in loaded] + [td.search_tool_name],
                     loaded, plan.deferred, estimate_tokens(search))

    @property
    def hidden(self) -> tuple[str, ...]:
        return (self.search, *self.withheld) if self.search else tuple(self.withheld)

    def answers(self, call: ToolCall) -> bool:
        return call.name == self.search or call.name in self.withheld

    def targets(self, calls: Sequence[ToolCall]) -> Mapping[str, Target | str]:
        return _withheld_targets(self.withheld, calls)

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        return message

    def hide(self, message: dict[str, Any]) -> dict[str, Any]:
        return message

    def loads_found(self, results: Sequence[ToolResult], found: Sequence[Sequence[Tool]]
                    ) -> tuple[list[ToolResult], list[str]]:
        return list(results), [t.raw for new in found for t in new]

    def stitcher(self, body: str) -> Stitcher:
        stitcher = self.adapter.stitcher(self.search, body)
        stitcher.hidden = frozenset(self.hidden)
        return stitcher


@dataclass(frozen=True)
class NoLoopMode(ClassicMode[F]):
    """No search tool (relevance, passthrough): the proxy answers only withheld tools' calls."""

    search: str = ""
    name: str = ""

    @classmethod
    def build(cls, *, adapter: Adapter, kept: Sequence[Tool], text: str,  # type: ignore[override]
              deferred: Sequence[Tool] = (), withheld: Mapping[str, str] = NOTHING, **_: Any) -> Built[F]:
        """``kept`` forwarded as they are, in the client's order; nothing is searchable."""
        return Built(adapter.with_tools(text, [t.raw for t in kept]), NoLoopMode(adapter, withheld=withheld),
                     {}, [t.name for t in kept], tuple(kept), tuple(deferred))

    def answers(self, call: ToolCall) -> bool:
        return call.name in self.withheld


@dataclass(frozen=True)
class NativeMode(ClassicMode[F]):
    """Native deferral: results load found tools where they stand; ``tools[]`` never changes.
    ``search`` is the name the API's own search call goes by (``NativeDeferral.native_search``)."""

    name: str = "native"

    @classmethod
    def build(cls, *, adapter: Adapter, natives: NativeDeferral, natively: DeferralPlan,  # type: ignore[override]
              text: str, view: RequestView, td: ToolDiscovery, backend: str, model: str = "",
              fallback: Callable[[], F] | None = None, withheld: Mapping[str, str] = NOTHING,
              **_: Any) -> Built[F]:
        """The client's tools as they are, deferred ones marked, the search tool last;
        searchable are the deferred tools of this request only (a reference must name a tool in
        ``tools[]``). Tools found on earlier turns stay deferred: their loading references are in
        hidden rounds the client's history lacks (restoring those rounds brings them back), and
        loading them here would change ``tools[]``. ``fallback`` makes this request deferred the
        classic way, should the upstream refuse the native form: only then, since it is a whole
        body of its own."""
        description = deferral.described(view.offered, natively, backend, td.max_search_results, natively=True)
        search = natives.native_search_tool(td.search_tool_name, description)
        body = natives.native_tools(text, [t.name for t in natively.deferred], search)
        name = natives.native_search(td.search_tool_name)
        mode: NativeMode[F] = NativeMode(adapter, name, model, fallback=fallback, withheld=withheld)
        # The deferred definitions still go upstream (marked): on the wire, not in the prompt. Counted
        # from the definitions, not by parsing the forwarded body again (each marked one: its text and the mark).
        wire = view.offered.tokens + estimate_tokens(search) + _marks(view, natively)
        return Built(body, mode, {t.name: t for t in natively.deferred}, [t.name for t in natively.kept] + [name],
                     natively.kept, natively.deferred, estimate_tokens(search), wire)

    def loads_found(self, results: Sequence[ToolResult], found: Sequence[Sequence[Tool]]
                    ) -> tuple[list[ToolResult], list[str]]:
        return [replace(r, loads=tuple(new)) for r, new in zip(results, found)], []


@dataclass(frozen=True)
class CallThroughMode(Generic[F]):
    """Call-through: found tools are called through the dispatcher, whose calls reach the
    client as calls of the real tool; ``tools[]`` never changes."""

    adapter: Adapter
    through: CallThrough  # the adapter's call-through side
    dispatch: Dispatch
    refusal_key: str = ""
    fallback: Callable[[], F] | None = None
    name: str = "call-through"
    loads_tools: bool = False
    withheld: Mapping[str, str] = NOTHING

    @classmethod
    def build(cls, *, adapter: Adapter, through: CallThrough, plan: DeferralPlan, text: str, view: RequestView,
              td: ToolDiscovery, backend: str, refusal_key: str = "", fallback: Callable[[], F] | None = None,
              withheld: Mapping[str, str] = NOTHING, **_: Any) -> Built[F]:
        """Kept tools, the search tool and the dispatcher, the same for the whole session;
        found tools are called through the dispatcher, and the history's calls of deferred
        tools go upstream as the dispatcher calls they were made as. ``fallback``: this
        request deferred the classic way, should the upstream refuse the dispatcher."""
        phantom, dispatcher = td.search_tool_name, td.call_tool_name
        catalog = {t.name: t for t in plan.deferred}
        added = [_search_tool(adapter, plan, view, td, backend, dispatcher),
                 through.dispatcher_tool(dispatcher, call_through.description(phantom))]
        body = _with_tools(adapter, plan, through.wrap(text, catalog.keys(), dispatcher), added)
        loaded = plan.kept + plan.expanded
        names = [t.name for t in loaded]
        # The dispatcher resolves names over the very catalog the searches use.
        dispatch = Dispatch(dispatcher, phantom, Catalog(catalog.values()), names, withheld)
        mode: CallThroughMode[F] = CallThroughMode(adapter, through, dispatch, refusal_key, fallback,
                                                   withheld=withheld)
        return Built(body, mode, catalog, names + [phantom, dispatcher], loaded, plan.deferred,
                     sum(map(estimate_tokens, added)))

    @property
    def search(self) -> str:
        return self.dispatch.search

    @property
    def dispatcher(self) -> str | None:
        return self.dispatch.name

    @property
    def hidden(self) -> tuple[str, ...]:
        return (self.dispatch.search, *self.withheld)

    def answers(self, call: ToolCall) -> bool:
        return call.name in (self.dispatch.search, self.dispatch.name) or call.name in self.withheld

    def targets(self, calls: Sequence[ToolCall]) -> Mapping[str, Target | str]:
        out: dict[str, Target | str] = {c.id: t for c in calls if (t := self.dispatch.resolve(c)) is not None}
        out.update(_withheld_targets(self.withheld, calls))
        return out

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.through.unwrap(message, self.dispatch.resolve)

    def hide(self, message: dict[str, Any]) -> dict[str, Any]:
        dispatch = self.dispatch
        return self.through.unwrap(message, lambda c: t if isinstance(t := dispatch.resolve(c), str) else None)

    def loads_found(self, results: Sequence[ToolResult], found: Sequence[Sequence[Tool]]
                    ) -> tuple[list[ToolResult], list[str]]:
        return list(results), []

    def stitcher(self, body: str) -> Stitcher:
        stitcher = self.through.stitcher(self.dispatch.search, body, self.dispatch)
        stitcher.hidden = frozenset(self.hidden)
        return stitcher


_MARK = ',"defer_loading":true'  # what native deferral adds to a definition (``splice.deferred_text``)


def _marked_extra(tool: Tool) -> int:
    """The estimated tokens the mark adds to ``tool``'s definition (none when it has one)."""
    if '"defer_loading"' in tool.raw:
        return 0
    return tokens_for(len(tool.raw) + len(_MARK)) - tokens_for(len(tool.raw))


def _marks(view: RequestView, plan: DeferralPlan) -> int:
    """What marking the plan's deferred tools adds (``_marked_extra``): the catalog's total (once)
    less the few tools left loaded."""
    offered = view.offered
    if len(plan.kept) + len(plan.deferred) + len(plan.expanded) != len(offered.tools):  # not a plan over it
        return sum(map(_marked_extra, plan.deferred))
    total = offered.derived("marks", lambda: sum(map(_marked_extra, offered.tools)))
    return total - sum(map(_marked_extra, plan.kept + plan.expanded))
