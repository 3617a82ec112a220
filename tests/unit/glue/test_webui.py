"""mitmweb out of the box (glue.webui): its own login URL readable in its own log line on
loopback, masked everywhere else; one line on how to log in when it stays masked; the Comment
column added to ``web_columns``."""

from __future__ import annotations

import logging

import pytest
from mitmproxy.test import taddons
from mitmproxy.tools.web import webaddons
from tooldisco.glue import webui
from tooldisco.glue.webui import WebUI

from tests.unit.glue.chain import Chain

TOKEN = "0123456789abcdef0123456789abcdef"


class FakeMaster:
    """What the filter reads of mitmweb's master: its login URL (``WebMaster.web_url``)."""

    def __init__(self, url: str) -> None:
        self.web_url = url


@pytest.fixture
def web(monkeypatch):
    """mitmweb's options and its login URL for the addons in the context."""
    def make(tctx, host: str = "127.0.0.1", password: str = "") -> str:
        tctx.master.addons.add(webaddons.WebAddon(), webaddons.WebAuth())
        tctx.configure(tctx.master.addons.get("webaddon"), web_host=host, web_port=8081, web_password=password)
        url = f"http://{host}:8081/" + ("" if password else f"?token={TOKEN}")
        monkeypatch.setattr(webui.ctx, "master", FakeMaster(url))
        return url

    return make


def logged(caplog, name: str, message: str) -> str:
    logging.getLogger(name).info(message)
    return caplog.records[-1].getMessage()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_mitmwebs_own_login_line_keeps_its_token_on_loopback(caplog, web, host):
    caplog.set_level(logging.INFO)
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        url = web(tctx, host)
        assert logged(caplog, "mitmproxy.tools.web.master", f"Web server listening at {url}") == \
            f"Web server listening at {url}"
        no_browser = f"No web browser found. Please open a browser and point it to {url}"
        assert logged(caplog, "mitmproxy.tools.web.webaddons", no_browser) == no_browser
        # The same token anywhere else, and any other ?token=, stays masked.
        assert TOKEN not in logged(caplog, "mitmproxy.proxy", f"GET {url}")
        assert TOKEN not in logged(caplog, "mitmproxy.tools.web.master", "GET http://127.0.0.1:9/?token=" + TOKEN)


HASH = "$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHRzb21lc2FsdA$ZmFrZWZha2VmYWtlZmFrZWZha2VmYWtlZmFrZWZha2U"


@pytest.mark.parametrize("host, password", [("0.0.0.0", ""), ("192.168.1.7", ""), ("127.0.0.1", HASH)])
def test_the_token_stays_masked_off_loopback_or_with_a_password(caplog, web, host, password):
    caplog.set_level(logging.INFO)
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        url = web(tctx, host, password)
        shown = logged(caplog, "mitmproxy.tools.web.master", f"Web server listening at http://{host}:8081/?token={TOKEN}")
        assert TOKEN not in shown and "?token=[redacted]" in shown
        chain.get(WebUI).running()
    hints = [r.getMessage() for r in caplog.records if r.getMessage().startswith("mitmweb login:")]
    if password:  # the user's own password: nothing to say
        assert hints == [] and "?token" not in url
    else:
        assert len(hints) == 1 and f"listens on {host}" in hints[0] and "web_password" in hints[0]
        assert "tooldisco run --web" in hints[0]


def test_the_comment_column_is_added_once_and_kept(web):
    chain = Chain()
    with taddons.context(*chain.addons) as tctx:
        web(tctx)
        options = tctx.master.options
        assert "comment" not in options.web_columns  # mitmweb's default
        chain.get(WebUI).running()
        assert options.web_columns == ["tls", "icon", "path", "method", "status", "size", "time", "comment"]
        chain.get(WebUI).running()  # a script reload runs it again
        assert options.web_columns.count("comment") == 1
        tctx.configure(tctx.master.addons.get("webaddon"), web_columns=["path", "comment"])
        chain.get(WebUI).running()
        assert options.web_columns == ["path", "comment"]


def test_without_mitmweb_nothing_changes(caplog):
    chain = Chain()
    with taddons.context(*chain.addons):
        chain.get(WebUI).running()  # mitmdump: no web options
        assert webui.login_url() is None
