"""The proxy's own requests (live relay, phantom re-forwards) leave through mitmproxy's upstream
proxy with its credentials, exactly as the proxied flows do."""

from __future__ import annotations

import re
import uuid
from functools import partial

import pytest

from tests.e2e.harness import addon_config
from tests.fakeprovider import call, reply, search
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

CONFIG = partial(addon_config, strategy="tool-search", search={"backend": "bm25"})
TARGET = "mcp__weather__get_forecast"


@pytest.mark.parametrize("stream", [True, False])
def test_every_round_goes_through_the_authenticated_upstream_proxy(mitm_factory, fake, stream):
    corp = mitm_factory(script=None, config=None, extra_args=["--set", "proxyauth=corp:s3cret"])
    front = mitm_factory(config=CONFIG, extra_args=[
        "--mode", f"upstream:{corp.url}", "--set", "upstream_auth=corp:s3cret"])
    fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("done")])
    mark = corp.log_offset()
    client = front.anthropic()
    messages = [{"role": "user", "content": f"forecast for Paris? [{uuid.uuid4().hex[:8]}]"}]
    if stream:
        with client.messages.stream(model="m", max_tokens=64, tools=anthropic_tools(60), messages=messages) as s:
            final = s.get_final_message()
    else:
        final = client.messages.create(model="m", max_tokens=64, tools=anthropic_tools(60), messages=messages)
    assert [b.name for b in final.content if b.type == "tool_use"] == [TARGET]
    rounds = fake.api_requests("anthropic")
    assert len(rounds) == 2
    # Both rounds went through the corporate proxy, authenticated (it answers 407 otherwise).
    assert corp.log_text(mark).count("POST http://127.0.0.1") == 2, corp.log_text(mark)
    # Match the status line, not the digits: a port number may contain "407".
    assert not re.search(r"<<\s*407\b|Proxy Authentication Required", corp.log_text(mark))
