"""What the proxy did on one flow, from its telemetry record: the one summary that mitmdump's
flow line, mitmweb's comment and the contentview's header all print, in the words the report
and docs/watching.md use too (``GLOSSARY``, ``outcome_words``, ``reason_words``).

Why one summary from the record: the engine counted everything a person asks about (tools,
tokens, searches, latency, fallback) when it handled the flow, and wrote it to the telemetry
file; three renderings that each counted on their own disagreed with it and with each other.
Here every figure is read once, and each rendering only chooses which to print.

Tokens are estimates of the tool definitions, counted three ways: what the client sent, what
went upstream on the wire, and what the model reads in its prompt. The last two differ under
native deferral, whose deferred definitions go upstream marked ``defer_loading`` and reach the
prompt only when a search loads them. "Saved" is sent minus prompt.

Time is measured where it passes: planning (the proxy deciding what goes upstream), upstream
(from sending each upstream request to the last byte of its answer, summed over the turn's
rounds), answering (the proxy's own work on the answers: searches, search rounds, stitching),
and the total from planning's start to the turn's end. "Proxy" is planning plus answering.

Outcomes are the record's own values (``outcome``, ``fallback_reason``: existing consumers read
them as they are); ``outcome_words`` and ``reason_words`` say them in words a user reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

MAX_QUERY = 80  # characters of a search query shown in a one-line comment
MAX_MATCHES = 4  # names shown per list in a one-line comment or log line
CLASSIC, NATIVE, CALL_THROUGH = "classic", "native", "call-through"
RELEVANCE, PASSED = "relevance", "passed through"  # a turn's mode when it deferred nothing the three ways
MODES = (NATIVE, CLASSIC, CALL_THROUGH, RELEVANCE, PASSED)
# Where a deferred tool is, in the words the per-tool table (``tools``) uses too.
NATIVELY, BY_SEARCH, BY_CLIENT = "deferred natively", "deferred (search)", "deferred (client)"
DEFERRED_HOW = {CLASSIC: BY_SEARCH, NATIVE: NATIVELY, CALL_THROUGH: BY_SEARCH, "": "dropped"}  # "": relevance


# --- the words ------------------------------------------------------------------------------
# One vocabulary for mitmdump's line, mitmweb's comment and view, the report and the docs
# (docs/watching.md, "Words": tests check that it lists these very words).

# ``Record.outcome``: how the turn ended. ``{searches}``: "1 search", "2 searches".
OUTCOME_WORDS: dict[str, str] = {
    "no_phantom": "answered without a search",
    "done": "answered after {searches}",
    "mixed": ("answered with tool calls beside one the proxy answered, a search or a withheld tool (its result goes "
              "upstream with the next request)"),
    "max_loops": "answered at the search limit, after {searches}",
    "max_loops_empty": "the model only searched, up to the limit: an error the client retries (502)",
    "client_gone": "the client went away before the answer",
    "upstream_failed": "the upstream broke off: an error the client retries (502)",
    "upstream_stream_error": "the upstream ended its stream with an error, passed on",
    "upstream_unfinished": "the upstream's stream ended unfinished, passed on as it ended",
    "upstream_truncated": "the upstream's stream ended early: ended with an error",
    "undecodable": "an answer the proxy could not read, passed on as it came",
    "too_large": "an answer too large to search in: ended with an error",
    "reforward_unreadable": "a search round's answer could not be read: an error the client retries (502)",
    "shadow": "api rollout (shadow): the selector's choice only logged",
    "dark": "api rollout (dark): the selector asked, its choice only logged",
    "pending": "not finished",
    "error": "the proxy's own error: failed open",  # "error: X", counted by its head (the report)
    "flow_error": "the flow failed",  # "flow_error: X", likewise
}
# Outcomes that carry a value: an HTTP status (NNN) or an error's name (X).
OUTCOME_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"upstream_(\d{3})", "the upstream answered {0}, passed on"),
    (r"fallback_(\d{3})", "the upstream answered {0} to a search round"),
    (r"reforward_(\d{3})", "the upstream answered {0} to a search round: the stream ended with its error"),
    (r"error: (.*)", "the proxy's own error ({0}): failed open"),
    (r"flow_error: (.*)", "the flow failed ({0})"),
)
# ``Record.fallback_reason``: why the request went upstream unchanged, or what the proxy fell
# back to. Those with a value (a status, an error, a detail) are in ``REASON_PATTERNS``.
REASON_WORDS: dict[str, str] = {
    "passthrough": "strategy passthrough",
    "client_defers": "the client defers its tools itself",  # heads of the reasons with a detail (the report)
    "unsupported": "a request the proxy cannot read",
    "error": "the proxy's own error",
    "search_tool_name_taken": "a client tool already has the search tool's name",
    "overloaded": "planning was overloaded",
    "rollout_excluded": "outside the api rollout",
    "no_tools": "no tools",
    "below_min_tools": "too few tools to defer",
    "below_min_tokens": "tool definitions too small to defer",
    "below_threshold": "tool definitions below the deferral threshold",
    "nothing_to_defer": "nothing to defer",
    "reforward_unreadable": "a search round's answer could not be read",
    "shadow": "api rollout (shadow)",
    "dark": "api rollout (dark)",
}
REASON_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"client_defers: (.*)", "the client defers its tools itself ({0})"),
    (r"unsupported: (.*)", "a request the proxy cannot read ({0})"),
    (r"error: (.*)", "the proxy's own error ({0})"),
    (r"native_refused_(\d{3})_classic_sent", "the upstream refused native deferral ({0}): deferred the classic way"),
    (r"call-through_refused_(\d{3})_classic_sent", "the upstream refused call-through ({0}): deferred the classic way"),
    (r"rewrite_(\d{3})_original_sent", "the upstream refused the rewritten request ({0}): the client's own request sent"),
    (r"reforward_(\d{3})_original_sent", "the upstream refused a search round ({0}): the client's own request sent"),
    (r"reforward_(\d{3})", "the upstream answered {0} to a search round, passed on"),
    (r"selector_(.+)_local_search", "the selector failed ({0}): the proxy's own search answered"),
    (r"selector_(.+)", "the selector failed ({0}): every deferred tool loaded"),
)
_OUTCOME_RE = tuple((re.compile(p, re.DOTALL), w) for p, w in OUTCOME_PATTERNS)
_REASON_RE = tuple((re.compile(p, re.DOTALL), w) for p, w in REASON_PATTERNS)

# Terms, as the report's glossary and docs/watching.md ("Words") give them.
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("turn", ("one request of the client and the answer it got: one telemetry record, one flow in mitmweb, one "
              "line in mitmdump's output, one row of the report's turns")),
    ("id", ("a turn's telemetry id, 12 hex characters: the same in the record (`id`), mitmdump's line, mitmweb's "
            "comment (type `~comment ID` in mitmweb's search box) and the report")),
    ("tools sent", "the tool definitions the client sent (`total_tools`)"),
    ("loaded", ("in the model's prompt from the start (`kept_tools`): pinned by a rule (`always_keep`, the API's "
                "own tools), kept upfront (the `defer.upfront` tools ranked most relevant to the session's first "
                "request, chosen once per session; under native deferral only with `defer.native_upfront`), or found "
                "before (by a search of an earlier turn)")),
    ("deferred", ("kept out of the prompt until a search loads it (`deferred_tools`): natively (on the wire, "
                  "marked `defer_loading`), behind the search tool (not sent), by the client itself, or dropped "
                  "(relevance)")),
    ("mode", ("how the turn's tools were deferred (`deferral`): native (the API's own deferred loading), classic "
              "(the proxy's search tool; found tools added to the request), call-through (found tools called "
              "through the proxy's dispatcher), relevance (the least relevant tools dropped), or passed through "
              "(the request went upstream as the client sent it)")),
    ("tokens sent", "estimated tokens of the tool definitions the client sent (`tool_tokens_before`)"),
    ("tokens on the wire", ("of the tool definitions that went upstream in the first request (`tool_tokens_wire`): "
                            "more than in the prompt under native deferral, whose deferred definitions go upstream "
                            "but stay out of the prompt")),
    ("tokens in the prompt", ("of the tool definitions the model reads in its prompt on the first request "
                              "(`tool_tokens_after`)")),
    ("saved", "tokens sent minus tokens in the prompt: the prompt the proxy spared the model on the first request"),
    ("search", "one call of the proxy's search tool by the model, answered by the proxy"),
    ("hits", "the tools a search returned; a tool two searches returned counts twice"),
    ("found", "the distinct tools this turn's searches returned"),
    ("called", "the tools the model called in the answer the client got"),
    ("upstream round", "one request upstream and its answer; a turn whose model searched has more than one"),
    ("search round", ("an upstream round the proxy added: the conversation sent again with a search's results "
                      "(`loops`)")),
    ("planning", ("the proxy deciding what goes upstream: reading the tools, choosing what to defer, writing the "
                  "request (`processing_ms`)")),
    ("upstream", ("from sending a request upstream to the last byte of its answer, summed over the turn's upstream "
                  "rounds (`upstream_ms`)")),
    ("answering", ("the proxy's own work on the answers: reading them, answering searches, writing search rounds, "
                   "stitching a stream (`loop_added_ms`)")),
    ("proxy", "the time the proxy added: planning plus answering"),
    ("total", ("from the start of planning to the turn's last byte (`total_ms`); a live stream's includes the "
               "time the client took to read it")),
    ("result", "how the turn ended, in words (from `outcome` and `fallback_reason`: the table below)"),
    ("fallback", "what the proxy did instead when its way failed or did not apply (`fallback_reason`)"),
)


def outcome_table() -> list[tuple[str, str]]:
    """Every outcome and its words, as docs/watching.md and the report list them: those with a
    value written with a placeholder (``upstream_NNN``, ``error: X``; "N searches")."""
    return ([(key, words.format(searches="N searches")) for key, words in OUTCOME_WORDS.items()]
            + [_placeholders(pattern, words) for pattern, words in OUTCOME_PATTERNS])


def reason_table() -> list[tuple[str, str]]:
    """Every fallback reason and its words, likewise."""
    return list(REASON_WORDS.items()) + [_placeholders(pattern, words) for pattern, words in REASON_PATTERNS]


def _placeholders(pattern: str, words: str) -> tuple[str, str]:
    names = ["NNN" if group == r"(\d{3})" else "X" for group in _GROUPS.findall(pattern)]
    key = _GROUPS.sub(lambda m: "NNN" if m.group(0) == r"(\d{3})" else "X", pattern)
    return key, words.format(*names)


_GROUPS = re.compile(r"\(\\d\{3\}\)|\(\.[*+]\)")


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the word: "1 search", "2 searches", "0 hits"."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def outcome_words(outcome: Any, searches: int | None = None) -> str:
    """``Record.outcome`` in words; ``searches``: how many the turn made (None: "one or more").
    None or "" (a request that went without the loop) is "answered"."""
    if not outcome:
        return "answered"
    text = str(outcome)
    count = "one or more searches" if searches is None else plural(searches, "search", "searches")
    if text == "done" and searches == 0:  # call-through: the model called a tool it was shown
        return OUTCOME_WORDS["no_phantom"]
    if text in OUTCOME_WORDS:
        return OUTCOME_WORDS[text].format(searches=count)
    for pattern, words in _OUTCOME_RE:
        if m := pattern.fullmatch(text):
            return words.format(*m.groups())
    return text.replace("_", " ")


def reason_words(reason: Any) -> str:
    """``Record.fallback_reason`` in words."""
    text = str(reason or "")
    if text in REASON_WORDS:
        return REASON_WORDS[text]
    for pattern, words in _REASON_RE:
        if m := pattern.fullmatch(text):
            return words.format(*m.groups())
    return text.replace("_", " ")


def result_words(passed: str | None, outcome: Any, fallback: Any, status: int | None,
                 searches: int | None) -> str:
    """How a turn ended, in words: the outcome, then any fallback; a request that went upstream
    as the client sent it (``passed``: why) says why. An upstream error on a request the loop
    never read is said too. ``searches``: the turn's (None: "one or more")."""
    if passed is not None:
        words = f"{PASSED}: {reason_words(passed)}"
        if outcome and outcome not in ("shadow", "dark"):
            words += f"; {outcome_words(outcome, searches)}"
    else:
        words = outcome_words(outcome, searches)
        if fallback:
            words += f"; {reason_words(fallback)}"
    if not outcome and status is not None and status >= 400:
        words += f"; the upstream answered {status}, passed on"
    return words


