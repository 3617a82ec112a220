"""Gemini adapter: Gemini CLI-shaped requests, the tools[] structure, thought signatures,
streams in both framings read back by google-genai."""

from __future__ import annotations

import copy
import json

import pytest
from google.genai import types
from tests.support.streams import gemini_chunks
from tests.support.streams_gemini import assemble
from tooldisco.engine.loop import Finish, Found, PhantomLoop, Send
from tooldisco.policy.modes import ClassicMode

from tests.support.loop_driver import Driver
from tooldisco.core.types import Tool, ToolCall, ToolResult, Unsupported
from tooldisco.apis.registry import detect
from tooldisco.apis.gemini.adapter import STAND_IN_SIGNATURE, GeminiAdapter

from tests.support.catalog import tool_specs

G = GeminiAdapter(stream=True, sse=True)
P = "gateway_search_tools"
SIG = "CiQB0e2Kb7oK3pQ9bXQ1c2lnbmF0dXJlLW9uZQ=="
SIG2 = "CiIBVKhc7tK1ZW5kLXNpZ25hdHVyZQ=="
SETUP = ("This is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Saturday, "
         "November 22, 2026.\nMy operating system is: linux\nI'm currently working in the directory: /home/dev/shop")


def declarations(n: int) -> list[dict]:
    """Gemini CLI sends JSON Schema in parametersJsonSchema."""
    return [{"name": name, "description": desc,
             "parametersJsonSchema": {"type": "object", "properties": {k: {"type": "string", "description": v}
                                                                       for k, v in p.items()}, "required": list(p)[:1]}}
            for name, desc, p in tool_specs(n)]


