"""The fake provider's prefix-cache model, read back through the official SDKs' parsers.

The fake runs in-process on 127.0.0.1; each SDK talks to it directly. What is pinned: the
cache is off unless asked for; a request reads the longest prefix of segments an earlier
request of the same key sent, in each API's prompt order; deferred tools are not in the
prompt and a ``tool_reference`` loads one where it stands; markers are not content; usage
says it the way each API does (Anthropic and Bedrock apart from input, OpenAI and Gemini
inside it). Also: the MCP catalog the benchmarks use is valid for every API.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import boto3
import botocore.config
import httpx
import openai
import pytest
from google import genai
from google.genai import types as gt

from tests.fakeprovider import FakeProvider, reply
from tests.fakeprovider.providers.bedrock import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY
from tests.support.mcp_catalog import (
    SERVERS,
    anthropic_tools,
    chat_tools,
    converse_tools,
    gemini_tools,
    mcp_catalog,
    responses_tools,
)

TOOLS = mcp_catalog(servers=2)  # 50 tools
SYSTEM = "You are a careful coding agent. " * 20
MODEL = "claude-sonnet-4-5"


def tokens(value: Any) -> int:
    """The fake's estimate over a segment's compact JSON (the documented token count)."""
    return max(1, len(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) // 4)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    with FakeProvider(stream_delay=0) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeProvider) -> FakeProvider:
    server.reset()
    server.set_script([reply("Noted: the build is green and the release can go out today.")])
    server.prompt_cache = True
    return server


def claude(fake: FakeProvider, key: str = "sk-ant-a") -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=fake.url, max_retries=0)


def ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
        model: str = MODEL) -> Any:
    return client.messages.create(model=model, max_tokens=512, system=SYSTEM, tools=tools,  # type: ignore[arg-type]
                                  messages=messages)  # type: ignore[arg-type]


def turns(n: int) -> list[dict[str, Any]]:
    """A plain conversation of ``n`` user turns (assistant answers between them)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        if out:
            out.append({"role": "assistant", "content": [{"type": "text", "text": f"Answer {i} with some detail."}]})
        text = f"Question {i}: what changed in module {i}?"
        out.append({"role": "user", "content": [{"type": "text", "text": text}]})
    return out


# --- off by default ---------------------------------------------------------------------------------