def passed_of(record: Mapping[str, Any]) -> str | None:
    """Why a record's request went upstream with every tool as the client sent it (its fallback
    reason, the api rollout's mode, else nothing to defer); None when the proxy deferred tools."""
    if record.get("deferral") or record.get("deferred_tools"):
        return None
    outcome = record.get("outcome")
    return str(record.get("fallback_reason") or (outcome if outcome in ("shadow", "dark") else "") or "nothing_to_defer")


def last_status(record: Mapping[str, Any]) -> int | None:
    """The status of a record's last upstream answer, when recorded."""
    upstream = record.get("upstream")
    last = upstream[-1] if isinstance(upstream, list) and upstream else None
    status = last[1] if isinstance(last, (list, tuple)) and len(last) > 1 else None
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def mode_of(record: Mapping[str, Any]) -> str:
    """A record's mode (``MODES``): its deferral, relevance when tools were dropped, else passed through."""
    deferral = record.get("deferral")
    if deferral in (NATIVE, CLASSIC, CALL_THROUGH):
        return str(deferral)
    return RELEVANCE if record.get("deferred_tools") else PASSED


def rounds_of(record: Mapping[str, Any]) -> int:
    """A record's upstream rounds: its upstream answers as counted (fail-open resends included),
    else (a record written before they were) the first request and its search rounds."""
    upstream = record.get("upstream")
    if isinstance(upstream, list) and upstream:
        return len(upstream)
    return 1 + int(record.get("loops") or 0)


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
    added_ms: float  # answering: the proxy's own time on the answers (searches, search rounds, stitching)
    upstream_ms: float  # from sending each upstream request to the last byte of its answer, summed
    processing_ms: float  # planning the first request
    loops: int  # search rounds: the conversation sent again with search results
    passed: str | None  # why the request went upstream unchanged (None: it was rewritten)
    fallback: str | None
    outcome: str | None
    passage: str | None = None  # a live stream: "untouched", "changed" or "unhandled"
    id: str = ""  # the record's telemetry id ("": written before records had one)
    rounds: int = 1  # upstream rounds
    total_ms: float = 0.0  # measured; 0: written before it was
    status: int | None = None  # the last upstream answer's status, when recorded
    denied: int = 0  # tools the policy denied this request
    held: tuple[str, ...] = ()  # tools held for review
    changes: tuple[Mapping[str, Any], ...] = ()  # definitions changed or new for the tenant (``Record.tool_changes``)
    findings: tuple[Mapping[str, Any], ...] = ()  # screening findings (``Record.tool_findings``)

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
        passed = passed_of(record)  # no tool hidden: the tools went as sent
        return cls(
            api=str(record.get("provider") or ""), strategy=str(record.get("strategy") or ""),
            mode=str(record.get("deferral") or ""),
            session=str(record.get("session") or ""), sent=int(record.get("total_tools") or 0),
            loaded=int(record.get("kept_tools") or 0), deferred=int(record.get("deferred_tools") or 0),
            client_deferred=int(record.get("client_deferred") or 0), found=found, called=called, searches=searches,
            tokens_sent=int(record.get("tool_tokens_before") or 0),
            tokens_wire=int(record.get("tool_tokens_wire") or after), tokens_prompt=after,
            added_ms=float(record.get("loop_added_ms") or 0.0), upstream_ms=float(record.get("upstream_ms") or 0.0),
            processing_ms=float(record.get("processing_ms") or 0.0), loops=int(record.get("loops") or 0),
            passed=passed, fallback=None if passed is not None or fallback is None else str(fallback),
            outcome=record.get("outcome"), passage=record.get("passage"), id=str(record.get("id") or ""),
            rounds=rounds_of(record), total_ms=float(record.get("total_ms") or 0.0), status=last_status(record),
            denied=int(record.get("denied_tools") or 0), held=tuple(map(str, record.get("held_tools") or ())),
            changes=tuple(c for c in record.get("tool_changes") or () if isinstance(c, Mapping)),
            findings=tuple(f for f in record.get("tool_findings") or () if isinstance(f, Mapping)))

    @property
    def saved(self) -> int:
        """Estimated prompt tokens the proxy saved on the first request (sent − in the prompt)."""
        return self.tokens_sent - self.tokens_prompt

    @property
    def hits(self) -> int:
        """The tools the searches returned, a tool two searches returned counted twice."""
        return sum(len(s.hits) for s in self.searches)

    @property
    def proxy_ms(self) -> float:
        """The time the proxy added: planning and answering."""
        return self.processing_ms + self.added_ms

    @property
    def how(self) -> str:
        """The deferral in words: the mode, or why nothing was deferred."""
        if self.passed is not None:
            return f"{PASSED} ({reason_words(self.passed)})"
        return self.mode or self.strategy

    @property
    def result(self) -> str:
        """How the turn ended, in words (``result_words``)."""
        return result_words(self.passed, self.outcome, self.fallback, self.status, len(self.searches))

    def tools(self) -> str:
        """Sent → loaded, and where the others went."""
        parts = [f"{plural(self.sent, 'tool')} → {self.loaded:,} loaded"]
        if self.deferred:
            parts.append(f"{self.deferred:,} {DEFERRED_HOW.get(self.mode, 'deferred')}")
        if self.client_deferred:
            parts.append(f"{self.client_deferred:,} {BY_CLIENT}")
        return ", ".join(parts)

    def tokens(self) -> str:
        """The three token counts; the wire apart only where it differs from the prompt."""
        wire = f", ~{self.tokens_wire:,} on the wire" if self.tokens_wire != self.tokens_prompt else ""
        return f"tool tokens ~{self.tokens_sent:,} sent → ~{self.tokens_prompt:,} in the prompt{wire}"

    def timing(self, parts: bool = False) -> str:
        """The total, upstream and the proxy's time; ``parts``: the proxy's time split into
        planning and answering. A record without a measured total shows the sum."""
        total = self.total_ms or self.processing_ms + self.upstream_ms + self.added_ms
        split = f" (planning {self.processing_ms:.1f} ms, answering {self.added_ms:.1f} ms)" if parts else ""
        return f"{total:.1f} ms total: upstream {self.upstream_ms:.1f} ms, proxy {self.proxy_ms:.1f} ms{split}"

    def lead(self) -> str:
        """The figures that matter most, short enough for mitmweb's Comment column (150 px): tools
        sent → loaded, prompt tokens saved."""
        return f"{self.sent}→{self.loaded} {'−' if self.saved >= 0 else '+'}{_short(abs(self.saved))} tok"

    def comment(self, rounds: int | None = None) -> str:
        """mitmweb's Comment column (some fifteen characters show; the rest in the Comment tab):
        the lead first, then mode, tools, searches, calls, tokens, result, rounds, time, and the
        ids to find the turn by. ``rounds``: the hidden rounds mitmweb lists; the record's count
        is said (they are the same)."""
        parts = [self.lead(), self.how, self.tools()]
        for s in self.searches:
            parts.append(f"search {_quote(s.query)} → {_names(s.hits) or 'nothing'}")
        if self.searches:
            parts.append(f"{len(self.found)} found")
        if self.called:
            parts.append(f"called {_names(self.called)}")
        parts.append(self.tokens())
        if ending := self._ending():
            parts.append(ending)
        parts.append(plural(self.rounds, "upstream round"))
        parts.append(self.timing())
        parts += self._trouble()
        parts += self._ids()
        return " · ".join(parts)

    def line(self, where: str) -> str:
        """mitmdump's line for the flow: API, tools, mode, searches and hits, tokens saved, then
        the result, rounds, time and id in one last part. No query text (a search query may
        quote the user), no credentials."""
        parts = [f"tool discovery: {where} [{self.api}]", self.tools(), self.how]
        if self.searches:
            parts.append(f"{plural(len(self.searches), 'search', 'searches')}, {plural(self.hits, 'hit')}"
                         + (f": {_names(self.found)}" if self.found else ""))
        if self.called:
            parts.append(f"called {_names(self.called)}")
        parts.append(f"~{self.saved:,} tok saved ({self.tokens()})")
        end = [ending] if (ending := self._ending()) else []
        end += [plural(self.rounds, "upstream round"), self.timing()]
        if self.id:
            end.append(f"id {self.id}")
        parts.append(", ".join(end))
        parts += self._trouble()
        return " · ".join(parts)

    def details(self, round_ids: Sequence[str]) -> list[str]:
        """The contentview's header: the same facts, one per line, every search in full."""
        ids = "".join(f" · {part}" for part in self._ids())
        lines = [
            f"tool discovery · {self.api} · strategy {self.strategy} · {self.how}{ids}",
            f"result: {self.result}; {plural(self.rounds, 'upstream round')}, {plural(self.loops, 'search round')}",
            f"tools: {self.tools()}; this turn {len(self.found)} found, {len(self.called)} called",
            f"{self.tokens()} (~{self.saved:,} saved)",
            f"time: {self.timing(parts=True)}",
        ]
        if self.loaded:
            lines.append("loaded: in the prompt from the start, each for a reason the table says: pinned (kept by a "
                         "rule), loaded (kept upfront: ranked most relevant to the session's first request, "
                         "defer.upfront), found before (an earlier turn's search)")
        lines += self._trouble()
        for i, s in enumerate(self.searches, 1):  # one name a line: the view is half the window wide
            note = f", {s.fallback}" if s.fallback else ""
            error = f" error: {s.error}" if s.error else ""
            lines.append(f"search {i}: {s.query!r} ({s.backend}{note}, {s.latency_ms:.1f} ms) → "
                         f"{plural(len(s.hits), 'hit')}{error}")
            lines += [f"  {name}" for name in s.hits]
        lines += [f"called: {name}" for name in self.called]
        lines += self.policy_details()
        if round_ids:  # they follow this flow in the list
            lines.append(f"hidden rounds (the proxy's own flows, ⚙): {', '.join(r[:8] for r in round_ids)}")
        return lines

    def _ending(self) -> str:
        """The result, but for what ``how`` says already (why a request went as the client sent it)."""
        if self.passed is None:
            return self.result
        return self.result.removeprefix(f"{PASSED}: {reason_words(self.passed)}").removeprefix("; ")

    def _ids(self) -> list[str]:
        """The turn's telemetry id and session, to find it by (mitmweb's search: ``~comment ID``)."""
        out = [f"id {self.id}"] if self.id else []
        return out + ([f"session {self.session}"] if self.session else [])

    def _trouble(self) -> list[str]:
        """What became of a live stream's bytes, and what the policy did or found."""
        out = [_PASSAGE.get(self.passage, f"stream {self.passage}")] if self.passage is not None else []
        return out + self._policy()

    def _policy(self) -> list[str]:
        """The policy's part, short: denied and held tools, changed definitions, screening findings."""
        out = []
        if self.denied:
            out.append(f"{plural(self.denied, 'tool')} denied by policy")
        if self.held:
            out.append(f"held for review: {_names(self.held)}")
        if self.changes:
            out.append("definition " + ", ".join(_change_words(c) for c in self.changes[:MAX_MATCHES]))
        if self.findings:
            flagged = tuple(dict.fromkeys(str(f.get("tool")) for f in self.findings))
            out.append(f"screening flagged {_names(flagged)}")
        return out

    def policy_details(self) -> list[str]:
        """Every change and finding in full, each change's diff included (the contentview's)."""
        lines = []
        for c in self.changes:
            lines.append(f"tool {_change_words(c)}: {', '.join(map(str, c.get('what') or ())) or 'first seen'}"
                         + (f" (fingerprint {c.get('fingerprint')})" if c.get("fingerprint") else ""))
            lines += [f"  {line}" for line in str(c.get("diff") or "").splitlines()]
        for f in self.findings:
            lines.append(f"screening: {f.get('tool')}: {f.get('kind')} in {f.get('where')}: {f.get('detail')}")
        return lines


_PASSAGE = {
    "untouched": "stream passed as sent",
    "changed": "stream stitched",
    "unhandled": "stream not handled: ended with an error",
}


def _change_words(change: Mapping[str, Any]) -> str:
    """``name changed`` / ``name new`` / ``name renamed from was``."""
    name, kind = change.get("tool"), change.get("kind")
    return f"{name} renamed from {change.get('was')}" if kind == "renamed" else f"{name} {kind}"


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
