"""The phantom search loop, sans-IO (seed 000 §5).

Why sans-IO: the loop decides, the caller does the I/O. ``PhantomLoop`` is given each
upstream message and answers with ``Search(calls)`` (resolve these: locally, or with a
selector service over HTTP), then ``Send(body)`` (re-forward this) or ``Finish`` (what the
client sees). Each ``Send`` also carries the round's client-visible part, so a buffered
consumer (today) and a live streaming one (later) drive the same loop.

Rules it obeys:
- a response with phantom calls only: answer them, inject the found tools, re-forward;
- a mixed response (phantom + real calls) is never re-forwarded: the provider would
  reject the real calls without results. The real calls go to the client with the
  phantom part removed; the searches still run, so the found tools come next turn;
- at most ``max_loops`` re-forwards, then the last answer goes out stripped;
- ``native``: found tools are loaded by the results themselves (``ToolResult.loads``), the
  tool list is never touched; classic: they are appended to the tool list.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from .providers.base import Adapter, Tool, ToolCall, ToolResult


@dataclass(frozen=True)
class Found:
    """What one search produced: the result the model reads and the tools to load."""

    result: ToolResult
    tools: Sequence[Tool]


@dataclass(frozen=True)
class Search:
    calls: list[ToolCall]  # answer each, in order, with ``PhantomLoop.found``


@dataclass(frozen=True)
class Send:
    body: str
    visible: dict[str, Any]  # this round's client-visible part (phantom stripped)


@dataclass(frozen=True)
class Finish:
    message: dict[str, Any]  # everything the client sees, rounds merged
    reason: str  # "no_phantom" | "done" | "mixed" | "max_loops" | "error"


@dataclass
class PhantomLoop:
    adapter: Adapter
    phantom: str
    forwarded: Sequence[str]  # tool names already in the forwarded list
    max_loops: int = 5
    native: bool = False  # results load found tools where they stand; tools[] stays as it is
    rounds: int = 0  # re-forwards made
    visible: list[dict[str, Any]] = field(default_factory=list)
    expanded: list[str] = field(default_factory=list)  # tools loaded, discovery order
    unanswered: list[ToolResult] = field(default_factory=list)  # mixed finish: results upstream never got
    _body: str = ""
    _pending: dict[str, Any] | None = None  # the message whose searches are being resolved

    def start(self, body: str, message: dict[str, Any]) -> Search | Finish:
        """``body`` is the request as forwarded, ``message`` the first upstream answer."""
        self._body = body
        self._loaded = set(self.forwarded)
        if not self._phantom_calls(message):
            return Finish(message, "no_phantom")
        return self.receive(message)

    def receive(self, message: dict[str, Any]) -> Search | Finish:
        self.visible.append(self.adapter.strip(message, [self.phantom]))
        phantom = self._phantom_calls(message)
        if not phantom:
            return self._finish("done")
        self._pending = message
        return Search(phantom)

    def found(self, found: Sequence[Found]) -> Send | Finish:
        """The answers to the last ``Search``, in the order of its calls."""
        message, self._pending = self._pending, None
        assert message is not None, "found() without a pending Search"
        loaded = [self._load(f.tools) for f in found]
        if self.native:
            results = [replace(f.result, loads=tuple(new)) for f, new in zip(found, loaded)]
            appended: list[str] = []
        else:
            results = [f.result for f in found]
            appended = [t.raw for new in loaded for t in new]
        if len(found) < len(self.adapter.calls(message)):
            self.unanswered = results
            return self._finish("mixed")
        if self.rounds >= self.max_loops:
            return self._finish("max_loops")
        self.rounds += 1
        self._body = self.adapter.continue_after(self._body, message, results, appended)
        return Send(self._body, self.visible[-1])

    def fail(self) -> Finish:
        """The upstream failed mid-loop: the client gets what it has seen so far."""
        return self._finish("error")

    def _phantom_calls(self, message: dict[str, Any]) -> list[ToolCall]:
        return [c for c in self.adapter.calls(message) if c.name == self.phantom]

    def _load(self, tools: Sequence[Tool]) -> list[Tool]:
        """New tools in discovery order, each once, never one already forwarded."""
        added = []
        for t in tools:
            if t.name not in self._loaded:
                self._loaded.add(t.name)
                added.append(t)
                self.expanded.append(t.name)
        return added

    def _finish(self, reason: str) -> Finish:
        return Finish(self.adapter.merge(self.visible), reason)
