"""Call-through deferral: found tools are called through one fixed function, never added to ``tools[]``.

Why: classic deferral appends a found tool's definition to ``tools[]``, which comes first in
the prompt, so each discovery re-bills the whole conversation past the provider's cache.
Where the API has no native deferral (Chat Completions, Gemini: ``defer.call_through``),
``tools[]`` is instead the kept tools, the search tool and a dispatcher
(``gateway_call_tool(name, arguments)``), fixed for the session; a search answers with the
found tools' whole definitions as text, and the model calls one through the dispatcher.

The client never sees the dispatcher: the answer it gets carries a call of the real tool
(``CallThrough.unwrap``, live streams in ``tooldisco.apis.base``), which it runs like any
other; the history it sends back has those calls wrapped again (``CallThrough.wrap``),
the same bytes every time, so the prefix the upstream cached stays valid. A dispatcher call
naming no tool the client has, or with arguments that are no object, is answered by the
proxy with an error the model reads, in a hidden round, like a search.

The cost: the provider does not check a found tool's arguments against its schema (the
tool, or the client, still does).
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Collection, Mapping

from tooldisco.core.types import Target, ToolCall
from tooldisco.search.base import Catalog
from tooldisco.search.names import name_index

def description(search: str) -> str:
    """The dispatcher's description: the same for every request, so ``tools[]`` never changes."""
    return (f"Call a tool that {search} returned, by its exact name, with arguments that fit the "
            "parameters its definition gives. Tools in your tool list are called directly, not through this.")


MAX_NAME_CHARS = 200  # of a name the model gave, repeated in the error it reads


class Dispatch:
    """The dispatcher of one flow: which of its calls stand for which real call. The stitcher
    (what the client sees live) and the loop (what is answered) ask the same object."""

    def __init__(self, name: str, search: str, catalog: Catalog, loaded: Collection[str],
                 withheld: Mapping[str, str] | None = None) -> None:
        self.name = name  # the dispatcher's tool name
        self.search = search  # the search tool's (named in errors)
        self.catalog = catalog  # the deferred tools a call may name
        self.loaded = frozenset(loaded)  # client tools forwarded as they are: a call may name them too
        # Tools the policy withholds from this request, with what the model reads when it names one.
        self.withheld: Mapping[str, str] = withheld or {}
        self._unknowns: dict[str, str] = {}  # name -> its error: the stitcher and the loop ask for the same call

    def target(self, call: ToolCall) -> Target | str:
        """The real call ``call`` stands for, or what the model reads when there is none."""
        args = call.arguments
        if isinstance(args, str):  # some models encode the object once more
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                pass
        if not isinstance(args, dict) or not isinstance(args.get("name"), str) or not args["name"].strip():
            return _error(f'{self.name} takes {{"name": "<a tool {self.search} returned>", "arguments": {{...}}}}.')
        if (refusal := self.withheld.get(args["name"].strip())) is not None:
            return _error(refusal)
        name = self._resolve(args["name"].strip())
        if name is None:
            return _error(self._unknown(args["name"]))
        inner = args.get("arguments", {})
        if isinstance(inner, str):
            try:
                inner = json.loads(inner) if inner.strip() else {}
            except (ValueError, RecursionError):
                pass
        if inner is None:
            inner = {}
        if not isinstance(inner, dict):
            return _error(f"arguments must be a JSON object of {name}'s parameters.")
        return Target(name, inner)

    def resolve(self, call: ToolCall) -> Target | str | None:
        """``target`` for a dispatcher call; None for any other call."""
        return self.target(call) if call.name == self.name else None

    def _resolve(self, name: str) -> str | None:
        """The client's name for ``name``: itself, or the one deferred tool with that bare name."""
        if name in self.loaded and name not in (self.name, self.search):
            return name
        if name in self._deferred:
            return name
        hits = name_index(self.catalog).resolve(name)
        return self.catalog[hits[0]].name if len(hits) == 1 else None

    @cached_property
    def _deferred(self) -> frozenset[str]:
        return frozenset(t.name for t in self.catalog)

    def _unknown(self, name: str) -> str:
        if (known := self._unknowns.get(name)) is not None:
            return known
        nearest = name_index(self.catalog).suggest(name) if self.catalog else []
        hint = f" The nearest names: {', '.join(nearest)}." if nearest else ""
        shown = name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS] + "..."  # the model's: untrusted
        message = self._unknowns[name] = (f"No tool is named {shown!r}. Search with {self.search} first, then "
                                          f"call a tool it returns by its exact name.{hint}")
        return message


def _error(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)

