"""ConverseStream recordings of real provider streams (tests/conformance/recordings) through the
stitcher. Why: the synthetic rounds of test_stitch_converse.py are what we think Bedrock sends;
these are what it sent (``metadata`` before ``messageStop``, no ``metadata``, no
``messageStart``). A turn without a search must reach the client as the upstream sent it, byte
for byte, however the body was cut; a turn after a search must read (our decoder, botocore's
frame parser, boto3's ``converse_stream``) as the recording's own content.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer
from botocore.parsers import ResponseParserError
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conformance.replay import Recording, load, search_round
from tests.support.stitch import CHUNKERS, P, Chunker, after_a_search, chunker_id, decoder_of, summed
from tests.support.stitch_bedrock_converse import C, boto3_view

RECORDINGS = [r for r in load() if r.api == "bedrock_converse" and r.stream and r.status == 200]
IDS = [r.id.rsplit("/", 1)[-1] for r in RECORDINGS]
CLOSING = ("messageStop", "metadata")


def test_the_corpus_has_converse_streams() -> None:
    kinds = {tuple(e for e in _types(r.body) if e in CLOSING) for r in RECORDINGS}
    assert ("messageStop", "metadata") in kinds and ("metadata", "messageStop") in kinds and ("messageStop",) in kinds


def _types(body: bytes) -> list[str]:
    return [m.headers[":event-type"] for m in _botocore(body)]


def _botocore(body: bytes) -> list[Any]:
    """The frames botocore's own parser reads (prelude and message CRCs checked)."""
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    return list(buffer)


def plain(rec: Recording, chunks: list[bytes]) -> bytes:
    """What the client gets of a round one without a search, as the runner drives it: the feeds,
    then ``finish``."""
    stitcher = C.stitcher(P, "{}")
    out = b"".join(stitcher.feed(chunk) for chunk in chunks)
    stitcher.end_round()  # complete or not, an error in it or not: it ends as the upstream ended it
    assert stitcher.untouched
    return out + stitcher.finish()


@pytest.mark.parametrize("chunker", CHUNKERS, ids=chunker_id)
@pytest.mark.parametrize("rec", RECORDINGS, ids=IDS)
def test_a_recording_without_search_passes_byte_for_byte(rec: Recording, chunker: Chunker) -> None:
    assert plain(rec, chunker(rec.body)) == rec.body


def test_a_recording_written_frame_by_frame_passes_each_frame_at_once() -> None:
    for rec in RECORDINGS:
        stitcher = C.stitcher(P, "{}")
        assert [stitcher.feed(frame) for frame in rec.events] == rec.events  # closing frames too


@settings(max_examples=300)
@given(data=st.data())
def test_a_recording_cut_anywhere_passes_byte_for_byte(data: st.DataObject) -> None:
    rec = data.draw(st.sampled_from(RECORDINGS))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(rec.body) - 1), max_size=40)))
    chunks = [rec.body[a:b] for a, b in zip([0, *cuts], [*cuts, len(rec.body)])]
    assert plain(rec, chunks) == rec.body


def _payload(message: Any) -> dict[str, Any]:
    data = json.loads(message.payload)
    data.pop("p", None)
    return data


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
    decoder = decoder_of(C, rec.body)
    return decoder.done and decoder.error is None


WHOLE = [r for r in RECORDINGS if _whole(r)]


def test_the_corpus_has_whole_answers() -> None:
    assert len(WHOLE) >= len(RECORDINGS) // 2


@pytest.mark.parametrize("chunker", CHUNKERS[:3], ids=chunker_id)
@pytest.mark.parametrize("rec", WHOLE, ids=[r.id.rsplit("/", 1)[-1] for r in WHOLE])
def test_a_recording_after_a_search_round_reads_as_its_own_content(rec: Recording, chunker: Chunker) -> None:
    client, first, _ = after_a_search(C.stitcher(P, "{}"), search_round(rec).body, rec.body, chunker)
    assert P.encode() not in client and b"tooluse_search01" not in client

    # botocore's frame parser: the search round's messageStart, then the recording's frames in
    # their order (its own messageStart, had it one, swallowed), metadata's counts summed.
    got = [(m.headers[":event-type"], _payload(m)) for m in _botocore(client)]
    upstream = [(m.headers[":event-type"], _payload(m)) for m in _botocore(rec.body)]
    assert got == after_search(first.message, upstream)
    assert all(m.headers[":message-type"] == "event" for m in _botocore(client))

    # Our decoder: the recording's content and stop reason; the usage of both rounds, when the
    # recording sent its own (none is made up).
    message = decoder_of(C, client).message()
    own = decoder_of(C, rec.body).message()
    assert message["output"] == own["output"] and message["stopReason"] == own["stopReason"]
    if "usage" in own:
        assert message["usage"] == summed([first.message["usage"], own["usage"]])
    else:
        assert "usage" not in message

    # boto3's converse_stream reads the same events (its model's fields), where it reads the
    # recording itself: some hand-cut ones have a contentBlockStart it rejects.
    try:
        own_view = boto3_view(rec.body)
    except ResponseParserError:
        with pytest.raises(ResponseParserError):
            boto3_view(client)
        return
    assert boto3_view(client) == after_search(first.message, own_view)


def after_search(search: dict[str, Any], events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """A recording's events as the client gets them after the search round: that round's
    ``messageStart`` (the recording's own swallowed, had it one), the rest in their order,
    ``metadata``'s counts summed over both rounds."""
    wanted = [("messageStart", {"role": "assistant"})]
    for name, payload in events:
        if name == "metadata":
            payload = {**payload, **{key: summed([search[key], payload[key]])
                                     for key in ("usage", "metrics") if key in payload}}
        if name != "messageStart":
            wanted.append((name, payload))
    return wanted
