"""What the two OpenAI wire APIs (``openai_chat``, ``openai_responses``) share: call arguments
sent as JSON text, the tools ``tool_choice`` names, and OpenAI's error object. Apart: no other
API has these shapes, and neither OpenAI package imports the other."""

from __future__ import annotations

from typing import Any

from tooldisco.apis import streaming as streams
from tooldisco.apis.base import OPENAI_ERROR_TYPES, Failure, error_kind


def parse_arguments(text: Any) -> Any:
    """Tool call arguments arrive as JSON text in some APIs; keep the text if it is not JSON."""
    return streams.parse_arguments(text) if isinstance(text, str) else text


def forced_names(choice: Any) -> set[str]:
    """Tools named by tool_choice (single function or an allowed_tools list)."""
    if not isinstance(choice, dict):
        return set()
    if choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else choice.get("name")
        return {name} if isinstance(name, str) else set()
    if choice.get("type") == "allowed_tools":
        spec = choice.get("allowed_tools", choice)
        tools = spec.get("tools") if isinstance(spec, dict) else None
        out = set()
        for t in streams.as_list(tools):
            fn = t.get("function") if isinstance(t, dict) else None
            name = fn.get("name") if isinstance(fn, dict) else (t.get("name") if isinstance(t, dict) else None)
            if isinstance(name, str):
                out.add(name)
        return out
    return set()


def openai_error_object(failure: Failure) -> dict[str, Any]:
    """The OpenAI error object for a failure: the upstream's own where its body has one."""
    kind = OPENAI_ERROR_TYPES[error_kind(failure.status)]
    base = {"message": failure.text(), "type": kind, "param": None, "code": kind}
    return {**base, **(failure.upstream_error() or {}), "message": failure.text()}
