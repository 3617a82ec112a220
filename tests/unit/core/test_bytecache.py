"""Caches bounded by bytes: the shared helper, and the caches built on it.

Why bytes: a cache bounded by entry count holds whatever its entries weigh (many large user
messages, 30 MB request bodies kept as cache keys); every bound below is in bytes and
measured with tracemalloc.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import tracemalloc
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

from tooldisco.core.bytecache import ENTRY_OVERHEAD, ByteLRU, MiB, deep_size, entry_size, memoize
from tooldisco.apis.anthropic import adapter as anthropic
from tooldisco.apis import catalogs
from tooldisco.core.types import Tool
from tooldisco.search.index_cache import IndexCache


def retained(action: Callable[[], Any]) -> int:
    """Bytes still held, after a collection, by what ``action`` allocated."""
    gc.collect()
    tracemalloc.start()
    try:
        action()
        gc.collect()
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


# --- sizes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    text: str
    items: tuple[str, ...]


def test_deep_size_counts_what_an_object_reaches_once() -> None:
    big = "x" * 100_000
    assert deep_size(big) == sys.getsizeof(big)
    assert deep_size((big, big, [big])) < 2 * sys.getsizeof(big)  # shared: counted once
    assert deep_size({"k": big}) > sys.getsizeof(big) and deep_size({big: 1}) > sys.getsizeof(big)
    assert deep_size(Holder(big, ("y" * 50_000,))) > 150_000  # dataclass fields
    assert deep_size(np.zeros(100_000, dtype=np.float32)) >= 400_000  # the array's buffer
    assert entry_size(big, (big,)) < 2 * sys.getsizeof(big)  # a value sharing its key's text


# --- ByteLRU -----------------------------------------------------------------------------


def test_evicts_least_recently_used_past_the_budget() -> None:
    entry = 100 + ENTRY_OVERHEAD
    cache: ByteLRU[str, str] = ByteLRU(3 * entry, sizeof=lambda key, value: 100)
    cache.put("a", "A")
    cache.put("b", "B")
    cache.put("c", "C")
    assert cache.get("a") == "A"  # now the most recently used
    cache.put("d", "D")  # evicts b
    assert cache.get("b") is None and cache.get("a") == "A" and cache.get("c") == "C"
    assert cache.currsize == 3 * entry and len(cache) == 3


def test_sizes_by_key_and_value_and_skips_what_cannot_fit() -> None:
    cache: ByteLRU[str, str] = ByteLRU(64 * 1024)
    cache.put("small", "value")
    cache.put("k" * 100_000, "v")  # the key alone is over budget
    cache.put("k", "v" * 100_000)
    assert cache.get("small") == "value" and len(cache) == 1  # nothing else was evicted for it
    for i in range(100):
        cache.put(f"key{i}", "v" * 4_000)
        assert cache.currsize <= cache.max_bytes
    assert 10 < len(cache) < 17  # about 4 KB an entry in 64 KB
    cache.clear()
    assert len(cache) == 0 and cache.currsize == 0


def test_is_consistent_under_concurrent_use() -> None:
    entry = 10 + ENTRY_OVERHEAD
    cache: ByteLRU[int, int] = ByteLRU(50 * entry, sizeof=lambda key, value: 10)

    def hammer(seed: int) -> None:
        for i in range(5_000):
            key = (seed * 7919 + i * 104729) % 97
            if cache.get(key) is None:
                cache.put(key, key)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 50 and cache.currsize == 50 * entry


def test_an_entry_is_charged_its_bookkeeping_too() -> None:
    """A cache of short words held more in bookkeeping than its whole budget: the budget
    holds the cache's own maps too."""
    cache: ByteLRU[str, str] = ByteLRU(MiB)

    def fill() -> None:
        for i in range(100_000):
            cache.put(f"word{i}", f"w{i}")

    assert retained(fill) < 1.1 * MiB
    assert cache.currsize <= MiB


# --- memoize ------------------------------------------------------------------------------


def test_memoize_computes_once_and_forgets_on_clear() -> None:
    calls: list[str] = []

    @memoize(MiB)
    def shout(text: str) -> str:
        calls.append(text)
        return text.upper()

    assert shout("hi") == shout("hi") == "HI" and calls == ["hi"]
    shout.cache_clear()  # type: ignore[attr-defined]
    assert shout("hi") == "HI" and calls == ["hi", "hi"]


