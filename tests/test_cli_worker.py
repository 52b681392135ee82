"""``rehydrate worker`` in real subprocesses: signals, grace, hand-back, and ``--processes``.

The app module is written into a temporary directory and imported the way a user's is (the
current directory is on the path). Each delivery appends ``<id> <attempt> <pid>`` to a log file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from rehydrate import open_store
from tests.logfiles import complete_lines

ROOT = Path(__file__).resolve().parent.parent

APP = """
import os, anyio
from rehydrate import Scheduler, current_delivery

scheduler = Scheduler("memory://", grace={grace})
LOG = {log!r}

@scheduler.handler("jobs", lease=30)
async def handle(element):
    with open(LOG, "a") as out:
        out.write(f"{{current_delivery().id}} {{current_delivery().attempt}} {{os.getpid()}}\\n")
    await anyio.sleep(element.get("sleep", 0))
    if element.get("sleep"):
        with open(LOG, "a") as out:
            out.write(f"{{current_delivery().id}} done {{os.getpid()}}\\n")

def make():
    return scheduler
"""


@pytest.fixture
def app(tmp_path: Path) -> Callable[..., Path]:
    def write(grace: float = 5.0) -> Path:
        log = tmp_path / "deliveries.log"
        (tmp_path / "wapp.py").write_text(textwrap.dedent(APP.format(grace=grace, log=str(log))))
        return log

    return write


def start(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``rehydrate --log-format json worker ARGV...`` in ``cwd``, with ``env`` added."""
    return subprocess.Popen(
        [sys.executable, "-m", "rehydrate", "--log-format", "json", "worker", *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def entries(log: Path) -> list[list[str]]:
    return [line.split() for line in complete_lines(log)]


def wait_for(
    predicate: Callable[[], bool], process: subprocess.Popen[str], what: str, timeout: float = 20
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(
                f"worker exited early ({process.returncode}) waiting for {what}: {err[-3000:]}"
            )
        if time.monotonic() > deadline:
            process.kill()
            _, err = process.communicate()
            raise AssertionError(f"timed out waiting for {what}: {err[-3000:]}")
        time.sleep(0.02)


def finish(process: subprocess.Popen[str], timeout: float = 20) -> tuple[int, list[dict[str, Any]]]:
    _, err = process.communicate(timeout=timeout)
    logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert all(line.startswith("{") for line in err.splitlines()), err  # JSON lines only
    return process.returncode, logs


def push(url: str, count: int, element: dict[str, Any]) -> None:
    async def body() -> None:
        async with open_store(url) as store:
            await store.push_many("jobs", [(element, 0, f"e{i:04d}") for i in range(count)])

    anyio.run(body)


def state(url: str) -> list[Any]:
    async def body() -> list[Any]:
        async with open_store(url) as store:
            return [await store.info("jobs", id) for id in await store.ids("jobs")]

    return anyio.run(body)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sigterm_finishes_running_work_and_exits_0(
    app: Callable[..., Path], tmp_path: Path, backend: str
) -> None:
    log = app(grace=10)
    url = f"sqlite:///{tmp_path / 'w.db'}"
    push(url, 3, {"sleep": 0.5})
    worker = start(tmp_path, "wapp:scheduler", "--store", url, "--backend", backend)
    wait_for(lambda: len(entries(log)) >= 3, worker, "3 deliveries")
    worker.send_signal(signal.SIGTERM)  # mid-handler: they get the grace period to finish
    code, logs = finish(worker)
    assert code == 0
    assert sorted(e[1] for e in entries(log)).count("done") == 3
    assert state(url) == []  # all acked before exiting
    events = [entry["event"] for entry in logs]
    assert events[:1] == ["worker ready"]
    assert "stopping" in events
    assert events[-1] == "worker stopped"
    assert logs[-1]["acked"] == 3


def test_unfinished_work_is_handed_back_after_the_grace(app: Callable[..., Path], tmp_path: Path) -> None:
    log = app(grace=0.2)
    url = f"sqlite:///{tmp_path / 'w.db'}"
    push(url, 2, {"sleep": 60})
    worker = start(tmp_path, "wapp:make", "--store", url, "--concurrency", "1")
    wait_for(lambda: len(entries(log)) >= 1, worker, "a delivery")
    worker.send_signal(signal.SIGINT)
    code, _ = finish(worker)
    assert code == 0
    infos = state(url)
    assert len(infos) == 2  # nothing lost: the running one was handed back, the other never claimed
    assert not any(info.claimed for info in infos)
    assert len(entries(log)) == 1  # --concurrency 1: only one was ever running


def test_second_signal_exits_at_once(app: Callable[..., Path], tmp_path: Path) -> None:
    log = app(grace=60)
    url = f"sqlite:///{tmp_path / 'w.db'}"
    push(url, 2, {"sleep": 60})
    worker = start(tmp_path, "wapp:scheduler", "--store", url)
    wait_for(lambda: len(entries(log)) >= 2, worker, "2 deliveries")
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # let it log "stopping"
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    code, logs = finish(worker, timeout=10)
    assert time.monotonic() - started < 5
    assert code == 128 + signal.SIGTERM
    assert any("leases will bring" in entry["event"] for entry in logs)
    # Still claimed: their 30 s leases will bring them back to another worker.
    assert [info.claimed for info in state(url)] == [True, True]


def test_processes_share_the_work_once(app: Callable[..., Path], tmp_path: Path) -> None:
    log = app()
    url = f"sqlite:///{tmp_path / 'w.db'}"
    push(url, 400, {})
    parent = start(tmp_path, "wapp:scheduler", "--store", url, "--processes", "2", "--concurrency", "4")
    wait_for(lambda: len(entries(log)) >= 400, parent, "400 deliveries")
    parent.send_signal(signal.SIGTERM)
    code, logs = finish(parent)
    assert code == 0
    delivered = entries(log)
    assert len(delivered) == 400
    assert len({e[0] for e in delivered}) == 400  # none twice
    assert {e[1] for e in delivered} == {"1"}
    pids = {e[2] for e in delivered}
    ready = {entry["pid"] for entry in logs if entry["event"] == "worker ready"}
    assert len(ready) == 2
    assert pids <= {str(pid) for pid in ready}
    assert parent.pid not in ready
    assert [entry["codes"] for entry in logs if entry["event"] == "workers stopped"] == [[0, 0]]
    assert state(url) == []


def test_memory_store_worker_starts_and_stops(app: Callable[..., Path], tmp_path: Path) -> None:
    """The app's own store (memory://) when no --store is given: nothing to share, but it runs."""
    app()
    worker = start(tmp_path, "wapp:scheduler")
    try:
        deadline = time.monotonic() + 20
        assert worker.stderr is not None
        line = worker.stderr.readline()
        while "worker ready" not in line and time.monotonic() < deadline:
            line = worker.stderr.readline()
        assert "MemoryStore" in json.loads(line)["store"]
    finally:
        worker.send_signal(signal.SIGTERM)
    code, logs = finish(worker)
    assert code == 0
    assert logs[-1]["event"] == "worker stopped"


def test_processes_refuse_the_memory_store(app: Callable[..., Path], tmp_path: Path) -> None:
    app()
    worker = start(tmp_path, "wapp:scheduler", "--processes", "2")
    _, err = worker.communicate(timeout=20)
    assert worker.returncode == 1
    assert "--processes needs a store the processes can share" in err
    assert "Traceback" not in err


def test_module_without_handlers(tmp_path: Path) -> None:
    (tmp_path / "empty_app.py").write_text("from rehydrate import Scheduler\nscheduler = Scheduler()\n")
    worker = start(tmp_path, "empty_app:scheduler")
    _, err = worker.communicate(timeout=20)
    assert worker.returncode == 1
    assert "has no handlers" in err


def test_redis_deployment_example(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """examples/redis_workers: two processes from ``rehydrate worker --processes 2``, a producer."""
    from tests.redis_server import shared_server_url

    url = shared_server_url(request.config).rsplit("/", 1)[0] + "/12"
    anyio.run(_flush, url)
    results = tmp_path / "results.log"
    example = ROOT / "examples" / "redis_workers"
    extra = {"REHYDRATE_STORE": url, "RESULTS": str(results)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    worker = start(example, "app:scheduler", "--processes", "2", env=extra)
    try:
        produced = subprocess.run(
            [sys.executable, "producer.py", "--count", "300", "--spread", "1"],
            cwd=example,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert produced.returncode == 0, produced.stderr
        assert f"deferred 300 thumbnails over 1s into {url}" in produced.stdout
        wait_for(lambda: len(entries(results)) >= 300, worker, "300 thumbnails")
    except BaseException:
        worker.kill()
        worker.communicate()
        raise
    worker.send_signal(signal.SIGTERM)
    code, logs = finish(worker)
    assert code == 0
    handled = entries(results)
    assert len(handled) == 300
    assert len({e[0] for e in handled}) == 300  # each exactly once
    ready = {str(entry["pid"]) for entry in logs if entry["event"] == "worker ready"}
    assert len(ready) == 2
    assert {e[2] for e in handled} <= ready


async def _flush(url: str) -> None:
    import coredis

    async with coredis.Redis.from_url(url) as client:
        await client.flushdb()
