"""Replay recorded provider answers through a real mitmdump: the conformance corpus's rig.

A recording is one HTTP answer a real provider sent (``recordings/*.jsonl.gz``, one JSON record a
line: ``api``, ``model``, ``stream``, ``sse``, ``status``, ``content_type``, ``body`` or
``body_b64``; the README beside them says where each file comes from and under which licence).
No request was recorded, so ``client_request`` builds one a client of that API would send for
it: 30 tools, among them every tool the answer calls, so the proxy defers most and keeps those.

``Upstream`` is a provider that answers each request with the next answer queued for it, sends
a stream one event (or event-stream frame) per write, flushed, and keeps every request body: a
test queues the recording (a turn with no search) or a search round made in the recording's own
framing and then the recording (a stitched turn).
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).resolve().parent / "recordings"
SEARCH_TOOL = "gateway_search_tools"
TOOL_COUNT = 30
BEDROCK_HOST = "bedrock-runtime.us-east-1.amazonaws.com"


@dataclass(frozen=True)
class Recording:
    """One recorded answer."""

    id: str
    source: str  # the file it came from (recordings/<source>.jsonl.gz)
    api: str
    model: str
    stream: bool
    sse: bool
    status: int
    content_type: str
    body: bytes
    synthetic: bool

    @property
    def events(self) -> list[bytes]:
        """The body as the upstream writes it: one SSE event, event-stream frame or array line a piece."""
        if not self.stream or self.status != 200:
            return [self.body]
        if self.content_type.startswith("application/vnd.amazon.eventstream"):
            return _frames(self.body)
        if self.content_type.startswith("text/event-stream"):
            return [m.group(0) for m in re.finditer(rb"(?s).*?(?:\r\n\r\n|\n\n|\r\r|$)", self.body) if m.group(0)]
        return [line for line in self.body.splitlines(keepends=True)]


def load(pattern: str = "*.jsonl.gz") -> list[Recording]:
    """Every recording in ``recordings/`` whose file matches ``pattern``, in file order."""
    out: list[Recording] = []
    for path in sorted(RECORDINGS.glob(pattern)):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                body = base64.b64decode(r["body_b64"]) if "body_b64" in r else r["body"].encode("utf-8")
                out.append(Recording(
                    id=r["id"], source=path.name.split(".")[0], api=r["api"], model=r.get("model") or "",
                    stream=bool(r.get("stream")), sse=bool(r.get("sse")), status=int(r["status"]),
                    content_type=r.get("content_type") or "application/json", body=body,
                    synthetic=bool(r.get("synthetic")),
                ))
    return out


def _frames(body: bytes) -> list[bytes]:
    frames, at = [], 0
    while at + 4 <= len(body):
        (length,) = struct.unpack(">I", body[at:at + 4])
        if length < 16:
            break
        frames.append(body[at:at + length])
        at += length
    if at < len(body):
        frames.append(body[at:])
    return frames


# -- what a client sends ------------------------------------------------------------------

def called_tools(rec: Recording) -> list[str]:
    """The client tools the answer calls (not server tools: those are the provider's own)."""
    names: list[str] = []
    for value in _json_values(rec):
        _walk_calls(rec.api, value, names)
    return list(dict.fromkeys(n for n in names if re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", n)))


def _json_values(rec: Recording) -> Iterator[Any]:
    if rec.content_type.startswith("application/vnd.amazon.eventstream"):
        for frame in _frames(rec.body):
            (headers_len,) = struct.unpack(">I", frame[4:8])
            payload = frame[12 + headers_len:-4]
            try:
                yield json.loads(payload)
            except ValueError:
                continue
        return
    text = rec.body.decode("utf-8", "replace")
    if rec.stream and rec.content_type.startswith("text/event-stream"):
        for line in text.splitlines():
            if line.startswith("data:"):
                try:
                    yield json.loads(line[5:].strip())
                except ValueError:
                    continue
        return
    try:
        yield json.loads(text)
    except ValueError:
        return


def _walk_calls(api: str, value: Any, names: list[str]) -> None:
    if isinstance(value, list):
        for v in value:
            _walk_calls(api, v, names)
        return
    if not isinstance(value, dict):
        return
    name = value.get("name")
    if isinstance(name, str):
        kind = value.get("type")
        if api == "anthropic" and kind == "tool_use":
            names.append(name)
        elif api == "openai_responses" and kind == "function_call":
            names.append(name)
    if api == "openai_chat" and isinstance(value.get("function"), dict) and isinstance(value["function"].get("name"), str):
        names.append(value["function"]["name"])
    if api == "gemini" and isinstance(value.get("functionCall"), dict) and isinstance(value["functionCall"].get("name"), str):
        names.append(value["functionCall"]["name"])
    if api == "bedrock_converse":
        for key in ("toolUse",):
            if isinstance(value.get(key), dict) and isinstance(value[key].get("name"), str):
                names.append(value[key]["name"])
        start = value.get("start")
        if isinstance(start, dict) and isinstance(start.get("toolUse"), dict):
            names.append(str(start["toolUse"].get("name")))
    for v in value.values():
        _walk_calls(api, v, names)


_FILLER = [
    ("create_invoice", "Create an invoice for a customer with line items and a due date."),
    ("list_invoices", "List the invoices of a customer, newest first."),
    ("send_email", "Send an email to a recipient with a subject and a body."),
    ("search_emails", "Search the mailbox for emails matching a query."),
    ("create_calendar_event", "Create a calendar event with a title, start and end time."),
    ("list_calendar_events", "List calendar events between two dates."),
    ("create_github_issue", "Open an issue in a GitHub repository."),
    ("list_pull_requests", "List open pull requests of a GitHub repository."),
    ("merge_pull_request", "Merge a pull request of a GitHub repository."),
    ("query_database", "Run a read-only SQL query against the analytics database."),
    ("upload_file", "Upload a file to cloud storage and return its URL."),
    ("download_file", "Download a file from cloud storage."),
    ("translate_text", "Translate a text into another language."),
    ("resize_image", "Resize an image to the given width and height."),
    ("create_ticket", "Create a support ticket with a priority."),
    ("close_ticket", "Close a support ticket with a resolution note."),
    ("post_slack_message", "Post a message to a Slack channel."),
    ("list_slack_channels", "List the Slack channels of the workspace."),
    ("get_stock_price", "Get the latest price of a stock ticker."),
    ("convert_currency", "Convert an amount from one currency to another."),
    ("book_flight", "Book a flight between two airports on a date."),
    ("cancel_booking", "Cancel a travel booking by its reference."),
    ("create_spreadsheet", "Create a spreadsheet with the given columns."),
    ("append_spreadsheet_row", "Append a row to a spreadsheet."),
    ("run_shell_command", "Run a shell command in the sandbox and return its output."),
    ("read_file", "Read a text file from the workspace."),
    ("write_file", "Write a text file in the workspace."),
    ("list_directory", "List the files of a workspace directory."),
    ("geocode_address", "Turn a street address into coordinates."),
    ("get_directions", "Directions between two places by car, bike or foot."),
]

# Parameters long enough that 30 tools pass the shipped config's deferral floor (10K tokens).
_SCHEMA = {"type": "object", "properties": {
    f"option_{i}": {"type": "string", "description": f"Option {i} of the call: a value the tool reads as text, "
                    "validated against the service's own rules before anything is changed on the account."}
    for i in range(12)}}


def catalog(rec: Recording) -> list[tuple[str, str]]:
    """(name, description) of the request's 30 tools: the called ones first."""
    called = called_tools(rec)
    tools = [(n, f"The {n.replace('_', ' ')} tool: does what its name says.") for n in called]
    tools += [t for t in _FILLER if t[0] not in called]
    return tools[:max(TOOL_COUNT, len(called))]


# Anthropic server tools an answer may use, by the name its ``server_tool_use`` blocks carry.
_SERVER_TOOLS = {
    "web_search": "web_search_20250305",
    "web_fetch": "web_fetch_20250910",
    "code_execution": "code_execution_20250825",
    "tool_search_tool_regex": "tool_search_tool_regex_20251119",
    "tool_search_tool_bm25": "tool_search_tool_bm25_20251119",
}


def provider_tools(rec: Recording) -> list[dict[str, Any]]:
    """The non-function tools the request behind the answer must have held: a Responses answer
    echoes its request's tools (its hosted and client-executed ones are taken as they were); an
    Anthropic answer names the server tools it used."""
    out: list[dict[str, Any]] = []
    for value in _json_values(rec):
        if rec.api == "openai_responses":
            for obj in (value, value.get("response") if isinstance(value, dict) else None):
                tools = obj.get("tools") if isinstance(obj, dict) else None
                for tool in tools if isinstance(tools, list) else ():
                    if isinstance(tool, dict) and tool.get("type") not in ("function", None) and tool not in out:
                        out.append(tool)
        elif rec.api == "anthropic":
            for name in _server_tool_names(value):
                tool = {"type": _SERVER_TOOLS[name], "name": name}
                if tool not in out:
                    out.append(tool)
    return out


def _server_tool_names(value: Any) -> Iterator[str]:
    if isinstance(value, list):
        for v in value:
            yield from _server_tool_names(v)
    elif isinstance(value, dict):
        if value.get("type") == "server_tool_use" and value.get("name") in _SERVER_TOOLS:
            yield value["name"]
        for v in value.values():
            yield from _server_tool_names(v)


def own_search(rec: Recording) -> bool:
    """Whether the client behind the answer searched its tools by itself (a tool search tool of
    its own or the provider's): the proxy then leaves its tools as they are and never searches."""
    return any(str(t.get("type", "")).startswith("tool_search") for t in provider_tools(rec))


def _query(rec: Recording) -> str:
    called = called_tools(rec)
    return ("Please use " + ", ".join(called) + " to answer.") if called else "Tell me a short story."


def client_request(rec: Recording) -> tuple[str, dict[str, str], bytes]:
    """(url, headers, body) a client of ``rec.api`` sends for this answer."""
    tools = catalog(rec)
    query = _query(rec)
    model = rec.model or "model"
    if rec.api == "anthropic":
        body = {"model": model, "max_tokens": 4096, "messages": [{"role": "user", "content": query}],
                "tools": [*provider_tools(rec),
                          *({"name": n, "description": d, "input_schema": _SCHEMA} for n, d in tools)]}
        if rec.stream:
            body["stream"] = True
        return ("https://api.anthropic.com/v1/messages",
                {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}, _dumps(body))
    if rec.api == "openai_chat":
        body = {"model": model, "messages": [{"role": "user", "content": query}],
                "tools": [{"type": "function", "function": {"name": n, "description": d, "parameters": _SCHEMA}}
                          for n, d in tools]}
        if rec.stream:
            body["stream"] = True
        return "https://api.openai.com/v1/chat/completions", {"authorization": "Bearer sk-test"}, _dumps(body)
    if rec.api == "openai_responses":
        body = {"model": model, "input": query,
                "tools": [*provider_tools(rec),
                          *({"type": "function", "name": n, "description": d, "parameters": _SCHEMA}
                            for n, d in tools)]}
        if rec.stream:
            body["stream"] = True
        return "https://api.openai.com/v1/responses", {"authorization": "Bearer sk-test"}, _dumps(body)
    if rec.api == "gemini":
        body = {"contents": [{"role": "user", "parts": [{"text": query}]}],
                "tools": [{"functionDeclarations": [{"name": n, "description": d, "parameters": _SCHEMA}
                                                    for n, d in tools]}]}
        method = "streamGenerateContent" if rec.stream else "generateContent"
        url = f"https://generativelanguage.googleapis.com/v1beta/models/{model or 'gemini-2.5-flash'}:{method}"
        if rec.stream and rec.sse:
            url += "?alt=sse"
        return url, {"x-goog-api-key": "test-gemini-key"}, _dumps(body)
    if rec.api == "bedrock_converse":
        body = {"messages": [{"role": "user", "content": [{"text": query}]}],
                "toolConfig": {"tools": [{"toolSpec": {"name": n, "description": d, "inputSchema": {"json": _SCHEMA}}}
                                         for n, d in tools]}}
        op = "converse-stream" if rec.stream else "converse"
        mid = model or "anthropic.claude-3-5-sonnet-20240620-v1:0"
        return (f"https://{BEDROCK_HOST}/model/{mid}/{op}",
                {"authorization": "Bearer test-bedrock-key"}, _dumps(body))
    raise ValueError(f"no client for {rec.api}")


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


# -- a search round in the recording's own framing ----------------------------------------

def search_round(rec: Recording) -> Recording:
    """An answer of the same API and framing that only calls the proxy's search tool: the hidden
    round before the recording, in a stitched turn."""
    query = {"query": " ".join(called_tools(rec)) or "story"}
    args = json.dumps(query)
    api, stream = rec.api, rec.stream
    if api == "anthropic":
        message = {"id": "msg_search01", "type": "message", "role": "assistant", "model": rec.model or "m",
                   "content": [{"type": "tool_use", "id": "toolu_search01", "name": SEARCH_TOOL, "input": query}],
                   "stop_reason": "tool_use", "stop_sequence": None,
                   "usage": {"input_tokens": 100, "output_tokens": 10}}
        if not stream:
            body = _dumps(message)
        else:
            start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": 100, "output_tokens": 1}}
            events = [("message_start", {"type": "message_start", "message": start}),
                      ("content_block_start", {"type": "content_block_start", "index": 0, "content_block":
                                               {"type": "tool_use", "id": "toolu_search01", "name": SEARCH_TOOL,
                                                "input": {}}}),
                      ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "input_json_delta", "partial_json": args}}),
                      ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                      ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                                             "stop_sequence": None},
                                         "usage": {"output_tokens": 10}}),
                      ("message_stop", {"type": "message_stop"})]
            body = b"".join(b"event: %s\ndata: %s\n\n" % (n.encode(), _dumps(d)) for n, d in events)
    elif api == "openai_chat":
        call = {"id": "call_search01", "type": "function", "function": {"name": SEARCH_TOOL, "arguments": args}}
        if not stream:
            body = _dumps({"id": "chatcmpl-search01", "object": "chat.completion", "created": 1, "model": rec.model,
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                                "tool_calls": [call]},
                                        "finish_reason": "tool_calls"}],
                           "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})
        else:
            base = {"id": "chatcmpl-search01", "object": "chat.completion.chunk", "created": 1, "model": rec.model}
            first = {"role": "assistant", "content": None} if b'"role"' in rec.body else {}  # as the provider does
            chunks = [{**base, "choices": [{"index": 0, "delta": {**first, "tool_calls": [{**call, "index": 0}]},
                                            "finish_reason": None}]},
                      {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
            body = b"".join(b"data: %s\n\n" % _dumps(c) for c in chunks) + b"data: [DONE]\n\n"
    elif api == "openai_responses":
        item = {"type": "function_call", "id": "fc_search01", "call_id": "call_search01", "name": SEARCH_TOOL,
                "arguments": args, "status": "completed"}
        if re.match(r"gpt-(5\.([4-9]|[1-9][0-9])|[6-9])", rec.model or ""):  # native deferral: a client tool search
            item = {"type": "tool_search_call", "id": "tsc_search01", "call_id": "call_search01",
                    "execution": "client", "status": "completed", "arguments": query}
        response = {"id": "resp_search01", "object": "response", "created_at": 1, "status": "completed",
                    "model": rec.model, "output": [item], "tools": [], "tool_choice": "auto",
                    "parallel_tool_calls": True,
                    "usage": {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110,
                              "input_tokens_details": {"cached_tokens": 0},
                              "output_tokens_details": {"reasoning_tokens": 0}}}
        if not stream:
            body = _dumps(response)
        else:
            pending = {**response, "status": "in_progress", "output": [], "usage": None}
            events = [{"type": "response.created", "response": pending},
                      {"type": "response.in_progress", "response": pending},
                      {"type": "response.output_item.added", "output_index": 0,
                       "item": {**item, "arguments": "" if item["type"] == "function_call" else {},
                                "status": "in_progress"}},
                      *([{"type": "response.function_call_arguments.delta", "item_id": "fc_search01",
                          "output_index": 0, "delta": args},
                         {"type": "response.function_call_arguments.done", "item_id": "fc_search01",
                          "output_index": 0, "arguments": args}] if item["type"] == "function_call" else []),
                      {"type": "response.output_item.done", "output_index": 0, "item": item},
                      {"type": "response.completed", "response": response}]
            body = b"".join(b"event: %s\ndata: %s\n\n" % (e["type"].encode(), _dumps({**e, "sequence_number": i}))
                            for i, e in enumerate(events))
    elif api == "gemini":
        chunk = {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": SEARCH_TOOL,
                                                                                          "args": query}}]},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
                 "modelVersion": rec.model or "gemini-2.5-flash", "responseId": "search01"}
        if not stream:
            body = _dumps(chunk)
        elif rec.sse:
            body = b"data: %s\r\n\r\n" % _dumps(chunk)
        else:
            body = b"[" + _dumps(chunk) + b"]"
    elif api == "bedrock_converse":
        use = {"toolUseId": "tooluse_search01", "name": SEARCH_TOOL, "input": query}
        if not stream:
            body = _dumps({"output": {"message": {"role": "assistant", "content": [{"toolUse": use}]}},
                           "stopReason": "tool_use", "usage": {"inputTokens": 100, "outputTokens": 10,
                                                               "totalTokens": 110},
                           "metrics": {"latencyMs": 10}})
        else:
            events = [("messageStart", {"role": "assistant"}),
                      ("contentBlockStart", {"contentBlockIndex": 0, "start": {"toolUse": {
                          "toolUseId": "tooluse_search01", "name": SEARCH_TOOL}}}),
                      ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": args}}}),
                      ("contentBlockStop", {"contentBlockIndex": 0}),
                      ("messageStop", {"stopReason": "tool_use"}),
                      ("metadata", {"usage": {"inputTokens": 100, "outputTokens": 10, "totalTokens": 110},
                                    "metrics": {"latencyMs": 10}})]
            body = b"".join(event_frame(n, d) for n, d in events)
    else:
        raise ValueError(api)
    return Recording(id=f"{rec.id}:search", source="synthetic", api=api, model=rec.model, stream=stream,
                     sse=rec.sse, status=200, content_type=rec.content_type if stream else "application/json",
                     body=body, synthetic=True)


