"""The response phase of one flow: the phantom loop's rounds, driven over an injected network.

Why one runner with two consumers: the loop's decisions (search, re-forward, finish, fall
back) are the same whether the client gets one JSON answer at the end (``buffered``) or a
stream it reads as it comes (``live``). Only the framing of what the client receives
differs: a JSON answer is merged when the loop ends; a stream is stitched event by event
(``tooldisco.apis.base``), so the first token is never held back.

The network is injected (``Open``): the addon's upstream client in production, a stub in
tests. Nothing here blocks the event loop: searches run in worker threads under a budget,
session writes go through the store's own threads (``executor.run_store``).
"""

from __future__ import annotations

import asyncio
import json
import time
from functools import partial
from typing import Any, AsyncIterator, Awaitable

from loguru import logger

from tooldisco.core import jsonspan
from tooldisco.core.answers import Answer, Head, Open, Reply, UpstreamFailed
from tooldisco.engine import rounds
from tooldisco.engine.executor import run_store
from tooldisco.engine.learning import Learner
from tooldisco.engine.loop import Finish, PhantomLoop, Search, Send, has_content
from tooldisco.engine.planner import FlowContext
from tooldisco.apis.base import Adapter, Failure, StreamDecoder
from tooldisco.core.types import ToolResult
from tooldisco.engine.searches import SearchService
from tooldisco.search import priors
from tooldisco.state.base import SessionState, SessionStore
from tooldisco.policy import native
from tooldisco.engine.telemetry import TelemetrySink
from tooldisco.engine.accounting import Accounting, Tally
from tooldisco.apis.usage_scan import UsageScan

# Fail-open on the first answer: a 400/422 that the rewrite may have caused (it names the
# tools, the search tool, a field the proxy changed: ``policy.rejection``) gets the client's
# own request; any other passes as the upstream sent it.
REWRITE_REJECTED = frozenset({400, 422})
# A live first answer is held up to this many bytes until its stream is recognised: one that
# never is (a JSON answer to a request that asked for a stream) then goes out as it came.
MAX_UNRECOGNISED_BYTES = 1024 * 1024


