"""Mask credentials in text bound for logs.

Why: a log line is copied into terminals, CI output and bug reports; a Gemini URL carries
its API key in ``?key=``, a presigned AWS URL its signature, and an HTTP client or an
exception message may print either, or a header. ``redact`` masks what it recognises in
any text; ``RedactingFilter`` applies it to every log record a handler emits, and
``RedactingWriter`` to what mitmdump's flow listing prints, which bypasses logging.
"""

from __future__ import annotations

import logging
import re
from typing import Any, TextIO

MASK = "[redacted]"

# Headers whose whole value is a credential (Anthropic, OpenAI, Gemini, Azure OpenAI, AWS, cookies).
CREDENTIAL_HEADERS = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key",
    "x-amz-security-token", "cookie", "set-cookie",
    "x-tooldisco-relay",  # the live relay's one-time token (``net.relay``)
})
# Query parameters that carry a credential: Gemini ``?key=``, OAuth tokens, presigned AWS/GCS URLs.
CREDENTIAL_PARAMS = (
    "key", "api_key", "apikey", "api-key", "access_token", "refresh_token", "id_token", "token",
    "client_secret", "password", "sig", "signature",
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential",
)

_NAMES = "|".join(re.escape(h) for h in sorted(CREDENTIAL_HEADERS, key=len, reverse=True))
_PARAMS = "|".join(re.escape(p) for p in CREDENTIAL_PARAMS)
# A header line's value (``Name: value`` to the end of the line) or a quoted value in a
# repr/JSON pair: ``('x-api-key', 'sk-…')``, ``{"x-api-key": "sk-…"}``, ``(b'x-api-key', b'sk-…')``.
_HEADER = re.compile(
    rf"(?<![\w-])(?P<name>{_NAMES})(?P<sep>['\"]\s*[:,]\s*b?['\"]|\s*:\s*)(?P<value>[^'\"\r\n]*)",
    re.IGNORECASE,
)
# ``name=value`` up to the next parameter or space: a URL's query parameter, or a header as a field.
_ASSIGNED = re.compile(
    rf"(?P<name>(?:(?<=[?&;])(?:{_PARAMS})|(?<![\w-])(?:{_NAMES}))=)[^&#\s'\"]*", re.IGNORECASE
)
# A line that is only ``name: value`` with a credential's name, the value possibly on the more
# indented lines below it: how mitmproxy's views print a query string or a form (YAML-like).
_PAIR_LINE = re.compile(
    rf"^(?P<name>(?P<indent>[ \t]*)['\"]?(?:{_NAMES}|{_PARAMS})['\"]?[ \t]*:)"
    rf"(?P<value>[ \t]*[^\s].*|[ \t]*(?:\n(?P=indent)[ \t]+\S.*)+)$",
    re.IGNORECASE | re.MULTILINE,
)
# scheme://user:pass@. The scheme starts where a run of scheme characters starts: tried from
# inside a long run (a base64 body) it would rescan the run from each of its characters.
_USERINFO = re.compile(r"(?<![a-z0-9+.-])(?P<name>[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@", re.IGNORECASE)
# Credentials recognisable by shape wherever they appear.
_SHAPES = re.compile(
    r"(?<=[Bb]earer )[^\s'\",]+"  # RFC 6750 bearer token
    r"|(?<=Signature=)[0-9a-fA-F]+"  # SigV4 Authorization
    r"|\bsk-[A-Za-z0-9_-]{16,}"  # Anthropic (sk-ant-…) and OpenAI (sk-, sk-proj-…) API keys
    r"|\bAIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|\bya29\.[0-9A-Za-z_.-]+"  # Google OAuth access tokens
    r"|\bABSK[A-Za-z0-9+/=]{16,}"  # Bedrock API keys
    r"|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"  # AWS access key ids (long-term, temporary)
)


