"""Live streams with call-through: a dispatcher call reaches the client as a call of the real
tool (Chat: one whole fragment at the next client index; Gemini: the part rewritten), one that
stands for no tool never reaches it, and what the loop gets is the upstream's own round.

Oracles: the loop's own view of the same rounds (``strip(unwrap(message))``, merged), our
decoders, and the official SDKs (openai's ``ChatCompletionStreamState`` and
``chat.completions.stream``; google-genai's ``generate_content_stream``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.support.call_through import D, DISPATCH, FORECAST, G_DISPATCH, RUN_QUERY, dispatcher_args
from tests.support.stitch_gemini import (
    check_sdk, decoded as g_decoded, elements, folded, realistic, response, sdk, sig, text, usage,
)
from tests.support.stitch_openai_chat import (
    DONE, check_grammar, check_hidden, chunk_event, choice, completion, fake_provider_round, fragment, head,
    payloads, sdk_stream_final, sdk_view, usage_of,
)
from tests.support.streams import openai_chat_final, strip_nones
from tooldisco.apis.gemini.adapter import STAND_IN_SIGNATURE, GeminiAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.apis.openai_chat.stream import encode

from tests.fakeprovider.model import ToolCall as FakeCall
from tests.support.stitch import CHUNKERS, P, Chunker, chunker_id, decoder_of, drive, every_byte, shown_as_client_reads_it, whole

A = OpenAIChatAdapter()
BODY = '{"model":"gpt-4.1","messages":[],"stream":true}'


# -- Chat Completions -----------------------------------------------------------------------------


def run(rounds: list[bytes], chunker: Chunker = whole):
    used: list[Any] = []
    client, ends = drive(A, rounds, chunker, body=BODY, dispatch=DISPATCH, used=used)
    if all(end.complete and end.error is None for end in ends):
        shown_as_client_reads_it(A, used[0], chat_decoded(client))
    return client, ends


def chat_decoded(data: bytes) -> dict[str, Any]:
    return decoder_of(A, data).message()


def visible(adapter: Any, dispatch: Any, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What the loop shows the client of these rounds: each unwrapped, the search stripped, merged."""
    shown = [adapter.strip(adapter.unwrap(m, dispatch.resolve), [P]) for m in messages]
    return adapter.merge(shown)


def chat_visible(messages: list[dict[str, Any]]) -> dict[str, Any]:
    out = visible(A, DISPATCH, messages)
    out["created"] = messages[0]["created"]
    return out


def real_call(cid: str, name: str, arguments: str, index: int | None = None) -> dict[str, Any]:
    call = {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}
    return call if index is None else {"index": index, **call}


def sdk_calls(data: bytes) -> list[dict[str, Any]]:
    """The tool calls of the openai SDK's accumulated snapshot, by both of its readers."""
    final = sdk_view(openai_chat_final(data, chunk=13))
    assert sdk_view(sdk_stream_final(data)) == final
    return final["choices"][0]["message"].get("tool_calls", [])


def client_heads(data: bytes) -> list[dict[str, Any]]:
    """Every tool-call fragment the client got, in order."""
    return [tc for c in payloads(data)[:-1] for ch in c.get("choices", []) for tc in ch["delta"].get("tool_calls", [])]


def pieces(text_: str, size: int = 3) -> list[str]:
    return [text_[i:i + size] for i in range(0, len(text_), size)]


DISPATCHED = dispatcher_args("get_forecast", {"city": "Zürich", "days": 3})


