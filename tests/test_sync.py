"""The blocking facade, from plain (non-async) test code, on both backends."""

from __future__ import annotations

import inspect
import secrets
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import rehydrate
from rehydrate import InvalidArgumentError, Scheduler, SchedulerNotRunningError, SyncScheduler


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_defer_from_blocking_code(backend: Any) -> None:
    done = threading.Event()
    got: list[Any] = []
    scheduler = Scheduler(grace=1)

    @scheduler.handler("emails")
    async def send(element: Any) -> None:
        got.append(element)
        done.set()

    with SyncScheduler(scheduler, backend=backend) as s:
        rid = s.defer("emails", {"to": "a@example.com"}, delay=0.02)
        later = s.defer("emails", "never", delay=60)
        assert s.cancel("emails", later) == "never"
        assert done.wait(5)
        assert isinstance(rid, str)
        stats = s.stats()
        assert stats.delivered == 1
        assert s.dead_letters("emails") == []
        assert s.requeue("emails") == []
    assert got == [{"to": "a@example.com"}]


def test_errors_cross_the_portal() -> None:
    with SyncScheduler() as s, pytest.raises(InvalidArgumentError):
        s.defer("emails", "x", delay=-1)


def test_needs_a_with_block() -> None:
    with pytest.raises(SchedulerNotRunningError):
        SyncScheduler().defer("emails", "x")
    with pytest.raises(InvalidArgumentError):
        SyncScheduler(backend="curio")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        SyncScheduler("memory://")  # type: ignore[arg-type]


#: Async methods the facade does not mirror, and why.
ASYNC_ONLY = {
    "run": "the facade runs the scheduler itself, in its with block",
}


def test_the_facade_follows_the_async_api() -> None:
    """Every public async method of Scheduler has a blocking twin with the same signature."""
    methods = {
        name: member
        for name, member in inspect.getmembers(Scheduler, inspect.iscoroutinefunction)
        if not name.startswith("_") and name not in ASYNC_ONLY
    }
    assert {"defer", "cancel", "dead_letters", "requeue"} <= set(methods)
    for name, method in methods.items():
        twin = getattr(SyncScheduler, name, None)
        assert twin is not None, f"SyncScheduler lacks {name}"
        assert inspect.signature(twin) == inspect.signature(method), name
        assert not inspect.iscoroutinefunction(twin), name
    assert inspect.signature(SyncScheduler.stats).return_annotation == "Stats"


def test_defer_replace_through_the_facade() -> None:
    scheduler = Scheduler(grace=0)
    with SyncScheduler(scheduler) as s:
        s.defer("docs", "a", id="d", delay=60)
        assert s.defer("docs", "b", id="d", delay=60, replace=True) == "d"
        assert s.cancel("docs", "d") == "b"


