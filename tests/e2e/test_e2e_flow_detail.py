"""mitmdump's own flow listing prints no credential at any ``flow_detail``.

mitmdump prints each flow (its URL from level 1, every header from 2, the bodies from 3, whole
at 4) with its own printer, which writes to stdout directly, not through logging: the addon's
log filter never sees it. One real mitmdump per level, debug logging on, a terminal 200 columns
wide, sends every credential form the APIs accept (Anthropic ``x-api-key`` and bearer, OpenAI
bearer, Gemini ``x-goog-api-key`` and ``?key=``, Azure ``api-key``, a SigV4 ``Authorization``
with its ``X-Amz-Security-Token``, a presigned URL's ``X-Amz-Signature``); then its output is
searched for every secret, and the fake checks each request arrived with its credential intact.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import ADDON_PATH, SCRUBBED_ENV, MitmDump, addon_config
from tests.fakeprovider import FakeProvider, RecordedRequest, reply
from tests.support.catalog import anthropic_tools, openai_tools

pytestmark = pytest.mark.e2e

ANTHROPIC_KEY = "sk-ant-api03-tdDetailXApiKey7f3a9c1e5b2d4f6a8c0e135"
ANTHROPIC_TOKEN = "sk-ant-oat01-tdDetailBearer5e7c9a1b3d5f7a9c1e3b246"
OPENAI_KEY = "sk-proj-tdDetailOpenAi2b4d6f8a0c2e4a6c8e0b2d4f6a8"
GEMINI_HEADER_KEY = "AIzaSyTdDetailHeaderKey123456789abcdefg"  # AIza + 35
GEMINI_QUERY_KEY = "AIzaSyTdDetailQueryKey0123456789abcdefg"
GEMINI_LIST_KEY = "AIzaSyTdDetailListKey90123456789abcdefg"
AZURE_KEY = "9ab4ed5ecbe34c1f9a2b8d6e0f1a3c5d"  # 32 hex, as Azure issues them
AWS_KEY_ID = "AKIATDDETAILSIGV4XY1"
AWS_SESSION_TOKEN = "IQoJb3JpZ2luX2VjTdDetailSessionToken0123456789abcdef"
SIGNATURE = "7e3d" * 16  # 64 hex
PRESIGNED_SIGNATURE = "a1b2" * 16
SECRETS = (ANTHROPIC_KEY, ANTHROPIC_TOKEN, OPENAI_KEY, GEMINI_HEADER_KEY, GEMINI_QUERY_KEY, GEMINI_LIST_KEY,
           AZURE_KEY, AWS_KEY_ID, AWS_SESSION_TOKEN, SIGNATURE, PRESIGNED_SIGNATURE)

GEMINI = "https://generativelanguage.googleapis.com/v1beta"
BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com"
AZURE_HOST_RE = r"[a-z0-9-]+\.openai\.azure\.com"
SIGV4 = (f"AWS4-HMAC-SHA256 Credential={AWS_KEY_ID}/20261126/us-east-1/bedrock/aws4_request, "
         f"SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature={SIGNATURE}")


def config(d: Path) -> str:
    return addon_config(d, strategy="tool-search", hosts=("api.anthropic.com", "api.openai.com",
                        "generativelanguage.googleapis.com", "bedrock-runtime.*.amazonaws.com", "*.openai.azure.com"))


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with FakeProvider(stream_delay=0.0) as fake:
        yield fake


def messages(text: str) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "tools": anthropic_tools(40),
            "messages": [{"role": "user", "content": text}]}


def chat(text: str) -> dict[str, Any]:
    return {"model": "gpt-5", "tools": openai_tools(40), "messages": [{"role": "user", "content": text}]}


def gemini(text: str) -> dict[str, Any]:
    decls = [{"name": t["name"], "description": t["description"], "parametersJsonSchema": t["input_schema"]}
             for t in anthropic_tools(40)]
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], "tools": [{"functionDeclarations": decls}]}


def gemini_key(r: RecordedRequest) -> str | None:
    """The key as Gemini reads it: ``?key=``, or ``x-goog-api-key`` (where the addon moves it)."""
    return (r.query_params.get("key") or [r.header("x-goog-api-key")])[0]


# (name, method, url, headers, body, how the credential must arrive upstream)
REQUESTS: list[tuple[str, str, str, dict[str, str], dict[str, Any] | None, Any]] = [
    ("anthropic x-api-key", "POST", "https://api.anthropic.com/v1/messages",
     {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}, messages("weather in Paris?"),
     lambda r: r.header("x-api-key") == ANTHROPIC_KEY),
    ("anthropic bearer", "POST", "https://api.anthropic.com/v1/messages",
     {"authorization": f"Bearer {ANTHROPIC_TOKEN}", "anthropic-version": "2023-06-01"}, messages("hello"),
     lambda r: r.header("authorization") == f"Bearer {ANTHROPIC_TOKEN}"),
    ("openai bearer", "POST", "https://api.openai.com/v1/chat/completions",
     {"authorization": f"Bearer {OPENAI_KEY}"}, chat("weather in Paris?"),
     lambda r: r.header("authorization") == f"Bearer {OPENAI_KEY}"),
    ("gemini x-goog-api-key", "POST", f"{GEMINI}/models/gemini-2.5-flash:generateContent",
     {"x-goog-api-key": GEMINI_HEADER_KEY}, gemini("weather in Paris?"),
     lambda r: r.header("x-goog-api-key") == GEMINI_HEADER_KEY),
    ("gemini ?key=", "POST", f"{GEMINI}/models/gemini-2.5-flash:generateContent?key={GEMINI_QUERY_KEY}",
     {}, gemini("weather in Lyon?"), lambda r: gemini_key(r) == GEMINI_QUERY_KEY),
    ("gemini ?key=, GET", "GET", f"{GEMINI}/models?pageSize=5&key={GEMINI_LIST_KEY}",
     {}, None, lambda r: gemini_key(r) == GEMINI_LIST_KEY),
    ("azure api-key", "POST", "https://tddetail.openai.azure.com/openai/deployments/gpt/chat/completions"
     "?api-version=2024-10-21", {"api-key": AZURE_KEY}, chat("hello"), lambda r: r.header("api-key") == AZURE_KEY),
    ("sigv4 header", "POST", f"{BEDROCK}/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse",
     {"authorization": SIGV4, "x-amz-date": "20261126T120000Z", "x-amz-security-token": AWS_SESSION_TOKEN},
     {"messages": [{"role": "user", "content": [{"text": "hello"}]}]},
     lambda r: r.header("authorization") == SIGV4 and r.header("x-amz-security-token") == AWS_SESSION_TOKEN),
    ("sigv4 presigned", "GET", f"{BEDROCK}/model/m/invoke?X-Amz-Algorithm=AWS4-HMAC-SHA256"
     f"&X-Amz-Credential={AWS_KEY_ID}%2F20261126%2Fus-east-1%2Fbedrock%2Faws4_request&X-Amz-Date=20261126T120000Z"
     f"&X-Amz-Security-Token={AWS_SESSION_TOKEN}&X-Amz-SignedHeaders=host&X-Amz-Signature={PRESIGNED_SIGNATURE}",
     {}, None, lambda r: r.query_params.get("X-Amz-Signature") == [PRESIGNED_SIGNATURE]),
]


@pytest.mark.parametrize("level", [2, 3, 4])
def test_mitmdump_prints_no_credential(provider: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       level: int) -> None:
    for name in SCRUBBED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    mitm = MitmDump(tmp_path, provider.url, script=ADDON_PATH, config=config, name=f"detail{level}",
                    extra_args=["--map-remote", f"|^https://{AZURE_HOST_RE}(?::443)?(?=/)|{provider.url}",
                                "--set", f"flow_detail={level}", "--set", "termlog_verbosity=debug"])
    mitm.start()
    try:
        provider.reset()
        provider.set_script([reply("Sunny.")] * len(REQUESTS))
        with mitm.httpx_client() as http:
            for _name, method, url, headers, body, _ in REQUESTS:
                http.request(method, url, headers=headers, json=body)
        seen = provider.wait_for_requests(len(REQUESTS))
    finally:
        mitm.stop()
    for (name, *_, ok), rec in zip(REQUESTS, seen):
        assert ok(rec), (name, rec.headers, rec.query)  # what goes upstream is untouched
    output = mitm.log_path.read_text(errors="replace")
    assert "x-api-key" in output.lower() and "[redacted]" in output  # the headers were printed, masked
    leaked = [s for s in SECRETS if s in output]
    assert not leaked, leaked
