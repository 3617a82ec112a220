"""Helpers to install and drive the real agent CLIs (Claude Code, Codex CLI, Gemini CLI; OpenCode,
Qwen Code and the OpenAI Agents SDK through ``agent_drivers_a``; Cline CLI, Copilot CLI and pi
through ``agent_drivers_b``) headless through a :class:`~tests.e2e.harness.MitmDump`, each in a
private home.

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

from tests.e2e import agent_drivers_a
from tests.e2e.harness import ADDON_PATH, REPO_ROOT, TEST_KEYS, ConfigSpec, MitmDump, tail
from tests.e2e.mcp_server import call_marker, mcp_config
from tests.fakeprovider import SEARCH_TOOL, Call, FakeProvider, RecordedRequest, Rule, call, calls, reply
from tests.fakeprovider.providers.openai_responses import TOOL_SEARCH

INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install_agents"
AGENTS_DIR = Path(os.environ.get("AGENTS_DIR", REPO_ROOT / ".agents"))
#: Seconds one agent run may take before it is killed.
AGENT_TIMEOUT = float(os.environ.get("E2E_AGENT_TIMEOUT", "180"))
#: Seconds the npm install may take (generous: a cold install downloads every package).
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
    import fcntl

    env = {**os.environ, "AGENTS_DIR": str(AGENTS_DIR)}
    AGENTS_DIR.mkdir(parents=True, exist_ok=True)
    # Test workers (pytest-xdist) install at once: one installs, the others wait and find it done.
    with open(AGENTS_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)], env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
            check=False,
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


def prepare_codex(
    bins: AgentBinaries, home: Path, env: dict[str, str], *, model: str = "gpt-5", mcp: bool = False
) -> None:
    """A private ``CODEX_HOME`` with ``model`` (and, with ``mcp``, the catalog's servers as
    ``[mcp_servers.<name>]``, their tools approved: ``codex exec`` cannot ask), logged in with
    the test API key (``codex exec`` does not send ``OPENAI_API_KEY`` by itself: it needs
    ``codex login``)."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    servers = mcp_config(sys.executable)["mcpServers"] if mcp else {}
    (codex_home / "config.toml").write_text(
        f"model = {json.dumps(model)}\n"
        + "".join(
            f"\n[mcp_servers.{name}]\ncommand = {json.dumps(s['command'])}\nargs = {json.dumps(s['args'])}\n"
            'default_tools_approval_mode = "approve"\n'
            for name, s in servers.items()
        )
    )
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


def prepare_gemini(home: Path, env: dict[str, str], *, mcp: bool = False) -> None:
    """API-key auth, a trusted workspace, no usage statistics (they go to an unreachable host);
    with ``mcp``, the catalog's servers as ``mcpServers``, trusted: headless Gemini CLI offers
    the model no tool that would ask for a confirmation."""
    settings: dict[str, Any] = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
    }
    if mcp:
        servers = mcp_config(sys.executable)["mcpServers"]
        settings["mcpServers"] = {n: {"command": s["command"], "args": s["args"], "trust": True}
                                  for n, s in servers.items()}
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


