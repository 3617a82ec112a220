"""What a search result shows of each tool it found: a brief form, or whole definitions.

Why: a search result is read by the model and costs context. Where the matched tools are
injected with their full definitions (classic and native deferral), the model only needs
to know what each one is for and what it takes: the name, the first sentence of the
description, and the parameter names, about 60 tokens a tool (``brief``). Where nothing is
injected (call-through: the model calls found tools through a dispatcher), the result is the
only place their definitions are (``definition``).
"""

from __future__ import annotations

from typing import Any

from tooldisco.core import jsonspan
from tooldisco.core.types import Tool

MAX_SENTENCE_CHARS = 200
MAX_DEFINITION_CHARS = 16_000  # of one whole definition; a larger schema is cut to its parameters' names
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


def definition(tool: Tool) -> dict[str, Any]:
    """What a search result shows of a found tool: its name, whole description and parameters
    schema, as the client defined them (Chat's ``function`` object, a Gemini declaration)."""
    d = tool.definition
    d = d.get("function", d) if isinstance(d, dict) else {}
    params = next((d[k] for k in ("parameters", "parametersJsonSchema", "parameters_json_schema", "input_schema")
                   if isinstance(d, dict) and k in d), None)
    out: dict[str, Any] = {"name": tool.name, "description": tool.description}
    if params is not None:
        out["parameters"] = params
    if len(jsonspan.dumps(out)) > MAX_DEFINITION_CHARS:  # a runaway schema: the names still guide the call
        out["parameters"] = {"names": [p for p, _ in tool.params]}
    return out
