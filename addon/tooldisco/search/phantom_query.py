"""Answering the model's call to the phantom search tool (``gateway_search_tools``).

Why: the arguments are untrusted model output and the answer is read by the model, so
this is where input is checked and turned into a readable result, never an exception.
The proxy injects ``SearchOutcome.matched`` into the next request and returns
``SearchOutcome.text`` as the tool result.

Query syntax (the ``query`` argument, a string):

- ``*``: list the name of every deferred tool; nothing is injected.
- ``select:NAME1,NAME2``: load exactly these tools (commas between names, spaces
  ignored); a name without its MCP prefix or namespace is read as the one tool that has
  it; names not in the catalog, or bare names several tools share, are reported.
- anything else: a search with the configured backend (a regex for ``regex``, which
  falls back to fuzzy keywords, and answers a pattern too expensive to run with an
  error; keywords or a description of the task for the others). Tools the query names
  come first (``names``), all of them loaded (up to ``MAX_NAMED``); a query naming a
  server loads its first ``limit`` tools and lists the others by name, for ``select:``. A search that finds
  nothing answers with the nearest tool names instead of an empty list.

Results are compact JSON: the text stays in the conversation and is re-sent every turn.
With call-through deferral (``through``: the dispatcher's name) nothing is loaded into the
tool list: the results carry each found tool's whole definition
(``brief.definition``) and say to call them through the dispatcher.

A search or select that loads something also loads the ``always_keep`` tools present
in the catalog (entries may be globs, e.g. ``mcp__github__*``); they come on top of the
``limit`` search hits, so a broad glob cannot crowd out what the model asked for.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from loguru import logger

from tooldisco.core.types import Tool
from tooldisco.search.base import QueryError, Searcher, check_query
from tooldisco.search.brief import brief, definition
from tooldisco.search.names import MAX_NAMED, name_index
from tooldisco.search.tokens import query_terms, terms

LIST_ALL = "*"
MAX_LISTED = 300  # names in one listing answer
SELECT_PREFIX = "select:"
HINT = (
    "Try fewer or different words, describe the task, use 'select:NAME' for a tool "
    f"you know by name, or '{LIST_ALL}' to list every tool name."
)


@dataclass(frozen=True)
class SearchOutcome:
    """What to inject, what the model reads, and what telemetry records."""

    matched: list[str]  # tool names to inject into the next request
    text: str  # the tool result the model reads (JSON)
    is_error: bool = False
    query: str | None = None  # the query string as given (None when there was none)
    kind: str = "search"  # "search", "select", "list" or "invalid"
    backend: str | None = None  # the backend that answered a search
    fallback: str | None = None  # why the configured backend handed over, if it did
    unknown: list[str] = field(default_factory=list)  # select: names not in the catalog


def run_query(
    arguments: Any,
    catalog: Sequence[Tool],
    searcher: Searcher,
    limit: int,
    always_keep: Sequence[str] = (),
    through: str | None = None,
) -> SearchOutcome:
    """Answer one call of the phantom search tool over the deferred ``catalog`` (``through``:
    the call-through dispatcher, when found tools are called through it)."""
    if not isinstance(arguments, dict):
        return _invalid("The arguments must be a JSON object like {\"query\": \"...\"}.", None)
    query = arguments.get("query")
    if not isinstance(query, str):
        return _invalid("The 'query' argument is required and must be a string.", None)
    stripped = query.strip()
    if not stripped:
        return _invalid(f"The query is empty. {HINT}", query)
    try:
        check_query(stripped)
    except QueryError as exc:
        return _invalid(f"The {exc}. Shorten it.", query)

    catalog = tuple(catalog)  # one object for every index cache: the catalog is hashed once
    by_name = {tool.name: tool for tool in catalog}
    if stripped == LIST_ALL:
        return _listing(query, by_name)
    if stripped.lower().startswith(SELECT_PREFIX):
        return _select(query, stripped[len(SELECT_PREFIX) :], catalog, by_name, always_keep, through)

    try:
        ranking = searcher.rank(stripped, catalog, limit)
    except QueryError as exc:
        return _invalid(f"{exc}. {HINT}", query, backend=searcher.name)
    except Exception:  # a backend bug must not break the user's request
        logger.exception("tool search failed for backend {}", searcher.name)
        return _invalid("The search failed inside the gateway. " + HINT, query, backend=searcher.name)
    # Named tools may run past the limit (the model asked for each, up to MAX_NAMED); a
    # server's may not: its first are loaded and the others listed.
    hits = ranking.names[: max(limit, 0) if ranking.group else max(limit, MAX_NAMED)]
    if not hits:
        text = _nothing_found(stripped, catalog)
        return SearchOutcome([], text, False, query, "search", ranking.backend, ranking.fallback)
    matched = _with_always_keep(hits, by_name, always_keep)
    more = ranking.names[len(hits) :]
    weak = not ranking.group and hits[0] in by_name and _weak(stripped, by_name[hits[0]])
    servers = name_index(catalog).servers(stripped) if weak else []
    text = _loaded_text(matched, by_name, more=more, group=ranking.group, through=through, servers=servers)
    return SearchOutcome(matched, text, False, query, "search", ranking.backend, ranking.fallback)


def _nothing_found(query: str, catalog: Sequence[Tool]) -> str:
    """No match: the nearest names and servers, so the model's next query lands rather than
    the model giving up on a tool that exists."""
    index = name_index(catalog)
    nearest = index.suggest(query)
    servers = index.servers(query)
    message = f"No tools matched {query!r}."
    if nearest:
        message += " The nearest names are listed: load one with 'select:NAME'."
    if servers:
        message += " A server's name as the query lists its tools."
    result: dict[str, Any] = {"tools": [], "suggestions": nearest}
    if servers:
        result["servers"] = servers
    return _json({**result, "message": f"{message} {HINT}"})


def _weak(query: str, top: Tool) -> bool:
    """Whether the best hit shares under a third of the query's words: likely not what was
    meant, so the answer says so and offers the nearest servers."""
    asked = set(query_terms(query))
    return len(asked) >= 3 and len(asked & set(terms(top.search_text))) * 3 < len(asked)


def _select(
    query: str, spec: str, catalog: Sequence[Tool], by_name: dict[str, Tool], always_keep: Sequence[str],
    through: str | None,
) -> SearchOutcome:
    wanted = list(dict.fromkeys(name.strip() for name in spec.split(",") if name.strip()))
    resolved = {name: _resolve(name, catalog, by_name) for name in wanted}
    found = list(dict.fromkeys(r for r in resolved.values() if r is not None))
    unknown = [name for name, r in resolved.items() if r is None]
    if not found:
        message = _unknown_note(unknown, catalog) if unknown else "select: needs tool names, e.g. 'select:NAME1,NAME2'."
        return SearchOutcome(
            [], _json({"error": f"{message} {HINT}"}), True, query, "select", unknown=unknown
        )
    matched = _with_always_keep(found, by_name, always_keep)
    text = _loaded_text(matched, by_name, unknown, note=_unknown_note(unknown, catalog), through=through)
    return SearchOutcome(matched, text, False, query, "select", unknown=unknown)


def _unknown_note(unknown: Sequence[str], catalog: Sequence[Tool]) -> str:
    """Why each of ``unknown`` loaded nothing: no such tool, or several tools share the bare name."""
    index = name_index(catalog)
    notes = []
    for name in unknown:
        owners = [catalog[i].name for i in index.resolve(name)]
        notes.append(
            f"{name!r} is the name of {len(owners)} tools, select one: {', '.join(owners)}."
            if len(owners) > 1
            else f"No tool is named {name!r}."
        )
    return " ".join(notes)


def _resolve(name: str, catalog: Sequence[Tool], by_name: dict[str, Tool]) -> str | None:
    """The catalog's name for ``name``: itself, or the one tool with that bare name."""
    if name in by_name:
        return name
    hits = name_index(catalog).resolve(name)
    return catalog[hits[0]].name if len(hits) == 1 else None