def screened(sent: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Screening findings (``policy.screening``) in the tools of the agent's requests, by tool."""
    from urllib.parse import urlsplit

    from tooldisco.apis.registry import detect
    from tooldisco.policy.screening import screen

    found: dict[str, list[str]] = {}
    for c in sent:
        url = urlsplit(c["url"])
        adapter = detect("POST", url.path + (f"?{url.query}" if url.query else ""), url.hostname)
        if adapter is None:
            continue
        for tool in adapter.parse(json.dumps(c["json"])).tools:
            if findings := screen(tool):
                found[tool.name] = [f"{f.kind} in {f.where}: {f.detail}" for f in findings]
    return found


# --- MCP tasks: one MCP tool out of the catalog's 125 ------------------------------------------

MCP_PROMPT = (
    "What is the current value of the secret db-password (version latest) in the cloud secret manager? "
    "Fetch it with the MCP tool and tell me."
)
#: The tool the task needs, on the catalog's ``cloud`` server, and the arguments the model calls it with.
MCP_SERVER, MCP_TOOL, MCP_ARGS = "cloud", "get_secret", {"secret": "db-password", "version": "latest"}
#: What the fake's model searches for when a search tool of the proxy's is offered.
MCP_QUERY = "get a secret from the cloud secret manager"
#: Gemini CLI first asks a small model to rate the prompt's complexity (JSON) to pick a model.
GEMINI_ROUTER = Rule(text='{"complexity_reasoning": "a simple lookup", "complexity_score": 5}',
                     contains="complexity_score")
#: Search tools of the clients themselves, by name or by type: a request must never carry one beside ours.
CLIENT_SEARCH_NAMES = frozenset({"ToolSearch", "tool_search"})  # Claude Code's, Qwen Code's
CLIENT_SEARCH_TYPE = "tool_search"  # Responses ``tool_search``, Anthropic ``tool_search_tool_*``
#: How the fake's model calls the proxy's search: classic, or native on Responses (a client-executed ``tool_search``).
PROXY_SEARCHES = (SEARCH_TOOL, TOOL_SEARCH)


@dataclass(frozen=True)
class McpCase:
    """One agent configuration given the task: how it names the MCP tool, and how it searches
    when it defers its tools itself (``own_search``: the call the fake's model makes)."""

    name: str
    agent: str  # claude | codex | gemini | opencode | qwen | openai-agents, or one of agent_drivers_b.DRIVERS
    api: str  # the fake's API name for the model conversation
    target: str  # the MCP tool as the model calls it
    own_search: Call | None = None
    env: tuple[tuple[str, str], ...] = ()
    model: str = "gpt-5"  # Codex, OpenCode, the Agents SDK: the model they ask for
    extra_rules: tuple[Rule, ...] = ()
    #: A second search, made in the same step as the call of the tool the first one found (a
    #: mixed turn: the proxy cannot answer it before the client answers the call).
    mixed: str | None = None
    #: The client's own dispatcher for the tools it defers (Qwen Code's ``tool_call``): the model
    #: calls the tool it found through it, as ``{"name": target, "arguments": ...}``.
    own_call: str | None = None

    @property
    def marker(self) -> str:
        """What the MCP server's answer carries and the agent must print."""
        return call_marker(MCP_SERVER, MCP_TOOL, MCP_ARGS)

    def script(self) -> list[Rule]:
        """Search only while the tool is not loaded, with the client's own search tool or else the
        proxy's (classic, or native Responses ``tool_search``); call the tool (``mixed``: with a
        second search in the same step); answer."""
        own = [Rule(calls=[self.own_search], times=1, not_offered=[self.target])] if self.own_search else []
        mixed = [] if self.mixed is None else [
            calls((SEARCH_TOOL, {"query": self.mixed}), (self.target, MCP_ARGS), times=1, no_result_for=[])]
        return [
            *self.extra_rules,
            *own,
            *(call(name, {"query": MCP_QUERY}, times=1, not_offered=[self.target]) for name in PROXY_SEARCHES),
            *mixed,
            call(self.own_call, {"name": self.target, "arguments": MCP_ARGS}) if self.own_call
            else call(self.target, MCP_ARGS),
            reply("The secret manager says:", echo_last_result=True),
        ]

    def called(self, request: RecordedRequest) -> list[str]:
        """The tools the model called in its answer to ``request``, one through the client's own
        dispatcher as the tool it names."""
        made = (request.reply or {}).get("calls") or []
        own = [c["arguments"].get("name") for c in made if self.own_call and c["name"] == self.own_call]
        return request.called() + own

    def command(self, bins: AgentBinaries, home: Path, env: dict[str, str]) -> list[str]:
        env.update(self.env)
        from tests.e2e.agent_drivers_b import DRIVERS  # imports this module

        if self.agent in DRIVERS:
            return DRIVERS[self.agent](self, MCP_PROMPT, bins, home, env)
        if self.agent == "claude":
            return claude_command(bins, MCP_PROMPT, prepare_claude(home, env), allowed_tools=self.target)
        if self.agent == "codex":
            prepare_codex(bins, home, env, model=self.model, mcp=True)
            return codex_command(bins, MCP_PROMPT)
        if self.agent == "gemini":
            prepare_gemini(home, env, mcp=True)
            return gemini_command(bins, MCP_PROMPT)
        wire = "chat" if self.api == "openai-chat" else "responses"
        if self.agent == "opencode":
            return agent_drivers_a.opencode(bins.claude.parent, self.name, wire, self.model, MCP_PROMPT, home, env)
        if self.agent == "qwen":
            return agent_drivers_a.qwen(bins.claude.parent, self.name, MCP_PROMPT, home, env,
                                        tool_search=self.own_search is not None)
        return agent_drivers_a.openai_agents(self.name, wire, self.model, MCP_PROMPT, home, env)


MCP_CASES = {
    c.name: c
    for c in (
        # Claude Code defers its MCP tools behind its ToolSearch (its default): the proxy stays out.
        McpCase("claude-tool-search", "claude", "anthropic", f"mcp__{MCP_SERVER}__{MCP_TOOL}",
                own_search=Call("ToolSearch", {"query": f"select:mcp__{MCP_SERVER}__{MCP_TOOL}", "max_results": 5})),
        # ... and with its tool search off, every MCP tool in full: the proxy defers.
        McpCase("claude-all-tools", "claude", "anthropic", f"mcp__{MCP_SERVER}__{MCP_TOOL}",
                env=(("ENABLE_TOOL_SEARCH", "false"),)),
        # Codex sends each MCP server as a namespace tool to a model it does not know as search-capable.
        McpCase("codex-namespaces", "codex", "openai-responses", f"mcp__{MCP_SERVER}.{MCP_TOOL}"),
        # ... the same to gpt-5.4, which the proxy defers for natively (defer_loading, its own tool_search).
        McpCase("codex-namespaces-native", "codex", "openai-responses", f"mcp__{MCP_SERVER}.{MCP_TOOL}",
                model="gpt-5.4"),
        # ... and defers them itself (client-executed tool_search) for one it knows as search-capable:
        # the proxy stays out.
        McpCase("codex-tool-search", "codex", "openai-responses", f"mcp__{MCP_SERVER}.{MCP_TOOL}", model="gpt-5.5",
                own_search=Call("tool_search", {"query": "get secret cloud secret manager", "limit": 8})),
        # Gemini CLI: one flat list, MCP tools named mcp_<server>_<tool>.
        McpCase("gemini", "gemini", "gemini", f"mcp_{MCP_SERVER}_{MCP_TOOL}", extra_rules=(GEMINI_ROUTER,)),
        # ... whose model calls the tool it found and searches again in one step: the second
        # search is answered on the next request, beside the tool's result.
        McpCase("gemini-mixed", "gemini", "gemini", f"mcp_{MCP_SERVER}_{MCP_TOOL}", extra_rules=(GEMINI_ROUTER,),
                mixed="read a file"),
        # OpenCode: its built-in openai provider (Responses), and an openai-compatible one (Chat).
        McpCase("opencode-responses", "opencode", "openai-responses", f"{MCP_SERVER}_{MCP_TOOL}"),
        McpCase("opencode-chat", "opencode", "openai-chat", f"{MCP_SERVER}_{MCP_TOOL}"),
        # ... whose model calls the tool it found and searches again in one step (call-through, as
        # Gemini CLI's above, in Chat's grammar).
        McpCase("opencode-chat-mixed", "opencode", "openai-chat", f"{MCP_SERVER}_{MCP_TOOL}", mixed="read a file"),
        # ... the same to gpt-5.4, which the proxy defers for natively.
        McpCase("opencode-responses-native", "opencode", "openai-responses", f"{MCP_SERVER}_{MCP_TOOL}",
                model="gpt-5.4"),
        # Qwen Code defers its MCP tools behind its own tool_search, and calls one it found through
        # its own tool_call: the proxy stays out.
        McpCase("qwen", "qwen", "openai-chat", f"mcp__{MCP_SERVER}__{MCP_TOOL}",
                own_search=Call("tool_search", {"query": f"select:mcp__{MCP_SERVER}__{MCP_TOOL}"}),
                own_call="tool_call"),
        # ... and with its tool search off (tools.toolSearch.enabled), every MCP tool in full: the
        # proxy defers (call-through).
        McpCase("qwen-all-tools", "qwen", "openai-chat", f"mcp__{MCP_SERVER}__{MCP_TOOL}"),
        # The OpenAI Agents SDK (Python): MCPServerStdio servers, Responses by default, or Chat.
        McpCase("openai-agents-responses", "openai-agents", "openai-responses", MCP_TOOL),
        McpCase("openai-agents-chat", "openai-agents", "openai-chat", MCP_TOOL),
        McpCase("openai-agents-responses-native", "openai-agents", "openai-responses", MCP_TOOL,
                model="gpt-5.4"),
        # ... and with the conversation kept by the API (each request chained by previous_response_id).
        McpCase("openai-agents-responses-chained", "openai-agents", "openai-responses", MCP_TOOL,
                env=(("AGENTS_SDK_CHAIN", "1"),)),
        # Cline CLI (openai-native: Responses), MCP tools named <server>__<tool>.
        McpCase("cline", "cline", "openai-responses", f"{MCP_SERVER}__{MCP_TOOL}"),
        # Copilot CLI with its own OpenAI key, MCP tools named <server>-<tool>: on Chat Completions
        # (call-through) and on Responses (classic with gpt-5).
        McpCase("copilot-chat", "copilot", "openai-chat", f"{MCP_SERVER}-{MCP_TOOL}",
                env=(("COPILOT_PROVIDER_WIRE_API", "completions"),)),
        McpCase("copilot-responses", "copilot", "openai-responses", f"{MCP_SERVER}-{MCP_TOOL}",
                env=(("COPILOT_PROVIDER_WIRE_API", "responses"),)),
        # ... and on Chat, a mixed turn: the dispatcher's call and a second search in one step.
        McpCase("copilot-chat-mixed", "copilot", "openai-chat", f"{MCP_SERVER}-{MCP_TOOL}", mixed="read a file",
                env=(("COPILOT_PROVIDER_WIRE_API", "completions"),)),
        # pi, whose MCP tools come from tests/e2e/pi_mcp_extension.ts: on Anthropic with a Claude
        # 4.5 model (native deferral), on Responses with gpt-5 (classic) and gpt-5.4 (native, flat functions).
        McpCase("pi-anthropic", "pi", "anthropic", f"mcp__{MCP_SERVER}__{MCP_TOOL}", model="claude-sonnet-4-5"),
        McpCase("pi-responses", "pi", "openai-responses", f"mcp__{MCP_SERVER}__{MCP_TOOL}"),
        McpCase("pi-responses-native", "pi", "openai-responses", f"mcp__{MCP_SERVER}__{MCP_TOOL}", model="gpt-5.4"),
    )
}


def recorded_proxy(workdir: Path, upstream: str, config: ConfigSpec = None, name: str = "mitmdump") -> MitmDump:
    """A mitmdump (not started) with :data:`CLIENT_RECORDER` first and, given a ``config``, the addon."""
    recorder = workdir / "client_recorder.py"
    workdir.mkdir(parents=True, exist_ok=True)
    recorder.write_text(CLIENT_RECORDER)
    extra = ["--set", f"client_record_path={workdir / 'client_requests.jsonl'}"]
    if config is not None:
        extra += ["-s", str(ADDON_PATH)]
    return MitmDump(workdir, upstream, script=recorder, config=config, extra_args=extra, name=name)


@dataclass
class McpRun:
    """One agent run of an :class:`McpCase`: the agent's outcome, what reached the fake, what the client sent."""

    case: McpCase
    run: AgentRun
    upstream: list[RecordedRequest]  # the model conversation as the fake received it
    sent: list[dict[str, Any]]  # the same conversation as the client sent it (``client_requests``)

    def report(self) -> str:
        lines = [f"client sent {len(self.sent)} API requests; upstream got {len(self.upstream)}:"]
        for r in self.upstream:
            calls = [c["name"] for c in r.reply["calls"]] if r.reply else None
            bill = f" prompt={r.prompt['tokens']} cached={r.prompt['cached']} miss@{r.prompt['first_miss']}" \
                if r.prompt else ""
            lines.append(f"  #{r.nth} {r.path} -> {r.status} tools={len(r.tool_names or [])} "
                         f"({len(json.dumps(r.json.get('tools')))} B){bill} search tools={search_tools(r.json)} "
                         f"calls={calls} {(r.error or '')[:300]}")
        return self.run.report() + "\n" + "\n".join(lines)


def run_mcp_case(case: McpCase, proxy: MitmDump, fake: FakeProvider, bins: AgentBinaries, tmp: Path) -> McpRun:
    """Run the agent of ``case`` on the MCP task through ``proxy`` (a :func:`recorded_proxy`), in ``tmp``."""
    record_path = proxy.workdir / "client_requests.jsonl"
    record_path.write_text("")
    fake.set_script(case.script())
    work, home = tmp / "work", tmp / "home"
    work.mkdir(parents=True)
    env = proxy.agent_env(home=home)
    # A credential of its own: without a client session id the proxy keys a session by credential
    # and first message, and these agents open with the same prompt (one session store per proxy).
    env.update({var: f"{key}-{case.name}" for var, key in TEST_KEYS.items()})
    run = run_agent(case.name, case.command(bins, home, env), env=env, cwd=work)
    upstream = [r for r in fake.api_requests(case.api) if r.json is not None]
    sent = [c for c in client_requests(record_path) if c["method"] == "POST" and c["json"] is not None
            and _api_of(c["url"]) == case.api]
    return McpRun(case, run, upstream, sent)


def _api_of(url: str) -> str | None:
    """The fake's API name for a client request URL of the conversations here."""
    path = "/" + url.split("://", 1)[-1].split("/", 1)[-1]
    for prefix, api in (("/v1/messages", "anthropic"), ("/v1/responses", "openai-responses"),
                        ("/v1/chat/completions", "openai-chat"), ("/v1beta/models/", "gemini")):
        if path.startswith(prefix) and "count_tokens" not in path:
            return api
    return None


def search_tools(body: Any) -> list[str]:
    """Every search tool a request body offers: the proxy's and a client's own (by name or type)."""
    found = []
    for tool in (body.get("tools") if isinstance(body, dict) else None) or []:
        if not isinstance(tool, dict):
            continue
        # Gemini nests its functions in declarations, Chat each in a "function"
        for decl in tool.get("functionDeclarations") or [tool.get("function") or tool]:
            name, kind = decl.get("name"), str(decl.get("type") or "")
            if name == SEARCH_TOOL or name in CLIENT_SEARCH_NAMES or kind.startswith(CLIENT_SEARCH_TYPE):
                found.append(str(name or kind))
    return found
