"""The deferral flavour of one flow, as one object the planner chooses and the rest asks.

Why objects: the loop, the runner, the search service and the stitchers each differ by
flavour in a few small ways (how found tools reach the model, which calls the client sees
as made, which stitcher, what to send when the upstream refuses the flavour's fields).
Each flavour says so itself here, once, instead of every caller testing flags:

- ``ClassicMode``: found tools are appended to ``tools[]`` (``policy.deferral``);
- ``NativeMode``: found tools load inline, ``tools[]`` never changes (``policy.native``);
- ``CallThroughMode``: found tools are called through a dispatcher (``policy.call_through``);
- ``NoLoopMode``: no search tool at all (the relevance strategy): the loop finds nothing to answer.

``F`` is what a refused flavour falls back to (the engine's flow context, built by the
planner): the policy never sees the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Generic, Mapping, Protocol, Sequence, TypeVar

from tooldisco.apis.base import Adapter, CallThrough, Stitcher
from tooldisco.core.types import Target, Tool, ToolCall, ToolResult
from tooldisco.policy.call_through import Dispatch

F = TypeVar("F")
F_co = TypeVar("F_co", covariant=True)


class DeferralMode(Protocol[F_co]):
    """What the loop, the runner, the searches and the stitchers ask of a flow's flavour."""

    name: str  # the telemetry's ``deferral``: "classic", "native", "call-through"; "" without a loop
    search: str  # the search tool's name as the model calls it; "" without a loop
    refusal_key: str  # what the session remembers a refusal by (the model, or the API)

    @property
    def fallback(self) -> Callable[[], F_co] | None:
        """The same request deferred the classic way, made when the upstream refuses this
        flavour's fields; None when there is nothing to fall back to."""
        ...

    @property
    def loads_tools(self) -> bool:
        """Whether a search result brings tools into the model's reach (call-through's only
        name them): a failed selector then loads every deferred one instead."""
        ...

    @property
    def dispatcher(self) -> str | None:
        """Call-through's dispatcher name (what a search result tells the model to call)."""
        ...

    def answers(self, call: ToolCall) -> bool:
        """Whether the proxy answers ``call`` itself (a search, or a dispatcher call)."""
        ...

    def targets(self, calls: Sequence[ToolCall]) -> Mapping[str, Target | str]:
        """Dispatcher calls by id, with the real call each stands for or the error the model reads."""
        ...

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` with the calls as the client is shown them (search calls still in)."""
        ...

    def hidden(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` as the upstream's conversation goes on when the client answers only its
        real calls: without the calls the proxy answered in a hidden round (searches apart)."""
        ...

    def loads_found(self, results: Sequence[ToolResult], found: Sequence[Sequence[Tool]]
                    ) -> tuple[list[ToolResult], list[str]]:
        """The results to send back and the definitions to append to ``tools[]``, for the
        search ``results`` and the tools new to the model each found."""
        ...

    def stitcher(self, body: str) -> Stitcher:
        """The live stream stitcher of this flow; ``body``: the request as the client sent it."""
        ...


@dataclass(frozen=True)
class ClassicMode(Generic[F]):
    """Classic deferral: found tools are appended to ``tools[]``."""

    adapter: Adapter
    search: str
    refusal_key: str = ""
    name: str = "classic"
    fallback: Callable[[], F] | None = None
    loads_tools: bool = True
    dispatcher: str | None = None

    def answers(self, call: ToolCall) -> bool:
        return call.name == self.search

    def targets(self, calls: Sequence[ToolCall]) -> Mapping[str, Target | str]:
        return {}

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        return message

    def hidden(self, message: dict[str, Any]) -> dict[str, Any]:
        return message

    def loads_found(self, results: Sequence[ToolResult], found: Sequence[Sequence[Tool]]
                    ) -> tuple[list[ToolResult], list[str]]:
        return list(results), [t.raw for new in found for t in new]

    def stitcher(self, body: str) -> Stitcher:
        return self.adapter.stitcher(self.search, body)


@dataclass(frozen=True)
class NoLoopMode(ClassicMode[F]):
    """No search tool (the relevance strategy): nothing is the proxy's to answer."""

    search: str = ""
    name: str = ""

    def answers(self, call: ToolCall) -> bool:
        return False


@dataclass(frozen=True)
class NativeMode(ClassicMode[F]):
    """Native deferral: results load found tools where they stand; ``tools[]`` never changes.
    ``search`` is the name the API's own search call goes by (``NativeDeferral.native_search``)."""

    name: str = "native"

    def loads_found(self, results: Sequence[ToolResult], found: Sequence[Sequence[Tool]]
                    ) -> tuple[list[ToolResult], list[str]]:
        return [replace(r, loads=tuple(new)) for r, new in zip(results, found)], []


@dataclass(frozen=True)
class CallThroughMode(Generic[F]):
    """Call-through: found tools are called through the dispatcher, whose calls reach the
    client as calls of the real tool; ``tools[]`` never changes."""

    adapter: Adapter
    through: CallThrough  # the adapter's call-through side
    dispatch: Dispatch
    refusal_key: str = ""
    fallback: Callable[[], F] | None = None
    name: str = "call-through"
    loads_tools: bool = False

    @property
    def search(self) -> str:
        return self.dispatch.search

    @property
    def dispatcher(self) -> str | None:
        return self.dispatch.name

    def answers(self, call: ToolCall) -> bool:
        return call.name in (self.dispatch.search, self.dispatch.name)

    def targets(self, calls: Sequence[ToolCall]) -> Mapping[str, Target | str]:
        return {c.id: t for c in calls if (t := self.dispatch.resolve(c)) is not None}

    def shown(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.through.unwrap(message, self.dispatch.resolve)

    def hidden(self, message: dict[str, Any]) -> dict[str, Any]:
        dispatch = self.dispatch
        return self.through.unwrap(message, lambda c: t if isinstance(t := dispatch.resolve(c), str) else None)

    def loads_found(self, results: Sequence[ToolResult], found: Sequence[Sequence[Tool]]
                    ) -> tuple[list[ToolResult], list[str]]:
        return list(results), []

    def stitcher(self, body: str) -> Stitcher:
        return self.through.stitcher(self.dispatch.search, body, self.dispatch)
