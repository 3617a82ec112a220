"""The phantom search loop, sans-IO: the proxy's own search tool, answered and hidden by the proxy.

Why sans-IO: the loop decides, the caller does the I/O. ``PhantomLoop`` is given each
upstream message and answers with ``Search(calls)`` (resolve these: locally, or with a
selector service over HTTP), then ``Send(body)`` (re-forward this) or ``Finish`` (what the
client sees). Each ``Send`` also carries the round's client-visible part, so the buffered
consumer (``LoopRunner.buffered``) and the live streaming one (``LoopRunner.live``) drive the
same loop.

Rules it obeys:
- a response with phantom calls only: answer them, inject the found tools, re-forward;
- a mixed response (phantom + real calls) is never re-forwarded: the provider would
  reject the real calls without results. The real calls go to the client with the
  phantom part removed; the searches still run (``unanswered``), and their results go
  upstream beside the client's on its next request (``rounds``);
- at most ``max_loops`` re-forwards, the last one without the search tool, so the model
  answers with what it has; should it still answer with searches only, the turn goes out
  stripped and says whether anything is left (``Finish.empty``): an empty assistant turn
  is refused by the APIs when the client sends it back in its history;
- how found tools reach the model is the flow's deferral mode's (``policy.modes``): native
  results load them themselves (``ToolResult.loads``), the tool list is never touched; classic
  appends them to the tool list; call-through does neither, the model calls them through the
  dispatcher, whose calls reach the client as calls of the real tool, and those that stand for
  no tool are answered here with an error, in a hidden round, like a search;
- a call of a tool the policy withholds from the request (``policy.tool_policy``) is answered
  the same way, with the error the mode gives for it: the client never sees it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from tooldisco.apis.base import Adapter
from tooldisco.core.types import Tool, ToolCall, ToolResult, Unsupported
from tooldisco.policy.modes import DeferralMode


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
    empty: bool = False  # max_loops: the client would get a turn with neither text nor calls


@dataclass
class PhantomLoop:
    adapter: Adapter
    mode: DeferralMode[Any]  # the deferral flavour: how found tools reach the model, what the client sees
    forwarded: Sequence[str]  # tool names already in the forwarded list
    max_loops: int = 5
    rounds: int = 0  # re-forwards made
    visible: list[dict[str, Any]] = field(default_factory=list)
    expanded: list[str] = field(default_factory=list)  # tools loaded, discovery order
    unanswered: list[ToolResult] = field(default_factory=list)  # mixed finish: results upstream never got
    dispatched: list[str] = field(default_factory=list)  # call-through: real tools called, as the client got them
    refused: int = 0  # call-through: dispatcher calls that stood for no tool
    _body: str = ""
    _pending: dict[str, Any] | None = None  # the message whose searches are being resolved
    _refused: list[ToolResult] = field(default_factory=list)  # its dispatcher calls that stand for no tool

    def start(self, body: str, message: dict[str, Any]) -> Search | Finish:
        """``body`` is the request as forwarded, ``message`` the first upstream answer."""
        self._body = body
        self._loaded = set(self.forwarded)
        if not any(self.mode.answers(c) for c in self.adapter.calls(message)):
            return Finish(message, "no_phantom")
        return self.receive(message)

    def receive(self, message: dict[str, Any]) -> Search | Finish:
        targets = self.mode.targets(self.adapter.calls(message))
        self.visible.append(self.adapter.strip(self.mode.shown(message), self.mode.hidden))
        phantom = self._phantom_calls(message)
        refused = [ToolResult(c, t, True) for c in self.adapter.calls(message) if isinstance(t := targets.get(c.id), str)]
        self.dispatched += [t.name for t in targets.values() if not isinstance(t, str)]
        self.refused += len(refused)
        if not phantom and not refused:
            return self._finish("done")
        self._pending, self._refused = message, refused
        return Search(phantom)

    def hide(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` as the upstream's conversation goes on from it when the client answers
        only its real calls: without the search calls, the dispatcher calls that stand for no tool
        and the calls of tools the policy withholds."""
        return self.adapter.strip(self.mode.hide(message), self.mode.hidden)

    def found(self, found: Sequence[Found]) -> Send | Finish:
        """The answers to the last ``Search``, in the order of its calls."""
        message, self._pending = self._pending, None
        assert message is not None, "found() without a pending Search"
        loaded = [self._load(f.tools) for f in found]
        results, appended = self.mode.loads_found([f.result for f in found], loaded)
        calls = self.adapter.calls(message)
        if self._refused:  # the answers in the order of the calls
            order = {c.id: i for i, c in enumerate(calls)}
            results = sorted(results + self._refused, key=lambda r: order.get(r.call.id, 0))
        if len(results) < len(calls):
            self.unanswered = results
            return self._finish("mixed")
        if self.rounds >= self.max_loops:
            return self._finish("max_loops")
        self.rounds += 1
        self._body = self.adapter.append_round(self._body, message, results, appended)
        last = self.rounds >= self.max_loops
        return Send(self.without_search(self._body) if last else self._body, self.visible[-1])

    def without_search(self, body: str) -> str:
        """``body`` without the search tool in its tool list (natively deferred and call-through
        tools stay as they are): the last re-forward lets the model answer, not search again.
        A body the adapter cannot read keeps its tool; ``Finish.empty`` still guards the turn."""
        try:
            tools = self.adapter.parse(body).tools
        except Unsupported:
            return body
        kept = [t.raw for t in tools if not self._search_tool(t)]
        return body if len(kept) == len(tools) else self.adapter.with_tools(body, kept)

    def _search_tool(self, tool: Tool) -> bool:
        """Ours: a function by the search tool's name, or the API's own kind of search tool
        (Responses' client-executed ``tool_search``, which native deferral adds, never the client)."""
        if tool.name == self.phantom:
            return True
        if tool.pinned != "builtin":
            return False
        definition = json.loads(tool.raw)
        return isinstance(definition, dict) and definition.get("type") == self.phantom

    @property
    def phantom(self) -> str:
        """The search tool's name as the model calls it."""
        return self.mode.search

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
        merged = self.adapter.merge(self.visible)
        return Finish(merged, reason, reason == "max_loops" and not has_content(self.adapter, merged))


def has_content(adapter: Adapter, message: dict[str, Any]) -> bool:
    """Whether an answer shows the client a call or some text: what makes an assistant turn the
    APIs take back in a history."""
    return bool(adapter.calls(message)) or any(_has_text(e) for e in adapter.shown(message))


def _has_text(value: Any) -> bool:
    if isinstance(value, dict):
        return any((k in ("text", "content") and isinstance(v, str) and v.strip() != "") or _has_text(v)
                   for k, v in value.items())
    return isinstance(value, list) and any(_has_text(v) for v in value)
