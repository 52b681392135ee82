"""The scheduler on a memory store with a FakeClock: every async test runs on asyncio and trio."""

from __future__ import annotations

import functools
import gc
import os
import socket
import threading
import weakref
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
import structlog
from anyio import wait_all_tasks_blocked
from structlog.testing import capture_logs

import rehydrate
from rehydrate import (
    Backoff,
    Delivery,
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    Retry,
    Scheduler,
    _runner,
    current_delivery,
)
from rehydrate.abc import Capabilities
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock

pytestmark = pytest.mark.anyio

NO_JITTER = Backoff(initial=1, multiplier=2, maximum=60, jitter=0)


@pytest.fixture
async def store(clock: FakeClock) -> AsyncIterator[MemoryStore]:
    async with MemoryStore(clock=clock) as store:  # open, so tests may fill it before the scheduler runs
        yield store


@pytest.fixture
def scheduler(store: MemoryStore) -> Scheduler:
    return Scheduler(store=store, grace=0.5)


async def settle() -> None:
    """Let every task run until it blocks again."""
    await wait_all_tasks_blocked()


async def advance(clock: FakeClock, seconds: float) -> None:
    """Let every task go to sleep, move time, and let the woken tasks run."""
    await settle()
    clock.advance(seconds)
    await settle()


