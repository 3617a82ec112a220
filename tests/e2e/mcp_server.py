"""A stdio MCP server with many realistic tools, for driving Claude Code in e2e tests.

Newline-delimited JSON-RPC 2.0 over stdin/stdout (the MCP stdio transport), implementing
``initialize``, ``notifications/initialized``, ``ping``, ``tools/list`` and ``tools/call``.
Pure standard library so it runs with any Python. Every ``tools/call`` answer carries a
marker (:func:`call_marker`) a test can look for in the agent's final answer. One process serves one "server" of the
catalog; :func:`mcp_config` launches one process per server, which is how users wire several
MCP servers into an agent (Claude Code names their tools ``mcp__<server>__<tool>``)::

    python tests/e2e/mcp_server.py --server github      # serve one server on stdio
    python tests/e2e/mcp_server.py --list               # print the whole catalog as JSON
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

#: server -> resources: (resource, plural, what one is, what several are, {param: description} identifying one)
CATALOG: dict[str, list[tuple[str, str, str, str, dict[str, str]]]] = {
    "github": [
        (
            "issue",
            "issues",
            "an issue in a GitHub repository",
            "issues of a GitHub repository",
            {"repo": "Repository as owner/name", "number": "Issue number"},
        ),
        (
            "pull_request",
            "pull_requests",
            "a pull request of a GitHub repository",
            "pull requests of a GitHub repository",
            {"repo": "Repository as owner/name", "number": "Pull request number"},
        ),
        (
            "branch",
            "branches",
            "a git branch of a GitHub repository",
            "git branches of a GitHub repository",
            {"repo": "Repository as owner/name", "branch": "Branch name"},
        ),
        (
            "release",
            "releases",
            "a published release of a GitHub repository",
            "published releases of a GitHub repository",
            {"repo": "Repository as owner/name", "tag": "Release tag"},
        ),
        (
            "workflow_run",
            "workflow_runs",
            "a GitHub Actions workflow run",
            "GitHub Actions workflow runs",
            {"repo": "Repository as owner/name", "run_id": "Workflow run id"},
        ),
    ],
    "slack": [
        (
            "message",
            "messages",
            "a message posted in a Slack channel",
            "messages posted in a Slack channel",
            {"channel": "Channel id", "ts": "Message timestamp"},
        ),
        (
            "channel",
            "channels",
            "a Slack channel of the workspace",
            "Slack channels of the workspace",
            {"channel": "Channel id or name"},
        ),
        (
            "reminder",
            "reminders",
            "a Slack reminder for a user",
            "Slack reminders of a user",
            {"reminder_id": "Reminder id"},
        ),
        (
            "user_group",
            "user_groups",
            "a Slack user group (handle such as @oncall)",
            "Slack user groups (handles such as @oncall)",
            {"group_id": "User group id"},
        ),
        (
            "bookmark",
            "bookmarks",
            "a bookmark pinned to a Slack channel",
            "bookmarks pinned to a Slack channel",
            {"channel": "Channel id", "bookmark_id": "Bookmark id"},
        ),
    ],
    "jira": [
        (
            "ticket",
            "tickets",
            "a Jira ticket (issue) in a project",
            "Jira tickets (issues) of a project",
            {"key": "Ticket key such as OPS-123"},
        ),
        (
            "sprint",
            "sprints",
            "a sprint of a Jira Scrum board",
            "sprints of a Jira Scrum board",
            {"sprint_id": "Sprint id"},
        ),
        (
            "comment",
            "comments",
            "a comment on a Jira ticket",
            "comments on a Jira ticket",
            {"key": "Ticket key", "comment_id": "Comment id"},
        ),
        (
            "worklog",
            "worklogs",
            "time logged on a Jira ticket",
            "time entries logged on a Jira ticket",
            {"key": "Ticket key", "worklog_id": "Worklog id"},
        ),
        (
            "version",
            "versions",
            "a fix version (release) of a Jira project",
            "fix versions (releases) of a Jira project",
            {"project": "Project key", "version_id": "Version id"},
        ),
    ],
    "postgres": [
        (
            "table",
            "tables",
            "a table of the PostgreSQL database",
            "tables of the PostgreSQL database",
            {"schema": "Schema name", "table": "Table name"},
        ),
        (
            "index",
            "indexes",
            "an index on a PostgreSQL table",
            "indexes on a PostgreSQL table",
            {"table": "Table name", "index": "Index name"},
        ),
        (
            "view",
            "views",
            "a SQL view in the PostgreSQL database",
            "SQL views in the PostgreSQL database",
            {"schema": "Schema name", "view": "View name"},
        ),
        (
            "role",
            "roles",
            "a PostgreSQL role (user or group)",
            "PostgreSQL roles (users and groups)",
            {"role": "Role name"},
        ),
        (
            "backup",
            "backups",
            "a logical backup (pg_dump) of the database",
            "logical backups (pg_dump) of the database",
            {"backup_id": "Backup id"},
        ),
    ],
    "cloud": [
        (
            "vm_instance",
            "vm_instances",
            "a virtual machine instance in the cloud project",
            "virtual machine instances in the cloud project",
            {"zone": "Zone", "instance": "Instance name"},
        ),
        (
            "storage_bucket",
            "storage_buckets",
            "an object storage bucket",
            "object storage buckets",
            {"bucket": "Bucket name"},
        ),
        (
            "dns_record",
            "dns_records",
            "a DNS record in a managed zone",
            "DNS records in a managed zone",
            {"zone": "Managed zone", "name": "Record name"},
        ),
        (
            "firewall_rule",
            "firewall_rules",
            "a VPC firewall rule",
            "VPC firewall rules",
            {"rule": "Firewall rule name"},
        ),
        (
            "secret",
            "secrets",
            "a secret in the cloud secret manager",
            "secrets in the cloud secret manager",
            {"secret": "Secret name", "version": "Secret version"},
        ),
    ],
}
#: verb -> (description template, extra parameters)
VERBS: dict[str, tuple[str, dict[str, str]]] = {
    "list": (
        "List the {plural_text} matching optional filters, newest first.",
        {"filter": "Optional filter expression", "limit": "Maximum number of results"},
    ),
    "get": ("Get the details of {text}.", {}),
    "create": ("Create {text}.", {"fields": "JSON object with the fields of the new item"}),
    "update": ("Update the fields of {text}.", {"fields": "JSON object with the fields to change"}),
    "delete": ("Delete {text}. This cannot be undone.", {"confirm": "Set to true to confirm"}),
}


def tools_for(server: str) -> list[dict[str, Any]]:
    """The MCP tool definitions of one catalog server (name, description, inputSchema)."""
    tools = []
    for resource, plural, text, plural_text, ids in CATALOG[server]:
        for verb, (template, extra) in VERBS.items():
            params = (dict(list(ids.items())[:-1]) if verb in ("list", "create") else ids) | extra
            noun = plural if verb == "list" else resource
            description = template.format(text=text, plural_text=plural_text)
            tools.append(
                {
                    "name": f"{verb}_{noun}",
                    "description": description,
                    "inputSchema": {
                        "type": "object",
                        "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
                        "required": [k for k in params if k in ids],
                    },
                }
            )
    return tools


def call_marker(server: str, tool: str, args: dict[str, Any]) -> str:
    """The word a ``tools/call`` answer carries: derived from the server, the tool and its
    arguments, so an agent that prints it got it from this process (no prompt holds it)."""
    digest = hashlib.sha256(json.dumps([server, tool, args], sort_keys=True).encode()).hexdigest()
    return f"MCP-{digest[:12].upper()}"


def all_tool_names() -> list[str]:
    """Every tool as Claude Code names it (``mcp__<server>__<tool>``)."""
    return [f"mcp__{server}__{t['name']}" for server in CATALOG for t in tools_for(server)]


def mcp_config(python: str = sys.executable) -> dict[str, Any]:
    """An ``--mcp-config`` document that starts one stdio process per catalog server."""
    script = str(Path(__file__).resolve())
    return {"mcpServers": {s: {"type": "stdio", "command": python, "args": [script, "--server", s]} for s in CATALOG}}


def handle(server: str, message: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON-RPC response to one message (None for notifications)."""
    method, msg_id, params = message.get("method"), message.get("id"), message.get("params") or {}
    if msg_id is None:
        return None  # notifications (initialized, cancelled, ...) need no answer
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": f"fake-{server}", "version": "1.0.0"},
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": tools_for(server)}
    elif method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        if name not in {t["name"] for t in tools_for(server)}:
            return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32602, "message": f"Unknown tool: {name}"}}
        text = f"{server}.{name} ok: {json.dumps(args, sort_keys=True)} marker: {call_marker(server, name, args)}"
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": f"Method not found: {method}"}}
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def serve(server: str) -> None:
    """Answer JSON-RPC lines on stdin until EOF."""
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            reply: dict[str, Any] | None = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32700, "message": "Parse error"},
            }
        else:
            reply = handle(server, message) if isinstance(message, dict) else None
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=sorted(CATALOG), help="serve this catalog server on stdio")
    parser.add_argument("--list", action="store_true", help="print every tool definition as JSON and exit")
    args = parser.parse_args(argv)
    if args.list:
        print(json.dumps({s: tools_for(s) for s in CATALOG}, indent=1))
    elif args.server:
        serve(args.server)
    else:
        parser.error("give --server NAME or --list")


if __name__ == "__main__":
    main()
