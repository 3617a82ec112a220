"""Config: YAML -> frozen dataclasses, validated up front.

Why: a bad value must stop the proxy at start with a message naming the key,
not surface as a strange rewrite in the middle of a user's session. The
``pipes.tool_discovery`` block takes a gateway config's tool-discovery fields as they are
(strategy, api, min_tools … max_search_results), so such a file loads unchanged; the rest
(hosts, sessions, telemetry, search, deferral thresholds) is ours.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib.util
import math
import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import yaml

from tooldisco.core.bytecache import MiB, memoize




class Strategy(StrEnum):
    """What tool discovery does to a request, parsed once here: the other layers ask its
    properties, and only the planner branches on it."""

    PASSTHROUGH = "passthrough"
    RELEVANCE = "relevance"
    TOOL_SEARCH = "tool-search"
    API = "api"

    @property
    def defers(self) -> bool:
        """Tools wait behind the search tool: the strategies that run the loop and stitch."""
        return self in (Strategy.TOOL_SEARCH, Strategy.API)

    @property
    def remote(self) -> bool:
        """The selector service ranks the searches (the proxy's own search backend does not)."""
        return self is Strategy.API

    @property
    def search_fallback(self) -> bool | None:
        """What ``enable_search_fallback`` is forced to; None: as configured."""
        return {Strategy.RELEVANCE: False, Strategy.TOOL_SEARCH: True, Strategy.API: True}.get(self)


STRATEGIES = tuple(s.value for s in Strategy)
# The search backends ``search.factory`` makes; named here so that config sits below the search.
SEARCH_BACKENDS = ("regex", "bm25", "hybrid", "fuzzy")
SCORERS = ("overlap", "bm25", "hybrid")
ROLLOUTS = ("dark", "shadow", "partial", "full")
WEBSOCKET_MODES = ("refuse", "passthrough")
SESSION_BACKENDS = ("disk", "redis")
DEFAULT_HOSTS = (
    "api.anthropic.com",
    "api.openai.com",
    "generativelanguage.googleapis.com",
    "bedrock-runtime.*.amazonaws.com",
)
_LOCAL = ("localhost", "127.0.0.1", "::1")  # an OpenAI-compatible server on this machine
# Named presets for ``hosts:``: a bare word (no dot, no colon, no glob) is a preset, anything
# else a host name or fnmatch pattern, so the two never read alike. A host name without a dot
# (a Docker service name) is written with a trailing dot: ``ollama.``.
HOST_PRESETS: dict[str, tuple[str, ...]] = {
    "default": DEFAULT_HOSTS,
    "openrouter": ("openrouter.ai",),
    "azure": ("*.openai.azure.com", "*.services.ai.azure.com"),
    "groq": ("api.groq.com",),
    "deepseek": ("api.deepseek.com",),
    "together": ("api.together.xyz", "api.together.ai"),
    "fireworks": ("api.fireworks.ai",),
    "mistral": ("api.mistral.ai",),
    "xai": ("api.x.ai",),
    "local": _LOCAL,
    "localhost": _LOCAL,  # what configs wrote before presets existed keeps working
    "ollama": _LOCAL,
    "vllm": _LOCAL,
    "lmstudio": _LOCAL,
    "litellm": _LOCAL,
}
_PRESET_WORD = re.compile(r"^[A-Za-z0-9_-]+$")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class ConfigError(ValueError):
    """Raised with a message that starts with the offending key."""


def expand_hosts(entries: tuple[str, ...], key: str = "hosts") -> tuple[str, ...]:
    """Presets expanded in place, host names kept (lower-cased, a trailing dot dropped: DNS's
    absolute form names the same host), duplicates dropped. An unknown bare word is an error
    naming the nearest preset: a typo would otherwise match no host and process nothing."""
    out: dict[str, None] = {}
    for entry in entries:
        if _PRESET_WORD.match(entry):
            if (preset := HOST_PRESETS.get(entry.lower())) is None:
                near = difflib.get_close_matches(entry.lower(), HOST_PRESETS, n=1, cutoff=0.5)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise ConfigError(f"{key}: unknown preset {entry!r}; {hint}presets are "
                                  f"{', '.join(HOST_PRESETS)} (a host name without a dot is "
                                  f"written with a trailing dot: {entry}.)")
            out.update(dict.fromkeys(preset))
        else:
            out[entry.lower().rstrip(".") or entry] = None
    return tuple(out)


@dataclass(frozen=True)
class ApiConfig:
    endpoint: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 2.0
    max_request_bytes: int = 4_000_000  # bounds what one search sends to the selector
    max_response_bytes: int = 1_000_000
    send_definitions: bool = True  # false: only name and description leave the proxy
    rollout: str = "full"
    rollout_percent: float = 100.0


@dataclass(frozen=True)
class DeferConfig:
    """How tools are deferred: optionally the most relevant kept loaded beside the search tool."""

    upfront: int = 0  # how many top-ranked tools stay loaded; 0 defers everything
    # Native deferral keeps them loaded too only when this is set: a native search loads a tool
    # inline without breaking the cache, while a loaded tool is read with every request
    # (scripts/bench_session.py and scripts/bench_agents.py show the cost).
    native_upfront: bool = False
    # APIs (``Adapter.api``) whose deferral calls found tools through one fixed
    # ``call_tool_name`` function instead of appending them to ``tools[]`` (which comes first
    # in the prompt: each append re-bills the whole conversation); ``[]`` turns it off.
    # scripts/bench_session.py shows the saving.
    call_through: tuple[str, ...] = ("openai_chat", "gemini")
    min_tools: int = 0  # defer nothing while fewer deferrable tools than this…
    min_tokens: int = 0  # …and fewer estimated definition tokens than this


@dataclass(frozen=True)
class SearchConfig:
    backend: str = "bm25"  # the best measured backend of the default install (README: Benchmarks)
    cache_dir: str | None = None
    timeout: float = 2.0  # wall-clock budget of one search; past it the model reads an error


@dataclass(frozen=True)
class LearningConfig:
    """Search that learns from the proxy's own traffic, per tenant (``search.priors``)."""

    enabled: bool = True  # false: no learned priors rank anything, and nothing is learned
    learn: bool = True  # false: the priors rank, but new turns teach nothing (frozen)
    half_life_days: float = 14.0  # what was learned weighs half as much this many days later
    max_bytes: int = 512 * 1024  # per tenant: past it, the tools with the least evidence are forgotten
    flush_interval: float = 5.0  # lessons are gathered and written to the session store this often
    refresh_interval: float = 10.0  # a tenant's priors are read again this often (other proxies' lessons)


# Models whose API takes cache-preserving deferral (``defer_loading`` tools answered with
# ``tool_reference`` blocks on Anthropic; a client-executed ``tool_search`` on Responses), per
# the providers' tool-search docs: Claude Sonnet/Opus 4.5 and later and Haiku 4.5 and later
# (Claude 5 families included), OpenAI gpt-5.4 and later. Bedrock ids carry a region prefix.
_CLAUDE_NATIVE = tuple(f"claude-{family}-{version}*" for family in ("opus", "sonnet", "haiku")
                      for version in ("4-[5-9]", "[5-9]")) + ("claude-mythos*", "claude-fable*")


@dataclass(frozen=True)
class NativeConfig:
    """Which models get native deferral, per API (glob patterns over the request's model;
    an empty list turns it off for that API). Everything else gets classic deferral."""

    anthropic: tuple[str, ...] = _CLAUDE_NATIVE
    responses: tuple[str, ...] = ("gpt-5.[4-9]*", "gpt-5.[1-9][0-9]*", "gpt-[6-9]*")
    bedrock: tuple[str, ...] = tuple(f"*anthropic.{p}" for p in _CLAUDE_NATIVE)

    def applies(self, kind: str, model: str) -> bool:
        """Whether ``model`` takes native deferral on the API ``kind`` (anthropic, responses, bedrock)."""
        patterns: tuple[str, ...] = getattr(self, kind, ())
        return bool(model) and any(fnmatch.fnmatchcase(model, p) for p in patterns)


@dataclass(frozen=True)
class ToolDiscovery:
    enabled: bool = False
    strategy: Strategy = Strategy.PASSTHROUGH
    provider: str | None = None
    api: ApiConfig = ApiConfig()
    min_tools: int = 5
    max_tools: int = 25
    target_ratio: float = 0.8
    always_keep: tuple[str, ...] = ()
    # A client's own search over its deferred tools, by name (``policy.client_search`` also
    # recognises one by what its description says it does): such a request goes through as made.
    client_search_tools: tuple[str, ...] = ("ToolSearch", "tool_search")
    enable_search_fallback: bool = False
    search_tool_name: str = "gateway_search_tools"
    call_tool_name: str = "gateway_call_tool"  # call-through deferral's dispatcher (``defer.call_through``)
    max_search_results: int = 5
    max_phantom_loops: int = 5
    scorer: str = "overlap"
    search: SearchConfig = SearchConfig()
    defer: DeferConfig = DeferConfig()
    native: NativeConfig = NativeConfig()
    learning: LearningConfig = LearningConfig()
    # Warn (once per session) when the client's tool definitions take more than this share of
    # the model's context window.
    context_warn_share: float = 0.25

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", Strategy(self.strategy))  # a name given in code is parsed too

    def keeps(self, name: str) -> bool:
        """Whether ``always_keep`` names this tool (exact names or glob patterns)."""
        return bool(self.always_keep) and _matches(self.always_keep, name)


@dataclass(frozen=True)
class RedisSettings:
    """Where several proxies share their sessions (``sessions.backend: redis``)."""

    url: str = field(default="redis://127.0.0.1:6379/0", repr=False)  # may hold a password: never printed
    prefix: str = "tooldisco:"  # every key starts with it: one Redis can serve other things too
    timeout: float = 0.5  # to connect and for each command: past it the request goes on without state
    retry_after: float = 5.0  # once Redis failed, requests skip it this long before one tries again
    ca_file: str | None = None  # rediss://: the CA bundle that verifies the server (default: the system's)
    cert_file: str | None = None  # rediss://: a client certificate, for servers that ask for one
    key_file: str | None = None  # its private key, when not in cert_file

    def where(self) -> str:
        """The URL without its credentials: what logs may show."""
        u = urlsplit(self.url)
        return f"{u.scheme}://{u.hostname or ''}{f':{u.port}' if u.port else ''}{u.path}"


@dataclass(frozen=True)
class Sessions:
    dir: str | None = None  # default: the user's cache dir
    backend: str = "disk"  # disk: diskcache under ``dir``; redis: shared by every proxy on ``redis.url``
    redis: RedisSettings = RedisSettings()
    ttl: float = 3600.0
    cleanup_interval: float = 300.0
    # disk: the longest any store call waits for SQLite's lock; past it the request is planned without state
    timeout: float = 0.3
    retry_after: float = 5.0  # disk: once the store failed, requests skip it this long before one tries again
    session_headers: tuple[str, ...] = (
        "x-claude-code-session-id",
        "session_id",
        "session-id",
        "x-session-id",
        "conversation_id",
    )

    def directory(self) -> Path:
        if self.dir:
            return Path(self.dir).expanduser()
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "tooldisco" / "sessions"


@dataclass(frozen=True)
class Planning:
    """The worker threads that plan requests (``executor.FairExecutor``)."""

    workers: int = 4
    per_tenant: int = 1  # a tenant's requests occupy at most this many workers: the others stay for other tenants
    queue: int = 32  # a tenant's requests waiting for a worker; past it a request goes unprocessed
    wait: float = 30.0  # a request not started within this goes unprocessed
    switch_interval: float = 0.0002  # the GIL's switch interval: how long the event loop may wait on a planning thread
    # Tool catalogs kept parsed for the whole process (``core.catalog``): a 20,000-tool catalog
    # holds about 35 MiB, 50,000 about 90.
    catalog_cache_mb: int = 128


@dataclass(frozen=True)
class Telemetry:
    enabled: bool = True
    path: str = "tool_discovery.jsonl"
    include_prompts: bool = False  # user text (rollout queries) in records only when asked for


@dataclass(frozen=True)
class MetricsSettings:
    """Prometheus metrics (``engine.metrics``) served over HTTP; off while ``listen`` is None."""

    listen: str | None = None  # "HOST:PORT" as parsed (``parse_listen``); port 0: any free port

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) to bind, or None when metrics are off."""
        return parse_listen(self.listen, "metrics.listen") if self.listen else None


@dataclass(frozen=True)
class Price:
    """One row of ``prices``: what a model's tokens cost, in US dollars per million tokens."""

    match: tuple[str, ...]  # glob patterns over the request's model (matched by ``policy.pricing``)
    input: float  # the uncached part of the prompt
    cache_read: float
    cache_write: float
    output: float
    long_context: LongContext | None = None  # the prices of a request whose prompt is longer


