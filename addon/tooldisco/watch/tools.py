"""Which tools the model saw and which the proxy hid, per tool, from the request bodies.

Why from the bodies: the bodies are the truth of what went where. The client's body says what
it offered; the forwarded body says what the model saw, in the order it saw it (kept tools,
then the search tool, then tools found earlier in the session). The adapters read both, so
every API the project speaks gets the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from tooldisco.config import ToolDiscovery
from tooldisco.apis.base import Adapter
from tooldisco.core.types import RequestView
from tooldisco.policy.relevance import must_keep
from tooldisco.core.tokens import estimate_tokens

KEPT, PINNED, FOUND, DEFERRED, DROPPED = "kept", "pinned", "found", "deferred", "dropped"
CLIENT_DEFERRED, SEARCH_TOOL, SENT = "client-deferred", "search tool", "sent"


@dataclass(frozen=True)
class Row:
    name: str
    status: str
    client_tokens: int | None  # the definition's estimated tokens in the client's body (None: not there)
    upstream_tokens: int | None  # in the forwarded body (None: not forwarded)

    def as_list(self) -> list[Any]:
        """What ``flow.metadata`` keeps: plain values, so saved flows serialize."""
        return [self.name, self.status, self.client_tokens, self.upstream_tokens]

    @classmethod
    def of(cls, item: Sequence[Any]) -> Row:
        name, status, client, upstream = item
        return cls(str(name), str(status), client, upstream)


def compare(adapter: Adapter, client_body: str, upstream_body: str | None, phantom: str, found: Iterable[str],
            cfg: ToolDiscovery | None) -> list[Row]:
    """Every tool the client sent, in its order, with what happened to it; then the tools only the
    upstream got (the search tool). ``upstream_body`` None: the request went as the client sent it.
    ``found``: tools this flow's searches loaded in a later round."""
    client = adapter.parse(client_body)
    upstream = adapter.parse(upstream_body) if upstream_body is not None else client
    up = {t.name: (i, t) for i, t in enumerate(upstream.tools)}
    at = up[phantom][0] if phantom in up else None
    found_now = set(found)
    rows = []
    for t in client.tools:
        sent = up.get(t.name)
        if t.pinned == "client_deferred":
            status = CLIENT_DEFERRED
        elif sent is not None and _pinned(t, client, cfg):
            status = PINNED
        elif sent is not None:
            status = FOUND if at is not None and sent[0] > at else KEPT
        elif t.name in found_now:
            status = FOUND
        else:
            status = DEFERRED if phantom else DROPPED
        rows.append(Row(t.name, status, estimate_tokens(t.raw), estimate_tokens(sent[1].raw) if sent else None))
    names = {t.name for t in client.tools}
    rows += [Row(t.name, SEARCH_TOOL if t.name == phantom else SENT, None, estimate_tokens(t.raw))
             for t in upstream.tools if t.name not in names]
    return rows


def forwarded(view: RequestView, phantom: str) -> list[Row]:
    """The tools of one body that went upstream (a hidden round's request): what the model saw."""
    names = view.names()
    at = names.index(phantom) if phantom in names else None
    rows = []
    for i, t in enumerate(view.tools):
        if t.name == phantom:
            status = SEARCH_TOOL
        elif t.pinned == "client_deferred":
            status = CLIENT_DEFERRED
        elif t.pinned is not None:
            status = PINNED
        else:
            status = FOUND if at is not None and i > at else KEPT
        rows.append(Row(t.name, status, None, estimate_tokens(t.raw)))
    return rows


def render(rows: Sequence[Row], compared: bool) -> list[str]:
    """A fixed-width table; sizes are estimated tokens of each definition (4 characters a token)."""
    if not rows:
        return ["no tools in this body"]
    width = max(len(r.name) for r in rows)
    if compared:
        head = f"{'status':<16} {'client sent':>16} {'went upstream':>16}  name"
        lines = [head, "-" * (len(head) + width - 4)]
        for r in rows:
            lines.append(f"{r.status:<16} {_size(r.client_tokens):>16} {_size(r.upstream_tokens):>16}  {r.name}")
        sent = [r for r in rows if r.client_tokens is not None]
        up = [r for r in rows if r.upstream_tokens is not None]
        lines.append("-" * (len(head) + width - 4))
        lines.append(f"{'total':<16} {_total(sent, 'client_tokens'):>16} {_total(up, 'upstream_tokens'):>16}  "
                     f"{len(sent)} sent by the client, {len(up)} went upstream")
        return lines
    head = f"{'status':<16} {'size':>16}  name"
    lines = [head, "-" * (len(head) + width - 4)]
    lines += [f"{r.status:<16} {_size(r.upstream_tokens):>16}  {r.name}" for r in rows]
    return lines


def counts(rows: Sequence[Row]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def _pinned(t, view: RequestView, cfg: ToolDiscovery | None) -> bool:
    return must_keep(t, view, cfg) if cfg is not None else t.pinned is not None or t.name in view.forced


def _size(n: int | None) -> str:
    return "-" if n is None else f"~{n:,} tok"


def _total(rows: Sequence[Row], attr: str) -> str:
    return _size(sum(getattr(r, attr) or 0 for r in rows))
