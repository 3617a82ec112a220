"""HTTP bodies decoded from their ``content-encoding`` with a cap on the decoded size, sans-IO.

Why not mitmproxy's ``get_content``: it decodes the whole body at once, so a few KiB of
brotli or zstd (a MiB of gzip) that expand to GiBs cost GiBs of memory and seconds of CPU
before anything can look at the size. Here every layer is an incremental decompressor
whose output is taken in slices of at most ``CHUNK`` bytes, and decoding stops as soon as
the output passes the cap: memory stays within the cap plus a few slices, whatever the
body claims to expand to. The caller passes such a body through untouched.

Codings are the HTTP ones (RFC 9110 §8.4.1: gzip, deflate; RFC 7932: br; RFC 8878: zstd),
applied in the order the header lists them, so decoded in reverse. Nothing here imports
mitmproxy: it is plain bytes in, bytes out, and runs in a worker thread.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Any, cast

import brotli
import zstandard

CHUNK = 64 * 1024  # bytes of input fed, and of output taken, per step
# RFC 9659 §3: a zstd content-coding decoder need not accept a window over 8 MB, and
# should not (the window is memory the sender makes the decoder allocate).
ZSTD_MAX_WINDOW = 8 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


class BodyError(ValueError):
    """The body cannot be decoded within the rules: the caller leaves it as it came."""


class TooLarge(BodyError):
    """The decoded body would be larger than the cap."""


class Undecodable(BodyError):
    """An unknown coding, or bytes that are not what the coding says (corrupt, truncated)."""


def codings(content_encoding: str | None) -> list[str]:
    """The codings a ``content-encoding`` header lists, in the order they were applied."""
    return [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]


def decode(raw: bytes, content_encoding: str | None, cap: int) -> bytes:
    """``raw`` decoded, at most ``cap`` bytes of it; ``TooLarge`` past the cap, ``Undecodable``
    when a coding is unknown or the bytes are not valid for it. An identity body is
    capped as well: the caller's work on a body grows with its decoded size."""
    layers = [c for c in codings(content_encoding) if c not in ("identity", "none")]
    if not layers:  # sent plain: the bytes themselves, no copy
        if len(raw) > cap:
            raise TooLarge(f"the body is larger than {cap} bytes")
        return raw
    chunks: Iterable[bytes] = _slices(raw)
    for coding in reversed(layers):
        chunks = _layer(chunks, coding)
    out = bytearray()
    for chunk in chunks:
        if len(out) + len(chunk) > cap:
            raise TooLarge(f"the decoded body is larger than {cap} bytes")
        out += chunk
    return bytes(out)


def _slices(raw: bytes) -> Iterator[bytes]:
    for i in range(0, len(raw), CHUNK):
        yield raw[i : i + CHUNK]


def _layer(chunks: Iterable[bytes], coding: str) -> Iterator[bytes]:
    if coding in ("identity", "none"):
        return iter(chunks)
    if coding in ("gzip", "x-gzip"):
        return _gzip(chunks)
    if coding == "deflate":
        return _deflate(chunks)
    if coding == "br":
        return _brotli(chunks)
    if coding == "zstd":
        return _zstd(chunks)
    raise Undecodable(f"unknown content-encoding {coding!r}")


def _inflate(chunks: Iterable[bytes], wbits: int, members: bool) -> Iterator[bytes]:
    """zlib's inflate, at most ``CHUNK`` bytes of output per call (``max_length``). ``members``:
    gzip's concatenated members (RFC 1952 §2.2) are read one after another; bytes after the
    stream that do not start a member are ignored, as zlib's own one-shot decoders do."""
    d: Any = zlib.decompressobj(wbits)
    after = b""  # input after a member's end, not yet known to start another
    try:
        for chunk in chunks:
            data = chunk
            if d is None:  # between gzip members
                data = after + data
                if len(data) < len(_GZIP_MAGIC):
                    after = data
                    continue
                if not data.startswith(_GZIP_MAGIC):
                    return
                d = zlib.decompressobj(wbits)
            while True:
                out = d.decompress(data, CHUNK)
                if out:
                    yield out
                data = d.unconsumed_tail
                if d.eof:
                    rest = d.unused_data  # all the input after the end (unconsumed_tail may repeat it)
                    if not members or (rest and not rest.startswith(_GZIP_MAGIC[: len(rest)])):
                        return
                    if len(rest) >= len(_GZIP_MAGIC):
                        d, data = zlib.decompressobj(wbits), rest
                        continue
                    d, after = None, rest
                    break
                if not data and len(out) < CHUNK:  # input all taken and no output pending
                    break
        if d is not None and not d.eof:
            raise Undecodable("the compressed body is truncated")
    except zlib.error as e:
        raise Undecodable(f"not valid compressed data: {e}") from None


def _gzip(chunks: Iterable[bytes]) -> Iterator[bytes]:
    return _inflate(chunks, 16 + zlib.MAX_WBITS, members=True)


def _deflate(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """HTTP's "deflate" is zlib-wrapped (RFC 9110 §8.4.1.2), but some servers send raw
    deflate: the zlib header decides (RFC 1950 §2.2: CM 8, header a multiple of 31)."""
    it = iter(chunks)
    first = b""
    for first in it:
        if first:
            break
    wrapped = len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
    return _inflate(_prepend(first, it), zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS, members=False)


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _brotli(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """brotli's ``output_buffer_limit``: each call returns about ``CHUNK`` bytes (its buffer
    stops growing there) and keeps the rest until asked again with empty input."""
    d = brotli.Decompressor()
    try:
        for chunk in chunks:
            out = d.process(chunk, output_buffer_limit=CHUNK)
            # Output may still be pending after the input was taken: drained before more goes in.
            while out or not (d.can_accept_more_data() or d.is_finished()):
                if out:
                    yield out
                out = d.process(b"", output_buffer_limit=CHUNK)
        if not d.is_finished():
            raise Undecodable("the compressed body is truncated")
    except brotli.error as e:
        raise Undecodable(f"not valid brotli data: {e}") from None


class _Reader:
    """The file-like source zstandard's stream reader pulls input from."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while not self._buffer:
            chunk = next(self._it, None)
            if chunk is None:
                return b""
            self._buffer = chunk
        size = len(self._buffer) if size < 0 else size
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out


def _zstd(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """zstandard's stream reader: ``read(CHUNK)`` returns at most that, across frames (a
    body may hold several, as mitmproxy's own decoder reads them). Like mitmproxy's, it
    yields what a cut frame holds and does not say it was cut: the body it ends early is
    incomplete, which its parser sees."""
    d = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    try:
        with d.stream_reader(cast(IO[bytes], _Reader(chunks)), read_size=CHUNK, read_across_frames=True) as reader:
            while out := reader.read(CHUNK):
                yield out
    except zstandard.ZstdError as e:
        raise Undecodable(f"not valid zstd data: {e}") from None
