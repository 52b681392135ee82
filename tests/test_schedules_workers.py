"""Recurring schedules served by real ``rehydrate worker`` processes sharing a store: each occurrence
runs once among healthy workers, and a SIGKILLed worker's occurrence comes back after its lease
while the schedule carries on.

Two workers serve ``Every(0.5)`` for the issue's 10 s (21 occurrences, each once) on SQLite,
Redis and PostgreSQL, one pair on asyncio, one on trio and one of each (``worker --backend``);
some 11 s each, spread by xdist. The schedule is declared with ``misfire="all"``, so a
worker made late by a loaded machine still runs every nominal time (coalescing would merge them,
rightly, and the test would see one missing). The in-process tests (tests/test_schedules.py)
cover long runs with a fake clock.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.test_cli_worker import entries, finish, wait_for

ROOT = Path(__file__).resolve().parent.parent
WORKER = (sys.executable, "-m", "rehydrate", "--log-format", "json", "worker")

APP = """
import os, anyio, sniffio
from rehydrate import Every, Scheduler, current_delivery

scheduler = Scheduler(grace=1)
LOG = {log!r}
KILL_ME = {kill_me!r}

@scheduler.handler("tick", lease={lease}, schedule=Every({interval}), misfire={misfire!r})
async def tick(element):
    d = current_delivery()
    with open(LOG, "a") as out:
        out.write(
            f"{{d.scheduled_for.timestamp()!r}} {{d.attempt}} {{os.getpid()}} "
            f"{{sniffio.current_async_library()}}\\n"
        )
    if d.attempt == 1 and os.path.exists(KILL_ME):
        await anyio.sleep(60)  # hangs until the test SIGKILLs this worker
"""


@contextlib.contextmanager
def store_url(kind: str, config: pytest.Config, tmp_path: Path) -> Iterator[str]:
    """A URL of ``kind`` for the workers: a SQLite file, or a prefix (Redis) or table (PostgreSQL)
    of this test's own on the session's server, dropped after."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'schedules.db'}"
    elif kind == "redis":
        from tests.redis_server import drop_prefix, shared_server_url

        prefix = f"sched-{uuid.uuid4().hex[:8]}"
        url = shared_server_url(config)
        try:
            yield f"{url}?prefix={prefix}"
        finally:
            anyio.run(drop_prefix, url, prefix)
    else:
        from rehydrate.stores import PostgresStore
        from tests.pg_server import drop_tables
        from tests.pg_server import shared_server_url as pg_url

        table = f"sched_{uuid.uuid4().hex[:8]}"
        url = pg_url(config)

        async def drop() -> None:
            async with PostgresStore.from_url(url, table=table) as store:
                await drop_tables(store)

        try:
            yield f"{url}?table={table}"
        finally:
            anyio.run(drop)


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with store_url(request.param, request.config, tmp_path) as url:
        yield url


def write_app(
    tmp_path: Path, *, lease: float, interval: float, misfire: str = "coalesce"
) -> tuple[Path, Path]:
    log, kill_me = tmp_path / "runs.log", tmp_path / "kill-me"
    app = APP.format(log=str(log), kill_me=str(kill_me), lease=lease, interval=interval, misfire=misfire)
    (tmp_path / "sapp.py").write_text(textwrap.dedent(app))
    return log, kill_me


def start(cwd: Path, url: str, backend: str = "asyncio") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*WORKER, "sapp:scheduler", "--store", url, "--backend", backend],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def span(log: Path) -> float:
    """Seconds between the first and the last nominal time run so far."""
    nominal = [float(run[0]) for run in entries(log)]
    return max(nominal) - min(nominal) if nominal else 0.0


@pytest.mark.parametrize(
    ("kind", "backends"),
    [
        ("sqlite", ("asyncio", "asyncio")),
        ("redis", ("trio", "trio")),
        ("postgres", ("asyncio", "trio")),
    ],
)
def test_two_worker_processes_run_each_occurrence_once_for_10_s(
    tmp_path: Path, pytestconfig: pytest.Config, kind: str, backends: tuple[str, str]
) -> None:
    with store_url(kind, pytestconfig, tmp_path) as url:
        log, _ = write_app(tmp_path, lease=5, interval=0.5, misfire="all")
        workers = [start(tmp_path, url, backend) for backend in backends]
        try:
            wait_for(lambda: span(log) >= 10, workers[0], "10 s of occurrences", timeout=60)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            results = [finish(worker) for worker in workers]
    assert [code for code, _ in results] == [0, 0], results
    runs = entries(log)
    nominal = sorted(float(run[0]) for run in runs)
    assert len(set(nominal)) == len(nominal), "an occurrence ran twice"
    gaps = {round(b - a, 6) for a, b in itertools.pairwise(nominal)}
    assert gaps == {0.5}, "an occurrence is missing"
    assert len(nominal) >= 21
    assert {run[1] for run in runs} == {"1"}
    # Each worker ran on the event loop it was started with.
    assert {run[3] for run in runs} <= set(backends)
    if len(set(backends)) == 1:
        assert {run[3] for run in runs} == set(backends)


def test_a_killed_worker_s_occurrence_comes_back_after_its_lease(tmp_path: Path, url: str) -> None:
    log, kill_me = write_app(tmp_path, lease=2, interval=1)
    kill_me.touch()
    first = start(tmp_path, url)
    try:
        wait_for(lambda: len(entries(log)) >= 1, first, "the first occurrence")
    finally:
        first.kill()  # SIGKILL: no hand-back, no ack; the lease is all that is left
        first.communicate()
    (hung,) = entries(log)
    kill_me.unlink()
    second = start(tmp_path, url)
    try:
        wait_for(lambda: len(entries(log)) >= 4, second, "the schedule carrying on", timeout=40)
    finally:
        second.send_signal(signal.SIGTERM)
        code, _ = finish(second)
    assert code == 0
    runs = entries(log)
    # The killed worker's occurrence, again (attempt 2), then the following ones, each once.
    assert runs[1][:2] == [hung[0], "2"]
    later = [float(run[0]) for run in runs[1:]]
    assert later == sorted(set(later))
    # On the grid (those missed while the lease ran out are coalesced into one run).
    assert all(round(b - a, 6).is_integer() for a, b in itertools.pairwise(later))