def dispatcher_round(*, finish: bool = True, cid: str = "call_D") -> bytes:
    """Text, then a dispatcher call whose arguments arrive three characters at a time."""
    out = (chunk_event(choice({"role": "assistant", "content": ""}))
           + chunk_event(choice({"content": "Checking."}))
           + chunk_event(choice({"tool_calls": [head(0, cid, D)]}))
           + b"".join(chunk_event(choice({"tool_calls": [fragment(0, p)]})) for p in pieces(DISPATCHED)))
    if finish:
        out += chunk_event(choice({}, "tool_calls"))
    return out + chunk_event(cid="chatcmpl-h", usage=usage_of(10, 5)) + DONE


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
def test_chat_dispatcher_call_streamed_in_fragments_reaches_the_client_as_one(chunker: Chunker) -> None:
    upstream = dispatcher_round()
    out, (end,) = run([upstream], chunker)
    assert end.message == chat_decoded(upstream)  # the loop gets the upstream's own round
    assert end.message["choices"][0]["message"]["tool_calls"][0]["function"] == {"name": D, "arguments": DISPATCHED}
    chunks = check_grammar(out)
    assert client_heads(out) == [real_call("call_D", FORECAST, '{"city":"Zürich","days":3}', 0)]
    whole_chunk = next(c for c in chunks if c["choices"] and "tool_calls" in c["choices"][0]["delta"])
    assert whole_chunk["choices"] == [{"index": 0, "delta": {"tool_calls": client_heads(out)}, "finish_reason": None}]
    assert whole_chunk["id"] == "chatcmpl-h" and whole_chunk["model"] == "gpt-4.1-2025-04-14"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls" and chunks[-1]["usage"] == usage_of(10, 5)
    check_hidden(out)
    assert D.encode() not in out and b"get_forecast\\\"" not in out
    assert chat_decoded(out) == chat_visible([end.message])
    assert sdk_calls(out) == [real_call("call_D", FORECAST, '{"city":"Zürich","days":3}')]


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_chat_client_indexes_with_a_phantom_before_and_a_visible_call_after(chunker: Chunker) -> None:
    """Upstream: the search (0), the dispatcher (1), a visible call (2), fragments cut anywhere.
    The client: the real call at 0, the visible one at 1, each before its fragments."""
    upstream = (chunk_event(choice({"role": "assistant", "content": None}))
                + chunk_event(choice({"tool_calls": [head(0, "call_S", P, '{"query"')]}))
                + chunk_event(choice({"tool_calls": [fragment(0, ':"weather"}')]}))
                + chunk_event(choice({"tool_calls": [head(1, "call_D", D, DISPATCHED[:5])]}))
                + b"".join(chunk_event(choice({"tool_calls": [fragment(1, p)]})) for p in pieces(DISPATCHED[5:], 7))
                + chunk_event(choice({"tool_calls": [head(2, "call_R", "read_file", '{"pa')]}))
                + chunk_event(choice({"tool_calls": [fragment(2, 'th":"a.txt"}')]}))
                + chunk_event(choice({}, "tool_calls")) + DONE)
    out, (end,) = run([upstream], chunker)
    check_grammar(out)
    check_hidden(out, "call_S")
    assert [(tc["index"], tc.get("id")) for tc in client_heads(out)] == [(0, "call_D"), (1, "call_R"), (1, None)]
    assert sdk_calls(out) == [real_call("call_D", FORECAST, '{"city":"Zürich","days":3}'),
                              real_call("call_R", "read_file", '{"path":"a.txt"}')]
    assert chat_decoded(out) == chat_visible([end.message])
    assert [tc["function"]["name"] for tc in end.message["choices"][0]["message"]["tool_calls"]] == [P, D, "read_file"]


