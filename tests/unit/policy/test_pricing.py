"""``policy.pricing``: the shipped price and context-window tables, their matching, overrides,
and the arithmetic of a turn's cost with and without the proxy."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from tests.conformance.replay import load
from tooldisco.core.types import TokenUsage
from tooldisco.policy.pricing import PRICES_FILE, WINDOWS_FILE, Price, PriceTable, canonical, usage_without


@pytest.fixture(scope="module")
def table() -> PriceTable:
    return PriceTable.load()


def exact(usage: TokenUsage, input: str, cache_read: str, cache_write: str, output: str) -> float:
    """The cost in Decimal arithmetic, as a float: what the table must give."""
    total = (usage.input * Decimal(input) + usage.cache_read * Decimal(cache_read)
             + usage.cache_write * Decimal(cache_write) + usage.output * Decimal(output)) / 1_000_000
    return float(total)


# -- the shipped tables ---------------------------------------------------------------------

def test_every_row_names_its_source_and_date(table: PriceTable) -> None:
    for row in table.prices:
        assert row.source.startswith("https://") and len(row.date) == 10, row.match
        assert row.input > 0 and row.output > 0
    for window in table.windows:
        assert window.source.startswith("https://") and len(window.date) == 10, window.match


def test_the_data_files_ship_with_the_package() -> None:
    text = Path(__file__).resolve().parents[3].joinpath("pyproject.toml").read_text()
    assert '"data/*.yaml"' in text
    assert PRICES_FILE.is_file() and WINDOWS_FILE.is_file()
    assert yaml.safe_load(PRICES_FILE.read_text())["prices"]


@pytest.mark.parametrize(("model", "canon"), [
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
    ("anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku"),
    ("global.anthropic.claude-opus-4-6-v1", "claude-opus-4-6"),
    ("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
    ("anthropic/claude-3.5-sonnet", "claude-3-5-sonnet"),
    ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
    ("claude-sonnet-4-6[1m]", "claude-sonnet-4-6"),
    ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
    ("arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"),
    ("gpt-5-mini-2025-08-07", "gpt-5-mini"),
    ("openai/gpt-4o", "gpt-4o"),
    ("GPT-4.1", "gpt-4.1"),
    ("models/gemini-2.5-flash", "gemini-2.5-flash"),
    ("google/gemini-2.5-flash:free", "gemini-2.5-flash:free"),  # a free route is not the paid model
])
def test_canonical(model: str, canon: str) -> None:
    assert canonical(model) == canon


@pytest.mark.parametrize(("model", "input", "output"), [
    ("claude-sonnet-4-5-20250929", 3, 15),
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", 3, 15),
    ("anthropic/claude-sonnet-4.5", 3, 15),
    ("claude-opus-4-5-20251101", 5, 25),
    ("claude-opus-4-1-20250805", 15, 75),
    ("claude-haiku-4-5-20251001", 1, 5),
    ("claude-3-5-haiku-20241022", 0.8, 4),
    ("claude-3-haiku-20240307", 0.25, 1.25),
    ("claude-sonnet-5", 2, 10),
    ("gpt-4o", 2.5, 10),
    ("gpt-4o-2024-05-13", 5, 15),  # the first snapshot kept its launch price
    ("gpt-4o-mini-2024-07-18", 0.15, 0.6),
    ("gpt-4.1-nano-2025-04-14", 0.1, 0.4),
    ("o3", 2, 8),
    ("o4-mini", 1.1, 4.4),
    ("gpt-5", 1.25, 10),
    ("gpt-5-mini", 0.25, 2),
    ("gpt-5-nano-2025-08-07", 0.05, 0.4),
    ("gpt-5.2-2025-12-11", 1.75, 14),
    ("gemini-2.5-pro", 1.25, 10),
    ("gemini-2.5-flash", 0.3, 2.5),
    ("gemini-2.5-flash-lite", 0.1, 0.4),
    ("gemini-2.0-flash", 0.1, 0.4),
    ("gemini-3-pro-preview", 2, 12),
])
def test_families_match(table: PriceTable, model: str, input: float, output: float) -> None:
    price = table.price(model)
    assert price is not None, model
    assert (price.input, price.output) == (input, output)


@pytest.mark.parametrize("model", [
    "", "this-model-does-not-exist-12345", "gpt-5-pro", "gpt-5.5-pro", "claude-sonnet-9", "gemini-2.5-flash-image",
    "gemini-2.5-flash-preview-tts", "google/gemini-2.5-flash:free", "claude-3-sonnet-20240229", "gpt-4o-audio-preview",
    "openllmetry-testing", "gpt-5.1-codex-mini",
])
def test_unknown_models_are_unpriced(table: PriceTable, model: str) -> None:
    assert table.price(model) is None
    assert table.cost(model, TokenUsage(1000, 0, 0, 1000)) is None


# The recordings' models that must be priced (the common ones).
COMMON = {
    "claude-sonnet-4-5-20250929", "claude-sonnet-4-0", "claude-haiku-4-5-20251001", "claude-sonnet-4-5",
    "claude-sonnet-4-6", "claude-sonnet-4-20250514", "claude-opus-4-6", "claude-3-5-haiku-20241022",
    "claude-3-5-sonnet-20240620", "claude-3-7-sonnet-latest", "claude-opus-4-5-20251101", "claude-3-opus-20240229",
    "claude-3-haiku-20240307", "us.anthropic.claude-sonnet-5", "anthropic.claude-3-haiku-20240307-v1:0",
    "gpt-5-mini-2025-08-07", "gpt-4o", "gpt-4o-mini", "gpt-5.2-2025-12-11", "gpt-5-nano", "gpt-5.1-codex-max",
    "gpt-5.5", "gpt-5.1", "gpt-5.4", "gpt-5", "gpt-4.1-mini", "gpt-4.1-nano", "gpt-5-codex", "openai/gpt-4o",
    "gpt-4.1", "gpt-5.2-codex", "gpt-5.3-codex", "anthropic/claude-3-5-sonnet-20241022",
    "gemini-3-pro-preview", "gemini-2.5-flash", "gemini-3-flash-preview", "gemini-3.1-pro-preview", "gemini-2.0-flash",
}


def test_recorded_models(table: PriceTable, capsys: pytest.CaptureFixture[str]) -> None:
    models = {r.model for r in load() if r.model}
    assert COMMON <= models
    unpriced = sorted(m for m in models if table.price(m) is None)
    with capsys.disabled():
        print(f"\nrecorded models without a price ({len(unpriced)} of {len(models)}): {', '.join(unpriced)}")
    assert not [m for m in COMMON if table.price(m) is None]
    assert sorted(m for m in COMMON if table.context_window(m) is None) == ["gpt-5.4", "gpt-5.5"]  # not read yet


# -- overrides -----------------------------------------------------------------------------

def test_overrides_win() -> None:
    table = PriceTable.load([{"match": ["claude-sonnet-4-5*", "my-deployment"], "input": 1, "cache_read": 0.5,
                              "cache_write": 2, "output": 4}])
    price = table.price("claude-sonnet-4-5-20250929")
    assert price is not None and (price.input, price.cache_read, price.cache_write, price.output) == (1, 0.5, 2, 4)
    assert price.source == "" and table.price("my-deployment") is price
    assert table.price("MY-DEPLOYMENT") is price  # case-insensitive
    assert table.cost("my-deployment", TokenUsage(1_000_000, 0, 0, 0)) == 1.0
    assert table.price("claude-haiku-4-5").input == 1  # type: ignore[union-attr]  # the rest stay shipped


def test_overrides_as_config_rows() -> None:
    """The config's rows (objects with match and the four prices) are taken as they are."""
    from tooldisco.config import Price as ConfigPrice

    row = ConfigPrice(match=("gpt-4o*",), input=9.0, cache_read=9.0, cache_write=9.0, output=9.0)
    table = PriceTable.load([row])
    assert table.cost("gpt-4o-mini", TokenUsage(0, 0, 0, 1_000_000)) == 9.0