def test_stats_takes_a_name_as_the_async_one_does() -> None:
    assert list(inspect.signature(SyncScheduler.stats).parameters) == ["self", "name"]
    scheduler = Scheduler(grace=0)
    done = threading.Event()

    @scheduler.handler("emails")
    def send(element: Any) -> None:
        done.set()

    with SyncScheduler(scheduler) as s:
        s.defer("emails", "x")
        assert done.wait(5)
        deadline = threading.Event()
        while s.stats("emails").acked < 1 and not deadline.wait(0.01):
            pass  # the ack goes out in the loop thread just after the handler returns
        assert s.stats("emails").delivered == s.stats().delivered == 1
        assert s.stats("other").delivered == 0


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_long_lived_start_and_close(backend: Any) -> None:
    """A web app's form: started once, called from many request threads at once, closed at exit
    (gracefully, idempotently); started again after, it runs anew."""
    scheduler = Scheduler(grace=1)
    got: list[int] = []
    all_in = threading.Event()

    @scheduler.handler("jobs")
    async def job(element: int) -> None:
        got.append(element)
        if len(got) == 40:
            all_in.set()

    tasks = SyncScheduler(scheduler, backend=backend)

    def running() -> bool:  # (read anew each time: mypy would take it as fixed after an assert)
        return tasks.running

    assert not running()
    assert tasks.start() is tasks
    assert running()
    with pytest.raises(rehydrate.RehydrateError, match="already started"):
        tasks.start()
    threads = [
        threading.Thread(target=lambda i=i: [tasks.defer("jobs", i * 10 + n) for n in range(10)])
        for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all_in.wait(5)
    assert sorted(got) == list(range(40))
    tasks.close()
    tasks.close()
    assert not running()
    with pytest.raises(SchedulerNotRunningError, match=r"\.start\(\)"):
        tasks.defer("jobs", 99)
    with tasks:
        assert running()
    assert not running()


def _store_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "redis":
        from tests.redis_server import shared_server_url

        return f"{shared_server_url(request.config)}?prefix=sync-{secrets.token_hex(4)}"
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_producer_facade_defers_for_the_workers_and_is_no_worker(
    kind: str, backend: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The web app's facade on the handlers' module (``producer=True``), and one on a scheduler
    without handlers: neither runs a handler nor shows in the store's workers; a worker on the
    same store delivers what they deferred, and is listed."""
    url = _store_url(kind, tmp_path, request)
    got: list[Any] = []
    both = threading.Event()

    def tasks_module() -> Scheduler:
        scheduler = Scheduler(url, grace=1)

        @scheduler.handler("emails")
        def send(element: Any) -> None:
            got.append(element)
            if len(got) == 2:
                both.set()

        return scheduler

    web = SyncScheduler(tasks_module(), backend=backend, producer=True).start()
    bare = SyncScheduler(Scheduler(url), backend=backend).start()
    try:
        web.defer("emails", "from the web app", id="e1")
        bare.defer("emails", "from a script", id="e2")
        assert web.portal.call(web.scheduler.store.workers) == []
        assert bare.portal.call(bare.scheduler.store.workers) == []
        assert web.portal.call(web.scheduler.store.size, "emails") == 2
        assert got == []
        with SyncScheduler(tasks_module(), backend=backend) as worker:
            assert both.wait(10)
            workers = web.portal.call(web.scheduler.store.workers)
            assert [w.id for w in workers] == [worker.scheduler.worker_id]
    finally:
        web.close()
        bare.close()
    assert sorted(got) == ["from a script", "from the web app"]


SCRIPT_NEVER_CLOSED = """
from rehydrate import Scheduler, SyncScheduler
tasks = SyncScheduler(Scheduler({url!r}, grace=5)).start()
tasks.defer("emails", "x", delay=3600, id="e1")
print("deferred", flush=True)
"""


def test_a_facade_never_closed_is_closed_at_exit(tmp_path: Path) -> None:
    """Its loop thread would hold the interpreter at exit for ever: exit closes it instead,
    and the store keeps what was deferred."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", SCRIPT_NEVER_CLOSED.format(url=url)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "deferred\n", "")
    with SyncScheduler(Scheduler(url)) as s:
        assert s.portal.call(s.scheduler.store.size, "emails") == 1


SCRIPT_FORKED = """
import os, sys
from rehydrate import Scheduler, SchedulerNotRunningError, SyncScheduler
url = {url!r}
tasks = SyncScheduler(Scheduler(url)).start()   # a pre-forking server's --preload
pid = os.fork()
if pid == 0:
    try:
        tasks.defer("emails", "from the child")
    except SchedulerNotRunningError as exc:
        print("child:", exc, flush=True)
    tasks.close()  # the parent's thread: not the child's to stop
    tasks = SyncScheduler(Scheduler(url)).start()  # one of its own, after the fork
    tasks.defer("emails", "from the child", id="child")
    tasks.close()
    os._exit(0)
_, status = os.waitpid(pid, 0)
tasks.defer("emails", "from the parent", id="parent")
print("parent: child exited", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_forked_child_is_told_to_start_its_own(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT_FORKED.format(url=url)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    child, parent = done.stdout.splitlines()
    assert child.startswith("child: this SyncScheduler was started in process ")
    assert "start one in each process, after the fork" in child
    assert parent == "parent: child exited 0"
    with SyncScheduler(Scheduler(url)) as s:
        assert sorted(s.portal.call(s.scheduler.store.ids, "emails")) == ["child", "parent"]


def test_the_reference_documents_every_method() -> None:
    """The API reference is read from the source, where the twins are ``_blocking(...)``
    assignments: the site's griffe extension shows each as the method it is, with the async
    one's parameters and docstring (before it, the reference listed ``stats`` alone)."""
    import griffe

    root = Path(__file__).resolve().parent.parent
    extensions = griffe.load_extensions(f"{root / 'tools' / 'griffe_blocking_twins.py'}:BlockingTwins")
    package = griffe.load("rehydrate", search_paths=[str(root)], extensions=extensions)
    documented = package["_sync.SyncScheduler"]
    public = {
        name
        for name, member in inspect.getmembers(SyncScheduler)
        if not name.startswith("_") and callable(member)
    }
    assert public >= {"defer", "schedule", "resume", "start", "close", "stats"}
    for name in public:
        member = documented.members[name]
        assert isinstance(member, griffe.Function), name
        assert member.docstring is not None, name
        if name in ASYNC_ONLY or not inspect.iscoroutinefunction(getattr(Scheduler, name, None)):
            continue
        original = package["_scheduler.Scheduler"].members[name]
        assert [p.name for p in member.parameters] == [p.name for p in original.parameters], name
        assert member.docstring.value.startswith(f"`Scheduler.{name}`, blocking"), name


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sync_admin_from_blocking_code(backend: Any, tmp_path: Any) -> None:
    """SyncAdmin opens the store in its own loop for the with block, and mirrors Admin."""
    from rehydrate import Admin, Every, SyncAdmin

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with SyncScheduler(Scheduler(url, heartbeat=None), backend=backend) as s:
        s.schedule("reports", Every(3600), id="daily")
    with SyncAdmin(url, backend=backend) as admin:
        assert admin.names() == ["reports"]
        assert admin.pause("reports", "daily") == "paused"
        assert admin.pause("reports", "daily") == "unchanged"
        assert admin.requeue("reports", ["nope"]) == []
        admin.schedule("reports", Every(60), id="hourly")
        assert [info.id for info in admin.schedules("reports")] == ["hourly", "daily"]
    with pytest.raises(SchedulerNotRunningError):
        admin.names()
    public = {
        name for name, _ in inspect.getmembers(Admin, inspect.iscoroutinefunction) if not name.startswith("_")
    }
    for name in public:
        twin = getattr(SyncAdmin, name, None)
        assert twin is not None, f"SyncAdmin lacks {name}"
        assert inspect.signature(twin) == inspect.signature(getattr(Admin, name)), name
