"""The ``tooldisco`` console script: start the proxy, point agents at it, check a setup.

    tooldisco init [PATH] [--force]      # a config of your own: ~/.config/tooldisco/config.yaml
    tooldisco run [--config PATH|NAME] [--web] [--metrics [HOST:PORT]] [mitmdump args...]
    tooldisco addon-path                 # mitmdump -s "$(tooldisco addon-path)"
    tooldisco env AGENT                  # eval "$(tooldisco env claude-code)"
    tooldisco doctor [--config PATH]     # the CA (by fingerprint), the agent variables, the config
    tooldisco demo                       # offline, no API key: one turn, before and after
    tooldisco report FILE.jsonl [...]    # an HTML page (the report extra); --selector: api tables
    tooldisco wrap AGENT -- COMMAND...   # the agent through a proxy of its own, then what it did (or why not)
    tooldisco forget [--key-env VAR | --all]  # wipe what a tenant's traffic taught the search
    tooldisco tools list | approve NAME... | diff NAME  # pinned tool definitions and their changes

It runs the mitmproxy installed beside it (the same Python), so the addon finds its dependencies.
Every command that reads a config finds it the same way (``userconfig``: --config, $TOOLDISCO_CONFIG,
the user's own, the shipped default) and reports a config or start-up error in a few lines, what,
where and the fix, before anything starts.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import errno
import hashlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from loguru import logger

from tooldisco import demo, userconfig
from tooldisco.config import Config, ConfigError, Strategy, format_listen, load_config, parse_listen
from tooldisco.core.tenants import tenant_of
from tooldisco.policy import pins
from tooldisco.state.base import SessionStore
from tooldisco.state.factory import open_store
from tooldisco.report import page, selector

PACKAGE = Path(__file__).resolve().parent
ADDON = PACKAGE / "script" / "tool_discovery.py"
CONFIGS = userconfig.SHIPPED_DIR
DEFAULT_CONFIG = userconfig.SHIPPED_DEFAULT  # when no --config, $TOOLDISCO_CONFIG or config of one's own names another
CONFIG_HELP = ("config file, or a shipped config's name (relevance, tool-search, api, passthrough); default: "
               "$TOOLDISCO_CONFIG, else your own (tooldisco init writes it), else the shipped tool_discovery.yaml")
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


# --- which config, and why it cannot be used ------------------------------------------------


def _error(verb: str, what: str, fix: str) -> None:
    """A config or start-up error as it is read: what and where on one line, the fix on the next;
    never a traceback, and before any banner."""
    print(f"{verb}: {what}\n  fix: {fix}", file=sys.stderr)


def _one_line(text: str, most: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= most else text[: most - 1] + "…"


def _yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error in one line: where, what, and what it was reading."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context, opened = getattr(e, "context", None), getattr(e, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    reading = f" ({context}{f' opened on line {opened.line + 1}' if opened is not None else ''})" if context else ""
    return _one_line(f"{where}{problem}{reading}")


def _check(path: Path) -> Config | tuple[str, bool]:
    """The config at ``path`` loaded, or (what is wrong, to follow its path; whether it was read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return f" cannot be read: {_one_line(e.strerror if isinstance(e, OSError) and e.strerror else str(e))}", False
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as e:
        return f" is not valid YAML: {_yaml_problem(e)}", True
    try:
        return load_config(path)
    except ConfigError as e:
        return f": {_one_line(str(e).removeprefix(f'{path}: '))}", True
    except Exception as e:  # a value the validation did not foresee: still no traceback
        return f": {type(e).__name__}: {_one_line(str(e))}", True


def _fix(path: Path, read: bool) -> str:
    if not read:
        return "point --config or $TOOLDISCO_CONFIG at a YAML file; `tooldisco init` writes one of your own"
    if userconfig.is_shipped(path):
        return f"`tooldisco init --from {path.stem}` copies it to a file of your own, where you can change it"
    return f"edit {userconfig.shown(path)} (every key: docs/configuration.md); `tooldisco doctor` checks it"


def config_problem(found: userconfig.Found) -> Config | tuple[str, str]:
    """The config loaded, or (what is wrong and where, in one line; the fix)."""
    got = _check(found.path)
    if isinstance(got, Config):
        return got
    detail, read = got
    return f"config {userconfig.shown(found.path)} ({found.why}){detail}", _fix(found.path, read)


def _found(ns: argparse.Namespace, verb: str, one_line: bool = False) -> userconfig.Found | None:
    """The config a command uses (``userconfig.find``), or None once the error is printed."""
    try:
        return userconfig.find(getattr(ns, "config", None), os.environ)
    except userconfig.NotFound as e:
        if one_line:
            print(f"{verb}: {e}; fix: {e.fix}", file=sys.stderr)
        else:
            _error(verb, str(e), e.fix)
        return None


def _loaded(found: userconfig.Found, verb: str) -> Config | None:
    """The config validated here, before anything starts, or None once its error is printed."""
    got = config_problem(found)
    if isinstance(got, Config):
        return got
    _error(verb, *got)
    return None


def _say_config(found: userconfig.Found) -> None:
    """The one stderr line naming the config in use and why, unless --config named that very file."""
    if found.source != "option" or found.named:
        print(found.line(), file=sys.stderr)


# --- doctor ----------------------------------------------------------------------------------

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.+?)\s*-----END CERTIFICATE-----", re.S)
# Variables that replace the agent's trust store (a bundle must hold the public CAs too) rather
# than add to it.
REPLACING_CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE")


