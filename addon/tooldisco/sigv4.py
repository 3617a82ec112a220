"""Re-sign a SigV4-signed request whose body the proxy changed (Bedrock), with botocore.

Why: AWS SigV4 signs the payload's SHA-256, so a rewritten Bedrock body fails with
``SignatureDoesNotMatch`` unless it is signed again. The proxy can only sign as the identity
the client used: it takes credentials from the standard AWS chain (environment, profile,
SSO, container or instance role) and refuses when their access key is not the client's, in
which case the caller must forward the request unchanged. Bedrock API keys
(``Authorization: Bearer …``) do not sign the body and need nothing.

Pure: no mitmproxy, no I/O besides the credential chain's own lookup (done once, cached).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from urllib.parse import parse_qs, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials

Headers = Sequence[tuple[str, str]] | Mapping[str, str]

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
# Headers the signer itself sets; the rest of the client's signed headers are copied.
_SIGNER_SET = frozenset({"authorization", "x-amz-date", "x-amz-security-token"})


class Status(str, Enum):
    RESIGNED = "resigned"
    NOT_SIGNED = "not_signed"  # no SigV4 (a Bedrock API key, or no auth at all): nothing to do
    CANNOT = "cannot_resign"  # signed, but the proxy cannot sign as the client: forward unchanged


@dataclass(frozen=True)
class Scope:
    """What the client's ``Authorization`` header says it signed."""

    access_key: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]


@dataclass(frozen=True)
class Result:
    status: Status
    headers: list[tuple[str, str]]  # what to send: re-signed, or the input unchanged
    reason: str = ""


@functools.cache
def chain_credentials() -> Credentials | None:
    """The standard AWS chain's credentials, looked up once (the lookup may query instance
    metadata, which is slow); refreshable credentials renew themselves. ``cache_clear()``
    forgets the result, e.g. after the environment changed."""
    import botocore.session

    return botocore.session.Session().get_credentials()


def _pairs(headers: Headers) -> list[tuple[str, str]]:
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def _header(pairs: Sequence[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in pairs if k.lower() == name), None)


def scope_of(authorization: str) -> Scope | None:
    """``AWS4-HMAC-SHA256 Credential=AKID/20250101/us-east-1/bedrock/aws4_request,
    SignedHeaders=content-type;host;x-amz-date, Signature=…`` -> its Scope; None if not that."""
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != ALGORITHM:
        return None
    fields = {}
    for item in rest.split(","):
        key, _, value = item.strip().partition("=")
        fields[key] = value
    credential = fields.get("Credential", "").split("/")
    signed = tuple(h for h in fields.get("SignedHeaders", "").split(";") if h)
    if len(credential) != 5 or credential[4] != "aws4_request" or not signed or not fields.get("Signature"):
        return None
    return Scope(credential[0], credential[1], credential[2], credential[3], signed)


def _masked(key: str) -> str:
    return key[:4] + "…" + key[-4:] if len(key) > 8 else "…"


def _precheck(
    pairs: Sequence[tuple[str, str]], credentials: Credentials | None
) -> tuple[Status, str, Scope | None, ReadOnlyCredentials | None]:
    auth = _header(pairs, "authorization")
    if auth is None or not auth.strip().startswith("AWS4-"):
        return Status.NOT_SIGNED, "no SigV4 Authorization header", None, None
    scope = scope_of(auth)
    if scope is None:
        # SigV4a (AWS4-ECDSA-P256-SHA256) or an unreadable header: we cannot reproduce it.
        return Status.CANNOT, "unsupported or unreadable SigV4 Authorization header", None, None
    creds = credentials if credentials is not None else chain_credentials()
    if creds is None:
        return Status.CANNOT, "no AWS credentials in the proxy's standard credential chain", scope, None
    frozen = creds.get_frozen_credentials()
    if frozen.access_key != scope.access_key:
        reason = (
            f"the client signed as {_masked(scope.access_key)}, "
            f"the proxy's credentials are {_masked(frozen.access_key)}"
        )
        return Status.CANNOT, reason, scope, None
    return Status.RESIGNED, "", scope, frozen


def check(headers: Headers, credentials: Credentials | None = None) -> tuple[Status, str]:
    """Before changing a body: could it be re-signed? ``RESIGNED`` here means "it can be"."""
    status, reason, _, _ = _precheck(_pairs(headers), credentials)
    return status, reason


def resign(
    method: str, url: str, headers: Headers, body: bytes, credentials: Credentials | None = None
) -> Result:
    """The headers to send ``body`` with: a fresh SigV4 signature over the same headers the
    client signed (values as they will be sent), or the input unchanged with the reason why not.

    ``url`` is where the request goes; ``Host`` is the ``host`` among ``headers`` when present
    (what mitmproxy sends), else the URL's authority (what an HTTP client derives).
    """
    pairs = _pairs(headers)
    if "X-Amz-Signature" in parse_qs(urlsplit(url).query):
        return Result(Status.CANNOT, pairs, "query-string (presigned) SigV4 cannot be re-signed")
    status, reason, scope, frozen = _precheck(pairs, credentials)
    if status is not Status.RESIGNED or scope is None or frozen is None:
        return Result(status, pairs, reason)
    request = AWSRequest(method=method.upper(), url=url, data=body)
    signed = set(scope.signed_headers)
    changed: dict[str, str] = {}
    for name, value in pairs:
        lname = name.lower()
        if lname not in signed or lname in _SIGNER_SET:
            continue
        if lname == "content-length":
            value = changed[lname] = str(len(body))
        elif lname == "x-amz-content-sha256" and value != UNSIGNED_PAYLOAD:
            value = changed[lname] = hashlib.sha256(body).hexdigest()  # it states the payload hash
        request.headers[name] = value
    # The scope's region and service (Bedrock signs as "bedrock"), a fresh timestamp.
    SigV4Auth(frozen, scope.service, scope.region).add_auth(request)
    for name in (*_SIGNER_SET, "date"):  # botocore re-dates a signed Date header in place
        if name in request.headers:
            changed[name] = request.headers[name]
    return Result(Status.RESIGNED, _apply(pairs, changed))


def _apply(pairs: Sequence[tuple[str, str]], changed: Mapping[str, str]) -> list[tuple[str, str]]:
    """``pairs`` with changed values in place (names' case and order kept), new ones appended;
    a security token the signer did not set (the proxy's credentials have none) is dropped."""
    out: list[tuple[str, str]] = []
    done: set[str] = set()
    for name, value in pairs:
        lname = name.lower()
        if lname == "x-amz-security-token" and lname not in changed:
            continue
        if lname in changed:
            if lname not in done:
                out.append((name, changed[lname]))
                done.add(lname)
            continue
        out.append((name, value))
    canonical = {"authorization": "Authorization", "x-amz-date": "X-Amz-Date", "date": "Date",
                 "x-amz-security-token": "X-Amz-Security-Token"}
    out += [(canonical.get(k, k), v) for k, v in changed.items() if k not in done]
    return out
