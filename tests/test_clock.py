"""Clocks: waits are deadlines in the clock's own time, and the clock knows how to wait for them."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import anyio
import pytest

from rehydrate._clock import RealClock, SystemClock, WallClock, wait_or_sleep, wall_reader
from rehydrate.abc import Clock
from rehydrate.testing import FakeClock

pytestmark = pytest.mark.anyio


def test_every_clock_is_a_clock() -> None:
    for clock in (SystemClock(), WallClock(), FakeClock()):
        assert isinstance(clock, Clock), clock


def test_a_clock_that_cannot_wait_for_a_deadline_is_not_one() -> None:
    class Bare:
        def __call__(self) -> float:
            return 0.0

        async def sleep(self, seconds: float) -> None: ...

    assert not isinstance(Bare(), Clock)


class TestFakeClock:
    async def test_move_on_at_is_cancelled_by_advance(self) -> None:
        clock = FakeClock(10.0)
        reached: list[float] = []

        async def waiter() -> None:
            with clock.move_on_at(15.0) as scope:
                await anyio.sleep_forever()
            assert scope.cancelled_caught
            reached.append(clock())

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            clock.advance(4.9)
            await anyio.wait_all_tasks_blocked()
            assert reached == []
            clock.advance(0.1)
        assert reached == [15.0]
        assert clock._alarms == []

    async def test_a_deadline_already_passed_is_a_checkpoint(self) -> None:
        clock = FakeClock(10.0)
        with clock.move_on_at(10.0) as scope:
            await anyio.sleep_forever()
        assert scope.cancelled_caught
        await clock.sleep_until(3.0)
        await clock.sleep(0)

    async def test_a_scope_left_early_leaves_no_alarm_behind(self) -> None:
        clock = FakeClock()
        for _ in range(3):
            with clock.move_on_at(100.0):
                await anyio.lowlevel.checkpoint()
        clock.advance(200)  # the dropped alarms cancel nothing
        assert clock._alarms == []

    async def test_wait_for_an_event_or_a_deadline(self) -> None:
        clock = FakeClock()
        event = anyio.Event()
        results: list[bool] = []

        async def waiter(deadline: float | None) -> None:
            results.append(await clock.wait(event, deadline))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, 5.0)
            await anyio.wait_all_tasks_blocked()
            clock.advance(5)
        assert results == [False]
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter, 50.0)
            tg.start_soon(waiter, None)
            await anyio.wait_all_tasks_blocked()
            event.set()
        assert results == [False, True, True]
        assert await wait_or_sleep(anyio.Event(), clock, 0) is False

    async def test_sleepers_wake_at_their_deadlines(self) -> None:
        clock = FakeClock()
        woke: list[str] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append(name)

        async with anyio.create_task_group() as tg:
            for name, seconds in [("c", 3), ("a", 1), ("b", 2)]:
                tg.start_soon(sleeper, name, seconds)
            for expected in (["a"], ["a", "b"]):
                await anyio.wait_all_tasks_blocked()
                clock.advance(1)
                await anyio.wait_all_tasks_blocked()
                assert woke == expected
            clock.advance(0.5)
            await anyio.wait_all_tasks_blocked()
            assert woke == ["a", "b"]
            clock.advance(0.5)
        assert woke == ["a", "b", "c"]


@pytest.mark.parametrize("make", [SystemClock, WallClock], ids=["system", "wall"])
class TestRealClocks:
    async def test_deadlines_are_in_the_clock_s_time(self, make: type[RealClock]) -> None:
        clock = make()
        start = time.monotonic()
        with clock.move_on_at(clock() + 0.02) as scope:
            await anyio.sleep_forever()
        assert scope.cancelled_caught
        await clock.sleep_until(clock() + 0.01)
        assert not await clock.wait(anyio.Event(), clock() + 0.01)
        assert 0.04 <= time.monotonic() - start < 5

    async def test_wait_returns_at_once_for_a_set_event(self, make: type[RealClock]) -> None:
        clock = make()
        event = anyio.Event()
        event.set()
        assert await clock.wait(event, clock() + 60)
        assert await wait_or_sleep(event, clock, None)


def test_wall_reader_reads_time_itself_for_the_real_clocks() -> None:
    """The runner reads the wall clock at every occurrence: for the system and wall clocks, whose
    ``wall()`` is ``time.time()``, it calls that directly; any other clock, a subclass of theirs
    included, is asked through its own ``wall``."""

    class Shifted(SystemClock):
        def wall(self) -> float:
            return time.time() + 3600

    fake = FakeClock(start=datetime(2026, 1, 1, tzinfo=UTC))
    assert wall_reader(SystemClock()) is time.time
    assert wall_reader(WallClock()) is time.time
    assert wall_reader(fake)() == fake.wall() == datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert wall_reader(Shifted())() == pytest.approx(time.time() + 3600, abs=5)
