"""The reference selector over real HTTP on 127.0.0.1: ranking, the contract's rules,
auth, every 4xx, size caps, keep-alive, threads, and definitions in every provider shape."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from loguru import logger
from tooldisco import selector_service
from tooldisco.core.types import Tool
from tooldisco.search.base import MAX_QUERY_CHARS, QueryError, Ranking
from tooldisco.selector_service import (
    HEALTH_PATH,
    SEARCH_PATH,
    Limits,
    SelectorServer,
    parse_request,
    tool_from_entry,
    with_always_keep,
)

from tests.support import semantic
from tests.support.catalog import tool_specs

ROOT = Path(__file__).resolve().parents[3]
KEY = "s3cret-selector-key"


def _schema(params: dict[str, str], object_type: str = "object") -> dict[str, Any]:
    return {"type": object_type, "properties": {k: {"type": "string", "description": v} for k, v in params.items()}}


#: One tool definition per provider shape: (name, description, params) -> definition.
SHAPES: dict[str, Callable[[str, str, dict[str, str]], dict[str, Any]]] = {
    "anthropic": lambda n, d, p: {"name": n, "description": d, "input_schema": _schema(p)},
    "openai_chat": lambda n, d, p: {"type": "function", "function": {"name": n, "description": d, "parameters": _schema(p)}},
    "openai_responses": lambda n, d, p: {"type": "function", "name": n, "description": d, "parameters": _schema(p)},
    "gemini": lambda n, d, p: {"name": n, "description": d, "parameters": _schema(p, "OBJECT")},
    "gemini_json_schema": lambda n, d, p: {"name": n, "description": d, "parametersJsonSchema": _schema(p)},
    "bedrock": lambda n, d, p: {"toolSpec": {"name": n, "description": d, "inputSchema": {"json": _schema(p)}}},
    "mcp": lambda n, d, p: {"name": n, "description": d, "inputSchema": _schema(p)},
}


def catalog(n: int = 60, shape: str = "openai_chat") -> list[dict[str, Any]]:
    """Realistic MCP-style tools as the proxy sends them: name, description, definition."""
    return [{"name": name, "description": desc, "definition": SHAPES[shape](name, desc, params)}
            for name, desc, params in tool_specs(n)]


CATALOG = catalog()
NAMES = {t["name"] for t in CATALOG}


def body(pattern: str, tools: Sequence[dict[str, Any]] = CATALOG, top_k: int = 5, always_keep: Sequence[str] = ()) -> dict[str, Any]:
    return {"pattern": pattern, "top_k": top_k, "always_keep": list(always_keep), "tools": list(tools)}


@pytest.fixture(scope="module")
def server() -> Iterator[SelectorServer]:
    with SelectorServer(port=0, backend="hybrid") as running:
        yield running


@pytest.fixture(scope="module")
def client(server: SelectorServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def select(client: httpx.Client, payload: dict[str, Any], **kwargs: Any) -> list[str]:
    response = client.post(SEARCH_PATH, json=payload, **kwargs)
    assert response.status_code == 200, response.text
    names = response.json()["selected_names"]
    assert len(names) == len(set(names))
    return names


def error_of(response: httpx.Response) -> tuple[int, str]:
    assert response.headers["content-type"] == "application/json"
    err = response.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    return response.status_code, err["type"]


# --- ranking and the contract's rules ------------------------------------------------


@pytest.mark.parametrize(
    "pattern, best",
    [
        ("post a message to the team slack channel", "mcp__slack__post_message"),
        ("open a new GitHub issue about the login bug", "mcp__github__create_issue"),
        ("run a SQL query on the postgres database", "mcp__postgres__run_query"),
        # Paraphrases that share no word with the tool: only the embedding model ranks them.
        pytest.param("will it rain in Paris this week", "mcp__weather__get_forecast", marks=semantic.needs_semantic),
        pytest.param("add the team meeting to my calendar for tomorrow at 10", "mcp__calendar__create_event",
                     marks=semantic.needs_semantic),
    ],
)
def test_the_relevant_tool_comes_first(client: httpx.Client, pattern: str, best: str) -> None:
    names = select(client, body(pattern))
    assert names[0] == best
    assert set(names) <= NAMES


def test_top_k_caps_the_selection(client: httpx.Client) -> None:
    assert len(select(client, body("github pull request", top_k=2))) == 2
    assert len(select(client, body("github pull request", top_k=5))) == 5


def test_the_backend_that_answered_is_a_header(client: httpx.Client) -> None:
    response = client.post(SEARCH_PATH, json=body("slack"))
    # Without the semantic extra the hybrid backend answers with BM25 alone, and says so.
    assert response.headers["x-selector-backend"] == ("bm25" if semantic.missing() else "hybrid")


def test_nothing_relevant_is_an_empty_selection_even_with_always_keep(client: httpx.Client) -> None:
    assert select(client, body("xyzzy qwerty", always_keep=["mcp__calendar__*"])) == []


def test_no_tools_is_an_empty_selection(client: httpx.Client) -> None:
    assert select(client, body("post to slack", tools=[])) == []


def test_always_keep_follows_the_hits_and_ignores_unknown_names(client: httpx.Client) -> None:
    names = select(client, body("post a message to slack", top_k=5, always_keep=["mcp__calendar__*", "not_a_tool"]))
    assert names[0] == "mcp__slack__post_message"
    assert names[-2:] == ["mcp__calendar__create_event", "mcp__calendar__list_events"]
    assert len(names) == 5 and "not_a_tool" not in names


def test_always_keep_never_pushes_past_top_k_nor_out_the_best_hit(client: httpx.Client) -> None:
    names = select(client, body("post a message to slack", top_k=2, always_keep=["mcp__calendar__*"]))
    assert names == ["mcp__slack__post_message", "mcp__calendar__create_event"]


def test_an_always_keep_tool_that_is_a_hit_keeps_its_rank(client: httpx.Client) -> None:
    names = select(client, body("post a message to slack", top_k=3, always_keep=["mcp__slack__post_message"]))
    assert names[0] == "mcp__slack__post_message" and len(names) == 3


@pytest.mark.parametrize(
    "hits, keep, top_k, expected",
    [
        (["a", "b", "c"], [], 3, ["a", "b", "c"]),
        (["a", "b", "c"], ["k1"], 3, ["a", "b", "k1"]),
        (["a", "b", "c"], ["k*"], 3, ["a", "k1", "k2"]),
        (["a", "b"], ["k*"], 1, ["a"]),
        (["a", "k2"], ["k*"], 3, ["a", "k2", "k1"]),
        (["a"], ["nope", "K1"], 3, ["a"]),  # case-sensitive, like tool names
        ([], ["k*"], 3, []),
    ],
)
def test_with_always_keep(hits: list[str], keep: list[str], top_k: int, expected: list[str]) -> None:
    tools = [Tool(n, "") for n in ("a", "b", "c", "k1", "k2")]
    assert with_always_keep(hits, tools, keep, top_k) == expected


# --- definitions in every provider shape ---------------------------------------------


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_definitions_are_read_in_every_shape(shape: str) -> None:
    definition = SHAPES[shape]("lookup", "Look up a record.", {"isbn": "International Standard Book Number"})
    tool = tool_from_entry({"name": "lookup", "definition": definition}, 0)
    assert tool.description == "Look up a record."  # the definition's, as none was given
    assert tool.params == (("isbn", "International Standard Book Number"),)
    assert json.loads(tool.raw) == definition
    given = tool_from_entry({"name": "lookup", "description": "Given.", "definition": definition}, 0)
    assert given.description == "Given."


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_parameters_in_the_definition_are_searched(client: httpx.Client, shape: str) -> None:
    """The tools differ only in their parameters, so only the definition can tell them apart."""
    params = [{"isbn": "International Standard Book Number of the book"},
              {"iban": "Bank account number for the transfer"},
              {"imei": "Serial number of the mobile phone"}]
    tools = [{"name": f"tool_{i}", "description": "Look up a record.",
              "definition": SHAPES[shape](f"tool_{i}", "Look up a record.", p)} for i, p in enumerate(params)]
    assert select(client, body("find the book with this ISBN", tools=tools, top_k=1)) == ["tool_0"]


def test_enum_values_in_the_definition_are_searched(client: httpx.Client) -> None:
    tools = [{"name": f"t{i}", "description": "Convert a value.",
              "definition": {"name": f"t{i}", "input_schema": {"type": "object", "properties": {
                  "unit": {"type": "string", "enum": units}}}}}
             for i, units in enumerate([["kelvin", "fahrenheit"], ["parsec", "lightyear"]])]
    assert select(client, body("parsec", tools=tools, top_k=1)) == ["t1"]


def test_a_tool_without_definition_is_searched_by_name_and_description(client: httpx.Client) -> None:
    tools = [{"name": "get_weather", "description": "Current weather in a city."},
             {"name": "send_email", "description": "Send an email."}]
    assert select(client, body("weather in Oslo", tools=tools, top_k=1)) == ["get_weather"]


# --- errors --------------------------------------------------------------------------

TOOL = {"name": "t", "description": "d"}


@pytest.mark.parametrize(
    "payload, status, kind, field",
    [
        (b"{not json", 400, "invalid_json", None),
        (b"\xff\xfe\x00", 400, "invalid_json", None),
        (b"[" * 100_000, 400, "invalid_json", None),
        (b"[]", 400, "invalid_request", None),
        ({"tools": []}, 400, "missing_field", "pattern"),
        ({"pattern": "x"}, 400, "missing_field", "tools"),
        ({"pattern": 1, "tools": []}, 400, "invalid_type", "pattern"),
        ({"pattern": "   ", "tools": []}, 400, "invalid_value", "pattern"),
        ({"pattern": "x" * (MAX_QUERY_CHARS + 1), "tools": []}, 400, "invalid_value", "pattern"),
        ({"pattern": "x", "top_k": "5", "tools": []}, 400, "invalid_type", "top_k"),
        ({"pattern": "x", "top_k": True, "tools": []}, 400, "invalid_type", "top_k"),
        ({"pattern": "x", "top_k": 2.5, "tools": []}, 400, "invalid_type", "top_k"),
        ({"pattern": "x", "top_k": 0, "tools": []}, 400, "invalid_value", "top_k"),
        ({"pattern": "x", "top_k": 101, "tools": []}, 400, "invalid_value", "top_k"),
        ({"pattern": "x", "always_keep": "t", "tools": []}, 400, "invalid_type", "always_keep"),
        ({"pattern": "x", "always_keep": [1], "tools": []}, 400, "invalid_type", "always_keep[0]"),
        ({"pattern": "x", "tools": {}}, 400, "invalid_type", "tools"),
        ({"pattern": "x", "tools": ["t"]}, 400, "invalid_type", "tools[0]"),
        ({"pattern": "x", "tools": [TOOL, {"description": "d"}]}, 400, "missing_field", "tools[1].name"),
        ({"pattern": "x", "tools": [{"name": " "}]}, 400, "invalid_value", "tools[0].name"),
        ({"pattern": "x", "tools": [{"name": "t", "description": 5}]}, 400, "invalid_type", "tools[0].description"),
        ({"pattern": "x", "tools": [{"name": "t", "definition": []}]}, 400, "invalid_type", "tools[0].definition"),
        ({"pattern": "x", "tools": [TOOL, TOOL]}, 400, "duplicate_tool_name", "'t'"),
    ],
)
def test_bad_requests_get_a_json_error(
    client: httpx.Client, payload: Any, status: int, kind: str, field: str | None
) -> None:
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    response = client.post(SEARCH_PATH, content=content, headers={"content-type": "application/json"})
    assert error_of(response) == (status, kind)
    if field:
        assert field in response.json()["error"]["message"]


def test_optional_fields_take_defaults_and_null_counts_as_absent(client: httpx.Client) -> None:
    tools = [{"name": f"slack_{i}", "description": "Post to Slack.", "definition": None} for i in range(8)]
    names = select(client, {"pattern": "slack", "tools": tools, "top_k": None, "always_keep": None})
    assert len(names) == 5


@pytest.mark.parametrize(
    "method, path, status, kind, allow",
    [
        ("GET", SEARCH_PATH, 405, "method_not_allowed", "POST"),
        ("PUT", SEARCH_PATH, 405, "method_not_allowed", "POST"),
        ("DELETE", SEARCH_PATH, 405, "method_not_allowed", "POST"),
        ("POST", HEALTH_PATH, 405, "method_not_allowed", "GET, HEAD"),
        ("GET", "/v1/tool-discovery/other", 404, "not_found", None),
        ("POST", "/", 404, "not_found", None),
    ],
)
def test_routing_errors(client: httpx.Client, method: str, path: str, status: int, kind: str, allow: str | None) -> None:
    response = client.request(method, path)
    assert error_of(response) == (status, kind)
    assert response.headers.get("allow") == allow


def test_health_check(client: httpx.Client) -> None:
    response = client.get(HEALTH_PATH + "?probe=1")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "backend": "hybrid"}
    head = client.head(HEALTH_PATH)
    assert head.status_code == 200 and head.content == b""


def test_an_unknown_method_gets_a_json_error(server: SelectorServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("BREW", SEARCH_PATH)
    response = conn.getresponse()
    assert response.status == 501
    assert json.loads(response.read())["error"]["type"] == "http_501"
    conn.close()


def test_a_chunked_body_needs_a_length(client: httpx.Client) -> None:
    response = client.post(SEARCH_PATH, content=iter([json.dumps(body("slack")).encode()]))
    assert error_of(response) == (411, "length_required")


def test_a_search_backend_failure_is_a_500() -> None:
    class Broken:
        name = "broken"

        def search(self, query: str, tools: Sequence[Tool], limit: int) -> list[str]:
            return self.rank(query, tools, limit).names

        def rank(self, query: str, tools: Sequence[Tool], limit: int) -> Ranking:
            if query == "bad":
                raise QueryError("bad query")
            raise RuntimeError("boom")

    broken = SelectorServer(port=0, searcher=Broken()).start(warm_up=False)
    try:
        with httpx.Client(base_url=broken.url) as c:
            assert error_of(c.post(SEARCH_PATH, json=body("anything", tools=[TOOL]))) == (500, "internal_error")
            assert error_of(c.post(SEARCH_PATH, json=body("bad", tools=[TOOL]))) == (400, "invalid_value")
    finally:
        broken.stop()


# --- size caps -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small() -> Iterator[SelectorServer]:
    limits = Limits(max_body_bytes=2_000, max_tools=3, max_top_k=10, max_pattern_chars=50, max_always_keep=2)
    with SelectorServer(port=0, backend="bm25", limits=limits) as running:
        yield running


@pytest.mark.parametrize(
    "payload, status, kind",
    [
        (body("slack", tools=[{"name": "t", "description": "x" * 3_000}]), 413, "request_too_large"),
        (body("slack", tools=[{"name": f"t{i}"} for i in range(4)]), 413, "too_many_tools"),
        (body("slack", tools=[TOOL], top_k=11), 400, "invalid_value"),
        (body("s" * 51, tools=[TOOL]), 400, "invalid_value"),
        (body("slack", tools=[TOOL], always_keep=["a", "b", "c"]), 400, "invalid_value"),
    ],
)
def test_size_caps(small: SelectorServer, payload: dict[str, Any], status: int, kind: str) -> None:
    with httpx.Client(base_url=small.url) as c:
        assert error_of(c.post(SEARCH_PATH, json=payload)) == (status, kind)


def test_an_oversized_body_is_refused_unread_and_the_connection_closed(small: SelectorServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", small.port, timeout=10)
    conn.putrequest("POST", SEARCH_PATH)
    conn.putheader("Content-Length", "10000000")
    conn.endheaders()  # the body is never sent: the answer must not wait for it
    response = conn.getresponse()
    assert response.status == 413 and response.getheader("Connection") == "close"
    assert json.loads(response.read())["error"]["type"] == "request_too_large"
    conn.close()


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        Limits(max_tools=0)
    with pytest.raises(ValueError):
        Limits(max_pattern_chars=MAX_QUERY_CHARS + 1)


# --- auth ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded() -> Iterator[SelectorServer]:
    with SelectorServer(port=0, backend="bm25", api_key=KEY) as running:
        yield running


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", f"Basic {KEY}", "Bearer wrong", f"Bearer {KEY}x", "Bearer sécret"],
)
def test_a_missing_or_wrong_key_is_a_401_and_never_logged(guarded: SelectorServer, authorization: str | None) -> None:
    logs: list[str] = []
    sink = logger.add(logs.append, level="DEBUG")
    try:
        headers = {"Authorization": authorization.encode("utf-8")} if authorization is not None else {}
        with httpx.Client(base_url=guarded.url) as c:
            response = c.post(SEARCH_PATH, json=body("slack", tools=[TOOL]), headers=headers)
            assert error_of(response) == (401, "unauthorized")
            assert response.headers["www-authenticate"].startswith("Bearer")
            ok = c.post(SEARCH_PATH, json=body("d", tools=[TOOL]), headers={"Authorization": f"Bearer {KEY}"})
            assert ok.status_code == 200
    finally:
        logger.remove(sink)
    assert logs and not any(KEY in line for line in logs)


def test_the_right_key_passes_and_health_needs_none(guarded: SelectorServer) -> None:
    with httpx.Client(base_url=guarded.url) as c:
        response = c.post(SEARCH_PATH, json=body("d", tools=[TOOL]), headers={"authorization": f"bearer  {KEY}"})
        assert response.json() == {"selected_names": ["t"]}
        assert c.get(HEALTH_PATH).status_code == 200


def test_no_key_means_no_auth_with_a_warning() -> None:
    logs: list[str] = []
    sink = logger.add(logs.append, level="WARNING")
    try:
        with SelectorServer(port=0, backend="bm25", api_key="") as open_server, httpx.Client(base_url=open_server.url) as c:
            assert c.post(SEARCH_PATH, json=body("d", tools=[TOOL])).status_code == 200
    finally:
        logger.remove(sink)
    assert any("unauthenticated" in line for line in logs)


# --- connections and threads ---------------------------------------------------------


def test_one_connection_serves_many_requests_errors_included(server: SelectorServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    statuses = []
    sockets = set()
    for payload in (body("slack"), {"pattern": "x"}, body("github issue"), b"{bad"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        conn.request("POST", SEARCH_PATH, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
        assert response.getheader("Connection") is None
        sockets.add(id(conn.sock))
    conn.close()
    assert statuses == [200, 400, 200, 400]
    assert len(sockets) == 1


def test_kept_alive_requests_do_not_wait_for_delayed_acks(
    small: SelectorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With Nagle on, each response would wait for the client's delayed ACK: the server's
    connection sockets must have TCP_NODELAY set (checked on the socket, not with a clock)."""
    nodelay: list[int] = []
    setup = selector_service._Handler.setup

    def recording_setup(handler: Any) -> None:
        setup(handler)
        nodelay.append(handler.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    monkeypatch.setattr(selector_service._Handler, "setup", recording_setup)
    conn = http.client.HTTPConnection("127.0.0.1", small.port, timeout=10)
    data = json.dumps(body("d", tools=[TOOL])).encode()
    for _ in range(3):
        conn.request("POST", SEARCH_PATH, body=data)
        assert conn.getresponse().read()
    conn.close()
    assert len(nodelay) == 1 and nodelay[0] != 0  # one kept-alive connection, Nagle off


def test_concurrent_requests_get_the_same_answers_as_sequential_ones(client: httpx.Client, server: SelectorServer) -> None:
    patterns = ["post to slack", "github issue", "sql query", "weather forecast", "calendar event",
                "export an invoice", "delete a webhook", "list the database tables"]
    shapes = ["openai_chat", "anthropic", "bedrock"]
    jobs = [(p, s) for p in patterns for s in shapes] * 2
    catalogs = {s: catalog(shape=s) for s in shapes}
    expected = {(p, s): select(client, body(p, tools=catalogs[s])) for p, s in set(jobs)}

    def run(job: tuple[str, str]) -> list[str]:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            return select(c, body(job[0], tools=catalogs[job[1]]))

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, jobs))
    assert results == [expected[job] for job in jobs]


