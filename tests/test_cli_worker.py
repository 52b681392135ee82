"""``rehydrate worker`` in real subprocesses: signals, grace, hand-back, and ``--processes``.

The app module is written into a temporary directory and imported the way a user's is (the
current directory is on the path). Each delivery appends ``<id> <attempt> <pid>`` to a log file.
"""

from __future__ import annotations

import json
import os
import select
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


def environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without a REHYDRATE_STORE of its own, with ``env`` added."""
    inherited = {key: value for key, value in os.environ.items() if key != "REHYDRATE_STORE"}
    return {**inherited, "PYTHONPATH": str(ROOT), **(env or {})}


def start(
    cwd: Path, *argv: str, env: dict[str, str] | None = None, stderr: Any = subprocess.PIPE
) -> subprocess.Popen[str]:
    """``rehydrate --log-format json worker ARGV...`` in ``cwd``, with ``env`` added."""
    return subprocess.Popen(
        [sys.executable, "-m", "rehydrate", "--log-format", "json", "worker", *argv],
        cwd=cwd,
        env=environment(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
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


def _children_command_lines(pid: int) -> list[str]:
    """The command lines of ``pid``'s child processes, from /proc."""
    lines = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                lines.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):  # a process that ended meanwhile
            continue
    return lines


def test_processes_share_the_work_once(app: Callable[..., Path], tmp_path: Path) -> None:
    log = app()
    url = f"sqlite:///{tmp_path / 'w.db'}"
    push(url, 400, {})
    err = tmp_path / "worker.log"
    with err.open("w") as out:
        parent = start(
            tmp_path, "wapp:scheduler", "--store", url, "--processes", "2", "--concurrency", "4", stderr=out
        )

    def ready() -> set[int]:
        return {entry["pid"] for entry in json_lines(err) if entry["event"] == "worker ready"}

    wait_for(lambda: len(entries(log)) >= 400, parent, "400 deliveries")
    # One child can deliver all 400 before the other is up (a loaded machine): stopping them then
    # would stop a child that never said it was ready.
    wait_for(lambda: len(ready()) == 2, parent, "2 workers ready")
    # The store reaches the children by their environment: a password in it is not on their
    # command lines, which anyone on the machine can read (ps).
    commands = _children_command_lines(parent.pid)
    assert len(commands) == 2
    assert all(url not in command and "--store" not in command for command in commands)
    parent.send_signal(signal.SIGTERM)
    parent.communicate(timeout=20)  # (stdout drained)
    code = parent.returncode
    assert all(line.startswith("{") for line in complete_lines(err)), err.read_text()  # JSON only
    logs = json_lines(err)
    assert code == 0, logs
    delivered = entries(log)
    assert len(delivered) == 400
    assert len({e[0] for e in delivered}) == 400  # none twice
    assert {e[1] for e in delivered} == {"1"}
    pids = {e[2] for e in delivered}
    assert pids <= {str(pid) for pid in ready()}
    assert parent.pid not in ready()
    assert [entry["codes"] for entry in logs if entry["event"] == "workers stopped"] == [[0, 0]]
    assert state(url) == []


def test_memory_store_worker_starts_and_stops(app: Callable[..., Path], tmp_path: Path) -> None:
    """The app's own store (memory://) when no --store is given: nothing to share, but it runs."""
    app()
    worker = start(tmp_path, "wapp:scheduler")
    try:
        logs = read_until_ready(worker)
    finally:
        worker.send_signal(signal.SIGTERM)
    assert "MemoryStore" in logs[-1]["store"]
    assert logs[-1]["store_from"] == "the module"
    # Said at start-up: what `rehydrate push` or another process writes never reaches it.
    (warning,) = [entry for entry in logs if entry["level"] == "warning"]
    assert "nothing outside this process can reach it" in warning["event"]
    assert "REHYDRATE_STORE" not in warning  # not set here
    code, rest = finish(worker)
    assert code == 0
    assert rest[-1]["event"] == "worker stopped"


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


