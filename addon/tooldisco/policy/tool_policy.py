"""Which of a client's tools its model may see: ``policy.deny``, ``always_load``, ``max_loaded``.

Why here, once, for every strategy: a denied tool must leave every path a definition can take
to the model (the forwarded ``tools[]``, a native deferral's marked list, a search result, a
``select:`` load, a call-through dispatch), and the planner applies the policy to the request's
view before any strategy reads it, so no flavour can forget it.

Rules resolve per request: the defaults, plus the first ``clients`` entry that matches the
request (by user agent, a header, or the fingerprint of its credential). Globs are compiled
once into one pattern; what a rule set decides about a catalog is kept on the catalog
(``ToolCatalog.derived``), so a session's later turns pay a lookup, not a match per tool.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from tooldisco.config import ClientMatch, PolicySettings
from tooldisco.core.types import ToolCatalog

#: What the model reads when it calls a tool the policy denies (the client never sees it).
DENIED = "Tool {name} is not available here: the administrator's policy does not allow it. Do not call it again."


@dataclass(frozen=True)
class Globs:
    """Tool-name globs (fnmatch, case-sensitive like tool names), matched as one pattern."""

    patterns: tuple[str, ...]

    @cached_property
    def _regex(self) -> re.Pattern[str] | None:
        if not self.patterns:
            return None
        return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in self.patterns))

    def __call__(self, name: str) -> bool:
        regex = self._regex
        return regex is not None and regex.match(name) is not None

    def __bool__(self) -> bool:
        return bool(self.patterns)


@dataclass(frozen=True)
class Rules:
    """The policy that applies to one request."""

    deny: Globs = Globs(())
    always_load: Globs = Globs(())
    max_loaded: int | None = None
    source: str = "policy"  # which entry added to the defaults: "policy" or "policy.clients[i]"

    def denied(self, catalog: ToolCatalog) -> frozenset[str]:
        """The catalog's tools this request may not use (worked out once per catalog and rule set)."""
        if not self.deny:
            return frozenset()
        return catalog.derived(("policy deny", self.deny.patterns),
                               lambda: frozenset(n for n in catalog.names if self.deny(n)))

    def always(self, catalog: ToolCatalog) -> frozenset[str]:
        """The catalog's tools kept loaded every turn (never one the client did not send)."""
        if not self.always_load:
            return frozenset()
        return catalog.derived(("policy always", self.always_load.patterns),
                               lambda: frozenset(n for n in catalog.names if self.always_load(n)))

    @property
    def empty(self) -> bool:
        return not self.deny and not self.always_load and self.max_loaded is None


NO_RULES = Rules()


@dataclass
class ToolPolicy:
    """``policy:`` compiled: the rules of each request (``for_request``)."""

    settings: PolicySettings
    _defaults: Rules = field(init=False)
    _clients: tuple[tuple[ClientMatch, Rules], ...] = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self._defaults = Rules(Globs(s.deny), Globs(s.always_load), s.max_loaded)
        self._clients = tuple(
            (c.match, Rules(Globs(s.deny + c.deny), Globs(s.always_load + c.always_load),
                            c.max_loaded if c.max_loaded is not None else s.max_loaded, f"policy.clients[{i}]"))
            for i, c in enumerate(s.clients))

    def for_request(self, headers: Mapping[str, str], tenant: str | None) -> Rules:
        """The defaults with the first matching client entry's additions. ``headers`` lowercase;
        ``tenant``: the credential's fingerprint (``core.tenants``), None without one."""
        for match, rules in self._clients:
            if matches(match, headers, tenant):
                return rules
        return self._defaults


def matches(match: ClientMatch, headers: Mapping[str, str], tenant: str | None) -> bool:
    """Whether every condition of ``match`` holds for a request."""
    if match.user_agent is not None and not fnmatch.fnmatch(headers.get("user-agent", "").lower(),
                                                            match.user_agent.lower()):
        return False
    if match.header is not None:
        name, glob = match.header
        if name not in headers or not fnmatch.fnmatchcase(headers[name], glob):
            return False
    if match.key is not None and not (tenant or "").startswith(match.key):
        return False
    return True
