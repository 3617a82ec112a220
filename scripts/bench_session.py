#!/usr/bin/env python3
"""What a whole agent session costs through the proxy, prompt cache included.

    .venv/bin/python scripts/bench_session.py [--apis anthropic,chat,responses,gemini] [--servers 20]
        [--prices FILE] [--telemetry DIR]

A scripted session (``--plan``) — ``on-call``: 22 user turns of an on-call day, 13 of them
needing an MCP tool (11 different tools on seven servers, two of them used twice), plain answers
between them and a topic change every few turns; ``release``: 20 turns of a release afternoon,
6 of them tool turns on six servers, with more talk between them — over an MCP
catalog of ``--servers`` × 25 tools
(``tests/support/mcp_catalog.py``; 500 tools, ~67K tokens at the default), for every API
and every path:

- **direct**: the SDK talks to the fake provider, no proxy;
- **client-native** (Anthropic, Responses): no proxy, and a client that defers by itself as
  Claude Code and Codex do — every tool ``defer_loading``, its own tool search answered with
  ``tool_reference`` blocks / a ``tool_search_output`` for a plain BM25's top 5: the bar a proxy
  with a better search must meet;
- **client-call-through** (Chat, Gemini): no proxy, and a client whose ``tools[]`` is its own
  search and one ``call_tool(name, arguments)``, fixed for the session: its search answers with
  the plain BM25's top 5 definitions as text, the model calls them through ``call_tool`` (what a
  fixed ``tools[]`` would cost on the APIs without native deferral);
- **mitmdump**: a plain mitmdump in between (HTTPS interception, map-remote to the fake);
- **tool-search**: mitmdump + the addon on the shipped ``configs/tool_discovery.yaml``: native
  deferral where the model has it (``defer_loading`` tools, searches answered with
  ``tool_reference`` blocks / a ``tool_search_output``; ``tools[]`` never changes), call-through
  on Chat and Gemini (found tools called through ``gateway_call_tool``; ``tools[]`` never changes);
- **tool-search-classic**: the same config with native deferral and call-through off
  (``tool_discovery.native`` empty for every API, ``defer.call_through: []``): found tools are
  appended to ``tools[]``;
- **relevance**: mitmdump + the addon on ``configs/relevance.yaml``
  (both with only ``sessions.dir`` and ``telemetry.path`` moved into a temp dir).

The client is the official SDK, streaming, and behaves like an agent: it keeps the history
it was shown (the proxy hides its search rounds, so that history has no search exchange)
and sends all of it back with every request, with the whole catalog in ``tools[]``. The
fake's model (``SessionModel``) calls the turn's tool when it is offered, else calls
``gateway_search_tools`` (native Responses: ``tool_search``) once when that is offered, else says
it has no such tool (the turn then counts as missed); after the tool's result it answers. The
models are ones with native tool search (``claude-sonnet-4-6``, ``gpt-5.4``), so the native and
the classic rows of one API compare the same session.

The fake provider runs in-process with its prefix-cache model on (``tests/fakeprovider/
cache.py``: each request reads the longest run of leading segments — tools, system, each
message, in the API's prompt order — that an earlier request of the same credential and
model sent). Each run uses its own API key, so runs share neither the provider's cache
nor the addon's sessions. Everything is measured at the fake, i.e. what the provider bills:
every upstream request, hidden search rounds included.

Billed input, in input-token equivalents, with each provider's price ratios:
Anthropic uncached input × 1.0, cache write × 1.25, cache read × 0.1 (the fake caches
automatically, so every uncached token is a write); OpenAI cached × 0.1 (assumed: the
GPT-5 family's published discount; writes cost nothing extra); Gemini cached × 0.25
(assumed: the 2.5 models' implicit-cache discount). And in US dollars: the usage the fake
reported for every upstream request (its prompt-cache bill), priced per request from the
proxy's own price table (``tooldisco/data/prices.yaml`` under the config's ``prices:`` rows;
every model the session uses must have a row).

On the paths through the addon, what the proxy reported is checked against that bill: the sum
of its telemetry's ``cost_usd`` over the measured session's turns (one record per client
request) must be within 1% of the fake's billed usage priced by the same table. Prints markdown
tables and a ``Cost check:`` line; exits 1 when a run through the addon disagrees (or a turn of
it is unpriced or unrecorded), else 0. ``--prices FILE``: a ``prices:`` section given to every
proxy's config (before its own rows) and priced alike here, for models the shipped table lacks.
``--telemetry DIR`` keeps each addon path's telemetry file (``DIR/<path>.jsonl``) for
``tooldisco report``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anthropic
import openai
import yaml
from google import genai
from google.genai import types as gt

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import _bench as bench  # noqa: E402  (also puts addon/ on sys.path)
import tooldisco.config as addon_cfg  # noqa: E402
from tooldisco.core.types import TokenUsage  # noqa: E402
from tooldisco.policy.pricing import PriceTable  # noqa: E402
from tests.e2e.harness import ADDON_PATH, MitmDump  # noqa: E402
from tests.fakeprovider import (  # noqa: E402
    DISPATCHER,
    SEARCH_TOOL,
    Call,
    Conversation,
    FakeProvider,
    RecordedRequest,
    Rule,
    Script,
)
from tests.fakeprovider.providers import PROVIDERS  # noqa: E402
from tests.support.mcp_catalog import (  # noqa: E402
    Tool,
    anthropic_tools,
    chat_tools,
    gemini_tools,
    mcp_catalog,
    responses_tools,
)

SHIPPED = ROOT / "configs" / "tool_discovery.yaml"
# Classic deferral everywhere: native deferral and call-through off, the shipped config's defer settings kept.
CLASSIC = {"native": {"anthropic": [], "responses": [], "bedrock": []},
           "defer": {**yaml.safe_load(SHIPPED.read_text())["pipes"]["tool_discovery"]["defer"], "call_through": []}}
# The addon paths write lessons and read priors at once, so a session right after another sees them.
LEARN_FAST = {"learning": {"flush_interval": "100ms", "refresh_interval": "100ms"}}
# path -> (config, overrides of its pipes.tool_discovery)
CONFIGS: dict[str, tuple[Path, dict[str, Any]]] = {
    "tool-search": (SHIPPED, LEARN_FAST), "tool-search-classic": (SHIPPED, {**CLASSIC, **LEARN_FAST}),
    "relevance": (ROOT / "configs" / "relevance.yaml", {}),
}
PATHS = ("direct", "client-native", "client-call-through", "mitmdump", "tool-search", "tool-search-classic",
         "relevance")
APIS = ("anthropic", "chat", "responses", "gemini")
MODELS = {"anthropic": "claude-sonnet-4-6", "chat": "gpt-5", "responses": "gpt-5.4", "gemini": "gemini-2.5-pro"}
SEARCHES = (SEARCH_TOOL, "tool_search")  # the proxy's search tool, and its native Responses search
MAX_STEPS = 6  # requests per user turn before the client gives up (the script needs at most 2)
AGREE = 0.01  # how far the proxy's reported cost of a run may be from the fake's bill, priced alike
TELEMETRY_WAIT_S = 30.0  # for the measured session's records (written after the client has its answer)
PROXY_COMPLAINT = re.compile(r"error|warn|traceback|exception", re.IGNORECASE)
ROW_BYTES = 180  # about one result row of tool_output
WARM_SETTLE_S = 1.0  # after warm-up sessions: the addon's lessons written (LEARN_FAST) and read back
MISSED = "I don't have a tool that can do that here, so I can't complete this step."
SYSTEM = (
    "You are Relay, an on-call engineering assistant for the checkout team at Acme. You can use the "
    "connected MCP servers (GitHub, GitLab, Jira, Linear, Confluence, Notion, Slack, Gmail, Google "
    "Calendar, Google Drive, PostgreSQL, Snowflake, Sentry, Datadog, PagerDuty, Kubernetes, AWS, Stripe, "
    "HubSpot, Zendesk). Prefer reading before writing; never run destructive operations without an explicit "
    "request; quote identifiers exactly; keep answers short and concrete, with the numbers that matter. "
    "When a tool fails, say what failed and what you would try next. The repository is acme/checkout-service, "
    "the production database orders_prod, the team channel #checkout-team, the Jira project CHK."
)


# --- the session ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One user turn: what the user says, the tool it needs (if any) and how the model answers."""

    text: str
    answer: str
    tool: str = ""  # full tool name; "" for a plain turn
    args: dict[str, Any] = field(default_factory=dict)
    query: str = ""  # what the model searches for when the tool is not loaded


