"""Deferral for tool-search and api: tools wait behind the phantom search tool until found.

Forwarded list: kept tools in the client's order, then the phantom search tool, then
tools found earlier in the session in discovery order. Appending found tools keeps the
prefix before them byte-stable, so a discovery costs the cache only what comes after.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from tooldisco.config import ToolDiscovery
from tooldisco.core.types import RequestView, Tool, ToolCatalog
from tooldisco.core.tokens import estimate_tokens
from tooldisco.policy.client_search import client_search
from tooldisco.policy.relevance import Ranker, pinned_names, select

_QUERY_HELP = {
    "regex": "a case-insensitive regular expression over tool names, descriptions and parameters "
    "(e.g. 'github.*issue', 'weather|forecast'); plain words work too and typos are tolerated",
    "fuzzy": "keywords (typos are tolerated)",
    "bm25": "keywords describing the task (e.g. 'create github issue')",
    "hybrid": "a short description of the task or keywords (e.g. 'create github issue')",
    "api": "a short description of the task or keywords (e.g. 'create github issue')",
}


@dataclass(frozen=True)
class DeferralPlan:
    kept: tuple[Tool, ...]  # forwarded before the search tool, client order
    deferred: tuple[Tool, ...]  # searchable, not forwarded
    expanded: tuple[Tool, ...]  # found earlier in the session, forwarded after the search tool
    skipped: str | None = None  # why nothing was deferred


def groups(tools: Sequence[Tool], most: int = 12) -> str:
    """MCP server prefixes with counts (``mcp__github__ (23)``): the search tool's description
    names them so the model knows what it can search for."""
    return _groups(Counter(_group(t.name) for t in tools), most)


def _group(name: str) -> str:
    """A tool's MCP server prefix (``mcp__github__``), or "other"."""
    parts = name.split("__")
    return f"{parts[0]}__{parts[1]}__" if len(parts) >= 3 and parts[1] else "other"


def _groups(counts: Mapping[str, int], most: int = 12) -> str:
    """``groups`` from the count of each group's tools (a group counted 0 has none)."""
    # Sorted by count, then name: the same catalog always reads the same, whatever its order.
    named = sorted(((k, n) for k, n in counts.items() if k != "other" and n > 0),
                   key=lambda kn: (-kn[1], kn[0]))[:most]
    rest = sum(counts.values()) - sum(n for _, n in named)
    parts = [f"{k} ({n})" for k, n in named] + ([f"other ({rest})"] if rest else [])
    return ", ".join(parts)


def phantom_description(deferred: Sequence[Tool], backend: str, limit: int, dispatcher: str | None = None) -> str:
    """The search tool's description; ``dispatcher``: call-through, found tools are called through it."""
    return _description(len(deferred), groups(deferred), backend, limit, dispatcher)


def _description(count: int, groups: str, backend: str, limit: int, dispatcher: str | None) -> str:
    found = (f"The best matches (up to {limit}) are returned with their definitions: call one through "
             f"{dispatcher} with its name and arguments. " if dispatcher else
             f"The best matches (up to {limit}) are loaded for you and can be called directly right after. ")
    return (
        f"Search {count} more tools that are available on demand: {groups}. "
        f"Call this whenever you need a capability none of your loaded tools has. {found}"
        f"query: {_QUERY_HELP.get(backend, _QUERY_HELP['bm25'])}. "
        "'select:name1,name2' loads tools by exact name; '*' lists every deferred tool name."
    )


def described(offered: ToolCatalog, plan: DeferralPlan, backend: str, limit: int, dispatcher: str | None = None,
              natively: bool = False) -> str:
    """``phantom_description`` of a plan over ``offered``'s tools: over its deferred and found tools
    (``natively``: its deferred ones only). Worked out once per catalog and set: a session keeps
    its loaded set (``plan``), so its turns read the same description; the set is named by what
    the plan leaves out of it, a few tools."""
    shown = plan.deferred if natively else plan.deferred + plan.expanded
    if len(plan.kept) + len(plan.deferred) + len(plan.expanded) != len(offered.tools):  # not a plan over ``offered``
        return phantom_description(shown, backend, limit, dispatcher)
    out = plan.kept + (plan.expanded if natively else ())

    def describe() -> str:  # the catalog's group counts less the few tools left out
        counts = Counter(offered.derived("groups", lambda: Counter(_group(n) for n in offered.names)))
        counts.subtract(_group(t.name) for t in out)
        return _description(len(shown), _groups(counts), backend, limit, dispatcher)

    return offered.derived(("phantom", frozenset(t.name for t in out), backend, limit, dispatcher), describe,
                           per_set=True)


