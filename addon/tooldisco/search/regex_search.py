"""Regex search over tool text, bounded in memory and time, falling back to fuzzy keywords.

Why: models are used to grep-like tool search (as in Anthropic's regex tool search:
``weather``, ``file|folder``, ``get_.*``), but the pattern is untrusted model output.
``patterns`` bounds what it may cost before it is compiled (repeat counts, size written
out, nesting); it then runs case-insensitively on the ``regex`` module with one time
budget for the whole catalog.
A pattern over those bounds, or one that runs out of time (``(a|aa)+$`` over a long
description), is a ``PatternTooExpensive`` error the model reads and answers with
keywords. A pattern that does not compile or matches nothing is searched again as fuzzy
keywords, since models as often send prose ("weather forecast") as a pattern. A pattern
longer than ``MAX_QUERY_CHARS`` is a ``QueryError`` the caller reports.

Ranking: a match in the name beats one in the description, which beats one in the
parameters; within a field, the larger the share of the field the match covers, the
better (``weather`` is more of ``get_weather`` than of ``weather_forecast_daily``);
then catalog order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from tooldisco.core.types import Tool
from tooldisco.search.base import Ranking, SearcherBase, check_query
from tooldisco.search.fuzzy_search import FuzzySearcher
from tooldisco.search.index_cache import IndexCache
from tooldisco.search.patterns import PatternTooExpensive, UnsupportedPattern, compile_pattern

#: Wall-clock budget for one search across the whole catalog, in seconds.
TIME_BUDGET = 0.05

_NAME, _DESCRIPTION, _PARAMS = 0, 1, 2


@dataclass(frozen=True)
class RegexIndex:
    """Each tool's ``search_text`` and where its fields end in it."""

    names: tuple[str, ...]
    texts: tuple[str, ...]
    # search_text is name, description, parameters, newline-joined, empty parts left out.
    field_ends: tuple[tuple[int, int, int], ...]  # (name, description, whole text)

    @classmethod
    def build(cls, tools: Sequence[Tool]) -> RegexIndex:
        ends = []
        for tool in tools:
            name_end = len(tool.name)
            desc_end = name_end + 1 + len(tool.description) if tool.description else name_end
            ends.append((name_end, desc_end, len(tool.search_text)))
        return cls(
            names=tuple(t.name for t in tools),
            texts=tuple(t.search_text for t in tools),
            field_ends=tuple(ends),
        )

    def field_of(self, i: int, start: int) -> tuple[int, int, int]:
        """The field of tool ``i`` that offset ``start`` is in: (field, its start, its end)."""
        name_end, desc_end, text_end = self.field_ends[i]
        if start < name_end:
            return _NAME, 0, name_end
        if start <= desc_end:
            return _DESCRIPTION, name_end + 1, desc_end
        return _PARAMS, desc_end + 1, text_end


_INDEXES: IndexCache[RegexIndex] = IndexCache(RegexIndex.build)


class RegexSearcher(SearcherBase):
    name = "regex"

    def __init__(self, time_budget: float = TIME_BUDGET):
        self._fallback = FuzzySearcher()
        self._time_budget = time_budget

    def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
        check_query(query)
        try:
            names = self._regex_rank(query, tools, limit)
        except UnsupportedPattern as exc:
            return self._fall_back(query, tools, limit, f"invalid regex: {exc}")
        except TimeoutError:
            raise PatternTooExpensive(
                f"it ran past its {self._time_budget * 1000:g} ms budget over the catalog"
            ) from None
        if not names:
            return self._fall_back(query, tools, limit, "regex matched nothing")
        return Ranking(names, self.name)

    def _fall_back(self, query: str, tools: Sequence[Tool], limit: int, why: str) -> Ranking:
        return Ranking(self._fallback.search(query, tools, limit), self._fallback.name, why)

    def _regex_rank(self, query: str, tools: Sequence[Tool], limit: int) -> list[str]:
        """Raises what ``compile_pattern`` raises, and ``TimeoutError`` past the budget."""
        index = _INDEXES.get(tools)  # a first build is not the pattern's time
        search = compile_pattern(query).search  # bounded before compiling, so outside the budget
        deadline = time.monotonic() + self._time_budget
        ranked: list[tuple[int, float, int]] = []
        for i, text in enumerate(index.texts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("regex search budget exhausted")
            # Positional (pos, endpos, concurrent, partial, timeout): keywords cost more per call, once a tool.
            match = search(text, None, None, None, False, remaining)
            if match is None:
                continue
            field, start, end = index.field_of(i, match.start())
            coverage = (min(match.end(), end) - match.start()) / max(end - start, 1)
            ranked.append((field, -coverage, i))
        ranked.sort()
        return [index.names[i] for *_, i in ranked[: max(limit, 0)]]