REPO = {"owner": "acme", "repo": "checkout-service"}
PLAN: tuple[Turn, ...] = (
    Turn("Morning! I'm on call for checkout-service this week and failed payments spiked overnight. "
         "Give me a quick plan for triaging it.",
         "Plan: 1) check what shipped recently (open and merged pull requests), 2) look at Sentry for new "
         "errors in production, 3) quantify the failures in orders_prod, 4) tell the team and book a review. "
         "I'll start with the code changes."),
    Turn("List the open pull requests in acme/checkout-service on GitHub.",
         "There are 4 open pull requests; #482 'Retry card authorisation on 502' was deployed to canary "
         "yesterday at 18:40 and is the only one touching the payment path.",
         "mcp__github__list_pull_requests", {**REPO, "state": "open", "limit": 20}, "github list open pull requests"),
    Turn("Open pull request 482 and tell me what it changes.",
         "#482 wraps authorise() in a retry loop (3 attempts, 200 ms backoff) but reuses the same idempotency "
         "key only on the first attempt, so a retry after a timeout can authorise the card twice.",
         "mcp__github__get_pull_request", {**REPO, "pull_request_id": "482"}, "get github pull request details"),
    Turn("Could that retry change explain duplicate charges? Think it through briefly.",
         "Yes: a gateway 502 after the acquirer accepted the first attempt makes the retry a second, distinct "
         "authorisation. The timing matches the spike, which started 20 minutes after the canary rollout."),
    Turn("Are there unresolved Sentry errors for checkout-service in production?",
         "Two new unresolved issues since 18:45: CHECKOUT-9F1 'DuplicateAuthorizationError' (1,240 events, "
         "312 users) and CHECKOUT-9F3 'GatewayTimeout in authorise' (410 events).",
         "mcp__sentry__list_error_issues",
         {"organization": "acme", "project": "checkout-service", "query": "is:unresolved environment:production"},
         "sentry unresolved error issues production"),
    Turn("Show me the latest Sentry event for the top issue.",
         "Latest CHECKOUT-9F1 event: POST /checkout, customer c_88213, two authorisations 180 ms apart with "
         "keys 'ik_5521' and 'ik_5521-r1', both approved by the acquirer.",
         "mcp__sentry__get_latest_event",
         {"organization": "acme", "project": "checkout-service", "event_id": "CHECKOUT-9F1"},
         "latest sentry event for an issue"),
    Turn("Summarise the stack trace in plain words.",
         "The retry wrapper catches the gateway timeout, builds a fresh request with a suffixed idempotency "
         "key and sends it again; the acquirer treats it as a new payment, so the customer is charged twice."),
    Turn("File a GitHub issue in acme/checkout-service for the double-charge bug, labelled bug and p1.",
         "Created issue #497 'Retries in #482 double-charge cards on gateway timeouts' with labels bug and p1, "
         "linking the Sentry issue and the pull request.",
         "mcp__github__create_issue",
         {**REPO, "title": "Retries in #482 double-charge cards on gateway timeouts", "labels": ["bug", "p1"]},
         "create github issue"),
    Turn("Thanks. What should the fix look like?",
         "Keep one idempotency key per checkout for every attempt, retry only on errors that guarantee no "
         "authorisation happened, and add a test that replays a timeout after acceptance."),
    Turn("How many payments failed per hour yesterday? Query the payments table in the orders_prod Postgres "
         "database.",
         "Failures per hour rose from about 40 to 610 at 19:00 and stayed above 500 until 23:00; 7,912 failed "
         "payments in total, 2,318 of them marked duplicate.",
         "mcp__postgres__run_query",
         {"database": "orders_prod", "sql": "SELECT date_trunc('hour', created_at) h, count(*) FROM payments "
          "WHERE status = 'failed' AND created_at >= now() - interval '1 day' GROUP BY 1 ORDER BY 1"},
         "run sql query on postgres database"),
    Turn("Describe the payments table in Postgres so I can see the columns.",
         "payments has 14 columns: id, order_id, customer_id, amount_cents, currency, status, idempotency_key, "
         "gateway_ref, attempt, created_at, updated_at and three JSON metadata columns; indexes on id and "
         "order_id only.",
         "mcp__postgres__describe_table", {"database": "orders_prod", "table_id": "payments"},
         "describe postgres table columns"),
    Turn("Interesting, which column would you index to speed that query up?",
         "An index on (status, created_at) serves the hourly failure query; a unique index on idempotency_key "
         "would also have rejected the duplicate rows at write time."),
    Turn("Post a short incident update to #checkout-team on Slack.",
         "Posted to #checkout-team: cause identified (retry in #482), canary rolled back, 2,318 duplicate "
         "charges to refund, review tomorrow.",
         "mcp__slack__post_message",
         {"workspace": "acme", "channel": "#checkout-team",
          "text": "Incident update: double charges caused by retries in #482; canary rolled back."},
         "post slack message to channel"),
    Turn("Draft what we should say to customers, two sentences.",
         "'Some of you were charged twice for an order placed yesterday evening because of an error on our "
         "side. The duplicate charge is being refunded automatically and will show within 5 business days.'"),
    Turn("Schedule a 30-minute incident review tomorrow at 10:00 in Google Calendar with alice@acme.io and "
         "bob@acme.io.",
         "Booked 'Incident review: duplicate charges' tomorrow 10:00-10:30 with Alice and Bob, video link "
         "attached.",
         "mcp__google_calendar__create_event",
         {"calendar_id": "primary", "summary": "Incident review: duplicate charges",
          "start": "2026-11-25T10:00:00+01:00", "end": "2026-11-25T10:30:00+01:00",
          "attendees": ["alice@acme.io", "bob@acme.io"]},
         "create google calendar event"),
    Turn("What should be on the review agenda?",
         "Timeline, detection gap (Sentry alerted after 35 minutes), the idempotency design, why the canary "
         "did not catch it, refunds status, and the follow-up owners."),
    Turn("Check the open pull requests in acme/checkout-service again: did the fix land?",
         "Yes: #499 'Stable idempotency key across retries' is open with two approvals and green CI; #482 was "
         "reverted in #498.",
         "mcp__github__list_pull_requests", {**REPO, "state": "open", "limit": 20}, "github list open pull requests"),
    Turn("Create a Jira bug in project CHK to track the customer refunds.",
         "Created CHK-1184 'Refund 2,318 duplicate charges from the 24 Nov incident', priority High, assigned "
         "to the payments on-call.",
         "mcp__jira__create_issue",
         {"project_key": "CHK", "summary": "Refund 2,318 duplicate charges from the 24 Nov incident",
          "issue_type": "Bug", "priority": "High"},
         "create jira issue bug"),
    Turn("How do we prevent this class of bug in the future?",
         "Make idempotency keys a property of the checkout, not of the attempt; add a contract test against "
         "the gateway sandbox for timeout-after-accept; and alert on the duplicate rate, not just errors."),
    Turn("Query Datadog for the checkout latency p95 over the last 24 hours.",
         "checkout.latency p95 was 420 ms before 18:40, peaked at 2.9 s at 19:10 during the retries and is "
         "back to 450 ms since the rollback.",
         "mcp__datadog__query_metrics",
         {"site": "datadoghq.eu", "query": "p95:checkout.latency{env:prod}", "from_ts": 1763924400,
          "to_ts": 1764010800},
         "datadog query metrics timeseries"),
    Turn("Post the latency numbers to #checkout-team on Slack as well.",
         "Posted the p95 numbers (420 ms, peak 2.9 s, now 450 ms) to #checkout-team under the incident update.",
         "mcp__slack__post_message",
         {"workspace": "acme", "channel": "#checkout-team",
          "text": "Latency p95: 420 ms baseline, 2.9 s peak at 19:10, 450 ms since rollback."},
         "post slack message to channel"),
    Turn("Great, wrap up the day for me in five bullet points.",
         "- Root cause: retries in #482 reused a suffixed idempotency key\n- Canary rolled back, fix #499 "
         "approved\n- 2,318 duplicate charges, refunds tracked in CHK-1184\n- Team and customers informed\n"
         "- Review tomorrow 10:00"),
)


