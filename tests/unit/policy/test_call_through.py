"""Call-through deferral without a socket: which call a dispatcher call stands for, the adapters'
unwrap (what the client sees) and wrap (what the upstream gets back), the loop, the search
result, and the planner keeping ``tools[]`` and the history's bytes fixed over a session.

Live streams with a dispatcher are in test_call_through_stitch.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tooldisco.core import jsonspan
from tooldisco.config import ConfigError, parse
from tooldisco.engine.engine import Engine
from tooldisco.engine.loop import Finish, Found, PhantomLoop, Search, Send
from tooldisco.policy.modes import CallThroughMode
from tooldisco.core.types import ToolCall, ToolResult
from tooldisco.apis.gemini.adapter import STAND_IN_SIGNATURE, GeminiAdapter
from tooldisco.search.factory import make_searcher
from tooldisco.search.phantom_query import run_query
from tooldisco.policy import call_through
from tooldisco.search.brief import MAX_DEFINITION_CHARS, definition
from tooldisco.core.types import Target
from tooldisco.apis.base import dispatcher_schema

from tests.support.catalog import openai_tools
from tests.support.loop_driver import Driver
from tests.support.runner import chunked, collect, whole
from tests.support.call_through import (
    CHAT,
    D,
    DISPATCH,
    FORECAST,
    GEMINI,
    G_DISPATCH,
    P,
    RUN_QUERY,
    chat_catalog,
    dispatcher_args,
    gemini_declarations,
)


def target(arguments: Any) -> Target | str:
    return DISPATCH.target(ToolCall("c1", D, arguments))


def error_of(result: Target | str) -> str:
    """The error a refused call answers with: always a JSON object ``{"error": text}``."""
    assert isinstance(result, str)
    data = json.loads(result)
    assert list(data) == ["error"] and isinstance(data["error"], str)
    return data["error"]


# -- Dispatch.target ----------------------------------------------------------------------------


def test_the_module_imports_first():
    """Imported before anything else: no import cycle with the search package it uses."""
    addon = Path(__file__).resolve().parents[3] / "addon"
    subprocess.run([sys.executable, "-c", "import tooldisco.policy.call_through"], cwd=addon, check=True)


def test_an_exact_name_is_its_tool_with_its_arguments():
    assert target({"name": FORECAST, "arguments": {"city": "Paris", "days": 3}}) == Target(
        FORECAST, {"city": "Paris", "days": 3})


def test_a_bare_name_resolves_when_one_tool_has_it():
    assert target({"name": "get_forecast", "arguments": {"city": "Paris"}}) == Target(FORECAST, {"city": "Paris"})
    assert target({"name": " run_query ", "arguments": {}}) == Target(RUN_QUERY, {})


def test_an_ambiguous_bare_name_is_an_error_naming_both_tools():
    message = error_of(target({"name": "create_issue", "arguments": {}}))
    assert "'create_issue'" in message and P in message
    assert "mcp__github__create_issue" in message and "mcp__gitlab__create_issue" in message


def test_an_unknown_name_is_an_error_with_the_nearest_names():
    message = error_of(target({"name": "get_forcast", "arguments": {"city": "Paris"}}))
    assert "No tool is named 'get_forcast'" in message
    assert message.split("The nearest names: ")[1].split(", ")[0] == FORECAST


@pytest.mark.parametrize("name", [P, D])
def test_the_proxys_own_tools_are_no_targets(name):
    assert "No tool is named" in error_of(target({"name": name, "arguments": {}}))


def test_a_kept_tool_may_be_called_through_the_dispatcher():
    assert target({"name": "read_file", "arguments": {"path": "a.txt"}}) == Target("read_file", {"path": "a.txt"})


def test_arguments_given_as_json_text_are_parsed():
    assert target({"name": FORECAST, "arguments": '{"city":"Oslo"}'}) == Target(FORECAST, {"city": "Oslo"})
    # the whole dispatcher object encoded once more, as some models do
    assert target(json.dumps({"name": FORECAST, "arguments": {"city": "Oslo"}})) == Target(FORECAST, {"city": "Oslo"})


@pytest.mark.parametrize("arguments", [{"name": FORECAST}, {"name": FORECAST, "arguments": None},
                                       {"name": FORECAST, "arguments": ""}, {"name": FORECAST, "arguments": "  "}])
def test_no_arguments_are_empty_arguments(arguments):
    assert target(arguments) == Target(FORECAST, {})


@pytest.mark.parametrize("inner", [[1, 2], "not json", '["a"]', 3, True])
def test_arguments_that_are_no_object_are_an_error(inner):
    assert error_of(target({"name": FORECAST, "arguments": inner})) == (
        f"arguments must be a JSON object of {FORECAST}'s parameters.")


@pytest.mark.parametrize("arguments", [{}, {"name": ""}, {"name": "   "}, {"name": 5}, {"arguments": {}},
                                       None, [FORECAST], "garbage{", "[1]"])
def test_no_name_is_an_error_showing_the_dispatchers_form(arguments):
    message = error_of(target(arguments))
    assert message.startswith(f'{D} takes {{"name": "<a tool {P} returned>"')


def test_only_dispatcher_calls_resolve():
    calls = [ToolCall("a", "read_file", {}), ToolCall("b", D, {"name": FORECAST, "arguments": {}}),
             ToolCall("c", P, {"query": "x"}), ToolCall("d", D, {"name": "nope"})]
    resolved = [DISPATCH.resolve(c) for c in calls]
    assert resolved[0] is None and resolved[2] is None
    assert resolved[1] == Target(FORECAST, {}) and isinstance(resolved[3], str)


def test_target_text_is_compact_json_keeping_non_ascii():
    assert Target("t", {"city": "Zürich", "n": [1, 2]}).text == '{"city":"Zürich","n":[1,2]}'


# -- Chat Completions adapter ---------------------------------------------------------------------


def chat_call(cid: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_answer(content: str | None, *calls: dict[str, Any], cid: str = "chatcmpl-1") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None, "annotations": []}
    if calls:
        message["tool_calls"] = list(calls)
    return {"id": cid, "object": "chat.completion", "created": 1763800000, "model": "gpt-4.1",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}


def chat_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return message["choices"][0]["message"].get("tool_calls", [])


def test_chat_unwrap_turns_dispatcher_calls_into_real_calls_by_id():
    answer = chat_answer("Two.", chat_call("call_R", "read_file", '{"path":"a"}'),
                         chat_call("call_D", D, dispatcher_args("get_forecast", {"city": "Zürich"})))
    shown = CHAT.unwrap(answer, DISPATCH.resolve)
    assert chat_calls(shown) == [chat_call("call_R", "read_file", '{"path":"a"}'),
                                 chat_call("call_D", FORECAST, '{"city":"Zürich"}')]
    assert shown["choices"][0]["finish_reason"] == "tool_calls"
    assert answer["choices"][0]["message"]["tool_calls"][1]["function"]["name"] == D  # the answer itself is kept


def test_chat_unwrap_reaches_every_choice():
    """``n > 1``: the loop drives choice 0, but no choice may show the client the dispatcher."""
    answer = chat_answer(None, chat_call("call_A", D, dispatcher_args("get_forecast", {"city": "Oslo"})))
    second = json.loads(json.dumps(answer["choices"][0]))
    second["index"] = 1
    second["message"]["tool_calls"] = [chat_call("call_B", D, dispatcher_args("get_forecast", {"city": "Rome"}))]
    answer["choices"].append(second)
    shown = CHAT.unwrap(answer, DISPATCH.resolve)
    assert [c["message"]["tool_calls"] for c in shown["choices"]] == [
        [chat_call("call_A", FORECAST, '{"city":"Oslo"}')], [chat_call("call_B", FORECAST, '{"city":"Rome"}')]]


def test_chat_unwrap_removes_refused_calls_and_fixes_the_finish_reason():
    answer = chat_answer("Hmm.", chat_call("call_X", D, dispatcher_args("nope", {})))
    shown = CHAT.unwrap(answer, DISPATCH.resolve)
    assert "tool_calls" not in shown["choices"][0]["message"] and shown["choices"][0]["finish_reason"] == "stop"
    both = chat_answer(None, chat_call("call_X", D, dispatcher_args("nope", {})),
                       chat_call("call_R", "read_file", "{}"))
    shown = CHAT.unwrap(both, DISPATCH.resolve)
    assert chat_calls(shown) == [chat_call("call_R", "read_file", "{}")]
    assert shown["choices"][0]["finish_reason"] == "tool_calls"


def test_chat_dispatcher_tool_shape():
    tool = json.loads(CHAT.dispatcher_tool(D, call_through.description(P)))
    assert tool == {"type": "function", "function": {"name": D, "description": call_through.description(P),
                                                     "parameters": dispatcher_schema()}}
    assert tool["function"]["parameters"]["required"] == ["name", "arguments"]
    assert tool["function"]["parameters"]["properties"]["arguments"]["type"] == "object"
    assert P in call_through.description(P)


CHAT_HISTORY = {
    "model": "gpt-4.1",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Zürich, and read a.txt"},
        {"role": "assistant", "content": None, "tool_calls": [
            chat_call("call_D", FORECAST, '{"city":"Zürich"}'), chat_call("call_R", "read_file", '{"path":"a.txt"}')]},
        {"role": "tool", "tool_call_id": "call_D", "content": "21 °C"},
        {"role": "tool", "tool_call_id": "call_R", "content": "hello"},
        {"role": "assistant", "content": "It is 21 °C.", "tool_calls": [
            chat_call("call_E", RUN_QUERY, '{"sql": "select 1"}')]},
        {"role": "tool", "tool_call_id": "call_E", "content": "1"},
    ],
    "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {}}}],
}


def message_spans(body: str, key: str = "messages") -> list[str]:
    span = jsonspan.find(body, [key])
    assert span is not None
    return [body[a:b] for a, b in jsonspan.elements(body, span)]


def test_chat_wrap_rewrites_only_deferred_calls_and_keeps_every_other_byte():
    body = json.dumps(CHAT_HISTORY, indent=1, ensure_ascii=False)  # an SDK's own spacing
    wrapped = CHAT.wrap(body, [t.name for t in DISPATCH.catalog], D)
    before, after = message_spans(body), message_spans(wrapped)
    assert [i for i, (b, a) in enumerate(zip(before, after)) if b != a] == [2, 5]
    assert wrapped.replace(after[2], before[2]).replace(after[5], before[5]) == body
    first = json.loads(after[2])
    assert first["tool_calls"] == [chat_call("call_D", D, dispatcher_args(FORECAST, {"city": "Zürich"})),
                                   chat_call("call_R", "read_file", '{"path":"a.txt"}')]
    assert json.loads(after[5])["tool_calls"][0]["function"]["arguments"] == (
        '{"name":"mcp__postgres__run_query","arguments":{"sql": "select 1"}}')  # the client's text as it is
    assert CHAT.wrap(body, [t.name for t in DISPATCH.catalog], D) == wrapped  # deterministic
    assert CHAT.wrap(wrapped, [t.name for t in DISPATCH.catalog], D) == wrapped  # already wrapped: unchanged


def test_chat_wrap_without_deferred_calls_is_the_body_itself():
    body = json.dumps(CHAT_HISTORY)
    assert CHAT.wrap(body, ["mcp__slack__post_message"], D) is body


@pytest.mark.parametrize("arguments, inner", [("", "{}"), ("  ", "{}"), (None, "{}"), ("not json", '"not json"'),
                                              (' {"a":1} ', '{"a":1}'), ({"a": "ü"}, '{"a":"ü"}')])
def test_chat_wrap_of_odd_arguments_is_valid_json_keeping_them(arguments, inner):
    """Text that is no object goes as a string; an object itself (a compatible server's client) as it is."""
    body = json.dumps({"messages": [{"role": "assistant", "tool_calls": [chat_call("c", FORECAST, arguments)]}]})
    wrapped = json.loads(CHAT.wrap(body, [FORECAST], D))
    assert wrapped["messages"][0]["tool_calls"][0]["function"] == {
        "name": D, "arguments": '{"name":"mcp__weather__get_forecast","arguments":' + inner + "}"}


def test_chat_round_trip_gives_the_upstream_its_own_call_back():
    """Model answer -> unwrap (the client's view) -> the client's next history -> wrap: the
    call the model made, byte for byte when it wrote compact JSON and the exact name."""
    made = dispatcher_args(FORECAST, {"city": "Zürich", "days": 2})
    answer = chat_answer("Checking.", chat_call("call_D", D, made))
    shown = CHAT.unwrap(answer, DISPATCH.resolve)["choices"][0]["message"]
    history = {"model": "gpt-4.1", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": shown["content"], "tool_calls": shown["tool_calls"]},
        {"role": "tool", "tool_call_id": "call_D", "content": "sunny"}]}
    wrapped = json.loads(CHAT.wrap(json.dumps(history), [t.name for t in DISPATCH.catalog], D))
    assert wrapped["messages"][1]["tool_calls"] == answer["choices"][0]["message"]["tool_calls"]
    assert wrapped["messages"][1]["tool_calls"][0]["function"]["arguments"] == made
    # a bare name and spaced JSON come back as the call they stand for
    loose = chat_answer(None, chat_call("call_D", D, '{"arguments": {"city": "Oslo"}, "name": "get_forecast"}'))
    shown = CHAT.unwrap(loose, DISPATCH.resolve)["choices"][0]["message"]
    history["messages"][1] = {"role": "assistant", "content": None, "tool_calls": shown["tool_calls"]}
    again = json.loads(CHAT.wrap(json.dumps(history), [t.name for t in DISPATCH.catalog], D))
    call = again["messages"][1]["tool_calls"][0]["function"]
    assert DISPATCH.target(ToolCall("x", D, json.loads(call["arguments"]))) == Target(FORECAST, {"city": "Oslo"})


