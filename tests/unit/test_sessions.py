import time
from types import SimpleNamespace

import diskcache.core
from tooldisco import sessions
from tooldisco.sessions import SessionStore, session_key, tenant_of


def test_tenant_hash_never_contains_the_credential():
    t = tenant_of({"x-api-key": "sk-ant-secret"})
    assert "secret" not in t and t != tenant_of({"x-api-key": "sk-other"})
    assert tenant_of({}) == tenant_of({"content-type": "json"})


def test_sigv4_tenant_is_the_access_key_not_the_signature():
    a = tenant_of({"authorization": "AWS4-HMAC-SHA256 Credential=AKIA1/20261122/us-east-1/bedrock/aws4_request, Signature=aa"})
    b = tenant_of({"authorization": "AWS4-HMAC-SHA256 Credential=AKIA1/20261122/us-east-1/bedrock/aws4_request, Signature=bb"})
    assert a == b


def test_two_tenants_same_first_message_do_not_share(tmp_path):
    store = SessionStore(tmp_path)
    k1 = session_key(tenant_of({"x-api-key": "k1"}), None, "hi")
    k2 = session_key(tenant_of({"x-api-key": "k2"}), None, "hi")
    assert k1 != k2
    store.update(k1, lambda s: s.expand(["a"]))
    assert store.get(k2).expanded == [] and store.get(k1).expanded == ["a"]
    assert session_key("t", "sid", "hi") != session_key("t", None, "hi")
    assert session_key("t", "sid", "hi") == session_key("t", "sid", "other first message")


def test_state_survives_restart(tmp_path):
    s1 = SessionStore(tmp_path)
    s1.update("k", lambda s: (s.expand(["x", "y", "x"]), s.deferred.update({"x": "{}"})))
    s1.close()
    s2 = SessionStore(tmp_path)
    st = s2.get("k")
    assert st.expanded == ["x", "y"] and st.deferred == {"x": "{}"}


def test_ttl_expires_and_cleanup_removes(tmp_path, monkeypatch):
    """Time is a fake clock read by both diskcache (wall time) and the store (monotonic)."""
    now = [1_000.0]
    monkeypatch.setattr(diskcache.core, "time", SimpleNamespace(time=lambda: now[0], sleep=time.sleep))
    monkeypatch.setattr(sessions, "time", SimpleNamespace(monotonic=lambda: now[0]))
    store = SessionStore(tmp_path, ttl=60, cleanup_interval=30)
    store.update("k", lambda s: s.expand(["a"]))
    now[0] += 59
    assert store.get("k").expanded == ["a"]  # within the TTL (a read does not extend it)
    now[0] += 2
    assert store.get("k").expanded == []  # expired: reads as a new session
    assert len(store) == 1  # still on disk: the last cleanup ran 2 s ago
    now[0] += 30
    store.get("other")
    assert len(store) == 0  # the periodic cleanup removed the expired entry