@dataclass(frozen=True)
class LongContext:
    """A price row's long-context tier: a request whose prompt has more than ``above`` tokens
    is priced at these rates instead (each request by its own prompt)."""

    above: int
    input: float
    cache_read: float
    cache_write: float
    output: float


PIN_MODES = ("trust", "strict", "off")
HOLD_MODES = ("warn", "hold")


@dataclass(frozen=True)
class ClientMatch:
    """Which requests a ``policy.clients`` entry is for: every condition given must hold."""

    user_agent: str | None = None  # a glob over the User-Agent header, case-insensitive
    header: tuple[str, str] | None = None  # (lowercase name, glob over its value)
    key: str | None = None  # a prefix (8+ hex) of the credential's fingerprint (``tooldisco tools key-id``)


@dataclass(frozen=True)
class ClientRules:
    """What one ``policy.clients`` entry adds to the defaults for the requests it matches."""

    match: ClientMatch
    deny: tuple[str, ...] = ()
    always_load: tuple[str, ...] = ()
    max_loaded: int | None = None  # None: the default's


@dataclass(frozen=True)
class PolicySettings:
    """``policy:``: which tools an agent may see, and what the proxy does when a definition
    changes under a tenant or reads like an attack on the model (``policy.tool_policy``,
    ``engine.governance``)."""

    deny: tuple[str, ...] = ()  # tool-name globs never forwarded, found, loaded or dispatched
    always_load: tuple[str, ...] = ()  # globs over the client's tools kept loaded every turn
    max_loaded: int | None = None  # at most this many of the client's tools loaded in one request
    clients: tuple[ClientRules, ...] = ()  # the first that matches adds to the defaults
    pin: str = "trust"  # trust: a tenant's first sight pins a definition; strict: it waits for approval; off
    on_change: str = "warn"  # hold: a changed definition is withheld for its tenant until approved
    screen: bool = True  # screen each catalog's definitions once for hidden text and attacks on the model
    on_screen: str = "warn"  # hold: a flagged definition is withheld until approved
    approve: tuple[str, ...] = ()  # approvals in the config: NAME@FINGERPRINT (12 hex from ``tooldisco tools list``)
    # A request the proxy cannot apply a deny to (a body it cannot read or sign again, planning
    # overloaded): open: it goes as sent, with a warning; closed: refused (403) in the API's format.
    fail: str = "open"

    @property
    def denies(self) -> bool:
        """Whether any rule (the defaults or a client's) denies tools."""
        return bool(self.deny) or any(c.deny for c in self.clients)

    @property
    def rules(self) -> bool:
        """Whether any deny, always_load or max_loaded is set (else nothing is matched per request)."""
        return bool(self.deny or self.always_load or self.max_loaded is not None or self.clients)


