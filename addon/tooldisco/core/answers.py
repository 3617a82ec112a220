"""An upstream answer being read, and what the client gets: the types the network layer and
the engine exchange. The network (``tooldisco.net``) produces and consumes them and must not
import the engine, so they live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable

MAX_BUFFERED_BYTES = 256 * 1024 * 1024  # a re-forwarded JSON answer read whole


class UpstreamFailed(Exception):
    """The proxy's own request got no whole answer: the upstream could not be reached, or its
    answer broke off after the status line (reset, cut body, timeout). Raised by ``Open`` and
    by an ``Answer``'s body, never passed over quietly: the client gets the provider's own
    retryable error instead of a truncated success."""


@dataclass
class Answer:
    """An upstream answer being read: status and headers at once, the body as it arrives."""

    status: int
    headers: list[tuple[str, str]]
    chunks: AsyncIterator[bytes]
    close: Callable[[], Awaitable[None]] = field(default=lambda: _noop())

    async def read(self, limit: int = MAX_BUFFERED_BYTES) -> bytes:
        """The whole body (at most ``limit`` bytes; the rest is dropped), then the answer is closed.
        ``UpstreamFailed`` when the body broke off."""
        parts, size = [], 0
        try:
            async for chunk in self.chunks:
                size += len(chunk)
                if size > limit:
                    break
                parts.append(chunk)
        finally:
            await self.close()
        return b"".join(parts)

    @classmethod
    def whole(cls, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> Answer:
        async def one() -> AsyncIterator[bytes]:
            if body:
                yield body

        return cls(status, headers or [], one())


async def _noop() -> None:
    return None


Open = Callable[[bytes], Awaitable[Answer]]  # send this body where the flow's request went


@dataclass(frozen=True)
class Head:
    """Status and headers of what the client gets (hop-by-hop headers are the IO layer's job)."""

    status: int
    headers: list[tuple[str, str]]


@dataclass
class Reply:
    """A whole answer for the client (the buffered consumer)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