@pytest.mark.parametrize("row", [
    {"input": 1, "output": 1}, {"match": [], "input": 1, "output": 1}, {"match": "x", "output": 1},
    {"match": "x", "input": -1, "output": 1}, {"match": "x", "input": "3", "output": 1},
    {"match": "x", "input": 1, "output": 1, "long_context": {"input": 1, "output": 1}},
])
def test_bad_override_rows_are_refused(row: dict) -> None:
    with pytest.raises(ValueError):
        PriceTable.load([row])


# -- arithmetic -----------------------------------------------------------------------------

def test_cost_is_exact(table: PriceTable) -> None:
    usage = TokenUsage(input=1234, cache_read=56789, cache_write=4321, output=987)
    assert table.cost("claude-sonnet-4-5", usage) == pytest.approx(exact(usage, "3", "0.3", "3.75", "15"), rel=1e-15)
    assert table.cost("claude-haiku-4-5", usage) == pytest.approx(exact(usage, "1", "0.1", "1.25", "5"), rel=1e-15)
    openai = TokenUsage(input=1000, cache_read=3000, output=500)
    assert table.cost("gpt-4.1-mini", openai) == pytest.approx(exact(openai, "0.4", "0.1", "0", "1.6"), rel=1e-15)
    assert table.cost("claude-opus-4-6", TokenUsage(1_000_000, 0, 0, 0)) == 5.0
    assert table.cost("gpt-5", TokenUsage()) == 0.0


