"""Helpers ``tests/unit/apis/openai_responses/test_stitch.py`` and other unit tests share."""

from __future__ import annotations

import json
from typing import Any
import httpx2
import openai
from tests.support.adapters_responses import call, message, reasoning, response, usage_of
from tests.support.streams import openai_responses_final, strip_nones
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter
from tooldisco.apis.openai_responses.stream import encode
from tooldisco.apis.framing.sse import SSEDecoder, encode_event
from tests.support.stitch import P, Api


R = OpenAIResponsesAdapter()


SDK_ADDED = frozenset({"parsed", "parsed_arguments"})


SHELL = {"type": "function", "name": "shell", "description": "Runs a shell command.", "strict": False,
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}


PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files."}


def client_body(**over: Any) -> str:
    body = {"model": "gpt-5-codex", "input": "post the report", "stream": True, "store": False,
            "tools": [SHELL, PATCH], "tool_choice": "auto", **over}
    return json.dumps({k: v for k, v in body.items() if v is not None}, indent=1)


BODY = client_body()


ECHO = {"tools": [SHELL, PATCH], "tool_choice": "auto"}


def merged(messages: list[dict[str, Any]], body: str = BODY) -> dict[str, Any]:
    """Oracle 1: merge of the stripped rounds, with the two documented differences: round 1's
    id (what response.created carried) and the client's own echoed tools / tool_choice."""
    out = R.merge([R.strip(m, [P]) for m in messages])
    out["id"] = messages[0]["id"]
    return json.loads(R.restore_echo(json.dumps(out), body))


def echo_of(body: str) -> dict[str, Any]:
    """What every response object must echo of the client's request (the API's defaults if it sent none)."""
    sent = json.loads(body)
    return {"tools": sent.get("tools", []), "tool_choice": sent.get("tool_choice", "auto")}


def events(data: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    decoder = SSEDecoder()
    return [(e.event, json.loads(e.data)) for e in decoder.feed(data) + decoder.feed(b"")]


def check_grammar(data: bytes, echo: dict[str, Any] = ECHO) -> list[dict[str, Any]]:
    """The client stream's own rules; returns its payloads."""
    payloads = []
    for name, payload in events(data):
        assert name == payload["type"]
        payloads.append(payload)
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert [p["type"] for p in payloads].count("response.created") == 1
    assert payloads[0]["type"] == "response.created"
    added = [p["output_index"] for p in payloads if p["type"] == "response.output_item.added"]
    assert added == list(range(len(added)))
    items: dict[int, str] = {}
    for p in payloads:
        if "response" in p:
            assert {k: p["response"][k] for k in echo} == echo  # never the forwarded list
        if p["type"] == "response.output_item.added":
            items[p["output_index"]] = p["item"]["id"]
        elif "output_index" in p:  # every item event sits under its item's index
            assert items[p["output_index"]] == p.get("item_id", p.get("item", {}).get("id"))
    final = payloads[-1]
    if final["type"] == "response.completed":
        done = [p["item"] for p in payloads if p["type"] == "response.output_item.done"]
        assert final["response"]["output"] == done  # the final output is what streamed
    return payloads


def sdk_events(data: bytes) -> list[Any]:
    """What ``responses.create(stream=True)`` yields for ``data`` (raises what it raises)."""
    client = openai.OpenAI(api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(
        lambda request: httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=data))))
    return list(client.responses.create(model="m", input="hi", stream=True))


# -- upstream rounds ---------------------------------------------------------------------
def upstream(*output: dict[str, Any], rid: str, usage: dict[str, Any] | None = None, **over: Any) -> bytes:
    return encode(response(*output, rid=rid, usage=usage, **over))


ROUND_SEARCH = upstream(reasoning("rs_1"), call(P, "call_S1"), rid="resp_1")


ROUND_ANSWER = upstream(reasoning("rs_2"), message("Posted the report.", "msg_2"), rid="resp_2",
                        previous_response_id="resp_1", usage=usage_of(1200, 1000, 20, 5))


def error_event(sequence: int) -> bytes:
    error = {"type": "server_error", "code": "server_error", "message": "The server had an error", "param": None}
    return encode_event(json.dumps({"type": "error", "sequence_number": sequence, "error": error}), "error")


ROUND_SEARCH_2 = upstream(call(P, "call_S2", '{"query":"slack"}'), rid="resp_2", usage=usage_of(1100, 900, 10, 10))


ROUND_CALL = upstream(reasoning("rs_3"), call("mcp__slack__post", "call_P", '{"text":"hi"}'), rid="resp_3",
                      usage=usage_of(1300, 1200, 30, 20))


ROUND_MIXED = upstream(reasoning("rs_1"), call(P, "call_S1"), call("shell", "call_R", '{"command":"ls"}'),
                       reasoning("rs_2"), call(P, "call_S2"), message("Running ls.", "msg_1"), rid="resp_1")


ANSWER_HEAD = ROUND_ANSWER.split(b"event: response.output_text.done")[0]


def api(body: str = BODY) -> Api:
    """Responses under the contract for a client that sent ``body`` (what every response object echoes)."""

    def check(client: bytes, got: dict[str, Any]) -> None:
        check_grammar(client, echo_of(body))
        final = openai_responses_final(client, chunk=23)  # oracle 2
        assert strip_nones(final, SDK_ADDED) == strip_nones(got)

    return Api(
        adapter=R,
        rounds={"search": ROUND_SEARCH, "search_2": ROUND_SEARCH_2, "call": ROUND_CALL, "text": ROUND_ANSWER,
                "mixed": ROUND_MIXED},
        error_round=(ANSWER_HEAD + error_event(7), ROUND_ANSWER[len(ANSWER_HEAD):]),
        # The upstream echoing the client's own tools: nothing to change.
        plain=(upstream(reasoning(), message("Hello — «done»."), call("shell", "call_R", '{"command":"ls"}'),
                        rid="resp_1", **echo_of(body)),),
        hidden=(b"call_S1", b"call_S2", b"call_F1", b"call_F2"),
        expected=lambda messages: merged(messages, body),
        check=check,
        sdk=sdk_events,
        sdk_error=openai.APIError,
        stop=lambda m: m["status"],
        stops=("completed", "completed"),  # Responses has no stop reason
        ident=lambda m: m["id"],
        usage=lambda m: m["usage"],
        body=body,
    )


API = api()
