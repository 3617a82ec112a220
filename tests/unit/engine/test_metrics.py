"""The Prometheus metrics: exact counts from records, labels from fixed sets, never an exception."""

from __future__ import annotations

import math
import urllib.request

import pytest
from loguru import logger
from prometheus_client import REGISTRY, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.bedrock.adapter import ConverseAdapter, InvokeAdapter
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter
from tooldisco.config import STRATEGIES
from tooldisco.engine import metrics as m
from tooldisco.engine.metrics import FALLBACKS, MODES, OUTCOMES, Metrics, fallback_of, outcome_of
from tooldisco.engine.telemetry import Record, SearchRecord, TelemetrySink
from tooldisco.state.disk import DiskSessionStore

from tests.support import records as sample


def value(metrics: Metrics, name: str, **labels: str) -> float:
    got = metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def observed(*records: Record) -> Metrics:
    metrics = Metrics()
    for record in records:
        metrics.observe(record)
    return metrics


def test_a_deferred_turn_counts_exactly():
    metrics = observed(sample.deferred_turn(), sample.deferred_turn())
    api = {"api": "anthropic"}
    assert value(metrics, "tooldisco_requests_total", strategy="tool-search", mode="classic", outcome="deferred",
                 **api) == 2
    assert value(metrics, "tooldisco_upstream_requests_total", kind="client", status="200", **api) == 2
    assert value(metrics, "tooldisco_upstream_requests_total", kind="hidden", status="200", **api) == 2
    for kind, n in (("input", 1_000), ("cache_read", 20_000), ("cache_write", 500), ("output", 300)):
        assert value(metrics, "tooldisco_usage_tokens_total", type=kind, **api) == 2 * n
    assert value(metrics, "tooldisco_cost_usd_total", kind="actual", **api) == pytest.approx(0.04)
    assert value(metrics, "tooldisco_cost_usd_total", kind="without", **api) == pytest.approx(0.16)
    assert value(metrics, "tooldisco_cost_unpriced_total", **api) == 0
    assert value(metrics, "tooldisco_tool_definitions_total", stage="sent", **api) == 80
    assert value(metrics, "tooldisco_tool_definitions_total", stage="forwarded", **api) == 16
    assert value(metrics, "tooldisco_tool_definitions_total", stage="loaded", **api) == 16
    assert value(metrics, "tooldisco_tool_tokens_total", stage="sent", **api) == 40_000
    assert value(metrics, "tooldisco_tool_tokens_total", stage="wire", **api) == 9_000
    assert value(metrics, "tooldisco_tool_tokens_total", stage="prompt", **api) == 9_000
    assert value(metrics, "tooldisco_searches_total", outcome="hit", **api) == 2
    assert value(metrics, "tooldisco_search_duration_seconds_count", **api) == 2
    assert value(metrics, "tooldisco_search_duration_seconds_sum", **api) == pytest.approx(0.008)
    assert value(metrics, "tooldisco_search_duration_seconds_bucket", le="0.005", **api) == 2
    assert value(metrics, "tooldisco_tool_context_share_bucket", le="0.1", **api) == 2
    assert value(metrics, "tooldisco_tool_context_share_bucket", le="0.05", **api) == 0
    gen_ai = {"gen_ai_operation_name": "chat", "gen_ai_system": "anthropic"}
    assert value(metrics, "gen_ai_client_token_usage_sum", gen_ai_token_type="input", **gen_ai) == 2 * 21_500
    assert value(metrics, "gen_ai_client_token_usage_sum", gen_ai_token_type="output", **gen_ai) == 2 * 300
    assert value(metrics, "gen_ai_client_operation_duration_seconds_count", **gen_ai) == 2
    assert value(metrics, "gen_ai_client_operation_duration_seconds_sum", **gen_ai) == pytest.approx(2 * 1.21)
    assert value(metrics, "tooldisco_fallbacks_total", reason="other", **api) == 0
    assert value(metrics, "tooldisco_metrics_errors_total") == 0


def test_native_deferral_forwards_every_definition_and_counts_empty_and_failed_searches():
    metrics = observed(sample.native_turn())
    api = {"api": "openai_responses"}
    assert value(metrics, "tooldisco_requests_total", strategy="tool-search", mode="native", outcome="deferred",
                 **api) == 1
    assert value(metrics, "tooldisco_tool_definitions_total", stage="forwarded", **api) == 30
    assert value(metrics, "tooldisco_tool_definitions_total", stage="loaded", **api) == 0
    assert value(metrics, "tooldisco_tool_tokens_total", stage="wire", **api) == 9_400
    assert value(metrics, "tooldisco_searches_total", outcome="empty", **api) == 1
    assert value(metrics, "tooldisco_searches_total", outcome="error", **api) == 1
    assert value(metrics, "tooldisco_usage_unreported_total", **api) == 1
    # Usage but no price: an unpriced turn, and no cost counted.
    assert value(metrics, "tooldisco_cost_unpriced_total", **api) == 1
    assert value(metrics, "tooldisco_cost_usd_total", kind="actual", **api) == 0
    assert value(metrics, "gen_ai_client_token_usage_count", gen_ai_operation_name="chat", gen_ai_system="openai",
                 gen_ai_token_type="input") == 1


