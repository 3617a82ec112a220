"""Real provider answers, replayed through a real mitmdump with the addon and through plain mitmdump.

The recordings (``recordings/``, sources and licences in its NOTICE) are answers real providers
sent: Anthropic, OpenAI Chat and Responses (and compatible providers), Gemini, Bedrock; JSON and
streams; tool calls, thinking, server tools, errors. For each:

1. a turn with no search: the client gets byte for byte what plain mitmdump gives it, but for a
   Responses object's echo of the request's tools, which shows the client's own; its SDK reads the
   same; the upstream is asked once (a 4xx the rewrite did not cause is not sent again);
2. a stitched turn (a hidden round that only searches, in the recording's own framing, then the
   recording): the upstream is asked twice, and what the client's SDK assembles is the recording's
   own content.

The addon runs the shipped default config; every request carries 30 tools (most deferred).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conformance.replay import (ECHOED, Recording, Upstream, client_request, differences, load, own_search,
                                     search_round)
from tests.e2e.harness import ADDON_PATH, REPO_ROOT, MitmDump
from tests.support import streams

pytestmark = pytest.mark.e2e

RECORDINGS = load()


def _id(rec: Recording) -> str:
    return rec.id


def shipped_config(workdir: Path) -> str:
    """The shipped default config, its session store and telemetry inside ``workdir``."""
    doc = yaml.safe_load((REPO_ROOT / "configs" / "tool_discovery.yaml").read_text())
    doc["sessions"]["dir"] = str(workdir / "sessions")
    doc["telemetry"] = {"path": str(workdir / "tool_discovery.jsonl")}
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plain(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MitmDump]:
    proxy = MitmDump(tmp_path_factory.mktemp("plain"), upstream.url, script=None).start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def addon(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MitmDump]:
    proxy = MitmDump(tmp_path_factory.mktemp("addon"), upstream.url, script=ADDON_PATH, config=shipped_config).start()
    yield proxy
    proxy.stop()


def fetch(proxy: MitmDump, upstream: Upstream, rec: Recording, *answers: Recording) -> tuple[int, bytes, int]:
    """(status, body, upstream requests) of ``rec``'s client request through ``proxy``."""
    upstream.serve(*answers)
    url, headers, body = client_request(rec)
    with proxy.httpx_client() as client:
        r = client.post(url, headers={**headers, "content-type": "application/json"}, content=body)
    return r.status_code, r.content, len(upstream.bodies)


@pytest.mark.parametrize("rec", RECORDINGS, ids=_id)
def test_a_turn_without_search_passes_as_sent(rec: Recording, plain: MitmDump, addon: MitmDump,
                                              upstream: Upstream) -> None:
    status, body, _ = fetch(plain, upstream, rec, rec)
    got_status, got, asked = fetch(addon, upstream, rec, rec)
    assert asked == 1, f"the upstream was asked {asked} times"
    assert got_status == status
    assert differences(rec, body, got) == []
    if got != body:  # only a Responses echo may differ: it shows the client's own tools
        assert rec.api == "openai_responses"
        own = json.loads(client_request(rec)[2])
        assert all(obj[k] == own[k] for obj in _responses(rec, got) for k in ECHOED if k in obj and k in own)
    if status == 200:
        assert sdk_view(rec, got) == sdk_view(rec, body)


@pytest.mark.parametrize("rec", [r for r in RECORDINGS if r.status == 200], ids=_id)
def test_a_stitched_turn_shows_the_recording(rec: Recording, addon: MitmDump, upstream: Upstream) -> None:
    if own_search(rec):  # the client searches by itself: the proxy stays out, its answer passes
        status, got, asked = fetch(addon, upstream, rec, rec)
        assert (status, asked) == (200, 1)
    else:
        status, got, asked = fetch(addon, upstream, rec, search_round(rec), rec)
        assert (status, asked) == (200, 2)
    assert content(rec, got) == content(rec, rec.body)


# -- what a client's SDK makes of an answer ---------------------------------------------------

def _responses(rec: Recording, body: bytes) -> list[dict[str, Any]]:
    """The response objects of a Responses answer (the JSON one, or each stream event's)."""
    out = []
    for piece in streams_pieces(rec, body):
        value = _json(piece)
        if isinstance(value, dict):
            obj = value.get("response") if rec.stream else value
            if isinstance(obj, dict) and any(k in obj for k in ECHOED):
                out.append(obj)
    return out


def streams_pieces(rec: Recording, body: bytes) -> list[bytes]:
    return Recording(**{**rec.__dict__, "body": body}).events


def _json(piece: bytes) -> Any:
    text = piece.decode("utf-8", "replace")
    data = "\n".join(line[5:].strip() for line in text.splitlines() if line.startswith("data:")) if "data:" in text \
        else text.strip().strip("[],")
    try:
        return json.loads(data)
    except ValueError:
        return None


def sdk_view(rec: Recording, body: bytes) -> Any:
    """What the provider's official SDK makes of ``body``: its final object, or the error it raised."""
    try:
        return _sdk(rec, body)
    except Exception as e:  # the SDK refused the stream: the same refusal is the same view
        return f"raised {type(e).__name__}"


def _sdk(rec: Recording, body: bytes) -> Any:
    if not rec.stream:
        value = json.loads(body)
        return _unechoed(value) if rec.api == "openai_responses" else value
    if rec.api == "anthropic":
        return streams.anthropic_final(body)
    if rec.api == "openai_chat":
        return streams.openai_chat_final(body)
    if rec.api == "openai_responses":
        return _unechoed(streams.openai_responses_final(body))
    if rec.api == "gemini":
        if rec.sse:
            return streams.gemini_chunks(body)
        return json.loads(body)
    if rec.api == "bedrock_converse":
        return streams.boto3_events("converse_stream", body)
    raise ValueError(rec.api)


def _unechoed(response: Any) -> Any:
    return {k: v for k, v in response.items() if k not in ECHOED} if isinstance(response, dict) else response


def content(rec: Recording, body: bytes) -> Any:
    """The content a client's SDK assembles from ``body``: what the model wrote and called, without
    the envelope a stitched turn takes from its first round (ids, usage)."""
    view = sdk_view(rec, body)
    if isinstance(view, str):
        return view
    view = streams.strip_nones(view)  # a member left out and one that is null read alike
    if rec.api == "anthropic":
        return view.get("content"), view.get("stop_reason")
    if rec.api == "openai_chat":
        return [(c.get("message"), c.get("finish_reason")) for c in view.get("choices") or []]
    if rec.api == "openai_responses":
        return view.get("output"), view.get("status"), view.get("error")
    if rec.api == "gemini":
        chunks = view if isinstance(view, list) else [view]
        return [(c.get("index"), c.get("content"), c.get("finishReason"))
                for chunk in chunks if isinstance(chunk, dict) for c in chunk.get("candidates") or []]
    if rec.api == "bedrock_converse":
        if not rec.stream:
            return view.get("output"), view.get("stopReason")
        return [e for e in view if "metadata" not in e and "messageStart" not in e]
    raise ValueError(rec.api)
