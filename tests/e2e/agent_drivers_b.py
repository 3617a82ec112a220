"""Drivers for more real agent CLIs on the MCP task: Cline CLI, Copilot CLI and pi.

Each gets the catalog's stdio MCP servers in its own config format, inside the run's private
home (and, where the agent has one, its own data or sessions dir), talks to the real provider
host through ``HTTPS_PROXY`` with the proxy's CA, and runs headless with its tools approved.
The binaries come from ``scripts/install_agents`` beside Claude Code's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tests.e2e.mcp_server import mcp_config, tools_for

if TYPE_CHECKING:
    from tests.e2e.agents import AgentBinaries, McpCase

#: The extension that gives pi the MCP servers' tools (pi has no MCP client of its own).
PI_EXTENSION = Path(__file__).with_name("pi_mcp_extension.ts")


def _bin(bins: AgentBinaries, name: str) -> str:
    """An installed CLI: ``scripts/install_agents`` links every one into the same ``.bin``."""
    return str(bins.claude.parent / name)


def _servers() -> dict[str, dict]:
    return mcp_config(sys.executable)["mcpServers"]


def cline(case: McpCase, prompt: str, bins: AgentBinaries, home: Path, env: dict[str, str]) -> list[str]:
    """Cline CLI with the ``openai-native`` provider (Responses); MCP servers in its data dir's
    ``settings/cline_mcp_settings.json``, each tool auto-approved (headless Cline cannot ask).
    ``--yolo`` is not used: it waits for a ``submit_and_exit`` call the script does not make."""
    data = home / "cline-data"
    (data / "settings").mkdir(parents=True, exist_ok=True)
    servers = {name: {"type": "stdio", "command": s["command"], "args": s["args"], "disabled": False,
                      "autoApprove": [t["name"] for t in tools_for(name)]} for name, s in _servers().items()}
    (data / "settings" / "cline_mcp_settings.json").write_text(json.dumps({"mcpServers": servers}))
    return [_bin(bins, "cline"), "--data-dir", str(data), "--config", str(home / ".cline"),
            "-P", "openai-native", "-k", env["OPENAI_API_KEY"], "-m", case.model, prompt]


def copilot(case: McpCase, prompt: str, bins: AgentBinaries, home: Path, env: dict[str, str]) -> list[str]:
    """Copilot CLI with its own key (no GitHub login, offline): the OpenAI provider on the wire
    API the case's env sets (``COPILOT_PROVIDER_WIRE_API``); MCP servers from a file, every tool
    allowed. Its state goes to ``$HOME/.copilot``, the run's private home."""
    config = home / "copilot-mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        name: {"type": "local", "command": s["command"], "args": s["args"], "tools": ["*"]}
        for name, s in _servers().items()}}))
    env.update(COPILOT_OFFLINE="true", COPILOT_PROVIDER_TYPE="openai",
               COPILOT_PROVIDER_BASE_URL="https://api.openai.com/v1", COPILOT_PROVIDER_API_KEY=env["OPENAI_API_KEY"],
               COPILOT_MODEL=case.model, COPILOT_ALLOW_ALL="true")
    return [_bin(bins, "copilot"), "-p", prompt, "-s", "--yolo", "--disable-builtin-mcps", "--no-auto-update",
            "--additional-mcp-config", f"@{config}"]


def pi(case: McpCase, prompt: str, bins: AgentBinaries, home: Path, env: dict[str, str]) -> list[str]:
    """pi on the provider the case's API names (``anthropic`` or ``openai``: Responses), with
    :data:`PI_EXTENSION` serving the MCP servers' tools as ``mcp__<server>__<tool>``; no session
    file, no startup network calls, its agent dir in the run's home."""
    config = home / "pi-mcp.json"
    config.write_text(json.dumps({"mcpServers": _servers()}))
    env.update(PI_MCP_CONFIG=str(config), PI_CODING_AGENT_DIR=str(home / ".pi"))
    provider = "anthropic" if case.api == "anthropic" else "openai"
    return [_bin(bins, "pi"), "-p", "--no-session", "--offline", "--provider", provider, "--model", case.model,
            "-e", str(PI_EXTENSION), prompt]


DRIVERS: dict[str, Callable[[McpCase, str, AgentBinaries, Path, dict[str, str]], list[str]]] = {
    "cline": cline,
    "copilot": copilot,
    "pi": pi,
}