def test_memoize_does_not_cache_exceptions() -> None:
    calls: list[int] = []

    @memoize(MiB)
    def fail_once(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise ValueError("first call fails")
        return n

    with pytest.raises(ValueError):
        fail_once(1)
    assert fail_once(1) == 1 and fail_once(1) == 1 and calls == [1, 1]


class Body:
    """A stand-in for a large argument that can be watched with a weak reference."""

    def __init__(self, ident: int) -> None:
        self.ident = ident


def test_memoize_key_keeps_a_large_argument_out_of_the_cache() -> None:
    @memoize(MiB, key=lambda body: body.ident)
    def ident(body: Body) -> int:
        return body.ident

    body = Body(7)
    watch = weakref.ref(body)
    assert ident(body) == 7 and ident(Body(7)) == 7
    del body
    gc.collect()
    assert watch() is None


def test_memoize_stays_within_its_budget() -> None:
    @memoize(4 * MiB)
    def words(text: str) -> frozenset[str]:
        return frozenset(text.split())

    def many() -> None:
        for i in range(200):  # 200 x 200 KB texts, held with their words: ~80 MB unbounded
            words(" ".join(f"t{i}w{j}" + "z" * 1_000 for j in range(200)))

    assert retained(many) < 6 * MiB
    assert words.cache.currsize <= 4 * MiB  # type: ignore[attr-defined]


# --- the package's caches -----------------------------------------------------------------


def request(message_bytes: int, tools: list[dict[str, Any]]) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "m" * message_bytes}], "tools": tools})


def test_tool_spans_keeps_no_request_body() -> None:
    tools = [{"name": f"t{i}", "description": "d", "input_schema": {}} for i in range(5)]

    def eight_large_requests() -> None:
        for i in range(8):
            body = request(8 * MiB + i, tools)
            assert catalogs.tool_spans(body, ["tools"]) == catalogs.tool_spans(body, ["tools"])

    assert retained(eight_large_requests) < 1 * MiB  # an lru_cache keyed by body kept 64 MB


def test_tool_spans_of_large_tool_arrays_stay_within_the_budget() -> None:
    def eight_large_arrays() -> None:
        for i in range(8):
            tools = [{"name": f"r{i}t{j}", "description": "d" * 50_000} for j in range(80)]  # 4 MB
            spans = catalogs.tool_spans(request(10, tools), ["tools"])
            assert len(spans) == 80 and json.loads(spans[0])["name"] == f"r{i}t0"

    assert retained(eight_large_arrays) < 17 * MiB


def test_a_body_read_again_hits_the_span_cache() -> None:
    body = request(10, [{"name": "a"}, {"name": "b"}])
    catalogs._tool_spans.cache_clear()  # type: ignore[attr-defined]
    catalogs.tool_spans(body, ["tools"])
    catalogs.tool_spans(body, ["tools"])
    assert len(catalogs._tool_spans.cache) == 1  # type: ignore[attr-defined]
    assert catalogs.tool_spans(body, ["tools"]) == ['{"name": "a"}', '{"name": "b"}']


def test_parsed_tool_definitions_stay_within_the_budget() -> None:
    def many_large_definitions() -> None:
        for i in range(300):  # 300 x 200 KB definitions: 60 MB unbounded
            raw = json.dumps({"name": f"tool_{i}", "description": "d" * 200_000, "input_schema": {}})
            assert anthropic.parse_tool(raw).name == f"tool_{i}"

    assert retained(many_large_definitions) < 17 * MiB


def test_index_cache_is_bounded_by_bytes() -> None:
    def tools(n: int, width: int) -> tuple[Tool, ...]:
        return tuple(Tool(f"t{n}_{i}", "{}", "x" * width) for i in range(3))

    cache: IndexCache[tuple[str, ...]] = IndexCache(lambda ts: tuple(t.description + "!" for t in ts), max_bytes=MiB)
    small = tools(0, 1_000)
    assert cache.get(small) is cache.get(small) and cache.builds == 1
    big = tools(1, 500_000)  # an index of 1.5 MB cannot be kept
    cache.get(big)
    cache.get(big)
    assert cache.builds == 3
    for n in range(2, 20):
        cache.get(tools(n, 100_000))  # 300 KB each: three fit
    assert cache._entries.currsize <= MiB and len(cache._entries) == 3


def test_index_cache_keeps_no_large_catalog_alive_once_built() -> None:
    """One search consults several index caches with one tuple, hashed once; that memo must
    not keep a large catalog alive after its flow."""
    cache: IndexCache[int] = IndexCache(len)
    catalog = tuple(Tool(f"big_{i}", f'{{"name": "big_{i}"}}', "log line " * 60_000) for i in range(3))
    watch = weakref.ref(catalog[0])
    assert cache.get(catalog) == cache.get(catalog) == 3 and cache.builds == 1  # the key is the same
    del catalog
    gc.collect()
    assert watch() is None