@dataclass(frozen=True)
class Config:
    tool_discovery: ToolDiscovery = ToolDiscovery()
    hosts: tuple[str, ...] = DEFAULT_HOSTS
    sessions: Sessions = Sessions()
    telemetry: Telemetry = Telemetry()
    planning: Planning = Planning()
    metrics: MetricsSettings = MetricsSettings()
    prices: tuple[Price, ...] = ()  # first matching row prices a model; none: the turn is unpriced
    policy: PolicySettings = PolicySettings()
    websocket: str = "refuse"  # Codex tries a WebSocket first; refusing makes it use HTTP SSE
    # Largest body (request, or a buffered answer) decoded and processed; a larger one passes
    # as it came. Anthropic's Messages API refuses requests over 32 MB, the largest limit
    # among the APIs spoken, so no body above it can be improved.
    max_body_bytes: int = 32 * MiB
    warnings: tuple[str, ...] = ()  # non-fatal findings, logged by the addon

    def handles_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(fnmatch.fnmatchcase(host, pattern.lower()) for pattern in self.hosts)


@memoize(4 * MiB)  # keyed by tool names the client picks: bounded by bytes
def _matches(patterns: tuple[str, ...], name: str) -> bool:
    return any(name == p or fnmatch.fnmatchcase(name, p) for p in patterns)


