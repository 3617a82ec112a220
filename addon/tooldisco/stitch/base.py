"""Stitching the rounds of a phantom loop into the one stream the client sees, sans-IO.

Why: a live client stream must start before the proxy knows whether the model will
search. Round 1 is forwarded event by event as it arrives; only a phantom call (and
what belongs to it) is held back. When a round ends with phantom calls only, the
runner searches and re-forwards, and the next round's events continue the same
client stream: one start, one stop, indexes renumbered, usage summed.

Contract, for every API (one module per API in this package):

- ``feed(data)``: upstream bytes of the current round, cut anywhere; returns the
  client bytes that are complete and visible now (``b""`` when nothing is). Events
  that close the message (stop reason, final usage, terminal event) are held until
  the runner decides. An in-stream upstream error event is passed on at once (it is
  the provider's own, so SDKs raise and agents retry) and ends the client stream.
- ``end_round()``: the round's upstream body ended. Returns what the loop needs: the
  round's assembled message (phantom calls included), whether the API's terminal
  event came, and the upstream error if one came.
  After an error, ``finish()`` returns only what is still owed to the client (the error
  event itself when the upstream left it unterminated, the API's end marker) and nothing
  else; the runner always calls it.
- ``next_round()``: the runner re-forwards; the next ``feed`` is round k+1. Its start
  events are swallowed, its indexes continue after what the client has seen.
- ``finish()``: the round just ended was the last: the held closing events, with the
  stop reason right for what the client saw (a tool stop only when a visible call was
  made in the final round) and usage summed over every round.
- ``fail(failure)``: something went wrong after bytes went out (an upstream error on a
  re-forward, a truncated round, a proxy fault): the provider's own in-stream error,
  so the client stream always ends valid and the client's SDK raises.

Memory: a stitcher holds the current event, the round's assembled message (what the
loop re-sends, its text bounded: ``cut`` past it) and small counters; never the raw body.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RoundEnd:
    """How one upstream round ended."""

    message: dict[str, Any] | None  # the assembled message, phantom calls included; None if it never started
    complete: bool  # the API's terminal event arrived
    error: Any = None  # the upstream's in-stream error payload (already passed to the client)


@dataclass(frozen=True)
class Failure:
    """Why a stream has to end with an error: an upstream answer, or a fault of the proxy."""

    status: int  # the upstream's HTTP status; 502 when the proxy itself failed
    body: bytes = b""  # the upstream's error body, passed on when it is in the provider's format
    message: str = ""  # for the proxy's own failures

    def _json(self) -> Any:
        """The body's JSON value; None when it is not JSON (or nested past the parser's limit)."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None

    def upstream_error(self) -> dict[str, Any] | None:
        """The upstream's error object (``{"error": {...}}`` bodies), if the body holds one."""
        data = self._json()
        if isinstance(data, list) and data and isinstance(data[0], dict):  # Gemini wraps errors in a list
            data = data[0]
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            return data["error"]
        return None

    def text(self) -> str:
        """A human-readable message: the upstream's own (``{"error": {"message"}}``, or Bedrock's
        ``{"message"}``), else ours, else the status."""
        error = self.upstream_error()
        if error and isinstance(error.get("message"), str):
            return error["message"]
        body = self._json()
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return body["message"]
        return self.message or f"upstream answered HTTP {self.status}"


class Stitcher(ABC):
    """One client stream out of the rounds of one phantom loop (see the module docstring)."""

    def __init__(self, phantom: str) -> None:
        self.phantom = phantom  # the search tool's name: its calls never reach the client
        self.rounds = 1  # the round being fed, from 1
        self._out = bytearray()  # client bytes decided but not returned yet
        self._ended = False  # the client stream is over (an error or the closing events went out)
        self._decoder: Any = None  # the round's stream decoder (each API's stitcher sets its own)

    @abstractmethod
    def feed(self, data: bytes) -> bytes: ...

    @abstractmethod
    def end_round(self) -> RoundEnd: ...

    def next_round(self) -> None:
        self.rounds += 1

    @property
    def cut(self) -> bool:
        """The round's message lacks text past what a decoder keeps (``streams.common``): it
        was relayed, but cannot be sent back upstream as the model wrote it."""
        return bool(self._decoder.cut)

    @abstractmethod
    def finish(self) -> bytes: ...

    @abstractmethod
    def fail(self, failure: Failure) -> bytes: ...

    def _take(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def _relay(self, events: list[Any]) -> bytes:
        """The client bytes for upstream events, in order; nothing follows an error."""
        out = bytearray()
        for event in events:
            if self._ended:
                break
            out += self._pass(event)
        return bytes(out)

    def _pass(self, event: Any) -> bytes:
        """The client bytes for one upstream event (``b""``: held or hidden)."""
        raise NotImplementedError


# OpenAI's error ``type`` for each kind of failure (Chat and Responses share them).
OPENAI_ERROR_TYPES = {
    "rate_limit": "rate_limit_exceeded",
    "invalid_request": "invalid_request_error",
    "overloaded": "server_error",
    "timeout": "server_error",
    "server_error": "server_error",
}


def error_kind(status: int) -> str:
    """The error category a status stands for, in the words most APIs use."""
    if status == 429:
        return "rate_limit"
    if status in (503, 529):
        return "overloaded"
    if status == 408 or status == 504:
        return "timeout"
    if 400 <= status < 500:
        return "invalid_request"
    return "server_error"
