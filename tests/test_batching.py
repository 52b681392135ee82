"""Concurrent defers coalesced into one ``push_many`` per tick (``rehydrate/_batcher.py``).

Through real stores (SQLite and Redis from the contract suite's harnesses; the memory store,
which does not coalesce, answers the same): every caller gets its own id or its own error, the
server sees one script call for many defers, and due times are the callers'. Cancellation and
the stamping of due times are pinned down exactly on a memory store whose round trips wait on a
gate the test opens (the batcher is the code under test; the store's work is real).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import anyio
import attrs
import pytest

from rehydrate import Scheduler
from rehydrate.abc import Store
from rehydrate.errors import DuplicateIdError, InvalidArgumentError
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock
from tests.stores.harnesses import HARNESSES, Harness

pytestmark = pytest.mark.anyio

NAME = "rhtest-batch"


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async for h in HARNESSES[request.param](request):
        yield h


def coalesces(store: Store) -> bool:
    return not store.capabilities.in_process


async def defer_all(scheduler: Scheduler, calls: list[dict[str, Any]]) -> list[Any]:
    """Run every defer in its own task, at once; each one's id or exception, in order."""
    out: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        try:
            out[i] = await scheduler.defer(NAME, **calls[i])
        except Exception as exc:
            out[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return out


async def evalsha_calls(store: Store) -> int:
    """How many scripts the Redis server has run (all clients: the test runs alone on it)."""
    client: Any = store._backend._get()  # type: ignore[attr-defined]
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_concurrent_defers_each_get_their_id(harness: Harness) -> None:
    """64 tasks deferring at once: 64 distinct ids, each element stored under its own, due as asked."""
    store = harness.store
    async with Scheduler(store) as scheduler:
        before = await evalsha_calls(store) if "Redis" in type(store).__name__ else 0
        delays = [5.0 + i for i in range(60)] + [5.0] * 4
        calls: list[dict[str, Any]] = [{"element": {"n": i}, "delay": delays[i]} for i in range(60)]
        calls += [{"element": {"n": i}, "delay": 5, "id": f"given-{i}"} for i in range(60, 64)]
        ids = await defer_all(scheduler, calls)
        if "Redis" in type(store).__name__:
            # One direct push, then one script for the 63 that waited meanwhile (a second
            # tick at most, on a slow machine): not 64 round trips.
            assert await evalsha_calls(store) - before <= 4
        batcher = scheduler._batcher
        if coalesces(store):
            assert batcher.batches >= 1
            assert batcher.batched >= 32
        else:
            assert batcher.batches == 0
        assert len(set(ids)) == 64
        assert ids[60:] == [f"given-{i}" for i in range(60, 64)]
        now = store.clock()
        for i, id in enumerate(ids):
            assert await store.look(NAME, id) == {"n": i}
            info = await store.info(NAME, id)
            assert info is not None
            # The harness's time stands still: the due time is exactly the caller's.
            assert info.due == pytest.approx(now + delays[i], abs=1e-6)


async def test_one_duplicate_fails_only_its_caller(harness: Harness) -> None:
    """A batch with an id already present, and one repeated within it: only those callers fail."""
    store = harness.store
    async with Scheduler(store) as scheduler:
        await scheduler.defer(NAME, "old", id="taken", delay=60)
        calls: list[dict[str, Any]] = [{"element": i, "delay": 60, "id": f"k{i}"} for i in range(20)]
        calls[7] = {"element": "new", "delay": 60, "id": "taken"}
        calls[12] = {"element": "first", "delay": 60, "id": "twin"}
        calls[15] = {"element": "second", "delay": 60, "id": "twin"}
        calls.append({"element": "bad", "delay": 60, "id": ""})
        calls.append({"element": {1, 2}, "delay": 60, "id": "unserializable"})  # not JSON
        out = await defer_all(scheduler, calls)
        assert isinstance(out[7], DuplicateIdError)
        assert str(out[7]).find("taken") >= 0
        assert isinstance(out[20], InvalidArgumentError)
        twins = [out[12], out[15]]
        assert sorted(type(x).__name__ for x in twins) == ["DuplicateIdError", "str"]
        for i in set(range(20)) - {7, 12, 15}:
            assert out[i] == f"k{i}"
            assert await store.look(NAME, f"k{i}") == i
        assert await store.look(NAME, "taken") == "old"
        assert await store.look(NAME, "twin") in ("first", "second")
        if isinstance(store, MemoryStore):  # keeps any object: no serializer
            assert out[21] == "unserializable"
        else:
            assert isinstance(out[21], InvalidArgumentError)
            assert await store.look(NAME, "unserializable") is None
        assert await store.size(NAME) == 17 + 1 + 1 + isinstance(store, MemoryStore)


async def test_defers_outside_the_scheduler_still_work(harness: Harness) -> None:
    """A store the caller opened: defers go straight to it before and after the scheduler runs."""
    store = harness.store
    scheduler = Scheduler(store)
    first = await scheduler.defer(NAME, "before", delay=60)
    async with scheduler:
        pass
    ids = await defer_all(scheduler, [{"element": i, "delay": 60} for i in range(8)])
    assert scheduler._batcher.batches == 0
    assert await store.size(NAME) == 9
    assert await store.look(NAME, first) == "before"
    assert sorted([await store.look(NAME, id) for id in ids]) == list(range(8))


# -- exact orderings, on a store whose round trips wait for the test -------------------------------


class GatedStore(MemoryStore):
    """A memory store whose pushes take a round trip: each waits until the test opens its gate."""

    capabilities = attrs.evolve(MemoryStore.capabilities, in_process=False)

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        #: One (verb, items, gate) per call, in order.
        self.calls: list[tuple[str, int, anyio.Event]] = []

    def seen(self) -> list[tuple[str, int]]:
        return [(verb, n) for verb, n, _ in self.calls]

    async def _round_trip(self, verb: str, n: int) -> None:
        gate = anyio.Event()
        self.calls.append((verb, n, gate))
        await gate.wait()

    async def push(self, name: str, element: Any, **kwargs: Any) -> str:
        await self._round_trip("push", 1)
        return await super().push(name, element, **kwargs)

    async def push_many(self, name: str, items: Any) -> list[str]:
        items = list(items)
        await self._round_trip("push_many", len(items))
        return await super().push_many(name, items)


@pytest.fixture
async def gated() -> AsyncIterator[GatedStore]:
    async with GatedStore(FakeClock(1000.0)) as store:
        yield store


async def settle() -> None:
    """Let every task that can run, run (the gated store's calls wait only for the test)."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


async def test_a_caller_cancelled_before_its_batch_leaves_nothing(gated: GatedStore) -> None:
    """Cancelled while waiting for the next tick: taken out, not stored; the others are."""
    ids: dict[str, str] = {}
    async with Scheduler(gated) as scheduler, anyio.create_task_group() as tg:

        async def defer(id: str) -> None:
            ids[id] = await scheduler.defer(NAME, id, delay=10, id=id)

        tg.start_soon(defer, "alone")  # goes at once, and waits at its gate
        await settle()
        victim = anyio.CancelScope()

        async def cancelled() -> None:
            with victim:
                await defer("victim")

        tg.start_soon(cancelled)
        tg.start_soon(defer, "other")
        await settle()
        assert gated.seen() == [("push", 1)]
        victim.cancel()
        await settle()
        gated.calls[0][2].set()
        await settle()
        assert gated.seen() == [("push", 1), ("push_many", 1)]
        gated.calls[1][2].set()
    assert ids == {"alone": "alone", "other": "other"}
    assert await gated.look(NAME, "victim") is None
    assert await gated.size(NAME) == 2


async def test_a_caller_cancelled_after_its_batch_left_is_stored_once(gated: GatedStore) -> None:
    """Cancelled while its batch is on its way: the element is stored, once, and the caller is
    cancelled (as any store call cancelled while waiting on its backend may have taken effect)."""
    finished: list[str] = []
    victim = anyio.CancelScope()
    async with Scheduler(gated) as scheduler, anyio.create_task_group() as tg:

        async def cancelled() -> None:
            with victim:
                await scheduler.defer(NAME, "v", id="victim")
                finished.append("returned")

        tg.start_soon(scheduler.defer, NAME, "a")
        await settle()
        tg.start_soon(cancelled)
        tg.start_soon(partial(scheduler.defer, NAME, "o", id="other"))
        await settle()
        gated.calls[0][2].set()  # the direct push returns; the batch leaves and waits
        await settle()
        assert gated.seen() == [("push", 1), ("push_many", 2)]
        victim.cancel()
        await settle()
        assert victim.cancelled_caught
        gated.calls[1][2].set()
    assert finished == []
    assert await gated.look(NAME, "victim") == "v"
    assert await gated.look(NAME, "other") == "o"
    assert await gated.size(NAME) == 3
    assert len(gated.calls) == 2


async def test_due_times_count_from_the_call_not_the_batch(gated: GatedStore) -> None:
    """A defer that waited 3 s of the store's clock for its batch is due 3 s sooner after it."""
    clock = gated.clock
    assert isinstance(clock, FakeClock)
    async with Scheduler(gated) as scheduler, anyio.create_task_group() as tg:
        tg.start_soon(partial(scheduler.defer, NAME, "a", delay=10, id="alone"))
        await settle()
        asked = clock()
        tg.start_soon(partial(scheduler.defer, NAME, "w", delay=10, id="waited"))
        tg.start_soon(partial(scheduler.defer, NAME, "s", delay=1, id="short"))
        await settle()
        clock.advance(3)
        gated.calls[0][2].set()
        await settle()
        gated.calls[1][2].set()
    waited = await gated.info(NAME, "waited")
    short = await gated.info(NAME, "short")
    alone = await gated.info(NAME, "alone")
    assert waited is not None
    assert short is not None
    assert alone is not None
    assert waited.due == pytest.approx(asked + 10)
    assert short.due == pytest.approx(clock())  # its second had passed while it waited: due now
    # The direct push is stamped by the store when it runs (here, behind the gate), as ever.
    assert alone.due == pytest.approx(asked + 3 + 10)


async def test_stopping_sends_what_waits_and_then_defers_go_direct(gated: GatedStore) -> None:
    """Defers waiting when the scheduler stops are sent; later ones are pushed by their callers."""
    ids: list[str] = []
    async with anyio.create_task_group() as tg, Scheduler(gated) as scheduler:

        async def defer(element: str) -> None:
            ids.append(await scheduler.defer(NAME, element, delay=5))

        tg.start_soon(defer, "a")
        await settle()
        tg.start_soon(defer, "b")
        tg.start_soon(defer, "c")
        await settle()
        scheduler.stop()
        tg.start_soon(defer, "d")  # after stop: straight to the store
        await settle()
        assert gated.seen() == [("push", 1), ("push", 1)]
        for _, _, gate in gated.calls:
            gate.set()
        await settle()
        assert gated.seen()[2:] == [("push_many", 2)]
        gated.calls[2][2].set()
    assert len(ids) == 4
    assert sorted([await gated.look(NAME, id) for id in ids]) == ["a", "b", "c", "d"]
