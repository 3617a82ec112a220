"""Installing where users are: the wheel into a Python that already runs a mitmproxy 12.

One venv per session (a released mitmproxy from the package index, as ``pip install mitmproxy``
gives it), then the checkout's wheel on top: mitmproxy's version stays, the wheel carries the
addon script and the configs, and ``mitmdump -s "$(tooldisco addon-path)"`` processes a request.
Before the wheel, the same mitmproxy alone shows what a missing dependency looks like. Then a pip
user's first steps: ``tooldisco init`` writes a config that ``doctor`` and ``run`` find, a shipped
config goes by name, config mistakes are a few lines, ``doctor`` fails a bundle lacking the CA and
``wrap`` names an agent that is not installed.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from tests.e2e.harness import REPO_ROOT, MitmDump, addon_config, scrubbed_env
from tests.fakeprovider import FakeProvider, reply
from tests.support.catalog import anthropic_tools
from tests.unit.test_doctor import make_ca, pem

pytestmark = pytest.mark.e2e

MITMPROXY = importlib.metadata.version("mitmproxy")  # the release this checkout is tested with
PIP_TIMEOUT = 600


@dataclass
class Venv:
    root: Path
    wheel: Path
    bare_check: subprocess.CompletedProcess[str]  # mitmdump on the checkout's script before tooldisco

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    def mitmproxy_version(self) -> str:
        return subprocess.run([str(self.bin("python")), "-c", "import importlib.metadata as m; print(m.version('mitmproxy'))"],
                              capture_output=True, text=True, check=True).stdout.strip()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=PIP_TIMEOUT, env=scrubbed_env(), check=False)


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    root = tmp_path_factory.mktemp("install") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    got = _pip(python, "install", "--quiet", f"mitmproxy=={MITMPROXY}")
    if got.returncode != 0:
        pytest.skip(f"no mitmproxy {MITMPROXY} from the package index (no network?): {got.stderr.strip()[-300:]}")
    bare = subprocess.run([str(root / "bin" / "mitmdump"), "--listen-host", "127.0.0.1", "-p", "0",
                           "-s", str(REPO_ROOT / "addon" / "tool_discovery.py")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path_factory.getbasetemp(), check=False)
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources.
    source = root.parent / "source"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO_ROOT / name, source / name if source.exists() else _mkdir(source) / name)
    shutil.copytree(REPO_ROOT / "addon", source / "addon", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = root.parent / "wheels"
    built = _pip(Path(sys.executable), "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(source))
    assert built.returncode == 0, built.stderr
    wheel = next(wheels.glob("tooldisco-*.whl"))
    got = _pip(python, "install", "--quiet", str(wheel))
    assert got.returncode == 0, got.stderr
    yield Venv(root, wheel, bare)


def test_a_mitmproxy_without_the_dependencies_says_how_to_install_them(venv: Venv) -> None:
    out = venv.bare_check.stdout + venv.bare_check.stderr
    assert venv.bare_check.returncode != 0, out
    assert "Traceback" not in out, out
    [line] = [line for line in out.splitlines() if line.startswith("tooldisco:")]
    assert "missing dependency" in line and f"{venv.bin('python')} -m pip install {REPO_ROOT}" in line


def test_the_wheel_carries_the_addon_and_the_configs(venv: Venv) -> None:
    names = set(zipfile.ZipFile(venv.wheel).namelist())
    assert {"tooldisco/script/tool_discovery.py", "tooldisco/cli.py", "tooldisco/configs/tool_discovery.yaml",
            "tooldisco/configs/relevance.yaml", "tooldisco/report/page.py", "tooldisco/report/selector.py"} <= names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "tooldisco = tooldisco.cli:main" in zipfile.ZipFile(venv.wheel).read(entry_points).decode()


def test_installing_keeps_the_mitmproxy_that_was_there(venv: Venv) -> None:
    assert venv.mitmproxy_version() == MITMPROXY


def test_the_installed_addon_processes_a_request(venv: Venv, tmp_path: Path) -> None:
    addon = subprocess.run([str(venv.bin("tooldisco")), "addon-path"], capture_output=True, text=True,
                           check=True, cwd=tmp_path).stdout.strip()
    assert Path(addon).is_relative_to(venv.root) and Path(addon).is_file()
    doctor = subprocess.run([str(venv.bin("tooldisco")), "doctor"], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert "ok    config " + str(venv.root) in doctor.stdout, doctor.stdout

    class Installed(MitmDump):
        def command(self, port: int = 0) -> list[str]:
            cmd = super().command(port)
            return [str(venv.bin("mitmdump")), *cmd[1:]]

    with FakeProvider() as fake:
        proxy = Installed(tmp_path, fake.url, script=addon,
                          config=partial(addon_config, strategy="tool-search", max_search_results=3))
        proxy.start()
        try:
            fake.set_script([reply("done")])
            tools = anthropic_tools(60)
            body = {"model": "claude-x", "max_tokens": 64, "tools": tools,
                    "messages": [{"role": "user", "content": f"What's the weather? [{uuid.uuid4().hex[:8]}]"}]}
            with proxy.httpx_client() as client:
                r = client.post("https://api.anthropic.com/v1/messages", json=body,
                                headers={"x-api-key": "sk-ant-test"}, timeout=60)
            assert r.status_code == 200, r.text
            sent = fake.requests[-1].json.get("tools") or []
            assert 0 < len(sent) < len(tools)
        finally:
            proxy.stop()
    log = proxy.log_path.read_text()
    assert f"Loading script {addon}" in log
    assert "tool discovery: POST api.anthropic.com/v1/messages [anthropic] · 60 tools →" in log  # the flow line
    assert os.path.getsize(tmp_path / "tool_discovery.jsonl") > 0


def test_the_installed_demo_runs_without_an_sdk(venv: Venv, tmp_path: Path) -> None:
    done = subprocess.run([str(venv.bin("tooldisco")), "demo"], capture_output=True, text=True, timeout=180,
                          cwd=tmp_path, env={**scrubbed_env(), "HOME": str(tmp_path)}, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "client: plain HTTP" in done.stdout and "search: the model asked" in done.stdout


def test_the_installed_report_reads_the_installed_addons_telemetry(venv: Venv, tmp_path: Path) -> None:
    """The report ships in the wheel: without its extra it says how to get it in one line, the
    selector tables need none, and with the extra the page is written."""
    log = tmp_path / "tool_discovery.jsonl"
    log.write_text('{"ts": 1780000000.0, "strategy": "tool-search", "api": "anthropic", "tools_total": 60}\n')
    tooldisco = str(venv.bin("tooldisco"))
    bare = subprocess.run([tooldisco, "report", str(log)], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert bare.returncode == 1 and "Traceback" not in bare.stderr, bare.stderr
    assert "pip install 'tooldisco[report]'" in bare.stderr and len(bare.stderr.strip().splitlines()) == 1
    tables = subprocess.run([tooldisco, "report", "--selector", str(log)], capture_output=True, text=True,
                            cwd=tmp_path, check=False)
    assert tables.returncode == 0 and "No api-strategy records found." in tables.stdout, tables.stderr
    got = _pip(venv.bin("python"), "install", "--quiet", f"{venv.wheel}[report]")
    if got.returncode != 0:
        pytest.skip(f"the report extra did not install (no network?): {got.stderr.strip()[-300:]}")
    page = subprocess.run([tooldisco, "report", str(log), "-o", str(tmp_path / "r.html"), "--quiet"],
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert page.returncode == 0, page.stderr
    assert "1 record(s)" in page.stdout and "Tool discovery report" in (tmp_path / "r.html").read_text()


def _user_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in scrubbed_env().items() if k not in (
        "TOOLDISCO_CONFIG", "CONFIG", "XDG_CONFIG_HOME", "AWS_CA_BUNDLE")}  # doctor checks each CA variable set
    return {**env, "HOME": str(home)}


def _started(venv: Venv, home: Path, *argv: str) -> str:
    """``tooldisco run ARGV`` until mitmdump listens, then stopped: what it printed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = home / f"run-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(venv.bin("tooldisco")), "run", *argv, "-p", str(port), "--set",
                                 f"confdir={home / 'confdir'}"], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, cwd=home, env={**_user_env(home), "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while f"listening at 127.0.0.1:{port}" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return log.read_text(errors="replace")


def test_a_pip_users_first_day(venv: Venv, tmp_path: Path) -> None:
    tooldisco = str(venv.bin("tooldisco"))
    env = _user_env(tmp_path)

    def cli(*argv: str, **more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([tooldisco, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                              env={**env, **more}, check=False)

    own = tmp_path / ".config" / "tooldisco" / "config.yaml"
    init = cli("init")
    assert init.returncode == 0 and init.stdout.strip() == str(own), init.stderr
    said = "tooldisco: config ~/.config/tooldisco/config.yaml (your own; `tooldisco init` wrote it)"
    # run uses it (and says so, first), and so does doctor.
    text = _started(venv, tmp_path)
    assert text.splitlines()[0] == said, text
    assert f"tool discovery: on · config {own} · strategy tool-search" in text
    doctor = cli("doctor", "--confdir", str(tmp_path / "confdir"))
    assert f"ok    config {own} (your own; `tooldisco init` wrote it) loads (strategy tool-search)" in doctor.stdout
    assert said in doctor.stderr and doctor.returncode == 0, doctor.stdout + doctor.stderr
    # A shipped config by name starts.
    assert "strategy relevance" in _started(venv, tmp_path, "--config", "relevance")
    # Mistakes are a few lines, no traceback, before anything starts.
    (tmp_path / "broken.yaml").write_text("hosts: [default\n")
    for argv in (["run", "--config", "nope.yaml"], ["run", "--config", "broken.yaml"]):
        done = cli(*argv)
        out = done.stdout + done.stderr
        assert done.returncode != 0 and "Traceback" not in out and len(out.strip().splitlines()) <= 5, out
        assert "Point an agent" not in out
    # doctor fails a bundle that lacks the proxy's CA, and passes one that holds it.
    lacking = tmp_path / "lacking.pem"
    lacking.write_bytes(pem(make_ca("public")))
    bad = cli("doctor", "--confdir", str(tmp_path / "confdir"), NODE_EXTRA_CA_CERTS=str(lacking))
    assert bad.returncode == 1 and f"FAIL  NODE_EXTRA_CA_CERTS={lacking} does not hold mitmproxy's CA" in bad.stdout
    good = cli("doctor", "--confdir", str(tmp_path / "confdir"),
               NODE_EXTRA_CA_CERTS=str(tmp_path / "confdir" / "mitmproxy-ca-cert.pem"))
    assert good.returncode == 0, good.stdout
    # wrap names an agent that is not installed.
    wrap = cli("wrap", "claude", "--", "claude-not-installed-here", "-p", "hi")
    assert wrap.returncode == 127 and "agent not found: claude-not-installed-here is not on PATH" in wrap.stderr
