"""Answering a search call off the event loop, within a wall-clock budget.

Why: a search is CPU work on untrusted input (a regex, a first index build of a large
catalog), and the proxy's event loop carries every other flow. ``run_query_async`` runs
``run_query`` on a small pool of its own, so runaway searches queue behind each other and
never take the threads other work shares (``asyncio.to_thread``'s default executor).
When ``budget_s`` passes the model gets an error it can read and the flow goes on; a
search still running finishes on its own (the regex backend stops at its own budget),
and one still queued is cancelled before it starts.
"""

from __future__ import annotations

import asyncio
import functools
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from tooldisco.core.types import Tool
from tooldisco.search.base import Searcher
from tooldisco.search.phantom_query import SearchOutcome, run_query

#: Threads for searches; a search past its budget holds one until it gives up.
SEARCH_THREADS = 4

_POOL = ThreadPoolExecutor(max_workers=SEARCH_THREADS, thread_name_prefix="tooldisco-search")


async def run_query_async(
    arguments: Any,
    catalog: Sequence[Tool],
    searcher: Searcher,
    limit: int,
    always_keep: Sequence[str] = (),
    *,
    budget_s: float,
    through: str | None = None,
) -> SearchOutcome:
    """``run_query`` on the search pool; past ``budget_s`` seconds, an error outcome."""
    loop = asyncio.get_running_loop()
    search = functools.partial(run_query, arguments, catalog, searcher, limit, always_keep, through)
    try:
        async with asyncio.timeout(budget_s):
            # Cancelling this future on timeout cancels the pool's job if it has not started.
            return await loop.run_in_executor(_POOL, search)
    except TimeoutError:
        return _over_budget(arguments, searcher, budget_s)


def _over_budget(arguments: Any, searcher: Searcher, budget_s: float) -> SearchOutcome:
    """What the model reads when its search ran out of time."""
    query = arguments.get("query") if isinstance(arguments, dict) else None
    message = (
        f"The search ran past its {budget_s:g} s budget: the query is too expensive; use a few "
        "plain keywords, or 'select:NAME' for a tool you know by name."
    )
    return SearchOutcome(
        [], json.dumps({"error": message}), True, query if isinstance(query, str) else None,
        "search", searcher.name,
    )
