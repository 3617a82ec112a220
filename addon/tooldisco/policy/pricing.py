"""What a model's tokens cost, and how big its context is: the shipped tables
(``tooldisco/data/prices.yaml``, ``context_windows.yaml``) under the config's ``prices`` rows.

Why shipped: a turn's cost is reported in the providers' own numbers, so the prices must be the
providers' published ones, each row naming its page and the day it was read. A model no row
names is unpriced (None), never given a neighbour's price.

Matching: a row's ``match`` globs (``fnmatch``, case-insensitive) are tried against the model
as the client named it (lowercased) and against its canonical form: the part after the last
``/`` (OpenRouter ``anthropic/claude-sonnet-4.5``, Vertex and ARN paths), without a Bedrock
region and vendor prefix (``us.anthropic.``) or version suffix (``-v1:0``), a Vertex ``@date``,
a ``[1m]`` tag, a date (``-20250929``, ``-2025-08-07``) or ``-latest``, and with a Claude
version's dots as dashes (``claude-sonnet-4.5`` is ``claude-sonnet-4-5``). The first row that
matches wins: the config's rows come before the shipped ones.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tooldisco.core.types import TokenUsage

DATA = Path(__file__).resolve().parent.parent / "data"
PRICES_FILE = DATA / "prices.yaml"
WINDOWS_FILE = DATA / "context_windows.yaml"
MAX_MEMO = 1024  # model strings whose lookups are kept (a client picks them: bounded)
PER = 1_000_000  # prices are per million tokens


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens of each billed part. A cache price the source does not
    publish is None, and a usage that needs it is left unpriced rather than guessed. ``long``:
    the prices of a whole request whose prompt (input and cache) is over ``above`` tokens."""

    match: tuple[str, ...]
    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    above: int | None = None
    long: Price | None = None
    source: str = ""
    date: str = ""

    def cost(self, usage: TokenUsage) -> float | None:
        """``usage`` priced, in US dollars; None when a part it has has no price here."""
        if self.long is not None and self.above is not None:
            if usage.input + usage.cache_read + usage.cache_write > self.above:
                return self.long.cost(usage)
        total = 0.0
        for count, rate in ((usage.input, self.input), (usage.cache_read, self.cache_read),
                            (usage.cache_write, self.cache_write), (usage.output, self.output)):
            if count:
                if rate is None:
                    return None
                total += count * rate
        return total / PER


@dataclass(frozen=True)
class Window:
    """A model's context window in tokens, as its maker publishes it."""

    match: tuple[str, ...]
    tokens: int
    source: str = ""
    date: str = ""


def usage_without(first_round: TokenUsage, shown_output: int, removed_tool_tokens: int) -> TokenUsage:
    """The turn as if the client's own request had gone out unchanged.

    Prompt side: the first upstream round's ``input``, ``cache_read`` and ``cache_write`` (the
    request the proxy sent in the client's place), with ``removed_tool_tokens`` (the tool
    definitions the proxy took out) put back, cached as that request would have been: into
    ``cache_read`` when the first round's prompt was read from the cache (``cache_read > 0``:
    the definitions sit in the cached prefix, before the conversation), else into ``input``.
    Output side: ``shown_output``, the output the client was shown (hidden rounds had no
    counterpart in the client's own request). Negative counts are taken as 0."""
    removed = max(removed_tool_tokens, 0)
    cached = first_round.cache_read > 0
    return TokenUsage(
        input=first_round.input + (0 if cached else removed),
        cache_read=first_round.cache_read + (removed if cached else 0),
        cache_write=first_round.cache_write,
        output=max(shown_output, 0),
    )


_BEDROCK_PREFIX = re.compile(
    r"^(?:(?:us|eu|apac|au|ca|jp|global|us-gov)\.)?"
    r"(?:anthropic|amazon|meta|mistral|openai|google|deepseek|qwen|cohere|ai21|writer|moonshot|minimax)\.")
_SUFFIXES = (
    re.compile(r"-v\d+(?::\d+)?$"),  # Bedrock: -v1:0
    re.compile(r"@(?:\d{8}|latest|default)$"),  # Vertex: @20250929
    re.compile(r"\[1m\]$"),  # Claude Code's 1M-context tag
    re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$"),  # dated snapshots
    re.compile(r"-latest$"),
)
_CLAUDE_DOT = re.compile(r"(?<=\d)\.(?=\d)")


