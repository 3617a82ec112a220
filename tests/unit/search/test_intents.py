"""Multi-intent queries: split into intents, each searched, the head diversified (xQuAD)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tooldisco.core.types import Tool
from tooldisco.search.factory import make_searcher
from tooldisco.search.bm25_search import bm25_index
from tooldisco.search.intents import MAX_INTENTS, ranked, search, split_intents


def tool(name: str, description: str) -> Tool:
    return Tool(name=name, raw=json.dumps({"name": name, "description": description}), description=description)


# Several readers and plotters match two words of the query each ("read", "csv"; "plot",
# "chart"), the one mailer a single word: ranked as one text, readers and plotters take
# the head and the mailer falls behind.
CATALOG = (
    tool("read_csv", "Read a CSV file into a table."),
    tool("csv_reader", "Read CSV rows one by one."),
    tool("load_csv", "Read a CSV file from a URL."),
    tool("plot_line_chart", "Plot a line chart of a series."),
    tool("plot_bar_chart", "Plot a bar chart of categories."),
    tool("plot_pie_chart", "Plot a pie chart of shares."),
    tool("send_email", "Email a message with attachments to recipients."),
    *(tool(f"{topic}_lookup", f"Look up a {topic} record by id.") for topic in
      ("invoice", "shipment", "ticket", "customer", "contract", "domain", "volume", "coupon", "refund", "survey")),
)
QUERY = "read the csv, plot it, email the chart"


def test_split_intents() -> None:
    assert split_intents("What's the weather in Paris, France?") == []  # two clauses qualify one request
    assert split_intents("Find the weather in Paris. Then email it to Bob.\nThanks!") == [
        "Find the weather in Paris.", "email it to Bob.", "Thanks!"]
    assert split_intents("read the csv, plot it, email the chart") == ["read the csv", "plot it", "email the chart"]
    assert split_intents("read the csv and then plot it") == ["read the csv", "plot it"]
    assert len(split_intents(". ".join(f"find tool number {i}" for i in range(20)))) == MAX_INTENTS


def test_each_intent_gets_its_tool() -> None:
    whole = bm25_index(CATALOG).scores(QUERY)
    plain_top5 = {CATALOG[i].name for i in np.argsort(-whole, kind="stable")[:5]}
    assert "send_email" not in plain_top5
    top5 = make_searcher("bm25").search(QUERY, CATALOG, 5)
    assert "send_email" in top5 and any("csv" in n for n in top5) and any("plot" in n for n in top5)


def test_single_intent_ranking_is_the_whole_querys() -> None:
    index = bm25_index(CATALOG)
    query = "plot a bar chart"
    expected = ranked(index.candidate_scores([query])[0], 5, index.name_order)
    assert make_searcher("bm25").search(query, CATALOG, 5) == [CATALOG[i].name for i in expected]


def test_ranked_keeps_ties_in_tiebreak_order_and_drops_non_candidates() -> None:
    scores = np.array([1.0, 3.0, -np.inf, 3.0, 2.0])
    assert ranked(scores, 2) == [1, 3]
    assert ranked(scores, 2, tiebreak=np.array([0, 9, 0, 1, 0])) == [3, 1]
    assert ranked(scores, 10) == [1, 3, 4, 0]
    assert ranked(np.full(3, -np.inf), 3) == []


def test_search_calls_the_scorer_once_with_every_intent() -> None:
    batches: list[list[str]] = []

    def scorer(texts: list[str]) -> np.ndarray:
        batches.append(list(texts))
        return np.tile(np.arange(4, dtype=np.float64), (len(texts), 1))

    assert search(scorer, "find a. then b and c", 2) == [3, 2]
    assert batches == [["find a. then b and c", "find a.", "b and c"]]


@pytest.mark.parametrize("backend", ["bm25", "regex", "fuzzy"])
def test_a_whole_task_at_the_length_cap_is_searched(backend: str) -> None:
    task = ("Read the quarterly CSV export and check its headers. " * 20)[:990] + " email"
    assert len(task) <= 1000
    assert make_searcher(backend).search(task, CATALOG, 5)
