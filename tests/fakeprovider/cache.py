"""A prefix prompt cache, so benchmarks can see what a changed prompt start costs.

Off by default (``FakeProvider.prompt_cache``, ``POST /_settings {"prompt_cache": true}``):
usage numbers of every existing test stay as they were.

The model, kept simple on purpose:

- Each provider cuts its request into *segments* in the order it builds the prompt
  (``Provider.prompt_segments``): each tool, the system prompt, each message. Tools with
  ``defer_loading: true`` are not in the prompt; a tool loaded by a ``tool_reference`` is
  a segment right after the message that references it. ``cache_control`` markers and
  Bedrock ``cachePoint`` entries are not prompt content, so they are left out.
- A request reads from the cache the longest run of leading segments that an earlier
  request with the same key sent, and then the whole prompt is cached (automatic caching:
  OpenAI's and Gemini's implicit cache; Anthropic's request-level ``cache_control``).
- The key: the tenant's credential and the model, plus ``prompt_cache_key`` when the body
  has one (OpenAI routes on it).
- Tokens per segment come from :func:`~tests.fakeprovider.model.estimate_tokens` over the
  segment's compact JSON. No minimum cacheable length, no 128-token steps, no TTL, no
  eviction: a benchmark session is minutes long and a cache miss must mean the prompt changed.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import asdict, dataclass
from email.message import Message
from typing import Any

from .model import Usage, estimate_tokens

Segment = tuple[str, Any]  # (label such as "tool:NAME", "system", "message:3"; its JSON value)

_SIGV4_KEY = re.compile(r"Credential=([^/,\s]+)/")
_NOT_PROMPT = "cache_control"


def prompt_text(value: Any) -> str:
    """A segment's prompt text: compact JSON without cache markers (they are not prompt content)."""
    return json.dumps(_strip(value), separators=(",", ":"), ensure_ascii=False)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != _NOT_PROMPT}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and "cachePoint" in v)]
    return value


def tenant(headers: Message, query: dict[str, list[str]]) -> str:
    """The caller's credential (a SigV4 header counts by its access key id: its signature changes per request)."""
    auth = headers.get("authorization") or ""
    sigv4 = _SIGV4_KEY.search(auth) if auth.startswith("AWS4-") else None
    parts = [
        headers.get("x-api-key") or "",
        sigv4.group(1) if sigv4 else auth,
        headers.get("x-goog-api-key") or "",
        (query.get("key") or [""])[0],
    ]
    return "\0".join(parts)


def cache_key(who: str, model: str, body: Any) -> str:
    """Tenant + model (+ ``prompt_cache_key``): requests that may share cached prefixes."""
    routed = body.get("prompt_cache_key") if isinstance(body, dict) else None
    return "\0".join([who, model, routed if isinstance(routed, str) else ""])


@dataclass(frozen=True)
class Bill:
    """What one request's prompt cost: its tokens, the cached part, and where the cache stopped."""

    tokens: int
    cached: int
    segments: int
    hit_segments: int
    first_miss: str | None  # label of the first segment not read from the cache (None: all read)

    def usage(self, output_tokens: int, input_includes_cache: bool) -> Usage:
        """The API's usage: OpenAI and Gemini count cached tokens inside the input tokens;
        Anthropic and Bedrock report input, cache writes and cache reads apart (all written here)."""
        if input_includes_cache:
            return Usage(self.tokens, output_tokens, cache_read_input_tokens=self.cached)
        return Usage(0, output_tokens, cache_read_input_tokens=self.cached,
                     cache_creation_input_tokens=self.tokens - self.cached)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PromptCache:
    """Cached prefixes per key, as a set of chained hashes (one per prefix). Thread-safe."""

    def __init__(self) -> None:
        self._prefixes: dict[str, set[bytes]] = {}
        self._lock = threading.Lock()

    def bill(self, key: str, segments: list[Segment]) -> Bill:
        """Read the longest cached prefix of ``segments`` under ``key``, then cache them all."""
        chain: list[bytes] = []
        sizes: list[int] = []
        digest = b""
        for _, value in segments:
            text = prompt_text(value)
            digest = hashlib.blake2b(digest + text.encode(), digest_size=16).digest()
            chain.append(digest)
            sizes.append(estimate_tokens(text))
        with self._lock:
            known = self._prefixes.setdefault(key, set())
            hits = next((i for i, d in enumerate(chain) if d not in known), len(chain))
            known.update(chain)
        return Bill(
            tokens=sum(sizes),
            cached=sum(sizes[:hits]),
            segments=len(segments),
            hit_segments=hits,
            first_miss=segments[hits][0] if hits < len(segments) else None,
        )

    def clear(self) -> None:
        with self._lock:
            self._prefixes.clear()
