"""The scripted "model": an ordered list of rules, the first matching rule answers.

A rule has conditions (all must hold) and one action (a reply with optional text and
tool calls, or a failure). By default a rule that calls tools only matches when each
of those tools is offered in the request (or, like a model that read its definition in a
search result, can be called through the proxy's ``gateway_call_tool``: the call is made
through it) and has no result in the conversation yet, so a plain list reads like a plan::

    Script([
        search("weather"),                          # call gateway_search_tools once
        call("get_weather", {"city": "Paris"}),     # then the tool it revealed
        reply("Done.", echo_last_result=True),      # then answer
    ])

The same rules as JSON (for ``POST /_script``)::

    {"rules": [
        {"calls": [{"name": "gateway_search_tools", "args": {"query": "weather"}}]},
        {"calls": [{"name": "get_weather", "args": {"city": "Paris"}}], "text": "Checking."},
        {"text": "Done.", "echo_last_result": true},
        {"error": {"status": 500}, "nth": 1}
    ], "default": {"text": "Hello"}}

``thinking`` (text) makes the model reason first: Anthropic sends a signed ``thinking`` block
when the request enables thinking, Gemini a ``thought`` part when it asks for thoughts,
Responses a ``reasoning`` item with ``encrypted_content``.

``echo`` (a regex) ends the reply's text with its first match in the request body: a load
test gives each session a marker its answers must carry, so an answer delivered to another
client shows.

``hold`` (seconds) answers late; a client that closes its connection meanwhile is recorded
(``client_gone``) and gets nothing. ``fault``: ``"close"`` drops the connection without a
status line, ``"cut"`` sends the status and half the body (half the stream's events), then drops it.

Conditions: ``offered``, ``not_offered``, ``no_result_for`` (default: the called tools;
``[]`` disables), ``has_result_for``, ``contains`` (substring of the raw body), ``nth``
(1-based index of the API request since the last reset), ``api`` ("anthropic",
"openai-chat", ...), ``times`` (fire at most N times), ``require_offered`` (default True:
the called tools must be offered).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .model import DISPATCHER, Conversation, Reply, ToolCall, Usage, estimate_tokens

SEARCH_TOOL = "gateway_search_tools"


@dataclass
class Call:
    """A tool call the scripted model makes."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Fail:
    """A scripted failure: the API's error shape with this status."""

    status: int = 500
    message: str = "scripted failure"
    kind: str | None = None
    param: str | None = None  # the field the error names, where the API's error says it (OpenAI's ``param``)


