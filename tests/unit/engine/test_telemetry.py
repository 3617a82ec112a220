"""The telemetry sink writes every record, whatever text the model put in it."""

from __future__ import annotations

import json

from loguru import logger

from tooldisco.engine.telemetry import Record, SearchRecord, TelemetrySink


def _written(sink: TelemetrySink) -> list[dict]:
    sink.flush()
    assert sink._path is not None
    return [json.loads(line) for line in sink._path.read_text(encoding="ascii").splitlines()]


def test_a_lone_surrogate_in_a_query_is_written_escaped(tmp_path):
    sink = TelemetrySink(tmp_path / "t.jsonl")
    try:
        sink.submit(Record(provider="anthropic", strategy="tool-search",
                           searches=[SearchRecord(query="payroll \ud800 export", matched=["b\u00e9"], backend="bm25")]))
        sink.submit(Record(provider="anthropic", strategy="tool-search"))
        records = _written(sink)
    finally:
        sink.close()
    assert len(records) == 2 and sink.dropped == 0
    assert records[0]["searches"][0]["query"] == "payroll \ud800 export"
    assert records[0]["searches"][0]["matched"] == ["b\u00e9"]


def test_a_record_that_cannot_be_written_is_logged(tmp_path):
    target = tmp_path / "t.jsonl"
    target.mkdir()  # a directory where the file should be: every write fails
    sink = TelemetrySink(target)
    warnings: list[str] = []
    handle = logger.add(warnings.append, level="WARNING", format="{message}")
    try:
        sink.submit(Record(provider="openai-chat", strategy="relevance"))
        sink.flush()
    finally:
        logger.remove(handle)
        sink.close()
    assert sink.dropped == 1
    assert any("telemetry record dropped" in w for w in warnings)