# -- Gemini adapter -------------------------------------------------------------------------------


def g_call(name: str, args: Any, signature: str | None = None, id_: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": name, "args": args, **({"id": id_} if id_ else {})}}
    if signature:
        part["thoughtSignature"] = signature
    return part


def g_answer(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2, "totalTokenCount": 12},
            "modelVersion": "gemini-3-pro-preview", "responseId": "resp_1"}


def g_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return message["candidates"][0]["content"]["parts"]


def test_gemini_calls_without_an_id_are_name_and_rank():
    answer = g_answer({"text": "x"}, g_call(P, {"query": "w"}), g_call(D, {"name": "get_forecast"}),
                      g_call(D, {"name": "nope"}), g_call(D, {"name": "run_query"}, id_="given"))
    assert [c.id for c in GEMINI.calls(answer)] == [f"{P}#0", f"{D}#1", f"{D}#2", "given"]


def test_gemini_unwrap_rewrites_and_removes_with_a_signature_stand_in():
    answer = g_answer({"text": "Let me."}, g_call(D, {"name": "nope", "arguments": {}}, signature="U0lH"),
                      g_call(D, {"name": "get_forecast", "arguments": {"city": "Paris"}}, id_="fc_1"),
                      g_call("read_file", {"path": "a"}))
    assert [c.id for c in GEMINI.calls(answer) if G_DISPATCH.resolve(c) is not None] == [f"{D}#0", "fc_1"]
    shown = GEMINI.unwrap(answer, G_DISPATCH.resolve)
    assert g_parts(shown) == [{"text": "Let me."},
                              {"functionCall": {"name": FORECAST, "args": {"city": "Paris"}, "id": "fc_1"},
                               "thoughtSignature": STAND_IN_SIGNATURE},
                              g_call("read_file", {"path": "a"})]
    assert shown["candidates"][0]["finishReason"] == "STOP"


