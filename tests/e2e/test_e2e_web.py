"""mitmweb as a person uses it: a real mitmweb with the addon in front of the fake provider, a
client whose model searches (a JSON answer and a live stream), then a headless Chromium opens
the page and the test reads what it shows: the comment, the "Tool discovery" view of the
bodies, and the proxy's own hidden rounds as flows of their own.

Needs Debian's ``chromium`` and ``chromium-driver`` (scripts/test installs them); skips without.
``TOOLDISCO_SCREENSHOTS=docs`` saves the screenshots the README shows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.e2e.harness import ADDON_PATH, REPO_ROOT, MitmDump, addon_config
from tests.fakeprovider import SEARCH_TOOL, call, reply, search
from tests.support.catalog import anthropic_tools

pytestmark = pytest.mark.e2e

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip("needs Debian's chromium and chromium-driver (scripts/test installs them)", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

# The machine's network is closed: without the background-networking flags Chromium hangs.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000")
CONFIG = partial(addon_config, strategy="tool-search", max_search_results=3)
TARGET = "mcp__weather__get_forecast"
WAIT = 60.0  # seconds for the page to show something (the test timeout bounds a hang anyway)


def chromium(profile: Path) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.binary_location = str(CHROMIUM)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def screenshot(browser: webdriver.Chrome, tmp_path: Path, name: str) -> None:
    target = Path(os.environ.get("TOOLDISCO_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(target / name))


@pytest.fixture
def web(tmp_path: Path, fake) -> Iterator[MitmDump]:
    proxy = MitmDump(tmp_path / "mitmweb", fake.url, script=ADDON_PATH, config=CONFIG,
                     name="mitmweb", web=True)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    driver = chromium(tmp_path / "chromium-profile")
    try:
        yield driver
    finally:
        driver.quit()


def ask(proxy: MitmDump, fake, stream: bool) -> str:
    fake.set_script([search("weather forecast", times=1), call(TARGET, {"city": "Paris"}), reply("sunny")])
    body = {"model": "claude-x", "max_tokens": 256, "stream": stream, "tools": anthropic_tools(60),
            "messages": [{"role": "user", "content": f"What's the forecast for Paris? [{uuid.uuid4().hex[:8]}]"}]}
    with proxy.httpx_client() as client:
        r = client.post("https://api.anthropic.com/v1/messages", json=body, headers={"x-api-key": "sk-ant-test"})
    assert r.status_code == 200 and SEARCH_TOOL not in r.text
    return r.text


def rows(browser: webdriver.Chrome, text: str) -> list:
    return [r for r in browser.find_elements(By.CSS_SELECTOR, "tr.has-request") if text in r.text]


def shown(browser: webdriver.Chrome, *texts: str) -> str:
    """Wait until the page's text holds every one of ``texts``; returns it."""
    def ready(driver: webdriver.Chrome) -> str | bool:
        page = driver.find_element(By.TAG_NAME, "body").text
        return page if all(t in page for t in texts) else False

    return WebDriverWait(browser, WAIT).until(ready, f"the page never showed {texts!r}")


def tab(browser: webdriver.Chrome, name: str) -> None:
    browser.find_element(By.XPATH, f"//nav[contains(@class, 'nav-tabs-sm')]/a[text()='{name}']").click()


