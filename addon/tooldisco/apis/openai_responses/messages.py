"""Rules over Responses answer objects that the adapter and the stitcher both apply.

Why a module of their own: the stitcher (a live stream) must hide phantom calls, echo the
client's fields and merge rounds exactly as the adapter does for a whole answer, without
depending on the adapter.
"""

from __future__ import annotations

from typing import Any, Collection, Iterable, Mapping, Sequence

from tooldisco.apis.catalogs import catalog_spans
from tooldisco.apis.usage import sum_usage
from tooldisco.apis.streaming import as_list
from tooldisco.core import jsonspan

# Native deferral: the model searches with a client-executed ``tool_search`` tool; the loop
# knows its ``tool_search_call`` items by this name (a function of that name is never deferred
# natively, see ``policy.native``).
TOOL_SEARCH = "tool_search"


def _qualified(item: dict[str, Any]) -> str:
    """A call's tool name; a call inside a namespace (Codex's MCP servers) is ``namespace.name``,
    the name its function is parsed under (a flat function's name has no dot, so it can never be
    taken for the top-level phantom tool)."""
    name = str(item.get("name"))
    namespace = item.get("namespace")
    return f"{namespace}.{name}" if isinstance(namespace, str) and namespace else name


def _client_search(item: Any) -> bool:
    """A ``tool_search_call`` the client must answer (one the server ran is the API's own)."""
    return isinstance(item, dict) and item.get("type") == "tool_search_call" and item.get("execution") == "client"


def phantom_call(item: Any, names: Collection[str]) -> bool:
    """A ``function_call`` item calling one of ``names`` (a call inside a namespace never is), or,
    when ``names`` holds ``TOOL_SEARCH``, a client-executed ``tool_search_call``."""
    if _client_search(item):
        return TOOL_SEARCH in names
    return isinstance(item, dict) and item.get("type") == "function_call" and _qualified(item) in names


# A Response echoes the request's ``tools`` and ``tool_choice``; for a field the request left
# out the API echoes these values.
_ECHO_DEFAULTS = {"tools": "[]", "tool_choice": '"auto"'}
ECHOED = frozenset(_ECHO_DEFAULTS)
_API = "openai_responses"  # the adapter's name: the scope its catalogs are cached under


def echoed_fields(body: str) -> dict[str, str]:
    """The raw JSON a Response must echo for the client's ``tools`` and ``tool_choice``: the
    client's own bytes from ``body``, or the API's value for a field it left out (or sent null).
    The client's catalog, parsed when the request was planned, is neither decoded nor searched
    again to find them (``catalogs.catalog_spans``)."""
    out = {}
    known = catalog_spans(body, _API)
    for key, default in _ECHO_DEFAULTS.items():
        span = jsonspan.find(body, [key], known=known) if _may_hold(body, key, known) else None
        raw = body[span[0] : span[1]] if span is not None else "null"
        out[key] = default if raw == "null" else raw
    return out


def _may_hold(body: str, key: str, known: Mapping[int, int]) -> bool:
    """Whether ``body`` can have the root member ``key`` (letters and ``_``): its literal is there,
    or it may be written with ``\\u`` escapes, the only ones that stand for those characters
    (RFC 8259 §7). Without either, no walk of the body (its whole catalog) is needed to know the
    member is absent. Inside the values ``known`` spans no root member is: they are not searched."""
    return jsonspan.outside(body, f'"{key}"', known) or ("\\" in body and jsonspan.outside(body, "\\u", known))


def _orphaned_reasoning(output: list[Any], removed: set[int]) -> set[int]:
    """Reasoning items whose whole step (the items up to the next reasoning item) was removed.

    The API rejects a replayed reasoning item without its following item, so a reasoning item
    that only led to phantom calls leaves with them; one that also led to a kept call stays.
    """
    orphans = set()
    for i, item in enumerate(output):
        if not (isinstance(item, dict) and item.get("type") == "reasoning"):
            continue
        step = []
        for j in range(i + 1, len(output)):
            if isinstance(output[j], dict) and output[j].get("type") == "reasoning":
                break
            step.append(j)
        if step and all(j in removed for j in step):
            orphans.add(i)
    return orphans


def strip(message: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """Phantom calls leave the output, with reasoning that led only to them. Responses has no
    tool stop reason: the status stays as it is. The echoed ``tools`` / ``tool_choice`` are not
    touched here: what the client sees of them is its own request's (``restore_echo`` for a
    JSON answer, the stitcher for a stream), not a filtered forwarded list."""
    hidden = set(names)
    output = list(as_list(message.get("output")))
    removed = {i for i, item in enumerate(output) if phantom_call(item, hidden)}
    removed |= _orphaned_reasoning(output, removed)
    out = dict(message)
    out["output"] = [item for i, item in enumerate(output) if i not in removed]
    return out


def merge(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One Response: outputs in order, usage summed, the last round's id.

    The last id because with storage it is the response the server holds with the whole
    chain behind it (the client's next ``previous_response_id``); without storage no id
    resolves anyway. ``previous_response_id`` is the client's own, from round one.
    """
    out = dict(rounds[-1])
    if "previous_response_id" in rounds[0] or "previous_response_id" in out:
        out["previous_response_id"] = rounds[0].get("previous_response_id")
    out["output"] = [item for r in rounds for item in as_list(r.get("output"))]
    usage = sum_usage(r.get("usage") for r in rounds)
    if usage is not None:
        out["usage"] = usage
    return out