def event_frame(event_type: str, payload: dict[str, Any]) -> bytes:
    """One AWS event-stream frame of an event (the ``:event-type`` header and JSON payload)."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
    body = _dumps(payload)
    total = 16 + len(headers) + len(body)
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + headers + body
    return message + struct.pack(">I", zlib.crc32(message))


# -- the upstream ---------------------------------------------------------------------------

@dataclass
class Upstream:
    """A provider answering each API request with the next queued recording (404 when none is)."""

    queue: list[Recording] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> Upstream:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with upstream.lock:
                    upstream.bodies.append(body)
                    rec = upstream.queue.pop(0) if upstream.queue else None
                if rec is None:
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(rec.status)
                self.send_header("content-type", rec.content_type)
                if rec.stream and rec.status == 200:
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for piece in rec.events:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("content-length", str(len(rec.body)))
                    self.end_headers()
                    self.wfile.write(rec.body)
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def serve(self, *answers: Recording) -> None:
        with self.lock:
            self.queue = list(answers)
            self.bodies = []

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


# -- comparing what two proxies passed ---------------------------------------------------------

# Responses objects restate the request's tools and tool choice; the proxy shows the client its own.
ECHOED = ("tools", "tool_choice")


def pieces(rec: Recording, body: bytes) -> list[bytes]:
    """``body`` (an answer to ``rec``'s request) cut as the recording's events are."""
    return Recording(**{**rec.__dict__, "body": body}).events


def differences(rec: Recording, plain: bytes, addon: bytes) -> list[str]:
    """Where ``addon`` differs from ``plain`` beyond the documented echo of the client's own tools
    (Responses answers; the echo itself is checked by ``echo_is_clients``): one line a difference."""
    if plain == addon:
        return []
    a, b = pieces(rec, plain), pieces(rec, addon)
    out: list[str] = []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else b""
        y = b[i] if i < len(b) else b""
        if x == y or (rec.api == "openai_responses" and _unechoed(x) == _unechoed(y) is not None):
            continue
        out.append(f"event {i}: plain {x[:300]!r}\n          addon {y[:300]!r}")
    return out


def _unechoed(piece: bytes) -> tuple[bytes, Any] | None:
    """A Responses event (or JSON answer) without the echoed request fields: (framing, value)."""
    text = piece.decode("utf-8", "replace")
    head, _, data = text.rpartition("data:") if "data:" in text else ("", "", text)
    try:
        value = json.loads(data)
    except ValueError:
        return None
    for obj in (value, value.get("response") if isinstance(value, dict) else None):
        if isinstance(obj, dict):
            for key in ECHOED:
                obj.pop(key, None)
    return head.encode(), value


def echoing_request(rec: Recording) -> str:
    """A Responses request body whose ``tools`` / ``tool_choice`` are what the recorded answer echoes
    (the request it answered): a stitcher given it restores nothing."""
    for value in _json_values(rec):
        for obj in (value, value.get("response") if isinstance(value, dict) else None):
            if isinstance(obj, dict) and any(k in obj for k in ECHOED):
                return json.dumps({k: obj[k] for k in ECHOED if k in obj})
    return "{}"
