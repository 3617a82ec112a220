"""Search that learns, through a real mitmdump: one session's model misses the tool with its own
words, finds it by name and calls it; after a restart, the next session's first search with
other words like the first finds it at once, for that tenant only; ``tooldisco forget`` wipes it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from functools import partial

import pytest

from tests.e2e.harness import ADDON_PATH, addon_config
from tests.fakeprovider import call, reply, search
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

TARGET = "create_incident"
INCIDENT = {"name": TARGET, "description": "Open a record in the tracker with a title and a severity.",
            "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}}}
LEARNED = "page whoever is on call tonight"  # no word of it is in the tool's definition
UNSEEN = "page the on call engineer"  # shares "page" and "call" with it, never searched before


@pytest.fixture(scope="module")
def tool_discovery_config():
    return partial(addon_config, strategy="tool-search", max_search_results=3, defer={"upfront": 0},
                   search={"backend": "bm25"}, learning={"flush_interval": "100ms", "refresh_interval": "1ms"})


def _turn(mitm, fake, key: str, first_query: str, then: list | None = None) -> list[str]:
    """One session: the model searches ``first_query`` (then ``then``'s rules); the names the
    first search loaded, as the next request upstream offered them."""
    fake.set_script([search(first_query, times=1), *(then or []), reply("done")])
    body = {"model": "claude-x", "max_tokens": 64, "tools": anthropic_tools(60) + [INCIDENT],
            "messages": [{"role": "user", "content": f"Wake someone up [{uuid.uuid4().hex[:8]}]"}]}
    start = len(fake.requests)
    with mitm.httpx_client() as client:
        r = client.post("https://api.anthropic.com/v1/messages", json=body, headers={"x-api-key": key}, timeout=60)
    assert r.status_code == 200, r.text
    after_search = fake.requests[start + 1]
    return [n for n in after_search.tool_names or [] if n != "gateway_search_tools"]


def test_a_tenant_learns_which_words_lead_to_a_tool(mitm, fake) -> None:
    assert TARGET not in _turn(mitm, fake, "sk-ant-before", UNSEEN)  # the lexical ranking misses it
    for _ in range(3):  # sessions that searched their words, then the name, then called it
        _turn(mitm, fake, "sk-ant-team", LEARNED,
              [search(TARGET, times=1, no_result_for=[]), call(TARGET, {"title": "db down"})])
    mitm.restart()  # the lessons are written on the way out, and read back
    assert TARGET in _turn(mitm, fake, "sk-ant-team", UNSEEN)
    assert TARGET not in _turn(mitm, fake, "sk-ant-other", UNSEEN)  # another tenant learned nothing

    mitm.stop()
    config = mitm.config_path
    wiped = subprocess.run([sys.executable, "-m", "tooldisco.cli", "forget", "--config", str(config), "--all"],
                           capture_output=True, text=True, cwd=ADDON_PATH.parent, check=False)
    assert wiped.returncode == 0 and "1 tenant" in wiped.stdout, wiped.stdout + wiped.stderr
    mitm.start()
    assert TARGET not in _turn(mitm, fake, "sk-ant-team", UNSEEN)
