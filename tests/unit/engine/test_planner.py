"""The planner's use of the session: sticky kept sets, found tools, clients sharing a session
(whose tools never cross), callers without a credential, and flows of one session that overlap
(sub-agents)."""

import json
import threading

import pytest

from tooldisco.config import parse
from tooldisco.engine.engine import Engine
from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.core.answers import Answer

from tests.support.catalog import anthropic_tools

A = AnthropicAdapter()
P = "gateway_search_tools"
TOOLS = anthropic_tools(60)
WEATHER = {"mcp__weather__get_forecast", "mcp__weather__get_current_weather"}
SLACK = {"mcp__slack__post_message", "mcp__slack__list_channels", "mcp__slack__add_reaction"}
POSTGRES = {"mcp__postgres__run_query", "mcp__postgres__list_tables", "mcp__postgres__describe_table"}
CALENDAR = {"mcp__calendar__create_event", "mcp__calendar__list_events"}
TOPICS = {"weather forecast for Paris": WEATHER, "post a slack message to the channels": SLACK,
          "run a sql query on the postgresql database tables": POSTGRES, "list upcoming calendar events": CALENDAR}


def headers(session="s1", key="sk-test"):
    out = {"x-claude-code-session-id": session} if session else {}
    return out | ({"x-api-key": key} if key else {})


def body(text, tools=TOOLS):
    return json.dumps({"model": "m", "max_tokens": 9, "tools": tools,
                       "messages": [{"role": "user", "content": text}]}).encode()


@pytest.fixture
def make(tmp_path):
    engines = []

    def make_engine(**td):
        cfg = {"pipes": {"tool_discovery": {"enabled": True, **td}},
               "sessions": {"dir": str(tmp_path / "s")}, "telemetry": {"enabled": False}}
        engines.append(Engine(parse(cfg)))
        return engines[-1]

    yield make_engine
    for e in engines:
        e.close()


@pytest.fixture
def relevance(make):
    return make(strategy="relevance", max_tools=12, min_tools=3)


@pytest.fixture
def tool_search(make):
    return make(strategy="tool-search", search={"backend": "bm25"}, defer={"upfront": 4})


def forwarded(engine, text, tools=TOOLS, **kw) -> list[dict]:
    prepared = engine.prepare(A, headers(**kw), body(text, tools))
    assert prepared.body is not None
    return json.loads(prepared.body)["tools"]


def names(tools: list[dict]) -> list[str]:
    return [t["name"] for t in tools]


# --- the sticky kept set ---------------------------------------------------------------------


def test_a_follow_up_forwards_the_same_tools_and_a_new_topic_only_adds(relevance):
    first = forwarded(relevance, "weather forecast for Paris")
    assert WEATHER <= set(names(first))
    assert forwarded(relevance, "thanks, and tomorrow?") == first  # byte-identical: the cache keeps hitting
    third = names(forwarded(relevance, "post a slack message to the channels"))
    assert set(names(first)) | SLACK <= set(third)
    assert third[: len(first)] == names(first)  # additions go after what was forwarded


def test_sub_agents_of_one_session_do_not_thrash_each_others_kept_set(relevance):
    """Two sub-agents with other tools share the session id; each keeps its own set."""
    main, sub = TOOLS[:30], TOOLS[30:]
    a1 = forwarded(relevance, "weather forecast for Paris", main)
    b1 = forwarded(relevance, "export the invoice records", sub)
    assert forwarded(relevance, "thanks, and tomorrow?", main) == a1
    assert forwarded(relevance, "thanks, go on", sub) == b1


def test_the_tool_search_upfront_set_is_sticky(tool_search):
    first = forwarded(tool_search, "weather forecast for Paris")
    assert names(first)[-1] == P and WEATHER <= set(names(first))
    assert forwarded(tool_search, "thanks, and tomorrow?") == first


# --- found and earlier tools -----------------------------------------------------------------


def final(text="done"):
    return {"id": "msg_2", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 2}}


async def search_for(engine, query, tools=TOOLS, sent=None, finds=True, **kw):
    """One turn whose model searches once with ``query`` (which ``finds`` something), then
    answers; ``sent`` collects the bodies re-forwarded upstream."""
    prepared = engine.prepare(A, headers(**kw), body("help me", tools))
    call = {"type": "tool_use", "id": "toolu_s", "name": P, "input": {"query": query}}
    first = final() | {"id": "msg_1", "content": [call], "stop_reason": "tool_use"}

    async def open_(forwarded):
        if sent is not None:
            sent.append(forwarded)
        return Answer.whole(200, json.dumps(final()).encode())

    reply = await engine.runner(prepared.context).buffered(Answer.whole(200, json.dumps(first).encode()), open_)
    assert reply.status == 200 and P.encode() not in reply.body
    assert bool(prepared.context.record.searches[0].matched) == finds
    return prepared.context


async def test_tools_found_by_a_search_are_forwarded_next_turn_after_the_search_tool(tool_search):
    await search_for(tool_search, "select:mcp__svc0__get_invoice_0")
    tools = forwarded(tool_search, "thanks")
    assert names(tools)[-2:] == [P, "mcp__svc0__get_invoice_0"]
    assert tools[-1] == next(t for t in TOOLS if t["name"] == "mcp__svc0__get_invoice_0")


# --- clients sharing a session: one credential, the same first message, no session id ----------