def test_mitmweb_shows_what_the_addon_did(web, fake, browser, tmp_path):
    ask(web, fake, stream=False)
    ask(web, fake, stream=True)
    web.records(at_least=2)
    browser.get(web.web_url)
    WebDriverWait(browser, WAIT).until(
        lambda d: len(rows(d, "60→0 −")) == 2 and len(rows(d, "the proxy's own")) == 4,
        "mitmweb never listed the two client flows and their four hidden rounds")
    listing = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr.has-request")]
    # In order: each client flow, then its rounds (the JSON answer first, then the stream).
    assert ["round 1/2:" in t for t in listing] == [False, True, False, False, True, False]
    assert ["round 2/2:" in t for t in listing] == [False, False, True, False, False, True]

    rows(browser, "60→0 −")[1].click()  # the live stream's flow
    page = shown(browser, "what the client sent (this body), and what went upstream", "search 1: 'weather forecast' (bm25")
    assert "tools: 60 sent, 1 on the wire, 1 in the prompt" in page and "deferred (search)" in page and "search tool" in page
    assert any(line.startswith("deferred (search)") and line.endswith(f"{TARGET}  ← found, called")
               for line in map(str.strip, page.splitlines()))
    screenshot(browser, tmp_path, "mitmweb_flow.png")
    tab(browser, "Comment")
    shown(browser, "60→0 −3.7k tok · classic · 60 tools → 0 loaded", f"search 'weather forecast' → {TARGET}", "2 upstream rounds")

    rows(browser, "round 1/2:")[1].click()  # the stream's first round: the search call
    tab(browser, "Response")
    shown(browser, "tool calls in what the upstream answered:", f'{SEARCH_TOOL} {{"query": "weather forecast"}}',
          "hidden from the client")
    screenshot(browser, tmp_path, "mitmweb_round.png")
    tab(browser, "Request")
    page = shown(browser, "⚙ round 1/2: the rewritten request", "the proxy's own request upstream for flow #",
                 "what the model saw:", "this turn's flows: the client's and its 2 rounds", "list them: ~comment #")
    assert "deferred by the client" not in page
    assert "x-api-key: [redacted]" in page.lower() and "sk-ant-test" not in page  # the proxy's own flows show no key


# One turn per deferral mode: the model searches, then calls the found tool.
MODES = {
    "classic": ("https://api.anthropic.com/v1/messages", "claude-x"),  # no native deferral for this model
    "native": ("https://api.anthropic.com/v1/messages", "claude-sonnet-4-5"),  # the default for current Claude
    "call-through": ("https://api.openai.com/v1/chat/completions", "gpt-4o"),  # Chat Completions' default
}
DEFERRED_AS = {"classic": "deferred (search)", "native": "deferred natively", "call-through": "deferred (search)"}
LOADED = ("loaded", "pinned", "found before")
TABLE_ROW = re.compile(r"^(loaded|pinned|found before|deferred natively|deferred \(search\)|deferred \(client\)|"
                       r"dropped|search tool|dispatcher|added)\s+([\d,]+|-)\s+([\d,]+|-)\s+([\d,]+|-)\s+(\S+)"
                       r"(?:  ← (found|called|found, called))?$")
TOTAL_ROW = re.compile(r"^total\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s")
# Where the comment's first characters end, against the Comment cell's visible box (ellipsis excluded).
VISIBLE = """
const [cell, chars] = arguments;
const range = document.createRange();
range.setStart(cell.firstChild, 0);
range.setEnd(cell.firstChild, chars);
const style = getComputedStyle(cell);
const ctx = document.createElement("canvas").getContext("2d");
ctx.font = style.font;
const box = cell.getBoundingClientRect();
return [range.getBoundingClientRect().right, box.right - parseFloat(style.paddingRight) - ctx.measureText("…").width,
        cell.scrollWidth > cell.clientWidth];
"""


def ask_in(mode: str, proxy: MitmDump, fake) -> None:
    url, model = MODES[mode]
    question = f"What's the forecast for Paris? [{uuid.uuid4().hex[:8]}]"
    fake.set_script([search("weather forecast", times=1, not_offered=[TARGET]), call(TARGET, {"city": "Paris"}),
                     reply("sunny")])
    tools = anthropic_tools(60)
    if "chat" in url:
        body = {"model": model, "messages": [{"role": "user", "content": question}],
                "tools": [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                            "parameters": t["input_schema"]}} for t in tools]}
        headers = {"authorization": "Bearer sk-test-web"}
    else:
        body = {"model": model, "max_tokens": 256, "tools": tools, "messages": [{"role": "user", "content": question}]}
        headers = {"x-api-key": "sk-ant-test"}
    with proxy.httpx_client() as client:
        r = client.post(url, json=body, headers=headers)
    assert r.status_code == 200 and SEARCH_TOOL not in r.text and TARGET in r.text