def client_defers(view: RequestView, cfg: ToolDiscovery) -> str | None:
    """Why the client already defers tools itself, or None (once per catalog and setting).

    Tools it sent with ``defer_loading`` (Claude Code's MCP tools behind its ``ToolSearch``,
    Responses functions behind ``tool_search``), a provider-side search tool in its list
    (Anthropic ``tool_search_tool_*``, Responses ``tool_search``), or a search tool of its own
    over tools it keeps out of the request (``policy.client_search``)."""
    known = tuple(cfg.client_search_tools)
    return view.offered.derived(("client_defers", known), lambda: _client_defers(view.tools, known))


def _client_defers(tools: Sequence[Tool], known: Sequence[str]) -> str | None:
    for t in tools:
        if t.pinned == "client_deferred":
            return "client_defers: defer_loading"
        if t.pinned in ("server", "builtin") and "tool_search" in t.raw:
            kind = t.definition.get("type") if isinstance(t.definition, dict) else None
            if isinstance(kind, str) and kind.startswith("tool_search"):
                return f"client_defers: {kind}"
    if name := client_search(tools, known):
        return f"client_defers: search tool {name}"
    return None


def plan(
    view: RequestView,
    cfg: ToolDiscovery,
    upfront: Sequence[str] | None,
    expanded: Sequence[str],
    ranker: Ranker | None,
    learned: Mapping[str, float] | None = None,
    most: int | None = None,
) -> DeferralPlan:
    """Kept, deferred and found tools for one request.

    ``upfront``: the session's remembered set (``SessionState.upfront``: the names of the
    first planned turn's ``kept``), reused as it is: the model can search for whatever it
    lacks, so re-ranking it per turn would only change ``tools[]`` and break the prompt
    cache. Empty or None on the session's first turn, which chooses it: the must-keeps and the
    ``defer.upfront`` most relevant (``learned``: the tenant's traffic's bonus by name, see
    ``relevance.scores``). The caller records ``kept``'s names as the session's
    upfront set when it had none; native deferral (``policy.native``) keeps the same set
    loaded, so a session that falls back from native to classic forwards the same tools.

    ``most`` (the policy's ``max_loaded``): at most this many of the client's tools loaded, the
    must-keeps first (they cannot wait), then the tools found most recently, then the upfront
    choice in its order; the rest are deferred, searchable again.
    """
    offered = view.offered
    by_name = offered.by_name
    pinned = pinned_names(view, cfg)
    pinned_tokens = offered.derived(("pinned tokens", cfg.always_keep),
                                    lambda: sum(estimate_tokens(by_name[n].raw) for n in pinned))
    forced = {n for n in view.forced if n in by_name and n not in pinned}
    found = tuple(by_name[n] for n in expanded if n in by_name and n not in pinned and n not in forced)
    found_names = {t.name for t in found}
    rest = [t for t in view.tools if t.name not in found_names] if found_names else view.tools
    must = pinned | forced  # ``must_keep``, worked out per catalog (``pinned``) and per request (forced)
    # The deferrable tools, counted from the few that are not: all but the must-keeps and the found.
    deferrable = len(view.tools) - len(must) - len(found_names)
    tokens = offered.tokens - pinned_tokens - sum(estimate_tokens(by_name[n].raw) for n in forced | found_names)
    d = cfg.defer
    if deferrable < d.min_tools and tokens < d.min_tokens:
        return DeferralPlan(tuple(view.tools), (), (), skipped="below_threshold")
    if not deferrable:
        return DeferralPlan(tuple(view.tools), (), (), skipped="nothing_to_defer")
    order: list[str]  # the upfront choice, in its order
    if upfront:
        order = list(upfront)
    elif d.upfront:
        upfront_view = RequestView(tools=tuple(rest), query=view.query, used=view.used, forced=view.forced,
                                   catalog=offered if rest is view.tools else None)
        order = [t.name for t in select(upfront_view, cfg, len(must) + d.upfront, ranker=ranker, learned=learned).kept]
    else:
        order = []
    chosen = set(order)
    if most is not None:
        room = max(0, most - len(must))
        if len(found) > room:  # the most recently found stay; the others wait behind the search again
            found_names = {t.name for t in found[len(found) - room:]} if room else set()
            found = tuple(t for t in found if t.name in found_names)
            rest = [t for t in view.tools if t.name not in found_names]
        room -= len(found)
        chosen = set([n for n in dict.fromkeys(order) if n not in must and n not in found_names][:room])
    keep = must.union(chosen)
    kept: list[Tool] = []
    deferred: list[Tool] = []
    for t in rest:
        (kept if t.name in keep else deferred).append(t)
    if not deferred:
        return DeferralPlan(tuple(view.tools), (), (), skipped="nothing_to_defer")
    return DeferralPlan(tuple(kept), tuple(deferred), found)

