"""OpenAI Responses adapter: Codex-shaped requests, the three continuation rules, strip/merge,
streams read back by the OpenAI SDK."""

from __future__ import annotations

import copy
import json

import pytest
from openai.types.responses import FunctionTool, Response
from tests.support.streams import openai_responses_final, strip_nones
from tooldisco.engine.loop import Finish, Found, PhantomLoop, Send
from tooldisco.policy.modes import ClassicMode

from tests.support.loop_driver import Driver
from tooldisco.core.types import Tool, ToolCall, ToolResult, Unsupported
from tooldisco.apis.registry import detect
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter, parse_tool
from tooldisco.apis.text import injected

from tests.support.catalog import tool_specs
from tests.support.adapters_responses import (
    ENCRYPTED,
    P,
    call,
    message,
    reasoning,
    response,
    usage_of,
)

R = OpenAIResponsesAdapter()
SDK_ADDED = frozenset({"parsed", "parsed_arguments"})


def functions(n: int) -> list[dict]:
    return [
        {"type": "function", "name": name, "description": desc, "strict": False,
         "parameters": {"type": "object", "properties": {k: {"type": "string", "description": v} for k, v in p.items()},
                        "required": list(p)[:1], "additionalProperties": False}}
        for name, desc, p in tool_specs(n)
    ]


CODEX_TOOLS = [
    {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
     "strict": False,
     "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}},
                                                     "workdir": {"type": "string"}}, "required": ["command"],
                    "additionalProperties": False}},
    {"type": "custom", "name": "apply_patch", "description": "Use the `apply_patch` tool to edit files.",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch\n"}},
    {"type": "web_search", "external_web_access": False},
    {"type": "local_shell"},
    {"type": "tool_search", "execution": "client", "description": "Search deferred tools.", "parameters": {}},
    {"type": "namespace", "name": "mcp__linear__", "description": "Linear MCP server",
     "tools": [{"type": "function", "name": "create_ticket", "parameters": {"type": "object", "properties": {}}}]},
    {"type": "function", "name": "lazy_tool", "description": "deferred by the client", "defer_loading": True,
     "parameters": {"type": "object", "properties": {}}},
    *functions(6),
]
AGENTS_MD = "# AGENTS.md instructions for /home/dev/shop\n\n<INSTRUCTIONS>\nUse pytest.\n</INSTRUCTIONS>"
ENV = ("<environment_context>\n  <cwd>/home/dev/shop</cwd>\n  <approval_policy>never</approval_policy>\n"
       "  <sandbox_mode>danger-full-access</sandbox_mode>\n  <shell>bash</shell>\n</environment_context>")


def codex_input() -> list[dict]:
    return [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "<permissions instructions>…"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": AGENTS_MD},
                                                       {"type": "input_text", "text": ENV}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "which PRs are open on acme/shop?"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Listing PRs**"}], "content": None,
         "encrypted_content": ENCRYPTED},
        {"type": "function_call", "name": "mcp__github__list_pull_requests", "arguments": "{\"repo\":\"acme/shop\"}",
         "call_id": "call_A1"},
        {"type": "function_call_output", "call_id": "call_A1", "output": "[#12 Fix checkout]"},
        {"type": "function_call", "namespace": "mcp__linear__", "name": "create_ticket", "arguments": "{}",
         "call_id": "call_B2"},
        {"type": "function_call_output", "call_id": "call_B2", "output": "LIN-7"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "One open PR: #12."}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<system-reminder>be brief</system-reminder>merge #12 and post to slack"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ENV}]},
    ]


def codex_body(**over) -> str:
    body = {
        "model": "gpt-5-codex", "instructions": "You are Codex, based on GPT-5.", "input": codex_input(),
        "tools": CODEX_TOOLS, "tool_choice": "auto", "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"}, "store": False, "stream": True,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "019a8f3e-5c2d-7a10-b3c4-d5e6f7a8b9c0",
        "text": {"verbosity": "low"}, "temperature": 1.0,
    }
    body.update(over)
    return json.dumps({k: v for k, v in body.items() if v is not None}, indent=1)


