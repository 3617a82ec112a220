"""Prometheus metrics, read off the telemetry records: what a dashboard and alerts watch.

Why from the records: a ``Record`` is already the one account of a processed request (its
outcome, its tools, its upstream answers, its usage and cost, its searches), closed once, on one
path (``TelemetrySink.submit``, whose observers include ``Metrics.observe``). Counting the same
facts anywhere else would let the two disagree.

Every label value comes from a fixed set: the API, the strategy, the deferral mode, an outcome
or fallback reason from the tables below, a token type, an HTTP status. A value outside its set
is ``other``; no session, tenant, model, tool name or free text ever becomes a label, so the
number of series stays bounded however the traffic looks. ``observe`` never raises (a failure
is counted in ``tooldisco_metrics_errors_total``) and makes no new labelled child once a label
set has been seen.

The registry is the instance's own, never prometheus_client's global one: several engines
(a config reload, the tests) each count their own. ``glue.metrics`` serves it over HTTP.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from loguru import logger
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tooldisco.config import STRATEGIES
from tooldisco.engine.telemetry import Record

OTHER = "other"
# Each wire API (``Adapter.api``) and its OpenTelemetry ``gen_ai.system``.
GEN_AI_SYSTEMS = {
    "anthropic": "anthropic",
    "openai_chat": "openai",
    "openai_responses": "openai",
    "gemini": "gcp.gemini",
    "bedrock_converse": "aws.bedrock",
    "bedrock_invoke": "aws.bedrock",
}
APIS = tuple(GEN_AI_SYSTEMS)
MODES = ("native", "call-through", "classic", "none")  # ``Record.deferral``; "none": no deferral
TOKEN_TYPES = ("input", "cache_read", "cache_write", "output")
UPSTREAM_KINDS = ("client", "hidden")
CHANGE_KINDS = ("changed", "renamed", "new")  # ``Record.tool_changes[].kind``
FINDING_KINDS = ("hidden_characters", "instructions", "credentials", "exfiltration")  # ``policy.screening.KINDS``

# What became of a request (``tooldisco_requests_total{outcome}``).
OUTCOMES = (
    "deferred",  # tools were deferred or cut, and the turn ended well
    "kept_whole",  # nothing to defer: too few tools or tokens, or every tool kept
    "passed_through",  # not processed on purpose: strategy, the client's own deferral, overload, rollout
    "failed_open",  # the proxy fell back: an upstream refused its rewrite, its own error, a flow error
    "upstream_error",  # the upstream answered 4xx/5xx, or failed the answer (broke off, error event)
    "cancelled",  # the client went away before the answer
    OTHER,
)
# ``Record.fallback_reason`` in a fixed set: the free text after a prefix (an exception's
# type, an unsupported shape, a status) is dropped; what cannot be placed is ``other``.
FALLBACKS: dict[str, str] = {  # reason -> the outcome it makes
    "passthrough": "passed_through",
    "client_defers": "passed_through",
    "search_tool_name_taken": "passed_through",
    "unsupported": "passed_through",
    "overloaded": "passed_through",
    "rollout_excluded": "passed_through",
    "no_tools": "kept_whole",
    "below_min_tools": "kept_whole",
    "below_min_tokens": "kept_whole",
    "below_threshold": "kept_whole",
    "nothing_to_defer": "kept_whole",
    "error": "failed_open",
    "native_refused": "failed_open",  # the upstream refused native deferral: classic sent
    "call_through_refused": "failed_open",  # ... call-through: classic sent
    "rewrite_original_sent": "failed_open",  # the upstream refused the rewrite: the client's own sent
    "reforward_original_sent": "failed_open",  # ... refused a re-forward: the client's own sent
    "reforward_unreadable": "failed_open",
    "selector_restore_all": "failed_open",  # api: the selector failed, every deferred tool loaded
    "selector_local_search": "failed_open",  # api: the selector failed, the proxy's own search answered
    "reforward_error": "upstream_error",  # a re-forward's 4xx/5xx passed on as the upstream sent it
    OTHER: OTHER,
}
_PREFIXED = ("client_defers", "unsupported", "error")
_REFUSED = re.compile(r"(native|call-through)_refused_\d{3}_classic_sent")
_REWRITE = re.compile(r"rewrite_\d{3}_original_sent")
_REFORWARD_SENT = re.compile(r"reforward_\d{3}_original_sent")
_REFORWARD = re.compile(r"reforward_\d{3}")
_STATUS_OUTCOME = re.compile(r"(?:upstream|reforward)_(\d{3})")
_UPSTREAM_FAILED = frozenset({"upstream_failed", "upstream_stream_error", "upstream_unfinished", "upstream_truncated"})
_OWN_FAILURES = frozenset({"undecodable", "too_large", "max_loops_empty", "reforward_unreadable"})
_FINISHED = frozenset({"", "done", "mixed", "no_phantom", "max_loops"})  # the loop's ends (``loop.Finish``)

# Buckets. Searches: the search timeout is 2 s by default. Context share: a share of the window.
# The gen_ai ones are OpenTelemetry's advice for these instruments (semantic conventions).
SEARCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
SHARE_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


def fallback_of(reason: str | None) -> str | None:
    """``Record.fallback_reason`` as one of ``FALLBACKS`` (None: no fallback)."""
    if not reason:
        return None
    if not isinstance(reason, str):
        return OTHER
    if reason in FALLBACKS:
        return reason
    for prefix in _PREFIXED:
        if reason.startswith(prefix + ":"):
            return prefix
    if m := _REFUSED.fullmatch(reason):
        return m.group(1).replace("-", "_") + "_refused"
    if _REWRITE.fullmatch(reason):
        return "rewrite_original_sent"
    if _REFORWARD_SENT.fullmatch(reason):
        return "reforward_original_sent"
    if _REFORWARD.fullmatch(reason):
        return "reforward_error"
    if reason.startswith("selector_"):
        return "selector_local_search" if reason.endswith("_local_search") else "selector_restore_all"
    return OTHER


def outcome_of(record: Record) -> str:
    """One of ``OUTCOMES`` for a record: how the turn ended first (the client left, the upstream
    failed it, the proxy's own error; a request that went without the loop has no outcome, and
    its answer's status tells), then why it was not deferred (its fallback reason), then
    whether it deferred anything."""
    out = record.outcome or ""
    if not isinstance(out, str):
        return OTHER
    if out == "client_gone":
        return "cancelled"
    if (m := _STATUS_OUTCOME.fullmatch(out)) and int(m.group(1)) >= 400 or out in _UPSTREAM_FAILED:
        return "upstream_error"
    if out.startswith(("error:", "flow_error")) or out in _OWN_FAILURES:
        return "failed_open"
    if not out and 400 <= _last_status(record) <= 599:  # went without the loop: its answer says
        return "upstream_error"
    if (reason := fallback_of(record.fallback_reason)) is not None:
        return FALLBACKS[reason]
    if out in ("shadow", "dark"):  # api rollout: the request went unchanged, the selector asked aside
        return "passed_through"
    if out in _FINISHED or _STATUS_OUTCOME.fullmatch(out):
        return "deferred" if _count(record.deferred_tools) > 0 else "kept_whole"
    return OTHER


def _last_status(record: Record) -> int:
    """The status of the last upstream answer of the turn (0: none recorded)."""
    try:
        status = record.upstream[-1][1] if record.upstream else 0
        return status if isinstance(status, int) and not isinstance(status, bool) else 0
    except (TypeError, IndexError, KeyError):
        return 0


def forwarded_tools(record: Record) -> float:
    """Client tool definitions that went upstream in the first round: all of them when nothing
    was deferred or under native deferral (deferred ones go marked, out of the prompt), else
    those kept (and found earlier) beside the search tool."""
    if record.deferral == "native" or _count(record.deferred_tools) == 0:
        return max(0.0, _count(record.total_tools) - _count(record.denied_tools) - len(record.held_tools or ()))
    return _count(record.kept_tools)


def _count(value: Any) -> float:
    """A number a counter may add: finite and >= 0 (anything else: 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0
    return value


def _bounded(value: Any, allowed: Iterable[str]) -> str:
    return value if isinstance(value, str) and value in allowed else OTHER


def _status(value: Any) -> str:
    """An HTTP status as a label (bounded: 100-599), else ``other``."""
    try:
        status = int(value)
    except (TypeError, ValueError):
        return OTHER
    return str(status) if 100 <= status <= 599 and not isinstance(value, bool) else OTHER


class _Children:
    """A metric's labelled children, each made once: ``observe`` looks one up in a dict."""

    __slots__ = ("metric", "children")

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *labels: str) -> Any:
        child = self.children.get(labels)
        if child is None:
            child = self.children[labels] = self.metric.labels(*labels)
        return child


class _StoreHealth:
    """The session store's health, read when scraped: ``available`` and ``failures``, which the
    disk and Redis stores keep (a store without them counts as up, without errors)."""

    def __init__(self, store: Any, backend: str) -> None:
        self._store, self._backend = store, backend

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("tooldisco_session_store_up", "", labels=["backend"])
        yield CounterMetricFamily("tooldisco_session_store_errors", "", labels=["backend"])

    def collect(self) -> Iterator[Metric]:
        try:
            up = 1.0 if getattr(self._store, "available", True) else 0.0
            errors = _count(getattr(self._store, "failures", 0))
        except Exception:  # a scrape must answer whatever the store does
            up, errors = 0.0, 0
        gauge = GaugeMetricFamily("tooldisco_session_store_up",
                                  "1 while the session store is in use; 0 while it is down (requests then go "
                                  "through without session state)", labels=["backend"])
        gauge.add_metric([self._backend], up)
        counter = CounterMetricFamily("tooldisco_session_store_errors",
                                      "Session store calls that failed (each fails open)", labels=["backend"])
        counter.add_metric([self._backend], errors)
        yield gauge
        yield counter


class Metrics:
    """The proxy's metrics in a registry of its own; ``observe`` takes each closed record."""

    def __init__(self, store: Any = None, backend: str = "disk") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> _Children:
            return _Children(Counter(name, doc, labels, registry=r))

        def histogram(name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> _Children:
            return _Children(Histogram(name, doc, labels, registry=r, buckets=buckets))

        self.requests = counter("tooldisco_requests", "Client requests with tools to a listed host, by what "
                                "became of them", ("api", "strategy", "mode", "outcome"))
        self.upstream = counter("tooldisco_upstream_requests", "Upstream answers: to the client's request "
                                "(client) and to the proxy's own rounds (hidden), by HTTP status",
                                ("api", "kind", "status"))
        self.usage = counter("tooldisco_usage_tokens", "Tokens the providers reported, over every upstream "
                             "answer of a turn", ("api", "type"))
        self.unreported = counter("tooldisco_usage_unreported", "Successful upstream answers that reported no "
                                  "usage", ("api",))
        self.cost = counter("tooldisco_cost_usd", "Usage priced (prices:), in US dollars: actual, and without "
                            "the proxy (the same turns priced as if the client's own requests had gone out)",
                            ("api", "kind"))
        self.unpriced = counter("tooldisco_cost_unpriced", "Turns with usage but no price for their model",
                                ("api",))
        self.tools = counter("tooldisco_tool_definitions", "Client tool definitions: sent by the client, "
                             "forwarded upstream, loaded in the model's prompt (first round)", ("api", "stage"))
        self.tool_tokens = counter("tooldisco_tool_tokens", "Estimated tokens of tool definitions: sent by the "
                                   "client, on the wire upstream, in the model's prompt (first round)",
                                   ("api", "stage"))
        self.searches = counter("tooldisco_searches", "Searches the proxy answered: found tools (hit), none "
                                "(empty) or an error the model read", ("api", "outcome"))
        self.search_seconds = histogram("tooldisco_search_duration_seconds", "One search, the selector call "
                                        "included", ("api",), SEARCH_BUCKETS)
        self.fallbacks = counter("tooldisco_fallbacks", "Requests with a fallback reason, by reason",
                                 ("api", "reason"))
        self.context_share = histogram("tooldisco_tool_context_share", "The client's tool definitions as a "
                                       "share of the model's context window", ("api",), SHARE_BUCKETS)
        self.token_usage = histogram("gen_ai_client_token_usage", "Tokens per turn (OpenTelemetry "
                                     "gen_ai.client.token.usage): input counts cached tokens too",
                                     ("gen_ai_operation_name", "gen_ai_system", "gen_ai_token_type"), TOKEN_BUCKETS)
        self.duration = histogram("gen_ai_client_operation_duration_seconds", "One turn, from planning to its "
                                  "last upstream answer (OpenTelemetry gen_ai.client.operation.duration)",
                                  ("gen_ai_operation_name", "gen_ai_system"), DURATION_BUCKETS)
        self.withheld = counter("tooldisco_tools_withheld", "Client tool definitions the policy kept from a "
                                "request: denied, or held for review", ("api", "reason"))
        self.tool_changes = counter("tooldisco_tool_changes", "Tool definitions that differ from the tenant's "
                                    "pinned ones (changed, renamed) or are new under strict pinning, each "
                                    "counted in the request that showed it", ("kind",))
        self.tool_findings = counter("tooldisco_tool_findings", "Screening findings in tool definitions (hidden "
                                     "characters, instructions, credentials, exfiltration), per request", ("kind",))
        self.errors = Counter("tooldisco_metrics_errors", "Records the metrics could not count in full",
                              registry=r)
        if store is not None:
            r.register(_StoreHealth(store, backend))
        self._logged = False

    def observe(self, record: Record) -> None:
        """Count one closed record. Never raises: a failure is counted, and logged once."""
        try:
            self._observe(record)
        except Exception as e:
            self.errors.inc()
            if not self._logged:
                self._logged = True
                logger.opt(exception=e).warning("a telemetry record could not be counted in the metrics "
                                                "(tooldisco_metrics_errors_total counts them)")

    def _observe(self, record: Record) -> None:
        api = _bounded(record.provider, APIS)
        mode = _bounded(record.deferral or "none", MODES)
        self.requests(api, _bounded(record.strategy, STRATEGIES), mode, outcome_of(record)).inc()
        for answer in record.upstream or ():
            kind, status = (answer[0], answer[1]) if isinstance(answer, (list, tuple)) and len(answer) == 2 \
                else (None, None)
            self.upstream(api, _bounded(kind, UPSTREAM_KINDS), _status(status)).inc()

        usage = record.usage if isinstance(record.usage, dict) else None
        if usage is not None:
            for kind in TOKEN_TYPES:
                if n := _count(usage.get(kind)):
                    self.usage(api, kind).inc(n)
            system = GEN_AI_SYSTEMS.get(api, OTHER)
            prompt = sum(_count(usage.get(k)) for k in ("input", "cache_read", "cache_write"))
            self.token_usage("chat", system, "input").observe(prompt)
            self.token_usage("chat", system, "output").observe(_count(usage.get("output")))
        if n := _count(record.usage_unreported):
            self.unreported(api).inc(n)
        if isinstance(record.cost_usd, (int, float)):
            self.cost(api, "actual").inc(_count(record.cost_usd))
        elif usage is not None:
            self.unpriced(api).inc()
        if isinstance(record.cost_usd_without, (int, float)):
            self.cost(api, "without").inc(_count(record.cost_usd_without))

        self.tools(api, "sent").inc(_count(record.total_tools))
        self.tools(api, "forwarded").inc(forwarded_tools(record))
        self.tools(api, "loaded").inc(_count(record.kept_tools))
        self.tool_tokens(api, "sent").inc(_count(record.tool_tokens_before))
        self.tool_tokens(api, "wire").inc(_count(record.tool_tokens_wire))
        self.tool_tokens(api, "prompt").inc(_count(record.tool_tokens_after))

        if n := _count(record.denied_tools):
            self.withheld(api, "denied").inc(n)
        if held := len(record.held_tools or ()):
            self.withheld(api, "held").inc(held)
        for change in record.tool_changes or ():
            self.tool_changes(_bounded(change.get("kind") if isinstance(change, dict) else None, CHANGE_KINDS)).inc()
        for finding in record.tool_findings or ():
            self.tool_findings(_bounded(finding.get("kind") if isinstance(finding, dict) else None,
                                        FINDING_KINDS)).inc()
        for search in record.searches or ():
            error, matched = getattr(search, "error", None), getattr(search, "matched", None)
            self.searches(api, "error" if error else "hit" if matched else "empty").inc()
            self.search_seconds(api).observe(_count(getattr(search, "latency_ms", 0)) / 1000)
        if (reason := fallback_of(record.fallback_reason)) is not None:
            self.fallbacks(api, reason).inc()
        if isinstance(share := record.context_share, (int, float)) and _count(share):
            self.context_share(api).observe(share)
        if upstream_ms := _count(record.upstream_ms):  # the runner's turns: planning, the upstream, the loop
            seconds = (_count(record.processing_ms) + upstream_ms + _count(record.loop_added_ms)) / 1000
            self.duration("chat", GEN_AI_SYSTEMS.get(api, OTHER)).observe(seconds)
