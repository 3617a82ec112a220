"""Follows each processed flow while it runs, then says what the addon did on it.

Every processed flow, when it ends, gets one line in the log (mitmdump's output at its default
verbosity): its ``summary.FlowSummary`` from the telemetry record, the same facts the file holds.
mitmweb and the console keep a view of the flows (the ``view`` addon); mitmdump has none, so
there the watcher keeps nothing else. With a view, a processed flow also gets:

- a comment and ``flow.metadata["tool_discovery"]`` from its telemetry record (completed by
  then: the runner closes it before the last byte leaves, live streams included), and the
  per-tool table the "Tool discovery" contentview shows (computed off the event loop);
- a marker when the proxy searched (:mag:) or fell back (:warning:);
- one flow per upstream round whenever the request was rewritten (round 1 is the request as
  forwarded: what the model saw first), marked as the proxy's own (:gear:), in the order they
  happened; the client's flow and its rounds share a tag, first in each comment
  (``rounds.tag``), which ``~comment <tag>`` filters on.

The client's flow keeps what the client sent and what it got. mitmproxy sends the request a
flow holds in its ``request`` hook, so the rewrite changes it there; once the flow ends its
request is put back to the client's own bytes and headers (taken before the rewrite), and the
rewritten one lives on round 1. A live stream is not kept by mitmproxy: the bytes the client
got are kept as they pass (up to ``rounds.LIMIT``) and become the flow's response body when
the stream ends. No ``flow.backup()``: the flow shows no edit of the person's, and Revert stays
theirs (mitmweb backs a flow up before its own edits).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from loguru import logger
from mitmproxy import ctx, http

from tooldisco.config import ToolDiscovery
from tooldisco.apis.base import Adapter
from tooldisco.core.answers import Answer
from tooldisco.engine.telemetry import Record

from tooldisco.watch import rounds, summary, tools
from tooldisco.watch.view import FLOW_KEY

MAX_WATCHED = 10_000  # flows followed at once; past it the oldest is let go (it only loses its annotations)
SEARCHED, FELL_BACK = ":mag:", ":warning:"
# The logger mitmproxy prints, which the engine's one sink feeds (``glue.redaction``): asked only
# whether a level would show, to skip building a line nobody sees.
_PRINTED = logging.getLogger("tool_discovery")


@dataclass
class _Watch:
    record: Record
    adapter: Adapter
    where: str  # the flow's method, host and path as the client asked (no query: it may hold a key)
    shown: bool  # a view shows it: the bodies and rounds are kept for it
    client_body: bytes  # decoded, as the client sent it (empty without a view)
    upstream_body: bytes | None  # as forwarded; None: the request went unchanged
    phantom: str
    rounds: list[rounds.Round] = field(default_factory=list)
    # The request as the client sent it (raw bytes, headers), put back when the flow ends; None without a view.
    sent: tuple[bytes | None, http.Headers] | None = None
    answer: rounds.Kept | None = None  # what the client got of a live stream, kept as it passed


class Watcher:
    def __init__(self, config: Callable[[], ToolDiscovery | None]) -> None:
        self._config = config
        self._flows: dict[str, _Watch] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @staticmethod
    def _view() -> Any:
        try:
            return ctx.master.addons.get("view")
        except AttributeError:  # no master (an addon driven without mitmproxy)
            return None

    def begin(self, flow: http.HTTPFlow, adapter: Adapter, client_body: bytes, upstream_body: bytes | None,
              record: Record | None, phantom: str) -> None:
        """Follow ``flow``: the engine planned it and ``record`` will say what happened. Without a
        view only the record is kept, for the flow's log line."""
        if record is None:
            return
        shown = self._view() is not None
        request = flow.request
        where = f"{request.method} {request.pretty_host}{request.path.partition('?')[0]}"
        # Before the rewrite changes the flow: the request exactly as the client sent it.
        sent = (request.raw_content, request.headers.copy()) if shown else None
        self._flows[flow.id] = _Watch(record, adapter, where, shown, client_body if shown else b"",
                                      upstream_body if shown else None, phantom, sent=sent)
        while len(self._flows) > MAX_WATCHED:
            self._flows.pop(next(iter(self._flows)))

    def forget(self, flow: http.HTTPFlow) -> None:
        """The addon failed open: the flow went as the client sent it, nothing of ours to show."""
        self._flows.pop(flow.id, None)

    def tee(self, flow_id: str, url: str, headers: Sequence[tuple[str, str]], body: bytes, started: float,
            answer: Answer, whole: bytes | None = None) -> Answer:
        """``answer`` to one of the flow's upstream rounds, recorded as it is read when the flow is
        followed; ``whole``: its body when it is known already (a buffered answer)."""
        watch = self._flows.get(flow_id)
        if watch is None or not watch.shown:
            return answer
        rnd, answer = rounds.capture(url, headers, body, started, answer, whole)
        watch.rounds.append(rnd)
        return answer

    # Hooks: the watcher is added at the end of mitmproxy's chain, so it sees each flow as it
    # ends, after every other addon (the engine's own response hook, which runs the loop, included).

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """A streamed answer (live, or passed through as a stream) is not kept by mitmproxy: what
        the client gets of it is kept as it passes, after every other addon's stream callable."""
        watch = self._flows.get(flow.id)
        if watch is None or not watch.shown or flow.response is None or not flow.response.stream:
            return
        watch.answer = rounds.Kept()
        flow.response.stream = rounds.tap(flow.response.stream, watch.answer)

    def response(self, flow: http.HTTPFlow) -> None:
        self.finish(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self.finish(flow)

    def finish(self, flow: http.HTTPFlow) -> None:
        """Say what the addon did on an ended flow: its log line; with a view, its annotations and
        rounds. Cheap and synchronous (the stream's last bytes wait for the hooks); the per-tool
        table is made in a worker thread and lands a moment later."""
        watch = self._flows.pop(flow.id, None)
        if watch is None:
            return
        view = self._view()
        shown = view is not None and watch.shown
        if not shown and not _PRINTED.isEnabledFor(logging.DEBUG if watch.record.total_tools == 0 else logging.INFO):
            return  # no view, and its line would not be printed (``-q``, a lower verbosity): nothing to make
        record = asdict(watch.record)
        try:
            said = summary.FlowSummary.of(record)
            # INFO for a flow with tools: the line mitmdump prints by default; one without has nothing to say.
            level = logging.INFO if said.sent else logging.DEBUG
            if _PRINTED.isEnabledFor(level):
                logger.log(logging.getLevelName(level), "{}", said.line(watch.where))
        except Exception as e:  # observability never hurts traffic
            logger.debug("no summary of flow {}: {}", flow.id, e)
            return
        if not shown:
            return
        try:
            self._show(flow, watch, record, said, view)
        except Exception as e:  # observability never hurts traffic (the flow already went)
            logger.debug("flow {} not shown: {}", flow.id, e)

    def _show(self, flow: http.HTTPFlow, watch: _Watch, record: dict[str, Any], said: summary.FlowSummary,
              view: Any) -> None:
        """The flow's annotations and rounds; its request and answer as the client had them."""
        cfg = self._config()
        rewritten = watch.upstream_body is not None
        found = list(watch.rounds)
        if rewritten and not found:  # mitmproxy sent the rewritten request itself (no loop): its one round
            found.append(rounds.of_flow(flow, watch.answer))
        self._as_the_client_had_it(flow, watch, rewritten)
        turn_id = str(record.get("id") or "") or None  # the turn's telemetry id, where the record has one
        turn = rounds.tag(turn_id or flow.id)
        extra = {"dispatcher": cfg.call_tool_name if cfg is not None else None}
        shown: list[http.HTTPFlow] = []
        kinds: list[str] = []
        if rewritten or len(found) > 1:  # nothing rewritten and one round: the client's flow is the whole story
            for i, rnd in enumerate(found):
                kinds.append(rounds.kind(i, rnd, watch.client_body))
                shown.append(rounds.to_flow(rnd, flow.id, i, len(found), kinds[-1], watch.phantom, extra, turn_id))
        info = {"record": record, "phantom": watch.phantom, "rounds": [f.id for f in shown], "kinds": kinds,
                "turn": turn, "tools": [], **extra}
        if watch.answer is not None:
            info["answer"] = {"size": watch.answer.size, "kept": watch.answer.kept}
        flow.metadata[FLOW_KEY] = info
        _annotate(flow, info)
        view.update([flow])
        if shown:
            view.add(shown)
        self._spawn(self._tabulate(flow, watch, info, view))

    @staticmethod
    def _as_the_client_had_it(flow: http.HTTPFlow, watch: _Watch, rewritten: bool) -> None:
        """The flow's request back to the client's own (mitmproxy sent the rewritten one, which
        round 1 keeps); a streamed answer's body, as the client got it, in its response."""
        if rewritten and watch.sent is not None:
            flow.request.raw_content, flow.request.headers = watch.sent[0], watch.sent[1].copy()
        response = flow.response
        if response is not None and response.raw_content is None and watch.answer is not None:
            response.raw_content = watch.answer.body()

    async def _tabulate(self, flow: http.HTTPFlow, watch: _Watch, info: dict[str, Any], view: Any) -> None:
        said = summary.FlowSummary.of(info["record"])
        try:
            rows = await asyncio.to_thread(
                tools.compare, watch.adapter, watch.client_body.decode("utf-8"),
                watch.upstream_body.decode("utf-8") if watch.upstream_body is not None else None,
                watch.phantom, said.found, self._config(), said.mode, said.called)
        except Exception as e:  # observability never hurts traffic: the flow keeps its comment
            logger.debug("tool table of flow {} not made: {}", flow.id, e)
            return
        info["tools"] = [r.as_list() for r in rows]
        _annotate(flow, info)
        view.update([flow])

    def _spawn(self, coro) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _annotate(flow: http.HTTPFlow, info: dict[str, Any]) -> None:
    record, turn = info["record"], info["turn"]
    # The turn's tag first: mitmweb's flow list shows which flows belong together.
    comment = f"{turn} {summary.FlowSummary.of(record).comment(len(info['rounds']))}"
    if info["rounds"]:
        comment += f" · this turn's flows: {rounds.group_filter(turn)}"
    flow.comment = comment
    if record.get("searches"):
        flow.marked = SEARCHED
    elif record.get("fallback_reason", "") and str(record["fallback_reason"]).startswith(("rewrite_", "reforward_", "error")):
        flow.marked = FELL_BACK
