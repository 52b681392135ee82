"""Limits at the scheduler level on memory, SQLite and PostgreSQL: schedulers on their own
store objects (their own connections) sharing one database, in real time with short leases and
windows (the rules with a FakeClock, step by step: tests/test_limits.py; each store's steps:
the contract suite's ``LimitsContract``).

What is checked holds whatever the timing: never over N at once, never more than n starts in a
window, a saturated key holding up no other, a parked element using no attempt, and a dead
holder's slot coming back when its lease runs out. The tests wait on what they count (with a
deadline), never a fixed sleep.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from rehydrate import Admin, Concurrency, Rate, Retry, Scheduler, current_delivery
from rehydrate.abc import LimitSpec, Store
from rehydrate.stores import MemoryStore, PostgresStore, SQLiteStore
from tests.pg_server import drop_tables, shared_server_url

pytestmark = pytest.mark.anyio

#: How far the start a handler stamps may trail its grant (the grant's wakes are filed first,
#: on a loaded machine): the rate check allows it, no more.
JITTER = 0.15


class Shared:
    """The test's database: ``store``, opened, and :meth:`another` store object on it."""

    def __init__(self, store: Store, new: Callable[[], Store] | None) -> None:
        self.store, self._new = store, new

    async def another(self, stack: AsyncExitStack) -> Store:
        """Another store object (its own connections) on the same data, opened for ``stack``
        (memory: the same one, as processes cannot share it)."""
        if self._new is None:
            return self.store
        return await stack.enter_async_context(self._new())


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def shared(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Shared]:
    if request.param == "memory":
        async with MemoryStore() as memory:
            yield Shared(memory, None)
        return
    if request.param == "sqlite":

        def new() -> Store:
            return SQLiteStore(tmp_path / "limits.db")

    else:
        url = shared_server_url(request.config)
        table = f"rhlim_{uuid.uuid4().hex[:12]}"

        def new() -> Store:
            return PostgresStore.from_url(url, table=table)

    async with new() as store:
        try:
            yield Shared(store, new)
        finally:
            if isinstance(store, PostgresStore):
                await drop_tables(store)


