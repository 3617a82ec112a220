"""A telemetry record (as its dict) in words: the flow's comment and the contentview's header.

Why from the record: the engine already counted everything a person asks about (tools,
tokens, searches, latency, fallback) when it handled the flow; computing it again here
could only disagree with the telemetry file.
"""

from __future__ import annotations

from typing import Any, Sequence

MAX_QUERY = 80  # characters of a search query shown in a one-line comment
MAX_MATCHES = 4  # matched names shown per search in a comment


def comment(record: dict[str, Any], found: int, rounds: int) -> str:
    """One line for the flow list: strategy, tools, tokens, searches, rounds, added time, fallback."""
    parts = [f"tool discovery: {record.get('strategy')}"]
    total, kept, deferred = record.get("total_tools", 0), record.get("kept_tools", 0), record.get("deferred_tools", 0)
    parts.append(f"{total} tools: {kept} kept, {deferred} deferred, {found} found")
    parts.append(f"tool tokens ~{record.get('tool_tokens_before', 0):,} → ~{record.get('tool_tokens_after', 0):,}")
    for search in _searches(record):
        matched = [str(m) for m in search.get("matched") or []]
        shown = ", ".join(matched[:MAX_MATCHES]) + (f" +{len(matched) - MAX_MATCHES}" if len(matched) > MAX_MATCHES else "")
        parts.append(f"search {_quote(search.get('query'))} → {shown or 'nothing'}")
    if rounds:
        parts.append(f"{rounds} upstream rounds")
    if record.get("loops") or _searches(record):
        parts.append(f"+{record.get('loop_added_ms', 0):.1f} ms added")
    if record.get("fallback_reason"):
        parts.append(f"fallback: {record['fallback_reason']}")
    outcome = record.get("outcome")
    if outcome and outcome not in ("done", "no_phantom", "mixed"):
        parts.append(f"outcome: {outcome}")
    return " · ".join(parts)


def details(record: dict[str, Any], found: int, round_ids: Sequence[str]) -> list[str]:
    """The contentview's header: the same facts, one per line, every search in full."""
    lines = [
        f"tool discovery · {record.get('provider')} · strategy {record.get('strategy')} · session {record.get('session') or '-'}",
        f"tools: {record.get('total_tools', 0)} sent by the client, {record.get('kept_tools', 0)} forwarded, "
        f"{record.get('deferred_tools', 0)} deferred, {found} found",
        f"estimated tool tokens: {record.get('tool_tokens_before', 0):,} → {record.get('tool_tokens_after', 0):,}",
        f"processing {record.get('processing_ms', 0):.1f} ms · phantom loop {record.get('loops', 0)} round(s), "
        f"+{record.get('loop_added_ms', 0):.1f} ms added, upstream {record.get('upstream_ms', 0):.1f} ms",
    ]
    if record.get("fallback_reason"):
        lines.append(f"fallback: {record['fallback_reason']}")
    if record.get("outcome"):
        lines.append(f"outcome: {record['outcome']}")
    for i, search in enumerate(_searches(record), 1):
        matched = ", ".join(str(m) for m in search.get("matched") or []) or "nothing"
        note = f" ({search['fallback']})" if search.get("fallback") else ""
        error = f" error: {search['error']}" if search.get("error") else ""
        lines.append(f"search {i}: {search.get('query')!r} via {search.get('backend')}{note}, "
                     f"{search.get('latency_ms', 0):.1f} ms → {matched}{error}")
    if round_ids:
        lines.append(f"hidden upstream rounds (the proxy's own flows): {', '.join(round_ids)}")
    return lines


def found_names(record: dict[str, Any]) -> list[str]:
    """Tools this flow's searches loaded for the model, in the order they were found."""
    seen: dict[str, None] = {}
    for search in _searches(record):
        for name in search.get("matched") or []:
            seen.setdefault(str(name), None)
    return list(seen)


def _searches(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in record.get("searches") or [] if isinstance(s, dict)]


def _quote(query: Any) -> str:
    text = str(query) if query is not None else ""
    return repr(text if len(text) <= MAX_QUERY else text[: MAX_QUERY - 1] + "…")
