"""Responses API stream codec: assembly, any chunking, SDK round trips, renumbering."""

from __future__ import annotations

import json

import pytest
from tests.support.streams import decode, every_split, fixture, openai_responses_final, random_chunkings, strip_nones
from tooldisco.apis.openai_responses import stream as openai_responses
from tooldisco.apis.streaming import StreamError
from tooldisco.apis.framing.sse import SSEDecoder

FIXTURE = "openai_responses_reasoning_tool.sse"
SDK_ADDED = frozenset({"parsed", "parsed_arguments"})


def decoded() -> dict:
    decoder, _ = decode(openai_responses.ResponsesStreamDecoder, [fixture(FIXTURE)])
    return decoder.message()


def sse(name: str, **data: object) -> bytes:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()


def test_reasoning_message_and_function_call_assemble() -> None:
    decoder, events = decode(openai_responses.ResponsesStreamDecoder, [fixture(FIXTURE)])
    response = decoder.message()
    assert decoder.done and events[-1].type == "response.completed"
    assert response["status"] == "completed" and response["usage"]["total_tokens"] == 4053
    reasoning, message, call = response["output"]
    assert reasoning["encrypted_content"].startswith("gAAAAA")
    assert reasoning["summary"][0]["text"].endswith("repository — then answer.")
    assert message["content"][0]["text"] == "I'll list the files in the repo — «first»."
    assert call == {
        "id": "fc_0a1b2c3d4e5f6071aa00000000000003",
        "type": "function_call",
        "status": "completed",
        "arguments": '{"command":["ls","-la"]}',
        "call_id": "call_Qm3xY8pL2nV5sR1tK7wZ4bH9",
        "name": "shell",
    }


def test_every_split_point_gives_the_same_result() -> None:
    body = fixture(FIXTURE)
    decoder, expected = decode(openai_responses.ResponsesStreamDecoder, [body])
    head = body[:4000]  # the first events, cut everywhere
    head_events = decode(openai_responses.ResponsesStreamDecoder, [head])[1]
    for chunks in every_split(head):
        assert decode(openai_responses.ResponsesStreamDecoder, chunks)[1] == head_events
    for chunks in random_chunkings(body):
        other, events = decode(openai_responses.ResponsesStreamDecoder, chunks)
        assert events == expected and other.message() == decoder.message()


def test_matches_the_sdk_and_survives_the_sdk_round_trip() -> None:
    body = fixture(FIXTURE)
    response = decoded()
    assert strip_nones(openai_responses_final(body, chunk=17), SDK_ADDED) == strip_nones(response)
    reencoded = openai_responses.encode(response)
    assert strip_nones(openai_responses_final(reencoded, chunk=4), SDK_ADDED) == strip_nones(response)
    again, _ = decode(openai_responses.ResponsesStreamDecoder, [reencoded])
    assert again.message() == response


def test_assembled_from_items_when_the_final_response_has_no_output() -> None:
    body = fixture(FIXTURE)
    head, tail = body.rsplit(b"event: response.completed\n", 1)
    final = json.loads(tail.split(b"data: ", 1)[1])
    final["response"].pop("output")
    body = head + sse("response.completed", **{k: v for k, v in final.items() if k != "type"})
    decoder, _ = decode(openai_responses.ResponsesStreamDecoder, [body])
    assert decoder.message() == decoded()


def test_truncated_stream_assembles_from_the_snapshot() -> None:
    body = fixture(FIXTURE)
    cut = body.index(b"event: response.function_call_arguments.delta")
    decoder, _ = decode(openai_responses.ResponsesStreamDecoder, [body[:cut]])
    response = decoder.message()
    assert not decoder.done and response["status"] == "in_progress"
    assert [item["type"] for item in response["output"]] == ["reasoning", "message", "function_call"]
    assert response["output"][1]["status"] == "completed"
    assert response["output"][2]["arguments"] == ""


