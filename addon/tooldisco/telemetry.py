"""One JSON line per processed request, for observability and the reports in scripts/.

Why a plain JSONL file: it can be tailed while debugging an agent and read by any
tool afterwards. Records carry no headers and no credentials, by construction.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def estimate_tokens(text: str) -> int:
    """About four characters a token: good enough to compare before and after."""
    return (len(text) + 3) // 4


@dataclass
class SearchRecord:
    """One answered phantom search (seed 001 observability: per search)."""

    query: str | None
    matched: list[str]  # tools injected for the model
    backend: str | None  # regex / bm25 / hybrid / fuzzy / api
    fallback: str | None = None  # why the asked-for backend did not answer as asked
    latency_ms: float = 0.0  # the whole search, API call included
    error: str | None = None  # the error the model read, for bad arguments
    deferred: int = 0  # size of the catalog searched
    api_status: int | None = None  # api: HTTP status of the selector (None: no answer)
    api_ms: float | None = None  # api: the selector call alone
    selected: list[str] | None = None  # api: names as the selector returned them


@dataclass
class Record:
    provider: str
    strategy: str
    session: str = ""
    time: float = field(default_factory=time.time)
    total_tools: int = 0
    kept_tools: int = 0
    deferred_tools: int = 0
    tool_tokens_before: int = 0
    tool_tokens_after: int = 0
    processing_ms: float = 0.0
    fallback_reason: str | None = None
    stream: bool = False
    searches: list[SearchRecord] = field(default_factory=list)
    loops: int = 0
    loop_added_ms: float = 0.0  # our own time in the phantom loop, upstream time excluded
    upstream_ms: float = 0.0
    outcome: str | None = None
    rollout: str | None = None  # api: dark / shadow / partial / full, and whether this session was in
    shadow: dict[str, Any] | None = None  # api dark/shadow: what the selector chose, overlap with relevance


class TelemetrySink:
    def __init__(self, path: str | Path | None):
        self._path = Path(path) if path else None
        self._lock = threading.Lock()
        if self._path:
            self._path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: Record) -> None:
        if not self._path:
            return
        line = json.dumps(asdict(record), ensure_ascii=False, separators=(",", ":"))
        with self._lock, self._path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
