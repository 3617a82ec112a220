"""Credentials never reach a log line: URLs, header values, known key shapes, and whole log
records, checked against what httpx, mitmproxy and the json module really print."""

from __future__ import annotations

import io
import json
import logging

import httpx
import pytest
from mitmproxy import http
from tooldisco.core.redact import MASK, RedactingFilter, install, redact, redact_header

GEMINI = "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"
ANTHROPIC = "sk-ant-api03-R2D2C3POxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
OPENAI = "sk-proj-Abc123Def456Ghi789Jkl012"
AKID, SIGNATURE = "AKIAIOSFODNN7EXAMPLE", "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
TOKEN = "IQoJb3JpZ2luX2VjEXAMPLEtoken"
SECRETS = (GEMINI, ANTHROPIC, OPENAI, AKID, SIGNATURE, TOKEN, "hunter2", "ya29.a0AfH6SMBx",
           "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl")
GEMINI_URL = f"https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:generateContent?key={GEMINI}"
SIGV4 = (f"AWS4-HMAC-SHA256 Credential={AKID}/20261122/us-west-2/bedrock/aws4_request, "
         f"SignedHeaders=content-type;host;x-amz-date, Signature={SIGNATURE}")


def clean(text: str) -> bool:
    return not any(secret in text for secret in SECRETS)


@pytest.mark.parametrize(
    "url, kept",
    [
        (GEMINI_URL, "models/gemini-2.5-pro:generateContent?key="),
        (f"https://generativelanguage.googleapis.com/v1beta/models/g:streamGenerateContent?alt=sse&key={GEMINI}",
         "?alt=sse&key="),
        (f"https://api.example.com/v1/x?API_KEY={OPENAI}&limit=5", "&limit=5"),
        ("https://oauth2.example.com/cb?state=xyz&access_token=ya29.a0AfH6SMBx#frag", "?state=xyz&access_token="),
        (f"https://bedrock-runtime.us-west-2.amazonaws.com/model/m/invoke?X-Amz-Algorithm=AWS4-HMAC-SHA256"
         f"&X-Amz-Credential={AKID}%2F20261122%2Fus-west-2%2Fbedrock%2Faws4_request&X-Amz-Date=20261122T000000Z"
         f"&X-Amz-Security-Token={TOKEN}&X-Amz-Signature={SIGNATURE}",
         "&X-Amz-Date=20261122T000000Z"),
        ("http://user:hunter2@proxy.internal:3128/", "http://user:"),
    ],
)
def test_credentials_in_urls_are_masked_and_the_rest_kept(url, kept):
    out = redact(url)
    assert clean(out) and MASK in out and kept in out


def test_urls_without_credentials_are_unchanged():
    for text in ("https://api.anthropic.com/v1/messages?beta=true",
                 "https://example.com/search?monkey=1&keyboard=2&q=key%3Dvalue",
                 "tool discovery: on, strategy tool-search, hosts api.anthropic.com, *.googleapis.com",
                 "refusing a WebSocket upgrade to api.openai.com/v1/responses: clients fall back to HTTP",
                 "kept 8 of 125 tools (mcp__github__create_issue, disk-usage-analyzer-tool)"):
        assert redact(text) == text


def test_header_values_as_logged_in_every_common_form():
    headers = http.Headers([(b"x-api-key", ANTHROPIC.encode()), (b"content-type", b"application/json"),
                            (b"authorization", SIGV4.encode()), (b"x-amz-security-token", TOKEN.encode())])
    forms = [
        repr(headers),  # mitmproxy: Headers[(b'x-api-key', b'…'), …]
        repr(list(headers.items(multi=True))),  # [('x-api-key', '…'), …]
        repr(dict(headers)),
        json.dumps(dict(headers)),
        "\r\n".join(f"{k}: {v}" for k, v in headers.items(multi=True)),  # an HTTP header block
        "x-api-key=" + ANTHROPIC + " content-type=application/json",  # key=value fields
    ]
    for text in forms:
        out = redact(text)
        assert clean(out) and "application/json" in out, out