def table(page: str) -> tuple[list[tuple[str, ...]], tuple[int, ...]]:
    """The client flow's per-tool rows (status, sent, wire, prompt, name, this turn) and its totals."""
    lines = [line.strip() for line in page.splitlines()]  # mitmweb 12.3 indents the view's text
    start = next(i for i, line in enumerate(lines) if line.startswith("tools: what the client sent"))
    listed = [m.groups("") for line in lines[start + 3:] if (m := TABLE_ROW.match(line))]
    total = next(TOTAL_ROW.match(line) for line in lines[start:] if line.startswith("total"))
    assert total is not None
    return listed, tuple(int(x.replace(",", "")) for x in total.groups())


def tokens(text: str) -> int:
    return 0 if text == "-" else int(text.replace(",", ""))


@pytest.mark.parametrize("mode", list(MODES))
def test_the_view_and_the_comment_say_what_telemetry_says(web, fake, browser, tmp_path, mode):
    ask_in(mode, web, fake)
    record = web.records(at_least=1)[-1]
    assert record["deferral"] == mode
    total, loaded, deferred = record["total_tools"], record["kept_tools"], record["deferred_tools"]
    before, prompt, wire = record["tool_tokens_before"], record["tool_tokens_after"], record["tool_tokens_wire"]
    found = list(dict.fromkeys(m for s in record["searches"] for m in s["matched"]))
    assert TARGET in found and record["called"] == [TARGET] and total == 60 and loaded + deferred == total
    assert (wire > before > prompt) if mode == "native" else (wire == prompt < before)
    saved = before - prompt
    lead = f"{total}→{loaded} −{saved / 1000:.1f}k tok"

    browser.get(web.web_url)
    WebDriverWait(browser, WAIT).until(lambda d: rows(d, lead) and rows(d, "round 2/2:"),
                                       f"mitmweb never listed the {mode} flow and its rounds")
    # The comment: the lead readable in the Comment column at 1400 px, the same figures after it.
    cell = rows(browser, lead)[0].find_element(By.CSS_SELECTOR, "td.col-comment")
    comment = cell.text
    turn, _, said = comment.partition(" ")  # the turn's tag first: its rounds' comments start with it too
    assert re.fullmatch(r"#[0-9a-f]{6}", turn) and len(rows(browser, turn)) == 3
    assert said.startswith(f"{lead} · {mode} · {total} tools → {loaded} loaded, {deferred} {DEFERRED_AS[mode]} · "
                           f"search 'weather forecast' → ")
    for part in (f"{len(found)} found", f"called {TARGET}", f"tool tokens ~{before:,} sent → ~{prompt:,} in the prompt",
                 "2 upstream rounds"):
        assert part in comment
    assert (f"~{wire:,} on the wire" in comment) == (mode == "native")
    end, visible, cut = browser.execute_script(VISIBLE, cell, len(turn))
    assert end <= visible, f"the comment's tag {turn!r} is cut in mitmweb's Comment column ({end} > {visible})"
    assert cut  # the rest is in the Comment tab

    rows(browser, lead)[0].click()
    page = shown(browser, "what the client sent (this body), and what went upstream", "search 1: 'weather forecast' (bm25")
    screenshot(browser, tmp_path, f"mitmweb_{mode}.png")
    how = DEFERRED_AS[mode]
    assert f"tools: {total} tools → {loaded} loaded, {deferred} {how}; this turn {len(found)} found, 1 called" in page
    assert f"tool tokens ~{before:,} sent → ~{prompt:,} in the prompt" in page and f"(~{saved:,} saved)" in page
    assert f"called: {TARGET}" in page
    listed, totals = table(page)
    status = {row[4]: row[0] for row in listed}
    assert len(listed) == total + (2 if mode == "call-through" else 1)  # the client's tools, then the proxy's
    assert sum(s in LOADED for s in status.values()) == loaded
    assert list(status.values()).count(how) == deferred and "kept" not in status.values()
    assert status[SEARCH_TOOL] == "search tool" and (status.get("gateway_call_tool") == "dispatcher") == (mode == "call-through")
    assert [row[4] for row in listed if "found" in row[5]] == found
    assert [row[4] for row in listed if "called" in row[5]] == [TARGET]
    assert totals == (before, wire, prompt)  # the view's sums are the record's
    assert sum(tokens(row[3]) for row in listed) == prompt and sum(tokens(row[2]) for row in listed) == wire
    assert sum(tokens(row[1]) for row in listed) == before
    tab(browser, "Comment")
    assert comment in shown(browser, comment)

    rows(browser, "round 1/2:")[0].click()  # the proxy's first round: what the model saw
    tab(browser, "Request")
    page = shown(browser, "what the model saw:", "in the prompt (")
    assert "deferred by the client" not in page and "kept" not in page
    assert sum(line.startswith(how) for line in map(str.strip, page.splitlines())) == (deferred if mode == "native" else 0)


