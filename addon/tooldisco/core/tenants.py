"""Who a request belongs to, so that per-caller state never crosses callers.

Why: sessions are keyed by tenant and first message; if two callers shared a tenant, a
session both open with "hi" would merge and one caller's search would load the other's
private tool definitions. The tenant is derived from the credential the provider bills,
in every form the APIs accept it, and a caller with none gets no tenant (and no state).

The hash is a plain SHA-256 behind a domain-separation prefix, not a keyed hash:
sessions survive restarts and several proxies may share a sessions dir, so the tenant
must be stable without a secret to keep, copy and protect; provider API keys are
high-entropy, so the digest cannot be inverted, and the prefix keeps it from matching
any other system's ``sha256(key)``. Nothing stores it either: sessions hash it again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from urllib.parse import parse_qs

DOMAIN = b"tooldisco tenant v1\0"
# The key itself: Anthropic, Gemini, Azure OpenAI. Bearer tokens (OpenAI, Anthropic OAuth,
# Bedrock API keys) count as the same kind: one secret is one caller in whichever header.
KEY_HEADERS = ("x-api-key", "x-goog-api-key", "api-key")
# SigV4 signs every request anew; the access key id in the scope is what stays.
_SIGV4_KEY_ID = re.compile(r"Credential=([^/,\s]+)/")


def _from_authorization(value: str) -> tuple[str, str]:
    scheme, _, rest = value.partition(" ")
    if scheme.lower() == "bearer":  # RFC 7235: the scheme is case-insensitive
        return "key", rest.strip()
    if scheme.startswith("AWS4-") and (m := _SIGV4_KEY_ID.search(rest)):
        return "aws", m.group(1)
    return "authorization", value  # another scheme: the whole value is the credential


def _credentials(headers: Mapping[str, str], query: str) -> Iterator[tuple[str, str]]:
    for name in KEY_HEADERS:
        if value := headers.get(name, "").strip():
            yield "key", value
    if value := headers.get("authorization", "").strip():
        yield _from_authorization(value)
    query = query.removeprefix("?")
    if not query:  # most requests: no parsing
        return
    params = parse_qs(query)
    for value in params.get("key", []):  # Gemini's ?key=
        yield "key", value
    for value in params.get("X-Amz-Credential", []):  # presigned SigV4: AKID/date/region/service/aws4_request
        yield "aws", value.split("/", 1)[0]


def tenant_of(headers: Mapping[str, str], query: str) -> str | None:
    """A stable hash of every credential the request carries (``headers`` lowercase,
    ``query`` the URL's query string); None when it carries none: keep no state for it.

    The same key sent as a header or as ``?key=`` is the same tenant: the provider treats
    both as the same caller, and a caller switching forms keeps its sessions."""
    found = sorted({(kind, value) for kind, value in _credentials(headers, query) if value})
    if not found:
        return None
    return hashlib.sha256(DOMAIN + json.dumps(found).encode()).hexdigest()[:32]  # 128 bits
