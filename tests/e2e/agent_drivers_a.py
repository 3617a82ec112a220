"""Drivers for OpenCode, Qwen Code and the OpenAI Agents SDK on the MCP task of
``tests/e2e/agents.py``: each writes its agent's configuration into the run's private home
(the catalog's stdio MCP servers, approved; the real OpenAI host as the base URL, so the
traffic goes through ``HTTPS_PROXY``) and returns the command line.

Every run gets its own API key: the proxy keys a session without a client session id by
credential and first message, and each case here sends the same prompt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.e2e.mcp_server import mcp_config

#: The real OpenAI endpoint: the proxy maps it to the fake, so the agent talks to it through ``HTTPS_PROXY``.
OPENAI_V1 = "https://api.openai.com/v1"


def _servers() -> dict[str, dict[str, Any]]:
    """The catalog's stdio servers (``command``, ``args``), one process each."""
    return mcp_config(sys.executable)["mcpServers"]


def _binary(agents_bin: Path, name: str) -> Path:
    """An installed CLI beside the others in ``node_modules/.bin`` (``scripts/install_agents``)."""
    path = agents_bin / name
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run scripts/install_agents")
    return path


def _own_key(env: dict[str, str], case: str) -> None:
    env["OPENAI_API_KEY"] = f"sk-test-{case}"


# --- OpenCode ---------------------------------------------------------------------------------


def opencode(
    agents_bin: Path, case: str, api: str, model: str, prompt: str, home: Path, env: dict[str, str]
) -> list[str]:
    """``opencode run`` with the catalog as local MCP servers and every permission granted.

    ``api`` "responses": its built-in ``openai`` provider (Responses); "chat": an
    ``@ai-sdk/openai-compatible`` provider whose ``baseURL`` is the real OpenAI host (Chat).
    Models, updates, sharing and LSP downloads are off: they would reach other hosts; so is npm,
    which it runs in the background to add its plugin package to each config directory."""
    _own_key(env, case)
    if api == "responses":
        ref = f"openai/{model}"
        provider: dict[str, Any] = {"openai": {"options": {"apiKey": env["OPENAI_API_KEY"]}}}
    else:
        ref = f"compat/{model}"
        provider = {"compat": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "OpenAI-compatible",
            "options": {"baseURL": OPENAI_V1, "apiKey": env["OPENAI_API_KEY"]},
            "models": {model: {"name": model, "tool_call": True}},
        }}
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": ref,
        "small_model": ref,
        "provider": provider,
        "mcp": {name: {"type": "local", "command": [s["command"], *s["args"]], "enabled": True}
                for name, s in _servers().items()},
        "permission": {"*": "allow"},
        "autoupdate": False,
        "share": "disabled",
    }
    path = home / "opencode.json"
    home.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=1))
    env.update(
        OPENCODE_CONFIG=str(path),
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_SHARE="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        npm_config_offline="true",
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
    )
    return [str(_binary(agents_bin, "opencode")), "run", "--auto", prompt]


# --- Qwen Code --------------------------------------------------------------------------------


def qwen(
    agents_bin: Path, case: str, prompt: str, home: Path, env: dict[str, str], *, tool_search: bool = True
) -> list[str]:
    """Headless ``qwen`` on OpenAI Chat (its default base is DashScope: the base URL names the
    real OpenAI host), the catalog's servers trusted, tools run without asking (``yolo``).
    Without ``tool_search`` its own deferral is off (``tools.toolSearch.enabled``): every MCP
    tool goes out in full."""
    _own_key(env, case)
    settings = {
        "mcpServers": {n: {"command": s["command"], "args": s["args"], "trust": True} for n, s in _servers().items()},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "tools": {"toolSearch": {"enabled": tool_search}},
    }
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings, indent=1))
    env.update(OPENAI_MODEL="gpt-5", OPENAI_BASE_URL=OPENAI_V1, QWEN_CODE_SUPPRESS_YOLO_WARNING="1")
    return [str(_binary(agents_bin, "qwen")), "--auth-type", "openai", "--approval-mode", "yolo", prompt]


# --- OpenAI Agents SDK ------------------------------------------------------------------------

AGENTS_SDK_SCRIPT = '''
"""One Agents SDK run: an Agent with the MCP servers given as JSON, on Responses or Chat;
AGENTS_SDK_CHAIN=1 chains each Responses turn to the last by previous_response_id."""
import asyncio, json, os, sys
from contextlib import AsyncExitStack

from agents import Agent, OpenAIChatCompletionsModel, Runner
from agents.mcp import MCPServerStdio
from openai import AsyncOpenAI


async def main(api: str, model_name: str, servers: dict, prompt: str) -> None:
    async with AsyncExitStack() as stack:
        mcp = [await stack.enter_async_context(MCPServerStdio(
                   {"command": s["command"], "args": s["args"]}, name=name, cache_tools_list=True,
                   client_session_timeout_seconds=30))
               for name, s in servers.items()]
        model = model_name if api == "responses" else OpenAIChatCompletionsModel(model_name, AsyncOpenAI())
        agent = Agent(name="assistant", instructions="Use the tools to answer.", mcp_servers=mcp, model=model)
        chain = os.environ.get("AGENTS_SDK_CHAIN") == "1"
        result = await Runner.run(agent, prompt, max_turns=8, auto_previous_response_id=chain)
        print(result.final_output)


asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]))
'''


def openai_agents(case: str, api: str, model: str, prompt: str, home: Path, env: dict[str, str]) -> list[str]:
    """A Python script (this interpreter) running an Agents SDK ``Agent`` with the catalog's
    servers as ``MCPServerStdio``; httpx reaches the API through ``HTTPS_PROXY`` and trusts the
    proxy's CA through ``SSL_CERT_FILE``. Tracing is off: it would post to the real platform."""
    _own_key(env, case)
    home.mkdir(parents=True, exist_ok=True)
    script = home / "agents_sdk_run.py"
    script.write_text(AGENTS_SDK_SCRIPT)
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    return [sys.executable, str(script), api, model, json.dumps(_servers()), prompt]
