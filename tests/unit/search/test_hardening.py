"""Model queries are untrusted: hostile patterns, memory, and the search budget.

Unguarded, a huge repeat count (``a{20000000}``, ``a{4294967294}``) stalls every flow and
takes gigabytes while compiling, a few distinct ones (``a{1000000+i}``) stay in the regex
module's pattern cache, and many distinct large user messages fill relevance's word
cache. Memory is measured with
tracemalloc (the ``regex`` module allocates through Python's allocator, so its compiled
code is traced too); nothing here asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import tracemalloc
from typing import Any, Callable, Iterator, Sequence

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tooldisco.config import parse
from tooldisco.core.types import RequestView, Tool
from tooldisco.search.base import Ranking
from tooldisco.search.factory import make_searcher
from tooldisco.search.phantom_query import run_query
from tooldisco.search.budget import run_query_async
from tooldisco.search import budget, patterns
from tooldisco.search.patterns import (
    PatternTooExpensive,
    UnsupportedPattern,
    check,
    compile_pattern,
    compiled_bytes,
)
from tooldisco.search.regex_search import RegexSearcher
from tooldisco.policy import relevance

MB = 1 << 20


def tool(name: str, description: str) -> Tool:
    return Tool(name, json.dumps({"name": name, "description": description}), description)


# Long descriptions for backtracking to chew on, beside ordinary tools.
CATALOG = (
    tool("get_weather", "Get the current weather for a city."),
    tool("list_files", "List the files of a folder."),
    tool("aaa", "a" * 5000 + "!"),
    tool("xxx", "x" * 5000),
)


@pytest.fixture(autouse=True)
def cold_pattern_cache() -> Iterator[None]:
    patterns.clear_cache()
    RegexSearcher().rank("warm the index", CATALOG, 1)  # index builds are not measured
    yield
    patterns.clear_cache()


def measured(action: Callable[[], Any]) -> tuple[Any, int, int]:
    """(result, bytes still held after a collection, peak bytes) of running ``action``."""
    gc.collect()
    tracemalloc.start()
    try:
        result = action()
        gc.collect()
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, retained, peak


def compiled_twice(pattern: str) -> tuple[Any, int, int]:
    """``measured`` of compiling ``pattern`` a second time: tables ``regex`` builds on first
    use (case folding, Unicode properties) are kept for good, and are not the pattern's."""
    regex.compile(pattern, patterns.FLAGS, cache_pattern=False)
    return measured(lambda: regex.compile(pattern, patterns.FLAGS, cache_pattern=False))


def regex_query(pattern: str) -> Any:
    return run_query({"query": pattern}, CATALOG, make_searcher("regex"), 5)


def assert_readable_refusal(outcome: Any) -> None:
    assert outcome.is_error and outcome.matched == []
    error = json.loads(outcome.text)["error"]
    assert error.startswith("The pattern is too expensive: ") and "use keywords" in error


# --- hostile patterns ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern",
    ["a{20000000}", "a{4294967294}", "(a{1000}){1000}", "((a+)+)+b", "(a{1000})(?i){1000}",
     "(a{1000})(?#note){1000}", "(" * 11 + "a" + ")" * 11],
)
def test_hostile_patterns_are_refused_before_compiling(pattern: str) -> None:
    outcome, retained, peak = measured(lambda: regex_query(pattern))
    assert_readable_refusal(outcome)
    assert peak < 1 * MB and retained < 256 * 1024


def test_refusals_say_why() -> None:
    with pytest.raises(PatternTooExpensive, match="a repeat count of 4294967294 is over the limit of 1000"):
        check("a{4294967294}")
    with pytest.raises(PatternTooExpensive, match="written out it is 1008006 characters long"):
        check("(a{1000}){1000}")
    with pytest.raises(PatternTooExpensive, match="quantifiers nest more than 2 deep"):
        check("((a+)+)+b")
    with pytest.raises(PatternTooExpensive, match="groups nest more than 10 deep"):
        check("(" * 11 + ")" * 11)


def test_six_distinct_huge_repeats_leave_nothing_behind() -> None:
    def six() -> list[Any]:
        return [regex_query(f"a{{{1_000_000 + i}}}") for i in range(6)]

    outcomes, retained, peak = measured(six)
    for outcome in outcomes:
        assert_readable_refusal(outcome)
    assert peak < 1 * MB and retained < 256 * 1024


