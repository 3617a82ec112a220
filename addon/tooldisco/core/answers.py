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
        parts: list[bytes] = []
        size = 0
        try:
            async for chunk in self.chunks:
                size += len(chunk)
                if size > limit:
                    break
                parts.append(chunk)
        finally:
            await self.close()
        return b"".join(parts)

    async def peek(self, limit: int) -> tuple[bytes, Answer]:
        """The body's first ``limit`` bytes to look at, and the answer to pass on in this one's
        place: the same status, headers and bytes, none dropped (a body past ``limit`` goes on
        as it comes, never held whole). A whole body closes the answer at once.
        ``UpstreamFailed`` (the answer closed) when the body broke off."""
        it = self.chunks.__aiter__()
        parts: list[bytes] = []
        size = 0
        try:
            while size < limit:
                try:
                    chunk = await it.__anext__()
                except StopAsyncIteration:
                    await self.close()
                    body = b"".join(parts)
                    return body, Answer.whole(self.status, body, self.headers)
                parts.append(chunk)
                size += len(chunk)
        except BaseException:
            await self.close()
            raise
        head = b"".join(parts)

        async def replayed() -> AsyncIterator[bytes]:
            yield head
            async for rest in it:
                yield rest

        return head[:limit], Answer(self.status, self.headers, replayed(), self.close)

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
