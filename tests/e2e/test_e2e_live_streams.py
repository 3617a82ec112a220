"""Live streaming through the phantom loop, end to end, for every API, with the official SDK
stream parsers as the oracles (issue "Live streaming", acceptance).

One real mitmdump (tool-search, bm25) in front of the fake provider. Each SDK route is a
``Driver``: it sends a turn with the SDK's own streaming call, records when each parsed event
reached the client, and keeps every response byte the client received (an httpx2 transport
that tees the body, or botocore's raw event stream), so that the tests can check:

1. every SDK accepts the stitched stream: no search, one, two, a mixed turn, an upstream
   error in round 2 (the SDK raises), a client that hangs up mid-stream;
2. the stream is live: the first visible event of a round reaches the client before the fake
   has finished writing that round (the fake records monotonic times in this process);
3. no byte the client receives names the search tool or a phantom call id, and Responses
   objects echo the client's own ``tools`` / ``tool_choice``;
4. a client that goes away cancels the upstream request, and the proxy keeps serving;
5. thinking and its signatures survive the loop: the fake validates them like the APIs do.

The SDK wiring (Gemini model, Bedrock SigV4 credentials, catalogs) is
``wire_apis``'s.
"""

from __future__ import annotations

import base64
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anthropic
import botocore.exceptions
import httpx
import httpx2
import openai
import pytest
from botocore.eventstream import EventStreamBuffer
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gt
from openai.lib.streaming.chat import ChatCompletionStreamState

from tests.e2e.harness import ADDON_PATH, TEST_KEYS, MitmDump
from tests.e2e.wire_apis import (
    CATALOG,
    GEMINI,
    MODEL_ID,
    READ_FILE,
    TARGET,
    anthropic_message,
    aws_chain,  # noqa: F401 (a fixture: the proxy's AWS chain, so that it re-signs Bedrock bodies)
    converse_tools,
    fresh,
    gemini_tools,
    invoke_body,
    invoke_tools,
    r_tool,
)
from tests.e2e.test_e2e_tool_search import config as tool_search_config
from tests.fakeprovider import DISPATCHER, SEARCH_TOOL, FakeProvider, Rule, call, calls, fail, reply, search
from tests.fakeprovider.providers.anthropic import thinking_signature

pytestmark = pytest.mark.e2e

LIVE_DELAY = 0.2  # seconds between the fake's events where a test looks at timing
HANG_UP_DELAY = 0.3  # ... where a client hangs up mid-round (the proxy has several events' time to cancel)
FORECAST = {"city": "Paris"}

