"""Realistic tool catalogs for tests: MCP-style names, descriptions, schemas."""

from __future__ import annotations

SERVERS = {
    "github": [
        ("create_issue", "Create a new issue in a GitHub repository.", {"repo": "Repository owner/name", "title": "Issue title", "body": "Issue body"}),
        ("list_pull_requests", "List pull requests of a GitHub repository.", {"repo": "Repository owner/name", "state": "open or closed"}),
        ("merge_pull_request", "Merge a pull request on GitHub.", {"repo": "Repository", "number": "PR number"}),
        ("search_code", "Search source code across GitHub repositories.", {"query": "Code search query"}),
        ("get_file_contents", "Get the contents of a file in a GitHub repository.", {"repo": "Repository", "path": "File path"}),
    ],
    "slack": [
        ("post_message", "Post a message to a Slack channel.", {"channel": "Channel id", "text": "Message text"}),
        ("list_channels", "List the channels of the Slack workspace.", {"limit": "How many"}),
        ("add_reaction", "Add an emoji reaction to a Slack message.", {"channel": "Channel", "emoji": "Emoji name"}),
    ],
    "postgres": [
        ("run_query", "Run a read-only SQL query against the PostgreSQL database.", {"sql": "The SQL statement"}),
        ("list_tables", "List the tables of the PostgreSQL database schema.", {"schema": "Schema name"}),
        ("describe_table", "Describe the columns of a database table.", {"table": "Table name"}),
    ],
    "weather": [
        ("get_forecast", "Get the weather forecast for a city for the next days.", {"city": "City name", "days": "Number of days"}),
        ("get_current_weather", "Get the current weather conditions in a location.", {"location": "City or coordinates"}),
    ],
    "calendar": [
        ("create_event", "Create a calendar event with attendees.", {"title": "Title", "start": "Start time", "attendees": "Emails"}),
        ("list_events", "List upcoming calendar events.", {"days": "How many days ahead"}),
    ],
}
FILLER_TOPICS = [
    "invoice", "shipment", "ticket", "deployment", "metric", "alert", "document", "translation",
    "image", "audio", "payment", "customer", "inventory", "survey", "contract", "backup",
    "certificate", "dns", "firewall", "queue", "cache", "cluster", "secret", "webhook",
    "report", "dashboard", "feature_flag", "experiment", "notebook", "pipeline", "container",
    "volume", "snapshot", "domain", "mailbox", "contact", "lead", "campaign", "coupon", "refund",
]


def tool_specs(n: int) -> list[tuple[str, str, dict[str, str]]]:
    """``n`` distinct (name, description, params): the MCP servers first, then fillers."""
    specs = [(f"mcp__{s}__{name}", desc, params) for s, tools in SERVERS.items() for name, desc, params in tools]
    i = 0
    while len(specs) < n:
        topic = FILLER_TOPICS[i % len(FILLER_TOPICS)]
        verb = ["get", "update", "delete", "archive", "export"][(i // len(FILLER_TOPICS)) % 5]
        server = f"svc{i // 25}"
        specs.append((f"mcp__{server}__{verb}_{topic}_{i}", f"{verb.capitalize()} a {topic.replace('_', ' ')} record by id.",
                      {"id": f"The {topic} id", "options": "Extra options"}))
        i += 1
    return specs[:n]


def _schema(params: dict[str, str]) -> dict:
    return {"type": "object", "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
            "required": list(params)[:1]}


def anthropic_tools(n: int) -> list[dict]:
    return [{"name": name, "description": desc, "input_schema": _schema(p)} for name, desc, p in tool_specs(n)]


def openai_tools(n: int) -> list[dict]:
    return [{"type": "function", "function": {"name": name, "description": desc, "parameters": _schema(p)}}
            for name, desc, p in tool_specs(n)]
