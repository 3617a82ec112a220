"""Brief tool summaries for search results (seed 002's brief mode).

Why: a search result is read by the model and costs context. Full schemas are not
needed there, since the matched tools are injected with their full definitions;
the model only needs to know what each one is for and what it takes: the name, the
first sentence of the description, and the parameter names, about 60 tokens a tool.
"""

from __future__ import annotations

from typing import Any

from ..providers.base import Tool

MAX_SENTENCE_CHARS = 200
ELLIPSIS = "..."


def first_sentence(text: str, max_chars: int = MAX_SENTENCE_CHARS) -> str:
    """Up to the first ". " or ".\\n" (whichever comes first), else the whole text;
    longer than ``max_chars`` is cut and ends in "..." (at most ``max_chars`` in all)."""
    text = text.strip()
    ends = [i for i in (text.find(". "), text.find(".\n")) if i >= 0]
    if ends:
        text = text[: min(ends) + 1]
    if len(text) > max_chars:
        text = text[: max_chars - len(ELLIPSIS)].rstrip() + ELLIPSIS
    return text


def brief(tool: Tool) -> dict[str, Any]:
    """What the model reads about one matched tool."""
    return {
        "name": tool.name,
        "description": first_sentence(tool.description),
        "parameters": [pname for pname, _ in tool.params],
    }
