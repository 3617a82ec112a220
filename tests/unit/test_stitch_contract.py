"""What the runner relies on from every stitcher, checked across the SSE APIs at once."""

import pytest

from tooldisco.providers.anthropic import AnthropicAdapter
from tooldisco.providers.gemini import GeminiAdapter
from tooldisco.providers.openai_chat import OpenAIChatAdapter
from tooldisco.providers.openai_responses import OpenAIResponsesAdapter

P = "gateway_search_tools"
CASES = {
    "anthropic": (AnthropicAdapter(), b'event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
                  b'"type":"message","role":"assistant","model":"x","content":[],"stop_reason":null,'
                  b'"usage":{"input_tokens":1,"output_tokens":0}}}\n\n',
                  b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}'),
    "chat": (OpenAIChatAdapter(), b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"x",'
             b'"choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}\n\n',
             b'data: {"error":{"message":"busy","type":"server_error"}}'),
    "responses": (OpenAIResponsesAdapter(), b'event: response.created\ndata: {"type":"response.created",'
                  b'"sequence_number":0,"response":{"id":"r","object":"response","status":"in_progress","output":[]}}\n\n',
                  b'event: error\ndata: {"type":"error","code":"server_error","message":"busy","sequence_number":1}'),
    "gemini": (GeminiAdapter(stream=True, sse=True), b'data: {"candidates":[{"content":{"role":"model","parts":'
               b'[{"text":"hi"}]}}],"responseId":"g"}\r\n\r\n',
               b'data: {"error":{"code":500,"message":"busy","status":"INTERNAL"}}'),
}


@pytest.mark.parametrize("api", CASES)
def test_an_unterminated_error_event_still_reaches_the_client_and_nothing_after_it(api):
    adapter, start, error = CASES[api]
    st = adapter.stitcher(P, "{}")
    out = st.feed(start) + st.feed(error)
    end = st.end_round()
    assert end.error is not None
    out += st.finish()  # what the runner sends after an error: only what is still owed
    tail = out.split(b"busy", 1)[1]
    assert out.count(b"busy") == 1 and b"data: {" not in tail  # at most the stream's own end marker
    assert st.finish() == b""