A_TOOLS = CATALOG + [READ_FILE]
O_TOOLS = [
    {"type": "function",
     "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
    for t in A_TOOLS
]
R_TOOLS = [r_tool(t) for t in A_TOOLS]


@pytest.fixture(scope="module")
def _live_proxy(
    fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory, aws_chain: Any
) -> Iterator[MitmDump]:
    mitm = MitmDump(
        tmp_path_factory.mktemp("live"),
        fake_provider.url,
        script=ADDON_PATH,
        config=tool_search_config("bm25"),
        name="live",
    )
    with aws_chain():  # the proxy's AWS chain holds the fake's credentials: it re-signs Bedrock bodies
        mitm.start()
    yield mitm
    mitm.stop()


@pytest.fixture
def px(_live_proxy: MitmDump, fake: FakeProvider, aws_chain: Any) -> MitmDump:
    """The module's proxy, running, in front of a reset fake that paces nothing unless a rule says so."""
    fake.stream_delay = 0.0
    if not _live_proxy.running:
        with aws_chain():
            _live_proxy.restart()
    return _live_proxy


# --- what the client received ----------------------------------------------------------------


@dataclass
class Seen:
    """One turn as the client got it: its SDK's events as they came, and what the SDK made of them."""

    events: list[tuple[float, str, str]] = field(default_factory=list)  # (receive time, kind, visible text)
    text: str = ""  # the assistant's visible text
    thoughts: list[str] = field(default_factory=list)  # visible thinking / reasoning / thought summaries
    calls: list[tuple[str, Any]] = field(default_factory=list)  # visible tool calls (name, arguments)
    stop: str | None = None  # "tool" or "end", where the API says (Gemini always says STOP)

    def text_at(self, fragment: str) -> float:
        """When the client had received text containing ``fragment``."""
        so_far = ""
        for at, _, text in self.events:
            so_far += text
            if fragment in so_far:
                return at
        raise AssertionError(f"{fragment!r} never reached the client: {so_far!r}")


def tap_for(http: Any) -> type:
    """``Tap`` for one HTTP library: httpx2 for the SDKs of these majors, httpx for
    google-genai (2.8 on Python 3.12 takes only an ``httpx.Client``; 3.x takes either)."""

    class _Tee(http.SyncByteStream):
        """A response body that keeps a copy of each chunk the SDK reads."""

        def __init__(self, inner: Any, sink: bytearray) -> None:
            self._inner, self._sink, self.closed = inner, sink, False

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self._inner:
                self._sink += chunk
                yield chunk

        def close(self) -> None:
            if not self.closed:
                self.closed = True
                self._inner.close()

    class Tap(http.BaseTransport):
        """The transport of an SDK client: through the proxy, trusting its CA, keeping the response
        bytes as they came off the wire (no content-encoding: checked, so a grep means something)."""

        def __init__(self, proxy: MitmDump) -> None:
            self._inner = http.HTTPTransport(proxy=proxy.url, verify=proxy.ssl_context(), trust_env=False)
            self._received = bytearray()
            self._bodies: list[_Tee] = []

        def handle_request(self, request: Any) -> Any:
            response = self._inner.handle_request(request)
            assert response.headers.get("content-encoding", "identity") == "identity", response.headers
            tee = _Tee(response.stream, self._received)
            self._bodies.append(tee)
            response.stream = tee
            return response

        def hang_up(self) -> None:
            """Close every response body still open: the connection goes, as when a client quits."""
            for body in self._bodies:
                body.close()
            self._bodies.clear()

        def take(self) -> bytes:
            out = bytes(self._received)
            self._received.clear()
            return out

        def close(self) -> None:
            self._inner.close()

    return Tap


Tap, HttpxTap = tap_for(httpx2), tap_for(httpx)


class _RawTee:
    """botocore's raw event-stream body, keeping a copy of each chunk."""

    def __init__(self, inner: Any, sink: bytearray) -> None:
        self._inner, self._sink = inner, sink

    def stream(self, *args: Any, **kw: Any) -> Iterator[bytes]:
        for chunk in self._inner.stream(*args, **kw):
            self._sink += chunk
            yield chunk

    def close(self) -> None:
        self._inner.close()


Events = Generator[tuple[str, str], None, None]  # an SDK's events as (kind, visible text)


class Driver(ABC):
    """One SDK streaming route and its conversation. ``ask`` sends a user turn; ``answer`` sends
    the next turn the way an agent does: exactly what the SDK showed as the assistant turn, then
    a result for each call it showed."""

    name: ClassVar[str]
    api: ClassVar[str]  # the fake's API name
    error: ClassVar[type[Exception]]  # what the SDK raises on an in-stream error

    def __init__(self, proxy: MitmDump, *, thinking: bool = False) -> None:
        self.thinking = thinking
        self.raw = b""  # every byte the client received for the last turn
        self.seen = Seen()  # the last turn, as far as it got (an SDK that raised stopped it)

    def ask(self, question: str, *, hang_up: bool = False) -> Seen:
        self._add_user(question)
        return self._turn(hang_up)

    def answer(self, output: str) -> Seen:
        self._add_results(output)
        return self._turn(False)

    def _turn(self, hang_up: bool) -> Seen:
        """Read the SDK's stream (only its first event when ``hang_up``, then close it)."""
        seen = self.seen = Seen()
        events = self._stream()
        try:
            for kind, text in events:
                seen.events.append((time.monotonic(), kind, text))
                if hang_up:
                    break
        finally:
            events.close()
            self._hang_up()
            self.raw = self._take()
        if not hang_up:
            self._read(seen)
        return seen

    @abstractmethod
    def _add_user(self, question: str) -> None: ...

    @abstractmethod
    def _stream(self) -> Events:
        """The SDK's events as (kind, visible text); keeps what the SDK assembled for ``_read``."""

    @abstractmethod
    def _read(self, seen: Seen) -> None:
        """Fill ``seen`` from what the SDK assembled."""

    @abstractmethod
    def _add_results(self, output: str) -> None:
        """Append the assistant turn as shown and a result ``output`` for each visible call."""

    @abstractmethod
    def _hang_up(self) -> None: ...

    @abstractmethod
    def _take(self) -> bytes: ...


class HttpxDriver(Driver):
    """An SDK on httpx2 (``tap``: httpx for google-genai): its client gets the ``Tap`` transport."""

    tap_class: type = Tap

    def __init__(self, proxy: MitmDump, *, thinking: bool = False) -> None:
        super().__init__(proxy, thinking=thinking)
        self.tap = self.tap_class(proxy)

    def _hang_up(self) -> None:
        self.tap.hang_up()

    def _take(self) -> bytes:
        return self.tap.take()


class BotoDriver(Driver):
    """boto3 bedrock-runtime (SigV4 with the fake's credentials); the raw event stream is teed."""

    def __init__(self, proxy: MitmDump, *, thinking: bool = False) -> None:
        super().__init__(proxy, thinking=thinking)
        self.client = proxy.bedrock()
        self.messages: list[dict[str, Any]] = []
        self._open: Any = None
        self._received = bytearray()
        self._final: Any = None  # what the route assembled from the stream

    def _tee(self, stream: Any) -> Any:
        stream._raw_stream = _RawTee(stream._raw_stream, self._received)
        self._open = stream
        return stream

    def _hang_up(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None

    def _take(self) -> bytes:
        out = bytes(self._received)
        self._received.clear()
        return out


# --- the SDK routes --------------------------------------------------------------------------


def openai_client(tap: Tap) -> openai.OpenAI:
    http = openai.DefaultHttpxClient(transport=tap, trust_env=False)
    return openai.OpenAI(api_key=TEST_KEYS["OPENAI_API_KEY"], base_url="https://api.openai.com/v1", max_retries=0,
                         http_client=http)


def _stop(reason: str | None, tool: str, end: str) -> str | None:
    return {tool: "tool", end: "end"}.get(reason or "", reason)


class AnthropicStream(HttpxDriver):
    name, api, error = "anthropic-messages.stream", "anthropic", anthropic.APIStatusError

    def __init__(self, proxy: MitmDump, *, thinking: bool = False) -> None:
        super().__init__(proxy, thinking=thinking)
        http = anthropic.DefaultHttpxClient(transport=self.tap, trust_env=False)
        self.client = anthropic.Anthropic(api_key=TEST_KEYS["ANTHROPIC_API_KEY"], base_url="https://api.anthropic.com",
                                          max_retries=0, http_client=http)
        self.messages: list[dict[str, Any]] = []
        self._final: Any = None

    def _add_user(self, question: str) -> None:
        self.messages.append({"role": "user", "content": question})

    def _stream(self) -> Events:
        kw: dict[str, Any] = {"model": "claude-x", "max_tokens": 4096, "tools": A_TOOLS, "messages": self.messages}
        if self.thinking:
            kw["thinking"] = {"type": "enabled", "budget_tokens": 2048}
        with self.client.messages.stream(**kw) as s:
            for ev in s:
                text = ev.delta.text if ev.type == "content_block_delta" and ev.delta.type == "text_delta" else ""
                yield ev.type, text
            self._final = s.get_final_message()

    def _read(self, seen: Seen) -> None:
        m = self._final
        seen.text = "".join(b.text for b in m.content if b.type == "text")
        seen.thoughts = [b.thinking for b in m.content if b.type == "thinking"]
        seen.calls = [(b.name, b.input) for b in m.content if b.type == "tool_use"]
        seen.stop = _stop(m.stop_reason, "tool_use", "end_turn")

    def _add_results(self, output: str) -> None:
        content = self._final.content
        self.messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in content]})
        uses = [b for b in content if b.type == "tool_use"]
        results = [{"type": "tool_result", "tool_use_id": b.id, "content": output} for b in uses]
        self.messages.append({"role": "user", "content": results})


