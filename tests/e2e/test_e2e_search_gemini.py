"""The phantom search loop through a real mitmdump for Gemini (google-genai), with thought
signatures, streaming and not, and an upstream failure mid-loop.

Shared set-up (configs, proxies, catalogs, clients): ``tests/e2e/wire_apis.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.genai import types as gt
from tests.e2e.harness import MitmDump
from tests.e2e.wire_apis import (  # noqa: F401 (fixtures are used by name)
    gemini_raw_chunks,
    _passthrough_proxy,
    _relevance_proxy,
    _toolsearch_proxy,
    GEMINI_URL,
    TARGET,
    aws_chain,
    config,
    fk,
    fresh,
    g_decls,
    gemini_call,
    gemini_raw_tools,
    gemini_tools,
    ok,
    passthrough,
    plan_mixed,
    plan_search_then_call,
    recording,
    relevance,
    reply_calls,
    toolsearch,
    usage_sum,
)
from tests.fakeprovider import DISPATCHER, SEARCH_TOOL, FakeProvider, fail, search

pytestmark = pytest.mark.e2e

# =================================================================================================
# tool-search: Gemini
# =================================================================================================


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_search_then_call_with_signatures(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_search_then_call(fk)
    sent: list[dict[str, Any]] = []
    client = toolsearch.genai(event_hooks=recording(sent))
    config = gt.GenerateContentConfig(tools=gemini_tools())  # type: ignore[arg-type]
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh("What's the forecast for Paris?"))])]
    parts, usage = gemini_call(client, stream, contents, config)
    fcs = [p for p in parts if p.function_call]
    assert [p.function_call.name for p in fcs] == [TARGET]  # type: ignore[union-attr]
    assert fcs[0].thought_signature  # the model's signature reached the client
    assert SEARCH_TOOL not in json.dumps([p.model_dump(mode="json", exclude_none=True) for p in parts])
    first, second = recs = ok(fk.api_requests("gemini"))
    # Call-through (Gemini's default): the model calls the found tool through the dispatcher.
    assert reply_calls(first) == [SEARCH_TOOL] and reply_calls(second) == [DISPATCHER] and second.called() == [TARGET]
    client_decls = {d["name"]: d for d in g_decls(sent[0])}
    assert [d["name"] for d in g_decls(first.json)] == ["read_file", SEARCH_TOOL, DISPATCHER]
    assert [e for e in first.json["tools"] if "functionDeclarations" not in e] == [{"googleSearch": {}}]
    assert second.json["tools"] == first.json["tools"]  # never changes
    shown = found_definition(second.json, TARGET)  # the search result carried the client's own definition
    assert shown["description"] == client_decls[TARGET]["description"]
    assert shown["parameters"] == next(v for k, v in client_decls[TARGET].items() if k.startswith("parameters"))
    # The phantom step went back signed (gemini-3 validates it: the fake answered 200).
    model_turn, answer = second.json["contents"][-2:]
    assert model_turn["role"] == "model" and model_turn["parts"][-1]["functionCall"]["name"] == SEARCH_TOOL
    assert model_turn["parts"][-1]["thoughtSignature"]
    assert answer["parts"][0]["functionResponse"]["name"] == SEARCH_TOOL
    assert usage.prompt_token_count == usage_sum(recs, "input_tokens")
    assert usage.candidates_token_count == usage_sum(recs, "output_tokens")
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    # Next turn: the signed forecast call goes back with its result; no search (its definition is in the history).
    contents += [
        gt.Content(role="model", parts=parts),
        gt.Content(
            role="user",
            parts=[gt.Part(function_response=gt.FunctionResponse(name=TARGET, response={"output": "sunny"}))],
        ),
    ]
    parts2, _ = gemini_call(client, stream, contents, config)
    assert "".join(p.text or "" for p in parts2) == 'Forecast:\nlast tool result: {"output":"sunny"}'
    third = ok(fk.api_requests("gemini"))[2]
    assert reply_calls(third) == [] and third.json["tools"] == first.json["tools"]


def found_definition(body: dict[str, Any], name: str) -> dict[str, Any]:
    """What a Gemini request's search result (call-through) shows of the tool ``name``."""
    results = [json.loads(p["functionResponse"]["response"]["output"]) for c in body["contents"] for p in c["parts"]
               if p.get("functionResponse", {}).get("name") == SEARCH_TOOL]
    return next(t for r in results for t in r.get("tools", []) if t["name"] == name)


