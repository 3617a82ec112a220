"""Rules over Gemini's answer objects that the adapter and the stitcher both apply.

Why a module of their own: the stitcher (a live stream) must treat calls, signatures and
usage exactly as the adapter does for a whole answer, without depending on the adapter.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from tooldisco.apis.usage import sum_usage
from tooldisco.apis.streaming import as_dict, as_list
from tooldisco.core.types import ToolCall

# Google's documented thoughtSignature for a function call whose own signature is unavailable.
STAND_IN_SIGNATURE = "skip_thought_signature_validator"


def _field(d: Any, camel: str, snake: str) -> Any:
    """A field under either spelling (the REST API takes both)."""
    if not isinstance(d, dict):
        return None
    return d[camel] if camel in d else d.get(snake)


def _parts(message: dict[str, Any]) -> list[Any]:
    candidates = as_list(message.get("candidates"))
    content = as_dict(candidates[0]).get("content") if candidates else None
    return as_list(as_dict(content).get("parts"))


def call_of(call: dict[str, Any], rank: int) -> ToolCall:
    """A functionCall object, the ``rank``-th call of its turn. The API gives calls an ``id``
    only sometimes; without one, ``name#rank`` stands in."""
    name = str(call.get("name"))
    given = call.get("id")
    args = call.get("args")
    return ToolCall(given if isinstance(given, str) and given else f"{name}#{rank}", name,
                    args if args is not None else {})


def _by_modality(lists: Iterable[Any]) -> list[dict[str, Any]]:
    """``*TokensDetails`` lists (``[{modality, tokenCount}]``) summed modality by modality."""
    counts: dict[str | None, int] = {}
    for details in lists:
        for d in map(as_dict, as_list(details)):
            modality, count = d.get("modality"), d.get("tokenCount")
            if isinstance(count, int) and (modality is None or isinstance(modality, str)):
                counts[modality] = counts.get(modality, 0) + count
    return [{"modality": m, "tokenCount": n} for m, n in counts.items()]


def merge(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Parts of the first candidate in order, usage summed (details per modality);
    ``responseId`` is round one's, the rest is the last round's."""
    out = dict(rounds[-1])
    if "responseId" in rounds[0]:
        out["responseId"] = rounds[0]["responseId"]
    candidates = as_list(out.get("candidates"))
    if candidates and isinstance(candidates[0], dict):
        first = dict(candidates[0])
        first["content"] = {**as_dict(first.get("content")), "parts": [p for r in rounds for p in _parts(r)]}
        out["candidates"] = [first, *candidates[1:]]
    usages: list[dict[str, Any]] = [u for r in rounds if isinstance(u := r.get("usageMetadata"), dict)]
    usage = sum_usage(usages)
    if usage is not None:
        for key, value in usage.items():
            if isinstance(value, list):
                usage[key] = _by_modality(u.get(key) for u in usages)
        out["usageMetadata"] = usage
    return out
