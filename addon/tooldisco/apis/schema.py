"""JSON schema reading and writing for tool definitions: the phantom tool's parameter schema
and a schema's top-level parameters. Apart: the selector service reads parameters too, and
needs nothing else of the APIs."""

from __future__ import annotations

from typing import Any


def query_schema(*, upper: bool = False, strict: bool = False) -> dict[str, Any]:
    """The phantom tool's one parameter. Gemini's OpenAPI subset spells types upper-case;
    ``strict`` closes the object so OpenAI's strict mode accepts it either way."""
    kind, text = ("OBJECT", "STRING") if upper else ("object", "string")
    schema: dict[str, Any] = {
        "type": kind,
        "properties": {"query": {"type": text, "description": "What to search for."}},
        "required": ["query"],
    }
    if strict:
        schema["additionalProperties"] = False
    return schema


def params_of(schema: Any) -> tuple[tuple[str, str], ...]:
    """Top-level parameter names and descriptions of a JSON schema."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return ()
    out = []
    for name, spec in props.items():
        desc = spec.get("description") if isinstance(spec, dict) else None
        out.append((str(name), desc if isinstance(desc, str) else ""))
    return tuple(out)
