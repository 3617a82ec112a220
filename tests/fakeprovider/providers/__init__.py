"""The wire APIs the fake serves. Add a module per API and list an instance here."""

from __future__ import annotations

from .anthropic import AnthropicMessages
from .base import Incoming, Provider
from .bedrock import BedrockConverse, BedrockInvoke
from .gemini import Gemini
from .openai_chat import OpenAIChat
from .openai_responses import OpenAIResponses

PROVIDERS: list[Provider] = [
    AnthropicMessages(),
    OpenAIChat(),
    OpenAIResponses(),
    Gemini(),
    BedrockConverse(),
    BedrockInvoke(),
]

__all__ = [
    "PROVIDERS",
    "AnthropicMessages",
    "BedrockConverse",
    "BedrockInvoke",
    "Gemini",
    "Incoming",
    "OpenAIChat",
    "OpenAIResponses",
    "Provider",
]