def test_the_report_renders_with_its_plots(browser, tmp_path):
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    from report_bench import write  # synthetic records made with the engine's own record types

    log, page = tmp_path / "t.jsonl", tmp_path / "report.html"
    write(log, 5000)
    subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "report.py"), str(log), "-o", str(page), "--quiet"],
                   check=True, capture_output=True)
    browser.get(page.as_uri())
    shown(browser, "Tool discovery report", "5,000 record(s)", "Per API", "Per strategy: latency (ms)",
          "api strategy report")
    sizes = WebDriverWait(browser, WAIT).until(
        lambda d: d.execute_script(
            "const i = [...document.images]; return i.every(x => x.complete) && i.map(x => x.naturalWidth);"),
        "the report's images never finished loading")
    assert len(sizes) == 6 and all(width > 0 for width in sizes)
    screenshot(browser, tmp_path, "report.png")


def test_the_report_leads_with_money(browser, tmp_path):
    """A small file mixing a record written before the money fields with priced turns of two
    tenants and agents and a turn whose model has no price: the page, opened as a person would,
    shows the money figures first and every plot loads."""
    import json
    from dataclasses import asdict

    from tooldisco.engine.telemetry import Record

    t0 = 1_780_000_000.0
    turns = [Record("anthropic", "tool-search", time=t0 + 60, tool_tokens_before=3000, tool_tokens_after=300,
                    model="claude-sonnet-4", tenant="ab12cd34", agent="claude-code", cost_usd=0.5,
                    cost_usd_without=0.75, usage={"input": 1000, "cache_read": 6000, "cache_write": 2000, "output": 500},
                    context_window=200_000, context_share=0.1, upstream=[["client", 200], ["hidden", 200]]),
             Record("openai_responses", "tool-search", time=t0 + 3600, tool_tokens_before=3000, tool_tokens_after=300,
                    model="gpt-5", tenant="ef56ab78", agent="codex", cost_usd=0.25, cost_usd_without=0.5,
                    usage={"input": 2000, "cache_read": 0, "cache_write": 0, "output": 100}, context_share=0.3,
                    upstream=[["client", 200]], stream=True, passage="untouched"),
             Record("openai_chat", "relevance", time=t0 + 3700, model="local-llama", tenant="ef56ab78",
                    usage={"input": 10, "cache_read": 0, "cache_write": 0, "output": 5}, upstream=[["client", 200]])]
    log, page = tmp_path / "money.jsonl", tmp_path / "report_money.html"
    log.write_text("\n".join([json.dumps({"provider": "anthropic", "strategy": "tool-search", "time": t0,
                                          "tool_tokens_before": 4000, "tool_tokens_after": 500}),
                              *(json.dumps(asdict(r)) for r in turns)]) + "\n")
    subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "report.py"), str(log), "-o", str(page), "--quiet"],
                   check=True, capture_output=True)
    browser.get(page.as_uri())
    text = shown(browser, "Tool discovery report", "4 record(s)", "Money")
    assert "Spent $0.7500; without the proxy $1.2500; saved $0.5000 (40.0%)" in text
    assert "spent without the proxy saved saved % priced turns\n$0.7500 $1.2500 $0.5000 40.0% 2" in text
    assert "Caching included: 6,000 cache-read tokens (54.5% of input tokens), 2,000 cache-write tokens (18.2%)" in text
    assert "1 turn of models with no price: local-llama." in text
    assert "1 record(s) carry no money fields" in text
    assert text.index("Money") < text.index("Tool tokens (estimated)") < text.index("Per API")
    for heading in ("Saving over time, per tenant", "Saving over time, per agent", "Tokens by type",
                    "Tool definitions' share of the context window"):
        assert heading in text
    assert "turns median p95 max turns above 0.25\n2 20.0% 29.0% 30.0% 1" in text
    sizes = WebDriverWait(browser, WAIT).until(
        lambda d: d.execute_script(
            "const i = [...document.images]; return i.every(x => x.complete) && i.map(x => x.naturalWidth);"),
        "the report's images never finished loading")
    assert len(sizes) == 8 and all(width > 0 for width in sizes)  # no searches, no fallbacks: those say "none"
    assert "Search latency distribution: none" in text and "Fallbacks by reason: none" in text
    screenshot(browser, tmp_path, "report_money.png")  # the page's top: the money lead


