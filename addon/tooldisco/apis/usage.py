"""Token usage from answers' usage objects: counts read leniently, an OpenAI-style prompt split
into the billed parts, and the usage of several rounds summed. Apart from ``usage_scan``, which
finds the usage in an answer as it passes; this reads and adds it."""

from __future__ import annotations

from typing import Any, Iterable

from tooldisco.apis import streaming as streams
from tooldisco.core.types import TokenUsage


def tokens(value: Any) -> int:
    """One count of an upstream's usage object as a non-negative int. Why lenient: usage is
    reported, never trusted to be well formed; a string, a bool, a negative or fractional
    number counts as 0 rather than failing the turn's accounting."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    return 0


def usage_object(message: Any, key: str = "usage") -> dict[str, Any] | None:
    """``message[key]`` when it is an object: None means the answer reports no usage."""
    value = message.get(key) if isinstance(message, dict) else None
    return value if isinstance(value, dict) else None


def prompt_split(prompt: int, output: int, total: Any, cache_read: int, cache_write: int = 0,
                 reasoning: int = 0) -> TokenUsage:
    """An OpenAI-style count (a prompt that includes its cached part) in the four billed parts.
    Reasoning is part of ``output`` at OpenAI; xAI reports it apart (``total_tokens`` is then
    prompt + completion + reasoning), so it is added back exactly when the total says so."""
    if reasoning and tokens(total) == prompt + output + reasoning:
        output += reasoning
    return TokenUsage(max(prompt - cache_read - cache_write, 0), cache_read, cache_write, output)


def sum_usage(usages: Iterable[Any]) -> Any:
    """Add integer counts key by key (nested too); other values: the last one wins."""
    total: Any = None
    for u in usages:
        if u is None:
            continue
        if total is None:
            total = streams.copy_json(u)  # a value of the upstream's JSON: a tree to copy
            continue
        total = _add(total, u)
    return total


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _add(a[k], v) if k in a else v
        return out
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a + b
    return b if b is not None else a