def test_a_request_passed_through_forwards_all_its_tools_and_has_no_duration():
    metrics = observed(sample.passthrough_turn())
    api = {"api": "openai_chat"}
    assert value(metrics, "tooldisco_requests_total", strategy="passthrough", mode="none",
                 outcome="passed_through", **api) == 1
    assert value(metrics, "tooldisco_fallbacks_total", reason="passthrough", **api) == 1
    assert value(metrics, "tooldisco_tool_definitions_total", stage="forwarded", **api) == 12
    assert value(metrics, "tooldisco_cost_unpriced_total", **api) == 0  # no usage: nothing to price
    assert value(metrics, "gen_ai_client_operation_duration_seconds_count", gen_ai_operation_name="chat",
                 gen_ai_system="openai") == 0  # no upstream time on the record: not timed


def test_an_upstream_error_and_a_selector_fallback():
    metrics = observed(sample.upstream_error_turn(), sample.unpriced_turn())
    assert value(metrics, "tooldisco_requests_total", api="gemini", strategy="tool-search", mode="call-through",
                 outcome="upstream_error") == 1
    assert value(metrics, "tooldisco_upstream_requests_total", api="gemini", kind="client", status="529") == 1
    assert value(metrics, "tooldisco_requests_total", api="bedrock_converse", strategy="relevance", mode="none",
                 outcome="failed_open") == 1
    assert value(metrics, "tooldisco_fallbacks_total", api="bedrock_converse", reason="selector_local_search") == 1
    assert value(metrics, "tooldisco_cost_unpriced_total", api="bedrock_converse") == 1


def rec(outcome=None, reason=None, deferred=0, **fields) -> Record:
    return Record(provider="anthropic", strategy="tool-search", outcome=outcome, fallback_reason=reason,
                  deferred_tools=deferred, **fields)


@pytest.mark.parametrize("record, expected", [
    (rec("done", deferred=5), "deferred"),
    (rec("mixed", deferred=5), "deferred"),
    (rec("max_loops", deferred=5), "deferred"),
    (rec(None, deferred=3), "deferred"),  # relevance: tools cut, no loop ran
    (rec(None), "kept_whole"),  # relevance: every tool kept
    (rec(None, "no_tools"), "kept_whole"),
    (rec(None, "below_min_tools"), "kept_whole"),
    (rec(None, "below_min_tokens"), "kept_whole"),
    (rec(None, "below_threshold"), "kept_whole"),
    (rec(None, "nothing_to_defer"), "kept_whole"),
    (rec(None, "passthrough"), "passed_through"),
    (rec(None, "client_defers: defer_loading"), "passed_through"),
    (rec(None, "client_defers: search tool ToolSearch"), "passed_through"),
    (rec(None, "search_tool_name_taken"), "passed_through"),
    (rec(None, "unsupported: messages[3] is not an object"), "passed_through"),
    (rec(None, "overloaded"), "passed_through"),
    (rec(None, "rollout_excluded"), "passed_through"),
    (rec("shadow"), "passed_through"),
    (rec("dark"), "passed_through"),
    (rec(None, "error: KeyError"), "failed_open"),
    (rec("done", "native_refused_400_classic_sent", 5), "failed_open"),
    (rec("done", "call-through_refused_400_classic_sent", 5), "failed_open"),
    (rec("upstream_200", "rewrite_400_original_sent", 5), "failed_open"),
    (rec("fallback_400", "reforward_400_original_sent", 5), "failed_open"),
    (rec("reforward_unreadable", "reforward_unreadable", 5), "failed_open"),
    (rec("done", "selector_timeout", 5), "failed_open"),
    (rec("done", "selector_connection_error:ClientError_local_search", 5), "failed_open"),
    (rec("error: ValueError", deferred=5), "failed_open"),
    (rec("flow_error: connection reset by peer", deferred=5), "failed_open"),
    (rec("undecodable", deferred=5), "failed_open"),
    (rec("too_large", deferred=5), "failed_open"),
    (rec("max_loops_empty", deferred=5), "failed_open"),
    (rec("upstream_529", deferred=5), "upstream_error"),
    (rec("upstream_400", "rewrite_400_original_sent", 5), "upstream_error"),  # the client's own refused too
    (rec("fallback_429", "reforward_429", 5), "upstream_error"),
    (rec("reforward_500", "reforward_500", 5), "upstream_error"),
    (rec("upstream_failed", deferred=5), "upstream_error"),
    (rec("upstream_stream_error", deferred=5), "upstream_error"),
    (rec("upstream_truncated", deferred=5), "upstream_error"),
    (rec("upstream_unfinished", deferred=5), "upstream_error"),
    (rec("client_gone", deferred=5), "cancelled"),
    (rec(None, "passthrough", upstream=[["client", 429]]), "upstream_error"),  # closed with its answer
    (rec(None, "below_min_tools", upstream=[["client", 200]]), "kept_whole"),
    (rec(None, "passthrough", upstream=[["client", None]]), "passed_through"),
    (rec("done", deferred=5, upstream=[["client", 400], ["hidden", 200]]), "deferred"),
    (rec("pending"), "other"),
    (rec("something new"), "other"),
    (rec(None, "a reason no one wrote yet"), "other"),
])
def test_outcomes(record, expected):
    assert outcome_of(record) == expected


