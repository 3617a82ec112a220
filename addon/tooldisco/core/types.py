"""Neutral types every layer speaks: tools, a request's view, calls and their results.

Why here, at the bottom: the policies, the search, the phantom loop and the session store
must not know which wire API they are working on, and the API packages must not depend on
them. Each adapter turns its API's body into these types and applies decisions back onto
the original body text (see ``jsonspan``), so what it does not understand passes through
byte-for-byte.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, Callable, Hashable, Mapping, TypeVar

from tooldisco.core import jsonspan
from tooldisco.core.tokens import estimate_tokens

R = TypeVar("R")


class Unsupported(Exception):
    """The body has a shape we do not handle: the request must pass through unchanged."""


@dataclass(frozen=True)
class Tool:
    """One client tool. ``raw`` is its definition text, re-emitted byte-for-byte."""

    name: str
    raw: str
    description: str = ""
    params: tuple[tuple[str, str], ...] = ()
    # Why it may never be deferred (server tool, client-deferred, client search tool), or None.
    pinned: str | None = None
    # Python's hash of every field, made once: a catalog's identity (``search.base.catalog_key``)
    # combines its tools' fingerprints, and the adapters hand out one (memoised) Tool per
    # definition text, so a session's catalog is not hashed anew, text by text, every search.
    fingerprint: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fingerprint", hash((self.name, self.raw, self.description, self.params, self.pinned)))

    @property
    def definition(self) -> Any:
        return json.loads(self.raw)

    @cached_property
    def identity(self) -> str:
        """The tool across requests, processes and proxies: a digest of what a search reads
        (name, description, parameters), so a tool whose definition changes is a new one.
        Unlike ``fingerprint`` it may be stored (learned priors are keyed by it)."""
        text = json.dumps([self.name, self.description, self.params], ensure_ascii=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=9).hexdigest()

    @property
    def search_text(self) -> str:
        """Name, description, parameter names and descriptions: what search reads."""
        parts = [self.name, self.description]
        for pname, pdesc in self.params:
            parts.append(pname)
            if pdesc:
                parts.append(pdesc)
        return "\n".join(p for p in parts if p)


#: What a catalog holds per character of its text: the text itself, the definitions cut from
#: it (the same characters again), the names, descriptions and parameter texts parsed out of
#: them (never more than the text) and the one marked copy native deferral keeps
#: (``ToolCatalog.marked``): charged from lengths alone, without walking the objects.
BYTES_PER_CHAR = 4
#: What a catalog holds per tool beyond its texts: the ``Tool`` object and its field headers,
#: the tuples, sets and dicts listing it, the word index and positions relevance keeps on it
#: (tracemalloc's figure on CPython 3.13, rounded up).
BYTES_PER_TOOL = 1024
#: Derived values kept per catalog (config-dependent verdicts, a session's deferred set's
#: search-tool description…); the least recently used goes past it.
MEMO_ENTRIES = 64


class ToolCatalog:
    """The tools one request offers, and what is derived from them alone.

    ``text``: the tools value as the body carries it ("" for a catalog not found by its text);
    ``raws``: its elements' texts, in order; ``error``: why the definitions are unusable (a
    duplicate name…), raised as ``Unsupported`` by every request that carries them."""

    def __init__(self, tools: tuple[Tool, ...], raws: tuple[str, ...] = (), text: str = "",
                 error: str | None = None) -> None:
        self.tools = tools
        self.raws = raws
        self.text = text
        self.error = error
        # Tools nested in a root member (``catalogs.load_request``'s ``inner``): that member decoded
        # without them (read-only: shared), and where their array is within ``text``.
        self.member: Any = None
        self.within: tuple[int, int] | None = None
        # Derived values: what the catalog alone (with a setting) decides, and what a session's
        # tool set decides, kept apart so that many sessions never push out the catalog's own.
        self._memo: OrderedDict[Hashable, Any] = OrderedDict()
        self._sets: OrderedDict[Hashable, Any] = OrderedDict()
        self._marked: tuple[Hashable, str] | None = None
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """What holding it costs, from lengths alone (``BYTES_PER_CHAR``, ``BYTES_PER_TOOL``)."""
        chars = len(self.text) or sum(map(len, self.raws))
        return BYTES_PER_CHAR * chars + BYTES_PER_TOOL * max(len(self.tools), len(self.raws))

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)

    @cached_property
    def name_set(self) -> frozenset[str]:
        return frozenset(self.names)

    @cached_property
    def by_name(self) -> Mapping[str, Tool]:
        """Read-only: shared by every request that carries the catalog."""
        return MappingProxyType({t.name: t for t in self.tools})

    @cached_property
    def tokens(self) -> int:
        """The definitions' estimated tokens, summed."""
        return sum(estimate_tokens(t.raw) for t in self.tools)

    @cached_property
    def client_deferred(self) -> int:
        return sum(t.pinned == "client_deferred" for t in self.tools)

    def derived(self, key: Hashable, make: Callable[[], R], per_set: bool = False) -> R:
        """``make()``, kept under ``key`` for later requests with this catalog. ``key`` must name
        everything besides the catalog that the value depends on (config values, a deferred
        set); ``per_set``: a value for one tool set of a session (there are as many as sessions),
        kept apart from the catalog's own. Each kind keeps its ``MEMO_ENTRIES`` most recent."""
        memo = self._sets if per_set else self._memo
        with self._lock:
            if key in memo:
                memo.move_to_end(key)
                return memo[key]  # type: ignore[no-any-return]
        value = make()
        with self._lock:
            memo[key] = value
            while len(memo) > MEMO_ENTRIES:
                memo.popitem(last=False)
        return value


    def marked(self, deferred: Hashable, make: Callable[[], str]) -> str:
        """``make()``: the elements as native deferral forwards them with ``deferred`` marked,
        joined. Kept for the next request that defers the same set: the sessions of a catalog
        defer all but the few tools they keep, so one copy (``BYTES_PER_CHAR`` charges it)
        spares marking the whole catalog on every request."""
        held = self._marked
        if held is not None and held[0] == deferred:
            return held[1]
        text = make()
        self._marked = (deferred, text)
        return text


