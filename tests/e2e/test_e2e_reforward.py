"""The proxy's own re-forwards when they go wrong, through a real mitmdump with the real SDKs.

1. A re-forward whose body breaks off reaches the client as the API's own retryable 5xx (a
   stream: its in-stream error), never a 200 whose JSON does not parse; with retries on, the
   SDK retries and the turn succeeds.
2. A client that leaves while a re-forward is held cancels it: the upstream sees its
   connection closed long before it would have answered.
3. A re-forward the upstream read and then dropped unanswered is never sent again (it may be
   generating: a second send is a second bill); the client gets the API's retryable error.
4. A model that searches every round: the last re-forward goes without the search tool, and
   the client gets a turn with content.
5. A 400 to the rewritten request: one that names what the rewrite changed (the tools) gets
   the client's own request sent once instead; any other (an unsupported ``max_tokens``)
   reaches the upstream once and the client as the upstream sent it, byte for byte.
"""

from __future__ import annotations

import json
import uuid
from functools import partial

import anthropic
import botocore.exceptions
import httpx
import openai
import pytest
from google.genai import errors as genai_errors
from google.genai import types as gt

from tests.e2e.harness import TEST_KEYS, addon_config
from tests.e2e.wire_apis import GEMINI, MODEL_ID, converse_tools, gemini_tools
from tests.e2e.wire_apis import aws_chain  # noqa: F401 (a fixture: the proxy's AWS chain)
from tests.fakeprovider import SEARCH_TOOL, reply, search
from tests.fakeprovider.model import ApiError
from tests.fakeprovider.providers.openai_chat import openai_error
from tests.fakeprovider.script import Rule, fail
from tests.support.catalog import anthropic_tools, openai_tools

pytestmark = pytest.mark.e2e

MAX_LOOPS = 2
HELD = 60.0  # how long the fake holds a re-forward: far past every bound below


@pytest.fixture(scope="module")
def tool_discovery_config():
    return partial(addon_config, strategy="tool-search", max_search_results=3, max_phantom_loops=MAX_LOOPS,
                   search={"backend": "regex"})


def fresh(text: str) -> str:
    return f"{text} [{uuid.uuid4().hex[:8]}]"


def ask_anthropic(client: anthropic.Anthropic, **kw):
    return client.messages.create(model="claude-x", max_tokens=256, tools=anthropic_tools(40),
                                  messages=[{"role": "user", "content": fresh("What's the forecast for Paris?")}], **kw)


def ask_openai(client: openai.OpenAI):
    return client.chat.completions.create(model="gpt-x", tools=openai_tools(40),
                                          messages=[{"role": "user", "content": fresh("What's the forecast for Paris?")}])


def offered(rec) -> list[str]:
    tools = rec.json.get("tools") or []
    return [t.get("name") or t.get("function", {}).get("name") for t in tools]


def cut_reforward(fake) -> None:
    """Round one searches; the first re-forward's answer breaks off halfway; then the model answers."""
    fake.set_script([search("weather forecast"), Rule(text="It will be sunny in Paris all week.", fault="cut", times=1),
                     reply("It will be sunny.")])


# --- 1. a body that breaks off ---------------------------------------------------------------------


def test_anthropic_cut_reforward_is_a_5xx_the_sdk_raises_not_a_json_error(mitm, fake):
    cut_reforward(fake)
    with pytest.raises(anthropic.InternalServerError) as caught:
        ask_anthropic(mitm.anthropic())
    assert caught.value.status_code == 502
    error = caught.value.body
    assert error["type"] == "error" and error["error"]["type"] == "api_error" and "broke off" in error["error"]["message"]
    assert [r.error for r in fake.api_requests()][1] == "fault: body cut"


def test_anthropic_cut_reforward_is_retried_by_the_sdk(mitm, fake):
    cut_reforward(fake)
    answer = ask_anthropic(mitm.anthropic(max_retries=2))
    assert [b.text for b in answer.content if b.type == "text"] == ["It will be sunny."]
    assert len(fake.api_requests()) == 4  # search, cut; the SDK's retry: search, answer


