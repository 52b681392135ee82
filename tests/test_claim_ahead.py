"""``claim_ahead``: elements claimed before they are due, held in the process, delivered at their
time (never before it), handed back with their due time at shutdown. Memory and SQLite stores
with a FakeClock, on asyncio and trio; the stores' ``claim(ahead=...)`` is in the contract suite."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from rehydrate import Every, InvalidArgumentError, InvalidTypeError, Scheduler, current_delivery
from rehydrate.abc import Capabilities, Store
from rehydrate.stores import MemoryStore, SQLiteStore
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


async def eventually(read: Callable[[], Awaitable[Any]], ok: Callable[[Any], bool]) -> None:
    """Until ``ok(await read())``: SQLite's work is done in a thread, which the event loop's
    ``wait_all_tasks_blocked`` does not wait for (short real sleeps). Bounded by real time, not
    by a count of tries: on a loaded machine the thread's turn can take longer than a count of
    5 ms naps allows (it failed so once, in a run beside the Redis store tests)."""
    with anyio.move_on_after(10):
        while True:
            if ok(await read()):
                return
            await anyio.sleep(0.005)
    raise AssertionError(f"still {await read()!r} after 10 s")


def recorder(scheduler: Scheduler, clock: FakeClock, **options: Any) -> list[tuple[Any, float, float]]:
    """A handler of ``jobs`` recording (element, when it ran, its due time)."""
    ran: list[tuple[Any, float, float]] = []

    @scheduler.handler("jobs", **options)
    async def job(element: Any) -> None:
        ran.append((element, clock(), current_delivery().due))

    return ran


class TestClaimAhead:
    async def test_claimed_early_delivered_on_time(self, store: MemoryStore, clock: FakeClock) -> None:
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=0.5)
        await store.push_many("jobs", [("a", 10, "a"), ("b", 10.2, "b"), ("c", 20, "c")])
        async with scheduler:
            await advance(clock, 9.8)  # a and b are due within 0.5 s: claimed, held
            assert ran == []
            for id in ("a", "b"):
                info = await store.info("jobs", id)
                assert info is not None
                assert (info.claimed, info.attempt) == (True, 1)
            assert not (await store.info("jobs", "c")).claimed  # type: ignore[union-attr]
            assert scheduler.stats().in_flight == 2  # held elements count
            await advance(clock, 0.19)
            assert ran == []  # 0.01 s early: still held
            await advance(clock, 0.01)
            assert ran == [("a", 1010.0, 1010.0)]
            await advance(clock, 0.2)
            assert [r[0] for r in ran] == ["a", "b"]
            await advance(clock, 9.5)  # c is held
            await advance(clock, 0.3)
            assert [r[0] for r in ran] == ["a", "b", "c"]
            assert all(at >= due for _, at, due in ran)  # never before its time
            stats = scheduler.stats()
            assert (stats.delivered, stats.acked, stats.in_flight) == (3, 3, 0)
            assert stats.lateness_max is not None
            assert 0.0 <= stats.lateness_max < 0.01
        assert await store.size("jobs") == 0

    async def test_a_burst_is_claimed_before_it_is_due(self, store: MemoryStore, clock: FakeClock) -> None:
        """600 elements due at one instant, claimed 100 at a time: all taken before the instant
        (the claims are done), all run at it, in due order."""
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=0.1, concurrency=1000, batch=100)
        await store.push_many("jobs", [(i, 5 + i * 1e-6, f"e{i}") for i in range(600)])
        async with scheduler:
            await advance(clock, 4.95)
            assert ran == []
            assert (await store.summary("jobs")).claimed == 600
            await advance(clock, 0.05 + 600e-6)
            assert [r[0] for r in ran] == list(range(600))
            assert all(at >= due for _, at, due in ran)

    async def test_an_earlier_element_goes_first(self, store: MemoryStore, clock: FakeClock) -> None:
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=1)
        async with scheduler:
            await scheduler.defer("jobs", "later", delay=10)
            await advance(clock, 9.2)  # "later" is held (due in 0.8 s)
            await scheduler.defer("jobs", "sooner", delay=0.3)
            await advance(clock, 0.3)
            assert [r[0] for r in ran] == ["sooner"]
            await advance(clock, 0.5)
            assert [r[0] for r in ran] == ["sooner", "later"]

    async def test_held_elements_go_back_with_their_due_time_at_shutdown(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=2)
        await store.push_many("jobs", [("a", 10, "a"), ("b", 11, "b")])
        async with scheduler:
            await advance(clock, 9.1)
            assert (await store.summary("jobs")).claimed == 2
        assert ran == []
        assert (await store.summary("jobs")).claimed == 0
        assert await store.ttn("jobs") == pytest.approx(0.9)  # a: still due at 10, not at once
        # Never run: the claims handed back are no attempt.
        assert [(await store.info("jobs", id)).attempt for id in "ab"] == [0, 0]  # type: ignore[union-attr]
        # Another scheduler, without claim_ahead, delivers them on time.
        after = Scheduler(store, grace=0.5)
        again = recorder(after, clock)
        async with after:
            await advance(clock, 0.8)
            assert again == []
            await advance(clock, 0.1)
            assert [r[0] for r in again] == ["a"]
            await advance(clock, 1)
            assert [r[0] for r in again] == ["a", "b"]

    async def test_leases_of_held_elements_are_kept(self, store: MemoryStore, clock: FakeClock) -> None:
        """Held (and then running) elements' leases are renewed: no second delivery."""
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=4, lease=10)
        await store.push("jobs", "a", ttl=5, id="a")
        async with scheduler:
            for _ in range(20):
                await advance(clock, 1)
            assert [r[0] for r in ran] == ["a"]
            assert await store.size("jobs") == 0

    async def test_a_running_lease_is_not_taken_early_nor_polled_for(self, clock: FakeClock) -> None:
        """Another worker's element, its lease ending within claim_ahead: the claim loop neither
        takes it before the lease is out nor claims in a loop meanwhile; it sleeps until then."""
        calls: list[float] = []

        class Counting(MemoryStore):
            async def claim(
                self, name: str, *, lease: Any, limit: int | None = None, ahead: Any = 0.0
            ) -> Any:
                calls.append(clock())
                return await super().claim(name, lease=lease, limit=limit, ahead=ahead)

        async with Counting(clock=clock) as store:
            await store.push("jobs", "x", ttl=0, id="x")
            (other,) = await store.claim("jobs", lease=10)  # another worker's, until 1010
            calls.clear()
            scheduler = Scheduler(store, grace=0.5)
            ran = recorder(scheduler, clock, claim_ahead=5)
            async with scheduler:
                with anyio.fail_after(5):  # (a claim loop in a spin would never let this return)
                    await advance(clock, 7)
                    assert ran == []
                    assert len(calls) <= 3  # at start, and at most once on coming within 5 s
                    await advance(clock, 2.9)
                    assert ran == []  # x's lease is still the other worker's
                    await advance(clock, 0.1)
                    assert [(r[0], r[1]) for r in ran] == [("x", 1010.0)]
                    assert len(calls) <= 5
            assert other.attempt == 1

    async def test_an_element_that_came_within_reach_during_the_claim_is_claimed_at_once(
        self, clock: FakeClock
    ) -> None:
        """A claim's round trip (here 2 ms of the fake clock) brings the next element within
        claim_ahead by the time the loop reads the TTN: not a lease (the claim took something),
        so it is claimed at once, not when it is due."""

        class Slow(MemoryStore):
            async def claim(
                self, name: str, *, lease: Any, limit: int | None = None, ahead: Any = 0.0
            ) -> Any:
                claims = await super().claim(name, lease=lease, limit=limit, ahead=ahead)
                if claims:
                    clock.advance(0.002)
                return claims

        async with Slow(clock=clock) as store:
            await store.push_many("jobs", [("a", 10, "a"), ("b", 10.001, "b")])
            scheduler = Scheduler(store, grace=0.5)
            ran = recorder(scheduler, clock, claim_ahead=0.5)
            async with scheduler:
                await advance(clock, 9.5)  # a is claimed; b comes within 0.5 s meanwhile
                assert (await store.summary("jobs")).claimed == 2
                await advance(clock, 1.1)
                assert [r[0] for r in ran] == ["a", "b"]

    async def test_on_sqlite(self, tmp_path: Path, clock: FakeClock) -> None:
        async with SQLiteStore(tmp_path / "jobs.db", clock=clock) as store:
            scheduler = Scheduler(store, grace=0.5)
            ran = recorder(scheduler, clock, claim_ahead=0.5)
            await store.push_many("jobs", [(i, 3, f"e{i}") for i in range(50)])
            async with scheduler:
                await advance(clock, 2.7)
                await eventually(lambda: store.summary("jobs"), lambda s: s.claimed == 50)
                assert ran == []
                await advance(clock, 0.3)
                await eventually(lambda: store.size("jobs"), lambda size: size == 0)
                assert sorted(r[0] for r in ran) == list(range(50))
                assert all(at >= due for _, at, due in ran)


