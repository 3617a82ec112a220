"""Relevance scoring and the session's stable forwarded list.

Why stable: ``tools[]`` comes first in every provider's prompt, so any change to the
forwarded list re-bills everything behind it — system prompt and the whole conversation —
at cache-write price instead of cache-read price. So the forwarded list of a session is
remembered (``SessionState.forwarded``, per client tool list), identical requests forward
identical bytes, a tool forwarded once keeps its position while the client sends it,
additions are appended after it, and a turn changes the list only when the change pays for
itself (``select``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Mapping, Sequence

from tooldisco.core.bytecache import MiB, memoize
from tooldisco.config import ToolDiscovery
from tooldisco.core.types import RequestView, Tool
from tooldisco.core.tokens import estimate_tokens

W_EXPANDED, W_ALWAYS, W_USED, W_NAME, W_TOKEN = 1000, 100, 100, 50, 10
# What the tenant's traffic learned (``search.priors.Priors.bonus``), per part: how often the tool
# was called, and how well the turn's words led to it before. Both full outweigh two shared words.
W_LEARNED = 15
# Prices relative to one uncached input token: what a change of tools[] costs per token
# behind it. Anthropic's (writes 1.25, reads 0.1), the dearest: OpenAI and Gemini writes cost 1.0.
CACHE_WRITE, CACHE_READ = 1.25, 0.1
ADD_MOST = 5  # tools one change appends: the turn's best candidates, like one search's results
MAX_LISTS = 16  # client tool lists (an agent and its sub-agents) a session remembers an order for

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


def server_words(name: str) -> frozenset[str]:
    """The words of an MCP tool's server (``mcp__google_calendar__x`` -> google, calendar)."""
    parts = name.split("__")
    return tokens(parts[1]) if len(parts) >= 3 else frozenset()


def evidence(tools: Sequence[Tool], view: RequestView) -> dict[str, float]:
    """What the turn's own words say about each tool: its name in the query 50, its MCP
    server named 10 (the user picking a product), each shared content word 10."""
    query = view.query.lower()
    qtokens = tokens(view.query)
    out: dict[str, float] = {}
    for t in tools:
        s = W_TOKEN * len(qtokens & tokens(t.name + " " + t.description))
        if len(t.name) > 2 and t.name.lower() in query:
            s += W_NAME
        server = server_words(t.name)
        if server and server <= qtokens:
            s += W_TOKEN
        out[t.name] = s
    return out


