"""What the team's policy makes of one request's tools: denied, held for review, kept loaded.

Why in the engine: the rules (``policy.tool_policy``), the pins (``policy.pins``) and the
screening (``policy.screening``) are pure; this is where they meet the session store and the
request, once, before any strategy plans. What it returns (``Review``) is the only thing the
planner asks: the tools withheld from this request, with the error the model reads should it
call one, and the settings the strategies plan with (``always_load`` folded into ``always_keep``).

Costs, per request: a lookup of the rules (a few globs over the user agent), and for a
catalog the tenant was already checked against, a dict lookup. A tenant's pins are read and
written in the store once per catalog it sends (and again every ``RECHECK`` seconds while one of
its tools waits for approval, so an approval given elsewhere, by the CLI or another proxy,
applies within that time); the screening runs once per catalog.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from loguru import logger

from tooldisco.config import Config, ToolDiscovery
from tooldisco.core.types import RequestView, ToolCatalog
from tooldisco.engine.telemetry import Record
from tooldisco.policy import pins, screening
from tooldisco.policy.tool_policy import DENIED, Rules, ToolPolicy
from tooldisco.state.base import SessionStore

#: What the model reads when it calls a tool held for review (the client never sees it).
HELD = ("Tool {name} is held for review: its definition {why} and waits for an administrator's approval. "
        "Do not call it again; use another tool or tell the user it is unavailable.")
_TOKENS = itertools.count()
RECHECK = 1.0  # seconds a tenant's verdict on a catalog with held tools is reused before the store is read again


@dataclass(frozen=True)
class Review:
    """The policy's verdict on one request."""

    withheld: Mapping[str, str] = field(default_factory=dict)  # name -> what the model reads should it call it
    settings: ToolDiscovery | None = None  # None: the configured ones
    max_loaded: int | None = None
    rules: Rules | None = None


@dataclass
class _Verdict:
    """One tenant's verdict on one catalog: what it holds, as of when."""

    held: dict[str, str] | None = None  # name -> why; None: not checked yet
    checked: float = 0.0  # monotonic time of the store read
    lock: threading.Lock = field(default_factory=threading.Lock)  # one check at a time per tenant and catalog


class Governance:
    """The policy, the pins and the screening of one proxy (see the module doc)."""

    def __init__(self, config: Config, store: SessionStore) -> None:
        self.settings = config.policy
        self.tool_discovery = config.tool_discovery
        self.store = store
        self.policy = ToolPolicy(config.policy)
        self._settings: dict[tuple[str, ...], ToolDiscovery] = {}
        # Catalogs are shared by the process (``core.catalog``): this proxy's verdicts on them are
        # kept under its own token, never read by another engine (a reloaded config, a test's).
        self._token = next(_TOKENS)
        self._warned: set[tuple[str, int]] = set()  # (tool, its definition's hash): findings logged once

    @property
    def active(self) -> bool:
        """Whether anything here can change a request or report on it."""
        s = self.settings
        return s.rules or s.pin != "off" or s.screen

    def review(self, view: RequestView, headers: Mapping[str, str], tenant: str | None, record: Record) -> Review:
        """The policy's verdict on ``view``'s tools for this request; reports what it found on ``record``."""
        offered = view.offered
        rules = self.policy.for_request(headers, tenant)
        withheld: dict[str, str] = {}
        for name in rules.denied(offered):
            withheld[name] = DENIED.format(name=name)
        if withheld:
            record.denied_tools = len(withheld)
            if rules.source != "policy":
                record.policy = rules.source
        flagged = self._screen(offered, record) if self.settings.screen else {}
        if tenant is not None and self.settings.pin != "off" and view.tools:
            for name, why in self._pinned(tenant, offered, flagged, record).items():
                withheld.setdefault(name, HELD.format(name=name, why=why))
        elif flagged and self.settings.on_screen == "hold":  # a caller without a credential: nothing to approve
            for name in flagged:
                withheld.setdefault(name, HELD.format(name=name, why="reads like instructions to the model"))
        if held := [n for n in withheld if n not in rules.denied(offered)]:
            record.held_tools = sorted(held)
        settings = self._with_always(rules)
        return Review(withheld, settings, rules.max_loaded, rules)

    def _with_always(self, rules: Rules) -> ToolDiscovery | None:
        """The settings with the rules' ``always_load`` kept like ``always_keep`` (one object per rule set)."""
        if not rules.always_load:
            return None
        key = rules.always_load.patterns
        if (td := self._settings.get(key)) is None:
            td = self._settings[key] = replace(self.tool_discovery,
                                               always_keep=self.tool_discovery.always_keep + key)
        return td

    # --- screening ------------------------------------------------------------------------

    def _screen(self, offered: ToolCatalog, record: Record) -> dict[str, tuple[screening.Finding, ...]]:
        """The catalog's flagged definitions (screened once per catalog), reported on ``record``."""
        flagged: dict[str, tuple[screening.Finding, ...]] = offered.derived("screening", lambda: _screened(offered))
        if flagged:
            record.tool_findings = [{"tool": name, "kind": f.kind, "where": f.where, "detail": f.detail}
                                    for name, found in flagged.items() for f in found][:50]
            for name, found in flagged.items():
                key = (name, offered.by_name[name].fingerprint)
                if key not in self._warned and len(self._warned) < 10_000:
                    self._warned.add(key)
                    logger.warning("tool {} reads like an attack on the model: {}", name,
                                   "; ".join(f"{f.kind} in {f.where}: {f.detail}" for f in found[:3]))
        return flagged

    # --- pins -----------------------------------------------------------------------------

    def _pinned(self, tenant: str, offered: ToolCatalog, flagged: Mapping[str, Any], record: Record) -> dict[str, str]:
        """The tools held for ``tenant`` (name -> why), checking the catalog against its pins
        when it is new to this proxy for the tenant, or a held tool's verdict is older than
        ``RECHECK``. The verdict lives on the catalog (``ToolCatalog.derived``): it goes with it."""
        verdict: _Verdict = offered.derived(("pins verdict", self._token, tenant), _Verdict, per_set=True)
        now = time.monotonic()
        with verdict.lock:
            if verdict.held is not None and (not verdict.held or now - verdict.checked < RECHECK):
                return verdict.held
            verdict.held, verdict.checked = self._check(tenant, offered, flagged, record), now
            return verdict.held

    def _check(self, tenant: str, offered: ToolCatalog, flagged: Mapping[str, Any], record: Record) -> dict[str, str]:
        """One store read (and a write only when something is new, changed or newly flagged)."""
        s = self.settings
        strict = s.pin == "strict"
        tools = offered.tools
        hold_flagged = s.on_screen == "hold" and bool(flagged)
        now = time.time()
        latest = self.store.pins(tenant)
        entry, changes, _ = pins.check(latest, tools, now, strict, s.approve, tenant[:12])
        if entry is not None or (hold_flagged and _unflagged(latest, flagged, offered)):
            # Something to write: again, atomically (another flow or proxy may have written since).
            reported: list[pins.Change] = []

            def change(current: Any) -> Any:
                written, found, _ = pins.check(current, tools, time.time(), strict, s.approve, tenant[:12])
                reported[:] = found
                written = written if written is not None else current
                if hold_flagged:
                    written = _flag(written, flagged, offered, time.time(), s.approve)
                return written

            latest = self.store.pin(tenant, change)
            changes = tuple(reported)
        if changes:
            record.tool_changes = [_change(c, latest) for c in changes[:50]]
            for c in changes:
                logger.warning("tool definition {} for tenant {}: {}", _said(c), tenant[:12],
                               ", ".join(c.what) or "first seen")
        held: dict[str, str] = {}
        for name, kind in _pending(latest).items():
            if name not in offered.by_name:
                continue
            if hold_flagged and name in flagged:
                held[name] = "reads like instructions to the model"
            elif kind == "new" and strict:
                held[name] = "is new here"
            elif kind in ("changed", "renamed") and s.on_change == "hold":
                held[name] = "changed since it was approved" if kind == "changed" else "copies another tool's"
        return held