# -- the store: --store, then $REHYDRATE_STORE, then the module's own --------------------------------

PLAIN_APP = """
import os
from rehydrate import Scheduler, current_delivery
{imports}
scheduler = Scheduler({store})
LOG = {log!r}

@scheduler.handler("jobs", lease=30)
async def handle(element):
    with open(LOG, "a") as out:
        out.write(f"{{current_delivery().id}} {{current_delivery().attempt}} {{os.getpid()}}\\n")
"""


def write_plain_app(tmp_path: Path, store: str = "", imports: str = "") -> Path:
    """``papp.py``: a scheduler on ``store`` (Python source; default: none given, memory)."""
    log = tmp_path / "deliveries.log"
    (tmp_path / "papp.py").write_text(PLAIN_APP.format(store=store, imports=imports, log=str(log)))
    return log


def cli(cwd: Path, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rehydrate", *argv],
        cwd=cwd,
        env=environment(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_worker_serves_the_store_of_rehydrate_store(tmp_path: Path) -> None:
    """The README's deployment: REHYDRATE_STORE set, ``rehydrate push``, a module with ``Scheduler()``."""
    log = write_plain_app(tmp_path)
    env = {"REHYDRATE_STORE": f"sqlite:///{tmp_path / 'e2e.db'}"}
    pushed = cli(tmp_path, "push", "jobs", '{"n": 1}', "--id", "p1", env=env)
    assert pushed.returncode == 0, pushed.stderr
    worker = start(tmp_path, "papp:scheduler", env=env)
    wait_for(lambda: len(entries(log)) >= 1, worker, "the pushed element")
    worker.send_signal(signal.SIGTERM)
    code, logs = finish(worker)
    assert code == 0
    assert [e[:2] for e in entries(log)] == [["p1", "1"]]
    (ready,) = [entry for entry in logs if entry["event"] == "worker ready"]
    assert "SQLiteStore" in ready["store"]
    assert "e2e.db" in ready["store"]
    assert ready["store_from"] == "REHYDRATE_STORE"
    assert not any(entry["level"] == "warning" for entry in logs)
    assert state(env["REHYDRATE_STORE"]) == []


def test_store_flag_beats_rehydrate_store_and_memory_says_so(tmp_path: Path) -> None:
    """``--store memory://`` with REHYDRATE_STORE naming SQLite: served, but never silently."""
    write_plain_app(tmp_path, store=repr(f"sqlite:///{tmp_path / 'module.db'}"))
    env = {"REHYDRATE_STORE": f"sqlite:///{tmp_path / 'env.db'}"}
    worker = start(tmp_path, "papp:scheduler", "--store", "memory://", env=env)
    logs = read_until_ready(worker)
    assert "MemoryStore" in logs[-1]["store"]
    assert logs[-1]["store_from"] == "--store"
    worker.send_signal(signal.SIGTERM)
    code, rest = finish(worker)
    assert code == 0
    logs += rest
    (warning,) = [entry for entry in logs if entry["level"] == "warning"]
    assert "nothing outside this process can reach it" in warning["event"]
    assert warning["REHYDRATE_STORE"] == "sqlite://..."  # named, without what could be a password
    assert not (tmp_path / "module.db").exists()
    assert not (tmp_path / "env.db").exists()


def read_until_ready(worker: subprocess.Popen[str], timeout: float = 20) -> list[dict[str, Any]]:
    """Read the worker's JSON log lines up to "worker ready" (the last one returned)."""
    assert worker.stderr is not None
    deadline = time.monotonic() + timeout
    read: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        line = worker.stderr.readline()
        if not line:
            break
        read.append(json.loads(line))
        if read[-1]["event"] == "worker ready":
            return read
    worker.kill()
    raise AssertionError(f"no 'worker ready' (exit {worker.wait()}): {worker.stderr.read()[-3000:]}")


# -- a scheduler built on a store object (issue 14 item 6) ------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_scheduler_on_a_store_object_stops_cleanly(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str, backend: str
) -> None:
    """``Scheduler(RedisStore(...))`` served by the worker: SIGTERM exits 0, the store closed."""
    if kind == "redis":
        from tests.redis_server import drop_prefix, shared_server_url

        url = shared_server_url(request.config)
        prefix = f"obj{os.getpid()}{backend}"
        store = f"RedisStore({url!r}, prefix={prefix!r})"
        imports = "from rehydrate.stores import RedisStore"
        anyio.run(_push_prefixed, url, prefix)
        request.addfinalizer(lambda: anyio.run(drop_prefix, url, prefix))
    else:
        url = f"sqlite:///{tmp_path / 'obj.db'}"
        store = f"SQLiteStore({str(tmp_path / 'obj.db')!r})"
        imports = "from rehydrate.stores import SQLiteStore"
        push(url, 1, {})
    log = write_plain_app(tmp_path, store=store, imports=imports)
    worker = start(tmp_path, "papp:scheduler", "--backend", backend)
    try:
        wait_for(lambda: len(entries(log)) >= 1, worker, "a delivery")
    finally:
        worker.send_signal(signal.SIGTERM)
    code, logs = finish(worker)  # JSON lines only: no traceback
    assert code == 0
    assert logs[-1]["event"] == "worker stopped"
    assert logs[-1]["acked"] == 1


async def _push_prefixed(url: str, prefix: str) -> None:
    from rehydrate.stores import RedisStore

    async with RedisStore(url, prefix=prefix) as store:
        await store.push("jobs", {}, ttl=0, id="e0000")


# -- --processes: children end with their supervisor; SIGHUP; giving up ------------------------------


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in complete_lines(path)]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a parent that does not reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def start_supervisor(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen[str], Path, list[int]]:
    """``--processes 2`` on SQLite, logging into a file; the supervisor, that file, the children."""
    write_plain_app(tmp_path)
    logs = tmp_path / "worker.log"
    url = f"sqlite:///{tmp_path / 'w.db'}"
    with logs.open("w") as out:
        parent = start(tmp_path, "papp:scheduler", "--store", url, "--processes", "2", *argv, stderr=out)

    def ready() -> list[int]:
        return [e["pid"] for e in json_lines(logs) if e["event"] == "worker ready"]

    wait_for(lambda: len(ready()) == 2, parent, "2 workers ready")
    return parent, logs, ready()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_children_stop_when_the_supervisor_is_killed(tmp_path: Path, backend: str) -> None:
    """SIGKILL of the supervisor (or a closed terminal killing it): no orphans, each stops gracefully."""
    parent, logs, children = start_supervisor(tmp_path, "--backend", backend)
    assert parent.pid not in children
    parent.kill()
    parent.wait()
    assert parent.stdout is not None
    parent.stdout.close()
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphans = [pid for pid in children if alive(pid)]
    for pid in orphans:  # leave nothing behind, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    assert not orphans, "orphaned workers outlived their supervisor"
    stopped = {e["pid"] for e in json_lines(logs) if e["event"] == "worker stopped"}
    assert stopped == set(children)  # gracefully: handed back what ran, said so


