"""One JSON line per processed request, for observability and the reports in scripts/.

Why a plain JSONL file: it can be tailed while debugging an agent and read by any
tool afterwards. Records carry no headers and no credentials, by construction.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from loguru import logger

from tooldisco.core.private import private_dir


@dataclass
class SearchRecord:
    """One answered phantom search: what was asked, what was loaded, by which backend, how fast."""

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
    tool_tokens_before: int = 0  # estimated tokens of the tool definitions the client sent
    tool_tokens_after: int = 0  # of those the model reads in its prompt (first round)
    # on the wire upstream (first round): more than ``tool_tokens_after`` under native deferral,
    # whose deferred definitions go upstream but stay out of the prompt until a search loads them
    tool_tokens_wire: int = 0
    client_deferred: int = 0  # tools the client sent deferred itself (its own ``defer_loading``)
    processing_ms: float = 0.0
    fallback_reason: str | None = None
    stream: bool = False
    # A live stream's bytes: "untouched" (the upstream's as they came; a Responses object's echo
    # of the client's own tools aside), "changed" (stitched, or a hidden call taken out) or
    # "unhandled" (the proxy could not follow it and ended it with the API's error). None: no stream.
    passage: str | None = None
    searches: list[SearchRecord] = field(default_factory=list)
    loops: int = 0
    restored: int = 0  # stitched messages of the client's history replaced by their real rounds
    loop_added_ms: float = 0.0  # our own time in the phantom loop, upstream time excluded
    upstream_ms: float = 0.0  # from sending each upstream request to its answer's last byte, summed
    outcome: str | None = None
    rollout: str | None = None  # api: dark / shadow / partial / full, and whether this session was in
    shadow: dict[str, Any] | None = None  # api dark/shadow: what the selector chose, overlap with relevance
    deferral: str | None = None  # tool-search / api: "native" (loaded inline), "call-through" or "classic"
    dispatched: list[str] = field(default_factory=list)  # call-through: tools called through the dispatcher
    refused_calls: int = 0  # call-through: dispatcher calls naming no tool, answered with an error
    called: list[str] = field(default_factory=list)  # tools the model called in the answer the client got
    model: str | None = None  # the model the client asked for
    tenant: str = ""  # a hash prefix of the tenant's credential (never the credential)
    agent: str = ""  # the client's family, from its user agent (``policy.agents``): claude-code, codex, ...
    # The providers' own usage summed over every upstream answer of the turn (hidden rounds
    # included): {input (uncached), cache_read, cache_write, output}; None: none reported one.
    usage: dict[str, int] | None = None
    usage_unreported: int = 0  # upstream answers of the turn that carried no usage
    upstream: list[list[Any]] = field(default_factory=list)  # per upstream answer: [kind "client"|"hidden", status]
    cost_usd: float | None = None  # the usage priced (``prices``); None: the model has no price
    cost_usd_without: float | None = None  # the same turn priced as if the client's own request had gone out
    context_window: int | None = None  # the model's context window (tokens), when known
    context_share: float | None = None  # the client's tool definitions as a share of that window
    # From the start of planning to the turn's last byte (a live stream's: as passed to the client,
    # its reading included); 0: not measured (a record closed before its answer).
    total_ms: float = 0.0
    # The policy (``engine.governance``): tools it denied this request, the client entry that
    # matched ("policy.clients[i]"; None: the defaults), tools held for review (by name),
    # definitions that changed or are new for the tenant ({tool, kind, what, was?, fingerprint})
    # and screening findings ({tool, kind, where, detail}): each reported in the request that showed it.
    denied_tools: int = 0
    policy: str | None = None
    held_tools: list[str] = field(default_factory=list)
    tool_changes: list[dict[str, Any]] = field(default_factory=list)
    tool_findings: list[dict[str, Any]] = field(default_factory=list)
    # The turn's short, stable id: the same in mitmdump's line, mitmweb's comment and the report.
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


class TelemetrySink:
    """Appends records from a writer thread: a slow disk never stalls the proxy's event loop.

    The file is created 0600 in a 0700 directory it creates: records name tools and
    sessions, which are the user's business. When the queue is full a record is dropped
    and counted rather than waited for. A dropped record is always said in the log (at
    most once per ``WARN_EVERY`` seconds, with the running count): a gap in the file must
    not look like a quiet period."""

    QUEUE = 10_000
    WARN_EVERY = 60.0
    BATCH_S = 0.05

    def __init__(self, path: str | Path | None, observers: Sequence[Callable[[Record], None]] = ()):
        self._path = Path(path) if path else None
        # Called with every record submitted, on the submitter's thread, file or no file
        # (``engine.metrics``): they must be quick and must not raise.
        self.observers = tuple(observers)
        self._queue: queue.Queue[Record | None] = queue.Queue(self.QUEUE)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0
        self._warned = -self.WARN_EVERY
        if self._path:
            private_dir(self._path.parent)

    def submit(self, record: Record) -> None:
        """Queue one record; never blocks."""
        for observe in self.observers:
            observe(record)
        if not self._path:
            return
        self._start()
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self._drop("the telemetry queue is full")

    def flush(self) -> None:
        """Wait until every queued record is written (tests, shutdown)."""
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)
            self._thread = None

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tooldisco-telemetry", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        """Write what is queued, a batch at a time, then rest ``BATCH_S``: records queued
        meanwhile wait for the next batch, so a busy proxy wakes this thread a few times a
        second, not once per flow. The file stays open between batches and is opened again
        when its path no longer names it (rotated, removed)."""
        assert self._path is not None
        fd: int | None = None
        try:
            while True:
                batch = [self._queue.get()]
                while True:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                records = [r for r in batch if r is not None]
                try:
                    if records:
                        fd = self._write(fd, "".join(map(encode, records)).encode("ascii"))
                except Exception as e:  # a full disk or a removed directory must not kill the writer
                    _closed(fd)
                    fd = None
                    for _ in records:
                        self._drop(f"cannot write to {self._path}: {type(e).__name__}: {e}")
                finally:
                    for _ in batch:
                        self._queue.task_done()
                if len(records) < len(batch):
                    return
                time.sleep(self.BATCH_S)
        finally:
            _closed(fd)

    def _write(self, fd: int | None, data: bytes) -> int:
        """``data`` appended to the file (opened or opened again); the descriptor to keep."""
        assert self._path is not None
        if fd is not None:
            try:
                same = os.path.samestat(os.stat(self._path), os.fstat(fd))
            except OSError:
                same = False
            if not same:
                _closed(fd)
                fd = None
        if fd is None:
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        return fd

    def _drop(self, why: str) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._warned >= self.WARN_EVERY:
            self._warned = now
            logger.warning("telemetry record dropped ({}); {} dropped so far", why, self.dropped)


def encode(record: Record) -> str:
    """One record as a JSON line, all ASCII: text the model wrote (a search query) may hold
    a lone surrogate, which no UTF-8 file can take but a JSON ``\\uXXXX`` escape carries
    (RFC 8259 §7); an unexpected value type is written as its ``str``, not lost."""
    return json.dumps(vars(record), ensure_ascii=True, separators=(",", ":"), default=_plain) + "\n"


def _plain(value: Any) -> Any:
    """A nested record (a search) as its fields, anything else JSON lacks as its ``str``: the
    record's own fields are encoded as they are, not deep-copied first (``asdict``)."""
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else str(value)


def _closed(fd: int | None) -> None:
    """Close ``fd`` if open, quietly."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
