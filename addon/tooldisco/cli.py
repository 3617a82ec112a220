"""The ``tooldisco`` console script: start the proxy, point agents at it, check a setup.

    tooldisco run [--config PATH] [--web] [--metrics [HOST:PORT]] [mitmdump args...]
    tooldisco addon-path                 # mitmdump -s "$(tooldisco addon-path)"
    tooldisco env AGENT                  # eval "$(tooldisco env claude-code)"
    tooldisco doctor [--config PATH]
    tooldisco demo                       # offline, no API key: one turn, before and after
    tooldisco report FILE.jsonl [...]    # an HTML page (the report extra); --selector: api tables
    tooldisco wrap AGENT -- COMMAND...   # the agent through a proxy of its own, then what it did
    tooldisco forget [--key-env VAR | --all]  # wipe what a tenant's traffic taught the search
    tooldisco tools list | approve NAME... | diff NAME  # pinned tool definitions and their changes

It runs the mitmproxy installed beside it (the same Python), so the addon finds its dependencies.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from loguru import logger

from tooldisco import demo
from tooldisco.config import ConfigError, format_listen, load_config, parse_listen
from tooldisco.core.tenants import tenant_of
from tooldisco.policy import pins
from tooldisco.state.base import SessionStore
from tooldisco.state.factory import open_store
from tooldisco.report import page, selector

PACKAGE = Path(__file__).resolve().parent
ADDON = PACKAGE / "script" / "tool_discovery.py"
CONFIGS = PACKAGE / "configs"
DEFAULT_CONFIG = CONFIGS / "tool_discovery.yaml"
DEFAULT_PROXY = "http://127.0.0.1:8080"
DEFAULT_METRICS = "127.0.0.1:0"  # tooldisco run --metrics without an address: loopback, any free port
CA_FILE = "mitmproxy-ca-cert.pem"  # mitmproxy writes its CA there, in its confdir, on first start


@dataclass(frozen=True)
class Agent:
    """How an agent is pointed at the proxy (README, "Agents"; docs/agents.md)."""

    title: str
    ca_vars: tuple[str, ...]  # the variable(s) it reads the extra CA from; the first is printed
    extra: tuple[str, ...] = ()  # further lines it needs, as shell comments or exports
    note: str = ""


_NODE = ("NODE_EXTRA_CA_CERTS",)
AGENTS: dict[str, Agent] = {
    "claude-code": Agent("Claude Code", _NODE),
    "gemini-cli": Agent("Gemini CLI", _NODE),
    "opencode": Agent("OpenCode", _NODE + ("SSL_CERT_FILE",)),
    "qwen-code": Agent(
        "Qwen Code", _NODE,
        ("export OPENAI_BASE_URL=https://api.openai.com/v1",),
        "with --auth-type openai; --auth-type anthropic ignores HTTPS_PROXY (use reverse mode and ANTHROPIC_BASE_URL)",
    ),
    "cline": Agent("Cline CLI", _NODE + ("SSL_CERT_FILE",)),
    "copilot": Agent(
        "Copilot CLI", _NODE + ("SSL_CERT_FILE",),
        ("export COPILOT_PROVIDER_BASE_URL=https://api.openai.com/v1",),
        "bring your own key: COPILOT_PROVIDER_TYPE=openai, COPILOT_PROVIDER_API_KEY",
    ),
    "pi": Agent("pi", _NODE),
    "codex": Agent("Codex CLI", ("CODEX_CA_CERTIFICATE",)),
    "python": Agent("Python SDKs (openai, anthropic, google-genai)", ("SSL_CERT_FILE",)),
    "openai-agents": Agent("OpenAI Agents SDK", ("SSL_CERT_FILE",)),
    "boto3": Agent(
        "boto3 (Bedrock)", ("AWS_CA_BUNDLE",), (),
        "start the proxy with the same AWS credentials (SigV4 re-signing)",
    ),
}
ALIASES = {"claude": "claude-code", "gemini": "gemini-cli", "qwen": "qwen-code", "copilot-cli": "copilot",
           "codex-cli": "codex", "openai": "python", "anthropic": "python", "google-genai": "python",
           "bedrock": "boto3"}
CA_VARS = ("NODE_EXTRA_CA_CERTS", "CODEX_CA_CERTIFICATE", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE")
# The provider endpoints agents call; a config whose hosts miss one leaves that provider's traffic alone.
USUAL_HOSTS = ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com",
               "bedrock-runtime.us-east-1.amazonaws.com")
# Module -> the extra that installs it, for what a config names (search.backend / scorer hybrid,
# sessions.backend redis) and for the report.
EXTRAS = {"semantic": ("onnxruntime", "tokenizers"), "redis": ("redis",), "report": ("matplotlib", "tqdm")}


def default_confdir() -> Path:
    return Path(os.path.expanduser("~/.mitmproxy"))


def agent(name: str) -> Agent:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in AGENTS:
        raise SystemExit(f"tooldisco: unknown agent {name!r}; one of: {', '.join(AGENTS)}")
    return AGENTS[key]


def env_lines(name: str, proxy: str = DEFAULT_PROXY, confdir: Path | None = None) -> list[str]:
    """The shell lines that point ``name`` at the proxy: ``eval "$(tooldisco env NAME)"``."""
    a = agent(name)
    ca = (confdir or default_confdir()) / CA_FILE
    lines = [f"# {a.title}" + (f": {a.note}" if a.note else ""), f"export HTTPS_PROXY={proxy}",
             f"export {a.ca_vars[0]}={ca}"]
    lines += [f"# or: export {v}={ca}" for v in a.ca_vars[1:]]
    return lines + list(a.extra)


def needed_extras(path: str | os.PathLike[str]) -> list[str]:
    """The extras a config names: ``semantic`` for the hybrid backend or scorer, ``redis`` for the
    Redis session store. Read from the YAML without validating (the extra may be what is missing)."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    td = (raw.get("pipes") or {}).get("tool_discovery") or {}
    search = td.get("search") or {}
    sessions = raw.get("sessions") or {}
    out = []
    # A value may be ${VAR:-default}: whichever it names counts.
    if any("hybrid" in str(v) for v in (search.get("backend"), td.get("scorer"))):
        out.append("semantic")
    if "redis" in str(sessions.get("backend")):
        out.append("redis")
    return out


