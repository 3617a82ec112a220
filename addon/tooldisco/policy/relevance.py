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
from itertools import islice
from typing import Callable, Collection, Iterable, Iterator, Mapping, Sequence

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


def _tokens(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower().replace("_", " ")) if len(w) > 2 and w not in STOP_WORDS)


#: Lowercase alphanumeric words, short words and stop words dropped (cached: a catalog's tools
#: are scored again on every turn; by bytes, since user messages can be megabytes).
tokens = memoize(16 * MiB)(_tokens)


def keep_count(total: int, cfg: ToolDiscovery) -> int:
    keep = min(int(total * cfg.target_ratio), cfg.max_tools)
    return max(keep, cfg.min_tools)


def server_words(name: str) -> frozenset[str]:
    """The words of an MCP tool's server (``mcp__google_calendar__x`` -> google, calendar)."""
    parts = name.split("__")
    return tokens(parts[1]) if len(parts) >= 3 else frozenset()


@dataclass(frozen=True)
class _Words:
    """A catalog's words, indexed once: the tools each word of their name and description is
    in, each MCP server's words with its tools, and the names worth looking for in a query."""

    tools: Mapping[str, tuple[str, ...]]  # word -> names
    servers: tuple[tuple[frozenset[str], tuple[str, ...]], ...]  # server words -> names
    lower: tuple[tuple[str, str], ...]  # (lowercase name, name), names over two characters


def _words_of(tools: Sequence[Tool]) -> _Words:
    by_word: dict[str, list[str]] = {}
    by_server: dict[frozenset[str], list[str]] = {}
    for t in tools:
        for w in _tokens(t.name + " " + t.description):
            by_word.setdefault(w, []).append(t.name)
        parts = t.name.split("__")
        if len(parts) >= 3 and (server := _tokens(parts[1])):
            by_server.setdefault(server, []).append(t.name)
    return _Words({w: tuple(n) for w, n in by_word.items()}, tuple((k, tuple(v)) for k, v in by_server.items()),
                  tuple((t.name.lower(), t.name) for t in tools if len(t.name) > 2))


def _said(view: RequestView) -> dict[str, float]:
    """``evidence`` over the view's whole catalog, its non-zero scores only: the query's words
    looked up in the catalog's index (``_Words``, once per catalog), not each tool's words
    compared with the query's."""
    words = view.offered.derived("words", lambda: _words_of(view.offered.tools))
    query = view.query.lower()
    qtokens = tokens(view.query)
    out: dict[str, float] = {}
    for w in qtokens:
        for name in words.tools.get(w, ()):
            out[name] = out.get(name, 0.0) + W_TOKEN
    for lower, name in words.lower:
        if lower in query:
            out[name] = out.get(name, 0.0) + W_NAME
    for server, names in words.servers:
        if server <= qtokens:
            for name in names:
                out[name] = out.get(name, 0.0) + W_TOKEN
    return out


def evidence(tools: Sequence[Tool], view: RequestView) -> dict[str, float]:
    """What the turn's own words say about each tool: its name in the query 50, its MCP
    server named 10 (the user picking a product), each shared content word 10."""
    if tools is view.tools:  # the whole catalog: by its index
        return {**dict.fromkeys(view.offered.names, 0.0), **_said(view)}
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
    if ranker is None and tools is view.tools:  # the whole catalog: the tools something speaks for
        return {**dict.fromkeys(view.offered.names, 0.0), **_sparse_scores(view, cfg, expanded, learned)}
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


def _sparse_scores(view: RequestView, cfg: ToolDiscovery, expanded: Sequence[str],
                   learned: Mapping[str, float] | None) -> dict[str, float]:
    """``scores`` of the view's whole catalog without a ranker, its non-zero ones only: the few
    tools something speaks for are visited, not every tool."""
    said = _said(view)
    keeps = kept_by_config(view, cfg)
    exp = set(expanded)
    touched = exp | keeps | view.used | said.keys() | (learned.keys() if learned else set())
    out: dict[str, float] = {}
    for n in touched & view.offered.name_set:
        s = 0.0  # added in ``scores``' order: the same sums to the last bit
        if n in exp:
            s += W_EXPANDED
        if n in keeps:
            s += W_ALWAYS
        if n in view.used:
            s += W_USED
        s += said.get(n, 0.0)
        if learned:
            s += learned.get(n, 0.0)
        out[n] = s
    return out


