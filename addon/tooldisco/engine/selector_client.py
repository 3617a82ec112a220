"""Client of the selector service contract (README: api): the ``api`` strategy's search.

``POST {endpoint}`` with ``{pattern, top_k, always_keep, tools: [{name, description,
definition?}]}`` answers ``{selected_names}``. Every way that can go wrong (no endpoint,
timeout, HTTP error, oversized request or answer, malformed JSON, an empty or unknown
selection) comes back as a ``Selection`` with a ``fallback`` reason: the caller then
restores all deferred tools for the model (fail-open), never an exception.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Sequence

import aiohttp

from tooldisco.config import ApiConfig
from tooldisco.core.types import Tool
from tooldisco.search.base import MAX_QUERY_CHARS, Ranking, SearcherBase


@dataclass(frozen=True)
class Selection:
    names: list[str]  # validated: known names only, rank order kept, capped at top_k
    status: int | None = None  # the service's HTTP status, None when it never answered
    ms: float = 0.0
    fallback: str | None = None  # set when the answer is not meaningful: fail open
    raw: list[str] | None = None  # selected_names as the service returned them


class FixedRanking(SearcherBase):
    """A searcher that answers with names decided elsewhere (by the selector service), so
    the phantom query front end stays the one place that shapes what the model reads."""

    name = "api"

    def __init__(self, names: Sequence[str]):
        self._names = list(names)

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        return Ranking(self._names[:limit], "api")


class SelectorClient:
    def __init__(self, config: ApiConfig):
        self.config = config
        self._client: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        """Made on first use, inside the event loop that uses it (aiohttp binds a session to its loop)."""
        if self._client is None:
            self._client = aiohttp.ClientSession(trust_env=False, skip_auto_headers=("User-Agent",))
        return self._client

    def payload(self, pattern: str, top_k: int, always_keep: Sequence[str], tools: Sequence[Tool],
                definitions: bool) -> bytes:
        entries: list[dict[str, Any]] = []
        for t in tools:
            entry: dict[str, Any] = {"name": t.name, "description": t.description}
            if definitions:
                entry["definition"] = t.definition
            entries.append(entry)
        body = {"pattern": pattern, "top_k": top_k, "always_keep": list(always_keep), "tools": entries}
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def _body(self, pattern: str, top_k: int, always_keep: Sequence[str], tools: Sequence[Tool]) -> bytes:
        """Only what the selector needs leaves the proxy: definitions left out when asked or when too large."""
        cfg = self.config
        body = self.payload(pattern, top_k, always_keep, tools, cfg.send_definitions)
        if len(body) > cfg.max_request_bytes and cfg.send_definitions:
            body = self.payload(pattern, top_k, always_keep, tools, definitions=False)
        return body

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def select(self, pattern: str, top_k: int, always_keep: Sequence[str], tools: Sequence[Tool]) -> Selection:
        cfg = self.config
        if not cfg.endpoint:
            return Selection([], fallback="no_endpoint")
        # The contract refuses longer patterns; a whole pasted prompt must not travel uncapped.
        pattern = pattern[:MAX_QUERY_CHARS]
        # A payload of thousands of definitions takes a while to build: not on the event loop.
        body = await asyncio.to_thread(self._body, pattern, top_k, always_keep, tools)
        if len(body) > cfg.max_request_bytes:
            return Selection([], fallback="request_too_large")
        headers = {"content-type": "application/json", "accept": "application/json"}
        if cfg.api_key:
            headers["authorization"] = f"Bearer {cfg.api_key}"
        started = time.perf_counter()
        try:
            status, content = await asyncio.wait_for(self._post(body, headers), timeout=cfg.timeout)
        except asyncio.TimeoutError:
            return Selection([], ms=_ms(started), fallback="timeout")
        except _TooLarge:
            return Selection([], 200, _ms(started), fallback="response_too_large")
        except aiohttp.ClientError as e:
            return Selection([], ms=_ms(started), fallback=f"connection_error:{type(e).__name__}")
        ms = _ms(started)
        if status != 200:
            return Selection([], status, ms, fallback=f"http_{status}")
        return validate(content, {t.name for t in tools}, top_k, status, ms)

    async def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        limit = self.config.max_response_bytes
        async with self._http().post(self.config.endpoint or "", data=body, headers=headers, allow_redirects=False,
                                     timeout=aiohttp.ClientTimeout(total=self.config.timeout)) as r:
            chunks, size = [], 0
            async for chunk in r.content.iter_any():
                size += len(chunk)
                if size > limit:
                    raise _TooLarge
                chunks.append(chunk)
            return r.status, b"".join(chunks)


class _TooLarge(Exception):
    pass


def validate(content: bytes, known: set[str], top_k: int, status: int = 200, ms: float = 0.0) -> Selection:
    """Only names from the deferred set, rank order kept, capped (the model gets only tools the
    client sent, at most ``top_k``); empty or all-unknown is not meaningful."""
    try:
        data = json.loads(content)
    except ValueError:
        return Selection([], status, ms, fallback="malformed_json")
    raw = data.get("selected_names") if isinstance(data, dict) else None
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        return Selection([], status, ms, fallback="malformed_json")
    names = list(dict.fromkeys(n for n in raw if n in known))[:top_k]
    if not raw:
        return Selection([], status, ms, fallback="empty_selection", raw=raw)
    if not names:
        return Selection([], status, ms, fallback="unknown_names", raw=raw)
    return Selection(names, status, ms, raw=raw)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
