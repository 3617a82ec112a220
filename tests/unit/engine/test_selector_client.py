"""The api strategy's client of the selector contract: every failure is a fallback reason."""

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tooldisco.config import ApiConfig
from tooldisco.core.types import Tool
from tooldisco.engine.selector_client import SelectorClient, validate

TOOLS = [Tool(f"tool_{i}", json.dumps({"name": f"tool_{i}", "input_schema": {"type": "object"}}), f"does {i}")
         for i in range(5)]
KNOWN = {t.name for t in TOOLS}


@pytest.fixture
async def client() -> AsyncIterator:
    """``client(handler, **cfg)``: a SelectorClient of a real local server that answers with
    ``await handler(request)`` (an ``aiohttp.web`` request and response)."""
    runners, clients = [], []

    async def make(handler, **cfg) -> SelectorClient:
        app = web.Application()
        app.router.add_post("/v1/tool-discovery/search", handler)
        runner = web.AppRunner(app, handler_cancellation=True)  # a client that gives up cancels the handler
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        made = SelectorClient(ApiConfig(endpoint=f"http://127.0.0.1:{port}/v1/tool-discovery/search", **cfg))
        clients.append(made)
        return made

    yield make
    for c in clients:
        await c.aclose()
    for r in runners:
        await r.cleanup()


def answer(payload, status=200):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json")

    return handler


async def test_contract_request_and_ranked_answer(client):
    seen = {}

    async def handler(request):
        seen["auth"] = request.headers.get("authorization")
        seen["body"] = json.loads(await request.read())
        return web.json_response({"selected_names": ["tool_3", "nope", "tool_1", "tool_3"]})

    sel = await (await client(handler, api_key="secret-key")).select("find 3", 5, ["tool_0"], TOOLS)
    assert sel.names == ["tool_3", "tool_1"] and sel.fallback is None and sel.status == 200
    assert seen["auth"] == "Bearer secret-key"
    body = seen["body"]
    assert body["pattern"] == "find 3" and body["top_k"] == 5 and body["always_keep"] == ["tool_0"]
    assert body["tools"][0] == {"name": "tool_0", "description": "does 0",
                                "definition": {"name": "tool_0", "input_schema": {"type": "object"}}}


async def test_names_only_when_redacting(client):
    seen = {}

    async def handler(request):
        seen["tools"] = json.loads(await request.read())["tools"]
        return web.json_response({"selected_names": ["tool_1"]})

    await (await client(handler, send_definitions=False)).select("q", 5, [], TOOLS)
    assert seen["tools"][0] == {"name": "tool_0", "description": "does 0"}


async def test_oversized_request_drops_definitions_then_gives_up(client):
    seen = []

    async def handler(request):
        seen.append(json.loads(await request.read())["tools"][0])
        return web.json_response({"selected_names": ["tool_1"]})

    small = len(SelectorClient(ApiConfig()).payload("q", 5, [], TOOLS, definitions=False))
    sel = await (await client(handler, max_request_bytes=small + 10)).select("q", 5, [], TOOLS)
    assert sel.names == ["tool_1"] and "definition" not in seen[0]
    sel = await (await client(handler, max_request_bytes=small - 10)).select("q", 5, [], TOOLS)
    assert sel.fallback == "request_too_large"


@pytest.mark.parametrize("handler, reason", [
    (answer({"error": "boom"}, 500), "http_500"),
    (answer({"error": "nope"}, 401), "http_401"),
    (answer(b"not json"), "malformed_json"),
    (answer({"selected": ["tool_1"]}), "malformed_json"),
    (answer({"selected_names": "tool_1"}), "malformed_json"),
    (answer({"selected_names": []}), "empty_selection"),
    (answer({"selected_names": ["ghost", "phantom"]}), "unknown_names"),
    (answer({"selected_names": ["tool_1"], "pad": "x" * 5000}), "response_too_large"),
])
async def test_failures_are_fallback_reasons(client, handler, reason):
    sel = await (await client(handler, max_response_bytes=2048)).select("q", 5, [], TOOLS)
    assert sel.fallback == reason and sel.names == []


async def test_timeout_is_a_hard_cap(client):
    """A selector that never answers: the call gives up at its timeout and cancels the request
    (checked by what happened to the request, not by a clock)."""
    events = []

    async def never(request):
        events.append("asked")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    sel = await (await client(never, timeout=0.05)).select("q", 5, [], TOOLS)
    assert sel.fallback == "timeout" and sel.names == []
    for _ in range(100):  # the server notices the closed connection on its next turn
        if events == ["asked", "cancelled"]:
            break
        await asyncio.sleep(0.01)
    assert events == ["asked", "cancelled"]


async def test_connection_error_and_missing_endpoint():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = SelectorClient(ApiConfig(endpoint=f"http://127.0.0.1:{port}/v1/tool-discovery/search"))
    assert (await refused.select("q", 5, [], TOOLS)).fallback == "connection_error:ClientConnectorError"
    await refused.aclose()
    assert (await SelectorClient(ApiConfig()).select("q", 5, [], TOOLS)).fallback == "no_endpoint"


def test_validate_caps_and_keeps_rank():
    sel = validate(json.dumps({"selected_names": ["tool_4", "tool_2", "tool_0"]}).encode(), KNOWN, 2)
    assert sel.names == ["tool_4", "tool_2"] and sel.raw == ["tool_4", "tool_2", "tool_0"]
