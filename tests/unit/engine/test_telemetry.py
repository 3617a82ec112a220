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


def test_a_rotated_file_gets_the_next_records(tmp_path):
    """The writer keeps its file open between batches; once the path names another file (moved
    away by a rotation, or removed), the next batch goes to a new file at the path."""
    target = tmp_path / "t.jsonl"
    sink = TelemetrySink(target)
    try:
        sink.submit(Record(provider="anthropic", strategy="tool-search", session="before"))
        sink.flush()
        target.rename(tmp_path / "t.jsonl.1")
        sink.submit(Record(provider="anthropic", strategy="tool-search", session="after"))
        after = _written(sink)
        target.unlink()
        sink.submit(Record(provider="anthropic", strategy="tool-search", session="removed"))
        again = _written(sink)
    finally:
        sink.close()
    assert [r["session"] for r in after] == ["after"] and [r["session"] for r in again] == ["removed"]
    assert [json.loads(line)["session"] for line in (tmp_path / "t.jsonl.1").read_text().splitlines()] == ["before"]
    assert target.stat().st_mode & 0o777 == 0o600


def test_records_queued_together_are_all_written_and_the_last_ones_at_close(tmp_path):
    sink = TelemetrySink(tmp_path / "t.jsonl")
    for i in range(500):
        sink.submit(Record(provider="openai-chat", strategy="relevance", loops=i))
    sink.close()  # what is still queued is written before the writer ends
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert [json.loads(line)["loops"] for line in lines] == list(range(500))