def certificate_fingerprints(data: bytes) -> list[str]:
    """The SHA-256 fingerprint (hex, of the DER) of every certificate in a PEM file, the whole
    bundle scanned, or of a file holding one DER certificate. A block ``cryptography`` refuses
    (some bundles carry odd old certificates) is fingerprinted from its decoded DER all the same."""
    out = []
    for match in _PEM_CERT.finditer(data):
        try:
            with warnings.catch_warnings():  # an old certificate's negative serial: deprecated, still read
                warnings.simplefilter("ignore")
                cert = x509.load_pem_x509_certificate(match.group(0))
            out.append(cert.fingerprint(hashes.SHA256()).hex())
        except ValueError:
            try:
                out.append(hashlib.sha256(base64.b64decode(match.group(1), validate=False)).hexdigest())
            except (ValueError, binascii.Error):
                continue
    if not out and data[:1] == b"\x30":  # DER: a SEQUENCE
        try:
            out.append(x509.load_der_x509_certificate(data).fingerprint(hashes.SHA256()).hex())
        except ValueError:
            pass
    return out


def _count(prints: Sequence[str]) -> str:
    return f"{len(prints)} certificate{'' if len(prints) == 1 else 's'}"


def doctor(config: str | os.PathLike[str], confdir: Path, environ: Mapping[str, str],
           why: str = "") -> tuple[list[str], int]:
    """Lines of findings (a failed one followed by its fix) and the number of problems: mitmproxy's
    CA; each agent CA variable, whose file must hold that very CA (compared by fingerprint);
    the config (``why``: where it came from): it loads, tool discovery is on and changes requests,
    its hosts cover the usual providers, its extras are installed."""
    out: list[str] = []
    problems = 0

    def say(ok: bool, text: str, fix: str = "") -> None:
        nonlocal problems
        problems += not ok
        out.append(("ok    " if ok else "FAIL  ") + text)
        if fix and not ok:
            out.append(f"      fix: {fix}")

    ca = confdir / CA_FILE
    ca_print = None
    if not ca.is_file():
        say(False, f"CA file {ca} missing", "start the proxy once (tooldisco run): mitmproxy writes its CA there")
    else:
        try:
            ca_prints = certificate_fingerprints(ca.read_bytes())
        except OSError as e:
            ca_prints = []
            say(False, f"CA file {ca} cannot be read: {e.strerror or e}", f"make it readable: chmod u+r {ca}")
        else:
            if ca_prints:
                ca_print = ca_prints[0]
                say(True, f"CA file {ca} (SHA-256 {ca_print[:16]}…)")
            else:
                say(False, f"CA file {ca} holds no certificate",
                    f"move {confdir} aside and start the proxy once: mitmproxy makes a new CA "
                    "(agents must trust it anew)")
    unchecked = [f"{v}={environ[v]}" for v in CA_VARS if environ.get(v)] if ca_print is None else []
    if unchecked:
        out.append(f"note  not checked until mitmproxy's CA is there (above): {', '.join(unchecked)}")
    for var in CA_VARS if ca_print is not None else ():
        if not (value := environ.get(var)):
            continue
        path = Path(value).expanduser()
        point = f"export {var}={ca}"
        if var in REPLACING_CA_VARS:  # the agent's only trust store: a bundle must hold the public CAs too
            point += (f", or a bundle with both: cat {value} {ca} > {confdir / 'bundle.pem'}; "
                      f"export {var}={confdir / 'bundle.pem'}")
        if not path.is_file():
            say(False, f"{var}={value} (no such file)", point)
            continue
        try:
            prints = certificate_fingerprints(path.read_bytes())
        except OSError as e:
            say(False, f"{var}={value} cannot be read: {e.strerror or e}", point)
            continue
        if ca_print in prints:
            among = f" (one of {_count(prints)})" if len(prints) > 1 else ""
            say(True, f"{var}={value} holds mitmproxy's CA{among}")
        else:
            say(False, f"{var}={value} does not hold mitmproxy's CA ({_count(prints)}, none is {ca}): "
                "the agent will refuse the proxy's certificates", point)
    if not any(environ.get(v) for v in CA_VARS):
        out.append("note  no agent CA variable is set here (tooldisco env AGENT prints them)")
    if proxy := environ.get("HTTPS_PROXY") or environ.get("https_proxy"):
        out.append(f"note  HTTPS_PROXY={proxy}")
    named = f"config {config}" + (f" ({why})" if why else "")
    got = _check(Path(config))
    if not isinstance(got, Config):
        detail, read = got
        say(False, f"{named}{detail}", _fix(Path(config), read))
        return out, problems
    cfg = got
    td = cfg.tool_discovery
    say(True, f"{named} loads (strategy {td.strategy})")
    where = userconfig.edit_hint(config)
    if not td.enabled:
        left_out = "enabled" not in (((_raw(config).get("pipes") or {}).get("tool_discovery") or {}))
        say(False, "tool discovery is off: pipes.tool_discovery.enabled is false"
            + (" (left out of the file: the code's default)" if left_out else "") + "; every request passes unchanged",
            f"set pipes.tool_discovery.enabled: true in {where}")
    elif td.strategy is Strategy.PASSTHROUGH:
        say(False, "strategy passthrough: requests are recorded, never changed",
            f"set pipes.tool_discovery.strategy: tool-search (or relevance, api) in {where}")
    for warning in cfg.warnings:  # what the proxy would log and run past
        say(False, f"config: {warning}", f"change it in {where}")
    uncovered = [h for h in USUAL_HOSTS if not cfg.handles_host(h)]
    say(not uncovered, "hosts cover " + ", ".join(h for h in USUAL_HOSTS if h not in uncovered)
        + (f"; not: {', '.join(uncovered)}" if uncovered else ""),
        f"add them (or the preset default) to hosts: in {where}")
    for extra in needed_extras(config):
        gone = missing(extra)
        say(not gone, f"extra {extra!r} the config needs"
            + (f": missing {', '.join(gone)}" if gone else " is installed"), f"pip install 'tooldisco[{extra}]'")
    return out, problems


