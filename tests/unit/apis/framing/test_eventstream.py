"""AWS event-stream framing, checked against botocore's own parser."""

from __future__ import annotations

import struct
import zlib

import pytest
from tests.support.streams import decode, every_split, fixture, random_chunkings
from tooldisco.apis.framing.eventstream import EventStreamDecoder, EventStreamError, Frame, encode_frame

# botocore's parser is the reference; boto3 is a dev dependency of these tests.
EventStreamBuffer = pytest.importorskip("botocore.eventstream").EventStreamBuffer


def botocore_frames(body: bytes) -> list[tuple[dict, bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    return [(message.headers, message.payload) for message in buffer]


def ours(frames: list[Frame]) -> list[tuple[dict, bytes]]:
    return [(frame.headers, frame.payload) for frame in frames]


def all_types_frame() -> bytes:
    """A frame with every header value type, built by hand from the format description."""

    def header(name: str, kind: int, value: bytes) -> bytes:
        return bytes([len(name)]) + name.encode() + bytes([kind]) + value

    headers = b"".join(
        [
            header("true", 0, b""),
            header("false", 1, b""),
            header("byte", 2, struct.pack(">b", -5)),
            header("short", 3, struct.pack(">h", -300)),
            header("int", 4, struct.pack(">i", 70000)),
            header("long", 5, struct.pack(">q", -(2**40))),
            header("bytes", 6, struct.pack(">H", 3) + b"\x00\xff\x10"),
            header("string", 7, struct.pack(">H", 6) + "héllo".encode()),
            header("time", 8, struct.pack(">q", 1763800000123)),
            header("uuid", 9, bytes(range(16))),
        ]
    )
    payload = b'{"ok":true}'
    prelude = struct.pack(">II", 16 + len(headers) + len(payload), len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + headers + payload
    return message + struct.pack(">I", zlib.crc32(message))


def test_every_header_type_decodes_as_botocore_decodes_it() -> None:
    body = all_types_frame()
    (frame,) = EventStreamDecoder().feed(body)
    assert ours([frame]) == botocore_frames(body)
    assert frame.headers["string"] == "héllo" and frame.headers["long"] == -(2**40)
    assert frame.headers["uuid"] == bytes(range(16)) and frame.headers["time"] == 1763800000123
    assert frame.raw == body


@pytest.mark.parametrize(
    "name", ["bedrock_converse_tool.bin", "bedrock_invoke_claude.bin", "bedrock_converse_throttled.bin"]
)
def test_fixtures_decode_as_botocore_decodes_them_in_any_chunking(name: str) -> None:
    body = fixture(name)
    expected = botocore_frames(body)
    _, frames = decode(EventStreamDecoder, [body])
    assert ours(frames) == expected
    assert b"".join(frame.raw for frame in frames) == body
    for chunks in [*every_split(body), *random_chunkings(body, count=10)]:
        assert ours(decode(EventStreamDecoder, chunks)[1]) == expected


def test_encoded_frames_are_read_by_botocore() -> None:
    headers = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event", "flag": True}
    body = encode_frame(headers, b'{"bytes":"e30="}') + encode_frame({"raw": b"\x01\x02", "n": 7}, b"")
    assert botocore_frames(body) == [
        (headers, b'{"bytes":"e30="}'),
        ({"raw": b"\x01\x02", "n": 7}, b""),
    ]
    assert ours(EventStreamDecoder().feed(body)) == botocore_frames(body)


def test_fixture_frames_re_encode_byte_for_byte() -> None:
    body = fixture("bedrock_converse_tool.bin")
    frames = EventStreamDecoder().feed(body)
    assert b"".join(encode_frame(f.headers, f.payload) for f in frames) == body


@pytest.mark.parametrize(
    ("offset", "message"),
    [(9, "prelude CRC mismatch"), (20, "message CRC mismatch"), (-1, "message CRC mismatch")],
)
def test_corruption_raises_a_clear_error(offset: int, message: str) -> None:
    body = bytearray(encode_frame({":event-type": "x"}, b"payload"))
    body[offset] ^= 0x01
    with pytest.raises(EventStreamError, match=message):
        EventStreamDecoder().feed(bytes(body))


def test_bad_lengths_and_truncation_raise() -> None:
    prelude = struct.pack(">II", 8, 0)
    with pytest.raises(EventStreamError, match="bad lengths"):
        EventStreamDecoder().feed(prelude + struct.pack(">I", zlib.crc32(prelude)))
    prelude = struct.pack(">II", 20, 10)
    with pytest.raises(EventStreamError, match="headers length"):
        EventStreamDecoder().feed(prelude + struct.pack(">I", zlib.crc32(prelude)))
    decoder = EventStreamDecoder()
    assert decoder.feed(encode_frame({}, b"abc")[:-2]) == []
    with pytest.raises(EventStreamError, match="ended inside a frame"):
        decoder.feed(b"")


def test_unknown_header_type_raises() -> None:
    headers = b"\x01x\x0a"
    prelude = struct.pack(">II", 16 + len(headers), len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + headers
    with pytest.raises(EventStreamError, match="unknown header value type 10"):
        EventStreamDecoder().feed(message + struct.pack(">I", zlib.crc32(message)))