# --- parsing -------------------------------------------------------------------------


def expand_env(value: str, key: str, env: Mapping[str, str]) -> str:
    """``${VAR}`` and ``${VAR:-default}``; an unset variable without default is an error."""

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{key}: environment variable {name} is not set (use ${{{name}:-default}})")

    return _ENV.sub(sub, value)


def parse_duration(value: Any, key: str) -> float:
    """Seconds from ``2s``, ``500ms``, ``5m``, ``1h`` or a bare number of seconds."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like 2s or 500ms, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ConfigError(f"{key}: expected a duration like 2s or 500ms, got {value!r}")
    if seconds <= 0:
        raise ConfigError(f"{key}: must be greater than zero, got {value!r}")
    return seconds


_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)$")


def parse_listen(value: Any, key: str) -> tuple[str, int]:
    """(host, port) from ``HOST:PORT`` (``[::1]:PORT`` for IPv6) or a bare port, which listens
    on 127.0.0.1. ``:PORT`` is refused rather than guessed: it reads as every interface to
    some and as this machine to others."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"{key}: expected HOST:PORT (e.g. 127.0.0.1:9464), got {value!r}")
    text = str(value).strip()
    if text.isdigit():
        host, port = "127.0.0.1", text
    else:
        host, sep, port = text.rpartition(":")
        if not sep or not host:
            hint = f"127.0.0.1{text} (this machine) or 0.0.0.0{text} (every interface)" if text.startswith(":") \
                else "127.0.0.1:9464"
            raise ConfigError(f"{key}: expected HOST:PORT, e.g. {hint}; got {value!r}")
        if ":" in host and not host.startswith("["):
            raise ConfigError(f"{key}: an IPv6 host goes in brackets, e.g. [::1]:9464; got {value!r}")
        if not _HOST.match(host):
            raise ConfigError(f"{key}: not a host name or address: {host!r}")
    if not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{key}: the port must be a number from 0 to 65535 (0: any free port), got {port!r}")
    return host.strip("[]"), int(port)