@pytest.mark.parametrize("pattern", ["(a|aa)+$", "(x+x+)+y", "(a+)+$"])
def test_catastrophic_backtracking_over_long_descriptions_runs_out_of_budget(pattern: str) -> None:
    outcome, retained, peak = measured(lambda: regex_query(pattern))
    assert_readable_refusal(outcome)
    assert "ran past its 50 ms budget" in json.loads(outcome.text)["error"]
    assert peak < 4 * MB and retained < 512 * 1024


def test_distinct_patterns_are_not_kept_once_our_cache_is_cleared() -> None:
    """``regex`` notes every compiled pattern in a module dict even with cache_pattern=False."""

    def many() -> None:
        for i in range(200):
            compile_pattern(f"tool_{i}_" + "b" * 900)
        patterns.clear_cache()

    _, retained, _ = measured(many)
    assert retained < 64 * 1024  # 200 notes of ~1 KB each would be ~200 KB


def test_compiled_patterns_are_cached_by_bytes() -> None:
    assert compile_pattern("file|folder") is compile_pattern("file|folder")
    for i in range(50):
        compile_pattern(f"(?:x{i}|y){{1,200}}")  # about 0.9 MB each by the estimate
    assert patterns._COMPILED.currsize <= patterns.CACHE_BYTES
    assert 0 < len(patterns._COMPILED) < 50


# --- ordinary patterns still work --------------------------------------------------------


@pytest.mark.parametrize(
    "pattern, expected",
    [("file|folder", "list_files"), ("^get_", "get_weather"), (r"\p{L}+_weather", "get_weather"),
     ("[[:alpha:]]+_files", "list_files"), (r"weather\b", "get_weather"), ("(?i)LIST_(?:files){1}", "list_files"),
     (r"[a-z_]{1,64}files", "list_files")],
)
def test_ordinary_patterns_search_as_regex(pattern: str, expected: str) -> None:
    ranking = RegexSearcher().rank(pattern, CATALOG, 5)
    assert ranking.backend == "regex" and ranking.names[0] == expected


@pytest.mark.parametrize("pattern", ["{files}", "(?x) list files", "[a[b]", "files{e<=1}", "(?V1)[[a-z]--[aeiou]]"])
def test_syntax_the_guard_does_not_read_falls_back_to_keywords(pattern: str) -> None:
    with pytest.raises(UnsupportedPattern):
        check(pattern)
    ranking = RegexSearcher().rank(pattern, CATALOG, 5)
    assert ranking.backend == "fuzzy" and ranking.fallback.startswith("invalid regex")


# The dearest items per character (measured), each near the limits.
@pytest.mark.parametrize(
    "pattern",
    [r"\R{990}", r"\X{990}", "(?f)ß{1000}", "(a){600}", r"[\w\d\s\p{L}\p{Greek}]{80}", r"(?=a){390}",
     "a" * 1000, "(?:ab|cd){200}", r"\N{1,990}"],
)
def test_the_estimate_bounds_what_compiling_holds(pattern: str) -> None:
    estimate = compiled_bytes(pattern)
    compiled, retained, peak = compiled_twice(pattern)
    assert compiled is not None
    assert retained <= estimate and peak <= 3 * estimate


# Random patterns over the syntax the guard reads, tricky items included: whatever it
# accepts and regex compiles must hold no more than the guard's estimate.
_ATOMS = st.sampled_from(
    ["a", "ß", ".", r"\d", r"\R", r"\X", r"\b", "[a-z]", "[)(]", "[]a]", "[^]]", "[[:alpha:]]", r"\N{1,3}",
     r"\p{L}", r"\N{LATIN SMALL LETTER A}", "(?i)", "(?#c)", "(?#\\))", "(?1)", r"\)", "x|", "^", "$"]
)
_QUANTIFIERS = st.sampled_from(
    ["", "", "", "", "", "*", "+", "?", "{2}", "{3,}", "{,4}", "{5,9}", "{30}", "{70}", "{300}", "+?", "{9}+"]
)