# A session with few tool turns (20 turns, six of them tool turns): a release day
# for a web app, with topic changes between the tool turns and more talk around them.
WEB = {"owner": "acme", "repo": "storefront-web"}
RELEASE: tuple[Turn, ...] = (
    Turn("Hi! We ship storefront-web 3.2 today. What does a careful release afternoon look like?",
         "Check CI and open pull requests, read the changelog, cut the release, watch errors and latency for an "
         "hour, then tell support. I'll keep notes as we go."),
    Turn("Which checks matter most before we tag?",
         "Green CI on main, no open p1 bugs, the migration tested on a copy of production, and a rollback plan "
         "someone has actually read."),
    Turn("List the open pull requests in acme/storefront-web on GitHub.",
         "Three are open: #311 'Cart drawer a11y fixes' (approved), #314 'Bump image CDN client' (CI red) and "
         "#316 'Feature flag for the new checkout' (draft).",
         "mcp__github__list_pull_requests", {**WEB, "state": "open", "limit": 20}, "github list open pull requests"),
    Turn("Should #314 block the release?",
         "No: it is not merged and nothing on main depends on it. Leave it out of 3.2 and fix its CI next week."),
    Turn("Write a three-line changelog for 3.2 from what you know.",
         "- Accessible cart drawer (keyboard and screen readers)\n- Faster product images on slow networks\n"
         "- New checkout behind a feature flag, off by default"),
    Turn("Create the v3.2.0 release on GitHub with that changelog.",
         "Created release v3.2.0 from main with the three-line changelog; the deploy pipeline picked it up.",
         "mcp__github__create_release", {**WEB, "tag_name": "v3.2.0", "name": "3.2.0"}, "create github release"),
    Turn("How long does the deploy usually take?",
         "About twelve minutes: build, canary on 5% for five minutes, then the rest in two waves."),
    Turn("While it runs: how would you explain feature flags to a new support hire?",
         "A feature flag is a switch in the code: the new checkout is shipped but switched off, so we can turn "
         "it on for a few customers first and off again without a new release."),
    Turn("Any new Sentry errors for storefront-web in production since the deploy started?",
         "One new issue: WEB-2A7 'TypeError: cannot read properties of undefined (reading \"price\")' in the "
         "cart drawer, 37 events from 29 users, all on Safari 16.",
         "mcp__sentry__list_error_issues",
         {"organization": "acme", "project": "storefront-web", "query": "is:unresolved environment:production"},
         "sentry unresolved error issues production"),
    Turn("Is that bad enough to roll back?",
         "Not yet: 29 users of about 40,000 active, an old Safari only, and the cart still works after a reload. "
         "Fix forward unless it grows."),
    Turn("What would the fix look like?",
         "Guard the drawer's price formatter against items still loading (optional chaining and a skeleton "
         "row), and add Safari 16 to the end-to-end browser matrix."),
    Turn("Query Datadog for the storefront page load p95 over the last hour.",
         "Page load p95 is 1.9 s, the same as last week's 1.8-2.0 s; no change at the deploy.",
         "mcp__datadog__query_metrics",
         {"site": "datadoghq.eu", "query": "p95:storefront.page_load{env:prod}", "from_ts": 1764000000,
          "to_ts": 1764003600},
         "datadog query metrics timeseries"),
    Turn("Good. Anything else worth watching in the next hour?",
         "Checkout conversion, the Safari error count, and the image CDN's error rate, since images changed."),
    Turn("Create a Linear issue for the Safari cart bug, high priority.",
         "Created WEB-882 'Cart drawer crashes on Safari 16 while prices load', priority High, in the "
         "storefront team's current cycle.",
         "mcp__linear__create_issue", {"team": "storefront", "title": "Cart drawer crashes on Safari 16",
                                        "priority": "high"},
         "create linear issue"),
    Turn("Who should pick it up?",
         "Whoever wrote the drawer changes in #311: they know the code and can test it on Safari today."),
    Turn("Let's talk about next quarter for a second: what would you cut from the roadmap?",
         "The second theme editor: few merchants asked for it, and the checkout migration needs the people."),
    Turn("Post a release note to #storefront on Slack.",
         "Posted to #storefront: 3.2.0 is live, changelog linked, one Safari 16 cart bug tracked in WEB-882.",
         "mcp__slack__post_message",
         {"workspace": "acme", "channel": "#storefront", "text": "3.2.0 is live; Safari 16 cart bug in WEB-882."},
         "post slack message to channel"),
    Turn("What should support tell customers who hit the Safari bug?",
         "Reload the page or use another browser for now; a fix is on its way this week."),
    Turn("Anything we should change in how we release?",
         "Add Safari 16 to the browser matrix and keep the one-hour watch: it caught this within twenty minutes."),
    Turn("Thanks, summarise the afternoon in four bullets.",
         "- 3.2.0 released with three changes\n- One Safari 16 cart bug, tracked in WEB-882\n- Latency "
         "unchanged\n- Support and the team informed"),
)
PLANS = {"on-call": PLAN, "release": RELEASE}


def trace(index: int) -> str:
    """The marker a tool result of turn ``index`` carries: the model sees which turn a result answers."""
    return f"req-{index:02d}-ok"