def missing(extra: str) -> list[str]:
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def doctor(config: str, confdir: Path, environ: Mapping[str, str]) -> tuple[list[str], int]:
    """Lines of findings and the number of problems."""
    out: list[str] = []
    problems = 0

    def say(ok: bool, text: str) -> None:
        nonlocal problems
        problems += not ok
        out.append(("ok    " if ok else "FAIL  ") + text)

    ca = confdir / CA_FILE
    say(ca.is_file(), f"CA file {ca}" + ("" if ca.is_file() else " missing: start the proxy once (tooldisco run)"))
    for var in CA_VARS:
        if value := environ.get(var):
            say(Path(value).is_file(), f"{var}={value}" + ("" if Path(value).is_file() else " (no such file)"))
    if not any(environ.get(v) for v in CA_VARS):
        out.append("note  no agent CA variable is set here (tooldisco env AGENT prints them)")
    if proxy := environ.get("HTTPS_PROXY") or environ.get("https_proxy"):
        out.append(f"note  HTTPS_PROXY={proxy}")
    try:
        cfg = load_config(config)
    except (ConfigError, OSError, yaml.YAMLError) as e:
        say(False, f"config {config}: {e}")
        return out, problems
    say(True, f"config {config} loads (strategy {cfg.tool_discovery.strategy})")
    for warning in cfg.warnings:  # what the proxy would log and run past
        say(False, f"config: {warning}")
    uncovered = [h for h in USUAL_HOSTS if not cfg.handles_host(h)]
    say(not uncovered, "hosts cover " + ", ".join(h for h in USUAL_HOSTS if h not in uncovered)
        + (f"; not: {', '.join(uncovered)}" if uncovered else ""))
    for extra in needed_extras(config):
        gone = missing(extra)
        say(not gone, f"extra {extra!r} the config needs" + (
            f": missing {', '.join(gone)}: pip install 'tooldisco[{extra}]'" if gone else " is installed"))
    return out, problems


