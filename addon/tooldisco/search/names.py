"""Tools a query names: by full name, without its MCP prefix, in words, or by server.

Why: a model that knows a tool's name searches for it (``search_graph``, ``ask_codex``,
``mcp__github__create_issue``, "search graph", ``github``), and a ranking that can miss it
makes the agent conclude the tool does not exist. So, before any backend ranks, the
query's words are looked up among every tool's name forms:

- the full name, and the full name without its ``mcp`` marker ("github create issue");
- the bare name, without its server: ``mcp__S__T`` (Claude Code), ``S__T`` (Codex CLI),
  ``S/T``, ``S.T`` and ``S:T`` (namespaces) give ``T``; ``mcp_S_T`` (Gemini CLI) cannot say
  where ``S`` ends, so every tail of two words or more is a bare form (``list_events`` of
  ``mcp_google_calendar_list_events``), and a last single word when ``S`` is one word.

Names are compared as word sequences (``tokens.words``: case changes, ``_``, ``.``, ``-``
and digits split), so an identifier, its camelCase and its humanized form all match. An
identifier (a run with ``_ . / :`` or a camelCase hump) names a tool wherever it stands in
the query; plain words ("search graph") only when they are the whole query, give or take
words like "the" and "tool": in prose, two words of a name are as often the task itself
("calculate the future value" is not a request for ``future_value``), and counting them
costs recall@1 on BFCL. A form that more than ``MAX_NAMED`` tools share is a
phrase, not a name. A query that is a server's name (or a namespace prefix, give or
take words like "tools") names all of that server's tools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from rapidfuzz import fuzz, process

from tooldisco.core.types import Tool
from tooldisco.search.base import QueryError, Ranking, Searcher, SearcherBase, as_catalog
from tooldisco.search.index_cache import IndexCache
from tooldisco.search.tokens import words

#: More tools than this sharing a form means the form is a phrase, not a name.
MAX_NAMED = 20
#: Tools of one server listed for a server query (the first ``limit`` are loaded).
MAX_GROUP = 100
#: Words around a tool's name that do not change what is asked ("the search_graph tool").
NAME_FILLER = frozenset("a an call called find function get load me mcp named please the tool use".split())
#: And around a server's name ("list all github tools").
GROUP_FILLER = frozenset("all any available every list of server servers show tools what which".split())
SUGGESTIONS = 5
SUGGEST_CHARS = 100  # of the query compared with names: a longer one is no name anyway

_MCP_DOUBLE = re.compile(r"^mcp__(?P<server>.+?)__(?P<bare>.+)$", re.IGNORECASE)
_MCP_SINGLE = re.compile(r"^mcp_(?!_)(?P<rest>.+)$", re.IGNORECASE)
_NAMESPACE = re.compile(r"^(?P<server>[^/.:]+?)(?:__|/|\.|:)(?P<bare>.+)$")
# A word-like run of the query that may be an identifier, and what makes it one: a
# separator between word characters, or a camelCase hump.
_IDENTIFIER = re.compile(r"\w(?:[\w\-]|[./:](?=\w))*")
_HUMP = re.compile(r"[_./:]|[a-z][A-Z]")

Words = tuple[str, ...]


@dataclass(frozen=True)
class Named:
    """Tools a query names, each with its tier (0 is the strongest match), and the server
    it names (None when it names none). Within a tier the caller orders by relevance."""

    tiers: dict[int, int]
    group: str | None = None


def _mcp_single_forms(segments: list[str]) -> tuple[list[Words], list[Words]]:
    """(bare forms, server prefixes) of ``mcp_a_b_c``'s segments ``[a, b, c]``."""
    bare: list[Words] = []
    for start in range(1, len(segments)):
        tail = tuple(w for s in segments[start:] for w in words(s))
        if len(tail) >= 2 or start == len(segments) - 1 == 1:
            bare.append(tail)
    servers = [tuple(w for s in segments[:end] for w in words(s)) for end in range(1, len(segments))]
    return bare, servers


