"""Native deferral: deferred tools stay in ``tools[]`` marked ``defer_loading``, searches load
found ones inline (Anthropic ``tool_reference`` blocks, a Responses ``tool_search_output``).

Why: classic deferral appends found tools to ``tools[]``, which comes first in the prompt, so
each discovery re-bills the whole conversation behind it. With native deferral ``tools[]``
never changes within a session: every client tool in the client's order, the pinned ones
(and with ``defer.native_upfront`` the upfront set chosen on the session's first turn) as the
client sent them, the rest with ``defer_loading`` added, the search tool last. Which requests
get it: the API (``NativeDeferral.native_kind``) and the model, by ``tool_discovery.native`` globs, unless the API
refused it earlier in the session.
"""

from __future__ import annotations

import json
from typing import Sequence

from tooldisco.config import ToolDiscovery
from tooldisco.apis.base import NativeDeferral
from tooldisco.core.types import RequestView, Tool
from tooldisco.policy.deferral import DeferralPlan
from tooldisco.policy.rejection import DEFERRAL_FIELDS, MAX_ERROR_CHARS
from tooldisco.policy.relevance import pinned_names


def applies(native: NativeDeferral, model: str, cfg: ToolDiscovery, classic: Sequence[str]) -> bool:
    """Whether this request's model takes native deferral on its API, unless the API refused
    it earlier in the session (``classic``: what the session remembers refusals by)."""
    return model not in classic and cfg.native.applies(native.native_kind, model)


def refused(status: int, body: bytes) -> bool:
    """Whether an upstream answer refuses the fields of native deferral or of call-through (the
    same request goes classic): a 400 naming one of ``rejection.DEFERRAL_FIELDS``, which refused
    that flavour, not the request."""
    return status == 400 and DEFERRAL_FIELDS.search(body[:MAX_ERROR_CHARS].decode("utf-8", "replace")) is not None


def plan(view: RequestView, cfg: ToolDiscovery, upfront: Sequence[str]) -> DeferralPlan:
    """Kept (forwarded loaded) and deferred tools. ``upfront``: the session's remembered set
    (``SessionState.upfront``, chosen by ``deferral.plan`` on its first turn), reused as it is:
    a new choice would change ``tools[]``. A tool carrying the client's ``cache_control``
    breakpoint stays loaded too, so the breakpoint keeps its place."""
    offered = view.offered
    # ``must_keep`` and the breakpoints: what the catalog alone decides, once per catalog.
    marked = offered.derived("breakpoints", lambda: frozenset(t.name for t in offered.tools if _breakpoint(t)))
    keep = pinned_names(view, cfg) | marked | view.forced | set(upfront)
    kept: list[Tool] = []
    deferred: list[Tool] = []
    for t in view.tools:
        (kept if t.name in keep else deferred).append(t)
    if not deferred:
        return DeferralPlan(tuple(view.tools), (), (), skipped="nothing_to_defer")
    return DeferralPlan(tuple(kept), tuple(deferred), ())


def _breakpoint(tool: Tool) -> bool:
    if '"cache_control"' not in tool.raw:
        return False
    definition = json.loads(tool.raw)
    return isinstance(definition, dict) and "cache_control" in definition
