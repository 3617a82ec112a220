"""The unlisted-host decision (policy.hosts): tools on an API path to a host ``hosts:`` lacks."""

import pytest

from tooldisco.config import parse
from tooldisco.policy.hosts import unlisted_host

ON = parse({"pipes": {"tool_discovery": {"enabled": True}}})
TOOLS = b'{"model":"m","tools":[{"name":"t"}],"messages":[]}'


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", TOOLS),
    ("/v1/messages?beta=true", TOOLS),
    ("/openai/v1/responses", TOOLS),
    ("/v1beta/models/g:generateContent", b'{"tools":[{"functionDeclarations":[]}]}'),
    ("/model/m/converse", b'{"toolConfig":{"tools":[]}}'),
])
def test_tools_to_an_unlisted_host_are_named(path, body):
    assert unlisted_host(ON, "API.Example.com.", "POST", path, body) == "api.example.com"


@pytest.mark.parametrize("config, host, method, path, body", [
    (ON, "api.openai.com", "POST", "/v1/chat/completions", TOOLS),  # listed
    (ON, "api.example.com", "POST", "/v1/models", TOOLS),  # not an API path
    (ON, "api.example.com", "GET", "/v1/chat/completions", TOOLS),
    (ON, "api.example.com", "POST", "/v1/chat/completions", b'{"messages":[]}'),  # no tools
    (ON, "api.example.com", "POST", "/v1/chat/completions", None),
    (parse({}), "api.example.com", "POST", "/v1/chat/completions", TOOLS),  # tool discovery off
])
def test_nothing_to_say(config, host, method, path, body):
    assert unlisted_host(config, host, method, path, body) is None