def scores(
    tools: Sequence[Tool],
    view: RequestView,
    cfg: ToolDiscovery,
    expanded: Sequence[str] = (),
    ranker: Ranker | None = None,
    learned: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Tiered weights: found by a search (1000) outranks always_keep and used (100 each),
    which outrank the turn's ``evidence`` (with a ``ranker``, its rank order in place of the
    shared words) plus what the tenant's own traffic learned (``learned``: a bonus by name,
    at most ``W_LEARNED`` × 2)."""
    query = view.query.lower()
    text_score: dict[str, float] = {}
    if ranker is not None and query.strip():
        ranked = ranker(view.query, tools, len(tools))
        text_score = {n: W_TOKEN * (len(ranked) - i) / len(ranked) * 3 for i, n in enumerate(ranked)}
    said = evidence(tools, view) if ranker is None else {}
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
        if ranker is None:
            s += said[t.name]
        else:
            s += text_score.get(t.name, 0.0) + (W_NAME if len(t.name) > 2 and t.name.lower() in query else 0)
        if learned:
            s += learned.get(t.name, 0.0)
        out[t.name] = s
    return out


@dataclass(frozen=True)
class Selection:
    kept: tuple[Tool, ...]  # in forwarded order: the session's own, additions at the end
    deferred: tuple[Tool, ...]  # in the client's order


def must_keep(t: Tool, view: RequestView, cfg: ToolDiscovery) -> bool:
    """Never removed: server/builtin and client-deferred tools, forced tools, always_keep."""
    return t.pinned is not None or t.name in view.forced or cfg.keeps(t.name)


def tool_list_key(names: Iterable[str]) -> str:
    """A client tool list's identity: an agent and each of its sub-agents send their own."""
    return hashlib.sha256("\0".join(sorted(names)).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def recall(lists: Mapping[str, Sequence[str]], names: Collection[str]) -> list[str] | None:
    """The order forwarded before for this tool list (``SessionState.forwarded``); None for
    the session's first. A list not seen yet (a sub-agent, a client that connected one more
    MCP server) starts from the remembered one sharing most names, so its tools keep their
    places; each list then evolves on its own, so one agent's additions never change another's."""
    key = tool_list_key(names)
    if key in lists:
        return list(lists[key])
    present = set(names)
    best = max(lists.values(), key=lambda order: sum(n in present for n in order), default=())
    inherited = [n for n in best if n in present]
    return inherited or None


def remember(lists: dict[str, list[str]], names: Collection[str], forwarded: Sequence[str]) -> None:
    """Record what one request forwarded for its tool list; an unchanged list writes nothing.
    Past ``MAX_LISTS`` the list changed longest ago goes."""
    key = tool_list_key(names)
    if lists.get(key) == list(forwarded):
        return
    lists.pop(key, None)
    lists[key] = list(forwarded)
    while len(lists) > MAX_LISTS:
        del lists[next(iter(lists))]


def select(
    view: RequestView,
    cfg: ToolDiscovery,
    keep: int,
    order: Sequence[str] | None = None,
    expanded: Sequence[str] = (),
    ranker: Ranker | None = None,
    prompt_tokens: int = 0,
    learned: Mapping[str, float] | None = None,
) -> Selection:
    """The tools to forward, and in what order.

    Always forwarded: the must-keeps, the expanded and the tools the conversation used.
    First turn of a tool list (``order`` None): those and the best scored, about ``keep`` in
    all, in the client's order. Later turns: ``order`` (what was forwarded before) as it was,
    less tools the client no longer sends (the list changes only from their position on),
    then the always-forwarded it lacks (a forced tool must be there), then ``additions`` from
    the turn's best ranked — appended, never ahead of a tool already forwarded. A pure
    function of the request and ``order``; and since the turn's best ranked are all forwarded
    after it (a first turn chooses them too), a request sent again forwards the same list.
    """
    tools = view.tools
    sc = scores(tools, view, cfg, expanded, ranker, learned)
    position = {t.name: i for i, t in enumerate(tools)}
    by_name = {t.name: t for t in tools}
    exp = set(expanded)
    pinned = {t.name for t in tools if must_keep(t, view, cfg) or t.name in exp}
    fixed = [t.name for t in tools if t.name in pinned or t.name in view.used]
    # The turn's own ranking: a tool result arriving (``used``) must not reshuffle it.
    ranked = sorted((t for t in tools if t.name not in pinned),
                    key=lambda t: (-(sc[t.name] - (W_USED if t.name in view.used else 0)), position[t.name]))
    best = min(ADD_MOST, max(keep - len(fixed), 1))  # the turn's candidates: ranked[:best]
    if order is None:
        others = [t.name for t in ranked if t.name not in view.used]
        chosen = set(fixed) | set(others[: max(keep - len(fixed), best)])
        kept = [t.name for t in tools if t.name in chosen]
    else:
        kept = list(dict.fromkeys(n for n in order if n in by_name))
        kept += [n for n in fixed if n not in set(kept)]
        kept += additions(view, [by_name[n] for n in kept], ranked[:best], prompt_tokens)
    chosen = set(kept)
    return Selection(tuple(by_name[n] for n in kept), tuple(t for t in tools if t.name not in chosen))


def additions(view: RequestView, forwarded: Sequence[Tool], candidates: Sequence[Tool], prompt_tokens: int) -> list[str]:
    """Which of the turn's best ranked ``candidates`` to append to ``forwarded``: none unless
    the change pays for itself against the cache it breaks.

    Cost: appending changes ``tools[]`` from its end, so every prompt token behind it — the
    system prompt and the whole conversation, i.e. the request's own size less its tool
    definitions (``estimate_tokens``) — is billed at cache-write instead of cache-read price.
    Gain: a tool the model needs now and lacks costs a failed turn — the whole prompt spent
    for nothing and sent again — and then the same change anyway. With ``p`` the chance that
    the turn needs the tool, appending pays when ``p × (cost + prompt) > cost``: a short
    conversation takes a change on fair evidence, a long one only on strong evidence.
    ``p`` is the turn's own evidence (``evidence``) over ``W_NAME``: its name said is certain,
    each shared word 0.2 and its MCP server named 0.2 more; and only for a tool that fits the
    turn at least as well as every forwarded one (else the model has what it needs). So a
    topic drift with no clear need changes nothing. (A tool the conversation used is certain
    and always forwarded: ``select``.)
    Dropping never pays: a dropped tool saves its tokens at read price per request while the
    break re-bills the rest at write price, hundreds of requests to pay back; a tool the
    client stops sending drops out by itself.
    """
    present = {t.name for t in forwarded}
    fresh = [t for t in candidates if t.name not in present]
    if not fresh:
        return []
    said = evidence([*forwarded, *fresh], view)
    bar = max((said[t.name] for t in forwarded), default=0.0)
    rest = max(prompt_tokens - sum(estimate_tokens(t.raw) for t in view.tools), 0)
    cost = (CACHE_WRITE - CACHE_READ) * rest
    prompt = rest + sum(estimate_tokens(t.raw) for t in forwarded)
    threshold = cost / (cost + prompt) if cost + prompt else 0.0

    def chance(t: Tool) -> float:
        return min(said[t.name] / W_NAME, 1.0) if said[t.name] >= bar else 0.0

    return [t.name for t in fresh if chance(t) > threshold]