def test_a_child_stops_when_its_supervisor_pipe_closes(tmp_path: Path) -> None:
    """The portable way (no PR_SET_PDEATHSIG): end of file on the pipe the supervisor holds."""
    write_plain_app(tmp_path)
    watch_read, watch_write = os.pipe()
    status_read, status_write = os.pipe()
    this = os.getpid()  # stands in for the supervisor, and stays alive: no signal from Linux
    child = subprocess.Popen(
        [sys.executable, "-m", "rehydrate", "--log-format", "json", "worker", "papp:scheduler"],
        cwd=tmp_path,
        env=environment(
            {
                "REHYDRATE_STORE": f"sqlite:///{tmp_path / 'w.db'}",
                "_REHYDRATE_SUPERVISOR": f"{this}:{watch_read}:{status_write}",
            }
        ),
        pass_fds=(watch_read, status_write),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(watch_read)
    os.close(status_write)
    try:
        with os.fdopen(status_read, "rb") as status:
            readable, _, _ = select.select([status], [], [], 20)
            # What it tells the supervisor once serving:
            assert readable, "the worker said nothing on its status pipe within 20 s"
            assert status.readline() == b"ready\n"
        os.close(watch_write)  # the supervisor is gone
        code, logs = finish(child, timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
    assert code == 0
    events = [entry["event"] for entry in logs]
    assert "supervisor gone; stopping" in events
    assert events[-1] == "worker stopped"


def test_children_stopped_while_still_starting_are_a_clean_stop(tmp_path: Path) -> None:
    """SIGTERM while the children still import the app: they die of the forwarded signal before
    their handlers are in place, holding nothing; the supervisor exits 0, not as if they crashed."""
    slow = 'import sys, time\nif sys.argv[sys.argv.index("--processes") + 1] == "1": time.sleep(30)'
    write_plain_app(tmp_path, imports=slow)
    logs = tmp_path / "worker.log"
    url = f"sqlite:///{tmp_path / 'w.db'}"
    with logs.open("w") as out:
        parent = start(tmp_path, "papp:scheduler", "--store", url, "--processes", "2", stderr=out)

    def started() -> int:
        return sum(e["event"] == "worker process started" for e in json_lines(logs))

    wait_for(lambda: started() == 2, parent, "2 worker processes started")
    parent.send_signal(signal.SIGTERM)
    parent.communicate(timeout=20)
    assert parent.returncode == 0, logs.read_text()[-3000:]
    assert [e["codes"] for e in json_lines(logs) if e["event"] == "workers stopped"] == [[0, 0]]
    assert not [e for e in json_lines(logs) if e["event"] == "worker ready"]


def test_sighup_stops_a_supervisor_and_its_children_gracefully(tmp_path: Path) -> None:
    parent, logs, children = start_supervisor(tmp_path)
    parent.send_signal(signal.SIGHUP)
    try:
        parent.communicate(timeout=20)
    finally:
        for pid in children:  # leave nothing behind, whatever the outcome
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert parent.returncode == 0
    entries_ = json_lines(logs)
    assert [e["codes"] for e in entries_ if e["event"] == "workers stopped"] == [[0, 0]]
    stopping = [e for e in entries_ if e["event"] == "stopping"]
    assert {e["pid"] for e in stopping} == set(children)
    assert {e["signal"] for e in stopping} == {"SIGHUP"}


def test_sighup_stops_a_worker_gracefully(tmp_path: Path) -> None:
    write_plain_app(tmp_path)
    worker = start(tmp_path, "papp:scheduler", "--store", f"sqlite:///{tmp_path / 'w.db'}")
    read_until_ready(worker)
    worker.send_signal(signal.SIGHUP)
    code, logs = finish(worker)
    assert code == 0
    assert [e["signal"] for e in logs if e["event"] == "stopping"] == ["SIGHUP"]
    assert logs[-1]["event"] == "worker stopped"


def test_processes_give_up_when_no_child_can_start(tmp_path: Path) -> None:
    """As a single worker exits 1 on a store it cannot open, so do N of them, in one line."""
    write_plain_app(tmp_path)
    url = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}"
    single = start(tmp_path, "papp:scheduler", "--store", url)
    _, single_err = single.communicate(timeout=30)
    assert single.returncode == 1
    # With --log-format json, the command's error line is a JSON line too (logger rehydrate.cli).
    (reason,) = [
        e["event"] for e in map(json.loads, single_err.splitlines()) if e.get("logger") == "rehydrate.cli"
    ]
    assert "could not be opened" in reason

    parent = start(tmp_path, "papp:scheduler", "--store", url, "--processes", "2")
    try:
        _, err = parent.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        parent.kill()  # its children die at start-up on their own
        _, err = parent.communicate()
        raise AssertionError(f"still restarting children after 30 s: {err[-2000:]}") from None
    assert parent.returncode == 1
    assert "Traceback" not in err
    logs = [json.loads(line) for line in err.splitlines()]
    errors = [e["event"] for e in logs if e.get("logger") == "rehydrate.cli"]
    assert errors == [f"worker processes failed to start 3 times in a row: {reason}"]
    failed = [e for e in logs if e["event"].startswith("worker process failed to start")]
    assert {e["error"] for e in failed} == {reason}
    assert failed[-1]["event"] == "worker process failed to start; giving up"
    started = [e["child"] for e in logs if e["event"] == "worker process started"]
    assert not [pid for pid in started if alive(pid)]


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (Unix)")
def test_closing_the_terminal_stops_everything_gracefully(app: Callable[..., Path], tmp_path: Path) -> None:
    """A terminal window closed (``tmux kill-window``): SIGHUP, then logs that cannot be written."""
    import fcntl
    import termios

    log = app(grace=0.2)
    url = f"sqlite:///{tmp_path / 'w.db'}"
    push(url, 2, {"sleep": 60})
    terminal, tty = os.openpty()

    def controlling_terminal() -> None:  # the supervisor leads a session whose terminal is tty
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    argv = ["wapp:scheduler", "--store", url, "--processes", "2", "--concurrency", "1"]
    parent = subprocess.Popen(
        [sys.executable, "-m", "rehydrate", "--log-format", "json", "worker", *argv],
        cwd=tmp_path,
        env=environment(),
        stdin=tty,
        stdout=tty,
        stderr=tty,
        preexec_fn=controlling_terminal,  # the test runs no other thread here
    )
    os.close(tty)
    children: list[int] = []
    try:
        screen = b""
        deadline = time.monotonic() + 20
        while len(entries(log)) < 2 and time.monotonic() < deadline:
            if select.select([terminal], [], [], 0.1)[0]:
                screen += os.read(terminal, 65536)
        lines = screen.decode(errors="replace").splitlines()
        children = [json.loads(line)["pid"] for line in lines if '"worker ready"' in line]
        assert len(entries(log)) == 2, screen.decode(errors="replace")[-3000:]
        assert len(children) == 2
        os.close(terminal)  # the window closes: the kernel hangs up the terminal
        terminal = -1
        assert parent.wait(timeout=20) == 0
        deadline = time.monotonic() + 15
        while any(alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in children if alive(pid)]
    finally:
        if terminal >= 0:
            os.close(terminal)
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    infos = state(url)
    assert len(infos) == 2  # both handed back after the grace, by workers that stopped gracefully
    assert not any(info.claimed for info in infos)


def test_help_says_where_the_store_comes_from_how_it_stops_and_its_exit_statuses() -> None:
    shown = cli(ROOT, "worker", "--help", env={})
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    assert "--store URL, else $REHYDRATE_STORE, else the store the scheduler was built with" in text
    assert "SIGTERM, SIGINT or SIGHUP" in text
    assert "3 times in a row and no other child serves, the parent gives up: exit 1" in text
    assert "exit status: 0 stopped by a signal; 1 an error" in text
    assert "for up to --wait (default 1m; --wait 0 fails at once)" in text
    assert "--wait DURATION" in text


SLOW_OPENING_APP = """
import anyio
from pathlib import Path
from rehydrate import Scheduler
from rehydrate.stores import MemoryStore

class SlowToOpen(MemoryStore):
    async def open(self):
        Path("opening").touch()
        await anyio.sleep(1.5)
        await super().open()

scheduler = Scheduler(SlowToOpen())

@scheduler.handler("jobs")
async def handle(element):
    pass
"""


def test_a_signal_while_starting_is_not_forgotten(tmp_path: Path) -> None:
    """SIGTERM while the store opens: the worker stops once started, rather than serve on."""
    (tmp_path / "slow_app.py").write_text(SLOW_OPENING_APP)
    worker = start(tmp_path, "slow_app:scheduler")
    wait_for((tmp_path / "opening").exists, worker, "the store to be opening")
    worker.send_signal(signal.SIGTERM)
    try:
        code, logs = finish(worker, timeout=15)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise AssertionError("the worker forgot the SIGTERM it got while starting") from None
    assert code == 0
    assert [e["event"] for e in logs if e["level"] == "info"] == [
        "stopping",
        "worker ready",
        "worker stopped",
    ]


def test_a_child_whose_supervisor_died_before_it_started_exits(tmp_path: Path) -> None:
    """The race PR_SET_PDEATHSIG leaves: the parent is no longer the supervisor it was started by."""
    write_plain_app(tmp_path)
    watch_read, watch_write = os.pipe()
    status_read, status_write = os.pipe()
    not_the_parent = 1
    child = subprocess.Popen(
        [sys.executable, "-m", "rehydrate", "--log-format", "json", "worker", "papp:scheduler"],
        cwd=tmp_path,
        env=environment(
            {
                "REHYDRATE_STORE": f"sqlite:///{tmp_path / 'w.db'}",
                "_REHYDRATE_SUPERVISOR": f"{not_the_parent}:{watch_read}:{status_write}",
            }
        ),
        pass_fds=(watch_read, status_write),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for fd in (watch_read, status_write):
        os.close(fd)
    try:
        code, logs = finish(child, timeout=20)
    finally:
        os.close(watch_write)
        if child.poll() is None:
            child.kill()
            child.wait()
    with os.fdopen(status_read, "rb") as status:
        assert status.read() == b""  # never served, never said anything
    assert code == 0
    assert logs == []
    assert not (tmp_path / "w.db").exists()


FROZEN_APP = """
import gc
from rehydrate import Scheduler

scheduler = Scheduler("memory://")
LOG = {log!r}

@scheduler.handler("jobs")
async def handle(element):
    with open(LOG, "a") as out:
        out.write(f"{{gc.get_freeze_count()}}\\n")
"""


def test_the_worker_freezes_what_start_up_left_before_its_first_claim(tmp_path: Path) -> None:
    """Start-up's objects (modules, the event loop's, the store's client) are collected once and
    frozen before serving: the collector never walks them again, so no full collection stops the
    loop a few seconds into serving (a pause of tens of milliseconds in a Redis worker on trio)."""
    log = tmp_path / "frozen.log"
    (tmp_path / "fapp.py").write_text(textwrap.dedent(FROZEN_APP.format(log=str(log))))
    url = f"sqlite:///{tmp_path / 'f.db'}"
    push(url, 1, {})
    worker = start(tmp_path, "fapp:scheduler", "--store", url)
    try:
        wait_for(lambda: bool(complete_lines(log)), worker, "a delivery")
    finally:
        worker.send_signal(signal.SIGTERM)
    code, _ = finish(worker)
    assert code == 0
    (frozen,) = complete_lines(log)
    assert int(frozen) > 10_000  # the imports and the open store, at least


# -- --wait: a store that is not up yet ------------------------------------------------------------


def _free_port() -> int:
    """A loopback port where nothing listens (yet)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_wait_0_fails_at_once_on_a_store_nobody_serves(
    app: Callable[..., Path], tmp_path: Path, backend: str
) -> None:
    app()
    url = f"redis://127.0.0.1:{_free_port()}/0"
    worker = start(tmp_path, "wapp:scheduler", "--store", url, "--wait", "0", "--backend", backend)
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 1
    (line,) = err.strip().splitlines()  # one line: the error, no warning about waiting
    assert "is unavailable" in json.loads(line)["event"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_worker_waits_for_a_redis_that_comes_up_later(
    app: Callable[..., Path], tmp_path: Path, backend: str
) -> None:
    """Started before its Redis (a compose file, a rollout): it says so once per attempt, with
    backoff, and serves once the server is up, rather than exit and be restarted into a loop."""
    from tests.redis_server import RedisServer

    log = app(grace=1)
    port = _free_port()
    url = f"redis://127.0.0.1:{port}/0?prefix=wait-{os.urandom(4).hex()}"
    err_path = tmp_path / "worker.err"
    with err_path.open("w") as err_out:
        worker = start(
            tmp_path, "wapp:scheduler", "--store", url, "--wait", "30s", "--backend", backend, stderr=err_out
        )
    try:

        def warnings() -> list[dict[str, Any]]:
            logs = _json_lines(err_path.read_text())
            return [e for e in logs if e["event"] == "store unavailable; retrying"]

        wait_for(lambda: len(warnings()) >= 2, worker, "two attempts")
        with RedisServer(port=port):
            push(url, 1, {})
            wait_for(lambda: len(entries(log)) == 1, worker, "a delivery")
            worker.send_signal(signal.SIGTERM)
            worker.communicate(timeout=20)
            code = worker.returncode
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    logs = _json_lines(err_path.read_text())
    assert code == 0, err_path.read_text()
    assert all(line.startswith("{") for line in err_path.read_text().splitlines())
    waited = [e for e in logs if e["event"] == "store unavailable; retrying"]
    assert [e["attempt"] for e in waited] == list(range(1, len(waited) + 1))  # one line per attempt
    assert all(e["level"] == "warning" and "is unavailable" in e["error"] for e in waited)
    assert all(0 < e["retry_in"] <= 5 and e["gives_up_in"] <= 30 for e in waited)
    assert [e["retry_in"] for e in waited[:3]] == sorted(e["retry_in"] for e in waited[:3])  # backoff
    events = [e["event"] for e in logs]
    assert events.index("store available") < events.index("worker ready") < events.index("worker stopped")


def test_waiting_cannot_fix_a_refused_password_an_unknown_database_or_scheme(
    app: Callable[..., Path], tmp_path: Path
) -> None:
    """The server answered and said no (or the URL names no store): exit 1 at once, in one line,
    however long --wait is."""
    from tests.redis_server import RedisServer

    app()
    with RedisServer(extra_args=("--requirepass", "right")) as server:
        urls = {
            f"redis://:wrong@127.0.0.1:{server.port}/0": "refused this client",
            f"redis://:right@127.0.0.1:{server.port}/99": "DB index is out of range",
            "redis-nope://127.0.0.1/0": "unsupported store URL",
        }
        workers = {url: start(tmp_path, "wapp:scheduler", "--store", url, "--wait", "1h") for url in urls}
        for url, worker in workers.items():
            _, err = worker.communicate(timeout=30)  # well before an hour
            assert worker.returncode == 1, err
            (line,) = err.strip().splitlines()
            assert urls[url] in json.loads(line)["event"]
            assert "wrong" not in err  # the password stays out of the logs


def test_a_worker_gives_up_waiting_after_wait(app: Callable[..., Path], tmp_path: Path) -> None:
    app()
    url = f"redis://127.0.0.1:{_free_port()}/0"
    started = time.monotonic()
    worker = start(tmp_path, "wapp:scheduler", "--store", url, "--wait", "1s")
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 1
    *warnings, last = _json_lines(err)
    assert warnings
    assert all(e["event"] == "store unavailable; retrying" for e in warnings)
    assert "still unavailable after waiting 1.0s: --wait sets how long" in last["event"]
    assert time.monotonic() - started > 1.0


def test_a_signal_ends_the_wait_for_the_store(app: Callable[..., Path], tmp_path: Path) -> None:
    app()
    url = f"redis://127.0.0.1:{_free_port()}/0"
    err_path = tmp_path / "worker.err"
    with err_path.open("w") as err_out:
        worker = start(tmp_path, "wapp:scheduler", "--store", url, "--wait", "1h", stderr=err_out)
    try:
        wait_for(lambda: "store unavailable" in err_path.read_text(), worker, "a first attempt")
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=10)
        code = worker.returncode
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert code == 0
    assert _json_lines(err_path.read_text())[-1]["event"] == "stopped before the store could be opened"


def test_a_malformed_wait_is_one_line_and_exit_1(tmp_path: Path) -> None:
    shown = cli(tmp_path, "worker", "wapp:scheduler", "--wait", "soon", env={})
    assert shown.returncode == 1
    (line,) = shown.stderr.strip().splitlines()
    assert line.startswith("rehydrate: error: --wait: invalid duration 'soon'")
