import time

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


def test_ttl_expires_and_cleanup_removes(tmp_path):
    store = SessionStore(tmp_path, ttl=0.2, cleanup_interval=0.1)
    store.update("k", lambda s: s.expand(["a"]))
    assert store.get("k").expanded == ["a"]
    time.sleep(0.35)
    assert store.get("k").expanded == []
    assert len(store) == 0  # the periodic cleanup removed the expired entry