@pytest.mark.parametrize("reason, expected", [
    (None, None), ("", None),
    ("unsupported: tools is a string, 3 chars", "unsupported"),
    ("error: json.decoder.JSONDecodeError", "error"),
    ("client_defers: tool_search_tool_regex_20251119", "client_defers"),
    ("native_refused_400_classic_sent", "native_refused"),
    ("call-through_refused_400_classic_sent", "call_through_refused"),
    ("classic_refused_400_classic_sent", "other"),
    ("rewrite_422_original_sent", "rewrite_original_sent"),
    ("reforward_404_original_sent", "reforward_original_sent"),
    ("reforward_503", "reforward_error"),
    ("selector_http_500", "selector_restore_all"),
    ("selector_empty_selection_local_search", "selector_local_search"),
    ("unsupported", "unsupported"),
    ("errors: everywhere", "other"),
    ("x" * 10_000, "other"),
])
def test_fallback_reasons_are_bounded(reason, expected):
    assert fallback_of(reason) == expected
    assert expected is None or expected in FALLBACKS


def test_every_label_value_comes_from_a_fixed_set():
    metrics = observed(*sample.sample_records(),
                       rec("weird: 123", "session abc123 tool mcp__github__create_issue key sk-ant-xyz"),
                       Record(provider="some_new_api", strategy="vibes", deferral="hyper", upstream=[["?", 999]]))
    allowed = {
        "api": set(m.APIS) | {"other"}, "strategy": set(STRATEGIES) | {"other"}, "mode": set(MODES) | {"other"},
        "outcome": set(OUTCOMES) | {"hit", "empty", "error"},
        "kind": {"client", "hidden", "other", "actual", "without", *m.CHANGE_KINDS, *m.FINDING_KINDS},
        "type": set(m.TOKEN_TYPES),
        "stage": {"sent", "forwarded", "loaded", "wire", "prompt"}, "backend": {"disk", "redis"},
        "reason": set(FALLBACKS) | {"denied", "held"},
        "gen_ai_operation_name": {"chat"}, "gen_ai_system": set(m.GEN_AI_SYSTEMS.values()) | {"other"},
        "gen_ai_token_type": {"input", "output"},
    }
    for family in metrics.registry.collect():
        for s in family.samples:
            for label, v in s.labels.items():
                if label == "le":
                    continue
                if label == "status":
                    assert v == "other" or 100 <= int(v) <= 599
                    continue
                assert v in allowed[label], (s.name, label, v)
    assert value(metrics, "tooldisco_fallbacks_total", api="anthropic", reason="other") == 1
    assert value(metrics, "tooldisco_requests_total", api="other", strategy="other", mode="other",
                 outcome="kept_whole") == 1
    assert value(metrics, "tooldisco_upstream_requests_total", api="other", kind="other", status="other") == 1


