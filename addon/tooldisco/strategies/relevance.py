"""Relevance scoring and the sticky kept set (seed 000 §4.2).

Why sticky: every change to the forwarded ``tools[]`` costs a prompt-cache miss on
everything after it. So a tool kept once stays kept while the client still sends it,
and a turn adds tools only when they are newly relevant; nothing is ever reordered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from ..bytecache import MiB, memoize
from ..config import ToolDiscovery
from ..providers.base import RequestView, Tool

W_EXPANDED, W_ALWAYS, W_USED, W_NAME, W_TOKEN = 1000, 100, 100, 50, 10

STOP_WORDS = frozenset(
    """a an and are as at be but by can could do does for from get give has have how i if in into
    is it its let me my no not of on or our please should so than that the their them then there
    these this to up us use using was we what when where which who why will with would you your
    mcp""".split()
)
_WORD = re.compile(r"[a-z0-9]+")

# A ranker returns names in relevance order; the overlap scorer needs none.
Ranker = Callable[[str, Sequence[Tool], int], list[str]]


@memoize(16 * MiB)
def tokens(text: str) -> frozenset[str]:
    """Lowercase alphanumeric words, short words and stop words dropped (cached: a catalog's
    tools are scored again on every turn; by bytes, since user messages can be megabytes)."""
    return frozenset(w for w in _WORD.findall(text.lower().replace("_", " ")) if len(w) > 2 and w not in STOP_WORDS)


def keep_count(total: int, cfg: ToolDiscovery) -> int:
    keep = min(int(total * cfg.target_ratio), cfg.max_tools)
    return max(keep, cfg.min_tools)


def scores(
    tools: Sequence[Tool],
    view: RequestView,
    cfg: ToolDiscovery,
    expanded: Sequence[str] = (),
    ranker: Ranker | None = None,
) -> dict[str, float]:
    """Seed weights: expanded 1000, always_keep 100, used 100, name in query 50, token 10 each."""
    query = view.query.lower()
    qtokens = tokens(view.query)
    text_score: dict[str, float] = {}
    if ranker is not None and query.strip():
        ranked = ranker(view.query, tools, len(tools))
        text_score = {n: W_TOKEN * (len(ranked) - i) / len(ranked) * 3 for i, n in enumerate(ranked)}
    out: dict[str, float] = {}
    exp = set(expanded)
    for t in tools:
        s = 0.0
        if t.name in exp:
            s += W_EXPANDED
        if cfg.keeps(t.name):
            s += W_ALWAYS
        if t.name in view.used:
            s += W_USED
        if len(t.name) > 2 and t.name.lower() in query:
            s += W_NAME
        if ranker is None:
            s += W_TOKEN * len(qtokens & tokens(t.name + " " + t.description))
        else:
            s += text_score.get(t.name, 0.0)
        out[t.name] = s
    return out


@dataclass(frozen=True)
class Selection:
    kept: tuple[Tool, ...]  # in the client's original order
    deferred: tuple[Tool, ...]


def must_keep(t: Tool, view: RequestView, cfg: ToolDiscovery) -> bool:
    """Never removed: server/builtin and client-deferred tools, forced tools, always_keep."""
    return t.pinned is not None or t.name in view.forced or cfg.keeps(t.name)


def select(
    view: RequestView,
    cfg: ToolDiscovery,
    keep: int,
    sticky: Sequence[str] = (),
    expanded: Sequence[str] = (),
    ranker: Ranker | None = None,
) -> Selection:
    """Keep about ``keep`` tools: the must-keeps, the sticky set, the expanded, then the best scored.

    First turn: fill up to ``keep``. Later turns: add only tools this turn makes relevant
    (among the top ``keep`` and scoring above zero), so an unchanged topic changes nothing
    and a new topic adds its tools. A set grown past twice ``keep`` starts over: one cache
    miss instead of drifting back to the full catalog.
    """
    tools = view.tools
    sc = scores(tools, view, cfg, expanded, ranker)
    order = {t.name: i for i, t in enumerate(tools)}
    base = {t.name for t in tools if must_keep(t, view, cfg) or t.name in set(expanded)}

    def pick(chosen: set[str], first: bool) -> set[str]:
        ranked = sorted((t for t in tools if t.name not in chosen), key=lambda t: (-sc[t.name], order[t.name]))
        if first:
            return chosen | {t.name for t in ranked[: max(keep - len(chosen), 0)]}
        return chosen | {t.name for t in ranked[:keep] if sc[t.name] > 0}

    current = set(order)
    sticky_now = set(sticky) & current
    chosen = pick(base | sticky_now, first=not sticky_now)
    if sticky_now and len(chosen) > 2 * max(keep, 1):
        chosen = pick(base, first=True)
    kept = tuple(t for t in tools if t.name in chosen)
    deferred = tuple(t for t in tools if t.name not in chosen)
    return Selection(kept, deferred)
