"""The report's money figures: spent, without the proxy, saved, caching, unpriced turns, the
saving over time per tenant and agent, tokens by type and the context share, on synthetic
telemetry files that mix records written before the proxy priced turns with the engine's own
``Record``s; the ``--json`` summary; the page and its plots with zero, one or two records."""

from __future__ import annotations

import html
import importlib.util
import json
import sys
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tooldisco import cli
from tooldisco.engine.telemetry import Record
from tooldisco.report import page as report

T0 = datetime(2026, 5, 28, 9, 10).timestamp()  # local time, as the report buckets it
HOUR, DAY = 3600.0, 86400.0

# The summary's keys (docs/watching.md, "The report", lists them).
KEYS = {"sources", "filters", "lines", "malformed", "filtered", "records", "first", "last", "unmetered_records",
        "money", "tokens", "context_share", "by_model", "by_tenant", "by_agent", "saving_over_time", "upstream",
        "passage", "tool_tokens", "by_mode", "results", "fallbacks", "timing", "turns", "sessions"}
MONEY_KEYS = {"spent_usd", "without_usd", "saved_usd", "saved_pct", "priced_turns", "unpriced_turns", "unpriced_models"}
TOKEN_KEYS = {"input", "cache_read", "cache_write", "output", "cache_read_pct", "cache_write_pct", "turns_with_usage",
              "turns_without_usage", "answers_without_usage"}
SHARE_KEYS = {"turns", "median", "p95", "max", "above", "threshold"}
ROW_KEYS = {"turns", "priced_turns", "unpriced_turns", "spent_usd", "without_usd", "saved_usd", "saved_pct", "tokens"}
OVER_TIME_KEYS = {"bucket", "bucket_seconds", "all", "by_tenant", "by_agent"}
POINT_KEYS = {"start", "saved_usd", "cumulative_usd"}


def old(when: float = T0, **fields: Any) -> str:
    """A record as written before the money fields (no model, tenant, usage, cost...)."""
    return json.dumps({"provider": "anthropic", "strategy": "tool-search", "session": "aaaa0000", "time": when,
                       "total_tools": 40, "kept_tools": 5, "tool_tokens_before": 4000, "tool_tokens_after": 500,
                       **fields})


def new(when: float = T0, *, usage: tuple[int, int, int, int] | None = None, **fields: Any) -> str:
    """A record made with the engine's own type; ``usage`` is (input, cache_read, cache_write, output)."""
    record = Record("anthropic", "tool-search", session="bbbb0000", time=when, tool_tokens_before=3000,
                    tool_tokens_after=300, **fields)
    if usage is not None:
        record.usage = dict(zip(report.TOKEN_TYPES, usage))
    return json.dumps(asdict(record))


def mixed() -> list[str]:
    """Two old records, three priced turns over two tenants and two agents, two turns of models
    without a price, one turn whose upstream reported no usage, and a malformed line."""
    return [
        old(T0),
        new(T0 + 60, model="claude-sonnet-4", tenant="ab12cd34", agent="claude-code", usage=(1000, 6000, 2000, 500),
            cost_usd=0.5, cost_usd_without=0.75, context_window=200_000, context_share=0.1,
            upstream=[["client", 200], ["hidden", 200]]),
        "{not json",
        new(T0 + HOUR, model="gpt-5", tenant="ef56ab78", agent="codex", usage=(2000, 0, 0, 100), cost_usd=0.25,
            cost_usd_without=0.5, context_share=0.3, upstream=[["client", 200]], stream=True, passage="untouched"),
        new(T0 + HOUR + 60, model="gpt-5", tenant="ef56ab78", agent="codex", usage=(500, 500, 0, 0), cost_usd=0.125,
            cost_usd_without=0.125, context_share=0.4, upstream=[["client", 200]], stream=True, passage="changed"),
        new(T0 + HOUR + 120, model="model-b", tenant="ef56ab78", agent="", usage=(10, 0, 0, 5),
            upstream=[["client", 200]]),
        new(T0 + HOUR + 180, model="model-a", tenant="ab12cd34", agent="gemini-cli", usage=(20, 0, 0, 5),
            upstream=[["client", 200], ["hidden", 500]], usage_unreported=1),
        new(T0 + HOUR + 240, model="model-a", tenant="ab12cd34", agent="gemini-cli", upstream=[["client", None]],
            usage_unreported=1),
        old(T0 + HOUR + 300),
    ]