@dataclass
class Rule:
    """One scripted behaviour: conditions plus an action (see the module docstring)."""

    # action
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    thinking: str = ""  # the model's reasoning, sent signed where the request enables it
    echo_last_result: bool = False
    echo: str | None = None  # a regex: its first match in the request body ends the text
    error: Fail | None = None
    usage: Usage | None = None
    delay: float | None = None  # stream pacing for this reply, seconds between events
    hold: float | None = None  # seconds before answering, watching for the client closing the connection
    fault: str | None = None  # "close": the connection closes unanswered; "cut": the body stops halfway
    # conditions
    offered: list[str] = field(default_factory=list)
    not_offered: list[str] = field(default_factory=list)
    no_result_for: list[str] | None = None
    has_result_for: list[str] = field(default_factory=list)
    contains: str | None = None
    nth: int | None = None
    api: str | None = None
    times: int | None = None
    require_offered: bool = True

    def matches(self, conv: Conversation, nth: int, fired: int) -> bool:
        """Whether every condition holds for this request."""
        called = [c.name for c in self.calls]
        no_result = called if self.no_result_for is None else self.no_result_for
        return (
            (self.times is None or fired < self.times)
            and (self.nth is None or self.nth == nth)
            and (self.api is None or self.api == conv.api)
            and (self.contains is None or self.contains in conv.raw_text)
            and all(conv.offered(n) for n in self.offered)
            and (not self.require_offered or all(conv.offered(n) or conv.through(n) for n in called))
            and not any(conv.offered(n) for n in self.not_offered)
            and not any(conv.has_result_for(n) for n in no_result)
            and all(conv.has_result_for(n) for n in self.has_result_for)
        )

    def build_reply(self, conv: Conversation, id_prefix: str, new_id: Callable[[str], str]) -> Reply:
        """The reply this rule gives to ``conv`` (tool call ids made with ``new_id``)."""
        text = self.text
        last = conv.last_result()
        if self.echo_last_result and last is not None:
            text = f"{text}\nlast tool result: {last.content}" if text else f"last tool result: {last.content}"
        if self.echo and (found := re.search(self.echo, conv.raw_text)):
            text = f"{text} {found.group()}" if text else found.group()
        calls = [ToolCall(id=new_id(id_prefix), name=c.name, arguments=c.args) if conv.offered(c.name)
                 or not conv.through(c.name) else
                 ToolCall(id=new_id(id_prefix), name=DISPATCHER, arguments={"name": c.name, "arguments": c.args})
                 for c in self.calls]
        usage = self.usage or Usage(
            input_tokens=estimate_tokens(conv.raw_text),
            output_tokens=estimate_tokens(text + "".join(json.dumps(c.args) for c in self.calls)),
        )
        return Reply(text=text, calls=calls, usage=usage, thinking=self.thinking)

    def to_dict(self) -> dict[str, Any]:
        defaults = asdict(Rule())
        return {k: v for k, v in asdict(self).items() if v != defaults[k]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Rule:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown rule keys: {sorted(unknown)}")
        kw = dict(d)
        kw["calls"] = [Call(**c) for c in d.get("calls", [])]
        if d.get("error") is not None:
            kw["error"] = Fail(**d["error"])
        if d.get("usage") is not None:
            kw["usage"] = Usage.from_dict(d["usage"])
        return cls(**kw)


# --- constructors: the readable way to write a script in Python ---------------------------


def reply(text: str = "Hello from the fake model.", *, echo_last_result: bool = False, **cond: Any) -> Rule:
    """Answer with text (optionally followed by the last tool result's content)."""
    return Rule(text=text, echo_last_result=echo_last_result, **cond)


def call(name: str, args: dict[str, Any] | None = None, *, text: str = "", **cond: Any) -> Rule:
    """Call one tool (with optional text before it), when it is offered and has no result yet."""
    return Rule(text=text, calls=[Call(name, args or {})], **cond)


def calls(*items: Call | tuple[str, dict[str, Any]], text: str = "", **cond: Any) -> Rule:
    """Call several tools in one turn, e.g. the search tool plus a real tool (a mixed turn)."""
    made = [i if isinstance(i, Call) else Call(i[0], i[1]) for i in items]
    return Rule(text=text, calls=made, **cond)


def search(query: str, *, text: str = "", **cond: Any) -> Rule:
    """Call the proxy's phantom search tool once, with ``{"query": query}``."""
    return call(SEARCH_TOOL, {"query": query}, text=text, **cond)


def fail(status: int = 500, message: str = "scripted failure", *, kind: str | None = None, param: str | None = None,
         **cond: Any) -> Rule:
    """Fail with ``status`` in the API's error shape (combine with ``nth=``/``contains=``/``times=``)."""
    return Rule(error=Fail(status, message, kind, param), **cond)


DEFAULT_RULE = reply()


class Script:
    """An ordered rule list plus a default; thread-safe, counts how often each rule fired."""

    def __init__(self, rules: list[Rule] | None = None, default: Rule | None = None) -> None:
        self.rules = list(rules or [])
        self.default = default or DEFAULT_RULE
        self.fired = [0] * len(self.rules)
        self._lock = threading.Lock()

    def choose(self, conv: Conversation, nth: int) -> Rule:
        """The first rule that matches (counting it as fired), else the default."""
        with self._lock:
            for i, rule in enumerate(self.rules):
                if rule.matches(conv, nth, self.fired[i]):
                    self.fired[i] += 1
                    return rule
        return self.default

    def to_dict(self) -> dict[str, Any]:
        return {"rules": [r.to_dict() for r in self.rules], "default": self.default.to_dict(), "fired": self.fired}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | list[Any]) -> Script:
        """From ``{"rules": [...], "default": {...}}`` or a bare list of rules."""
        if isinstance(d, list):
            d = {"rules": d}
        unknown = set(d) - {"rules", "default", "fired"}
        if unknown:
            raise ValueError(f"unknown script keys: {sorted(unknown)}")
        rules = [Rule.from_dict(r) for r in d.get("rules", [])]
        default = Rule.from_dict(d["default"]) if d.get("default") else None
        return cls(rules, default)
