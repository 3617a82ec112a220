"""``metrics:``, ``prices:`` and ``pipes.tool_discovery.context_warn_share``: parsed, validated by key, documented."""

from pathlib import Path

import pytest

from tooldisco.policy.pricing import PriceTable
from tooldisco.config import ConfigError, MetricsSettings, Price, format_listen, parse, parse_listen

ROOT = Path(__file__).resolve().parents[3]


def test_defaults_metrics_off_no_prices_a_quarter_of_the_context():
    cfg = parse({})
    assert cfg.metrics == MetricsSettings() and cfg.metrics.listen is None and cfg.metrics.address is None
    assert cfg.prices == ()
    assert cfg.tool_discovery.context_warn_share == 0.25


@pytest.mark.parametrize("listen, address", [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)),
    ("0.0.0.0:9464", ("0.0.0.0", 9464)),
    ("metrics.internal:0", ("metrics.internal", 0)),
    ("[::1]:9464", ("::1", 9464)),
    (9464, ("127.0.0.1", 9464)),  # a port alone: this machine only
    ("9464", ("127.0.0.1", 9464)),
    (" localhost:1 ", ("localhost", 1)),
])
def test_listen(listen, address):
    cfg = parse({"metrics": {"listen": listen}})
    assert cfg.metrics.address == address
    assert cfg.metrics.listen == format_listen(*address)


def test_listen_from_the_environment_and_empty_is_off():
    assert parse({"metrics": {"listen": "${METRICS:-}"}}, env={}).metrics.listen is None
    assert parse({"metrics": {"listen": "${METRICS}"}}, env={"METRICS": "127.0.0.1:9"}).metrics.listen == "127.0.0.1:9"
    assert parse({"metrics": None}).metrics.listen is None


@pytest.mark.parametrize("data, message", [
    ({"metrics": {"listen": ":9464"}}, r"metrics.listen: expected HOST:PORT, e.g. 127.0.0.1:9464 \(this machine\) "
                                       r"or 0.0.0.0:9464 \(every interface\)"),
    ({"metrics": {"listen": "localhost"}}, r"metrics.listen: expected HOST:PORT"),
    ({"metrics": {"listen": "localhost:http"}}, r"metrics.listen: the port must be a number from 0 to 65535"),
    ({"metrics": {"listen": "localhost:65536"}}, r"metrics.listen: the port must be a number"),
    ({"metrics": {"listen": "::1:9464"}}, r"metrics.listen: an IPv6 host goes in brackets"),
    ({"metrics": {"listen": "a b:1"}}, r"metrics.listen: not a host name or address"),
    ({"metrics": {"listen": True}}, r"metrics.listen: expected HOST:PORT"),
    ({"metrics": {"listen": [9464]}}, r"metrics.listen: expected HOST:PORT"),
    ({"metrics": {"port": 9464}}, r"metrics.port: unknown key"),
    ({"metrics": "on"}, r"metrics: expected a mapping"),
    ({"prices": {"claude": 3}}, r"prices: expected a list of rows"),
    ({"prices": [{"input": 3, "output": 15}]}, r"prices\[0\].match: required"),
    ({"prices": [{"match": [], "input": 3, "output": 15}]}, r"prices\[0\].match: required"),
    ({"prices": [{"match": [3], "input": 3, "output": 15}]}, r"prices\[0\].match: expected a list of non-empty"),
    ({"prices": [{"match": "a*", "output": 15}]}, r"prices\[0\].input: required"),
    ({"prices": [{"match": "a*", "input": 3}]}, r"prices\[0\].output: required"),
    ({"prices": [{"match": "a*", "input": 3, "output": 15},
                 {"match": "b*", "input": 3, "output": -1}]}, r"prices\[1\].output: must be at least 0"),
    ({"prices": [{"match": "a*", "input": "cheap", "output": 1}]}, r"prices\[0\].input: expected a number"),
    ({"prices": [{"match": "a*", "input": 1, "output": 1, "cache_read": "inf"}]},
     r"prices\[0\].cache_read: must be a finite number"),
    ({"prices": [{"match": "a*", "input": 1, "output": 1, "cache_reads": 0.1}]},
     r"prices\[0\].cache_reads: unknown key \(did you mean 'cache_read'\?\)"),
    ({"prices": ["a*"]}, r"prices\[0\]: expected a mapping"),
    ({"pipes": {"tool_discovery": {"context_warn_share": 0}}},
     r"pipes.tool_discovery.context_warn_share: must be greater than 0"),
    ({"pipes": {"tool_discovery": {"context_warn_share": 1.5}}},
     r"pipes.tool_discovery.context_warn_share: must be at most 1.0"),
    ({"pipes": {"tool_discovery": {"context_warn_share": "much"}}},
     r"pipes.tool_discovery.context_warn_share: expected a number"),
])
def test_bad_values_name_the_key(data, message):
    with pytest.raises(ConfigError, match=message):
        parse(data, env={})


