"""Planning pays per request for what is the request's own, not for its catalog again: the
tools a catalog's first request decoded are not decoded by later ones, nothing of a body is
decoded twice, and what the definitions alone decide is worked out once per catalog."""

import json

import pytest

from tooldisco.apis import catalogs, splice
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.bedrock.adapter import ConverseAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.config import parse
from tooldisco.core import jsonspan
from tooldisco.core.types import Unsupported
from tooldisco.engine.engine import Engine
from tooldisco.policy import client_search, deferral

from tests.support.catalog import anthropic_tools, openai_tools

TOOLS = anthropic_tools(300)


def body(text: str, tools=TOOLS, session: int = 0, turns: int = 1, model: str = "m") -> bytes:
    earlier = [{"role": role, "content": f"turn {i}: " + "words of a long conversation " * 20}
               for i in range(turns) for role in ("user", "assistant")]
    return json.dumps({"model": model, "max_tokens": 9, "tools": tools, "messages": [
        {"role": "user", "content": f"conversation {session}"}, {"role": "assistant", "content": "ok"}, *earlier,
        {"role": "user", "content": text}]}).encode()


def forget_catalogs() -> None:
    """A test starts with none of the process's catalogs (``apis.catalogs.CATALOGS``)."""
    catalogs.CATALOGS.clear()


@pytest.fixture
def engine(tmp_path):
    cfg = {"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "search": {"backend": "bm25"},
                                        "defer": {"upfront": 4}}},
           "sessions": {"dir": str(tmp_path / "s")}, "telemetry": {"enabled": False}}
    forget_catalogs()
    e = Engine(parse(cfg))
    yield e
    e.close()


