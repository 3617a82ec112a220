"""mitmweb as a person uses it: a real mitmweb with the addon in front of the fake provider, a
client whose model searches (a JSON answer and a live stream), then a headless Chromium opens
the page and the test reads what it shows: the comment, the "Tool discovery" view of the
bodies, and the proxy's own hidden rounds as flows of their own.

Needs Debian's ``chromium`` and ``chromium-driver`` (scripts/test installs them); skips without.
``TOOLDISCO_SCREENSHOTS=docs`` saves the screenshots the README shows.
"""

from __future__ import annotations

import os
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
        lambda d: len(rows(d, "tool discovery: tool-search")) == 2 and len(rows(d, "the proxy's own round")) == 4,
        "mitmweb never listed the two client flows and their four hidden rounds")
    listing = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr.has-request")]
    # In order: each client flow, then its rounds (the JSON answer first, then the stream).
    assert ["own round 1 of 2" in t for t in listing] == [False, True, False, False, True, False]
    assert ["own round 2 of 2" in t for t in listing] == [False, False, True, False, False, True]

    rows(browser, "tool discovery: tool-search")[1].click()  # the live stream's flow
    page = shown(browser, "what the client sent, and what went upstream", "search 1: 'weather forecast' via")
    assert "60 sent by the client" in page and "deferred" in page and "search tool" in page
    assert any(line.startswith("found") and TARGET in line for line in page.splitlines())
    screenshot(browser, tmp_path, "mitmweb_flow.png")
    tab(browser, "Comment")
    shown(browser, "tool discovery: tool-search · 60 tools:", f"search 'weather forecast' → {TARGET}", "2 upstream rounds")

    rows(browser, "own round 1 of 2")[1].click()  # the stream's first round: the search call
    tab(browser, "Response")
    shown(browser, "tool calls in what the upstream answered:", f'{SEARCH_TOOL} {{"query": "weather forecast"}}',
          "hidden from the client")
    screenshot(browser, tmp_path, "mitmweb_round.png")
    tab(browser, "Request")
    page = shown(browser, "the proxy's own round 1 of 2 for client flow", "tools in this body (what the model saw)")
    assert "x-api-key: [redacted]" in page.lower() and "sk-ant-test" not in page  # the proxy's own flows show no key


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
