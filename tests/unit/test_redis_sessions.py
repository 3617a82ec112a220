"""The Redis session store against a real redis-server: the disk store's cases on both
backends, then what only Redis has (other processes, outages, TLS, passwords)."""

import copy
import datetime
import ipaddress
import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from loguru import logger
from tooldisco import sessions
from tooldisco.config import ConfigError, RedisSettings, parse
from tooldisco.engine import _session_store
from tooldisco.redis_sessions import RedisSessionStore
from tooldisco.sessions import SessionState, SessionStore, session_key
from tooldisco.tenants import tenant_of

from tests.support.redis_server import RedisServer, Tls, needs_redis, redis_server  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]


def defs(*names: str, size: int = 40) -> dict[str, str]:
    return {n: f'{{"name":"{n}","description":"{"d" * size}"}}' for n in names}


def remember(names_seen, kept, deferred=None, api="anthropic"):
    return lambda s: s.remember(api, set(names_seen), kept, deferred)


def settings(server: RedisServer, **kw) -> RedisSettings:
    return RedisSettings(url=server.url, **kw)


@pytest.fixture(params=["disk", "redis"])
def opener(request, tmp_path, tmp_path_factory):
    """``open(ttl=...)`` -> a store on one place (a directory, a Redis), opened anew at each call."""
    opened: list = []
    if request.param == "disk":
        def open_store(ttl: float = 3600.0):
            opened.append(SessionStore(tmp_path / "sessions", ttl=ttl))
            return opened[-1]
    else:
        server = request.getfixturevalue("redis_server")

        def open_store(ttl: float = 3600.0):
            opened.append(RedisSessionStore(settings(server), ttl=ttl))
            return opened[-1]
    yield open_store
    for store in opened:
        store.close()


# --- the disk store's cases, on both backends ---------------------------------------------


def test_two_tenants_same_first_message_do_not_share(opener):
    store = opener()
    k1 = session_key(tenant_of({"x-api-key": "k1"}, ""), None, "hi")
    k2 = session_key(tenant_of({"x-api-key": "k2"}, ""), None, "hi")
    store.update(k1, lambda s: s.expand(["a"]))
    assert store.get(k2).expanded == [] and store.get(k1).expanded == ["a"]


def test_state_survives_a_new_store(opener):
    s1 = opener()
    s1.update("k", lambda s: (s.expand(["x", "y", "x"]), s.remember("anthropic", {"x", "y"}, ["y"], defs("x"))))
    s1.close()
    s2 = opener()
    st = s2.get("k")
    assert st.expanded == ["x", "y"] and st.kept == ["y"] and list(st.catalog) == ["x"]
    assert s2.definitions(st.catalog.values()) == {st.catalog["x"]: defs("x")["x"]}


def test_update_returns_the_change_result_and_an_unchanged_new_session_is_not_written(opener):
    store = opener()
    assert store.update("k", lambda s: len(s.kept)) == 0
    assert len(store) == 0


def hammer(store, threads: int, rounds: int, change_for) -> None:
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        start.wait()
        for r in range(rounds):
            change = change_for(i, r)

            def yielding(s, change=change):
                os.sched_yield()
                change(s)

            store.update("k", yielding)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def test_concurrent_updates_lose_no_expanded_name(opener):
    store = opener()
    hammer(store, 8, 15, lambda i, r: lambda s: s.expand([f"t{i}_{r}"]))
    assert sorted(store.get("k").expanded) == sorted(f"t{i}_{r}" for i in range(8) for r in range(15))


def test_concurrent_flows_lose_no_kept_name(opener):
    store = opener()
    names = {f"t{i}_{r}" for i in range(8) for r in range(15)}

    def change(i, r):
        mine = f"t{i}_{r}"
        return lambda s: s.remember("anthropic", names, [*s.kept, mine], defs(f"d{i}_{r}"))

    hammer(store, 8, 15, change)
    st = store.get("k")
    assert sorted(st.kept) == sorted(names)
    assert len(st.catalog) == 8 * 15 and len(store.definitions(st.catalog.values())) == 8 * 15


def test_definitions_are_stored_once_across_sessions_and_tenants(opener):
    store = opener()
    catalog = defs(*(f"t{i}" for i in range(50)), size=2_000)
    for key in ("s1", "s2", "s3"):
        store.update(key, remember(catalog, [], catalog))
    assert len(store) == 3 + 50
    st = store.get("s2")
    assert store.definitions(st.catalog.values()) == {st.catalog[n]: raw for n, raw in catalog.items()}