def cli_contents() -> list[dict]:
    return [
        {"role": "user", "parts": [{"text": SETUP}]},
        {"role": "model", "parts": [{"text": "Got it. Thanks for the context!"}]},
        {"role": "user", "parts": [{"text": "which PRs are open on acme/shop?"}]},
        {"role": "model", "parts": [
            {"text": "**Listing**", "thought": True},
            {"functionCall": {"id": "call-1", "name": "mcp__github__list_pull_requests", "args": {"repo": "acme/shop"}},
             "thoughtSignature": SIG},
            {"functionCall": {"name": "mcp__github__search_code", "args": {"query": "checkout"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "call-1", "name": "mcp__github__list_pull_requests",
                                  "response": {"output": "[#12 Fix checkout]"}}},
            {"functionResponse": {"name": "mcp__github__search_code", "response": {"output": "checkout.py"}}}]},
        {"role": "model", "parts": [{"text": "One open PR: #12."}]},
        {"role": "user", "parts": [{"text": "merge #12 and post to slack"}]},
    ]


def cli_body(**over) -> str:
    body = {
        "contents": cli_contents(),
        "systemInstruction": {"role": "user", "parts": [{"text": "You are an interactive CLI agent."}]},
        "tools": [{"functionDeclarations": declarations(8)}, {"googleSearch": {}}],
        "generationConfig": {"temperature": 0, "topP": 1, "thinkingConfig": {"includeThoughts": True,
                                                                            "thinkingBudget": -1}},
    }
    body.update(over)
    return json.dumps(body, indent=1)


def answer(*parts: dict, usage: dict | None = None, rid: str = "resp-1") -> dict:
    return {
        "candidates": [{"content": {"parts": list(parts), "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage or {"promptTokenCount": 900, "candidatesTokenCount": 20, "totalTokenCount": 1000,
                                   "thoughtsTokenCount": 80,
                                   "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 900}]},
        "modelVersion": "gemini-3-pro-preview", "responseId": rid,
    }


def phantom_part(query: str = "slack post message", sig: str | None = SIG, cid: str | None = None) -> dict:
    call = {"name": P, "args": {"query": query}, **({"id": cid} if cid else {})}
    return {"functionCall": call, **({"thoughtSignature": sig} if sig else {})}


@pytest.mark.parametrize(
    "path, form",
    [("/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse", (True, True)),
     ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", (True, False)),
     ("/v1beta/models/gemini-2.5-flash:generateContent", (False, False)),
     ("/v1/models/gemini-2.5-pro:generateContent?key=abc", (False, False)),
     ("/v1alpha/models/gemini-2.5-pro%3AstreamGenerateContent?%24alt=sse", (True, True)),
     ("/v1beta/tunedModels/my-model:generateContent", (False, False)),
     ("/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
      (True, True)),
     ("/gateway/google/v1beta/models/gemini-2.5-pro:generateContent", (False, False)),
     ("/v1beta/models/gemini-2.5-pro:countTokens", None), ("/v1beta/models/gemini-2.5-pro", None)],
)
def test_detect(path, form):
    a = detect("POST", path)
    if form is None:
        assert a is None
    else:
        assert isinstance(a, GeminiAdapter) and (a.stream, a.sse) == form and a.api == "gemini"
    assert detect("GET", path) is None


def test_parse_gemini_cli_request():
    config = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["mcp__slack__post_message"]}}
    b = cli_body(toolConfig=config)
    v = G.parse(b)
    assert v.query == "merge #12 and post to slack" and v.first_user == SETUP
    assert v.used == {"mcp__github__list_pull_requests", "mcp__github__search_code"}
    assert v.forced == {"mcp__slack__post_message"} and v.stream and v.session_hint is None
    assert [t.name for t in v.tools] == [d["name"] for d in declarations(8)]  # googleSearch is not a tool of ours
    assert v.tools[0].params[0] == ("repo", "Repository owner/name") and v.tools[0].pinned is None
    assert not GeminiAdapter().parse(b).stream


def test_parse_snake_case_and_parameters():
    body = {
        "contents": [{"parts": [{"text": "hello"}]},  # no role: the user's
                     {"role": "model", "parts": [{"function_call": {"name": "a", "args": {}}}]},
                     {"role": "user", "parts": [{"function_response": {"name": "a", "response": {"x": 1}}}]}],
        "tools": [{"function_declarations": [{"name": "a", "description": "A", "parameters": {
            "type": "OBJECT", "properties": {"q": {"type": "STRING", "description": "query"}}}}]}],
        "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["a"]}},
    }
    v = G.parse(json.dumps(body))
    assert (v.query, v.used, v.forced, v.tools[0].params) == ("hello", {"a"}, {"a"}, (("q", "query"),))


@pytest.mark.parametrize(
    "b, why",
    [("[]", "not a JSON object"), ('{"tools":[]}', "no contents"), ('{"contents":[],"tools":[1]}', "not an object"),
     ('{"contents":[],"tools":[{"functionDeclarations":[{"name":"a"},{"name":"a"}]}]}', "duplicate"),
     ('{"contents":[],"tools":[{"functionDeclarations":[{"description":"x"}]}]}', "no name")],
)
def test_unsupported(b, why):
    with pytest.raises(Unsupported, match=why):
        G.parse(b)


def test_with_tools_one_entry_keeps_its_place_and_other_bytes():
    b = cli_body(tools=[{"codeExecution": {}}, {"functionDeclarations": declarations(8)}, {"urlContext": {}}])
    v = G.parse(b)
    kept = [v.tools[1].raw, v.tools[5].raw, G.phantom_tool(P, "Search.")]
    out = G.with_tools(b, kept)
    data = json.loads(out)
    assert data["tools"] == [{"codeExecution": {}},
                             {"functionDeclarations": [json.loads(r) for r in kept]}, {"urlContext": {}}]
    assert all(raw in out for raw in kept)  # byte-identical declarations
    assert out.startswith(b.split('"tools"')[0]) and out.endswith(b.split('"generationConfig"')[1])


def test_with_tools_folds_several_function_entries_into_the_first():
    decls = declarations(3)
    b = json.dumps({"contents": [], "tools": [
        {"functionDeclarations": [decls[0]]}, {"googleSearch": {}},
        {"functionDeclarations": [decls[1]], "codeExecution": {}}, {"function_declarations": [decls[2]]}]})
    v = G.parse(b)
    out = json.loads(G.with_tools(b, [v.tools[2].raw, v.tools[0].raw]))
    assert out["tools"] == [{"functionDeclarations": [decls[2], decls[0]]}, {"googleSearch": {}}, {"codeExecution": {}}]
    none = json.loads(G.with_tools(b, []))["tools"]
    assert none == [{"googleSearch": {}}, {"codeExecution": {}}]


def test_with_tools_without_a_function_entry():
    raw = G.phantom_tool(P, "s")
    assert json.loads(G.with_tools('{"contents":[],"tools":[{"googleSearch":{}}]}', [raw]))["tools"] == [
        {"googleSearch": {}}, {"functionDeclarations": [json.loads(raw)]}]
    assert json.loads(G.with_tools('{"contents":[]}', [raw]))["tools"] == [{"functionDeclarations": [json.loads(raw)]}]


def test_phantom_tool_is_a_valid_declaration():
    decl = types.FunctionDeclaration.model_validate(json.loads(G.phantom_tool(P, "Search 40 more tools.")))
    assert decl.name == P and decl.parameters.type == types.Type.OBJECT and decl.parameters.required == ["query"]


def test_calls_use_the_model_id_or_a_stable_stand_in():
    m = answer({"text": "Let me search."}, phantom_part(cid="fc-9"), {"functionCall": {"name": "b", "args": {"x": 1}}},
               {"functionCall": {"name": "b"}})
    assert G.calls(m) == [ToolCall("fc-9", P, {"query": "slack post message"}), ToolCall("b#1", "b", {"x": 1}),
                          ToolCall("b#2", "b", {})]
    assert G.calls({"promptFeedback": {"blockReason": "SAFETY"}}) == []


def test_continue_after_replays_the_model_turn_with_its_signatures():
    b = G.with_tools(cli_body(), [G.phantom_tool(P, "s")])
    m = answer({"text": "thinking", "thought": True}, {"text": "Looking."}, phantom_part(),
               phantom_part("b", None, "x1"))
    c1, c2 = G.calls(m)
    out = G.append_round(b, m, [ToolResult(c1, "found mcp__slack__post_message"), ToolResult(c2, "bad", True)],
                           ['{"name":"mcp__slack__post_message"}'])
    data = json.loads(out)
    assert out.startswith(b.split('"contents"')[0])
    assert data["contents"][-2] == m["candidates"][0]["content"]  # exactly as it came, thoughtSignature included
    assert data["contents"][-1] == {"role": "user", "parts": [
        {"functionResponse": {"name": P, "response": {"output": "found mcp__slack__post_message"}}},
        {"functionResponse": {"name": P, "id": "x1", "response": {"error": "bad"}}}]}  # id only when the call had one
    assert [d["name"] for d in data["tools"][0]["functionDeclarations"]] == [P, "mcp__slack__post_message"]


def test_strip_signs_the_next_kept_call_with_the_documented_stand_in():
    m = answer({"text": "t", "thought": True}, phantom_part(), {"functionCall": {"name": "real", "args": {}}},
               {"functionCall": {"name": "real2", "args": {}}})
    out = G.strip(m, [P])
    parts = out["candidates"][0]["content"]["parts"]
    assert parts == [{"text": "t", "thought": True},
                     {"functionCall": {"name": "real", "args": {}}, "thoughtSignature": STAND_IN_SIGNATURE},
                     {"functionCall": {"name": "real2", "args": {}}}]
    assert out["candidates"][0]["finishReason"] == "STOP" and P in json.dumps(m)  # input untouched
    assert assemble(gemini_chunks(G.encode_stream(out))) == out  # the client's SDK reads the stand-in
    only = G.strip(answer({"text": "Searching."}, phantom_part()), [P])
    assert only["candidates"][0]["content"]["parts"] == [{"text": "Searching."}]
    second = answer({"functionCall": {"name": "real", "args": {}}, "thoughtSignature": SIG2}, phantom_part(sig=None))
    assert G.strip(second, [P]) == answer({"functionCall": {"name": "real", "args": {}}, "thoughtSignature": SIG2})


def test_merge_sums_usage_by_modality():
    first = G.strip(answer({"text": "Searching."}, phantom_part(), rid="r1"), [P])
    second = answer({"functionCall": {"name": "post", "args": {}}, "thoughtSignature": SIG2}, rid="r2",
                    usage={"promptTokenCount": 1000, "candidatesTokenCount": 5, "totalTokenCount": 1005,
                           "cachedContentTokenCount": 700,
                           "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 990},
                                                   {"modality": "IMAGE", "tokenCount": 10}]})
    merged = G.merge([first, second])
    assert merged["responseId"] == "r1" and merged["candidates"][0]["content"]["parts"] == [
        {"text": "Searching."}, {"functionCall": {"name": "post", "args": {}}, "thoughtSignature": SIG2}]
    assert merged["usageMetadata"] == {
        "promptTokenCount": 1900, "candidatesTokenCount": 25, "totalTokenCount": 2005, "thoughtsTokenCount": 80,
        "cachedContentTokenCount": 700,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 1890}, {"modality": "IMAGE", "tokenCount": 10}]}
    types.GenerateContentResponse.model_validate(merged)


