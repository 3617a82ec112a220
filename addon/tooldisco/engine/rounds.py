"""The rounds a phantom loop really sent upstream, put back where the client's history has their stitch.

Why: a turn that searched reached the client as one message stitched from several upstream
rounds, the search exchange removed. Sent back as the client keeps it, that message is one
the upstream never produced: the provider's prompt cache of the real conversation stops
matching there, tools a hidden search loaded (``tool_reference`` blocks, appended
definitions) are gone, and signatures span rounds they were not made for. So when a turn
settles, the entries the upstream really saw (round one's model turn, the hidden results,
…, the last round's model turn) are kept under a digest of the message the client was
shown; a later request whose history carries exactly that message gets them back in its
place. Anything else (an edited, compacted or re-ordered history) passes as the client sent it.

A mixed turn (the model searched and called a client tool at once) cannot be re-forwarded:
the client must answer its call first. Its model turn is kept as the model made it, search
calls included, followed by the results the proxy answered those calls with; when the
client's next request brings its own results, the hidden ones go first in the same results
turn (``Adapter.with_hidden_results``). So the model finds its search answered, the tools it found
(call-through's dispatcher, native ``tool_reference`` loads) are known to it, and it does
not search again.

"Exactly": equal as JSON values (SDKs re-serialize, so key order and whitespace may
differ), a member set to ``null`` counting as absent, over what the adapter says a client
must keep (``Adapter.comparable``).

Pure: the caller reads and writes the store.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tooldisco.core import jsonspan
from tooldisco.core.bytecache import MiB, memoize
from tooldisco.apis.base import Adapter
from tooldisco.core.types import ToolResult

MAX_ROUNDS_BYTES = 4 << 20  # a larger turn is not kept: its next request passes as the client sends it


@dataclass(frozen=True)
class Rounds:
    """One turn's real entries (texts as the upstream read them), under the digest of what the client saw."""

    digest: str
    entries: list[str]

    @property
    def size(self) -> int:
        return sum(len(e) for e in self.entries)


def digest(entries: Sequence[Any]) -> str:
    return hashlib.sha256(_canonical(entries).encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(_without_nulls(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _spans(body: str, path: Sequence[str]) -> list[tuple[int, int]] | None:
    """The history's element spans; None when it is not an array (a Responses string input)."""
    try:  # the parse's own spans where it decoded the history (``catalogs.load_request``)
        return jsonspan.find_elements(body, path)
    except ValueError:
        return None


def of_turn(adapter: Adapter, first: str, sent: str, last: dict[str, Any], shown: dict[str, Any],
            hide: Callable[[dict[str, Any]], dict[str, Any]], hidden: Sequence[ToolResult] = ()) -> Rounds | None:
    """What a settled turn really sent: ``first`` the request as first forwarded, ``sent`` the
    last re-forward (``first`` when there was none), ``last`` the last round's message,
    ``shown`` the client's (merged) one.

    The entries the loop appended to the history, then the last round's model turn the way the
    loop would have sent it on, under the digest of what the client saw. ``hidden``: a mixed
    finish's answers to the calls the client never saw; the turn is kept with those calls and,
    last, the entries with their results. Without them the calls the loop was never answered
    for go (``hide``: a max-loops finish's search calls, ``PhantomLoop.hide``). None when the
    history lives on the server, or when the client saw the one round the upstream made as it
    was made (a call-through call is shown as the real tool's: the step it was made in is kept)."""
    path = adapter.history_path(first)
    if path is None:
        return None
    before = _spans(first, path)
    start = 1 if before is None else len(before)  # a string input becomes one message
    seen = digest(adapter.comparable(adapter.shown(shown)))
    if not hidden and len(_spans(sent, path) or ()) <= start and seen == digest(adapter.comparable(adapter.shown(last))):
        return None  # nothing was re-forwarded, and the client saw the one real round as it came
    final = adapter.append_round(sent, last, hidden, []) if hidden else adapter.append_round(sent, hide(last), [], [])
    spans = _spans(final, path) or []
    entries = [final[a:b] for a, b in spans[start:]]
    while not hidden and entries and not adapter.produced(json.loads(entries[-1])):
        entries.pop()  # the empty results turn that append_round opened for no results
    if not entries:
        return None
    return Rounds(seen, entries)


def restore(adapter: Adapter, body: str, lookup: Callable[[str], list[str] | None]) -> tuple[str, int]:
    """``body`` with each run of model entries that is a stitched message replaced by its real
    rounds (``lookup``: digest -> entries, or None); and how many were replaced."""
    path = adapter.history_path(body)
    spans = _spans(body, path) if path is not None else None
    if not spans:
        return body, 0
    texts = [body[a:b] for a, b in spans]
    # The entries as the parse decoded them (``catalogs.load_request``), else each decoded here (memoised).
    values = jsonspan.recalled(body, ("values", path[0])) if path is not None and len(path) == 1 else None
    values = values if isinstance(values, list) and len(values) == len(texts) else None
    produced = [adapter.produced(v) for v in values] if values is not None else [_produced(adapter, t) for t in texts]
    edits: list[tuple[int, int, str]] = []
    i = 0
    while i < len(texts):
        if not produced[i]:
            i += 1
            continue
        j = i
        while j < len(texts) and produced[j]:
            j += 1
        run = tuple(texts[i:j])
        if (found := lookup(_run_digest(adapter, run, values[i:j] if values is not None else None))) is not None:
            # A mixed turn's rounds end with the results of the calls the client never saw.
            made = len(found)
            while made and not _produced(adapter, found[made - 1]):
                made -= 1
            hidden, end = found[made:], j
            while end < len(texts) and not produced[end]:
                end += 1
            answers = _answers(adapter, tuple(found[:made]), tuple(hidden), tuple(texts[j:end]))
            if answers is None:  # no results turn of the client's to join: passes as sent
                i = j
                continue
            restored = adapter.adopt(found[:made], texts[i:j], hidden)
            if answers == texts[j:end]:  # the client's results stay as they are, bytes and all
                end, answers = j, []
            edits.append((spans[i][0], spans[end - 1][1], ",".join([*restored, *answers])))
        i = j
    for a, b, text in reversed(edits):
        body = jsonspan.replace(body, (a, b), text)
    return body, len(edits)


# Every request carries the whole history again: what each entry is, and each run's digest,
# are worked out once per entry text (parsing and canonicalising every message of a long
# history on every turn would put that work in every request's path).


@memoize(8 * MiB, key=lambda adapter, text: (adapter.api, text))
def _produced(adapter: Adapter, text: str) -> bool:
    return adapter.produced(json.loads(text))


@memoize(8 * MiB, key=lambda adapter, made, hidden, following: (adapter.api, made, hidden, following))
def _answers(adapter: Adapter, made: tuple[str, ...], hidden: tuple[str, ...],
             following: tuple[str, ...]) -> list[str] | None:
    """The client's results after a restored turn, as the upstream must get them (``with_hidden_results``):
    the same on every later request, so worked out once."""
    return adapter.with_hidden_results(made, hidden, following)


@memoize(8 * MiB, key=lambda adapter, texts, values: (adapter.api, texts))
def _run_digest(adapter: Adapter, texts: tuple[str, ...], values: list[Any] | None) -> str:
    """``texts``' digest; ``values``: the texts decoded already (None: decoded here)."""
    return digest(adapter.comparable(values if values is not None else [json.loads(t) for t in texts]))