def forget(config: str, key: str | None) -> tuple[str, int]:
    """Wipe what the traffic of the tenant ``key`` stands for (an API key, as the agent sends
    it) taught the search, or every tenant's (None), in the config's session store. The message
    and the exit status."""
    try:
        cfg = load_config(config)
    except (ConfigError, OSError, yaml.YAMLError) as e:
        return f"tooldisco forget: {e}", 1
    tenant = tenant_of({"x-api-key": key}, "") if key is not None else None
    store = open_store(cfg.sessions)
    try:
        gone = store.forget(tenant)
    finally:
        store.close()
    whose = "that tenant" if tenant is not None else f"{gone} tenant{'s' if gone != 1 else ''}"
    where = cfg.sessions.redis.where() if cfg.sessions.backend == "redis" else str(cfg.sessions.directory())
    if tenant is not None and not gone:
        return f"nothing learned for that tenant in {where}", 0
    return f"forgot what {whose} taught the search ({where}); a running proxy forgets it within " \
           f"{cfg.tool_discovery.learning.refresh_interval:g} s", 0


def _forget(ns: argparse.Namespace) -> int:
    config = ns.config or os.environ.get("CONFIG") or str(DEFAULT_CONFIG)
    if ns.all:
        key = None
    elif ns.key_env:
        key = os.environ.get(ns.key_env, "").strip()
        if not key:
            print(f"tooldisco forget: ${ns.key_env} is not set", file=sys.stderr)
            return 1
    else:
        key = sys.stdin.readline().strip()
        if not key:
            print("tooldisco forget: no key on standard input (or use --key-env VAR, or --all)", file=sys.stderr)
            return 1
    message, status = forget(config, key)
    print(message, file=sys.stderr if status else sys.stdout)
    return status


def _when(ts: float | None) -> str:
    """A stored time in UTC, to the minute."""
    return time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(ts)) if ts is not None else "-"


def _status(rec: dict[str, Any]) -> str:
    """A pinned tool's status in words: pinned, changed, new, renamed from X."""
    pending = rec["pending"]
    if isinstance(pending, dict):
        if pending["kind"] == "renamed" and pending["from"]:
            return f"renamed from {pending['from']}"
        return str(pending["kind"])
    return f"pinned (renamed from {rec['from']})" if rec.get("from") else "pinned"


def tools_rows(entries: Sequence[tuple[str, dict[str, Any]]], changed: bool) -> list[dict[str, Any]]:
    """One row per pinned tool (``--changed``: per tool awaiting approval), by tenant then name."""
    rows = []
    for key, data in entries:
        for name, rec in sorted(data["tools"].items()):
            pending = rec["pending"]
            if changed and pending is None:
                continue
            rows.append({"tenant": data["tenant"] or "-", "key": key, "tool": name, "status": _status(rec),
                         "first_seen": _when(rec["first_seen"]), "approved": _when(rec["approved"]),
                         "fingerprint": pending["fp"] if pending else rec["fp"],
                         "pinned": rec["fp"], "pending": pending["fp"] if pending else None,
                         "what": list(pending["what"]) if pending else []})
    rows.sort(key=lambda r: (r["tenant"], r["tool"]))
    return rows