def test_prices_first_match_wins_and_cache_prices_default_to_input():
    cfg = parse({"prices": [
        {"match": ["claude-opus-4*", "*anthropic.claude-opus-4*"], "input": 15, "cache_read": 1.5,
         "cache_write": 18.75, "output": 75},
        {"match": "claude-*", "input": "${SONNET_IN:-3}", "output": 15},
        {"match": "*", "input": 0, "output": 0},
    ]}, env={})
    assert cfg.prices[0] == Price(("claude-opus-4*", "*anthropic.claude-opus-4*"), 15.0, 1.5, 18.75, 75.0)
    table = PriceTable.load(cfg.prices)  # how the engine reads them: the rows before the shipped table
    opus = table.price("claude-opus-4-1-20250805")
    assert (opus.input, opus.cache_read, opus.cache_write, opus.output) == (15.0, 1.5, 18.75, 75.0)
    assert table.price("us.anthropic.claude-opus-4-1-v1:0") == opus
    sonnet = table.price("claude-sonnet-4-5")
    assert (sonnet.input, sonnet.cache_read, sonnet.cache_write, sonnet.output) == (3.0, 3.0, 3.0, 15.0)
    assert table.price("gpt-5").input == 0  # the catch-all
    assert table.price(None) is None and table.price("") is None


def test_context_warn_share():
    assert parse({"pipes": {"tool_discovery": {"context_warn_share": 1}}}).tool_discovery.context_warn_share == 1.0
    assert parse({"pipes": {"tool_discovery": {"context_warn_share": "0.1"}}}).tool_discovery.context_warn_share == 0.1


def test_parse_listen_names_its_key():
    with pytest.raises(ConfigError, match=r"^--metrics: expected HOST:PORT"):
        parse_listen("nope", "--metrics")
    assert format_listen("::1", 0) == "[::1]:0" and format_listen("127.0.0.1", 1) == "127.0.0.1:1"


def test_the_new_keys_are_documented_with_their_defaults():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in doc.splitlines()
            if line.startswith("| `")}
    assert rows["`metrics.listen`"] == "— (off)"
    assert rows["`prices`"] == "`[]`"
    assert rows["`prices[].input` / `.output`"] == "— (required)"
    assert rows["`prices[].cache_read` / `.cache_write`"] == "the row's `input`"
    assert rows["`…context_warn_share`"] == "`0.25`"


def test_a_price_row_may_have_a_long_context_tier():
    cfg = parse({"prices": [{"match": "big-model*", "input": 1, "output": 2,
                             "long_context": {"above": 200_000, "input": 2, "output": 4}}]}, env={})
    table = PriceTable.load(cfg.prices)
    price = table.price("big-model-1")
    assert price.above == 200_000 and (price.long.input, price.long.output) == (2.0, 4.0)
    with pytest.raises(ConfigError, match=r"prices\[0\]\.long_context\.above: required"):
        parse({"prices": [{"match": "m", "input": 1, "output": 2, "long_context": {"input": 2, "output": 4}}]},
              env={})
