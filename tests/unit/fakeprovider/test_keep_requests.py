"""The fake provider's ``keep_requests=False``: a long benchmark's requests are answered and
counted (``nth`` keeps counting for the script) but not kept, so its memory stays flat."""

from __future__ import annotations

import httpx

from tests.fakeprovider import FakeProvider, reply

BODY = {"model": "claude-sonnet-4-6", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}


def test_unkept_requests_are_answered_and_counted_but_not_kept() -> None:
    with FakeProvider(keep_requests=False) as fake:
        fake.set_script([reply("second", nth=2), reply("other")])
        with httpx.Client(base_url=fake.url, trust_env=False) as client:
            texts = [client.post("/v1/messages", json=BODY, headers=HEADERS).json()["content"][0]["text"]
                     for _ in range(3)]
        assert texts == ["other", "second", "other"]
        assert fake.requests == []


def test_requests_are_kept_by_default() -> None:
    with FakeProvider() as fake, httpx.Client(base_url=fake.url, trust_env=False) as client:
        client.post("/v1/messages", json=BODY, headers=HEADERS)
        assert [r.index for r in fake.requests] == [1]
