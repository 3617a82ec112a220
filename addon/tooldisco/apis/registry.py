"""Which wire API speaks for a request (``ROUTES``): by path, once the host is known to be processed."""

from __future__ import annotations

import re
from typing import Callable
from urllib.parse import parse_qs, unquote

from tooldisco.apis.anthropic.adapter import AnthropicAdapter
from tooldisco.apis.base import Adapter
from tooldisco.apis.bedrock.adapter import ConverseAdapter, InvokeAdapter
from tooldisco.apis.gemini.adapter import GeminiAdapter
from tooldisco.apis.openai_chat.adapter import OpenAIChatAdapter
from tooldisco.apis.openai_responses.adapter import OpenAIResponsesAdapter

_ANTHROPIC = AnthropicAdapter()
_CHAT = OpenAIChatAdapter()
_RESPONSES = OpenAIResponsesAdapter()
_CONVERSE = {stream: ConverseAdapter(stream) for stream in (False, True)}

# .../models/{m}:generateContent, also tunedModels and Vertex's .../publishers/google/models/{m}.
_GEMINI = re.compile(r"/(?:models|tunedModels)/[^/]+:(generateContent|streamGenerateContent)$")
# /model/{id}/{operation}; the id may be a URL-encoded ARN (%3A, %2F) or, unencoded, hold slashes.
_BEDROCK = re.compile(r"/model/(.+)/(converse|converse-stream|invoke|invoke-with-response-stream)$")


def _alt_sse(query: str) -> bool:
    """``alt=sse`` (Google APIs also take ``$alt``): SSE; without it the stream is a JSON array."""
    params = parse_qs(query)
    return "sse" in params.get("alt", []) + params.get("$alt", [])


# The registry: one row per wire API, tried in order; each row reads the request's path (its
# query apart) and gives the adapter that speaks for it, or None. A new API is one package
# under ``tooldisco.apis`` and one row here.
Route = Callable[[str, str], Adapter | None]


def _anthropic(path: str, query: str) -> Adapter | None:
    return _ANTHROPIC if path.endswith("/v1/messages") else None


def _openai_chat(path: str, query: str) -> Adapter | None:
    return _CHAT if path.endswith("/chat/completions") else None


def _openai_responses(path: str, query: str) -> Adapter | None:
    return _RESPONSES if path.endswith("/responses") else None


def _gemini(path: str, query: str) -> Adapter | None:
    if gemini := _GEMINI.search(unquote(path)):
        stream = gemini.group(1) == "streamGenerateContent"
        return GeminiAdapter(stream=stream, sse=stream and _alt_sse(query))
    return None


def _bedrock(path: str, query: str) -> Adapter | None:
    if bedrock := _BEDROCK.search(path):
        operation = bedrock.group(2)
        if operation.startswith("converse"):
            return _CONVERSE[operation == "converse-stream"]
        return InvokeAdapter(operation == "invoke-with-response-stream", unquote(bedrock.group(1)))
    return None


ROUTES: tuple[Route, ...] = (_anthropic, _openai_chat, _openai_responses, _gemini, _bedrock)


def detect(method: str, path: str, host: str | None = None) -> Adapter | None:
    """``path`` may carry a query string (Claude Code sends ``/v1/messages?beta=true``).

    Suffix matches, so gateways and Azure deployments (``/openai/deployments/x/chat/completions``,
    ``/openai/v1/responses``) work too; anything else (count_tokens, models, files,
    ``/responses/compact``, ``:countTokens``…) is not ours. Some adapters carry the request's
    form (stream or not, and its framing) and are made per request. ``host`` is accepted from
    callers that know it, but the rules are path-only: gateways and map_remote make hosts
    an unreliable signal.
    """
    if method.upper() != "POST":
        return None
    raw, _, query = path.partition("?")
    p = raw.rstrip("/")
    for route in ROUTES:
        if (adapter := route(p, query)) is not None:
            return adapter
    return None


_GEMINI_MODEL = re.compile(r"/(?:models|tunedModels)/([^/:]+):")


def model_in_path(path: str) -> str:
    """The model a Gemini or Bedrock request names in its path ("" for the APIs whose body
    names it): what a turn is priced by and its context window looked up for."""
    raw = path.partition("?")[0]
    if gemini := _GEMINI_MODEL.search(unquote(raw)):
        return gemini.group(1)
    if bedrock := _BEDROCK.search(raw.rstrip("/")):
        return unquote(bedrock.group(1))
    return ""
