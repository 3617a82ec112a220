"""The process's catalog cache: found by the text a body carries, bounded by what it holds."""

import json

from tooldisco.core.catalog import PREFIX, CatalogCache
from tooldisco.core.types import Tool, ToolCatalog


def catalog(n: int, tag: str = "") -> ToolCatalog:
    tools = tuple(Tool(f"tool{tag}_{i}", json.dumps({"name": f"tool{tag}_{i}", "description": "d" * 200}))
                  for i in range(n))
    raws = tuple(t.raw for t in tools)
    return ToolCatalog(tools, raws, "[" + ",".join(raws) + "]")


def test_a_catalog_is_found_where_a_body_carries_its_whole_text() -> None:
    cache = CatalogCache(1 << 30)
    small, big = catalog(3), catalog(4)  # the same first tools: the same prefix
    cache.add("api", small)
    cache.add("api", big)
    body = '{"tools":' + big.text + ',"messages":[]}'
    assert cache.find("api", body, 9) is big
    assert cache.find("api", '{"tools":' + small.text + "}", 9) is small
    assert cache.find("other api", body, 9) is None
    assert cache.find("api", '{"tools":' + big.text[:-1] + ',{"name":"x"}]}', 9) is None  # one tool more


def test_the_cache_holds_at_most_its_budget_the_least_recently_used_going_first() -> None:
    each = catalog(10, "a").nbytes
    cache = CatalogCache(3 * each + each // 2)
    kept = [catalog(10, tag) for tag in "abcdef"]
    for c in kept[:3]:
        cache.add("api", c)
    assert cache.find("api", kept[0].text, 0) is kept[0]  # used: the second is now the oldest
    for c in kept[3:]:
        cache.add("api", c)
        assert cache.currsize <= cache.max_bytes
    assert len(cache) == 3
    assert cache.find("api", kept[1].text, 0) is None
    assert cache.find("api", kept[5].text, 0) is kept[5]


def test_a_catalog_larger_than_the_budget_or_shorter_than_its_prefix_is_not_kept() -> None:
    cache = CatalogCache(catalog(10).nbytes - 1)
    cache.add("api", catalog(10))
    tiny = ToolCatalog((), (), "[]")
    assert len("[]") < PREFIX
    cache.add("api", tiny)
    assert len(cache) == 0 and cache.currsize == 0
