"""What of a tool is searched, field by field, and how much each field counts.

Why: every backend reads the same parts of a definition, so they are named here once.
Besides name, description and parameters (``Tool``'s fields), the allowed values of
the schema (``enum`` lists, at any depth) are read from the raw definition: they are
often the only place a tool says which things it handles ("Electropop", "Theater",
"fahrenheit"); ``scripts/bench_retrieval.py`` shows the recall they add on BFCL.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Iterator

from tooldisco.core.types import Tool
from tooldisco.search.brief import first_sentence
from tooldisco.search.tokens import words


class Field(Enum):
    NAME = "name"
    DESCRIPTION = "description"
    PARAM_NAME = "param_name"
    PARAM_DESCRIPTION = "param_description"
    SCHEMA_VALUE = "schema_value"


#: How much one occurrence of a word in each field counts. The name counts twice (a query
#: names the action the tool's name states); parameters and values say what a tool takes
#: more than what it does.
FIELD_WEIGHTS: dict[Field, float] = {
    Field.NAME: 2.0,
    Field.DESCRIPTION: 1.0,
    Field.PARAM_NAME: 1.0,
    Field.PARAM_DESCRIPTION: 0.25,
    Field.SCHEMA_VALUE: 0.5,
}


def fields(tool: Tool) -> Iterator[tuple[str, Field]]:
    """The searchable texts of ``tool``, each with its field."""
    yield tool.name, Field.NAME
    if tool.description:
        yield tool.description, Field.DESCRIPTION
    for pname, pdesc in tool.params:
        yield pname, Field.PARAM_NAME
        if pdesc:
            yield pdesc, Field.PARAM_DESCRIPTION
    values = schema_values(tool)
    if values:
        yield " ".join(values), Field.SCHEMA_VALUE


def schema_values(tool: Tool) -> list[str]:
    """Every ``enum`` member in the raw definition (any provider's shape, any depth)."""
    try:
        definition = json.loads(tool.raw)
    except ValueError:
        return []
    found: list[str] = []
    _collect_enums(definition, found)
    return found


def _collect_enums(node: Any, found: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "enum" and isinstance(value, list):
                found.extend(str(v) for v in value if isinstance(v, (str, int, float)))
            else:
                _collect_enums(value, found)
    elif isinstance(node, list):
        for item in node:
            _collect_enums(item, found)


#: A tool is embedded twice, and its vector is the weighted mean of the two: the whole
#: definition as prose, and its purpose alone (name and first sentence), which the
#: parameters would otherwise dilute in the mean over tokens.
EMBEDDING_VIEW_WEIGHTS = (1.0, 0.5)


def embedding_views(tool: Tool) -> tuple[str, str]:
    """(whole definition, purpose) as prose for a sentence encoder."""
    name = " ".join(words(tool.name))
    text = f"{name}: {tool.description}".strip()
    if tool.params:
        params = "; ".join(
            " ".join(words(pname)) + (f": {pdesc}" if pdesc else "") for pname, pdesc in tool.params
        )
        text += f" Parameters: {params}"
    values = schema_values(tool)
    if values:
        text += f" Values: {', '.join(values)}"
    return text, f"{name}: {first_sentence(tool.description)}".strip()
