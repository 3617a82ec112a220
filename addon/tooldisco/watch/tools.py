"""Which tools the model saw and which the proxy hid, per tool, from the request bodies.

Why from the bodies: the bodies are the truth of what went where. The client's body says what
it offered; the forwarded body says what went upstream, in the order it went (kept tools, then
the search tool, then tools found earlier in the session), and which definitions it marked
deferred (native deferral). The adapters read both, so every API the project speaks gets the
same table. What this flow's searches found and what the model called come from the flow's
record (``summary.FlowSummary``): the table and the summary count the same facts.

A round's own view (``seen``) reads one body alone, the way the provider reads it: a tool is in
the model's prompt when ``tools[]`` carries it plainly, or when a result in the history loads it
(a native ``tool_reference`` / ``tool_search_output``), or, under call-through, when a search
result gives its definition to call through the dispatcher; a ``defer_loading`` definition no
result loaded is on the wire only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Sequence

from tooldisco.config import ToolDiscovery
from tooldisco.apis.base import Adapter
from tooldisco.core.types import RequestView, Tool
from tooldisco.policy.relevance import must_keep
from tooldisco.core.tokens import estimate_tokens
from tooldisco.watch import history
from tooldisco.watch.summary import BY_CLIENT, BY_SEARCH, NATIVELY, NATIVE

# A tool's state on this flow. In the model's prompt:
LOADED, PINNED, EARLIER = "loaded", "pinned", "found before"
# Not in the prompt (on the wire only under native deferral):
NATIVE_DEFERRED, DEFERRED, CLIENT_DEFERRED, DROPPED = NATIVELY, BY_SEARCH, BY_CLIENT, "dropped"
# Added by the proxy:
SEARCH_TOOL, DISPATCHER, SENT = "search tool", "dispatcher", "added"
# In one round's prompt besides (``seen``): loaded by a search result this round's body carries
# (a native reference, or classic's appended definition), or found for call-through (called
# through the dispatcher, its definition in the search result).
BY_RESULT, THROUGH = "loaded by search", "via dispatcher"
IN_PROMPT = frozenset({LOADED, PINNED, EARLIER, SEARCH_TOOL, DISPATCHER, SENT, BY_RESULT, THROUGH})
PROXYS = frozenset({SEARCH_TOOL, DISPATCHER})  # the proxy's own tools
HIDDEN = frozenset({NATIVE_DEFERRED, DEFERRED, DROPPED})  # what the proxy deferred
FOUND, CALLED = "found", "called"  # this flow's searches found it; the model called it
WIDTH = 17  # the status column: the longest status
GEAR = "⚙"  # the proxy's own


@dataclass(frozen=True)
class Row:
    name: str
    status: str
    client_tokens: int | None  # the definition's estimated tokens in the client's body (None: not there)
    wire_tokens: int | None  # in the forwarded body (None: not forwarded)
    found: bool = False
    called: bool = False
    note: str = ""  # a round's view: how it got into the prompt (not kept in ``as_list``)

    @property
    def prompt_tokens(self) -> int | None:
        """In the model's prompt: what went upstream loaded (a natively deferred one did not)."""
        return self.wire_tokens if self.status in IN_PROMPT else None

    @property
    def turn(self) -> str:
        return ", ".join([*(w for w, on in ((FOUND, self.found), (CALLED, self.called)) if on),
                          *([self.note] if self.note else [])])

    def as_list(self) -> list[Any]:
        """What ``flow.metadata`` keeps: plain values, so saved flows serialize."""
        return [self.name, self.status, self.client_tokens, self.wire_tokens, self.found, self.called]

    @classmethod
    def of(cls, item: Sequence[Any]) -> Row:
        name, status, client, wire, *flags = item
        found, called = (list(flags) + [False, False])[:2]
        return cls(str(name), str(status), client, wire, bool(found), bool(called))


