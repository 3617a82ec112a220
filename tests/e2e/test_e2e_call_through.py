"""Call-through deferral through a real mitmdump, with the real openai and google-genai SDKs.

On Chat Completions and Gemini (the shipped ``defer.call_through``) ``tools[]`` stays the kept
tools + ``gateway_search_tools`` + ``gateway_call_tool`` for the whole session: a search answers
with the found tools' whole definitions as text, the model calls one through the dispatcher, and
the client gets (and sends back) a call of the real tool, never the dispatcher. The fake's model
calls a tool through the dispatcher when a search result named it and it is not offered; its
prefix-cache model tells whether each turn's upstream request continues the previous one.
"""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any

import openai
import pytest
from google.genai import types as gt

from tests.e2e.harness import ADDON_PATH, MitmDump
from tests.e2e.wire_apis import (  # noqa: F401 (fixtures)
    CATALOG, GEMINI_URL, READ_FILE, TARGET, _proxy_fixture, _running, aws_chain, config, fk, fresh,
    g_decls, gemini_call, gemini_raw_chunks, gemini_raw_tools, gemini_tools, ok, plan_search_then_call, recording,
    reply_calls, usage_sum,
)
from tests.fakeprovider import (
    DISPATCHER, SEARCH_TOOL, Call, FakeProvider, RecordedRequest, Rule, call, calls, reply, search,
)

pytestmark = pytest.mark.e2e

_call_through_proxy = _proxy_fixture("tool-search")  # the shipped defaults: call-through on Chat and Gemini
TELEMETRY = "t.jsonl"  # what config() names the telemetry file
ARGS = {"city": "Paris"}
AGAIN = {"city": "London"}
TOOL_NAMES = ["read_file", SEARCH_TOOL, DISPATCHER]  # kept (always_keep), search, dispatcher: every request
QUESTION = "What's the forecast for Paris?"
REFUSAL = "I could not find that tool."
CLIENT_DEF = {t["name"]: t for t in CATALOG + [READ_FILE]}  # each tool as the client defines it


@pytest.fixture
def proxy(_call_through_proxy: MitmDump, fk: FakeProvider, aws_chain: Any) -> MitmDump:
    fk.prompt_cache = True
    return _running(_call_through_proxy, aws_chain)


@pytest.fixture(scope="module")
def _classic_proxy(fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory, aws_chain: Any) -> Any:
    mitm = MitmDump(tmp_path_factory.mktemp("classic"), fake_provider.url, script=ADDON_PATH,
                    config=partial(config("tool-search"), defer={"call_through": []}), name="call-through off")
    with aws_chain():
        mitm.start()
    yield mitm
    mitm.stop()


@pytest.fixture
def classic(_classic_proxy: MitmDump, fk: FakeProvider, aws_chain: Any) -> MitmDump:
    return _running(_classic_proxy, aws_chain)


def plan_three_turns(fake: FakeProvider) -> None:
    """Turn 1 searches, then calls the found tool (through the dispatcher); turn 2 answers with
    its result; turn 3 (the user asks about London) calls it again at once: its definition is
    in the history."""
    fake.set_script([
        search("weather forecast", not_offered=[TARGET]),
        call(TARGET, ARGS, text="Checking the forecast."),
        call(TARGET, AGAIN, contains="London", no_result_for=[], times=1),
        reply("Forecast:", echo_last_result=True),
    ])


def plan_unknown_tool(fake: FakeProvider) -> None:
    """The model calls the dispatcher with a name no tool has, then answers in words."""
    fake.set_script([
        Rule(calls=[Call(DISPATCHER, {"name": "no_such_tool", "arguments": {}})], times=1),
        reply(REFUSAL),
    ])


def assert_no_trace(text: str) -> None:
    assert SEARCH_TOOL not in text and DISPATCHER not in text, text


def telemetry_mark(proxy: MitmDump) -> int:
    """How many records the telemetry holds once the test before has written its last (a record
    lands just after its client has the answer): the count, once it stays the same for a moment."""
    path = proxy.workdir / TELEMETRY

    def count() -> int:
        return len([x for x in path.read_text().splitlines() if x.strip()]) if path.exists() else 0

    last = count()
    for _ in range(40):
        time.sleep(0.15)
        if (now := count()) == last:
            return now
        last = now
    return last


