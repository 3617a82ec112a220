"""The wire APIs the fake serves. Add a module per API and list an instance here."""

from __future__ import annotations

from .anthropic import AnthropicMessages
from .base import Incoming, Provider
from .openai_chat import OpenAIChat

PROVIDERS: list[Provider] = [AnthropicMessages(), OpenAIChat()]

__all__ = ["PROVIDERS", "Incoming", "Provider", "AnthropicMessages", "OpenAIChat"]