def name_forms(name: str) -> tuple[list[Words], list[Words], list[Words]]:
    """(full forms, bare forms, server forms) of one tool name, as word tuples."""
    full = tuple(words(name))
    fulls = [full]
    if full[:1] == ("mcp",) and len(full) > 1:
        fulls.append(full[1:])
    if m := _MCP_DOUBLE.match(name):
        return fulls, [tuple(words(m["bare"]))], [tuple(words(m["server"]))]
    if m := _MCP_SINGLE.match(name):
        bare, servers = _mcp_single_forms([s for s in m["rest"].split("_") if s])
        return fulls, bare, servers
    if m := _NAMESPACE.match(name):
        last = re.split(r"__|/|\.|:", name)[-1]
        return fulls, [tuple(words(last))], [tuple(words(m["server"]))]
    return fulls, [], []


@dataclass(frozen=True)
class NameIndex:
    """Every tool's name forms and servers, looked up by a query's identifiers and words."""

    forms: dict[Words, tuple[int, ...]]  # full or bare form -> tools
    full: frozenset[tuple[Words, int]]  # (form, tool) pairs where the form is a full name
    groups: dict[Words, tuple[int, ...]]  # server words -> its tools, catalog order
    group_names: dict[Words, str]  # server words -> the server, its words joined by "_"
    bare: dict[str, tuple[int, ...]]  # bare name as written, lower-cased -> tools (select:)
    exact: dict[str, tuple[int, ...]]  # name as written -> tools
    names: tuple[str, ...]
    lowered: tuple[str, ...]  # the names lower-cased, for suggestions

    @classmethod
    def build(cls, tools: Sequence[Tool]) -> NameIndex:
        forms: dict[Words, list[int]] = {}
        full: set[tuple[Words, int]] = set()
        groups: dict[Words, list[int]] = {}
        group_names: dict[Words, str] = {}
        bare: dict[str, list[int]] = {}
        for i, tool in enumerate(tools):
            fulls, bares, servers = name_forms(tool.name)
            for form in dict.fromkeys([*fulls, *bares]):
                if form:
                    forms.setdefault(form, []).append(i)
            full.update((form, i) for form in fulls)
            for server in dict.fromkeys(servers):
                if server:
                    groups.setdefault(server, []).append(i)
                    group_names.setdefault(server, "_".join(server))
            for form in bares:
                bare.setdefault("_".join(form), []).append(i)
            plain = _bare_as_written(tool.name)
            if plain is not None:
                bare.setdefault(plain.lower(), []).append(i)
        # A prefix of Gemini-style names is a server only when several tools share it.
        groups = {k: v for k, v in groups.items() if len(v) > 1 or not _MCP_SINGLE.match(tools[v[0]].name)}
        return cls(
            forms={k: tuple(dict.fromkeys(v)) for k, v in forms.items()},
            full=frozenset(full),
            groups={k: tuple(v) for k, v in groups.items()},
            group_names={k: group_names[k] for k in groups},
            bare={k: tuple(dict.fromkeys(v)) for k, v in bare.items()},
            exact=_positions(t.name for t in tools),
            names=tuple(t.name for t in tools),
            lowered=tuple(t.name.lower() for t in tools),
        )

    def match(self, query: str) -> Named:
        """The tools ``query`` names: written exactly (tier 0), by a full-name form (1), by
        a bare form (2), by either once words like "the" and "tool" are dropped (3), then
        the tools of the server it names (4)."""
        tiers: dict[int, int] = {}
        tokens = [t for t in _IDENTIFIER.findall(query) if _HUMP.search(t)]
        for token in [*tokens, query.strip()]:
            for i in self.exact.get(token, ()):
                tiers[i] = 0
        qwords = tuple(words(query))
        plain = tuple(w for w in qwords if w not in NAME_FILLER)
        literal = [*(tuple(words(t)) for t in tokens), qwords]
        for form, loose in [*((f, False) for f in literal), (plain, True)]:
            hits = self.forms.get(form, ())
            if len(hits) > MAX_NAMED:
                continue  # a phrase many tools share, not a name
            for i in hits:
                tier = 3 if loose else 1 if (form, i) in self.full else 2
                tiers[i] = min(tiers.get(i, tier), tier)
        group = tuple(w for w in plain if w not in GROUP_FILLER)
        members = self.groups.get(group, ())
        for i in members[:MAX_GROUP]:
            tiers.setdefault(i, 4)
        return Named(tiers, self.group_names[group] if members else None)

    def resolve(self, name: str) -> tuple[int, ...]:
        """Tools whose bare name is ``name`` (case-insensitive): how ``select:`` reads a
        name the catalog does not have as written."""
        return self.bare.get(name.strip().lower(), ())

    def suggest(self, query: str, n: int = SUGGESTIONS) -> list[str]:
        """The ``n`` names nearest to ``query`` (edit distance, case aside), for a search
        that found nothing. Plain ``ratio``, not ``WRatio``: WRatio's several comparisons per
        name cost far more over a large catalog."""
        found = process.extract(query[:SUGGEST_CHARS].lower(), self.lowered, scorer=fuzz.ratio, limit=n)
        return [self.names[i] for _name, _score, i in found]

    def servers(self, query: str, n: int = SUGGESTIONS) -> list[dict[str, Any]]:
        """The ``n`` servers (name prefixes shared by several tools) nearest to ``query``'s
        words, each with its tool count: a model whose words missed can search a server's name."""
        if not self.groups:
            return []
        keys = list(self.groups)
        spaced = [" ".join(k) for k in keys]
        found = process.extract(" ".join(words(query[:SUGGEST_CHARS])), spaced, scorer=fuzz.token_set_ratio, limit=n)
        return [{"server": self.group_names[keys[i]], "tools": len(self.groups[keys[i]])} for _s, _score, i in found]