def test_long_context_prices_the_whole_request(table: PriceTable) -> None:
    short = TokenUsage(input=150_000, cache_read=50_000, output=1000)  # prompt exactly 200K: base prices
    assert table.cost("claude-sonnet-4-5", short) == pytest.approx(exact(short, "3", "0.3", "3.75", "15"), rel=1e-15)
    long = TokenUsage(input=150_001, cache_read=50_000, output=1000)
    assert table.cost("claude-sonnet-4-5", long) == pytest.approx(exact(long, "6", "0.6", "7.5", "22.5"), rel=1e-15)
    assert table.cost("claude-sonnet-4-6", long) == pytest.approx(exact(long, "3", "0.3", "3.75", "15"), rel=1e-15)
    gemini = TokenUsage(input=300_000, output=10)
    assert table.cost("gemini-2.5-pro", gemini) == pytest.approx(exact(gemini, "2.5", "0.25", "0", "15"), rel=1e-15)


def test_a_part_without_a_price_leaves_the_usage_unpriced(table: PriceTable) -> None:
    assert table.cost("gpt-4o", TokenUsage(10, 0, 5, 10)) is None  # OpenAI publishes no cache-write price
    assert table.cost("gpt-4o-2024-05-13", TokenUsage(10, 5, 0, 10)) is None
    assert table.cost("gpt-4o-2024-05-13", TokenUsage(1_000_000, 0, 0, 0)) == 5.0


def test_usage_without() -> None:
    shown = 77
    # The first round read its prompt from the cache: the removed tools go back into cache_read.
    cached = TokenUsage(input=100, cache_read=5000, cache_write=300, output=999)
    assert usage_without(cached, shown, 2000) == TokenUsage(100, 7000, 300, 77)
    # Nothing read from the cache: they go back into the uncached input.
    fresh = TokenUsage(input=900, cache_read=0, cache_write=4000, output=10)
    assert usage_without(fresh, shown, 2000) == TokenUsage(2900, 0, 4000, 77)
    assert usage_without(fresh, -1, -5) == TokenUsage(900, 0, 4000, 0)


def test_cost_without(table: PriceTable) -> None:
    first = TokenUsage(input=100, cache_read=5000, output=40)
    without = table.cost_without("claude-sonnet-4-5", first, 60, 3000)
    assert without == pytest.approx(exact(TokenUsage(100, 8000, 0, 60), "3", "0.3", "3.75", "15"), rel=1e-15)
    assert table.cost_without("unknown-model", first, 60, 3000) is None


# -- context windows ------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "tokens"), [
    ("claude-sonnet-4-5-20250929", 200_000),
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", 200_000),
    ("claude-sonnet-4-5[1m]", 1_000_000),
    ("claude-haiku-4-5", 200_000),
    ("claude-opus-4-6", 1_000_000),
    ("claude-sonnet-5", 1_000_000),
    ("gpt-4.1-mini-2025-04-14", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-5-mini", 400_000),
    ("o3", 200_000),
    ("gemini-2.5-pro", 1_048_576),
    ("gemini-2.5-flash", 1_048_576),
    ("unknown-model", None),
    ("", None),
])
def test_context_window(table: PriceTable, model: str, tokens: int | None) -> None:
    assert table.context_window(model) == tokens


def test_context_share(table: PriceTable) -> None:
    assert table.context_share(50_000, "claude-sonnet-4-5") == 0.25
    assert table.context_share(64_000, "gpt-4o") == 0.5
    assert table.context_share(50_000, "unknown-model") is None


def test_lookups_are_memoised_and_bounded() -> None:
    table = PriceTable([Price(match=("m-*",), input=1, output=1)])
    for i in range(3000):
        assert table.price(f"m-{i}") is not None
    assert len(table._price_memo) <= 1024
