"""SigV4 re-signing: a boto3-signed Bedrock request, body changed, signed again, and checked
against botocore's signer computed independently."""

from __future__ import annotations

import hashlib

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from tooldisco import sigv4
from tooldisco.sigv4 import Status

AKID, SECRET, TOKEN = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "IQoJb3JpZ2luX2VjEXAMPLE"
URL = ("https://bedrock-runtime.us-west-2.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aus-west-2%3A123456789012%3A"
       "inference-profile%2Fus.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse")
OLD = b'{"messages":[{"role":"user","content":[{"text":"hi"}]}],"toolConfig":{"tools":[]}}'
NEW = b'{"messages":[{"role":"user","content":[{"text":"hi"}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"x"}}]}}'


@pytest.fixture(autouse=True)
def hermetic_chain(monkeypatch, tmp_path):
    """The standard chain sees only what a test puts in the environment."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    sigv4.chain_credentials.cache_clear()
    yield
    sigv4.chain_credentials.cache_clear()


def use_env(monkeypatch, key: str = AKID, token: str | None = TOKEN) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    if token:
        monkeypatch.setenv("AWS_SESSION_TOKEN", token)


def client_signed(body: bytes = OLD, token: str | None = TOKEN, **extra: str) -> list[tuple[str, str]]:
    """Headers as boto3 sends them: signed content-type, host, x-amz-date, x-amz-security-token."""
    request = AWSRequest("POST", URL, headers={"Content-Type": "application/json", **extra}, data=body)
    SigV4Auth(Credentials(AKID, SECRET, token), "bedrock", "us-west-2").add_auth(request)
    return [
        ("Host", "bedrock-runtime.us-west-2.amazonaws.com"),
        *request.headers.items(),
        ("User-Agent", "Boto3/1.44.5 md/Botocore#1.44.5"),
        ("amz-sdk-invocation-id", "00485912-a1ff-4045-b364-7cbfb36d7964"),
        ("Content-Length", str(len(body))),
    ]


def expected_signature(headers: list[tuple[str, str]], body: bytes, token: str | None = TOKEN) -> str:
    """botocore's signature for ``body`` over the signed headers, at the re-signed timestamp."""
    values = {k.lower(): v for k, v in headers}
    scope = sigv4.scope_of(values["authorization"])
    signer = SigV4Auth(Credentials(AKID, SECRET, token), "bedrock", "us-west-2")
    signed = {n: values[n] for n in scope.signed_headers if n in values}  # no host: botocore takes the URL's
    request = AWSRequest("POST", URL, headers=signed, data=body)
    request.context["timestamp"] = values["x-amz-date"]
    return signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)


def test_resigned_signature_is_botocores_for_the_new_body(monkeypatch):
    use_env(monkeypatch)
    original = client_signed()
    result = sigv4.resign("POST", URL, original, NEW)
    assert result.status is Status.RESIGNED and result.reason == ""
    new = {k.lower(): v for k, v in result.headers}
    old = {k.lower(): v for k, v in original}
    assert sigv4.scope_of(new["authorization"]).signed_headers == sigv4.scope_of(old["authorization"]).signed_headers
    assert new["authorization"].endswith(f"Signature={expected_signature(result.headers, NEW)}")
    assert new["authorization"] != old["authorization"] and new["x-amz-security-token"] == TOKEN
    # Same names, same order, only the signature's headers changed; unsigned ones untouched.
    assert [k for k, _ in result.headers] == [k for k, _ in original]
    assert {k for k in old if old[k] != new[k]} <= {"authorization", "x-amz-date"}
    assert new["content-length"] == str(len(OLD))  # unsigned: the HTTP layer sets it for the new body


