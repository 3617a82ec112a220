"""The phantom search loop through a real mitmdump for OpenAI Responses (openai SDK), stateless
and on stored chains, streaming and not.

Shared set-up (configs, proxies, catalogs, clients): ``tests/e2e/wire_apis.py``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai
import pytest
from tests.e2e.harness import MitmDump
from tests.e2e.wire_apis import (  # noqa: F401 (fixtures are used by name)
    _passthrough_proxy,
    _relevance_proxy,
    _toolsearch_proxy,
    R_NAMESPACE,
    R_WEB,
    READ_FILE,
    SESSION_LOST,
    TARGET,
    aws_chain,
    fk,
    fresh,
    ok,
    passthrough,
    plan_mixed,
    plan_search_then_call,
    r_names,
    r_tool,
    relevance,
    reply_calls,
    responses_call,
    responses_tools,
    toolsearch,
    usage_sum,
)
from tests.fakeprovider import (
    SEARCH_TOOL,
    FakeProvider,
    RecordedRequest,
    call,
    reply,
    search,
)

pytestmark = pytest.mark.e2e

# =================================================================================================
# tool-search: OpenAI Responses
# =================================================================================================


def check_responses_rounds(recs: list[RecordedRequest], tools: list[dict[str, Any]]) -> None:
    """Round one offered the built-ins, read_file and the search tool; round two added the found
    definitions, the forecast one identical to the client's."""
    first, second = ok(recs)
    assert first.json["tools"] == [r_tool(READ_FILE), R_WEB, R_NAMESPACE, first.json["tools"][-1]]
    assert first.json["tools"][-1]["name"] == SEARCH_TOOL and reply_calls(first) == [SEARCH_TOOL]
    assert second.json["tools"][:4] == first.json["tools"]
    found = {t["name"]: t for t in second.json["tools"][4:]}
    assert TARGET in found and found[TARGET] == next(t for t in tools if t.get("name") == TARGET)
    assert reply_calls(second) == [TARGET]
    out = second.json["input"][-1]
    assert out["type"] == "function_call_output" and TARGET in out["output"]