def _raw(config: str | os.PathLike[str]) -> dict[str, Any]:
    """The config's YAML as written (before defaults), or {} when it is not a mapping."""
    try:
        raw = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return raw if isinstance(raw, dict) else {}


class _NoStore(Exception):
    """The session store's package is missing: ``str()`` says which and how to install it."""


@contextlib.contextmanager
def _quiet_store(cfg: Config) -> Iterator[tuple[SessionStore, str]]:
    """The config's session store and where it is, its own warnings off (the command says what
    went wrong in one line), closed at the end; ``_NoStore`` when its package is missing."""
    where = cfg.sessions.redis.where() if cfg.sessions.backend == "redis" else str(cfg.sessions.directory())
    logger.disable("tooldisco.state")
    try:
        try:
            store = open_store(cfg.sessions)
        except ImportError as e:
            raise _NoStore(f"the session store needs {e.name or 'redis'}: pip install 'tooldisco[redis]'") from None
        try:
            yield store, where
        finally:
            store.close()
    finally:
        logger.enable("tooldisco.state")


def forget(config: str, key: str | None) -> tuple[str, int]:
    """Wipe what the traffic of the tenant ``key`` stands for (an API key, as the agent sends
    it) taught the search, or every tenant's (None), in the config's session store. The message
    and the exit status."""
    try:
        cfg = load_config(config)
    except (ConfigError, OSError, yaml.YAMLError) as e:
        return f"tooldisco forget: {e}", 1
    tenant = tenant_of({"x-api-key": key}, "") if key is not None else None
    try:
        with _quiet_store(cfg) as (store, where):
            gone = store.forget(tenant)
            if not getattr(store, "available", True):
                return (f"tooldisco forget: the session store at {where} cannot be used (unreachable, locked or not "
                        "writable): nothing was forgotten; fix sessions in the config, or try again"), 1
    except _NoStore as e:
        return f"tooldisco forget: {e}", 1
    whose = "that tenant" if tenant is not None else f"{gone} tenant{'s' if gone != 1 else ''}"
    if tenant is not None and not gone:
        return f"nothing learned for that tenant in {where}", 0
    return f"forgot what {whose} taught the search ({where}); a running proxy forgets it within " \
           f"{cfg.tool_discovery.learning.refresh_interval:g} s", 0


def _forget(ns: argparse.Namespace) -> int:
    if (found := _found(ns, "tooldisco forget")) is None or _loaded(found, "tooldisco forget") is None:
        return 1
    _say_config(found)
    config = str(found.path)
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
    if (found := _found(ns, verb, one_line=True)) is None:
        return 1
    try:
        cfg = load_config(found.path)
    except (ConfigError, OSError, yaml.YAMLError) as e:
        print(f"{verb}: {_one_line(str(e))}", file=sys.stderr)
        return 1
    _say_config(found)
    try:
        with _quiet_store(cfg) as (store, where):
            stored = store.pin_entries()
            if not getattr(store, "available", True):
                print(f"{verb}: the session store at {where} cannot be used (unreachable, locked or not readable)",
                      file=sys.stderr)
                return 1
            tenant = (ns.tenant or "").strip().lower()
            entries = sorted(((key, data) for key, data in ((k, pins.decode(e)) for k, e in stored)
                              if data["tenant"].lower().startswith(tenant)), key=lambda e: (e[1]["tenant"], e[0]))
            return TOOLS_ACTIONS[ns.tools_command](ns, store, entries, where)
    except _NoStore as e:
        print(f"{verb}: {e}", file=sys.stderr)
        return 1


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


def _listen_problem(cmd: Sequence[str], web: bool) -> tuple[str, str] | None:
    """A port the proxy (or mitmweb's UI) cannot listen on, found before the banner: (what, fix).
    Ports given inside ``--mode`` (``reverse:URL@9000``) are left to mitmproxy."""
    modes = [v for i, a in enumerate(cmd) for v in
             ([cmd[i + 1]] if a in ("--mode", "-m") and i + 1 < len(cmd) else
              [a.split("=", 1)[1]] if a.startswith("--mode=") else [])]
    if any("@" in m for m in modes):
        return None
    checks = [(_value(cmd, "--listen-host") or "127.0.0.1", _value(cmd, "-p", "--listen-port") or "8080",
               "the proxy", "-p")]
    if web:
        checks.append((_value(cmd, "--web-host") or "127.0.0.1", _value(cmd, "--web-port") or "8081",
                       "mitmweb's UI", "--web-port"))
    for host, port_text, what, flag in checks:
        try:
            port = int(port_text)
        except ValueError:
            continue  # mitmdump says what is wrong with it
        if port == 0:
            continue
        other = f"{flag} {port + 1 if 1023 < port < 65535 else 8080}"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            with socket.socket(family) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as mitmproxy binds
                s.bind((host.strip("[]"), port))
        except socket.gaierror:
            return (f"{host} is not a name or address of this machine ({what})",
                    "--listen-host 127.0.0.1 (this machine only) or one of its own addresses")
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return (f"{host}:{port} is in use, so {what} cannot listen there (another proxy, or a tooldisco "
                        "run already running?)", f"stop that one, or pick another port: tooldisco run {other}")
            if e.errno == errno.EACCES:
                return f"not allowed to listen on {host}:{port} ({what})", f"a port above 1023: tooldisco run {other}"
            if e.errno == errno.EADDRNOTAVAIL:
                return (f"{host} is not an address of this machine ({what})",
                        "--listen-host 127.0.0.1 (this machine only) or one of its own addresses")
    return None


