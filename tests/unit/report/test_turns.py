"""The report per turn, per mode and in words: the three token counts split by mode, how turns
ended, the latest turns one by one with the figures mitmdump's line and mitmweb's comment print
(``watch.summary``, from the same record) and the id that finds them, the sessions, the times,
and the glossary of docs/watching.md."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from tooldisco.engine.telemetry import Record, SearchRecord
from tooldisco.report import page as report
from tooldisco.watch.summary import GLOSSARY, FlowSummary

T0 = 1_780_000_000.0


def native(when: float, **kw) -> Record:
    """A native turn whose model searched once: its deferred definitions on the wire, out of the prompt."""
    fields = dict(total_tools=60, kept_tools=0, deferred_tools=60, tool_tokens_before=3910, tool_tokens_after=168,
                  tool_tokens_wire=4388, deferral="native", loops=1, outcome="done", called=["get_forecast"],
                  processing_ms=2.0, upstream_ms=400.0, loop_added_ms=8.0, total_ms=415.0, session="5e55104ab1e2",
                  model="claude-sonnet-4-5", upstream=[["client", 200], ["hidden", 200]],
                  searches=[SearchRecord("weather", ["get_forecast", "get_current"], "bm25", latency_ms=1.2)])
    return Record("anthropic", "tool-search", time=when, **(fields | kw))


def passed(when: float, **kw) -> Record:
    fields = dict(total_tools=3, kept_tools=3, tool_tokens_before=300, tool_tokens_after=300, tool_tokens_wire=300,
                  fallback_reason="below_threshold", processing_ms=0.5, upstream_ms=18.0, total_ms=19.0,
                  session="0b1c2d3e4f50", upstream=[["client", 200]])
    return Record("openai_chat", "tool-search", time=when, **(fields | kw))


def figures(records: list[Record], turns: int = report.TURNS, filters: report.Filters | None = None) -> dict:
    agg = report.Aggregate(turns)
    for r in records:
        agg.line(json.dumps(asdict(r)), filters or report.Filters())
    return json.loads(json.dumps(report.summary(agg, [Path("t.jsonl")], filters or report.Filters(), 3.0)))


def test_the_three_token_counts_split_by_mode():
    f = figures([native(T0), native(T0 + 1), passed(T0 + 2),
                 Record("gemini", "relevance", time=T0 + 3, total_tools=40, kept_tools=12, deferred_tools=28,
                        tool_tokens_before=4000, tool_tokens_after=1200, tool_tokens_wire=1200)])
    assert list(f["by_mode"]) == ["native", "relevance", "passed through"]
    assert f["by_mode"]["native"] == {
        "turns": 2, "tools": {"sent": 120, "loaded": 0, "deferred": 120},
        "tokens": {"sent": 7820, "wire": 8776, "prompt": 336, "saved": 7484, "saved_pct": 95.7},
        "searches": 2, "hits": 4}
    assert f["by_mode"]["passed through"]["tokens"] == {"sent": 300, "wire": 300, "prompt": 300, "saved": 0,
                                                        "saved_pct": 0.0}
    assert f["tool_tokens"]["wire"] == 8776 + 300 + 1200 and f["tool_tokens"]["after"] == 336 + 300 + 1200


def test_each_turn_is_listed_with_the_figures_of_its_flow_line_and_comment():
    records = [native(T0), passed(T0 + 5)]
    f = figures(records)
    assert [t["id"] for t in f["turns"]] == [records[1].id, records[0].id]  # the latest first
    row, said = f["turns"][1], FlowSummary.of(asdict(records[0]))
    assert row["tokens"] == {"sent": said.tokens_sent, "wire": said.tokens_wire, "prompt": said.tokens_prompt,
                             "saved": said.saved} == {"sent": 3910, "wire": 4388, "prompt": 168, "saved": 3742}
    assert (row["searches"], row["hits"], row["found"], row["rounds"], row["search_rounds"]) == (1, 2, 2, 2, 1)
    assert row["result"] == said.result == "answered after 1 search" and row["mode"] == "native"
    assert row["called"] == ["get_forecast"] and row["model"] == "claude-sonnet-4-5"
    assert row["ms"] == {"planning": 2.0, "upstream": 400.0, "answering": 8.0, "proxy": 10.0, "total": 415.0}
    assert f"id {row['id']}" in said.comment() and f"id {row['id']}" in said.line("x")  # how mitmweb finds it
    assert f["turns"][0]["result"] == "passed through: tool definitions below the deferral threshold"
    assert f["turns"][0]["ms"]["upstream"] == 18.0  # measured, not 0.0


def test_the_latest_turns_only_in_bounded_memory_whatever_the_order():
    records = [native(T0 + (i * 37) % 100) for i in range(100)]
    f = figures(records, turns=5)
    assert [t["time"] for t in f["turns"]] == [report._when(T0 + t) for t in (99, 98, 97, 96, 95)]
    assert figures(records, turns=0)["turns"] == []


def test_the_id_filter_names_turns():
    records = [native(T0), native(T0 + 1), passed(T0 + 2)]
    f = figures(records, filters=report.Filters(ids=(records[1].id[:6],)))
    assert f["records"] == 1 and [t["id"] for t in f["turns"]] == [records[1].id]


def test_how_turns_ended_in_words():
    f = figures([native(T0), native(T0 + 1), passed(T0 + 2), passed(T0 + 3, upstream=[["client", 529]]),
                 native(T0 + 4, outcome="error: KeyError"), native(T0 + 5, outcome="upstream_500", searches=[]),
                 passed(T0 + 6, fallback_reason="client_defers: search tool ToolSearch")])
    results = {r["result"]: r["turns"] for r in f["results"]}
    assert results == {
        "answered after one or more searches": 2,
        "passed through: tool definitions below the deferral threshold": 1,
        "passed through: tool definitions below the deferral threshold; the upstream answered 529, passed on": 1,
        "the proxy's own error: failed open": 1,
        "the upstream answered 500, passed on": 1,
        "passed through: the client defers its tools itself": 1,
    }
    assert f["results"][0] == {"result": "answered after one or more searches", "passed_through": False,
                               "outcome": "done", "fallback_reason": None, "status": None, "turns": 2}
    assert f["fallbacks"] == {"below_threshold": {"words": "tool definitions below the deferral threshold", "turns": 2},
                              "client_defers": {"words": "the client defers its tools itself", "turns": 1}}


def test_sessions_and_times():
    records = [native(T0), native(T0 + 60), passed(T0 + 30)]
    f = figures(records)
    assert f["sessions"][0] == {"session": "5e55104ab1e2", "turns": 2, "first": report._when(T0),
                                "last": report._when(T0 + 60), "searches": 2, "saved": 2 * 3742,
                                "last_id": records[1].id}
    assert f["timing"]["upstream"]["turns"] == 3 and f["timing"]["upstream"]["p50"] == 400.0
    assert f["timing"]["answering"]["turns"] == 2 and f["timing"]["proxy"]["p50"] == 10.0
    # A record written before a time was measured is not counted as 0.
    old = figures([Record("anthropic", "tool-search", time=T0)])
    assert all(t["turns"] == 0 for m, t in old["timing"].items() if m != "planning")


def test_the_page_lists_turns_explains_its_words_and_says_none(tmp_path):
    log, out = tmp_path / "t.jsonl", tmp_path / "r.html"
    records = [native(T0), passed(T0 + 5, fallback_reason=None)]  # nothing to defer: no fallback
    log.write_text("".join(json.dumps(asdict(r)) + "\n" for r in records))
    assert report.main([str(log), "-o", str(out), "--quiet"]) == 0
    text = out.read_text()
    for r in records:
        assert f"<td>{r.id}</td>" in text
    assert "<td>1 → 2</td>" in text and "<td>answered after 1 search</td>" in text
    assert "<th>on the wire</th>" in text and "forwarded" not in text and "loop added" not in text
    assert "processing (planner)" not in text and "<td>planning</td>" in text
    assert "<h2 id='words'>Words</h2>" in text and "<td>no_phantom</td><td>answered without a search</td>" in text
    for term, _meaning in GLOSSARY:
        assert f"<td>{term}</td>" in text
    assert "~comment ID" in text
    # Nothing fell back: the plot and the table say none, no empty chart.
    assert "Fallbacks by reason: none" in text and not (tmp_path / "r_png" / "fallbacks.png").exists()


@pytest.mark.parametrize("turns", ["-1", "0", "3"])
def test_turns_option(tmp_path, capsys, turns):
    log = tmp_path / "t.jsonl"
    log.write_text("".join(json.dumps(asdict(native(T0 + i))) + "\n" for i in range(5)))
    assert report.main([str(log), "--json", "--quiet", "--turns", turns]) == 0
    assert len(json.loads(capsys.readouterr().out)["turns"]) == max(int(turns), 0)