def test_encoded_grammar_is_numbered_afresh() -> None:
    response = decoded()
    response["output"] = response["output"][1:]  # e.g. a removed item
    events = decode(SSEDecoder, [openai_responses.encode(response)])[1]
    payloads = [json.loads(e.data) for e in events]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert all(p["type"] == e.event for p, e in zip(payloads, events))
    assert payloads[0]["type"] == "response.created" and payloads[0]["response"]["output"] == []
    assert payloads[0]["response"]["status"] == "in_progress" and payloads[0]["response"]["usage"] is None
    added = [p for p in payloads if p["type"] == "response.output_item.added"]
    assert [(p["output_index"], p["item"]["type"], p["item"]["status"]) for p in added] == [
        (0, "message", "in_progress"),
        (1, "function_call", "in_progress"),
    ]
    assert added[1]["item"]["arguments"] == ""
    kinds = [p["type"] for p in payloads]
    assert kinds.index("response.content_part.added") < kinds.index("response.output_text.delta")
    assert kinds[-1] == "response.completed"
    args_done = next(p for p in payloads if p["type"] == "response.function_call_arguments.done")
    assert args_done["output_index"] == 1 and args_done["arguments"] == '{"command":["ls","-la"]}'


@pytest.mark.parametrize(("status", "terminal"), [("incomplete", "response.incomplete"), ("failed", "response.failed")])
def test_terminal_event_follows_the_status(status: str, terminal: str) -> None:
    response = {**decoded(), "status": status}
    payloads = [json.loads(e.data) for e in decode(SSEDecoder, [openai_responses.encode(response)])[1]]
    assert payloads[-1]["type"] == terminal
    decoder, _ = decode(openai_responses.ResponsesStreamDecoder, [openai_responses.encode(response)])
    assert decoder.message() == response and decoder.done


def test_refusal_annotations_custom_tool_and_unknown_items_round_trip() -> None:
    response = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": "See the docs.",
                        "annotations": [
                            {
                                "type": "url_citation",
                                "start_index": 4,
                                "end_index": 12,
                                "title": "Docs",
                                "url": "https://x",
                            }
                        ],
                        "logprobs": [],
                    },
                    {"type": "refusal", "refusal": "Not that part."},
                ],
            },
            {
                "id": "ctc_1",
                "type": "custom_tool_call",
                "call_id": "call_1",
                "name": "apply_patch",
                "input": "*** Begin",
            },
            {
                "id": "ws_1",
                "type": "web_search_call",
                "status": "completed",
                "action": {"type": "search", "query": "q"},
            },
            {"id": "rs_1", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    }
    decoder, events = decode(openai_responses.ResponsesStreamDecoder, [openai_responses.encode(response)])
    assert decoder.message() == response
    kinds = {e.type for e in events}
    assert {
        "response.output_text.annotation.added",
        "response.refusal.delta",
        "response.custom_tool_call_input.delta",
        "response.reasoning_text.delta",
    } <= kinds


def test_error_event_and_unknown_events() -> None:
    body = (
        sse("response.created", sequence_number=0, response={"id": "resp_1", "status": "in_progress", "output": []})
        + sse("response.web_search_call.searching", sequence_number=1, output_index=0, item_id="ws_1")
        + b"event: keepalive\ndata: \n\n"
        + sse("error", sequence_number=2, code="server_error", message="The server had an error", param=None)
    )
    decoder, events = decode(openai_responses.ResponsesStreamDecoder, [body])
    assert [e.type for e in events] == ["response.created", "response.web_search_call.searching", "keepalive", "error"]
    assert decoder.error["code"] == "server_error"
    with pytest.raises(StreamError):
        decoder.message()


def test_the_echoed_catalog_is_shared_not_copied_per_message() -> None:
    """``message()`` is a fresh object, but the echoed ``tools`` (the whole catalog, which no
    reader changes) are not deep-copied each time it is asked for."""
    dec = openai_responses.ResponsesStreamDecoder()
    dec.feed(fixture("openai_responses_reasoning_tool.sse"))
    first, second = dec.message(), dec.message()
    assert first["tools"] and first["tools"] is second["tools"]
    assert first["output"] == second["output"] and first["output"] is not second["output"]
    assert first["output"][0] is not second["output"][0]