def compare(adapter: Adapter, client_body: str, upstream_body: str | None, phantom: str, found: Iterable[str],
            cfg: ToolDiscovery | None, mode: str = "", called: Iterable[str] = ()) -> list[Row]:
    """Every tool the client sent, in its order, with what happened to it; then the tools only the
    upstream got (the search tool, the dispatcher). ``upstream_body`` None: the request went as
    the client sent it. ``found``, ``called``: this flow's search hits and the tools the model called."""
    client = adapter.parse(client_body)
    upstream = adapter.parse(upstream_body) if upstream_body is not None else client
    up = {t.name: (i, t) for i, t in enumerate(upstream.tools)}
    at = next((i for i, t in enumerate(upstream.tools) if _search(t, phantom)), None)
    hits, calls = set(found), set(called)
    rows = []
    for t in client.tools:
        sent = up.get(t.name)
        if t.pinned == "client_deferred":
            status = CLIENT_DEFERRED
        elif sent is None:
            status = DEFERRED if phantom else DROPPED
        elif sent[1].pinned == "client_deferred":  # marked deferred on its way: ours, native
            status = NATIVE_DEFERRED
        elif _pinned(t, client, cfg):
            status = PINNED
        elif at is not None and sent[0] > at and mode != NATIVE:
            status = EARLIER  # classic: tools found on earlier turns follow the search tool
        else:
            status = LOADED
        rows.append(Row(t.name, status, estimate_tokens(t.raw), estimate_tokens(sent[1].raw) if sent else None,
                        t.name in hits, t.name in calls))
    names = {t.name for t in client.tools}
    dispatcher = cfg.call_tool_name if cfg is not None else None
    rows += [Row(t.name, _added(t, phantom, dispatcher), None, estimate_tokens(t.raw))
             for t in upstream.tools if t.name not in names]
    return rows


def forwarded(view: RequestView, phantom: str, found: Collection[str] = (), dispatcher: str | None = None
              ) -> list[Row]:
    """The tools of one body that went upstream, read from its ``tools[]`` alone (``seen``
    reads its history too). Marked deferred: ours, natively (a client that defers its tools
    itself is passed through unprocessed, so it has no hidden rounds)."""
    at = next((i for i, t in enumerate(view.tools) if _search(t, phantom)), None)
    rows = []
    for i, t in enumerate(view.tools):
        if _search(t, phantom) or t.name == dispatcher:
            status = _added(t, phantom, dispatcher)
        elif t.pinned == "client_deferred":
            status = NATIVE_DEFERRED
        elif t.pinned is not None:
            status = PINNED
        elif at is not None and i > at:
            status = LOADED if t.name in found else EARLIER  # appended by this flow's search, or before
        else:
            status = LOADED
        rows.append(Row(t.name, status, None, estimate_tokens(t.raw), t.name in found))
    return rows


@dataclass(frozen=True)
class Seen:
    """What the model saw of one round's body, and what the proxy put in it."""

    prompt: list[Row]  # in the model's prompt: the tools it could call
    deferred: list[Row]  # on the wire only: ``defer_loading`` definitions no result loaded
    own: list[history.Exchange] = field(default_factory=list)  # the proxy's own calls in the history
    searches: frozenset[str] = frozenset()  # the names its search calls go by
    dispatcher: str | None = None

    def names(self, proxys: bool = False) -> list[str]:
        """The tools in the prompt: those ``tools[]`` carries plainly or a result loaded, the
        proxy's own with ``proxys`` (what the provider counts as loaded); never a tool called
        through the dispatcher, which only the search result defines."""
        return [r.name for r in self.prompt if r.status != THROUGH and (proxys or r.status not in PROXYS)]


