"""The blocking facade, from plain (non-async) test code, on both backends."""

from __future__ import annotations

import inspect
import threading
from typing import Any

import pytest

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
    with pytest.raises(SchedulerNotRunningError):
        admin.names()
    public = {
        name for name, _ in inspect.getmembers(Admin, inspect.iscoroutinefunction) if not name.startswith("_")
    }
    for name in public:
        twin = getattr(SyncAdmin, name, None)
        assert twin is not None, f"SyncAdmin lacks {name}"
        assert inspect.signature(twin) == inspect.signature(getattr(Admin, name)), name
