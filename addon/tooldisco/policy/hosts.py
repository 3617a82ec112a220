"""Which unprocessed requests deserve a word to the user: tools sent to an API tool discovery
speaks, on a host ``hosts:`` does not list. Without it, a proxy in front of an unlisted host
(a reverse proxy to an OpenAI-compatible provider) passes every tool untouched in silence."""

from __future__ import annotations

from tooldisco.apis.registry import detect
from tooldisco.config import Config

# Cheap signs of tools in a body, looked for as bytes: the check runs on every unprocessed
# request, so it never parses. Anthropic, OpenAI and Bedrock InvokeModel send "tools"; Bedrock
# Converse sends "toolConfig": {"tools": ...}; Gemini sends "functionDeclarations".
_TOOL_MARKERS = (b'"tools"', b'"functionDeclarations"')


def unlisted_host(config: Config, host: str, method: str, path: str, body: bytes | None) -> str | None:
    """``host`` (the one ``hosts:`` is matched against) when the request would be processed
    were the host listed, it is not listed, and the body carries tools; else None."""
    if not config.tool_discovery.enabled or config.handles_host(host) or not body:
        return None
    if detect(method, path) is None:
        return None
    if not any(marker in body for marker in _TOOL_MARKERS):
        return None
    return host.lower().rstrip(".")