def new_records(proxy: MitmDump, mark: int, count: int) -> list[dict[str, Any]]:
    """The test's ``count`` records (one per client request) written since ``mark``: those of the
    session of the last one written, since a record of the test before may still land after the
    mark (telemetry is written after the client has its answer)."""
    for _ in range(200):
        lines = proxy.records(TELEMETRY, at_least=mark + count)[mark:]
        ours = [r for r in lines if r["session"] == lines[-1]["session"]]
        if len(ours) >= count:
            return ours[:count]
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} records of one session after the mark: {lines!r}"[:4000])


def names_of(rec: RecordedRequest) -> list[str]:
    if rec.api == "gemini":
        return [d["name"] for d in g_decls(rec.json)]
    return [t["function"]["name"] for t in rec.json["tools"]]


def check_tools_fixed(recs: list[RecordedRequest]) -> None:
    """Every upstream request carried the same ``tools[]``: kept + search + dispatcher."""
    assert [names_of(r) for r in recs] == [TOOL_NAMES] * len(recs)
    assert all(r.json["tools"] == recs[0].json["tools"] for r in recs)


def check_cached(after: RecordedRequest, before: RecordedRequest) -> None:
    """``after``'s prompt reads from the cache through everything ``before`` sent."""
    assert after.prompt is not None and before.prompt is not None
    assert after.prompt["hit_segments"] >= before.prompt["segments"], (after.prompt, before.prompt)


def found_definition(result_text: str) -> dict[str, Any]:
    """TARGET's definition as the search result shows it."""
    (found,) = [t for t in json.loads(result_text)["tools"] if t["name"] == TARGET]
    return found


def dispatched(rec: RecordedRequest) -> list[dict[str, Any]]:
    return [c["arguments"] for c in (rec.reply or {}).get("calls", []) if c["name"] == DISPATCHER]


# =================================================================================================
# Chat Completions
# =================================================================================================


def chat_tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                              "parameters": t["input_schema"]}} for t in CATALOG + [READ_FILE]]


def chat_ask(client: openai.OpenAI, stream: bool, messages: list[Any], **kw: Any) -> Any:
    """The completion, from ``create`` or the SDK's ``.stream()`` helper."""
    args = dict(model="gpt-4o", messages=messages, tools=chat_tools(), **kw)
    if not stream:
        return client.chat.completions.create(**args)
    with client.chat.completions.stream(**args) as s:
        return s.get_final_completion()


