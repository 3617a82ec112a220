"""Run a real ``mitmdump`` in front of the fake provider, and build clients that use it.

The proxy is started exactly as a user would (``HTTPS_PROXY`` + its CA), with
``--map-remote`` rules that send the real provider hosts to the fake over plain HTTP,
so clients keep their real default base URLs and traffic really goes through HTTPS
interception. Import this module as ``tests.e2e.harness``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import argon2
import httpx
import yaml

if TYPE_CHECKING:
    import anthropic
    import openai
    from google import genai

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The addon under test (the default for the ``addon_script`` fixture).
ADDON_PATH = REPO_ROOT / "addon" / "tool_discovery.py"
MITMDUMP = Path(sys.executable).parent / "mitmdump"
#: The same proxy with its web UI (``MitmDump(web=True)``).
MITMWEB = Path(sys.executable).parent / "mitmweb"
#: mitmweb's default flow list columns, and the comment (what the addon says of a flow).
WEB_COLUMNS = ("tls", "icon", "path", "method", "status", "size", "time", "comment")
#: Seconds to wait for mitmdump to listen; generous for loaded CI machines.
STARTUP_TIMEOUT = float(os.environ.get("E2E_STARTUP_TIMEOUT", "120"))

LISTEN_RE = re.compile(r"(?:HTTP\(S\) proxy (?:\(\w+ mode\) )?|reverse proxy to \S+ )listening at 127\.0\.0\.1:(\d+)\.")

#: Real provider hosts (as regexes) that map-remote sends to the fake provider.
PROVIDER_HOSTS: dict[str, str] = {
    "anthropic": r"api\.anthropic\.com",
    "openai": r"api\.openai\.com",
    "gemini": r"generativelanguage\.googleapis\.com",
    "bedrock": r"bedrock-runtime(?:-fips)?\.[a-z0-9-]+\.amazonaws\.com",
}

#: Environment variables removed before running mitmdump or an agent (they would
#: bypass the proxy, leak real credentials, or point clients elsewhere).
SCRUBBED_ENV = {
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "OPENAI_API_KEY",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "GOOGLE_GEMINI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_CLOUD_PROJECT",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "CODEX_CA_CERTIFICATE",
}

#: Test credentials the fake accepts (it checks presence only).
TEST_KEYS = {
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "OPENAI_API_KEY": "sk-test",
    "GEMINI_API_KEY": "test-gemini-key",
}

ConfigSpec = str | Callable[[Path], str] | None
"""Addon config: YAML text, or a function of the instance's work dir returning it."""


def addon_config(workdir: Path, *, telemetry: str = "tool_discovery.jsonl", sessions: Mapping[str, Any] | None = None,
                 hosts: Sequence[str] | None = None, top: Mapping[str, Any] | None = None,
                 **tool_discovery: Any) -> str:
    """The addon's YAML with ``pipes.tool_discovery`` enabled and set from ``tool_discovery``, its
    session store and telemetry file (a name) inside ``workdir``, so a test module states only what
    it changes and every instance keeps its state to itself. ``sessions`` adds to (or replaces) the
    store's ``dir``; ``hosts`` replaces the default processed hosts; ``top`` adds (or replaces)
    top-level sections, e.g. ``{"policy": {"deny": [...]}}``."""
    doc: dict[str, Any] = {"pipes": {"tool_discovery": {"enabled": True, **tool_discovery}}}
    if hosts is not None:
        doc["hosts"] = list(hosts)
    doc["sessions"] = {"dir": str(workdir / "sessions"), **(sessions or {})}
    doc["telemetry"] = {"path": str(workdir / telemetry)}
    doc.update(top or {})
    return yaml.safe_dump(doc, sort_keys=False)


_LIVE: list[MitmDump] = []


def live_proxies() -> list[MitmDump]:
    """Every mitmdump started by this harness and not stopped by it yet (crashed ones included)."""
    return list(_LIVE)


