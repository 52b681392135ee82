"""Limits at the scheduler level on every store of the contract suite: what ``tests/test_limits.py``
checks on a memory store, here through each store's own steps (Redis's scripts, SQLite's and
PostgreSQL's transactions), wakes (a reschedule, then the store's notification) and clocks.

Several schedulers share one backend through store objects of their own where the harness has
them (``Harness.twin``), as processes on several machines would. A store on a server's clock runs
on that clock, unpinned (its scripts and its twins' read the same ``TIME``): the waits below are
for events in other processes' terms, bounded by ``fail_after``, with short naps between looks
(the stores work over sockets and in threads, which no event here tells of).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pytest

from rehydrate import Concurrency, Scheduler
from rehydrate._clock import ServerClock
from rehydrate._limits import spec_of
from rehydrate.abc import Store
from rehydrate.testing import FakeClock

from .harnesses import Harness

pytestmark = pytest.mark.anyio

#: How long any one awaited event may take, real time.
PATIENCE = 15.0


def real_time(store: Store) -> None:
    """Let a store on a server's clock run on it (the harness pins it): its twins do."""
    clock = store.clock
    if isinstance(clock, ServerClock):
        clock.pinned_us = None
        clock.skew_us = 0


async def until(check: Callable[[], bool]) -> None:
    with anyio.fail_after(PATIENCE):
        while True:
            if check():
                return
            await anyio.sleep(0.01)


@asynccontextmanager
async def stores(harness: Harness, n: int) -> AsyncIterator[list[Store]]:
    """``n`` store objects on the harness's backend: the harness's, then twins (opened here), or
    the harness's alone again where a twin would not share its data (memory)."""
    real_time(harness.store)
    async with AsyncExitStack() as stack:
        out = [harness.store]
        for _ in range(n - 1):
            if harness.twin is not None and harness.shared:
                out.append(await stack.enter_async_context(harness.twin()))
            else:
                out.append(harness.store)
        yield out


class Running:
    """Counts the handlers running at once, per key, and the most ever seen."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.done: list[Any] = []
        self.gates: dict[str, anyio.Event] = {}

    def serve(self, scheduler: Scheduler, limits: list[Any], **options: Any) -> None:
        @scheduler.handler("jobs", limits=limits, limit_key=lambda element: element["k"], **options)
        async def handle(element: Any) -> None:
            key = element["k"]
            self.now[key] = self.now.get(key, 0) + 1
            self.most[key] = max(self.most.get(key, 0), self.now[key])
            gate = self.gates.setdefault(key, anyio.Event())
            await gate.wait()
            self.now[key] -= 1
            self.done.append(element)


def ran_and_running(running: Running, done: int, now: int) -> bool:
    return len(running.done) == done and running.now["a"] == now


async def test_never_over_n_across_schedulers_and_a_release_wakes_the_next(harness: Harness) -> None:
    """Three schedulers, each on a store object of its own, ``Concurrency(2)`` on key "a": never
    three at once; each release wakes the next waiter at once (a lease is 60 s: it is the wake,
    through the store's notification, that brings it), and the key is deleted once idle."""
    running = Running()
    async with stores(harness, 3) as three:
        schedulers = [Scheduler(store=s, grace=0.1, heartbeat=None) for s in three]
        for scheduler in schedulers:
            running.serve(scheduler, [Concurrency(2)], lease=60)
        async with schedulers[0], schedulers[1], schedulers[2]:
            for i in range(10):
                await schedulers[0].defer("jobs", {"k": "a", "i": i}, delay=0)

            async def parked() -> bool:
                infos = await harness.store.limits("jobs")
                return len(infos) == 1 and len(infos[0].holders) == 2 and infos[0].waiting == 8

            with anyio.fail_after(PATIENCE):
                while True:
                    if running.now.get("a") == 2 and await parked():
                        break
                    await anyio.sleep(0.01)
            for n in range(1, 6):  # each gate lets both holders finish, and two more start
                running.gates.pop("a").set()
                await until(partial(ran_and_running, running, 2 * n, min(2, 10 - 2 * n)))
            assert running.most["a"] == 2
            assert sorted(e["i"] for e in running.done) == list(range(10))
            for scheduler in schedulers:
                assert scheduler.stats("jobs").retried == 0
        assert await harness.store.limits() == []  # an idle key is deleted
        assert await harness.store.size("jobs") == 0


async def test_a_saturated_key_does_not_hold_up_another(harness: Harness) -> None:
    """200 elements of a key with ``Concurrency(1)`` due first, then 20 of other keys: those run
    at once, while the busy key runs one at a time."""
    running = Running()
    async with stores(harness, 1) as (store,):
        scheduler = Scheduler(store=store, grace=0.1, heartbeat=None)
        running.serve(scheduler, [Concurrency(1)], concurrency=50, lease=60)
        async with scheduler:
            await store.push_many("jobs", [({"k": "busy", "i": i}, 0, f"b{i}") for i in range(200)])
            await until(lambda: running.now.get("busy") == 1)
            await store.push_many("jobs", [({"k": f"other{i}", "i": i}, 0, f"o{i}") for i in range(20)])
            await until(lambda: all(running.now.get(f"other{i}") == 1 for i in range(20)))
            assert running.now["busy"] == 1
            for i in range(20):
                running.gates.pop(f"other{i}").set()
            await until(lambda: len(running.done) == 20)
            running.gates.pop("busy").set()
            await until(lambda: running.now.get("busy") == 1 and len(running.done) == 21)
            assert running.most["busy"] == 1


async def test_a_dead_holder_frees_its_slot_when_its_lease_ends_and_wakes_a_waiter(harness: Harness) -> None:
    """A slot held by a process that died (taken, never renewed nor released): the waiting element
    runs when that lease ends, and not before; no release wakes it, only the time the store filed
    it at. On a fake clock, exactly then; on a server's clock, within a moment of it."""
    # On a server's clock the lease must outlast parking the element under a loaded machine (the
    # check that it was parked, not attempted, runs after that).
    lease = 10.0 if isinstance(harness.store.clock, FakeClock) else 3.0
    ran: list[float] = []
    async with stores(harness, 1) as (store,):
        clock = store.clock
        spec = spec_of([Concurrency(1)], lease)
        assert (await store.limit_acquire("jobs", "*", "dead-process", spec)).granted
        start = clock()
        scheduler = Scheduler(store=store, grace=0.1, heartbeat=None)

        @scheduler.handler("jobs", limits=[Concurrency(1)], lease=lease)
        async def handle(element: Any) -> None:
            ran.append(clock())

        async with scheduler:
            await scheduler.defer("jobs", "x", delay=0)
            # Parked: a waiter of the key, and its element handed back unrun, not an attempt. The
            # two are separate store steps: the waiter may show before the hand-back lands.
            with anyio.fail_after(PATIENCE):
                while True:
                    if [i.waiting for i in await store.limits("jobs")] == [1]:
                        info = await store.info("jobs", (await store.ids("jobs"))[0])
                        if info is not None and not info.claimed:
                            break
                    await anyio.sleep(0.01)
            assert info.attempt == 0
            if isinstance(clock, FakeClock):
                clock.advance(lease - 0.1)
                await anyio.sleep(0.2)
                assert ran == []
                clock.advance(0.1)
                await until(lambda: bool(ran))
                assert ran == [pytest.approx(start + lease)]
            else:
                await until(lambda: bool(ran))
                assert start + lease <= ran[0] < start + lease + 1.0
    assert len(ran) == 1