def test_signed_content_length_and_payload_hash_follow_the_body(monkeypatch):
    use_env(monkeypatch, token=None)
    request = AWSRequest("POST", URL, headers={"Content-Type": "application/json", "Content-Length": str(len(OLD)),
                                               "X-Amz-Content-SHA256": hashlib.sha256(OLD).hexdigest()}, data=OLD)
    SigV4Auth(Credentials(AKID, SECRET), "bedrock", "us-west-2").add_auth(request)
    result = sigv4.resign("POST", URL, list(request.headers.items()), NEW)
    new = {k.lower(): v for k, v in result.headers}
    assert "content-length" in sigv4.scope_of(new["authorization"]).signed_headers
    assert new["content-length"] == str(len(NEW)) and new["x-amz-content-sha256"] == hashlib.sha256(NEW).hexdigest()
    assert new["authorization"].endswith(f"Signature={expected_signature(result.headers, NEW, token=None)}")


def test_host_comes_from_the_url_when_no_header_carries_it(monkeypatch):
    use_env(monkeypatch)
    headers = [(k, v) for k, v in client_signed() if k.lower() != "host"]  # HTTP/2 or an HTTP client's own Host
    result = sigv4.resign("POST", URL, headers, NEW)
    assert result.status is Status.RESIGNED and "host" not in {k.lower() for k, _ in result.headers}
    assert dict(result.headers)["Authorization"].endswith(expected_signature(result.headers, NEW))


@pytest.mark.parametrize(
    "headers",
    [[("Content-Type", "application/json")], [("Authorization", "Bearer ABSKQmVkcm9ja0FQSUtleS1example")]],
)
def test_requests_without_sigv4_need_nothing(headers):
    result = sigv4.resign("POST", URL, headers, NEW)
    assert result.status is Status.NOT_SIGNED and result.headers == headers
    assert sigv4.check(dict(headers))[0] is Status.NOT_SIGNED


def test_cannot_resign_without_credentials():
    original = client_signed()
    result = sigv4.resign("POST", URL, original, NEW)
    assert result.status is Status.CANNOT and result.headers == original and "no AWS credentials" in result.reason


def test_cannot_resign_as_someone_else(monkeypatch):
    use_env(monkeypatch, key="AKIAOTHERKEY00000000")
    status, reason = sigv4.check(client_signed())
    assert status is Status.CANNOT and "AKIA…MPLE" in reason and "AKIA…0000" in reason and SECRET not in reason


def test_cannot_resign_sigv4a_or_presigned(monkeypatch):
    use_env(monkeypatch)
    sigv4a = [("Authorization", ("AWS4-ECDSA-P256-SHA256 Credential=AKID/20261122/bedrock/aws4_request, "
                                 "SignedHeaders=host;x-amz-date;x-amz-region-set, Signature=3045"))]
    assert sigv4.resign("POST", URL, sigv4a, NEW).status is Status.CANNOT
    presigned = URL + "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=abc"
    assert sigv4.resign("POST", presigned, [], NEW).status is Status.CANNOT


def test_explicit_credentials_and_the_chain_cache(monkeypatch):
    original = client_signed()
    assert sigv4.resign("POST", URL, original, NEW, Credentials(AKID, SECRET, TOKEN)).status is Status.RESIGNED
    assert sigv4.check(original)[0] is Status.CANNOT  # the (empty) chain result is cached…
    use_env(monkeypatch)
    assert sigv4.check(original)[0] is Status.CANNOT
    sigv4.chain_credentials.cache_clear()  # …until cleared
    assert sigv4.check(original)[0] is Status.RESIGNED


def test_scope_of():
    scope = sigv4.scope_of("AWS4-HMAC-SHA256 Credential=AKID/20261122/eu-central-1/bedrock/aws4_request, "
                           "SignedHeaders=content-type;host;x-amz-date, Signature=deadbeef")
    assert scope == sigv4.Scope("AKID", "20261122", "eu-central-1", "bedrock", ("content-type", "host", "x-amz-date"))
    assert sigv4.scope_of("AWS4-HMAC-SHA256 Credential=AKID/20261122/bedrock, Signature=x") is None
    assert sigv4.scope_of("Bearer x") is None
