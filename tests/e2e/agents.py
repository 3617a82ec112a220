"""Helpers to install and drive the real agent CLIs (Claude Code, Codex CLI, Gemini CLI)
headless through a :class:`~tests.e2e.harness.MitmDump`, each in a private home.

The CLIs come from ``scripts/install_agents`` (pinned npm packages in ``.agents/``). Each run
has a timeout and kills its whole process group when it expires. ``CLIENT_RECORDER`` is a
tiny mitmproxy script that, loaded *before* the addon, writes every request exactly as the
client sent it, so a test can check what the agent itself put in its history.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.harness import REPO_ROOT, tail
from tests.e2e.mcp_server import mcp_config

INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install_agents"
AGENTS_DIR = Path(os.environ.get("AGENTS_DIR", REPO_ROOT / ".agents"))
#: Seconds one agent run may take before it is killed.
AGENT_TIMEOUT = float(os.environ.get("E2E_AGENT_TIMEOUT", "180"))
#: Seconds the npm install may take (a cold install is ~30 s on these machines).
INSTALL_TIMEOUT = float(os.environ.get("E2E_AGENT_INSTALL_TIMEOUT", "900"))

CLIENT_RECORDER = '''
"""Record each client request (method, url, headers, body) as received, before other addons."""
import base64, json
from typing import Optional
from mitmproxy import ctx

class ClientRecorder:
    def load(self, loader):
        loader.add_option("client_record_path", Optional[str], None, "JSONL file for client requests")

    def request(self, flow):
        path = ctx.options.client_record_path
        if not path or flow.is_replay:
            return  # the proxy's own re-forwards are not the client's
        req = flow.request
        rec = {"method": req.method, "url": req.pretty_url, "headers": list(req.headers.items()),
               "body_b64": base64.b64encode(req.raw_content or b"").decode()}
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\\n")

addons = [ClientRecorder()]
'''


@dataclass(frozen=True)
class AgentBinaries:
    """Paths of the installed CLIs."""

    claude: Path
    codex: Path
    gemini: Path


def npm_available() -> bool:
    return shutil.which("npm") is not None and shutil.which("node") is not None


def install_agents() -> AgentBinaries:
    """Run ``scripts/install_agents`` (idempotent) and return where the binaries are."""
    env = {**os.environ, "AGENTS_DIR": str(AGENTS_DIR)}
    out = subprocess.run(
        ["bash", str(INSTALL_SCRIPT)], env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"scripts/install_agents failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    paths = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    return AgentBinaries(**{name: Path(paths[name]) for name in ("claude", "codex", "gemini")})


@dataclass
class AgentRun:
    """The outcome of one headless agent run."""

    name: str
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    notes: list[str] = field(default_factory=list)

    def report(self) -> str:
        """Everything needed to understand a failed run (for assertion messages)."""
        state = f"TIMED OUT after {self.seconds:.0f}s" if self.timed_out else f"exit {self.returncode}"
        return (
            f"{self.name}: {state} in {self.seconds:.1f}s\nargv: {self.argv}\n"
            + "".join(f"{n}\n" for n in self.notes)
            + f"--- stdout ---\n{tail(self.stdout, 8000)}\n--- stderr ---\n{tail(self.stderr, 8000)}"
        )


def run_agent(
    name: str, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, timeout: float = AGENT_TIMEOUT
) -> AgentRun:
    """Run ``argv`` in its own process group with no stdin; kill the group on timeout."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    return AgentRun(name, list(argv), proc.returncode, stdout, stderr, time.monotonic() - start, timed_out)


# --- per-agent setup -----------------------------------------------------------------------


def claude_command(bins: AgentBinaries, prompt: str, mcp_config_path: Path, allowed_tools: str = "Read") -> list[str]:
    """Claude Code headless (``-p``) with our MCP servers only, allowed to run ``allowed_tools``.

    ``--permission-mode bypassPermissions`` is refused when running as root (as CI does), so
    the tools the script uses are allowed explicitly instead."""
    return [
        str(bins.claude),
        "-p",
        prompt,
        "--mcp-config",
        str(mcp_config_path),
        "--strict-mcp-config",
        "--allowedTools",
        allowed_tools,
        "--output-format",
        "text",
    ]


def prepare_claude(home: Path, env: dict[str, str]) -> Path:
    """Quiet Claude Code's side traffic; write the MCP config (one process per catalog server)."""
    env.update(DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1")
    path = home / "mcp.json"
    path.write_text(json.dumps(mcp_config(sys.executable), indent=1))
    return path


def codex_command(bins: AgentBinaries, prompt: str) -> list[str]:
    return [str(bins.codex), "exec", "--skip-git-repo-check", prompt]


def prepare_codex(bins: AgentBinaries, home: Path, env: dict[str, str]) -> None:
    """A private ``CODEX_HOME`` with ``model = "gpt-5"``, logged in with the test API key
    (``codex exec`` does not send ``OPENAI_API_KEY`` by itself: it needs ``codex login``)."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text('model = "gpt-5"\n')
    env["CODEX_HOME"] = str(codex_home)
    login = subprocess.run(
        [str(bins.codex), "login", "--with-api-key"],
        input=env["OPENAI_API_KEY"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if login.returncode != 0 or not (codex_home / "auth.json").exists():
        raise RuntimeError(f"codex login failed ({login.returncode}):\n{login.stdout}\n{login.stderr}")


def gemini_command(bins: AgentBinaries, prompt: str) -> list[str]:
    return [str(bins.gemini), "-p", prompt]


def prepare_gemini(home: Path, env: dict[str, str]) -> None:
    """API-key auth, a trusted workspace, no usage statistics (they go to an unreachable host)."""
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"


# --- what the client sent ------------------------------------------------------------------


def client_requests(path: Path) -> list[dict[str, Any]]:
    """The requests ``CLIENT_RECORDER`` wrote, each with its parsed JSON body (or None) as ``json``."""
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        rec = json.loads(line)
        try:
            rec["json"] = json.loads(base64.b64decode(rec["body_b64"]))
        except ValueError:
            rec["json"] = None
        out.append(rec)
    return out