def aggregate(lines: list[str], filters: report.Filters | None = None) -> report.Aggregate:
    agg = report.Aggregate()
    for text in lines:
        agg.line(text, filters or report.Filters())
    return agg


def figures(lines: list[str], filters: report.Filters | None = None) -> dict[str, Any]:
    return report.summary(aggregate(lines, filters), [Path("t.jsonl")], filters or report.Filters(), 3.0)


def test_the_money_figures_are_the_exact_sums_of_the_records():
    f = figures(mixed())
    assert (f["lines"], f["malformed"], f["records"], f["unmetered_records"]) == (9, 1, 8, 2)
    assert f["money"] == {"spent_usd": 0.875, "without_usd": 1.375, "saved_usd": 0.5, "saved_pct": 36.36,
                          "priced_turns": 3, "unpriced_turns": 2, "unpriced_models": {"model-a": 1, "model-b": 1}}
    assert f["tokens"] == {"input": 3530, "cache_read": 6500, "cache_write": 2000, "output": 610,
                           "cache_read_pct": 54.03, "cache_write_pct": 16.63, "turns_with_usage": 5,
                           "turns_without_usage": 1, "answers_without_usage": 2}
    assert f["context_share"] == {"turns": 3, "median": 0.3, "p95": pytest.approx(0.39), "max": 0.4, "above": 2,
                                  "threshold": 0.25}
    assert f["upstream"] == {"client": 6, "hidden": 2, "errors": 2}  # a 500 and an answer without a status
    assert f["passage"] == {"changed": 1, "untouched": 1}
    assert f["tool_tokens"]["before"] == 2 * 4000 + 6 * 3000  # old records count everywhere but in the money


def test_per_tenant_agent_and_model():
    f = figures(mixed())
    assert set(f["by_tenant"]) == {"ab12cd34", "ef56ab78"}  # old records are in none
    assert f["by_tenant"]["ab12cd34"] == {
        "turns": 3, "priced_turns": 1, "unpriced_turns": 1, "spent_usd": 0.5, "without_usd": 0.75, "saved_usd": 0.25,
        "saved_pct": 33.33, "tokens": {"input": 1020, "cache_read": 6000, "cache_write": 2000, "output": 505}}
    assert f["by_tenant"]["ef56ab78"]["spent_usd"] == 0.375 and f["by_tenant"]["ef56ab78"]["saved_usd"] == 0.25
    # "": the client's family was not known (as recorded)
    assert {a: r["saved_usd"] for a, r in f["by_agent"].items()} == {"": None, "claude-code": 0.25, "codex": 0.25,
                                                                     "gemini-cli": None}
    assert f["by_model"]["gpt-5"]["priced_turns"] == 2 and f["by_model"]["gpt-5"]["without_usd"] == 0.625
    assert f["by_model"]["model-a"]["unpriced_turns"] == 1 and f["by_model"]["model-a"]["turns"] == 2


def test_decimal_sums_are_exact():
    lines = [new(T0 + i, model="m", cost_usd=v, cost_usd_without=w, usage=(1, 0, 0, 1))
             for i, (v, w) in enumerate([(0.1, 0.3), (0.2, 0.3), (0.7, 1.1)])]
    money = figures(lines)["money"]
    assert (money["spent_usd"], money["without_usd"], money["saved_usd"]) == (1.0, 1.7, 0.7)
    assert 0.3 + 0.3 + 1.1 != 1.7  # what summing the floats would have said


def test_a_priced_turn_without_a_counterfactual_saves_nothing_and_bad_values_are_ignored():
    lines = [
        new(T0, model="m", usage=(10, 0, 0, 1), cost_usd=0.5),  # cost_usd_without null: without = cost
        json.dumps({"provider": "anthropic", "strategy": "relevance", "time": T0 + 1, "model": 7, "tenant": None,
                    "agent": ["x"], "usage": "lots", "cost_usd": "1", "cost_usd_without": float("nan"),
                    "context_share": "big", "upstream": ["client", 200], "passage": 3, "usage_unreported": "x"}),
        json.dumps({"provider": "anthropic", "strategy": "relevance", "time": T0 + 2, "usage": {"input": "x"},
                    "cost_usd": True, "upstream": [[], ["hidden"]]}),
        json.dumps({"provider": "anthropic", "strategy": "relevance", "usage": None, "upstream": 5}),
    ]
    f = figures(lines)
    assert f["records"] == 4 and f["unmetered_records"] == 0 and f["tokens"]["turns_without_usage"] == 2
    assert (f["money"]["spent_usd"], f["money"]["without_usd"], f["money"]["saved_usd"]) == (0.5, 0.5, 0.0)
    assert f["money"]["unpriced_turns"] == 1 and f["money"]["unpriced_models"] == {"": 1}  # usage {} with no cost
    assert f["tokens"]["input"] == 10 and f["context_share"]["turns"] == 0
    assert f["upstream"] == {"client": 0, "hidden": 1, "errors": 1}
    json.dumps(f, allow_nan=False)  # valid JSON whatever the records held