def test_gemini_unwrap_keeps_a_rewritten_calls_own_signature():
    answer = g_answer(g_call(D, {"name": FORECAST, "arguments": {"city": "Rome"}}, signature="U0lH"),
                      g_call(D, {"name": "nope"}))
    shown = GEMINI.unwrap(answer, G_DISPATCH.resolve)
    assert g_parts(shown) == [g_call(FORECAST, {"city": "Rome"}, signature="U0lH")]


def test_gemini_dispatcher_tool_uses_json_schema():
    tool = json.loads(GEMINI.dispatcher_tool(D, "desc"))
    assert tool == {"name": D, "description": "desc", "parametersJsonSchema": dispatcher_schema()}
    assert "parameters" not in tool


def gemini_history(*model_parts: dict[str, Any], responses: list[dict[str, Any]]) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                         {"role": "model", "parts": list(model_parts)},
                         {"role": "user", "parts": responses},
                         {"role": "model", "parts": [{"text": "Done."}]}],
            "tools": [{"functionDeclarations": [{"name": "read_file"}]}],
            "generationConfig": {"temperature": 0}}


def test_gemini_wrap_renames_deferred_calls_and_their_responses_only():
    history = gemini_history(
        {"text": "Checking."},
        g_call(FORECAST, {"city": "Paris"}, signature="U0lH", id_="fc_1"),
        g_call("read_file", {"path": "a"}),
        responses=[{"functionResponse": {"name": FORECAST, "id": "fc_1", "response": {"output": "sunny"}}},
                   {"functionResponse": {"name": "read_file", "response": {"output": "x"}}}])
    body = json.dumps(history, indent=2, ensure_ascii=False)
    names = [t.name for t in G_DISPATCH.catalog]
    wrapped = GEMINI.wrap(body, names, D)
    before, after = message_spans(body, "contents"), message_spans(wrapped, "contents")
    assert [i for i, (b, a) in enumerate(zip(before, after)) if b != a] == [1, 2]
    assert wrapped.replace(after[1], before[1]).replace(after[2], before[2]) == body
    assert json.loads(after[1])["parts"] == [
        {"text": "Checking."},
        {"functionCall": {"name": D, "args": {"name": FORECAST, "arguments": {"city": "Paris"}}, "id": "fc_1"},
         "thoughtSignature": "U0lH"},
        g_call("read_file", {"path": "a"})]
    assert json.loads(after[2])["parts"] == [
        {"functionResponse": {"name": D, "id": "fc_1", "response": {"output": "sunny"}}},
        {"functionResponse": {"name": "read_file", "response": {"output": "x"}}}]
    assert GEMINI.wrap(body, names, D) == wrapped
    assert GEMINI.wrap(wrapped, names, D) == wrapped
    assert GEMINI.wrap(body, ["mcp__slack__post_message"], D) is body


