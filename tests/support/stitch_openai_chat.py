"""Helpers ``tests/unit/apis/openai_chat/test_stitch.py`` and other unit tests share."""

from __future__ import annotations

import json
from typing import Any
import openai
from tests.support.streams import fixture, mock_http, openai_chat_final, strip_nones
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.apis.openai_chat.stream import encode
from tooldisco.apis.framing.sse import SSEDecoder
from tests.fakeprovider.model import Conversation, Reply, ToolCall, Usage
from tests.fakeprovider.providers.openai_chat import OpenAIChat
from tests.support.stitch import P, Api


A = OpenAIChatAdapter()


SDK_ADDED = frozenset({"parsed", "parsed_arguments"})


BODY = '{"model":"gpt-4.1","messages":[],"stream":true}'


# -- upstream rounds ---------------------------------------------------------------------
def call(name: str, cid: str, arguments: str = '{"query":"weather"}') -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def usage_of(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0}}


def completion(text: str | None, *calls: dict[str, Any], cid: str, created: int,
               usage: dict[str, Any] | None, **message: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None, **message}
    if calls:
        msg["tool_calls"] = list(calls)
    return {"id": cid, "object": "chat.completion", "created": created, "model": "gpt-4.1-2025-04-14",
            "choices": [{"index": 0, "message": msg, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage, "service_tier": "default", "system_fingerprint": "fp_b3f1157249"}


def upstream(text: str | None, *calls: dict[str, Any], cid: str, created: int = 1763800000,
             usage: dict[str, Any] | None = None, include_usage: bool = True, **message: Any) -> bytes:
    return encode(completion(text, *calls, cid=cid, created=created, usage=usage, **message), include_usage)


ROUND_SEARCH = upstream("Let me look for a weather tool.", call(P, "call_S1"), cid="chatcmpl-1",
                        usage=usage_of(100, 20, 0, 5))


ROUND_ANSWER = upstream("It is 21 °C in Zürich — sunny.", cid="chatcmpl-2", created=1763800009,
                        usage=usage_of(300, 40, 100, 7))


ROUND_SEARCH_2 = upstream("Still looking.", call(P, "call_S2", '{"query":"forecast"}'), cid="chatcmpl-2",
                          usage=usage_of(200, 30, 50, 1))


ROUND_CALL = upstream(None, call("get_weather", "call_R", '{"city":"Zürich"}'), cid="chatcmpl-3",
                      usage=usage_of(300, 40, 60, 2))


ROUND_MIXED = upstream("Two things.", call("get_weather", "call_A", '{"city":"Oslo"}'), call(P, "call_S1"),
                       call("get_time", "call_B", '{"tz":"CET"}'), cid="chatcmpl-1", usage=usage_of(10, 5))


def fake_provider_round(text: str, calls: list[ToolCall], tokens: int) -> bytes:
    """A round as the fake provider streams it (word-split text, arguments cut anywhere)."""
    body = {"model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True}}
    conv = Conversation(api="openai-chat", model="gpt-4.1", stream=True, tools=["get_weather", P], calls=[],
                        results=[], last_user_text="hi", body=body)
    rendered = OpenAIChat().render(Reply(text, calls, Usage(tokens, 10 + tokens, tokens // 2)), conv)
    return b"".join(rendered.events)


def chunk_event(*choices: dict[str, Any], cid: str = "chatcmpl-h", **extra: Any) -> bytes:
    body = {"id": cid, "object": "chat.completion.chunk", "created": 7, "model": "gpt-4.1-2025-04-14",
            "service_tier": "default", "choices": list(choices), **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def choice(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}


def head(index: int, cid: str, name: str, arguments: str = "") -> dict[str, Any]:
    return {"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def fragment(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}


DONE = b"data: [DONE]\n\n"


ERROR = b'data: {"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}\n\n'


def merged(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Oracle 1: merge of the stripped rounds, with round 1's ``created`` (one completion)."""
    out = A.merge([A.strip(m, [P]) for m in messages])
    out["created"] = messages[0]["created"]
    return out


def payloads(data: bytes) -> list[Any]:
    decoder = SSEDecoder()
    return [json.loads(e.data) if e.data != "[DONE]" else "[DONE]" for e in decoder.feed(data) + decoder.feed(b"")]


def check_grammar(data: bytes) -> list[dict[str, Any]]:
    """The client stream's own rules; returns its chunks (without [DONE])."""
    *chunks, done = payloads(data)
    assert done == "[DONE]"
    real = [c for c in chunks if c.get("object") == "chat.completion.chunk"]
    assert len({(c["id"], c["created"]) for c in real}) == 1  # one completion
    choices = [ch for c in real for ch in c["choices"]]
    assert [ch["delta"].get("role") for ch in choices if "role" in ch["delta"]] == ["assistant"]
    heads = [tc for ch in choices for tc in ch["delta"].get("tool_calls", []) if "id" in tc]
    assert [tc["index"] for tc in heads] == list(range(len(heads)))
    named = set()
    for ch in choices:
        for tc in ch["delta"].get("tool_calls", []):
            if "id" in tc:
                named.add(tc["index"])
            assert tc["index"] in named  # every fragment continues a call the client saw start
    finishes = [i for i, ch in enumerate(choices) if ch["finish_reason"] is not None]
    assert finishes == [len(choices) - 1]
    usages = [c["usage"] for c in real if c.get("usage") is not None]
    assert len(usages) <= 1 and all(c["choices"] == [] for c in real if c.get("usage") is not None)
    return chunks


def check_hidden(data: bytes, *call_ids: str) -> None:
    assert P.encode() not in data
    for cid in call_ids:
        assert cid.encode() not in data


def sdk_view(value: dict[str, Any]) -> dict[str, Any]:
    view = strip_nones(value, SDK_ADDED)
    for c in view["choices"]:
        for tc in c["message"].get("tool_calls", []):
            tc.pop("index", None)
    return view


def sdk_stream_final(data: bytes) -> dict[str, Any]:
    """What ``chat.completions.stream(...).get_final_completion()`` makes of ``data``."""
    client = openai.OpenAI(api_key="x", base_url="http://test/v1", http_client=mock_http(data, "text/event-stream", 11))
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream:
        for _ in stream:
            pass
        return stream.get_final_completion().to_dict()


def sdk_chunks(data: bytes) -> list[Any]:
    """What ``chat.completions.create(stream=True)`` yields for ``data`` (raises what it raises)."""
    client = openai.OpenAI(api_key="x", base_url="http://test/v1", http_client=mock_http(data, "text/event-stream", 5))
    return list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))


def check(client: bytes, got: dict[str, Any]) -> None:
    check_grammar(client)
    final = sdk_view(openai_chat_final(client, chunk=23))  # oracle 2, create(stream=True) + the SDK's state
    assert final == strip_nones(got)
    assert sdk_view(sdk_stream_final(client)) == final


ANSWER_HEAD = b"\n\n".join(ROUND_ANSWER.split(b"\n\n")[:2]) + b"\n\n"  # role, then the content chunk


API = Api(
    adapter=A,
    rounds={"search": ROUND_SEARCH, "search_2": ROUND_SEARCH_2, "call": ROUND_CALL, "text": ROUND_ANSWER,
            "mixed": ROUND_MIXED},
    error_round=(ANSWER_HEAD + ERROR, DONE),
    plain=(
        fixture("openai_chat_tools_usage.sse"),
        fixture("openai_chat_refusal_no_usage.sse"),
        fixture("openai_chat_tools_usage.sse").replace(b"\n", b"\r\n"),
        fake_provider_round("Sunny in Zürich.", [ToolCall("call_W", "get_weather", {"city": "Zürich"})], 50),
    ),
    hidden=(b"call_S1", b"call_S2", b"call_F1", b"call_F2"),
    expected=merged,
    check=check,
    sdk=sdk_chunks,
    sdk_error=openai.APIError,
    stop=lambda m: m["choices"][0]["finish_reason"],
    stops=("tool_calls", "stop"),
    ident=lambda m: (m["id"], m["created"]),
    usage=lambda m: m.get("usage"),
    body=BODY,
)
