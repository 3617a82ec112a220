"""Drive a PhantomLoop in tests the way the engine does: resolve each Search with ``search``."""

from __future__ import annotations

from typing import Any, Callable

from tooldisco.engine.loop import Found, PhantomLoop, Search
from tooldisco.core.types import ToolCall


class Driver:
    def __init__(self, loop: PhantomLoop, search: Callable[[ToolCall], Found]):
        self.loop, self.search = loop, search

    def _resolve(self, act: Any) -> Any:
        while isinstance(act, Search):
            act = self.loop.found([self.search(c) for c in act.calls])
        return act

    def start(self, body: str, message: dict[str, Any]) -> Any:
        return self._resolve(self.loop.start(body, message))

    def receive(self, message: dict[str, Any]) -> Any:
        return self._resolve(self.loop.receive(message))

    def fail(self) -> Any:
        return self.loop.fail()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loop, name)
