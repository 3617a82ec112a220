"""The user's own words and what a conversation says (``History``): agents put reminders and
injected context in user turns, and every adapter's parse tells them apart the same way. Apart
because it reads decoded messages only, never a body's text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence, cast

from tooldisco.core.types import RequestView, Tool, ToolCatalog, Unsupported


_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.S)


def clean_text(text: str) -> str:
    """User text minus injected ``<system-reminder>`` blocks (agents add them to user turns)."""
    return _REMINDER.sub(" ", text).strip()


_OPEN_TAG = re.compile(r"<([A-Za-z_][\w.:-]*)(?:\s[^>]*)?>")
# Codex wraps the project's AGENTS.md in a user message that starts with this heading.
_AGENTS_MD = "# AGENTS.md instructions for "


def _blocks_only(text: str) -> bool:
    """True when ``text`` is nothing but ``<tag>…</tag>`` blocks (scanned, no regex backtracking)."""
    rest = text.strip()
    if not rest:
        return False
    while rest:
        opening = _OPEN_TAG.match(rest)
        if opening is None:
            return False
        closing = f"</{opening.group(1)}>"
        end = rest.find(closing, opening.end())
        if end < 0:
            return False
        rest = rest[end + len(closing) :].lstrip()
    return True


def injected(text: str) -> bool:
    """Context an agent injects as a user turn, not the user's words: Codex sends
    ``<environment_context>``, ``<user_instructions>``, ``<recommended_plugins>`` blocks and the
    ``# AGENTS.md instructions for …`` wrapper as user messages."""
    return text.startswith(_AGENTS_MD) or _blocks_only(text)


def user_text(texts: Iterable[Any]) -> str:
    """The user's own words among a message's text parts: reminders removed, injected parts skipped."""
    kept = [t for t in (clean_text(p) for p in texts if isinstance(p, str)) if t and not injected(t)]
    return "\n".join(kept)


@dataclass
class History:
    """What a conversation says, gathered while an adapter walks its messages: the user's
    last and first real text, which calls were made, and which were answered."""

    query: str = ""
    first: str = ""
    calls: dict[str, str] = field(default_factory=dict)  # call id -> tool name
    answered: set[str] = field(default_factory=set)  # call ids with a result
    answered_names: set[str] = field(default_factory=set)  # for APIs whose results name the tool

    def user(self, text: str) -> None:
        if text:
            self.query = text
            self.first = self.first or text

    def view(
        self, tools: Sequence[Tool] | ToolCatalog, forced: Iterable[str], stream: bool, hint: Any = None,
        continues: Any = None, model: Any = None,
    ) -> RequestView:
        used = {self.calls[i] for i in self.answered if i in self.calls}
        used |= {n for n in self.calls.values() if n in self.answered_names}
        catalog = tools if isinstance(tools, ToolCatalog) else None
        if catalog is not None and catalog.error is not None:
            raise Unsupported(catalog.error)
        return RequestView(
            tools=catalog.tools if catalog is not None else tuple(cast(Sequence[Tool], tools)),
            catalog=catalog,
            query=self.query,
            first_user=self.first,
            used=frozenset(used),
            forced=frozenset(forced),
            stream=stream,
            session_hint=hint if isinstance(hint, str) and hint else None,
            continues=continues if isinstance(continues, str) and continues else None,
            model=model if isinstance(model, str) else "",
        )