def test_off_by_default_usage_is_the_plain_estimate(server: FakeProvider) -> None:
    server.reset()
    assert server.prompt_cache is False
    client = claude(server)
    for _ in range(2):
        usage = ask(client, turns(1), anthropic_tools(TOOLS)).usage
        assert usage.cache_read_input_tokens == 0 and usage.cache_creation_input_tokens == 0
    rec = server.api_requests()[-1]
    assert usage.input_tokens == max(1, len(rec.text) // 4) and rec.prompt is None


def test_settings_switch_it_and_a_reset_turns_it_off(server: FakeProvider) -> None:
    server.reset()
    with httpx.Client(base_url=server.url, trust_env=False) as http:
        assert http.post("/_settings", json={"prompt_cache": True}).json()["prompt_cache"] is True
        assert server.prompt_cache is True
        bad = http.post("/_settings", json={"prompt_cache": "yes"})
        assert bad.status_code == 400 and server.prompt_cache is True
        ask(claude(server), turns(1), anthropic_tools(TOOLS))
        assert http.post("/_reset").status_code == 200
    assert server.prompt_cache is False
    server.prompt_cache = True  # the cache was emptied too: the same prompt is written again
    usage = ask(claude(server), turns(1), anthropic_tools(TOOLS)).usage
    assert usage.cache_read_input_tokens == 0 and usage.cache_creation_input_tokens > 0


# --- Anthropic ----------------------------------------------------------------------------------------


def test_anthropic_reads_the_previous_prompt_and_writes_the_rest(fake: FakeProvider) -> None:
    client, tools = claude(fake), anthropic_tools(TOOLS)
    first = ask(client, turns(1), tools).usage
    second = ask(client, turns(2), tools).usage
    expected = sum(map(tokens, tools)) + tokens(SYSTEM) + tokens(turns(1)[0])
    assert (first.input_tokens, first.cache_read_input_tokens, first.cache_creation_input_tokens) == (0, 0, expected)
    assert second.input_tokens == 0 and second.cache_read_input_tokens == expected
    assert second.cache_creation_input_tokens == sum(map(tokens, turns(2)[1:]))
    assert fake.api_requests()[-1].prompt["first_miss"] == "message:1"  # type: ignore[index]


@pytest.mark.parametrize("changed", [0, 17, 49])
def test_anthropic_a_changed_tool_misses_from_that_tool_on(fake: FakeProvider, changed: int) -> None:
    client, tools = claude(fake), anthropic_tools(TOOLS)
    ask(client, turns(3), tools)
    edited = copy.deepcopy(tools)
    edited[changed]["description"] += " Now with pagination."
    usage = ask(client, turns(3), edited).usage
    assert usage.cache_read_input_tokens == sum(map(tokens, tools[:changed]))
    assert fake.api_requests()[-1].prompt["first_miss"] == f"tool:{tools[changed]['name']}"  # type: ignore[index]


def test_anthropic_same_prompt_is_read_whole(fake: FakeProvider) -> None:
    client, tools = claude(fake), anthropic_tools(TOOLS)
    first = ask(client, turns(2), tools).usage
    again = ask(client, turns(2), tools).usage
    assert again.cache_read_input_tokens == first.cache_creation_input_tokens and again.cache_creation_input_tokens == 0
    assert fake.api_requests()[-1].prompt["first_miss"] is None  # type: ignore[index]


def test_anthropic_deferred_tools_are_out_and_a_reference_loads_one_in_place(fake: FakeProvider) -> None:
    client = claude(fake)
    loaded, deferred = anthropic_tools(TOOLS[:10]), anthropic_tools(TOOLS[10:])
    lazy = [{**t, "defer_loading": True} for t in deferred]
    base = ask(client, turns(1), loaded).usage.cache_creation_input_tokens
    # Deferred tools, even ahead of the loaded ones, add nothing and break nothing.
    usage = ask(client, turns(1), lazy[:5] + loaded + lazy[5:]).usage
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (base, 0)
    # The model searched; the tool result references a deferred tool: it loads right there.
    history = turns(1) + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_s1", "name": "tool_search",
                                           "input": {"query": "merge request"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_s1",
                                      "content": [{"type": "tool_reference", "tool_name": deferred[3]["name"]}]}]},
    ]
    search_tool = {"name": "tool_search", "description": "Find tools.",
                   "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
    tools = lazy[:5] + loaded + [search_tool] + lazy[5:]
    ask(client, turns(1), tools)  # the search tool joins the prompt: from here on it is part of it
    usage = ask(client, history, tools).usage
    assert usage.cache_read_input_tokens == base + tokens(search_tool)
    assert usage.cache_creation_input_tokens == tokens(history[1]) + tokens(history[2]) + tokens(lazy[3])
    assert fake.api_requests()[-1].prompt["segments"] == 10 + 1 + 1 + 3 + 1  # type: ignore[index]


def test_anthropic_moving_the_cache_control_marker_is_no_change(fake: FakeProvider) -> None:
    client, tools = claude(fake), anthropic_tools(TOOLS)
    one = turns(1)
    one[0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    first = ask(client, one, tools).usage
    two = turns(2)
    two[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert ask(client, two, tools).usage.cache_read_input_tokens == first.cache_creation_input_tokens


def test_anthropic_a_message_as_a_string_is_its_text_block(fake: FakeProvider) -> None:
    """Claude Code sends a message as blocks with ``cache_control``, the next turn as a string."""
    client, tools = claude(fake), anthropic_tools(TOOLS)
    first = ask(client, turns(1), tools).usage
    as_string = [{"role": "user", "content": turns(1)[0]["content"][0]["text"]}]
    assert ask(client, as_string, tools).usage.cache_read_input_tokens == first.cache_creation_input_tokens
    edited = [{"role": "user", "content": as_string[0]["content"] + " And why?"}]
    assert fake.api_requests()[-1].prompt["first_miss"] is None  # type: ignore[index]
    ask(client, edited, tools)
    assert fake.api_requests()[-1].prompt["first_miss"] == "message:0"  # type: ignore[index]


def test_anthropic_claude_codes_attribution_block_is_not_prompt(fake: FakeProvider) -> None:
    """Its ``cch`` changes per request; the API reads the block as billing metadata."""
    client, tools = claude(fake), anthropic_tools(TOOLS)

    def system(cch: str, text: str = SYSTEM) -> list[dict[str, Any]]:
        header = f"x-anthropic-billing-header: cc_version=2.1.328.ec4; cc_entrypoint=sdk-cli; cch={cch};"
        return [{"type": "text", "text": header}, {"type": "text", "text": text}]

    def send(blocks: list[dict[str, Any]]) -> Any:
        return client.messages.create(model=MODEL, max_tokens=512, system=blocks,  # type: ignore[arg-type]
                                      tools=tools, messages=turns(1)).usage  # type: ignore[arg-type]

    first = send(system("66d81"))
    assert send(system("fd59b")).cache_read_input_tokens == first.cache_creation_input_tokens
    send(system("0aaa9", SYSTEM + " Be brief."))
    assert fake.api_requests()[-1].prompt["first_miss"] == "system"  # type: ignore[index]


@pytest.mark.parametrize("other", ["credential", "model"])
def test_anthropic_cache_is_per_credential_and_model(fake: FakeProvider, other: str) -> None:
    tools = anthropic_tools(TOOLS)
    ask(claude(fake), turns(2), tools)
    client = claude(fake, "sk-ant-b") if other == "credential" else claude(fake)
    model = "claude-opus-4-1" if other == "model" else MODEL
    assert ask(client, turns(2), tools, model).usage.cache_read_input_tokens == 0


def test_anthropic_stream_reports_the_cache_in_message_start(fake: FakeProvider) -> None:
    client, tools = claude(fake), anthropic_tools(TOOLS)
    first = ask(client, turns(1), tools).usage
    with client.messages.stream(model=MODEL, max_tokens=512, system=SYSTEM, tools=tools,  # type: ignore[arg-type]
                                messages=turns(2)) as stream:  # type: ignore[arg-type]
        events = list(stream)
    start = next(e for e in events if e.type == "message_start")
    assert start.message.usage.cache_read_input_tokens == first.cache_creation_input_tokens


# --- OpenAI -------------------------------------------------------------------------------------------


def gpt(fake: FakeProvider, key: str = "sk-a") -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{fake.url}/v1", max_retries=0)


def chat_messages(n: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}] + [
        {"role": m["role"], "content": m["content"][0]["text"]} for m in turns(n)
    ]


def chat(client: openai.OpenAI, messages: list[dict[str, Any]], tools: list[dict[str, Any]], **kw: Any) -> Any:
    return client.chat.completions.create(model="gpt-5", messages=messages, tools=tools, **kw)  # type: ignore[arg-type]


def test_chat_counts_cached_tokens_inside_prompt_tokens(fake: FakeProvider) -> None:
    client, tools = gpt(fake), chat_tools(TOOLS)
    first, second = chat(client, chat_messages(1), tools), chat(client, chat_messages(2), tools)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens
    assert second.usage.prompt_tokens == first.usage.prompt_tokens + sum(map(tokens, chat_messages(2)[2:]))


def test_chat_instructions_come_before_the_tools(fake: FakeProvider) -> None:
    client, tools = gpt(fake), chat_tools(TOOLS)
    chat(client, chat_messages(1), tools)
    edited = copy.deepcopy(tools)
    edited[5]["function"]["description"] = "Changed."
    res = chat(client, chat_messages(1), edited)
    expected = tokens(chat_messages(1)[0]) + sum(map(tokens, tools[:5]))
    assert res.usage.prompt_tokens_details.cached_tokens == expected


def test_chat_prompt_cache_key_is_part_of_the_key(fake: FakeProvider) -> None:
    client, tools = gpt(fake), chat_tools(TOOLS)
    chat(client, chat_messages(1), tools, prompt_cache_key="session-1")
    other = chat(client, chat_messages(1), tools, prompt_cache_key="session-2")
    same = chat(client, chat_messages(1), tools, prompt_cache_key="session-1")
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    assert same.usage.prompt_tokens_details.cached_tokens == same.usage.prompt_tokens


def test_responses_cached_tokens_and_deferred_functions(fake: FakeProvider) -> None:
    client, tools = gpt(fake), responses_tools(TOOLS)
    kw: dict[str, Any] = {"model": "gpt-5.4", "instructions": SYSTEM, "store": False}
    history: list[dict[str, Any]] = [{"role": "user", "content": "Which pipelines failed?"}]
    first = client.responses.create(**kw, input=history, tools=tools)
    history += [o.model_dump(exclude_none=True) for o in first.output]
    history += [{"role": "user", "content": "Retry the last one."}]
    lazy = [{**t, "defer_loading": True} for t in responses_tools(mcp_catalog(servers=4)[50:])]
    second = client.responses.create(**kw, input=history, tools=tools + [{"type": "tool_search"}] + lazy)
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens == first.usage.input_tokens - tokens(history[0])
    assert second.usage.input_tokens == (first.usage.input_tokens + tokens({"type": "tool_search"})
                                         + sum(map(tokens, history[1:])))


# --- Gemini and Bedrock -------------------------------------------------------------------------------


def test_gemini_reports_cached_content_token_count(fake: FakeProvider) -> None:
    client = genai.Client(api_key="g-key", http_options=gt.HttpOptions(base_url=fake.url))
    config = gt.GenerateContentConfig(system_instruction=SYSTEM, tools=gemini_tools(TOOLS))  # type: ignore[arg-type]
    one = [gt.Content(role="user", parts=[gt.Part(text="Which pipelines failed?")])]
    first = client.models.generate_content(model="gemini-2.5-pro", contents=one, config=config)
    answer: Any = first.candidates[0].content  # type: ignore[index]
    two = one + [answer, gt.Content(role="user", parts=[gt.Part(text="Retry it.")])]
    second = client.models.generate_content(model="gemini-2.5-pro", contents=two, config=config)
    before, after = first.usage_metadata, second.usage_metadata
    assert before is not None and after is not None and before.cached_content_token_count is None
    assert after.cached_content_token_count == before.prompt_token_count
    assert (after.prompt_token_count or 0) > (before.prompt_token_count or 0)


def test_bedrock_converse_reports_reads_and_writes_apart_per_access_key(fake: FakeProvider) -> None:
    config = botocore.config.Config(retries={"total_max_attempts": 1})
    client = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=fake.url, config=config,
                          aws_access_key_id=TEST_ACCESS_KEY_ID, aws_secret_access_key=TEST_SECRET_ACCESS_KEY)
    tool_config = converse_tools(TOOLS)
    tool_config["tools"].append({"cachePoint": {"type": "default"}})
    kw: dict[str, Any] = {"modelId": "anthropic.claude-sonnet-4-5-v1:0", "toolConfig": tool_config,
                          "system": [{"text": SYSTEM}]}
    one = [{"role": "user", "content": [{"text": "Which pipelines failed?"}]}]
    first = client.converse(messages=one, **kw)
    two = one + [first["output"]["message"], {"role": "user", "content": [{"text": "Retry it."}]}]
    second = client.converse(messages=two, **kw)  # signed again: another signature, the same access key
    assert first["usage"]["inputTokens"] == 0 and first["usage"]["cacheReadInputTokens"] == 0
    assert second["usage"]["cacheReadInputTokens"] == first["usage"]["cacheWriteInputTokens"]
    assert second["usage"]["cacheWriteInputTokens"] == sum(map(tokens, two[1:]))


# --- the catalog ------------------------------------------------------------------------------------


def test_mcp_catalog_is_large_unique_valid_and_deterministic() -> None:
    tools = mcp_catalog()
    names = [t.name for t in tools]
    assert len(tools) == 25 * len(SERVERS) >= 500 and len(set(names)) == len(names)
    assert all(re.fullmatch(r"mcp__[a-z_]+__[a-z0-9_]+", n) and len(n) <= 64 for n in names)
    assert all(set(t.schema["required"]) <= set(t.schema["properties"]) for t in tools)
    assert sum(map(tokens, anthropic_tools(tools))) > 55_000  # what a few MCP servers weigh
    assert json.dumps(anthropic_tools(mcp_catalog())) == json.dumps(anthropic_tools(tools))


def test_mcp_catalog_is_accepted_by_every_api(fake: FakeProvider) -> None:
    tools = mcp_catalog()
    claude(fake).messages.create(model=MODEL, max_tokens=64, tools=anthropic_tools(tools),  # type: ignore[arg-type]
                                 messages=[{"role": "user", "content": "hi"}])
    gpt(fake).chat.completions.create(model="gpt-5", tools=chat_tools(tools),  # type: ignore[arg-type]
                                      messages=[{"role": "user", "content": "hi"}])
    gpt(fake).responses.create(model="gpt-5", tools=responses_tools(tools), input="hi")  # type: ignore[arg-type]
    gemini = genai.Client(api_key="g", http_options=gt.HttpOptions(base_url=fake.url))
    config = gt.GenerateContentConfig(tools=gemini_tools(tools))  # type: ignore[arg-type]
    gemini.models.generate_content(model="gemini-2.5-pro", contents="hi", config=config)
    assert [r.status for r in fake.api_requests()] == [200] * 4
    assert all(len(r.tool_names or []) == 500 for r in fake.api_requests())
