"""A real ``redis-server`` (the Debian package ``scripts/test`` installs) on a free loopback
port, for the Redis session store's tests and scripts: started and stopped by its owner,
restartable on the same port (an outage and a recovery), nothing persisted outside its
own temp dir.

    with RedisServer(tmp_path) as server:
        store = RedisSessionStore(RedisSettings(url=server.url))

Tests use the ``redis_server`` fixture (import it into the test module) or ``needs_redis``;
without the binary they skip and say so.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REDIS_SERVER = shutil.which("redis-server")
_MISSING = "redis-server not installed (scripts/test installs it: apt-get install redis-server)"
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason=_MISSING)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Tls:
    """The server's certificate and key, and the CA that signed it (clients verify with it)."""

    cert: Path
    key: Path
    ca: Path


class RedisServer:
    """One redis-server process: no RDB or AOF files, its log in ``workdir``. With ``tls``
    it speaks only TLS on its port; ``extra_args`` go to redis-server as they are
    (``--requirepass``, ...)."""

    def __init__(self, workdir: Path, port: int | None = None, extra_args: tuple[str, ...] = (),
                 tls: Tls | None = None):
        assert REDIS_SERVER, "redis-server is not installed"
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.extra_args = extra_args
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30.0) -> RedisServer:
        assert not self.running, "already running"
        ports = ["--port", str(self.port)]
        if self.tls:
            ports = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.cert),
                     "--tls-key-file", str(self.tls.key), "--tls-ca-cert-file", str(self.tls.ca),
                     "--tls-auth-clients", "no"]
        cmd = [REDIS_SERVER, "--bind", "127.0.0.1", *ports, "--save", "", "--appendonly", "no",
               "--dir", str(self.workdir), "--daemonize", "no", "--logfile", str(self.workdir / "redis.log"),
               *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._pong():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.workdir / "redis.log").read_text() if (self.workdir / "redis.log").exists() else ""
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{log[-4000:]}")
            time.sleep(0.02)
        return self

    def _pong(self) -> bool:
        """Whether it answers (a server with a password answers ``-NOAUTH``: up too)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as raw:
                s = ssl.create_default_context(cafile=str(self.tls.ca)).wrap_socket(
                    raw, server_hostname="127.0.0.1") if self.tls else raw
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM (redis shuts down at once with nothing to save), SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: an outage without goodbye (the data goes with it: nothing is persisted)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A fresh redis-server for one test."""
    if REDIS_SERVER is None:
        pytest.skip(_MISSING)
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server