PAYROLL = {"name": "payroll_export", "description": "Export the payroll of every employee as a CSV file.",
           "input_schema": {"type": "object", "properties": {"month": {"type": "string"}}}}
SHARED = {"session": None, "key": "sk-org-shared"}  # an organisation's key, no session id


@pytest.mark.parametrize("td", [{"search": {"backend": "bm25"}, "defer": {"upfront": 4}},
                                {"search": {"backend": "regex"}, "defer": {"upfront": 0}}], ids=["bm25", "regex"])
async def test_a_tool_only_another_client_sent_never_reaches_this_one(make, td):
    """Client A sends ``payroll_export`` and finds it; client B, sharing A's session, never sent it:
    its search cannot find it, and nothing forwarded for B holds it."""
    engine = make(strategy="tool-search", **td)
    a = await search_for(engine, "select:payroll_export", [*TOOLS, PAYROLL], **SHARED)
    assert "payroll_export" in a.record.searches[0].matched
    sent: list[bytes] = []
    b = await search_for(engine, "payroll export", TOOLS[:30], sent, finds=False, **SHARED)
    assert b.session == a.session  # the same session: what is shared is names alone
    assert "payroll_export" not in b.catalog and set(b.catalog) <= {t["name"] for t in TOOLS[:30]}
    assert "payroll_export" not in b.record.searches[0].matched
    assert b"payroll" not in b.body.encode() and sent and not any(b"payroll_export" in s for s in sent)
    again = engine.prepare(A, headers(**SHARED), body("help me", TOOLS[:30]))  # B's next turn
    assert b"payroll" not in again.body


def test_the_session_store_holds_no_definition(tool_search):
    """Sessions hold names, never definitions; the tenant's own pins hold its definitions (what
    ``tooldisco tools diff`` shows), under that tenant's key alone."""
    tool_search.prepare(A, headers(**SHARED), body("weather forecast for Paris", [*TOOLS, PAYROLL]))
    cache = tool_search.store._cache
    stored = [(key, cache.get(key)) for key in cache.iterkeys()]
    sessions = [(k, v) for k, v in stored if not str(k).startswith("pins:")]
    assert sessions and not [key for key, value in sessions if "Export the payroll" in json.dumps(value)]
    assert len(stored) > len(sessions)  # the tenant's pins


# --- a caller without a credential -----------------------------------------------------------


async def test_a_caller_without_a_credential_leaves_no_state(tool_search, relevance):
    ctx = await search_for(tool_search, "select:mcp__svc0__get_invoice_0", key=None)
    assert not ctx.persist
    assert "mcp__svc0__get_invoice_0" not in names(forwarded(tool_search, "thanks", key=None))
    first = forwarded(relevance, "weather forecast for Paris", key=None)
    assert forwarded(relevance, "thanks, and tomorrow?", key=None) != first  # nothing was sticky
    assert len(tool_search.store) == 0  # the same directory as relevance's


# --- flows of one session at the same time ---------------------------------------------------


def test_concurrent_flows_of_one_session_lose_no_kept_tool(relevance):
    """Four sub-agents of one session, each on its own topic, all at once: each gets its topic's
    best tool, and whatever any of them forwarded stays in the session's list (a read apart from
    its write would lose some)."""
    start = threading.Barrier(len(TOPICS))
    failures = []
    seen: list[set[str]] = []

    def flow(text):
        start.wait()
        for _ in range(5):
            try:
                got = set(names(forwarded(relevance, text)))
                seen.append(got)
                assert TOPICS[text] & got
            except Exception as e:  # reported from the main thread
                failures.append(e)

    threads = [threading.Thread(target=flow, args=(text,)) for text in TOPICS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert set().union(*seen) <= set(names(forwarded(relevance, "thanks, and tomorrow?")))


CLAUDE_CODE_TOOLS = [
    {"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}},
    {"name": "ToolSearch", "description": "Search deferred tools", "input_schema": {"type": "object"}},
    *({**t, "defer_loading": True} for t in TOOLS),
]
SERVER_SEARCH_TOOLS = [{"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}, *TOOLS]


@pytest.mark.parametrize("tools, reason", [
    (CLAUDE_CODE_TOOLS, "client_defers: defer_loading"),
    (SERVER_SEARCH_TOOLS, "client_defers: tool_search_tool_bm25_20251119"),
])
@pytest.mark.parametrize("strategy", ["tool-search", "relevance"])
def test_a_client_that_defers_itself_gets_no_second_search_tool(make, tools, reason, strategy, monkeypatch):
    engine = make(strategy=strategy, search={"backend": "bm25"}, min_tools=3, max_tools=5)
    written = []
    monkeypatch.setattr(engine.telemetry, "submit", written.append)
    prepared = engine.prepare(A, headers(), body("weather forecast for Paris", tools))
    assert prepared.body is None and prepared.context is None
    assert written[-1].fallback_reason == reason  # telemetry says why the request passed


def test_responses_tool_search_is_a_client_that_defers(make):
    from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter

    tools = [{"type": "tool_search", "execution": "client"},
             *({"type": "function", "name": t["name"], "description": t["description"],
                "parameters": t["input_schema"]} for t in TOOLS)]
    engine = make(strategy="tool-search", search={"backend": "bm25"})
    raw = json.dumps({"model": "gpt-5.5", "input": "weather forecast", "tools": tools}).encode()
    assert engine.prepare(OpenAIResponsesAdapter(), headers(), raw).body is None
