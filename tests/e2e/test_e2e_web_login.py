"""The addon in a user's own mitmweb, as the README says to load it: ``mitmweb -s "$(tooldisco
addon-path)"`` and no other option (a confdir and ports aside, for isolation). The user can log in
by following what it prints, and the flow list has the Comment column the addon writes to.

No browser: an HTTP GET of the printed URL is what a browser does first (mitmweb answers its page
and sets its session cookie), and mitmweb's options API is what its page reads its columns from.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import MITMWEB, REPO_ROOT, STARTUP_TIMEOUT, _free_port, scrubbed_env

pytestmark = pytest.mark.e2e

LOGIN = re.compile(r"Web server listening at (http://127\.0\.0\.1:\d+/\S*)")


def addon_path() -> str:
    """What ``tooldisco addon-path`` prints, the console script beside this Python."""
    tool = Path(os.environ.get("VIRTUAL_ENV") or REPO_ROOT / ".venv") / "bin" / "tooldisco"
    command = [str(tool)] if tool.exists() else ["python", "-m", "tooldisco.cli"]
    return subprocess.run([*command, "addon-path"], check=True, capture_output=True, text=True).stdout.strip()


def test_a_users_own_mitmweb_prints_a_login_that_works_and_shows_the_comments(tmp_path):
    web_port, proxy_port = _free_port(), _free_port()
    env = scrubbed_env()
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"):  # a machine without a browser to open
        env.pop(name, None)
    log = tmp_path / "mitmweb.log"
    command = [str(MITMWEB), "-s", addon_path(), "--set", f"confdir={tmp_path / 'confdir'}",
               "--listen-host", "127.0.0.1", "--listen-port", str(proxy_port), "--web-port", str(web_port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not (m := LOGIN.search(log.read_text(errors="replace"))):
            assert proc.poll() is None, f"mitmweb exited:\n{log.read_text(errors='replace')}"
            assert time.monotonic() < deadline, f"mitmweb printed no login URL:\n{log.read_text(errors='replace')}"
            time.sleep(0.1)
        url = m.group(1)
        assert f":{web_port}/?token=" in url and "[redacted]" not in url, url
        with httpx.Client(trust_env=False, timeout=30) as browser:
            page = browser.get(url)
            assert page.status_code == 200 and "mitmproxy" in page.text.lower()
            assert f"mitmproxy-auth-{web_port}" in browser.cookies  # logged in: the session cookie
            options = browser.get(f"http://127.0.0.1:{web_port}/options")  # the cookie alone, no token
            assert options.status_code == 200
            columns = options.json()["web_columns"]["value"]
            assert "comment" in columns and columns[:-1] == ["tls", "icon", "path", "method", "status", "size", "time"]
            assert browser.get(f"http://127.0.0.1:{web_port}/flows").status_code == 200
        with httpx.Client(trust_env=False, timeout=30) as stranger:  # without the token: locked out
            assert stranger.get(f"http://127.0.0.1:{web_port}/options").status_code == 403
        text = log.read_text(errors="replace")
        assert "tool discovery: on" in text and "mitmweb login:" not in text  # nothing more to say on loopback
        token = url.partition("?token=")[2]
        assert text.count(token) <= 2, "the token is printed in mitmweb's own login lines only"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