class TestChangesToHeldElements:
    """A change made through this scheduler to an element it holds ahead of time reaches it."""

    async def test_cancel(self, store: MemoryStore, clock: FakeClock) -> None:
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=1)
        async with scheduler:
            await scheduler.defer("jobs", "x", delay=5, id="x")
            await scheduler.defer("jobs", "y", delay=5.1, id="y")
            await advance(clock, 4.5)
            assert (await store.summary("jobs")).claimed == 2  # both held
            assert await scheduler.cancel("jobs", "x") == "x"
            assert scheduler.stats().in_flight == 1
            await advance(clock, 1)
            assert [r[0] for r in ran] == ["y"]
            assert await store.size("jobs") == 0

    async def test_replace(self, store: MemoryStore, clock: FakeClock) -> None:
        """A debounce: the held element is replaced, only the new one runs, at its own time."""
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=1)
        async with scheduler:
            await scheduler.defer("jobs", "v1", delay=5, id="doc")
            await advance(clock, 4.5)
            assert (await store.summary("jobs")).claimed == 1
            await scheduler.defer("jobs", "v2", delay=3, id="doc", replace=True)
            await advance(clock, 1)
            assert ran == []
            await advance(clock, 2)
            assert [r[0] for r in ran] == ["v2"]

    async def test_run_now(self, store: MemoryStore, clock: FakeClock) -> None:
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=1)
        async with scheduler:
            await scheduler.defer("jobs", "x", delay=5, id="x")
            await advance(clock, 4.5)
            assert await scheduler.run_now("jobs", "x")
            await advance(clock, 0)
            assert [r[0] for r in ran] == ["x"]
            await advance(clock, 1)
            assert [r[0] for r in ran] == ["x"]  # once

    async def test_unschedule_and_pause(self, store: MemoryStore, clock: FakeClock) -> None:
        scheduler = Scheduler(store, grace=0.5)
        ran = recorder(scheduler, clock, claim_ahead=1)
        async with scheduler:
            await scheduler.schedule("jobs", Every(10), id="gone", element="gone")
            await scheduler.schedule("jobs", Every(10), id="paused", element="paused")
            await scheduler.schedule("jobs", Every(10), id="kept", element="kept")
            await advance(clock, 0)
            assert sorted(r[0] for r in ran) == ["gone", "kept", "paused"]  # at once, then every 10 s
            ran.clear()
            await advance(clock, 9.5)
            assert (await store.summary("jobs")).claimed == 3
            assert await scheduler.unschedule("jobs", "gone")
            assert await scheduler.pause("jobs", "paused")
            await advance(clock, 0.5)
            assert [r[0] for r in ran] == ["kept"]
            await advance(clock, 10)
            assert [r[0] for r in ran] == ["kept", "kept"]
            (info,) = [i for i in await scheduler.schedules("jobs") if i.id == "paused"]
            assert info.paused
            assert {i.id for i in await scheduler.schedules("jobs")} == {"paused", "kept"}


