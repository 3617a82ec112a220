"""Gemini recordings of real provider streams (tests/conformance/recordings), in both framings,
through the stitcher. Why: the synthetic rounds of test_stitch.py are what we think Google
sends; these are what it sent (the array's ``[{...}\\n,\\r\\n{...}]``, CRLF SSE, chunks after the
finishing one). A turn without a search must reach the client as the upstream sent it, byte for
byte, however the body was cut; a turn after a search must read (our decoder, google-genai) as
the recording's own content.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conformance.replay import Recording, load, search_round
from tests.support.stitch import CHUNKERS, P, Chunker, after_a_search, chunker_id, decoder_of
from tests.support.stitch_gemini import decoded, elements, sdk
from tooldisco.apis.gemini import stream as gemini
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.gemini.messages import merge

RECORDINGS = [r for r in load() if r.api == "gemini" and r.stream and r.status == 200]
IDS = [r.id.rsplit("/", 1)[-1] for r in RECORDINGS]


def adapter(rec: Recording) -> GeminiAdapter:
    return GeminiAdapter(stream=True, sse=rec.sse)


def test_the_corpus_has_both_framings() -> None:
    assert {r.sse for r in RECORDINGS} == {True, False}


def plain(rec: Recording, chunks: list[bytes]) -> bytes:
    """What the client gets of a round one without a search, as the runner drives it: the feeds,
    then ``finish``."""
    stitcher = adapter(rec).stitcher(P, "{}")
    out = b"".join(stitcher.feed(chunk) for chunk in chunks)
    stitcher.end_round()  # complete or not, an error in it or not: it ends as the upstream ended it
    assert stitcher.untouched
    return out + stitcher.finish()


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
@pytest.mark.parametrize("rec", RECORDINGS, ids=IDS)
def test_a_recording_without_search_passes_byte_for_byte(rec: Recording, chunker: Chunker) -> None:
    assert plain(rec, chunker(rec.body)) == rec.body


@pytest.mark.parametrize("rec", RECORDINGS, ids=IDS)
def test_a_recording_written_event_by_event_passes_each_chunk_at_once(rec: Recording) -> None:
    """The finishing chunk too: nothing waits for the runner in a round that hid nothing."""
    stitcher = adapter(rec).stitcher(P, "{}")
    pieces = rec.events
    got = [stitcher.feed(piece) for piece in pieces]
    if rec.sse:
        assert got == pieces
    else:  # array lines: each element with the line that completes it, the line end after it with the next
        for i in range(len(pieces)):
            assert b"".join(got[: i + 1]) == b"".join(pieces[: i + 1]).rstrip(b"\r\n]")
    assert stitcher.end_round().complete
    assert b"".join(got) + stitcher.finish() == rec.body


@settings(max_examples=300)
@given(data=st.data())
def test_a_recording_cut_anywhere_passes_byte_for_byte(data: st.DataObject) -> None:
    rec = data.draw(st.sampled_from(RECORDINGS))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(rec.body) - 1), max_size=40)))
    chunks = [rec.body[a:b] for a, b in zip([0, *cuts], [*cuts, len(rec.body)])]
    assert plain(rec, chunks) == rec.body


@settings(max_examples=100)
@given(data=st.data())
def test_a_recording_with_what_google_may_write_around_it_passes_byte_for_byte(data: st.DataObject) -> None:
    """Blank lines and comments after the last SSE event, whitespace around the array: the
    bytes after the last chunk reach the client too."""
    rec = data.draw(st.sampled_from(RECORDINGS))
    if rec.sse:
        body = rec.body + data.draw(st.sampled_from([b"\r\n", b"\r\n\r\n", b": done\r\n\r\n", b"\n"]))
    else:
        body = data.draw(st.sampled_from([b"", b"\n", b"  "])) + rec.body + data.draw(
            st.sampled_from([b"", b"\n", b"\r\n", b" \n"]))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=20)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
    assert plain(rec, chunks) == body


@settings(max_examples=200)
@given(data=st.data())
def test_a_recording_broken_off_anywhere_passes_as_it_came(data: st.DataObject) -> None:
    """A body that ends early, inside an event or between two: an untouched round ends as the
    upstream ended it (the runner then calls ``finish``), nothing made up."""
    rec = data.draw(st.sampled_from(RECORDINGS))
    body = rec.body[: data.draw(st.integers(1, len(rec.body) - 1))]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(body) - 1, 1)), max_size=20)) - {len(body)})
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
    assert plain(rec, chunks) == body


def _whole(rec: Recording) -> bool:
    """The recording is a whole answer (a round the loop may stitch after a search)."""
    decoder = decoder_of(adapter(rec), rec.body)
    return decoder.done and decoder.error is None


WHOLE = [r for r in RECORDINGS if _whole(r)]


def test_the_corpus_has_whole_answers() -> None:
    assert len(WHOLE) >= len(RECORDINGS) // 2


@pytest.mark.parametrize("chunker", CHUNKERS[:3], ids=chunker_id)
@pytest.mark.parametrize("rec", WHOLE, ids=[r.id.rsplit("/", 1)[-1] for r in WHOLE])
def test_a_recording_after_a_search_round_reads_as_its_own_content(rec: Recording, chunker: Chunker) -> None:
    client, first, _ = after_a_search(adapter(rec).stitcher(P, "{}"), search_round(rec).body, rec.body, chunker)
    assert P.encode() not in client

    # The framing: whole SSE events, or one JSON array; the search round shows nothing, the
    # recording's chunks follow in order with round one's id and usage summed over both rounds.
    chunks = elements(adapter(rec), client)
    own = json.loads(rec.body) if not rec.sse else [e.data for e in gemini.GeminiStreamDecoder().feed(rec.body)]
    assert len(chunks) == len(own)
    for got, upstream in zip(chunks, own):
        assert {k: v for k, v in got.items() if k not in ("responseId", "usageMetadata")} == {
            k: v for k, v in upstream.items() if k not in ("responseId", "usageMetadata")}
        assert got.get("responseId") == (first.message["responseId"] if "responseId" in upstream else None)
        if "usageMetadata" in upstream:
            assert got["usageMetadata"] == summed_usage(first.message, upstream)

    # Our decoder: the recording's own message, but for round one's id and the summed usage.
    message, recorded = decoded(client), decoded(rec.body)
    if "responseId" in recorded:
        recorded["responseId"] = first.message["responseId"]
    if "usageMetadata" in recorded:
        recorded["usageMetadata"] = summed_usage(first.message, recorded)
    assert message == recorded

    # google-genai reads every chunk (the array's elements handed to it as SSE events).
    parsed = sdk(adapter(rec), client)
    assert len(parsed) == len(own)
    assert [c.get("responseId") for c in parsed] == [got.get("responseId") for got in chunks]


def summed_usage(search: dict[str, Any], chunk: dict[str, Any]) -> Any:
    return merge([{"usageMetadata": search["usageMetadata"]}, {"usageMetadata": chunk["usageMetadata"]}])[
        "usageMetadata"]
