"""Value cues (``search.cues``): the kinds of value a query carries, and what BM25 makes of them."""

from __future__ import annotations

import pytest

from tooldisco.core.types import Tool
from tooldisco.search.bm25_search import BM25Searcher, bm25_index
from tooldisco.search.cues import cue_words


def tool(name: str, description: str, *params: str) -> Tool:
    return Tool(name=name, raw=f'{{"name": "{name}"}}', description=description, params=tuple((p, "") for p in params))


@pytest.mark.parametrize(("query", "kinds"), [
    ("the forecast for Berkeley on April 25th", ["date"]),
    ("weather on the 2nd of march", ["date"]),
    ("events on 2023-03-05 or 3/5/2023", ["date"]),
    ("book a table for next Saturday", ["date"]),
    ("move it to Thursday at 4:30 PM", ["date", "time"]),
    ("a cab at 2pm", ["time"]),
    ("mail andy@gorilla.ai the report", ["email"]),
    ("fetch https://example.com/page", ["url"]),
    ("run d:/playground/pc_contoller/test.py", ["file"]),
    ("open notes.txt", ["file"]),
    ("list /home/me/src and ./docs/api", ["file"]),
    ("convert $5 and 10 euros", ["currency"]),
    ("find hotels in London", []),
    ("may I have the latest version 2.0 of it", []),
    ("x." * 499 + "@", []),
])
def test_cue_words(query: str, kinds: list[str]) -> None:
    assert cue_words(query) == kinds


WEATHER = (
    tool("a_weather_now", "Get the weather for a city.", "city"),
    tool("b_weather_on_day", "Get the weather for a city.", "city", "date"),
    tool("calendar_add", "Add an event to the calendar on a date.", "title", "date"),
)


def test_a_date_in_the_query_prefers_the_tool_that_takes_one() -> None:
    search = BM25Searcher().search
    assert search("weather in Berkeley", WEATHER, 2) == ["a_weather_now", "b_weather_on_day"]  # a tie, by name
    assert search("weather in Berkeley on April 25th", WEATHER, 2) == ["b_weather_on_day", "a_weather_now"]


def test_a_cue_alone_finds_nothing() -> None:
    """The cue's word counts only for tools that match the query's own words."""
    scores = bm25_index(WEATHER).scores("weather in Berkeley on April 25th")
    assert scores[2] == 0
    assert not bm25_index(WEATHER).scores("xyzzy on April 25th").any()
