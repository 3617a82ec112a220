"""Helpers ``tests/unit/apis/gemini/test_stream.py`` and other unit tests share."""

from __future__ import annotations

from tooldisco.apis.gemini import stream as gemini


def assemble(chunks: list[dict]) -> dict:
    assembler = gemini.GeminiAssembler()
    for chunk in chunks:
        chunk.pop("sdkHttpResponse", None)
        assembler.apply(None, chunk)
    return assembler.message()
