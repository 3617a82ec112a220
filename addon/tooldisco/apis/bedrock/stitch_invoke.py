"""Bedrock InvokeModelWithResponseStream (Claude): the rounds of a phantom loop as one live
client stream.

The same Anthropic events as ``apis.anthropic.stitch`` (whose ``AnthropicEventStitcher`` does all
the stitching), in AWS event-stream frames: ``:event-type: chunk`` with the payload
``{"bytes": base64(event json)}``. An unchanged event goes out as its frame; a changed one
in a fresh frame (both CRCs recomputed, Bedrock's ``p`` padding dropped). Bedrock reports
``amazon-bedrock-invocationMetrics`` on ``message_stop``: after a search the final one
carries the sums over rounds (token counts and latencies), as ``InvokeAdapter.merge`` does.

Errors are exception frames (``:message-type: exception``, ``:exception-type``, payload
``{"message": ...}``): botocore's ``EventStream`` raises ``EventStreamError`` on them, and
the anthropic SDK's Bedrock client turns them into an ``error`` event and raises. An
upstream exception frame is passed on as it came. A corrupt upstream frame (bad CRC)
raises ``EventStreamError`` from ``feed``, which the runner answers with ``fail``; a body
that ends inside a frame is a round that did not complete.
"""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from tooldisco.apis.bedrock.stream import METRICS, InvokeStreamDecoder
from tooldisco.apis.streaming import Event, dumps
from tooldisco.apis.framing.eventstream import EventStreamError, encode_frame
from tooldisco.apis.anthropic.stitch import AnthropicEventStitcher, EventDecoder
from tooldisco.apis.base import Failure, error_kind

# error_kind -> the InvokeModelWithResponseStream exception (members of its ResponseStream union).
EXCEPTIONS = {
    "rate_limit": "throttlingException",
    "overloaded": "serviceUnavailableException",
    "timeout": "modelTimeoutException",
    "invalid_request": "validationException",
    "server_error": "internalServerException",
}
_CHUNK = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}


class InvokeStitcher(AnthropicEventStitcher):
    """InvokeModelWithResponseStream frames of Anthropic events."""

    carries: ClassVar[dict[str, str]] = {**AnthropicEventStitcher.carries, "message_stop": METRICS}

    def _new_decoder(self) -> EventDecoder:
        return InvokeStreamDecoder()

    def _flush(self) -> list[Event]:
        try:
            return super()._flush()
        except EventStreamError:  # the body ended inside a frame: end_round reports it incomplete
            return []

    def _encode(self, event: dict[str, Any]) -> bytes:
        wrapped = base64.b64encode(dumps(event).encode("utf-8")).decode("ascii")
        return encode_frame(_CHUNK, dumps({"bytes": wrapped}).encode("utf-8"))

    def _error_bytes(self, failure: Failure) -> bytes:
        headers = {
            ":exception-type": EXCEPTIONS[error_kind(failure.status)],
            ":content-type": "application/json",
            ":message-type": "exception",
        }
        return encode_frame(headers, dumps({"message": failure.text()}).encode("utf-8"))
