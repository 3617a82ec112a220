"""A realistic MCP catalog: 20 servers × 25 tools, in every wire shape the proxy speaks.

Why: cache and discovery benchmarks need a catalog that looks like what agents send with a
few MCP servers connected (``mcp__github__create_issue``, a sentence or two of description,
a JSON schema with typed, described, partly required properties, 55K+ tokens in all),
not ``svc3__get_invoice_17``. Deterministic: the same call gives byte-identical tools.

    tools = mcp_catalog()                        # 500 Tool objects
    body["tools"] = anthropic_tools(tools)       # or chat_tools / responses_tools / ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Param = tuple[str, Any, str]  # (name, type, description); type: "string", "integer", "boolean", "string[]" or an enum list


@dataclass(frozen=True)
class Resource:
    noun: str  # singular, snake_case: "pull_request"
    plural: str
    fields: tuple[Param, ...]  # writable fields; the first is required on create, the first two filter lists
    verbs: tuple[str, ...] = ("list", "get", "create", "update", "delete")


@dataclass(frozen=True)
class Server:
    key: str
    product: str
    scope: tuple[Param, ...]  # required on every tool of the server (repository, project, region...)
    resources: tuple[Resource, ...]


@dataclass(frozen=True)
class Tool:
    server: str
    name: str
    description: str
    schema: dict[str, Any]


S, INT, B, L = "string", "integer", "boolean", "string[]"

SERVERS: tuple[Server, ...] = (
    Server("github", "GitHub", (("owner", S, "Repository owner (user or organization)"), ("repo", S, "Repository name")), (
        Resource("issue", "issues", (("title", S, "Issue title"), ("state", ["open", "closed"], "Issue state"),
                                     ("body", S, "Issue body in GitHub-flavoured Markdown"), ("labels", L, "Label names"),
                                     ("assignees", L, "Logins to assign"))),
        Resource("pull_request", "pull_requests", (("title", S, "Pull request title"), ("base", S, "Branch to merge into"),
                                                   ("head", S, "Branch with the changes"), ("draft", B, "Open as a draft")),
                 ("list", "get", "create", "merge", "request_review")),
        Resource("branch", "branches", (("name", S, "Branch name"), ("from_ref", S, "Commit SHA or branch to start from")),
                 ("list", "get", "create", "delete", "protect")),
        Resource("release", "releases", (("tag_name", S, "Git tag of the release"), ("name", S, "Release title"),
                                         ("body", S, "Release notes"), ("prerelease", B, "Mark as a pre-release"))),
        Resource("workflow_run", "workflow_runs", (("workflow", S, "Workflow file name, e.g. ci.yml"),
                                                   ("branch", S, "Branch the run was triggered on")),
                 ("list", "get", "rerun", "cancel", "download_logs")),
    )),
    Server("gitlab", "GitLab", (("project_id", S, "Project id or URL-encoded path, e.g. group%2Fapp"),), (
        Resource("merge_request", "merge_requests", (("title", S, "Merge request title"), ("source_branch", S, "Source branch"),
                                                     ("target_branch", S, "Target branch"), ("squash", B, "Squash commits on merge")),
                 ("list", "get", "create", "merge", "approve")),
        Resource("pipeline", "pipelines", (("ref", S, "Branch or tag"), ("status", ["running", "success", "failed", "canceled"], "Pipeline status")),
                 ("list", "get", "trigger", "retry", "cancel")),
        Resource("issue", "issues", (("title", S, "Issue title"), ("labels", L, "Labels"), ("description", S, "Issue description"),
                                     ("milestone_id", INT, "Milestone id"))),
        Resource("job", "jobs", (("stage", S, "Pipeline stage"), ("status", ["pending", "running", "success", "failed"], "Job status")),
                 ("list", "get", "retry", "cancel", "download_artifacts")),
        Resource("environment", "environments", (("name", S, "Environment name"), ("external_url", S, "URL of the deployed app")),
                 ("list", "get", "create", "stop", "delete")),
    )),
    Server("jira", "Jira", (("project_key", S, "Jira project key, e.g. CHK"),), (
        Resource("issue", "issues", (("summary", S, "One-line summary"), ("issue_type", ["Bug", "Task", "Story", "Epic"], "Issue type"),
                                     ("description", S, "Description in Atlassian wiki markup"), ("priority", ["Highest", "High", "Medium", "Low"], "Priority"),
                                     ("assignee", S, "Account id of the assignee"))),
        Resource("sprint", "sprints", (("name", S, "Sprint name"), ("goal", S, "Sprint goal"), ("start_date", S, "ISO 8601 start date")),
                 ("list", "get", "create", "start", "complete")),
        Resource("comment", "comments", (("issue_key", S, "Issue key, e.g. CHK-123"), ("body", S, "Comment text"))),
        Resource("worklog", "worklogs", (("issue_key", S, "Issue key"), ("time_spent", S, "Duration such as 2h 30m"),
                                         ("comment", S, "What was done"))),
        Resource("transition", "transitions", (("issue_key", S, "Issue key"), ("to_status", S, "Target status, e.g. In Review")),
                 ("list", "get", "apply", "validate", "describe")),
    )),
    Server("linear", "Linear", (("team_key", S, "Linear team key, e.g. ENG"),), (
        Resource("issue", "issues", (("title", S, "Issue title"), ("priority", INT, "0 (none) to 4 (low)"), ("description", S, "Markdown description"),
                                     ("estimate", INT, "Story points"))),
        Resource("project", "projects", (("name", S, "Project name"), ("target_date", S, "ISO 8601 target date"), ("lead_id", S, "Lead user id"))),
        Resource("cycle", "cycles", (("name", S, "Cycle name"), ("starts_at", S, "ISO 8601 start"), ("ends_at", S, "ISO 8601 end")),
                 ("list", "get", "create", "update", "archive")),
        Resource("label", "labels", (("name", S, "Label name"), ("color", S, "Hex color, e.g. #5e6ad2"))),
        Resource("comment", "comments", (("issue_id", S, "Issue identifier, e.g. ENG-42"), ("body", S, "Markdown comment")),
                 ("list", "get", "create", "update", "resolve")),
    )),
    Server("confluence", "Confluence", (("space_key", S, "Confluence space key"),), (
        Resource("page", "pages", (("title", S, "Page title"), ("parent_id", S, "Parent page id"), ("body", S, "Page body in storage format"))),
        Resource("blog_post", "blog_posts", (("title", S, "Post title"), ("body", S, "Post body in storage format"))),
        Resource("attachment", "attachments", (("page_id", S, "Page the file is attached to"), ("file_name", S, "File name")),
                 ("list", "get", "upload", "download", "delete")),
        Resource("page_comment", "page_comments", (("page_id", S, "Page id"), ("body", S, "Comment body"))),
        Resource("page_label", "page_labels", (("page_id", S, "Page id"), ("label", S, "Label name")),
                 ("list", "get", "add", "remove", "search")),
    )),
    Server("notion", "Notion", (("workspace_id", S, "Notion workspace id"),), (
        Resource("page", "pages", (("title", S, "Page title"), ("parent_id", S, "Parent page or database id"), ("icon", S, "Emoji icon"))),
        Resource("database", "databases", (("title", S, "Database title"), ("parent_id", S, "Parent page id")),
                 ("list", "get", "create", "query", "update")),
        Resource("block", "blocks", (("page_id", S, "Page the block belongs to"), ("type", ["paragraph", "heading_1", "to_do", "code"], "Block type"),
                                     ("text", S, "Plain text content")),
                 ("list", "get", "append", "update", "delete")),
        Resource("page_comment", "page_comments", (("page_id", S, "Page id"), ("text", S, "Comment text"))),
        Resource("user", "users", (("email", S, "Email address"), ("name", S, "Display name")),
                 ("list", "get", "search", "invite", "remove")),
    )),
    Server("slack", "Slack", (("workspace", S, "Slack workspace domain, e.g. acme"),), (
        Resource("message", "messages", (("channel", S, "Channel id or name, e.g. #checkout-team"), ("text", S, "Message text in Slack mrkdwn"),
                                         ("thread_ts", S, "Timestamp of the parent message to reply in a thread")),
                 ("list", "get", "post", "update", "delete")),
        Resource("channel", "channels", (("name", S, "Channel name without #"), ("is_private", B, "Private channel"), ("topic", S, "Channel topic")),
                 ("list", "get", "create", "archive", "invite")),
        Resource("reaction", "reactions", (("channel", S, "Channel id"), ("timestamp", S, "Message timestamp"), ("emoji", S, "Emoji name without colons")),
                 ("list", "get", "add", "remove", "count")),
        Resource("user", "users", (("email", S, "Email address"), ("status_text", S, "Status text")),
                 ("list", "get", "search", "lookup", "set_status")),
        Resource("file", "files", (("channel", S, "Channel to share the file in"), ("file_name", S, "File name"), ("content", S, "File content as text")),
                 ("list", "get", "upload", "share", "delete")),
    )),
    Server("gmail", "Gmail", (("user_id", S, "Mailbox, usually 'me'"),), (
        Resource("email", "emails", (("to", L, "Recipient addresses"), ("subject", S, "Subject line"), ("body", S, "Plain-text body"),
                                     ("cc", L, "Cc addresses")),
                 ("list", "get", "send", "reply", "trash")),
        Resource("draft", "drafts", (("to", L, "Recipient addresses"), ("subject", S, "Subject line"), ("body", S, "Plain-text body"))),
        Resource("mail_label", "mail_labels", (("name", S, "Label name"), ("visibility", ["show", "hide"], "Visibility in the label list"))),
        Resource("thread", "threads", (("query", S, "Gmail search query, e.g. from:alice is:unread"), ("label", S, "Label name")),
                 ("list", "get", "modify", "archive", "trash")),
        Resource("mail_filter", "mail_filters", (("from_address", S, "Match sender"), ("add_label", S, "Label to apply")),
                 ("list", "get", "create", "delete", "test")),
    )),
    Server("google_calendar", "Google Calendar", (("calendar_id", S, "Calendar id, 'primary' for the user's own"),), (
        Resource("event", "events", (("summary", S, "Event title"), ("start", S, "ISO 8601 start time"), ("end", S, "ISO 8601 end time"),
                                     ("attendees", L, "Attendee email addresses"), ("location", S, "Room or video link"))),
        Resource("calendar", "calendars", (("summary", S, "Calendar name"), ("time_zone", S, "IANA time zone, e.g. Europe/Paris"))),
        Resource("free_busy", "free_busy_slots", (("emails", L, "People to check"), ("time_min", S, "ISO 8601 window start"),
                                                  ("time_max", S, "ISO 8601 window end")),
                 ("list", "get", "query", "suggest", "compare")),
        Resource("reminder", "reminders", (("event_id", S, "Event id"), ("minutes_before", INT, "Minutes before the start"))),
        Resource("acl_rule", "acl_rules", (("email", S, "Grantee email"), ("role", ["reader", "writer", "owner"], "Access role"))),
    )),
    Server("google_drive", "Google Drive", (("drive_id", S, "Shared drive id, or 'my-drive'"),), (
        Resource("file", "files", (("name", S, "File name"), ("mime_type", S, "MIME type"), ("parent_id", S, "Folder id")),
                 ("list", "get", "upload", "download", "search")),
        Resource("folder", "folders", (("name", S, "Folder name"), ("parent_id", S, "Parent folder id"))),
        Resource("permission", "permissions", (("file_id", S, "File id"), ("email", S, "Grantee email"),
                                               ("role", ["reader", "commenter", "writer"], "Role"))),
        Resource("file_comment", "file_comments", (("file_id", S, "File id"), ("content", S, "Comment text"))),
        Resource("revision", "revisions", (("file_id", S, "File id"), ("keep_forever", B, "Pin the revision")),
                 ("list", "get", "restore", "pin", "delete")),
    )),
    Server("postgres", "PostgreSQL", (("database", S, "Database name, e.g. orders_prod"),), (
        Resource("query", "queries", (("sql", S, "SQL statement; read-only unless allow_writes is set"), ("allow_writes", B, "Permit INSERT/UPDATE/DELETE"),
                                      ("timeout_ms", INT, "Statement timeout in milliseconds")),
                 ("run", "explain", "list", "get", "cancel")),
        Resource("table", "tables", (("schema", S, "Schema name, default public"), ("table", S, "Table name")),
                 ("list", "describe", "create", "truncate", "drop")),
        Resource("index", "indexes", (("table", S, "Table name"), ("columns", L, "Indexed columns"), ("unique", B, "Unique index"))),
        Resource("db_schema", "db_schemas", (("name", S, "Schema name"), ("owner", S, "Owning role"))),
        Resource("role", "roles", (("name", S, "Role name"), ("can_login", B, "Role can log in")),
                 ("list", "get", "create", "grant", "revoke")),
    )),
    Server("snowflake", "Snowflake", (("account", S, "Snowflake account locator"), ("warehouse", S, "Warehouse to run on")), (
        Resource("statement", "statements", (("sql", S, "SQL text"), ("database", S, "Database"), ("schema", S, "Schema")),
                 ("run", "list", "get", "cancel", "explain")),
        Resource("warehouse", "warehouses", (("size", ["XSMALL", "SMALL", "MEDIUM", "LARGE"], "Warehouse size"), ("auto_suspend", INT, "Seconds before suspend")),
                 ("list", "get", "resize", "suspend", "resume")),
        Resource("sf_table", "sf_tables", (("database", S, "Database"), ("schema", S, "Schema"), ("name", S, "Table name")),
                 ("list", "describe", "create", "clone", "drop")),
        Resource("stage", "stages", (("name", S, "Stage name"), ("url", S, "External location, e.g. s3://bucket/path"))),
        Resource("task", "tasks", (("name", S, "Task name"), ("schedule", S, "CRON schedule"), ("sql", S, "Statement the task runs")),
                 ("list", "get", "create", "resume", "suspend")),
    )),
    Server("sentry", "Sentry", (("organization", S, "Sentry organization slug"), ("project", S, "Project slug, e.g. checkout-service")), (
        Resource("error_issue", "error_issues", (("query", S, "Sentry search, e.g. is:unresolved environment:production"),
                                                 ("status", ["unresolved", "resolved", "ignored"], "Issue status")),
                 ("list", "get", "resolve", "ignore", "assign")),
        Resource("event", "events", (("issue_id", S, "Issue id"), ("environment", S, "Environment name")),
                 ("list", "get", "get_latest", "search", "download_attachment")),
        Resource("sentry_release", "sentry_releases", (("version", S, "Release version"), ("commits", L, "Commit SHAs")),
                 ("list", "get", "create", "finalize", "deploy")),
        Resource("alert_rule", "alert_rules", (("name", S, "Rule name"), ("threshold", INT, "Events per minute"), ("action", S, "Notification target"))),
        Resource("performance_trace", "performance_traces", (("transaction", S, "Transaction name, e.g. POST /checkout"), ("min_duration_ms", INT, "Slower than")),
                 ("list", "get", "search", "compare", "summarize")),
    )),
    Server("datadog", "Datadog", (("site", S, "Datadog site, e.g. datadoghq.eu"),), (
        Resource("metric", "metrics", (("query", S, "Metric query, e.g. avg:checkout.latency{env:prod}"), ("from_ts", INT, "Start, epoch seconds"),
                                       ("to_ts", INT, "End, epoch seconds")),
                 ("list", "query", "get", "submit", "describe")),
        Resource("monitor", "monitors", (("name", S, "Monitor name"), ("query", S, "Monitor query"), ("message", S, "Notification message"))),
        Resource("dashboard", "dashboards", (("title", S, "Dashboard title"), ("widgets", L, "Widget definitions as JSON strings"))),
        Resource("log", "logs", (("query", S, "Log search query, e.g. service:checkout status:error"), ("from_ts", INT, "Start, epoch seconds")),
                 ("search", "aggregate", "get", "archive", "tail")),
        Resource("dd_incident", "dd_incidents", (("title", S, "Incident title"), ("severity", ["SEV-1", "SEV-2", "SEV-3"], "Severity"))),
    )),
    Server("pagerduty", "PagerDuty", (("subdomain", S, "PagerDuty account subdomain"),), (
        Resource("incident", "incidents", (("title", S, "Incident title"), ("service_id", S, "Affected service id"),
                                           ("urgency", ["high", "low"], "Urgency")),
                 ("list", "get", "create", "acknowledge", "resolve")),
        Resource("service", "services", (("name", S, "Service name"), ("escalation_policy_id", S, "Escalation policy id"))),
        Resource("schedule", "schedules", (("name", S, "Schedule name"), ("time_zone", S, "IANA time zone"))),
        Resource("on_call", "on_calls", (("schedule_id", S, "Schedule id"), ("since", S, "ISO 8601 window start")),
                 ("list", "get", "override", "who_is", "history")),
        Resource("escalation_policy", "escalation_policies", (("name", S, "Policy name"), ("num_loops", INT, "Times to repeat the rules"))),
    )),
    Server("kubernetes", "Kubernetes", (("context", S, "kubeconfig context"), ("namespace", S, "Namespace, default 'default'")), (
        Resource("pod", "pods", (("label_selector", S, "Label selector, e.g. app=checkout"), ("container", S, "Container name")),
                 ("list", "get", "get_logs", "exec", "delete")),
        Resource("deployment", "deployments", (("name", S, "Deployment name"), ("replicas", INT, "Desired replicas"), ("image", S, "Container image")),
                 ("list", "get", "scale", "restart", "rollback")),
        Resource("k8s_service", "k8s_services", (("name", S, "Service name"), ("port", INT, "Service port"))),
        Resource("config_map", "config_maps", (("name", S, "ConfigMap name"), ("data", S, "Key=value lines"))),
        Resource("k8s_job", "k8s_jobs", (("name", S, "Job name"), ("image", S, "Container image"), ("command", L, "Command and arguments")),
                 ("list", "get", "create", "suspend", "delete")),
    )),
    Server("aws", "AWS", (("region", S, "AWS region, e.g. eu-west-1"),), (
        Resource("s3_object", "s3_objects", (("bucket", S, "Bucket name"), ("key", S, "Object key")),
                 ("list", "get", "put", "copy", "delete")),
        Resource("ec2_instance", "ec2_instances", (("instance_type", S, "Instance type, e.g. t3.medium"), ("tag_filter", S, "Tag filter, e.g. Name=web-*")),
                 ("list", "describe", "start", "stop", "reboot")),
        Resource("lambda_function", "lambda_functions", (("function_name", S, "Function name"), ("payload", S, "JSON event payload")),
                 ("list", "get", "invoke", "update_code", "get_logs")),
        Resource("cloudwatch_alarm", "cloudwatch_alarms", (("alarm_name", S, "Alarm name"), ("state", ["OK", "ALARM", "INSUFFICIENT_DATA"], "Alarm state")),
                 ("list", "describe", "create", "silence", "delete")),
        Resource("iam_role", "iam_roles", (("role_name", S, "Role name"), ("policy_arn", S, "Managed policy ARN")),
                 ("list", "get", "create", "attach_policy", "delete")),
    )),
    Server("stripe", "Stripe", (("account", S, "Connected account id, or 'self'"),), (
        Resource("customer", "customers", (("email", S, "Customer email"), ("name", S, "Full name"), ("metadata", S, "JSON metadata"))),
        Resource("invoice", "invoices", (("customer_id", S, "Customer id"), ("status", ["draft", "open", "paid", "void"], "Invoice status")),
                 ("list", "get", "create", "finalize", "void")),
        Resource("payment_intent", "payment_intents", (("amount", INT, "Amount in the smallest currency unit"), ("currency", S, "ISO currency code")),
                 ("list", "get", "create", "capture", "cancel")),
        Resource("subscription", "subscriptions", (("customer_id", S, "Customer id"), ("price_id", S, "Price id")),
                 ("list", "get", "create", "update", "cancel")),
        Resource("refund", "refunds", (("payment_intent_id", S, "Payment to refund"), ("amount", INT, "Amount, default the full payment")),
                 ("list", "get", "create", "update", "cancel")),
    )),
    Server("hubspot", "HubSpot", (("portal_id", S, "HubSpot portal id"),), (
        Resource("contact", "contacts", (("email", S, "Email"), ("firstname", S, "First name"), ("lifecyclestage", S, "Lifecycle stage"))),
        Resource("company", "companies", (("name", S, "Company name"), ("domain", S, "Company domain"))),
        Resource("deal", "deals", (("dealname", S, "Deal name"), ("amount", INT, "Deal amount"), ("dealstage", S, "Pipeline stage"))),
        Resource("crm_ticket", "crm_tickets", (("subject", S, "Ticket subject"), ("hs_pipeline_stage", S, "Ticket stage"))),
        Resource("note", "notes", (("body", S, "Note text"), ("associated_id", S, "Record the note is attached to"))),
    )),
    Server("zendesk", "Zendesk", (("subdomain", S, "Zendesk subdomain"),), (
        Resource("support_ticket", "support_tickets", (("subject", S, "Ticket subject"), ("status", ["new", "open", "pending", "solved"], "Status"),
                                                       ("comment", S, "First comment"), ("priority", ["low", "normal", "high", "urgent"], "Priority")),
                 ("list", "get", "create", "update", "merge")),
        Resource("end_user", "end_users", (("email", S, "Email"), ("name", S, "Name")),
                 ("list", "get", "create", "update", "suspend")),
        Resource("organization", "organizations", (("name", S, "Organization name"), ("domain_names", L, "Email domains"))),
        Resource("macro", "macros", (("title", S, "Macro title"), ("actions", L, "Actions as field=value")),
                 ("list", "get", "create", "apply", "delete")),
        Resource("help_article", "help_articles", (("title", S, "Article title"), ("body", S, "HTML body"), ("section_id", INT, "Section id")),
                 ("list", "get", "create", "update", "search")),
    )),
)

_SENTENCE: dict[str, str] = {
    "list": "List {plural} in {product}{where}. Filter by {filters}; results are paginated, newest first.",
    "get": "Get a single {product} {noun} by id, with all of its fields.",
    "create": "Create a new {product} {noun}. Returns the created {noun} with its id and URL.",
    "update": "Update an existing {product} {noun}. Only the fields you pass are changed.",
    "delete": "Permanently delete a {product} {noun}. This cannot be undone.",
    "search": "Search {product} {plural} by free-text query, ranked by relevance.",
    "describe": "Describe a {product} {noun}: its configuration, state and metadata.",
    "query": "Query {product} {plural} and return the matching rows or data points.",
}
_ACTION = "{verb} a {product} {noun}. Returns the {noun} after the operation, or an error explaining why it was refused."
_KIND = {  # verbs that take a resource's fields like create, or filters like list
    "post": "create", "send": "create", "add": "create", "upload": "create", "put": "create", "append": "create",
    "run": "create", "submit": "create", "invite": "create", "trigger": "create", "apply": "create",
    "search": "list", "query": "list", "aggregate": "list", "tail": "list",
}


def _schema_of(kind: Any, description: str) -> dict[str, Any]:
    if isinstance(kind, list):
        return {"type": "string", "enum": kind, "description": description}
    if kind == L:
        return {"type": "array", "items": {"type": "string"}, "description": description}
    return {"type": kind, "description": description}


def _params(server: Server, res: Resource, verb: str) -> tuple[list[Param], list[str]]:
    """The tool's parameters and the required names: scope first, then what the verb needs."""
    scope = list(server.scope)
    required = [p[0] for p in scope]
    kind = _KIND.get(verb, verb)
    id_param: Param = (f"{res.noun}_id", S, f"Id of the {res.noun.replace('_', ' ')}")
    if kind == "list":
        extra: list[Param] = [*res.fields[:2], ("limit", INT, "Page size, 1-100 (default 30)"),
                              ("cursor", S, "Cursor from the previous page")]
    elif kind == "create":
        extra = list(res.fields)
        required.append(res.fields[0][0])
    elif kind == "update":
        extra = [id_param, *res.fields]
        required.append(id_param[0])
    else:  # get, delete and the actions
        extra = [id_param, *res.fields[:1]] if kind not in ("get", "delete") else [id_param]
        required.append(id_param[0])
    return scope + extra, required


