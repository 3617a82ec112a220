"""Re-sign a SigV4-signed request whose body the proxy changed (Bedrock), with botocore.

Why: AWS SigV4 signs the payload's SHA-256, so a rewritten Bedrock body fails with
``SignatureDoesNotMatch`` unless it is signed again. Re-signing makes the proxy a signer
for its own AWS identity, so it only re-signs a request the client provably signed with
that identity: ``check`` recomputes the client's signature with the proxy's secret and
compares it in constant time, and wants a fresh ``X-Amz-Date`` and the proxy's session
token. Anything else (a forged or stale signature, another key) must be forwarded
unchanged. Bedrock API keys (``Authorization: Bearer …``) do not sign the body and need nothing.

``check`` and ``resign`` do no I/O: credentials are passed in. ``credentials()`` looks them
up off the event loop (the standard chain may ask instance metadata, over the network).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from urllib.parse import parse_qs, urlsplit

from loguru import logger
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials
from botocore.exceptions import BotoCoreError

Headers = Sequence[tuple[str, str]] | Mapping[str, str]

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"
# AWS: "the request must reach AWS within five minutes of the time stamp in the request".
MAX_SKEW = timedelta(minutes=5)
CREDENTIALS_TIMEOUT = 5.0  # seconds; botocore's instance-metadata fetcher defaults to 1 s × 1 attempt
# Headers the signer itself sets; the rest of the client's signed headers are copied.
_SIGNER_SET = frozenset({"authorization", "x-amz-date", "x-amz-security-token"})

# botocore.auth logs the canonical request and each signature it makes at DEBUG: a re-signed
# request could be replayed with it for minutes, so it never reaches mitmproxy's log.
logging.getLogger("botocore.auth").setLevel(logging.INFO)


class Status(str, Enum):
    RESIGNED = "resigned"
    NOT_SIGNED = "not_signed"  # no SigV4 (a Bedrock API key, or no auth at all): nothing to do
    CANNOT = "cannot_resign"  # signed, but not verifiably by the proxy's identity: forward unchanged


@dataclass(frozen=True)
class Scope:
    """What the client's ``Authorization`` header says it signed."""

    access_key: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str = field(repr=False)  # never in a log line


@dataclass(frozen=True)
class Result:
    status: Status
    headers: list[tuple[str, str]]  # what to send: re-signed, or the input unchanged
    reason: str = ""


class _Chain:
    """The standard AWS chain's credentials (environment, profile, SSO, container or instance
    role): looked up until found, then kept (refreshable credentials renew themselves). The
    lock makes concurrent first lookups wait for one another instead of all querying."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: Credentials | None = None

    def __call__(self) -> Credentials | None:
        with self._lock:
            if self._found is None:
                self._found = _lookup()
            return self._found

    def ready(self) -> ReadOnlyCredentials | None:
        """The credentials as of now when freezing them needs no I/O (the chain was looked up,
        and they are static or not yet due for a refresh), else None: a thread is then spared
        for each signed request."""
        found = self._found
        if found is None:
            return None
        due = getattr(found, "refresh_needed", None)  # refreshable credentials (STS, instance metadata)
        if due is not None and due():
            return None
        return found.get_frozen_credentials()

    def cache_clear(self) -> None:
        """Forget what was found, e.g. after the environment changed."""
        with self._lock:
            self._found = None


def _lookup() -> Credentials | None:
    import botocore.session

    return botocore.session.Session().get_credentials()


chain_credentials = _Chain()


def frozen_credentials() -> ReadOnlyCredentials | None:
    """The chain's credentials as of now; blocking (a first lookup or a refresh may use the network)."""
    found = chain_credentials()
    return found.get_frozen_credentials() if found is not None else None


async def credentials(timeout: float = CREDENTIALS_TIMEOUT) -> ReadOnlyCredentials | None:
    """``frozen_credentials()`` in a worker thread, at most ``timeout`` seconds; None if none.

    A lookup that times out keeps running and is kept once it succeeds."""
    try:
        if (ready := chain_credentials.ready()) is not None:
            return ready
        return await asyncio.wait_for(asyncio.to_thread(frozen_credentials), timeout)
    except TimeoutError:
        logger.warning("the AWS credential chain did not answer within {:.1f} s", timeout)
    except BotoCoreError as e:
        logger.warning("the AWS credential chain failed: {}", type(e).__name__)
    return None


def _pairs(headers: Headers) -> list[tuple[str, str]]:
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def _header(pairs: Sequence[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in pairs if k.lower() == name), None)


def is_signed(url: str, headers: Headers) -> bool:
    """Whether the request carries SigV4, in a header or a presigned URL (the only case
    needing AWS credentials, and the one where a changed body breaks the signature)."""
    auth = _header(_pairs(headers), "authorization")
    return (auth is not None and auth.strip().startswith("AWS4-")) or _presigned(url)


def _presigned(url: str) -> bool:
    return "X-Amz-Signature" in parse_qs(urlsplit(url).query)


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
    signature = fields.get("Signature", "")
    if len(credential) != 5 or credential[4] != "aws4_request" or not signed or not signature:
        return None
    return Scope(credential[0], credential[1], credential[2], credential[3], signed, signature)


def _masked(key: str) -> str:
    return key[:4] + "…" + key[-4:] if len(key) > 8 else "…"


def _scope(url: str, pairs: Sequence[tuple[str, str]]) -> tuple[Status, str, Scope | None]:
    """The client's SigV4 scope, or why there is none to work with."""
    if not is_signed(url, pairs):
        return Status.NOT_SIGNED, "no SigV4 Authorization header", None
    if _presigned(url):
        return Status.CANNOT, "query-string (presigned) SigV4 cannot be re-signed", None
    scope = scope_of(_header(pairs, "authorization") or "")
    if scope is None:
        # SigV4a (AWS4-ECDSA-P256-SHA256) or an unreadable header: we cannot reproduce it.
        return Status.CANNOT, "unsupported or unreadable SigV4 Authorization header", None
    return Status.RESIGNED, "", scope