def _tools_list(ns: argparse.Namespace, store: SessionStore, entries: list[tuple[str, dict[str, Any]]],
                where: str) -> int:
    rows = tools_rows(entries, ns.changed)
    if ns.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print(f"no tool {'awaits approval' if ns.changed else 'is pinned'} in {where}")
        return 0
    table = [("TENANT", "TOOL", "STATUS", "FIRST SEEN (UTC)", "FINGERPRINT")]
    table += [(str(r["tenant"]), str(r["tool"]), str(r["status"]), str(r["first_seen"]), str(r["fingerprint"])[:12])
              for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def _tools_approve(ns: argparse.Namespace, store: SessionStore, entries: list[tuple[str, dict[str, Any]]],
                   where: str) -> int:
    if not ns.all and not ns.names:
        print("tooldisco tools approve: name the tools to approve, or --all", file=sys.stderr)
        return 2
    names = None if ns.all else set(ns.names)
    now = time.time()
    approved: set[str] = set()
    moved: set[str] = set()
    for key, data in entries:
        # What was read is what is approved: a definition changed again since then stays pending.
        want = {n: rec["pending"]["fp"] for n, rec in data["tools"].items()
                if rec["pending"] is not None and (names is None or n in names)}
        if not want:
            continue
        done: list[str] = []

        def change(entry: Any, want: dict[str, str] = want, done: list[str] = done) -> Any:
            current = pins.decode(entry)["tools"]
            same = [n for n, fp in want.items() if (current.get(n) or {}).get("pending") and
                    current[n]["pending"]["fp"] == fp]
            if not same:  # approved, or changed again, meanwhile: nothing to write
                done[:] = []
                return entry
            new, done[:] = pins.approve(entry, same, now)
            return new

        if store.pin_at(key, change) is None and not getattr(store, "available", True):
            print(f"tooldisco tools approve: the session store at {where} could not be written", file=sys.stderr)
            return 1
        approved.update(done)
        moved.update(set(want) - set(done))
        if done:
            print(f"tenant {data['tenant'] or '-'}: approved {', '.join(done)}")
    for name in sorted(moved - approved):
        print(f"tooldisco tools approve: {name} changed again meanwhile and stays pending: "
              f"see tooldisco tools diff {name}", file=sys.stderr)
    missing = sorted(names - approved - moved) if names is not None else []
    for name in missing:
        print(f"tooldisco tools approve: nothing pending for {name}"
              + (f" (tenant {ns.tenant})" if ns.tenant else ""), file=sys.stderr)
    if names is None and not approved and not moved:
        print(f"nothing awaits approval in {where}")
    return 1 if missing or moved - approved else 0


def _tools_diff(ns: argparse.Namespace, store: SessionStore, entries: list[tuple[str, dict[str, Any]]],
                where: str) -> int:
    found = False
    for _key, data in entries:
        text = pins.diff(data, ns.name)
        if not text:
            continue
        rec = data["tools"][ns.name]
        what = rec["pending"]["what"]
        print(f"# tenant {data['tenant'] or '-'}: {_status(rec)}" + (f" ({'; '.join(what)})" if what else ""))
        print(text, end="" if text.endswith("\n") else "\n")
        found = True
    if not found:
        print(f"tooldisco tools diff: nothing pending for {ns.name}" + (f" (tenant {ns.tenant})" if ns.tenant else ""),
              file=sys.stderr)
        return 1
    return 0


TOOLS_ACTIONS = {"list": _tools_list, "approve": _tools_approve, "diff": _tools_diff}


def _key_id(ns: argparse.Namespace) -> int:
    """``tooldisco tools key-id``: the tenant id of one credential, as telemetry, ``tools list``
    and ``policy.clients[].match.key`` name it."""
    if ns.key_env:
        key = os.environ.get(ns.key_env, "")
        if not key:
            print(f"tooldisco tools key-id: {ns.key_env} is not set", file=sys.stderr)
            return 1
    else:
        if sys.stdin.isatty():
            print("key (not echoed): ", end="", file=sys.stderr, flush=True)
            import getpass
            key = getpass.getpass("")
        else:
            key = sys.stdin.readline()
    key = key.strip()
    if not key:
        print("tooldisco tools key-id: no key given (on stdin, or --key-env VAR)", file=sys.stderr)
        return 1
    headers = {"authorization": f"AWS4-HMAC-SHA256 Credential={key}/20260101/us-east-1/bedrock/aws4_request"} \
        if ns.aws else {"x-api-key": key}
    print((tenant_of(headers, "") or "")[:12])
    return 0


def _tools(ns: argparse.Namespace) -> int:
    """``tooldisco tools ACTION``: the pinned tool definitions in the config's session store."""
    if ns.tools_command == "key-id":
        return _key_id(ns)
    verb = f"tooldisco tools {ns.tools_command}"
    config = ns.config or os.environ.get("CONFIG") or str(DEFAULT_CONFIG)
    try:
        cfg = load_config(config)
    except (ConfigError, OSError, yaml.YAMLError) as e:
        print(f"{verb}: {e}", file=sys.stderr)
        return 1
    where = cfg.sessions.redis.where() if cfg.sessions.backend == "redis" else str(cfg.sessions.directory())
    logger.disable("tooldisco.state")  # the store's own warnings: this command says it in one line
    try:
        try:
            store = open_store(cfg.sessions)
        except ImportError as e:
            print(f"{verb}: the session store needs {e.name or 'redis'}: pip install 'tooldisco[redis]'",
                  file=sys.stderr)
            return 1
        try:
            stored = store.pin_entries()
            if not getattr(store, "available", True):
                print(f"{verb}: the session store at {where} cannot be used (unreachable, locked or not readable)",
                      file=sys.stderr)
                return 1
            tenant = (ns.tenant or "").strip().lower()
            entries = sorted(((key, data) for key, data in ((k, pins.decode(e)) for k, e in stored)
                              if data["tenant"].lower().startswith(tenant)), key=lambda e: (e[1]["tenant"], e[0]))
            return TOOLS_ACTIONS[ns.tools_command](ns, store, entries, where)
        finally:
            store.close()
    finally:
        logger.enable("tooldisco.state")


def _tool(name: str) -> str:
    """mitmdump / mitmweb beside this Python (the venv that holds tooldisco), else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise SystemExit(f"tooldisco: {name} not found beside {sys.executable} or on PATH: pip install mitmproxy")
    return found


def _value(args: Sequence[str], *flags: str) -> str | None:
    """The value of a mitmdump flag in ``args`` (``--flag v`` or ``--flag=v``)."""
    for i, a in enumerate(args):
        for f in flags:
            if a == f and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(f + "="):
                return a.split("=", 1)[1]
    return None


def run_command(config: str, web: bool, extra: Sequence[str], metrics: str | None = None) -> list[str]:
    """The mitmdump (or mitmweb) command line: loopback unless a host is given, since an open
    proxy on every interface is not a default. ``metrics``: ``HOST:PORT`` (already checked) where
    the addon serves its Prometheus metrics, through its ``tool_discovery_metrics`` option, which
    takes the place of the config's ``metrics.listen``."""
    args = list(extra)
    if _value(args, "--listen-host") is None:
        args = ["--listen-host", "127.0.0.1", *args]
    cmd = [_tool("mitmweb" if web else "mitmdump"), "-s", str(ADDON), "--set", f"tool_discovery_config={config}"]
    if metrics is not None:
        cmd += ["--set", f"tool_discovery_metrics={metrics}"]
    if web:
        if _value(args, "--web-host") is None:
            args = ["--web-host", "127.0.0.1", *args]
        cmd += ["--set", "web_open_browser=false"]
        # mitmweb's default columns and the comment, where the addon says what it did to a flow.
        for column in ("tls", "icon", "path", "method", "status", "size", "time", "comment"):
            cmd += ["--set", f"web_columns={column}"]
    return cmd + args


def _run(ns: argparse.Namespace) -> int:
    config = ns.config or os.environ.get("CONFIG") or str(DEFAULT_CONFIG)
    args = list(ns.args)
    if args[:1] == ["--"]:
        args = args[1:]
    for extra in needed_extras(config):
        if gone := missing(extra):
            print(f"tooldisco: {config} needs the {extra!r} extra (missing {', '.join(gone)}): "
                  f"pip install 'tooldisco[{extra}]'", file=sys.stderr)
            return 1
    metrics = None
    if ns.metrics is not None:
        try:
            metrics = format_listen(*parse_listen(ns.metrics, "--metrics"))
        except ConfigError as e:
            print(f"tooldisco: {e}", file=sys.stderr)
            return 2
    cmd = run_command(config, ns.web, args, metrics)
    host = _value(cmd, "--listen-host") or "127.0.0.1"
    port = _value(cmd, "-p", "--listen-port") or "8080"
    confdir = Path(os.path.expanduser(_value([a.replace("confdir=", "--confdir=") for a in cmd], "--confdir")
                                      or str(default_confdir())))
    print(f"tool discovery proxy on http://{host}:{port} with {config}\n"
          f"Point an agent at it: eval \"$(tooldisco env AGENT --proxy http://{host}:{port}"
          f"{'' if confdir == default_confdir() else f' --confdir {confdir}'})\"  (agents: {', '.join(AGENTS)})\n"
          "Telemetry: one JSON line per request in tool_discovery.jsonl (see README)."
          + (f"\nMetrics: Prometheus on {metrics} (the proxy's log names the URL)" if metrics else ""),
          file=sys.stderr)
    if ns.web and not any("web_password=" in a for a in cmd):
        # The addon masks every ?token= in mitmproxy's log but mitmweb's own login URL on loopback
        # (glue.webui): make the token here, give mitmweb only its argon2 hash, and print the URL
        # once, whatever --web-host says.
        import argon2  # mitmweb's own dependency: here, since only --web needs it

        token = secrets.token_hex(16)
        cmd += ["--set", f"web_password={argon2.PasswordHasher().hash(token)}"]
        web_host = _value(cmd, "--web-host") or "127.0.0.1"
        print(f"mitmweb: open http://{web_host}:{_value(cmd, '--web-port') or '8081'}/?token={token}", file=sys.stderr)
    sys.stdout.flush()
    os.execv(cmd[0], cmd)
    return 0  # not reached


def _report(ns: argparse.Namespace) -> int:
    """The HTML page (it names the report extra when that is missing), or with ``--selector`` the
    api strategy's Markdown tables, which need no extra."""
    if ns.args[:1] == ["--selector"]:
        return selector.main(ns.args[1:])
    return page.main(ns.args)


def _wait_for_port(proc: subprocess.Popen[bytes], port: int, ca: Path, timeout: float = 60.0) -> bool:
    """Until mitmdump accepts connections and its CA exists (written on its first start)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            if ca.is_file():
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def summary(records: Sequence[Mapping[str, object]]) -> list[str]:
    """What the proxy did over a run, from its telemetry records."""
    if not records:
        return ["tooldisco: no request was processed (none reached a host in the config's hosts:)"]
    before = sum(int(r.get("tool_tokens_before") or 0) for r in records)
    after = sum(int(r.get("tool_tokens_after") or 0) for r in records)
    # Native deferral sends deferred definitions marked, out of the prompt: the wire holds more.
    wire = sum(int(r.get("tool_tokens_wire") or r.get("tool_tokens_after") or 0) for r in records)
    searches = [s for r in records for s in (r.get("searches") or [])]  # type: ignore[union-attr]
    passed = sum(1 for r in records if r.get("fallback_reason"))
    lines = [f"tooldisco: {len(records)} requests processed; tool definitions ~{before} tokens sent by the agent, "
             f"~{after} in the model's prompt" + (f" ({100 * (before - after) // before}% fewer)" if before else "")
             + (f", ~{wire} on the wire" if wire != after else ""),
             f"tooldisco: {len(searches)} searches answered by the proxy"
             + (f"; {passed} requests passed through unchanged (fallback_reason in the telemetry)" if passed else "")]
    lines += [f"  search {s.get('query')!r}: {', '.join(s.get('matched') or []) or 'nothing'}"  # type: ignore[union-attr]
              for s in searches[:10]]
    return lines


def _run_agent(name: str, command: list[str], proxy: subprocess.Popen[bytes], port: int, confdir: Path,
               log: Path) -> int | None:
    """The agent's exit status once the proxy is up; None when the proxy did not start."""
    if not _wait_for_port(proxy, port, confdir / CA_FILE):
        print("tooldisco wrap: mitmdump did not start:\n" + log.read_text(errors="replace")[-2000:], file=sys.stderr)
        return None
    env = dict(os.environ)
    for line in env_lines(name, f"http://127.0.0.1:{port}", confdir):
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
    print(f"tooldisco wrap: {agent(name).title} through the proxy on 127.0.0.1:{port}", file=sys.stderr)
    try:
        return subprocess.call(command, env=env)
    except OSError as e:
        print(f"tooldisco wrap: cannot run {command[0]}: {e.strerror or e}", file=sys.stderr)
        return 127
    except KeyboardInterrupt:  # Ctrl-C reached the agent too (same process group): report and stop
        return 130


def _wrap(ns: argparse.Namespace) -> int:
    command = list(ns.command_args)
    if not command:
        print("tooldisco wrap: no command given: tooldisco wrap AGENT -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    agent(ns.agent)  # an unknown name exits here, before a proxy starts
    config_path = ns.config or os.environ.get("CONFIG") or str(DEFAULT_CONFIG)
    if not Path(config_path).is_file():
        print(f"tooldisco wrap: no config at {config_path}", file=sys.stderr)
        return 1
    confdir = ns.confdir or default_confdir()
    with tempfile.TemporaryDirectory(prefix="tooldisco-wrap-") as tmp:
        # The user's config with the telemetry in this run's own file, to tell what was done for it.
        config = yaml.safe_load(Path(config_path).read_text()) or {}
        telemetry = Path(tmp) / "telemetry.jsonl"
        config["telemetry"] = {**(config.get("telemetry") or {}), "path": str(telemetry)}
        (Path(tmp) / "config.yaml").write_text(yaml.safe_dump(config))
        port = _free_port()
        cmd = [*run_command(str(Path(tmp) / "config.yaml"), False, ["--listen-port", str(port)]),
               "--set", f"confdir={confdir}"]
        with open(Path(tmp) / "mitmdump.log", "wb") as log:
            proxy = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            try:
                code = _run_agent(ns.agent, command, proxy, port, confdir, Path(tmp) / "mitmdump.log")
            finally:
                proxy.terminate()  # mitmdump's shutdown flushes the telemetry
                try:
                    proxy.wait(10)
                except subprocess.TimeoutExpired:
                    proxy.kill()
                    proxy.wait()
        if code is None:
            return 1
        records = [json.loads(line) for line in telemetry.read_text().splitlines() if line.strip()] \
            if telemetry.exists() else []
    print("\n".join(summary(records)), file=sys.stderr)
    return code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tooldisco", description="Tool discovery for AI agents, as a mitmproxy addon.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Every argument it does not know goes to mitmdump (parse_known_args); no abbreviations, so that
    # mitmdump's --web-host or --confdir-like flags are never taken for ours.
    r = sub.add_parser("run", help="start mitmdump (or mitmweb) with the addon, on loopback", allow_abbrev=False,
                       description="Every other argument goes to mitmdump/mitmweb (e.g. -p 9000, --mode reverse:URL).")
    r.add_argument("--config", help=f"config file (default: $CONFIG or {DEFAULT_CONFIG})")
    r.add_argument("--web", action="store_true", help="mitmweb instead of mitmdump")
    r.add_argument("--metrics", nargs="?", const=DEFAULT_METRICS, metavar="HOST:PORT",
                   help=f"serve Prometheus metrics there (default {DEFAULT_METRICS}: loopback, a free port; "
                        "the proxy's log names the URL), in place of the config's metrics.listen")
    sub.add_parser("addon-path", help="print the addon script's path: mitmdump -s \"$(tooldisco addon-path)\"")
    e = sub.add_parser("env", help="print the environment lines that point an agent at the proxy")
    e.add_argument("agent", help=", ".join(AGENTS))
    e.add_argument("--proxy", default=DEFAULT_PROXY, help=f"the proxy's URL (default {DEFAULT_PROXY})")
    e.add_argument("--confdir", type=Path, help="mitmproxy's confdir, where its CA is (default ~/.mitmproxy)")
    d = sub.add_parser("doctor", help="check the CA, the agent variables, the config and its extras")
    d.add_argument("--config", help=f"config file (default: $CONFIG or {DEFAULT_CONFIG})")
    d.add_argument("--confdir", type=Path, help="mitmproxy's confdir (default ~/.mitmproxy)")
    w = sub.add_parser("wrap", help="run an agent through a proxy of its own; print what the proxy did for it",
                       description="tooldisco wrap AGENT -- COMMAND [ARGS...]")
    w.add_argument("agent", help=", ".join(AGENTS))
    w.add_argument("--config", help=f"config file (default: $CONFIG or {DEFAULT_CONFIG})")
    w.add_argument("--confdir", type=Path, help="mitmproxy's confdir, where its CA is (default ~/.mitmproxy)")
    sub.add_parser("demo", help="one turn through the proxy to a fake model: offline, no API key")
    f = sub.add_parser("forget", help="wipe what a tenant's traffic taught the search (the key on stdin)",
                       description="The tenant is the API key its agents send; it is read from standard input "
                                   "or an environment variable, never from the command line.")
    f.add_argument("--config", help=f"config file (default: $CONFIG or {DEFAULT_CONFIG})")
    who = f.add_mutually_exclusive_group()
    who.add_argument("--key-env", metavar="VAR", help="the environment variable holding the key, e.g. ANTHROPIC_API_KEY")
    who.add_argument("--all", action="store_true", help="every tenant")
    tl = sub.add_parser("tools", help="pinned tool definitions: list them, see what changed, approve a change",
                        description="Each tenant's tool definitions are pinned when first seen; a definition that "
                                    "changes later (an MCP server's rug pull) waits for approval here.")
    actions = tl.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help=f"config file (default: $CONFIG or {DEFAULT_CONFIG})")
    common.add_argument("--tenant", metavar="ID", help="only this tenant: its 12-hex id (or its start) as listed")
    tls = actions.add_parser("list", parents=[common], help="every pinned tool: tenant, name, status, first seen, "
                                                            "fingerprint")
    tls.add_argument("--changed", action="store_true", help="only the tools awaiting approval (changed, new, renamed)")
    tls.add_argument("--json", action="store_true", help="JSON rows instead of a table")
    tap = actions.add_parser("approve", parents=[common], help="pin the pending definition of each NAME, as diff shows it")
    tap.add_argument("names", nargs="*", metavar="NAME", help="a tool name, as listed")
    tap.add_argument("--all", action="store_true", help="every pending definition (of --tenant, or every tenant)")
    tdf = actions.add_parser("diff", parents=[common], help="what changed: the pinned definition against the pending one")
    tdf.add_argument("name", metavar="NAME", help="a tool name, as listed")
    tki = actions.add_parser("key-id", help="a credential's fingerprint: the tenant id the list shows, and what "
                                           "policy.clients[].match.key takes (the key on stdin, never an argument)",
                             description="Reads the API key from standard input or --key-env and prints the 12-hex "
                                         "id the proxy knows its tenant by. The key is never printed or stored.")
    tki.add_argument("--key-env", metavar="VAR", help="the environment variable holding the key")
    tki.add_argument("--aws", action="store_true", help="the input is an AWS access key id (SigV4-signed Bedrock)")
    rep = sub.add_parser("report", add_help=False,
                         help="money saved and more, from telemetry files: an HTML page (the report extra) or --json")
    rep.add_argument("args", nargs=argparse.REMAINDER,
                     help="FILE.jsonl... [-o report.html | --json] [--since ...]; --help: every option")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    tail: list[str] = []
    if argv[:1] == ["wrap"] and "--" in argv:  # wrap's options before --, the agent's command after
        argv, tail = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    ns, rest = p.parse_known_args(argv)
    if ns.command == "run":
        ns.args = rest
    elif ns.command == "report":  # everything after the word, in its order, is the report's
        ns.args = argv[argv.index("report") + 1:]
    elif ns.command == "wrap" and not rest:
        ns.command_args = tail
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if ns.command == "addon-path":
        print(ADDON)
        return 0
    if ns.command == "env":
        print("\n".join(env_lines(ns.agent, ns.proxy, ns.confdir)))
        return 0
    if ns.command == "doctor":
        config = ns.config or os.environ.get("CONFIG") or str(DEFAULT_CONFIG)
        lines, problems = doctor(config, ns.confdir or default_confdir(), os.environ)
        print("\n".join(lines))
        return 1 if problems else 0
    if ns.command == "report":
        return _report(ns)
    if ns.command == "wrap":
        return _wrap(ns)
    if ns.command == "demo":
        return demo.run(_tool("mitmdump"), ADDON)
    if ns.command == "forget":
        return _forget(ns)
    if ns.command == "tools":
        return _tools(ns)
    return _run(ns)


if __name__ == "__main__":
    sys.exit(main())