def test_gemini_round_trip_gives_the_upstream_its_own_call_back():
    made = g_call(D, {"name": FORECAST, "arguments": {"city": "Paris", "days": 2}}, signature="U0lH")
    answer = g_answer({"text": "Checking."}, made)
    shown = GEMINI.unwrap(answer, G_DISPATCH.resolve)
    assert g_parts(shown)[1] == g_call(FORECAST, {"city": "Paris", "days": 2}, signature="U0lH")
    history = gemini_history(*g_parts(shown), responses=[
        {"functionResponse": {"name": FORECAST, "response": {"output": "sunny"}}}])
    wrapped = json.loads(GEMINI.wrap(json.dumps(history), [t.name for t in G_DISPATCH.catalog], D))
    assert wrapped["contents"][1]["parts"] == g_parts(answer)
    assert wrapped["contents"][2]["parts"][0]["functionResponse"]["name"] == D


# -- the loop -------------------------------------------------------------------------------------

WEATHER_TOOL = next(t for t in DISPATCH.catalog if t.name == FORECAST)


def finder(call: ToolCall) -> Found:
    return Found(ToolResult(call, "found " + FORECAST), [WEATHER_TOOL])


def chat_loop(**kw: Any) -> Driver:
    return Driver(PhantomLoop(CHAT, CallThroughMode(CHAT, CHAT, DISPATCH), ["read_file", P, D], **kw), finder)


CHAT_BODY = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "weather?"}],
                        "tools": [{"type": "function", "function": {"name": P}}]})


def sent_messages(act: Send) -> list[dict[str, Any]]:
    return json.loads(act.body)["messages"]


def test_a_round_of_valid_dispatcher_calls_is_done_with_the_real_calls():
    loop = chat_loop()
    answer = chat_answer("Sure.", chat_call("call_D", D, dispatcher_args("get_forecast", {"city": "Oslo"})),
                         chat_call("call_R", "read_file", "{}"))
    done = loop.start(CHAT_BODY, answer)
    assert isinstance(done, Finish) and done.reason == "done"
    assert chat_calls(done.message) == [chat_call("call_D", FORECAST, '{"city":"Oslo"}'),
                                        chat_call("call_R", "read_file", "{}")]
    assert done.message["choices"][0]["finish_reason"] == "tool_calls"
    assert loop.dispatched == [FORECAST] and loop.refused == 0 and loop.rounds == 0
    assert loop.expanded == []


def test_a_round_without_dispatcher_or_search_calls_passes():
    answer = chat_answer("Hi.", chat_call("call_R", "read_file", "{}"))
    assert chat_loop().start(CHAT_BODY, answer) == Finish(answer, "no_phantom")


def test_an_invalid_dispatcher_call_is_answered_in_a_hidden_round():
    loop = chat_loop()
    act = loop.start(CHAT_BODY, chat_answer("Trying.", chat_call("call_X", D, dispatcher_args("get_forcast", {}))))
    assert isinstance(act, Send)
    messages = sent_messages(act)
    assert messages[-2]["tool_calls"] == [chat_call("call_X", D, dispatcher_args("get_forcast", {}))]
    assert messages[-1]["role"] == "tool" and messages[-1]["tool_call_id"] == "call_X"
    assert error_of(messages[-1]["content"]).startswith("No tool is named 'get_forcast'")
    assert json.loads(act.body)["tools"] == json.loads(CHAT_BODY)["tools"]  # nothing appended
    assert "tool_calls" not in act.visible["choices"][0]["message"]
    done = loop.receive(chat_answer(None, chat_call("call_D", D, dispatcher_args(FORECAST, {})), cid="chatcmpl-2"))
    assert isinstance(done, Finish) and done.reason == "done"
    assert chat_calls(done.message) == [chat_call("call_D", FORECAST, "{}")]
    assert "call_X" not in json.dumps(done.message) and D not in json.dumps(done.message)
    assert loop.refused == 1 and loop.dispatched == [FORECAST] and loop.rounds == 1