def of_tools(tools: tuple[Tool, ...]) -> ToolCatalog:
    """A catalog of tools not found by their text (kept nowhere: what is derived lasts one view)."""
    return ToolCatalog(tools, tuple(t.raw for t in tools))



@dataclass(frozen=True)
class RequestView:
    """What the engine needs to know about a request, independent of the wire API."""

    tools: tuple[Tool, ...]
    query: str = ""  # last user message with real text
    first_user: str = ""  # first user message text: the fallback session key
    used: frozenset[str] = frozenset()  # tools whose results appear in the history
    forced: frozenset[str] = frozenset()  # tools named by tool_choice / allowed names
    stream: bool = False
    session_hint: str | None = None  # a session id the client put in the body
    continues: str | None = None  # a stored response this request chains from (Responses)
    model: str = ""  # the body's ``model`` ("" when the body names none: Gemini, Bedrock name it in the path)
    # ``tools`` with what is derived from them alone, shared by the requests that carry them
    # (``core.catalog``); None: made for this view when asked for (``offered``).
    catalog: ToolCatalog | None = field(default=None, compare=False, repr=False)

    def names(self) -> list[str]:
        return list(self.offered.names)

    @cached_property
    def offered(self) -> ToolCatalog:
        """``tools`` as a catalog: the shared one the adapter found, or one of this view's own."""
        if self.catalog is not None and self.catalog.tools is self.tools:
            return self.catalog
        return of_tools(self.tools)


@dataclass(frozen=True)
class ToolCall:
    """A call the model made. ``arguments`` is the parsed object, or the raw text if unparsable."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    content: str
    is_error: bool = False
    # Native deferral: the deferred tools this result loads where it stands (Anthropic
    # ``tool_reference`` blocks, a Responses ``tool_search_output``'s tools); the tool list stays.
    loads: tuple[Tool, ...] = ()


@dataclass(frozen=True)
class TokenUsage:
    """One upstream answer's tokens as the provider bills them, in four parts that add up to
    the bill: ``input`` (the uncached part of the prompt), ``cache_read``, ``cache_write`` and
    ``output`` (reasoning included). Why four: prices differ for each, and an API that counts
    cached tokens inside its input count (OpenAI, Gemini) must be split to be priced."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0

    TYPES = ("input", "cache_read", "cache_write", "output")

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(self.input + other.input, self.cache_read + other.cache_read,
                          self.cache_write + other.cache_write, self.output + other.output)

    def as_dict(self) -> dict[str, int]:
        return {"input": self.input, "cache_read": self.cache_read, "cache_write": self.cache_write,
                "output": self.output}


@dataclass(frozen=True)
class Target:
    """The real call a dispatcher call stands for."""

    name: str
    arguments: dict[str, Any]

    @property
    def text(self) -> str:
        """The arguments as the APIs that carry them as text write them (Chat)."""
        return jsonspan.dumps(self.arguments)