def test_a_time_no_date_can_be_made_of_is_no_time(tmp_path, monkeypatch):
    lines = [new(when, model="m", usage=(1, 0, 0, 0), cost_usd=1, cost_usd_without=2) for when in (1e20, -5.0)]
    lines.append(new(T0, model="m", usage=(1, 0, 0, 0), cost_usd=1, cost_usd_without=2))
    f = figures(lines)
    assert f["money"]["saved_usd"] == 3 and f["saving_over_time"]["all"] == [
        {"start": "2026-05-28T09:00", "saved_usd": 1.0, "cumulative_usd": 1.0}]  # only the turn with a time
    text, drawn = run_page(tmp_path, lines, monkeypatch)
    assert "3 record(s)" in text and all(span <= 1 / 24 + 1e-9 for span in time_spans(drawn))


def test_only_old_records_give_no_money_figures():
    f = figures([old(T0), old(T0 + 10)])
    assert f["unmetered_records"] == 2 and f["records"] == 2
    assert f["money"] == {"spent_usd": None, "without_usd": None, "saved_usd": None, "saved_pct": None,
                          "priced_turns": 0, "unpriced_turns": 0, "unpriced_models": {}}
    assert f["by_model"] == {} and f["saving_over_time"]["all"] == []
    assert f["context_share"]["median"] is None and f["tokens"]["cache_read_pct"] is None


def test_the_saving_over_time_is_per_hour_over_two_days_or_less():
    f = figures(mixed())["saving_over_time"]
    assert (f["bucket"], f["bucket_seconds"]) == ("hour", 3600)
    assert f["all"] == [{"start": "2026-05-28T09:00", "saved_usd": 0.25, "cumulative_usd": 0.25},
                        {"start": "2026-05-28T10:00", "saved_usd": 0.25, "cumulative_usd": 0.5}]
    assert f["by_tenant"] == {"ab12cd34": [{"start": "2026-05-28T09:00", "saved_usd": 0.25, "cumulative_usd": 0.25}],
                              "ef56ab78": [{"start": "2026-05-28T10:00", "saved_usd": 0.25, "cumulative_usd": 0.25}]}
    assert set(f["by_agent"]) == {"claude-code", "codex"}  # only priced turns have a saving


def test_the_saving_over_time_is_per_day_past_two_days_and_stays_bounded():
    lines = [new(T0 + i * 0.75 * DAY, model="m", tenant="t1", agent="codex", usage=(1, 0, 0, 0), cost_usd=1,
                 cost_usd_without=3) for i in range(5)]
    f = figures(lines)["saving_over_time"]
    assert f["bucket"] == "day" and [p["start"] for p in f["all"]] == ["2026-05-28", "2026-05-29", "2026-05-30",
                                                                       "2026-05-31"]
    assert [p["cumulative_usd"] for p in f["all"]] == [2.0, 6.0, 8.0, 10.0]  # two turns on the 29th
    ledger = report.Ledger(most=16)
    for i in range(2000):  # 2,000 hours, out of order
        ledger.add(T0 + ((i * 7919) % 2000) * HOUR, "t", "a", report.Decimal(1))
    width, buckets = ledger.series()
    assert len(buckets) <= 16 and width % 86400 == 0 and width > 86400
    assert sum(sums["tenant"]["t"] for _, sums in buckets) == 2000