def _listing(query: str, by_name: dict[str, Tool]) -> SearchOutcome:
    """Every name, up to ``MAX_LISTED``: a listing of a 10k-tool catalog would cost more
    context than the definitions the proxy saved; past the cap the model is told to search."""
    names = sorted(by_name)
    message = (
        "These tools can be loaded. Search with a description of the task, or load "
        "tools by name with 'select:NAME1,NAME2'."
    )
    if len(names) > MAX_LISTED:
        message = (f"Only the first {MAX_LISTED} of {len(names)} names are listed; search with a "
                   "description of the task to find the others. " + message)
    text = _json({"total": len(names), "tools": names[:MAX_LISTED], "message": message})
    return SearchOutcome([], text, False, query, "list")


def _with_always_keep(
    names: list[str], by_name: dict[str, Tool], always_keep: Sequence[str]
) -> list[str]:
    out = list(names)
    present = set(out)
    for pattern in always_keep:
        for name in by_name:
            if name not in present and fnmatch.fnmatchcase(name, pattern):
                present.add(name)
                out.append(name)
    return out


def _loaded_text(
    matched: list[str],
    by_name: dict[str, Tool],
    unknown: Sequence[str] = (),
    *,
    more: Sequence[str] = (),
    group: str | None = None,
    note: str = "",
    through: str | None = None,
    servers: Sequence[dict[str, Any]] = (),
) -> str:
    if through:
        message = (f"Call {'these tools' if len(matched) > 1 else 'this tool'} through {through}: "
                   '{"name": "<its name>", "arguments": {<its parameters>}}.')
        shown = [definition(by_name[name]) for name in matched]
    else:
        message = (
            f"These {len(matched)} tools are now available: call them directly by name "
            "with the parameters their definitions give."
            if len(matched) > 1
            else "This tool is now available: call it directly by name with the parameters "
            "its definition gives."
        )
        shown = [brief(by_name[name]) for name in matched]
    result: dict[str, Any] = {"tools": shown}
    if more:
        result["more"] = list(more)
        whose = f"of {group!r}" if group else "named in the query"
        message += f" More tools {whose}, not loaded: load them with 'select:NAME1,NAME2'."
    if unknown:
        result["unknown"] = list(unknown)
        message += f" {note}"
    if servers:
        result["servers"] = list(servers)
        message += (" The best match shares few of the query's words: if it is not what you need, search "
                     "again with other words or a server's name (listed).")
    result["message"] = message
    return _json(result)


def _invalid(message: str, query: str | None, *, backend: str | None = None) -> SearchOutcome:
    return SearchOutcome([], _json({"error": message}), True, query, "invalid", backend)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
