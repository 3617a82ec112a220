"""Hidden rounds restored in a client's history, per API (``tooldisco.engine.rounds``), without a store."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from tooldisco.engine import rounds
from tooldisco.engine.loop import Found, PhantomLoop, Search, Send
from tooldisco.policy.modes import ClassicMode
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.base import Adapter
from tooldisco.core.types import ToolResult
from tooldisco.apis.bedrock.adapter import ConverseAdapter, InvokeAdapter
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter

P = "gateway_search_tools"


@dataclass(frozen=True)
class Api:
    """One wire API's shapes: a body, a round's answer, the client's tool result."""

    adapter: Adapter
    path: str
    body: Callable[[list[Any]], dict[str, Any]]
    user: Callable[[str], Any]
    answer: Callable[[str, list[tuple[str, str]], str], dict[str, Any]]  # text, [(call id, name)], answer id
    result: Callable[[str, str], Any]  # call id, name -> the client's result entry


def _anthropic_answer(text, calls, mid):
    content = [{"type": "text", "text": text}] + [
        {"type": "tool_use", "id": cid, "name": name, "input": {"query": "forecast"}} for cid, name in calls]
    return {"id": mid, "type": "message", "role": "assistant", "model": "m", "content": content,
            "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 2}}


def _chat_answer(text, calls, mid):
    message = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    if calls:
        message["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": name,
                                  "arguments": '{"query":"forecast"}'}} for cid, name in calls]
    return {"id": mid, "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}


def _responses_answer(text, calls, mid):
    output = [{"type": "reasoning", "id": f"rs_{mid}", "summary": [], "encrypted_content": f"enc-{mid}"},
              {"type": "message", "id": f"msg_{mid}", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}]
    output += [{"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": name,
                "arguments": '{"query":"forecast"}', "status": "completed"} for cid, name in calls]
    return {"id": mid, "object": "response", "status": "completed", "model": "m", "store": False, "output": output,
            "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}}


def _gemini_answer(text, calls, mid):
    parts: list[Any] = [{"text": text}]
    parts += [{"functionCall": {"name": name, "args": {"query": "forecast"}}, "thoughtSignature": f"sig-{cid}"}
              for cid, name in calls]
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 12},
            "responseId": mid}


def _converse_answer(text, calls, mid):
    content: list[Any] = [{"text": text}]
    content += [{"toolUse": {"toolUseId": cid, "name": name, "input": {"query": "forecast"}}} for cid, name in calls]
    return {"output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "tool_use" if calls else "end_turn",
            "usage": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12}, "metrics": {"latencyMs": 5}}


