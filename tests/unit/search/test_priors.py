"""Learned priors (``search.priors``): what a turn teaches, what is kept, and how it ranks."""

from __future__ import annotations

import json
import random

from tooldisco.core.types import Tool
from tooldisco.search import priors as P
from tooldisco.search.base import Catalog
from tooldisco.search.factory import make_searcher, with_priors

DAY = 86400.0


def _tool(name: str, description: str) -> Tool:
    return Tool(name, json.dumps({"name": name, "description": description}), description)


TOOLS = Catalog([
    _tool("create_incident", "Open an incident in the incident tracker with a title and severity."),
    _tool("list_incidents", "List open incidents in the incident tracker."),
    _tool("send_message", "Send a chat message to a channel."),
    _tool("get_weather", "Current weather for a city."),
    _tool("create_issue", "Create an issue in a GitHub repository."),
    _tool("search_docs", "Search the documentation pages."),
])
BY_NAME = {t.name: t for t in TOOLS}


def _learned(*turns: tuple[str, str], knowledge: P.Knowledge | None = None) -> P.Knowledge:
    knowledge = knowledge or P.Knowledge()
    bm25 = make_searcher("bm25")
    for query, target in turns:
        got = bm25.search(query, TOOLS, 3)
        knowledge.learn(P.lesson([(query, got)], [target], BY_NAME))
    return knowledge


def test_a_called_tool_teaches_every_query_up_to_the_one_that_found_it() -> None:
    lesson = P.lesson([("page the on-call", ["send_message", "list_incidents"]),
                       ("create_incident", ["create_incident"]),
                       ("afterwards", ["get_weather"])], ["create_incident"], BY_NAME)
    target = BY_NAME["create_incident"].identity
    assert [(keys, tid) for keys, tid in lesson.positives] == [
        (P.query_keys("page the on-call"), target), (P.query_keys("create_incident"), target)]
    assert lesson.negatives == []  # the search that found it ranked it first
    assert lesson.calls == [target]


def test_only_tools_ranked_above_the_called_one_are_negatives() -> None:
    lesson = P.lesson([("incident", ["list_incidents", "create_incident", "send_message"])],
                      ["create_incident"], BY_NAME)
    assert [tid for _, tid in lesson.negatives] == [BY_NAME["list_incidents"].identity]


def test_select_and_listing_queries_teach_no_words() -> None:
    lesson = P.lesson([("select:create_incident", ["create_incident"]), ("*", [])], ["create_incident"], BY_NAME)
    assert lesson.positives == [] and lesson.calls == [BY_NAME["create_incident"].identity]


def test_a_tool_not_offered_teaches_nothing() -> None:
    assert not P.lesson([("x y", ["ghost"])], ["ghost"], BY_NAME)


def test_no_query_text_is_kept() -> None:
    knowledge = _learned(("page whoever is on call tonight", "create_incident"))
    stored = json.dumps(knowledge.encode())
    for word in ("page", "whoever", "call", "tonight"):
        assert word not in stored


def test_a_paraphrase_learned_ranks_the_tool_first_for_unseen_words_sharing_it() -> None:
    bm25 = make_searcher("bm25")
    unseen = "page the on-call engineer now"
    assert bm25.search(unseen, TOOLS, 3)[:1] != ["create_incident"]
    knowledge = _learned(*[("page the on-call person", "create_incident")] * 3)
    learned = with_priors(bm25, P.Priors(knowledge))
    assert learned.search(unseen, TOOLS, 3)[0] == "create_incident"


def test_an_exact_name_still_ranks_first() -> None:
    knowledge = _learned(*[("get weather for the issue", "create_issue")] * 5)
    learned = with_priors(make_searcher("bm25"), P.Priors(knowledge))
    assert learned.search("get_weather", TOOLS, 3)[0] == "get_weather"


def test_without_priors_the_ranking_is_the_backends() -> None:
    bm25 = make_searcher("bm25")
    assert with_priors(bm25, None) is bm25 and with_priors(bm25, P.Priors(P.Knowledge())) is bm25
    other = with_priors(bm25, P.Priors(_learned(("send", "send_message"))))
    assert other.search("weather in Paris", TOOLS, 3) == bm25.search("weather in Paris", TOOLS, 3)


def test_a_changed_definition_starts_over() -> None:
    knowledge = _learned(*[("page the on-call", "create_incident")] * 3)
    changed = Catalog([*(t for t in TOOLS if t.name != "create_incident"),
                       _tool("create_incident", "Open a ticket.")])
    scores = P.Priors(knowledge).scores("page the on-call")
    assert BY_NAME["create_incident"].identity in scores
    assert next(t for t in changed if t.name == "create_incident").identity not in scores


def test_decay_halves_evidence_per_half_life_and_drops_what_fades() -> None:
    knowledge = _learned(("page the on-call", "create_incident"))
    knowledge.at = 1000.0
    entry = knowledge.tools[BY_NAME["create_incident"].identity]
    before = dict(entry["w"]), entry["c"]
    knowledge.decay(1000.0 + 14 * DAY, 14 * DAY)
    entry = knowledge.tools[BY_NAME["create_incident"].identity]
    assert entry["c"] == before[1] / 2
    assert all(abs(entry["w"][k] - w / 2) <= 0.001 for k, w in before[0].items())
    knowledge.decay(1000.0 + 14 * DAY * 20, 14 * DAY)
    assert knowledge.tools == {}


def test_the_entry_stays_within_its_bytes_over_a_hundred_thousand_turns() -> None:
    """Turns arrive in flushes (as the learner writes them): 1,000 merges of 100 turns each,
    over more tools and words than fit."""
    rng = random.Random(0)
    vocabulary = [f"word{i}" for i in range(3000)]
    many = {f"tool_{i}": _tool(f"tool_{i}", f"does thing {i}") for i in range(2000)}
    turns = []  # distinct turns, drawn from below (making 100,000 lessons would time the tokenizer)
    for _ in range(5000):
        target = f"tool_{rng.randrange(2000)}"
        turns.append(P.lesson([(" ".join(rng.sample(vocabulary, 4)), [target])], [target], many))
    data = None
    bound = 64 * 1024
    for flush in range(1000):
        lesson = P.Lesson()
        for turn in rng.sample(turns, 100):
            lesson.extend(turn)
        data = P.merge(data, lesson, now=1_000_000.0 + flush * 60, half_life=14 * DAY, max_bytes=bound)
        assert len(json.dumps(data, separators=(",", ":"))) <= bound
    assert P.Knowledge.decode(data).tools


def test_garbage_reads_as_nothing_learned() -> None:
    for data in (None, 3, "x", {"v": 99, "tools": {}}, {"v": 1, "tools": []}, {"v": 1, "tools": {"a": 5}}):
        assert P.Knowledge.decode(data).tools == {}
    odd = P.Knowledge.decode({"v": 1, "tools": {"a": {"c": "x", "w": {"k": "y", "j": 2}}}})
    assert odd.tools == {"a": {"c": 0.0, "w": {"j": 2.0}}}


def test_upfront_bonus_favours_what_the_tenant_called() -> None:
    knowledge = _learned(*[("weather", "get_weather")] * 6, ("send hello", "send_message"))
    bonus = P.Priors(knowledge).bonus("", TOOLS, 15.0)
    assert bonus["get_weather"] > bonus["send_message"] > 0 and "create_issue" not in bonus
