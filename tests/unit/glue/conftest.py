"""What the glue tests share."""

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _engine_logs_to_logging() -> Iterator[None]:
    """The addon's one log sink (``glue.redaction``), as mitmdump has it: what the addons log with
    loguru reaches the logging module, where ``caplog`` reads it."""
    from tooldisco.glue.redaction import Sink

    Sink.hold()
    yield
    Sink.release()
