"""The api strategy's client of the selector contract: every failure is a fallback reason."""

import asyncio
import json

import httpx
import pytest

from tooldisco.config import ApiConfig
from tooldisco.providers.base import Tool
from tooldisco.selector_client import SelectorClient, validate

TOOLS = [Tool(f"tool_{i}", json.dumps({"name": f"tool_{i}", "input_schema": {"type": "object"}}), f"does {i}")
         for i in range(5)]
KNOWN = {t.name for t in TOOLS}


def client(handler, **cfg):
    config = ApiConfig(endpoint="http://selector.test/v1/tool-discovery/search", **cfg)
    return SelectorClient(config, transport=httpx.MockTransport(handler))


def answer(payload, status=200):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return lambda request: httpx.Response(status, content=body)


async def test_contract_request_and_ranked_answer():
    seen = {}

    def handler(request):
        seen["auth"] = request.headers.get("authorization")
        seen["body"] = json.loads(request.content)
        return httpx.Response(200, json={"selected_names": ["tool_3", "nope", "tool_1", "tool_3"]})

    sel = await client(handler, api_key="secret-key").select("find 3", 5, ["tool_0"], TOOLS)
    assert sel.names == ["tool_3", "tool_1"] and sel.fallback is None and sel.status == 200
    assert seen["auth"] == "Bearer secret-key"
    body = seen["body"]
    assert body["pattern"] == "find 3" and body["top_k"] == 5 and body["always_keep"] == ["tool_0"]
    assert body["tools"][0] == {"name": "tool_0", "description": "does 0",
                                "definition": {"name": "tool_0", "input_schema": {"type": "object"}}}


async def test_names_only_when_redacting():
    seen = {}

    def handler(request):
        seen["tools"] = json.loads(request.content)["tools"]
        return httpx.Response(200, json={"selected_names": ["tool_1"]})

    await client(handler, send_definitions=False).select("q", 5, [], TOOLS)
    assert seen["tools"][0] == {"name": "tool_0", "description": "does 0"}


async def test_oversized_request_drops_definitions_then_gives_up():
    seen = []

    def handler(request):
        seen.append(json.loads(request.content)["tools"][0])
        return httpx.Response(200, json={"selected_names": ["tool_1"]})

    small = len(SelectorClient(ApiConfig()).payload("q", 5, [], TOOLS, definitions=False))
    sel = await client(handler, max_request_bytes=small + 10).select("q", 5, [], TOOLS)
    assert sel.names == ["tool_1"] and "definition" not in seen[0]
    sel = await client(handler, max_request_bytes=small - 10).select("q", 5, [], TOOLS)
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
async def test_failures_are_fallback_reasons(handler, reason):
    sel = await client(handler, max_response_bytes=2048).select("q", 5, [], TOOLS)
    assert sel.fallback == reason and sel.names == []


async def test_timeout_is_a_hard_cap():
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

    sel = await client(never, timeout=0.05).select("q", 5, [], TOOLS)
    assert sel.fallback == "timeout" and sel.names == []
    assert events == ["asked", "cancelled"]


async def test_connection_error_and_missing_endpoint():
    def refuse(request):
        raise httpx.ConnectError("refused")

    assert (await client(refuse).select("q", 5, [], TOOLS)).fallback == "connection_error:ConnectError"
    assert (await SelectorClient(ApiConfig()).select("q", 5, [], TOOLS)).fallback == "no_endpoint"


def test_validate_caps_and_keeps_rank():
    sel = validate(json.dumps({"selected_names": ["tool_4", "tool_2", "tool_0"]}).encode(), KNOWN, 2)
    assert sel.names == ["tool_4", "tool_2"] and sel.raw == ["tool_4", "tool_2", "tool_0"]