def loop_run(adapter: GeminiAdapter) -> dict:
    slack = Tool("mcp__slack__post_message", json.dumps(declarations(6)[-1]))
    loop = Driver(PhantomLoop(adapter, ClassicMode(adapter, P), [P]), lambda c: Found(ToolResult(c, "loaded"), [slack]))
    body = G.with_tools(cli_body(), [G.phantom_tool(P, "Search.")])
    act = loop.start(body, answer({"text": "thought", "thought": True}, phantom_part()))
    assert isinstance(act, Send)
    assert [d["name"] for d in json.loads(act.body)["tools"][0]["functionDeclarations"]] == [P, slack.name]
    real = {"functionCall": {"name": slack.name, "args": {"channel": "C1"}}, "thoughtSignature": SIG2}
    done = loop.receive(answer(real, rid="resp-2"))
    assert isinstance(done, Finish) and done.reason == "done" and P not in json.dumps(done.message)
    return done.message


def test_sse_stream_read_back_by_google_genai():
    message = loop_run(G)
    encoded = G.encode_stream(message)
    assert encoded.startswith(b"data: ")
    assert assemble(gemini_chunks(encoded, chunk=11)) == message
    decoder = G.decoder()
    decoder.feed(encoded)
    decoder.feed(b"")
    assert decoder.done and decoder.message() == message