def test_results_are_ordered_like_the_calls():
    loop = chat_loop()
    answer = chat_answer(None, chat_call("call_X", D, "{}"), chat_call("call_S", P, '{"query":"weather"}'),
                         chat_call("call_Y", D, dispatcher_args("nope", {})))
    act = loop.start(CHAT_BODY, answer)
    assert isinstance(act, Send)
    tools = [m for m in sent_messages(act) if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_X", "call_S", "call_Y"]
    assert tools[1]["content"] == "found " + FORECAST
    assert json.loads(act.body)["tools"] == json.loads(CHAT_BODY)["tools"]  # found tools are not appended
    assert loop.expanded == [FORECAST] and loop.refused == 2


def test_a_search_with_a_valid_dispatcher_call_is_mixed():
    loop = PhantomLoop(CHAT, CallThroughMode(CHAT, CHAT, DISPATCH), ["read_file", P, D])
    answer = chat_answer("Both.", chat_call("call_S", P, '{"query":"weather"}'),
                         chat_call("call_D", D, dispatcher_args(FORECAST, {"city": "Rome"})))
    act = loop.start(CHAT_BODY, answer)
    assert isinstance(act, Search) and [c.id for c in act.calls] == ["call_S"]
    done = loop.found([finder(c) for c in act.calls])
    assert isinstance(done, Finish) and done.reason == "mixed"
    assert chat_calls(done.message) == [chat_call("call_D", FORECAST, '{"city":"Rome"}')]
    assert [r.call.id for r in loop.unanswered] == ["call_S"]


def test_a_valid_and_an_invalid_dispatcher_call_finish_mixed():
    loop = chat_loop()
    answer = chat_answer(None, chat_call("call_X", D, dispatcher_args("nope", {})),
                         chat_call("call_D", D, dispatcher_args(FORECAST, {})))
    done = loop.start(CHAT_BODY, answer)
    assert isinstance(done, Finish) and done.reason == "mixed"
    assert chat_calls(done.message) == [chat_call("call_D", FORECAST, "{}")]


def test_hide_drops_searches_and_refused_calls_but_keeps_the_dispatcher_form():
    loop = chat_loop()
    answer = chat_answer(None, chat_call("call_S", P, "{}"), chat_call("call_X", D, dispatcher_args("nope", {})),
                         chat_call("call_D", D, dispatcher_args(FORECAST, {})))
    assert chat_calls(loop.hide(answer)) == [chat_call("call_D", D, dispatcher_args(FORECAST, {}))]
    only = chat_answer(None, chat_call("call_X", D, "{}"))
    assert "tool_calls" not in loop.hide(only)["choices"][0]["message"]
    assert loop.hide(only)["choices"][0]["finish_reason"] == "stop"


def test_gemini_invalid_dispatcher_call_is_answered_as_the_dispatchers_error():
    loop = Driver(PhantomLoop(GEMINI, CallThroughMode(GEMINI, GEMINI, G_DISPATCH), ["read_file", P, D]), finder)
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "weather?"}]}]})
    answer = g_answer({"text": "Trying."}, g_call(D, {"name": "nope"}, signature="U0lH"),
                      g_call(P, {"query": "weather"}, id_="s1"))
    act = loop.start(body, answer)
    assert isinstance(act, Send)
    contents = json.loads(act.body)["contents"]
    assert contents[-2]["parts"] == g_parts(answer)  # the model turn as it came, signature and all
    responses = [p["functionResponse"] for p in contents[-1]["parts"]]
    assert [r["name"] for r in responses] == [D, P]
    assert "id" not in responses[0] and responses[1]["id"] == "s1"
    assert responses[0]["response"]["error"].startswith("No tool is named 'nope'")  # the error object itself
    assert responses[1]["response"] == {"output": "found " + FORECAST}
    assert g_parts(act.visible) == [{"text": "Trying."}]
    done = loop.receive(g_answer(g_call(D, {"name": "get_forecast", "arguments": {"city": "Paris"}}, "U0lH2")))
    assert isinstance(done, Finish) and done.reason == "done"
    assert g_parts(done.message) == [{"text": "Trying."}, g_call(FORECAST, {"city": "Paris"}, "U0lH2")]


# -- search results -------------------------------------------------------------------------------


def test_a_search_through_the_dispatcher_shows_whole_definitions():
    catalog = chat_catalog()
    out = run_query({"query": "select:" + FORECAST + ",run_query"}, catalog, make_searcher("bm25"), 5, (), D)
    result = json.loads(out.text)
    assert out.matched == [FORECAST, RUN_QUERY] and not out.is_error
    weather = next(t for t in openai_tools(20) if t["function"]["name"] == FORECAST)["function"]
    assert result["tools"][0] == {"name": FORECAST, "description": weather["description"],
                                  "parameters": weather["parameters"]}
    assert result["message"].startswith(f"Call these tools through {D}: ")
    ranked = json.loads(run_query({"query": "weather forecast"}, catalog, make_searcher("bm25"), 5, (), D).text)
    assert ranked["tools"][0]["name"] == FORECAST and "parameters" in ranked["tools"][0]
    assert D in ranked["message"]
    classic = json.loads(run_query({"query": "select:" + FORECAST}, catalog, make_searcher("bm25"), 5).text)
    assert D not in classic["message"] and "now available" in classic["message"]