# --- the command line ----------------------------------------------------------------


def test_the_command_line_serves_until_terminated() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TOOL_DISCOVERY_API_KEY"}
    env["PYTHONPATH"] = str(ROOT / "addon")
    env["SELECTOR_TEST_KEY"] = KEY
    proc = subprocess.Popen(
        [sys.executable, "-m", "tooldisco.selector_service", "--port", "0", "--backend", "bm25",
         "--api-key-env", "SELECTOR_TEST_KEY"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("tool selector listening on http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split()[-1]
        assert url.endswith(SEARCH_PATH)
        assert httpx.post(url, json=body("d", tools=[TOOL])).status_code == 401
        ok = httpx.post(url, json=body("d", tools=[TOOL]), headers={"Authorization": f"Bearer {KEY}"})
        assert ok.json() == {"selected_names": ["t"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 0, stderr
    assert KEY not in stderr


def test_the_command_line_rejects_bad_limits() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tooldisco.selector_service", "--max-pattern-chars", str(MAX_QUERY_CHARS + 1)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "addon")}, capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert result.returncode == 2 and "max_pattern_chars" in result.stderr


def test_parse_request_strips_the_pattern() -> None:
    request = parse_request({"pattern": "  slack  ", "tools": [TOOL]}, Limits())
    assert request.pattern == "slack" and request.top_k == 5 and request.always_keep == ()
