"""Tenants: one per credential, whatever its form; none without a credential; never the
credential itself."""

from __future__ import annotations

import hashlib

import pytest
from tooldisco.core.tenants import tenant_of

ANTHROPIC = "sk-ant-api03-R2D2C3POxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
GEMINI = "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"
AKID = "AKIAIOSFODNN7EXAMPLE"


def sigv4(key_id: str, signature: str) -> str:
    return (f"AWS4-HMAC-SHA256 Credential={key_id}/20261122/us-east-1/bedrock/aws4_request, "
            f"SignedHeaders=content-type;host;x-amz-date, Signature={signature}")


EVERY_FORM = [
    ({"x-api-key": ANTHROPIC}, ""),
    ({"authorization": f"Bearer {ANTHROPIC}"}, ""),
    ({"x-goog-api-key": GEMINI}, ""),
    ({}, f"key={GEMINI}"),
    ({}, f"alt=sse&key={GEMINI}"),
    ({"api-key": "0123456789abcdef0123456789abcdef"}, "api-version=2024-10-21"),
    ({"authorization": sigv4(AKID, "ab" * 32)}, ""),
    ({}, f"X-Amz-Credential={AKID}%2F20261122%2Fus-east-1%2Fbedrock%2Faws4_request&X-Amz-Signature=00"),
    ({"authorization": "Basic dXNlcjpwYXNz"}, ""),
]


@pytest.mark.parametrize("headers, query", EVERY_FORM)
def test_every_credential_form_gives_a_tenant_that_never_reveals_it(headers, query):
    tenant = tenant_of(headers, query)
    assert tenant is not None and len(tenant) == 32 and int(tenant, 16) >= 0
    for secret in (ANTHROPIC, GEMINI, AKID, "0123456789abcdef", "dXNlcjpwYXNz"):
        assert secret not in tenant and secret[-8:] not in tenant
        # not a plain (reversible by lookup) digest of the credential either
        assert hashlib.sha256(secret.encode()).hexdigest()[:32] != tenant
        assert hashlib.md5(secret.encode()).hexdigest() != tenant


def test_distinct_keys_are_distinct_tenants():
    distinct = [
        ({"x-api-key": ANTHROPIC}, ""), ({"x-api-key": "sk-other"}, ""), ({"x-goog-api-key": GEMINI}, ""),
        ({}, "key=other"), ({"api-key": "0123456789abcdef"}, ""), ({"authorization": "Basic dXNlcjpwYXNz"}, ""),
        ({"authorization": sigv4(AKID, "aa")}, ""), ({"authorization": sigv4("AKIAOTHERKEY00000000", "aa")}, ""),
    ]
    assert len({tenant_of(headers, query) for headers, query in distinct}) == len(distinct)


def test_the_same_key_in_any_form_is_the_same_tenant():
    """One secret is one caller to the provider: Gemini takes it as a header or ``?key=``,
    Anthropic as ``x-api-key`` or a bearer token."""
    gemini = {tenant_of({"x-goog-api-key": GEMINI}, ""), tenant_of({}, f"key={GEMINI}"),
              tenant_of({}, f"?alt=sse&key={GEMINI}"), tenant_of({"authorization": f"Bearer {GEMINI}"}, "")}
    assert len(gemini) == 1
    assert tenant_of({"x-api-key": ANTHROPIC}, "") == tenant_of({"authorization": f"bearer  {ANTHROPIC} "}, "")


def test_sigv4_tenant_is_the_access_key_id_not_the_signature():
    header = tenant_of({"authorization": sigv4(AKID, "aa" * 32)}, "")
    assert header == tenant_of({"authorization": sigv4(AKID, "bb" * 32)}, "")
    presigned = f"X-Amz-Credential={AKID}%2F20261123%2Fus-west-2%2Fbedrock%2Faws4_request&X-Amz-Signature=cc"
    assert header == tenant_of({}, presigned)
    # An access key id is not an API key of the same text.
    assert header != tenant_of({"x-api-key": AKID}, "")


def test_every_credential_a_request_carries_counts():
    both = tenant_of({"x-goog-api-key": GEMINI}, "key=other")
    assert both not in {tenant_of({"x-goog-api-key": GEMINI}, ""), tenant_of({}, "key=other")}
    assert tenant_of({"api-key": "k", "authorization": "Bearer t"}, "") != tenant_of({"api-key": "k"}, "")


@pytest.mark.parametrize(
    "headers, query",
    [
        ({}, ""),
        ({"content-type": "application/json", "user-agent": "curl/8"}, "alt=sse"),
        ({"x-api-key": "", "authorization": "  "}, "key="),
        ({"proxy-authorization": "Basic dXNlcjpwYXNz", "cookie": "a=b"}, ""),  # not the provider's credential
        ({"authorization": "Bearer "}, "keys=x&apikey=y"),
    ],
)
def test_no_credential_no_tenant(headers, query):
    assert tenant_of(headers, query) is None


def test_the_tenant_is_stable_across_processes():
    """Sessions survive restarts: no per-process salt."""
    assert tenant_of({"x-api-key": "sk-stable"}, "") == hashlib.sha256(
        b'tooldisco tenant v1\0[["key", "sk-stable"]]'
    ).hexdigest()[:32]
