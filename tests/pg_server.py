"""Throwaway PostgreSQL servers for the tests and the benchmarks.

A server is made by ``initdb`` in a temporary directory and run by ``pg_ctl`` on a free loopback
port (never 5432, never the machine's own cluster), with ``trust`` authentication for the
``postgres`` user, and removed at the end. ``initdb`` refuses to run as root: as root, every
server command runs as the ``postgres`` user (``runuser``), in a directory it owns.

The binaries come from ``$REHYDRATE_TEST_PG_BIN`` (a ``bin`` directory), else from the newest
``/usr/lib/postgresql/*/bin`` (Debian), else from ``PATH``. Where there are none, the tests that
need a server skip with one line saying so.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    import pytest

    from rehydrate.stores import PostgresStore

__all__ = ["PostgresServer", "drop_tables", "pg_bin_dir", "shared_server_url", "skip_without_server"]

SKIP_REASON = "no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql"


def pg_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``None``."""
    env = os.environ.get("REHYDRATE_TEST_PG_BIN")
    candidates = [env] if env else []

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.name)
        except ValueError:
            return 0.0

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).resolve().parent))
    for candidate in candidates:
        path = Path(candidate)
        if (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    return None


def skip_without_server() -> None:
    import pytest  # not at the top: the benchmarks use this module without pytest

    if pg_bin_dir() is None:
        pytest.skip(SKIP_REASON)


def _free_port() -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 5432:
            return port


class PostgresServer:
    """One cluster in a temporary directory. ``start()`` waits until it accepts connections.

    ``stop(mode="immediate")`` is a crash as far as the database is concerned (no checkpoint; the
    next start replays the WAL). ``fsync`` is off by default (the tests survive process crashes,
    which the OS page cache outlives, not power cuts); benchmarks turn it on.
    """

    def __init__(
        self, *, port: int | None = None, fsync: bool = False, settings: dict[str, str] | None = None
    ):
        bin_dir = pg_bin_dir()
        if bin_dir is None:
            raise RuntimeError(SKIP_REASON)
        self.bin = bin_dir
        self.port = port or _free_port()
        if self.port == 5432:
            raise ValueError("tests never use port 5432: that is the machine's own PostgreSQL")
        self._as_postgres = os.geteuid() == 0
        self.dir = Path(tempfile.mkdtemp(prefix="rehydrate-pg-"))
        if self._as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.dir),
            "fsync": "on" if fsync else "off",
            "max_connections": "200",
            "shared_buffers": "128MB",
            **(settings or {}),
        }
        self._initialized = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(
            command, capture_output=True, text=True, check=check, timeout=timeout, stdin=subprocess.DEVNULL
        )

    def _init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        with (self.data / "postgresql.conf").open("a") as conf:
            for key, value in self.settings.items():
                conf.write(f"{key} = '{value}'\n")
        self._initialized = True

    def start(self, timeout: float = 60) -> Self:
        if not self._initialized:
            self._init()
        result = self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            str(int(timeout)),
            "start",
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start: {result.stderr.strip()}\n{self.log_tail()}")
        return self

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode``: ``fast`` (clean) or ``immediate`` (a crash, replayed at next start)."""
        if not self._initialized:
            return
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "immediate") -> None:
        self.stop(mode)
        self.start()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def cleanup(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


_shared: dict[str, PostgresServer] = {}


def shared_server_url(config: pytest.Config) -> str:
    """The URL of this test session's server, started on first use and removed at the end of the
    session (``$REHYDRATE_TEST_PG_URL`` points at a running one instead). Skips where there are no
    server binaries."""
    url = os.environ.get("REHYDRATE_TEST_PG_URL")
    if url:
        return url
    server = _shared.get("shared")
    if server is None:
        skip_without_server()
        server = _shared["shared"] = PostgresServer().start()

        def stop() -> None:
            _shared.pop("shared", None)
            server.cleanup()

        config.add_cleanup(stop)
    return server.url


def time_to_start() -> float:  # pragma: no cover - a helper for humans
    started = time.monotonic()
    with PostgresServer():
        return time.monotonic() - started


async def drop_tables(store: PostgresStore) -> None:
    """Drop ``store``'s tables: what a test (or a benchmark) made on a shared server goes with it."""

    def drop(conn: Any) -> None:
        for statement in store._sql.drop:
            conn.execute(statement)

    await store._run(drop)
