"""A turn's tally of upstream answers, its price beside the client's own request's, and its tools'
share of the context (``engine.accounting``)."""

from __future__ import annotations

import logging

import pytest

from tooldisco.core.types import TokenUsage
from tooldisco.engine.accounting import Accounting, Tally
from tooldisco.engine.telemetry import Record
from tooldisco.policy.pricing import PriceTable

PRICES = PriceTable.load([{"match": "test-model*", "input": 3.0, "cache_read": 0.3, "cache_write": 3.75,
                           "output": 15.0}])


def record(**fields) -> Record:
    return Record(provider="anthropic", strategy="tool-search", model="test-model-1", session="s1", **fields)


def test_the_first_answer_is_the_clients_and_every_other_the_proxys():
    rec = record()
    tally = Tally(rec)
    tally.answered(200, TokenUsage(100, 0, 50, 10))
    tally.answered(200, TokenUsage(20, 150, 0, 5))
    tally.answered(400, None)
    assert rec.upstream == [["client", 200], ["hidden", 200], ["hidden", 400]]
    assert rec.usage == {"input": 120, "cache_read": 150, "cache_write": 50, "output": 15}
    assert tally.first == TokenUsage(100, 0, 50, 10) and rec.usage_unreported == 0


def test_a_success_without_usage_is_unreported_never_guessed():
    rec = record()
    tally = Tally(rec)
    tally.answered(200, None)
    assert rec.usage is None and rec.usage_unreported == 1 and rec.upstream == [["client", 200]]
    Accounting(PRICES, 0.25).complete(rec, tally)
    assert rec.cost_usd is None and rec.cost_usd_without is None


def test_a_turn_is_priced_and_its_tools_put_back_for_the_clients_own_request():
    rec = record(tool_tokens_before=10_000, tool_tokens_after=1_000, tool_tokens_wire=1_000)
    tally = Tally(rec)
    tally.answered(200, TokenUsage(2_000, 0, 0, 100))
    # The forwarded body was 8,000 characters (about 2,000 tokens): the provider counted 2,000, so
    # the 9,000 tool tokens taken out stay 9,000 and go back as uncached input.
    Accounting(PRICES, 0.25).complete(rec, tally, prompt_chars=8_000)
    assert rec.cost_usd == pytest.approx((2_000 * 3.0 + 100 * 15.0) / 1e6)
    assert rec.cost_usd_without == pytest.approx((11_000 * 3.0 + 100 * 15.0) / 1e6)
    assert rec.cost_usd_without > rec.cost_usd


def test_the_tools_taken_out_are_scaled_by_the_providers_count_of_the_prompt():
    rec = record(tool_tokens_before=5_000, tool_tokens_after=1_000, tool_tokens_wire=1_000)
    tally = Tally(rec)
    tally.answered(200, TokenUsage(0, 3_000, 0, 0))  # read from the cache: put back as a cache read
    Accounting(PRICES, 0.25).complete(rec, tally, prompt_chars=8_000)  # estimated 2,000, counted 3,000
    assert rec.cost_usd_without == pytest.approx((3_000 + 4_000 * 1.5) * 0.3 / 1e6)


def test_an_unknown_model_has_no_price():
    rec = record()
    rec.model = "nobody-knows-this-model"
    tally = Tally(rec)
    tally.answered(200, TokenUsage(10, 0, 0, 1))
    Accounting(PRICES, 0.25).complete(rec, tally)
    assert rec.usage is not None and rec.cost_usd is None and rec.cost_usd_without is None


def test_the_context_share_is_warned_once_per_session(caplog):
    from loguru import logger

    handler = logger.add(lambda m: logging.getLogger("acct").warning(m.record["message"]), level="WARNING")
    try:
        accounting = Accounting(PriceTable.load(), 0.25)
        with caplog.at_level(logging.WARNING, logger="acct"):
            for _ in range(3):
                rec = record(tool_tokens_before=100_000)
                rec.model = "claude-sonnet-4-5-20250929"
                accounting.complete(rec)
        assert rec.context_window and rec.context_share == pytest.approx(100_000 / rec.context_window, abs=1e-4)
        warned = [r for r in caplog.records  # this test's own handler's: another test may leave a sink
                  if r.name == "acct" and "of claude-sonnet-4-5-20250929's context window" in r.getMessage()]
        assert len(warned) == 1 and "session s1" in warned[0].getMessage()
    finally:
        logger.remove(handler)


def test_completing_never_raises():
    rec = record()
    rec.tool_tokens_before = "lots"  # type: ignore[assignment]
    tally = Tally(rec)
    tally.answered(200, TokenUsage(1, 0, 0, 1))
    Accounting(PRICES, 0.25).complete(rec, tally)  # logged, not raised


def test_each_upstream_answer_is_priced_alone_against_a_long_context_price():
    """A turn of two rounds whose prompts are each under the long-context threshold costs the
    base price: the provider prices each request by its own prompt, not by the turn's sum."""
    prices = PriceTable.load([{"match": "test-model*", "input": 1.0, "output": 2.0,
                               "long_context": {"above": 1_000, "input": 10.0, "output": 20.0}}])
    rec = record()
    tally = Tally(rec)
    tally.answered(200, TokenUsage(800, 0, 0, 10))
    tally.answered(200, TokenUsage(900, 0, 0, 20))  # 1,700 over the turn, each under 1,000
    Accounting(prices, 0.25).complete(rec, tally)
    assert rec.cost_usd == pytest.approx((1_700 * 1.0 + 30 * 2.0) / 1e6)
    tally.answered(200, TokenUsage(1_200, 0, 0, 5))  # this one over it: only it at the long price
    Accounting(prices, 0.25).complete(rec, tally)
    assert rec.cost_usd == pytest.approx((1_700 * 1.0 + 30 * 2.0 + 1_200 * 10.0 + 5 * 20.0) / 1e6)