def _same_key(scope: Scope, frozen: ReadOnlyCredentials) -> str:
    if frozen.access_key == scope.access_key:
        return ""
    return f"the client signed as {_masked(scope.access_key)}, the proxy's credentials are {_masked(frozen.access_key)}"


def _fresh(pairs: Sequence[tuple[str, str]], scope: Scope, now: datetime) -> str:
    """Why the request's timestamp is unusable, or ''."""
    amz_date = _header(pairs, "x-amz-date")
    if amz_date is None:
        return "the request has no X-Amz-Date"
    try:
        signed_at = datetime.strptime(amz_date, AMZ_DATE_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return "the request's X-Amz-Date is unreadable"
    if amz_date[:8] != scope.date:  # SigV4: the scope's date is the date of X-Amz-Date
        return "the request's X-Amz-Date is not the date of its credential scope"
    if abs(now - signed_at) > MAX_SKEW:
        return f"the request's X-Amz-Date ({amz_date}) is more than 5 minutes from the proxy's clock"
    return ""


def _same_token(pairs: Sequence[tuple[str, str]], frozen: ReadOnlyCredentials) -> str:
    sent = (_header(pairs, "x-amz-security-token") or "").encode()
    if hmac.compare_digest(sent, (frozen.token or "").encode()):
        return ""
    return "the request's session token is not the proxy's"


def _payload_hash(pairs: Sequence[tuple[str, str]], body: bytes) -> str:
    """A stated payload hash must be the body's: botocore (and S3) sign the header's value."""
    stated = _header(pairs, "x-amz-content-sha256")
    if stated is None or stated == UNSIGNED_PAYLOAD:
        return ""
    if hmac.compare_digest(stated.encode(), hashlib.sha256(body).hexdigest().encode()):
        return ""
    return "the request's X-Amz-Content-SHA256 is not the hash of its body"


def _signature(
    method: str, url: str, pairs: Sequence[tuple[str, str]], body: bytes, scope: Scope, frozen: ReadOnlyCredentials
) -> str:
    """Why the client's signature is not the one the proxy's secret gives this request, or ''."""
    request = AWSRequest(method=method.upper(), url=url, data=body)
    for name, value in pairs:
        if name.lower() in scope.signed_headers:
            request.headers[name] = value  # appends: repeated headers are joined as SigV4 says
    request.context["timestamp"] = _header(pairs, "x-amz-date")
    signer = SigV4Auth(frozen, scope.service, scope.region)
    if signer.signed_headers(signer.headers_to_sign(request)) != ";".join(scope.signed_headers):
        return "the client signed headers the proxy cannot reproduce"
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if hmac.compare_digest(expected.encode(), scope.signature.encode()):
        return ""
    return "the request's SigV4 signature does not verify with the proxy's credentials"


def check(
    method: str,
    url: str,
    headers: Headers,
    body: bytes,
    credentials: ReadOnlyCredentials | None,
    *,
    now: datetime | None = None,
) -> tuple[Status, str]:
    """Before changing a body: may it be re-signed? ``RESIGNED`` here means "it may be".

    Pass the request exactly as the client sent it: ``body`` as on the wire (still
    content-encoded), ``url`` with the path and query it signed."""
    pairs = _pairs(headers)
    status, reason, scope = _scope(url, pairs)
    if status is not Status.RESIGNED or scope is None:
        return status, reason
    if credentials is None:
        return Status.CANNOT, "no AWS credentials in the proxy's standard credential chain"
    for reason in (
        _same_key(scope, credentials),
        _fresh(pairs, scope, now or datetime.now(UTC)),
        _same_token(pairs, credentials),
        _payload_hash(pairs, body),
        _signature(method, url, pairs, body, scope, credentials),
    ):
        if reason:
            return Status.CANNOT, reason
    return Status.RESIGNED, ""


def resign(
    method: str, url: str, headers: Headers, body: bytes, credentials: ReadOnlyCredentials | None
) -> Result:
    """The headers to send ``body`` with: a fresh SigV4 signature over the same headers the
    client signed (values as they will be sent), or the input unchanged with the reason why not.

    Only for a request whose client signature ``check`` accepted: this signs whatever it is given.
    ``url`` is where the request goes; ``Host`` is the ``host`` among ``headers`` when present
    (what mitmproxy sends), else the URL's authority (what an HTTP client derives).
    """
    pairs = _pairs(headers)
    status, reason, scope = _scope(url, pairs)
    if status is not Status.RESIGNED or scope is None:
        return Result(status, pairs, reason)
    if credentials is None:
        return Result(Status.CANNOT, pairs, "no AWS credentials in the proxy's standard credential chain")
    if reason := _same_key(scope, credentials):
        return Result(Status.CANNOT, pairs, reason)
    request = AWSRequest(method=method.upper(), url=url, data=body)
    changed: dict[str, str] = {}
    for name, value in pairs:
        lname = name.lower()
        if lname not in scope.signed_headers or lname in _SIGNER_SET:
            continue
        if lname == "content-length":
            value = changed[lname] = str(len(body))
        elif lname == "x-amz-content-sha256" and value != UNSIGNED_PAYLOAD:
            value = changed[lname] = hashlib.sha256(body).hexdigest()  # it states the payload hash
        request.headers[name] = value
    # The scope's region and service (Bedrock signs as "bedrock"), a fresh timestamp.
    SigV4Auth(credentials, scope.service, scope.region).add_auth(request)
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
