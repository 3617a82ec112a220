"""The provider-handler interface: one module per wire API.

To add an API (Responses, Gemini, Bedrock, ...): subclass :class:`Provider`, implement
``match`` (route), ``parse`` (validate like the real API and build a
:class:`~tests.fakeprovider.model.Conversation`), ``render`` (a
:class:`~tests.fakeprovider.model.Reply` in the API's JSON or stream grammar) and
``error_response`` (the API's error JSON), then list an instance in
``providers/__init__.py``. The server does the rest: auth, JSON parsing, recording,
the script, pacing and chunked streaming.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from email.message import Message
from typing import Any, ClassVar

from ..cache import Segment
from ..model import TOOL_NAME_PATTERN, ApiError, Conversation, JsonResponse, Reply, Response

_TOOL_NAME_RE = re.compile(TOOL_NAME_PATTERN)


@dataclass
class Incoming:
    """The parts of an HTTP request a provider may look at."""

    method: str
    path: str  # without the query string
    query: dict[str, list[str]]
    headers: Message
    body: bytes
    raw_query: str = ""  # the query string as received (still percent-encoded)


class Provider(ABC):
    """One wire API of the fake."""

    #: short name used in recordings and in script conditions (``api=``)
    name: ClassVar[str]
    #: prefix for generated tool call ids
    call_id_prefix: ClassVar[str]
    #: whether usage counts cached tokens inside the input tokens (OpenAI, Gemini) or apart (Anthropic, Bedrock)
    input_includes_cache: ClassVar[bool] = True

    @abstractmethod
    def match(self, method: str, path: str) -> dict[str, str] | None:
        """Route parameters (possibly empty) if this API serves ``method path``, else None."""

    def authenticated(self, req: Incoming) -> bool:
        """Whether the request carries credentials (any value; the fake checks presence only)."""
        return bool(req.headers.get("x-api-key") or req.headers.get("authorization"))

    def check_auth(self, req: Incoming) -> None:
        """Raise :class:`ApiError` unless the request is authenticated (override for real checks)."""
        if not self.authenticated(req):
            raise ApiError(401, "invalid x-api-key: no credentials (x-api-key or Authorization) sent")

    @abstractmethod
    def parse(self, body: Any, req: Incoming, route: dict[str, str]) -> Conversation:
        """Validate ``body`` like the real API (raise :class:`ApiError`) and describe it."""

    @abstractmethod
    def render(self, reply: Reply, conv: Conversation) -> Response:
        """The reply in this API's grammar, streamed if ``conv.stream``."""

    @abstractmethod
    def prompt_segments(self, conv: Conversation) -> list[Segment]:
        """The prompt of a validated request as the API builds it: one segment per tool, system
        prompt and message, in the API's order (what the prompt cache compares; see ``cache.py``)."""

    def native_refusal(self, body: dict[str, Any]) -> ApiError | None:
        """The API's 400 for native deferral fields (``defer_loading``, ``tool_search``) from a model
        without them (``FakeProvider.no_native_models``); None where this API has none."""
        return None

    @abstractmethod
    def error_response(self, err: ApiError) -> JsonResponse:
        """The API's error body for ``err``."""

    def invalid_json(self) -> ApiError:
        """The error for a body that is not JSON (overridable for the exact wording)."""
        return ApiError(400, "There was an error parsing the body of your request: invalid JSON.")


def bad(message: str, param: str | None = None) -> ApiError:
    """A 400 invalid_request_error."""
    return ApiError(400, message, "invalid_request_error", param)


def check_tool_name(name: Any, where: str) -> None:
    """Reject a tool name the real APIs reject (``^[a-zA-Z0-9_-]{1,64}$``)."""
    if not isinstance(name, str) or not _TOOL_NAME_RE.match(name):
        raise bad(f"{where}: String should match pattern '{TOOL_NAME_PATTERN}' (got {name!r})", where)


def check_unique(names: list[str], where: str = "tools") -> None:
    """Reject duplicate tool names."""
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise bad(f"{where}: Tool names must be unique (duplicate {n!r}).", where)
        seen.add(n)


def require(body: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``body[key]``, or a 400 when it is missing or of the wrong type."""
    path = f"{where}.{key}" if where else key
    if key not in body:
        raise bad(f"{path}: Field required", path)
    value = body[key]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in _as_tuple(kind):
        raise bad(f"{path}: Input should be a valid {_type_names(kind)}", path)
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _type_names(kind: type | tuple[type, ...]) -> str:
    names = {str: "string", int: "integer", list: "list", dict: "dictionary", bool: "boolean"}
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))
