"""Credentials kept out of what the proxy prints (glue.redaction)."""

import io
import logging

from loguru import logger
from mitmproxy.addons import dumper
from mitmproxy.test import taddons
from tooldisco.core.redact import RedactingWriter
from tooldisco.glue.redaction import Redaction

from tests.unit.glue.chain import Chain

KEY = "AIzaSyTESTKEYTESTKEYTESTKEY"


def test_engine_and_mitmproxy_log_lines_are_redacted(caplog):
    caplog.set_level(logging.DEBUG)
    chain = Chain()
    with taddons.context(*chain.addons):
        logging.getLogger("mitmproxy.proxy").warning("GET https://g.example/v1?key=%s", KEY)
        logger.warning("engine saw x-api-key: {}", KEY)  # loguru, as the engine logs
    assert "engine saw x-api-key" in caplog.text  # the engine's line reached mitmproxy's log
    assert KEY not in caplog.text and "key=[redacted]" in caplog.text and "x-api-key: [redacted]" in caplog.text


def test_mitmdumps_flow_listing_prints_through_the_redacting_writer():
    printer = dumper.Dumper(io.StringIO())
    chain = Chain()
    with taddons.context(printer, *chain.addons):
        chain.get(Redaction).running()
        assert isinstance(printer.outfp, RedactingWriter)
        printer.outfp.write(f"x-goog-api-key: {KEY}\n")
        assert KEY not in printer.outfp.inner.getvalue()
