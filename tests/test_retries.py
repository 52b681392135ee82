"""Delayed retries of failed handlers, coalesced into ``reschedule_many`` (rehydrate/_retries.py).

On the memory store with a FakeClock; a store subclass counts (and, where a test needs it, holds
or fails) the real store's calls. The store side of ``reschedule_many`` is in the contract suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from rehydrate import Retry, Scheduler, StoreUnavailableError
from rehydrate._core._validate import Seconds
from rehydrate._retries import Rescheduler
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock

pytestmark = pytest.mark.anyio


class CountingStore(MemoryStore):
    """A memory store that counts its reschedule calls, and can hold or fail the batched ones."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.single = 0
        self.batches: list[int] = []
        self.gate: anyio.Event | None = None
        self.fail: BaseException | None = None

    async def reschedule(
        self, name: str, id: str, *, ttl: Seconds, attempt: int | None = None, token: int | None = None
    ) -> bool:
        self.single += 1
        return await super().reschedule(name, id, ttl=ttl, attempt=attempt, token=token)

    async def reschedule_many(self, name: str, items: Iterable[tuple[str, int, Seconds]]) -> list[bool]:
        batch = list(items)
        self.batches.append(len(batch))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return await super().reschedule_many(name, batch)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(clock: FakeClock) -> AsyncIterator[CountingStore]:
    async with CountingStore(clock) as store:
        yield store


async def test_handlers_failing_at_once_are_retried_in_one_call(
    store: CountingStore, clock: FakeClock
) -> None:
    scheduler = Scheduler(store, grace=0)
    gate = anyio.Event()
    attempts: dict[int, list[int]] = {}

    @scheduler.handler("calls", concurrency=500, batch=500, retry=Retry(attempts=3, delay=7.0))
    async def call(element: int) -> None:
        from rehydrate import current_delivery

        attempts.setdefault(element, []).append(current_delivery().attempt)
        if current_delivery().attempt == 1:
            await gate.wait()  # the downstream service is down: every call fails together
            raise ConnectionError("downstream is down")

    async with scheduler:
        await store.push_many("calls", [(i, 0, f"c{i}") for i in range(300)])
        await wait_all_tasks_blocked()
        assert len(attempts) == 300
        gate.set()
        await wait_all_tasks_blocked()
        assert scheduler.stats("calls").retried == 300
        # The first failure may go alone; everything that failed meanwhile goes in one batch.
        assert sum(store.batches) == 300
        assert len(store.batches) <= 2
        assert store.single == 0
        for i in range(300):
            info = await store.info("calls", f"c{i}")
            assert info is not None
            assert (info.claimed, info.attempt) == (False, 1)
            assert info.ttl == 7.0
        clock.advance(10)
        await wait_all_tasks_blocked()
        assert all(runs == [1, 2] for runs in attempts.values())
        assert await store.size("calls") == 0
        scheduler.stop()


async def test_an_id_claimed_twice_is_retried_once_per_token(store: CountingStore, clock: FakeClock) -> None:
    await store.push("n", "e", ttl=0, id="a")
    (stale,) = await store.claim("n", lease=1)
    clock.advance(2)
    (fresh,) = await store.claim("n", lease=60)
    rescheduler = Rescheduler(store, "n")
    results: dict[int, bool] = {}

    async def retry(token: int) -> None:
        results[token] = await rescheduler.reschedule("a", token, 5.0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(rescheduler.run)
        await wait_all_tasks_blocked()
        tg.start_soon(retry, stale.token)
        tg.start_soon(retry, fresh.token)
        await wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert results == {stale.token: False, fresh.token: True}
    assert store.batches == [1, 1]  # the same id never twice in one call
    info = await store.info("n", "a")
    assert info is not None
    assert (info.claimed, info.ttl) == (False, 5.0)


async def test_a_retry_cancelled_before_its_batch_goes_is_taken_out(store: CountingStore) -> None:
    await store.push_many("n", [("e", 0, "a"), ("e", 0, "b"), ("e", 0, "c")])
    a, b, c = sorted(await store.claim("n", lease=60), key=lambda claim: claim.id)
    rescheduler = Rescheduler(store, "n")
    store.gate = anyio.Event()
    results: dict[str, bool] = {}

    async def retry(id: str, token: int) -> None:
        results[id] = await rescheduler.reschedule(id, token, 1.0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(rescheduler.run)
        await wait_all_tasks_blocked()
        tg.start_soon(retry, "a", a.token)
        await wait_all_tasks_blocked()  # "a" is being sent, held at the gate
        with anyio.CancelScope() as cancelled:
            tg.start_soon(retry, "c", c.token)
            async with anyio.create_task_group() as inner:
                inner.start_soon(retry, "b", b.token)
                await wait_all_tasks_blocked()
                inner.cancel_scope.cancel()  # "b" gives up while it waits for the next batch
        assert not cancelled.cancel_called
        store.gate.set()
        await wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert results == {"a": True, "c": True}
    assert store.batches == [1, 1]
    info = await store.info("n", "b")
    assert info is not None
    assert info.claimed  # left to its lease: nothing filed for it


async def test_a_store_error_reaches_every_caller_of_the_batch(store: CountingStore) -> None:
    await store.push_many("n", [("e", 0, "a"), ("e", 0, "b")])
    a, b = sorted(await store.claim("n", lease=60), key=lambda claim: claim.id)
    rescheduler = Rescheduler(store, "n")
    store.fail = StoreUnavailableError("the store is down")
    errors: list[BaseException] = []

    async def retry(id: str, token: int) -> None:
        try:
            await rescheduler.reschedule(id, token, 1.0)
        except StoreUnavailableError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(rescheduler.run)
        await wait_all_tasks_blocked()
        tg.start_soon(retry, "a", a.token)
        tg.start_soon(retry, "b", b.token)
        await wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert [str(e) for e in errors] == ["the store is down"] * 2
    assert store.batches == [2]


async def test_once_stopped_each_caller_sends_its_own(store: CountingStore) -> None:
    await store.push_many("n", [("e", 0, "a"), ("e", 0, "b")])
    a, b = sorted(await store.claim("n", lease=60), key=lambda claim: claim.id)
    rescheduler = Rescheduler(store, "n")
    # Not running yet: direct.
    assert await rescheduler.reschedule("a", a.token, 1.0) is True
    async with anyio.create_task_group() as tg:
        tg.start_soon(rescheduler.run)
        await wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    # Stopped: direct again.
    assert await rescheduler.reschedule("b", b.token, 1.0) is True
    assert (store.single, store.batches) == (2, [])


async def test_a_failure_storm_through_the_scheduler_keeps_its_outcomes(
    store: CountingStore, clock: FakeClock
) -> None:
    """Retried, or lost when its lease had run out and another claim holds it: each counted."""
    scheduler = Scheduler(store, grace=0)
    gate = anyio.Event()

    @scheduler.handler("jobs", concurrency=50, lease=60, retry=Retry(attempts=2, delay=1.0))
    async def job(element: int) -> None:
        await gate.wait()
        raise ValueError(element)

    async with scheduler:
        await store.push_many("jobs", [(i, 0, f"j{i}") for i in range(20)])
        await wait_all_tasks_blocked()
        # Five of them are pulled from under their handlers (cancelled by the application).
        for i in range(5):
            await store.pull("jobs", f"j{i}")
        gate.set()
        await wait_all_tasks_blocked()
        stats = scheduler.stats("jobs")
        assert (stats.retried, stats.lost) == (15, 5)
        scheduler.stop()