def test_openai_cut_reforward_is_a_5xx_in_openais_format(mitm, fake):
    cut_reforward(fake)
    with pytest.raises(openai.InternalServerError) as caught:
        ask_openai(mitm.openai())
    assert caught.value.status_code == 502
    assert caught.value.body["type"] == "server_error" and "broke off" in caught.value.body["message"]


def test_anthropic_stream_cut_reforward_ends_with_the_in_stream_error(mitm, fake):
    cut_reforward(fake)
    with pytest.raises(anthropic.APIStatusError, match="broke off"):
        with mitm.anthropic().messages.stream(
            model="claude-x", max_tokens=256, tools=anthropic_tools(40),
            messages=[{"role": "user", "content": fresh("What's the forecast for Paris?")}]) as stream:
            for _ in stream:
                pass


@pytest.fixture
def aws_proxy(mitm_factory, aws_chain):
    """A private proxy with the fake's AWS credentials in its chain: it re-signs Bedrock bodies."""
    with aws_chain():
        return mitm_factory()


def test_gemini_cut_reforward_is_a_5xx_in_googles_format(aws_proxy, fake):
    cut_reforward(fake)
    client = aws_proxy.genai()  # held: a collected client closes its connections
    with pytest.raises(genai_errors.ServerError) as caught:
        client.models.generate_content(
            model=GEMINI, contents=fresh("What's the forecast for Paris?"),
            config=gt.GenerateContentConfig(tools=gemini_tools()))
    assert caught.value.code == 502 and caught.value.status == "INTERNAL" and "broke off" in caught.value.message


def test_bedrock_cut_reforward_is_a_5xx_botocore_names(aws_proxy, fake):
    cut_reforward(fake)
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        aws_proxy.bedrock().converse(modelId=MODEL_ID, toolConfig=converse_tools(), messages=[
            {"role": "user", "content": [{"text": fresh("What's the forecast for Paris?")}]}])
    error = caught.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 502
    assert error["Error"]["Code"] == "InternalServerException" and "broke off" in error["Error"]["Message"]


# --- 2. a client that leaves -------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_cancels_the_held_reforward(mitm, fake, stream):
    fake.set_script([search("weather forecast"), Rule(text="Too late.", hold=HELD)])
    body = {"model": "claude-x", "max_tokens": 256, "stream": stream, "tools": anthropic_tools(40),
            "messages": [{"role": "user", "content": fresh("What's the forecast for Paris?")}]}
    with mitm.httpx_client(timeout=httpx.Timeout(3.0, connect=30.0)) as client:  # gives up on the held answer
        with pytest.raises(httpx.ReadTimeout):
            with client.stream("POST", "https://api.anthropic.com/v1/messages", json=body,
                               headers={"x-api-key": TEST_KEYS["ANTHROPIC_API_KEY"]}) as r:
                for _ in r.iter_bytes():
                    pass
    # The held re-forward ends when the proxy closes it, or only after HELD seconds.
    first, held = fake.wait_for_requests(2, timeout=HELD / 3)[:2]
    assert first.reply["calls"][0]["name"] == SEARCH_TOOL
    assert held.client_gone, held.error


# --- 3. a request the upstream read is never sent twice -------------------------------------------


def test_a_reforward_dropped_unanswered_is_sent_once_and_the_client_gets_a_5xx(mitm, fake):
    fake.set_script([search("weather forecast"), Rule(text="Never sent.", hold=1.0, fault="close", times=1),
                     reply("A second generation.")])
    with pytest.raises(anthropic.InternalServerError) as caught:
        ask_anthropic(mitm.anthropic())
    assert caught.value.status_code == 502 and caught.value.body["error"]["type"] == "api_error"
    requests = fake.api_requests()
    assert [r.error for r in requests] == [None, "fault: closed unanswered"]  # the dropped POST arrived once