async def until(predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    """Wait for ``predicate`` (what the handlers count) within ``timeout``: a nap between looks,
    as the stores work in threads or over sockets, which no event here tells of."""
    with anyio.fail_after(timeout):
        while True:
            if predicate():
                return
            await anyio.sleep(0.01)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    now = most = 0
    for _, step in events:  # (an end before a start at the same instant: -1 sorts first)
        now += step
        most = max(most, now)
    return most


async def test_never_over_n_across_schedulers_sharing_the_store(shared: Shared) -> None:
    spans: list[tuple[float, float]] = []
    ran: list[int] = []
    async with AsyncExitStack() as stack:
        schedulers = []
        for i in range(3):
            store = shared.store if i == 0 else await shared.another(stack)
            scheduler = Scheduler(store, heartbeat=None, grace=1)

            @scheduler.handler("jobs", limits=[Concurrency(2)], lease=5)
            async def job(element: int) -> None:
                start = time.monotonic()
                await anyio.sleep(0.02)
                spans.append((start, time.monotonic()))
                ran.append(element)

            schedulers.append(await stack.enter_async_context(scheduler))
        for i in range(12):
            await schedulers[0].defer("jobs", i, delay=0)
        await until(lambda: len(ran) == 12)
        stats = [s.stats("jobs") for s in schedulers]
        for scheduler in schedulers:
            scheduler.stop()
    assert sorted(ran) == list(range(12))
    assert most_at_once(spans) <= 2
    assert sum(s.limit_granted for s in stats) == 12
    assert sum(s.retried + s.dead_lettered for s in stats) == 0


async def test_a_rate_is_never_exceeded(shared: Shared) -> None:
    store = shared.store
    starts: list[float] = []
    scheduler = Scheduler(store, heartbeat=None, grace=1)

    @scheduler.handler("jobs", limits=[Rate(4, per=0.5)])
    async def job(element: int) -> None:
        starts.append(time.monotonic())

    async with scheduler:
        for i in range(10):
            await scheduler.defer("jobs", i, delay=0)
        await until(lambda: len(starts) == 10)
        scheduler.stop()
    starts.sort()
    for at in starts:  # no window of 0.5 s (less what a stamp may trail its grant) holds 5
        assert sum(at <= s < at + 0.5 - JITTER for s in starts) <= 4
    # Ten starts at four a window take three windows: the ninth is a window after the fifth.
    assert starts[8] - starts[0] >= 2 * 0.5 - JITTER


async def test_a_saturated_key_does_not_hold_up_another(shared: Shared) -> None:
    store = shared.store
    gate = anyio.Event()
    done: list[str] = []
    running: dict[str, int] = {}
    scheduler = Scheduler(store, heartbeat=None, grace=1)

    @scheduler.handler("jobs", limits=[Concurrency(1)], limit_key=lambda e: e["k"], concurrency=20)
    async def job(element: dict[str, Any]) -> None:
        key = element["k"]
        running[key] = running.get(key, 0) + 1
        assert running[key] == 1
        if key == "busy":
            await gate.wait()
        running[key] -= 1
        done.append(key)

    async with scheduler:
        for i in range(15):
            await scheduler.defer("jobs", {"k": "busy", "i": i}, delay=0)
        await until(lambda: running.get("busy") == 1)
        for i in range(10):
            await scheduler.defer("jobs", {"k": f"other{i}"}, delay=0)
        await until(lambda: len(done) == 10, timeout=5)  # all the others, the busy key still full
        assert "busy" not in done
        gate.set()
        await until(lambda: len(done) == 25)
        scheduler.stop()
    assert scheduler.stats("jobs").limit_parked >= 14  # the busy key's waited


async def test_a_parked_element_is_not_an_attempt(shared: Shared) -> None:
    store = shared.store
    gate = anyio.Event()
    attempts: list[int] = []
    scheduler = Scheduler(store, heartbeat=None, grace=1)

    @scheduler.handler("jobs", limits=[Concurrency(1)], retry=Retry(attempts=1), lease=5)
    async def job(element: int) -> None:
        attempts.append(current_delivery().attempt)
        await gate.wait()

    async with scheduler:
        for i in range(3):
            await scheduler.defer("jobs", i, delay=0, id=f"e{i}")
        waiting = 0

        async def read() -> None:
            nonlocal waiting
            found = await Admin(store).limits("jobs")
            waiting = found[0].waiting if found else 0

        with anyio.fail_after(15):
            while waiting < 2:
                await read()
                await anyio.sleep(0.01)
        assert len(attempts) == 1
        parked = [await store.info("jobs", f"e{i}") for i in range(3)]
        assert sorted((p.attempt, p.claimed) for p in parked if p is not None) == [
            (0, False),
            (0, False),
            (1, True),
        ]
        gate.set()
        await until(lambda: len(attempts) == 3)
        scheduler.stop()
    assert attempts == [1, 1, 1]  # each ran on its first attempt
    assert scheduler.stats("jobs").dead_lettered == 0


async def test_a_dead_holders_slot_comes_back_when_its_lease_ends(shared: Shared) -> None:
    """A slot taken and never renewed nor released (its process died): the waiting element runs
    once that lease ends, not before, and soon after (a waiter is filed at the earliest chance)."""
    store = shared.store
    spec = LimitSpec(concurrency=1, lease=1.0)
    t0 = store.clock()
    assert (await store.limit_acquire("jobs", "*", "dead-process", spec)).granted
    ran: list[float] = []
    scheduler = Scheduler(store, heartbeat=None, grace=1)

    @scheduler.handler("jobs", limits=[Concurrency(1)], lease=1)
    async def job(element: str) -> None:
        ran.append(store.clock())

    async with scheduler:
        await scheduler.defer("jobs", "x", delay=0)
        await until(lambda: bool(ran), timeout=10)
        scheduler.stop()
    assert t0 + 1.0 - 0.01 <= ran[0] <= t0 + 1.0 + 1.5
    assert scheduler.stats("jobs").limit_parked >= 1
