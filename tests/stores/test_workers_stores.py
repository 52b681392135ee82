"""Who is listed as a worker, on every store of the contract suite and both backends.

``rehydrate workers`` and the dashboard list the processes that deliver work, from their
heartbeats. A process that only defers (a web app, a script) is none of them: a scheduler with no
handlers, or one run with ``Scheduler.producer()``, sends no heartbeat; one serving handlers
registers before ``async with`` returns, and deregisters when it stops.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rehydrate import Every, Scheduler

from .harnesses import Harness

pytestmark = pytest.mark.anyio


async def test_a_scheduler_without_handlers_is_no_worker(harness: Harness) -> None:
    store = harness.store
    async with Scheduler(store) as producer:
        await producer.defer("emails", {"to": "a@example.com"}, id="e1")
        await anyio.wait_all_tasks_blocked()
        assert await store.workers() == []
        assert await store.size("emails") == 1
    assert await store.workers() == []


async def test_a_scheduler_with_handlers_registers_and_deregisters(harness: Harness) -> None:
    store = harness.store
    scheduler = Scheduler(store, grace=0)

    @scheduler.handler("emails", concurrency=3)
    async def send(element: Any) -> None: ...

    async with scheduler:
        (worker,) = await store.workers()
        assert (worker.id, worker.alive) == (scheduler.worker_id, True)
        assert worker.data["handlers"]["emails"]["concurrency"] == 3
    assert await store.workers() == []


async def test_producer_mode_serves_nothing_and_is_no_worker(harness: Harness) -> None:
    """The module that declares the handlers, run by a web process with ``producer()``: its
    defers are stored for the workers, its handlers are not run, its declared schedules are left
    to the workers, and it is not listed; the same scheduler run as usual serves them."""
    store = harness.store
    scheduler = Scheduler(store, grace=0)
    sent: list[Any] = []
    got = anyio.Event()

    @scheduler.handler("emails")
    async def send(element: Any) -> None:
        sent.append(element)
        got.set()

    @scheduler.handler("digest", schedule=Every(86400))
    async def digest(element: None) -> None: ...

    async with scheduler.producer() as producer:
        assert producer is scheduler
        await scheduler.defer("emails", "due now", id="e1")
        await anyio.wait_all_tasks_blocked()
        assert await store.workers() == []
        assert await store.size("emails") == 1  # not delivered here: no handler runs
        assert await store.look("digest", "digest") is None  # not declared from here
        assert scheduler.stats().delivered == 0
    assert sent == []

    async with scheduler:  # a worker: the same scheduler serves what the producer deferred
        assert [w.id for w in await store.workers()] == [scheduler.worker_id]
        with anyio.fail_after(10):
            await got.wait()
        assert await store.look("digest", "digest") is not None
    assert sent == ["due now"]
    assert await store.workers() == []