def dollars(value: float, fine: bool) -> str:
    """A dollar figure as the page writes it: to a hundredth of a cent when a figure beside it is under $1."""
    return f"${value:,.4f}" if fine else f"${value:,.2f}"


def test_the_report_on_the_session_benchmarks_telemetry_shows_its_money(browser, tmp_path):
    """``scripts/bench_session.py`` through the addon (its cost check passing: the proxy reported what
    the fake provider billed), then ``tooldisco report`` over that run's telemetry: ``--json`` spends
    the telemetry's sum of ``cost_usd``, and the page, opened as a person would, shows those figures."""
    import json
    from decimal import Decimal

    telemetry = tmp_path / "telemetry"
    bench = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "bench_session.py"), "--plan", "release",
                            "--turns", "3", "--apis", "anthropic,chat", "--paths", "tool-search",
                            "--telemetry", str(telemetry)],
                           check=False, capture_output=True, text=True, timeout=240, cwd=REPO_ROOT)
    assert bench.returncode == 0 and "\nCost check: ok, 2 of 2 runs" in bench.stdout, \
        bench.stdout[-3000:] + bench.stderr[-3000:]
    log = telemetry / "tool-search.jsonl"
    records = [json.loads(line, parse_float=Decimal) for line in log.read_text().splitlines() if line.strip()]
    assert {r["model"] for r in records} == {"claude-sonnet-4-6", "gpt-5"}

    report = [sys.executable, "-m", "tooldisco.cli", "report", str(log), "--quiet"]
    figures = json.loads(subprocess.run([*report, "--json"], check=True, capture_output=True, text=True,
                                        cwd=REPO_ROOT).stdout)
    money = figures["money"]
    spent, without = sum(r["cost_usd"] for r in records), sum(r["cost_usd_without"] for r in records)
    assert money["spent_usd"] == float(spent) and money["without_usd"] == float(without)
    assert money["saved_usd"] == float(without - spent) > 0
    assert money["priced_turns"] == len(records) and money["unpriced_turns"] == 0

    page = tmp_path / "report_session.html"
    subprocess.run([*report, "-o", str(page)], check=True, capture_output=True, cwd=REPO_ROOT)
    browser.get(page.as_uri())
    text = shown(browser, "Tool discovery report", f"{len(records):,} record(s)", "Money")
    lead = [money[k] for k in ("spent_usd", "without_usd", "saved_usd")]
    fine = any(0 < abs(v) < 1 for v in lead)
    spent_text, without_text, saved_text = (dollars(v, fine) for v in lead)
    assert (f"Spent {spent_text}; without the proxy {without_text}; saved {saved_text} "
            f"({money['saved_pct']:.1f}%)") in text
    assert (f"spent without the proxy saved saved % priced turns\n{spent_text} {without_text} {saved_text} "
            f"{money['saved_pct']:.1f}% {len(records)}") in text
    assert "0 turns of models with no price." in text
    assert text.index("Money") < text.index("Tokens by type") < text.index("Per API")
    for model in ("claude-sonnet-4-6", "gpt-5"):
        assert any(line.startswith(f"{model} ") for line in text.splitlines()), model  # its row in the model table
    sizes = WebDriverWait(browser, WAIT).until(
        lambda d: d.execute_script(
            "const i = [...document.images]; return i.every(x => x.complete) && i.map(x => x.naturalWidth);"),
        "the report's images never finished loading")
    assert sizes and all(width > 0 for width in sizes)
    screenshot(browser, tmp_path, "report_session.png")  # the page's top: the benchmark's money
