"""Clients sharing one session never get each other's tools, through a real mitmdump.

Two clients with one API key (an organisation's or a CI key), no session id and the same first
message share a session. Client A sends ``payroll_export`` and its model finds and calls it;
client B sends a catalog without it. B's search for payroll must find nothing of A's, nothing
forwarded for B may hold ``payroll_export``, and B must never receive a call of it. Anthropic
(classic deferral: found tools appended to ``tools[]``) and Chat Completions (call-through:
found tools' definitions in the search result, called through the dispatcher), JSON and stream.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import pytest

from tests.e2e.harness import addon_config
from tests.fakeprovider import SEARCH_TOOL, call, reply, search
from tests.support.catalog import anthropic_tools, openai_tools

pytestmark = pytest.mark.e2e

PAYROLL = "payroll_export"
SCHEMA = {"type": "object", "properties": {"month": {"type": "string"}}, "required": ["month"]}
DESCRIPTION = "Export the payroll of every employee for one month as a CSV file."


@pytest.fixture(scope="module")
def tool_discovery_config():
    return partial(addon_config, strategy="tool-search", max_search_results=3, search={"backend": "bm25"},
                   defer={"upfront": 0})  # every tool deferred: A's payroll tool too, until found


def anthropic_request(mitm, tools: list[dict[str, Any]], text: str, stream: bool) -> str:
    body = {"model": "claude-x", "max_tokens": 256, "stream": stream, "tools": tools,
            "messages": [{"role": "user", "content": text}]}
    with mitm.httpx_client() as client:
        r = client.post("https://api.anthropic.com/v1/messages", json=body, timeout=60,
                        headers={"x-api-key": "sk-ant-org-shared-key", "anthropic-version": "2023-06-01"})
    assert r.status_code == 200, r.text
    return r.text


def chat_request(mitm, tools: list[dict[str, Any]], text: str, stream: bool) -> str:
    body = {"model": "gpt-x", "stream": stream, "tools": tools, "messages": [{"role": "user", "content": text}]}
    with mitm.httpx_client() as client:
        r = client.post("https://api.openai.com/v1/chat/completions", json=body, timeout=60,
                        headers={"authorization": "Bearer sk-org-shared-key"})
    assert r.status_code == 200, r.text
    return r.text


APIS = {
    "anthropic": (anthropic_request, anthropic_tools,
                  {"name": PAYROLL, "description": DESCRIPTION, "input_schema": SCHEMA}),
    "openai-chat": (chat_request, openai_tools,
                    {"type": "function", "function": {"name": PAYROLL, "description": DESCRIPTION, "parameters": SCHEMA}}),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", list(APIS))
def test_a_tool_only_one_client_sent_never_reaches_the_other(mitm, fake, api, stream):
    send, catalog, payroll = APIS[api]
    opening = f"Hello, I need help with an HR task [{uuid.uuid4().hex[:8]}]"  # the same for both clients
    fake.set_script([search("payroll export"), call(PAYROLL, {"month": "2026-10"}),
                     reply("There is no payroll tool.")])
    a = send(mitm, [*catalog(60), payroll], opening, stream)
    assert PAYROLL in a and SEARCH_TOOL not in a  # the control: A's model found it and called it
    assert len(fake.api_requests(api)) == 2  # the search, then the call

    fake.reset()
    fake.set_script([search("payroll export"), call(PAYROLL, {"month": "2026-10"}),
                     reply("There is no payroll tool.")])
    b = send(mitm, catalog(60), opening, stream)
    assert PAYROLL not in b  # B never receives a call of a tool it never defined
    b_requests = fake.api_requests(api)
    assert len(b_requests) == 2  # it searched, found nothing of A's, and answered
    assert not [r.index for r in b_requests if PAYROLL in r.text]  # nothing forwarded for B holds it
