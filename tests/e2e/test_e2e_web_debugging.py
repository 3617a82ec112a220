"""Debugging an agent's turn in mitmweb, per API and deferral mode: from three places a person
answers "what did my agent send, what did the model see, what did my agent get".

One real mitmweb with the addon in front of the fake provider, for the module; per case the
client sends a request whose model searches, then calls the found tool. Byte-level checks go
through mitmweb's own HTTP API (``/flows``, ``/flows/<id>/<message>/content.data``, the
contentview's ``content/<view>.json``), with the web token: the client's flow holds the bytes the
client sent and got; each round's "what the model saw" is what the fake provider says it loaded
(``fake.api_requests()``: native deferral, the tools without ``defer_loading`` and those a
``tool_reference`` / ``tool_search_output`` loaded; classic and call-through, ``tools[]``; the
proxy's own tools apart). A headless Chromium then does what the person does: opens the address
the client flow's view prints, sees the turn's flows listed (and only them), opens the client's
request and answer and a round's request, and, once, types the printed filter into the search
box. Screenshots go where ``test_e2e_web`` keeps its own (``$TOOLDISCO_SCREENSHOTS``, else the
test's temporary directory).

Needs Debian's ``chromium`` and ``chromium-driver`` (scripts/test installs them); skips without.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.e2e.harness import ADDON_PATH, MitmDump, addon_config
from tests.e2e.test_e2e_web import CHROMEDRIVER, CHROMIUM, WAIT, chromium, rows, screenshot, shown, tab
from tests.e2e.wire_apis import BEDROCK_URL, GEMINI_URL, aws_chain, signed_headers  # noqa: F401 (a fixture)
from tests.fakeprovider import SEARCH_TOOL, FakeProvider, call, reply, search
from tests.fakeprovider.model import DISPATCHER
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip("needs Debian's chromium and chromium-driver (scripts/test installs them)", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CONFIG = partial(addon_config, strategy="tool-search", max_search_results=3, search={"backend": "bm25"})
TARGET = "mcp__weather__get_forecast"
CATALOG = anthropic_tools(60)
PROXYS = {SEARCH_TOOL, DISPATCHER, "tool_search"}  # the proxy's own tools, as the fake names them
IN_PROMPT = ("loaded", "pinned", "found before", "loaded by search")  # statuses of tools[] the model sees
ROW = re.compile(r"^(loaded by search|via dispatcher|deferred natively|search tool|dispatcher|found before|"
                 r"loaded|pinned|added)\s+([\d,]+|-)\s+(\S+)(?:  ← (.*))?$")


# --- the requests, per API --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    url: str
    body: Callable[[str], dict[str, Any]]  # the request for a question
    headers: Callable[[str, bytes], dict[str, str]]  # for the URL and body
    mode: str  # the deferral the record names
    searching: Any = None  # the model's search call (default: the proxy's search tool)

    def send(self, proxy: MitmDump) -> tuple[bytes, dict[str, str], httpx.Response]:
        question = f"What's the forecast for Paris? [{uuid.uuid4().hex[:8]}]"
        sent = json.dumps(self.body(question)).encode()
        headers = {"content-type": "application/json", **self.headers(self.url, sent)}
        with proxy.httpx_client() as client:
            r = client.post(self.url, content=sent, headers=headers)
        assert r.status_code == 200, r.text[:2000]
        return sent, headers, r


def anthropic(model: str, stream: bool) -> Case:
    return Case("https://api.anthropic.com/v1/messages",
                lambda q: {"model": model, "max_tokens": 256, "stream": stream, "tools": CATALOG,
                           "messages": [{"role": "user", "content": q}]},
                lambda url, body: {"x-api-key": "sk-ant-test"}, "native" if "4-5" in model else "classic")


def chat(stream: bool) -> Case:
    tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                               "parameters": t["input_schema"]}} for t in CATALOG]
    return Case("https://api.openai.com/v1/chat/completions",
                lambda q: {"model": "gpt-4o", "stream": stream, "tools": tools, "messages": [{"role": "user", "content": q}],
                           **({"stream_options": {"include_usage": True}} if stream else {})},
                lambda url, body: {"authorization": "Bearer sk-test-web"}, "call-through")


def responses(model: str, stream: bool) -> Case:
    tools = [{"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
             for t in CATALOG]
    native = model == "gpt-5.4"
    return Case("https://api.openai.com/v1/responses",
                lambda q: {"model": model, "stream": stream, "tools": tools, "input": q},
                lambda url, body: {"authorization": "Bearer sk-test-web"}, "native" if native else "classic",
                call("tool_search", {"query": "weather forecast"}, times=1) if native else None)


def gemini() -> Case:
    decls = [{"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
             for t in CATALOG]
    return Case(f"{GEMINI_URL}:generateContent",
                lambda q: {"contents": [{"role": "user", "parts": [{"text": q}]}],
                           "tools": [{"functionDeclarations": decls}]},
                lambda url, body: {"x-goog-api-key": "AIza-test-web"}, "call-through")


def converse() -> Case:
    specs = [{"toolSpec": {"name": t["name"], "description": t["description"], "inputSchema": {"json": t["input_schema"]}}}
             for t in CATALOG]
    return Case(f"{BEDROCK_URL}/converse",
                lambda q: {"messages": [{"role": "user", "content": [{"text": q}]}], "toolConfig": {"tools": specs}},
                signed_headers, "classic")


CASES = {
    "anthropic-native-json": anthropic("claude-sonnet-4-5", False),
    "anthropic-native-stream": anthropic("claude-sonnet-4-5", True),
    "chat-call-through-json": chat(False),
    "chat-call-through-stream": chat(True),
    "responses-classic-gpt-5-stream": responses("gpt-5", True),
    "responses-native-gpt-5.4-json": responses("gpt-5.4", False),
    "gemini-call-through-json": gemini(),
    "bedrock-converse-classic-json": converse(),
}


# --- mitmweb and its HTTP API -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def web(fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory, aws_chain) -> Iterator[MitmDump]:
    proxy = MitmDump(tmp_path_factory.mktemp("mitmweb-debugging"), fake_provider.url, script=ADDON_PATH,
                     config=CONFIG, name="mitmweb debugging", web=True)
    with aws_chain():  # Bedrock: the proxy re-signs the bodies it changes with the standard AWS chain
        proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, web: MitmDump):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        driver.get(web.web_url)  # logs in: the cookie serves every later address
        WebDriverWait(driver, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".connection-indicator.established"),
                                          "mitmweb's page never connected")
        yield driver
    finally:
        driver.quit()


def api(proxy: MitmDump, path: str) -> httpx.Response:
    r = httpx.get(f"http://127.0.0.1:{proxy.web_port}{path}", headers={"authorization": f"Bearer {proxy.web_token}"},
                  timeout=30)
    assert r.status_code == 200, (path, r.status_code, r.text[:500])
    return r


def view_text(proxy: MitmDump, flow_id: str, message: str) -> str:
    return api(proxy, f"/flows/{flow_id}/{message}/content/{quote('Tool discovery')}.json").json()["text"]


@dataclass
class Turn:
    client: dict[str, Any]  # the client's flow, as /flows lists it
    rounds: list[dict[str, Any]]  # its rounds, in order
    tag: str


def turn_of(proxy: MitmDump, count: int) -> Turn:
    """The newest client flow the addon annotated, and its ``count`` rounds, once mitmweb lists them."""
    deadline = time.monotonic() + WAIT
    while True:
        flows = api(proxy, "/flows").json()
        clients = [f for f in flows if re.match(r"#[0-9a-f]{6} ", f.get("comment") or "") and "⚙ round" not in f["comment"]]
        if clients:
            client = max(clients, key=lambda f: f["timestamp_created"])
            tag = client["comment"].split(" ", 1)[0]
            own = [f for f in flows if f["comment"].startswith(f"{tag} ⚙ round ")]
            if len(own) == count:
                own.sort(key=lambda f: int(re.match(r"#\w+ ⚙ round (\d+)/", f["comment"]).group(1)))
                return Turn(client, own, tag)
        assert time.monotonic() < deadline, f"mitmweb never listed a client flow with {count} rounds"
        time.sleep(0.1)


def section(text: str, heading: str) -> list[tuple[str, ...]]:
    """The table rows (status, tokens, name, notes) under the first line starting with ``heading``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rule = next(i for i in range(start, len(lines)) if lines[i].startswith("-----"))  # under the column names
    out = []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        m = ROW.match(line.strip())
        assert m, f"not a table row: {line!r}"
        out.append(m.groups(""))
    return out