class _Chat(HttpxDriver):
    api, error = "openai-chat", openai.APIError

    def __init__(self, proxy: MitmDump, *, thinking: bool = False) -> None:
        super().__init__(proxy, thinking=thinking)
        self.client = openai_client(self.tap)
        self.messages: list[dict[str, Any]] = []
        self._final: Any = None

    def _kw(self) -> dict[str, Any]:
        return {"model": "gpt-x", "tools": O_TOOLS, "messages": self.messages,
                "stream_options": {"include_usage": True}}

    def _add_user(self, question: str) -> None:
        self.messages.append({"role": "user", "content": question})

    def _read(self, seen: Seen) -> None:
        choice = self._final.choices[0]
        seen.text = choice.message.content or ""
        seen.calls = [(tc.function.name, json.loads(tc.function.arguments)) for tc in choice.message.tool_calls or []]
        seen.stop = _stop(choice.finish_reason, "tool_calls", "stop")

    def _add_results(self, output: str) -> None:
        message = self._final.choices[0].message
        tool_calls = [
            {"id": tc.id, "type": "function",
             "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
            for tc in message.tool_calls or []
        ]
        self.messages.append({"role": "assistant", "content": message.content, "tool_calls": tool_calls})
        self.messages += [{"role": "tool", "tool_call_id": tc["id"], "content": output} for tc in tool_calls]


class ChatStream(_Chat):
    name = "openai-chat.completions.stream"

    def _stream(self) -> Events:
        with self.client.chat.completions.stream(**self._kw()) as s:
            for ev in s:
                yield ev.type, ev.delta if ev.type == "content.delta" else ""
            self._final = s.get_final_completion()


class ChatCreate(_Chat):
    name = "openai-chat.completions.create(stream=True)"

    def _stream(self) -> Events:
        state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
        stream = self.client.chat.completions.create(stream=True, **self._kw())
        with stream:
            for chunk in stream:
                state.handle_chunk(chunk)
                yield "chunk", "".join(c.delta.content or "" for c in chunk.choices)
        self._final = state.get_final_completion()


class ResponsesStream(HttpxDriver):
    """Stateless (``store: false``), reasoning carried as ``encrypted_content``, as Codex does."""

    name, api, error = "openai-responses.stream", "openai-responses", openai.APIError

    def __init__(self, proxy: MitmDump, *, thinking: bool = False) -> None:
        super().__init__(proxy, thinking=thinking)
        self.client = openai_client(self.tap)
        self.input: list[dict[str, Any]] = []
        self._final: Any = None

    def _add_user(self, question: str) -> None:
        self.input.append({"role": "user", "content": question})

    def _stream(self) -> Events:
        kw: dict[str, Any] = {"model": "gpt-5", "input": self.input, "tools": R_TOOLS, "tool_choice": "auto",
                              "store": False, "include": ["reasoning.encrypted_content"]}
        if self.thinking:
            kw["reasoning"] = {"effort": "medium", "summary": "auto"}
        with self.client.responses.stream(**kw) as s:
            for ev in s:
                yield ev.type, ev.delta if ev.type == "response.output_text.delta" else ""
            self._final = s.get_final_response()

    def _read(self, seen: Seen) -> None:
        output = self._final.output
        seen.text = self._final.output_text
        seen.thoughts = [s.text for o in output if o.type == "reasoning" for s in o.summary]
        seen.calls = [(o.name, json.loads(o.arguments)) for o in output if o.type == "function_call"]
        seen.stop = "tool" if seen.calls else "end"

    def _add_results(self, output: str) -> None:
        items = self._final.output
        self.input += [o.model_dump(mode="json", exclude_none=True) for o in items]
        self.input += [
            {"type": "function_call_output", "call_id": o.call_id, "output": output}
            for o in items
            if o.type == "function_call"
        ]


class GeminiStream(HttpxDriver):
    name, api, error = "gemini-generate_content_stream", "gemini", genai_errors.APIError
    tap_class = HttpxTap

    def __init__(self, proxy: MitmDump, *, thinking: bool = False) -> None:
        super().__init__(proxy, thinking=thinking)
        options = gt.HttpOptions(
            httpx_client=httpx.Client(transport=self.tap, trust_env=False),
            retry_options=gt.HttpRetryOptions(attempts=1),
        )
        self.client = genai.Client(api_key=TEST_KEYS["GEMINI_API_KEY"], http_options=options)
        thoughts = gt.ThinkingConfig(include_thoughts=True) if thinking else None
        self.config = gt.GenerateContentConfig(tools=gemini_tools(), thinking_config=thoughts)  # type: ignore[arg-type]
        self.contents: list[gt.Content] = []
        self._parts: list[gt.Part] = []

    def _add_user(self, question: str) -> None:
        self.contents.append(gt.Content(role="user", parts=[gt.Part(text=question)]))

    def _stream(self) -> Events:
        self._parts = []
        stream = self.client.models.generate_content_stream(model=GEMINI, contents=self.contents, config=self.config)
        for chunk in stream:
            content = chunk.candidates[0].content if chunk.candidates else None
            parts = list(content.parts or []) if content else []
            self._parts += parts
            yield "chunk", "".join(p.text or "" for p in parts if not p.thought)

    def _read(self, seen: Seen) -> None:
        seen.text = "".join(p.text or "" for p in self._parts if not p.thought)
        seen.thoughts = [p.text or "" for p in self._parts if p.thought]
        seen.calls = [(p.function_call.name, p.function_call.args) for p in self._parts if p.function_call]

    def _add_results(self, output: str) -> None:
        responses = [
            gt.Part(function_response=gt.FunctionResponse(name=p.function_call.name, response={"output": output}))
            for p in self._parts
            if p.function_call
        ]
        self.contents += [gt.Content(role="model", parts=self._parts), gt.Content(role="user", parts=responses)]


class ConverseStream(BotoDriver):
    name, api, error = "bedrock-converse_stream", "bedrock-converse", botocore.exceptions.EventStreamError

    def _add_user(self, question: str) -> None:
        self.messages.append({"role": "user", "content": [{"text": question}]})

    def _stream(self) -> Events:
        res = self.client.converse_stream(modelId=MODEL_ID, messages=self.messages, toolConfig=converse_tools())
        blocks: dict[int, dict[str, Any]] = {}
        self._final = {}
        for ev in self._tee(res["stream"]):
            ((kind, data),) = ev.items()
            i, text = data.get("contentBlockIndex"), ""
            if kind == "contentBlockStart":
                blocks[i] = {"toolUse": {**data["start"]["toolUse"], "input": ""}}
            elif kind == "contentBlockDelta" and "text" in data["delta"]:
                text = data["delta"]["text"]
                blocks.setdefault(i, {"text": ""})["text"] += text
            elif kind == "contentBlockDelta":
                blocks[i]["toolUse"]["input"] += data["delta"]["toolUse"]["input"]
            elif kind == "messageStop":
                self._final["stopReason"] = data["stopReason"]
            yield kind, text
        for block in blocks.values():
            if "toolUse" in block:
                block["toolUse"]["input"] = json.loads(block["toolUse"]["input"] or "{}")
        self._final["content"] = [blocks[i] for i in sorted(blocks)]

    def _read(self, seen: Seen) -> None:
        content = self._final["content"]
        seen.text = "".join(b.get("text", "") for b in content)
        seen.calls = [(b["toolUse"]["name"], b["toolUse"]["input"]) for b in content if "toolUse" in b]
        seen.stop = _stop(self._final.get("stopReason"), "tool_use", "end_turn")

    def _add_results(self, output: str) -> None:
        content = self._final["content"]
        self.messages.append({"role": "assistant", "content": content})
        uses = [b["toolUse"] for b in content if "toolUse" in b]
        results = [{"toolResult": {"toolUseId": u["toolUseId"], "content": [{"text": output}]}} for u in uses]
        self.messages.append({"role": "user", "content": results})


class InvokeStream(BotoDriver):
    name, api = "bedrock-invoke_model_with_response_stream", "bedrock-invoke"
    error = botocore.exceptions.EventStreamError

    def _add_user(self, question: str) -> None:
        self.messages.append({"role": "user", "content": question})

    def _stream(self) -> Events:
        body = json.dumps(invoke_body(self.messages, invoke_tools()))
        res = self.client.invoke_model_with_response_stream(modelId=MODEL_ID, body=body)
        events = []
        for ev in self._tee(res["body"]):
            event = json.loads(ev["chunk"]["bytes"])
            events.append(event)
            delta = event.get("delta") or {}
            yield event["type"], delta.get("text", "") if delta.get("type") == "text_delta" else ""
        self._final = anthropic_message(events)

    def _read(self, seen: Seen) -> None:
        content = self._final["content"]
        seen.text = "".join(b["text"] for b in content if b["type"] == "text")
        seen.calls = [(b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
        seen.stop = _stop(self._final["stop_reason"], "tool_use", "end_turn")

    def _add_results(self, output: str) -> None:
        content = self._final["content"]
        self.messages.append({"role": "assistant", "content": content})
        uses = [b for b in content if b["type"] == "tool_use"]
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": output} for b in uses]
        self.messages.append({"role": "user", "content": results})

    def _take(self) -> bytes:
        """The raw frames, plus the Anthropic events they carry base64-encoded (a grep must see those too)."""
        raw = super()._take()
        buffer = EventStreamBuffer()
        buffer.add_data(raw)
        decoded = [base64.b64decode(json.loads(m.payload).get("bytes", "")) for m in buffer if m.payload]
        return raw + b"".join(decoded)


SDKS: list[type[Driver]] = [AnthropicStream, ChatStream, ChatCreate, ResponsesStream, GeminiStream, ConverseStream,
                            InvokeStream]
each_sdk = pytest.mark.parametrize("sdk", SDKS, ids=[d.name for d in SDKS])


# --- checks -------------------------------------------------------------------------------------


def assert_no_phantom(raw: bytes, fake: FakeProvider) -> None:
    """Nothing the client received names the search tool or any phantom call the model made."""
    assert raw, "the client received nothing"
    assert SEARCH_TOOL.encode() not in raw
    phantom_ids = [c["id"] for r in fake.api_requests() for c in (r.reply or {}).get("calls", [])
                   if c["name"] == SEARCH_TOOL and c["id"]]
    assert not [i for i in phantom_ids if i.encode() in raw], phantom_ids


def assert_in_order(text: str, pieces: list[str]) -> None:
    positions = [text.find(p) for p in pieces]
    assert -1 not in positions and positions == sorted(positions), (text, pieces)


def statuses(fake: FakeProvider) -> list[int | None]:
    return [r.status for r in fake.api_requests()]


def search_then_call(*, delay: float | None = None) -> list[Rule]:
    return [
        search("weather forecast", text="Let me look that up.", not_offered=[TARGET], delay=delay),
        call(TARGET, FORECAST, text="Checking the forecast now.", delay=delay),
    ]


# =================================================================================================
# 1. every SDK parses the stitched stream
# =================================================================================================


@each_sdk
def test_no_search_passes_through(px: MitmDump, fake: FakeProvider, sdk: type[Driver]) -> None:
    fake.set_script([reply("Sunny all week in Paris.")])
    d = sdk(px)
    seen = d.ask(fresh("How is the weather?"))
    assert seen.text == "Sunny all week in Paris." and seen.calls == []
    assert seen.stop in ("end", None)
    assert statuses(fake) == [200]
    assert_no_phantom(d.raw, fake)  # the search tool went upstream, never back


@each_sdk
def test_one_search(px: MitmDump, fake: FakeProvider, sdk: type[Driver]) -> None:
    fake.set_script(search_then_call())
    d = sdk(px)
    seen = d.ask(fresh("What's the forecast for Paris?"))
    assert statuses(fake) == [200, 200]
    assert seen.calls == [(TARGET, FORECAST)] and seen.stop in ("tool", None)
    assert_in_order(seen.text, ["Let me look that up.", "Checking the forecast now."])
    assert_no_phantom(d.raw, fake)


@each_sdk
def test_two_searches(px: MitmDump, fake: FakeProvider, sdk: type[Driver]) -> None:
    fake.set_script([
        search("slack message", text="Let me look.", nth=1),
        search("weather forecast", text="Still looking.", nth=2, no_result_for=[]),
        call(TARGET, FORECAST, text="Checking the forecast now."),
    ])
    d = sdk(px)
    seen = d.ask(fresh("What's the forecast for Paris? Then tell Slack."))
    assert statuses(fake) == [200, 200, 200]
    assert seen.calls == [(TARGET, FORECAST)] and seen.stop in ("tool", None)
    assert_in_order(seen.text, ["Let me look.", "Still looking.", "Checking the forecast now."])
    assert_no_phantom(d.raw, fake)


@each_sdk
def test_mixed_turn_and_the_next_one(px: MitmDump, fake: FakeProvider, sdk: type[Driver]) -> None:
    """A round with a search and a real call is never re-forwarded; the client sees the real
    call, and its next turn (what it was shown plus the result) is accepted, with the found tools."""
    fake.set_script([
        calls((SEARCH_TOOL, {"query": "slack message"}), ("read_file", {"path": "notes.txt"}), text="Reading it.",
              times=1),
        reply("Done:", echo_last_result=True),
    ])
    d = sdk(px)
    seen = d.ask(fresh("Read notes.txt and post it to Slack"))
    assert statuses(fake) == [200]
    assert seen.calls == [("read_file", {"path": "notes.txt"})] and seen.stop in ("tool", None)
    assert seen.text == "Reading it."
    assert_no_phantom(d.raw, fake)
    nxt = d.answer("hello")
    assert statuses(fake) == [200, 200]
    assert nxt.text.startswith("Done:") and "hello" in nxt.text
    first, second = fake.api_requests()
    if DISPATCHER in (first.tool_names or []):  # call-through: tools[] never changes (the model searches again)
        assert second.tool_names == first.tool_names
    else:  # classic: the tools the mixed round found are loaded
        assert any(n.startswith("mcp__slack__") for n in second.tool_names or [])


@each_sdk
def test_upstream_error_in_round_two_raises(px: MitmDump, fake: FakeProvider, sdk: type[Driver]) -> None:
    """Round 1's text went out live; round 2 fails: the SDK raises the upstream's error."""
    fake.set_script([
        search("weather forecast", text="Let me look that up.", nth=1),
        fail(500, "overloaded", nth=2),
    ])
    d = sdk(px)
    with pytest.raises(sdk.error, match="overloaded"):
        d.ask(fresh("What's the forecast for Paris?"))
    assert statuses(fake) == [200, 500]
    assert "".join(text for _, _, text in d.seen.events) == "Let me look that up."
    assert_no_phantom(d.raw, fake)


# =================================================================================================
# 2. live: the client reads a round while the upstream still writes it
# =================================================================================================


@each_sdk
def test_each_round_reaches_the_client_before_it_ends_upstream(
    px: MitmDump, fake: FakeProvider, sdk: type[Driver]
) -> None:
    fake.set_script(search_then_call(delay=LIVE_DELAY))
    seen = sdk(px).ask(fresh("What's the forecast for Paris?"))
    first, second = fake.api_requests()
    assert first.finished_at is not None and second.finished_at is not None
    assert seen.text_at("Let me") < first.finished_at  # round 1 streamed, not buffered
    assert seen.text_at("Checking") < second.finished_at  # so did the re-forward
    assert seen.calls == [(TARGET, FORECAST)]


# =================================================================================================
# 3. no phantom trace: Responses objects echo the client's own tools and tool_choice
# =================================================================================================


def _responses_objects(r: httpx.Response, stream: bool) -> list[dict[str, Any]]:
    """Every response object the client got: each event's ``response``, or the JSON answer."""
    if not stream:
        return [r.json()]
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    return [e["response"] for e in events if "response" in e]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("searches", [0, 1])
def test_responses_echo_the_clients_tools(px: MitmDump, fake: FakeProvider, stream: bool, searches: int) -> None:
    fake.set_script(search_then_call() if searches else [reply("Sunny.")])
    choice = "auto"
    body = {"model": "gpt-5", "input": fresh("What's the forecast for Paris?"), "tools": R_TOOLS,
            "tool_choice": choice, "stream": stream, "store": False}
    with px.httpx_client() as http:
        r = http.post("https://api.openai.com/v1/responses", json=body, headers={"authorization": "Bearer sk-test"})
    assert r.status_code == 200, r.text
    assert len(fake.api_requests()) == 1 + searches
    assert SEARCH_TOOL in [t["name"] for t in fake.api_requests()[0].json["tools"]]  # the fake echoed this list
    objects = _responses_objects(r, stream)
    assert [(o["tools"], o["tool_choice"]) for o in objects] == [(R_TOOLS, choice)] * len(objects)
    assert_no_phantom(r.content, fake)


def test_a_live_stream_goes_upstream_with_the_host_header_a_buffered_flow_gets(
        fake: FakeProvider, tmp_path: Path) -> None:
    """Reverse mode with keep_host_header sends the client's Host upstream; the relay sends a
    stream upstream with that same Host, not one made from the URL: relayed or not, the
    upstream sees the request head mitmproxy would have sent."""
    fake.set_script([reply("Sunny.")])
    proxy = MitmDump(tmp_path, fake.url, script=ADDON_PATH, config=tool_search_config("bm25"),
                     extra_args=["--mode", f"reverse:{fake.url}", "--set", "keep_host_header=true"]).start()
    hosts = []
    try:
        with httpx.Client(base_url=proxy.url, timeout=60, trust_env=False) as http:
            for stream in (False, True):
                body = {"model": "gpt-5", "input": fresh("What's the forecast for Paris?"), "tools": R_TOOLS,
                        "stream": stream, "store": False}
                r = http.post("/v1/responses", json=body,
                              headers={"authorization": "Bearer sk-test", "host": "api.openai.com"})
                assert r.status_code == 200, r.text
                request = fake.api_requests()[-1]
                assert SEARCH_TOOL in [t["name"] for t in request.json["tools"]]  # processed, both
                hosts.append(request.header("host"))
    finally:
        proxy.stop()
    assert hosts == ["api.openai.com", "api.openai.com"]


# =================================================================================================
# 4. a client that goes away cancels the upstream request; the proxy keeps serving
# =================================================================================================


@each_sdk
def test_client_hang_up_cancels_the_upstream(px: MitmDump, fake: FakeProvider, sdk: type[Driver]) -> None:
    fake.set_script([search("weather forecast", text="Let me look that up for you right now.", delay=HANG_UP_DELAY)])
    d = sdk(px)
    seen = d.ask(fresh("What's the forecast for Paris?"), hang_up=True)
    assert len(seen.events) == 1
    (rec,) = fake.wait_for_requests(1)
    assert rec.client_gone, rec.error  # the proxy closed the upstream request ...
    assert rec.events_total is not None and len(rec.event_times) < rec.events_total  # ... before it was written
    fake.set_script([reply("Still here.")])
    again = sdk(px).ask(fresh("Are you there?"))
    assert again.text == "Still here."
    assert statuses(fake)[1:] == [200]  # no round 2 ever left for the abandoned turn
    assert_no_phantom(d.raw, fake)


# =================================================================================================
# 5. thinking and signatures survive the loop
# =================================================================================================

THOUGHTS = ["I need a weather tool first.", "The forecast tool fits this question.", "Now I can answer."]


def plan_thinking() -> list[Rule]:
    return [
        search("weather forecast", thinking=THOUGHTS[0], not_offered=[TARGET]),
        call(TARGET, FORECAST, thinking=THOUGHTS[1]),
        reply("Forecast:", echo_last_result=True, thinking=THOUGHTS[2]),
    ]


def run_thinking_turns(px: MitmDump, fake: FakeProvider, sdk: type[Driver]) -> tuple[Seen, Seen]:
    """A turn that thinks and searches, then the client's next turn carrying what it was shown;
    the fake validates every thinking block / signature / reasoning item it gets back."""
    fake.set_script(plan_thinking())
    d = sdk(px, thinking=True)
    seen = d.ask(fresh("What's the forecast for Paris?"))
    assert statuses(fake) == [200, 200], [r.error for r in fake.api_requests()]  # round 1's thinking replayed intact
    assert seen.calls == [(TARGET, FORECAST)]
    assert_no_phantom(d.raw, fake)
    nxt = d.answer("sunny")
    assert statuses(fake) == [200, 200, 200], fake.api_requests()[-1].error
    assert nxt.text.startswith("Forecast:") and "sunny" in nxt.text
    return seen, nxt


def test_anthropic_thinking_survives_the_loop(px: MitmDump, fake: FakeProvider) -> None:
    seen, nxt = run_thinking_turns(px, fake, AnthropicStream)
    assert seen.thoughts == THOUGHTS[:2]  # both rounds' signed blocks, unchanged
    assert nxt.thoughts == THOUGHTS[2:]
    _, reforward, next_turn = fake.api_requests()
    for rec in (reforward, next_turn):  # round 1 as the proxy replayed it, then as restored in the next turn
        first_block = rec.json["messages"][1]["content"][0]
        assert first_block == {"type": "thinking", "thinking": THOUGHTS[0],
                               "signature": thinking_signature(THOUGHTS[0])}


def test_gemini_thoughts_and_signatures_survive_the_loop(px: MitmDump, fake: FakeProvider) -> None:
    seen, _ = run_thinking_turns(px, fake, GeminiStream)
    assert seen.thoughts == THOUGHTS[:2]
    model_turn = fake.api_requests()[2].json["contents"][-2]
    (fc,) = [p for p in model_turn["parts"] if "functionCall" in p]
    # Upstream, the call is the dispatcher call the model made (call-through), with its signature.
    assert fc["functionCall"]["name"] == DISPATCHER and fc["functionCall"]["args"]["name"] == TARGET
    assert fc["thoughtSignature"]


def test_responses_reasoning_survives_the_loop(px: MitmDump, fake: FakeProvider) -> None:
    seen, _ = run_thinking_turns(px, fake, ResponsesStream)
    # Round 1's reasoning led only to the search: the client never sees it (replayed without
    # the search call it would be rejected), but the proxy's re-forward carries it.
    assert seen.thoughts == THOUGHTS[1:2]
    _, reforward, next_turn = fake.api_requests()
    assert [i["summary"][0]["text"] for i in reforward.json["input"] if i.get("type") == "reasoning"] == THOUGHTS[:1]
    # The next turn carries both: round 1's restored with its hidden exchange, round 2's as the client kept it.
    replayed = [i for i in next_turn.json["input"] if i.get("type") == "reasoning"]
    assert [i["summary"][0]["text"] for i in replayed] == THOUGHTS[:2] and replayed[1]["encrypted_content"]


# --- the fake's validation can fail: what the APIs reject, it rejects ----------------------------


def _post(fake: FakeProvider, path: str, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    return httpx.post(fake.url + path, json=body, headers=headers, timeout=30)


def test_fake_rejects_altered_thinking(fake: FakeProvider) -> None:
    fake.set_script([call("read_file", {"path": "a"}, thinking="Let me read it."), reply("ok")])
    headers = {"x-api-key": "k"}
    body: dict[str, Any] = {"model": "claude-x", "max_tokens": 4096, "tools": [READ_FILE],
                            "thinking": {"type": "enabled", "budget_tokens": 2048},
                            "messages": [{"role": "user", "content": "read a"}]}
    first = _post(fake, "/v1/messages", body, headers).json()
    thinking, use = first["content"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "x"}]}

    def turn(content: list[dict[str, Any]]) -> httpx.Response:
        return _post(fake, "/v1/messages", {**body, "messages": [*body["messages"],
                                                                {"role": "assistant", "content": content}, result]},
                     headers)

    assert turn([thinking, use]).status_code == 200
    for content, message in [
        ([{**thinking, "thinking": "Something else."}, use], "Invalid `signature`"),
        ([{k: v for k, v in thinking.items() if k != "signature"}, use], "signature: Field required"),
        ([use], "must start with a thinking block"),
    ]:
        r = turn(content)
        assert r.status_code == 400 and message in r.json()["error"]["message"], r.text


def test_fake_rejects_altered_reasoning(fake: FakeProvider) -> None:
    fake.set_script([call("read_file", {"path": "a"}, thinking="Let me read it."), reply("ok")])
    headers = {"authorization": "Bearer sk-test"}
    body: dict[str, Any] = {"model": "gpt-5", "tools": [r_tool(READ_FILE)], "store": False,
                            "input": [{"role": "user", "content": "read a"}]}
    reasoning, fc = _post(fake, "/v1/responses", body, headers).json()["output"]
    output = {"type": "function_call_output", "call_id": fc["call_id"], "output": "x"}

    def turn(items: list[dict[str, Any]]) -> httpx.Response:
        return _post(fake, "/v1/responses", {**body, "input": [*body["input"], *items, output]}, headers)

    assert turn([reasoning, fc]).status_code == 200
    forged = base64.urlsafe_b64encode(b"\0" * 32 + b'{"id":"rs_x","next":"x"}').decode()
    for items, status, message in [
        ([{**reasoning, "encrypted_content": forged}, fc], 400, "could not be verified"),
        ([{**reasoning, "id": "rs_other"}, fc], 400, "could not be verified"),
        ([{k: v for k, v in reasoning.items() if k != "encrypted_content"}, fc], 404, "not persisted"),
        ([fc, reasoning], 400, "without its required following item"),
    ]:
        r = turn(items)
        assert r.status_code == status and message in r.json()["error"]["message"], r.text