def format_listen(host: str, port: int) -> str:
    """``HOST:PORT``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Section:
    """Reads one mapping, records which keys were used, and rejects the rest."""

    def __init__(self, data: Any, key: str, env: Mapping[str, str]):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(data).__name__}")
        self.data, self.key, self.env, self.used = data, key, env, set()

    def _get(self, name: str) -> Any:
        self.used.add(name)
        value = self.data.get(name)
        if isinstance(value, str):
            value = expand_env(value, self.path(name), self.env)
        return value

    def path(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def has(self, name: str) -> bool:
        return name in self.data and self.data[name] is not None

    def section(self, name: str) -> "_Section":
        self.used.add(name)
        return _Section(self.data.get(name), self.path(name), self.env)

    def boolean(self, name: str, default: bool) -> bool:
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off", "1", "0"):
            return value.lower() in ("true", "yes", "on", "1")
        raise ConfigError(f"{self.path(name)}: expected true or false, got {value!r}")

    def integer(self, name: str, default: int, lo: int | None = None, hi: int | None = None) -> int:
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.path(name)}: expected a whole number, got {value!r}")
        return self._bounded(name, value, lo, hi)

    def number(self, name: str, default: float, lo: float | None = None, hi: float | None = None) -> float:
        value = self._get(name)
        if value is None:
            return default
        try:
            if isinstance(value, bool):
                raise ValueError
            value = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.path(name)}: expected a number, got {value!r}") from None
        return self._bounded(name, value, lo, hi)

    def _bounded(self, name: str, value: Any, lo: Any, hi: Any) -> Any:
        if lo is not None and value < lo:
            raise ConfigError(f"{self.path(name)}: must be at least {lo}, got {value}")
        if hi is not None and value > hi:
            raise ConfigError(f"{self.path(name)}: must be at most {hi}, got {value}")
        return value

    def string(self, name: str, default: str | None, choices: tuple[str, ...] | None = None) -> Any:
        value = self._get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ConfigError(f"{self.path(name)}: expected a string, got {value!r}")
        if choices is not None and value not in choices:
            raise ConfigError(f"{self.path(name)}: must be one of {', '.join(choices)}; got {value!r}")
        return value

    def duration(self, name: str, default: float) -> float:
        value = self._get(name)
        return default if value is None else parse_duration(value, self.path(name))

    def strings(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        self.used.add(name)
        value = self.data.get(name)
        if value is None:
            return default
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{self.path(name)}: expected a list of non-empty strings, got {value!r}")
        return tuple(expand_env(v, self.path(name), self.env) for v in value)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(f"{self.path(unknown[0])}: unknown key{_nearest(str(unknown[0]), self.used)}")


def _api(s: _Section) -> ApiConfig:
    d = ApiConfig()
    endpoint = s.string("endpoint", None)
    if endpoint and not re.match(r"^https?://", endpoint):
        raise ConfigError(f"{s.path('endpoint')}: must be an http:// or https:// URL, got {endpoint!r}")
    api = ApiConfig(
        endpoint=endpoint or None,
        api_key=s.string("api_key", None) or None,
        timeout=s.duration("timeout", d.timeout),
        max_request_bytes=s.integer("max_request_bytes", d.max_request_bytes, lo=1024),
        max_response_bytes=s.integer("max_response_bytes", d.max_response_bytes, lo=1024),
        send_definitions=s.boolean("send_definitions", d.send_definitions),
        rollout=s.string("rollout", d.rollout, ROLLOUTS),
        rollout_percent=s.number("rollout_percent", d.rollout_percent, lo=0.0, hi=100.0),
    )
    s.done()
    return api


def _nearest(word: str, valid) -> str:
    """``" (did you mean 'x'?)"`` for the closest valid name, or nothing when none is close."""
    close = difflib.get_close_matches(word, sorted(map(str, valid)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _tool_discovery(s: _Section, warn: Callable[[str], None]) -> ToolDiscovery:
    d = ToolDiscovery()
    chosen = s.string("strategy", d.strategy.value)
    if chosen not in STRATEGIES:  # a typo must not run as passthrough unnoticed
        raise ConfigError(f"{s.path('strategy')}: unknown strategy {chosen!r}{_nearest(chosen, STRATEGIES)}; "
                          f"one of {', '.join(STRATEGIES)}")
    strategy = Strategy(chosen)
    min_tools = s.integer("min_tools", d.min_tools, lo=0)
    max_tools = s.integer("max_tools", d.max_tools, lo=1)
    if max_tools < min_tools:
        raise ConfigError(f"{s.path('max_tools')}: must be at least min_tools ({min_tools}), got {max_tools}")
    name = s.string("search_tool_name", d.search_tool_name)
    if not TOOL_NAME.match(name):
        raise ConfigError(f"{s.path('search_tool_name')}: must match {TOOL_NAME.pattern}, got {name!r}")
    call_tool = s.string("call_tool_name", d.call_tool_name)
    if not TOOL_NAME.match(call_tool) or call_tool == name:
        raise ConfigError(f"{s.path('call_tool_name')}: must match {TOOL_NAME.pattern} and differ from "
                          f"search_tool_name, got {call_tool!r}")
    fallback = s.boolean("enable_search_fallback", d.enable_search_fallback)
    forced = strategy.search_fallback
    if forced is not None and s.has("enable_search_fallback") and fallback != forced:
        warn(f"{s.path('enable_search_fallback')}: forced to {str(forced).lower()} for strategy {strategy}")
    warn_share = s.number("context_warn_share", ToolDiscovery.context_warn_share, hi=1.0)
    if warn_share <= 0:
        raise ConfigError(f"{s.path('context_warn_share')}: must be greater than 0, got {warn_share}")
    search = s.section("search")
    defer = s.section("defer")
    native = s.section("native")
    learning = s.section("learning")
    td = ToolDiscovery(
        enabled=s.boolean("enabled", d.enabled),
        strategy=strategy,
        provider=s.string("provider", None),
        api=_api(s.section("api")),
        min_tools=min_tools,
        max_tools=max_tools,
        target_ratio=s.number("target_ratio", d.target_ratio, lo=0.0, hi=1.0),
        always_keep=s.strings("always_keep", ()),
        client_search_tools=s.strings("client_search_tools", ToolDiscovery.client_search_tools),
        enable_search_fallback=fallback if forced is None else forced,
        search_tool_name=name,
        call_tool_name=call_tool,
        max_search_results=s.integer("max_search_results", d.max_search_results, lo=1, hi=50),
        max_phantom_loops=s.integer("max_phantom_loops", d.max_phantom_loops, lo=1, hi=20),
        scorer=s.string("scorer", d.scorer, SCORERS),
        search=SearchConfig(
            backend=search.string("backend", SearchConfig.backend, SEARCH_BACKENDS),
            cache_dir=search.string("cache_dir", None),
            timeout=search.duration("timeout", SearchConfig.timeout),
        ),
        defer=DeferConfig(
            upfront=defer.integer("upfront", DeferConfig.upfront, lo=0),
            native_upfront=defer.boolean("native_upfront", DeferConfig.native_upfront),
            call_through=_call_through(defer),
            min_tools=defer.integer("min_tools", DeferConfig.min_tools, lo=0),
            min_tokens=defer.integer("min_tokens", DeferConfig.min_tokens, lo=0),
        ),
        native=NativeConfig(
            anthropic=_patterns(native, "anthropic", NativeConfig.anthropic),
            responses=_patterns(native, "responses", NativeConfig.responses),
            bedrock=_patterns(native, "bedrock", NativeConfig.bedrock),
        ),
        learning=LearningConfig(
            enabled=learning.boolean("enabled", LearningConfig.enabled),
            learn=learning.boolean("learn", LearningConfig.learn),
            half_life_days=learning.number("half_life_days", LearningConfig.half_life_days, lo=0.01),
            max_bytes=learning.integer("max_bytes", LearningConfig.max_bytes, lo=4096, hi=64 * MiB),
            flush_interval=learning.duration("flush_interval", LearningConfig.flush_interval),
            refresh_interval=learning.duration("refresh_interval", LearningConfig.refresh_interval),
        ),
        context_warn_share=warn_share,
    )
    search.done()
    defer.done()
    native.done()
    learning.done()
    s.done()
    return td


CALL_THROUGH_APIS = ("openai_chat", "gemini")


def _call_through(s: _Section) -> tuple[str, ...]:
    """``defer.call_through``: APIs from ``CALL_THROUGH_APIS`` (``[]``: off)."""
    apis = _patterns(s, "call_through", DeferConfig.call_through)
    if unknown := [a for a in apis if a not in CALL_THROUGH_APIS]:
        raise ConfigError(f"{s.path('call_through')}: {unknown[0]!r} is not one of {', '.join(CALL_THROUGH_APIS)}")
    return apis


def _patterns(s: _Section, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A list of strings (glob patterns, API names) where ``[]`` is a value (off), not "use the default"."""
    if isinstance(s.data.get(name), list) and not s.data[name]:
        s.used.add(name)
        return ()
    return s.strings(name, default)


