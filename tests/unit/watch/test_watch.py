"""What the addon shows in mitmweb and the console: comment, metadata, the tools contentview, and
the proxy's own rounds as flows; with mitmproxy's own test helpers and its real view addon."""

import asyncio
import json
import sys
from pathlib import Path

from aiohttp import web
from mitmproxy import contentviews
from mitmproxy.addons.view import View
from mitmproxy.test import taddons, tflow, tutils

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "addon"))
from tooldisco.net.upstream import UpstreamClient, UpstreamOptions  # noqa: E402
from tooldisco.watch import rounds, summary, tools  # noqa: E402
from tooldisco.watch.view import FLOW_KEY  # noqa: E402

from tests.support.catalog import anthropic_tools  # noqa: E402
from tests.unit.glue.chain import Chain  # noqa: E402

SEARCH = "gateway_search_tools"
KEY = "sk-ant-api03-secretsecretsecretsecret"


def config(tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / "cfg.yaml"
    p.write_text(f"""
pipes: {{tool_discovery: {{enabled: true, strategy: tool-search, defer: {{upfront: 2}}}}}}
sessions: {{dir: {tmp_path}/s}}
telemetry: {{path: {tmp_path}/t.jsonl}}
""")
    return str(p)


def message(content, stop="end_turn", id_="msg_1"):
    return {"id": id_, "type": "message", "role": "assistant", "model": "m", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


FIRST = message([{"type": "tool_use", "id": "toolu_1", "name": SEARCH, "input": {"query": "post slack message"}}],
                "tool_use")
FINAL = message([{"type": "text", "text": "posted"}], id_="msg_2")


def client_flow():
    body = json.dumps({"model": "m", "max_tokens": 5, "tools": anthropic_tools(60),
                       "messages": [{"role": "user", "content": "tell the team on the chat"}]}).encode()
    req = tutils.treq(host="api.anthropic.com", port=443, scheme=b"https", path=b"/v1/messages", method=b"POST",
                      headers=[(b"content-type", b"application/json"), (b"x-api-key", KEY.encode())], content=body)
    return tflow.tflow(req=req)


async def run(tmp_path, with_view: bool):
    """One buffered tool-search flow whose model searches once; returns the flow, the view (or
    None) and every body the upstream received from the proxy's own client."""
    received = []

    async def upstream(request: web.Request) -> web.Response:
        received.append((await request.read(), {k.lower(): v for k, v in request.headers.items()}))
        return web.json_response(FINAL)

    app = web.Application()
    app.router.add_post("/v1/messages", upstream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    chain = Chain()
    view = View()
    with taddons.context(*([view] if with_view else []), *chain.addons) as tctx:
        tctx.configure(chain.options, tool_discovery_config=config(tmp_path / ("v" if with_view else "n")))
        chain.running()
        client = chain.upstream._client = UpstreamClient(UpstreamOptions())
        f = client_flow()
        if with_view:
            view.add([f])
        chain.requestheaders(f)
        await chain.request(f)
        forwarded = f.request.content
        f.request.url = f"http://127.0.0.1:{port}/v1/messages"  # where the proxy's own rounds go (map_remote)
        f.response = tutils.tresp(content=json.dumps(FIRST).encode(),
                                  headers=[(b"content-type", b"application/json")])
        await chain.response(f)
        chain.watch.response(f)  # the watcher's hook, at the chain's end
        await asyncio.gather(*chain.watch._tasks)
        chain.engine.telemetry.flush()
        await client.retire()
    await runner.cleanup()
    return f, (view if with_view else None), forwarded, received


async def test_nothing_changes_on_the_wire_with_the_view(tmp_path, caplog):
    caplog.set_level("INFO", logger="tool_discovery")
    plain, _, forwarded_plain, received_plain = await run(tmp_path, with_view=False)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tool discovery: POST")]
    assert said == ["tool discovery: POST api.anthropic.com/v1/messages [anthropic] · 60 tools → 2 loaded, "
                    "58 deferred (search) · classic · 1 search, 3 hits: mcp__slack__post_message, "
                    "mcp__slack__add_reaction, mcp__slack__list_channels · ~3,852 tok saved (tool tokens ~4,186 sent "
                    "→ ~334 in the prompt) · " + said[0].rpartition(" · ")[2]]  # mitmdump's line, even without a view
    assert "post slack message" not in said[0] and KEY not in said[0]  # no query text, no key
    watched, _, forwarded_watched, received_watched = await run(tmp_path, with_view=True)
    assert forwarded_plain == forwarded_watched  # what went upstream first
    assert [b for b, _ in received_plain] == [b for b, _ in received_watched]  # every re-forward
    assert plain.response.content == watched.response.content  # what the client got
    assert json.loads(watched.response.content)["content"] == [{"type": "text", "text": "posted"}]
    assert FLOW_KEY not in plain.metadata and not plain.comment  # mitmdump: nothing of this


async def test_the_client_flow_says_what_the_addon_did(tmp_path):
    f, view, _, _ = await run(tmp_path, with_view=True)
    info = f.metadata[FLOW_KEY]
    record = info["record"]
    assert record["strategy"] == "tool-search" and record["searches"][0]["query"] == "post slack message"
    said = summary.FlowSummary.of(record)
    assert "mcp__slack__post_message" in said.found and said.mode == "classic"
    turn = info["turn"]
    assert turn == rounds.tag(record.get("id") or f.id) and len(turn) == 7
    assert f.comment.startswith(f"{turn} 60→2 −{summary._short(said.saved)} tok · classic · 60 tools → 2 loaded, 58 ")
    assert f.comment.endswith(f" · this turn's flows: ~comment {turn}")
    assert "search 'post slack message' → mcp__slack__post_message" in f.comment and "3 found" in f.comment
    assert "2 upstream rounds" in f.comment and f.marked == ":mag:"
    rows = [tools.Row.of(r) for r in info["tools"]]
    status = {r.name: r.status for r in rows}
    assert status[SEARCH] == tools.SEARCH_TOOL and status["mcp__slack__post_message"] == tools.DEFERRED
    counts = tools.counts(rows)
    assert counts[tools.LOADED] == record["kept_tools"] == 2 and counts[tools.DEFERRED] == record["deferred_tools"]
    assert counts[tools.FOUND] == len(said.found) == 3
    assert sum(r.prompt_tokens or 0 for r in rows) == record["tool_tokens_after"] == record["tool_tokens_wire"]
    shown = contentviews.prettify_message(f.request, f)
    assert shown.view_name == "Tool discovery"
    assert "tools: what the client sent (this body), and what went upstream in round 1" in shown.text
    assert "search 1: 'post slack message'" in shown.text
    assert f"this turn's flows: the client's and its 2 rounds\n  list them: ~comment {turn}" in shown.text
    answer = contentviews.prettify_message(f.response, f)
    assert "no tool calls in what the client got" in answer.text


async def test_each_round_is_a_flow_of_its_own_linked_and_redacted(tmp_path):
    f, view, forwarded, received = await run(tmp_path, with_view=True)
    own = [x for x in view if rounds.ROUND_KEY in x.metadata]
    assert [x.metadata[rounds.ROUND_KEY]["round"] for x in own] == [1, 2]
    assert own == [x for x in view if x is not f][:2] and list(view).index(f) < list(view).index(own[0])
    assert f.metadata[FLOW_KEY]["rounds"] == [x.id for x in own]
    first, second = own
    assert all(x.metadata[rounds.ROUND_KEY]["client_flow"] == f.id and x.marked == rounds.MARK for x in own)
    turn = f.metadata[FLOW_KEY]["turn"]
    assert first.comment.startswith(f"{turn} ⚙ round 1/2: the rewritten request") and turn in second.comment
    assert first.request.content == forwarded and json.loads(first.response.content) == FIRST
    assert second.request.content == received[0][0] and json.loads(second.response.content) == FINAL
    assert received[0][1]["x-api-key"] == KEY  # the real re-forward carries the key...
    assert second.request.headers["x-api-key"] == first.request.headers["x-api-key"] == "[redacted]"  # ...shown masked
    view_text = contentviews.prettify_message(first.response, first).text
    assert f"{SEARCH} " in view_text and "hidden from the client" in view_text
    request_text = contentviews.prettify_message(second.request, second).text
    assert any(line.startswith("loaded by search") and "found" in line and "mcp__slack__post_message" in line
               for line in request_text.splitlines())
    assert f"⚙ search: {SEARCH} {{\"query\": \"post slack message\"}}" in request_text
    assert "→ found: mcp__slack__post_message, mcp__slack__add_reaction, mcp__slack__list_channels" in request_text


def test_a_stream_is_read_as_its_tool_calls():
    body = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant",'
            b'"model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":0}}}\n\n'
            b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":'
            b'{"type":"tool_use","id":"t1","name":"gateway_search_tools","input":{}}}\n\n'
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
            b'{"type":"input_json_delta","partial_json":"{\\"query\\": \\"slack\\"}"}}\n\n'
            b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
            b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":3}}\n\n'
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    f = client_flow()
    f.response = tutils.tresp(content=body, headers=[(b"content-type", b"text/event-stream")])
    f.metadata[rounds.ROUND_KEY] = {"client_flow": "x", "round": 1, "rounds": 2, "kind": "k", "phantom": SEARCH}
    shown = contentviews.prettify_message(f.response, f)
    assert shown.view_name == "Tool discovery"
    assert 'gateway_search_tools {"query": "slack"}' in shown.text


def test_an_answer_is_kept_up_to_the_limit():
    rnd = rounds.Round("https://x/v1/messages", [], b"", 0.0)
    for _ in range(3):
        rnd.add(b"x" * (rounds.LIMIT // 2 + 1))
    assert rnd.kept == rounds.LIMIT == sum(len(p) for p in rnd.parts) and rnd.truncated


def test_no_flow_line_is_made_that_would_not_be_printed(monkeypatch, caplog):
    """Without a view, a flow's summary and line are made only when the log prints them: at a
    lower verbosity (``-q``) nothing of it is computed per flow; at the default it is said."""
    import logging

    from tooldisco.apis.anthropic.adapter import AnthropicAdapter
    from tooldisco.engine.telemetry import Record
    from tooldisco.watch.watch import Watcher

    made = []
    of = summary.FlowSummary.of
    monkeypatch.setattr(summary.FlowSummary, "of", staticmethod(lambda r: made.append(r) or of(r)))
    monkeypatch.setattr(Watcher, "_view", staticmethod(lambda: None))  # mitmdump: no view addon
    watcher = Watcher(lambda: None)
    for level, said in [(logging.WARNING, False), (logging.INFO, True)]:
        caplog.clear()
        caplog.set_level(level, logger="tool_discovery")
        f = client_flow()
        watcher.begin(f, AnthropicAdapter(), b"{}", None, Record(provider="anthropic", strategy="tool-search",
                                                                 total_tools=60, kept_tools=60), "")
        watcher.finish(f)
        assert bool(made) == said and ("60 tools" in caplog.text) == said