@pytest.mark.parametrize("stream", [False, True])
def test_chat_session(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_three_turns(fk)
    mark = telemetry_mark(proxy)
    client = proxy.openai()
    messages: list[Any] = [{"role": "user", "content": fresh(QUESTION)}]

    # Turn 1: one answer, the real tool's call.
    done = chat_ask(client, stream, messages)
    assert_no_trace(done.model_dump_json())
    msg = done.choices[0].message
    (tc,) = msg.tool_calls
    assert tc.function.name == TARGET and json.loads(tc.function.arguments) == ARGS
    assert done.choices[0].finish_reason == "tool_calls" and msg.content == "Checking the forecast."
    first, second = ok(fk.api_requests("openai-chat"))
    assert reply_calls(first) == [SEARCH_TOOL]
    assert dispatched(second) == [{"name": TARGET, "arguments": ARGS}]  # the model called it through the dispatcher
    result = second.json["messages"][-1]
    assert result["role"] == "tool"
    definition = found_definition(result["content"])  # the whole definition, as the client wrote it
    assert definition["description"] == CLIENT_DEF[TARGET]["description"]
    assert definition["parameters"] == CLIENT_DEF[TARGET]["input_schema"]

    # Turn 2: the client sends the call's result back and gets the answer.
    messages += [msg.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}]
    assert_no_trace(json.dumps(messages))
    done2 = chat_ask(client, stream, messages)
    assert done2.choices[0].message.content == "Forecast:\nlast tool result: sunny"
    third = ok(fk.api_requests("openai-chat"))[2]
    before, after = second.json["messages"], third.json["messages"]
    assert after[:len(before)] == before  # the hidden search exchange restored, as the fake received it
    assistant, answered = after[len(before):]
    (wrapped,) = assistant["tool_calls"]
    assert wrapped["id"] == tc.id and wrapped["function"]["name"] == DISPATCHER
    assert json.loads(wrapped["function"]["arguments"]) == {"name": TARGET, "arguments": ARGS}
    assert answered == {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}
    check_cached(third, second)

    # Turn 3: the same tool again, no search: one upstream request, the real call.
    messages += [done2.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": "And in London?"}]
    done3 = chat_ask(client, stream, messages)
    assert_no_trace(done3.model_dump_json())
    (tc3,) = done3.choices[0].message.tool_calls
    assert tc3.function.name == TARGET and json.loads(tc3.function.arguments) == AGAIN
    recs = ok(fk.api_requests("openai-chat"))
    assert len(recs) == 4 and dispatched(recs[3]) == [{"name": TARGET, "arguments": AGAIN}]
    assert recs[3].json["messages"][:len(after)] == after
    check_cached(recs[3], third)
    check_tools_fixed(recs)

    records = new_records(proxy, mark, 3)
    assert {r["deferral"] for r in records} == {"call-through"}
    assert [r["dispatched"] for r in records] == [[TARGET], [], [TARGET]]
    assert [r["refused_calls"] for r in records] == [0, 0, 0]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_unknown_tool(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_unknown_tool(fk)
    mark = telemetry_mark(proxy)
    done = chat_ask(proxy.openai(), stream, [{"role": "user", "content": fresh(QUESTION)}])
    assert_no_trace(done.model_dump_json())
    assert done.choices[0].message.content == REFUSAL and not done.choices[0].message.tool_calls
    assert done.choices[0].finish_reason == "stop"
    first, second = ok(fk.api_requests("openai-chat"))
    assert dispatched(first) == [{"name": "no_such_tool", "arguments": {}}]
    (call_id,) = [c["id"] for c in second.json["messages"][-2]["tool_calls"]]
    result = second.json["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == call_id
    error = json.loads(result["content"])["error"]
    assert "no_such_tool" in error and "The nearest names:" in error, error
    check_tools_fixed([first, second])
    (record,) = new_records(proxy, mark, 1)
    assert record["deferral"] == "call-through" and record["refused_calls"] == 1 and record["dispatched"] == []


@pytest.mark.parametrize("stream", [False, True])
def test_chat_call_through_off(classic: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """``defer.call_through: []``: classic deferral, the found tool appended to ``tools[]``."""
    plan_search_then_call(fk)
    mark = telemetry_mark(classic)
    done = chat_ask(classic.openai(), stream, [{"role": "user", "content": fresh(QUESTION)}])
    (tc,) = done.choices[0].message.tool_calls
    assert tc.function.name == TARGET and json.loads(tc.function.arguments) == ARGS
    assert_no_trace(done.model_dump_json())
    first, second = ok(fk.api_requests("openai-chat"))
    assert names_of(first) == ["read_file", SEARCH_TOOL]
    appended = names_of(second)
    assert appended[:2] == ["read_file", SEARCH_TOOL] and TARGET in appended[2:] and DISPATCHER not in appended
    assert reply_calls(second) == [TARGET]  # called directly
    (record,) = new_records(classic, mark, 1)
    assert record["deferral"] == "classic" and record["dispatched"] == []


def test_chat_raw_stream_shape(proxy: MitmDump, fk: FakeProvider) -> None:
    """``stream=True`` read chunk by chunk: the tool call is one fragment at index 0, whole."""
    plan_search_then_call(fk)
    stream = proxy.openai().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": fresh(QUESTION)}], tools=chat_tools(), stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    for c in chunks:
        assert_no_trace(c.model_dump_json())
    assert len({c.id for c in chunks}) == 1  # one completion
    (carrier,) = [ch for c in chunks for ch in c.choices if ch.delta.tool_calls]
    (fragment,) = carrier.delta.tool_calls  # one fragment, in a chunk of its own
    assert carrier.delta.content is None and carrier.finish_reason is None
    assert fragment.index == 0 and fragment.id and fragment.type == "function"
    assert fragment.function.name == TARGET and json.loads(fragment.function.arguments) == ARGS
    finishes = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finishes == ["tool_calls"]
    recs = ok(fk.api_requests("openai-chat"))
    assert len(recs) == 2
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.prompt_tokens == usage_sum(recs, "input_tokens")
    assert usage.completion_tokens == usage_sum(recs, "output_tokens")
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_stream_helper_equals_json(proxy: MitmDump, fk: FakeProvider) -> None:
    """The SDK's ``.stream()`` final completion is what the JSON answer is, ids (and the
    helper's own ``index`` of a call) aside; each one's usage is the sum of its rounds'."""
    client = proxy.openai()

    def session(stream: bool) -> dict[str, Any]:
        plan_search_then_call(fk)
        seen = len(fk.api_requests("openai-chat"))
        done = chat_ask(client, stream, [{"role": "user", "content": fresh(QUESTION)}],
                        **({"stream_options": {"include_usage": True}} if stream else {}))
        recs = ok(fk.api_requests("openai-chat"))[seen:]
        assert len(recs) == 2 and done.usage is not None
        assert done.usage.prompt_tokens == usage_sum(recs, "input_tokens")
        assert done.usage.completion_tokens == usage_sum(recs, "output_tokens")
        out = done.model_dump(exclude={"id", "created", "usage"}, exclude_none=True)
        for c in out["choices"][0]["message"]["tool_calls"]:
            assert c.pop("id")
            c.pop("index", None)  # the stream helper's (the delta's), not in a JSON answer
        return out

    as_json, as_stream = session(False), session(True)
    assert as_stream == as_json
    assert as_json["choices"][0]["message"]["tool_calls"] == [
        {"type": "function", "function": {"name": TARGET, "arguments": json.dumps(ARGS, separators=(",", ":"))}}]


READ = ("read_file", {"path": "notes.txt"})


@pytest.mark.parametrize("dispatched_first", [True, False])
@pytest.mark.parametrize("stream", [False, True])
def test_chat_dispatched_and_direct_calls_keep_their_order(
    proxy: MitmDump, fk: FakeProvider, stream: bool, dispatched_first: bool
) -> None:
    """A round calling a found tool (through the dispatcher) and a kept one (directly): the client
    gets both, in the model's order, at consecutive indexes; its results go back in the same order."""
    pair = [(TARGET, ARGS), READ] if dispatched_first else [READ, (TARGET, ARGS)]
    fk.set_script([search("weather forecast", not_offered=[TARGET]), calls(*pair, text="On it."),
                   reply("Done:", echo_last_result=True)])
    client = proxy.openai()
    messages: list[Any] = [{"role": "user", "content": fresh(QUESTION)}]
    done = chat_ask(client, stream, messages)
    assert_no_trace(done.model_dump_json())
    msg = done.choices[0].message
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == pair
    if stream:
        assert [c.index for c in msg.tool_calls] == [0, 1]  # type: ignore[attr-defined]
    assert done.choices[0].finish_reason == "tool_calls"
    messages += [msg.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": f"result {i}"} for i, c in enumerate(msg.tool_calls)]
    assert chat_ask(client, stream, messages).choices[0].message.content == "Done:\nlast tool result: result 1"
    first, second, third = ok(fk.api_requests("openai-chat"))
    assert [c["name"] for c in second.reply["calls"]] == [  # type: ignore[index]
        DISPATCHER if name == TARGET else name for name, _ in pair]
    before, after = second.json["messages"], third.json["messages"]
    assert after[:len(before)] == before
    assert [c["id"] for c in after[len(before)]["tool_calls"]] == [c.id for c in msg.tool_calls]
    check_cached(third, second)
    check_tools_fixed([first, second, third])


@pytest.mark.parametrize("stream", [False, True])
def test_chat_mixed_search_and_dispatched_call(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """Round two searches again and calls the found tool at once: the client gets the call, the
    search is not answered upstream before the call's result (no third round); turn 2 continues
    round one's exchange, round two as the model made it, and both calls' results, the
    search's first."""
    fk.set_script([search("weather forecast", nth=1),
                   calls((SEARCH_TOOL, {"query": "more"}), (TARGET, ARGS), nth=2, no_result_for=[]),
                   reply("Forecast:", echo_last_result=True)])
    client = proxy.openai()
    messages: list[Any] = [{"role": "user", "content": fresh(QUESTION)}]
    done = chat_ask(client, stream, messages)
    assert_no_trace(done.model_dump_json())
    (tc,) = done.choices[0].message.tool_calls
    assert tc.function.name == TARGET and json.loads(tc.function.arguments) == ARGS
    assert len(fk.api_requests("openai-chat")) == 2
    messages += [done.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}]
    assert chat_ask(client, stream, messages).choices[0].message.content == "Forecast:\nlast tool result: sunny"
    first, second, third = ok(fk.api_requests("openai-chat"))
    assert [c["name"] for c in second.reply["calls"]] == [SEARCH_TOOL, DISPATCHER]  # type: ignore[index]
    before, after = second.json["messages"], third.json["messages"]
    assert after[:len(before)] == before
    answer = after[len(before)]  # round two's turn as the model made it
    assert [c["function"]["name"] for c in answer["tool_calls"]] == [SEARCH_TOOL, DISPATCHER]
    results = after[len(before) + 1:len(before) + 3]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in answer["tool_calls"]]
    assert TARGET in results[0]["content"] and results[1]["content"] == "sunny"
    check_cached(third, second)


# =================================================================================================
# Gemini
# =================================================================================================

# A streamed model turn comes back either way: its text parts as they came (one per chunk, as
# google-genai's parts and the raw chunks give it) or joined (``fold_text``); both are restored
# (``GeminiAdapter.comparable`` folds text as the stream assembler does).


def fold_text(parts: list[Any]) -> list[Any]:
    """Consecutive plain text parts (SDK parts or raw dicts) as one: a streamed turn's text the way
    a client that keeps it whole sends it back."""
    out: list[Any] = []
    for part in parts:
        raw = part if isinstance(part, dict) else part.model_dump(exclude_none=True)
        last = out[-1] if out else None
        last_raw = last if isinstance(last, dict) or last is None else last.model_dump(exclude_none=True)
        if last_raw is not None and set(raw) == set(last_raw) == {"text"}:
            text = last_raw["text"] + raw["text"]
            out[-1] = {"text": text} if isinstance(part, dict) else gt.Part(text=text)
        else:
            out.append(part)
    return out


def gemini_turn(client: Any, stream: bool, contents: list[gt.Content]) -> list[gt.Part]:
    parts, _ = gemini_call(client, stream, contents, gt.GenerateContentConfig(tools=gemini_tools()))
    assert_no_trace(json.dumps([p.model_dump(mode="json", exclude_none=True) for p in parts]))
    return parts


def function_calls(parts: list[Any]) -> list[Any]:
    return [p.function_call for p in parts if p.function_call]


def check_gemini_history(second: RecordedRequest, third: RecordedRequest) -> None:
    """Turn 2 upstream: turn 1's last request, then the call in dispatcher form (signed) and its
    result named for the dispatcher."""
    before, after = second.json["contents"], third.json["contents"]
    assert after[:len(before)] == before
    model, answer = after[len(before):]
    (part,) = [p for p in model["parts"] if "functionCall" in p]
    assert part["functionCall"] == {"name": DISPATCHER, "args": {"name": TARGET, "arguments": ARGS}}
    assert part["thoughtSignature"]  # gemini-3: the fake checked it against the dispatcher call it signed
    (response,) = [p["functionResponse"] for p in answer["parts"]]
    assert response["name"] == DISPATCHER and response["response"] == {"output": "sunny"}


def check_search_result(second: RecordedRequest) -> None:
    (response,) = [p["functionResponse"] for p in second.json["contents"][-1]["parts"]]
    assert response["name"] == SEARCH_TOOL
    definition = found_definition(response["response"]["output"])
    assert definition["description"] == CLIENT_DEF[TARGET]["description"]
    assert definition["parameters"] == CLIENT_DEF[TARGET]["input_schema"]


@pytest.mark.parametrize(("stream", "fold"), [(False, False), (True, True), (True, False)])
def test_gemini_session(proxy: MitmDump, fk: FakeProvider, stream: bool, fold: bool) -> None:
    keep = fold_text if fold else list
    plan_three_turns(fk)
    mark = telemetry_mark(proxy)
    sent: list[dict[str, Any]] = []
    client = proxy.genai(event_hooks=recording(sent))
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh(QUESTION))])]

    parts = gemini_turn(client, stream, contents)
    (fc,) = function_calls(parts)
    assert fc.name == TARGET and fc.args == ARGS
    first, second = ok(fk.api_requests("gemini"))
    assert reply_calls(first) == [SEARCH_TOOL]
    assert dispatched(second) == [{"name": TARGET, "arguments": ARGS}]
    check_search_result(second)

    contents += [gt.Content(role="model", parts=keep(parts)), gt.Content(role="user", parts=[
        gt.Part.from_function_response(name=TARGET, response={"output": "sunny"})])]
    parts2 = gemini_turn(client, stream, contents)
    assert "".join(p.text or "" for p in parts2) == 'Forecast:\nlast tool result: {"output":"sunny"}'
    third = ok(fk.api_requests("gemini"))[2]
    check_gemini_history(second, third)
    check_cached(third, second)

    contents += [gt.Content(role="model", parts=keep(parts2)),
                 gt.Content(role="user", parts=[gt.Part(text="And in London?")])]
    parts3 = gemini_turn(client, stream, contents)
    (fc3,) = function_calls(parts3)
    assert fc3.name == TARGET and fc3.args == AGAIN
    recs = ok(fk.api_requests("gemini"))
    assert len(recs) == 4 and dispatched(recs[3]) == [{"name": TARGET, "arguments": AGAIN}]
    check_cached(recs[3], third)
    check_tools_fixed(recs)
    for body in sent:  # what the client sent: its own tools, its own calls
        assert_no_trace(json.dumps(body["contents"]))

    records = new_records(proxy, mark, 3)
    assert {r["deferral"] for r in records} == {"call-through"}
    assert [r["dispatched"] for r in records] == [[TARGET], [], [TARGET]]