def test_chat_a_visible_call_before_the_dispatcher_keeps_its_index() -> None:
    upstream = encode(completion(None, real_call("call_R", "read_file", "{}"),
                                 real_call("call_D", D, dispatcher_args(RUN_QUERY, {"sql": "select 1"})),
                                 cid="chatcmpl-1", created=1, usage=None), include_usage=False)
    out, (end,) = run([upstream], every_byte)
    check_grammar(out)
    assert sdk_calls(out) == [real_call("call_R", "read_file", "{}"),
                              real_call("call_D", RUN_QUERY, '{"sql":"select 1"}')]
    assert chat_decoded(out) == chat_visible([end.message])


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_chat_dispatcher_calls_written_by_the_fake_provider(chunker: Chunker) -> None:
    calls = [FakeCall("call_D1", D, {"name": FORECAST, "arguments": {"city": "Oslo"}}),
             FakeCall("call_D2", D, {"name": "run_query", "arguments": {"sql": "select \"x\""}})]
    upstream = fake_provider_round("Both at once.", calls, 80)
    out, (end,) = run([upstream], chunker)
    check_grammar(out)
    assert sdk_calls(out) == [real_call("call_D1", FORECAST, '{"city":"Oslo"}'),
                              real_call("call_D2", RUN_QUERY, '{"sql":"select \\"x\\""}')]
    assert chat_decoded(out) == chat_visible([end.message])


def test_chat_an_invalid_dispatcher_call_is_hidden_and_stops_as_stop() -> None:
    upstream = encode(completion("Hmm.", real_call("call_X", D, dispatcher_args("get_forcast", {})),
                                 cid="chatcmpl-1", created=1, usage=usage_of(5, 1)), include_usage=True)
    out, (end,) = run([upstream], every_byte)
    chunks = check_grammar(out)
    check_hidden(out, "call_X")
    assert client_heads(out) == [] and chunks[-2]["choices"][0]["finish_reason"] == "stop"
    final = sdk_view(openai_chat_final(out))
    assert final["choices"][0]["message"] == {"role": "assistant", "content": "Hmm."}
    assert end.message == chat_decoded(upstream)
    assert chat_decoded(out) == chat_visible([end.message])


def test_chat_an_invalid_dispatcher_call_beside_a_visible_one_keeps_tool_calls() -> None:
    upstream = encode(completion(None, real_call("call_X", D, '{"name":"nope"}'),
                                 real_call("call_R", "read_file", "{}"), cid="chatcmpl-1", created=1,
                                 usage=None), include_usage=False)
    out, _ = run([upstream], every_byte)
    chunks = check_grammar(out)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert sdk_calls(out) == [real_call("call_R", "read_file", "{}")]


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_chat_refused_round_then_a_valid_dispatcher_round(chunker: Chunker) -> None:
    """The loop answers the refused call and re-forwards: one client stream, the real call at 0."""
    first = (chunk_event(choice({"role": "assistant", "content": "Trying."}), cid="chatcmpl-1")
             + chunk_event(choice({"tool_calls": [head(0, "call_X", D, dispatcher_args("nope", {}))]}),
                           cid="chatcmpl-1")
             + chunk_event(choice({}, "tool_calls"), cid="chatcmpl-1")
             + chunk_event(cid="chatcmpl-1", usage=usage_of(10, 2)) + DONE)
    out, ends = run([first, dispatcher_round(cid="call_D")], chunker)
    chunks = check_grammar(out)
    check_hidden(out, "call_X")
    assert {c["id"] for c in chunks} == {"chatcmpl-1"} and chunks[-1]["usage"] == usage_of(20, 7)
    assert sdk_calls(out) == [real_call("call_D", FORECAST, '{"city":"Zürich","days":3}')]
    assert chat_decoded(out) == chat_visible([e.message for e in ends])
    assert chat_decoded(out)["choices"][0]["message"]["content"] == "Trying.\n\nChecking."


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
def test_chat_a_round_without_finish_reason_flushes_the_held_call(chunker: Chunker) -> None:
    upstream = dispatcher_round(finish=False)
    out, (end,) = run([upstream], chunker)
    assert end.complete
    assert client_heads(out) == [real_call("call_D", FORECAST, '{"city":"Zürich","days":3}', 0)]
    chunks = payloads(out)
    assert chunks[-1] == "[DONE]" and chunks[-2]["usage"] == usage_of(10, 5)  # the usage chunk still last
    assert sdk_calls(out) == [real_call("call_D", FORECAST, '{"city":"Zürich","days":3}')]