class Counting:
    """Characters handed to the JSON decoder: ``json.loads`` texts and ``raw_decode`` spans."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chars = 0
        loads, decoder = json.loads, jsonspan._DECODER
        counting = self

        def counted_loads(s, *args, **kwargs):
            counting.chars += len(s)
            return loads(s, *args, **kwargs)

        class Decoder:
            def raw_decode(self, text, i=0):
                value, end = decoder.raw_decode(text, i)
                counting.chars += end - i
                return value, end

        monkeypatch.setattr(json, "loads", counted_loads)
        monkeypatch.setattr(jsonspan, "_DECODER", Decoder())


@pytest.mark.parametrize("model", ["m", "claude-sonnet-4-5"])  # classic deferral; native (the marked catalog)
def test_a_catalog_seen_before_is_not_decoded_again_and_nothing_of_the_body_twice(engine, monkeypatch, model) -> None:
    adapter = AnthropicAdapter()
    headers = {"x-api-key": "sk-cost"}
    first = engine.prepare(adapter, headers, body("post the summary to slack", model=model))
    assert first.context is not None  # deferred: the planning ran in full
    assert first.record.deferral == ("native" if model != "m" else "classic")
    later = body("what is the weather in Paris", session=1, turns=40, model=model)  # a conversation, decoded once too
    tools_text = len(json.dumps(TOOLS))
    count = Counting(monkeypatch)
    prepared = engine.prepare(adapter, headers, later)
    assert prepared.context is not None
    # The rest of the body once (the session's state, a few hundred characters, besides).
    assert count.chars <= len(later) - tools_text + 2_000, (count.chars, len(later), tools_text)


def test_what_the_definitions_alone_decide_is_worked_out_once_per_catalog(engine, monkeypatch) -> None:
    calls = []
    real = client_search.client_search
    monkeypatch.setattr(deferral, "client_search", lambda *a: calls.append(1) or real(*a))
    adapter = AnthropicAdapter()
    for i in range(3):
        engine.prepare(adapter, {"x-api-key": "sk-cost"}, body("post the summary to slack", session=i))
    assert len(calls) == 1


def test_the_tools_found_by_their_text_are_the_root_members_a_parser_reads() -> None:
    """The catalog found from the end of the body is the root's ``tools`` (the last duplicate),
    never a nested object's member carrying a cached catalog's very text, nor one written with
    escapes; and the rest of the body decodes as it is."""
    forget_catalogs()
    adapter = OpenAIChatAdapter()
    a, b = openai_tools(40), openai_tools(60)[40:]
    text_b = json.dumps(b)
    cases = [
        {"model": "m", "tools": a, "messages": [{"role": "user", "content": "hi"}]},
        # b is cached by this one, then appears nested after the root's a
        {"model": "m", "tools": b, "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "tools": a, "messages": [{"role": "user", "content": "hi"},
                                                {"role": "assistant", "content": None, "tool_calls": [
                                                    {"id": "c", "type": "function",
                                                     "function": {"name": "x", "arguments": "{}"}}]},
                                                {"role": "tool", "tool_call_id": "c", "content": "ok"}],
         "metadata": {"tools": b}},
    ]
    texts = [json.dumps(c) for c in cases]
    # a duplicate root member: parsers keep the last one
    texts.append('{"model":"m","tools":' + json.dumps(a) + ',"messages":[{"role":"user","content":"hi"}],"tools":'
                 + text_b + "}")
    # the root's member written with an escape, a nested literal one holding a cached text
    texts.append('{"model":"m","\\u0074ools":' + json.dumps(a) + ',"messages":[{"role":"user","content":"hi"}],'
                 '"x":{"tools":' + text_b + "}}")
    for text in texts:
        with jsonspan.reusing(text):
            view = adapter.parse(text)
            names = [t.name for t in view.tools]
            assert names == [t["function"]["name"] for t in json.loads(text)["tools"]], text[:80]
            assert catalogs.tool_spans(text, ["tools"]) == [json.dumps(t) for t in json.loads(text)["tools"]]


def test_a_catalog_with_unusable_definitions_is_refused_on_every_request() -> None:
    forget_catalogs()
    tools = openai_tools(30)
    text = json.dumps({"model": "m", "tools": tools + tools[:1], "messages": [{"role": "user", "content": "hi"}]})
    for _ in range(2):  # found again by its text: refused again
        with jsonspan.reusing(text), pytest.raises(Unsupported, match="duplicate tool name"):
            OpenAIChatAdapter().parse(text)


def test_the_conversation_decoded_with_the_tools_is_the_root_members() -> None:
    """The history decoded element by element in the parse is the root's ``messages`` (not a
    tool schema's property or a nested member of that name), and the spans it leaves for the
    restore are the ones a plain walk finds."""
    forget_catalogs()
    tools = anthropic_tools(20)
    tools[0] = {**tools[0], "input_schema": {"type": "object", "properties": {"messages": {"type": "array"}},
                                             "examples": {"messages": [1, 2]}}}
    nested = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": tools[1]["name"],
                                                "input": {"messages": [{"a": 1}]}}]}
    texts = [json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}, nested,
                                                    {"role": "user", "content": "again"}], "tools": tools}),
             json.dumps({"model": "m", "tools": tools, "messages": [{"role": "user", "content": "hi"}, nested,
                                                                    {"role": "user", "content": "again"}]}),
             json.dumps({"model": "m", "tools": tools, "messages": [{"role": "user", "content": "hi"}],
                         "metadata": {"messages": [{"role": "user", "content": "not this"}]}})]
    for text in texts:
        plain = json.loads(text)
        spans = jsonspan.elements(text, jsonspan.find(text, ["messages"]))
        with jsonspan.reusing(text):
            data, _ = AnthropicAdapter().load(text)
            assert data["messages"] == plain["messages"]
            assert jsonspan.find_elements(text, ["messages"]) == spans


def test_bedrock_converse_finds_its_nested_tools_by_their_text_too(monkeypatch) -> None:
    """``toolConfig`` (its ``tools`` and ``toolChoice``) is Converse's catalog: found again by
    its text, not decoded, and the forwarded body is the one the plain way makes."""
    forget_catalogs()
    adapter = ConverseAdapter()
    specs = [{"toolSpec": {"name": t["name"], "description": t["description"],
                           "inputSchema": {"json": t["input_schema"]}}} for t in TOOLS[:80]]
    config = {"tools": [*specs, {"cachePoint": {"type": "default"}}], "toolChoice": {"tool": {"name": specs[3]["toolSpec"]["name"]}}}
    text = json.dumps({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "toolConfig": config,
                       "inferenceConfig": {"maxTokens": 9}})
    keep = [json.dumps(s) for s in specs[:5]]
    plain = adapter.with_tools(text, keep)  # no parse before it: located the plain way
    with jsonspan.reusing(text):
        first = adapter.parse(text)
    count = Counting(monkeypatch)
    with jsonspan.reusing(text):
        view = adapter.parse(text)
        forwarded = adapter.with_tools(text, keep)
    assert count.chars <= len(text) - len(json.dumps(config)) + 200
    assert [t.name for t in view.tools] == [t.name for t in first.tools] == [s["toolSpec"]["name"] for s in specs]
    assert view.forced == {specs[3]["toolSpec"]["name"]}
    assert forwarded == plain


def test_marking_a_definition_for_native_deferral_decodes_nothing(monkeypatch) -> None:
    """Native deferral marks most of a catalog on every request: the mark is appended to the
    definition's text as ``jsonspan.set_member`` would write it, without decoding it (a cache of
    marked texts cannot hold a large catalog's)."""
    raws = [json.dumps({**t, "description": f"{t['description']} ({i})"}) for i, t in enumerate(anthropic_tools(50))]
    raws += ['{}', '{ }', '{"name":"x","defer_loading":false}', '{"name":"y","description":"a \\"defer_loading\\" word"}']
    expected = [jsonspan.set_member(r, jsonspan.root(r), "defer_loading", "true") for r in raws]
    count = Counting(monkeypatch)
    marked = [splice.deferred_text(r) for r in raws[:50]]
    assert count.chars == 0
    assert marked + [splice.deferred_text(r) for r in raws[50:]] == expected