@pytest.mark.parametrize("fold", [True, False])
def test_gemini_json_array_stream(proxy: MitmDump, fk: FakeProvider, fold: bool) -> None:
    """``:streamGenerateContent`` without ``alt=sse`` (no SDK speaks it): raw httpx, two turns."""
    plan_three_turns(fk)
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": fresh(QUESTION)}]}],
                            "tools": gemini_raw_tools()}
    headers = {"x-goog-api-key": "test-gemini-key"}
    method = ":streamGenerateContent"
    with proxy.httpx_client() as http:
        r = http.post(GEMINI_URL + method, json=body, headers=headers)
        assert r.status_code == 200, r.text
        assert_no_trace(r.text)
        parts = [p for c in gemini_raw_chunks(r, method) for p in c["candidates"][0]["content"]["parts"]]
        (fc,) = [p for p in parts if "functionCall" in p]
        assert fc["functionCall"]["name"] == TARGET and fc["functionCall"]["args"] == ARGS and fc["thoughtSignature"]
        answer = {"functionResponse": {"name": TARGET, "response": {"output": "sunny"}}}
        body["contents"] += [{"role": "model", "parts": fold_text(parts) if fold else parts},
                             {"role": "user", "parts": [answer]}]
        r2 = http.post(GEMINI_URL + method, json=body, headers=headers)
    assert r2.status_code == 200, r2.text
    chunks = gemini_raw_chunks(r2, method)
    text = "".join(p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"])
    assert text == 'Forecast:\nlast tool result: {"output":"sunny"}'
    first, second, third = ok(fk.api_requests("gemini"))
    assert all(rec.query == first.query for rec in (second, third))  # the array form on every round
    check_search_result(second)
    check_gemini_history(second, third)
    check_cached(third, second)
    check_tools_fixed([first, second, third])


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_unknown_tool(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_unknown_tool(fk)
    mark = telemetry_mark(proxy)
    parts = gemini_turn(proxy.genai(), stream, [gt.Content(role="user", parts=[gt.Part(text=fresh(QUESTION))])])
    assert not function_calls(parts) and "".join(p.text or "" for p in parts) == REFUSAL
    first, second = ok(fk.api_requests("gemini"))
    assert dispatched(first) == [{"name": "no_such_tool", "arguments": {}}]
    (response,) = [p["functionResponse"] for p in second.json["contents"][-1]["parts"]]
    assert response["name"] == DISPATCHER
    error = response["response"]["error"]  # the form of an error result (the proxy's text: JSON of its own)
    assert "No tool is named 'no_such_tool'" in error and "The nearest names:" in error, response
    check_tools_fixed([first, second])
    (record,) = new_records(proxy, mark, 1)
    assert record["deferral"] == "call-through" and record["refused_calls"] == 1 and record["dispatched"] == []


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_refused_beside_a_real_call(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """A step with a dispatcher call naming no tool and a real call: the client gets the real
    call (signed), the refused one is hidden and not re-forwarded (the real call needs the
    client's result); the next turn goes on from the step as the model made it (its first call
    signed), the refusal answered first beside the client's result, and validates."""
    fk.set_script([Rule(calls=[Call(DISPATCHER, {"name": "no_such_tool", "arguments": {}}), Call(*READ)], times=1),
                   reply("Done:", echo_last_result=True)])
    mark = telemetry_mark(proxy)
    client = proxy.genai()
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh("Read notes.txt"))])]
    parts = gemini_turn(client, stream, contents)
    fcs = [p for p in parts if p.function_call]
    assert [(p.function_call.name, p.function_call.args) for p in fcs] == [READ]  # type: ignore[union-attr]
    assert fcs[0].thought_signature  # gemini-3 checks the step's first call
    assert len(fk.api_requests("gemini")) == 1
    contents += [gt.Content(role="model", parts=fold_text(parts)), gt.Content(role="user", parts=[
        gt.Part.from_function_response(name="read_file", response={"output": "hello"})])]
    parts2 = gemini_turn(client, stream, contents)
    assert "".join(p.text or "" for p in parts2) == 'Done:\nlast tool result: {"output":"hello"}'
    first, second = ok(fk.api_requests("gemini"))
    assert [[p["functionCall"]["name"] for p in c["parts"] if "functionCall" in p]
            for c in second.json["contents"] if c["role"] == "model"] == [[DISPATCHER, "read_file"]]
    responses = [p["functionResponse"] for p in second.json["contents"][-1]["parts"]]
    assert [r["name"] for r in responses] == [DISPATCHER, "read_file"] and "error" in responses[0]["response"]
    record = new_records(proxy, mark, 2)[0]
    assert record["deferral"] == "call-through" and record["refused_calls"] == 1


