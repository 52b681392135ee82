"""Fault tests with real processes: a worker killed mid-handler loses nothing.

A worker claims 5 elements and hangs in their handlers; it is killed with SIGKILL. A second
worker then handles all 20: the 15 nobody had, at once, and the killed worker's 5 once their
1-second lease runs out, as attempt 2. Runs on SQLite and on Redis (a throwaway server), with the
worker processes on asyncio and on trio.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rehydrate import open_store
from tests.logfiles import complete_lines
from tests.redis_server import drop_prefix, shared_server_url

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["sqlite", "redis"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}", {}
        return
    url = shared_server_url(request.config)
    prefix = f"rhfault-{uuid.uuid4().hex[:8]}"
    yield url, {"prefix": prefix}
    anyio.run(drop_prefix, url, prefix)


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    """The event loop the worker processes run on."""
    return str(request.param)


def start_worker(
    url: str, options: dict[str, Any], mode: str, log: Path, backend: str, concurrency: int = 5
) -> subprocess.Popen[bytes]:
    args = [url, json.dumps(options), mode, str(log), str(concurrency), backend]
    with open(log.with_suffix(".err"), "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.fault_worker", *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def lines(log: Path) -> list[tuple[str, int, int]]:
    out = []
    for line in complete_lines(log):
        id, attempt, pid = line.split()
        if id != "ready":
            out.append((id, int(attempt), int(pid)))
    return out


def wait_for(predicate: Any, timeout: float, what: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            raise AssertionError(f"worker exited early: {log.with_suffix('.err').read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


async def store_call(url: str, options: dict[str, Any], method: str, *args: Any, **kwargs: Any) -> Any:
    async with open_store(url, **options) as store:
        return await getattr(store, method)(*args, **kwargs)


def test_worker_killed_mid_handler_loses_nothing(
    target: tuple[str, dict[str, Any]], tmp_path: Path, backend: str
) -> None:
    url, options = target
    ids = [f"job-{i}" for i in range(20)]
    anyio.run(
        lambda: store_call(url, options, "push_many", "jobs", [({"n": i}, 0, id) for i, id in enumerate(ids)])
    )

    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = start_worker(url, options, "hang", first_log, backend)
    try:
        wait_for(
            lambda: len(lines(first_log)) == 5, 20, "the first worker to start 5 handlers", first, first_log
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    started = {id for id, _, _ in lines(first_log)}
    assert len(started) == 5

    second = start_worker(url, options, "ok", second_log, backend)
    try:
        wait_for(
            lambda: {id for id, _, _ in lines(second_log)} == set(ids),
            30,
            "every element",
            second,
            second_log,
        )
        wait_for(
            lambda: anyio.run(lambda: store_call(url, options, "size", "jobs")) == 0,
            10,
            "the acks",
            second,
            second_log,
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(10)
    handled = lines(second_log)
    assert sorted(id for id, _, _ in handled) == sorted(ids)  # each exactly once
    attempts = {id: attempt for id, attempt, _ in handled}
    assert {id for id, attempt in attempts.items() if attempt == 2} == started
    assert all(attempts[id] == 1 for id in set(ids) - started)
    assert second.returncode == 0  # SIGTERM: a graceful stop


def test_two_workers_share_the_work_once(
    target: tuple[str, dict[str, Any]], tmp_path: Path, backend: str
) -> None:
    """Two worker processes on one store: 10,000 elements, each handled exactly once."""
    url, options = target
    ids = [f"e{i}" for i in range(10_000)]

    async def fill() -> None:
        async with open_store(url, **options) as store:
            for start in range(0, len(ids), 1000):
                await store.push_many("jobs", [(None, 0, id) for id in ids[start : start + 1000]])

    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    workers = [start_worker(url, options, "ok", log, backend, concurrency=100) for log in logs]
    try:
        for worker, log in zip(workers, logs, strict=True):
            wait_for(lambda log=log: log.exists() and "ready" in log.read_text(), 20, "ready", worker, log)
        anyio.run(fill)  # both are up and waiting: they share the work
        wait_for(
            lambda: sum(len(lines(log)) for log in logs) >= len(ids),
            60,
            "10,000 deliveries",
            workers[0],
            logs[0],
        )
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(10)
    handled = [id for log in logs for id, _, _ in lines(log)]
    assert sorted(handled) == sorted(ids)  # every element, none twice
    assert all(lines(log) for log in logs)  # both took a share
    assert anyio.run(lambda: store_call(url, options, "size", "jobs")) == 0
