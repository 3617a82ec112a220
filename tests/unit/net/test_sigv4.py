"""SigV4: only a request botocore would accept as signed by the proxy's own credentials is
re-signed; the re-signed headers are checked against botocore's signer computed independently."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from datetime import UTC, datetime, timedelta

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from tooldisco.net import sigv4
from tooldisco.net.sigv4 import Status

AKID, SECRET, TOKEN = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "IQoJb3JpZ2luX2VjEXAMPLE"
PROXY = ReadOnlyCredentials(AKID, SECRET, TOKEN)
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


def client_signed(body: bytes = OLD, token: str | None = TOKEN, url: str = URL, unsigned: bool = False,
                  **extra: str) -> list[tuple[str, str]]:
    """Headers as boto3 sends them: signed content-type, host, x-amz-date, x-amz-security-token."""
    request = AWSRequest("POST", url, headers={"Content-Type": "application/json", **extra}, data=body)
    request.context["payload_signing_enabled"] = not unsigned  # botocore then sends UNSIGNED-PAYLOAD
    SigV4Auth(Credentials(AKID, SECRET, token), "bedrock", "us-west-2").add_auth(request)
    return [
        ("Host", "bedrock-runtime.us-west-2.amazonaws.com"),
        *request.headers.items(),
        ("User-Agent", "Boto3/1.44.5 md/Botocore#1.44.5"),
        ("amz-sdk-invocation-id", "00485912-a1ff-4045-b364-7cbfb36d7964"),
        ("Content-Length", str(len(body))),
    ]


def signed_at(headers: list[tuple[str, str]]) -> datetime:
    return datetime.strptime(dict(headers)["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def expected_signature(headers: list[tuple[str, str]], body: bytes, token: str | None = TOKEN) -> str:
    """botocore's signature for ``body`` over the signed headers, at the re-signed timestamp."""
    values = {k.lower(): v for k, v in headers}
    scope = sigv4.scope_of(values["authorization"])
    signer = SigV4Auth(Credentials(AKID, SECRET, token), "bedrock", "us-west-2")
    signed = {n: values[n] for n in scope.signed_headers if n in values}  # no host: botocore takes the URL's
    request = AWSRequest("POST", URL, headers=signed, data=body)
    request.context["timestamp"] = values["x-amz-date"]
    return signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)


def no_secrets(reason: str, headers: list[tuple[str, str]]) -> bool:
    signature = sigv4.scope_of(dict(headers)["Authorization"]).signature
    return signature not in reason and AKID not in reason and SECRET not in reason and TOKEN not in reason


# --- verification: what may be re-signed ------------------------------------------------


def test_a_valid_client_signature_may_be_resigned():
    headers = client_signed()
    assert sigv4.check("POST", URL, headers, OLD, PROXY) == (Status.RESIGNED, "")
    lowercase = {k.lower(): v for k, v in headers}  # what the addon hands over
    assert sigv4.check("post", URL, lowercase, OLD, PROXY) == (Status.RESIGNED, "")


def test_forged_signature_probe_is_refused():
    """A forgery: the proxy's key id, a made-up signature, a 2020 date. Refused on the stale
    date, and dated now, on the signature; no secret in either reason."""
    forged = [
        ("Host", "bedrock-runtime.us-west-2.amazonaws.com"),
        ("Content-Type", "application/json"),
        ("X-Amz-Date", "20200101T000000Z"),
        ("X-Amz-Security-Token", TOKEN),
        ("Authorization", f"AWS4-HMAC-SHA256 Credential={AKID}/20200101/us-west-2/bedrock/aws4_request, "
                          "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, "
                          "Signature=00000000deadbeef"),
    ]
    status, reason = sigv4.check("POST", URL, forged, OLD, PROXY)
    assert status is Status.CANNOT and "X-Amz-Date" in reason and no_secrets(reason, forged)
    # The same forgery dated now fails on the signature itself.
    now = datetime.now(UTC)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    fresh = [(k, v.replace("20200101T000000Z", stamp).replace("/20200101/", f"/{stamp[:8]}/")) for k, v in forged]
    status, reason = sigv4.check("POST", URL, fresh, OLD, PROXY, now=now)
    assert status is Status.CANNOT and "does not verify" in reason and no_secrets(reason, fresh)


def test_a_signature_for_another_secret_is_refused():
    request = AWSRequest("POST", URL, headers={"Content-Type": "application/json"}, data=OLD)
    SigV4Auth(Credentials(AKID, "not-the-proxys-secret", TOKEN), "bedrock", "us-west-2").add_auth(request)
    status, reason = sigv4.check("POST", URL, list(request.headers.items()), OLD, PROXY)
    assert status is Status.CANNOT and "does not verify" in reason


