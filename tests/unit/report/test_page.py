"""The report page: streaming aggregates, filters, the page and its PNGs, on records written
with the engine's own record types."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from tooldisco.engine.telemetry import Record, SearchRecord
from tooldisco.report import page as report

ROOT = Path(__file__).resolve().parents[3]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = _load("report_bench")
T0 = 1_780_000_000.0


def line(record: Record, when: float = T0) -> str:
    record.time = when
    return json.dumps(asdict(record))


def test_a_sample_is_exact_until_full_then_bounded_and_uniform():
    s = report.Sample(size=100)
    for v in range(50):
        s.append(float(v))
    assert list(s) == [float(v) for v in range(50)] and report.percentiles(s)[50] == pytest.approx(24.5)
    for v in range(50, 100_000):
        s.append(float(v))
    assert len(s) == 100 and s.seen == 100_000
    assert 30_000 < report.percentiles(s)[50] < 70_000  # a uniform sample of 0..99,999


def test_the_timeline_stays_bounded_and_keeps_every_sum():
    t = report.Timeline(width=1.0, most=16)
    for i in range(10_000):
        t.add(T0 + (i * 7919) % 10_000, "anthropic" if i % 2 else "gemini", 100, 40)  # out of order
    assert len(t.buckets) <= 16
    series = t.ordered()
    assert sum(b.requests for _, b in series) == 10_000
    assert sum(b.saved["anthropic"] + b.saved["gemini"] for _, b in series) == 10_000 * 60
    assert [when for when, _ in series] == sorted(when for when, _ in series)


def test_filters_by_time_session_api_and_strategy():
    agg = report.Aggregate()
    records = [
        line(Record("anthropic", "tool-search", session="aaaa1111"), T0),
        line(Record("gemini", "tool-search", session="aaaa2222"), T0 + 10),
        line(Record("anthropic", "relevance", session="bbbb1111"), T0 + 20),
        line(Record("anthropic", "tool-search", session="aaaa3333"), T0 + 30),
        "not json", "[1]",
    ]
    f = report.Filters(since=T0 + 5, until=T0 + 30, sessions=("aaaa", "bbbb"), apis=("anthropic", "gemini"),
                       strategies=("tool-search",))
    for text in records:
        agg.line(text, f)
    assert (agg.records, agg.filtered, agg.malformed) == (1, 3, 2)
    assert list(agg.apis) == ["gemini"]
    assert "session aaaa, bbbb" in f.describe()


def test_what_a_record_adds():
    agg = report.Aggregate()
    searched = Record("anthropic", "tool-search", total_tools=60, tool_tokens_before=4000, tool_tokens_after=300,
                      loops=2, loop_added_ms=3.0, processing_ms=2.0,
                      searches=[SearchRecord("q", ["a"], "bm25", latency_ms=1.5), SearchRecord("r", ["b"], "bm25", latency_ms=2.5)])
    fell = Record("openai_chat", "tool-search", fallback_reason="unsupported: body is not UTF-8 at byte 3")
    selector = Record("anthropic", "api", searches=[SearchRecord("q", ["a"], "api", latency_ms=9, api_status=200, api_ms=8)],
                      loops=1, loop_added_ms=1.0)
    for r in (searched, fell, selector):
        agg.line(line(r), report.Filters())
    assert agg.apis["anthropic"].before - agg.apis["anthropic"].after == 3700
    assert agg.searches_per_turn["tool-search"] == {2: 1, 0: 1} and agg.searches_per_turn["api"] == {1: 1}
    assert agg.fallbacks == {"unsupported": {"tool-search": 1}}  # counted by the reason's head
    assert sorted(agg.search_ms) == ["api", "bm25"] and list(agg.search_ms["bm25"]) == [1.5, 2.5]
    assert agg.api.records == 1 and agg.api.successes == 1  # report_api's metrics, on the same stream


def test_fallback_reasons_are_bounded():
    agg = report.Aggregate()
    for i in range(report.MAX_REASONS + 10):
        agg.line(line(Record("gemini", "relevance", fallback_reason=f"reason{i}")), report.Filters())
    assert len(agg.fallbacks) == report.MAX_REASONS + 1 and sum(agg.fallbacks["other"].values()) == 10


def test_the_page_embeds_every_plot_and_writes_the_pngs(tmp_path):
    log = tmp_path / "t.jsonl"
    bench.write(log, 3000)
    out = tmp_path / "r.html"
    assert report.main([str(log), "-o", str(out), "--quiet", "--strategy", "tool-search", "--strategy", "api"]) == 0
    text = out.read_text()
    pngs = sorted((tmp_path / "r_png").iterdir())
    assert [p.name for p in pngs] == sorted(["tokens_over_time.png", "cumulative_saved.png", "search_latency.png",
                                             "searches_per_turn.png", "fallbacks.png", "per_api_strategy.png"])
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    assert text.count("src='data:image/png;base64,") == 6
    assert "strategy tool-search, api" in text and "<h2>Per API</h2>" in text and "<th>p99</th>" in text
    assert "api strategy report" in text and "Selector success" in text  # report_api's tables
    assert "relevance" not in text.split("<h2>Per strategy</h2>")[1].split("</table>")[0]


def test_a_missing_file_is_an_error(tmp_path, capsys):
    assert report.main([str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "r.html"), "--quiet"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_without_the_report_extra_one_line_names_it(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(report.importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert report.main([str(tmp_path / "t.jsonl"), "-o", str(tmp_path / "r.html")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "matplotlib" in err and "pip install 'tooldisco[report]'" in err


def test_it_counts_whether_searches_landed():
    """First search returned the called tool; a miss then a landing search; a miss never mended;
    a turn that called nothing (not counted)."""
    agg = report.Aggregate()
    turns = [
        ([SearchRecord("a", ["x", "y"], "bm25")], ["x"]),
        ([SearchRecord("b", ["q"], "bm25"), SearchRecord("x", ["x"], "bm25")], ["x"]),
        ([SearchRecord("c", ["q"], "bm25"), SearchRecord("d", ["r"], "bm25")], ["x"]),
        ([SearchRecord("e", ["x"], "bm25")], []),
    ]
    for searches, called in turns:
        agg.line(line(Record("anthropic", "tool-search", searches=searches, called=called)), report.Filters())
    assert dict(agg.landing) == {"turns": 3, "first": 1, "again": 2, "again_landed": 1}
    assert "Did searches land" in report.page(agg, {}, [], report.Filters(), 3.0)


@pytest.mark.parametrize("count", [1, 2])
def test_one_or_two_records_draw_sane_plots(tmp_path, monkeypatch, count):
    """A first look (the demo's one turn, a wrap of one or two requests): the cumulative plot
    draws a line from 0, the tokens axes start at 0, and every time axis spans minutes around the
    records, never years."""
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    records = [{"id": f"{i:012x}", "time": T0 + 5 * i, "provider": "anthropic", "strategy": "tool-search",
                "total_tools": 33, "kept_tools": 1, "tool_tokens_before": 1500, "tool_tokens_after": 120,
                "tool_tokens_wire": 120, "model": "claude-sonnet-4-5", "usage": {"input_tokens": 1000},
                "cost_usd": 0.003, "cost_usd_without": 0.0075, "tenant": "abc", "agent": "claude-code"}
               for i in range(count)]
    log = tmp_path / "t.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    figures = {}
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figures.setdefault(fig.axes[0].get_title(), fig), close(fig)))
    agg = report.read([log], report.Filters(), progress=False)
    images = report.plots(agg, 3.0)
    assert {"cumulative_saved.png", "tokens_over_time.png", "saving_by_tenant.png"} <= set(images)
    for title, fig in figures.items():
        ax = fig.axes[0]
        if ax.xaxis.get_major_formatter().__class__.__name__ != "ConciseDateFormatter":
            continue
        lo, hi = (mdates.num2date(x) for x in ax.get_xlim())
        assert (hi - lo).total_seconds() <= 2 * 86400, (title, lo, hi)  # not 2025-2029 around one point
    cumulative = figures["Cumulative tool tokens saved (estimated)"].axes[0]
    total = next(line for line in cumulative.get_lines() if line.get_label() == "all APIs")
    assert list(total.get_ydata()) == [0] + [1380 * (i + 1) for i in range(count)]  # a line, from 0
    assert cumulative.get_ylim()[0] == 0 and cumulative.get_ylim()[1] > 1380 * count
    [per_request] = [fig for title, fig in figures.items() if title.startswith("Tool tokens per request")]
    assert per_request.axes[0].get_ylim()[0] == 0