def test_a_changed_definition_gets_a_new_entry(opener):
    store = opener()
    store.update("k", remember({"a"}, [], {"a": '{"v":1}'}))
    store.update("k", remember({"a"}, [], {"a": '{"v":2}'}))
    st = store.get("k")
    assert store.definitions(st.catalog.values()) == {st.catalog["a"]: '{"v":2}'}


def test_an_oversized_definition_is_not_kept(opener):
    store = opener()
    store.update("k", remember({"a", "big"}, [], {"a": "{}", "big": "{}"}))
    huge = '"' + "x" * sessions.MAX_DEFINITION_BYTES + '"'
    store.update("k", remember({"a", "big"}, [], {"a": "{}", "big": huge}))
    assert list(store.get("k").catalog) == ["a"]


def test_any_text_round_trips(opener):
    """Model input is untrusted: a name parsed from JSON may hold a lone surrogate (sent as
    ``\\ud800``); a definition is body text, so any UTF-8."""
    store = opener()
    odd = {"weird\ud800": '{"d":"\\ud800 \\u0000 \u2603 \U0001f600"}'}
    store.update("k", lambda s: (s.remember("anthropic", set(odd), [], odd), s.expand(["\udfff"])))
    st = store.get("k")
    assert st.expanded == ["\udfff"]
    assert store.definitions(st.catalog.values()) == {st.catalog["weird\ud800"]: odd["weird\ud800"]}


def test_links_lead_back_to_their_session_per_tenant(opener):
    store = opener()
    store.link("tenant-a", "resp_1", "k", ["call_1"], head="resp_3")
    link = store.linked("tenant-a", "resp_1")
    assert (link.session, link.pending, link.head) == ("k", ["call_1"], "resp_3")
    assert store.linked("tenant-b", "resp_1") is None and store.linked("tenant-a", "resp_2") is None


def test_kept_rounds_come_back_for_their_session_only(opener):
    store = opener()
    store.keep_rounds("tenant-a", "k", "d1", ['{"role":"assistant"}', '{"role":"user"}'])
    assert store.rounds("tenant-a", "k", "d1") == ['{"role":"assistant"}', '{"role":"user"}']
    assert store.rounds("tenant-b", "k", "d1") is None and store.rounds("tenant-a", "k2", "d1") is None
    assert store.rounds("tenant-a", "k", "d2") is None


def test_every_field_of_the_state_is_kept(opener):
    """A store keeps all that ``SessionState`` holds (through ``_entry``/``_state``)."""
    store = opener()
    want = SessionState(kept=["a"], expanded=["b"], catalog={"c": "0" * 64}, api="anthropic", refreshed=time.time(),
                        upfront=["u"], classic=["m"], forwarded={"l": ["a"]})
    blank = SessionState()
    unset = [f.name for f in fields(SessionState)
             if f.name != "incoming" and getattr(want, f.name) == getattr(blank, f.name)]
    assert not unset, f"SessionState has new fields: give them a value here ({unset})"
    store.update("k", lambda s: vars(s).update(copy.deepcopy(vars(want))))
    assert store.get("k") == want


# --- Redis: expiry -----------------------------------------------------------------------------


def test_ttls_follow_the_disk_stores_rules(redis_server, monkeypatch):
    """A session lives ttl past its last update (an unchanged one included); its definitions
    2 × ttl from their last refresh, which happens once a ttl, not every turn."""
    now = [1_000.0]
    monkeypatch.setattr(sessions, "time", SimpleNamespace(time=lambda: now[0], monotonic=time.monotonic))
    store = RedisSessionStore(settings(redis_server, prefix="p:"), ttl=100)
    raw = redis.Redis.from_url(redis_server.url)
    store.update("k", remember({"a"}, [], defs("a")))
    dkey = f"p:def:{store.get('k').catalog['a']}"
    assert 99_000 < raw.pttl("p:k") <= 100_000 and 199_000 < raw.pttl(dkey) <= 200_000
    raw.pexpire("p:k", 5_000)
    raw.pexpire(dkey, 5_000)
    store.update("k", remember({"a"}, [], defs("a")))  # unchanged, within the ttl
    assert raw.pttl("p:k") > 99_000  # the session's ttl slides
    assert raw.pttl(dkey) <= 5_000  # its definitions are not touched on every turn
    now[0] += 100
    store.update("k", remember({"a"}, [], defs("a")))  # a ttl later: refreshed
    assert raw.pttl(dkey) > 199_000
    assert store.get("k").expanded == [] and store.get("k").refreshed == now[0]
    store.close()