def kept_by_config(view: RequestView, cfg: ToolDiscovery) -> frozenset[str]:
    """The names of the view's tools ``always_keep`` names (once per catalog and setting)."""
    return view.offered.derived(("always_keep", cfg.always_keep),
                                lambda: frozenset(n for n in view.offered.names if cfg.keeps(n)))


def pinned_names(view: RequestView, cfg: ToolDiscovery) -> frozenset[str]:
    """The names of the tools ``must_keep`` keeps whatever the request says (pinned ones and
    ``always_keep``'s; once per catalog and setting)."""
    return view.offered.derived(("pinned", cfg.always_keep), lambda: kept_by_config(view, cfg).union(
        t.name for t in view.offered.tools if t.pinned is not None))


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


def recall(lists: Mapping[str, Sequence[str]], names: Collection[str], key: str | None = None) -> list[str] | None:
    """The order forwarded before for this tool list (``SessionState.forwarded``); None for
    the session's first. A list not seen yet (a sub-agent, a client that connected one more
    MCP server) starts from the remembered one sharing most names, so its tools keep their
    places; each list then evolves on its own, so one agent's additions never change another's.
    ``key``: ``tool_list_key(names)``, when the caller has it."""
    key = key or tool_list_key(names)
    if key in lists:
        return list(lists[key])
    present = set(names)
    best = max(lists.values(), key=lambda order: sum(n in present for n in order), default=())
    inherited = [n for n in best if n in present]
    return inherited or None


def remember(lists: dict[str, list[str]], names: Collection[str], forwarded: Sequence[str],
             key: str | None = None) -> None:
    """Record what one request forwarded for its tool list; an unchanged list writes nothing.
    Past ``MAX_LISTS`` the list changed longest ago goes. ``key``: as for ``recall``."""
    key = key or tool_list_key(names)
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
    by_name = view.offered.by_name
    names = view.offered.name_set
    exp = set(expanded)
    pinned = pinned_names(view, cfg) | (view.forced & names) | (exp & names)  # ``must_keep`` or found
    fixed = [t.name for t in tools if t.name in pinned or t.name in view.used]
    # The turn's own ranking: a tool result arriving (``used``) must not reshuffle it.
    ranked = _ranked(view, pinned, cfg, expanded, ranker, learned)
    best = min(ADD_MOST, max(keep - len(fixed), 1))  # the turn's candidates: ranked[:best]
    if order is None:
        others = (t.name for t in ranked if t.name not in view.used)
        chosen = set(fixed) | set(islice(others, max(keep - len(fixed), best)))
        kept = [t.name for t in tools if t.name in chosen]
    else:
        kept = list(dict.fromkeys(n for n in order if n in by_name))
        kept += [n for n in fixed if n not in set(kept)]
        kept += additions(view, [by_name[n] for n in kept], list(islice(ranked, best)), prompt_tokens)
    chosen = set(kept)
    return Selection(tuple(by_name[n] for n in kept), tuple(t for t in tools if t.name not in chosen))


def _ranked(view: RequestView, pinned: Collection[str], cfg: ToolDiscovery, expanded: Sequence[str],
            ranker: Ranker | None, learned: Mapping[str, float] | None) -> Iterator[Tool]:
    """The tools not ``pinned``, best first: by score (less ``W_USED`` for a used tool), then in
    the client's order. Lazily: a selection takes the first few. Without a ranker only the
    tools with a score are sorted; the rest follow in the client's order, as a sort would put them."""
    tools = view.tools
    if ranker is not None:
        sc = scores(tools, view, cfg, expanded, ranker, learned)
        position = {t.name: i for i, t in enumerate(tools)}
        yield from sorted((t for t in tools if t.name not in pinned),
                          key=lambda t: (-(sc[t.name] - (W_USED if t.name in view.used else 0)), position[t.name]))
        return
    position = view.offered.derived("position", lambda: {n: i for i, n in enumerate(view.offered.names)})
    above: list[tuple[float, int, str]] = []
    below: list[tuple[float, int, str]] = []
    for n, v in _sparse_scores(view, cfg, expanded, learned).items():
        if n in pinned:
            continue
        v -= W_USED if n in view.used else 0
        if v:
            (above if v > 0 else below).append((-v, position[n], n))
    above.sort()
    below.sort()
    by_name = view.offered.by_name
    yield from (by_name[n] for _, _, n in above)
    scored = {n for _, _, n in above} | {n for _, _, n in below}
    yield from (t for t in tools if t.name not in pinned and t.name not in scored)
    yield from (by_name[n] for _, _, n in below)


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
