"""The blocking facade, from plain (non-async) test code, on both backends."""

from __future__ import annotations

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