@pytest.mark.parametrize("searched", [True, False])
@pytest.mark.parametrize("stream", [False, True])
def test_gemini_kept_tool_called_through_the_dispatcher(proxy: MitmDump, fk: FakeProvider, stream: bool,
                                                        searched: bool) -> None:
    """The model calls a tool it was offered directly through the dispatcher (after a search, or
    at once): the client runs the tool and answers it by its name; upstream the step goes on as
    it was made, its signature on the dispatcher call, and the answer goes as the dispatcher's
    (Gemini 3 refuses a response naming another function than the call): no fallback."""
    dispatched = Rule(calls=[Call(DISPATCHER, {"name": READ[0], "arguments": READ[1]})], nth=2 if searched else 1)
    fk.set_script([*([search("weather forecast", nth=1)] if searched else []), dispatched,
                   reply("Done:", echo_last_result=True)])
    mark = telemetry_mark(proxy)
    client = proxy.genai()
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh("Read notes.txt"))])]
    parts = gemini_turn(client, stream, contents)
    assert [(fc.name, fc.args) for fc in function_calls(parts)] == [READ]
    contents += [gt.Content(role="model", parts=fold_text(parts)), gt.Content(role="user", parts=[
        gt.Part.from_function_response(name=READ[0], response={"output": "hello"})])]
    parts2 = gemini_turn(client, stream, contents)
    assert "".join(p.text or "" for p in parts2) == 'Done:\nlast tool result: {"output":"hello"}'
    *_, before, after = ok(fk.api_requests("gemini"))
    assert len(fk.api_requests("gemini")) == (3 if searched else 2)
    model, answer = after.json["contents"][len(before.json["contents"]):]
    assert [p["functionCall"]["name"] for p in model["parts"] if "functionCall" in p] == [DISPATCHER]
    assert [p["functionResponse"]["name"] for p in answer["parts"]] == [DISPATCHER]
    assert all(r.get("fallback_reason") is None for r in new_records(proxy, mark, 2))


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_mixed_search_and_dispatched_call(proxy: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """Gemini CLI's case: round two searches again and calls the found tool in one step. The
    client gets the real call; its next turn goes upstream with the step as the model made it
    (signed) and both results, the search's first, so the model is not left to search again."""
    fk.set_script([search("weather forecast", nth=1),
                   calls((SEARCH_TOOL, {"query": "more"}), (TARGET, ARGS), nth=2, no_result_for=[]),
                   reply("Forecast:", echo_last_result=True)])
    client = proxy.genai()
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh(QUESTION))])]
    parts = gemini_turn(client, stream, contents)
    (fc,) = function_calls(parts)
    assert fc.name == TARGET and fc.args == ARGS
    assert len(fk.api_requests("gemini")) == 2
    contents += [gt.Content(role="model", parts=fold_text(parts)), gt.Content(role="user", parts=[
        gt.Part.from_function_response(name=TARGET, response={"output": "sunny"})])]
    parts2 = gemini_turn(client, stream, contents)
    assert "".join(p.text or "" for p in parts2) == 'Forecast:\nlast tool result: {"output":"sunny"}'
    first, second, third = ok(fk.api_requests("gemini"))
    before, after = second.json["contents"], third.json["contents"]
    assert after[:len(before)] == before
    model, answer = after[len(before):]
    calls_made = [p for p in model["parts"] if "functionCall" in p]
    assert [p["functionCall"]["name"] for p in calls_made] == [SEARCH_TOOL, DISPATCHER]
    assert calls_made[0]["thoughtSignature"]  # gemini-3 checks the step's first call
    responses = [p["functionResponse"] for p in answer["parts"]]
    assert [r["name"] for r in responses] == [SEARCH_TOOL, DISPATCHER]
    assert TARGET in json.dumps(responses[0]) and responses[1]["response"] == {"output": "sunny"}
    check_cached(third, second)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["openai-chat", "gemini"])
