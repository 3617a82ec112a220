"""mitmproxy messages as the engine needs them: a body decoded within a cap, headers re-signed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from loguru import logger
from botocore.credentials import ReadOnlyCredentials
from mitmproxy import http

from tooldisco.core import bodies
from tooldisco.net import sigv4



async def decoded(message: http.Message, cap: int, skipped: str) -> bytes | None:
    """The body decoded, or None when it cannot be within ``cap`` (the flow then passes as
    mitmproxy carries it, raw bytes untouched). Not ``get_content``: that decodes all of a
    bomb at once. In a worker thread: up to ``cap`` bytes of decoding must not stall other flows."""
    raw = message.raw_content
    if raw is None:  # streamed (stream_large_bodies): nothing held to decode
        return None
    coding = message.headers.get("content-encoding")
    try:
        if not coding:
            return bodies.decode(raw, coding, cap)  # plain: only its size is checked
        return await asyncio.to_thread(bodies.decode, raw, coding, cap)
    except bodies.BodyError as e:
        logger.warning("{}: cannot decode the {} body ({})", skipped,
                       "request" if isinstance(message, http.Request) else "response", e)
        return None


def signed(url: str, headers: Iterable[tuple[str, str]], body: bytes,
           aws: ReadOnlyCredentials | None) -> list[tuple[str, str]]:
    """Headers for ``body``: re-signed when the client used SigV4 (Bedrock), else as they are."""
    pairs = list(headers)
    if aws is None:
        return pairs
    result = sigv4.resign("POST", url, pairs, body, aws)
    if result.status is sigv4.Status.CANNOT:
        logger.warning("cannot re-sign the changed request: {}", result.reason)
    return list(result.headers)


def by_name(headers: http.Headers) -> dict[str, str]:
    """``headers`` by lower-case name, a repeated one's values joined with ", " as mitmproxy's
    ``headers[name]`` gives them. One pass: ``headers.items()`` looks each name up again."""
    out: dict[str, str] = {}
    for k, v in headers.items(multi=True):
        k = k.lower()
        out[k] = f"{out[k]}, {v}" if k in out else v
    return out


def headers(pairs: Iterable[tuple[str, str]]) -> http.Headers:
    return http.Headers([(k.encode(), v.encode()) for k, v in pairs])