def _screened(offered: ToolCatalog) -> dict[str, tuple[screening.Finding, ...]]:
    return {t.name: found for t in offered.tools if (found := screening.screen(t))}


MAX_DIFF = 4000  # characters of a change's diff kept on the record (the view shows it; the CLI has it whole)


def _change(c: pins.Change, entry: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"tool": c.name, "kind": c.kind, "what": list(c.what)}
    if c.was:
        out["was"] = c.was
    if c.fingerprint:
        out["fingerprint"] = c.fingerprint[:12]
    if c.kind != "new" and (diff := pins.diff(entry, c.name)):
        out["diff"] = diff if len(diff) <= MAX_DIFF else diff[:MAX_DIFF] + "\n… (tooldisco tools diff " + c.name + ")"
    return out


def _said(c: pins.Change) -> str:
    return f"{c.name} (a renamed copy of {c.was})" if c.kind == "renamed" else f"{c.name} {c.kind}"


def _pending(entry: Any) -> dict[str, str]:
    """Each tool awaiting approval in a tenant's entry, with its kind ("changed", "new", "renamed", "flagged")."""
    out: dict[str, str] = {}
    for name, pin in pins.decode(entry).get("tools", {}).items():
        pending = pin.get("pending") if isinstance(pin, dict) else None
        if isinstance(pending, dict):
            out[name] = str(pending.get("kind", "changed"))
    return out


def _unflagged(entry: Any, flagged: Mapping[str, Any], offered: ToolCatalog) -> bool:
    """Whether a flagged definition is neither approved nor marked pending yet (a write is due)."""
    tools = pins.decode(entry).get("tools", {})
    for name in flagged:
        pin = tools.get(name)
        fp = pins.fingerprint(offered.by_name[name])
        if not isinstance(pin, dict):
            return True
        if pin.get("fp") == fp and pin.get("approved") is not None and not pin.get("pending"):
            continue
        pending = pin.get("pending")
        if not (isinstance(pending, dict) and pending.get("fp") == fp):
            return True
    return False


def _flag(entry: Any, flagged: Mapping[str, tuple[screening.Finding, ...]], offered: ToolCatalog, now: float,
          approvals: tuple[str, ...]) -> Any:
    """``entry`` with each flagged definition not approved yet pending as "flagged", so that
    ``tooldisco tools list --changed`` shows it and ``approve`` releases it."""
    entry = pins.decode(entry)
    tools = entry.setdefault("tools", {})
    for name, found in flagged.items():
        tool = offered.by_name[name]
        fp = pins.fingerprint(tool)
        if pins.config_approves(approvals, name, fp):
            continue
        pin = tools.get(name)
        if isinstance(pin, dict) and pin.get("fp") == fp and pin.get("approved") is not None and not pin.get("pending"):
            continue
        pending = pin.get("pending") if isinstance(pin, dict) else None
        if isinstance(pending, dict) and pending.get("fp") == fp:
            continue
        flag = {"fp": fp, "body": pins.body_fingerprint(tool), "def": pins.read_by_model(tool), "seen": now,
                "kind": "flagged", "from": None, "what": [f"{f.kind} in {f.where}" for f in found][:10]}
        if isinstance(pin, dict):
            pin["pending"] = flag
        else:
            tools[name] = {"fp": fp, "body": flag["body"], "def": flag["def"], "first_seen": now, "approved": None,
                           "pending": flag}
    return entry