@pytest.mark.parametrize("offset", [timedelta(minutes=6), -timedelta(minutes=6), timedelta(days=2)])
def test_a_stale_or_future_date_is_refused(offset):
    headers = client_signed()
    status, reason = sigv4.check("POST", URL, headers, OLD, PROXY, now=signed_at(headers) + offset)
    assert status is Status.CANNOT and "more than 5 minutes" in reason


def test_a_date_within_five_minutes_is_fresh():
    headers = client_signed()
    for offset in (timedelta(minutes=4, seconds=59), -timedelta(minutes=4)):
        assert sigv4.check("POST", URL, headers, OLD, PROXY, now=signed_at(headers) + offset)[0] is Status.RESIGNED


def test_a_missing_date_or_one_outside_the_scope_is_refused():
    headers = client_signed()
    undated = [(k, v) for k, v in headers if k != "X-Amz-Date"]
    assert "no X-Amz-Date" in sigv4.check("POST", URL, undated, OLD, PROXY)[1]
    when = signed_at(headers) + timedelta(days=1)
    redated = [(k, when.strftime("%Y%m%dT%H%M%SZ") if k == "X-Amz-Date" else v) for k, v in headers]
    assert "credential scope" in sigv4.check("POST", URL, redated, OLD, PROXY, now=when)[1]


def test_a_different_key_id_is_refused():
    other = ReadOnlyCredentials("AKIAOTHERKEY00000000", SECRET, TOKEN)
    headers = client_signed()
    status, reason = sigv4.check("POST", URL, headers, OLD, other)
    assert status is Status.CANNOT and no_secrets(reason, headers)
    assert "AKIA…MPLE" in reason and "AKIA…0000" in reason


@pytest.mark.parametrize("proxy_token, client_token", [("other-token", TOKEN), (TOKEN, None), (None, TOKEN)])
def test_the_session_token_must_be_the_proxys(proxy_token, client_token):
    headers = client_signed(token=client_token)
    status, reason = sigv4.check("POST", URL, headers, OLD, ReadOnlyCredentials(AKID, SECRET, proxy_token))
    assert status is Status.CANNOT and "session token" in reason and no_secrets(reason, headers)


def test_long_term_keys_without_a_token_verify():
    headers = client_signed(token=None)
    assert sigv4.check("POST", URL, headers, OLD, ReadOnlyCredentials(AKID, SECRET, None)) == (Status.RESIGNED, "")


def test_a_body_changed_after_signing_does_not_verify():
    headers = client_signed()
    status, reason = sigv4.check("POST", URL, headers, NEW, PROXY)
    assert status is Status.CANNOT and "does not verify" in reason


def test_a_stated_payload_hash_must_be_the_bodys():
    """botocore signs X-Amz-Content-SHA256's value as the payload hash: a stale one would verify."""
    headers = client_signed(**{"X-Amz-Content-SHA256": hashlib.sha256(OLD).hexdigest()})
    assert sigv4.check("POST", URL, headers, OLD, PROXY)[0] is Status.RESIGNED
    status, reason = sigv4.check("POST", URL, headers, NEW, PROXY)
    assert status is Status.CANNOT and "X-Amz-Content-SHA256" in reason


def test_query_string_parameters_are_part_of_the_signature():
    url = URL + "?trace=on&a=1&b=%2Fx"
    headers = client_signed(url=url)
    assert sigv4.check("POST", url, headers, OLD, PROXY) == (Status.RESIGNED, "")
    assert "does not verify" in sigv4.check("POST", URL + "?trace=off&a=1&b=%2Fx", headers, OLD, PROXY)[1]
    assert "does not verify" in sigv4.check("POST", URL, headers, OLD, PROXY)[1]


def test_method_and_path_are_part_of_the_signature():
    headers = client_signed()
    assert "does not verify" in sigv4.check("PUT", URL, headers, OLD, PROXY)[1]
    stream = URL.replace("/converse", "/converse-stream")
    assert "does not verify" in sigv4.check("POST", stream, headers, OLD, PROXY)[1]


def test_a_signed_header_changed_after_signing_does_not_verify():
    headers = [(k, "text/plain" if k == "Content-Type" else v) for k, v in client_signed()]
    assert "does not verify" in sigv4.check("POST", URL, headers, OLD, PROXY)[1]
    # Unsigned headers are free to change: User-Agent is not in SignedHeaders.
    headers = [(k, "curl/8" if k == "User-Agent" else v) for k, v in client_signed()]
    assert sigv4.check("POST", URL, headers, OLD, PROXY)[0] is Status.RESIGNED