@pytest.mark.parametrize(
    "method, path, api",
    [("POST", "/v1/responses", "openai_responses"),
     ("POST", "/openai/v1/responses?api-version=preview", "openai_responses"),
     ("POST", "/openai/responses?api-version=2025-04-01-preview", "openai_responses"),
     ("POST", "/backend-api/codex/responses", "openai_responses"), ("GET", "/v1/responses", None),
     ("POST", "/v1/responses/compact", None), ("POST", "/v1/responses/resp_1/cancel", None),
     ("POST", "/v1/responses/input_tokens", None)],
)
def test_detect(method, path, api):
    a = detect(method, path, "api.openai.com")
    assert (a.api if a else None) == api


def test_parse_codex_request():
    v = R.parse(codex_body(tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [
        {"type": "function", "name": "mcp__slack__post_message"}]}))
    assert v.query == "merge #12 and post to slack"  # reminder gone, trailing environment turn skipped
    assert v.first_user == "which PRs are open on acme/shop?"  # AGENTS.md and environment turns skipped
    assert v.used == {"mcp__github__list_pull_requests", "mcp__linear__.create_ticket"}  # namespace.name
    assert v.forced == {"mcp__slack__post_message"}
    assert v.stream and v.session_hint == "019a8f3e-5c2d-7a10-b3c4-d5e6f7a8b9c0"
    pins = {t.name: t.pinned for t in v.tools}
    assert pins == {"shell": None, "apply_patch": "builtin", "<web_search>": "builtin", "<local_shell>": "builtin",
                    "<tool_search>": "builtin", "mcp__linear__.create_ticket": None, "lazy_tool": "client_deferred",
                    **{f["name"]: None for f in functions(6)}}
    assert v.tools[0].params == (("command", ""), ("workdir", ""))
    assert R.parse(codex_body(tool_choice={"type": "function", "name": "shell"})).forced == {"shell"}


def test_parse_string_input_and_easy_messages():
    v = R.parse(json.dumps({"model": "m", "input": "post the report to slack", "tools": functions(2)}))
    assert v.query == v.first_user == "post the report to slack" and not v.stream and v.session_hint is None
    v = R.parse(json.dumps({"model": "m", "input": [{"role": "user", "content": "first"},
                                                    {"role": "user", "content": "second"}]}))
    assert (v.first_user, v.query) == ("first", "second")


@pytest.mark.parametrize(
    "text, expected",
    [(ENV, True), (AGENTS_MD, True), ("<user_instructions>\nbe nice\n</user_instructions>", True),
     ("<recommended_plugins>\nx\n</recommended_plugins>\n<environment_context>y</environment_context>", True),
     ("fix <b>this</b>", False), ("<b>bold</b> then words", False), ("<unclosed> text", False), ("", False)],
)
def test_injected_context(text, expected):
    assert injected(text) is expected


@pytest.mark.parametrize(
    "b, why",
    [("not json", "not JSON"), ('{"input": 3}', "input is neither"),
     ('{"input":"x","tools":[{"type":"function","name":"a"},{"type":"function","name":"a"}]}', "duplicate"),
     ('{"input":"x","tools":[{"type":"function","description":"no name"}]}', "no name"),
     ('{"input":"x","tools":{"a":1}}', "not an array")],
)
def test_unsupported(b, why):
    with pytest.raises(Unsupported, match=why):
        R.parse(b)


def test_with_tools_keeps_every_other_byte():
    b = codex_body()
    v = R.parse(b)
    keep = [t.raw for t in v.tools if t.pinned] + [v.tools[-1].raw]
    out = R.with_tools(b, [*keep, R.phantom_tool(P, "Search more tools.")])
    for raw in keep:
        assert raw in out  # byte-identical definitions
    head, tail = b.split('"tools"')[0], b.split('"tool_choice"')[1]
    assert out.startswith(head) and out.endswith(tail)  # the rest of the body, byte for byte
    assert [t.get("name") for t in json.loads(out)["tools"]][-2:] == [v.tools[-1].name, P]


def test_phantom_tool_is_a_valid_function_tool():
    tool = FunctionTool.model_validate(json.loads(R.phantom_tool(P, "Search 40 more tools.")))
    assert tool.name == P and tool.parameters["required"] == ["query"]
    assert parse_tool(R.phantom_tool(P, "d")).pinned is None