class TestClaimAheadBadInput:
    @pytest.mark.parametrize(
        ("value", "error", "match"),
        [
            (-1, InvalidArgumentError, "negative"),
            ("1", InvalidTypeError, "claim_ahead"),
            (float("inf"), InvalidArgumentError, "claim_ahead"),
            (15, InvalidArgumentError, "under half the lease"),
            (20, InvalidArgumentError, "under half the lease"),
        ],
    )
    def test_refused(self, value: Any, error: type[Exception], match: str) -> None:
        scheduler = Scheduler()
        with pytest.raises(error, match=match):
            scheduler.handler("jobs", claim_ahead=value, lease=30)
        assert scheduler.handlers == []

    async def test_a_store_without_ahead_is_refused(self, clock: FakeClock) -> None:
        class OldStore(MemoryStore):
            """A store written before ``claim(ahead=...)``: it does not declare it."""

            capabilities = Capabilities(workers=True)

            async def claim(self, name: str, *, lease: Any, limit: int | None = None) -> Any:  # type: ignore[override]
                return await super().claim(name, lease=lease, limit=limit)

        old: Store = OldStore(clock=clock)
        scheduler = Scheduler(old)
        with pytest.raises(InvalidArgumentError, match=r"OldStore\.claim takes no ahead"):
            scheduler.handler("jobs", claim_ahead=0.1)(_noop)
        scheduler.handler("jobs")(_noop)  # without it: fine
        # The store swapped for one without ahead after registering (rehydrate worker --store).
        fine = Scheduler(MemoryStore(clock=clock))
        fine.handler("jobs", claim_ahead=0.1)(_noop)
        fine.use_store(old)
        with pytest.raises(InvalidArgumentError, match="claim takes no ahead"):
            async with fine:
                pass

    def test_what_the_store_declares_decides_not_its_signature(self, clock: FakeClock) -> None:
        """``claim_ahead`` goes by the store's declared capabilities (``Store.capabilities``): a
        store that does not declare it is refused though its ``claim`` takes ``ahead``."""

        class Undeclared(MemoryStore):
            capabilities = Capabilities(workers=True)

        scheduler = Scheduler(Undeclared(clock=clock))
        with pytest.raises(
            InvalidArgumentError, match=r"Undeclared\.claim takes no ahead.*do not declare claim_ahead"
        ):
            scheduler.handler("jobs", claim_ahead=0.1)(_noop)
        assert scheduler.handlers == []


async def _noop(element: Any) -> None:
    pass
