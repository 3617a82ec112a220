"""Pinned tool definitions: trust on first use, per tenant, to notice a tool changing under an agent.

Why: an agent accepts a tool (an MCP server's, a plugin's) once, and then calls it turn after turn
without anyone reading its definition again. A server that later rewrites the definition (the "rug
pull": a description that now tells the model to copy every file to some address, a new parameter
that carries it) changes what the model does without the user seeing it. So the first definition
seen of each tool name is pinned (its fingerprint, and the definition itself, for a diff), and a
later request whose definition differs is a change that waits for approval (``tooldisco tools``).

What is fingerprinted (``read_by_model``): what the model reads of a definition, spelled the same
whichever wire API carried it: the name, the description and the parameters schema, all of the
schema (property names, types, descriptions, enums, defaults, required: a poisoned instruction can
hide anywhere in it), and any other key the definition carries (Gemini's ``response``, a
namespace's description, Anthropic's ``input_examples``…). Left out: the ``EXCLUDED`` keys, which
the model does not read or the proxy itself adds, and JSON's key order and whitespace (canonical
JSON). A definition without a schema (a server or built-in tool) is fingerprinted whole.

Why pure (no store, no mitmproxy): the planner calls ``check`` with the tenant's entry it read and
writes what ``check`` returns through the store's atomic ``pin``; the CLI calls ``approve`` and
``diff``; tests call them all with a clock of their own. The request path, then: read
``store.pins(tenant)`` and ``check`` it (no write in the common case); only when ``check`` returns
an entry, ``store.pin(tenant, lambda e: check(e, ...)[0] or e)``, which checks again what is stored
by then (another proxy may have written meanwhile; ``or e``: nothing left to write, the TTL slides),
and report the changes of that last run.

The entry (plain JSON types, stored as it is by both stores)::

    {"v": 1, "tenant": "<display id, 12 hex>",
     "tools": {name: {"fp": str | None, "body": str | None, "def": dict | None,
                      "first_seen": float, "seen": float, "approved": float | None, "from": str | None,
                      "pending": None | {"fp", "body", "def", "seen", "kind", "from", "what"}}}}

``fp``/``body``/``def``: the pinned definition (None while a strict first sight awaits approval);
``def`` is ``read_by_model``'s dict, or ``{"truncated": true, "sha": fp}`` when its canonical JSON
exceeds ``MAX_DEF_BYTES``; ``approved``: when it was approved (None: trusted on first use);
``from``: the pinned name it was a renamed copy of, when it was pinned as one;
``seen``: when a request last carried the name, refreshed at most every ``SEEN_EVERY`` seconds,
so an unchanged tenant's entry is written about once a day (which also slides the store's TTL);
``pending``: a definition sent since that differs from the pinned one, with why (``kind``:
changed / new / renamed, ``from``: the pinned name a renamed copy copies, ``what``: in words).

Bound: at most ``MAX_PINNED`` names per tenant. Past it, names go in this order: those with no
pending change before those with one, those the request at hand did not carry before those it
did (and of those, the ones it just pinned first), then the least recently seen. A tool that
goes is simply pinned anew when it comes back.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from string import hexdigits
from typing import Any

from tooldisco.core.types import Tool

VERSION = 1
#: Names pinned per tenant (see the module's docstring for which go past it).
MAX_PINNED = 5000
#: A definition whose canonical JSON is larger is pinned by its fingerprint alone (no diff).
MAX_DEF_BYTES = 32 * 1024
#: How stale a name's ``seen`` may get before a request carrying it refreshes it (a write).
SEEN_EVERY = 86400.0
FP_HEX = 32
MIN_APPROVAL_HEX = 8
#: The kinds of pending change ``check`` makes. An entry may hold others (the caller's own, e.g. a
#: definition it holds for what it reads like): kept as they are, shown and approved alike.
KINDS = ("changed", "new", "renamed")

#: Keys left out at a definition's top level and in its wrapper (Chat's ``function``, Bedrock's
#: ``toolSpec``, a Responses namespace's function): ``cache_control`` (prompt caching),
#: ``defer_loading`` (native deferral: the proxy adds it itself when it defers a tool, and a
#: definition must not look changed because the proxy deferred it), ``strict`` (constrained
#: decoding of the arguments), ``eager_input_streaming`` (how arguments stream), ``annotations``
#: and ``_meta`` (MCP's hints and metadata for the client): transport and caching hints the model
#: does not read. Everything inside the parameters schema is in.
EXCLUDED: frozenset[str] = frozenset({"cache_control", "defer_loading", "strict", "annotations", "_meta",
                                      "eager_input_streaming"})
# Where each API keeps the parameters schema: Anthropic, Chat / Responses / Gemini, Gemini's JSON
# Schema spellings, Bedrock (``{"json": schema}``).
_SCHEMA_KEYS = ("input_schema", "parameters", "parametersJsonSchema", "parameters_json_schema", "inputSchema")
# A ``type`` that only says "an ordinary function" (Chat / Responses ``function``, Anthropic ``custom``).
_PLAIN_TYPES = ("function", "custom")
_OWN = ("name", "description", "parameters")
_MEMO = "_tooldisco_pins"  # where a Tool keeps its (fingerprint, body fingerprint)


@dataclass(frozen=True)
class Change:
    """A definition this request reveals to differ from what the tenant pinned."""

    name: str
    kind: str  # "changed" | "new" (strict pinning: first sight waits) | "renamed" (same body as pinned ``was``)
    what: tuple[str, ...]  # in words: ("description", "parameters: added 'cc', removed 'to'"); () for new
    was: str | None = None  # renamed: the pinned name it copies
    fingerprint: str = ""


# --- what the model reads ------------------------------------------------------------------------


def _strip(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in EXCLUDED}


def _plain(key: str, value: Any) -> bool:
    return key == "type" and value in _PLAIN_TYPES


def _shape(name: str, d: Any) -> dict[str, Any]:
    """``read_by_model`` of a decoded definition."""
    if not isinstance(d, dict):
        return {"name": name, "description": "", "parameters": d}
    outer = _strip(d)
    core, wrapper, extra = outer, {}, {}
    if isinstance(outer.get("toolSpec"), dict):  # Bedrock
        core = _strip(outer["toolSpec"])
        wrapper = {k: v for k, v in outer.items() if k != "toolSpec"}
    elif outer.get("type") == "function" and isinstance(outer.get("function"), dict):  # Chat
        core = _strip(outer["function"])
        wrapper = {k: v for k, v in outer.items() if k not in ("type", "function")}
    elif (outer.get("type") == "namespace" and isinstance(outer.get("tools"), list) and len(outer["tools"]) == 1
          and isinstance(outer["tools"][0], dict)):  # one function of a Responses namespace (named "ns.fn")
        core = _strip(outer["tools"][0])
        extra["namespace"] = {k: v for k, v in outer.items() if k != "tools"}
    description = core.get("description", "")
    rest = {k: v for k, v in core.items() if k not in ("name", "description") and not _plain(k, v)}
    schema = next((k for k in _SCHEMA_KEYS if k in rest), None)
    if schema is None:
        # No schema: a server or built-in tool ({"type":"web_search_20250305","name":"web_search"}),
        # a custom tool, a function without arguments: the rest of the definition is what it takes.
        parameters: Any = rest
    else:
        parameters = rest.pop(schema)
        if schema == "inputSchema" and isinstance(parameters, dict) and parameters.keys() == {"json"}:
            parameters = parameters["json"]
        extra.update(rest)
    extra.update((k, v) for k, v in wrapper.items() if not _plain(k, v))
    out = {"name": name, "description": description, "parameters": parameters}
    if extra:
        out["extra"] = extra
    return out


def read_by_model(tool: Tool) -> dict[str, Any]:
    """``{"name", "description", "parameters"}``: what the model reads of a definition, whichever API
    spelled it (Anthropic ``input_schema``, Chat's ``function`` wrapper, Responses, Gemini's
    ``parameters`` / ``parametersJsonSchema``, Bedrock's ``toolSpec.inputSchema.json``), without the
    ``EXCLUDED`` keys. ``name`` is the tool's name as the model calls it. For a definition with no
    schema (server and built-in tools like ``{"type":"web_search_20250305","name":"web_search"}``),
    ``parameters`` is the definition without the excluded keys (and without its name and
    description, which have their own fields). Whatever else the definition carries that the
    model may read (Gemini's ``response``, a namespace's name and description, an unknown key) is
    under ``extra``, present only when there is some. A definition that is not JSON is its text."""
    try:
        d = json.loads(tool.raw)
    except (ValueError, TypeError, RecursionError):
        return {"name": tool.name, "description": tool.description, "parameters": tool.raw}
    return _shape(tool.name, d)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:FP_HEX]


def _prints(tool: Tool) -> tuple[str, str]:
    """(fingerprint, body fingerprint), made once per Tool and kept on it, as ``functools.cached_property``
    keeps ``Tool.identity``: the adapters hand out one Tool per definition text, so a catalog's
    tools are fingerprinted once, not once per request."""
    memo = tool.__dict__.get(_MEMO)
    if memo is None:
        read = read_by_model(tool)
        try:
            memo = _digest(_canonical(read)), _digest(_canonical({k: v for k, v in read.items() if k != "name"}))
        except (ValueError, TypeError, RecursionError):  # nested past json's limit: its text stands for it
            memo = _digest(_canonical([tool.name, tool.raw])), _digest(_canonical(tool.raw))
        tool.__dict__[_MEMO] = memo
    return memo


def fingerprint(tool: Tool) -> str:
    """The definition as the model reads it (``read_by_model``): SHA-256 of its canonical JSON
    (sorted keys, no whitespace), 32 hex."""
    return _prints(tool)[0]


def body_fingerprint(tool: Tool) -> str:
    """``fingerprint`` without the name: a renamed copy of a pinned definition has the same body."""
    return _prints(tool)[1]


def _stored(definition: dict[str, Any], fp: str) -> dict[str, Any]:
    """The definition as an entry keeps it: itself, or past ``MAX_DEF_BYTES`` a marker."""
    try:
        size = len(_canonical(definition).encode("utf-8", "surrogatepass"))
    except (ValueError, TypeError, RecursionError):
        size = MAX_DEF_BYTES + 1
    return {"truncated": True, "sha": fp} if size > MAX_DEF_BYTES else definition


# --- the entry -----------------------------------------------------------------------------------


def _num(value: Any, default: Any) -> Any:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else default


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _pending(p: Any) -> dict[str, Any] | None:
    if not isinstance(p, dict) or _text(p.get("fp")) is None:
        return None
    what = p.get("what")
    return {"fp": p["fp"], "body": _text(p.get("body")), "def": p["def"] if isinstance(p.get("def"), dict) else None,
            "seen": _num(p.get("seen"), 0.0), "kind": p["kind"] if _text(p.get("kind")) else "changed",
            "from": _text(p.get("from")),
            "what": [w for w in what if isinstance(w, str)] if isinstance(what, list) else []}


def _record(rec: Any) -> dict[str, Any] | None:
    if not isinstance(rec, dict):
        return None
    fp, pending = _text(rec.get("fp")), _pending(rec.get("pending"))
    if fp is None and pending is None:
        return None
    first = _num(rec.get("first_seen"), 0.0)
    return {"fp": fp, "body": _text(rec.get("body")) if fp else None,
            "def": rec["def"] if fp and isinstance(rec.get("def"), dict) else None,
            "first_seen": first, "seen": _num(rec.get("seen"), first), "approved": _num(rec.get("approved"), None),
            "from": _text(rec.get("from")) if fp else None, "pending": pending}


def decode(entry: Any) -> dict[str, Any]:
    """A fresh, well-formed copy of a stored entry (its records new dicts, safe to change);
    anything unreadable reads as empty: the whole entry, or one record."""
    out: dict[str, Any] = {"v": VERSION, "tenant": "", "tools": {}}
    if not isinstance(entry, dict) or entry.get("v", VERSION) != VERSION:
        return out
    if isinstance(entry.get("tenant"), str):
        out["tenant"] = entry["tenant"]
    tools = entry.get("tools")
    if isinstance(tools, dict):
        for name, rec in tools.items():
            if isinstance(name, str) and (r := _record(rec)) is not None:
                out["tools"][name] = r
    return out


# --- what changed, in words ----------------------------------------------------------------------


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _parameters_change(old: Any, new: Any) -> str:
    po = old.get("properties") if isinstance(old, dict) else None
    pn = new.get("properties") if isinstance(new, dict) else None
    if not isinstance(po, dict) or not isinstance(pn, dict):
        return "parameters"
    parts = []
    if added := sorted(k for k in pn if k not in po):
        parts.append(f"added {_quoted(added)}")
    if removed := sorted(k for k in po if k not in pn):
        parts.append(f"removed {_quoted(removed)}")
    if changed := sorted(k for k in po if k in pn and po[k] != pn[k]):
        parts.append(f"changed {_quoted(changed)}")
    parts += [f"{k} changed" for k in sorted((set(old) | set(new)) - {"properties"}) if old.get(k) != new.get(k)]
    return "parameters: " + ", ".join(parts) if parts else "parameters"


def what_changed(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, ...]:
    """How two ``read_by_model`` dicts differ, in words: ``("description", "parameters: added 'cc',
    removed 'to', changed 'body'")``; ``("definition",)`` when one is not kept (too large)."""
    if not isinstance(old, dict) or not isinstance(new, dict) or old.get("truncated") or new.get("truncated"):
        return ("definition",)
    out = [k for k in ("name", "description") if old.get(k) != new.get(k)]
    if old.get("parameters") != new.get("parameters"):
        out.append(_parameters_change(old.get("parameters"), new.get("parameters")))
    eo, en = old.get("extra"), new.get("extra")
    eo, en = eo if isinstance(eo, dict) else {}, en if isinstance(en, dict) else {}
    out += [k for k in sorted(set(eo) | set(en)) if eo.get(k) != en.get(k)]
    out += [k for k in sorted((set(old) | set(new)) - {*_OWN, "extra"}) if old.get(k) != new.get(k)]
    return tuple(out) or ("definition",)


# --- checking a request, approving, diffing -----------------------------------------------------


def _approvals(approved: Collection[str]) -> list[tuple[str | None, str]]:
    """("name" or None, fingerprint prefix) of each well-formed approval; the others are ignored."""
    rules = []
    for a in approved:
        if not isinstance(a, str):
            continue
        name, at, prefix = a.strip().rpartition("@")
        prefix = prefix.lower()
        if len(prefix) >= MIN_APPROVAL_HEX and all(c in hexdigits for c in prefix):
            rules.append((name if at and name else None, prefix))
    return rules


def _approved_by(rules: list[tuple[str | None, str]], name: str, fp: str) -> bool:
    return any((n is None or n == name) and fp.startswith(p) for n, p in rules)


def config_approves(approved: Collection[str], name: str, fp: str) -> bool:
    """Whether the config's approvals (``policy.approve``) approve this very definition."""
    return _approved_by(_approvals(approved), name, fp)


def _pin(rec: dict[str, Any], fp: str, body: str, definition: dict[str, Any], approved: float | None,
         was: str | None = None) -> None:
    rec.update(fp=fp, body=body, pending=None, approved=approved)
    rec["def"], rec["from"] = _stored(definition, fp), was


def _fresh(now: float) -> dict[str, Any]:
    return {"fp": None, "body": None, "def": None, "first_seen": now, "seen": now, "approved": None, "from": None,
            "pending": None}


def _unchanged(held: Any, tools: Sequence[Tool], stale: float) -> bool:
    """The common case, cheaply: every tool pinned as sent, and seen recently enough."""
    if not isinstance(held, dict):
        return not tools
    for tool in tools:
        rec = held.get(tool.name)
        if type(rec) is not dict or rec.get("fp") != _prints(tool)[0]:
            return False
        seen = rec.get("seen")
        if not isinstance(seen, (int, float)) or isinstance(seen, bool) or not seen > stale:
            return False
    return True


def check(entry: Any, tools: Sequence[Tool], now: float, strict: bool = False, approved: Collection[str] = (),
          tenant: str = "") -> tuple[dict[str, Any] | None, tuple[Change, ...], frozenset[str]]:
    """Compare this request's tools with the tenant's pins. Returns (the entry to write, or None when
    nothing changed so no write is needed), the changes this request reveals (reported once: a
    change already pending with the same fingerprint is not reported again), and the names whose
    definition as sent now is not approved (pending: changed / new / renamed-unapproved).

    First sight pins the definition (trust on first use) unless ``strict`` (then it is pending,
    kind "new"). ``approved``: approvals from the config, as ``"name@fpprefix"`` (at least 8 hex) or
    a bare fingerprint prefix: a pending definition whose fingerprint matches is pinned at once. A
    renamed copy (a new name whose body equals that of a tool pinned before this request) is
    reported kind "renamed" with ``was``; under non-strict it is pinned (trusted), but reported.
    A tool pinned but sent again as pinned while a change of it is pending is approved as sent
    (its change stays pending). Cheap when nothing changed (a dict lookup per tool comparing
    fingerprint strings); never raises on a malformed ``entry``."""
    held = entry.get("tools") if isinstance(entry, dict) and entry.get("v", VERSION) == VERSION else None
    stale = now - SEEN_EVERY
    if _unchanged(held, tools, stale):
        return None, (), frozenset()
    data = decode(entry)
    pinned: dict[str, dict[str, Any]] = data["tools"]
    rules = _approvals(approved) if approved else []
    bodies: dict[str, str] | None = None  # body -> a name pinned with it before this request
    changes: list[Change] = []
    unapproved: set[str] = set()
    touched: set[str] = set()  # names whose record this check changed
    added: set[str] = set()  # names this check pinned (or made pending) anew
    present: dict[str, None] = {}
    for tool in tools:
        name = tool.name
        if name in present:
            continue
        present[name] = None
        fp, body = _prints(tool)
        rec = pinned.get(name)
        if rec is not None and rec["fp"] == fp:
            continue
        ok = _approved_by(rules, name, fp)
        pend = rec["pending"] if rec is not None else None
        if pend is not None and pend["fp"] == fp and not ok:
            unapproved.add(name)  # already reported
            continue
        definition = read_by_model(tool)
        if rec is not None and rec["fp"] is not None:  # pinned as something else
            touched.add(name)
            if ok:
                _pin(rec, fp, body, definition, now)
                continue
            what = what_changed(rec["def"], definition)
            rec["pending"] = {"fp": fp, "body": body, "def": _stored(definition, fp), "seen": now, "kind": "changed",
                              "from": None, "what": list(what)}
            changes.append(Change(name, "changed", what, None, fp))
            unapproved.add(name)
            continue
        if bodies is None:
            bodies = {}
            for n, r in pinned.items():
                if r["fp"] is not None and r["body"] is not None and n not in added:
                    bodies.setdefault(r["body"], n)
        was = bodies.get(body)
        was = was if was != name else None
        if rec is None:
            rec = pinned[name] = _fresh(now)
            added.add(name)
        touched.add(name)
        if ok:
            _pin(rec, fp, body, definition, now)
            continue
        what = what_changed(pinned[was]["def"], definition) if was is not None else ()
        if not strict:
            _pin(rec, fp, body, definition, None, was)
            if was is not None:
                changes.append(Change(name, "renamed", what, was, fp))
            continue
        kind = "renamed" if was is not None else "new"
        rec["pending"] = {"fp": fp, "body": body, "def": _stored(definition, fp), "seen": now, "kind": kind,
                          "from": was, "what": list(what)}
        changes.append(Change(name, kind, what, was, fp))
        unapproved.add(name)
    for name in present:
        rec = pinned.get(name)
        if rec is not None and not rec["seen"] > stale:
            rec["seen"] = now
            touched.add(name)
    gone = _bound(pinned, present, added)
    reported = tuple(c for c in changes if c.name not in gone)
    # Written when a record that stays changed, or one stored before went; a name pinned and
    # dropped at once (a request past the bound) changes nothing.
    if not (touched - gone or gone - added):
        return None, reported, frozenset(unapproved)
    if tenant:
        data["tenant"] = tenant
    return data, reported, frozenset(unapproved)


def _bound(pinned: dict[str, dict[str, Any]], present: Collection[str], added: Collection[str]) -> set[str]:
    """Names removed to keep ``MAX_PINNED`` (see the module's docstring for the order)."""
    over = len(pinned) - MAX_PINNED
    if over <= 0:
        return set()
    order = sorted(pinned, key=lambda n: (pinned[n]["pending"] is not None, n in present, n not in added,
                                           pinned[n]["seen"], n))
    gone = set(order[:over])
    for n in gone:
        del pinned[n]
    return gone


def approve(entry: Any, names: Collection[str] | None, now: float) -> tuple[dict[str, Any], list[str]]:
    """Pin the pending definitions of ``names`` (None: every one); the entry to write and the names
    approved, sorted (a name with nothing pending is not among them)."""
    data = decode(entry)
    wanted = None if names is None else set(names)
    done = []
    for name, rec in data["tools"].items():
        p = rec["pending"]
        if p is None or (wanted is not None and name not in wanted):
            continue
        rec.update(fp=p["fp"], body=p["body"], pending=None, approved=now)
        rec["def"], rec["from"] = p["def"], p["from"] if p["kind"] == "renamed" else None
        done.append(name)
    return data, sorted(done)


def _pretty(definition: Any) -> list[str]:
    if definition is None:
        return []
    return (json.dumps(definition, indent=2, sort_keys=True, ensure_ascii=False) + "\n").splitlines(keepends=True)


def diff(entry: Any, name: str) -> str:
    """A unified diff of the pinned definition and the pending one (pretty JSON), "" when nothing
    is pending for ``name``. A pending new tool is diffed against nothing, a pending renamed copy
    against the tool it copies."""
    data = decode(entry)
    rec = data["tools"].get(name)
    if rec is None or rec["pending"] is None:
        return ""
    p = rec["pending"]
    old, label = rec["def"], f"{name} (pinned {(rec['fp'] or '')[:12]})"
    if rec["fp"] is None:
        source = data["tools"].get(p["from"] or "")
        if source is not None and source["fp"] is not None:
            old, label = source["def"], f"{p['from']} (pinned {source['fp'][:12]})"
        else:
            label = f"{name} (nothing pinned)"
    to = f"{name} ({p['kind']} {p['fp'][:12]})"
    if old is not None and old == p["def"]:  # held as it was pinned (a kind of the caller's): no line differs
        return f"--- {label}\n+++ {to}\n" + "".join(" " + line for line in _pretty(old))
    return "".join(difflib.unified_diff(_pretty(old), _pretty(p["def"]), fromfile=label, tofile=to))
