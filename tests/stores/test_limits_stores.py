"""Limits at the scheduler level on memory, SQLite and PostgreSQL: schedulers on their own
store objects (their own connections) sharing one database, in real time with short leases and
windows (the rules with a FakeClock, step by step: tests/test_limits.py; each store's steps:
the contract suite's ``LimitsContract``).

What is checked holds whatever the timing: never more than n starts in a window, and a parked
element using no attempt (never over N, a saturated key holding up no other and a dead holder's
slot coming back are checked on every harness, Redis included, in test_limits_schedulers.py).
The tests wait on what they count (with a deadline), never a fixed sleep.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from rehydrate import Admin, Concurrency, Rate, Retry, Scheduler, current_delivery
from rehydrate.abc import Store
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