@pytest.mark.parametrize("after", [head(1, "call_R", "read_file", "{}"),
                                   head(1, "call_E", D, dispatcher_args("run_query", {"sql": "x"}))])
def test_chat_a_late_fragment_of_a_call_sent_whole_changes_nothing(after: dict[str, Any]) -> None:
    """A compatible server's late empty fragment (here with padding) of the dispatcher call, after
    the next call began: neither an error nor a piece of the next dispatcher call."""
    upstream = (chunk_event(choice({"role": "assistant", "content": None}))
                + chunk_event(choice({"tool_calls": [head(0, "call_D", D, DISPATCHED[:9])]}))
                + chunk_event(choice({"tool_calls": [fragment(0, DISPATCHED[9:])]}))
                + chunk_event(choice({"tool_calls": [after]}))
                + chunk_event(choice({"tool_calls": [fragment(0, "")]}), obfuscation="pad")
                + chunk_event(choice({}, "tool_calls")) + DONE)
    out, (end,) = run([upstream], every_byte)
    check_grammar(out)
    second = (real_call("call_R", "read_file", "{}") if after["id"] == "call_R"
              else real_call("call_E", RUN_QUERY, '{"sql":"x"}'))
    assert sdk_calls(out) == [real_call("call_D", FORECAST, '{"city":"Zürich","days":3}'), second]
    assert chat_decoded(out) == chat_visible([end.message])


def test_chat_without_dispatch_the_dispatcher_call_passes_as_it_came() -> None:
    upstream = dispatcher_round()
    out, _ = drive(A, [upstream], whole, body=BODY)
    assert out == upstream


# -- Gemini ---------------------------------------------------------------------------------------

SSE = GeminiAdapter(stream=True, sse=True)
ARRAY = GeminiAdapter(stream=True, sse=False)
FORMS = [SSE, ARRAY]


def form_id(adapter: GeminiAdapter) -> str:
    return "sse" if adapter.sse else "array"