# Substrings (lowercase) without which a pattern cannot match: a pattern is run only when one is
# there. Scanning a large body (a flow printed whole) for them is cheap; running every pattern
# over it is not.
_NAME_HINTS = tuple(sorted(CREDENTIAL_HEADERS | set(CREDENTIAL_PARAMS)))
_SHAPE_HINTS = ("bearer ", "signature=", "sk-", "aiza", "ya29.", "absk", "akia", "asia")


def redact(text: str) -> str:
    """``text`` with every credential it recognises replaced by ``[redacted]``; idempotent."""
    low = text.lower()
    if any(n in low for n in _NAME_HINTS):
        text = _PAIR_LINE.sub(lambda m: m["name"] + " " + MASK, text)
        text = _HEADER.sub(lambda m: m["name"] + m["sep"] + (MASK if m["value"].strip() else m["value"]), text)
        text = _ASSIGNED.sub(lambda m: m["name"] + MASK, text)
    if "://" in low and "@" in low:
        text = _USERINFO.sub(lambda m: m["name"] + MASK + "@", text)
    if any(h in low for h in _SHAPE_HINTS):
        text = _SHAPES.sub(MASK, text)
    return text


# ECMA-48 CSI sequences: the colours mitmdump's flow listing puts around header names and values.
_STYLE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def redact_styled(text: str) -> str:
    """``redact`` over terminal-styled text. A colour code between a header's name and its
    value would hide the pair from ``redact``: text holding a credential is printed without
    its colours, any other as it is."""
    if "\x1b" not in text:
        return redact(text)
    plain = _STYLE.sub("", text)
    masked = redact(plain)
    return text if masked == plain else masked


class RedactingWriter:
    """A text stream that redacts each text written to it (``redact_styled``) before passing it on.

    Why each write whole: mitmdump's printer ``print``s every header line, and every body, as
    one text (``print`` writes it in one call, then the newline), so one write holds a name and
    its value, even a value a view put on the lines below its name. Everything else
    (``isatty``, ``encoding``, ``fileno``, ``flush``) is the wrapped stream's."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(redact_styled(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def redact_printer(printer: Any) -> bool:
    """Make mitmdump's flow printer (the ``dumper`` addon) print through a ``RedactingWriter``;
    whether it does now. It writes each flow's URL, headers and bodies (``flow_detail`` 1 to 4)
    to its own ``outfp`` with ``print``, not through logging, so ``RedactingFilter`` never sees
    them. Only the printed text changes: the flow itself, and what goes upstream, stay as they are."""
    out = getattr(printer, "outfp", None)
    if out is None:
        return False
    if not isinstance(out, RedactingWriter):
        printer.outfp = RedactingWriter(out)
    return True


def redact_header(name: str, value: str) -> str:
    """A header value as it may be logged: masked whole for a credential header."""
    return MASK if name.lower() in CREDENTIAL_HEADERS else redact(value)


_DONE = "tooldisco_redacted"  # set on a record once its message and traceback are redacted
REDACTED = _DONE  # the ``extra`` key that says a record comes redacted already (the loguru sink's)


class RedactingFilter(logging.Filter):
    """Redacts a record's message, arguments, traceback and stack before any handler formats it.

    The message is formatted here (arguments such as a library's URL object are not strings), so
    the record leaves with ``args`` empty. Install it on handlers: a logger's own filters do
    not see records propagated from child loggers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _DONE, False):  # one record goes to every handler: redacted by the first
            return True
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep what there is, redacted, for the handler to print
            message = f"{record.msg} {record.args!r}"
        record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        setattr(record, _DONE, True)
        return True


def install(logger: logging.Logger | None = None) -> RedactingFilter:
    """Put one ``RedactingFilter`` on every handler of ``logger`` (the root logger, where
    mitmproxy's handlers live) that has none yet; handlers added later need another call."""
    target = logger or logging.getLogger()
    redacting = RedactingFilter()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(redacting)
    return redacting
