"""Global limits at the scheduler level: on a memory store with a FakeClock (the stores' own
steps are the contract suite's ``LimitsContract``; ``tests/stores/test_limits_schedulers.py``
runs the main rules on every store, ``tests/stores/test_limits_stores.py`` the rate and the
not-an-attempt ones on memory, SQLite and PostgreSQL). Every async test runs on asyncio and trio."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

import rehydrate
from rehydrate import (
    Concurrency,
    InvalidArgumentError,
    InvalidTypeError,
    Rate,
    Retry,
    Scheduler,
)
from rehydrate._core._limits import ON_ITS_WAY, LimitAnswer, LimitSpec
from rehydrate._limits import HandlerLimits, apply_wakes, spec_of
from rehydrate.abc import Store
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(clock: FakeClock) -> AsyncIterator[MemoryStore]:
    async with MemoryStore(clock=clock) as store:
        yield store


async def advance(clock: FakeClock, seconds: float) -> None:
    await wait_all_tasks_blocked()
    clock.advance(seconds)
    await wait_all_tasks_blocked()


class Running:
    """Counts the handlers running at once, per key, and the most ever seen."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.done: list[Any] = []
        self.gates: dict[str, anyio.Event] = {}

    def enter(self, key: str) -> None:
        self.now[key] = self.now.get(key, 0) + 1
        self.most[key] = max(self.most.get(key, 0), self.now[key])

    def leave(self, key: str, element: Any) -> None:
        self.now[key] -= 1
        self.done.append(element)


class TestDeclarations:
    def test_limits_are_checked_where_they_are_written(self) -> None:
        assert Rate(100, per=timedelta(minutes=1)).per == 60.0
        assert Rate(5).per == 1.0
        for bad in (0, -1):
            with pytest.raises(InvalidArgumentError, match="at least 1"):
                Concurrency(bad)
            with pytest.raises(InvalidArgumentError, match="at least 1"):
                Rate(bad, per=1)
        for wrong in (1.5, "3", True, None):
            with pytest.raises(InvalidTypeError):
                Concurrency(wrong)
        with pytest.raises(InvalidArgumentError, match="positive"):
            Rate(1, per=0)
        with pytest.raises(InvalidArgumentError):
            Rate(1, per=-1)
        with pytest.raises(InvalidTypeError):
            Rate(1, per="1s")
        with pytest.raises(InvalidArgumentError, match=r"31\.7 years"):
            Rate(1, per=10**10)

    def test_spec_takes_the_smallest_concurrency_and_every_rate(self) -> None:
        spec = spec_of([Concurrency(10), Rate(100, per=1), Concurrency(3), Rate(1000, per=60)], 30.0)
        assert spec == LimitSpec(concurrency=3, rates=((100, 1.0), (1000, 60.0)), lease=30.0)
        with pytest.raises(InvalidArgumentError, match="at least one"):
            spec_of([], 30.0)
        with pytest.raises(InvalidTypeError, match=r"Concurrency or a rehydrate\.Rate"):
            spec_of([10], 30.0)

    async def test_a_handler_declares_its_limits(self, store: MemoryStore) -> None:
        scheduler = Scheduler(store=store)
        with pytest.raises(InvalidArgumentError, match="limit_key goes with limits"):
            scheduler.handler("a", limit_key=str)
        with pytest.raises(InvalidTypeError, match="callable"):
            scheduler.handler("a", limits=[Concurrency(1)], limit_key="account")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError):
            scheduler.handler("a", limits=[5])  # type: ignore[list-item]
        with pytest.raises(InvalidArgumentError):
            scheduler.handler("a", limits=[])

    async def test_a_store_without_limits_is_refused_at_declaration(self, store: MemoryStore) -> None:
        class Plain(MemoryStore):
            capabilities = rehydrate.abc.Capabilities(claim_ahead=True, workers=True)

        scheduler = Scheduler(store=Plain())
        with pytest.raises(InvalidArgumentError, match="does not implement them"):

            @scheduler.handler("a", limits=[Concurrency(1)])
            async def handle(element: Any) -> None: ...

    async def test_a_lease_shorter_than_the_renewal_is_refused(self, store: MemoryStore) -> None:
        with pytest.raises(InvalidArgumentError, match="longer than the renewal interval"):
            rehydrate.Limiter(store, "x", Concurrency(1), lease=5, renew_every=5)
        with pytest.raises(InvalidArgumentError, match="positive"):
            rehydrate.Limiter(store, "x", Concurrency(1), lease=0)
        with pytest.raises(InvalidArgumentError):
            rehydrate.Limiter(store, "x")