def _session_backend(s: _Section) -> str:
    backend = s.string("backend", Sessions.backend, SESSION_BACKENDS)
    if backend == "redis" and importlib.util.find_spec("redis") is None:
        raise ConfigError(f"{s.path('backend')}: redis needs the redis package: pip install 'tooldisco[redis]'")
    return backend


def _redis(s: _Section) -> RedisSettings:
    d = RedisSettings()
    url = s.string("url", d.url)
    parts = urlsplit(url)
    try:
        _ = parts.port  # a bad port raises here, not at the first request
    except ValueError as e:
        raise ConfigError(f"{s.path('url')}: {e}") from None
    scheme = parts.scheme
    if scheme not in ("redis", "rediss", "unix"):  # never echo the URL: it may hold a password
        raise ConfigError(f"{s.path('url')}: must start with redis://, rediss:// or unix://")
    tls = {name: s.string(name, None) for name in ("ca_file", "cert_file", "key_file")}
    for name, path in tls.items():
        if path and scheme != "rediss":
            raise ConfigError(f"{s.path(name)}: TLS options need a rediss:// url")
        if path and not Path(path).expanduser().is_file():
            raise ConfigError(f"{s.path(name)}: no such file: {path}")
    if tls["key_file"] and not tls["cert_file"]:
        raise ConfigError(f"{s.path('key_file')}: needs cert_file")
    redis = RedisSettings(url=url, prefix=s.string("prefix", d.prefix), timeout=s.duration("timeout", d.timeout),
                          retry_after=s.duration("retry_after", d.retry_after), **tls)
    s.done()
    return redis


