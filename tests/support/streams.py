"""Shared helpers for the stream codec tests (no tests here).

Why: every codec is checked the same way (any chunking gives the same result; the
official SDK reads our re-encoded stream as it reads the original), so the
chunkers and the SDK harnesses live once.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx2

FIXTURES = Path(__file__).parent / "fixtures" / "streams"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def split_at(body: bytes, *cuts: int) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def every_split(body: bytes) -> Iterator[list[bytes]]:
    """The body cut in two at every inner position (inside UTF-8 characters and CRLFs too);
    no empty piece, since ``feed(b"")`` means the end."""
    for cut in range(1, len(body)):
        yield split_at(body, cut)


def random_chunkings(body: bytes, count: int = 25, seed: int = 7) -> Iterator[list[bytes]]:
    """Random cuts, from single bytes to large pieces."""
    rng = random.Random(seed)
    yield [body[i : i + 1] for i in range(len(body))]
    for _ in range(count):
        cuts, pos = [], 0
        while pos < len(body):
            pos += rng.randint(1, rng.choice([3, 17, 200]))
            cuts.append(min(pos, len(body)))
        yield split_at(body, *cuts[:-1])


def decode(make: Callable[[], Any], chunks: Iterable[bytes]) -> tuple[Any, list[Any]]:
    """Feed ``chunks`` then the end marker; return the decoder and all its events."""
    decoder = make()
    events: list[Any] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    events += decoder.feed(b"")
    return decoder, events


def strip_nones(value: Any, drop: frozenset[str] = frozenset()) -> Any:
    """Recursively remove None values and ``drop`` keys: SDK models add both as defaults."""
    if isinstance(value, dict):
        return {k: strip_nones(v, drop) for k, v in value.items() if v is not None and k not in drop}
    if isinstance(value, list):
        return [strip_nones(v, drop) for v in value]
    return value


def mock_http(body: bytes, content_type: str, chunk: int = 0) -> httpx2.Client:
    """An httpx2 client whose every request answers 200 with ``body`` (optionally in ``chunk``-byte pieces)."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        content: Any = body
        if chunk:
            content = iter([body[i : i + chunk] for i in range(0, len(body), chunk)])
        return httpx2.Response(200, headers={"content-type": content_type}, content=content)

    return httpx2.Client(transport=httpx2.MockTransport(handler))


def anthropic_final(body: bytes, chunk: int = 0) -> dict[str, Any]:
    """What the official Anthropic SDK's ``messages.stream().get_final_message()`` makes of ``body``."""
    import anthropic

    client = anthropic.Anthropic(api_key="test", http_client=mock_http(body, "text/event-stream", chunk))
    with client.messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as stream:
        return stream.get_final_message().to_dict()


def openai_chat_final(body: bytes, chunk: int = 0) -> dict[str, Any]:
    """The OpenAI SDK's ``ChatCompletionStreamState`` fed from ``chat.completions.create(stream=True)``."""
    import openai
    from openai.lib.streaming.chat import ChatCompletionStreamState

    client = openai.OpenAI(api_key="test", http_client=mock_http(body, "text/event-stream", chunk))
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for item in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True):
        state.handle_chunk(item)
    return state.get_final_completion().to_dict()


def openai_responses_final(body: bytes, chunk: int = 0) -> dict[str, Any]:
    """What the OpenAI SDK's ``responses.stream().get_final_response()`` makes of ``body``."""
    import openai

    client = openai.OpenAI(api_key="test", http_client=mock_http(body, "text/event-stream", chunk))
    with client.responses.stream(model="m", input="hi") as stream:
        for _ in stream:
            pass
        return stream.get_final_response().to_dict()


def gemini_chunks(body: bytes, chunk: int = 0) -> list[dict[str, Any]]:
    """The chunks google-genai's ``generate_content_stream`` parses out of an ``alt=sse`` body."""
    import httpx
    from google import genai
    from google.genai import types

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params.get("alt") == "sse"
        pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] if chunk else [body]
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(pieces))

    http = httpx.Client(transport=httpx.MockTransport(handler))
    client = genai.Client(api_key="test", http_options=types.HttpOptions(httpx_client=http))
    stream = client.models.generate_content_stream(model="gemini-3-pro-preview", contents="hi")
    return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in stream]


def boto3_events(operation: str, body: bytes, chunk: int = 64) -> list[dict[str, Any]]:
    """The events boto3's ``bedrock-runtime`` client parses out of ``body`` for
    ``converse_stream`` or ``invoke_model_with_response_stream`` (no network)."""
    import boto3
    from botocore.awsrequest import AWSResponse

    class Raw:
        def stream(self, **_: Any) -> Iterator[bytes]:
            yield from (body[i : i + chunk] for i in range(0, len(body), chunk))

    def send(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 200, {"content-type": "application/vnd.amazon.eventstream"}, Raw())

    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )
    client.meta.events.register("before-send.bedrock-runtime.*", send)
    if operation == "converse_stream":
        stream = client.converse_stream(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}])["stream"]
    else:
        stream = client.invoke_model_with_response_stream(modelId="m", body=b"{}")["body"]
    return list(stream)


def anthropic_bedrock_final(body: bytes, chunk: int = 0) -> dict[str, Any]:
    """What ``AnthropicBedrock().messages.stream().get_final_message()`` makes of an
    InvokeModelWithResponseStream body."""
    import anthropic

    client = anthropic.AnthropicBedrock(
        aws_access_key="test",
        aws_secret_key="test",
        aws_region="us-east-1",
        http_client=mock_http(body, "application/vnd.amazon.eventstream", chunk),
    )
    with client.messages.stream(
        model="anthropic.claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        return stream.get_final_message().to_dict()
