"""Which client sent a request, as a family name from its ``User-Agent``: what telemetry, the
report and the metrics group turns by.

Why a fixed list of families and not the header itself: the header carries versions, platforms
and free text, and a label or a report row per distinct string would grow without bound. A
client not in the list is ``other``; a request without the header is ``""``.
"""

from __future__ import annotations

import re

# (family, pattern over the User-Agent), first match wins: the agent CLIs before the SDKs they
# are built on (Claude Code sends "claude-cli/…", Codex "codex_cli_rs/…", and both may name an SDK).
_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((family, re.compile(pattern, re.IGNORECASE)) for family, pattern in (
    ("claude-code", r"\bclaude-(?:cli|code)\b"),
    ("codex", r"\bcodex"),
    ("gemini-cli", r"\bgemini-?cli\b"),
    ("qwen-code", r"\bqwen-?code\b"),
    ("opencode", r"\bopencode\b"),
    ("cline", r"\bcline\b"),
    ("copilot", r"\bcopilot\b"),
    ("pi", r"\bpi-coding-agent\b|\bpi/\d"),
    ("openai-agents", r"\bopenai-agents\b|\bAgents/Python\b"),
    ("langchain", r"\blangchain\b"),
    ("ai-sdk", r"\bai-sdk\b|\bvercel\b"),
    ("anthropic-python", r"\bAnthropic/Python\b"),
    ("anthropic-js", r"\bAnthropic/JS\b"),
    ("openai-python", r"\bOpenAI/Python\b"),
    ("openai-js", r"\bOpenAI/JS\b"),
    ("google-genai", r"\bgoogle-genai-sdk\b|\bgl-python\b|\bgoogle-genai\b"),
    ("boto3", r"\bBoto3/|\bbotocore/"),
    ("curl", r"^curl/"),
))
FAMILIES = tuple(family for family, _ in _FAMILIES) + ("other",)
_MAX_SCANNED = 512  # a user agent longer than this is read only this far


def family(user_agent: str | None) -> str:
    """The client family of a ``User-Agent`` value: one of ``FAMILIES``, or "" without one."""
    if not user_agent:
        return ""
    text = user_agent[:_MAX_SCANNED]
    for name, pattern in _FAMILIES:
        if pattern.search(text):
            return name
    return "other"