def tool_output(index: int, turn: Turn, size: int) -> str:
    """What the MCP server answers: a JSON record of about ``size`` bytes, like a page of results."""
    rows = [{"id": f"{turn.tool.rsplit('__', 1)[-1]}-{index}-{n}", "status": ["open", "ok", "failed"][n % 3],
             "updated_at": f"2026-11-24T{18 + n % 6:02d}:{(7 * n) % 60:02d}:00Z",
             "summary": f"{turn.answer.split('.')[0][:90]} (item {n})"} for n in range(max(1, size // ROW_BYTES))]
    return json.dumps({"request_id": trace(index), "tool": turn.tool, "arguments": turn.args, "items": rows,
                       "next_cursor": None})


class SessionModel(Script):
    """The fake's model for the session: the turn's tool when it is offered (or, offered a
    ``call_tool``, through it once a search result named the tool), else one search, else an
    apology; once the turn's result is in, the turn's answer."""

    def __init__(self, plan: tuple[Turn, ...], *more: tuple[Turn, ...]) -> None:
        super().__init__()
        self.turns = {t.text: (i, t) for p in (plan, *more) for i, t in enumerate(p)}

    def choose(self, conv: Conversation, nth: int) -> Rule:
        index, turn = self.turns.get(conv.last_user_text, (-1, None))
        if turn is None:
            return Rule(text="Could you say that again?")
        if not turn.tool or any(r.name in (turn.tool, *DISPATCHERS) and trace(index) in r.content for r in conv.results):
            return Rule(text=turn.answer)
        if conv.offered(turn.tool):
            return Rule(calls=[Call(turn.tool, turn.args)])
        through = next((name for name in DISPATCHERS if conv.offered(name)), None)
        if through and any(turn.tool in r.content for r in conv.results):
            return Rule(calls=[Call(through, {"name": turn.tool, "arguments": turn.args})])
        search = next((name for name in SEARCHES if conv.offered(name)), None)
        searched = any(c.name == search and c.arguments == {"query": turn.query} for c in conv.calls)
        if search and not searched:
            return Rule(calls=[Call(search, {"query": turn.query})])
        return Rule(text=MISSED)


# --- the clients: official SDKs, streaming, keeping the history they were shown -------------------------


@dataclass(frozen=True)
class Route:
    """How a client reaches the fake: directly, or through one mitmdump with its CA."""

    fake_url: str
    proxy: MitmDump | None

    def base(self, real: str, direct_suffix: str = "") -> str:
        return real if self.proxy else self.fake_url + direct_suffix

    def client_args(self) -> dict[str, Any]:
        """httpx arguments: no environment, and the proxy and its CA when there is one."""
        args: dict[str, Any] = {"trust_env": False, "timeout": 120.0}
        if self.proxy:
            args.update(proxy=self.proxy.url, verify=self.proxy.ssl_context())
        return args


Calls = list[tuple[str, str, Any]]  # (call id, tool name, arguments)


class Agent(ABC):
    """An agent loop's client side for one API: the history lives here, in the API's shape."""

    sent = 0  # requests sent (``play`` counts them): one telemetry record each through the addon

    @abstractmethod
    def say(self, text: str) -> None:
        """Append a user message."""

    @abstractmethod
    def step(self) -> Calls:
        """Send the whole history with every tool, keep the streamed answer, return its tool calls."""

    @abstractmethod
    def answer(self, results: list[tuple[str, str, Any]]) -> None:
        """Append the results (call id, tool name, output) of the last step's calls."""

    def own_tool(self, name: str, args: Any) -> Any:
        """The result of a tool the client runs itself (its own tool search), else None."""
        return None


class ClaudeAgent(Agent):
    def __init__(self, route: Route, key: str, tools: list[Tool]) -> None:
        http = anthropic.DefaultHttpxClient(**route.client_args())
        self.client = anthropic.Anthropic(api_key=key, base_url=route.base("https://api.anthropic.com"),
                                          http_client=http, max_retries=0)
        self.tools = anthropic_tools(tools)
        self.messages: list[dict[str, Any]] = []

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def step(self) -> Calls:
        request: dict[str, Any] = {"model": MODELS["anthropic"], "max_tokens": 4096, "system": SYSTEM,
                                   "tools": self.tools, "messages": self.messages}
        with self.client.messages.stream(**request) as stream:
            message = stream.get_final_message()
        self.messages.append({"role": "assistant", "content": [b.to_dict() for b in message.content]})
        return [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]

    def answer(self, results: list[tuple[str, str, Any]]) -> None:
        blocks = [{"type": "tool_result", "tool_use_id": cid, "content": out} for cid, _, out in results]
        self.messages.append({"role": "user", "content": blocks})


CLIENT_SEARCH = {"name": "tool_search", "description": "Search the deferred tools; found ones load.",
                 "input_schema": {"type": "object", "properties": {"query": {"type": "string"}},
                                  "required": ["query"]}}


class PlainBM25:
    """The 30-line BM25 a client ships with its own tool search (the bar the proxy's must
    meet): words of the name and description, k1 1.2, b 0.75, nothing else."""

    def __init__(self, tools: list[Tool]) -> None:
        self.names = [t.name for t in tools]
        self.docs = [Counter(_words(f"{t.name} {t.description}")) for t in tools]
        self.avg = sum(sum(d.values()) for d in self.docs) / max(len(self.docs), 1)
        df = Counter(w for d in self.docs for w in d)
        self.idf = {w: math.log(1 + (len(self.docs) - n + 0.5) / (n + 0.5)) for w, n in df.items()}

    def top(self, query: str, k: int) -> list[str]:
        words = set(_words(query))
        def score(d: Counter[str]) -> float:
            length = sum(d.values())
            return sum(self.idf[w] * d[w] * 2.2 / (d[w] + 1.2 * (0.25 + 0.75 * length / self.avg))
                       for w in words if w in d)
        scores = [score(d) for d in self.docs]
        return [self.names[i] for i in sorted(range(len(scores)), key=lambda i: -scores[i])[:k] if scores[i] > 0]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("_", " "))


class NativeClaudeAgent(ClaudeAgent):
    """A client that defers by itself, as Claude Code does: every tool ``defer_loading``, its own
    ``tool_search`` answered with ``tool_reference`` blocks for the top 5 of a plain BM25."""

    def __init__(self, route: Route, key: str, tools: list[Tool]) -> None:
        super().__init__(route, key, tools)
        self.search = PlainBM25(tools)
        self.tools = [{**t, "defer_loading": True} for t in self.tools] + [CLIENT_SEARCH]

    def own_tool(self, name: str, args: Any) -> Any:
        if name != "tool_search":
            return None
        return [{"type": "tool_reference", "tool_name": n} for n in self.search.top(str(args.get("query", "")), 5)]


class ChatAgent(Agent):
    def __init__(self, route: Route, key: str, tools: list[Tool]) -> None:
        http = openai.DefaultHttpxClient(**route.client_args())
        self.client = openai.OpenAI(api_key=key, base_url=route.base("https://api.openai.com/v1", "/v1"),
                                    http_client=http, max_retries=0)
        self.tools = chat_tools(tools)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def step(self) -> Calls:
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        request: dict[str, Any] = {"model": MODELS["chat"], "messages": self.messages, "tools": self.tools,
                                   "stream": True, "stream_options": {"include_usage": True}}
        stream = self.client.chat.completions.create(**request)
        for chunk in stream:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                for tc in choice.delta.tool_calls or []:
                    call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += tc.id or ""
                    if tc.function:
                        call["name"] += tc.function.name or ""
                        call["arguments"] += tc.function.arguments or ""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
        if calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for _, c in sorted(calls.items())]
        self.messages.append(message)
        return [(c["id"], c["name"], json.loads(c["arguments"] or "{}")) for _, c in sorted(calls.items())]

    def answer(self, results: list[tuple[str, str, str]]) -> None:
        self.messages += [{"role": "tool", "tool_call_id": cid, "content": out} for cid, _, out in results]


class ResponsesAgent(Agent):
    """Stateless like Codex: ``store: false``, the whole input every turn, a ``prompt_cache_key``."""

    def __init__(self, route: Route, key: str, tools: list[Tool]) -> None:
        http = openai.DefaultHttpxClient(**route.client_args())
        self.client = openai.OpenAI(api_key=key, base_url=route.base("https://api.openai.com/v1", "/v1"),
                                    http_client=http, max_retries=0)
        self.tools = responses_tools(tools)
        self.items: list[dict[str, Any]] = []
        self.session = str(uuid.uuid4())

    def say(self, text: str) -> None:
        self.items.append({"role": "user", "content": text})

    def step(self) -> Calls:
        request: dict[str, Any] = {"model": MODELS["responses"], "instructions": SYSTEM, "input": self.items,
                                   "tools": self.tools, "store": False, "prompt_cache_key": self.session}
        with self.client.responses.stream(**request) as stream:
            response = stream.get_final_response()
        self.items += [item.to_dict() for item in response.output]
        return [(o.call_id, o.name, json.loads(o.arguments)) for o in response.output if o.type == "function_call"]

    def answer(self, results: list[tuple[str, str, str]]) -> None:
        self.items += [{"type": "function_call_output", "call_id": cid, "output": out} for cid, _, out in results]


class NativeResponsesAgent(ResponsesAgent):
    """A client that defers by itself on Responses: every function ``defer_loading``, a
    client-executed ``tool_search`` answered with a ``tool_search_output`` carrying the
    definitions of a plain BM25's top 5."""

    def __init__(self, route: Route, key: str, tools: list[Tool]) -> None:
        super().__init__(route, key, tools)
        self.search = PlainBM25(tools)
        self.answered: set[str] = set()  # tool_search_call ids answered already
        self.by_name = {t["name"]: t for t in self.tools}
        self.tools = [{**t, "defer_loading": True} for t in self.tools] + [
            {"type": "tool_search", "execution": "client", "description": CLIENT_SEARCH["description"],
             "parameters": CLIENT_SEARCH["input_schema"]}]

    def step(self) -> Calls:
        calls = super().step()
        searches = [o for o in self.items if o.get("type") == "tool_search_call" and o.get("call_id") not in self.answered]
        return calls + [(o["call_id"], "tool_search", o.get("arguments") or {}) for o in searches]

    def own_tool(self, name: str, args: Any) -> Any:
        if name != "tool_search":
            return None
        return [self.by_name[n] for n in self.search.top(str(args.get("query", "")), 5)]

    def answer(self, results: list[tuple[str, str, Any]]) -> None:
        for cid, name, out in results:
            if name == "tool_search":
                self.answered.add(cid)
                self.items.append({"type": "tool_search_output", "call_id": cid, "execution": "client",
                                   "status": "completed", "tools": out})
            else:
                self.items.append({"type": "function_call_output", "call_id": cid, "output": out})


class GeminiAgent(Agent):
    def __init__(self, route: Route, key: str, tools: list[Tool]) -> None:
        options = gt.HttpOptions(base_url=route.base("https://generativelanguage.googleapis.com"),
                                 client_args=route.client_args(), retry_options=gt.HttpRetryOptions(attempts=1))
        self.client = genai.Client(api_key=key, http_options=options)
        declared: Any = gemini_tools(tools)  # dicts in the wire's camelCase, which the SDK's models accept
        self.config = gt.GenerateContentConfig(system_instruction=SYSTEM, tools=declared)
        self.contents: list[gt.Content] = []

    def say(self, text: str) -> None:
        self.contents.append(gt.Content(role="user", parts=[gt.Part(text=text)]))

    def step(self) -> Calls:
        parts: list[gt.Part] = []
        history: Any = self.contents
        chunks = self.client.models.generate_content_stream(model=MODELS["gemini"], contents=history,
                                                            config=self.config)
        for chunk in chunks:
            content = chunk.candidates[0].content if chunk.candidates else None
            parts += (content.parts or []) if content else []
        parts = merged_text(parts)
        self.contents.append(gt.Content(role="model", parts=parts))
        return [(p.function_call.id or "", p.function_call.name or "", p.function_call.args)
                for p in parts if p.function_call]

    def answer(self, results: list[tuple[str, str, str]]) -> None:
        parts = [gt.Part(function_response=gt.FunctionResponse(name=name, response={"output": out}))
                 for _, name, out in results]
        self.contents.append(gt.Content(role="user", parts=parts))


def merged_text(parts: list[gt.Part]) -> list[gt.Part]:
    """Streamed text fragments joined into one part, as a chat history keeps a model turn."""
    out: list[gt.Part] = []
    for part in parts:
        plain = part.text is not None and not part.thought and not part.function_call
        if plain and out and out[-1].text is not None and not out[-1].thought and not out[-1].function_call:
            out[-1] = gt.Part(text=(out[-1].text or "") + (part.text or ""))
        else:
            out.append(part)
    return out


# A client whose tools[] never changes without native deferral: its own search answers with the
# found tools' definitions as text, and the model calls them through one dispatching function.
CALL_TOOL = "call_tool"
DISPATCHERS = (CALL_TOOL, DISPATCHER)  # the client's own, the proxy's (call-through deferral)
CALL_TOOL_SCHEMA = {"type": "object", "required": ["name", "arguments"],
                    "properties": {"name": {"type": "string", "description": "a tool a search returned"},
                                   "arguments": {"type": "object", "description": "its arguments"}}}
CALL_TOOL_DESCRIPTION = "Call a tool that tool_search returned, by its name, with arguments that fit its schema."


class CallThrough:
    """What both call-through clients share: the plain BM25's top 5, answered with definitions."""

    def __init__(self, tools: list[Tool]) -> None:
        self.search = PlainBM25(tools)
        self.definitions = {t["name"]: t for t in anthropic_tools(tools)}

    def found(self, name: str, args: Any) -> Any:
        if name != "tool_search":
            return None
        return json.dumps({"tools": [self.definitions[n] for n in self.search.top(str(args.get("query", "")), 5)],
                           "message": f"Call these through {CALL_TOOL}."})


class CallThroughChatAgent(ChatAgent):
    def __init__(self, route: Route, key: str, tools: list[Tool]) -> None:
        super().__init__(route, key, tools)
        self.through = CallThrough(tools)
        self.tools = [{"type": "function", "function": {"name": "tool_search", "description": CLIENT_SEARCH["description"],
                                                        "parameters": CLIENT_SEARCH["input_schema"]}},
                      {"type": "function", "function": {"name": CALL_TOOL, "description": CALL_TOOL_DESCRIPTION,
                                                        "parameters": CALL_TOOL_SCHEMA}}]

    def own_tool(self, name: str, args: Any) -> Any:
        return self.through.found(name, args)


class CallThroughGeminiAgent(GeminiAgent):
    def __init__(self, route: Route, key: str, tools: list[Tool]) -> None:
        super().__init__(route, key, tools)
        self.through = CallThrough(tools)
        declared: Any = [{"functionDeclarations": [
            {"name": "tool_search", "description": CLIENT_SEARCH["description"],
             "parameters": CLIENT_SEARCH["input_schema"]},
            {"name": CALL_TOOL, "description": CALL_TOOL_DESCRIPTION, "parameters": CALL_TOOL_SCHEMA}]}]
        self.config = gt.GenerateContentConfig(system_instruction=SYSTEM, tools=declared)

    def own_tool(self, name: str, args: Any) -> Any:
        return self.through.found(name, args)


AGENTS: dict[str, Callable[[Route, str, list[Tool]], Agent]] = {
    "anthropic": ClaudeAgent, "chat": ChatAgent, "responses": ResponsesAgent, "gemini": GeminiAgent,
}

# Clients that defer by themselves (the bar the proxy's native deferral is held to).
NATIVE_AGENTS: dict[str, Callable[[Route, str, list[Tool]], Agent]] = {
    "anthropic": NativeClaudeAgent, "responses": NativeResponsesAgent}
# Clients that keep tools[] fixed by calling found tools through one function (call-through's bar).
CALL_THROUGH_AGENTS: dict[str, Callable[[Route, str, list[Tool]], Agent]] = {
    "chat": CallThroughChatAgent, "gemini": CallThroughGeminiAgent}
# The paths with a client of their own, and the APIs they have one for.
CLIENTS = {"client-native": NATIVE_AGENTS, "client-call-through": CALL_THROUGH_AGENTS}


def play(agent: Agent, plan: tuple[Turn, ...], result_bytes: int) -> int:
    """Run the whole plan as an agent does; returns how many tool turns got their tool called."""
    done = 0
    for index, turn in enumerate(plan):
        agent.say(turn.text)
        called = False
        for _ in range(MAX_STEPS):
            agent.sent += 1
            calls = agent.step()
            if not calls:
                break
            called = called or any(name == turn.tool or (name == CALL_TOOL and args.get("name") == turn.tool)
                                   for _, name, args in calls)
            agent.answer([(cid, name, agent.own_tool(name, args) or tool_output(index, turn, result_bytes))
                          for cid, name, args in calls])
        done += bool(turn.tool) and called
    return done


# --- measuring ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """An API's input price ratios, relative to one uncached input token."""

    cached: float  # per cached token
    uncached: float  # per uncached token (Anthropic: every one is a cache write here)


PRICES = {"anthropic": Price(0.1, 1.25), "chat": Price(0.1, 1.0), "responses": Price(0.1, 1.0),
          "gemini": Price(0.25, 1.0)}


INPUT_INCLUDES_CACHE = {p.name: p.input_includes_cache for p in PROVIDERS}


def billed_usage(rec: RecordedRequest) -> TokenUsage:
    """The usage the fake reported for one request, in the four parts prices are per: OpenAI and
    Gemini count cached tokens inside their input tokens, Anthropic and Bedrock apart."""
    u = (rec.reply or {}).get("usage") or {}
    read, write = int(u.get("cache_read_input_tokens", 0)), int(u.get("cache_creation_input_tokens", 0))
    uncached = int(u.get("input_tokens", 0)) - (read if INPUT_INCLUDES_CACHE.get(rec.api or "", True) else 0)
    return TokenUsage(input=uncached, cache_read=read, cache_write=write, output=int(u.get("output_tokens", 0)))


def price_table(config: dict[str, Any]) -> PriceTable:
    """The price table a proxy on ``config`` prices turns with, built as its engine builds it: the
    shipped table under the config's ``prices:`` rows as the addon parses them (a cache price a
    row leaves out is its input price there)."""
    return PriceTable.load(addon_cfg.parse(config).prices)


def tool_count(api: str, tools: Any) -> int:
    """Tools in a forwarded ``tools[]`` (Gemini nests its functions in one entry)."""
    if api == "gemini":
        return sum(len(e.get("functionDeclarations") or []) for e in tools or [])
    return len(tools or [])


@dataclass
class Run:
    """One session on one path: what the fake billed for every request it answered."""

    api: str
    path: str
    requests: int = 0
    tokens: int = 0
    cached: int = 0
    searches: int = 0
    changes: int = 0
    tool_breaks: int = 0  # requests after the first whose first uncached segment is a tool
    behind_tool_breaks: int = 0  # uncached tokens of those requests
    forwarded: int = 0  # tools forwarded, summed over requests
    tool_bytes: int = 0
    done: int = 0
    usd: float | None = 0.0  # the fake's billed usage, each request priced (None: one had no price)
    addon: bool = False  # through the addon: its telemetry says what it reported
    turns: int = 0  # client requests of the measured session (one telemetry record each)
    records: int = 0  # the session's telemetry records found
    reported: float = 0.0  # their cost_usd summed
    without: float = 0.0  # their cost_usd_without summed
    unpriced: int = 0  # records with usage but no cost_usd
    errors: list[str] = field(default_factory=list)
    detail: list[str] = field(default_factory=list)  # one line per upstream request (``--detail``)

    @property
    def billed(self) -> float:
        price = PRICES[self.api]
        return self.cached * price.cached + (self.tokens - self.cached) * price.uncached

    @property
    def gap(self) -> float | None:
        """The proxy's reported cost against the bill, relative (None: nothing to compare)."""
        if not self.addon or self.usd is None or self.records == 0:
            return None
        return (self.reported - self.usd) / self.usd if self.usd else (0.0 if self.reported == 0 else math.inf)

    @property
    def agrees(self) -> bool:
        """Every turn recorded and priced, and their sum within ``AGREE`` of the bill."""
        gap = self.gap
        return (gap is not None and abs(gap) <= AGREE and self.records == self.turns and not self.unpriced)

    def add(self, recs: list[RecordedRequest], table: PriceTable) -> None:
        previous = None
        model = MODELS[self.api]
        for rec in recs:
            if rec.status != 200 or rec.prompt is None:
                self.errors.append(f"request {rec.nth}: HTTP {rec.status} {(rec.error or '')[:200]}")
                continue
            tools = rec.json.get("tools")
            shown = json.dumps(tools)
            self.requests += 1
            cost = table.cost(model, billed_usage(rec))
            self.usd = None if cost is None or self.usd is None else self.usd + cost
            self.tokens += rec.prompt["tokens"]
            self.cached += rec.prompt["cached"]
            self.searches += any(c["name"] in SEARCHES for c in (rec.reply or {}).get("calls", []))
            if previous is not None:  # the first request finds the cache cold: no break to blame
                self.changes += shown != previous
                if (rec.prompt["first_miss"] or "").startswith("tool"):
                    self.tool_breaks += 1
                    self.behind_tool_breaks += rec.prompt["tokens"] - rec.prompt["cached"]
            self.forwarded += tool_count(self.api, tools)
            self.tool_bytes += len(shown)
            previous = shown
            calls = [c["name"] for c in (rec.reply or {}).get("calls", [])]
            self.detail.append(f"| {rec.nth} | {rec.prompt['tokens']:,} | {rec.prompt['cached']:,} "
                               f"| {rec.prompt['segments']} | {rec.prompt['first_miss'] or ''} "
                               f"| {tool_count(self.api, tools)} | {', '.join(calls)} |")


def earlier(plan: tuple[Turn, ...], day: int) -> tuple[Turn, ...]:
    """The plan as an earlier session of the same tenant played it: its first message differs
    (a session of its own), its turns and searches are the same."""
    return (replace(plan[0], text=f"(day {day}) {plan[0].text}"), *plan[1:])


def reported(run: Run, proxy: MitmDump, since: float) -> None:
    """The proxy's telemetry of the measured session: its records (one per client request,
    created when the request came in, so after ``since``), their ``cost_usd`` and
    ``cost_usd_without`` summed. Records are written after the client has its answer: waited for."""
    def ours(record: dict[str, Any]) -> bool:
        return float(record.get("time") or 0) >= since
    try:
        lines = proxy.records(where=ours, at_least=run.turns, timeout=TELEMETRY_WAIT_S)
    except AssertionError:  # fewer records than requests: the run disagrees (``Run.agrees``)
        lines = proxy.records(at_least=0)
    records = [r for r in lines if ours(r)]
    run.records = len(records)
    run.reported = sum(r["cost_usd"] for r in records if isinstance(r.get("cost_usd"), (int, float)))
    run.without = sum(r["cost_usd_without"] for r in records if isinstance(r.get("cost_usd_without"), (int, float)))
    run.unpriced = sum(1 for r in records if r.get("usage") and not isinstance(r.get("cost_usd"), (int, float)))


def session(api: str, path: str, route: Route, fake: FakeProvider, tools: list[Tool], plan: tuple[Turn, ...],
            result_bytes: int, table: PriceTable, warm: int = 0) -> Run:
    """One session on a fresh key (no cache, no addon session shared with another run); with
    ``warm``, that many earlier sessions of the same key first (what the addon learns from them
    is in play; they are not counted). Through the addon, its telemetry of the measured session
    is read too."""
    key = f"bench-{api}-{path}-{uuid.uuid4().hex[:8]}"
    make = CLIENTS[path][api] if path in CLIENTS else AGENTS[api]
    before = [earlier(plan, day) for day in range(1, warm + 1)]
    fake.prompt_cache = True
    fake.set_script(SessionModel(plan, *before))
    for past in before:
        play(make(route, key, tools), past, result_bytes)
    if before:
        time.sleep(WARM_SETTLE_S)  # the addon writes its lessons and reads them back
    fake.reset()
    fake.prompt_cache = True
    fake.set_script(SessionModel(plan, *before))
    run = Run(api, path, addon=path in CONFIGS)
    since = time.time()
    agent: Agent | None = None
    try:
        agent = make(route, key, tools)
        run.done = play(agent, plan, result_bytes)
    except Exception as exc:  # a broken run is reported, and the others still run
        run.errors.append(f"client: {exc!r}"[:300])
    run.turns = agent.sent if agent else 0
    run.add(fake.api_requests(), table)
    if run.addon and route.proxy and not run.errors:
        reported(run, route.proxy, since)
    return run


def measure(api: str, path: str, route: Route, fake: FakeProvider, tools: list[Tool], plan: tuple[Turn, ...],
            result_bytes: int, failures: list[str], table: PriceTable, warm: int = 0) -> Run:
    """A session; one that fails is played once more, its failure (and the proxy's complaints) kept for the report."""
    for attempt in (1, 2):
        since = route.proxy.log_offset() if route.proxy else 0
        run = session(api, path, route, fake, tools, plan, result_bytes, table, warm)
        if not run.errors:
            break
        said = route.proxy.log_text(since).splitlines() if route.proxy else []
        complaints = [line[:300] for line in said if PROXY_COMPLAINT.search(line)][-3:]
        failures.append(f"{api}/{path}, attempt {attempt}: {run.errors[0]}" + "".join(f"\n  {c}" for c in complaints))
    return run


def addon_config(source: Path, overrides: dict[str, Any], prices: list[Any] | None = None) -> Callable[[Path], str]:
    """``_bench.addon_config`` on ``source`` with ``overrides`` replacing keys of its
    ``pipes.tool_discovery`` (a whole ``defer`` section, not merged into the shipped one), and
    ``prices`` (rows of a ``prices:`` section, ``--prices``) as its ``prices:``."""
    def text(workdir: Path) -> str:
        cfg = yaml.safe_load(bench.addon_config(base=source)(workdir))
        cfg["pipes"]["tool_discovery"].update(overrides)
        if prices:
            cfg["prices"] = [*prices, *(cfg.get("prices") or [])]
        return yaml.safe_dump(cfg, sort_keys=False)
    return text


def price_rows(path: Path | None) -> list[Any]:
    """The rows of ``--prices FILE``: a YAML ``prices:`` section (or its bare list of rows)."""
    if path is None:
        return []
    data = yaml.safe_load(path.read_text())
    rows = data.get("prices") if isinstance(data, dict) else data
    try:
        addon_cfg.parse({"prices": rows})  # a bad row is said here, not by every proxy at start
    except addon_cfg.ConfigError as exc:
        raise SystemExit(f"--prices {path}: {exc}") from None
    return rows


# --- report -------------------------------------------------------------------------------------------


def usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.4f}"


