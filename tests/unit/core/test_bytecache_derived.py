"""Parsed tool definitions are charged from the text they came from (``derived_size``): no
walk of the parsed value on the request path, and never much less than what it holds."""

from __future__ import annotations

import json

import pytest

from tooldisco.core import bytecache
from tooldisco.core.bytecache import derived_size, entry_size
from tooldisco.apis.anthropic import adapter as anthropic
from tooldisco.apis.bedrock import adapter as bedrock
from tooldisco.apis.gemini import adapter as gemini
from tooldisco.apis.openai_chat import adapter as openai_chat
from tooldisco.apis.openai_responses import adapter as openai_responses
from tooldisco.core.types import Tool

from tests.support.catalog import anthropic_tools

ADVERSARIAL = {
    "many tiny params": {"name": "x", "input_schema": {"properties": {f"p{i}": {} for i in range(2000)}}},
    "long text": {"name": "n" * 50_000, "description": "d" * 50_000},
    "one astral escape widens it all": {"name": "x", "description": "\U0001F600" + "a" * 10_000},
}


@pytest.mark.parametrize("module", [anthropic, bedrock, gemini, openai_chat, openai_responses])
def test_caching_a_parsed_tool_never_walks_it(module, monkeypatch: pytest.MonkeyPatch) -> None:
    real = bytecache.deep_size

    def walk(obj: object) -> int:
        if isinstance(obj, Tool) or (isinstance(obj, tuple) and any(isinstance(o, Tool) for o in obj)):
            raise AssertionError("deep_size walked a parsed tool")
        return real(obj)

    monkeypatch.setattr(bytecache, "deep_size", walk)
    raw = json.dumps({"name": f"fresh_{module.__name__}", "description": "d",
                      "toolSpec": {"name": "fresh", "inputSchema": {"json": {}}},
                      "type": "function", "function": {"name": "fresh", "parameters": {}}})
    try:
        module.parse_tool(raw)
    except Exception as e:  # a shape this API rejects still went through the cache's sizing first
        assert not isinstance(e, AssertionError), e


def test_the_charge_is_at_least_what_a_parsed_tool_holds() -> None:
    for tool in anthropic_tools(300):
        raw = json.dumps(tool)
        value = anthropic.parse_tool.__wrapped__(raw)
        assert derived_size((raw,), value) >= 0.99 * entry_size((raw,), value)
    for name, tool in ADVERSARIAL.items():
        raw = json.dumps(tool, separators=(",", ":"))
        value = anthropic.parse_tool.__wrapped__(raw)
        assert derived_size((raw,), value) >= 0.99 * entry_size((raw,), value), name


def test_a_cycle_larger_than_the_cache_still_hits_when_admission_is_limited() -> None:
    """A plain LRU evicts each key just before its next use; admitting one new key in 32 once
    full keeps most of what is held, and a new working set still replaces an old one."""

    def hits(admit: int) -> tuple[int, set[int]]:
        cache = bytecache.ByteLRU(100 * (bytecache.ENTRY_OVERHEAD + 100), lambda k, v: 100, admit_when_full=admit)
        count = 0
        for _ in range(5):
            for key in range(200):  # twice what the budget holds
                if cache.get(key) is not None:
                    count += 1
                else:
                    cache.put(key, "v")
        return count, {k for k in range(200) if cache.get(k) is not None}

    assert hits(1)[0] == 0
    count, held = hits(32)
    assert count >= 4 * 90  # each later round hits (nearly) all it holds
    cache = bytecache.ByteLRU(100 * (bytecache.ENTRY_OVERHEAD + 100), lambda k, v: 100, admit_when_full=32)
    for key in range(100):
        cache.put(key, "old")
    for _ in range(300):  # adopted gradually: about 1/32 of its misses each round
        for key in range(1000, 1100):  # a new working set, used again and again
            if cache.get(key) is None:
                cache.put(key, "new")
    assert sum(cache.get(k) == "new" for k in range(1000, 1100)) == 100
