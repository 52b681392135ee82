"""Limits across real ``rehydrate worker`` processes on one SQLite file.

Each handler stamps its start and end (wall time, one clock for every process on the machine)
into a log; the test reads the stamps: never more than ``Concurrency(2)`` at once across three
processes, and a process SIGKILLed while it holds both slots gives them back when their lease
ends, with nothing admitted meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from tests.logfiles import complete_lines
from tests.test_cli_worker import push, start, wait_for

APP = """
import os, time, anyio
from rehydrate import Concurrency, Scheduler, current_delivery

scheduler = Scheduler(grace=0.2)
LOG = {log!r}

def stamp(what):
    with open(LOG, "a") as out:
        out.write(f"{{what}} {{current_delivery().id}} {{time.time()!r}} {{os.getpid()}}\\n")

@scheduler.handler("jobs", limits=[Concurrency(2)], lease=2)
async def handle(element):
    stamp("start")
    if element.get("hang") and current_delivery().attempt == 1:
        await anyio.sleep_forever()  # until the test kills this process
    await anyio.sleep(element.get("sleep", 0.05))
    stamp("end")
"""


@pytest.fixture
def app(tmp_path: Path) -> tuple[Path, str]:
    log = tmp_path / "stamps.log"
    (tmp_path / "lapp.py").write_text(textwrap.dedent(APP.format(log=str(log))))
    return log, f"sqlite:///{tmp_path / 'jobs.db'}"


def stamps(log: Path, what: str) -> list[tuple[str, float, int]]:
    found = []
    for line in complete_lines(log):
        kind, id, at, pid = line.split()
        if kind == what:
            found.append((id, float(at), int(pid)))
    return found


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def spans_of(log: Path) -> list[tuple[float, float]]:
    ends = {(id, pid): at for id, at, pid in stamps(log, "end")}
    return [(at, ends[id, pid]) for id, at, pid in stamps(log, "start") if (id, pid) in ends]


def stop(workers: list[subprocess.Popen[str]]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()


def test_three_workers_never_run_more_than_two_at_once(app: tuple[Path, str], tmp_path: Path) -> None:
    log, url = app
    push(url, 16, {"sleep": 0.05})
    workers = [start(tmp_path, "lapp:scheduler", "--store", url) for _ in range(3)]
    try:
        wait_for(lambda: len(stamps(log, "end")) == 16, workers[0], "16 jobs to end", timeout=60)
    finally:
        stop(workers)
    assert all(w.returncode == 0 for w in workers)
    spans = spans_of(log)
    assert sorted(id for id, _, _ in stamps(log, "start")) == [f"e{i:04d}" for i in range(16)]  # once each
    assert most_at_once(spans) <= 2
    assert len({pid for _, _, pid in stamps(log, "start")}) >= 2  # the work was shared


def test_a_killed_holders_slots_come_back_within_the_lease(app: tuple[Path, str], tmp_path: Path) -> None:
    """Worker A holds both slots (two handlers hang); worker B, started beside it, runs nothing
    while they are held; A is SIGKILLed: its slots (lease 2 s, renewed every second) come back
    when their leases end, and B runs everything, two at a time."""
    log, url = app
    push(url, 2, {"hang": True})
    first = start(tmp_path, "lapp:scheduler", "--store", url)
    second = None
    try:
        wait_for(lambda: len(stamps(log, "start")) == 2, first, "A to hold both slots")
        holder = first.pid
        _push_more(url)
        second = start(tmp_path, "lapp:scheduler", "--store", url)
        # B claims and parks the four new elements (the limit is full): it runs none of them.
        wait_for(lambda: _waiting(url) >= 1, second, "B to park an element")
        assert [pid for _, _, pid in stamps(log, "start")] == [holder, holder]
        killed_at = time.time()
        os.kill(holder, signal.SIGKILL)
        first.wait(timeout=10)
        wait_for(lambda: len(stamps(log, "end")) == 6, second, "B to run everything", timeout=30)
    finally:
        stop([w for w in (first, second) if w is not None])
    after = [(at, pid) for _, at, pid in stamps(log, "start")[2:]]
    assert {pid for _, pid in after} == {second.pid}
    first_start = min(at for at, _ in after)
    # Not before A's leases could have ended (renewed every second: at least a second left at
    # the kill), and not long after the lease (2 s) at most.
    assert killed_at + 0.9 <= first_start <= killed_at + 2.0 + 2.0
    assert most_at_once(spans_of(log)) <= 2
    assert sorted(id for id, _, _ in stamps(log, "end")) == sorted(
        ["e0000", "e0001", "m0", "m1", "m2", "m3"]
    )  # A's two hung elements too, run again by B


def _waiting(url: str) -> int:
    import anyio

    from rehydrate import Admin, open_store

    async def body() -> int:
        async with open_store(url) as store:
            return sum(status.waiting for status in await Admin(store).limits("jobs"))

    return anyio.run(body)


def _push_more(url: str) -> None:
    import anyio

    from rehydrate import open_store

    async def body() -> None:
        async with open_store(url) as store:
            await store.push_many("jobs", [({"sleep": 0.05}, 0, f"m{i}") for i in range(4)])

    anyio.run(body)