def test_calls():
    m = response(reasoning(), call(), call("shell", "call_R", '{"command":["ls"]}'),
                 call("create_ticket", "call_N", "{}", namespace="mcp__linear__"), call("x", "call_T", "not json"))
    assert R.calls(m) == [
        ToolCall("call_S1", P, {"query": "slack post message"}), ToolCall("call_R", "shell", {"command": ["ls"]}),
        ToolCall("call_N", "mcp__linear__.create_ticket", {}), ToolCall("call_T", "x", "not json"),
    ]


def test_continue_stateless_store_false_replays_items_without_ids():
    b = codex_body()
    m = response(reasoning(), reasoning("rs_bare", encrypted=None), message("Let me look for a Slack tool."), call())
    (c,) = R.calls(m)
    new_tool = '{"type":"function","name":"new"}'
    out = R.append_round(b, m, [ToolResult(c, "found mcp__slack__post_message")], [new_tool])
    assert out.startswith(b.split('"input"')[0])  # everything before input untouched
    data = json.loads(out)
    added = data["input"][len(codex_input()):]
    assert added == [
        {k: v for k, v in reasoning().items() if k != "id"},  # encrypted reasoning goes back, without its id
        {k: v for k, v in message("Let me look for a Slack tool.").items() if k not in ("id", "status")},
        {k: v for k, v in call().items() if k != "id"},
        {"type": "function_call_output", "call_id": "call_S1", "output": "found mcp__slack__post_message"},
    ]  # the bare reasoning item (no encrypted_content) could not be resolved: dropped
    assert data["tools"][-1] == {"type": "function", "name": "new"} and "previous_response_id" not in data


def test_continue_string_input_becomes_a_user_message_with_its_bytes():
    b = '{"model":"m","input":"caf\\u00e9 \\"quoted\\"","store":false,"tools":[]}'
    m = response(call())
    out = R.append_round(b, m, [ToolResult(R.calls(m)[0], "r")], [])
    assert out.startswith('{"model":"m","input":[{"role":"user","content":"caf\\u00e9 \\"quoted\\""},')
    assert json.loads(out)["input"][0] == {"role": "user", "content": 'café "quoted"'}


def test_continue_stored_without_chain_replays_items_as_they_came():
    b = codex_body(store=True)
    m = response(reasoning(encrypted=None), call(), store=True)
    out = json.loads(R.append_round(b, m, [ToolResult(R.calls(m)[0], "r")], []))
    assert out["input"][-3:-1] == [reasoning(encrypted=None), call()]  # ids resolve server-side


def test_continue_stored_chain_points_at_round_one():
    b = codex_body(store=True, previous_response_id="resp_client_prev",
                   input=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "post it"}]}])
    m = response(reasoning(), call(), rid="resp_round1", store=True)
    out = R.append_round(b, m, [ToolResult(R.calls(m)[0], "found")], [])
    data = json.loads(out)
    assert data["previous_response_id"] == "resp_round1"  # round one holds the call; only its output is new
    assert data["input"] == [{"type": "function_call_output", "call_id": "call_S1", "output": "found"}]
    assert data["instructions"] == "You are Codex, based on GPT-5." and data["store"] is True
    # store:false with previous_response_id: round one was not stored, so the stateless rule applies.
    b2 = codex_body(store=False, previous_response_id="resp_client_prev", input=[])
    data2 = json.loads(R.append_round(b2, m, [ToolResult(R.calls(m)[0], "found")], []))
    assert data2["previous_response_id"] == "resp_client_prev" and len(data2["input"]) == 3


def test_continue_conversation_sends_only_outputs():
    b = codex_body(store=None, conversation="conv_123", input=[{"role": "user", "content": "hi"}])
    m = response(call(), store=True)
    data = json.loads(R.append_round(b, m, [ToolResult(R.calls(m)[0], "found")], []))
    assert data["conversation"] == "conv_123" and "previous_response_id" not in data
    assert data["input"] == [{"type": "function_call_output", "call_id": "call_S1", "output": "found"}]