def test_redact_header():
    assert redact_header("Authorization", f"Bearer {OPENAI}") == MASK
    for name in ("x-api-key", "X-Goog-Api-Key", "api-key", "Cookie", "x-amz-security-token"):
        assert redact_header(name, "anything") == MASK
    assert redact_header("content-type", "application/json") == "application/json"
    assert redact_header("x-debug", f"via {GEMINI}") == f"via {MASK}"


def test_credentials_recognised_by_shape_anywhere():
    text = (f"upstream said 401 for key {ANTHROPIC}; retry with {OPENAI} or {GEMINI}, "
            f"bedrock key ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl, role {AKID}, oauth ya29.a0AfH6SMBx, "
            f"header was Bearer abc.def-ghi and {SIGV4}")
    out = redact(text)
    assert clean(out) and "abc.def-ghi" not in out and "upstream said 401" in out


def test_redaction_is_idempotent():
    text = f"{GEMINI_URL}\nAuthorization: Bearer {OPENAI}\n{SIGV4}"
    once = redact(text)
    assert redact(once) == once


# --- log records ----------------------------------------------------------------------------


@pytest.fixture
def captured():
    """A logger whose one handler has the filter installed, and what it printed."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("test_redact")
    logger.handlers, logger.propagate, logger.level = [handler], False, logging.DEBUG
    install(logger)
    yield logger, out
    logger.handlers = []


def test_httpx_request_log_line_is_redacted(captured):
    """httpx logs ``HTTP Request: POST <httpx.URL> …`` at INFO: the URL is an argument, not a str."""
    logger, out = captured
    httpx_logger = logging.getLogger("httpx")
    httpx_logger.addHandler(logger.handlers[0])
    old_level = httpx_logger.level
    httpx_logger.setLevel(logging.INFO)  # setLevel, not .level=: it also clears the enabled-for cache
    # Another test's logging.config may have disabled existing loggers; this one must speak.
    old_disabled, httpx_logger.disabled = httpx_logger.disabled, False
    try:
        with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={}))) as client:
            client.post(GEMINI_URL, json={})
    finally:
        httpx_logger.removeHandler(logger.handlers[0])
        httpx_logger.setLevel(old_level)
        httpx_logger.disabled = old_disabled
    printed = out.getvalue()
    assert "HTTP Request: POST https://generativelanguage.googleapis.com/" in printed and "200 OK" in printed
    assert clean(printed) and f"?key={MASK}" in printed


def test_a_records_arguments_traceback_and_stack_are_redacted(captured):
    logger, out = captured
    logger.warning("re-forward to %s failed (%d tries) with %r", httpx.URL(GEMINI_URL), 2, {"x-api-key": ANTHROPIC})
    try:
        raise ValueError(f"bad credential {OPENAI}")
    except ValueError:
        logger.exception("failed for %s", AKID, stack_info=True)
    printed = out.getvalue()
    assert clean(printed) and "(2 tries)" in printed and "ValueError: bad credential" in printed
    assert "Stack (most recent call last)" in printed


def test_an_unformattable_record_is_still_redacted(captured, monkeypatch):
    logger, out = captured
    errors = []
    monkeypatch.setattr(logging.Handler, "handleError", lambda self, record: errors.append(record))
    logger.error("two args %s %s", GEMINI_URL)
    assert clean(out.getvalue()) and GEMINI_URL.split("?")[0] in out.getvalue() and not errors


def test_install_covers_every_handler_once_and_records_from_child_loggers():
    parent = logging.getLogger("test_redact_parent")
    streams = [io.StringIO(), io.StringIO()]
    parent.handlers = [logging.StreamHandler(s) for s in streams]
    parent.propagate = False
    try:
        install(parent)
        install(parent)
        assert all(sum(isinstance(f, RedactingFilter) for f in h.filters) == 1 for h in parent.handlers)
        logging.getLogger("test_redact_parent.child").warning("GET %s", GEMINI_URL)
        assert all(clean(s.getvalue()) and f"key={MASK}" in s.getvalue() for s in streams)
    finally:
        parent.handlers = []


def test_a_record_is_redacted_once_however_many_handlers_print_it(monkeypatch):
    """Every handler of mitmproxy's root logger carries the filter: the first redacts the
    record, the others print it as it is, redacted, without scanning it again."""
    from tooldisco.core import redact as redact_mod

    calls: list[str] = []
    monkeypatch.setattr(redact_mod, "redact", lambda text: calls.append(text) or redact(text))
    parent = logging.getLogger("test_redact_once")
    streams = [io.StringIO() for _ in range(3)]
    parent.handlers = [logging.StreamHandler(s) for s in streams]
    parent.propagate = False
    try:
        install(parent)
        parent.warning("GET %s", GEMINI_URL)
        assert len(calls) == 1
        assert all(clean(s.getvalue()) and f"key={MASK}" in s.getvalue() for s in streams)
    finally:
        parent.handlers = []


@pytest.mark.parametrize("styled", [False, True], ids=["plain", "coloured"])
@pytest.mark.parametrize("detail", [1, 2, 3, 4])
def test_mitmdumps_flow_listing_prints_no_credential(styled, detail):
    """mitmdump's printer writes to its own stream, not through logging; ``redact_printer`` wraps it.
    Coloured (a terminal): the colour codes sit between a header's name and its value."""
    from mitmproxy.addons import dumper
    from mitmproxy.test import taddons, tflow, tutils
    from tooldisco.core.redact import redact_printer

    out = io.StringIO()
    printer = dumper.Dumper(out)
    printer.out_has_vt_codes = styled
    assert redact_printer(printer) and redact_printer(printer)  # twice (a script reload): one wrapper
    query = f"key={GEMINI}&X-Amz-Credential={AKID}&X-Amz-Security-Token={TOKEN}&X-Amz-Signature={SIGNATURE}"
    request = tutils.treq(path=f"/v1/models?{query}".encode(), content=b"")
    request.headers.update({"x-api-key": ANTHROPIC, "authorization": SIGV4, "x-amz-security-token": TOKEN,
                            "api-key": "hunter2", "x-goog-api-key": GEMINI})
    flow = tflow.tflow(req=request, resp=True)
    with taddons.context(printer) as tctx:
        tctx.configure(printer, flow_detail=detail)
        printer.response(flow)
    printed = out.getvalue()
    assert clean(printed), printed
    assert "/v1/models" in printed and (detail < 2 or "x-api-key" in printed)
    assert flow.request.headers["x-api-key"] == ANTHROPIC and SIGNATURE in flow.request.url  # the flow is untouched


def test_a_credential_a_view_prints_on_the_line_below_its_name():
    text = f"    X-Amz-SignedHeaders: host\n    X-Amz-Signature: \n      {SIGNATURE}\n    X-Amz-Date: 20261122\n"
    assert redact(text) == f"    X-Amz-SignedHeaders: host\n    X-Amz-Signature: {MASK}\n    X-Amz-Date: 20261122\n"
    assert redact("a cache key: 5d67") == "a cache key: 5d67"  # only a line that is the pair alone


def test_a_long_run_of_letters_is_redacted_in_linear_time():
    """A printed body may hold a base64 image: a pattern tried from each character of a long
    run, rescanning the rest of it each time, would take minutes over 300 KB; linear, well
    under a second (bounded generously: the machine may be loaded)."""
    import time

    text = "data:image/png;base64," + "iVBORw0KGgo" * 30_000 + " https://user:hunter2@example.com/"
    started = time.perf_counter()
    out = redact(text)
    assert time.perf_counter() - started < 20
    assert out.endswith(f"https://user:{MASK}@example.com/")