def report(runs: list[Run], tools: list[Tool], plan: tuple[Turn, ...], failures: list[str], result_bytes: int,
           elapsed: float, detail: bool = False) -> bool:
    """Print the tables; True when every run through the addon reported what the provider billed."""
    tool_turns = sum(bool(t.tool) for t in plan)
    catalog_tokens = sum(len(json.dumps(t)) // 4 for t in anthropic_tools(tools))
    print(f"# A {len(plan)}-turn session over {len(tools)} MCP tools (~{catalog_tokens:,} tokens), "
          f"{tool_turns} tool turns, {len({t.tool for t in plan if t.tool})} different tools, "
          f"tool results of ~{result_bytes / 1024:.0f} KB ({elapsed:.0f} s)\n")
    print("Billed input in input-token equivalents: Anthropic uncached (all cache writes) × 1.25 + cached × 0.1; "
          "OpenAI uncached + cached × 0.1 (assumed); Gemini uncached + cached × 0.25 (assumed). "
          "*tools[] changed*: upstream requests whose `tools[]` differs from the request before, "
          "of all but the first. *tool turns*: turns whose tool was called, of those that need one. "
          "*billed $*: the fake's usage of every request (output included) priced per request from the proxy's "
          f"price table ({', '.join(sorted({f'`{MODELS[r.api]}`' for r in runs}))}).\n")
    print("| API | path | requests | searches | prompt tokens | cached | cached % | billed input | × direct "
          "| billed $ | tools[] changed | tool turns |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    direct = {r.api: r.billed for r in runs if r.path == "direct"}
    for r in runs:
        share = f"{100 * r.cached / r.tokens:.0f}%" if r.tokens else "n/a"
        ratio = f"{r.billed / direct[r.api]:.2f}" if direct.get(r.api) else "n/a"
        print(f"| {r.api} | {r.path} | {r.requests} | {r.searches} | {r.tokens:,} | {r.cached:,} | {share} "
              f"| {r.billed:,.0f} | {ratio} | {usd(r.usd)} | {r.changes} of {max(r.requests - 1, 0)} "
              f"| {r.done} of {tool_turns} |")

    print("\n## Where the cache broke\n")
    print("*breaks in tools[]*: requests after the first whose first uncached segment is a tool (the others "
          "miss only at the new end of the conversation). *uncached behind them*: those requests' uncached "
          "tokens, as a share of all uncached tokens of the run (the rest: the first request, and new messages).\n")
    print("| API | path | breaks in tools[] | uncached behind them | tools forwarded (mean) | tools[] KB (mean) |")
    print("|---|---|---:|---:|---:|---:|")
    for r in runs:
        uncached = r.tokens - r.cached
        behind = f"{100 * r.behind_tool_breaks / uncached:.0f}%" if uncached else "n/a"
        n = max(r.requests, 1)
        print(f"| {r.api} | {r.path} | {r.tool_breaks} | {behind} | {r.forwarded / n:.0f} "
              f"| {r.tool_bytes / n / 1024:.1f} |")
    agree = money(runs)
    if detail:
        for r in runs:
            print(f"\n### {r.api} / {r.path}: every upstream request\n")
            print("| # | tokens | cached | segments | first uncached segment | tools forwarded | model called |")
            print("|---:|---:|---:|---:|---|---:|---|")
            print("\n".join(r.detail))
    if failures:
        print("\n## Failed sessions (each played once more; a row whose second attempt failed too is partial)\n")
        print("\n".join(f"- {f}" for f in failures))
    return agree


def money(runs: list[Run]) -> bool:
    """The proxy's reported cost of each run through the addon beside the provider's bill; True: all agree."""
    checked = [r for r in runs if r.addon and not r.errors]
    failed = [r for r in runs if r.addon and r.errors]  # listed under "Failed sessions"
    if not checked and not failed:
        return True
    direct = {r.api: r.usd for r in runs if r.path == "direct"}
    print("\n## What the proxy reported, against what the provider billed\n")
    print("*reported*: the proxy's telemetry `cost_usd` summed over the session's records (one per client "
          "request: the usage of every upstream answer, hidden rounds included, priced); *billed*: the usage the "
          "fake reported for the same upstream requests, priced per request by the same table "
          f"(`tooldisco/data/prices.yaml` under the config's `prices:` rows); they must agree within {AGREE:.0%}. "
          "*without*: the proxy's `cost_usd_without` summed (each turn as if the client's own request had gone "
          "out), beside what the direct run was billed.\n")
    print("| API | path | client requests (records) | reported $ | billed $ | difference | agree "
          "| reported without $ | direct billed $ |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for r in (r for r in runs if r.addon):
        if r.errors:
            print(f"| {r.api} | {r.path} | {r.turns} | n/a | n/a | n/a | not checked: the session failed | n/a "
                  f"| {usd(direct.get(r.api))} |")
            continue
        gap = r.gap
        diff = "n/a" if gap is None else f"{100 * gap:+.4f}%" if abs(gap) >= 5e-7 else "0.0000%"
        recorded = f"{r.turns} ({r.records})" + (f", {r.unpriced} unpriced" if r.unpriced else "")
        print(f"| {r.api} | {r.path} | {recorded} | {usd(r.reported if r.records else None)} | {usd(r.usd)} "
              f"| {diff} | {'yes' if r.agrees else '**no**'} | {usd(r.without if r.records else None)} "
              f"| {usd(direct.get(r.api))} |")
    bad = [r for r in checked if not r.agrees]
    skipped = f"; {len(failed)} not checked (their sessions failed)" if failed else ""
    if bad:
        print(f"\nCost check FAILED: {len(bad)} of {len(checked)} runs through the addon reported a cost more than "
              f"{AGREE:.0%} from the provider's bill (or left turns unrecorded or unpriced): "
              + ", ".join(f"{r.api}/{r.path}" for r in bad) + skipped)
    elif checked:
        print(f"\nCost check: ok, {len(checked)} of {len(checked)} runs through the addon reported within {AGREE:.0%} "
              f"of the provider's bill (largest difference {max(abs(r.gap or 0) for r in checked):.4%}){skipped}.")
    else:
        print(f"\nCost check: none of the {len(failed)} runs through the addon could be checked "
              "(their sessions failed).")
    return not bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apis", default=",".join(APIS), help=f"comma-separated, of {', '.join(APIS)}")
    ap.add_argument("--servers", type=int, default=20, help="MCP servers in the catalog (25 tools each, at most 20)")
    ap.add_argument("--result-kb", type=float, default=3.0, help="size of each tool result the agent sends back")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)} (direct always runs)")
    ap.add_argument("--plan", default="on-call", choices=sorted(PLANS),
                    help="the scripted session: on-call (22 turns, 13 tool turns) or release (20 turns, 6 tool turns)")
    ap.add_argument("--detail", action="store_true", help="also list every upstream request of every run")
    ap.add_argument("--turns", type=int, default=0, help="play only the plan's first N turns (0: all)")
    ap.add_argument("--warm", type=int, default=0,
                    help="earlier sessions of the same tenant played (and not counted) before the measured one")
    ap.add_argument("--prices", type=Path, metavar="FILE",
                    help="a YAML prices: section the proxies' configs get (their rows first), priced alike here")
    ap.add_argument("--telemetry", type=Path, metavar="DIR",
                    help="keep each addon path's telemetry as DIR/<path>.jsonl, every run's records (--warm "
                         "sessions' too), for tooldisco report")
    args = ap.parse_args()
    paths = ["direct", *(p for p in args.paths.split(",") if p and p != "direct")]
    if set(paths) - set(PATHS):
        ap.error(f"unknown paths: {', '.join(sorted(set(paths) - set(PATHS)))}")
    result_bytes = int(args.result_kb * 1024)
    apis = [a for a in args.apis.split(",") if a]
    unknown = set(apis) - set(APIS)
    if unknown:
        ap.error(f"unknown APIs: {', '.join(sorted(unknown))}")
    tools = mcp_catalog(args.servers)
    plan = PLANS[args.plan][:args.turns or None]
    missing = {t.tool for t in plan if t.tool} - {t.name for t in tools}
    if missing:
        ap.error(f"the session needs servers the catalog lacks: {', '.join(sorted(missing))}")

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench_session_") as tmp_name, FakeProvider(stream_delay=0) as fake:
        tmp = Path(tmp_name)
        proxies = {"mitmdump": MitmDump(tmp / "plain", fake.url, name="plain")} if "mitmdump" in paths else {}
        rows = price_rows(args.prices)
        proxies |= {p: MitmDump(tmp / p, fake.url, script=ADDON_PATH, config=addon_config(*c, rows), name=p)
                    for p, c in CONFIGS.items() if p in paths}
        # Each path's prices: through the addon, its config's (the same overrides it prices turns with);
        # elsewhere the shipped config's, with --prices.
        shipped = price_table(yaml.safe_load(addon_config(SHIPPED, {}, rows)(tmp)))
        tables = {p: price_table(yaml.safe_load(addon_config(*CONFIGS[p], rows)(tmp / p))) if p in CONFIGS
                  else shipped for p in paths}
        unpriced = sorted({f"{MODELS[a]} ({p})" for a in apis for p in paths if tables[p].price(MODELS[a]) is None})
        if unpriced:
            ap.error(f"models without a price: {', '.join(unpriced)} (give the config a prices: row)")
        try:
            for proxy in proxies.values():
                proxy.start()
            runs: list[Run] = []
            failures: list[str] = []
            for api in apis:
                for path in paths:
                    if path in CLIENTS and api not in CLIENTS[path]:
                        continue
                    started = time.monotonic()
                    route = Route(fake.url, proxies.get(path))
                    runs.append(measure(api, path, route, fake, tools, plan, result_bytes, failures, tables[path],
                                        args.warm))
                    print(f"{api} {path}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        finally:
            for proxy in proxies.values():
                proxy.stop()
        if args.telemetry:
            args.telemetry.mkdir(parents=True, exist_ok=True)
            for p in CONFIGS:
                if p in proxies and (proxies[p].workdir / "tool_discovery.jsonl").exists():
                    shutil.copyfile(proxies[p].workdir / "tool_discovery.jsonl", args.telemetry / f"{p}.jsonl")
    if not report(runs, tools, plan, failures, result_bytes, time.monotonic() - t0, args.detail):
        sys.exit(1)


if __name__ == "__main__":
    main()