def _metrics(s: _Section) -> MetricsSettings:
    s.used.add("listen")
    value = s.data.get("listen")
    if isinstance(value, str):
        value = expand_env(value, s.path("listen"), s.env).strip()
    listen = format_listen(*parse_listen(value, s.path("listen"))) if value not in (None, "") else None
    s.done()
    return MetricsSettings(listen=listen)


PRICE_FIELDS = ("input", "cache_read", "cache_write", "output")


def _prices(top: _Section) -> tuple[Price, ...]:
    """``prices``: a list of rows, each ``match`` (a glob or a list of them) and the four prices
    ($ per million tokens, >= 0). ``input`` and ``output`` are required; a cache price left out
    is the input price (what those tokens cost uncached)."""
    top.used.add("prices")
    rows = top.data.get("prices")
    if rows is None:
        return ()
    if not isinstance(rows, list):
        raise ConfigError(f"{top.path('prices')}: expected a list of rows "
                          f"({{match, input, cache_read, cache_write, output}}), got {type(rows).__name__}")
    out = []
    for i, row in enumerate(rows):
        s = _Section(row, f"{top.path('prices')}[{i}]", top.env)
        match = s.strings("match", ())
        if not match:
            raise ConfigError(f"{s.path('match')}: required: a model glob or a list of them, e.g. claude-sonnet-4*")
        for name in ("input", "output"):
            if not s.has(name):
                raise ConfigError(f"{s.path(name)}: required ($ per million tokens)")
        price_in = _price(s, "input", 0.0)
        long = _long_context(s.section("long_context")) if s.has("long_context") else None
        out.append(Price(match=match, input=price_in, cache_read=_price(s, "cache_read", price_in),
                         cache_write=_price(s, "cache_write", price_in), output=_price(s, "output", 0.0),
                         long_context=long))
        s.done()
    return tuple(out)


def _long_context(s: _Section) -> LongContext:
    """``prices[].long_context``: ``above`` (tokens of a request's prompt) and the rates past it."""
    for name in ("above", "input", "output"):
        if not s.has(name):
            raise ConfigError(f"{s.path(name)}: required")
    above = s.integer("above", 1, lo=1)
    price_in = _price(s, "input", 0.0)
    long = LongContext(above=above, input=price_in, cache_read=_price(s, "cache_read", price_in),
                       cache_write=_price(s, "cache_write", price_in), output=_price(s, "output", 0.0))
    s.done()
    return long


def _price(s: _Section, name: str, default: float) -> float:
    value = s.number(name, default, lo=0.0)
    if not math.isfinite(value):
        raise ConfigError(f"{s.path(name)}: must be a finite number, got {value}")
    return value


_KEY_ID = re.compile(r"^[0-9a-f]{8,32}$")


def _policy(s: _Section) -> PolicySettings:
    d = PolicySettings()
    deny, always, most = _rules(s)
    clients = []
    s.used.add("clients")
    entries = s.data.get("clients")
    if entries is not None and not isinstance(entries, list):
        raise ConfigError(f"{s.path('clients')}: expected a list of {{match, deny, always_load, max_loaded}}")
    for i, entry in enumerate(entries or ()):
        c = _Section(entry, f"{s.path('clients')}[{i}]", s.env)
        c_deny, c_always, c_most = _rules(c)
        clients.append(ClientRules(_client_match(c.section("match")), c_deny, c_always, c_most))
        c.done()
    approve = s.strings("approve", ())
    for entry in approve:
        name, at, fp = entry.rpartition("@")
        if not at or not name or not re.match(r"^[0-9a-f]{8,32}$", fp):
            raise ConfigError(f"{s.path('approve')}: expected NAME@FINGERPRINT (8 or more hex digits, as "
                              f"`tooldisco tools list` prints it), got {entry!r}")
    policy = PolicySettings(
        deny=deny, always_load=always, max_loaded=most, clients=tuple(clients),
        pin=s.string("pin", d.pin, PIN_MODES), on_change=s.string("on_change", d.on_change, HOLD_MODES),
        screen=s.boolean("screen", d.screen), on_screen=s.string("on_screen", d.on_screen, HOLD_MODES),
        approve=approve, fail=s.string("fail", d.fail, ("open", "closed")),
    )
    s.done()
    return policy


