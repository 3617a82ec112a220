"""Capped body decoding (``tooldisco.core.bodies``): every HTTP coding, chained codings, and bombs
that stop at the cap without ever holding their decoded size."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import brotli
import pytest
import zstandard

from tooldisco.core import bodies
from tooldisco.core.bodies import TooLarge, Undecodable, decode

BODY = b'{"model":"m","messages":[{"role":"user","content":"' + b"hello world " * 20_000 + b'"}]}'
CAP = 1 << 20


def _deflate_raw(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


ENCODERS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda d: zstandard.ZstdCompressor().compress(d),
    "identity": lambda d: d,
}


@pytest.mark.parametrize("coding", sorted(ENCODERS))
def test_each_coding_round_trips(coding: str) -> None:
    assert decode(ENCODERS[coding](BODY), coding, CAP) == BODY


@pytest.mark.parametrize("header", [None, "", "identity", "IDENTITY"])
def test_no_coding(header: str | None) -> None:
    assert decode(BODY, header, CAP) == BODY


def test_raw_deflate_is_read_too() -> None:
    assert decode(_deflate_raw(BODY), "deflate", CAP) == BODY


def test_gzip_members_are_concatenated() -> None:
    assert decode(gzip.compress(BODY[:1000]) + gzip.compress(BODY[1000:]), "gzip", CAP) == BODY


def test_gzip_member_boundary_at_any_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = gzip.compress(b"a" * 500), gzip.compress(b"b" * 500)
    for chunk in (1, 2, 3, 7, len(first) - 1, len(first), len(first) + 1):
        monkeypatch.setattr(bodies, "CHUNK", chunk)
        assert decode(first + second, "gzip", CAP) == b"a" * 500 + b"b" * 500


def test_zstd_frames_are_concatenated() -> None:
    z = zstandard.ZstdCompressor()
    assert decode(z.compress(BODY[:1000]) + z.compress(BODY[1000:]), "zstd", CAP) == BODY


@pytest.mark.parametrize("header,layers", [
    ("gzip, br", ("gzip", "br")),
    ("br,gzip", ("br", "gzip")),
    ("deflate, zstd, identity", ("deflate", "zstd")),
])
def test_chained_codings_decode_in_reverse(header: str, layers: tuple[str, ...]) -> None:
    data = BODY
    for coding in layers:  # applied in the order the header lists them
        data = ENCODERS[coding](data)
    assert decode(data, header, CAP) == BODY


@pytest.mark.parametrize("header", ["compress", "gzip, snappy", "aes128gcm"])
def test_unknown_coding_is_undecodable(header: str) -> None:
    with pytest.raises(Undecodable):
        decode(BODY, header, CAP)


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_corrupt_and_truncated_bodies_are_undecodable(coding: str) -> None:
    encoded = ENCODERS[coding](BODY)
    if coding != "zstd":  # zstandard's reader, like mitmproxy's decoder, yields a cut frame's whole blocks
        with pytest.raises(Undecodable):
            decode(encoded[: len(encoded) // 2], coding, CAP)
    with pytest.raises(Undecodable):
        decode(b"\x00not compressed at all\xff" * 10, coding, CAP)


def test_exactly_the_cap_passes_one_more_byte_does_not() -> None:
    body = b"x" * CAP
    assert decode(gzip.compress(body), "gzip", CAP) == body
    with pytest.raises(TooLarge):
        decode(gzip.compress(body + b"x"), "gzip", CAP)
    with pytest.raises(TooLarge):
        decode(body + b"x", None, CAP)


def _bomb(coding: str, size: int) -> bytes:
    """``size`` zero bytes compressed, streamed into the compressor (never held whole)."""
    block = bytes(1 << 20)
    if coding == "gzip":
        c = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS)
        return b"".join(c.compress(block) for _ in range(size >> 20)) + c.flush()
    if coding == "br":
        b = brotli.Compressor(quality=5)
        return b"".join(b.process(block) for _ in range(size >> 20)) + b.finish()
    z = zstandard.ZstdCompressor(level=3).compressobj()
    return b"".join(z.compress(block) for _ in range(size >> 20)) + z.flush()


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_a_bomb_stops_at_the_cap_in_bounded_memory(coding: str) -> None:
    bomb = _bomb(coding, 256 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge):
            decode(bomb, coding, CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The cap, a few output slices, zstd's window: never the 256 MiB the bomb expands to.
    assert peak < CAP + bodies.ZSTD_MAX_WINDOW + 16 * bodies.CHUNK, peak


def test_a_chained_bomb_stops_at_the_cap() -> None:
    inner = _bomb("gzip", 64 << 20)
    with pytest.raises(TooLarge):
        decode(brotli.compress(inner), "gzip, br", CAP)


def test_zstd_window_over_the_http_limit_is_refused() -> None:
    params = zstandard.ZstdCompressionParameters(window_log=27)
    z = zstandard.ZstdCompressor(compression_params=params).compressobj()  # streamed: no content size to shrink it
    data = z.compress(bytes(1 << 20)) + z.flush()
    with pytest.raises(Undecodable):
        decode(data, "zstd", CAP)