def test_a_gemini_definition_carries_its_parameters():
    declaration = gemini_declarations(20)[0]
    tool = GEMINI.parse_tool(json.dumps(declaration))
    assert definition(tool) == declaration
    schema = {"name": "t", "description": "d", "parametersJsonSchema": {"type": "object"}}
    assert definition(GEMINI.parse_tool(json.dumps(schema)))["parameters"] == {"type": "object"}


def test_a_huge_schema_is_cut_to_its_parameter_names():
    properties = {f"p{i}": {"type": "string", "description": "x" * 200} for i in range(200)}
    raw = json.dumps({"type": "function", "function": {"name": "big", "description": "Big tool.",
                                                       "parameters": {"type": "object", "properties": properties}}})
    shown = definition(CHAT.parse_tool(raw))
    assert shown == {"name": "big", "description": "Big tool.", "parameters": {"names": list(properties)}}
    assert len(json.dumps(shown)) < MAX_DEFINITION_CHARS
    small = definition(CHAT.parse_tool(json.dumps(openai_tools(1)[0])))
    assert small["parameters"] == openai_tools(1)[0]["function"]["parameters"]


# -- planner and engine: tools[] fixed for the session, history wrapped -----------------------------

SETTINGS = {"strategy": "tool-search", "defer": {"upfront": 3, "min_tools": 10}, "search": {"backend": "bm25"}}
KEY = {"authorization": "Bearer k", "session_id": "s1"}
G_KEY = {"x-goog-api-key": "k", "session_id": "g1"}


def make_engine(tmp_path, **settings: Any) -> Engine:
    td = {"enabled": True, **SETTINGS, **settings}
    return Engine(parse({"pipes": {"tool_discovery": td}, "sessions": {"dir": str(tmp_path / "s")},
                         "telemetry": {"enabled": False}}))


@pytest.fixture
def engine(tmp_path):
    e = make_engine(tmp_path)
    yield e
    e.close()


def forward(engine: Engine, adapter: Any, headers: dict[str, str], request: dict[str, Any]) -> tuple[str, Any]:
    prepared = engine.prepare(adapter, headers, json.dumps(request, ensure_ascii=False).encode())
    assert prepared.body is not None and prepared.context is not None
    return prepared.body.decode(), prepared.context


def names_of(body: str) -> list[str]:
    return [t["function"]["name"] for t in json.loads(body)["tools"]]


def assert_extends(earlier: str, later: str, key: str = "messages") -> None:
    """``later`` forwards the same tools, and ``earlier``'s history as its prefix, byte for byte:
    the upstream's cached prefix stays valid."""
    assert json.loads(later)["tools"] == json.loads(earlier)["tools"]
    assert message_spans(later, key)[: len(message_spans(earlier, key))] == message_spans(earlier, key)


def chat_request(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4.1", "messages": [{"role": "user", "content": "open a github issue for the crash"},
                                             *messages], "tools": openai_tools(60)}


async def test_chat_session_keeps_tools_fixed_and_the_prefix_cacheable(engine):
    body1, ctx = forward(engine, CHAT, KEY, chat_request())
    names = names_of(body1)
    assert names[-2:] == [P, D] and len(names) == 5 and RUN_QUERY in ctx.catalog
    assert ctx.mode.dispatcher is not None and ctx.record.deferral == "call-through"
    sent: list[str] = []

    async def open_(body: bytes):
        sent.append(body.decode())
        return whole(chat_answer(None, chat_call("call_D", D, dispatcher_args(RUN_QUERY, {"sql": "select 1"})),
                                 cid="chatcmpl-2"))

    reply = await engine.runner(ctx).buffered(
        whole(chat_answer("Looking.", chat_call("call_S", P, '{"query":"sql query"}'))), open_)
    shown = json.loads(reply.body)["choices"][0]["message"]
    assert shown["tool_calls"] == [chat_call("call_D", RUN_QUERY, '{"sql":"select 1"}')]
    assert ctx.record.dispatched == [RUN_QUERY] and ctx.record.refused_calls == 0
    assert names_of(sent[0]) == names  # the re-forward too: nothing appended
    search_result = json.loads(sent[0])["messages"][-1]
    assert search_result["tool_call_id"] == "call_S" and D in search_result["content"]

    turn2 = chat_request({"role": "assistant", "content": shown["content"], "tool_calls": shown["tool_calls"]},
                         {"role": "tool", "tool_call_id": "call_D", "content": "1 row"})
    body2, ctx2 = forward(engine, CHAT, KEY, turn2)
    assert ctx2.record.restored == 1 and ctx2.mode.dispatcher is not None
    assert_extends(sent[0], body2)  # the hidden search round restored, tools unchanged
    assistant = json.loads(message_spans(body2)[3])
    assert assistant["tool_calls"] == [chat_call("call_D", D, dispatcher_args(RUN_QUERY, {"sql": "select 1"}))]
    assert json.loads(message_spans(body2)[4]) == {"role": "tool", "tool_call_id": "call_D", "content": "1 row"}

    turn3 = dict(turn2, messages=turn2["messages"] + [{"role": "assistant", "content": "One row."},
                                                      {"role": "user", "content": "now post it to slack"}])
    body3, _ = forward(engine, CHAT, KEY, turn3)
    assert_extends(body2, body3)
    assert forward(engine, CHAT, KEY, turn3)[0] == body3