def _tool(server: Server, res: Resource, verb: str) -> Tool:
    kind = _KIND.get(verb, verb)
    noun = res.noun.replace("_", " ")
    plural = res.plural.replace("_", " ")
    name = f"mcp__{server.key}__{verb}_{res.plural if kind == 'list' else res.noun}"
    where = f" ({', '.join(p[0] for p in server.scope)})"
    filters = " and ".join(p[0] for p in res.fields[:2])
    template = _SENTENCE.get(verb) or _ACTION
    text = template.format(verb=verb.replace("_", " ").capitalize(), product=server.product, noun=noun,
                           plural=plural, where=where, filters=filters)
    params, required = _params(server, res, verb)
    schema = {
        "type": "object",
        "properties": {p[0]: _schema_of(p[1], p[2]) for p in params},
        "required": required,
        "additionalProperties": False,
    }
    return Tool(server.key, name, text, schema)


def mcp_catalog(servers: int = len(SERVERS)) -> list[Tool]:
    """25 tools for each of the first ``servers`` servers, grouped by server (as agents send them)."""
    return [_tool(s, r, v) for s in SERVERS[:servers] for r in s.resources for v in r.verbs]


# --- wire shapes --------------------------------------------------------------------------------


def anthropic_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.schema} for t in tools]


def chat_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}}
            for t in tools]


def responses_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    return [{"type": "function", "name": t.name, "description": t.description, "parameters": t.schema}
            for t in tools]


def gemini_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    """One ``functionDeclarations`` entry, as Gemini CLI sends its MCP tools."""
    decls = [{"name": t.name, "description": t.description, "parametersJsonSchema": t.schema} for t in tools]
    return [{"functionDeclarations": decls}]


def converse_tools(tools: list[Tool]) -> dict[str, Any]:
    """A Bedrock Converse ``toolConfig``."""
    specs = [{"toolSpec": {"name": t.name, "description": t.description, "inputSchema": {"json": t.schema}}}
             for t in tools]
    return {"tools": specs}