def _positions(names: Iterable[str]) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        out.setdefault(name, []).append(i)
    return {k: tuple(v) for k, v in out.items()}


def _bare_as_written(name: str) -> str | None:
    """``T`` of ``mcp__S__T``, ``S__T``, ``S/T``, ``S.T``, ``S:T`` as written, else None."""
    if m := _MCP_DOUBLE.match(name):
        return m["bare"]
    if not _MCP_SINGLE.match(name) and _NAMESPACE.match(name):
        return re.split(r"__|/|\.|:", name)[-1]
    return None


_INDEXES: IndexCache[NameIndex] = IndexCache(NameIndex.build)


def name_index(tools: Sequence[Tool]) -> NameIndex:
    """The cached name index of ``tools``."""
    return _INDEXES.get(tools)


class NamedFirst(SearcherBase):
    """A backend whose rankings start with the tools the query names (``NameIndex.match``),
    in tiers, each tier in the backend's order; every named tool is returned, even past
    ``limit``, and a named server's tools up to ``MAX_GROUP`` (``Ranking.group``)."""

    def __init__(self, inner: Searcher):
        self.inner = inner
        self.name = inner.name

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        tools = as_catalog(tools)  # one key for the names' index and every index of the backend
        named = name_index(tools).match(query)
        try:
            ranking = self.inner.rank(query, tools, limit)
        except QueryError as exc:  # a pattern too costly to run still names its tools
            if not named.tiers:
                raise
            ranking = Ranking([], self.inner.name, f"names only: {exc}")
        if not named.tiers:
            return ranking
        position = {name: p for p, name in enumerate(ranking.names)}
        tiers = named.tiers
        first = sorted(tiers, key=lambda i: (tiers[i], position.get(tools[i].name, len(position)), i))
        names = list(dict.fromkeys(tools[i].name for i in first))
        seen = set(names)
        names += [n for n in ranking.names if n not in seen][: max(limit - len(names), 0)]
        return Ranking(names, ranking.backend, ranking.fallback, named.group)
