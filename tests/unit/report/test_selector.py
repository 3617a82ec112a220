"""The selector report on a synthetic telemetry log written with the real record types."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tooldisco.engine.telemetry import Record, SearchRecord
from tooldisco.report import selector as report

ROOT = Path(__file__).resolve().parents[3]


T0 = 1_780_000_000.0
DEFERRED = [f"tool_{i}" for i in range(10)]


def api_search(matched: list[str], *, status: int | None = 200, fallback: str | None = None,
               api_ms: float | None = 20.0, **kw: Any) -> SearchRecord:
    return SearchRecord(query="q", matched=matched, backend="api", fallback=fallback, latency_ms=(api_ms or 0) + 1,
                        deferred=len(DEFERRED), api_status=status, api_ms=api_ms, selected=kw.pop("selected", None), **kw)


def line(record: Record, time: float = T0) -> str:
    record.time = time
    return json.dumps(asdict(record))


def log_lines() -> list[str]:
    return [
        line(Record("anthropic", "api", searches=[
            api_search(["tool_1", "tool_2", "tool_3"]),
            api_search(DEFERRED, fallback="empty_selection", selected=[]),
            api_search(DEFERRED, status=None, fallback="timeout", api_ms=2000.0),
        ], loops=3, loop_added_ms=30.0, rollout="full")),
        line(Record("openai", "api", searches=[
            api_search(DEFERRED, status=503, fallback="http_503", api_ms=5.0),
            api_search(["tool_4", "tool_5"], api_ms=40.0),
            api_search(DEFERRED, fallback="unknown_names", selected=["nope"], api_ms=10.0),
        ], loops=2, loop_added_ms=12.0, rollout="full")),
        line(Record("gemini", "api", fallback_reason="no_endpoint", searches=[
            api_search(DEFERRED, status=None, fallback="no_endpoint", api_ms=None),
            # bad arguments: answered by the proxy, never sent to the selector
            api_search([], status=None, api_ms=None, error="The query is empty."),
            SearchRecord(query="x", matched=["a"], backend="bm25"),
        ], loops=1, loop_added_ms=2.0)),
        "this is not json",
        "[1, 2, 3]",
        "",
        line(Record("anthropic", "relevance", searches=[api_search(["tool_1"])], loops=1, loop_added_ms=999.0)),
        line(Record("anthropic", "api", rollout="shadow",
                    shadow={"selected": ["a", "b"], "relevance_kept": ["b", "c"], "overlap": 0.5})),
        line(Record("anthropic", "api", rollout="dark", shadow={"selected": ["a"], "relevance_kept": ["a"]})),
        line(Record("anthropic", "api", searches=[api_search(["old"])], loops=1, loop_added_ms=5.0), time=T0 - 3600),
    ]


@pytest.fixture()
def log(tmp_path: Path) -> Path:
    path = tmp_path / "tool_discovery.jsonl"
    path.write_text("\n".join(log_lines()) + "\n", encoding="utf-8")
    return path


def test_summary_counts_the_selector_metrics() -> None:
    loaded = report.load(log_lines())
    assert (loaded.lines, loaded.malformed) == (9, 2)  # the blank line is not counted
    s = report.summarize(loaded.records)
    assert s.records == 6  # the relevance record is not counted
    assert s.searches == 9 and s.selector_calls == 8  # the bad-arguments search never left the proxy
    assert s.successes == 3
    assert s.fallbacks == {"empty_selection": 1, "timeout": 1, "http_503": 1, "unknown_names": 1, "no_endpoint": 1}
    assert s.invalid_selections == 2  # empty_selection and unknown_names came with HTTP 200
    assert s.statuses == {"200": 5, "no response": 2, "503": 1}
    assert s.other_searches == {"bm25": 1}
    assert s.reinjected_ok == [3, 2, 1]
    assert s.loop_added_ms == [30.0, 12.0, 2.0, 5.0]  # records without a loop or search are left out
    assert s.record_fallbacks == {"no_endpoint": 1}
    assert s.rollouts == {"full": 2, "shadow": 1, "dark": 1}
    assert s.shadow_records == 2 and s.shadow_overlaps == [0.5, 1.0]  # logged, then Jaccard


def test_since_drops_older_records_in_epoch_or_iso_form() -> None:
    for since in (str(T0 - 60), datetime.fromtimestamp(T0 - 60).isoformat()):
        loaded = report.load(log_lines(), report.parse_since(since))
        assert loaded.before_since == 1
        assert report.summarize(loaded.records).successes == 2
    with pytest.raises(argparse.ArgumentTypeError):
        report.parse_since("last tuesday")


def test_percentiles() -> None:
    assert report.percentiles([]) == {}
    assert report.percentiles([7.0]) == {50: 7.0, 95: 7.0, 99: 7.0}
    pct = report.percentiles([float(v) for v in range(1, 101)])
    assert pct[50] == pytest.approx(50.5) and pct[95] == pytest.approx(95.05) and pct[99] == pytest.approx(99.01)


def test_the_markdown_report(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main([str(log), "--since", str(T0 - 60)]) == 0
    out = capsys.readouterr().out
    assert "9 line(s) read, 2 malformed line(s) skipped, 1 before --since; 5 api-strategy record(s)." in out
    assert "| Searches (backend api) | 8 |" in out
    assert "| Selector calls | 7 |" in out
    assert "| Selector success (HTTP 200, meaningful selection) | 2 (28.6%) |" in out
    assert "| Fail-open (all deferred tools restored) | 5 (71.4%) |" in out
    assert "| Empty/invalid selection (HTTP 200, fail-open) | 2 (28.6%) |" in out
    assert "| Avg tools reinjected per search | 6.88 |" in out  # fail-open restores all 10
    assert "| Avg tools reinjected per successful search | 2.50 |" in out
    for reason in ("empty_selection", "timeout", "http_503", "unknown_names", "no_endpoint"):
        assert f"| {reason} | 1 | 14.3% |" in out
    assert "| bm25 | 1 |" in out
    assert "| Selector API call (api_ms) | 6 |" in out
    assert "| Loop-added per request (loop_added_ms) | 3 | 12.0 |" in out
    assert "Selector p95 target of 150 ms: missed." in out  # the 2 s timeout
    assert "average overlap of selector and relevance picks: 0.750" in out


def test_an_empty_or_missing_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("garbage\n", encoding="utf-8")
    assert report.main([str(empty)]) == 0
    assert "No api-strategy records found." in capsys.readouterr().out
    assert report.main([str(tmp_path / "missing.jsonl")]) == 1
    assert "cannot read" in capsys.readouterr().err