def g_call(name: str, args: Any, signature: str | None = None, id_: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": name, "args": args, **({"id": id_} if id_ else {})}}
    if signature:
        part["thoughtSignature"] = signature
    return part


def g_run(adapter: GeminiAdapter, rounds: list[dict[str, Any]], chunker: Chunker = whole):
    """The client bytes and round ends, every oracle checked: the loop's own view, the SDK."""
    used: list[Any] = []
    client, ends = drive(adapter, [realistic(m, adapter.sse) for m in rounds], chunker, dispatch=G_DISPATCH, used=used)
    messages = [end.message for end in ends]
    assert all(end.complete for end in ends) and messages == [g_decoded(realistic(m, True)) for m in rounds]
    assert P.encode() not in client and D.encode() not in client
    got = g_decoded(client if adapter.sse else b"".join(
        json.dumps(e).encode().join([b"data: ", b"\r\n\r\n"]) for e in elements(adapter, client)))
    want = folded(visible(adapter, G_DISPATCH, messages))
    want["responseId"] = messages[0]["responseId"]
    assert got == want
    shown_as_client_reads_it(adapter, used[0], got)
    check_sdk(sdk(adapter, client), got)
    return client, got, ends


def g_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    return message["candidates"][0]["content"]["parts"]


DISPATCHING = response("resp_d", [
    text("Weather first.", thought=True, signature=sig("SIG_thought")),
    g_call(D, {"name": "get_forecast", "arguments": {"city": "Paris", "unit": "°C"}}, sig("SIG_step"), "fc_1"),
    g_call("read_file", {"path": "a.txt"}),
], usage(100, 20))


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_gemini_dispatcher_call_is_rewritten_in_place(adapter: GeminiAdapter, chunker: Chunker) -> None:
    _, got, (end,) = g_run(adapter, [DISPATCHING], chunker)
    assert g_parts(got)[1:] == [
        {"functionCall": {"name": FORECAST, "args": {"city": "Paris", "unit": "°C"}, "id": "fc_1"},
         "thoughtSignature": sig("SIG_step")},
        g_call("read_file", {"path": "a.txt"})]
    assert g_parts(end.message)[1]["functionCall"]["name"] == D


REFUSING = response("resp_r", [
    text("Let me."),
    g_call(P, {"query": "sql"}),
    g_call(D, {"name": "nope", "arguments": {}}, sig("SIG_step")),
    g_call(D, {"name": "run_query", "arguments": {"sql": "select 1"}}),
    g_call(D, {"name": "get_forecast", "arguments": [1]}),
    g_call("read_file", {"path": "b"}),
], usage(50, 10))


@pytest.mark.parametrize("chunker", CHUNKERS[:4], ids=chunker_id)
@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_gemini_refused_calls_go_and_the_signature_passes_on(adapter: GeminiAdapter, chunker: Chunker) -> None:
    client, got, (end,) = g_run(adapter, [REFUSING], chunker)
    assert g_parts(got) == [
        {"text": "Let me."},
        {"functionCall": {"name": RUN_QUERY, "args": {"sql": "select 1"}}, "thoughtSignature": STAND_IN_SIGNATURE},
        g_call("read_file", {"path": "b"})]
    assert sig("SIG_step").encode() not in client and b"nope" not in client
    # the stitcher decided by the ids the loop uses (``name#rank`` without an id)
    targets = {c.id: t for c in adapter.calls(end.message) if (t := G_DISPATCH.resolve(c)) is not None}
    assert list(targets) == [f"{D}#1", f"{D}#2", f"{D}#3"]
    assert [isinstance(t, str) for t in targets.values()] == [True, False, True]


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_gemini_refused_round_then_a_dispatcher_round(adapter: GeminiAdapter) -> None:
    refused = response("resp_1", [text("Trying."), g_call(D, {"name": "nope"}, sig("SIG_1"))], usage(10, 2))
    _, got, _ = g_run(adapter, [refused, DISPATCHING], every_byte)
    assert got["responseId"] == "resp_1"
    names = [p["functionCall"]["name"] for p in g_parts(got) if "functionCall" in p]
    assert names == [FORECAST, "read_file"]
    assert g_parts(got)[0] == {"text": "Trying."}


@pytest.mark.parametrize("adapter", FORMS, ids=form_id)
def test_gemini_ranks_restart_each_round(adapter: GeminiAdapter) -> None:
    """Round two's first call is rank 0 again, as ``GeminiAdapter.calls`` numbers it."""
    first = response("resp_1", [g_call(P, {"query": "x"}), g_call(D, {"name": "nope"})], usage(10, 2))
    second = response("resp_2", [g_call(D, {"name": FORECAST, "arguments": {"city": "Oslo"}})], usage(20, 2))
    _, got, ends = g_run(adapter, [first, second])
    assert [c.id for c in adapter.calls(ends[1].message)] == [f"{D}#0"]
    assert g_parts(got) == [{"functionCall": {"name": FORECAST, "args": {"city": "Oslo"}}}]


def test_gemini_without_dispatch_the_dispatcher_call_passes_as_it_came() -> None:
    upstream = realistic(DISPATCHING, True)
    out, _ = drive(SSE, [upstream], whole)
    assert out == upstream


def test_sdk_view_of_a_rewritten_gemini_call() -> None:
    """google-genai reads the rewritten call as a FunctionCall of the real tool, its signature as bytes."""
    client, _ = drive(SSE, [realistic(DISPATCHING, True)], whole, dispatch=G_DISPATCH)
    calls = [p["functionCall"] for c in sdk(SSE, client) for p in c["candidates"][0]["content"].get("parts", [])
             if "functionCall" in p]
    assert calls == [{"id": "fc_1", "args": {"city": "Paris", "unit": "°C"}, "name": FORECAST},
                     {"args": {"path": "a.txt"}, "name": "read_file"}]
    assert strip_nones(calls) == calls