def test_two_dispatched_calls_in_one_round(proxy: MitmDump, fk: FakeProvider, api: str, stream: bool) -> None:
    """The found tool called twice at once through the dispatcher: two real calls, in order, and
    both results go back in dispatcher form."""
    fk.set_script([search("weather forecast", not_offered=[TARGET]), calls((TARGET, ARGS), (TARGET, AGAIN)),
                   reply("Both:", echo_last_result=True)])
    question = fresh(QUESTION)
    if api == "openai-chat":
        client = proxy.openai()
        messages: list[Any] = [{"role": "user", "content": question}]
        msg = chat_ask(client, stream, messages).choices[0].message
        assert_no_trace(msg.model_dump_json())
        got = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls]
        messages += [msg.model_dump(exclude_none=True)] + [
            {"role": "tool", "tool_call_id": c.id, "content": f"sunny {i}"} for i, c in enumerate(msg.tool_calls)]
        text = chat_ask(client, stream, messages).choices[0].message.content
    else:
        genai = proxy.genai()
        contents = [gt.Content(role="user", parts=[gt.Part(text=question)])]
        parts = gemini_turn(genai, stream, contents)
        got = [(fc.name, fc.args) for fc in function_calls(parts)]
        contents += [gt.Content(role="model", parts=fold_text(parts)), gt.Content(role="user", parts=[
            gt.Part.from_function_response(name=TARGET, response={"output": f"sunny {i}"}) for i in range(2)])]
        text = "".join(p.text or "" for p in gemini_turn(genai, stream, contents))
    assert got == [(TARGET, ARGS), (TARGET, AGAIN)]
    assert text is not None and text.startswith("Both:") and "sunny 1" in text
    first, second, third = ok(fk.api_requests(api))
    assert dispatched(second) == [{"name": TARGET, "arguments": ARGS}, {"name": TARGET, "arguments": AGAIN}]
    check_cached(third, second)
    check_tools_fixed([first, second, third])