async def test_chat_a_later_turn_with_a_deferred_call_goes_as_the_dispatcher_call(engine):
    """No hidden rounds to restore (the model called without searching, or the record expired):
    the history's call of a deferred tool still goes upstream as the dispatcher call."""
    body1, ctx = forward(engine, CHAT, KEY, chat_request())
    assert RUN_QUERY in ctx.catalog
    turn = chat_request({"role": "assistant", "content": None,
                         "tool_calls": [chat_call("call_Q", RUN_QUERY, '{"sql":"select 2"}')]},
                        {"role": "tool", "tool_call_id": "call_Q", "content": "2"})
    body2, _ = forward(engine, CHAT, KEY, turn)
    assert_extends(body1, body2)
    assert json.loads(body2)["messages"][1]["tool_calls"] == [
        chat_call("call_Q", D, dispatcher_args(RUN_QUERY, {"sql": "select 2"}))]


async def test_chat_live_session_streams_the_real_call_and_restores_the_next_turn(engine):
    stream = dict(chat_request(), stream=True, stream_options={"include_usage": True})
    body1, ctx = forward(engine, CHAT, KEY, stream)
    sent: list[str] = []
    refused = chat_answer(None, chat_call("call_X", D, dispatcher_args("no_such_tool", {})), cid="chatcmpl-2")

    async def open_(body: bytes):
        sent.append(body.decode())
        if len(sent) == 1:
            return chunked(CHAT.encode_stream(refused))
        return chunked(CHAT.encode_stream(chat_answer(
            None, chat_call("call_D", D, dispatcher_args("run_query", {"sql": "select 1"})), cid="chatcmpl-3")))

    first = chat_answer("Looking.", chat_call("call_S", P, '{"query":"sql query"}'))
    head, out = await collect(engine.runner(ctx).live(chunked(CHAT.encode_stream(first)), open_))
    assert head.status == 200 and len(sent) == 2
    assert D.encode() not in out and P.encode() not in out and b"call_X" not in out
    decoder = CHAT.decoder()
    decoder.feed(out)
    decoder.feed(b"")
    shown = decoder.message()["choices"][0]["message"]
    assert shown["tool_calls"] == [chat_call("call_D", RUN_QUERY, '{"sql":"select 1"}')]
    assert ctx.record.dispatched == [RUN_QUERY] and ctx.record.refused_calls == 1
    refusal = json.loads(sent[1])["messages"][-1]
    assert refusal["tool_call_id"] == "call_X" and "no_such_tool" in refusal["content"]
    assert names_of(sent[0]) == names_of(sent[1]) == names_of(body1)

    turn2 = dict(stream, messages=stream["messages"] + [
        {"role": "assistant", "content": shown["content"],
         "tool_calls": [chat_call("call_D", RUN_QUERY, '{"sql":"select 1"}')]},
        {"role": "tool", "tool_call_id": "call_D", "content": "1 row"}])
    body2, ctx2 = forward(engine, CHAT, KEY, turn2)
    assert ctx2.record.restored == 1
    assert_extends(sent[1], body2)  # both hidden rounds restored as the upstream had them
    assert json.loads(message_spans(body2)[5])["tool_calls"] == [
        chat_call("call_D", D, dispatcher_args("run_query", {"sql": "select 1"}))]


def gemini_request(*contents: dict[str, Any]) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "open a github issue for the crash"}]}, *contents],
            "tools": [{"functionDeclarations": gemini_declarations(60)}, {"googleSearch": {}}],
            "generationConfig": {"temperature": 0}}


def declared(body: str) -> list[str]:
    return [d["name"] for d in json.loads(body)["tools"][0]["functionDeclarations"]]


async def test_gemini_session_keeps_tools_fixed_and_the_prefix_cacheable(engine):
    body1, ctx = forward(engine, GEMINI, G_KEY, gemini_request())
    assert declared(body1)[-2:] == [P, D] and json.loads(body1)["tools"][1] == {"googleSearch": {}}
    dispatcher = json.loads(body1)["tools"][0]["functionDeclarations"][-1]
    assert dispatcher == json.loads(GEMINI.dispatcher_tool(D, call_through.description(P)))
    assert RUN_QUERY in ctx.catalog
    sent: list[str] = []
    made = g_call(D, {"name": RUN_QUERY, "arguments": {"sql": "select 1"}}, signature="U0lH")

    async def open_(body: bytes):
        sent.append(body.decode())
        return whole(g_answer(made))

    reply = await engine.runner(ctx).buffered(
        whole(g_answer({"text": "Looking."}, g_call(P, {"query": "sql query"}, signature="U1"))), open_)
    shown = json.loads(reply.body)["candidates"][0]["content"]
    assert shown["parts"] == [{"text": "Looking."}, g_call(RUN_QUERY, {"sql": "select 1"}, signature="U0lH")]
    assert json.loads(sent[0])["tools"] == json.loads(body1)["tools"]

    turn2 = gemini_request(shown, {"role": "user", "parts": [
        {"functionResponse": {"name": RUN_QUERY, "response": {"output": "1 row"}}}]})
    body2, ctx2 = forward(engine, GEMINI, G_KEY, turn2)
    assert ctx2.record.restored == 1
    assert_extends(sent[0], body2, "contents")
    contents = json.loads(body2)["contents"]
    assert contents[3]["parts"] == [made]
    assert contents[4]["parts"] == [{"functionResponse": {"name": D, "response": {"output": "1 row"}}}]

    turn3 = dict(turn2, contents=turn2["contents"] + [{"role": "model", "parts": [{"text": "One row."}]},
                                                      {"role": "user", "parts": [{"text": "post it to slack"}]}])
    body3, _ = forward(engine, GEMINI, G_KEY, turn3)
    assert_extends(body2, body3, "contents")