def _patterns() -> st.SearchStrategy[str]:
    def wrap(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        group = st.tuples(st.sampled_from(["(", "(?:", "(?>", "(?i:", "(?=", "(?P<n>"]), st.lists(inner, min_size=1, max_size=4))
        return st.tuples(group.map(lambda g: g[0] + "".join(g[1]) + ")"), _QUANTIFIERS).map("".join)

    item = st.recursive(st.tuples(_ATOMS, _QUANTIFIERS).map("".join), wrap, max_leaves=12)
    return st.lists(item, min_size=1, max_size=6).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # tracemalloc: ~0.4 s each
@given(_patterns())
def test_accepted_random_patterns_compile_within_the_estimate(pattern: str) -> None:
    try:
        check(pattern)
    except (PatternTooExpensive, UnsupportedPattern):
        return
    try:
        _, retained, peak = compiled_twice(pattern)
    except (regex.error, ValueError):
        return
    estimate = compiled_bytes(pattern)
    assert retained <= estimate and peak <= 3 * estimate, pattern


# --- the search budget -------------------------------------------------------------------


class Blocking:
    """A searcher that holds its thread until released, counting how often it ran."""

    name = "blocking"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        with self._lock:
            self.calls += 1
        self.release.wait()
        return Ranking([tools[0].name], self.name)

    def search(self, query: str, tools: Sequence[Tool], limit: int) -> list[str]:
        return self.rank(query, tools, limit).names


async def test_a_search_past_its_budget_answers_at_once_with_an_error() -> None:
    searcher = Blocking()
    # The search never ends until released, which happens only after the answer came.
    outcome = await run_query_async({"query": "anything"}, CATALOG, searcher, 5, budget_s=0.05)
    searcher.release.set()
    assert outcome.is_error and outcome.matched == [] and outcome.query == "anything"
    assert outcome.backend == "blocking"
    error = json.loads(outcome.text)["error"]
    assert "ran past its 0.05 s budget" in error and "too expensive" in error


async def test_searches_queued_past_their_budget_never_start() -> None:
    searcher = Blocking()
    outcomes = await asyncio.gather(*(
        run_query_async({"query": f"q{i}"}, CATALOG, searcher, 5, budget_s=0.05)
        for i in range(2 * budget.SEARCH_THREADS)
    ))
    searcher.release.set()
    assert all(o.is_error for o in outcomes)
    # Let the running ones finish, then check that only they ever started.
    await asyncio.gather(*(
        run_query_async({"query": "done"}, CATALOG, make_searcher("bm25"), 5, budget_s=30)
        for _ in range(budget.SEARCH_THREADS)
    ))
    assert searcher.calls <= budget.SEARCH_THREADS


async def test_a_search_within_its_budget_is_answered_normally() -> None:
    outcome = await run_query_async({"query": "file|folder"}, CATALOG, make_searcher("regex"), 5, budget_s=30)
    assert not outcome.is_error and outcome.matched == ["list_files"] and outcome.backend == "regex"


async def test_twenty_hostile_searches_do_not_block_the_event_loop() -> None:
    done = asyncio.Event()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    hostile = ["(a|aa)+$", "(x+x+)+y", "a{20000000}", "(a{1000}){1000}"]
    outcomes = await asyncio.gather(*(
        run_query_async({"query": hostile[i % len(hostile)]}, CATALOG, make_searcher("regex"), 5, budget_s=30)
        for i in range(20)
    ))
    done.set()
    await task
    for outcome in outcomes:
        assert_readable_refusal(outcome)
    # Ten of the searches each backtrack for their whole 50 ms regex budget, off the loop:
    # had they run on it, the ticker would have had about one turn per search.
    assert ticks > 200


# --- relevance's word cache ---------------------------------------------------------------


def test_distinct_large_user_messages_are_not_retained() -> None:
    cfg = parse({"pipes": {"tool_discovery": {"enabled": True, "strategy": "relevance"}}}).tool_discovery
    tools = tuple(tool(f"tool_{i}", f"Does thing number {i} with widgets.") for i in range(30))

    def message(i: int) -> str:  # 300 KB: a hundred distinct 3,000-character words
        return " ".join(f"m{i}w{j}" + "y" * 2990 for j in range(100))

    def six_hundred() -> None:
        for i in range(600):
            relevance.select(RequestView(tools=tools, query=message(i)), cfg, 10)

    relevance.tokens.cache_clear()
    _, retained, _ = measured(six_hundred)
    assert retained < 50 * MB  # an unbounded cache would keep every message's words
    assert relevance.tokens.cache.currsize <= relevance.tokens.cache.max_bytes
