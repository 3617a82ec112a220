"""Which tools the model saw and which the proxy hid, per tool, from the request bodies.

Why from the bodies: the bodies are the truth of what went where. The client's body says what
it offered; the forwarded body says what went upstream, in the order it went (kept tools, then
the search tool, then tools found earlier in the session), and which definitions it marked
deferred (native deferral). The adapters read both, so every API the project speaks gets the
same table. What this flow's searches found and what the model called come from the flow's
record (``summary.FlowSummary``): the table and the summary count the same facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Iterable, Sequence

from tooldisco.config import ToolDiscovery
from tooldisco.apis.base import Adapter
from tooldisco.core.types import RequestView, Tool
from tooldisco.policy.relevance import must_keep
from tooldisco.core.tokens import estimate_tokens
from tooldisco.watch.summary import BY_CLIENT, BY_SEARCH, NATIVELY, NATIVE

# A tool's state on this flow. In the model's prompt:
LOADED, PINNED, EARLIER = "loaded", "pinned", "found before"
# Not in the prompt (on the wire only under native deferral):
NATIVE_DEFERRED, DEFERRED, CLIENT_DEFERRED, DROPPED = NATIVELY, BY_SEARCH, BY_CLIENT, "dropped"
# Added by the proxy:
SEARCH_TOOL, DISPATCHER, SENT = "search tool", "dispatcher", "added"
IN_PROMPT = frozenset({LOADED, PINNED, EARLIER, SEARCH_TOOL, DISPATCHER, SENT})
HIDDEN = frozenset({NATIVE_DEFERRED, DEFERRED, DROPPED})  # what the proxy deferred
FOUND, CALLED = "found", "called"  # this flow's searches found it; the model called it
WIDTH = 17  # the status column: the longest status


@dataclass(frozen=True)
class Row:
    name: str
    status: str
    client_tokens: int | None  # the definition's estimated tokens in the client's body (None: not there)
    wire_tokens: int | None  # in the forwarded body (None: not forwarded)
    found: bool = False
    called: bool = False

    @property
    def prompt_tokens(self) -> int | None:
        """In the model's prompt: what went upstream loaded (a natively deferred one did not)."""
        return self.wire_tokens if self.status in IN_PROMPT else None

    @property
    def turn(self) -> str:
        return ", ".join(w for w, on in ((FOUND, self.found), (CALLED, self.called)) if on)

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
    """The tools of one body that went upstream (a hidden round's request): what the model saw.
    Marked deferred: ours, natively (a client that defers its tools itself is passed through
    unprocessed, so it has no hidden rounds)."""
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