async def serve_limited(
    scheduler: Scheduler, running: Running, limits: list[Any], *, key: Any = None, **options: Any
) -> None:
    def key_of(element: Any) -> Any:
        return element["k"]

    @scheduler.handler("jobs", limits=limits, limit_key=key or key_of, **options)
    async def handle(element: Any) -> None:
        running.enter(element["k"])
        gate = running.gates.setdefault(element["k"], anyio.Event())
        await gate.wait()
        running.leave(element["k"], element)


class TestConcurrency:
    async def test_never_over_n_across_schedulers_and_a_release_wakes_one(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        """Three schedulers on one store, Concurrency(2) on key "a": never three at once; each
        release wakes the next waiter at once (no clock moves), and nobody polls meanwhile."""
        running = Running()
        schedulers = [Scheduler(store=store, grace=0.1) for _ in range(3)]
        for scheduler in schedulers:
            await serve_limited(scheduler, running, [Concurrency(2)])
        async with schedulers[0], schedulers[1], schedulers[2]:
            for i in range(10):
                await schedulers[0].defer("jobs", {"k": "a", "i": i}, delay=0)
            await wait_all_tasks_blocked()
            assert running.now["a"] == 2
            (info,) = await store.limits("jobs")
            assert (info.key, len(info.holders), info.waiting) == ("a", 2, 8)
            for _ in range(5):
                running.gates.pop("a").set()
                await wait_all_tasks_blocked()
            assert running.most["a"] == 2
            while len(running.done) < 10:
                running.gates.pop("a").set()
                await wait_all_tasks_blocked()
            assert running.most["a"] == 2
            assert sorted(e["i"] for e in running.done) == list(range(10))
            for scheduler in schedulers:
                assert scheduler.stats("jobs").retried == 0
        assert await store.limits() == []  # idle keys are deleted

    async def test_a_parked_element_is_not_an_attempt(self, store: MemoryStore, clock: FakeClock) -> None:
        attempts: list[int] = []
        scheduler = Scheduler(store=store, grace=0.1)
        gate = anyio.Event()

        @scheduler.handler("jobs", limits=[Concurrency(1)], retry=Retry(attempts=1))
        async def handle(element: Any) -> None:
            attempts.append(rehydrate.current_delivery().attempt)
            await gate.wait()

        async with scheduler:
            for i in range(3):
                await scheduler.defer("jobs", i, delay=0, id=f"e{i}")
            await wait_all_tasks_blocked()
            for i in (1, 2):
                info = await store.info("jobs", f"e{i}")
                assert info is not None
                assert info.attempt == 0
                assert not info.claimed
            gate.set()
            await wait_all_tasks_blocked()
        assert attempts == [1, 1, 1]  # each ran on its first attempt, none dead-lettered
        assert scheduler.stats("jobs").dead_lettered == 0

    async def test_a_saturated_key_does_not_hold_up_another(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        running = Running()
        scheduler = Scheduler(store=store, grace=0.1)
        await serve_limited(scheduler, running, [Concurrency(1)], concurrency=50)
        async with scheduler:
            for i in range(200):
                await scheduler.defer("jobs", {"k": "busy", "i": i}, delay=0)
            await wait_all_tasks_blocked()
            for i in range(20):
                await scheduler.defer("jobs", {"k": f"other{i}", "i": i}, delay=0)
            await wait_all_tasks_blocked()
            assert running.now["busy"] == 1
            assert all(running.now[f"other{i}"] == 1 for i in range(20))  # on time, no clock moved
            for i in range(20):
                running.gates.pop(f"other{i}").set()
            await wait_all_tasks_blocked()
            assert len(running.done) == 20
            running.gates.pop("busy").set()
            await wait_all_tasks_blocked()
            assert running.most["busy"] == 1

    async def test_a_dead_holder_frees_its_slot_when_its_lease_ends_and_wakes_a_waiter(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        """A slot held by code that died (taken, never renewed nor released): the waiting
        element runs when that lease ends, on time, without anyone polling."""
        spec = spec_of([Concurrency(1)], 10.0)
        assert (await store.limit_acquire("jobs", "*", "dead-process", spec)).granted
        ran: list[float] = []
        scheduler = Scheduler(store=store, grace=0.1)

        @scheduler.handler("jobs", limits=[Concurrency(1)], lease=10)
        async def handle(element: Any) -> None:
            ran.append(clock())

        async with scheduler:
            start = clock()
            await scheduler.defer("jobs", "x", delay=0)
            await advance(clock, 9.9)
            assert ran == []
            await advance(clock, 0.1)
            assert ran == [start + 10.0]


class RecordingStore(MemoryStore):
    """A memory store that records the waiters of each ``limit_park`` step (the bulk path's)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.parks: list[list[str]] = []

    async def limit_park(
        self, limit: str, key: str, spec: LimitSpec, waiters: Sequence[tuple[str, str, int]]
    ) -> LimitAnswer:
        self.parks.append([id for _, id, _ in waiters])
        return await super().limit_park(limit, key, spec, waiters)


class TestParking:
    async def test_claims_of_a_key_believed_full_are_parked_together_and_woken_in_order(
        self, clock: FakeClock
    ) -> None:
        """A refusal makes the runner believe key "a" full: the next claims of it are handed
        back and queued in one ``limit_park`` step (no acquire each, no attempt), then run one
        by one in the order they were claimed, each release waking the next, no clock moved."""
        async with RecordingStore(clock=clock) as store:
            running = Running()
            order: list[int] = []
            scheduler = Scheduler(store=store, grace=0.1)

            @scheduler.handler("jobs", limits=[Concurrency(1)], limit_key=lambda e: e["k"], concurrency=20)
            async def handle(element: Any) -> None:
                order.append(element["i"])
                running.enter("a")
                gate = running.gates.setdefault("a", anyio.Event())
                await gate.wait()
                running.leave("a", element)

            async with scheduler:
                await store.push_many("jobs", [({"k": "a", "i": i}, 0, f"e{i}") for i in range(2)])
                await wait_all_tasks_blocked()
                assert order == [0]  # e1 refused: the key is believed full
                clock.advance(0.001)  # (the next ones due after e1, in this order)
                await store.push_many("jobs", [({"k": "a", "i": i}, 0, f"e{i}") for i in range(2, 10)])
                await wait_all_tasks_blocked()
                assert [f"e{i}" for i in range(2, 10)] in store.parks  # one step for the batch
                (info,) = await store.limits("jobs")
                assert (len(info.holders), info.waiting) == (1, 9)
                for i in range(2, 10):
                    element = await store.info("jobs", f"e{i}")
                    assert element is not None
                    assert (element.attempt, element.claimed) == (0, False)  # not an attempt
                for n in range(1, 10):
                    running.gates.pop("a").set()
                    await wait_all_tasks_blocked()
                    assert order == list(range(n + 1))  # the next in FIFO order, at once
                    assert running.now["a"] == 1
                running.gates.pop("a").set()
                await wait_all_tasks_blocked()
            assert running.most["a"] == 1
            stats = scheduler.stats("jobs")
            assert (stats.retried, stats.dead_lettered) == (0, 0)
            assert stats.limit_parked >= 9
            assert await store.limits() == []

    async def test_a_wake_overtaken_by_an_older_one_is_filed_anew(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        """Two wakes of one element from two steps may land in either order: here a park step's
        "due at the lease's end" lands after a release's "due now". The runner looks again at an
        element a wake filed later than now, ON_ITS_WAY after: still waiting, it is filed now, and
        the room it was woken for does not stay empty for a lease."""
        spec = spec_of([Concurrency(1)], 60.0)
        limits = HandlerLimits(store, "jobs", spec, None)
        await store.push("jobs", "w", ttl=0, id="w")
        assert (await store.limit_acquire("jobs", "*", "other-process", spec)).granted
        lease_end = clock() + 60.0
        clock.advance(1.0)
        (claim,) = await store.claim("jobs", lease=60)
        async with anyio.create_task_group() as tg:
            tg.start_soon(limits.rewaker.run)
            assert await limits.admit(claim, "*") is None  # refused: parked, the head
            info = await store.info("jobs", "w")
            assert info is not None
            assert info.due == pytest.approx(lease_end)  # at the holder's lease end
            # Another process releases: w is woken (due now) ...
            released = await store.limit_release("jobs", "*", "other-process", spec)
            assert [w.id for w in released.wake] == ["w"]
            assert await apply_wakes(store, released.wake) == []
            # ... and the park step's older wake lands last: w is filed at the lease's end.
            assert await store.reschedule("jobs", "w", ttl=lease_end - clock(), attempt=0)
            await advance(clock, ON_ITS_WAY)
            info = await store.info("jobs", "w")
            assert info is not None
            assert info.due == pytest.approx(lease_end)  # not yet looked at
            await advance(clock, 0.5)
            info = await store.info("jobs", "w")
            assert info is not None
            assert (info.due, info.attempt, info.claimed) == (clock(), 0, False)  # due now: filed anew
            tg.cancel_scope.cancel()

    async def test_a_head_filed_as_its_key_says_is_left_alone(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        """Looked at again, a head filed at the earliest chance as it should be is not written
        again, nor looked at again: a key full for long costs one look, not one per second."""
        spec = spec_of([Concurrency(1)], 60.0)
        limits = HandlerLimits(store, "jobs", spec, None)
        await store.push("jobs", "w", ttl=0, id="w")
        assert (await store.limit_acquire("jobs", "*", "other-process", spec)).granted
        clock.advance(1.0)
        (claim,) = await store.claim("jobs", lease=60)
        async with anyio.create_task_group() as tg:
            tg.start_soon(limits.rewaker.run)
            assert await limits.admit(claim, "*") is None
            before = await store.info("jobs", "w")
            assert before is not None
            assert before.due == pytest.approx(clock() + 59.0)  # the head, at the lease's end
            await advance(clock, 10.0)
            after = await store.info("jobs", "w")
            assert after is not None
            assert after.revision == before.revision  # looked at once, left as it was
            assert after.due == before.due
            tg.cancel_scope.cancel()


class TestRate:
    async def test_never_more_starts_in_a_window_and_each_runs_when_the_window_slides(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        starts: list[float] = []
        scheduler = Scheduler(store=store, grace=0.1)

        @scheduler.handler("jobs", limits=[Rate(3, per=10)])
        async def handle(element: Any) -> None:
            starts.append(clock())

        async with scheduler:
            t0 = clock()
            for i in range(10):
                await scheduler.defer("jobs", i, delay=0)
            for _ in range(40):
                await advance(clock, 1)
        assert len(starts) == 10
        for at in starts:  # every window of 10 s holds at most 3 starts
            assert sum(at <= s < at + 10 for s in starts) <= 3
        assert starts == [t0] * 3 + [t0 + 10] * 3 + [t0 + 20] * 3 + [t0 + 30]
        assert scheduler.stats("jobs").delivered == 10


class TestBadKeys:
    @pytest.mark.parametrize(
        ("key", "cause"),
        [
            (lambda element: element["missing"], "KeyError"),
            (lambda element: [1, 2], "str or an int"),
            (lambda element: "x" * 600, "longer than 512"),
            (lambda element: "", "empty"),
        ],
    )
    async def test_a_bad_key_fails_that_element_and_nothing_else(
        self, store: MemoryStore, clock: FakeClock, key: Any, cause: str
    ) -> None:
        done: list[Any] = []
        scheduler = Scheduler(store=store, grace=0.1)

        def partition(element: Any) -> Any:
            return "ok" if element == "good" else key(element)

        @scheduler.handler("jobs", limits=[Concurrency(1)], limit_key=partition, retry=Retry(attempts=1))
        async def handle(element: Any) -> None:
            done.append(element)

        async with scheduler:
            await scheduler.defer("jobs", {"bad": 1}, delay=0, id="bad")
            await scheduler.defer("jobs", "good", delay=0, id="good")
            await wait_all_tasks_blocked()
            (dead,) = await scheduler.dead_letters("jobs")
        assert done == ["good"]
        assert dead.id == "bad"
        assert "LimitKeyError" in dead.error
        assert cause in dead.error


class TestLimiter:
    async def test_hold_shares_the_handlers_limit_and_waits_for_a_release(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        scheduler = Scheduler(store=store, grace=0.1)
        limiter = scheduler.limiter("charge", Concurrency(1), lease=30)
        order: list[str] = []
        first_in = anyio.Event()
        let_go = anyio.Event()

        async def first() -> None:
            async with limiter.hold("acct"):
                order.append("first in")
                first_in.set()
                await let_go.wait()
                order.append("first out")

        async def second() -> None:
            await first_in.wait()
            async with limiter.hold("acct"):
                order.append("second in")

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(second)
            await wait_all_tasks_blocked()
            (info,) = await store.limits("charge")
            assert info.waiting == 1
            assert len(info.holders) == 1
            await advance(clock, 25)  # renewed meanwhile: the slot is still the first's
            assert order == ["first in"]
            let_go.set()
        assert order == ["first in", "first out", "second in"]
        assert await store.limits() == []
        assert await store.names() == []  # the waiter's marker is gone

    async def test_hold_raises_what_its_block_raises(self, store: MemoryStore) -> None:
        limiter = rehydrate.Limiter(store, "x", Concurrency(1), Rate(10, per=1))
        with pytest.raises(KeyError):
            async with limiter.hold():
                raise KeyError("inner")
        assert (await store.limits("x"))[0].holders == {}

    async def test_hold_waits_for_the_window_to_slide(self, store: MemoryStore, clock: FakeClock) -> None:
        limiter = rehydrate.Limiter(store, "x", Rate(1, per=5))
        times: list[float] = []

        async def use() -> None:
            async with limiter.hold(7):
                times.append(clock())

        async with anyio.create_task_group() as tg:
            t0 = clock()
            for _ in range(3):
                tg.start_soon(use)
            for _ in range(12):
                await advance(clock, 1)
        assert times == [t0, t0 + 5, t0 + 10]


def test_store_without_limits_says_so() -> None:
    class Bare(Store):
        pass

    assert not Bare.capabilities.limits