@pytest.mark.parametrize("method", [":generateContent", ":streamGenerateContent?alt=sse", ":streamGenerateContent"])
def test_gemini_raw_bytes(toolsearch: MitmDump, fk: FakeProvider, method: str) -> None:
    """Raw HTTP, each wire form (the JSON-array stream has no SDK): the re-encoded answer is in the
    form asked for, holds nothing of the search, and its signed call round-trips next turn."""
    plan_search_then_call(fk)
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": fresh("What's the forecast for Paris?")}]}],
        "tools": gemini_raw_tools(),
    }
    headers = {"x-goog-api-key": "test-gemini-key"}
    with toolsearch.httpx_client() as http:
        r = http.post(GEMINI_URL + method, json=body, headers=headers)
        assert r.status_code == 200, r.text
        assert SEARCH_TOOL not in r.text
        chunks = gemini_raw_chunks(r, method)
        parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
        fcs = [p for p in parts if "functionCall" in p]
        assert [p["functionCall"]["name"] for p in fcs] == [TARGET] and fcs[0]["thoughtSignature"]
        recs = ok(fk.api_requests("gemini"))
        assert len(recs) == 2 and all(rec.query == recs[0].query for rec in recs)  # same framing each round
        assert chunks[-1]["usageMetadata"]["promptTokenCount"] == usage_sum(recs, "input_tokens")
        body["contents"] += [
            {"role": "model", "parts": parts},
            {"role": "user", "parts": [{"functionResponse": {"name": TARGET, "response": {"t": 1}}}]},
        ]
        r2 = http.post(GEMINI_URL + method, json=body, headers=headers)
    assert r2.status_code == 200, r2.text  # the signature survived the round trip
    text = "".join(
        p.get("text", "") for c in gemini_raw_chunks(r2, method) for p in c["candidates"][0]["content"]["parts"]
    )
    assert text == 'Forecast:\nlast tool result: {"t":1}'
    third = ok(fk.api_requests("gemini"))[2]
    assert reply_calls(third) == [] and third.json["tools"] == recs[0].json["tools"]  # call-through: never changes


@pytest.mark.parametrize("stream", [False, True])
def test_gemini_mixed_turn(toolsearch: MitmDump, fk: FakeProvider, stream: bool) -> None:
    plan_mixed(fk)
    client = toolsearch.genai()
    config = gt.GenerateContentConfig(tools=gemini_tools())  # type: ignore[arg-type]
    contents = [gt.Content(role="user", parts=[gt.Part(text=fresh("Read notes.txt and post it to Slack"))])]
    parts, _ = gemini_call(client, stream, contents, config)
    fcs = [p for p in parts if p.function_call]
    assert [p.function_call.name for p in fcs] == ["read_file"] and fcs[0].thought_signature  # type: ignore[union-attr]
    assert len(fk.api_requests()) == 1
    contents += [
        gt.Content(role="model", parts=parts),
        gt.Content(
            role="user",
            parts=[gt.Part(function_response=gt.FunctionResponse(name="read_file", response={"output": "hello"}))],
        ),
    ]
    parts2, _ = gemini_call(client, stream, contents, config)  # gemini-3: the kept call's signature is checked
    assert "last tool result" in "".join(p.text or "" for p in parts2)
    first, nxt = ok(fk.api_requests())
    assert nxt.json["tools"] == first.json["tools"]  # call-through: never changes (the model searches again)


# An upstream failure in the middle of the loop.
def test_gemini_upstream_500_mid_loop(toolsearch: MitmDump, fk: FakeProvider) -> None:
    fk.set_script([search("forecast", times=1), fail(500, "overloaded", nth=2)])
    body = {"contents": [{"role": "user", "parts": [{"text": fresh("forecast?")}]}], "tools": gemini_raw_tools()}
    with toolsearch.httpx_client() as http:  # a hang would be the test's timeout, not a slow pass
        r = http.post(GEMINI_URL + ":streamGenerateContent?alt=sse", json=body, headers={"x-goog-api-key": "k"})
    # The stream started live; the upstream's own error ends it in-stream, as Gemini sends one.
    assert r.status_code == 200 and SEARCH_TOOL not in r.text
    last = json.loads(r.text.strip().splitlines()[-1].removeprefix("data:"))
    assert last["error"]["status"] == "INTERNAL" and last["error"]["code"] == 500
    assert [rec.status for rec in fk.api_requests()] == [200, 500]