# --- 4. a model that only searches -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_that_always_searches_answers_without_the_search_tool_at_the_limit(mitm, fake, stream):
    fake.set_script({"rules": [{"calls": [{"name": SEARCH_TOOL, "args": {"query": "weather"}}], "no_result_for": []}],
                     "default": {"text": "Here is what I found."}})
    client = mitm.anthropic()
    if stream:
        with client.messages.stream(model="claude-x", max_tokens=256, tools=anthropic_tools(40),
                                    messages=[{"role": "user", "content": fresh("Forecast for Paris?")}]) as s:
            answer = s.get_final_message()
    else:
        answer = ask_anthropic(client)
    requests = fake.api_requests()
    assert len(requests) == 1 + MAX_LOOPS
    assert all(SEARCH_TOOL in offered(r) for r in requests[:-1])
    assert SEARCH_TOOL not in offered(requests[-1])
    assert [b.text for b in answer.content if b.type == "text"] == ["Here is what I found."]
    assert answer.stop_reason == "end_turn"
    assert json.dumps(answer.model_dump()).count(SEARCH_TOOL) == 0


# --- 5. a 400 to the rewritten request ------------------------------------------------------------

CHAT_URL = "https://api.openai.com/v1/chat/completions"
MAX_TOKENS = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
TOOL_NAME = "Invalid 'tools[3].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."


def chat_request(stream: bool) -> bytes:
    """The client's own bytes (what a resend must carry unchanged)."""
    return json.dumps({"model": "gpt-x", "max_tokens": 256, "stream": stream, "tools": openai_tools(40),
                       "messages": [{"role": "user", "content": fresh("What's the forecast for Paris?")}]}).encode()


def post_chat(mitm, raw: bytes) -> httpx.Response:
    with mitm.httpx_client() as client:
        return client.post(CHAT_URL, content=raw, headers={
            "authorization": f"Bearer {TEST_KEYS['OPENAI_API_KEY']}", "content-type": "application/json"})


def chat_text(content: bytes, stream: bool) -> str:
    if not stream:
        return json.loads(content)["choices"][0]["message"]["content"]
    events = [json.loads(line[6:]) for line in content.decode().splitlines()
              if line.startswith("data: {")]
    return "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])


def chat_records(mitm, where) -> int:
    return sum(1 for r in mitm.records(at_least=0) if r.get("provider") == "openai_chat" and where(r))


@pytest.mark.parametrize("stream", [False, True])
def test_a_400_naming_nothing_the_rewrite_changed_reaches_the_upstream_once_and_the_client_as_sent(mitm, fake, stream):
    passed = lambda r: r.get("outcome") == "upstream_400" and r.get("fallback_reason") is None  # noqa: E731
    before = chat_records(mitm, passed)
    fake.set_script([fail(400, MAX_TOKENS, param="max_tokens", nth=1), reply("Never reached.")])
    raw = chat_request(stream)
    response = post_chat(mitm, raw)
    requests = fake.api_requests()
    assert len(requests) == 1 and requests[0].status == 400  # the rewritten request, alone
    assert requests[0].body != raw and SEARCH_TOOL.encode() in requests[0].body
    # The fake's own bytes (``openai_error`` is what it sent), and its headers.
    assert response.status_code == 400
    assert response.content == openai_error(ApiError(400, MAX_TOKENS, param="max_tokens")).encode()
    assert response.headers["content-type"] == "application/json" and response.headers["x-request-id"].startswith("req_")
    mitm.records(where=lambda r: r.get("provider") == "openai_chat" and passed(r), at_least=before + 1)


@pytest.mark.parametrize("stream", [False, True])
def test_a_400_naming_the_tools_resends_the_clients_own_request_once(mitm, fake, stream):
    resent = lambda r: r.get("fallback_reason") == "rewrite_400_original_sent"  # noqa: E731
    before = chat_records(mitm, resent)
    fake.set_script([fail(400, TOOL_NAME, param="tools[3].function.name", nth=1), reply("Sunny in Paris.")])
    raw = chat_request(stream)
    response = post_chat(mitm, raw)
    requests = fake.api_requests()
    assert [r.status for r in requests] == [400, 200]
    assert requests[0].body != raw and requests[1].body == raw  # then the client's own bytes, once
    assert response.status_code == 200 and chat_text(response.content, stream) == "Sunny in Paris."
    mitm.records(where=lambda r: r.get("provider") == "openai_chat" and resent(r), at_least=before + 1)
