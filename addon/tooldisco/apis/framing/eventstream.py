"""AWS event-stream binary framing (``application/vnd.amazon.eventstream``), sans-IO.

Why: Bedrock's streaming responses are not SSE. Each message is
``total length u32 | headers length u32 | prelude CRC32 | headers | payload |
message CRC32`` (big-endian, CRC32 as ``zlib.crc32``; the message CRC covers
everything before it, prelude included). A header is ``name length u8 | name |
type u8 | value``. Both CRCs are checked: a corrupt frame raises instead of
being half-trusted, and any frame we rewrite gets fresh CRCs.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_PRELUDE = struct.Struct(">II")
_PRELUDE_LENGTH = 12  # two lengths + the prelude CRC
_MIN_LENGTH = _PRELUDE_LENGTH + 4
# botocore's limits: headers 128 KiB, payload 24 MiB.
MAX_HEADERS_LENGTH = 128 * 1024
MAX_MESSAGE_LENGTH = 24 * 1024 * 1024 + MAX_HEADERS_LENGTH + _MIN_LENGTH

# Header value types: (code, fixed size) for the fixed-width ones.
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _SHORT, _INT, _LONG, _BYTES, _STRING, _TIMESTAMP, _UUID = range(10)
_FIXED = {
    _BYTE: struct.Struct(">b"),
    _SHORT: struct.Struct(">h"),
    _INT: struct.Struct(">i"),
    _LONG: struct.Struct(">q"),
}

HeaderValue = bool | int | bytes | str


class EventStreamError(ValueError):
    """The bytes are not a valid event-stream message (bad length, CRC or header)."""


@dataclass(frozen=True)
class Frame:
    """One decoded message; ``raw`` is its exact bytes. Header values decode as botocore
    decodes them: timestamps to milliseconds since the epoch (``int``), UUIDs to 16 bytes."""

    headers: dict[str, Any]
    payload: bytes
    raw: bytes = b""

    @property
    def message_type(self) -> str | None:
        """``event``, ``exception`` or ``error`` (the ``:message-type`` header)."""
        value = self.headers.get(":message-type")
        return value if isinstance(value, str) else None

    @property
    def event_type(self) -> str | None:
        value = self.headers.get(":event-type")
        return value if isinstance(value, str) else None


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _decode_headers(data: bytes) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    pos = 0
    try:
        while pos < len(data):
            name_length = data[pos]
            name = data[pos + 1 : pos + 1 + name_length].decode("utf-8")
            pos += 1 + name_length
            kind = data[pos]
            pos += 1
            if kind in (_BOOL_TRUE, _BOOL_FALSE):
                value: Any = kind == _BOOL_TRUE
            elif kind in _FIXED:
                (value,) = _FIXED[kind].unpack_from(data, pos)
                pos += _FIXED[kind].size
            elif kind == _TIMESTAMP:
                (value,) = _FIXED[_LONG].unpack_from(data, pos)
                pos += 8
            elif kind in (_BYTES, _STRING):
                (length,) = struct.unpack_from(">H", data, pos)
                raw = data[pos + 2 : pos + 2 + length]
                if len(raw) != length:
                    raise EventStreamError("header value runs past the headers")
                value = raw.decode("utf-8") if kind == _STRING else bytes(raw)
                pos += 2 + length
            elif kind == _UUID:
                if pos + 16 > len(data):
                    raise EventStreamError("header value runs past the headers")
                value = bytes(data[pos : pos + 16])
                pos += 16
            else:
                raise EventStreamError(f"unknown header value type {kind} for {name!r}")
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as error:
        raise EventStreamError(f"malformed headers: {error}") from error
    return headers


def _encode_header_value(value: HeaderValue) -> bytes:
    if isinstance(value, bool):
        return bytes([_BOOL_TRUE if value else _BOOL_FALSE])
    if isinstance(value, str):
        encoded = value.encode("utf-8")
        return bytes([_STRING]) + struct.pack(">H", len(encoded)) + encoded
    if isinstance(value, bytes):
        return bytes([_BYTES]) + struct.pack(">H", len(value)) + value
    if isinstance(value, int):
        return bytes([_LONG]) + _FIXED[_LONG].pack(value)
    raise TypeError(f"unsupported header value {value!r}")


def encode_frame(headers: Mapping[str, HeaderValue], payload: bytes) -> bytes:
    """One message with both CRCs. Strings are written as type 7 (what AWS sends),
    ``bytes`` as 6, ``bool`` as 0/1, ``int`` as a 64-bit long."""
    encoded = b""
    for name, value in headers.items():
        raw_name = name.encode("utf-8")
        encoded += bytes([len(raw_name)]) + raw_name + _encode_header_value(value)
    total = _PRELUDE_LENGTH + len(encoded) + len(payload) + 4
    prelude = _PRELUDE.pack(total, len(encoded))
    prelude += struct.pack(">I", _crc(prelude))
    body = prelude + encoded + payload
    return body + struct.pack(">I", _crc(body))


class EventStreamDecoder:
    """Incremental frame parser: ``feed(bytes) -> [Frame]``; raises ``EventStreamError``
    on a bad CRC or length. ``feed(b"")`` ends the stream; leftover bytes then raise."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        if not data:
            if self._buffer:
                raise EventStreamError(f"stream ended inside a frame ({len(self._buffer)} bytes left)")
            return []
        self._buffer += data
        frames: list[Frame] = []
        while (frame := self._next()) is not None:
            frames.append(frame)
        return frames

    def _next(self) -> Frame | None:
        buffer = self._buffer
        if len(buffer) < _PRELUDE_LENGTH:
            return None
        total, headers_length = _PRELUDE.unpack_from(buffer)
        (prelude_crc,) = struct.unpack_from(">I", buffer, 8)
        if _crc(bytes(buffer[:8])) != prelude_crc:
            raise EventStreamError("prelude CRC mismatch")
        if not _MIN_LENGTH <= total <= MAX_MESSAGE_LENGTH or headers_length > MAX_HEADERS_LENGTH:
            raise EventStreamError(f"bad lengths: total {total}, headers {headers_length}")
        if headers_length > total - _MIN_LENGTH:
            raise EventStreamError(f"headers length {headers_length} exceeds the message")
        if len(buffer) < total:
            return None
        raw = bytes(buffer[:total])
        del buffer[:total]
        (message_crc,) = struct.unpack_from(">I", raw, total - 4)
        if _crc(raw[: total - 4]) != message_crc:
            raise EventStreamError("message CRC mismatch")
        headers_end = _PRELUDE_LENGTH + headers_length
        return Frame(_decode_headers(raw[_PRELUDE_LENGTH:headers_end]), raw[headers_end : total - 4], raw)