def _rules(s: _Section) -> tuple[tuple[str, ...], tuple[str, ...], int | None]:
    """``deny``, ``always_load`` (tool-name globs) and ``max_loaded`` of a policy or a client entry."""
    most = s.integer("max_loaded", 0, lo=1) if s.has("max_loaded") else None
    s.used.add("max_loaded")
    return s.strings("deny", ()), s.strings("always_load", ()), most


def _client_match(s: _Section) -> ClientMatch:
    """``clients[].match``: ``user_agent`` (a glob), ``header`` ({NAME: glob}, one), ``key`` (a
    credential fingerprint prefix): the key itself never goes in a config."""
    header = None
    s.used.add("header")
    if (value := s.data.get("header")) is not None:
        if not isinstance(value, dict) or len(value) != 1 or not all(isinstance(v, str) for v in (*value, *value.values())):
            raise ConfigError(f"{s.path('header')}: expected one NAME: GLOB, e.g. {{x-team: platform}}")
        (name, glob), = value.items()
        header = (name.lower(), expand_env(glob, s.path("header"), s.env))
    key = s.string("key", None)
    if key is not None and not _KEY_ID.match(key.lower()):
        raise ConfigError(f"{s.path('key')}: expected a credential fingerprint (8 to 32 hex digits, as "
                          f"`tooldisco tools key-id` prints it), never the key itself")
    match = ClientMatch(user_agent=s.string("user_agent", None), header=header, key=key.lower() if key else None)
    if match == ClientMatch():
        raise ConfigError(f"{s.path('user_agent')}: a client entry's match needs user_agent, header or key")
    s.done()
    return match


def parse(data: Any, env: Mapping[str, str] | None = None) -> Config:
    """Build a Config from parsed YAML; raise ConfigError naming the key on any bad value."""
    env = os.environ if env is None else env
    warnings: list[str] = []
    top = _Section(data, "", env)
    pipes = top.section("pipes")
    # Other pipes (tool_output, compression…) belong to other components: ignore them.
    pipes.used.update(pipes.data)
    td = _tool_discovery(pipes.section("tool_discovery"), warnings.append)
    ss = top.section("sessions")
    sessions = Sessions(
        dir=ss.string("dir", None),
        backend=_session_backend(ss),
        redis=_redis(ss.section("redis")),
        ttl=ss.duration("ttl", Sessions.ttl),
        cleanup_interval=ss.duration("cleanup_interval", Sessions.cleanup_interval),
        timeout=ss.duration("timeout", Sessions.timeout),
        retry_after=ss.duration("retry_after", Sessions.retry_after),
        session_headers=tuple(h.lower() for h in ss.strings("session_headers", Sessions().session_headers)),
    )
    ss.done()
    ts = top.section("telemetry")
    telemetry = Telemetry(
        enabled=ts.boolean("enabled", True),
        path=ts.string("path", Telemetry.path),
        include_prompts=ts.boolean("include_prompts", Telemetry.include_prompts),
    )
    ts.done()
    ps = top.section("planning")
    planning = Planning(workers=ps.integer("workers", Planning.workers, 1, 256),
                        per_tenant=ps.integer("per_tenant", Planning.per_tenant, 1, 256),
                        queue=ps.integer("queue", Planning.queue, 1, 100_000),
                        wait=ps.duration("wait", Planning.wait),
                        switch_interval=ps.duration("switch_interval", Planning.switch_interval),
                        catalog_cache_mb=ps.integer("catalog_cache_mb", Planning.catalog_cache_mb, 0, 64 * 1024))
    ps.done()
    cfg = Config(
        tool_discovery=td,
        hosts=expand_hosts(top.strings("hosts", DEFAULT_HOSTS), top.path("hosts")),
        sessions=sessions,
        telemetry=telemetry,
        planning=planning,
        metrics=_metrics(top.section("metrics")),
        prices=_prices(top),
        policy=_policy(top.section("policy")),
        websocket=top.string("websocket", "refuse", WEBSOCKET_MODES),
        max_body_bytes=top.integer("max_body_bytes", Config.max_body_bytes, lo=64 * 1024),
        warnings=tuple(warnings),
    )
    top.done()
    return cfg


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read config: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: invalid YAML: {e}") from None
    try:
        return parse(data, env)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
