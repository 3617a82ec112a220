"""Telemetry records of every kind the metrics count (tests of ``engine.metrics`` and the dashboard)."""

from __future__ import annotations

from tooldisco.engine.telemetry import Record, SearchRecord


def deferred_turn() -> Record:
    """A classic tool-search turn: 40 tools, 8 kept, one search, two upstream answers, priced."""
    return Record(
        provider="anthropic", strategy="tool-search", deferral="classic", outcome="done",
        total_tools=40, kept_tools=8, deferred_tools=32,
        tool_tokens_before=20_000, tool_tokens_wire=4_500, tool_tokens_after=4_500,
        processing_ms=3.0, upstream_ms=1_200.0, loop_added_ms=7.0,
        searches=[SearchRecord(query="weather", matched=["get_forecast"], backend="bm25", latency_ms=4.0)],
        upstream=[["client", 200], ["hidden", 200]],
        usage={"input": 1_000, "cache_read": 20_000, "cache_write": 500, "output": 300},
        cost_usd=0.02, cost_usd_without=0.08, context_window=200_000, context_share=0.1,
    )


def native_turn() -> Record:
    """Native deferral on Responses: every definition on the wire, few in the prompt; an empty search."""
    return Record(
        provider="openai_responses", strategy="tool-search", deferral="native", outcome="no_phantom",
        total_tools=30, kept_tools=0, deferred_tools=30,
        tool_tokens_before=9_000, tool_tokens_wire=9_400, tool_tokens_after=400,
        upstream_ms=800.0, loop_added_ms=2.0,
        searches=[SearchRecord(query="zzz", matched=[], backend="bm25", latency_ms=2.0),
                  SearchRecord(query=None, matched=[], backend="bm25", error="bad arguments", latency_ms=0.5)],
        upstream=[["client", 200]], usage={"input": 100, "cache_read": 0, "cache_write": 0, "output": 10},
        usage_unreported=1,
    )


def passthrough_turn() -> Record:
    return Record(provider="openai_chat", strategy="passthrough", fallback_reason="passthrough",
                  total_tools=12, kept_tools=12, tool_tokens_before=3_000, tool_tokens_wire=3_000,
                  tool_tokens_after=3_000)


def upstream_error_turn() -> Record:
    return Record(provider="gemini", strategy="tool-search", deferral="call-through", outcome="upstream_529",
                  total_tools=20, kept_tools=2, deferred_tools=18, upstream=[["client", 529]],
                  upstream_ms=50.0)


def unpriced_turn() -> Record:
    """Usage without a price (an unknown model), and a free-text fallback reason."""
    return Record(provider="bedrock_converse", strategy="relevance", outcome="done",
                  fallback_reason="selector_timeout_local_search", total_tools=50, kept_tools=10,
                  deferred_tools=40, usage={"input": 10, "cache_read": 0, "cache_write": 0, "output": 5},
                  upstream=[["client", 200]], upstream_ms=10.0)


def governed_turn() -> Record:
    """A turn the policy changed: tools denied and held, a definition changed, a screening finding."""
    r = deferred_turn()
    r.denied_tools, r.held_tools, r.policy = 2, ["mcp__mail__send"], "policy.clients[0]"
    r.tool_changes = [{"tool": "mcp__mail__send", "kind": "changed", "what": ["description"], "fingerprint": "0123456789ab"}]
    r.tool_findings = [{"tool": "mcp__mail__send", "kind": "exfiltration", "where": "description", "detail": "'bcc x@y'"}]
    return r


def sample_records() -> list[Record]:
    return [deferred_turn(), native_turn(), passthrough_turn(), upstream_error_turn(), unpriced_turn(), governed_turn(),
            Record(provider="anthropic", strategy="tool-search", fallback_reason="unsupported: a strange body")]
