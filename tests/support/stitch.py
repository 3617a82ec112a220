"""Driving a stitcher as the runner does, and what each API's stitcher tests hand the contract.

Why here: every API's stitcher is checked the same way (any chunking of the upstream rounds
gives one valid client stream that the API's official SDK reads as the merge of the rounds,
without a trace of the search), so the chunkings, the runner's loop and the shape of an
API's case (``Api``) live once. tests/unit/apis/test_stitch_contract.py runs the scenarios every
API shares; tests/unit/apis/<api>/test_stitch.py build their ``Api`` and test what only they have.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tooldisco.apis.base import Failure, RoundEnd

P = "gateway_search_tools"
Chunker = Callable[[bytes], list[bytes]]


# -- chunkings: how the upstream's bytes may arrive ----------------------------------------------


def whole(body: bytes) -> list[bytes]:
    return [body]


def every_byte(body: bytes) -> list[bytes]:
    return [body[i : i + 1] for i in range(len(body))]


def random_splits(seed: int) -> Chunker:
    """Seeded cuts, from single bytes to large pieces (the same for a body on every run)."""

    def split(body: bytes) -> list[bytes]:
        rng = random.Random(seed + len(body))
        chunks, pos = [], 0
        while pos < len(body):
            step = rng.randint(1, rng.choice([3, 17, 200]))
            chunks.append(body[pos : pos + step])
            pos += step
        return chunks

    split.__name__ = f"random_{seed}"
    return split


CHUNKERS = [whole, every_byte, *(random_splits(seed) for seed in range(1, 7))]


def chunker_id(chunker: Chunker) -> str:
    return chunker.__name__


# -- the runner's loop ----------------------------------------------------------------------------


def drive(adapter: Any, rounds: list[bytes], chunker: Chunker = whole, failure: Failure | None = None,
          body: str = "{}", dispatch: Any = None, used: list[Any] | None = None) -> tuple[bytes, list[RoundEnd]]:
    """The client bytes of ``rounds`` (each the upstream's answer to one forward) fed as the runner
    feeds them, and how each round ended. After each round but the last the runner re-forwards
    (``next_round``); with ``failure`` the last round is re-forwarded too and the re-forward fails.
    An upstream error ends the stream (then only ``finish``: what is still owed), a truncated
    round too: as the upstream ended it when nothing in it was changed (``finish``), else with
    the API's error (``fail``). ``dispatch``: call-through, the stitcher's ``Dispatch``. ``used``: gets the stitcher."""
    stitcher = adapter.stitcher(P, body) if dispatch is None else adapter.stitcher(P, body, dispatch)
    if used is not None:
        used.append(stitcher)
    out = bytearray()
    ends: list[RoundEnd] = []
    for k, data in enumerate(rounds, 1):
        for chunk in chunker(data):
            out += stitcher.feed(chunk)
        end = stitcher.end_round()
        ends.append(end)
        if end.error is not None:
            return bytes(out + stitcher.finish()), ends
        if (end.message is None or not end.complete) and stitcher.untouched:  # as the upstream ended it
            return bytes(out + stitcher.finish()), ends
        if end.message is None or not end.complete:
            return bytes(out + stitcher.fail(Failure(502, message="upstream stream ended early"))), ends
        if k < len(rounds) or failure is not None:
            stitcher.next_round()
    return bytes(out + (stitcher.fail(failure) if failure is not None else stitcher.finish())), ends


def shown_as_client_reads_it(adapter: Any, stitcher: Any, got: dict[str, Any]) -> None:
    """What the stitcher assembled of the events it emitted (``shown``: the runner keeps it of a
    turn instead of parsing the stream again) is what the client's decoder read: its history
    entries and its calls."""
    own = stitcher.shown()
    assert own is not None
    ours = own.message()
    assert adapter.shown(ours) == adapter.shown(got)
    assert [(c.name, c.arguments) for c in adapter.calls(ours)] == [(c.name, c.arguments) for c in adapter.calls(got)]


def decoder_of(adapter: Any, body: bytes) -> Any:
    """The API's own decoder after the whole of ``body`` (its ``message()``, ``error``, ``done``)."""
    decoder = adapter.decoder()
    decoder.feed(body)
    decoder.feed(b"")
    return decoder


def summed(values: list[Any]) -> Any:
    """Numbers added leaf by leaf across ``values`` (usage objects of the same shape); anything
    else as the first has it: the independent oracle for usage summed over rounds."""
    first = values[0]
    if isinstance(first, bool) or not isinstance(first, (int, dict, list)):
        return first
    if isinstance(first, int):
        return sum(values)
    if isinstance(first, list):
        return [summed([v[i] for v in values]) for i in range(len(first))]
    keys = list(dict.fromkeys(k for v in values for k in v))
    return {k: summed([v[k] for v in values if k in v]) for k in keys}


# -- one API under the contract -------------------------------------------------------------------


@dataclass(frozen=True)
class Api:
    """One API's stitcher as the contract tests it: upstream rounds written as its provider
    writes them, and its oracles."""

    adapter: Any
    # Upstream rounds by role: "search" (visible text, then a search call), "search_2" (a search
    # call only), "call" (text and a visible call), "text" (text only), "mixed" (text, a search
    # call and a real call: never re-forwarded).
    rounds: Mapping[str, bytes]
    error_round: bytes  # "call" cut after its first visible event, then the upstream's in-stream error
    plain: tuple[bytes, ...]  # rounds without a search, which pass byte for byte
    hidden: tuple[bytes, ...]  # never in a client stream: the search calls' ids and signatures
    expected: Callable[[list[dict[str, Any]]], dict[str, Any]]  # the rounds' messages -> what the client decodes
    check: Callable[[bytes, dict[str, Any]], None]  # the API's grammar and its SDK read the stream as ``got``
    sdk: Callable[[bytes], Any]  # the official SDK reading a client stream; raises ``sdk_error`` on an error
    sdk_error: type[Exception]
    stop: Callable[[dict[str, Any]], Any]  # a message's stop reason
    stops: tuple[Any, Any]  # the stop reasons after a visible call, and after text (the same if the API has one)
    ident: Callable[[dict[str, Any]], Any]  # a message's identity (id, created...): the client sees round one's
    usage: Callable[[dict[str, Any]], Any]  # a message's usage (and metrics): summed over rounds
    body: str = "{}"  # the client's request


def stitched(api: Api, rounds: list[bytes], chunker: Chunker = whole) -> tuple[bytes, dict[str, Any], list[RoundEnd]]:
    """Every oracle on the client stream of ``rounds`` run to the end: each round complete and
    decoded as the loop needs it, no trace of the search, the API's decoder reads ``expected``
    of the rounds, and the API's grammar and SDK agree. The client bytes, message, round ends."""
    used: list[Any] = []
    client, ends = drive(api.adapter, rounds, chunker, body=api.body, used=used)
    assert all(end.complete and end.error is None for end in ends)
    assert [end.message for end in ends] == [decoder_of(api.adapter, r).message() for r in rounds]
    assert P.encode() not in client and not any(trace in client for trace in api.hidden)
    got = decoder_of(api.adapter, client).message()
    assert got == api.expected([end.message for end in ends])
    shown_as_client_reads_it(api.adapter, used[0], got)
    api.check(client, got)
    return client, got, ends


def after_a_search(stitcher: Any, search: bytes, body: bytes, chunker: Chunker) -> tuple[bytes, RoundEnd, RoundEnd]:
    """The client bytes of a search round then ``body`` (a recorded answer) through ``stitcher``,
    each cut by ``chunker``, and how the two rounds ended (both checked whole)."""
    client = b"".join(stitcher.feed(chunk) for chunk in chunker(search))
    first = stitcher.end_round()
    assert first.complete and first.message is not None
    stitcher.next_round()
    client += b"".join(stitcher.feed(chunk) for chunk in chunker(body))
    second = stitcher.end_round()
    assert second.complete and second.message is not None and second.error is None
    return client + stitcher.finish(), first, second