def _run(ns: argparse.Namespace) -> int:
    verb = "tooldisco run"
    if (found := _found(ns, verb)) is None or (cfg := _loaded(found, verb)) is None:
        return 1
    config = str(found.path)
    args = list(ns.args)
    if args[:1] == ["--"]:
        args = args[1:]
    for extra in needed_extras(config):
        if gone := missing(extra):
            _error(verb, f"config {userconfig.shown(config)} needs the {extra!r} extra (missing {', '.join(gone)})",
                   f"pip install 'tooldisco[{extra}]'")
            return 1
    metrics = None
    if ns.metrics is not None:
        try:
            metrics = format_listen(*parse_listen(ns.metrics, "--metrics"))
        except ConfigError as e:
            print(f"tooldisco: {e}", file=sys.stderr)
            return 2
    cmd = run_command(config, ns.web, args, metrics)
    if problem := _listen_problem(cmd, ns.web):
        _error(verb, *problem)
        return 1
    host = _value(cmd, "--listen-host") or "127.0.0.1"
    port = _value(cmd, "-p", "--listen-port") or "8080"
    confdir = Path(os.path.expanduser(_value([a.replace("confdir=", "--confdir=") for a in cmd], "--confdir")
                                      or str(default_confdir())))
    telemetry = (f"one JSON line per processed request in {userconfig.shown(os.path.abspath(cfg.telemetry.path))} "
                 f"(tooldisco report {userconfig.shown(os.path.abspath(cfg.telemetry.path))} makes a page of it)"
                 if cfg.telemetry.enabled else "off")
    print(found.line(), file=sys.stderr)
    print(f"tool discovery proxy on http://{host}:{port}"
          + ("" if cfg.tool_discovery.enabled else " (tool discovery is off in this config: requests pass unchanged)")
          + f"\nPoint an agent at it: eval \"$(tooldisco env AGENT --proxy http://{host}:{port}"
          f"{'' if confdir == default_confdir() else f' --confdir {confdir}'})\"  (agents: {', '.join(AGENTS)})\n"
          f"Telemetry: {telemetry}."
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
    sys.stderr.flush()
    os.execv(cmd[0], cmd)
    return 0  # not reached


def _init(ns: argparse.Namespace) -> int:
    """``tooldisco init [PATH]``: a commented config of one's own, complete (the shipped default's
    every key), mode 0600 in a 0700 directory; an existing file is kept unless ``--force``."""
    verb = "tooldisco init"
    own = userconfig.user_config()
    path = Path(ns.path).expanduser() if ns.path else own
    try:
        text = userconfig.template(ns.source)
    except userconfig.NotFound as e:
        _error(verb, str(e), e.fix)
        return 2
    if path.is_dir():
        _error(verb, f"{userconfig.shown(path)} is a directory", f"name a file: tooldisco init {path / 'config.yaml'}")
        return 1
    try:
        userconfig.write(path, text, ns.force)
    except FileExistsError:
        _error(verb, f"{userconfig.shown(path)} exists; it is kept as it is",
               "edit it, or write it anew (the old one is lost): "
               f"tooldisco init{' ' + str(ns.path) if ns.path else ''} --force")
        return 1
    except OSError as e:
        _error(verb, f"cannot write {userconfig.shown(path)}: {e.strerror or e}",
               "a directory you may write to: tooldisco init PATH (then --config PATH or $TOOLDISCO_CONFIG)")
        return 1
    print(path.resolve())
    if path.resolve() == own.resolve():
        print("tooldisco: every tooldisco command now uses it (tooldisco doctor checks it; tooldisco run starts the "
              "proxy with it)", file=sys.stderr)
    else:
        print(f"tooldisco: tooldisco looks for {userconfig.shown(own)}, not there: use this one with "
              f"--config {path} or export TOOLDISCO_CONFIG={path.resolve()}", file=sys.stderr)
    for var in (userconfig.ENV, userconfig.OLD_ENV):
        if value := os.environ.get(var, "").strip():
            print(f"tooldisco: note: ${var} is set ({value}) and wins over it while it is", file=sys.stderr)
            break
    return 0


def _report(ns: argparse.Namespace) -> int:
    """The HTML page (it names the report extra when that is missing), or with ``--selector`` the
    api strategy's Markdown tables, which need no extra."""
    if ns.args[:1] == ["--selector"]:
        return selector.main(ns.args[1:])
    return page.main(ns.args)


def _wait_for_port(proc: subprocess.Popen[bytes], port: int, ca: Path, timeout: float = 60.0,
                   probes: set[int] | None = None) -> bool:
    """Until mitmdump accepts connections and its CA exists (written on its first start).
    ``probes``: gets the local port of each connection made to find out."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                if probes is not None:
                    probes.add(probe.getsockname()[1])
            if ca.is_file():
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def summary(records: Sequence[Mapping[str, object]]) -> list[str]:
    """What the proxy did over a run, from its telemetry records (why not: ``causes``)."""
    if not records:
        return ["tooldisco: no request was processed"]
    before = sum(int(r.get("tool_tokens_before") or 0) for r in records)
    after = sum(int(r.get("tool_tokens_after") or 0) for r in records)
    # Native deferral sends deferred definitions marked, out of the prompt: the wire holds more.
    wire = sum(int(r.get("tool_tokens_wire") or r.get("tool_tokens_after") or 0) for r in records)
    searches = [s for r in records for s in (r.get("searches") or [])]  # type: ignore[union-attr]
    passed = sum(1 for r in records if r.get("fallback_reason"))
    failed = sum(1 for r in records if str(r.get("outcome") or "").startswith("flow_error"))
    lines = [f"tooldisco: {len(records)} requests processed; tool definitions ~{before} tokens sent by the agent, "
             f"~{after} in the model's prompt" + (f" ({100 * (before - after) // before}% fewer)" if before else "")
             + (f", ~{wire} on the wire" if wire != after else "")
             + (f"; {failed} of them got no answer from upstream (below)" if failed else ""),
             f"tooldisco: {len(searches)} searches answered by the proxy"
             + (f"; {passed} requests passed through unchanged (fallback_reason in the telemetry)" if passed else "")]
    lines += [f"  search {s.get('query')!r}: {', '.join(s.get('matched') or []) or 'nothing'}"  # type: ignore[union-attr]
              for s in searches[:10]]
    return lines


# --- tooldisco wrap: the agent through a proxy of its own, and the real cause when it fails ---------

WRAP_TIMEOUT = 120.0  # seconds without an answer from the provider before wrap stops the agent
TAIL = 12  # lines of mitmdump's log and of the agent's stderr shown when a run failed
# wrap's own mitmproxy script, written beside the run's config: one JSON line per event (a client's
# connection and request, the answer's status or the flow's error, a server that could not be
# reached, a TLS handshake the client refused), for wrap to tell why nothing was processed. It
# reads no body and writes no header value.
RECORDER = '''\
import json, time

_out = open({path!r}, "a", buffering=1, encoding="utf-8")


def _write(event, **fields):
    _out.write(json.dumps({{"e": event, "t": time.time(), **fields}}) + "\\n")


def _flow(flow):
    r = flow.request
    return {{"id": flow.id, "host": r.pretty_host, "port": r.port, "method": r.method,
             "path": r.path.split("?")[0][:200]}}


def client_connected(client):
    _write("connect", peer=(client.peername or ("", 0))[1])


def http_connect(flow):
    _write("tunnel", **_flow(flow))


def requestheaders(flow):
    _write("request", **_flow(flow))


def responseheaders(flow):
    _write("status", status=flow.response.status_code, reason=(flow.response.reason or "")[:80], **_flow(flow))


def error(flow):
    _write("error", msg=str(flow.error.msg if flow.error else "")[:300], **_flow(flow))


def server_connect_error(data):
    host, port = data.server.address or ("?", 0)
    _write("unreachable", host=str(host), port=port, msg=str(data.server.error or "")[:300])


def tls_failed_client(data):
    _write("tls_client", host=data.conn.sni or "", msg=str(data.conn.error or "")[:300])
'''
_UNLISTED = re.compile(r"tool discovery: (\S+)(?: \(sent on to \S+\))? is not in hosts:")
_STATUS_HINTS = {
    400: "the request was refused as malformed: the agent's model or flags?",
    401: "the key or login was refused: is the agent logged in, or its API key variable set?",
    402: "billing: the account needs credit",
    403: "the key may not use this model or endpoint",
    404: "no such path or model: the agent's model name or base URL?",
    407: "an upstream proxy wants credentials",
    408: "the provider timed out reading the request",
    413: "the request is too large for the provider",
    429: "rate limited or out of quota",
}


@dataclass
class WrapRun:
    """What wrap saw of one agent run, for ``causes``."""

    status: int | None  # the agent's exit status; None when wrap stopped it
    seconds: float = 0.0
    timeout: float = 0.0  # > 0: stopped after this long without an answer (--timeout)
    events: list[dict[str, Any]] = field(default_factory=list)  # the recorder's lines
    records: list[dict[str, Any]] = field(default_factory=list)  # the telemetry's
    log: str = ""  # mitmdump's output
    stderr: list[str] = field(default_factory=list)  # the agent's last stderr lines, when captured
    probes: set[int] = field(default_factory=set)  # local ports of wrap's own connections (is it up?)


def _hosts(names: Sequence[str], most: int = 4) -> str:
    counted = Counter(names)
    shown = [f"{n} ({c}×)" if c > 1 else n for n, c in counted.most_common(most)]
    return ", ".join(shown) + (f" and {len(counted) - most} more" if len(counted) > most else "")


def _status_hint(status: int) -> str:
    if status in _STATUS_HINTS:
        return _STATUS_HINTS[status]
    return "the provider's own error (most agents retry it)" if status >= 500 else "the provider refused it"


def causes(run: WrapRun, config: Config, where: str) -> list[str]:
    """Why a run was not processed, or what went wrong in it, each in one line: the agent stopped
    or exited before any request, requests that never reached the proxy, a CA the agent did not
    trust, an upstream unreachable or refusing (with its status), hosts the config does not list.
    ``where``: where to change the config. Empty when nothing went wrong."""
    ev = run.events
    out: list[str] = []
    if run.timeout:
        out.append(f"stopped the agent after {run.timeout:g} s without an answer from the provider (--timeout; "
                   "0 waits for ever)")
    requests = [e for e in ev if e.get("e") in ("request", "tunnel")]
    refused_tls = [e for e in ev if e.get("e") == "tls_client"]
    if refused_tls:
        refusing = _hosts([e.get("host") or "?" for e in refused_tls])
        out.append(f"the agent refused the proxy's certificate for {refusing}: it does not trust mitmproxy's CA; "
                   "check its CA variable (tooldisco env AGENT prints it, tooldisco doctor checks it, docs/agents.md)")
    if not requests:
        if refused_tls:
            return out
        if run.timeout:
            out.append(f"no request reached the proxy in {run.timeout:g} s: the agent does not use HTTPS_PROXY, or "
                       "NO_PROXY covers its host (a client that ignores HTTPS_PROXY needs a base URL and reverse "
                       "mode: docs/agents.md)")
        elif any(e.get("e") == "connect" and e.get("peer") not in run.probes for e in ev):
            out.append("the agent connected to the proxy but sent no request through it")
        elif run.status:
            out.append(f"the agent exited (status {run.status}) after {run.seconds:.1f} s, before any request "
                       "reached the proxy: its own error says why (not logged in? a wrong flag or model?)")
        else:
            out.append(f"the agent exited after {run.seconds:.1f} s without a request through the proxy: does it "
                       "read HTTPS_PROXY (NO_PROXY)? A client that ignores it needs a base URL and reverse mode "
                       "(docs/agents.md)")
        return out
    listed_seen = any(config.handles_host(str(e.get("host") or "")) for e in requests)
    sent = [e for e in ev if e.get("e") == "request"] or requests  # a tunnel's requests, else the tunnels

    def relevant(e: Mapping[str, Any]) -> bool:  # the model API's hosts, when the agent reached any
        return not listed_seen or config.handles_host(str(e.get("host") or ""))

    # mitmproxy reports a server it could not connect to (server_connect_error); a flow's error
    # says the same when that hook did not run.
    answered = {e.get("id") for e in ev if e.get("e") == "status"}
    failed = [e for e in ev if e.get("e") == "unreachable" and relevant(e)] or [
        e for e in ev if e.get("e") == "error" and relevant(e) and e.get("id") not in answered
        and "connect" in str(e.get("msg")).lower()]
    if failed:
        why = next((str(e.get("msg")) for e in failed if e.get("msg")), "")
        servers = [f"{e.get('host')}:{e.get('port')}" for e in failed]
        out.append(f"upstream unreachable: {_hosts(servers)}" + (f": {_one_line(why, 200)}" if why else "")
                   + " (the network, a firewall, or an upstream proxy this machine needs)")
    if run.timeout:
        finished = answered | {e.get("id") for e in ev if e.get("e") == "error"}
        waiting = [str(e.get("host")) for e in ev if e.get("e") == "request" and e.get("id") not in finished]
        if waiting:
            out.append(f"still waiting for an answer when stopped: {_hosts(waiting)} (the proxy's log says "
                       "whether it was planning the request or waiting on the upstream)")
    refused: Counter[tuple[str, int, str]] = Counter(
        (str(e.get("host")), int(e.get("status") or 0), str(e.get("reason") or "")) for e in ev
        if e.get("e") == "status" and int(e.get("status") or 0) >= 400 and relevant(e))
    for (host, status, reason), n in refused.most_common(3):
        out.append(f"upstream refused: {host} answered {status}{f' {reason}' if reason else ''}"
                   f"{f' ({n}×)' if n > 1 else ''}: {_status_hint(status)}")
    unlisted = list(dict.fromkeys(_UNLISTED.findall(run.log)))
    if unlisted:
        them = "it" if len(unlisted) == 1 else "them"
        out.append(f"hosts not listed: {', '.join(unlisted[:4])} got requests with tools, but the config's hosts: "
                   f"does not list {them}: add {them} (or a preset) to hosts: in {where}")
    elif not listed_seen and not run.records:
        out.append(f"no request went to a host the config lists ({', '.join(config.hosts[:4])}"
                   f"{', …' if len(config.hosts) > 4 else ''}); the agent's went to "
                   f"{_hosts([str(e.get('host')) for e in sent])}: add the model API's host (or a preset) to "
                   f"hosts: in {where}")
    if not run.records and not out:
        out.append(f"requests reached {_hosts([str(e.get('host')) for e in sent if relevant(e)])} and were "
                   "answered, but none carried tool definitions on an API path the proxy processes (a POST to "
                   "/v1/messages, /chat/completions, /responses, ...; docs/how-it-works.md)")
    return out


class _Stall:
    """When wrap stops waiting for an agent that retries silently: armed from the start (when
    its input is not a terminal: nobody is typing) or by a failed request to a host the config
    lists; disarmed by an answer (from such a host, or from any while nothing has failed). It
    fires once armed for longer than the timeout, unless a request to a listed host younger than
    that is still waiting for its answer (a model may think a while before its first byte)."""

    def __init__(self, path: Path, config: Config, armed_at: float | None) -> None:
        self.path, self.config = path, config
        self.since = armed_at
        self.failed = False  # armed by a failure: only a listed host's answer disarms it
        self.inflight: dict[str, float] = {}
        self._offset = 0
        self._rest = b""

    def read(self, now: float) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        self._offset += len(data)
        *lines, self._rest = (self._rest + data).split(b"\n")
        for line in lines:
            try:
                self.see(json.loads(line), now)
            except (ValueError, TypeError):
                continue

    def see(self, e: Mapping[str, Any], now: float) -> None:
        kind = e.get("e")
        listed = self.config.handles_host(str(e.get("host") or ""))
        if kind == "request" and listed:
            self.inflight[str(e.get("id"))] = now
        elif kind in ("status", "error"):
            self.inflight.pop(str(e.get("id")), None)
        if kind == "status" and int(e.get("status") or 0) < 400:
            if listed or not self.failed:
                self.since, self.failed = None, False
        elif (kind in ("status", "error", "unreachable") and listed) or kind == "tls_client":
            self.since = now if self.since is None else self.since
            self.failed = True

    def stalled(self, timeout: float, now: float) -> bool:
        if self.since is None or now - self.since < timeout:
            return False
        return not any(now - started < timeout for started in self.inflight.values())


def _tee(stream: Any, tail: deque[str]) -> None:
    """The agent's stderr passed on as it comes, its last lines kept."""
    out = getattr(sys.stderr, "buffer", None)
    rest = b""
    while chunk := stream.read1(65536):
        if out is not None:
            out.write(chunk)
            out.flush()
        else:
            sys.stderr.write(chunk.decode(errors="replace"))
            sys.stderr.flush()
        *lines, rest = (rest + chunk).split(b"\n")
        tail.extend(line.decode(errors="replace").rstrip("\r")[-300:] for line in lines)
        rest = rest[-4096:]
    if rest.strip():
        tail.append(rest.decode(errors="replace")[-300:])


def _stop(proc: subprocess.Popen[bytes], wait: float = 5.0) -> int | None:
    proc.terminate()
    try:
        return proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _run_agent(name: str, command: list[str], proxy: subprocess.Popen[bytes], port: int, confdir: Path,
               events: Path, config: Config, timeout: float) -> WrapRun | None:
    """The agent run once the proxy is up (None when the proxy did not start), stopped when it
    waits past ``timeout`` without an answer (``_Stall``; 0: never)."""
    probes: set[int] = set()
    if not _wait_for_port(proxy, port, confdir / CA_FILE, probes=probes):
        return None
    env = dict(os.environ)
    for line in env_lines(name, f"http://127.0.0.1:{port}", confdir):
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
    print(f"tooldisco wrap: {agent(name).title} through the proxy on 127.0.0.1:{port}", file=sys.stderr)
    tail: deque[str] = deque(maxlen=TAIL)
    capture = not _isatty(sys.stderr)  # on a terminal the agent keeps it: its own messages show above
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE if capture else None)
    except OSError as e:
        return WrapRun(127, stderr=[f"cannot run {command[0]}: {e.strerror or e}"], probes=probes)
    copier = threading.Thread(target=_tee, args=(proc.stderr, tail), daemon=True) if capture else None
    if copier:
        copier.start()
    stall = _Stall(events, config, None if _isatty(sys.stdin) else start)
    status: int | None = None
    stopped = 0.0
    try:
        while True:
            try:
                status = proc.wait(0.25)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            stall.read(now)
            if timeout and stall.stalled(timeout, now):
                print(f"tooldisco wrap: no answer from the provider for {timeout:g} s: stopping the agent",
                      file=sys.stderr)
                _stop(proc)
                stopped = timeout
                break
    except KeyboardInterrupt:  # Ctrl-C reached the agent too (same process group): let it end, report
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            _stop(proc)
        status = 130
    if copier:
        copier.join(5)
    return WrapRun(None if stopped else status, time.monotonic() - start, stopped, stderr=list(tail), probes=probes)


