"""Helpers ``tests/unit/apis/gemini/test_stitch.py`` and other unit tests share."""

from __future__ import annotations

import base64
import json
from typing import Any
from google.genai import errors as genai_errors
from tests.support.streams import fixture, gemini_chunks
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.gemini import stream as gemini
from tooldisco.apis.framing.sse import encode_event
from tests.fakeprovider.model import Conversation, Reply, ToolCall, Usage
from tests.fakeprovider.providers.gemini import Gemini
from tests.support.stitch import P, Api


SSE = GeminiAdapter(stream=True, sse=True)


ARRAY = GeminiAdapter(stream=True, sse=False)


def text(value: str, thought: bool = False, signature: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"text": value}
    if thought:
        part["thought"] = True
    if signature:
        part["thoughtSignature"] = signature
    return part


def call(name: str, args: dict[str, Any], signature: str | None = None, id_: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": name, "args": args, **({"id": id_} if id_ else {})}}
    if signature:
        part["thoughtSignature"] = signature
    return part


def sig(label: str) -> str:
    """A thought signature: opaque base64 (google-genai validates it as bytes)."""
    return base64.b64encode(label.encode()).decode()


def usage(prompt: int, out: int, thoughts: int = 0, cached: int = 0) -> dict[str, Any]:
    u: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": out,
        "totalTokenCount": prompt + out + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if thoughts:
        u["thoughtsTokenCount"] = thoughts
    if cached:
        u["cachedContentTokenCount"] = cached
        u["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    return u


def response(rid: str, parts: list[dict[str, Any]], u: dict[str, Any]) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0, "finishReason": "STOP"}],
        "usageMetadata": u,
        "modelVersion": "gemini-3-pro-preview",
        "responseId": rid,
    }


SEARCH_1 = response(
    "resp_round1",
    [
        text("I need a weather tool; none is loaded. 🌦", thought=True),
        text("Let me look for the right tool. "),
        call(P, {"query": "weather"}, signature=sig("SIG_phantom_1")),
    ],
    usage(100, 20, thoughts=30, cached=50),
)


SEARCH_2 = response(
    "resp_round2", [call(P, {"query": "forecast"}, sig("SIG_phantom_2"), "call_phantom_2")], usage(150, 8)
)


ANSWER_CALL = response(
    "resp_round3",
    [
        text("Now get_weather is loaded.", thought=True),
        text("Checking Paris — un instant."),
        call("get_weather", {"city": "Paris", "unit": "°C"}, signature=sig("SIG_weather")),
    ],
    usage(220, 40, thoughts=12, cached=60),
)


ANSWER_TEXT = response("resp_round_text", [text("It is sunny in Paris, 21 °C ☀️.")], usage(210, 15))


MIXED = response(
    "resp_mixed",
    [
        text("Two things at once."),
        call(P, {"query": "calendar"}, sig("SIG_phantom_m"), "call_phantom_m"),
        call("read_file", {"path": "a.txt"}),
    ],
    usage(90, 25),
)


PHANTOM_TRACES = (
    b"call_phantom_2",
    b"call_phantom_m",
    b"call_phantom_f",
    *(sig(label).encode() for label in ["SIG_phantom_1", "SIG_phantom_2", "SIG_phantom_m"]),
)


def realistic(m: dict[str, Any], sse: bool) -> bytes:
    """The stream as Google writes it: spaced JSON, a running usage on every chunk (prompt only
    until the last), CRLF SSE or an indented array with ``\\n,\\r\\n`` separators."""
    chunks = gemini.chunks(m)
    prompt_only = {k: v for k, v in m["usageMetadata"].items() if k.startswith("prompt")}
    for chunk in chunks[:-1]:
        chunk["usageMetadata"] = {**prompt_only, "totalTokenCount": prompt_only["promptTokenCount"]}
    if sse:
        return b"".join(encode_event(json.dumps(c, ensure_ascii=False), newline="\r\n") for c in chunks)
    return ("[" + "\n,\r\n".join(json.dumps(c, indent=2, ensure_ascii=False) for c in chunks) + "\n]").encode()