def seen(adapter: Adapter, body: str, phantom: str, dispatcher: str | None = None) -> Seen:
    """What the model saw of ``body`` (one round as it went upstream), the way the provider
    reads it; and the proxy's own calls in its history (searches, dispatcher calls) with their
    results."""
    view = adapter.parse(body)
    calls = history.exchanges(body)
    searches = frozenset(n for n in (phantom, f"<{phantom}>", history.TOOL_SEARCH if phantom == history.TOOL_SEARCH
                                     else "") if n)
    own = [e for e in calls if e.name in searches or (dispatcher and e.name == dispatcher)]
    loads: dict[str, str] = {}  # tool -> how a result in the history loads it
    for e in calls:
        for name in e.loads:
            loads.setdefault(name, e.how)
    listed: dict[str, None] = {}  # tools the proxy's search results name, in order
    given: dict[str, Any] = {}  # definitions they carry (call-through)
    for e in own:
        if e.name in searches:
            listed.update(dict.fromkeys(history.listed(e.result)[0]))
            given.update(history.definitions(e.result))
    at = next((i for i, t in enumerate(view.tools) if _search(t, phantom)), None)
    prompt, deferred = [], []
    for i, t in enumerate(view.tools):
        tokens = estimate_tokens(t.raw)
        if _search(t, phantom) or t.name == dispatcher:
            prompt.append(Row(t.name, _added(t, phantom, dispatcher), None, tokens, note=f"{GEAR} the proxy's"))
        elif t.pinned == "client_deferred":
            if t.name in loads:
                prompt.append(Row(t.name, BY_RESULT, None, tokens, True, note=loads[t.name] or "search result"))
            else:
                deferred.append(Row(t.name, NATIVE_DEFERRED, None, tokens, t.name in listed))
        elif t.pinned is not None:
            prompt.append(Row(t.name, PINNED, None, tokens))
        elif at is not None and i > at:  # classic: found tools follow the search tool
            if t.name in listed:
                prompt.append(Row(t.name, BY_RESULT, None, tokens, True, note="appended"))
            else:
                prompt.append(Row(t.name, EARLIER, None, tokens))
        else:
            prompt.append(Row(t.name, LOADED, None, tokens, t.name in listed))
    if dispatcher and any(t.name == dispatcher for t in view.tools):
        present = {t.name for t in view.tools}
        for name in listed:
            if name not in present:
                definition = given.get(name)
                size = estimate_tokens(json.dumps(definition, ensure_ascii=False)) if definition is not None else None
                prompt.append(Row(name, THROUGH, None, size, True))
    return Seen(prompt, deferred, own, searches, dispatcher)


def render_seen(seen_: Seen, answer_calls: Collection[str] = ()) -> list[str]:
    """A round's view: the tools in the prompt, then those on the wire only, then the proxy's
    own calls in the history, each with its result in words."""
    called = set(answer_calls)
    prompt = [_called(r, called) for r in seen_.prompt]
    lines = [f"what the model saw: {len(prompt)} tools in its prompt"
             + (f"; {len(seen_.deferred)} more on the wire, deferred" if seen_.deferred else "")]
    present = {r.status for r in prompt}
    lines += [f"  {status}: {meaning}" for status, meaning in _LEGEND if status in present]
    lines += ["", f"in the prompt ({len(prompt)})", *render(prompt, False)]
    if seen_.deferred:
        lines += ["", f"on the wire only, deferred ({len(seen_.deferred)}): defer_loading, out of the prompt",
                  *render([_called(r, called) for r in seen_.deferred], False)]
    lines += ["", *own_calls(seen_)]
    return lines


_LEGEND = ((LOADED, "in tools[] from the start"),
           (EARLIER, "in tools[], found by a search of an earlier turn"),
           (BY_RESULT, "a search result in this body loaded it"),
           (THROUGH, "found; called through the dispatcher, its definition in the result"))


def own_calls(seen_: Seen) -> list[str]:
    """The proxy's own calls in a body's history (never shown to the client) and their results."""
    if not seen_.own:
        return ["the proxy's own calls in this body: none (no search yet)"]
    lines = [f"the proxy's own calls in this body ({GEAR}, hidden from the client), and the results it added"]
    for e in seen_.own:
        what = "search" if e.name in seen_.searches else "dispatcher"
        args = e.arguments if isinstance(e.arguments, str) else json.dumps(e.arguments, ensure_ascii=False)
        lines.append(f"{GEAR} {what}: {e.name or '(stored call)'} {history.short(args or '', 200)}")
        lines += ["    " + line for line in _result(e, what == "search")]
    return lines


