"""Helpers shared by the unit tests (moved from test_streams_gemini.py, which tests them too)."""

from __future__ import annotations

from tooldisco.apis.gemini import stream as gemini


def assemble(chunks: list[dict]) -> dict:
    assembler = gemini.GeminiAssembler()
    for chunk in chunks:
        chunk.pop("sdkHttpResponse", None)
        assembler.apply(None, chunk)
    return assembler.message()
