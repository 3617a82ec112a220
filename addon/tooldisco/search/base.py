"""The contract every search backend meets, and what they share.

Why: the proxy, the strategies and the benchmark only ever see ``Searcher``; a
backend is picked by name from config (see ``factory``). A backend can answer
through another one (regex falls back to fuzzy, hybrid to BM25 without its
model), and telemetry wants to know, so ``rank`` returns a ``Ranking`` saying
which backend answered and why; ``search`` is the plain list of names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import Iterable, Protocol, Sequence

from tooldisco.core.types import Tool

#: Longest query a backend accepts. Longer is a ``QueryError``: a regex that long is
#: either a mistake or an attack, and no honest tool search needs more.
MAX_QUERY_CHARS = 1000


#: A query that builds every index a backend may need for a catalog, ahead of its first
#: search: words no catalog has take every backend down its fallback path too (fuzzy
#: keywords, which take seconds to build at 10k tools: too long inside a search's budget).
WARM_UP_QUERY = "zqxjv wkpfy"


class QueryError(ValueError):
    """The query cannot be searched as given; the message is meant for the model."""


@dataclass(frozen=True)
class Ranking:
    """Ranked tool names, best first, and which backend produced them."""

    names: list[str]
    backend: str
    # Why the asked-for backend handed over to ``backend`` (None when it did not).
    fallback: str | None = None
    # The server the query named (``names``): ``names`` then holds all its tools, more
    # than the limit asked for, and the caller loads the first and lists the rest.
    group: str | None = None


class Searcher(Protocol):
    """A tool-search backend. Instances are cheap, thread-safe, and cache their indexes."""

    name: str

    def search(self, query: str, tools: Sequence[Tool], limit: int) -> list[str]:
        """At most ``limit`` tool names, best first; [] when nothing is relevant."""
        ...

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        """Like ``search``, also saying which backend answered and why."""
        ...


class SearcherBase(ABC):
    """Derives ``search`` from ``rank``, so each backend writes only ``rank``."""

    name: str

    def search(self, query: str, tools: Sequence[Tool], limit: int) -> list[str]:
        return self.rank(query, tools, limit).names

    @abstractmethod
    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking: ...


def check_query(query: str) -> None:
    """Raise ``QueryError`` for a query no backend should run."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(
            f"query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}"
        )


_NAME, _FINGERPRINT = attrgetter("name"), attrgetter("fingerprint")


def catalog_key(tools: Sequence[Tool]) -> str:
    """A catalog's identity within this process: every field of every tool, in order.

    Python's own hashes (each tool's ``fingerprint``, made once per tool), not a digest: a
    session sends the same definitions every turn and the adapters hand out the same Tool
    for each, so a large catalog costs a hash of cached ints, not a SHA-256 of its
    megabytes on every search. The key never leaves the process, whose hash seed is
    random: names hashed apart from the fingerprints keep a collision out of reach.
    """
    names = hash(tuple(map(_NAME, tools)))
    fingerprints = hash(tuple(map(_FINGERPRINT, tools)))
    return f"{len(tools)}:{names:x}:{fingerprints:x}"


class Catalog(tuple[Tool, ...]):
    """The tools one request may search, which knows its ``catalog_key``.

    Why: reading 10,000 tools' names and fingerprints costs 1-2 ms, a search at that size
    not much more. The proxy builds one catalog per request; its warm-up, its searches and
    every index they consult (names, BM25, fuzzy, embeddings) then share one key.
    """

    @cached_property
    def key(self) -> str:
        return catalog_key(self)


def as_catalog(tools: Iterable[Tool]) -> Catalog:
    """``tools`` as a ``Catalog`` (itself when it is one, so its key is kept)."""
    return tools if isinstance(tools, Catalog) else Catalog(tools)
