"""``tooldisco demo``: one agent turn through the proxy, offline and without an API key.

A small fake Anthropic Messages API (in this process, on loopback) plays the model: offered the
search tool, it searches; shown the search's result, it answers. A real mitmdump with the addon
runs in reverse mode in front of it, and one request with many tools goes through it (with the
``anthropic`` SDK when it is installed, else plain HTTP). What is printed comes from what the
fake received and the proxy's telemetry line, not from expectations. The telemetry is kept in the
user's cache (``telemetry_path``), replaced by the next demo, and the command that reads it printed:
``tooldisco report`` works on the demo's turn right away.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

SEARCH_TOOL = "gateway_search_tools"  # the search tool's name in the demo's config
QUERY = "weather forecast for a city"
STARTUP_TIMEOUT = 60.0  # mitmdump's first start creates its CA: generous on a loaded machine

# An agent's catalog as MCP servers name it: a few servers, each with a handful of tools.
CATALOG: dict[str, list[tuple[str, str]]] = {
    "github": [("create_issue", "Create an issue in a GitHub repository."),
               ("list_pull_requests", "List pull requests of a repository."),
               ("merge_pull_request", "Merge a pull request."),
               ("get_file_contents", "Read a file from a repository branch."),
               ("search_code", "Search code across GitHub repositories.")],
    "slack": [("post_message", "Post a message to a Slack channel."),
              ("list_channels", "List the channels of the workspace."),
              ("get_thread", "Read the replies of a message thread.")],
    "jira": [("create_ticket", "Create a Jira ticket in a project."),
             ("transition_ticket", "Move a ticket to another status."),
             ("search_tickets", "Search tickets with JQL.")],
    "postgres": [("query", "Run a read-only SQL query."), ("list_tables", "List the tables of a schema."),
                 ("describe_table", "Columns and types of a table.")],
    "calendar": [("list_events", "List calendar events in a time range."),
                 ("create_event", "Create a calendar event with attendees."),
                 ("find_free_slot", "Find a free slot for all attendees.")],
    "weather": [("get_forecast", "Weather forecast for a city: temperature, rain, wind, for the next days."),
                ("get_alerts", "Severe weather alerts for a region.")],
    "browser": [("open_page", "Open a web page and return its text."), ("screenshot", "Screenshot of a page."),
                ("click", "Click an element on the open page.")],
    "filesystem": [("read_file", "Read a local file."), ("write_file", "Write a local file."),
                   ("list_directory", "List a local directory."), ("move_file", "Move or rename a file.")],
    "email": [("send_email", "Send an email."), ("search_inbox", "Search the inbox."),
              ("read_email", "Read one email by id.")],
    "kubernetes": [("get_pods", "List pods in a namespace."), ("get_logs", "Logs of a pod's container."),
                   ("scale_deployment", "Scale a deployment to N replicas."),
                   ("apply_manifest", "Apply a Kubernetes manifest.")],
}


def tools() -> list[dict[str, Any]]:
    """The client's tools, in Anthropic's format, each with a small JSON schema."""
    return [{"name": f"mcp__{server}__{name}", "description": text,
             "input_schema": {"type": "object", "properties": {"arg": {"type": "string", "description": text}}}}
            for server, entries in CATALOG.items() for name, text in entries]


class FakeModel:
    """The fake upstream: records each request's tool names; searches once, then answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        names = [t.get("name") for t in body.get("tools") or []]
        with self._lock:
            self.requests.append({"tools": names, "messages": body.get("messages") or []})
        last = (body.get("messages") or [{}])[-1].get("content")
        searched = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last if isinstance(b, dict))
        if SEARCH_TOOL in names and not searched:
            content = [{"type": "tool_use", "id": "toolu_demo_1", "name": SEARCH_TOOL, "input": {"query": QUERY}}]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": f"Found what I need among {len(names)} tools: it will be sunny."}]
            stop = "end_turn"
        return {"id": "msg_demo", "type": "message", "role": "assistant", "model": body.get("model", "demo"),
                "content": content, "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": len(json.dumps(body)) // 4, "output_tokens": 12}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                data = json.dumps(model.answer(body)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _config(workdir: Path) -> Path:
    doc = {"pipes": {"tool_discovery": {"enabled": True, "strategy": "tool-search", "search_tool_name": SEARCH_TOOL,
                                        "max_search_results": 3, "search": {"backend": "bm25"}}},
           "hosts": ["127.0.0.1"],  # reverse mode: the flow's host is the fake's
           "sessions": {"dir": str(workdir / "sessions")},
           "telemetry": {"path": str(workdir / "telemetry.jsonl")}}
    path = workdir / "demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _free_port() -> int:
    """A port free now; mitmdump binds it a moment later (a clash fails the demo, loudly)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    """mitmdump with the addon in reverse mode in front of ``upstream``; its output kept."""

    def __init__(self, mitmdump: str, addon: Path, upstream: str, workdir: Path) -> None:
        self.lines: list[str] = []
        self.port = _free_port()
        cmd = [mitmdump, "--mode", f"reverse:{upstream}", "--listen-host", "127.0.0.1", "--listen-port", str(self.port),
               "--set", f"confdir={workdir / 'confdir'}", "-s", str(addon),
               "--set", f"tool_discovery_config={_config(workdir)}"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=workdir, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def url(self) -> str:
        """Once it accepts connections. Its output may be block-buffered (a console script run
        with ``python -E`` ignores PYTHONUNBUFFERED, as pipx writes them): the port tells."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return f"http://127.0.0.1:{self.port}"
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("mitmdump did not start:\n" + "\n".join(self.lines[-20:]))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _send(url: str, body: dict[str, Any]) -> tuple[str, str]:
    """(the client's name, the answer's text), through the SDK when installed."""
    try:
        import anthropic  # optional: the demo's client when the SDK is there
    except ImportError:
        request = urllib.request.Request(f"{url}/v1/messages", json.dumps(body).encode(), method="POST", headers={
            "content-type": "application/json", "x-api-key": "demo-key", "anthropic-version": "2023-06-01"})
        # The proxy is on loopback: the environment's proxy settings (HTTP_PROXY) must not apply.
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=60) as response:
            answer = json.load(response)
        return "plain HTTP (urllib)", " ".join(b.get("text", "") for b in answer["content"])
    client = anthropic.Anthropic(base_url=url, api_key="demo-key", max_retries=0, timeout=60,
                                 http_client=anthropic.DefaultHttpxClient(trust_env=False))
    message = client.messages.create(**body)
    return f"anthropic SDK {anthropic.__version__}", " ".join(getattr(b, "text", "") for b in message.content)


