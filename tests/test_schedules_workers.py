"""Recurring schedules served by real ``rehydrate worker`` processes sharing a SQLite file or a Redis
server: each occurrence runs once among healthy workers, and a SIGKILLed worker's occurrence comes
back after its lease while the schedule carries on.

Kept short (a few seconds of ``Every(0.5)``, not the issue's 10 s): long enough for some 8
occurrences served by two processes racing for each; the in-process tests (tests/test_schedules.py)
cover long runs with a fake clock.
"""

from __future__ import annotations

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
import os, anyio
from rehydrate import Every, Scheduler, current_delivery

scheduler = Scheduler(grace=1)
LOG = {log!r}
KILL_ME = {kill_me!r}

@scheduler.handler("tick", lease={lease}, schedule=Every({interval}))
async def tick(element):
    d = current_delivery()
    with open(LOG, "a") as out:
        out.write(f"{{d.scheduled_for.timestamp()!r}} {{d.attempt}} {{os.getpid()}}\\n")
    if d.attempt == 1 and os.path.exists(KILL_ME):
        await anyio.sleep(60)  # hangs until the test SIGKILLs this worker
"""


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'schedules.db'}"
        return
    from tests.redis_server import drop_prefix, shared_server_url

    # A prefix of its own on the shared server: nothing else is touched, and it is dropped after.
    prefix = f"sched-{uuid.uuid4().hex[:8]}"
    url = shared_server_url(request.config)
    yield f"{url}?prefix={prefix}"
    anyio.run(drop_prefix, url, prefix)


def write_app(tmp_path: Path, *, lease: float, interval: float) -> tuple[Path, Path]:
    log, kill_me = tmp_path / "runs.log", tmp_path / "kill-me"
    (tmp_path / "sapp.py").write_text(
        textwrap.dedent(APP.format(log=str(log), kill_me=str(kill_me), lease=lease, interval=interval))
    )
    return log, kill_me


def start(cwd: Path, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*WORKER, "sapp:scheduler", "--store", url],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_worker_processes_run_each_occurrence_once(tmp_path: Path, url: str) -> None:
    log, _ = write_app(tmp_path, lease=5, interval=0.5)
    workers = [start(tmp_path, url), start(tmp_path, url)]
    try:
        wait_for(lambda: len(entries(log)) >= 8, workers[0], "8 occurrences", timeout=40)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        results = [finish(worker) for worker in workers]
    assert [code for code, _ in results] == [0, 0]
    runs = entries(log)
    nominal = sorted(float(run[0]) for run in runs)
    assert len(set(nominal)) == len(nominal), "an occurrence ran twice"
    gaps = {round(b - a, 6) for a, b in itertools.pairwise(nominal)}
    assert gaps == {0.5}, "an occurrence is missing"
    assert {run[1] for run in runs} == {"1"}


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