def test_unsigned_payload_verifies_and_is_resigned_unsigned():
    headers = client_signed(unsigned=True)
    assert dict(headers)["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    assert sigv4.check("POST", URL, headers, OLD, PROXY) == (Status.RESIGNED, "")
    # As at AWS, UNSIGNED-PAYLOAD binds no body: the signature covers the headers only.
    assert sigv4.check("POST", URL, headers, NEW, PROXY)[0] is Status.RESIGNED
    result = sigv4.resign("POST", URL, headers, NEW, PROXY)
    new = {k.lower(): v for k, v in result.headers}
    assert result.status is Status.RESIGNED and new["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert new["authorization"].endswith(f"Signature={expected_signature(result.headers, NEW)}")


def test_cannot_check_without_credentials():
    status, reason = sigv4.check("POST", URL, client_signed(), OLD, None)
    assert status is Status.CANNOT and "no AWS credentials" in reason


def test_cannot_resign_sigv4a_or_presigned():
    sigv4a = [("Authorization", ("AWS4-ECDSA-P256-SHA256 Credential=AKID/20261122/bedrock/aws4_request, "
                                 "SignedHeaders=host;x-amz-date;x-amz-region-set, Signature=3045"))]
    assert sigv4.check("POST", URL, sigv4a, NEW, PROXY)[0] is Status.CANNOT
    assert sigv4.resign("POST", URL, sigv4a, NEW, PROXY).status is Status.CANNOT
    presigned = URL + "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=abc"
    assert sigv4.is_signed(presigned, [])
    assert "presigned" in sigv4.check("POST", presigned, [], NEW, PROXY)[1]
    assert sigv4.resign("POST", presigned, [], NEW, PROXY).status is Status.CANNOT


@pytest.mark.parametrize(
    "headers",
    [[("Content-Type", "application/json")], [("Authorization", "Bearer ABSKQmVkcm9ja0FQSUtleS1example")]],
)
def test_requests_without_sigv4_need_nothing(headers):
    assert not sigv4.is_signed(URL, headers)
    result = sigv4.resign("POST", URL, headers, NEW, None)
    assert result.status is Status.NOT_SIGNED and result.headers == headers
    assert sigv4.check("POST", URL, dict(headers), NEW, None)[0] is Status.NOT_SIGNED


# --- re-signing ---------------------------------------------------------------------------


def test_resigned_signature_is_botocores_for_the_new_body():
    original = client_signed()
    result = sigv4.resign("POST", URL, original, NEW, PROXY)
    assert result.status is Status.RESIGNED and result.reason == ""
    new = {k.lower(): v for k, v in result.headers}
    old = {k.lower(): v for k, v in original}
    assert sigv4.scope_of(new["authorization"]).signed_headers == sigv4.scope_of(old["authorization"]).signed_headers
    assert new["authorization"].endswith(f"Signature={expected_signature(result.headers, NEW)}")
    assert new["x-amz-security-token"] == TOKEN
    # Same names, same order, only the signature's headers changed; unsigned ones untouched.
    assert [k for k, _ in result.headers] == [k for k, _ in original]
    assert {k for k in old if old[k] != new[k]} <= {"authorization", "x-amz-date"}
    assert new["content-length"] == str(len(OLD))  # unsigned: the HTTP layer sets it for the new body
    # What the proxy sends passes its own check, for the new body only.
    assert sigv4.check("POST", URL, result.headers, NEW, PROXY) == (Status.RESIGNED, "")
    assert sigv4.check("POST", URL, result.headers, OLD, PROXY)[0] is Status.CANNOT


def test_signed_content_length_and_payload_hash_follow_the_body():
    proxy = ReadOnlyCredentials(AKID, SECRET, None)
    request = AWSRequest("POST", URL, headers={"Content-Type": "application/json", "Content-Length": str(len(OLD)),
                                               "X-Amz-Content-SHA256": hashlib.sha256(OLD).hexdigest()}, data=OLD)
    SigV4Auth(Credentials(AKID, SECRET), "bedrock", "us-west-2").add_auth(request)
    original = list(request.headers.items())
    assert sigv4.check("POST", URL, original, OLD, proxy) == (Status.RESIGNED, "")
    result = sigv4.resign("POST", URL, original, NEW, proxy)
    new = {k.lower(): v for k, v in result.headers}
    assert "content-length" in sigv4.scope_of(new["authorization"]).signed_headers
    assert new["content-length"] == str(len(NEW)) and new["x-amz-content-sha256"] == hashlib.sha256(NEW).hexdigest()
    assert new["authorization"].endswith(f"Signature={expected_signature(result.headers, NEW, token=None)}")


def test_host_comes_from_the_url_when_no_header_carries_it():
    headers = [(k, v) for k, v in client_signed() if k.lower() != "host"]  # HTTP/2 or an HTTP client's own Host
    assert sigv4.check("POST", URL, headers, OLD, PROXY) == (Status.RESIGNED, "")
    result = sigv4.resign("POST", URL, headers, NEW, PROXY)
    assert result.status is Status.RESIGNED and "host" not in {k.lower() for k, _ in result.headers}
    assert dict(result.headers)["Authorization"].endswith(expected_signature(result.headers, NEW))
    other_host = URL.replace("us-west-2.amazonaws.com", "us-east-1.amazonaws.com")
    assert "does not verify" in sigv4.check("POST", other_host, headers, OLD, PROXY)[1]


def test_resign_refuses_another_key_or_no_credentials():
    original = client_signed()
    other = sigv4.resign("POST", URL, original, NEW, ReadOnlyCredentials("AKIAOTHERKEY00000000", SECRET, TOKEN))
    assert other.status is Status.CANNOT and other.headers == original
    assert sigv4.resign("POST", URL, original, NEW, None).status is Status.CANNOT


def test_scope_of():
    scope = sigv4.scope_of("AWS4-HMAC-SHA256 Credential=AKID/20261122/eu-central-1/bedrock/aws4_request, "
                           "SignedHeaders=content-type;host;x-amz-date, Signature=deadbeef")
    assert scope == sigv4.Scope("AKID", "20261122", "eu-central-1", "bedrock",
                                ("content-type", "host", "x-amz-date"), "deadbeef")
    assert "deadbeef" not in repr(scope)
    assert sigv4.scope_of("AWS4-HMAC-SHA256 Credential=AKID/20261122/bedrock, Signature=x") is None
    assert sigv4.scope_of("Bearer x") is None


# --- the credential chain -----------------------------------------------------------------


def test_credentials_come_from_the_chain_off_the_event_loop(monkeypatch):
    use_env(monkeypatch)
    assert asyncio.run(sigv4.credentials()) == PROXY


def test_an_empty_chain_is_asked_again_and_a_found_one_kept(monkeypatch):
    assert asyncio.run(sigv4.credentials()) is None
    use_env(monkeypatch)
    assert asyncio.run(sigv4.credentials()) == PROXY  # not cached while empty…
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    assert asyncio.run(sigv4.credentials()) == PROXY  # …kept once found…
    sigv4.chain_credentials.cache_clear()
    assert asyncio.run(sigv4.credentials()) is None  # …until cleared


def test_a_slow_chain_times_out_and_is_kept_when_it_answers(monkeypatch):
    answer = threading.Event()

    def slow_lookup() -> Credentials:
        answer.wait()
        return Credentials(AKID, SECRET, TOKEN)

    monkeypatch.setattr(sigv4, "_lookup", slow_lookup)

    async def scenario() -> None:  # one loop: asyncio.run waits for its worker threads on exit
        assert await sigv4.credentials(timeout=0.01) is None
        answer.set()
        assert sigv4.frozen_credentials() == PROXY  # waits for the first lookup, which kept its answer
        monkeypatch.setattr(sigv4, "_lookup", lambda: pytest.fail("looked up again"))
        assert await sigv4.credentials() == PROXY

    asyncio.run(scenario())


def test_credentials_found_before_are_frozen_without_a_thread_unless_due_for_a_refresh(monkeypatch):
    """A signed request after the first takes no worker thread: static credentials, or refreshable
    ones not yet due, freeze without I/O; refreshable ones due for a refresh go to a thread (the
    refresh may ask the network)."""
    use_env(monkeypatch)
    assert asyncio.run(sigv4.credentials()) == PROXY  # the first lookup: in a thread
    monkeypatch.setattr(asyncio, "to_thread", lambda *a, **k: pytest.fail("a thread for known credentials"))
    assert asyncio.run(sigv4.credentials()) == PROXY

    class Refreshable(Credentials):
        due = False

        def refresh_needed(self, refresh_in=None):
            return self.due

    found = Refreshable(AKID, SECRET, TOKEN)
    monkeypatch.setattr(sigv4.chain_credentials, "_found", found)
    assert sigv4.chain_credentials.ready() == PROXY
    found.due = True
    assert sigv4.chain_credentials.ready() is None
