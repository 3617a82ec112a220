"""mitmweb out of the box: its login URL readable in the log, and the Comment column shown.

``mitmweb -s "$(tooldisco addon-path)"``, with no other option, must be usable: mitmweb makes a
random token at start and prints its login URL with it (``?token=…``), and the addon's log
redaction (``glue.redaction``) masks every ``?token=`` in the log, mitmweb's own URL included,
which left the user locked out. And the addon says what it did to a flow in the flow's comment,
which mitmweb's flow list shows only with ``comment`` among its ``web_columns``.

The login URL: a token is a credential, and credentials are never logged, with one exception
made here. mitmweb's own login URL is put back in mitmweb's own log lines (the "Web server
listening at" line, and "No web browser found …") when all of these hold: the token is the one
mitmweb made for this process (no ``web_password`` is set: mitmweb then prints no token at all);
the UI listens on a loopback address only, so the token opens nothing to anyone who cannot
already run commands on this machine; and the URL is exactly the one mitmweb prints. It is the
line mitmweb prints without the addon, the one its user needs to log in. Any other ``?token=``
stays masked, that one too in any other line. A UI on another interface keeps its token masked,
and the addon says in one line how to log in: ``web_password`` (an argon2 hash), or
``tooldisco run --web``, which makes the token and prints the URL once, outside the log.

The Comment column: ``comment`` is added to ``web_columns`` when mitmweb runs and it is missing.
"""

from __future__ import annotations

import ipaddress
import logging

from loguru import logger
from mitmproxy import ctx

from tooldisco.core.redact import redact

# mitmweb's loggers that print its login URL (the startup line; the one when no browser opened).
LOGIN_LOGGERS = frozenset({"mitmproxy.tools.web.master", "mitmproxy.tools.web.webaddons"})
COMMENT = "comment"


def loopback(host: str) -> bool:
    """Whether ``host`` (mitmweb's ``web_host``) is a loopback address only ("" is every interface)."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def login_url() -> str | None:
    """mitmweb's login URL with the token it made, when the log may show it (see the module's
    docstring); None otherwise, and outside mitmweb."""
    try:
        options, master = ctx.options, ctx.master
        if not hasattr(options, "web_password") or options.web_password or not loopback(options.web_host):
            return None
        url = master.web_url
    except Exception:  # no master, or no mitmweb
        return None
    return url if isinstance(url, str) and "?token=" in url else None


class LoginLine(logging.Filter):
    """Put mitmweb's login URL back in mitmweb's own log line, after ``RedactingFilter`` masked it.
    It sits after that filter on each handler (``WebUI.load``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name not in LOGIN_LOGGERS:
            return True
        url = login_url()
        if url is None:
            return True
        masked, message = redact(url), record.getMessage()
        if masked != url and masked in message:
            record.msg, record.args = message.replace(masked, url), ()
        return True


class WebUI:
    name = "tooldisco_webui"

    def __init__(self) -> None:
        self._filter = LoginLine()

    def load(self, loader) -> None:
        """After ``Redaction.load`` (the chain's order): this filter follows the redacting one."""
        for handler in logging.getLogger().handlers:
            if self._filter in handler.filters:
                handler.removeFilter(self._filter)
            handler.addFilter(self._filter)

    def running(self) -> None:
        options = ctx.options
        if not hasattr(options, "web_columns"):  # mitmdump, the console
            return
        if COMMENT not in options.web_columns:
            options.update(web_columns=[*options.web_columns, COMMENT])
        if not options.web_password and not loopback(options.web_host):
            logger.warning("mitmweb login: the UI listens on {}, beyond this machine, so its token stays masked in "
                           "the log; set web_password (an argon2 hash) and log in with that password, or start it "
                           "with tooldisco run --web, which prints the URL once", options.web_host or "every interface")

    def done(self) -> None:
        """A script reload builds a new instance, whose filter takes this one's place."""
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self._filter)