class LoopRunner:
    """Drives one flow's phantom loop: rounds, searches, what the session keeps, its record."""

    def __init__(self, ctx: FlowContext, searches: SearchService, store: SessionStore, telemetry: TelemetrySink,
                 max_loops: int, learner: Learner | None = None, accounting: Accounting | None = None) -> None:
        self.ctx = ctx
        self.accounting = accounting
        self.tally = Tally(ctx.record)  # every upstream answer of the turn: kind, status, usage
        self.learner = learner
        self.searches = searches
        self.store = store
        self.telemetry = telemetry
        self.loop = PhantomLoop(ctx.adapter, ctx.mode, ctx.forwarded, max_loops)
        self._started = False
        self._last: dict[str, Any] = {}  # the last round's message, as the upstream sent it
        self._sent: str | None = None  # the last re-forward's body
        ctx.record.outcome = None  # "pending" until this runner says how the flow ended
        self._upstream_s = 0.0
        self._began = time.perf_counter()

    # --- the loop, shared by both consumers ----------------------------------------------

    async def step(self, message: dict[str, Any]) -> Send | Finish:
        """One round's message in; the next body to send, or the end."""
        action: Search | Send | Finish = (self.loop.receive(message) if self._started
                                          else self.loop.start(self.ctx.body, message))
        self._started, self._last = True, message
        while isinstance(action, Search):
            found = [await self.searches.answer(self.ctx, call) for call in action.calls]
            action = self.loop.found(found)
        if isinstance(action, Send):
            self._sent = action.body
        return action

    def _answered(self, status: int, message: dict[str, Any] | None) -> None:
        """One upstream answer into the turn's tally: its status, and its usage as the provider
        reported it (counting it never fails the turn)."""
        usage = None
        if message is not None:
            try:
                usage = self.ctx.adapter.usage(message)
            except Exception as e:
                logger.debug("usage of an answer not read: {}", e)
        self.tally.answered(status, usage)

    async def _open(self, open_: Open, body: bytes) -> Answer:
        return await self.timed(open_(body))

    async def timed(self, pending: Awaitable[Answer]) -> Answer:
        """Await an upstream answer's head, counted as upstream time (the relay's first round too).
        No answer at all is a 502 in the API's error format, which clients retry."""
        t0 = time.perf_counter()
        try:
            return await pending
        except UpstreamFailed as e:
            reply = self._error_reply(502, str(e) or "the proxy could not reach the upstream")
            return Answer.whole(reply.status, reply.body, reply.headers)
        finally:
            self._upstream_s += time.perf_counter() - t0

    async def _chunks(self, answer: Answer) -> AsyncIterator[bytes]:
        """The answer's body; the waits for it count as upstream time, the consumer's do not."""
        it = answer.chunks.__aiter__()
        while True:
            t0 = time.perf_counter()
            try:
                chunk = await it.__anext__()
            except StopAsyncIteration:
                return
            finally:
                self._upstream_s += time.perf_counter() - t0
            yield chunk

    async def _classic_fallback(self, first: Answer, open_: Open) -> Answer:
        """Native deferral or call-through refused (a 400 naming its fields: a model, region or API
        version without them): the same request deferred the classic way, and the model (the API
        when the body names none) remembered for the session, so its later turns go classic at
        once. Any other answer goes on as it came."""
        ctx = self.ctx
        if (fallback := ctx.mode.fallback) is None or first.status != 400:
            return first
        body = await first.read(1 << 20)
        if not native.refused(first.status, body):
            return Answer.whole(first.status, body, first.headers)
        refused_by = ctx.mode.refusal_key
        self.tally.answered(first.status, None)
        logger.warning("upstream refused {} deferral for {}; deferring the classic way", ctx.record.deferral,
                       refused_by or "the model")
        ctx.record.fallback_reason = f"{ctx.record.deferral}_refused_400_classic_sent"
        ctx.record.deferral = "classic"
        if ctx.persist and refused_by:
            await run_store(self.store.update, ctx.session, partial(_go_classic, refused_by))
        self.ctx = fallback()
        self.loop = PhantomLoop(self.ctx.adapter, self.ctx.mode, self.ctx.forwarded, self.loop.max_loops)
        return await self._open(open_, self.ctx.body.encode("utf-8"))

    async def _fallback(self, first: Answer, open_: Open) -> Answer:
        """The first answer, or the client's own request's answer when the upstream refused
        the rewritten request (400/422) for something the rewrite changed: the error names
        the tools, the search tool or dispatcher, a deferred tool, ``defer_loading`` and the
        like, or another field the proxy changed (``FlowContext.rewrite_named``).

        Why not every 400: most name what the client's own request carries as well (an
        unsupported ``max_tokens``, a model id, a message role, a key); sent again it reaches
        the upstream twice and ends the same way. Such an answer reaches the client once, as
        the upstream sent it: status, headers and body bytes (at most 1 MiB of it is read to
        decide; the rest follows as it comes). Telemetry: ``fallback_reason``
        ``rewrite_<status>_original_sent`` when resent; none, and the outcome
        ``upstream_<status>``, when passed."""
        ctx = self.ctx
        record = ctx.record
        if first.status not in REWRITE_REJECTED or not ctx.rewritten:
            return first
        try:
            seen, answer = await first.peek(1 << 20)
        except UpstreamFailed as e:  # the error broke off: the API's retryable error, never a cut body
            record.outcome = "upstream_failed"
            logger.warning("upstream error answer broke off: {}", e)
            reply = self._error_reply(502, str(e))
            return Answer.whole(reply.status, reply.body, reply.headers)
        named = ctx.rewrite_named(seen)
        if named is None:
            logger.info("upstream answered {} to the rewritten request, naming nothing the proxy changed; "
                        "passing it on", first.status)
            return answer
        await answer.close()
        self.tally.answered(first.status, None)
        logger.warning("upstream refused the rewritten request ({}, naming {}); sending the client's own",
                       first.status, named)
        record.fallback_reason = f"rewrite_{first.status}_original_sent"
        return await self._open(open_, ctx.original)

    async def _settle(self, finish: Finish, shown_id: str | None = None, seen: dict[str, Any] | None = None) -> None:
        """What the session keeps from this turn: tools found, stored-chain links, and the real
        rounds behind a stitched message (``tooldisco.engine.rounds``), for the client's next turn.

        ``shown_id``: the response id the client saw when it is not the chain's head (a live
        stream keeps round one's id); the client's next turn chains from it, and the planner
        then continues from the head instead. ``seen``: the message the client assembled from a
        live stream, when it has one (a JSON answer shows ``finish.message``)."""
        ctx, loop = self.ctx, self.loop
        record = ctx.record
        record.loops = loop.rounds
        record.dispatched, record.refused_calls = list(loop.dispatched), loop.refused
        record.called = _called(ctx.adapter, finish.message if seen is None else seen)
        record.outcome = record.outcome or finish.reason
        if not ctx.persist:
            return
        if self.learner is not None and ctx.offered:
            self._learn()
        expanded = list(loop.expanded)
        head = ctx.adapter.response_id(finish.message)
        pending = ctx.adapter.owed_results(ctx.body, loop.unanswered) if head and loop.unanswered else []
        shown = shown_id or head
        sent, last, shown_message = self._sent or ctx.body, self._last, finish.message if seen is None else seen
        hidden = list(loop.unanswered) if finish.reason == "mixed" else []

        # max_loops: the last round searched only; an unreadable client stream: nothing to match
        keep = bool(shown_message) and finish.reason in ("done", "mixed")
        if not (expanded or (head and shown) or keep):
            return  # nothing to write: no hand-off to the store's threads

        def write() -> None:
            if expanded:
                self.store.update(ctx.session, lambda s: s.expand(expanded))
            if head and shown:
                self.store.link(ctx.tenant, shown, ctx.session, pending, head if shown != head else None)
            if keep:
                self._keep_rounds(sent, last, shown_message, hidden)

        await run_store(write)

    def _learn(self) -> None:
        """What this turn teaches the tenant's search: its ranked searches, best first, and the
        tools the model went on to call (as the client got the calls: call-through's by name)."""
        ctx = self.ctx
        if self.learner is None:
            return
        try:
            searches = [(r.query, r.matched) for r in ctx.record.searches if r.error is None]
            self.learner.observe(ctx.tenant, priors.lesson(searches, ctx.record.called, ctx.offered))
        except Exception as e:  # learning is a bonus: the turn is answered either way
            logger.opt(exception=e).warning("could not learn from a turn")

    def _keep_rounds(self, sent: str, last: dict[str, Any], shown: dict[str, Any], hidden: list[ToolResult]) -> None:
        """The real rounds of a turn that re-forwarded, hid calls (``hidden``: a mixed
        finish's answers to them) or showed a call otherwise than it was made (call-through),
        unless they are too large to keep."""
        ctx = self.ctx
        try:
            kept = rounds.of_turn(ctx.adapter, ctx.body, sent, last, shown, self.loop.hide, hidden)
        except Exception as e:  # the turn is answered either way; its next request passes as sent
            logger.opt(exception=e).warning("could not record the hidden rounds of a turn")
            return
        if kept is None:
            return
        if kept.size > rounds.MAX_ROUNDS_BYTES:
            logger.info("hidden rounds of a turn not kept: {} bytes over the {} cap", kept.size, rounds.MAX_ROUNDS_BYTES)
            return
        self.store.keep_rounds(ctx.tenant, ctx.session, kept.digest, kept.entries)

    def _close_record(self, own_s: float | None = None) -> None:
        """``own_s``: the proxy's own time when it is not the rest of the total (a live flow's
        total also holds the time the client took to read).

        Upstream time is added to what the record holds: a buffered flow's first round was made
        by mitmproxy before this runner existed, and the glue put its time there from the flow's
        timestamps (``glue.timing``); every later round, and a live flow's every round, is timed
        here. The total runs from the start of planning (the record's ``time``) to now."""
        record = self.ctx.record
        total = time.perf_counter() - self._began
        record.upstream_ms = round(record.upstream_ms + self._upstream_s * 1000, 3)
        record.loop_added_ms = round((total - self._upstream_s if own_s is None else own_s) * 1000, 3)
        record.total_ms = round(max(time.time() - record.time, 0.0) * 1000, 3)
        if self.accounting is not None:
            self.accounting.complete(record, self.tally, len(self.ctx.body))
        self.telemetry.submit(record)

    # --- buffered: one JSON answer -------------------------------------------------------

    async def buffered(self, first: Answer, open_: Open) -> Reply:
        """Run the loop over whole answers; the client gets one (merged) answer."""
        first = await self._classic_fallback(first, open_)
        ctx = self.ctx
        record = ctx.record
        answer = await self._fallback(first, open_)
        try:
            body = await answer.read()
            message = _json_object(body) if answer.status == 200 else None
            self._answered(answer.status, message)
            if answer.status != 200 or answer is not first:
                record.outcome = record.outcome or f"upstream_{answer.status}"
                return Reply(answer.status, answer.headers, body)
            if message is None:
                record.outcome = "undecodable"
                return self._undecodable(answer, body)
            headers = answer.headers
            while True:
                action = await self.step(message)
                if isinstance(action, Finish):
                    await self._settle(action)
                    if action.reason == "no_phantom":  # the upstream's bytes, echoes restored
                        return Reply(200, headers, self._echo(body))
                    if action.empty:  # never an empty success: an error the client retries
                        record.outcome = "max_loops_empty"
                        return self._error_reply(502, "the model only searched for tools")
                    merged = _dumps(action.message)
                    usage = list(ctx.adapter.usage_headers(action.message).items())
                    return Reply(200, _override(headers, usage), self._echo(merged))
                reforward = await self._open(open_, action.body.encode("utf-8"))
                body = await reforward.read()
                message = _json_object(body) if reforward.status == 200 else None
                self._answered(reforward.status, message)
                if message is None:
                    return await self._reforward_failed(Reply(reforward.status, reforward.headers, body), open_)
        except asyncio.CancelledError:  # the client went away: the upstream request ends with it
            record.outcome = "client_gone"
            raise
        except UpstreamFailed as e:  # a body broke off: never a truncated success
            record.outcome = "upstream_failed"
            logger.warning("upstream answer broke off: {}", e)
            return self._error_reply(502, str(e))
        except Exception as e:  # fail open: the first answer without the search the client cannot run
            record.outcome = f"error: {type(e).__name__}"
            logger.opt(exception=e).warning("phantom loop failed; passing the first upstream answer on")
            return self._first_answer(answer.headers, body if answer is first else b"")
        finally:
            self._close_record()

    def _echo(self, body: bytes) -> bytes:
        if not self.ctx.adapter.echoes:
            return body
        return self.ctx.adapter.restore_echo(body.decode("utf-8"), self.ctx.client_body).encode("utf-8")

    def _undecodable(self, answer: Answer, body: bytes) -> Reply:
        """An answer we cannot read passes as it came, unless it is cut JSON that holds our
        search call. JSON nested past the parser's limit is no cut answer: no parser the
        client has reads it either, so it reaches the client as sent."""
        if self.ctx.phantom and self.ctx.phantom.encode() in body and not _too_deep(body):
            return self._error_reply(502, "the upstream answer could not be read")
        return Reply(answer.status, answer.headers, body)

    def _first_answer(self, headers: list[tuple[str, str]], body: bytes) -> Reply:
        """After an internal fault: the first answer minus the phantom calls; as it came when it
        holds none (nothing to improve); an error only when a search call cannot be taken out."""
        ctx = self.ctx
        hidden = [n for n in ctx.mode.hidden if n.encode() in body]  # the search tool, tools the policy withholds
        if not hidden:
            try:
                return Reply(200, headers, self._echo(body))  # the upstream's bytes, echoes restored
            except Exception:
                return Reply(200, headers, body)
        message = _json_object(body)
        if message is None:
            return self._undecodable(Answer.whole(200, body, headers), body)
        try:
            stripped = ctx.adapter.strip(message, hidden)
            if not has_content(ctx.adapter, stripped):  # searches only: an empty turn is refused later
                return self._error_reply(502, "tool discovery failed")
            return Reply(200, headers, self._echo(_dumps(stripped)))
        except Exception:
            return self._error_reply(502, "tool discovery failed")

    def _error_reply(self, status: int, message: str) -> Reply:
        """An error of the proxy's own in the API's format, so the client's SDK raises (and retries) it."""
        headers, body = self.ctx.adapter.error_body(Failure(status, message=message))
        return Reply(status, headers, body)

    async def _reforward_failed(self, answer: Reply, open_: Open) -> Reply:
        """A re-forward failed. A 4xx (429 aside) naming what the proxy changed in that very
        request (its tools, the search tool, a found or deferred tool, ``tool_reference``, the
        hidden round it added to the conversation: ``FlowContext.rewrite_named``) may be ours:
        the client's own request goes instead, untouched. That sends nothing twice: the
        upstream refused the re-forward before generating, and the client's own request never
        went (round one was the rewritten one); the re-forward itself is never sent again.

        Anything else goes to the client as the upstream sent it (status, headers, body): a 4xx
        the client's own request could not escape either (what it names was the client's: a
        resend would reach the upstream twice and end the same way), one naming nothing (a
        prompt grown too long: the client's own handling of it applies), a 5xx or 429, so the
        client's retry logic applies. An unreadable 200 becomes a 502 in the API's format.
        Telemetry: ``reforward_<status>_original_sent`` when resent, ``reforward_<status>``
        when passed."""
        ctx = self.ctx
        record = ctx.record
        self.loop.fail()
        logger.warning("upstream answered {} to a phantom re-forward", answer.status)
        if answer.status == 200:  # unreadable: never a success the client cannot parse
            record.fallback_reason = record.outcome = "reforward_unreadable"
            return self._error_reply(502, "the upstream answer could not be read")
        if (400 <= answer.status < 500 and answer.status != 429
                and (named := ctx.rewrite_named(answer.body, self._sent)) is not None):
            logger.warning("the re-forward's {} names {}; sending the client's own request", answer.status, named)
            record.fallback_reason = f"reforward_{answer.status}_original_sent"
            record.outcome = f"fallback_{answer.status}"
            retry = await self._open(open_, ctx.original)
            body = await retry.read()
            self._answered(retry.status, _json_object(body) if retry.status == 200 else None)
            return Reply(retry.status, retry.headers, body)
        record.fallback_reason = f"reforward_{answer.status}"
        record.outcome = f"fallback_{answer.status}"
        return answer

    # --- live: one stream, stitched as it comes ------------------------------------------

    async def live(self, first: Answer, open_: Open) -> AsyncIterator[Head | bytes]:
        """Yield the client's ``Head``, then its body bytes as soon as each is visible.

        Closing this generator early (the client went away) closes the upstream answer
        being read, which cancels that request."""
        first = await self._classic_fallback(first, open_)
        ctx = self.ctx
        record = ctx.record
        own_s = 0.0  # stitching, searching and deciding: what the proxy adds
        answer = await self._fallback(first, open_)
        stitcher: Any = None
        unhandled = False  # the proxy ended the stream with an error of its own
        try:
            if answer.status != 200 or answer is not first:
                record.outcome = record.outcome or f"upstream_{answer.status}"
                yield Head(answer.status, answer.headers)
                scan = UsageScan(ctx.adapter, answer.headers) if answer.status == 200 else None
                try:
                    async for chunk in answer.chunks:
                        if scan is not None:
                            scan.feed(chunk)
                        yield chunk
                finally:
                    self.tally.answered(answer.status, scan.usage() if scan is not None else None)
                return
            yield Head(200, answer.headers)
            # The client's body only where the stream echoes it: decoding a whole catalog is not free.
            stitcher = ctx.mode.stitcher(ctx.client_body if ctx.adapter.echoes else "")
            # The client's stream as its SDK assembles it (what it will send back): the stitcher's
            # own when it keeps one, else decoded here from what it emits.
            own = stitcher.shown()
            seen = own if own is not None else ctx.adapter.decoder()
            shown_id: str | None = None  # the id the client's stream carries (round one's)
            # Round one's bytes while the stitcher has recognised no event in them (bounded).
            unread: bytearray | None = bytearray()
            while True:
                try:
                    async for chunk in self._chunks(answer):
                        t0 = time.perf_counter()
                        out = stitcher.feed(chunk)
                        if own is None:
                            seen.feed(out)
                        own_s += time.perf_counter() - t0
                        if unread is not None:
                            if out or len(unread) + len(chunk) > MAX_UNRECOGNISED_BYTES:
                                unread = None
                            else:
                                unread += chunk
                        if out:
                            yield out
                    t0 = time.perf_counter()
                    end = stitcher.end_round()
                    self._answered(200, end.message)
                    if end.message is None and unread and not _event_stream(answer.headers):
                        record.outcome = "undecodable"  # no stream at all (a JSON answer): it goes as it came
                        yield bytes(unread)
                        return
                    unread = None
                    if end.error is not None:  # already passed on; only what is still owed follows
                        record.outcome = "upstream_stream_error"
                        if rest := stitcher.finish():
                            yield rest
                        return
                    if (end.message is None or not end.complete) and stitcher.untouched:
                        # The upstream ended it so and the client has had every byte as it came:
                        # it ends as the upstream ended it, nothing added.
                        record.outcome = "upstream_unfinished"
                        if rest := stitcher.finish():
                            yield rest
                        return
                    if end.message is None or not end.complete:
                        record.outcome = "upstream_truncated"
                        unhandled = True
                        yield stitcher.fail(Failure(502, message="the upstream stream ended early"))
                        return
                    if shown_id is None:
                        shown_id = ctx.adapter.response_id(end.message)
                    action = await self.step(end.message)
                    own_s += time.perf_counter() - t0
                    if isinstance(action, Finish):
                        if action.empty:  # never an empty success: an error the client retries
                            record.outcome = "max_loops_empty"
                            await self._settle(action, shown_id, {})
                            yield stitcher.fail(Failure(502, message="the model only searched for tools"))
                            return
                        rest = stitcher.finish()
                        if own is None:
                            seen.feed(rest)
                        # The session first: the client may send its next turn the moment it reads the end.
                        # A cut message is not one the client's next turn can be matched against: none kept.
                        await self._settle(action, shown_id, {} if stitcher.cut else _assembled(seen))
                        yield rest
                        return
                    if stitcher.cut:  # its text was not kept: the model's message cannot go back as it wrote it
                        record.outcome = "too_large"
                        yield stitcher.fail(Failure(502, message="the answer is too large for the proxy's tool search"))
                        return
                    await answer.close()
                    stitcher.next_round()
                    answer = await self._open(open_, action.body.encode("utf-8"))
                    if answer.status != 200:
                        self.tally.answered(answer.status, None)
                        record.outcome = f"reforward_{answer.status}"
                        record.fallback_reason = f"reforward_{answer.status}"
                        yield stitcher.fail(Failure(answer.status, await answer.read(1 << 20)))
                        return
                except (GeneratorExit, asyncio.CancelledError):
                    record.outcome = "client_gone"
                    raise
                except UpstreamFailed as e:  # a round broke off: the stream ends with the API's error
                    record.outcome = "upstream_failed"
                    logger.warning("upstream stream broke off: {}", e)
                    unhandled = True
                    yield stitcher.fail(Failure(502, message=str(e)))
                    return
                except Exception as e:  # after bytes went out, the stream still ends valid
                    record.outcome = f"error: {type(e).__name__}"
                    logger.opt(exception=e).warning("live phantom loop failed; ending the stream with an error")
                    unhandled = True
                    yield stitcher.fail(Failure(502, message="tool discovery failed mid-stream"))
                    return
        finally:
            await answer.close()
            if stitcher is not None:
                record.passage = "unhandled" if unhandled else "untouched" if stitcher.untouched else "changed"
            self._close_record(own_s)