def test_chat_history_not_restored_goes_up_wrapped(proxy: MitmDump, fk: FakeProvider) -> None:
    """A client that edits the answer it got (no restore: the turn goes up as it sent it) still
    sends the found tool's call in dispatcher form, its own arguments text inside."""
    fk.set_script([search("weather forecast", nth=1), call(TARGET, ARGS), reply("Forecast:", echo_last_result=True)])
    client = proxy.openai()
    messages: list[Any] = [{"role": "user", "content": fresh(QUESTION)}]
    msg = chat_ask(client, False, messages).choices[0].message
    (tc,) = msg.tool_calls
    edited = msg.model_dump(exclude_none=True) | {"content": "(edited)"}
    edited["tool_calls"][0]["function"]["arguments"] = '{ "city": "Paris" }'
    messages += [edited, {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}]
    assert chat_ask(client, False, messages).choices[0].message.content == "Forecast:\nlast tool result: sunny"
    first, second, third = ok(fk.api_requests("openai-chat"))
    assert SEARCH_TOOL not in json.dumps(third.json["messages"])  # not restored: the client's turn as it sent it
    assistant, answered = third.json["messages"][1:]
    assert assistant["content"] == "(edited)"
    assert assistant["tool_calls"] == [{"id": tc.id, "type": "function", "function": {
        "name": DISPATCHER, "arguments": '{"name":"%s","arguments":{ "city": "Paris" }}' % TARGET}}]
    assert answered == {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}
    check_tools_fixed([first, second, third])