def test_strip_phantom_with_its_reasoning():
    only = response(reasoning(), call())
    stripped = R.strip(only, [P])
    assert stripped["output"] == [] and stripped["status"] == "completed"
    assert stripped["tools"] == only["tools"]  # the echo is restore_echo's (and the stitcher's) to fix
    mixed = response(reasoning(), call(), call("shell", "call_R"), reasoning("rs_2"), message("done"))
    assert [i["id"] for i in R.strip(mixed, [P])["output"]] == ["rs_1", "fc_call_R", "rs_2", "msg_1"]
    namespaced = response(call(P, "call_N", namespace="mcp__x__"))
    assert R.strip(namespaced, [P])["output"] == namespaced["output"]  # not the phantom: it lives in a namespace
    assert only["output"]  # the input is not mutated


ANSWER = ('{"id":"resp_1","object":"response","model":"gpt-5-codex","output":[],"tool_choice":"required",'
          '"tools":[{"type":"function","name":"shell"},{"type":"function","name":"' + P + '"}],'
          '"temperature":1.0,"text":{"format":{"type":"text"}},"note":"caf\\u00e9"}')


def test_restore_echo_splices_the_clients_own_fields():
    body = '{"model": "m", "tools": [ {"type": "custom", "name": "apply_patch"} ], "tool_choice": {"type": "auto"}}'
    out = R.restore_echo(ANSWER, body)
    assert out == ANSWER.replace(ANSWER[ANSWER.index('"tool_choice"'):ANSWER.index(',"temperature"')],
                                 '"tool_choice":{"type": "auto"},"tools":[ {"type": "custom", "name": "apply_patch"} ]')
    assert P not in out and json.loads(out)["note"] == "café"  # every other byte as it came


@pytest.mark.parametrize("body", ['{"model":"m","input":"hi"}', '{"model":"m","tools":null,"tool_choice":null}'])
def test_restore_echo_of_absent_fields_is_what_the_api_echoes(body):
    data = json.loads(R.restore_echo(ANSWER, body))
    assert data["tools"] == [] and data["tool_choice"] == "auto"


def test_restore_echo_leaves_what_echoes_nothing():
    error = '{"error": {"message": "Rate limit reached", "type": "requests", "param": null, "code": null}}'
    assert R.restore_echo(error, codex_body()) == error
    assert R.restore_echo(" [1, 2] ", codex_body()) == " [1, 2] "
    only_tools = '{"id":"resp_1","tools":[]}'
    assert json.loads(R.restore_echo(only_tools, codex_body())) == {"id": "resp_1", "tools": CODEX_TOOLS}


def test_merge_sums_usage_and_keeps_the_last_id():
    first = R.strip(response(message("Searching."), call(), rid="resp_1", previous_response_id="resp_prev"), [P])
    second = response(message("Posted.", "msg_2"), rid="resp_2", previous_response_id="resp_1",
                      usage=usage_of(1200, 1000, 20, 0))
    merged = R.merge([first, second])
    assert merged["id"] == "resp_2" and merged["previous_response_id"] == "resp_prev"
    assert [i["id"] for i in merged["output"]] == ["msg_1", "msg_2"]
    assert merged["usage"] == usage_of(2200, 1800, 70, 30)
    Response.model_validate(merged)


def test_phantom_loop_end_to_end_and_stream_read_by_the_sdk():
    slack = Tool("mcp__slack__post_message", json.dumps(functions(6)[-1]))
    loop = Driver(PhantomLoop(R, ClassicMode(R, P), ["shell", P]), lambda c: Found(ToolResult(c, "loaded mcp__slack__post_message"), [slack]))
    body = R.with_tools(codex_body(), [json.dumps(CODEX_TOOLS[0]), R.phantom_tool(P, "Search.")])
    act = loop.start(body, response(reasoning(), call(), rid="resp_1"))
    assert isinstance(act, Send)
    sent = json.loads(act.body)
    assert [t["name"] for t in sent["tools"]] == ["shell", P, "mcp__slack__post_message"]
    assert sent["input"][-1] == {"type": "function_call_output", "call_id": "call_S1",
                                 "output": "loaded mcp__slack__post_message"}
    final = response(reasoning("rs_2"), call("mcp__slack__post_message", "call_P", '{"channel":"C1","text":"merged"}'),
                     rid="resp_2")
    done = loop.receive(final)
    assert isinstance(done, Finish) and done.reason == "done"
    assert P not in json.dumps(done.message["output"]) + R.restore_echo(json.dumps(done.message), codex_body())
    encoded = R.encode_stream(done.message)
    assert strip_nones(openai_responses_final(encoded, chunk=13), SDK_ADDED) == strip_nones(done.message)
    decoder = R.decoder()
    decoder.feed(encoded)
    decoder.feed(b"")
    assert decoder.done and decoder.message() == done.message


