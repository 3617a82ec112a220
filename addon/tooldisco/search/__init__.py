"""Tool search: the backends that find deferred tools, and the phantom tool's front end.

``make_searcher(name)`` gives a ``Searcher`` for one of ``BACKENDS``; ``run_query``
answers the model's call to the search tool with it, and ``run_query_async`` does so off
the event loop within a wall-clock budget. No mitmproxy in here.
"""

from tooldisco.search.base import MAX_QUERY_CHARS, QueryError, Ranking, Searcher
from tooldisco.search.brief import first_sentence
from tooldisco.search.budget import run_query_async
from tooldisco.search.factory import BACKENDS, make_searcher
from tooldisco.search.phantom_query import SearchOutcome, run_query

__all__ = [
    "BACKENDS",
    "MAX_QUERY_CHARS",
    "QueryError",
    "Ranking",
    "SearchOutcome",
    "Searcher",
    "first_sentence",
    "make_searcher",
    "run_query",
    "run_query_async",
]
