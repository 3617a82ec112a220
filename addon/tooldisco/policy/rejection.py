"""Whether an upstream 4xx to a rewritten request can be the rewrite's doing.

Why: the proxy changes the client's request (tools reduced or deferred, a search tool and a
dispatcher added, ``defer_loading`` marks, ``tool_reference`` / ``tool_search`` items, hidden
rounds) and fails open by sending the client's own request when the upstream refuses the
rewritten one. Most 4xx have nothing to do with the rewrite (an unsupported ``max_tokens``
or ``temperature``, an unknown model, a bad message role, an effort level, a key): the
client's own request gets the same answer, so a resend only bills the upstream's rate limit
twice and doubles the wait. The error says what it refuses (its message, ``param``, ``code``,
a field violation's path), so it is resent only when it names what the proxy changed:

- a tool field (``tools``, ``tools[3]``, ``toolConfig``, ``function_declarations``,
  ``tool_choice``, ``allowed_tools``…) or one native deferral or call-through adds
  (``defer_loading``, ``tool_reference``, ``tool_search``, ``parametersJsonSchema``);
- a tool the proxy added, removed or changed in that request, by its exact name; an error
  about one tool it names by name that the proxy did not change (its schema refused as the
  client wrote it) is the client's own, even where it points at ``tools[0]``;
- any other top-level member of the request the proxy changed (``messages`` when hidden
  rounds were restored or added, ``previous_response_id``…), however the API spells it
  (``tool_config`` and ``toolConfig`` are one field).

Pure, and run only when an error arrives: nothing here is on the way out. A deferred tool
named like a common word can make a needless resend: the cost the proxy had before, never a
lost answer.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from tooldisco.core import jsonspan

# How much of an error is read: errors state their cause in their first lines, and a hostile
# body must not cost more than this.
MAX_ERROR_CHARS = 65536

# The fields only a cache-true deferral adds: native deferral's, and call-through's dispatcher
# schema (``parametersJsonSchema``, which an older API version or gateway may not take). An
# upstream 400 naming one refused that flavour, not the request (``policy.native.refused``).
DEFERRAL_FIELDS = re.compile(r"defer_?loading|tool_?reference|tool_?search|parameters_?json_?schema", re.IGNORECASE)

# Fields of the request's tools, in every API's spelling: ``tools`` as a word or a path step
# (``tools.3.name``, ``tools[0]``, ``'tools'``), never inside another name (``gateway_search_tools``).
_TOOL_FIELDS = re.compile(
    r"(?<![A-Za-z0-9_])tools(?![A-Za-z0-9_])"
    r"|tool_?config|tool_?choice|allowed_?tools|tool_?spec|function_?declarations|" + DEFERRAL_FIELDS.pattern,
    re.IGNORECASE)

# An error about one tool it names: "Invalid schema for function 'get_weather'", "tool
# 'x' ...", "Function name `x` ...", "functionDeclarations[2].name: 'x'".
_QUOTED_TOOL = re.compile(r"""\b(?:function|tool)s?(?:\s+name)?\s*[:=]?\s*['"`]([\w.:-]{1,128})['"`]""", re.IGNORECASE)

# A field as errors spell it (``messages[1].role``, ``#/temperature``, ``generation_config``).
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# A tool name as a whole word: letters, digits, ``_`` and ``-`` (every API's name characters,
# Gemini's ``.`` and ``:`` aside, matched apart).
_NAME = re.compile(r"[\w-]+")

# Where the members holding tool definitions keep their names: Anthropic and Responses
# ``tools[].name``, Chat ``tools[].function.name`` (``custom.name``), Converse
# ``toolConfig.tools[].toolSpec.name``, Gemini ``tools[].functionDeclarations[].name``.
_TOOL_MEMBERS = frozenset({"tools", "toolconfig"})
_HOLDERS = ("tools", "function", "custom", "toolSpec", "functionDeclarations", "function_declarations")


def rewrite_named(error: bytes, original: str | bytes, sent: str | bytes, names: Iterable[str] = ()) -> str | None:
    """What ``error`` (an upstream 4xx body to ``sent``) names that the proxy changed in
    ``sent`` against the client's ``original``, or None when it names nothing of it (the
    client's own request would get the same answer). ``names``: the tools the proxy added,
    removed or changed in ``sent`` as the flow knows them (the search tool, the dispatcher,
    the deferred tools); the tools whose definitions differ between the two bodies are added.

    Cheapest first: the tool fields and the known names are looked for before either body is
    read."""
    text = error_text(error)
    if (field := DEFERRAL_FIELDS.search(text)) is not None:
        return field.group()
    words = set(_NAME.findall(text))
    if (name := _named(text, words, names)) is not None:
        return name
    before, after = _members(_str(original)), _members(_str(sent))
    changed = [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)]
    differ: set[str] = set()  # tools forwarded otherwise than the client sent them (dropped, added)
    for key in changed:
        if _norm(key) in _TOOL_MEMBERS:
            differ |= _defined(before.get(key)) ^ _defined(after.get(key))
    if (name := _named(text, words, differ)) is not None:
        return name
    if _QUOTED_TOOL.search(text):
        # The error is about one tool it names (its schema, its name), and not one the proxy
        # added, deferred or changed: the client's own definition, refused as the client sent it.
        return None
    if (field := _TOOL_FIELDS.search(text)) is not None:
        return field.group()
    if changed:
        return _field_named(text, changed)
    return None


def error_text(body: bytes) -> str:
    """The words of an error: the string values of a JSON body (a message, a ``param``, a
    ``code``, a field violation's path, nested detail), not its keys; a body that is no JSON
    (cut at ``MAX_ERROR_CHARS``, HTML, plain text) as it is."""
    raw = body[:MAX_ERROR_CHARS].decode("utf-8", "replace")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    values: list[str] = []
    stack: list[Any] = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            values.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return "\n".join(values)


def _named(text: str, words: set[str], names: Iterable[str]) -> str | None:
    """The first of ``names`` (exact, case and all) that ``text`` has as a whole word."""
    for name in names:
        if not name:
            continue
        if _NAME.fullmatch(name):
            if name in words:
                return name
        elif re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text):
            return name
    return None


def _field_named(text: str, keys: Iterable[str]) -> str | None:
    """The first of ``keys`` (top-level members) ``text`` names, in any spelling of it."""
    wanted = {_norm(k): k for k in keys}
    for word in _IDENT.findall(text):
        if (key := wanted.get(_norm(word))) is not None:
            return key
    return None


def _norm(field: str) -> str:
    """A field's name without its case or its separators: ``toolConfig`` is ``tool_config``."""
    return field.replace("_", "").replace("-", "").lower()


def _str(body: str | bytes) -> str:
    return body.decode("utf-8", "replace") if isinstance(body, bytes) else body


def _members(text: str) -> dict[str, str]:
    """The top-level members of a JSON object as their raw text (the proxy splices what it
    changes and keeps every other byte, so equal text is an unchanged member); ``{}`` for a
    body that is no JSON object."""
    try:
        return {key: text[start:end] for key, (start, end) in jsonspan.members(text, jsonspan.root(text))}
    except (ValueError, IndexError, RecursionError):
        return {}


def _defined(raw: str | None) -> set[str]:
    """The tool names defined in a member's raw JSON (see ``_HOLDERS``)."""
    if raw is None:
        return set()
    try:
        stack: list[Any] = [json.loads(raw)]
    except (ValueError, RecursionError):
        return set()
    names: set[str] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if isinstance(name := item.get("name"), str):
                names.add(name)
            stack.extend(item[k] for k in _HOLDERS if k in item)
    return names
