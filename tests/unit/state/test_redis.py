"""What only the Redis session store has: several processes on one session (WATCH retries),
outages (the circuit breaker), passwords, TLS, its config. What both stores share runs on
both in test_store_contract.py (``backend``)."""

import datetime
import ipaddress
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from loguru import logger
from tooldisco.config import ConfigError, RedisSettings, parse
from tooldisco.state.base import SessionState
from tooldisco.state.factory import open_store
from tooldisco.state.redis import RedisSessionStore

from tests.support.redis_server import RedisServer, Tls, needs_redis, redis_server  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[3]


def settings(server: RedisServer, **kw) -> RedisSettings:
    return RedisSettings(url=server.url, **kw)


# --- Redis: several processes ------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, time
    from tooldisco.config import RedisSettings
    from tooldisco.state.redis import RedisSessionStore
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


def test_a_redis_update_losing_every_race_gives_up_within_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Optimistic retries under contention stop at the store's timeout, not after 50 tries with backoff."""
    store = RedisSessionStore(RedisSettings(url="redis://127.0.0.1:1/0", timeout=0.2))

    class Racing:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def watch(self, *keys):
            time.sleep(0.02)  # the round trip
            raise redis.WatchError("another writer")

    monkeypatch.setattr(store._redis, "pipeline", lambda *a, **kw: Racing())
    began = time.monotonic()
    assert store.update("k", lambda s: "planned") == "planned"
    assert time.monotonic() - began < 1.0  # 50 tries of 20 ms alone would be a second


# --- Redis: outages ----------------------------------------------------------------------------


@pytest.fixture
def warnings():
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(f"{m.record['level'].name} {m.record['message']}"), level="INFO")
    yield seen
    logger.remove(sink)


def test_redis_down_fails_open_then_recovers(redis_server, warnings):
    store = RedisSessionStore(settings(redis_server, timeout=0.5, retry_after=0.3))
    store.update("k", lambda s: s.expand(["b"]))
    redis_server.kill()
    for _ in range(20):  # the request goes through as for a new session: no exception, no state
        assert store.update("k", lambda s: (s.expand(["x"]), list(s.expanded))[1]) == ["x"]
        assert store.get("k") == SessionState()
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
        store = open_store(cfg)
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
        store = open_store(cfg)
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