def scrubbed_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) without proxy, CA, base-URL and credential variables."""
    src = os.environ if base is None else base
    return {k: v for k, v in src.items() if k.upper() not in SCRUBBED_ENV}


def map_remote_args(upstream: str) -> list[str]:
    """``--map-remote`` options sending every known provider host to ``upstream`` (``http://host:port``)."""
    args: list[str] = []
    for host in PROVIDER_HOSTS.values():
        args += ["--map-remote", f"|^https://{host}(?::443)?(?=/)|{upstream}"]
    return args


def connect(sock: socket.socket, host: str) -> bytes:
    """Send a CONNECT to ``host``:443 on ``sock`` (a connection to a proxy); its answer's head."""
    sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("proxy closed the connection during CONNECT")
        head += chunk
    return head


class MitmDump:
    """One mitmdump process (restartable) with its confdir, CA, log file and config.

    Everything lives in ``workdir``: ``confdir/`` (CA), ``mitmdump.log`` (stdout+stderr
    of every start, appended), ``tool_discovery.yaml`` (when a config is given).
    """

    def __init__(
        self,
        workdir: Path,
        upstream: str,
        *,
        script: Path | str | None = None,
        config: ConfigSpec = None,
        extra_args: Sequence[str] = (),
        name: str = "mitmdump",
        startup_timeout: float = STARTUP_TIMEOUT,
        web: bool = False,
    ) -> None:
        self.workdir = Path(workdir)
        self.upstream = upstream
        self.script = Path(script) if script is not None else None
        self.config = config
        self.extra_args = list(extra_args)
        self.name = name
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        #: mitmweb mode: the web UI on loopback, on ``web_port``, behind ``web_token``.
        self.web = web
        self.web_port: int | None = None
        self.web_token = secrets.token_hex(16) if web else ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._log_file: IO[bytes] | None = None
        self.workdir.mkdir(parents=True, exist_ok=True)

    # --- paths --------------------------------------------------------------------------

    @property
    def confdir(self) -> Path:
        return self.workdir / "confdir"

    @property
    def ca_path(self) -> Path:
        """The mitmproxy CA certificate (PEM) clients must trust."""
        return self.confdir / "mitmproxy-ca-cert.pem"

    @property
    def log_path(self) -> Path:
        return self.workdir / "mitmdump.log"

    @property
    def config_path(self) -> Path | None:
        return self.workdir / "tool_discovery.yaml" if self.config is not None else None

    @property
    def url(self) -> str:
        """The proxy URL for clients (``http://127.0.0.1:PORT``)."""
        assert self.port is not None, "mitmdump is not started"
        return f"http://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        """mitmweb's page with its token (mitmweb mode)."""
        assert self.web and self.web_port is not None, "mitmweb is not started"
        return f"http://127.0.0.1:{self.web_port}/?token={self.web_token}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # --- lifecycle ----------------------------------------------------------------------

    def write_config(self, config: ConfigSpec = None) -> Path | None:
        """(Re)write the config file (from ``config`` if given, else the current one); returns its path."""
        if config is not None:
            self.config = config
        if self.config is None:
            return None
        text = self.config(self.workdir) if callable(self.config) else self.config
        assert self.config_path is not None
        self.config_path.write_text(text)
        return self.config_path

    def command(self, port: int = 0) -> list[str]:
        """The mitmdump command line for a start on ``port`` (0: any free port)."""
        cmd = [
            str(MITMWEB if self.web else MITMDUMP),
            "--set",
            f"confdir={self.confdir}",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(port),
            "--set",
            "connection_strategy=lazy",
            *map_remote_args(self.upstream),
        ]
        if self.script is not None:
            cmd += ["-s", str(self.script)]
        if self.config_path is not None:
            cmd += ["--set", f"tool_discovery_config={self.config_path}"]
        if self.web:
            # The addon masks ?token= in the log, mitmweb's printed URL included: the test knows
            # the token, mitmweb gets its argon2 hash.
            self.web_port = self.web_port or _free_port()
            cmd += ["--web-host", "127.0.0.1", "--web-port", str(self.web_port), "--set", "web_open_browser=false",
                    "--set", f"web_password={argon2.PasswordHasher().hash(self.web_token)}"]
            for column in WEB_COLUMNS:
                cmd += ["--set", f"web_columns={column}"]
        return cmd + self.extra_args

    def start(self, port: int = 0) -> MitmDump:
        """Start mitmdump and wait until it listens; raises with the log if it does not."""
        assert not self.running, "already running"
        self.write_config()
        self.starts += 1
        cmd = self.command(port)
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._log_file.write(f"===== start #{self.starts}: {' '.join(cmd)}\n".encode())
        offset = self.log_path.stat().st_size
        env = scrubbed_env()
        env["PYTHONUNBUFFERED"] = "1"
        # A proxy without a config of the test's own takes the shipped one, never the developer's.
        env["XDG_CONFIG_HOME"] = str(self.workdir / "xdg-config")
        env.pop("TOOLDISCO_CONFIG", None)
        self.proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT
        )
        _LIVE.append(self)
        try:
            self.port = self._wait_listening(offset)
            self._check_ready(offset)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_ready(self, offset: int) -> None:
        """mitmdump prints the listening line before its startup error check (a script that
        failed to load makes it exit right after). A CONNECT + TLS handshake through the proxy
        (no HTTP flow, so addon hooks do not run) takes many event-loop turns, after which
        that check has run: then the log and the process tell whether startup succeeded."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=self.startup_timeout) as sock:
                if any(arg.startswith("reverse:") for arg in self.extra_args):  # no CONNECT: a connection is all
                    time.sleep(0.5)
                else:
                    self._connect(sock)
        except OSError as exc:
            raise RuntimeError(f"mitmdump is not usable ({exc!r}):\n{self.log_text(since=offset)}") from None
        log = self.log_text(since=offset)
        if "logged during startup" in log or not self.running:
            raise RuntimeError(f"mitmdump failed during startup:\n{log}")

    def _connect(self, sock: socket.socket) -> None:
        """A CONNECT and a TLS handshake through the proxy on ``sock``."""
        head = connect(sock, "api.anthropic.com")
        if head.startswith(b"HTTP/1.1 407"):  # a proxy that wants credentials is up
            return
        if not head.startswith(b"HTTP/1.1 200"):
            raise ConnectionError(f"CONNECT answered {head[:100]!r}")
        self.ssl_context().wrap_socket(sock, server_hostname="api.anthropic.com").close()

    def _wait_listening(self, offset: int) -> int:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            m = LISTEN_RE.search(self.log_text(since=offset))
            if m and self.ca_path.exists():
                return int(m.group(1))
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"mitmdump exited with {self.proc.returncode} before listening:\n{self.log_text(since=offset)}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"mitmdump did not listen within {self.startup_timeout}s:\n{self.log_text(since=offset)}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> int | None:
        """Stop gracefully (SIGTERM, so addon ``done`` hooks run), SIGKILL after ``timeout``.
        Returns the exit code (None if it was not running)."""
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            code = self.proc.returncode
        self._cleanup()
        return code

    def kill(self) -> None:
        """Kill without a graceful shutdown (simulates a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._cleanup()

    def _cleanup(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self in _LIVE:
            _LIVE.remove(self)

    def restart(self, *, same_port: bool = True, config: ConfigSpec = None) -> MitmDump:
        """Stop gracefully and start again with the same confdir (same CA) and config file
        (rewritten from ``config`` if given). Keeps the port when possible, so existing
        clients keep working."""
        old = self.port
        self.stop()
        if config is not None:
            self.config = config
        if same_port and old:
            try:
                return self.start(port=old)
            except RuntimeError:
                pass  # port taken meanwhile: fall back to a fresh one
        return self.start()

    def ensure_running(self) -> MitmDump:
        """Start again if the process died (e.g. an earlier test crashed it)."""
        if not self.running:
            self.restart()
        return self

    # --- log ----------------------------------------------------------------------------

    def log_offset(self) -> int:
        """The current end of the log: pass it as ``since`` to see only later output."""
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_text(self, since: int = 0) -> str:
        """The log (stdout+stderr of every start) from byte offset ``since``."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(since)
            return f.read().decode("utf-8", "replace")

    def wait_for_log(self, pattern: str, *, since: int = 0, timeout: float = 20.0) -> re.Match[str]:
        """Poll the log until regex ``pattern`` appears after ``since``; returns the match."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = regex.search(self.log_text(since))
            if m:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not in mitmdump log after {timeout}s:\n{self.log_text(since)}")
            time.sleep(0.05)

    def records(self, name: str = "tool_discovery.jsonl", *, where: Callable[[dict[str, Any]], Any] | None = None,
                at_least: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
        """The JSON lines of ``workdir/name`` once ``at_least`` of them satisfy ``where``.

        Telemetry is written by a background thread after the client already has its answer,
        so a test that reads it right away races the writer: poll instead.
        """
        path = self.workdir / name
        deadline = time.monotonic() + timeout
        while True:
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
            if sum(1 for r in lines if where is None or where(r)) >= at_least:
                return lines
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {at_least} matching records in {path} after {timeout}s: {lines!r}"[:4000])
            time.sleep(0.05)

    # --- clients ------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context trusting only the mitmproxy CA."""
        return ssl.create_default_context(cafile=str(self.ca_path))

    def httpx_client(self, **kw: Any) -> httpx.Client:
        """An httpx client through the proxy, trusting its CA, ignoring the environment."""
        kw.setdefault("timeout", httpx.Timeout(120.0, connect=30.0))
        return httpx.Client(proxy=self.url, verify=self.ssl_context(), trust_env=False, **kw)

    def anthropic(self, **kw: Any) -> anthropic.Anthropic:
        """The real Anthropic SDK client with its real base URL, through the proxy (no retries)."""
        import anthropic

        kw.setdefault("api_key", TEST_KEYS["ANTHROPIC_API_KEY"])
        kw.setdefault("base_url", "https://api.anthropic.com")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 120.0)
        http = anthropic.DefaultHttpxClient(proxy=self.url, verify=self.ssl_context(), trust_env=False)
        return anthropic.Anthropic(http_client=http, **kw)

    def openai(self, **kw: Any) -> openai.OpenAI:
        """The real OpenAI SDK client with its real base URL, through the proxy (no retries)."""
        import openai

        kw.setdefault("api_key", TEST_KEYS["OPENAI_API_KEY"])
        kw.setdefault("base_url", "https://api.openai.com/v1")
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 120.0)
        http = openai.DefaultHttpxClient(proxy=self.url, verify=self.ssl_context(), trust_env=False)
        return openai.OpenAI(http_client=http, **kw)

    def genai(self, *, api_key: str = TEST_KEYS["GEMINI_API_KEY"], **client_args: Any) -> genai.Client:
        """The real google-genai client with its real endpoint, through the proxy (one attempt);
        ``client_args`` go to its httpx client (``event_hooks=`` to see what it sends)."""
        from google import genai
        from google.genai import types as gt

        args = {"proxy": self.url, "verify": self.ssl_context(), "trust_env": False, **client_args}
        options = gt.HttpOptions(client_args=args, retry_options=gt.HttpRetryOptions(attempts=1))
        return genai.Client(api_key=api_key, http_options=options)

    def bedrock(self, **kw: Any) -> Any:
        """boto3 ``bedrock-runtime`` with its real endpoint, through the proxy (one attempt), signing
        with the fake's test AWS key unless ``aws_access_key_id``/``aws_secret_access_key`` say otherwise."""
        import boto3
        import botocore.config

        from tests.fakeprovider.providers.bedrock import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY

        config = botocore.config.Config(
            proxies={"https": self.url}, retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=60
        )
        kw.setdefault("aws_access_key_id", TEST_ACCESS_KEY_ID)
        kw.setdefault("aws_secret_access_key", TEST_SECRET_ACCESS_KEY)
        return boto3.client("bedrock-runtime", region_name="us-east-1", config=config, verify=str(self.ca_path), **kw)

    def agent_env(self, *, home: Path | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for a subprocess agent (or SDK) using this proxy as users do:
        HTTPS_PROXY + the CA for Python (SSL_CERT_FILE), Node (NODE_EXTRA_CA_CERTS) and Codex
        (CODEX_CA_CERTIFICATE), test API keys, and optionally a private HOME."""
        env = scrubbed_env(base)
        ca = str(self.ca_path)
        env.update(
            HTTPS_PROXY=self.url,
            https_proxy=self.url,
            NO_PROXY="localhost,127.0.0.1",
            no_proxy="localhost,127.0.0.1",
            SSL_CERT_FILE=ca,
            REQUESTS_CA_BUNDLE=ca,
            NODE_EXTRA_CA_CERTS=ca,
            CODEX_CA_CERTIFICATE=ca,
            **TEST_KEYS,
        )
        if home is not None:
            home.mkdir(parents=True, exist_ok=True)
            env["HOME"] = str(home)
        return env

    def __repr__(self) -> str:
        state = f"port {self.port}" if self.running else "stopped"
        return f"<MitmDump {self.name} {state} script={self.script} config={self.config_path}>"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(text: str, max_chars: int = 20000) -> str:
    """The end of ``text`` (for failure reports)."""
    return text if len(text) <= max_chars else "...[truncated]...\n" + text[-max_chars:]