def test_many_names_are_bounded():
    lines = [new(T0 + i, model=f"m{i}", tenant=f"t{i}", agent=f"a{i}", usage=(1, 0, 0, 0), cost_usd=1,
                 cost_usd_without=2) for i in range(report.MAX_NAMES + 5)]
    f = figures(lines)
    for key in ("by_model", "by_tenant", "by_agent"):
        assert len(f[key]) == report.MAX_NAMES + 1 and f[key]["other"]["turns"] == 5
    assert len(f["saving_over_time"]["by_tenant"]) == report.MAX_NAMES + 1
    assert f["money"]["saved_usd"] == report.MAX_NAMES + 5


def test_filters_by_tenant_and_agent():
    f = figures(mixed(), report.Filters(tenants=("ef56",), agents=("codex",)))
    assert f["records"] == 2 and f["money"]["spent_usd"] == 0.375 and f["filtered"] == 6
    assert "tenant ef56" in f["filters"] and "agent codex" in f["filters"]


# --- the command: --json, the page, zero / one / two records --------------------------------


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_json_prints_the_summary_and_writes_no_page(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(report.importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))  # --json needs no extra
    lines = mixed()  # made once: each record has an id of its own
    log = write(tmp_path, lines)
    assert cli.main(["report", str(log), "--json", "--quiet", "-o", str(tmp_path / "r.html")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "r_png").exists()
    assert set(out) == KEYS
    assert set(out["money"]) == MONEY_KEYS and set(out["tokens"]) == TOKEN_KEYS
    assert set(out["context_share"]) == SHARE_KEYS and set(out["saving_over_time"]) == OVER_TIME_KEYS
    assert all(set(row) == ROW_KEYS for key in ("by_model", "by_tenant", "by_agent") for row in out[key].values())
    assert all(set(p) == POINT_KEYS for p in out["saving_over_time"]["all"])
    assert set(out["tool_tokens"]) == {"before", "after", "wire", "saved", "saved_pct", "estimated_usd", "usd_per_mtok"}
    assert out["money"]["saved_usd"] == 0.5 and out["sources"] == [str(log)]
    assert out == json.loads(json.dumps(report.summary(aggregate(lines), [log], report.Filters(), 3.0)))


@pytest.mark.parametrize("count", [0, 1, 2])
def test_json_with_zero_one_or_two_records(tmp_path, capsys, count):
    lines = [new(T0 + i * 60, model="m", tenant="t1", agent="codex", usage=(100, 50, 0, 10), cost_usd=0.5,
                 cost_usd_without=1.5, context_share=0.5) for i in range(count)]
    assert report.main([str(write(tmp_path, lines)), "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records"] == count
    if count == 0:
        assert out["money"]["spent_usd"] is None and out["saving_over_time"]["all"] == []
        assert out["first"] is None and out["context_share"]["max"] is None
    else:
        assert out["money"] == {"spent_usd": 0.5 * count, "without_usd": 1.5 * count, "saved_usd": 1.0 * count,
                                "saved_pct": 66.67, "priced_turns": count, "unpriced_turns": 0, "unpriced_models": {}}
        assert out["saving_over_time"]["all"] == [{"start": "2026-05-28T09:00", "saved_usd": 1.0 * count,
                                                   "cumulative_usd": 1.0 * count}]
        assert out["context_share"] == {"turns": count, "median": 0.5, "p95": 0.5, "max": 0.5, "above": count,
                                        "threshold": 0.25}


def run_page(tmp_path: Path, lines: list[str], monkeypatch) -> tuple[str, list[Any]]:
    """The page's text and the figures its plots drew (kept as matplotlib closes them)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn: list[Any] = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (drawn.append(fig), real_close(fig)))
    out = tmp_path / "r.html"
    assert report.main([str(write(tmp_path, lines)), "-o", str(out), "--quiet"]) == 0
    return out.read_text(), drawn


def time_spans(figs: list[Any]) -> list[float]:
    """The x span, in days, of every date axis drawn."""
    import matplotlib.dates as mdates

    return [ax.get_xlim()[1] - ax.get_xlim()[0] for fig in figs for ax in fig.axes
            if isinstance(ax.xaxis.get_major_formatter(), mdates.ConciseDateFormatter)]


def test_no_record_no_chart_but_none(tmp_path, monkeypatch):
    text, drawn = run_page(tmp_path, [], monkeypatch)
    assert drawn == [] and "<img" not in text and not list((tmp_path / "r_png").iterdir())
    for title in report.PLOTS.values():
        assert f"{html.escape(title)}: none" in text
    assert "Spent: none (no turn carries a cost)." in text and "0 record(s)" in text


@pytest.mark.parametrize("count", [1, 2])
def test_one_or_two_records_draw_on_their_own_time_range(tmp_path, monkeypatch, count):
    lines = [new(T0 + i * 600, model="m", tenant="t1", agent="codex", usage=(100, 50, 0, 10), cost_usd=0.5,
                 cost_usd_without=1.5, context_share=0.2) for i in range(count)]
    text, drawn = run_page(tmp_path, lines, monkeypatch)
    pngs = {p.name for p in (tmp_path / "r_png").iterdir()}
    assert {"saving_by_tenant.png", "saving_by_agent.png", "tokens_by_type.png", "context_share.png",
            "tokens_over_time.png", "cumulative_saved.png"} <= pngs
    assert text.count("src='data:image/png;base64,") == len(pngs)
    spans = time_spans(drawn)
    assert len(spans) == 4 and all(0 < span <= 1 / 24 + 1e-9 for span in spans)  # an hour at most: never years
    assert {1: "Spent <b>$0.5000</b>; without the proxy <b>$1.5000</b>; saved <b>$1.0000</b> (66.7%)",
            2: "Spent <b>$1.00</b>; without the proxy <b>$3.00</b>; saved <b>$2.00</b> (66.7%)"}[count] in text


def test_the_page_leads_with_money(tmp_path, monkeypatch):
    text, _ = run_page(tmp_path, mixed(), monkeypatch)
    lead = text.split("<h2>Tool tokens (estimated)</h2>")[0]
    assert "<h2>Money</h2>" in lead and "<h2>Per API</h2>" not in lead
    assert "Spent <b>$0.8750</b>; without the proxy <b>$1.3750</b>; saved <b>$0.5000</b> (36.4%)" in lead
    assert "2 turns of models with no price: model-a, model-b." in lead
    assert "Caching included: 6,500 cache-read tokens (54.0% of input tokens), 2,000 cache-write tokens (16.6%)" in lead
    assert "2 record(s) carry no money fields" in lead and "1 turn(s) reported no usage" in lead
    assert "<td>3</td><td>30.0%</td><td>39.0%</td><td>40.0%</td><td>2</td>" in lead  # median p95 max, above 0.25
    assert "<th>turns above 0.25</th>" in lead
    for name in ("saving_by_tenant.png", "saving_by_agent.png", "tokens_by_type.png", "context_share.png"):
        assert f"alt='{name}'" in lead
    assert "<h2>Per API</h2>" in text and "<h2>Per strategy</h2>" in text  # the sections before money still there


def test_a_plot_of_an_earlier_run_is_removed(tmp_path, monkeypatch):
    run_page(tmp_path, mixed(), monkeypatch)
    assert (tmp_path / "r_png" / "saving_by_tenant.png").exists()
    run_page(tmp_path, [old(T0)], monkeypatch)
    assert not (tmp_path / "r_png" / "saving_by_tenant.png").exists()


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["report", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: tooldisco report")
    for option in ("FILE.jsonl", "--output", "--json", "--since", "--until", "--session", "--tenant", "--agent",
                   "--api", "--strategy", "--usd-per-mtok", "--quiet", "--selector", "--help"):
        assert option in text


def test_help_names_every_option_the_parser_knows(monkeypatch, capsys):
    caught: list[Any] = []

    def grab(parser: Any, *args: Any, **kwargs: Any) -> None:
        caught.append(parser)
        raise SystemExit(0)

    monkeypatch.setattr(report.argparse.ArgumentParser, "parse_args", grab)
    with pytest.raises(SystemExit):
        report.main([])
    [parser] = caught
    text = parser.format_help()
    assert all(any(s in text for s in (a.option_strings or [a.metavar])) for a in parser._actions)


def test_selector_as_first_argument_from_the_page_too(tmp_path, capsys):
    assert report.main(["--selector", str(write(tmp_path, []))]) == 0
    assert "No api-strategy records found." in capsys.readouterr().out
    with pytest.raises(SystemExit):
        report.main([str(write(tmp_path, [])), "--selector"])
    assert "--selector must come first" in capsys.readouterr().err


def test_json_reads_without_tqdm_too(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    assert report.main([str(write(tmp_path, mixed())), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["money"]["spent_usd"] == 0.875 and captured.err == ""