def _go_classic(model: str, state: SessionState) -> None:
    if model not in state.classic:
        state.classic.append(model)


def _assembled(decoder: StreamDecoder) -> dict[str, Any]:
    """The message a stream decoder assembled (``{}`` when it cannot, or its text was cut:
    nothing is kept)."""
    decoder.feed(b"")
    if getattr(decoder, "cut", False):
        return {}
    try:
        return decoder.message()
    except Exception:
        return {}


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _event_stream(headers: list[tuple[str, str]]) -> bool:
    """Whether the answer says it is a stream (SSE or AWS event stream): one in which nothing
    was recognised was cut, and ends with an error rather than as it came."""
    ctype = next((v for k, v in headers if k.lower() == "content-type"), "")
    return ctype.split(";")[0].strip().lower() in ("text/event-stream", "application/vnd.amazon.eventstream")


def _too_deep(body: bytes) -> bool:
    """Whether ``body`` is JSON nested past the parser's limit (as opposed to cut or not JSON)."""
    try:
        json.loads(body)
    except RecursionError:
        return True
    except (ValueError, UnicodeDecodeError):
        return False
    return False


def _dumps(value: Any) -> bytes:
    return jsonspan.dumps(value).encode("utf-8")  # lone surrogates escaped, as the upstream sent them


def _override(headers: list[tuple[str, str]], new: list[tuple[str, str]]) -> list[tuple[str, str]]:
    names = {k.lower() for k, _ in new}
    return [(k, v) for k, v in headers if k.lower() not in names] + new


def _called(adapter: Adapter, message: dict[str, Any]) -> list[str]:
    """The tools called in the answer the client got, each once, for the record: counting them
    never fails the turn."""
    try:
        return list(dict.fromkeys(c.name for c in adapter.calls(message)))
    except Exception as e:
        logger.debug("calls of the answer not counted: {}", e)
        return []