def _result(e: history.Exchange, search: bool) -> list[str]:
    if e.result is None and not e.loads:
        return ["→ no result in this body"]
    out = []
    if e.loads:
        out.append(f"→ loads by {e.how or 'reference'}: {', '.join(e.loads)}")
    names, data = history.listed(e.result) if search else ([], {})
    if names:
        out.append(f"→ found: {', '.join(names)}")
    for key in ("more", "unknown", "suggestions"):
        if isinstance(data.get(key), list) and data[key]:
            out.append(f"→ {key}: {', '.join(map(str, data[key]))}")
    if isinstance(data.get("error"), str):
        out.append(f"→ error: {history.short(data['error'])}")
    if isinstance(data.get("message"), str):
        out.append(f"→ \"{history.short(data['message'])}\"")
    if not data and e.result:
        out.append(f"→ {'error: ' if e.error else ''}{history.short(e.result)}")
    return out or ["→ (empty)"]


def _called(r: Row, called: set[str]) -> Row:
    return r if r.name not in called else Row(r.name, r.status, r.client_tokens, r.wire_tokens, r.found, True, r.note)


def render(rows: Sequence[Row], compared: bool) -> list[str]:
    """A fixed-width table narrow enough for half a 1,400 px window: status, estimated tokens of
    each definition (4 characters a token), the name, and what this turn did with it."""
    if not rows:
        return ["no tools in this body"]
    if compared:
        head = f"{'status':<{WIDTH}} {'sent':>6} {'wire':>6} {'prompt':>6}  name"
        lines = [head, "-" * 60]
        for r in rows:
            lines.append(f"{r.status:<{WIDTH}} {_size(r.client_tokens):>6} {_size(r.wire_tokens):>6} "
                         f"{_size(r.prompt_tokens):>6}  {r.name}{_turn(r)}")
        sent = sum(r.client_tokens is not None for r in rows)
        wire = sum(r.wire_tokens is not None for r in rows)
        prompt = sum(r.prompt_tokens is not None for r in rows)
        lines.append("-" * 60)
        lines.append(f"{'total':<{WIDTH}} {_total(rows, 'client_tokens'):>6} {_total(rows, 'wire_tokens'):>6} "
                     f"{_total(rows, 'prompt_tokens'):>6}  tools: {sent} sent, {wire} on the wire, {prompt} in the prompt")
        return lines
    head = f"{'status':<{WIDTH}} {'tokens':>6}  name"
    lines = [head, "-" * 60]
    lines += [f"{r.status:<{WIDTH}} {_size(r.wire_tokens):>6}  {r.name}{_turn(r)}" for r in rows]
    return lines


def _turn(r: Row) -> str:
    return f"  ← {r.turn}" if r.turn else ""


def counts(rows: Sequence[Row]) -> dict[str, int]:
    """Rows per status, and per this-turn flag (``FOUND``, ``CALLED``)."""
    out: dict[str, int] = {}
    for r in rows:
        out[r.status] = out.get(r.status, 0) + 1
        for flag, on in ((FOUND, r.found), (CALLED, r.called)):
            if on:
                out[flag] = out.get(flag, 0) + 1
    return out


def _search(t: Tool, phantom: str) -> bool:
    """The search tool: ours by name, or the API's own (Responses' unnamed ``tool_search``)."""
    return bool(phantom) and t.name in (phantom, f"<{phantom}>")


def _added(t: Tool, phantom: str, dispatcher: str | None) -> str:
    return SEARCH_TOOL if _search(t, phantom) else DISPATCHER if t.name == dispatcher else SENT


def _pinned(t: Tool, view: RequestView, cfg: ToolDiscovery | None) -> bool:
    return must_keep(t, view, cfg) if cfg is not None else t.pinned is not None or t.name in view.forced


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _total(rows: Sequence[Row], attr: str) -> str:
    return _size(sum(getattr(r, attr) or 0 for r in rows))