class TestDelivery:
    async def test_delivers_when_due_and_acks(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        got: list[Any] = []

        @scheduler.handler("reminders")
        async def remind(element: Any) -> None:
            got.append(element)

        async with scheduler:
            rid = await scheduler.defer("reminders", {"user": 7}, delay=30, id="user-7")
            assert rid == "user-7"
            await advance(clock, 29.9)
            assert got == []
            await advance(clock, 0.1)
            assert got == [{"user": 7}]
            assert await store.size("reminders") == 0
            stats = scheduler.stats()
            assert (stats.delivered, stats.acked, stats.in_flight) == (1, 1, 0)
            assert stats.lateness_max == 0.0

    async def test_wakes_early_for_an_earlier_defer(self, scheduler: Scheduler, clock: FakeClock) -> None:
        got: list[str] = []

        @scheduler.handler("jobs")
        async def job(element: str) -> None:
            got.append(element)

        async with scheduler:
            await scheduler.defer("jobs", "late", delay=100)
            await settle()  # the loop is now asleep until TTN = 100 s
            await scheduler.defer("jobs", "soon", delay=1)
            await advance(clock, 1)
            assert got == ["soon"]
            await advance(clock, 99)
            assert got == ["soon", "late"]

    async def test_due_order(self, scheduler: Scheduler, clock: FakeClock) -> None:
        got: list[int] = []

        @scheduler.handler("jobs", concurrency=1)
        async def job(element: int) -> None:
            got.append(element)

        for i, delay in enumerate([5, 1, 3, 1, 2]):
            await scheduler.store.push("jobs", i, ttl=delay)
        async with scheduler:
            await advance(clock, 5)
            assert got == [1, 3, 4, 2, 0]

    async def test_cancel(self, scheduler: Scheduler, clock: FakeClock) -> None:
        got: list[str] = []

        @scheduler.handler("jobs")
        async def job(element: str) -> None:
            got.append(element)

        async with scheduler:
            rid = await scheduler.defer("jobs", "x", delay=5)
            assert await scheduler.cancel("jobs", rid) == "x"
            assert await scheduler.cancel("jobs", rid) is None
            await advance(clock, 10)
            assert got == []

    async def test_defer_at(self, scheduler: Scheduler, store: MemoryStore) -> None:
        async with scheduler:
            rid = await scheduler.defer("jobs", "x", at=datetime.now(UTC) + timedelta(seconds=60))
            info = await store.info("jobs", rid)
            assert info is not None
            assert 59 < info.ttl <= 60
            past = await scheduler.defer("jobs", "y", at=datetime.now(UTC) - timedelta(hours=1))
            assert await store.xpoll("jobs") == [past]

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"at": datetime(2030, 1, 1)}, "aware"),
            ({"at": "2030-01-01"}, "datetime"),
            ({"delay": 1, "at": datetime.now(UTC)}, "not both"),
            ({"delay": -1}, "delay"),
            ({"delay": float("nan")}, "delay"),
            ({"id": ""}, "id"),
            ({"replace": True}, "replace needs an id"),
        ],
    )
    async def test_defer_bad_input(self, scheduler: Scheduler, kwargs: Any, match: str) -> None:
        async with scheduler:
            with pytest.raises(InvalidArgumentError, match=match):
                await scheduler.defer("jobs", "x", **kwargs)
            assert await scheduler.store.size("jobs") == 0

    async def test_defer_duplicate_id(self, scheduler: Scheduler) -> None:
        async with scheduler:
            await scheduler.defer("jobs", "a", delay=5, id="x")
            with pytest.raises(DuplicateIdError):
                await scheduler.defer("jobs", "b", delay=5, id="x")
            assert await scheduler.store.look("jobs", "x") == "a"

    async def test_current_delivery(self, scheduler: Scheduler, clock: FakeClock) -> None:
        seen: list[Delivery] = []

        @scheduler.handler("jobs")
        async def job(element: str) -> None:
            seen.append(current_delivery())

        async with scheduler:
            await scheduler.defer("jobs", "x", delay=2, id="j")
            await advance(clock, 3)
        (delivery,) = seen
        assert (delivery.name, delivery.id, delivery.attempt) == ("jobs", "j", 1)
        assert delivery.lateness == pytest.approx(1.0)
        with pytest.raises(rehydrate.SchedulerNotRunningError):
            current_delivery()

    async def test_a_task_a_handler_starts_keeps_its_delivery(
        self, scheduler: Scheduler, clock: FakeClock
    ) -> None:
        """A worker sets the delivery per element and does not reset it after each: a task that a
        handler starts (into a task group that outlives it) still sees its own delivery once the
        same worker has moved on to the next element."""
        seen: dict[str, str] = {}
        release = anyio.Event()

        async def later(element: str) -> None:
            await release.wait()
            seen[element] = current_delivery().element

        async with anyio.create_task_group() as outer:

            @scheduler.handler("jobs", concurrency=1)
            async def job(element: str) -> None:
                outer.start_soon(later, element)

            async with scheduler:
                await scheduler.defer("jobs", "first", id="a")
                await scheduler.defer("jobs", "second", id="b", delay=1)
                await advance(clock, 2)
                assert scheduler.stats().acked == 2
                release.set()
        assert seen == {"first": "first", "second": "second"}

    async def test_an_idle_worker_keeps_no_delivery_alive(
        self, scheduler: Scheduler, clock: FakeClock
    ) -> None:
        """The delivery a worker set for its last element (and the element with it) is let go
        once the worker has nothing more to run."""
        refs: list[weakref.ref[Delivery]] = []

        @scheduler.handler("jobs", concurrency=1)
        async def job(element: str) -> None:
            refs.append(weakref.ref(current_delivery()))

        async with scheduler:
            await scheduler.defer("jobs", "x")
            await settle()
            assert scheduler.stats().acked == 1
            gc.collect()
            assert [ref() for ref in refs] == [None]

    async def test_sync_handler_runs_in_a_thread(self, scheduler: Scheduler, clock: FakeClock) -> None:
        threads: list[int] = []

        @scheduler.handler("jobs")
        def job(element: str) -> None:
            threads.append(threading.get_ident())
            assert current_delivery().element == element

        async with scheduler:
            await scheduler.defer("jobs", "x")
            await settle()  # claimed and started in a thread
        # Leaving the block waited (within the grace period) for the thread to finish.
        assert scheduler.stats().acked == 1
        assert threads
        assert threads[0] != threading.get_ident()

    async def test_concurrency_is_bounded(self, scheduler: Scheduler, clock: FakeClock) -> None:
        release = anyio.Event()
        running = 0
        peak = 0

        @scheduler.handler("jobs", concurrency=2)
        async def job(element: int) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await release.wait()
            running -= 1

        async with scheduler:
            await scheduler.store.push_many("jobs", [(i, 0, None) for i in range(5)])
            await settle()
            assert scheduler.stats().in_flight == 2
            release.set()
            await settle()
        assert peak == 2
        assert scheduler.stats().acked == 5

    async def test_a_burst_starts_every_handler_before_its_acks_go_out(
        self, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Bookkeeping after the handlers' starts: 300 elements due at once (three claims of 100)
        all start before the first ack is sent, and their acks go out in a few batches."""
        # The acks wait for the starts at most a few real milliseconds, which a loaded machine
        # can take to start 300 handlers: a longer bound here, so the order alone is tested.
        monkeypatch.setattr(_runner, "_BOOKKEEPING_DELAY", 30.0)
        timeline: list[tuple[str, int]] = []

        class Recording(MemoryStore):
            async def ack(self, name: str, claims: Any) -> list[bool]:
                pairs = list(claims)
                timeline.append(("ack", len(pairs)))
                return await super().ack(name, pairs)

        async with Recording(clock=clock) as store:
            scheduler = Scheduler(store=store, grace=0.5)

            @scheduler.handler("jobs", concurrency=1000)
            async def job(element: int) -> None:
                timeline.append(("start", element))

            await store.push_many("jobs", [(i, 0, None) for i in range(300)])
            async with scheduler:
                await settle()
                for _ in range(100):  # the acks may wait a few real milliseconds for the starts
                    if scheduler.stats().acked == 300:
                        break
                    await anyio.sleep(0.01)
            assert scheduler.stats().acked == 300
        kinds = [kind for kind, _ in timeline]
        assert kinds.count("start") == 300
        last_start = len(kinds) - 1 - kinds[::-1].index("start")
        assert kinds.index("ack") > last_start  # no ack between two starts
        assert sum(n for kind, n in timeline if kind == "ack") == 300
        assert kinds.count("ack") <= 3

    async def test_handler_registered_while_running(self, scheduler: Scheduler, clock: FakeClock) -> None:
        got: list[str] = []
        async with scheduler:
            await scheduler.defer("late", "x")

            @scheduler.handler("late")
            async def job(element: str) -> None:
                got.append(element)

            await settle()
            assert got == ["x"]

    async def test_registration_errors(self, scheduler: Scheduler) -> None:
        @scheduler.handler("jobs")
        async def job(element: str) -> None: ...

        with pytest.raises(InvalidArgumentError, match="already"):
            scheduler.handler("jobs")
        bad: list[dict[str, Any]] = [
            {"lease": 0},
            {"lease": -1},
            {"concurrency": 0},
            {"batch": 0},
            {"retry": 3},
        ]
        for kwargs in bad:
            with pytest.raises(InvalidArgumentError):
                scheduler.handler("other", **kwargs)
        with pytest.raises(InvalidArgumentError):
            scheduler.handler("")


class TestAtLeastOnce:
    async def test_redelivery_after_a_dead_worker(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        """A worker claims and dies: once its lease runs out, the element is delivered again."""
        await store.push("jobs", "x", ttl=0, id="j")
        await store.claim("jobs", lease=30)  # ... and the worker dies here
        attempts: list[int] = []

        @scheduler.handler("jobs")
        async def job(element: str) -> None:
            attempts.append(current_delivery().attempt)

        async with scheduler:
            await advance(clock, 29)
            assert attempts == []
            await advance(clock, 1)
            assert attempts == [2]
            assert await store.size("jobs") == 0

    async def test_stale_ack_does_nothing(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        release = anyio.Event()

        @scheduler.handler("jobs", lease=10)
        async def job(element: str) -> None:
            await release.wait()

        async with scheduler:
            await scheduler.defer("jobs", "x", id="j")
            await settle()
            # Someone takes the element away from the running handler and claims it anew.
            assert await store.reschedule("jobs", "j", ttl=0)
            (other,) = await store.claim("jobs", lease=60)
            assert other.attempt == 2
            release.set()
            await settle()
            info = await store.info("jobs", "j")
            assert info is not None
            assert (info.attempt, info.claimed) == (2, True)  # the stale ack left it alone
            assert scheduler.stats().lost == 1
            assert scheduler.stats().acked == 0

    async def test_cancel_and_defer_again_while_the_handler_runs(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        """Debouncing by cancel + defer under the same id while the old element's handler runs:
        the old handler's ack must not delete the new element (both are attempt 1)."""
        releases = {"v1": anyio.Event(), "v2": anyio.Event()}
        done: list[str] = []

        @scheduler.handler("docs", lease=10)
        async def save(element: str) -> None:
            await releases[element].wait()
            done.append(element)

        async with scheduler:
            await scheduler.defer("docs", "v1", id="doc")
            await settle()  # v1's handler is running
            assert await scheduler.cancel("docs", "doc") == "v1"
            await scheduler.defer("docs", "v2", id="doc")
            await settle()  # v2's handler is running too
            releases["v1"].set()
            await settle()
            assert await store.look("docs", "doc") == "v2"  # v1's ack was fenced out
            assert scheduler.stats().lost == 1
            releases["v2"].set()
            await settle()
            assert done == ["v1", "v2"]
            assert await store.size("docs") == 0
            assert scheduler.stats().acked == 1

    async def test_defer_replace_debounces(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        got: list[str] = []

        @scheduler.handler("docs")
        async def save(element: str) -> None:
            got.append(element)

        async with scheduler:
            for n in range(5):  # an edit every second, each pushing the save 3 s later
                await scheduler.defer("docs", f"v{n}", id="doc", delay=3, replace=True)
                await advance(clock, 1)
            assert got == []
            await advance(clock, 2)
            assert got == ["v4"]
            await scheduler.defer("docs", "a", id="x", delay=9)
            with pytest.raises(DuplicateIdError):  # without replace
                await scheduler.defer("docs", "b", id="x", delay=9)

    async def test_slow_handler_lease_is_extended(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        release = anyio.Event()
        calls = 0

        @scheduler.handler("jobs", lease=10)
        async def job(element: str) -> None:
            nonlocal calls
            calls += 1
            await release.wait()

        async with scheduler:
            await scheduler.defer("jobs", "slow", id="s")
            await settle()
            for _ in range(10):  # 50 s: five times the lease
                await advance(clock, 5)
                assert await store.claim("jobs", lease=1) == []
            release.set()
            await settle()
            assert calls == 1
            assert await store.size("jobs") == 0
            assert scheduler.stats().acked == 1

    async def test_a_blocked_event_loop_is_reported(self, scheduler: Scheduler, clock: FakeClock) -> None:
        """A handler that blocks the loop past the lease makes a duplicate: the lease keeper says so.

        The handler moves the clock 5 s at once, as ``time.sleep(5)`` in an ``async def`` would.
        """
        release = anyio.Event()

        @scheduler.handler("jobs", lease=2)
        async def blocker(element: str) -> None:
            if current_delivery().attempt == 1:  # the lease runs out: it may be claimed again
                clock.advance(5)
            await release.wait()

        with capture_logs() as logs:
            async with scheduler:
                await scheduler.defer("jobs", "x", id="b")
                await settle()
                await settle()
                release.set()
        (stalled,) = [e for e in logs if e["event"] == "event loop blocked: a lease renewal came late"]
        assert stalled["log_level"] == "warning"
        assert stalled["stall"] == pytest.approx(4.0)  # the renewal was due at +1 (half the lease)
        assert stalled["lease"] == 2.0
        assert stalled["dehydrator"] == "jobs"
        assert stalled["handler"].endswith("blocker")

    async def test_renewals_on_time_are_not_reported(self, scheduler: Scheduler, clock: FakeClock) -> None:
        release = anyio.Event()

        @scheduler.handler("jobs", lease=2)
        async def slow(element: str) -> None:
            await release.wait()

        with capture_logs() as logs:
            async with scheduler:
                await scheduler.defer("jobs", "x")
                for _ in range(5):
                    await advance(clock, 1)
                release.set()
        assert not [e for e in logs if e["log_level"] == "warning"], logs

    async def test_a_failed_renewal_is_tried_again_before_the_lease_runs_out(self, clock: FakeClock) -> None:
        """A store error on ``extend`` is retried within a second (not half a lease later), and
        the element keeps running under its lease: no duplicate, no "lease lost"."""
        store = _FlakyExtend(failures=2, clock=clock)
        scheduler = Scheduler(store=store, grace=0.5)
        release = anyio.Event()
        calls = 0

        @scheduler.handler("jobs", lease=10)
        async def job(element: str) -> None:
            nonlocal calls
            calls += 1
            await release.wait()

        with capture_logs() as logs:
            async with scheduler:
                start = clock()
                await scheduler.defer("jobs", "slow", id="s")
                await settle()
                await advance(clock, 5)  # half the lease: the renewal fails (injected)
                await advance(clock, 1)  # tried again a second later: fails again
                await advance(clock, 1)  # and again: renewed, until 17
                assert store.extends == 3
                info = await store.info("jobs", "s")
                assert info is not None
                assert info.claimed
                assert info.due == pytest.approx(start + 17)  # the lease, renewed at +7 for 10 s
                await advance(clock, 9)  # past the first lease's end: renewed again at 12
                assert await store.claim("jobs", lease=1) == []  # still held
                release.set()
                await settle()
        assert calls == 1
        assert scheduler.stats().acked == 1
        failed = [e for e in logs if e["event"] == "lease renewal failed, will retry"]
        assert len(failed) == 2
        assert not [e for e in logs if e["event"].startswith("lease lost")]

    async def test_a_lost_lease_is_said_once(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        """An element pulled while its handler runs: the next renewal finds no claim to extend,
        says so once, and stops renewing it; its neighbours in the same claim go on."""
        release = anyio.Event()
        started: list[str] = []

        @scheduler.handler("jobs", lease=10)
        async def job(element: str) -> None:
            started.append(element)
            await release.wait()

        with capture_logs() as logs:
            async with scheduler:
                await store.push_many("jobs", [("a", 1, "a"), ("b", 1, "b")])  # claimed together
                await advance(clock, 1)
                assert sorted(started) == ["a", "b"]
                assert await store.pull("jobs", "a") == "a"
                await advance(clock, 5)  # the renewal: "a" is gone, "b" renewed
                await advance(clock, 5)  # and again: nothing more is said about "a"
                info = await store.info("jobs", "b")
                assert info is not None
                assert info.claimed
                release.set()
                await settle()
        lost = [e for e in logs if e["event"].startswith("lease lost")]
        assert [e["id"] for e in lost] == ["a"]

    async def test_the_keeper_forgets_finished_elements_at_once(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        """Nothing of a finished element stays in the lease keeper until its renewal would have
        come (half a lease): a burst of short deliveries leaves it empty."""

        @scheduler.handler("jobs", lease=60)
        async def job(element: int) -> None:
            pass

        async with scheduler:
            await store.push_many("jobs", [(i, 0, f"e{i}") for i in range(500)])
            await settle()
            assert scheduler.stats().acked == 500
            (runner,) = scheduler._runners.values()
            keeper = runner._keeper
            assert keeper._home == {}
            assert not any(keeper._batches.values())

    async def test_retry_with_backoff_then_dead_letter(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        attempts: list[int] = []

        @scheduler.handler("jobs", retry=Retry(attempts=3, backoff=NO_JITTER))
        async def job(element: str) -> None:
            attempts.append(current_delivery().attempt)
            raise ValueError("boom")

        async with scheduler:
            await scheduler.defer("jobs", {"n": 1}, id="j")
            await settle()
            assert attempts == [1]
            await advance(clock, 0.9)
            assert attempts == [1]
            await advance(clock, 0.1)  # first backoff: 1 s
            assert attempts == [1, 2]
            await advance(clock, 1.9)
            assert attempts == [1, 2]
            await advance(clock, 0.1)  # second backoff: 2 s
            assert attempts == [1, 2, 3]
            assert await store.size("jobs") == 0
            (letter,) = await scheduler.dead_letters("jobs")
            assert letter.id == "j"
            assert letter.element == {"n": 1}
            assert letter.attempts == 3
            assert "boom" in letter.error
            stats = scheduler.stats()
            assert (stats.retried, stats.dead_lettered, stats.acked) == (2, 1, 0)
            # Requeued, it starts over from attempt 1.
            assert await scheduler.requeue("jobs") == ["j"]
            await settle()
            assert attempts[-1] == 1
            assert await scheduler.dead_letters("jobs") == []

    async def test_a_graceful_stop_uses_up_no_attempt(self, store: MemoryStore, clock: FakeClock) -> None:
        """Two deploys during a long job: each graceful stop cuts the run short and hands the
        element back, which is no attempt. With ``Retry(attempts=2)``, the run after them that
        fails is attempt 1 and is retried; only the retry's failure dead-letters it."""
        await store.push("jobs", "long", ttl=0, id="j")
        runs: list[int] = []

        def deploy() -> Scheduler:
            scheduler = Scheduler(store=store, grace=0)

            @scheduler.handler("jobs", retry=Retry(attempts=2, backoff=NO_JITTER))
            async def job(element: str) -> None:
                runs.append(current_delivery().attempt)
                if len(runs) <= 2:
                    await anyio.sleep_forever()  # the long job, cut short by the stop
                raise ValueError("boom")

            return scheduler

        for n in (1, 2):
            async with deploy():  # leaving it stops the scheduler, as SIGTERM does a worker's
                await settle()
                assert runs == [1] * n
            info = await store.info("jobs", "j")
            assert info is not None
            assert (info.claimed, info.attempt, info.due) == (False, 0, clock())  # due again at once
        scheduler = deploy()
        with capture_logs() as logs:
            async with scheduler:
                await settle()
                assert runs == [1, 1, 1]  # the third delivery fails once...
                assert await scheduler.dead_letters("jobs") == []
                info = await store.info("jobs", "j")
                assert info is not None
                assert (info.claimed, info.attempt) == (False, 1)  # ... and is retried in 1 s
                await advance(clock, 1)
                assert runs == [1, 1, 1, 2]
                (letter,) = await scheduler.dead_letters("jobs")
        assert letter.attempts == 2
        failures = [e for e in logs if e["event"].startswith("handler failed")]
        assert [(e["event"], e["attempt"], e.get("reason")) for e in failures] == [
            ("handler failed, will retry", 1, None),
            ("handler failed: dead-lettered", 2, "last attempt"),
        ]

    async def test_a_lost_lease_still_counts_as_an_attempt(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        """A worker that dies mid-run cannot hand its element back: once its lease runs out the
        store cannot tell that from a failed run, and the redelivery counts it. With
        ``Retry(attempts=2)`` the next failure is the last attempt."""
        await store.push("jobs", "x", ttl=0, id="j")
        (lost,) = await store.claim("jobs", lease=30)  # ... and the worker dies here
        assert lost.attempt == 1
        runs: list[int] = []

        @scheduler.handler("jobs", retry=Retry(attempts=2, backoff=NO_JITTER))
        async def job(element: str) -> None:
            runs.append(current_delivery().attempt)
            raise ValueError("boom")

        async with scheduler:
            await advance(clock, 30)
            assert runs == [2]
            (letter,) = await scheduler.dead_letters("jobs")
            assert letter.attempts == 2

    async def test_failures_are_logged_with_their_traceback(
        self, scheduler: Scheduler, clock: FakeClock
    ) -> None:
        """``exc_info`` rides with every failure, so a console or JSON log shows where it failed."""

        @scheduler.handler("jobs", retry=Retry(attempts=2, backoff=NO_JITTER))
        async def broken(element: str) -> None:
            raise ValueError(f"boom {element}")

        with capture_logs() as logs:
            async with scheduler:
                await scheduler.defer("jobs", "x", id="f")
                await advance(clock, 0)
                await advance(clock, 1)
        failures = [e for e in logs if e["event"].startswith("handler failed")]
        assert [(e["event"], e["attempt"]) for e in failures] == [
            ("handler failed, will retry", 1),
            ("handler failed: dead-lettered", 2),
        ]
        assert failures[1]["reason"] == "last attempt"
        for event in failures:
            assert isinstance(event["exc_info"], ValueError)
            assert event["handler"].endswith("broken")
            assert "error" not in event  # no repr: the traceback says more
            rendered = structlog.processors.format_exc_info(None, "warning", dict(event))
            assert "Traceback" in rendered["exception"]
            assert "in broken" in rendered["exception"]
            assert "ValueError: boom x" in rendered["exception"]

    async def test_only_the_errors_in_on_are_retried(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        attempts: dict[str, list[int]] = {"flaky": [], "broken": [], "asks": []}

        @scheduler.handler("jobs", retry=Retry(attempts=3, backoff=NO_JITTER, on=ConnectionError))
        async def job(element: str) -> None:
            attempts[element].append(current_delivery().attempt)
            if element == "flaky" and current_delivery().attempt == 1:
                raise ConnectionError("reset by peer")
            if element == "broken":
                raise ValueError("cannot parse")
            if element == "asks" and current_delivery().attempt == 1:
                raise Retry(delay=5)  # an explicit Retry is always retried

        async with scheduler:
            for element in attempts:
                await scheduler.defer("jobs", element, id=element)
            await settle()
            (letter,) = await scheduler.dead_letters("jobs")
            assert (letter.id, letter.attempts) == ("broken", 1)  # not retried: dead at once
            assert "cannot parse" in letter.error
            await advance(clock, 5)
            assert attempts == {"flaky": [1, 2], "broken": [1], "asks": [1, 2]}
            assert await store.size("jobs") == 0
            assert (scheduler.stats().retried, scheduler.stats().dead_lettered) == (2, 1)

    def test_bad_on(self) -> None:
        for bad in ((), "ValueError", (ValueError, 3), int):
            with pytest.raises(InvalidArgumentError, match="on must be"):
                Retry(on=bad)
        assert Retry(on=KeyError).on == (KeyError,)
        assert Retry().on == (Exception,)

    async def test_raised_retry_asks_for_a_delay(self, scheduler: Scheduler, clock: FakeClock) -> None:
        attempts: list[int] = []

        @scheduler.handler("jobs", retry=Retry(attempts=5, backoff=NO_JITTER))
        async def job(element: str) -> None:
            attempts.append(current_delivery().attempt)
            if len(attempts) == 1:
                raise Retry(delay=42)

        async with scheduler:
            await scheduler.defer("jobs", "x")
            await settle()
            await advance(clock, 41)
            assert attempts == [1]
            await advance(clock, 1)
            assert attempts == [1, 2]
            assert scheduler.stats().acked == 1

    async def test_requeue_keeps_a_dead_letter_whose_id_is_live(
        self, scheduler: Scheduler, store: MemoryStore
    ) -> None:
        async with scheduler:
            await store.push(
                "jobs.dead", {"element": "old", "error": "", "attempts": 1, "failed_at": 0}, ttl=999, id="x"
            )
            await store.push("jobs", "new", ttl=999, id="x")
            assert await scheduler.requeue("jobs") == []
            assert len(await scheduler.dead_letters("jobs")) == 1


class TestShutdown:
    async def test_an_error_in_the_body_comes_out_as_itself(self, scheduler: Scheduler) -> None:
        @scheduler.handler("jobs")
        async def job(element: str) -> None: ...

        async def twice() -> None:
            async with scheduler:
                await scheduler.defer("jobs", "x", id="a", delay=5)
                await scheduler.defer("jobs", "y", id="a", delay=5)

        with pytest.raises(DuplicateIdError):  # not an ExceptionGroup around it
            await twice()

    async def test_a_stop_before_the_start_is_not_lost(self, scheduler: Scheduler) -> None:
        """A SIGTERM that arrives while the store opens stops the run at once; the run after it
        runs as usual."""
        got = anyio.Event()

        @scheduler.handler("jobs")
        async def job(element: str) -> None:
            got.set()

        scheduler.stop()
        with anyio.fail_after(5):
            await scheduler.run()
        async with scheduler:
            await scheduler.defer("jobs", "x")
            with anyio.fail_after(5):
                await got.wait()

    async def test_an_owned_redis_store_opens_and_closes(self, request: pytest.FixtureRequest) -> None:
        """A scheduler given a URL owns the store; coredis's pool must close in its own scope."""
        from tests.redis_server import shared_server_url

        scheduler = Scheduler(shared_server_url(request.config), grace=0)
        async with scheduler:
            id = await scheduler.defer("rhtest-owned", "x", delay=60)
            assert await scheduler.cancel("rhtest-owned", id) == "x"

    async def test_running_handlers_get_a_grace_period(
        self, scheduler: Scheduler, store: MemoryStore
    ) -> None:
        finished = []

        @scheduler.handler("jobs")
        async def job(element: str) -> None:
            await anyio.sleep(0.05)
            finished.append(element)

        async with scheduler:
            await scheduler.defer("jobs", "x", id="j")
            await settle()
        assert finished == ["x"]
        assert await store.size("jobs") == 0

    async def test_a_running_thread_is_waited_for_not_handed_back(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        """A thread cannot be cancelled: its element is not handed back while it runs, but acked after.

        Handing it back (as once) let the element run again elsewhere while the thread went on to
        its side effect: twice. Meanwhile the lease is kept alive (the clock moves 5 leases).
        """
        scheduler = Scheduler(store=store, grace=0.01, sync_grace=30)
        entered, release = threading.Event(), threading.Event()
        finished: list[str] = []

        @scheduler.handler("jobs", lease=4)
        def job(element: str) -> None:
            entered.set()
            assert release.wait(10)
            finished.append(element)

        async with scheduler:
            await scheduler.defer("jobs", "x", id="j")
            assert await anyio.to_thread.run_sync(entered.wait, 10)
            scheduler.stop()
            await anyio.sleep(0.1)  # the grace has run out; the thread still runs
            for _ in range(10):
                await advance(clock, 2)  # half the lease: renewed each time
            info = await store.info("jobs", "j")
            assert info is not None
            assert info.claimed  # neither handed back nor lost
            assert info.attempt == 1
            assert await store.claim("jobs", lease=1) == []
            release.set()
        assert finished == ["x"]
        assert await store.size("jobs") == 0  # acked: it will not run again
        assert scheduler.stats().acked == 1

    async def test_a_thread_past_the_hard_limit_is_left_to_its_lease(
        self, store: MemoryStore, clock: FakeClock
    ) -> None:
        """Past ``grace + sync_grace`` shutdown gives up on the thread: no ack, no hand-back, a warning."""
        scheduler = Scheduler(store=store, grace=0.01, sync_grace=0.05)
        entered, release, ended = threading.Event(), threading.Event(), threading.Event()

        @scheduler.handler("jobs", lease=4)
        def job(element: str) -> None:
            entered.set()
            release.wait(10)
            ended.set()

        with capture_logs() as logs:
            async with scheduler:
                await scheduler.defer("jobs", "x", id="j")
                assert await anyio.to_thread.run_sync(entered.wait, 10)
        try:
            info = await store.info("jobs", "j")
            assert info is not None
            assert info.claimed  # due again only when its lease runs out
            assert info.due == pytest.approx(clock() + 4)
            assert scheduler.stats().acked == 0
            (gave_up,) = [e for e in logs if e["event"] == "gave up waiting for a handler thread"]
            assert gave_up["id"] == "j"
            assert gave_up["log_level"] == "warning"
        finally:
            release.set()
            assert await anyio.to_thread.run_sync(ended.wait, 10)

    async def test_unfinished_elements_stay_in_the_store(
        self, scheduler: Scheduler, store: MemoryStore
    ) -> None:
        started = anyio.Event()

        @scheduler.handler("jobs", lease=300)
        async def job(element: str) -> None:
            started.set()
            await anyio.sleep_forever()

        async with scheduler:
            await scheduler.defer("jobs", "x", id="j")
            await started.wait()
        # Cancelled after the grace period: handed back, due at once, nothing lost.
        info = await store.info("jobs", "j")
        assert info is not None
        assert not info.claimed
        assert await store.xpoll("jobs") == ["j"]

    async def test_no_claims_after_stop(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        got: list[str] = []

        @scheduler.handler("jobs")
        async def job(element: str) -> None:
            got.append(element)

        async with scheduler:
            scheduler.stop()
            await settle()
            await scheduler.defer("jobs", "x")
            await advance(clock, 1)
        assert got == []
        assert await store.size("jobs") == 1

    async def test_every_ack_is_sent_and_counted_on_exit(
        self, scheduler: Scheduler, store: MemoryStore
    ) -> None:
        done = anyio.Event()
        count = 0

        @scheduler.handler("jobs", concurrency=50)
        async def job(element: int) -> None:
            nonlocal count
            count += 1
            if count == 500:
                done.set()

        await store.push_many("jobs", [(i, 0, None) for i in range(500)])
        async with scheduler:
            await done.wait()
        assert scheduler.stats().acked == 500
        assert await store.size("jobs") == 0

    async def test_run_until_stopped(self, scheduler: Scheduler) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(scheduler.run)
            await settle()
            scheduler.stop()


class TestChannels:
    async def test_deliveries_ack_and_come_back(
        self, scheduler: Scheduler, store: MemoryStore, clock: FakeClock
    ) -> None:
        async with scheduler:
            await scheduler.defer("inbox", "a", id="a")
            await scheduler.defer("inbox", "b", id="b", delay=1)
            async with scheduler.channel("inbox", lease=30) as deliveries:
                first = await deliveries.receive()
                assert (first.id, first.element, first.attempt) == ("a", "a", 1)
                assert await first.ack() is True
                await advance(clock, 1)
                second = await deliveries.receive()
                assert second.id == "b"
                # Not acked: it comes back after its lease.
                await advance(clock, 30)
                again = await deliveries.receive()
                assert (again.id, again.attempt) == ("b", 2)
                assert await second.ack() is False  # fenced: the old delivery lost its claim
                assert await again.retry(5) is True
                await advance(clock, 5)
                last = await deliveries.receive()
                assert (last.id, last.attempt) == ("b", 3)
                assert await last.extend(60) is not None
                assert await last.ack() is True
            assert await store.size("inbox") == 0
            stats = scheduler.stats()
            assert (stats.delivered, stats.acked, stats.retried, stats.lost) == (4, 2, 1, 1)

    async def test_iterate(self, scheduler: Scheduler, clock: FakeClock) -> None:
        async with scheduler:
            await scheduler.store.push_many("inbox", [(i, 0, None) for i in range(10)])
            got = []
            async with scheduler.channel("inbox", prefetch=3) as deliveries:
                async for delivery in deliveries:
                    got.append(delivery.element)
                    await delivery.ack()
                    if len(got) == 10:
                        break
            assert got == list(range(10))

    async def test_bad_arguments(self, scheduler: Scheduler) -> None:
        for kwargs in ({"lease": 0}, {"prefetch": -1}, {"batch": 0}):
            with pytest.raises(InvalidArgumentError):
                async with scheduler.channel("inbox", **kwargs):
                    pass


class TestStats:
    async def test_lateness_summary(self, scheduler: Scheduler, clock: FakeClock) -> None:
        @scheduler.handler("jobs", concurrency=1)
        async def job(element: int) -> None: ...

        async with scheduler:
            for i in range(100):
                await scheduler.store.push("jobs", i, ttl=i / 100)
            await advance(clock, 1)
        stats = scheduler.stats()
        assert stats.delivered == stats.acked == 100
        assert stats.lateness_max == pytest.approx(0.99)  # element 0 was due at once
        assert stats.lateness_p50 == pytest.approx(0.5, abs=0.02)
        assert stats.lateness_p99 == pytest.approx(0.99, abs=0.02)


class _DownForHeartbeats(MemoryStore):
    """A memory store whose worker registry is unreachable until ``up`` (a store outage that
    hits heartbeats only, so the scheduler's own work shows it carries on)."""

    up = False

    async def heartbeat(self, worker: str, data: Any, *, ttl: Any) -> None:
        if not self.up:
            raise rehydrate.StoreUnavailableError("registry down")
        await super().heartbeat(worker, data, ttl=ttl)


class TestHeartbeats:
    async def test_registers_refreshes_and_deregisters(
        self, scheduler: Scheduler, clock: FakeClock, anyio_backend_name: str
    ) -> None:
        """The first heartbeat is sent before ``async with`` returns, then one every interval
        (on the heartbeat's clock) with fresh counters; stopping deregisters the worker."""
        scheduler._heartbeat_clock = clock
        scheduler.heartbeat = 2

        @scheduler.handler("jobs", concurrency=3)
        async def job(element: int) -> None: ...

        async with scheduler:
            (w,) = await scheduler.store.workers()
            assert w.id == scheduler.worker_id
            assert w.alive
            assert w.expires - w.last_seen == pytest.approx(6)  # three intervals
            data = w.data
            assert data["pid"] == os.getpid()
            assert data["host"] == socket.gethostname()
            assert data["backend"] == anyio_backend_name
            assert data["version"] == rehydrate.__version__
            assert data["interval"] == 2
            assert data["handlers"]["jobs"]["concurrency"] == 3
            assert data["handlers"]["jobs"]["delivered"] == 0
            for i in range(4):
                await scheduler.defer("jobs", i, delay=1)
            await advance(clock, 1.5)  # delivered, 0.5 s late each; no heartbeat yet
            (w,) = await scheduler.store.workers()
            assert w.data["handlers"]["jobs"]["delivered"] == 0
            await advance(clock, 0.5)
            (w,) = await scheduler.store.workers()
            jobs = w.data["handlers"]["jobs"]
            assert (jobs["delivered"], jobs["acked"], jobs["in_flight"]) == (4, 4, 0)
            assert jobs["lateness_p50"] == pytest.approx(0.5)
            assert w.data["totals"]["delivered"] == 4
            assert w.age == 0
            assert scheduler.stats("jobs").delivered == scheduler.stats().delivered == 4
            assert scheduler.stats("other").delivered == 0
        assert await scheduler.store.workers() == []
        with pytest.raises(InvalidArgumentError):
            scheduler.heartbeat = 0

    async def test_a_failing_heartbeat_never_stops_the_scheduler(self, clock: FakeClock) -> None:
        async with _DownForHeartbeats(clock=clock) as store:
            scheduler = Scheduler(store, grace=0, heartbeat=1)
            scheduler._heartbeat_clock = clock
            done: list[int] = []

            @scheduler.handler("jobs")
            async def job(element: int) -> None:
                done.append(element)

            with capture_logs() as logs:
                async with scheduler:
                    await scheduler.defer("jobs", 1)
                    await advance(clock, 1)
                    await advance(clock, 1)
                    assert done == [1]
                    assert await store.workers() == []
                    store.up = True
                    await advance(clock, 1)
                    assert [w.id for w in await store.workers()] == [scheduler.worker_id]
            failures = [e for e in logs if e["event"].startswith("heartbeat failed")]
            assert len(failures) == 1  # logged once, not at every interval
            assert "registry down" in failures[0]["error"]
            assert any(e["event"] == "heartbeat sent again" for e in logs)

    async def test_none_sends_no_heartbeats(self, store: MemoryStore) -> None:
        async with Scheduler(store, heartbeat=None):
            assert await store.workers() == []

    async def test_a_producer_becomes_a_worker_when_it_serves(
        self, scheduler: Scheduler, clock: FakeClock, store: MemoryStore
    ) -> None:
        """No handlers: no heartbeat, however long it runs; a handler registered while it runs,
        or a channel, makes it a worker, which then beats every interval as any other."""
        scheduler._heartbeat_clock = clock
        scheduler.heartbeat = 1
        async with scheduler:
            await advance(clock, 5)
            assert await store.workers() == []

            @scheduler.handler("jobs")
            async def job(element: int) -> None: ...

            await settle()
            (w,) = await store.workers()
            assert (w.id, list(w.data["handlers"])) == (scheduler.worker_id, ["jobs"])
            await advance(clock, 1)
            (again,) = await store.workers()
            assert again.last_seen > w.last_seen
        assert await store.workers() == []

        consumer = Scheduler(store, grace=0, heartbeat=1)
        consumer._heartbeat_clock = clock
        async with consumer:
            await advance(clock, 2)
            assert await store.workers() == []
            async with consumer.channel("inbox"):
                await settle()
                (w,) = await store.workers()
                assert (w.id, list(w.data["handlers"])) == (consumer.worker_id, ["inbox"])
        assert await store.workers() == []

    async def test_producer_mode_then_a_channel(self, scheduler: Scheduler, store: MemoryStore) -> None:
        """``producer()`` serves no handler, even one registered while it runs; a channel opened
        in it consumes (and registers). Running it again while it runs is refused."""
        got: list[int] = []

        @scheduler.handler("jobs")
        async def job(element: int) -> None:
            got.append(element)

        async with scheduler.producer():
            with pytest.raises(rehydrate.RehydrateError, match="already running"):
                async with scheduler.producer():
                    pass

            @scheduler.handler("late")
            async def late(element: int) -> None:
                got.append(element)

            await scheduler.defer("jobs", 1)
            await scheduler.defer("late", 2)
            await settle()
            assert got == []
            assert await store.workers() == []
            async with scheduler.channel("jobs") as deliveries:
                delivery = await deliveries.receive()
                assert delivery.element == 1
                await delivery.ack()
                assert [w.id for w in await store.workers()] == [scheduler.worker_id]
        assert got == []
        assert await store.size("late") == 1
        async with scheduler:  # served as usual afterwards
            await settle()
        assert got == [2]

    async def test_a_store_that_declares_no_workers_is_sent_none(self, clock: FakeClock) -> None:
        """Heartbeats go by the store's declared capabilities (``Store.capabilities``): to a store
        that does not declare ``workers`` none is sent (logged once), its registry untouched,
        and the scheduler serves its handlers all the same."""

        class NoRegistry(MemoryStore):
            capabilities = Capabilities(claim_ahead=True)

        async with NoRegistry(clock=clock) as store:
            scheduler = Scheduler(store, grace=0, heartbeat=1)
            scheduler._heartbeat_clock = clock
            done: list[int] = []

            @scheduler.handler("jobs")
            async def job(element: int) -> None:
                done.append(element)

            with capture_logs() as logs:
                async with scheduler:
                    await scheduler.defer("jobs", 1)
                    await advance(clock, 1)
                    await advance(clock, 1)
                    assert done == [1]
                    assert await store.workers() == []
            unsupported = [e for e in logs if e["event"].startswith("heartbeats: this store")]
            assert len(unsupported) == 1


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
async def test_calls_outside_async_with_say_so(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """Every store gives the same error, which names the fix: the user has a scheduler, not a store."""
    if kind == "redis":
        from tests.redis_server import shared_server_url

        url = shared_server_url(request.config)
    else:
        url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path / 'x.db'}"}[kind]
    scheduler = Scheduler(url, grace=0)
    calls = [
        scheduler.defer("rhtest-outside", "x"),
        scheduler.cancel("rhtest-outside", "x"),
        scheduler.dead_letters("rhtest-outside"),
        scheduler.requeue("rhtest-outside"),
    ]
    for call in calls:
        with pytest.raises(rehydrate.SchedulerNotRunningError, match="async with scheduler"):
            await call
    with pytest.raises(rehydrate.SchedulerNotRunningError, match="async with scheduler"):
        async with scheduler.channel("rhtest-outside"):
            pass
    async with scheduler:
        id = await scheduler.defer("rhtest-outside", "x", delay=60)
        assert await scheduler.cancel("rhtest-outside", id) == "x"
    with pytest.raises(rehydrate.SchedulerNotRunningError):
        await scheduler.defer("rhtest-outside", "x")  # and after it, again


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
async def test_a_store_given_unopened_says_so_too(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """A store object the scheduler does not own: its not-open error becomes the scheduler's."""
    if kind == "redis":
        from tests.redis_server import shared_server_url

        url = shared_server_url(request.config)
    else:
        url = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path / 'x.db'}"}[kind]
    store = rehydrate.open_store(url)
    scheduler = Scheduler(store, grace=0)
    with pytest.raises(rehydrate.SchedulerNotRunningError, match="async with scheduler") as caught:
        await scheduler.defer("rhtest-given", "x")
    assert isinstance(caught.value.__cause__, rehydrate.StoreNotOpenError)
    with pytest.raises(rehydrate.SchedulerNotRunningError):
        await scheduler.dead_letters("rhtest-given")
    async with store:  # opened by its owner, as `rehydrate dead` does: no need to run the scheduler
        assert await scheduler.dead_letters("rhtest-given") == []
        id = await scheduler.defer("rhtest-given", "x", delay=60)
        assert await scheduler.cancel("rhtest-given", id) == "x"


def test_settings_are_validated() -> None:
    """``rehydrate worker --grace`` sets ``scheduler.grace``: the setter checks it as the constructor does."""
    scheduler = Scheduler(grace=timedelta(seconds=3), sync_grace=4)
    assert (scheduler.grace, scheduler.sync_grace) == (3.0, 4.0)
    scheduler.grace = 1
    scheduler.sync_grace = timedelta(minutes=1)
    scheduler.dead_letter_ttl = 60
    assert (scheduler.grace, scheduler.sync_grace, scheduler.dead_letter_ttl) == (1.0, 60.0, 60.0)
    for name in ("grace", "sync_grace", "dead_letter_ttl"):
        with pytest.raises(InvalidArgumentError, match=name):
            setattr(scheduler, name, -1)
        kwargs: dict[str, Any] = {name: float("nan")}
        with pytest.raises(InvalidArgumentError, match=name):
            Scheduler(**kwargs)
    with pytest.raises(InvalidArgumentError, match="rng"):
        Scheduler(rng=7)  # type: ignore[arg-type]


async def test_default_store_is_memory() -> None:
    s = Scheduler()
    assert isinstance(s.store, MemoryStore)
    async with s:
        assert await s.defer("x", 1) is not None


async def test_store_from_url() -> None:
    s = Scheduler("memory://")
    assert isinstance(s.store, MemoryStore)
    with pytest.raises(rehydrate.UnsupportedStoreError):
        Scheduler("ftp://nowhere")
    with pytest.raises(InvalidArgumentError):
        Scheduler(store=3)  # type: ignore[arg-type]


async def test_a_channel_hands_back_what_it_did_not_deliver(clock: FakeClock) -> None:
    """Leaving a channel releases the claims still waiting for the consumer: due again at once."""
    store = MemoryStore(clock=clock)
    scheduler = Scheduler(store=store, grace=0.5)
    async with scheduler:
        await store.push_many("inbox", [(i, 0, f"e{i}") for i in range(10)])
        async with scheduler.channel("inbox", prefetch=3) as deliveries:
            first = await deliveries.receive()
            await first.ack()
            await settle()  # the feeder fills the buffer and waits to send one more
        await settle()
        assert await store.size("inbox") == 9
        infos = [await store.info("inbox", id) for id in await store.ids("inbox")]
        assert not any(info.claimed for info in infos if info is not None)
        assert len(await store.xpoll("inbox")) == 9


class _FlakyExtend(MemoryStore):
    """A real memory store whose first ``failures`` lease renewals fail with a store error, as a
    store that is briefly unreachable does; counts every ``extend``."""

    def __init__(self, failures: int, **options: Any) -> None:
        super().__init__(**options)
        self.failures = failures
        self.extends = 0

    async def extend(self, name: str, id: str, *, lease: Any, token: int) -> float | None:
        self.extends += 1
        if self.failures:
            self.failures -= 1
            raise rehydrate.StoreUnavailableError("the store is down (injected)")
        return await super().extend(name, id, lease=lease, token=token)


class _FlakySubscriptions(MemoryStore):
    """A real memory store whose first ``failures`` subscriptions fail, as a store that is down
    when a handler starts, or loses its connection, does."""

    def __init__(self, failures: int, **options: Any) -> None:
        super().__init__(**options)
        self.failures = failures

    def subscribe(self, name: str) -> Any:
        if self.failures:
            self.failures -= 1
            raise rehydrate.StoreUnavailableError("the store is down (injected)")
        return super().subscribe(name)


async def test_a_store_that_cannot_subscribe_yet_is_retried() -> None:
    """A handler whose store cannot subscribe at first waits and tries again (logged), rather
    than ending its runner: the element deferred meanwhile is delivered once the store is back."""
    store = _FlakySubscriptions(failures=2)
    scheduler = Scheduler(store, grace=0)
    got = anyio.Event()

    @scheduler.handler("jobs")
    async def job(element: str) -> None:
        got.set()

    with capture_logs() as logs:
        async with store, scheduler:
            await scheduler.defer("jobs", "x")
            with anyio.fail_after(5):
                await got.wait()
    failures = [log for log in logs if log["event"] == "store call failed, retrying"]
    assert len(failures) == 2
    assert store.failures == 0


# -- handler signatures ----------------------------------------------------------------------------


class _Mailer:
    """Handlers that are not plain functions: a callable object and a bound method."""

    def __init__(self) -> None:
        self.got: list[tuple[str, Any]] = []

    async def __call__(self, element: Any) -> None:
        self.got.append(("call", element))

    def send(self, element: Any, urgent: bool = False) -> None:  # a plain def: run in a thread
        self.got.append(("send", element))

    async def nothing(self) -> None:
        pass


async def _two(prefix: Any, element: Any) -> None:
    pass


class _NoArgs:
    def __call__(self) -> None:
        pass


@pytest.mark.parametrize(
    ("func", "shown", "why"),
    [
        (_two, "tests.test_scheduler._two(prefix, element)", "missing a required argument: 'element'"),
        (_Mailer().nothing, "tests.test_scheduler._Mailer.nothing()", "too many positional arguments"),
        (functools.partial(_two, 1, 2), "functools.partial()", "too many positional arguments"),
        (_NoArgs(), "tests.test_scheduler._NoArgs()", "too many positional arguments"),
        (lambda *, element: None, "<lambda>(*, element)", "too many positional arguments"),
    ],
)
def test_a_handler_that_cannot_take_the_element_is_refused(func: Any, shown: str, why: str) -> None:
    """Registered, it failed every delivery with TypeError, each retried and dead-lettered."""
    scheduler = Scheduler()
    with pytest.raises(InvalidTypeError) as raised:
        scheduler.handler("jobs")(func)
    message = str(raised.value)
    assert message.startswith("the handler of 'jobs' must take one positional argument, the element: ")
    assert shown in message
    assert message.endswith(f"cannot ({why})")
    assert "\n" not in message
    assert scheduler.handlers == []  # nothing half-registered: a corrected handler may follow


def test_a_handler_without_parameters_is_refused_by_mypy_too() -> None:
    """The ``type: ignore`` below is mypy's refusal: with ``warn_unused_ignores`` (strict), the
    project's mypy run fails if the decorator ever accepts a handler that takes nothing."""
    scheduler = Scheduler()
    with pytest.raises(InvalidTypeError, match=r"noargs\(\) cannot"):

        @scheduler.handler("jobs")  # type: ignore[type-var]
        async def noargs() -> None:
            pass

    with pytest.raises(InvalidTypeError, match="must be callable, not int"):
        scheduler.handler("jobs")(3)  # type: ignore[type-var]


async def test_every_kind_of_handler_that_takes_the_element_is_served(
    scheduler: Scheduler, clock: FakeClock
) -> None:
    """Bound methods, partials, callable objects, ``*args`` and defaulted extra parameters,
    ``async def`` or plain ``def``: each can be called with the element, so each is served."""
    mailer = _Mailer()
    got: list[tuple[str, Any]] = []

    async def tagged(tag: str, element: Any) -> None:
        got.append((tag, element))

    def star(*args: Any) -> None:
        got.append(("star", args))

    scheduler.handler("object")(mailer)
    scheduler.handler("method")(mailer.send)
    scheduler.handler("partial")(functools.partial(tagged, "partial"))
    scheduler.handler("star")(star)
    scheduler.handler("builtin")(print)  # a signature that cannot be read is accepted
    async with scheduler:
        for name in ("object", "method", "partial", "star"):
            await scheduler.defer(name, name)
        await advance(clock, 0)
    assert sorted(mailer.got) == [("call", "object"), ("send", "method")]
    assert sorted(got) == [("partial", "partial"), ("star", ("star",))]
    assert scheduler.stats().acked == 4