def _telemetry(path: Path, timeout: float = 10.0) -> dict[str, Any] | None:
    """The proxy's record of the turn (its writer thread appends it just after the answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and (text := path.read_text().strip()):
            return json.loads(text.splitlines()[-1])
        time.sleep(0.1)
    return None


def telemetry_path(env: dict[str, str] | None = None) -> Path:
    """Where the demo keeps its telemetry: ``$XDG_CACHE_HOME/tooldisco/demo.jsonl`` (``~/.cache``),
    beside the session store's default."""
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "tooldisco" / "demo.jsonl"


def _keep(source: Path, target: Path) -> Path | None:
    """The demo's telemetry copied to ``target`` (a file 0600 in a 0700 directory, as the proxy
    writes its own), or None when it cannot be written there."""
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
            shutil.copyfileobj(src, out)
        os.chmod(target, 0o600)
    except OSError:
        return None
    return target


def _shown(path: Path) -> str:
    home = str(Path.home()).rstrip("/")
    text = str(path)
    return "~" + text[len(home):] if home and text.startswith(home + "/") else text


def _tools(n: int) -> str:
    return f"{n} tool" + ("" if n == 1 else "s")


def run(mitmdump: str, addon: Path, out: Callable[[str], None] = print, keep: Path | None = None) -> int:
    """The demo; 0 when the turn went through and the proxy recorded it. Its telemetry is kept at
    ``keep`` (default ``telemetry_path()``)."""
    keep = telemetry_path() if keep is None else keep
    kept = None
    with tempfile.TemporaryDirectory(prefix="tooldisco-demo-") as tmp:
        workdir = Path(tmp)
        model = FakeModel()
        proxy = Proxy(mitmdump, addon, model.url, workdir)
        try:
            try:
                url = proxy.url()
            except RuntimeError as e:
                out(f"tooldisco demo: {e}")
                return 1
            sent = tools()
            body = {"model": "claude-demo", "max_tokens": 256, "tools": sent,
                    "messages": [{"role": "user", "content": "What's the weather in Paris tomorrow?"}]}
            client, text = _send(url, body)
            record = _telemetry(workdir / "telemetry.jsonl")
        finally:
            proxy.stop()
            model.close()
        if (workdir / "telemetry.jsonl").is_file():  # whole now: the proxy flushed it on its way out
            kept = _keep(workdir / "telemetry.jsonl", keep)
    out(f"tooldisco demo: one turn through mitmdump with the addon (reverse mode) to a fake Anthropic API, "
        f"offline; client: {client}")
    if not record or not model.requests:
        out("the proxy recorded nothing for the turn:\n" + "\n".join(proxy.lines[-20:]))
        return 1
    first = model.requests[0]["tools"]
    before, after = record["tool_tokens_before"], record["tool_tokens_after"]
    saved = f" ({100 * (before - after) // before}% fewer)" if before else ""
    out(f"before: the client sent {record['total_tools']} tools, ~{before} tokens of tool definitions")
    out(f"after:  the model was sent {_tools(len(first))}, ~{after} tokens{saved}: {', '.join(first)}")
    for search in record.get("searches") or []:
        out(f"search: the model asked {search['query']!r} ({search['backend']}, {search['deferred']} deferred tools); "
            f"found: {', '.join(search['matched']) or 'nothing'}")
    if len(model.requests) > 1:
        sent_then = _tools(len(model.requests[-1]["tools"]))
        out(f"then:   the proxy answered the search itself and sent the model {sent_then} "
            f"({len(model.requests)} upstream requests, the search hidden from the client)")
    out(f"answer: {text.strip()}")
    if kept is not None:
        out(f"report: the turn's telemetry is in {_shown(kept)}: tooldisco report {_shown(kept)} makes a page of it "
            f"(the report extra), tooldisco report --json {_shown(kept)} prints its figures")
    else:
        out(f"report: the turn's telemetry could not be kept in {_shown(keep)}")
    return 0