@pytest.mark.parametrize("sse", [True, False], ids=["sse", "array"])
async def test_gemini_live_streams_the_real_call(engine, sse):
    adapter = GeminiAdapter(stream=True, sse=sse)
    _, ctx = forward(engine, adapter, G_KEY, gemini_request())
    made = g_call(D, {"name": "run_query", "arguments": {"sql": "select 1"}}, signature="U0lH")

    async def open_(body: bytes):
        return chunked(adapter.encode_stream(g_answer(made)))

    first = g_answer({"text": "Looking."}, g_call(P, {"query": "sql query"}), g_call(D, {"name": "nope"}))
    _, out = await collect(engine.runner(ctx).live(chunked(adapter.encode_stream(first)), open_))
    assert D.encode() not in out and P.encode() not in out and b"nope" not in out
    decoder = adapter.decoder()
    decoder.feed(out)
    decoder.feed(b"")
    assert g_parts(decoder.message()) == [{"text": "Looking."}, g_call(RUN_QUERY, {"sql": "select 1"}, "U0lH")]
    assert ctx.record.dispatched == [RUN_QUERY] and ctx.record.refused_calls == 1


def test_call_through_off_is_classic(tmp_path):
    e = make_engine(tmp_path, defer={"upfront": 3, "min_tools": 10, "call_through": []})
    try:
        body, ctx = forward(e, CHAT, KEY, chat_request())
        assert names_of(body)[-1] == P and D not in names_of(body)
        assert ctx.mode.dispatcher is None and ctx.record.deferral == "classic"
    finally:
        e.close()


async def test_call_through_off_appends_the_found_tool(tmp_path):
    e = make_engine(tmp_path, defer={"upfront": 3, "min_tools": 10, "call_through": []})
    try:
        _, ctx = forward(e, CHAT, KEY, chat_request())
        sent: list[str] = []

        async def open_(body: bytes):
            sent.append(body.decode())
            return whole(chat_answer(None, chat_call("call_Q", RUN_QUERY, '{"sql":"select 1"}'), cid="chatcmpl-2"))

        await e.runner(ctx).buffered(whole(chat_answer(None, chat_call("call_S", P, '{"query":"select:' + RUN_QUERY
                                                                         + '"}'))), open_)
        assert names_of(sent[0])[-2:] == [P, RUN_QUERY]
    finally:
        e.close()


def test_a_client_tool_named_like_the_dispatcher_means_classic(engine):
    request = chat_request()
    request["tools"] = request["tools"] + [{"type": "function", "function": {"name": D, "parameters": {}}}]
    body, ctx = forward(engine, CHAT, KEY, request)
    assert ctx.mode.dispatcher is None and ctx.record.deferral == "classic"
    assert names_of(body).count(D) <= 1


@pytest.mark.parametrize("settings, field", [
    ({"defer": {"call_through": ["anthropic"]}}, "call_through"),
    ({"call_tool_name": P}, "call_tool_name"),
    ({"call_tool_name": "bad name!"}, "call_tool_name"),
])
def test_config_errors(settings, field):
    with pytest.raises(ConfigError, match=field):
        parse({"pipes": {"tool_discovery": {"enabled": True, **settings}}})


def test_config_defaults_and_gemini_only():
    td = parse({"pipes": {"tool_discovery": {"enabled": True}}}).tool_discovery
    assert td.defer.call_through == ("openai_chat", "gemini") and td.call_tool_name == D
    only = parse({"pipes": {"tool_discovery": {"enabled": True, "defer": {"call_through": ["gemini"]}}}})
    assert only.tool_discovery.defer.call_through == ("gemini",)


# --- a refusal of the dispatcher's JSON Schema -------------------------------------------------------


async def test_a_refusal_of_the_dispatchers_schema_resends_classic_and_the_session_remembers(engine):
    """An API version without ``parametersJsonSchema`` refuses the dispatcher: the same request
    goes again the classic way (no dispatcher), and the session's later turns go classic at once."""
    _, ctx = forward(engine, GEMINI, G_KEY, gemini_request())
    refusal = json.dumps({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                                    'Invalid JSON payload received. Unknown name "parametersJsonSchema" at '
                                    "'tools[0].function_declarations[4]': Cannot find field."}})
    sent: list[str] = []

    async def open_(body: bytes):
        sent.append(body.decode())
        return whole(g_answer({"text": "done"}))

    reply = await engine.runner(ctx).buffered(whole(json.loads(refusal), status=400), open_)
    assert reply.status == 200 and b"done" in reply.body
    assert len(sent) == 1 and declared(sent[0])[-1] == P and D not in declared(sent[0])
    assert ctx.record.deferral == "classic"
    assert ctx.record.fallback_reason == "call-through_refused_400_classic_sent"
    later_body, later = forward(engine, GEMINI, G_KEY, gemini_request(
        {"role": "model", "parts": [{"text": "done"}]}, {"role": "user", "parts": [{"text": "and now?"}]}))
    assert later.mode.dispatcher is None and later.record.deferral == "classic" and D not in declared(later_body)


def test_the_last_reforward_drops_the_search_tool_and_keeps_the_dispatcher(engine):
    body, ctx = forward(engine, CHAT, KEY, chat_request())
    assert names_of(body)[-2:] == [P, D]
    shown = names_of(engine.runner(ctx).loop.without_search(body))
    assert shown == [n for n in names_of(body) if n != P] and shown[-1] == D
