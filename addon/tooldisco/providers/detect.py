"""Which adapter speaks for a request: by path, once the host is known to be processed."""

from __future__ import annotations

from .anthropic import AnthropicAdapter
from .base import Adapter
from .openai_chat import OpenAIChatAdapter

_ANTHROPIC = AnthropicAdapter()
_CHAT = OpenAIChatAdapter()


def detect(method: str, path: str) -> Adapter | None:
    """``path`` may carry a query string (Claude Code sends ``/v1/messages?beta=true``).

    Suffix matches so gateways and Azure deployments (``/openai/deployments/x/chat/completions``)
    work too; anything else (count_tokens, models, files…) is not ours.
    """
    if method.upper() != "POST":
        return None
    p = path.split("?", 1)[0].rstrip("/")
    if p.endswith("/v1/messages"):
        return _ANTHROPIC
    if p.endswith("/chat/completions"):
        return _CHAT
    return None