def check_responses_client_view(res: Any, recs: list[RecordedRequest]) -> Any:
    """The client sees the forecast call and nothing of the search; usage is the rounds' sum."""
    dumped = res.model_dump_json()
    assert SEARCH_TOOL not in dumped
    fcs = [o for o in res.output if o.type == "function_call"]
    assert [f.name for f in fcs] == [TARGET] and json.loads(fcs[0].arguments) == {"city": "Paris"}
    assert res.usage.input_tokens == usage_sum(recs, "input_tokens")
    assert res.usage.output_tokens == usage_sum(recs, "output_tokens")
    assert res.usage.total_tokens == res.usage.input_tokens + res.usage.output_tokens
    return fcs[0]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_stateless_store_false(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """``store: false`` (Codex): the re-forward carries the full input; so does the next turn."""
    plan_search_then_call(fk)
    client, tools = toolsearch.openai(), responses_tools()
    history: list[dict[str, Any]] = [{"role": "user", "content": fresh("What's the forecast for Paris?")}]
    res = responses_call(client, stream, model="gpt-5", input=history, tools=tools, store=False)
    recs = fk.api_requests("openai-responses")
    check_responses_rounds(recs, tools)
    fc = check_responses_client_view(res, recs)
    replay = recs[1].json["input"]
    assert replay[0] == history[0] and [i["type"] for i in replay[1:]] == ["function_call", "function_call_output"]
    assert "id" not in replay[1]  # nothing was stored: no item id may be referenced
    history += [
        fc.model_dump(exclude_none=True, exclude={"id", "status"}),
        {"type": "function_call_output", "call_id": fc.call_id, "output": "sunny, 24C"},
    ]
    res2 = responses_call(client, stream, model="gpt-5", input=history, tools=tools, store=False)
    assert res2.output_text == "Forecast:\nlast tool result: sunny, 24C"
    third = ok(fk.api_requests("openai-responses"))[2]
    assert reply_calls(third) == [] and TARGET in r_names(third)[4:]  # found tool carried, no new search
    assert third.json["input"] == history


@pytest.mark.parametrize("stream", [False, True])
def test_responses_stored_next_turn_chains_from_final_id(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """Stored (the default), first turn without ``previous_response_id``: the client's next turn
    chains from the id it got, which must be the stored round holding the forecast call."""
    plan_search_then_call(fk)
    client, tools = toolsearch.openai(), responses_tools()
    res = responses_call(client, stream, model="gpt-5", input=fresh("What's the forecast for Paris?"), tools=tools)
    recs = fk.api_requests("openai-responses")
    check_responses_rounds(recs, tools)
    fc = check_responses_client_view(res, recs)
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny, 24C"}]
    res2 = responses_call(client, stream, model="gpt-5", previous_response_id=res.id, input=output, tools=tools)
    assert res2.output_text == "Forecast:\nlast tool result: sunny, 24C"
    third = ok(fk.api_requests("openai-responses"))[2]
    if stream:
        # A live stream keeps round one's id from its response.created (the SDK insists on one
        # identity); the proxy continues the chain from the last round, which the fake holds
        # with the forecast call: it would answer "No tool output found" from round one.
        assert third.json["previous_response_id"] not in (res.id, None)
    else:
        assert third.json["previous_response_id"] == res.id
    assert third.json["input"] == output
    assert reply_calls(third) == []
    assert TARGET in r_names(third)[4:], (SESSION_LOST, r_names(third))  # the found tool rides along


@pytest.mark.parametrize("stream", [False, True])
def test_responses_search_on_a_chained_turn(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    """The search happens on a turn that already chains with ``previous_response_id``: round two
    chains from round one and sends only the search output; the client's final response keeps
    its own ``previous_response_id``, and its id continues the chain on the next turn."""
    fk.set_script(
        [
            search("weather forecast", contains="Paris", not_offered=[TARGET]),
            call(TARGET, {"city": "Paris"}),
            reply("Forecast:", echo_last_result=True, has_result_for=[TARGET]),
            reply("Hello!"),
        ]
    )
    client, tools = toolsearch.openai(), responses_tools()
    hello = responses_call(client, stream, model="gpt-5", input=fresh("Hi there"), tools=tools)
    assert hello.output_text == "Hello!"
    question = [{"role": "user", "content": fresh("And what's the forecast for Paris?")}]
    res = responses_call(client, stream, model="gpt-5", previous_response_id=hello.id, input=question, tools=tools)
    recs = ok(fk.api_requests("openai-responses"))
    assert len(recs) == 3
    check_responses_rounds(recs[1:], tools)
    fc = check_responses_client_view(res, recs[1:])
    round1, round2 = recs[1:]
    assert round1.json["previous_response_id"] == hello.id
    assert round2.json["previous_response_id"] not in (None, hello.id)  # round one's own id
    phantom_id = round1.reply["calls"][0]["id"]  # type: ignore[index]
    assert [(i["type"], i["call_id"]) for i in round2.json["input"]] == [("function_call_output", phantom_id)]
    assert res.previous_response_id == hello.id
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny, 24C"}]
    res2 = responses_call(client, stream, model="gpt-5", previous_response_id=res.id, input=output, tools=tools)
    assert res2.output_text == "Forecast:\nlast tool result: sunny, 24C"
    last = ok(fk.api_requests("openai-responses"))[3]
    assert reply_calls(last) == []
    assert TARGET in r_names(last)[4:], (SESSION_LOST, r_names(last))


def test_responses_chained_turn_with_prompt_cache_key(toolsearch: MitmDump, fk: FakeProvider) -> None:
    """Control for the two tests above: with a client session id (``prompt_cache_key``) the
    chained turn finds the session, so the found tool rides along."""
    plan_search_then_call(fk)
    client, tools = toolsearch.openai(), responses_tools()
    key = f"pck-{uuid.uuid4().hex}"
    res = responses_call(
        client, False, model="gpt-5", input=fresh("What's the forecast for Paris?"), tools=tools, prompt_cache_key=key
    )
    fc = check_responses_client_view(res, fk.api_requests("openai-responses"))
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}]
    res2 = responses_call(
        client, False, model="gpt-5", previous_response_id=res.id, input=output, tools=tools, prompt_cache_key=key
    )
    assert res2.output_text == "Forecast:\nlast tool result: sunny"
    third = ok(fk.api_requests("openai-responses"))[2]
    assert reply_calls(third) == [] and TARGET in r_names(third)[4:]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_raw_bytes_hide_the_search(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_search_then_call(fk)
    body = {
        "model": "gpt-5",
        "input": fresh("What's the forecast for Paris?"),
        "tools": responses_tools(),
        "stream": stream,
    }
    with toolsearch.httpx_client() as http:
        r = http.post("https://api.openai.com/v1/responses", json=body, headers={"authorization": "Bearer sk-test"})
    assert r.status_code == 200 and len(fk.api_requests()) == 2
    assert SEARCH_TOOL not in r.text and TARGET in r.text
    if stream:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
        assert r.text.count("event: response.completed") == 1


def test_responses_mixed_turn_stateless(toolsearch: MitmDump, fk: FakeProvider) -> None:
    plan_mixed(fk)
    client, tools = toolsearch.openai(), responses_tools()
    history: list[dict[str, Any]] = [{"role": "user", "content": fresh("Read notes.txt and post it to Slack")}]
    res = responses_call(client, False, model="gpt-5", input=history, tools=tools, store=False)
    assert SEARCH_TOOL not in res.model_dump_json()
    (fc,) = [o for o in res.output if o.type == "function_call"]
    assert fc.name == "read_file"
    assert len(fk.api_requests()) == 1  # never re-forwarded without the real call's output
    history += [
        fc.model_dump(exclude_none=True, exclude={"id", "status"}),
        {"type": "function_call_output", "call_id": fc.call_id, "output": "hello"},
    ]
    res2 = responses_call(client, False, model="gpt-5", input=history, tools=tools, store=False)
    assert res2.output_text == "Done:\nlast tool result: hello"
    nxt = ok(fk.api_requests())[1]
    assert any(n.startswith("mcp__slack__") for n in r_names(nxt)[4:]), r_names(nxt)  # found tools ride along


def test_responses_mixed_turn_stored_chain(toolsearch: MitmDump, fk: FakeProvider) -> None:
    """Stored + ``previous_response_id``: the mixed round is the response the server stored, with
    the search call in it; the client's next turn chains from it and answers only its own call."""
    plan_mixed(fk)
    client, tools = toolsearch.openai(), responses_tools()
    res = responses_call(client, False, model="gpt-5", input=fresh("Read notes.txt and post it to Slack"), tools=tools)
    (fc,) = [o for o in res.output if o.type == "function_call"]
    assert fc.name == "read_file" and SEARCH_TOOL not in res.model_dump_json()
    output = [{"type": "function_call_output", "call_id": fc.call_id, "output": "hello"}]
    try:
        res2 = responses_call(client, False, model="gpt-5", previous_response_id=res.id, input=output, tools=tools)
    except openai.BadRequestError as e:  # the stored phantom call has no output
        pytest.fail(f"the chained turn after a mixed turn was rejected upstream: {e}")
    assert res2.output_text == "Done:\nlast tool result: hello"
