"""What a turn cost, in the providers' own numbers: its usage, priced, beside the same turn
priced as if the client's own request had gone out; and how much of the model's context the
client's tool definitions take.

Why here and not in the report: every answer the proxy relays carries the provider's usage, so
the record of a turn can say what it cost when it is closed, and the metrics, the telemetry and
the report then read one figure instead of each guessing from tool sizes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from loguru import logger

from tooldisco.core.types import TokenUsage
from tooldisco.engine.telemetry import Record
from tooldisco.policy import pricing

# Sessions already warned about their tool definitions' share of the context: one line each.
MAX_WARNED_SESSIONS = 10_000
# How far the provider's count of a prompt may be from the estimate (four characters a token)
# for the estimate's scale to be corrected by it: past this, the estimate is kept as it is.
MIN_SCALE, MAX_SCALE = 0.25, 4.0


@dataclass
class Tally:
    """The upstream answers of one turn as they come: each one's kind and status into the
    record, their usage summed, the first answer's usage apart (what the client's own request
    would have cost is priced from it), and each answer's usage kept (each is priced alone: a
    long-context price applies to one request's prompt, never to a turn's sum)."""

    record: Record
    total: TokenUsage | None = None
    first: TokenUsage | None = None
    answers: int = 0
    each: list[TokenUsage] = field(default_factory=list)  # the usage of every answer that reported one
    _kinds: list[str] = field(default_factory=list)

    def answered(self, status: int, usage: TokenUsage | None) -> None:
        """One upstream answer: the turn's first is the client's request, every later one the
        proxy's own (a hidden round, a fail-open resend). A success without usage counts as unreported."""
        kind = "client" if self.answers == 0 else "hidden"
        self.answers += 1
        self.record.upstream.append([kind, status])
        if status != 200:
            return
        if usage is None:
            self.record.usage_unreported += 1
            return
        if self.first is None:
            self.first = usage
        self.each.append(usage)
        self.total = usage if self.total is None else self.total + usage
        self.record.usage = self.total.as_dict()


class Accounting:
    """Prices a closed turn and measures its tools' share of the context; one per engine."""

    def __init__(self, prices: pricing.PriceTable, warn_share: float) -> None:
        self.prices = prices
        self.warn_share = warn_share
        self._warned: OrderedDict[str, None] = OrderedDict()

    def complete(self, record: Record, tally: Tally | None = None, prompt_chars: int = 0) -> None:
        """Fill the record's cost and context share. ``tally``: the turn's upstream answers
        (None: the record has none, e.g. a request planned but never answered through the
        proxy's loop). ``prompt_chars``: the size of the first request as forwarded, which
        scales the estimate of the tool tokens the proxy took out of the prompt to the
        provider's own count of that prompt. Never raises."""
        try:
            self._share(record)
            if tally is not None and tally.total is not None:
                self._cost(record, tally, prompt_chars)
        except Exception as e:
            logger.opt(exception=e).debug("turn not priced")

    def _share(self, record: Record) -> None:
        window = self.prices.context_window(record.model or "")
        if window is None or window <= 0:
            return
        record.context_window = window
        record.context_share = round(record.tool_tokens_before / window, 4)
        if record.context_share > self.warn_share and record.session and record.session not in self._warned:
            self._warned[record.session] = None
            if len(self._warned) > MAX_WARNED_SESSIONS:
                self._warned.popitem(last=False)
            logger.warning("tool definitions take {:.0%} of {}'s context window ({:,} of {:,} tokens) in session {}",
                           record.context_share, record.model, record.tool_tokens_before, window, record.session)

    def _cost(self, record: Record, tally: Tally, prompt_chars: int) -> None:
        assert tally.total is not None and tally.first is not None
        model = record.model or ""
        costs = [self.prices.cost(model, usage) for usage in tally.each]  # each request priced by its own prompt
        record.cost_usd = None if None in costs else _rounded(sum(c for c in costs if c is not None))
        removed = max(record.tool_tokens_before - record.tool_tokens_after, 0)
        removed = round(removed * _scale(tally.first, record, prompt_chars))
        without = pricing.usage_without(tally.first, tally.total.output, removed)
        record.cost_usd_without = _rounded(self.prices.cost(model, without))


def _scale(first: TokenUsage, record: Record, prompt_chars: int) -> float:
    """The provider's count of the first prompt over the estimate of it: the tool tokens the
    proxy took out are estimated at four characters a token, and corrected by how far that
    estimate was from the provider's own count of the prompt that went (1.0 when unknown)."""
    if record.tool_tokens_wire > record.tool_tokens_after:
        # Native deferral: the body holds every definition but the prompt few of them; the
        # prompt's estimate would be a small difference of two large ones, too rough to scale by
        # (measured: 1.4x high on the session benchmark, where the unscaled estimate is within 2%).
        return 1.0
    estimate = (prompt_chars + 3) // 4
    counted = first.input + first.cache_read + first.cache_write
    if estimate <= 0 or counted <= 0:
        return 1.0
    return min(max(counted / estimate, MIN_SCALE), MAX_SCALE)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 8)