ANTHROPIC = dict(path="messages", body=lambda h: {"model": "m", "max_tokens": 9, "messages": h},
                 user=lambda t: {"role": "user", "content": t}, answer=_anthropic_answer,
                 result=lambda cid, name: {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": cid, "content": "sunny"}]})
APIS = {
    "anthropic": Api(AnthropicAdapter(), **ANTHROPIC),
    "bedrock_invoke": Api(InvokeAdapter(), **ANTHROPIC),
    "openai_chat": Api(OpenAIChatAdapter(), "messages", lambda h: {"model": "m", "messages": h},
                       lambda t: {"role": "user", "content": t}, _chat_answer,
                       lambda cid, name: {"role": "tool", "tool_call_id": cid, "content": "sunny"}),
    "openai_responses": Api(OpenAIResponsesAdapter(), "input", lambda h: {"model": "m", "store": False, "input": h},
                            lambda t: {"role": "user", "content": t}, _responses_answer,
                            lambda cid, name: {"type": "function_call_output", "call_id": cid, "output": "sunny"}),
    "gemini": Api(GeminiAdapter(), "contents", lambda h: {"contents": h},
                  lambda t: {"role": "user", "parts": [{"text": t}]}, _gemini_answer,
                  lambda cid, name: {"role": "user", "parts": [
                      {"functionResponse": {"name": name, "response": {"output": "sunny"}}}]}),
    "bedrock_converse": Api(ConverseAdapter(), "messages", lambda h: {"messages": h},
                            lambda t: {"role": "user", "content": [{"text": t}]}, _converse_answer,
                            lambda cid, name: {"role": "user", "content": [
                                {"toolResult": {"toolUseId": cid, "content": [{"text": "sunny"}]}}]}),
}


@pytest.fixture(params=list(APIS))
def api(request) -> Api:
    return APIS[request.param]


@dataclass
class Turn:
    """One stitched turn: what went upstream, what the client was shown, what is kept."""

    forwarded: str  # the request's body as first forwarded
    upstream: list[Any]  # the history as the upstream really saw it, last round included
    shown: list[Any]  # the history entries the client appends for its answer
    kept: rounds.Rounds


def run_turn(api: Api, history: list[Any], answers: list[dict[str, Any]]) -> Turn:
    """Drive the phantom loop over ``answers`` (each searched until the last) and record the turn."""
    a = api.adapter
    body = json.dumps(api.body(history))
    loop = PhantomLoop(a, ClassicMode(a, P), [], max_loops=5)
    action = loop.start(body, answers[0])
    sent = body
    for nxt in answers[1:]:
        assert isinstance(action, Search)
        action = loop.found([Found(ToolResult(c, f"found for {c.id}"), ()) for c in action.calls])
        assert isinstance(action, Send)
        sent = action.body
        action = loop.receive(nxt)
    if isinstance(action, Search):  # a mixed finish: the searches run, nothing is re-forwarded
        action = loop.found([Found(ToolResult(c, "found"), ()) for c in action.calls])
    shown = a.shown(action.message)
    kept = rounds.of_turn(a, body, sent, answers[-1], action.message, loop.hide)
    assert kept is not None
    sent_history = json.loads(sent)[api.path]
    appended = len(sent_history) - len(history)
    assert [json.loads(e) for e in kept.entries[:appended]] == sent_history[len(history):]
    last = [json.loads(e) for e in kept.entries[appended:]]  # the last round's model turn, as the client saw it
    assert last and P not in json.dumps(last)
    return Turn(body, sent_history + last, shown, kept)


def searched_turn(api: Api, history: list[Any], n: int = 1) -> Turn:
    """Round one: text + a search; round two: text + a real call."""
    return run_turn(api, history, [api.answer("looking", [(f"s{n}", P)], f"r{n}a"),
                                   api.answer("calling", [(f"c{n}", "get_forecast")], f"r{n}b")])


def lookup(*turns: Turn) -> Callable[[str], list[str] | None]:
    known = {t.kept.digest: t.kept.entries for t in turns}
    return known.get


def history_of(api: Api, body: str) -> list[Any]:
    return json.loads(body)[api.path]


def test_restored_in_place(api):
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    client = start + turn.shown + [api.result("c1", "get_forecast")]
    out, count = rounds.restore(api.adapter, json.dumps(api.body(client)), lookup(turn))
    assert count == 1
    assert history_of(api, out) == turn.upstream + [api.result("c1", "get_forecast")]
    assert P in json.dumps(history_of(api, out)[1:-2])  # round one, its search call in it


def test_the_upstream_history_is_continued_exactly(api):
    """What the next request forwards starts with every entry the last re-forward sent, as sent."""
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    client = start + turn.shown + [api.result("c1", "get_forecast")]
    out, _ = rounds.restore(api.adapter, json.dumps(api.body(client)), lookup(turn))
    sent_entries = turn.kept.entries[:-1]
    restored = history_of(api, out)
    assert restored[1:1 + len(sent_entries)] == [json.loads(e) for e in sent_entries]


def test_not_found_passes_as_sent(api):
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    body = json.dumps(api.body(start + turn.shown + [api.result("c1", "get_forecast")]))
    assert rounds.restore(api.adapter, body, lambda d: None) == (body, 0)


def test_an_edited_message_is_not_restored(api):
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    edited = json.loads(json.dumps(turn.shown).replace("calling", "calling (edited)"))
    body = json.dumps(api.body(start + edited + [api.result("c1", "get_forecast")]))
    assert rounds.restore(api.adapter, body, lookup(turn)) == (body, 0)


def test_reserialized_by_an_sdk_is_still_restored(api):
    """Key order, whitespace and members set to null are how SDKs differ; the values are the same."""
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    shown = copy.deepcopy(turn.shown)
    for entry in shown:
        entry["zz_unset"] = None
    body = json.dumps(api.body(start + shown + [api.result("c1", "get_forecast")]), sort_keys=True, indent=2)
    out, count = rounds.restore(api.adapter, body, lookup(turn))
    assert count == 1 and history_of(api, out)[:len(turn.upstream)] == turn.upstream


def test_two_stitched_messages_in_one_history(api):
    first = [api.user("forecast for Paris?")]
    one = searched_turn(api, first, 1)
    second = first + one.shown + [api.result("c1", "get_forecast")] + [api.user("and Rome?")]
    # The second turn is forwarded with the first restored, as the planner does.
    forwarded, _ = rounds.restore(api.adapter, json.dumps(api.body(second)), lookup(one))
    two = searched_turn(api, history_of(api, forwarded), 2)
    client = second + two.shown + [api.result("c2", "get_forecast")]
    out, count = rounds.restore(api.adapter, json.dumps(api.body(client)), lookup(one, two))
    assert count == 2
    assert history_of(api, out) == two.upstream + [api.result("c2", "get_forecast")]


def test_a_multi_search_turn_keeps_every_round(api):
    start = [api.user("forecast for Paris?")]
    turn = run_turn(api, start, [api.answer("looking", [("s1", P)], "r1"),
                                 api.answer("again", [("s2", P)], "r2"),
                                 api.answer("calling", [("c1", "get_forecast")], "r3")])
    client = start + turn.shown + [api.result("c1", "get_forecast")]
    out, count = rounds.restore(api.adapter, json.dumps(api.body(client)), lookup(turn))
    assert count == 1 and history_of(api, out) == turn.upstream + [api.result("c1", "get_forecast")]
    searches = [e for e in history_of(api, out) if api.adapter.produced(e) and P in json.dumps(e)]
    assert len(searches) == 2


def test_unanswered_calls_are_hidden_without_their_results(api):
    """Kept without answers to its last round's search calls (a max-loops finish), the last
    round goes upstream as the client saw it, after round one's real exchange."""
    start = [api.user("forecast for Paris?")]
    turn = run_turn(api, start, [api.answer("looking", [("s1", P)], "r1"),
                                 api.answer("calling", [("s2", P), ("c1", "get_forecast")], "r2")])
    last = json.dumps(turn.kept.entries[-1])
    assert "get_forecast" in last and P not in last
    client = start + turn.shown + [api.result("c1", "get_forecast")]
    out, count = rounds.restore(api.adapter, json.dumps(api.body(client)), lookup(turn))
    assert count == 1 and history_of(api, out) == turn.upstream + [api.result("c1", "get_forecast")]


def mixed_turn(api: Api, history: list[Any], answers: list[dict[str, Any]]) -> tuple[list[Any], rounds.Rounds]:
    """Rounds that searched until the last, which searched and called a client tool at once:
    what the client was shown, and what is kept (with the answers to the calls it never saw)."""
    a = api.adapter
    body = json.dumps(api.body(history))
    loop = PhantomLoop(a, ClassicMode(a, P), [], max_loops=5)
    action, sent = loop.start(body, answers[0]), body
    for nxt in answers[1:]:
        action = loop.found([Found(ToolResult(c, f"found for {c.id}"), ()) for c in action.calls])
        assert isinstance(action, Send)
        sent, action = action.body, loop.receive(nxt)
    assert isinstance(action, Search)
    finish = loop.found([Found(ToolResult(c, "found later"), ()) for c in action.calls])
    assert finish.reason == "mixed" and loop.unanswered
    kept = rounds.of_turn(a, body, sent, answers[-1], finish.message, loop.hide, loop.unanswered)
    assert kept is not None
    return a.shown(finish.message), kept


def assert_mixed_restored(api: Api, out: str, start: list[Any], client_result: Any) -> None:
    """The model's mixed turn as it made it, then one results turn answering all its calls:
    the hidden search's result first, the client's own after it."""
    history = history_of(api, out)[len(start):]
    last = max(i for i, e in enumerate(history) if api.adapter.produced(e))
    first = last
    while first and api.adapter.produced(history[first - 1]):
        first -= 1
    turn, answers = json.dumps(history[first:last + 1]), history[last + 1:]  # the model turn (Responses: its items)
    assert P in turn and "get_forecast" in turn
    text = json.dumps(answers)
    assert 0 <= text.index("found later") < text.index("sunny")
    if api.adapter.results_member is None:  # an entry per result: the client's stays as it sent it
        assert answers[-1] == client_result and len(answers) == 2
    else:  # one results turn: the client's, the hidden result put first
        assert len(answers) == 1 and answers[0][api.adapter.results_member][1:] == client_result[api.adapter.results_member]


def test_a_mixed_turn_keeps_its_search_answered(api):
    """Round two searched and called a real tool: the call went to the client without the
    search; upstream, the turn goes on as the model made it, the search answered beside the
    client's result, so the model knows what it found and does not search again."""
    start = [api.user("forecast for Paris?")]
    shown, kept = mixed_turn(api, start, [api.answer("looking", [("s1", P)], "r1"),
                                          api.answer("calling", [("s2", P), ("c1", "get_forecast")], "r2")])
    assert P not in json.dumps(shown)
    result = api.result("c1", "get_forecast")
    out, count = rounds.restore(api.adapter, json.dumps(api.body(start + shown + [result])), lookup_kept(kept))
    assert count == 1
    assert_mixed_restored(api, out, start, result)
    assert json.dumps(history_of(api, out)).count("found for") == 1  # round one's exchange too


def test_a_first_round_mixed_turn_is_kept(api):
    """Nothing re-forwarded: still kept, since the client never saw the search."""
    start = [api.user("forecast for Paris?")]
    shown, kept = mixed_turn(api, start, [api.answer("calling", [("s1", P), ("c1", "get_forecast")], "r1")])
    result = api.result("c1", "get_forecast")
    client = start + shown + [result]
    out, count = rounds.restore(api.adapter, json.dumps(api.body(client)), lookup_kept(kept))
    assert count == 1
    assert_mixed_restored(api, out, start, result)
    # Every later turn carries the same restored prefix.
    later = client + [api.answer("done", [], "r2")["candidates"][0]["content"] if api.path == "contents"
                      else api.adapter.shown(api.answer("done", [], "r2"))[0], api.user("thanks")]
    again, n = rounds.restore(api.adapter, json.dumps(api.body(later)), lookup_kept(kept))
    assert n == 1 and history_of(api, again)[:len(history_of(api, out))] == history_of(api, out)


def test_a_mixed_turn_without_the_clients_results_passes_as_sent(api):
    start = [api.user("forecast for Paris?")]
    shown, kept = mixed_turn(api, start, [api.answer("calling", [("s1", P), ("c1", "get_forecast")], "r1")])
    body = json.dumps(api.body(start + shown))
    assert rounds.restore(api.adapter, body, lookup_kept(kept)) == (body, 0)


def test_gemini_mixed_turn_gives_the_clients_ids_to_the_calls_it_saw():
    """Gemini CLI names calls the API left without ids; the hidden search call gets none."""
    api = APIS["gemini"]
    start = [api.user("forecast for Paris?")]
    shown, kept = mixed_turn(api, start, [api.answer("calling", [("s1", P), ("c1", "get_forecast")], "r1")])
    for part in shown[0]["parts"]:
        if "functionCall" in part:
            part["functionCall"]["id"] = "cli-1"
    result = {"role": "user", "parts": [{"functionResponse": {"id": "cli-1", "name": "get_forecast",
                                                             "response": {"output": "sunny"}}}]}
    out, count = rounds.restore(api.adapter, json.dumps(api.body(start + shown + [result])), lookup_kept(kept))
    assert count == 1
    model, answers = history_of(api, out)[1:]
    calls = [p["functionCall"] for p in model["parts"] if "functionCall" in p]
    assert [(c["name"], c.get("id")) for c in calls] == [(P, None), ("get_forecast", "cli-1")]
    assert [p["functionResponse"]["name"] for p in answers["parts"]] == [P, "get_forecast"]


def lookup_kept(*kept: rounds.Rounds) -> Callable[[str], list[str] | None]:
    return {k.digest: k.entries for k in kept}.get


def test_a_turn_without_a_search_keeps_nothing(api):
    a = api.adapter
    body = json.dumps(api.body([api.user("hi")]))
    answer = api.answer("hello", [], "r1")
    # One round, no hidden calls answered: what the client saw is what the upstream made.
    assert rounds.of_turn(a, body, body, a.strip(answer, [P]), answer, lambda m: a.strip(m, [P])) is None


def test_responses_stored_chain_is_left_to_the_server():
    a = APIS["openai_responses"].adapter
    body = json.dumps({"model": "m", "previous_response_id": "resp_1", "input": [
        {"type": "function_call_output", "call_id": "c1", "output": "x"}]})
    assert a.history_path(body) is None
    assert rounds.restore(a, body, lambda d: ["{}"]) == (body, 0)


def test_responses_store_false_client_without_item_ids_is_restored():
    """A store:false client (Codex) sends output items back without ids or status."""
    api = APIS["openai_responses"]
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    bare = [{k: v for k, v in item.items() if k not in ("id", "status")} for item in turn.shown]
    out, count = rounds.restore(api.adapter, json.dumps(api.body(start + bare)), lookup(turn))
    assert count == 1 and history_of(api, out) == turn.upstream


def test_responses_codex_turn_bookkeeping_is_not_an_edit():
    """Codex CLI adds ``internal_chat_message_metadata_passthrough`` to every item it sends back."""
    api = APIS["openai_responses"]
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    noted = [{**item, "internal_chat_message_metadata_passthrough": {"turn_id": "t1"}} for item in turn.shown]
    out, count = rounds.restore(api.adapter, json.dumps(api.body(start + noted)), lookup(turn))
    assert count == 1 and history_of(api, out) == turn.upstream
    edited = [{**item, "arguments": "{}"} if item.get("type") == "function_call" else item for item in noted]
    assert rounds.restore(api.adapter, json.dumps(api.body(start + edited)), lookup(turn))[1] == 0


def test_responses_string_input_turn():
    api = APIS["openai_responses"]
    a = api.adapter
    body = json.dumps({"model": "m", "store": False, "input": "forecast for Paris?"})
    loop = PhantomLoop(a, ClassicMode(a, P), [])
    search = loop.start(body, api.answer("looking", [("s1", P)], "r1"))
    send = loop.found([Found(ToolResult(c, "found"), ()) for c in search.calls])
    last = api.answer("calling", [("c1", "get_forecast")], "r2")
    finish = loop.receive(last)
    kept = rounds.of_turn(a, body, send.body, last, finish.message, loop.hide)
    assert [json.loads(e).get("type") for e in kept.entries] == [
        "reasoning", "message", "function_call", "function_call_output", "reasoning", "message", "function_call"]


def test_chat_client_building_its_own_message_is_restored():
    """Chat clients often send back only the input fields (no ``annotations``, no ``refusal``)."""
    api = APIS["openai_chat"]
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    (shown,) = turn.shown
    own = {"role": "assistant", "content": shown["content"], "tool_calls": shown["tool_calls"]}
    out, count = rounds.restore(api.adapter, json.dumps(api.body(start + [own])), lookup(turn))
    assert count == 1 and history_of(api, out) == turn.upstream
    assert "tool_calls" in history_of(api, out)[1]  # round one's search call


def test_chat_last_round_without_calls_has_no_empty_tool_calls():
    api = APIS["openai_chat"]
    turn = run_turn(api, [api.user("hi")], [api.answer("looking", [("s1", P)], "r1"),
                                             api.answer("done", [], "r2")])
    assert json.loads(turn.kept.entries[-1]) == {"role": "assistant", "content": "done"}


def test_gemini_signatures_sent_back_url_safe_are_restored():
    """google-genai decodes ``thoughtSignature`` and sends it back in the URL-safe alphabet."""
    api = APIS["gemini"]
    start = [api.user("forecast for Paris?")]
    turn = run_turn(api, start, [api.answer("looking", [("s1", P)], "r1"),
                                 api.answer("calling", [("a+b/c==", "get_forecast")], "r2")])
    sent_back = json.loads(json.dumps(turn.shown).replace("sig-a+b/c==", "sig-a-b_c"))
    out, count = rounds.restore(api.adapter, json.dumps(api.body(start + sent_back)), lookup(turn))
    assert count == 1 and history_of(api, out) == turn.upstream
    edited = json.loads(json.dumps(turn.shown).replace("sig-a+b/c==", "sig-a-b_d"))
    assert rounds.restore(api.adapter, json.dumps(api.body(start + edited)), lookup(turn))[1] == 0


def test_gemini_client_call_ids_and_split_text_are_restored_with_the_ids_kept():
    """Gemini CLI gives a call the API sent without an ``id`` one of its own and names it in its
    functionResponse; a client keeping a stream's text as it came sends it in several parts. The
    turn is restored all the same, the client's id carried onto the restored call."""
    api = APIS["gemini"]
    start = [api.user("forecast for Paris?")]
    turn = searched_turn(api, start)
    (content,) = json.loads(json.dumps(turn.shown))
    text, call = content["parts"][0]["text"], content["parts"][-1]
    content["parts"] = [{"text": text[:3]}, {"text": text[3:]}, *content["parts"][1:-1],
                        {**call, "functionCall": {**call["functionCall"], "id": "cli-7"}}]
    response = {"role": "user", "parts": [{"functionResponse": {"name": "get_forecast", "id": "cli-7",
                                                                "response": {"output": "sunny"}}}]}
    out, count = rounds.restore(api.adapter, json.dumps(api.body(start + [content, response])), lookup(turn))
    assert count == 1
    restored = history_of(api, out)
    assert restored[:-2] == turn.upstream[:-1] and restored[-1] == response
    assert [p["functionCall"] for p in restored[-2]["parts"] if "functionCall" in p] == [
        {**call["functionCall"], "id": "cli-7"}]
    other = {**content, "parts": [{"text": text + "!"}, *content["parts"][2:]]}  # an edit still is one
    assert rounds.restore(api.adapter, json.dumps(api.body(start + [other, response])), lookup(turn))[1] == 0


def test_chat_empty_text_is_no_text():
    """A stream's assembly gives ``""`` where a client writes ``null`` for a turn of calls only."""
    api = APIS["openai_chat"]
    start = [api.user("forecast for Paris?")]
    turn = run_turn(api, start, [api.answer("", [("s1", P)], "r1"), api.answer("", [("c1", "get_forecast")], "r2")])
    (shown,) = turn.shown
    assert shown["content"] == ""
    out, count = rounds.restore(api.adapter, json.dumps(api.body(start + [{**shown, "content": None}])), lookup(turn))
    assert count == 1 and history_of(api, out) == turn.upstream