def test_a_session_expires(redis_server):
    store = RedisSessionStore(settings(redis_server), ttl=0.2)
    store.update("k", lambda s: s.expand(["a"]))
    store.link("t", "resp", "k", [])
    assert store.get("k").expanded == ["a"]
    deadline = time.monotonic() + 10
    while store.get("k").expanded and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.get("k").expanded == [] and store.linked("t", "resp") is None
    store.close()


# --- Redis: several processes ------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, time
    from tooldisco.config import RedisSettings
    from tooldisco.redis_sessions import RedisSessionStore
    store = RedisSessionStore(RedisSettings(url=sys.argv[1]))
    runs = 0
    def change(s, name):
        global runs
        runs += 1
        time.sleep(0.001)  # between the read and the write, as a planner takes its time
        s.expand([name])
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for r in range(int(sys.argv[3])):
        store.update("shared", lambda s, r=r: change(s, f"{sys.argv[2]}_{r}"))
    print(runs)
""")


def test_two_processes_on_one_session_lose_no_update(redis_server):
    """Two proxies (processes) update one session at once: every name of both is there, and
    the runs of ``change`` beyond one per update show the races the transaction resolved."""
    rounds = 150
    env = {**os.environ, "PYTHONPATH": str(ROOT / "addon")}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, redis_server.url, name, str(rounds)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for name in ("p1", "p2")]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    runs = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    store = RedisSessionStore(settings(redis_server))
    expanded = store.get("shared").expanded
    assert sorted(expanded) == sorted(f"{n}_{r}" for n in ("p1", "p2") for r in range(rounds))
    assert sum(runs) > 2 * rounds, "no update ever raced: this test proved nothing"
    store.close()


# --- Redis: outages ----------------------------------------------------------------------------


@pytest.fixture
def warnings():
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(f"{m.record['level'].name} {m.record['message']}"), level="INFO")
    yield seen
    logger.remove(sink)


def test_redis_down_fails_open_then_recovers(redis_server, warnings):
    store = RedisSessionStore(settings(redis_server, timeout=0.5, retry_after=0.3))
    store.update("k", remember({"a"}, ["a"], defs("b")))
    digest = store.get("k").catalog["b"]
    redis_server.kill()
    for _ in range(20):  # the request goes through as for a new session: no exception, no state
        assert store.update("k", lambda s: (s.expand(["x"]), list(s.kept))[1]) == []
        assert store.get("k") == SessionState()
        assert store.definitions([digest]) == {}
        store.link("t", "resp", "k", [])
        assert store.linked("t", "resp") is None
    down = [w for w in warnings if "unavailable" in w]
    assert len(down) == 1, warnings  # one warning per outage, not one per request
    assert down[0].startswith("WARNING") and "ConnectionError" in down[0] and "without session state" in down[0]
    redis_server.start()  # same port, empty (nothing persisted)
    deadline = time.monotonic() + 10
    while True:
        store.update("k", lambda s: s.expand(["after"]))
        if store.get("k").expanded:
            break
        assert time.monotonic() < deadline, "the store never came back"
        time.sleep(0.05)
    assert store.get("k").expanded == ["after"]
    assert any(w.startswith("INFO") and "is back" in w for w in warnings)
    store.close()


def test_a_slow_redis_fails_open(redis_server, warnings):
    """A server that stops answering (CLIENT PAUSE) costs a request the timeout, not a failure."""
    store = RedisSessionStore(settings(redis_server, timeout=0.2, retry_after=60))
    store.update("k", lambda s: s.expand(["a"]))
    admin = redis.Redis.from_url(redis_server.url)
    admin.client_pause(1000)
    try:
        assert store.update("k", lambda s: list(s.expanded)) == []
        assert any("TimeoutError" in w for w in warnings), warnings
    finally:
        admin.client_unpause()
    assert store.get("k") == SessionState()  # the breaker is open: no call until retry_after
    store.close()


def test_a_bug_in_change_is_not_an_outage(redis_server, warnings):
    store = RedisSessionStore(settings(redis_server))

    def broken(s):
        raise KeyError("bug")

    with pytest.raises(KeyError):
        store.update("k", broken)
    store.update("k", lambda s: s.expand(["a"]))
    assert store.get("k").expanded == ["a"] and not warnings
    store.close()


# --- Redis: credentials and TLS ----------------------------------------------------------------


@needs_redis
def test_a_password_from_the_environment_is_used_and_never_logged(tmp_path, warnings):
    with RedisServer(tmp_path / "r", extra_args=("--requirepass", "s3cret-pw")) as server:
        env = {"REDIS_URL": f"redis://:s3cret-pw@127.0.0.1:{server.port}/0"}
        cfg = parse({"sessions": {"backend": "redis", "redis": {"url": "${REDIS_URL}"}}}, env).sessions
        assert "s3cret" not in repr(cfg)
        store = _session_store(cfg)
        store.update("k", lambda s: s.expand(["a"]))
        assert store.get("k").expanded == ["a"]
        store.close()
        wrong = RedisSessionStore(RedisSettings(url=f"redis://:wrong-pw@127.0.0.1:{server.port}/0"))
        assert wrong.get("k") == SessionState()
        wrong.close()
    assert warnings and not any("s3cret" in w or "wrong-pw" in w for w in warnings)
    assert any("AuthenticationError" in w for w in warnings), warnings


def make_tls(directory: Path) -> Tls:
    """A CA and a server certificate for 127.0.0.1 that it signed."""
    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> Path:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()) if key else
                         cert.public_bytes(serialization.Encoding.PEM))
        return path

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    def usage(**allowed: bool) -> x509.KeyUsage:
        flags = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
                 "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only")
        return x509.KeyUsage(**{f: allowed.get(f, False) for f in flags})

    def builder(subject: str, issuer: x509.Name, public: ec.EllipticCurvePublicKey, serial: int):
        return (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(issuer).public_key(public)
                .serial_number(serial).not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=1)))

    # What Python's strict verification (the default since 3.13) asks of a CA and a leaf.
    ca = (builder("test ca", name("test ca"), ca_key.public_key(), 1)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(usage(key_cert_sign=True, crl_sign=True), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    cert = (builder("127.0.0.1", ca.subject, key.public_key(), 2)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(usage(digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    return Tls(write(directory / "server.pem", cert), write(directory / "server.key", cert, key),
               write(directory / "ca.pem", ca))


@needs_redis
def test_tls_with_a_ca_file(tmp_path, warnings):
    tls = make_tls(tmp_path / "certs")
    with RedisServer(tmp_path / "r", tls=tls) as server:
        cfg = parse({"sessions": {"backend": "redis", "redis": {"url": server.url, "ca_file": str(tls.ca)}}}).sessions
        store = _session_store(cfg)
        store.update("k", lambda s: s.expand(["a"]))
        assert store.get("k").expanded == ["a"]
        store.close()
        untrusted = RedisSessionStore(RedisSettings(url=server.url))  # the system CAs do not know this one
        assert untrusted.get("k") == SessionState()
        untrusted.close()
    assert any("unavailable" in w for w in warnings)


# --- config -----------------------------------------------------------------------------------


def test_config_defaults_to_disk_and_validates_redis_keys(tmp_path):
    assert parse({}).sessions.backend == "disk"
    cfg = parse({"sessions": {"backend": "redis", "redis": {"url": "rediss://h:6380/1", "timeout": "200ms",
                                                            "retry_after": "2s", "prefix": "team:"}}}).sessions
    assert (cfg.redis.timeout, cfg.redis.retry_after, cfg.redis.prefix) == (0.2, 2.0, "team:")
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    bad = {
        "sessions.backend": {"backend": "memcached"},
        "sessions.redis.url": {"redis": {"url": "http://user:pw@h"}},
        "sessions.redis.ca_file": {"redis": {"url": "redis://h", "ca_file": str(ca)}},
        "sessions.redis.key_file": {"redis": {"url": "rediss://h", "key_file": str(ca)}},
        "sessions.redis.cert_file": {"redis": {"url": "rediss://h", "cert_file": str(tmp_path / "missing")}},
        "sessions.redis.timeout": {"redis": {"timeout": "soon"}},
        "sessions.redis.verify": {"redis": {"verify": False}},
    }
    for key, section in bad.items():
        with pytest.raises(ConfigError, match=f"^{key}") as e:
            parse({"sessions": section})
        assert "pw" not in str(e.value)


def test_the_store_is_built_from_config(tmp_path):
    cfg = parse({"sessions": {"dir": str(tmp_path / "s")}}).sessions
    assert isinstance(_session_store(cfg), SessionStore)
    cfg = parse({"sessions": {"backend": "redis", "redis": {"url": "redis://127.0.0.1:1/0", "timeout": "100ms"}}})
    store = _session_store(cfg.sessions)
    assert isinstance(store, RedisSessionStore) and store.get("k") == SessionState()  # down: blank, no raise
    store.close()