def test_adapter_does_not_mutate_inputs():
    m = response(reasoning(), call())
    before = copy.deepcopy(m)
    R.strip(m, [P])
    R.merge([m, m])
    R.append_round(codex_body(), m, [ToolResult(R.calls(m)[0], "x")], [])
    assert m == before


def test_echoed_fields_find_an_absent_member_without_walking_the_body(monkeypatch) -> None:
    """A ``tool_choice`` the body cannot hold (no literal, no ``\\u`` escape) is the API's
    default without a walk of the body (a catalog of thousands of tools); one written with
    escapes is still found."""
    from tooldisco.apis.openai_responses import messages
    from tooldisco.core import jsonspan

    looked: list[str] = []
    find = jsonspan.find
    monkeypatch.setattr(jsonspan, "find", lambda text, path, *a, **k: looked.append(path[0]) or find(text, path, *a, **k))
    body = '{"model": "gpt-5", "input": "hi", "tools": [{"type": "function", "name": "a"}]}'
    assert messages.echoed_fields(body) == {"tools": '[{"type": "function", "name": "a"}]', "tool_choice": '"auto"'}
    assert looked == ["tools"]
    escaped = '{"input": "caf\\u00e9", "tools": [], "tool\\u005fchoice": "required"}'
    assert messages.echoed_fields(escaped) == {"tools": "[]", "tool_choice": '"required"'}


@pytest.mark.parametrize("order", ["tools_first", "tool_choice_first"])
def test_echoed_fields_of_a_planned_body_leave_its_catalog_undecoded(monkeypatch, order) -> None:
    """Once the request was planned (its catalog parsed and cached), the echo of its ``tools``
    and ``tool_choice`` decodes nothing of the catalog, wherever ``tool_choice`` stands."""
    from tooldisco.apis.openai_responses import messages
    from tooldisco.core import jsonspan

    over = {"tool_choice": None} if order == "tools_first" else {"model": "gpt-5", "tools": None, "tool_choice": None}
    body = json.loads(codex_body(**over))
    if order == "tools_first":
        body["tool_choice"] = {"type": "function", "name": "shell"}
    else:  # tool_choice, then the catalog, then the conversation
        body = {"tool_choice": "required", "tools": CODEX_TOOLS, **body}
    text = json.dumps(body, indent=1)
    R.parse(text)  # the planner's parse: the catalog is cached
    start = text.index("[", text.index('"tools":'))
    decoded: list[int] = []

    class Recording(json.JSONDecoder):
        def raw_decode(self, s, idx=0):
            decoded.append(idx)
            return super().raw_decode(s, idx)

    monkeypatch.setattr(jsonspan, "_DECODER", Recording())
    fields = messages.echoed_fields(text)
    assert json.loads(fields["tools"]) == CODEX_TOOLS and fields["tools"] in text
    assert json.loads(fields["tool_choice"]) == body["tool_choice"]
    assert decoded and not [i for i in decoded if start <= i < start + len(fields["tools"])]


def test_restore_echo_walks_the_answer_once_before_the_catalog_goes_in(monkeypatch) -> None:
    """The answer's members are located once, in the answer as the upstream sent it; the client's
    fields (a catalog of thousands of tools) are then spliced in, never walked through again."""
    from tooldisco.core import jsonspan

    walked: list[str] = []
    members, find = jsonspan.members, jsonspan.find
    monkeypatch.setattr(jsonspan, "members", lambda text, span: walked.append(text) or members(text, span))
    monkeypatch.setattr(jsonspan, "find", lambda text, path, *a, **k: walked.append(text) or find(text, path, *a, **k))
    body = codex_body()
    answer = json.dumps({"id": "resp_1", "tools": [{"type": "function", "name": P}], "tool_choice": "auto",
                         "output": []})
    out = json.loads(R.restore_echo(answer, body))
    assert out["tools"] == CODEX_TOOLS and out["id"] == "resp_1"
    assert set(walked) <= {answer, body}