class Odd:
    """A record whose every field raises on reading."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(name)


@pytest.mark.parametrize("record", [
    None,
    Odd(),
    Record(provider=None, strategy=None),  # type: ignore[arg-type]
    Record(provider="anthropic", strategy="api", usage="lots", upstream=[["client"], None, ["hidden", "abc"], 7],
           searches=[None, object(), SearchRecord(query="q", matched=None, backend=None, latency_ms=-3)],
           cost_usd="1.0", cost_usd_without=float("nan"), context_share=float("inf"), total_tools=-5,
           kept_tools=True, tool_tokens_before=float("inf"), usage_unreported=-1, upstream_ms=float("nan"),
           fallback_reason=42, outcome=["x"]),  # type: ignore[arg-type]
    Record(provider="anthropic", strategy="api", usage={"input": -1, "output": "ten", "cache_read": 1.5e300},
           upstream_ms=1.0, processing_ms=-1, loop_added_ms=float("inf")),
])
def test_observe_never_raises(record):
    metrics = Metrics()
    metrics.observe(record)
    metrics.observe(record)
    assert generate_latest(metrics.registry)  # still renders
    for family in metrics.registry.collect():
        for s in family.samples:
            assert not math.isnan(s.value), s


def test_a_failure_is_counted_and_logged_once():
    metrics = Metrics()
    warnings: list[str] = []
    handle = logger.add(warnings.append, level="WARNING", format="{message}")
    try:
        for _ in range(3):
            metrics.observe(Odd())  # type: ignore[arg-type]
    finally:
        logger.remove(handle)
    assert value(metrics, "tooldisco_metrics_errors_total") == 3
    assert len(warnings) == 1 and "tooldisco_metrics_errors_total" in warnings[0]


def test_a_label_set_seen_once_makes_no_new_child():
    metrics = observed(*sample.sample_records())
    children = {name: dict(family.children) for name, family in vars(metrics).items()
                if isinstance(family, m._Children)}
    for record in sample.sample_records():
        metrics.observe(record)
    after = {name: family.children for name, family in vars(metrics).items() if isinstance(family, m._Children)}
    assert {k: len(v) for k, v in after.items()} == {k: len(v) for k, v in children.items()}
    assert all(after[k][labels] is child for k, v in children.items() for labels, child in v.items())


def test_each_engine_counts_in_a_registry_of_its_own():
    a, b = observed(sample.deferred_turn()), Metrics()
    assert value(b, "tooldisco_requests_total", api="anthropic", strategy="tool-search", mode="classic",
                 outcome="deferred") == 0
    assert a.registry is not b.registry
    assert REGISTRY.get_sample_value("tooldisco_requests_total", {"api": "anthropic", "strategy": "tool-search",
                                                                  "mode": "classic", "outcome": "deferred"}) is None


def test_every_wire_api_has_a_gen_ai_system():
    apis = {a.api for a in (AnthropicAdapter, OpenAIChatAdapter, OpenAIResponsesAdapter, GeminiAdapter,
                            ConverseAdapter, InvokeAdapter)}
    assert apis == set(m.APIS)


def test_every_record_the_sink_takes_is_observed_even_without_a_file(tmp_path):
    metrics = Metrics()
    off = TelemetrySink(None, observers=[metrics.observe])
    on = TelemetrySink(tmp_path / "t.jsonl", observers=[metrics.observe])
    try:
        off.submit(sample.deferred_turn())
        on.submit(sample.deferred_turn())
        on.flush()
    finally:
        on.close()
    assert value(metrics, "tooldisco_requests_total", api="anthropic", strategy="tool-search", mode="classic",
                 outcome="deferred") == 2
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 1


class FakeStore:
    available = True
    failures = 0


def test_the_session_store_health_is_read_when_scraped():
    store = FakeStore()
    metrics = Metrics(store, "redis")
    assert value(metrics, "tooldisco_session_store_up", backend="redis") == 1
    assert value(metrics, "tooldisco_session_store_errors_total", backend="redis") == 0
    store.available, store.failures = False, 3
    assert value(metrics, "tooldisco_session_store_up", backend="redis") == 0
    assert value(metrics, "tooldisco_session_store_errors_total", backend="redis") == 3


def test_a_disk_store_that_fails_is_down_and_counted(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    store = DiskSessionStore(blocked / "sessions", retry_after=60)  # cannot be created: down from the start
    try:
        metrics = Metrics(store, "disk")
        assert value(metrics, "tooldisco_session_store_up", backend="disk") == 0
        assert value(metrics, "tooldisco_session_store_errors_total", backend="disk") >= 1
    finally:
        store.close()
    healthy = DiskSessionStore(tmp_path / "ok")
    try:
        assert value(Metrics(healthy, "disk"), "tooldisco_session_store_up", backend="disk") == 1
    finally:
        healthy.close()


def test_served_over_http_the_exposition_parses():
    metrics = observed(*sample.sample_records())
    server, thread = start_http_server(0, addr="127.0.0.1", registry=metrics.registry)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {"tooldisco_requests", "tooldisco_upstream_requests", "tooldisco_usage_tokens", "tooldisco_cost_usd",
            "tooldisco_search_duration_seconds", "gen_ai_client_token_usage",
            "gen_ai_client_operation_duration_seconds", "tooldisco_metrics_errors"} <= set(families)
    assert families["tooldisco_requests"].type == "counter"
    assert families["tooldisco_search_duration_seconds"].type == "histogram"
    total = sum(s.value for s in families["tooldisco_requests"].samples if s.name == "tooldisco_requests_total")
    assert total == len(sample.sample_records())
