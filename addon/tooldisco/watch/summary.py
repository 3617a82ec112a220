"""What the proxy did on one flow, from its telemetry record: the one summary that mitmdump's
flow line, mitmweb's comment and the contentview's header all print.

Why one summary from the record: the engine counted everything a person asks about (tools,
tokens, searches, latency, fallback) when it handled the flow, and wrote it to the telemetry
file; three renderings that each counted on their own disagreed with it and with each other.
Here every figure is read once, and each rendering only chooses which to print.

Tokens are estimates of the tool definitions, counted three ways: what the client sent, what
went upstream on the wire, and what the model reads in its prompt. The last two differ under
native deferral, whose deferred definitions go upstream marked ``defer_loading`` and reach the
prompt only when a search loads them. "Saved" is sent minus prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

MAX_QUERY = 80  # characters of a search query shown in a one-line comment
MAX_MATCHES = 4  # names shown per list in a one-line comment or log line
CLASSIC, NATIVE, CALL_THROUGH = "classic", "native", "call-through"
# Where a deferred tool is, in the words the per-tool table (``tools``) uses too.
NATIVELY, BY_SEARCH, BY_CLIENT = "deferred natively", "deferred (search)", "deferred (client)"
DEFERRED_HOW = {CLASSIC: BY_SEARCH, NATIVE: NATIVELY, CALL_THROUGH: BY_SEARCH, "": "dropped"}  # "": relevance


@dataclass(frozen=True)
class Search:
    query: str
    hits: tuple[str, ...]
    backend: str
    latency_ms: float
    fallback: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class FlowSummary:
    """One processed flow's facts, read from its telemetry record (``Record`` as a dict)."""

    api: str
    strategy: str
    mode: str  # "native", "classic", "call-through"; "" when nothing was deferred
    session: str
    sent: int  # tools the client sent
    loaded: int  # of which in the model's prompt
    deferred: int  # of which the proxy deferred
    client_deferred: int  # of which the client had deferred itself
    found: tuple[str, ...]  # distinct hits of this flow's searches, in the order found
    called: tuple[str, ...]  # tools the model called in the answer the client got
    searches: tuple[Search, ...]
    tokens_sent: int
    tokens_wire: int
    tokens_prompt: int
    added_ms: float  # the proxy's own time in the loop (searches, re-forwards), upstream excluded
    upstream_ms: float
    processing_ms: float  # planning the first request
    loops: int  # re-forwards with search results
    passed: str | None  # why the request went upstream unchanged (None: it was rewritten)
    fallback: str | None
    outcome: str | None
    passage: str | None = None  # a live stream: "untouched", "changed" or "unhandled"

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> FlowSummary:
        """The summary of a record; a record of an older version lacks some fields and reads as
        what they then meant (wire tokens were prompt tokens)."""
        searches = tuple(Search(str(s.get("query") or ""), tuple(str(m) for m in s.get("matched") or ()),
                                str(s.get("backend") or ""), float(s.get("latency_ms") or 0.0),
                                s.get("fallback"), s.get("error"))
                         for s in record.get("searches") or () if isinstance(s, Mapping))
        found = tuple(dict.fromkeys(h for s in searches for h in s.hits))
        called = tuple(dict.fromkeys([*map(str, record.get("called") or ()), *map(str, record.get("dispatched") or ())]))
        after = int(record.get("tool_tokens_after") or 0)
        fallback = record.get("fallback_reason")
        mode = str(record.get("deferral") or "")
        unchanged = not mode and not record.get("deferred_tools")  # no tool hidden: the tools went as sent
        return cls(
            api=str(record.get("provider") or ""), strategy=str(record.get("strategy") or ""), mode=mode,
            session=str(record.get("session") or ""), sent=int(record.get("total_tools") or 0),
            loaded=int(record.get("kept_tools") or 0), deferred=int(record.get("deferred_tools") or 0),
            client_deferred=int(record.get("client_deferred") or 0), found=found, called=called, searches=searches,
            tokens_sent=int(record.get("tool_tokens_before") or 0),
            tokens_wire=int(record.get("tool_tokens_wire") or after), tokens_prompt=after,
            added_ms=float(record.get("loop_added_ms") or 0.0), upstream_ms=float(record.get("upstream_ms") or 0.0),
            processing_ms=float(record.get("processing_ms") or 0.0), loops=int(record.get("loops") or 0),
            passed=(str(fallback or "nothing to defer") if unchanged else None),
            fallback=None if unchanged or fallback is None else str(fallback), outcome=record.get("outcome"),
            passage=record.get("passage"))

    @property
    def saved(self) -> int:
        """Estimated prompt tokens the proxy saved on the first request (sent − in the prompt)."""
        return self.tokens_sent - self.tokens_prompt

    @property
    def how(self) -> str:
        """The deferral in words: the mode, or why nothing was deferred."""
        if self.passed is not None:
            return f"passed through ({self.passed})"
        return self.mode or self.strategy

    def tools(self) -> str:
        """Sent → loaded, and where the others went."""
        parts = [f"{self.sent} tools → {self.loaded} loaded"]
        if self.deferred:
            parts.append(f"{self.deferred} {DEFERRED_HOW.get(self.mode, 'deferred')}")
        if self.client_deferred:
            parts.append(f"{self.client_deferred} {BY_CLIENT}")
        return ", ".join(parts)

    def tokens(self) -> str:
        """The three token counts; the wire apart only where it differs from the prompt."""
        wire = f", ~{self.tokens_wire:,} on the wire" if self.tokens_wire != self.tokens_prompt else ""
        return f"tool tokens ~{self.tokens_sent:,} sent → ~{self.tokens_prompt:,} in the prompt{wire}"

    def lead(self) -> str:
        """The figures that matter most, short enough for mitmweb's Comment column (150 px): tools
        sent → loaded, prompt tokens saved."""
        return f"{self.sent}→{self.loaded} {'−' if self.saved >= 0 else '+'}{_short(abs(self.saved))} tok"

    def comment(self, rounds: int) -> str:
        """mitmweb's Comment column (some fifteen characters show; the rest in the Comment tab):
        the lead first, then mode, tools, searches, calls, tokens, rounds, added time."""
        parts = [self.lead(), self.how, self.tools()]
        for s in self.searches:
            parts.append(f"search {_quote(s.query)} → {_names(s.hits) or 'nothing'}")
        if self.searches:
            parts.append(f"{len(self.found)} found")
        if self.called:
            parts.append(f"called {_names(self.called)}")
        parts.append(self.tokens())
        if rounds:
            parts.append(f"{rounds} upstream rounds")
        if self.loops or self.searches:
            parts.append(f"+{self.added_ms:.1f} ms added")
        parts += self._trouble()
        return " · ".join(parts)

    def line(self, where: str) -> str:
        """mitmdump's line for the flow: API, tools, mode, searches and hits, tokens saved,
        added latency. No query text (a search query may quote the user), no credentials."""
        parts = [f"tool discovery: {where} [{self.api}]", self.tools(), self.how]
        if self.searches:
            hits = sum(len(s.hits) for s in self.searches)
            parts.append(f"{len(self.searches)} search{'es' if len(self.searches) > 1 else ''}, {hits} hits"
                         + (f": {_names(self.found)}" if self.found else ""))
        if self.called:
            parts.append(f"called {_names(self.called)}")
        parts.append(f"~{self.saved:,} tok saved ({self.tokens()})")
        parts.append(f"+{self.added_ms:.1f} ms")
        parts += self._trouble()
        return " · ".join(parts)

    def details(self, round_ids: Sequence[str]) -> list[str]:
        """The contentview's header: the same facts, one per line, every search in full."""
        lines = [
            f"tool discovery · {self.api} · strategy {self.strategy} · {self.how} · session {self.session or '-'}",
            f"tools: {self.tools()}; this turn {len(self.found)} found, {len(self.called)} called",
            f"{self.tokens()} (~{self.saved:,} saved)",
            (f"processing {self.processing_ms:.1f} ms · {self.loops} re-forward(s), +{self.added_ms:.1f} ms added, "
             f"upstream {self.upstream_ms:.1f} ms"),
        ]
        lines += self._trouble()
        if self.outcome:
            lines.append(f"outcome: {self.outcome}")
        for i, s in enumerate(self.searches, 1):  # one name a line: the view is half the window wide
            note = f", {s.fallback}" if s.fallback else ""
            error = f" error: {s.error}" if s.error else ""
            lines.append(f"search {i}: {s.query!r} ({s.backend}{note}, {s.latency_ms:.1f} ms) → "
                         f"{len(s.hits)} hits{error}")
            lines += [f"  {name}" for name in s.hits]
        lines += [f"called: {name}" for name in self.called]
        if round_ids:  # they follow this flow in the list
            lines.append(f"hidden rounds (the proxy's own flows, ⚙): {', '.join(r[:8] for r in round_ids)}")
        return lines

    def _trouble(self) -> list[str]:
        out = [f"fallback: {self.fallback}"] if self.fallback else []
        if self.passage is not None:  # what became of a live stream's bytes
            out.append(_PASSAGE.get(self.passage, f"stream {self.passage}"))
        if self.outcome and self.outcome not in ("done", "no_phantom", "mixed"):
            out.append(f"outcome: {self.outcome}")
        return out


_PASSAGE = {
    "untouched": "stream passed as sent",
    "changed": "stream stitched",
    "unhandled": "stream not handled: ended with an error",
}


def _short(n: int) -> str:
    """A count in at most four characters: 812, 3.7k, 15k, 1.2M."""
    sign, n = ("-" if n < 0 else ""), abs(n)
    if n < 1000:
        return f"{sign}{n}"
    for unit, size in (("M", 1_000_000), ("k", 1000)):
        if n >= size:
            value = n / size
            return f"{sign}{value:.1f}{unit}" if value < 10 else f"{sign}{value:.0f}{unit}"
    return f"{sign}{n}"


def _names(names: Sequence[str]) -> str:
    more = f" +{len(names) - MAX_MATCHES}" if len(names) > MAX_MATCHES else ""
    return ", ".join(names[:MAX_MATCHES]) + more


def _quote(query: Any) -> str:
    text = str(query) if query is not None else ""
    return repr(text if len(text) <= MAX_QUERY else text[: MAX_QUERY - 1] + "…")
