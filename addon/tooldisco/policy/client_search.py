"""A client's own tool search, recognised by what it is.

Why: an agent that defers tools by itself gives its model a tool whose job is finding the
client's deferred tools (Claude Code's ``ToolSearch``, Qwen Code's ``tool_search``, and the
like in other agents). A second search tool beside it could only compete with it, and
deferring that tool would hide the one way to the client's deferred tools, so a request
that carries one goes through as the client made it.

Recognised by its name (``tool_discovery.client_search_tools``, which ships the known ones;
names compare without case, ``_`` or ``-``), or by what it says it does: a tool named for
finding tools (a word like search, find or load beside tool) whose text speaks of deferred,
hidden or not-yet-loaded tools.
"""

from __future__ import annotations

import re
from typing import Iterable

from tooldisco.core.types import Tool

# How much of a tool's text is read: a description states its job in its first sentences,
# and a hostile one must not cost more than this.
_MAX_TEXT = 4000
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_FINDS = frozenset({"search", "find", "discover", "discovery", "load", "lookup", "select", "fetch"})
_TOOLS = frozenset({"tool", "tools", "function", "functions"})
_STATE = r"(?:deferred|lazy[- ]?loaded|hidden|unloaded|not(?:\s+yet)?\s+loaded)"
_THINGS = r"(?:tools?|functions?|schemas?|declarations?|definitions?)"
_DEFERRED = re.compile(  # "deferred tools", "hidden MCP tool schemas", "tools that are not yet loaded"
    rf"\b{_STATE}\s+(?:\w+\s+){{0,2}}?{_THINGS}\b|\b{_THINGS}\s+(?:that|which)\s+(?:are|is)\s+{_STATE}\b",
    re.IGNORECASE,
)


def normalised(name: str) -> str:
    """``ToolSearch``, ``tool_search`` and ``tool-search`` are one name."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def is_client_search(tool: Tool, known: Iterable[str]) -> bool:
    """Whether ``tool`` is the client's own search over its deferred tools."""
    return _is_client_search(tool, frozenset(map(normalised, known)))


def _is_client_search(tool: Tool, known: frozenset[str]) -> bool:
    """``is_client_search`` with the known names ``normalised`` once for a whole catalog."""
    if normalised(tool.name) in known:
        return True
    words = {w.lower() for w in _WORD.findall(tool.name)}
    if not (words & _FINDS and words & _TOOLS):
        return False
    return _DEFERRED.search(tool.search_text[:_MAX_TEXT]) is not None


def client_search(tools: Iterable[Tool], known: Iterable[str]) -> str | None:
    """The name of the client's own search tool among ``tools``, or None."""
    names = frozenset(map(normalised, known))
    for tool in tools:
        if tool.pinned in (None, "client_search") and _is_client_search(tool, names):
            return tool.name
    return None