def _not_runnable(program: str) -> str | None:
    """Why the agent's command cannot be started, or None."""
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program).expanduser()
        if not path.exists():
            return f"agent not found: {program} does not exist"
        if path.is_dir() or not os.access(path, os.X_OK):
            return f"agent cannot be run: {program} is not an executable file"
        return None
    return None if shutil.which(program) else f"agent not found: {program} is not on PATH"


def _read_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def _tail(title: str, lines: Sequence[str]) -> list[str]:
    lines = [line for line in lines if line.strip()][-TAIL:]
    return [f"tooldisco wrap: {title}, last lines:", *(f"  | {line[:300]}" for line in lines)] if lines else []


def _wrap(ns: argparse.Namespace) -> int:
    verb = "tooldisco wrap"
    command = list(ns.command_args)
    if not command:
        print("tooldisco wrap: no command given: tooldisco wrap AGENT -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    agent(ns.agent)  # an unknown name exits here, before a proxy starts
    if (found := _found(ns, verb)) is None or (cfg := _loaded(found, verb)) is None:
        return 1
    if why := _not_runnable(command[0]):
        _error(verb, why, f"install it (docs/agents.md), or give its path: tooldisco wrap {ns.agent} -- "
                          f"/path/to/{Path(command[0]).name} ...")
        return 127
    _say_config(found)
    confdir = ns.confdir or default_confdir()
    tmp = Path(tempfile.mkdtemp(prefix="tooldisco-wrap-"))
    keep = True  # the log stays when the run failed, or when wrap itself did
    try:
        # The user's config with the telemetry in this run's own file, to tell what was done for it.
        raw = _raw(found.path)
        telemetry = tmp / "telemetry.jsonl"
        raw["telemetry"] = {**(raw.get("telemetry") or {}), "enabled": True, "path": str(telemetry)}
        (tmp / "config.yaml").write_text(yaml.safe_dump(raw))
        events = tmp / "events.jsonl"
        (tmp / "recorder.py").write_text(RECORDER.format(path=str(events)))
        port = _free_port()
        cmd = [*run_command(str(tmp / "config.yaml"), False, ["--listen-port", str(port)]),
               "-s", str(tmp / "recorder.py"), "--set", f"confdir={confdir}"]
        log = tmp / "mitmdump.log"
        with open(log, "wb") as out:
            proxy = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
            try:
                run = _run_agent(ns.agent, command, proxy, port, confdir, events, cfg, ns.timeout)
            finally:
                if proxy.poll() is None:
                    _stop(proxy, 10)  # mitmdump's shutdown flushes the telemetry
        text = log.read_text(errors="replace")
        if run is None:
            print("\n".join(["tooldisco wrap: mitmdump did not start", *_tail("mitmdump's log", text.splitlines()),
                             f"tooldisco wrap: mitmdump's log is kept: {log}"]), file=sys.stderr)
            return 1
        run.events, run.records, run.log = _read_lines(events), _read_lines(telemetry), text
        reasons = causes(run, cfg, userconfig.edit_hint(found.path))
        lines = summary(run.records) + [f"tooldisco wrap: {r}" for r in reasons]
        if reasons or not run.records:
            lines += _tail("the agent's stderr", run.stderr) + _tail("mitmdump's log", text.splitlines())
        keep = bool(reasons) or not run.records or run.status != 0
        if keep:
            lines.append(f"tooldisco wrap: mitmdump's log is kept: {log}")
        print("\n".join(lines), file=sys.stderr)
        return 124 if run.timeout else int(run.status or 0)
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tooldisco", description="Tool discovery for AI agents, as a mitmproxy addon.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    own = userconfig.shown(userconfig.user_config())
    i = sub.add_parser("init", help=f"write a commented config of your own ({own}) and print its path",
                       description=f"Writes the shipped default's every key, commented, to PATH (default {own}, "
                                   "in $XDG_CONFIG_HOME when set), mode 0600. Every tooldisco command then uses it "
                                   "unless --config or $TOOLDISCO_CONFIG names another.")
    i.add_argument("path", nargs="?", metavar="PATH", help=f"where to write it (default {own})")
    i.add_argument("--force", action="store_true", help="overwrite an existing file")
    i.add_argument("--from", dest="source", default=userconfig.SHIPPED_DEFAULT.stem, metavar="NAME",
                   help="the shipped config to start from: " + ", ".join(userconfig.shipped_names())
                        + " (default %(default)s)")
    # Every argument it does not know goes to mitmdump (parse_known_args); no abbreviations, so that
    # mitmdump's --web-host or --confdir-like flags are never taken for ours.
    r = sub.add_parser("run", help="start mitmdump (or mitmweb) with the addon, on loopback", allow_abbrev=False,
                       description="Every other argument goes to mitmdump/mitmweb (e.g. -p 9000, --mode reverse:URL).")
    r.add_argument("--config", metavar="PATH|NAME", help=CONFIG_HELP)
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
    d.add_argument("--config", metavar="PATH|NAME", help=CONFIG_HELP)
    d.add_argument("--confdir", type=Path, help="mitmproxy's confdir (default ~/.mitmproxy)")
    w = sub.add_parser("wrap", help="run an agent through a proxy of its own; print what the proxy did for it",
                       description="tooldisco wrap AGENT -- COMMAND [ARGS...]: when nothing was processed it "
                                   "says why (the agent not found or exiting early, requests that never reached "
                                   "the proxy, an upstream unreachable or refusing, hosts not listed), with the "
                                   "tails of the agent's stderr and mitmdump's log, which it keeps.")
    w.add_argument("agent", help=", ".join(AGENTS))
    w.add_argument("--config", metavar="PATH|NAME", help=CONFIG_HELP)
    w.add_argument("--confdir", type=Path, help="mitmproxy's confdir, where its CA is (default ~/.mitmproxy)")
    w.add_argument("--timeout", type=float, default=WRAP_TIMEOUT, metavar="SECONDS",
                   help="stop the agent after this long without an answer from the provider: from its start "
                        "when its input is not a terminal, else from a failed request (default %(default)g; 0: never)")
    sub.add_parser("demo", help="one turn through the proxy to a fake model: offline, no API key")
    f = sub.add_parser("forget", help="wipe what a tenant's traffic taught the search (the key on stdin)",
                       description="The tenant is the API key its agents send; it is read from standard input "
                                   "or an environment variable, never from the command line.")
    f.add_argument("--config", metavar="PATH|NAME", help=CONFIG_HELP)
    who = f.add_mutually_exclusive_group()
    who.add_argument("--key-env", metavar="VAR",
                     help="the environment variable holding the key, e.g. ANTHROPIC_API_KEY")
    who.add_argument("--all", action="store_true", help="every tenant")
    tl = sub.add_parser("tools", help="pinned tool definitions: list them, see what changed, approve a change",
                        description="Each tenant's tool definitions are pinned when first seen; a definition that "
                                    "changes later (an MCP server's rug pull) waits for approval here.")
    actions = tl.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH|NAME", help=CONFIG_HELP)
    common.add_argument("--tenant", metavar="ID", help="only this tenant: its 12-hex id (or its start) as listed")
    tls = actions.add_parser("list", parents=[common], help="every pinned tool: tenant, name, status, first seen, "
                                                            "fingerprint")
    tls.add_argument("--changed", action="store_true", help="only the tools awaiting approval (changed, new, renamed)")
    tls.add_argument("--json", action="store_true", help="JSON rows instead of a table")
    tap = actions.add_parser("approve", parents=[common],
                             help="pin the pending definition of each NAME, as diff shows it")
    tap.add_argument("names", nargs="*", metavar="NAME", help="a tool name, as listed")
    tap.add_argument("--all", action="store_true", help="every pending definition (of --tenant, or every tenant)")
    tdf = actions.add_parser("diff", parents=[common],
                             help="what changed: the pinned definition against the pending one")
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
    if ns.command == "init":
        return _init(ns)
    if ns.command == "doctor":
        if (found := _found(ns, "tooldisco doctor")) is None:
            return 1
        _say_config(found)
        lines, problems = doctor(found.path, ns.confdir or default_confdir(), os.environ, found.why)
        print("\n".join(lines))
        if problems:
            print(f"tooldisco doctor: {problems} problem{'s' if problems != 1 else ''} (FAIL above, each with its fix)",
                  file=sys.stderr)
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
