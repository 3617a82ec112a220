"""Smoke tests of the e2e rig itself: plain mitmdump (no tool-discovery addon) in front of
the fake provider, driven by the real anthropic / openai SDKs over HTTPS + map-remote."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import MitmDump
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, Script, Usage, call, calls, fail, reply, search

WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SEARCH = {
    "name": SEARCH_TOOL,
    "description": "Search for more tools.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
}
OAI_WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER["input_schema"]}}
LONG_TEXT = " ".join(f"word{i}" for i in range(40))

# A throwaway mitmproxy script: declares the addon's option (so --set tool_discovery_config
# is accepted), logs the config it points to, and streams SSE responses through.
RIG_ADDON = textwrap.dedent(
    """
    import logging
    from typing import Optional
    from mitmproxy import ctx

    class Rig:
        def load(self, loader):
            loader.add_option("tool_discovery_config", Optional[str], None, "config path")

        def configure(self, updated):
            path = ctx.options.tool_discovery_config
            if "tool_discovery_config" in updated and path:
                logging.warning("rig config: %s", open(path).read().strip())

        def responseheaders(self, flow):
            if "text/event-stream" in flow.response.headers.get("content-type", ""):
                flow.response.stream = True

        def done(self):
            logging.warning("rig done")

    addons = [Rig()]
    """
)


@pytest.fixture(scope="module")
def addon_script() -> None:
    """This module runs plain mitmdump."""
    return None


@pytest.fixture(scope="module")
def rig_addon(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rigaddon") / "rig_addon.py"
    path.write_text(RIG_ADDON)
    return path


@pytest.fixture(scope="module")
def streaming_mitm(
    fake_provider: FakeProvider, rig_addon: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MitmDump]:
    """A second proxy for the module whose script streams SSE through (``flow.response.stream``)."""
    proxy = MitmDump(tmp_path_factory.mktemp("mitm"), fake_provider.url, script=rig_addon, name="streaming")
    yield proxy.start()
    proxy.stop()


# --- plain answers through the proxy -------------------------------------------------------


def test_anthropic_message(anthropic_client: anthropic.Anthropic, fake: FakeProvider) -> None:
    fake.set_script([reply("Hi there.", usage=Usage(11, 3))])
    msg = anthropic_client.messages.create(
        model="claude-test", max_tokens=64, tools=[WEATHER], messages=[{"role": "user", "content": "hello"}]
    )
    assert msg.content[0].text == "Hi there."
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (11, 3)
    rec = fake.last_request()
    assert (rec.method, rec.path, rec.api, rec.status) == ("POST", "/v1/messages", "anthropic", 200)
    assert "sk-ant-test" in (rec.header("x-api-key") or rec.header("authorization") or "")  # SDK 2.x: Bearer
    assert rec.json["messages"] == [{"role": "user", "content": "hello"}]
    assert rec.tool_names == ["get_weather"]
    assert json.loads(rec.body) == rec.json


def test_anthropic_stream_and_beta_query(anthropic_client: anthropic.Anthropic, fake: FakeProvider) -> None:
    fake.set_script([reply("Streaming works fine.", usage=Usage(20, 5))])
    with anthropic_client.messages.stream(
        model="claude-test",
        max_tokens=64,
        messages=[{"role": "user", "content": "hello"}],
        extra_query={"beta": "true"},  # as Claude Code sends it
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Streaming works fine."
    assert final.usage.output_tokens == 5
    rec = fake.last_request()
    assert rec.path == "/v1/messages" and rec.query_params == {"beta": ["true"]}
    assert rec.json["stream"] is True
    assert len(rec.event_times) >= 8


def test_openai_chat(openai_client: openai.OpenAI, fake: FakeProvider) -> None:
    fake.set_script([reply("Hello from chat.", usage=Usage(7, 4))])
    res = openai_client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "hi"}])
    assert res.choices[0].message.content == "Hello from chat."
    assert res.usage is not None and res.usage.total_tokens == 11
    rec = fake.last_request()
    assert (rec.path, rec.api) == ("/v1/chat/completions", "openai-chat")
    assert rec.header("authorization") == "Bearer sk-test"


def test_openai_chat_stream_with_usage(openai_client: openai.OpenAI, fake: FakeProvider) -> None:
    fake.set_script([reply("Chunked reply here.", usage=Usage(9, 6))])
    chunks = list(
        openai_client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Chunked reply here."
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 9


# --- the scripted model through a full tool loop ------------------------------------------


def test_anthropic_tool_loop(anthropic_client: anthropic.Anthropic, fake: FakeProvider) -> None:
    fake.set_script(
        [
            search("weather", text="Let me look."),
            call("get_weather", {"city": "Paris"}),
            reply("Done.", echo_last_result=True),
        ]
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Paris?"}]
    results = {SEARCH_TOOL: "found get_weather", "get_weather": "22C sunny"}
    for _ in range(5):
        msg = anthropic_client.messages.create(model="m", max_tokens=64, tools=[WEATHER, SEARCH], messages=messages)
        if msg.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": results[b.name]}
                    for b in msg.content
                    if b.type == "tool_use"
                ],
            }
        )
    assert msg.content[0].text == "Done.\nlast tool result: 22C sunny"
    recs = fake.api_requests()
    assert [r.reply["calls"][0]["name"] if r.reply["calls"] else None for r in recs] == [
        SEARCH_TOOL,
        "get_weather",
        None,
    ]
    assert recs[0].reply["text"] == "Let me look."


def test_openai_mixed_turn(openai_client: openai.OpenAI, fake: FakeProvider) -> None:
    oai_search = {"type": "function", "function": {"name": SEARCH_TOOL, "parameters": SEARCH["input_schema"]}}
    fake.set_script(
        [calls((SEARCH_TOOL, {"query": "w"}), ("get_weather", {"city": "Oslo"})), reply("ok", echo_last_result=True)]
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    res = openai_client.chat.completions.create(model="m", messages=messages, tools=[OAI_WEATHER, oai_search])
    tool_calls = res.choices[0].message.tool_calls or []
    assert [tc.function.name for tc in tool_calls] == [SEARCH_TOOL, "get_weather"]
    assert res.choices[0].finish_reason == "tool_calls"
    messages.append(res.choices[0].message.model_dump(exclude_none=True))
    messages += [
        {"role": "tool", "tool_call_id": tc.id, "content": f"result of {tc.function.name}"} for tc in tool_calls
    ]
    res = openai_client.chat.completions.create(model="m", messages=messages, tools=[OAI_WEATHER, oai_search])
    assert res.choices[0].message.content == "ok\nlast tool result: result of get_weather"


# --- validation like the real APIs --------------------------------------------------------


def test_anthropic_rejects_missing_tool_result(anthropic_client: anthropic.Anthropic, fake: FakeProvider) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": "never mind"},
    ]
    with pytest.raises(anthropic.BadRequestError, match="tool_use` ids were found without `tool_result`"):
        anthropic_client.messages.create(model="m", max_tokens=64, tools=[WEATHER], messages=messages)
    assert fake.last_request().status == 400


def test_openai_rejects_orphan_tool_message(openai_client: openai.OpenAI, fake: FakeProvider) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_x", "content": "r"}]
    with pytest.raises(openai.BadRequestError, match="must be a response to a preceeding message"):
        openai_client.chat.completions.create(model="m", messages=messages, tools=[OAI_WEATHER])


DROP: Any = object()
A_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]}
A_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"model": DROP}, "model: Field required"),
        ({"max_tokens": DROP}, "max_tokens: Field required"),
        ({"messages": DROP}, "messages: Field required"),
        ({"tools": [WEATHER, WEATHER]}, "Tool names must be unique"),
        ({"tools": [{**WEATHER, "name": "bad name!"}]}, "should match pattern"),
        ({"tools": [{**WEATHER, "name": "x" * 65}]}, "should match pattern"),
        ({"tools": [{"name": "t"}]}, "input_schema: Field required"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "'nope' not found in tools"),
        ({"messages": [{"role": "user", "content": "q"}, A_USE]}, "without `tool_result`"),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    A_USE,
                    {"role": "user", "content": [{"type": "text", "text": "x"}, A_RESULT]},
                ]
            },
            "must come first",
        ),
        ({"messages": [{"role": "user", "content": [A_RESULT]}]}, "unexpected `tool_use_id`"),
    ],
)
def test_anthropic_validation(fake: FakeProvider, body: dict[str, Any], error: str) -> None:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "q"}]}
    full = {k: v for k, v in {**base, **body}.items() if v is not DROP}
    res = httpx.post(f"{fake.url}/v1/messages", json=full, headers={"x-api-key": "k"})
    assert res.status_code == 400, res.text
    assert res.json()["type"] == "error" and res.json()["error"]["type"] == "invalid_request_error"
    assert error in res.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"tools": [OAI_WEATHER, OAI_WEATHER]}, "Tool names must be unique"),
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "function.name"),
        (
            {"tools": [OAI_WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "'x' is not in 'tools'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                        ],
                    },
                    {"role": "user", "content": "q2"},
                ]
            },
            "did not have response messages: c1",
        ),
        ({"stream_options": {"include_usage": True}}, "only allowed when 'stream' is enabled"),
    ],
)
def test_openai_validation(fake: FakeProvider, body: dict[str, Any], error: str) -> None:
    full = {"model": "m", "messages": [{"role": "user", "content": "q"}], **body}
    res = httpx.post(f"{fake.url}/v1/chat/completions", json=full, headers={"authorization": "Bearer k"})
    assert res.status_code == 400, res.text
    assert res.json()["error"]["type"] == "invalid_request_error"
    assert error in res.json()["error"]["message"]


def test_auth_and_invalid_json_through_proxy(mitm: MitmDump, fake: FakeProvider) -> None:
    with mitm.httpx_client() as http:
        res = http.post("https://api.anthropic.com/v1/messages", json={"model": "m"})
        assert res.status_code == 401 and res.json()["error"]["type"] == "authentication_error"
        res = http.post(
            "https://api.openai.com/v1/chat/completions", content=b"{nope", headers={"authorization": "Bearer k"}
        )
        assert res.status_code == 400 and "could not parse the JSON" in res.json()["error"]["message"]
    assert [r.status for r in fake.requests] == [401, 400]
    assert fake.requests[1].body == b"{nope"


def test_scripted_failures(anthropic_client: anthropic.Anthropic, fake: FakeProvider) -> None:
    fake.set_script([fail(500, nth=1), fail(529, "busy", contains="MARKER"), reply("fine")])

    def ask(text: str) -> Any:
        return anthropic_client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": text}])

    with pytest.raises(anthropic.InternalServerError):
        ask("first")
    assert ask("second").content[0].text == "fine"
    with pytest.raises(anthropic.APIStatusError, match="busy") as exc:
        ask("has MARKER")
    assert exc.value.status_code == 529
    assert [r.status for r in fake.requests] == [500, 200, 529]


# --- streaming is incremental (or visibly buffered) ---------------------------------------


def _first_event_time(client: anthropic.Anthropic) -> float:
    with client.messages.stream(model="m", max_tokens=5, messages=[{"role": "user", "content": "q"}]) as stream:
        first = None
        for _ in stream:
            first = first or time.monotonic()
    assert first is not None
    return first


def test_stream_reaches_client_incrementally(streaming_mitm: MitmDump, fake: FakeProvider) -> None:
    fake.set_script([reply(LONG_TEXT, delay=0.2)])
    with streaming_mitm.anthropic() as client:
        first = _first_event_time(client)
    rec = fake.last_request()
    # the client saw its first event before the fake even began writing its last one
    assert first < rec.event_times[-1], (first, rec.event_times)


def test_plain_mitmdump_buffers_streams(anthropic_client: anthropic.Anthropic, fake: FakeProvider) -> None:
    """The detector discriminates: without stream=True mitmproxy delivers everything at the end."""
    fake.set_script([reply(LONG_TEXT, delay=0.05)])
    first = _first_event_time(anthropic_client)
    assert first > fake.last_request().event_times[-1]


def test_openai_stream_incremental(streaming_mitm: MitmDump, fake: FakeProvider) -> None:
    fake.set_script([reply(LONG_TEXT, delay=0.2)])
    with streaming_mitm.openai() as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], stream=True)
        first = None
        for _ in stream:
            first = first or time.monotonic()
    assert first is not None and first < fake.last_request().event_times[-1]


# --- rig features: config option, restart, env for subprocess agents, control endpoints ---


def test_config_option_and_restart(mitm_factory: Callable[..., MitmDump], rig_addon: Path, fake: FakeProvider) -> None:
    proxy = mitm_factory(script=rig_addon, config="mode: first\n")
    proxy.wait_for_log(r"rig config: mode: first")
    assert proxy.config_path is not None and proxy.config_path.read_text() == "mode: first\n"
    port, ca = proxy.port, proxy.ca_path.read_bytes()
    with proxy.anthropic() as client:
        assert client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "a"}]).content
        mark = proxy.log_offset()
        proxy.restart(config="mode: second\n")
        proxy.wait_for_log(r"rig done", since=0)
        proxy.wait_for_log(r"rig config: mode: second", since=mark)
        assert proxy.port == port and proxy.ca_path.read_bytes() == ca
        assert client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "b"}]).content
    assert len(fake.api_requests()) == 2


def test_broken_script_fails_fast(mitm_factory: Callable[..., MitmDump], tmp_path: Path) -> None:
    """A script that fails to import makes mitmdump exit right after its listening line."""
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('addon is broken')\n")
    with pytest.raises(RuntimeError, match="addon is broken"):
        mitm_factory(script=broken)


def test_agent_env_subprocess(agent_env: dict[str, str], fake: FakeProvider) -> None:
    fake.set_script([reply("from a subprocess")])
    code = (
        "import anthropic; c = anthropic.Anthropic(); "
        "print(c.messages.create(model='m', max_tokens=5, messages=[{'role':'user','content':'x'}]).content[0].text)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=agent_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "from a subprocess"
    rec = fake.last_request()
    assert agent_env["ANTHROPIC_API_KEY"] in (rec.header("x-api-key") or rec.header("authorization") or "")


@pytest.mark.parametrize(
    "url",
    [
        "https://api.anthropic.com/v1/messages/count_tokens",
        "https://api.openai.com/v1/nonexistent",
        "https://generativelanguage.googleapis.com/v1beta/nope?alt=sse",
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-x/nope",
    ],
)
def test_map_remote_routes_every_provider_host(mitm: MitmDump, fake: FakeProvider, url: str) -> None:
    """Every provider host reaches the fake; paths no API serves get a recorded 404."""
    with mitm.httpx_client() as http:
        assert http.post(url, json={}).status_code == 404
    rec = fake.last_request()
    assert (rec.path, rec.query, rec.api) == (httpx.URL(url).path, httpx.URL(url).query.decode(), None)


def test_script_json_round_trip() -> None:
    rules = [
        search("q"),
        calls(("a", {"x": 1}), ("b", {}), text="t", delay=0.0),
        fail(503, nth=2, times=1),
        reply("r", echo_last_result=True, usage=Usage(1, 2)),
    ]
    again = Script.from_dict(json.loads(json.dumps(Script(rules).to_dict())))
    assert again.rules == rules
    with pytest.raises(ValueError, match="unknown rule keys"):
        Script.from_dict({"rules": [{"txt": "typo"}]})
    with pytest.raises(ValueError, match="unknown script keys"):
        Script.from_dict({"rule": []})


def test_control_endpoints(fake: FakeProvider) -> None:
    script = {"rules": [{"text": "scripted over HTTP", "usage": {"input_tokens": 1, "output_tokens": 2}}]}
    with httpx.Client(base_url=fake.url, trust_env=False) as http:
        assert http.post("/_script", json=script).json() == {"ok": True}
        assert http.post("/_script", json={"rules": [{"bogus": 1}]}).status_code == 400
        res = http.post(
            "/v1/messages?beta=true",
            headers={"x-api-key": "k"},
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        )
        assert res.json()["content"][0]["text"] == "scripted over HTTP"
        reqs = http.get("/_requests").json()["requests"]
        assert [(r["path"], r["query"], r["status"]) for r in reqs] == [("/v1/messages", "beta=true", 200)]
        assert http.post("/_reset").json() == {"ok": True}
        assert http.get("/_requests").json() == {"requests": []}
        assert http.post("/v1/unknown", json={}).status_code == 404