def fake(reply_text: str, calls: list[str], tokens: int, sse: bool) -> bytes:
    """One round written by the fake provider's own stream writer (LF SSE, ``\\r\\n,`` arrays)."""
    conv = Conversation(
        api="gemini",
        model="gemini-3-pro-preview",
        stream=True,
        tools=[P, "read_file"],
        calls=[],
        results=[],
        last_user_text="hi",
        body={},
        meta={"sse": sse},
    )
    reply = Reply(reply_text, [ToolCall("", name, {"query": name}) for name in calls], Usage(tokens, tokens // 4))
    return b"".join(Gemini().render(reply, conv).events)  # type: ignore[union-attr]


def decoded(body: bytes) -> dict[str, Any]:
    decoder = gemini.GeminiStreamDecoder()
    decoder.feed(body)
    decoder.feed(b"")
    assert decoder.done
    return decoder.message()


def folded(m: dict[str, Any]) -> dict[str, Any]:
    """``m`` with adjacent text parts folded as a client's assembler folds streamed chunks."""
    return decoded(gemini.encode(m))


def expected(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return folded(SSE.merge([SSE.strip(m, [P]) for m in rounds]))


def elements(adapter: GeminiAdapter, client: bytes) -> list[dict[str, Any]]:
    """The client's chunks, framing checked: SSE events, or one JSON array document."""
    if adapter.sse:
        events = gemini.GeminiStreamDecoder().feed(client)
        assert b"".join(e.raw for e in events) == client  # every byte is in a whole event
        return [e.data for e in events]
    document = json.loads(client)
    assert isinstance(document, list)
    return document


def sdk(adapter: GeminiAdapter, client: bytes, chunk: int = 7) -> list[dict[str, Any]]:
    """google-genai's parse of the stream; raises its ``APIError`` on an error chunk. The SDK
    requests ``alt=sse`` only, so array elements are handed to it as SSE events."""
    if not adapter.sse:
        client = b"".join(encode_event(json.dumps(e)) for e in elements(adapter, client))
    chunks = gemini_chunks(client, chunk=chunk)
    for c in chunks:
        c.pop("sdkHttpResponse", None)
    return chunks


def check_sdk(chunks: list[dict[str, Any]], got: dict[str, Any]) -> None:
    """No phantom trace, one finishReason (last), round 1's id, usage only growing to the sum."""
    assert P not in json.dumps(chunks)
    finishing = [i for i, c in enumerate(chunks) if any("finishReason" in d for d in c.get("candidates", []))]
    assert finishing == [len(chunks) - 1] and chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert {c.get("responseId") for c in chunks} == {got["responseId"]}
    usages = [c["usageMetadata"] for c in chunks if "usageMetadata" in c]
    for key in ("promptTokenCount", "candidatesTokenCount", "totalTokenCount", "thoughtsTokenCount"):
        counts = [u.get(key, 0) for u in usages]
        assert counts == sorted(counts)
    assert usages[-1] == got["usageMetadata"]
    assembler = gemini.GeminiAssembler()
    for c in chunks:
        assembler.apply(None, c)
    assert same_signatures(assembler.message()) == same_signatures(got)


def signature_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_"))


def same_signatures(value: Any) -> Any:
    """``value`` with each thoughtSignature as its bytes: the SDK writes them back url-safe."""
    if isinstance(value, dict):
        return {k: signature_bytes(v) if k == "thoughtSignature" else same_signatures(v) for k, v in value.items()}
    if isinstance(value, list):
        return [same_signatures(v) for v in value]
    return value


def check(adapter: GeminiAdapter, client: bytes, got: dict[str, Any]) -> None:
    elements(adapter, client)
    check_sdk(sdk(adapter, client), got)


OVERLOADED = {
    "error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}
}


def with_error(adapter: GeminiAdapter, m: dict[str, Any], error: dict[str, Any]) -> tuple[bytes, bytes]:
    """``m``'s first chunk, then an in-stream error as Google writes it in each framing; and
    the rest of ``m`` (after the error it passes as it came)."""
    events = gemini.GeminiStreamDecoder().feed(realistic(m, adapter.sse))
    head, rest = events[0].raw, b"".join(e.raw for e in events[1:])
    if adapter.sse:
        return head + encode_event(json.dumps(error), newline="\r\n"), rest
    return head + b"\n,\r\n" + json.dumps(error, indent=2).encode(), rest + b"\n]"


def api(adapter: GeminiAdapter) -> Api:
    sse = adapter.sse
    return Api(
        adapter=adapter,
        rounds={"search": realistic(SEARCH_1, sse), "search_2": realistic(SEARCH_2, sse),
                "call": realistic(ANSWER_CALL, sse), "text": realistic(ANSWER_TEXT, sse),
                "mixed": realistic(MIXED, sse)},
        error_round=with_error(adapter, ANSWER_CALL, OVERLOADED),
        plain=(fixture("gemini_thoughts_calls.sse" if sse else "gemini_text_array.json"),
               gemini.encode(ANSWER_CALL, sse=sse), realistic(ANSWER_CALL if sse else ANSWER_TEXT, sse),
               fake("Here it is.", ["read_file"], 40, sse)),
        hidden=PHANTOM_TRACES,
        expected=expected,
        check=lambda client, got: check(adapter, client, got),
        sdk=lambda client: sdk(adapter, client),
        sdk_error=genai_errors.APIError,
        stop=lambda m: m["candidates"][0]["finishReason"],
        stops=("STOP", "STOP"),  # Gemini has no tool stop
        ident=lambda m: m["responseId"],
        usage=lambda m: m["usageMetadata"],
    )


API_SSE, API_ARRAY = api(SSE), api(ARRAY)