def loaded_by_the_provider(rec) -> list[str]:
    return sorted(n for n in rec.tool_names or () if n not in PROXYS)


# --- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_a_turn_answers_what_the_agent_sent_what_the_model_saw_and_what_it_got(web, fake, browser, tmp_path, name):
    case = CASES[name]
    fake.stream_delay = 0
    fake.set_script([case.searching or search("weather forecast", times=1, not_offered=[TARGET]),
                     call(TARGET, {"city": "Paris"}), reply("sunny")])
    sent, headers, answer = case.send(web)
    assert SEARCH_TOOL not in answer.text and TARGET in answer.text
    upstream = fake.api_requests()
    assert len(upstream) == 2 and all(r.status == 200 for r in upstream), [(r.status, r.error) for r in upstream]
    turn = turn_of(web, len(upstream))
    record = web.records(where=lambda r: r.get("id", "")[:6] == turn.tag[1:] or not r.get("id"))[-1]
    assert record["deferral"] == case.mode

    # What the agent sent, and what it got: the client's flow, byte for byte.
    cid = turn.client["id"]
    assert api(web, f"/flows/{cid}/request/content.data").content == sent
    assert api(web, f"/flows/{cid}/response/content.data").content == answer.content
    got_headers = {k.lower(): v for k, v in turn.client["request"]["headers"]}
    assert all(got_headers.get(k.lower()) == v for k, v in headers.items())  # a SigV4 signature: the client's own
    assert got_headers.get("content-length") == str(len(sent)) and "x-tooldisco-relay" not in got_headers
    assert not turn.client["modified"]  # nothing of the person's to revert
    client_request, client_answer = view_text(web, cid, "request"), view_text(web, cid, "response")
    assert "tools: what the client sent (this body), and what went upstream in round 1" in client_request
    assert f"tool calls in what the client got:\n  {TARGET} " in client_answer
    printed = re.search(r"  list them: (~comment #[0-9a-f]{6})  \(in mitmweb's Search box\)\n  or open: +(\S+)",
                        client_request)
    assert printed and printed.group(1) == f"~comment {turn.tag}"

    # What the model saw: each round, as the provider read it.
    for i, (own, rec) in enumerate(zip(turn.rounds, upstream)):
        assert api(web, f"/flows/{own['id']}/request/content.data").content == rec.body  # as it went upstream
        if (fake_sent := getattr(rec, "sent", None)) is not None:
            assert api(web, f"/flows/{own['id']}/response/content.data").content == bytes(fake_sent)
        text = view_text(web, own["id"], "request")
        assert text.startswith(f"{turn.tag} ⚙ round {i + 1}/2: ")
        assert f"the proxy's own request upstream for flow {turn.tag}" in text
        prompt = section(text, "in the prompt (")
        names = sorted(n for status, _, n, _ in prompt if status in IN_PROMPT)
        assert names == loaded_by_the_provider(rec), f"round {i + 1}: the view and the provider disagree"
        assert {n for status, _, n, _ in prompt if status in ("search tool", "dispatcher")} <= PROXYS | {"<tool_search>"}
        assert all("⚙ the proxy's" in notes for status, _, _, notes in prompt if status in ("search tool", "dispatcher"))
        through = [n for status, _, n, _ in prompt if status == "via dispatcher"]
        assert all(rec.can_call(n) for n in through) and (TARGET in through) == (case.mode == "call-through" and i == 1)
        deferred = section(text, "on the wire only") if "on the wire only" in text else []
        marked = {t.get("name") for t in (rec.json or {}).get("tools") or () if t.get("defer_loading")}
        assert sorted(n for *_, n, _ in deferred) == sorted(marked - set(rec.tool_names or ()))
        if i == 0:
            assert "the proxy's own calls in this body: none" in text and TARGET not in names + through
        else:  # the search result the proxy added, in words; the found tool in the prompt
            assert "the proxy's own calls in this body (⚙, hidden from the client)" in text
            assert re.search(r"^⚙ search: \S+ \{\"query\": \"weather forecast\"\}", text, re.M)
            assert re.search(rf"^    → (found|loads by (tool_reference|tool_search_output)): .*{TARGET}", text, re.M)
            assert TARGET in names + through
        answered = view_text(web, own["id"], "response")
        if i == 0:
            assert "⚙ the proxy's search, hidden from the client" in answered

    # What a person sees: the printed address lists the turn's flows, and only them.
    browser.get(printed.group(2))
    WebDriverWait(browser, WAIT).until(
        lambda d: len(rows(d, turn.tag)) == 3 and len(d.find_elements(By.CSS_SELECTOR, "tr.has-request")) == 3,
        f"the printed address never listed the turn's three flows ({printed.group(2)})")
    listing = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr.has-request")]
    assert ["⚙ round" in t for t in listing] == [False, True, True]  # the client's flow, then its rounds
    screenshot(browser, tmp_path, f"debug_{name}_turn.png")
    rows(browser, turn.tag)[0].click()
    tab(browser, "Request")
    shown(browser, "tools: what the client sent (this body)", f"list them: ~comment {turn.tag}")
    screenshot(browser, tmp_path, f"debug_{name}_sent.png")
    tab(browser, "Response")
    shown(browser, "tool calls in what the client got:", TARGET)
    screenshot(browser, tmp_path, f"debug_{name}_got.png")
    rows(browser, f"{turn.tag} ⚙ round 2/2")[0].click()
    tab(browser, "Request")
    shown(browser, "what the model saw:", f"{turn.tag} ⚙ round 2/2: ", TARGET)
    screenshot(browser, tmp_path, f"debug_{name}_saw.png")


def test_the_printed_filter_typed_in_the_search_box_lists_the_turn(web, fake, browser, tmp_path):
    fake.stream_delay = 0
    fake.set_script([search("weather forecast", times=1, not_offered=[TARGET]), call(TARGET, {"city": "Paris"}),
                     reply("sunny")])
    CASES["anthropic-native-stream"].send(web)
    turn = turn_of(web, 2)
    CASES["chat-call-through-json"].send(web)  # another turn after it: listed before the filter, not after
    browser.get(web.web_url)
    WebDriverWait(browser, WAIT).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.has-request")) > 3,
                                       "mitmweb never listed the flows")
    box = browser.find_element(By.CSS_SELECTOR, "input[placeholder='Search']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(f"~comment {turn.tag}", Keys.ENTER)
    WebDriverWait(browser, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.has-request")) == 3 and len(rows(d, turn.tag)) == 3,
        "the filter never listed exactly the turn's flows")
    screenshot(browser, tmp_path, "debug_filter.png")
    rows(browser, f"{turn.tag} ⚙ round 1/2")[0].click()
    tab(browser, "Request")
    page = shown(browser, "what the model saw:", "on the wire only, deferred")
    assert "the proxy's own calls in this body: none (no search yet)" in page