def test_json_array_stream_when_the_client_asked_without_alt_sse():
    adapter = detect("POST", "/v1beta/models/gemini-3-pro-preview:streamGenerateContent")
    message = loop_run(adapter)
    encoded = adapter.encode_stream(message)
    assert isinstance(json.loads(encoded), list)
    decoder = adapter.decoder()
    decoder.feed(encoded)
    decoder.feed(b"")
    assert decoder.sse is False and decoder.message() == message


def test_adapter_does_not_mutate_inputs():
    m = answer({"text": "a"}, phantom_part())
    before = copy.deepcopy(m)
    G.strip(m, [P])
    G.merge([m, m])
    G.append_round(cli_body(), m, [ToolResult(G.calls(m)[0], "x")], [])
    assert m == before


# --- the client's answers to a restored step (``with_hidden_results``) ----------------------------------


def _content(role, *parts):
    return json.dumps({"role": role, "parts": list(parts)})


def _fc(fn, **args):
    return {"functionCall": {"name": fn, "args": args}, "thoughtSignature": "sig"}


def _fr(name, output):
    return {"functionResponse": {"name": name, "response": {"output": output}}}


def test_answers_take_the_names_of_the_calls_as_made():
    """A kept tool the model called through the dispatcher was shown (and answered) as itself."""
    from tooldisco.apis.gemini.adapter import GeminiAdapter

    made = [_content("model", _fc("gateway_call_tool", name="read_file", arguments={"path": "a"}))]
    client = [_content("user", _fr("read_file", "hello"))]
    (out,) = GeminiAdapter().with_hidden_results(made, [], client)
    assert json.loads(out)["parts"] == [_fr("gateway_call_tool", "hello")]
    same = [_content("user", _fr("gateway_call_tool", "hello"))]
    assert GeminiAdapter().with_hidden_results(made, [], same) == same  # nothing to change: the client's bytes


def test_hidden_answers_go_where_their_calls_are():
    from tooldisco.apis.gemini.adapter import GeminiAdapter

    made = [_content("model", _fc("read_file", path="a"), _fc("gateway_search_tools", query="q"))]
    hidden = [_content("user", _fr("gateway_search_tools", "found"))]
    client = [_content("user", _fr("read_file", "hello"), {"text": "and a note"})]
    (out,) = GeminiAdapter().with_hidden_results(made, hidden, client)
    assert json.loads(out)["parts"] == [_fr("read_file", "hello"), _fr("gateway_search_tools", "found"),
                                        {"text": "and a note"}]
    assert GeminiAdapter().with_hidden_results(made, hidden, []) is None  # no answers of the client's to join