def canonical(model: str) -> str:
    """The model id without the decorations providers and gateways add (the module docstring)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    name = _BEDROCK_PREFIX.sub("", name)
    for suffix in _SUFFIXES:
        name = suffix.sub("", name)
    if name.startswith("claude"):
        name = _CLAUDE_DOT.sub("-", name)
    return name


def _matches(globs: tuple[str, ...], forms: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(form, glob) for glob in globs for form in forms)


class PriceTable:
    """The price and context-window rows, first match wins; lookups memoised per model string."""

    def __init__(self, prices: Iterable[Price] = (), windows: Iterable[Window] = ()) -> None:
        self.prices = tuple(prices)
        self.windows = tuple(windows)
        self._price_memo: dict[str, Price | None] = {}
        self._window_memo: dict[str, int | None] = {}

    @classmethod
    def load(cls, overrides: Iterable[Mapping[str, Any] | Any] | None = None,
             prices_file: Path = PRICES_FILE, windows_file: Path = WINDOWS_FILE) -> PriceTable:
        """The shipped tables, with ``overrides`` (rows of a ``prices:`` config section: ``match``
        and the four prices, as mappings or objects with those attributes) tried first. Load
        it once per process: the engine keeps the table."""
        rows = [_price_row(row, "config") for row in overrides or ()]
        rows += [_price_row(row, str(prices_file)) for row in _rows(prices_file, "prices")]
        windows = [_window_row(row, str(windows_file)) for row in _rows(windows_file, "context_windows")]
        return cls(rows, windows)

    def price(self, model: str | None) -> Price | None:
        """The first row that prices ``model``; None: unpriced."""
        if not model:
            return None
        if model not in self._price_memo:
            forms = _forms(model)
            self._remember(self._price_memo, model, next((p for p in self.prices if _matches(p.match, forms)), None))
        return self._price_memo[model]

    def cost(self, model: str | None, usage: TokenUsage) -> float | None:
        """``usage`` of ``model`` in US dollars; None when the model (or a part it used) has no price."""
        price = self.price(model)
        return None if price is None else price.cost(usage)

    def cost_without(self, model: str | None, first_round: TokenUsage, shown_output: int,
                     removed_tool_tokens: int) -> float | None:
        """The turn priced as if the client's own request had gone out (``usage_without``)."""
        return self.cost(model, usage_without(first_round, shown_output, removed_tool_tokens))

    def context_window(self, model: str | None) -> int | None:
        """``model``'s context window in tokens; None when no row names it."""
        if not model:
            return None
        if model not in self._window_memo:
            forms = _forms(model)
            row = next((w for w in self.windows if _matches(w.match, forms)), None)
            self._remember(self._window_memo, model, None if row is None else row.tokens)
        return self._window_memo[model]

    def context_share(self, tool_tokens: int, model: str | None) -> float | None:
        """The share of ``model``'s context window that ``tool_tokens`` take; None when unknown."""
        window = self.context_window(model)
        return None if not window else max(tool_tokens, 0) / window

    @staticmethod
    def _remember(memo: dict[str, Any], key: str, value: Any) -> None:
        if len(memo) >= MAX_MEMO:
            memo.clear()
        memo[key] = value


def _forms(model: str) -> tuple[str, ...]:
    raw = model.strip().lower()
    return (raw, canonical(model))


def _rows(path: Path, key: str) -> list[Any]:
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    rows = data.get(key) if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a list under {key!r}")
    return rows


def _field(row: Mapping[str, Any] | Any, name: str) -> Any:
    return row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)


def _globs(row: Mapping[str, Any] | Any, where: str) -> tuple[str, ...]:
    match = _field(row, "match")
    globs = (match,) if isinstance(match, str) else tuple(match or ())
    if not globs or not all(isinstance(g, str) and g for g in globs):
        raise ValueError(f"{where}: a row needs match: a model glob or a list of them")
    return tuple(g.lower() for g in globs)


def _rate(row: Mapping[str, Any] | Any, name: str, where: str, required: bool) -> float | None:
    value = _field(row, name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{where}: {name} must be a non-negative number ($ per million tokens), got {value!r}")
    return float(value)


def _price_row(row: Mapping[str, Any] | Any, where: str, globs: tuple[str, ...] | None = None) -> Price:
    globs = globs if globs is not None else _globs(row, where)
    long_row = _field(row, "long_context")
    long = above = None
    if long_row is not None:
        above = _field(long_row, "above")
        if isinstance(above, bool) or not isinstance(above, int) or above <= 0:
            raise ValueError(f"{where}: long_context.above must be a positive token count, got {above!r}")
        long = _price_row(long_row, where, globs)
    return Price(match=globs, input=_rate(row, "input", where, True) or 0.0, output=_rate(row, "output", where, True) or 0.0,
                 cache_read=_rate(row, "cache_read", where, False), cache_write=_rate(row, "cache_write", where, False),
                 above=above, long=long, source=str(_field(row, "source") or ""), date=str(_field(row, "date") or ""))


def _window_row(row: Mapping[str, Any] | Any, where: str) -> Window:
    tokens = _field(row, "tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        raise ValueError(f"{where}: tokens must be a positive count, got {tokens!r}")
    return Window(_globs(row, where), tokens, str(_field(row, "source") or ""), str(_field(row, "date") or ""))
