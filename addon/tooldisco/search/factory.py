"""Picking a search backend by its configured name.

Why: config names a backend with a string; this is the one place that turns the string
into a searcher, so the set of names (``BACKENDS``, which config validates against) and the set of classes cannot drift.
"""

from __future__ import annotations

from tooldisco.config import SEARCH_BACKENDS
from tooldisco.search.base import Searcher
from tooldisco.search.bm25_search import BM25Searcher
from tooldisco.search.fuzzy_search import FuzzySearcher
from tooldisco.search.hybrid_search import HybridSearcher
from tooldisco.search.names import NamedFirst
from tooldisco.search.priors import Learned, Priors
from tooldisco.search.regex_search import RegexSearcher

BACKENDS: tuple[str, ...] = SEARCH_BACKENDS


def make_searcher(backend: str, *, cache_dir: str | None = None) -> Searcher:
    """A searcher for ``backend`` that ranks the tools a query names first (``names``);
    ``cache_dir`` holds hybrid's embedding cache.

    Raises ``ValueError`` for an unknown name (config reports it against its key).
    """
    return NamedFirst(_backend(backend, cache_dir))


def _backend(backend: str, cache_dir: str | None) -> Searcher:
    if backend == "regex":
        return RegexSearcher()
    if backend == "bm25":
        return BM25Searcher()
    if backend == "hybrid":
        return HybridSearcher(cache_dir)
    if backend == "fuzzy":
        return FuzzySearcher()
    raise ValueError(f"unknown search backend {backend!r}; expected one of {', '.join(BACKENDS)}")


def with_priors(searcher: Searcher, priors: Priors | None) -> Searcher:
    """``searcher`` (one ``make_searcher`` made) ranking with a tenant's learned priors; the
    tools a query names still come first, above anything learned."""
    if not priors or not isinstance(searcher, NamedFirst):
        return searcher
    return NamedFirst(Learned(searcher.inner, priors))
