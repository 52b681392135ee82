"""Recurring schedules on a memory store with a FakeClock that has a wall-clock origin.

Every async test runs on asyncio and trio; time moves by ``FakeClock.advance``, never by sleeping,
so a test crosses a daylight-saving change or a day of occurrences in milliseconds.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from structlog.testing import capture_logs

from rehydrate import (
    Admin,
    Cron,
    DuplicateIdError,
    Every,
    InvalidArgumentError,
    InvalidTypeError,
    Retry,
    ScheduleInfo,
    Scheduler,
    SyncScheduler,
    current_delivery,
)
from rehydrate._clock import wall
from rehydrate._core._records import Claim, ElementInfo
from rehydrate._core._triggers import Misfire
from rehydrate._core._validate import Seconds
from rehydrate._occurrences import rearm
from rehydrate._schedules import SKIP_GRACE, nominal_of, spread_offset, with_next
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # a Monday, noon UTC


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=T0)


@pytest.fixture
async def store(clock: FakeClock) -> AsyncIterator[MemoryStore]:
    async with MemoryStore(clock=clock) as store:
        yield store


async def advance(clock: FakeClock, seconds: float, step: float | None = None) -> None:
    """Move time by ``seconds`` (in steps of ``step``), letting every task run at each step."""
    left = seconds
    while True:
        await wait_all_tasks_blocked()
        move = left if step is None else min(step, left)
        clock.advance(move)
        left -= move
        await wait_all_tasks_blocked()
        if left <= 1e-9:
            return


def _ts(when: datetime) -> float:
    return when.timestamp()


class Recorder:
    """A handler that records each occurrence's nominal time and the element it was given."""

    def __init__(self) -> None:
        self.runs: list[datetime] = []
        self.elements: list[Any] = []
        self.attempts: list[int] = []

    async def __call__(self, element: Any) -> None:
        delivery = current_delivery()
        assert delivery.scheduled_for is not None
        self.runs.append(delivery.scheduled_for)
        self.elements.append(element)
        self.attempts.append(delivery.attempt)


class HoldsTheOld:
    """A handler that records each run (its element, ``scheduled_for``, and how many runs of it
    were going on then, itself included) and holds the run of the element ``"old"`` open until
    ``release`` is set."""

    def __init__(self) -> None:
        self.running = 0
        self.seen: list[tuple[Any, datetime, int]] = []
        self.release = anyio.Event()

    async def __call__(self, element: Any) -> None:
        self.running += 1
        when = current_delivery().scheduled_for
        assert when is not None
        self.seen.append((element, when, self.running))
        if element == "old":
            await self.release.wait()
        self.running -= 1


# -- the daylight-saving rule, through the scheduler ------------------------------------------------

#: A lease longer than any step of ``advance`` in the daylight-saving tests (see the first of them).
STEP_LEASE = 3600.0

DST_DAYS = {
    # zone: (spring-forward day, fall-back day), 2026
    "Europe/Paris": ((2026, 3, 29), (2026, 10, 25)),
    "America/New_York": ((2026, 3, 8), (2026, 11, 1)),
    "Australia/Lord_Howe": ((2026, 10, 4), (2026, 4, 5)),
}


@pytest.mark.parametrize("tz", sorted(DST_DAYS))
@pytest.mark.parametrize("season", ["spring", "fall"])
async def test_daily_cron_runs_once_on_a_daylight_saving_day(tz: str, season: str) -> None:
    zone = ZoneInfo(tz)
    day = DST_DAYS[tz][0 if season == "spring" else 1]
    local_midnight = datetime(*day, tzinfo=zone)
    clock = FakeClock(start=local_midnight - timedelta(hours=6))
    async with MemoryStore(clock=clock) as store:
        scheduler = Scheduler(store, grace=0)
        recorder = Recorder()
        # A lease longer than a step: the fake clock jumps 5 minutes at a time, and a 30-s lease
        # would run out inside one jump if the occurrence had not been seen to finish before it
        # (its redelivery would then count as a second run). This test is about the DST rule.
        scheduler.handler("nightly", schedule=Cron("30 2 * * *", tz=tz), lease=STEP_LEASE)(recorder)
        async with scheduler:
            await advance(clock, 30 * 3600, step=300)
            scheduler.stop()
    local = [run.astimezone(zone) for run in recorder.runs]
    on_the_day = [t for t in local if t.date() == local_midnight.date()]
    assert len(on_the_day) == 1, local
    (run,) = on_the_day
    if season == "spring" and tz != "Australia/Lord_Howe":
        assert (run.hour, run.minute) == (3, 0)  # 02:30 does not exist: the first instant after the gap
    else:
        assert (run.hour, run.minute) == (2, 30)
    assert all(r.tzinfo is UTC for r in recorder.runs)


@pytest.mark.parametrize("tz", ["Europe/Paris", "America/New_York"])
@pytest.mark.parametrize("season", ["spring", "fall"])
@pytest.mark.parametrize("expression", ["0 * * * *", "0 0-23 * * *"])  # every hour, however spelled
async def test_hourly_cron_never_skips_or_repeats_an_hour_of_real_time(
    tz: str, season: str, expression: str
) -> None:
    zone = ZoneInfo(tz)
    day = DST_DAYS[tz][0 if season == "spring" else 1]
    start = datetime(*day, tzinfo=zone) - timedelta(hours=2)
    runs = await _cron_runs(expression, tz, start, hours=8)
    assert len(runs) == 8
    gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(runs)}
    assert gaps == {3600.0}
    # Each ran at its nominal time (the fake clock stepped 10 minutes at a time).
    assert runs[0] == (start + timedelta(hours=1)).astimezone(UTC)


async def _cron_runs(expression: str, tz: str, start: datetime, *, hours: int) -> list[datetime]:
    """The nominal times a scheduler runs ``Cron(expression, tz=tz)`` at, declared at ``start``
    (plus a minute), over ``hours`` of a fake clock stepping 10 minutes at a time."""
    clock = FakeClock(start=start + timedelta(minutes=1))
    async with MemoryStore(clock=clock) as store:
        scheduler = Scheduler(store, grace=0)
        recorder = Recorder()
        scheduler.handler("cron", schedule=Cron(expression, tz=tz), lease=STEP_LEASE)(recorder)
        async with scheduler:
            await advance(clock, hours * 3600, step=600)
            scheduler.stop()
    return recorder.runs


LORD_HOWE = "Australia/Lord_Howe"  # clocks move 30 minutes, at 02:00 local either way


async def _run_cron_for_a_day(expression: str, tz: str, day: tuple[int, int, int]) -> list[datetime]:
    """The nominal times a scheduler runs ``Cron(expression, tz=tz)`` at over the local ``day``
    (from 2 hours before it to 2 hours after)."""
    zone = ZoneInfo(tz)
    midnight = datetime(*day, tzinfo=zone)
    runs = await _cron_runs(expression, tz, midnight - timedelta(hours=2), hours=28)
    next_midnight = datetime(*(midnight + timedelta(days=1)).timetuple()[:3], tzinfo=zone)
    return [r for r in runs if midnight <= r < next_midnight]


@pytest.mark.parametrize(
    ("season", "expression", "expected"),
    [
        # 02:00 -> 02:30 in spring: 02:15 does not exist, and runs once, at the end of the gap.
        ("spring", "15 2 * * *", (2, 30, 11.0)),
        ("spring", "45 1 * * *", (1, 45, 10.5)),
        # 02:00 -> 01:30 in autumn: 01:45 happens twice, and runs once, at the first of them.
        ("fall", "45 1 * * *", (1, 45, 11.0)),
        ("fall", "15 2 * * *", (2, 15, 10.5)),
        ("fall", "30 2 * * *", (2, 30, 10.5)),
    ],
)
async def test_lord_howe_s_half_hour_shifts_neither_skip_nor_repeat_a_daily_run(
    season: str, expression: str, expected: tuple[int, int, float]
) -> None:
    day = DST_DAYS[LORD_HOWE][0 if season == "spring" else 1]
    runs = await _run_cron_for_a_day(expression, LORD_HOWE, day)
    assert len(runs) == 1, runs
    local = runs[0].astimezone(ZoneInfo(LORD_HOWE))
    offset = local.utcoffset()
    assert offset is not None
    assert (local.hour, local.minute, offset.total_seconds() / 3600) == expected


@pytest.mark.parametrize("season", ["spring", "fall"])
async def test_hourly_cron_in_lord_howe_runs_each_local_hour_once(season: str) -> None:
    """No whole hour falls in Lord Howe's repeated half hour, and its skipped 02:00 runs at 02:30:
    each of the day's 24 local hours runs once, none skipped and none repeated. Real time between
    runs is an hour, but across a transition: 30 minutes after the spring gap (02:30 -> 03:00), 90
    minutes across the repeated half hour (01:00 -> 02:00)."""
    day = DST_DAYS[LORD_HOWE][0 if season == "spring" else 1]
    runs = await _run_cron_for_a_day("0 * * * *", LORD_HOWE, day)
    local = [r.astimezone(ZoneInfo(LORD_HOWE)) for r in runs]
    assert [t.hour for t in local] == list(range(24))
    assert len(set(runs)) == 24
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(runs)]
    if season == "spring":
        assert (local[2].hour, local[2].minute) == (2, 30)
        assert gaps == [3600.0] * 2 + [1800.0] + [3600.0] * 20
    else:
        assert all(t.minute == 0 for t in local)
        assert gaps == [3600.0] + [5400.0] + [3600.0] * 21


# -- the API ---------------------------------------------------------------------------------------


async def test_every_runs_on_an_anchored_grid_with_scheduled_for(
    store: MemoryStore, clock: FakeClock
) -> None:
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("sync")(recorder)
    async with scheduler:
        await scheduler.schedule("sync", Every(timedelta(minutes=30)), id="s", element={"k": 1})
        await advance(clock, 3600 + 1, step=60)
        scheduler.stop()
    # Every(start=None) is anchored where it was first filed, and runs at once.
    assert recorder.runs == [T0, T0 + timedelta(minutes=30), T0 + timedelta(minutes=60)]
    assert recorder.elements == [{"k": 1}] * 3


async def test_schedules_of_one_handler_each_follow_their_own_trigger(
    store: MemoryStore, clock: FakeClock
) -> None:
    """The runner keeps the last trigger it read (a burst's occurrences share one): schedules of
    other triggers, an equal trigger in another dict, and one whose stored trigger cannot be read
    (run once, then gone) each get their own, in any order."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("mixed")(recorder)
    async with scheduler:
        await scheduler.schedule("mixed", Every(timedelta(minutes=10)), id="a", element="a")
        await scheduler.schedule("mixed", Every(timedelta(minutes=15)), id="b", element="b")
        await scheduler.schedule("mixed", Every(timedelta(minutes=10)), id="a2", element="a2")
        damaged = dict(await store.look("mixed", "a"))
        damaged["trigger"], damaged["element"] = {"every": "ten minutes"}, "c"
        await store.push("mixed", damaged, ttl=0, id="c")
        await advance(clock, 30 * 60 + 1, step=60)
        scheduler.stop()
    runs: dict[str, list[datetime]] = {}
    for element, run in zip(recorder.elements, recorder.runs, strict=True):
        runs.setdefault(element, []).append(run)
    minutes = {key: [int((run - T0).total_seconds()) // 60 for run in value] for key, value in runs.items()}
    # The unreadable one ran once, at the nominal time it was copied with, and is gone.
    assert len(minutes.pop("c")) == 1
    assert minutes == {"a": [0, 10, 20, 30], "a2": [0, 10, 20, 30], "b": [0, 15, 30]}
    assert sorted(await store.ids("mixed")) == ["a", "a2", "b"]


@pytest.mark.parametrize("fraction", [1e-7, 3e-7, 5e-7, 7e-7])
async def test_every_without_a_start_is_due_at_once_whatever_the_time_within_its_microsecond(
    store: MemoryStore, clock: FakeClock, fraction: float
) -> None:
    """Filed at a time that is not a whole microsecond (a real clock's), an ``Every`` counts from
    that microsecond: its first occurrence is due at once, not a fraction of a microsecond later
    (which a fake clock that does not move would never reach)."""
    clock.advance(fraction)
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("sync")(recorder)
    async with scheduler:
        await scheduler.schedule("sync", Every(10), id="s")
        await advance(clock, 0)
        assert recorder.runs == [T0]
        await advance(clock, 10)
        assert recorder.runs == [T0, T0 + timedelta(seconds=10)]
        scheduler.stop()


async def test_a_slow_handler_neither_overlaps_nor_drifts(store: MemoryStore, clock: FakeClock) -> None:
    scheduler = Scheduler(store, grace=0)
    running = 0
    seen: list[tuple[datetime, int]] = []

    @scheduler.handler("slow", lease=60)
    async def slow(element: Any) -> None:
        nonlocal running
        running += 1
        when = current_delivery().scheduled_for
        assert when is not None
        seen.append((when, running))
        await clock.sleep(25)  # longer than the interval
        running -= 1

    async with scheduler:
        await scheduler.schedule("slow", Every(10), id="s", misfire="all")
        await advance(clock, 99, step=1)
        scheduler.stop()
        await advance(clock, 30, step=1)
    assert all(concurrent == 1 for _, concurrent in seen)
    # Each missed occurrence runs in turn ("all"), on the grid: never a time off it.
    assert [w for w, _ in seen] == [T0 + timedelta(seconds=10 * k) for k in range(len(seen))]
    assert len(seen) == 4  # at 0, 25, 50, 75 (each one after the other ended)


@pytest.mark.parametrize("misfire", ["coalesce", "all", "skip"])
async def test_a_new_trigger_during_a_run_waits_for_it(
    store: MemoryStore, clock: FakeClock, misfire: Misfire
) -> None:
    """``schedule()`` with another trigger while an occurrence runs: the new trigger's occurrences
    that pass during the run are missed meanwhile, not run beside it; once the run ends they
    follow the misfire policy, and the schedule goes on from the new trigger."""
    scheduler = Scheduler(store, grace=0)
    holder = HoldsTheOld()
    scheduler.handler("sync", lease=600)(holder)
    seen, release = holder.seen, holder.release

    async with scheduler:
        await scheduler.schedule("sync", Every(3600), id="s", element="old")  # runs at once
        await advance(clock, 1)
        assert [e for e, _, _ in seen] == ["old"]
        grace = timedelta(seconds=5) if misfire == "skip" else None
        await scheduler.schedule("sync", Every(10), id="s", element="new", misfire=misfire, grace=grace)
        info = await store.info("sync", "s")
        assert info is not None
        assert info.claimed  # still the run's: not filed beside it
        (during,) = await scheduler.schedules("sync")
        assert (during.trigger, during.element) == (Every(10), "new")
        assert during.next_run == T0 + timedelta(seconds=1)  # the new trigger's first: now
        await advance(clock, 33, step=1)  # its occurrences at 1, 11, 21 and 31 pass meanwhile
        assert [e for e, _, _ in seen] == ["old"]
        release.set()
        await advance(clock, 0)
        after_run = [w for e, w, _ in seen if e == "new"]
        await advance(clock, 10, step=1)
        scheduler.stop()
    assert all(concurrent == 1 for _, _, concurrent in seen)
    at = [int((w - T0).total_seconds()) for e, w, _ in seen if e == "new"]
    missed = [1, 11, 21, 31]
    if misfire == "coalesce":
        assert len(after_run) == 1
        assert at == [31, 41]  # the last one missed, then on the grid
    elif misfire == "all":
        assert at[: len(missed) + 1] == [*missed, 41]
    else:  # skip: those later than the grace (5 s) are dropped; 31 was 3 s late
        assert at == [31, 41]
    (after,) = await scheduler.schedules("sync")
    assert after.trigger == Every(10)


async def test_a_new_trigger_during_a_run_whose_first_comes_later_runs_then(
    store: MemoryStore, clock: FakeClock
) -> None:
    """A new trigger whose first occurrence comes after the run ends: the store files the schedule
    at once when the run ends (it cannot read the new time), and the runner that claims it files
    it again for that time without running it; it runs at its time."""
    scheduler = Scheduler(store, grace=0)
    seen: list[tuple[Any, datetime]] = []
    release = anyio.Event()

    @scheduler.handler("sync", lease=600)
    async def sync(element: Any) -> None:
        when = current_delivery().scheduled_for
        assert when is not None
        seen.append((element, when))
        if element == "old":
            await release.wait()

    async with scheduler:
        await scheduler.schedule("sync", Every(3600), id="s", element="old")
        await advance(clock, 1)
        start = T0 + timedelta(seconds=100)
        await scheduler.schedule("sync", Every(50, start=start), id="s", element="new")
        release.set()
        await advance(clock, 0)
        assert seen == [("old", T0)]
        info = await store.info("sync", "s")
        assert info is not None
        assert not info.claimed
        assert info.due - clock() == pytest.approx(99.0)  # filed for its time again, not run early
        await advance(clock, 99, step=1)
        scheduler.stop()
    assert seen == [("old", T0), ("new", start)]


@pytest.mark.parametrize("again", [False, True], ids=["removed", "filed-again"])
async def test_unschedule_during_a_run_and_a_schedule_filed_again_wait_for_it(
    store: MemoryStore, clock: FakeClock, again: bool
) -> None:
    """``unschedule`` while an occurrence runs: the run finishes and files nothing, the schedule
    is gone from every listing at once, and a schedule filed under the same id meanwhile waits
    for the run (it used to be filed beside it, its first occurrence running at once): once the
    run ends, its missed occurrences are coalesced into one run, and it goes on."""
    scheduler = Scheduler(store, grace=0)
    holder = HoldsTheOld()
    scheduler.handler("sync", lease=600)(holder)
    seen, release = holder.seen, holder.release

    async with scheduler:
        await scheduler.schedule("sync", Every(3600), id="s", element="old")  # runs at once
        await advance(clock, 1)
        assert await scheduler.unschedule("sync", "s") is True
        assert await scheduler.schedules("sync") == []
        assert await scheduler.unschedule("sync", "s") is False
        assert await scheduler.pause("sync", "s") is False
        assert await scheduler.run_now("sync", "s") is False  # (its element is the run's)
        if again:
            await scheduler.schedule("sync", Every(10), id="s", element="new")
            (during,) = await scheduler.schedules("sync")
            assert (during.trigger, during.element) == (Every(10), "new")
            # From now, and never at the running occurrence's time (whose key that is): a
            # microsecond later where the clock stands at a whole microsecond.
            assert during.next_run == T0 + timedelta(seconds=1, microseconds=1)
        info = await store.info("sync", "s")
        assert info is not None
        assert info.claimed  # still the run's: nothing filed beside it
        await advance(clock, 33, step=1)  # the new schedule's occurrences at 1, 11, 21, 31 pass
        assert [e for e, _, _ in seen] == ["old"]
        release.set()
        await advance(clock, 0)
        if not again:
            assert await store.size("sync") == 0
        await advance(clock, 10, step=1)
        scheduler.stop()
    assert all(concurrent == 1 for _, _, concurrent in seen)
    at = [int((w - T0).total_seconds()) for e, w, _ in seen if e == "new"]
    assert at == ([31, 41] if again else [])
    assert [e for e, _, _ in seen if e != "new"] == ["old"]


@pytest.mark.parametrize("again", [False, True], ids=["removed", "filed-again"])
async def test_a_schedule_unscheduled_during_a_run_whose_worker_died_goes(
    store: MemoryStore, clock: FakeClock, again: bool
) -> None:
    """Unscheduled while a worker that then died held an occurrence: once that claim's lease
    runs out, the runner that claims the element removes it; a ``schedule()`` made meanwhile
    runs then (not beside the dead worker's run, which its lease still covered)."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("sync", lease=60)(recorder)
    await scheduler.schedule("sync", Every(3600), id="s", element="old")  # (the store is open)
    (dead,) = await store.claim("sync", lease=60)  # a worker that dies with it
    async with scheduler:
        assert await scheduler.unschedule("sync", "s") is True
        if again:
            await scheduler.schedule("sync", Every(10), id="s", element="new")
        await advance(clock, 59, step=1)
        assert recorder.runs == []  # the claim still holds it
        await advance(clock, 2)
        if not again:
            assert await store.size("sync") == 0
        await advance(clock, 10, step=1)
        scheduler.stop()
    assert dead.element["element"] == "old"
    if again:
        # Written into the dead worker's claim, the new schedule comes back under it, as any
        # change made during a run whose worker died: its first occurrence as that claim's
        # retry (attempt 2), then on its grid from then on (those missed meanwhile coalesced).
        assert recorder.elements == ["new", "new", "new"]
        assert recorder.attempts == [2, 1, 1]
        assert recorder.runs == [T0 + timedelta(seconds=s, microseconds=1) for s in (0, 60, 70)]
    else:
        assert recorder.runs == []


async def test_a_removed_schedule_left_unclaimed_is_no_schedule(store: MemoryStore, clock: FakeClock) -> None:
    """A schedule unscheduled during a run whose worker died, before a runner claims it to remove
    it: no listing, pause, run now or second unschedule sees it, and ``schedule()`` files a new
    schedule in its place (no claim holds it back)."""
    from rehydrate._schedules import REMOVED

    scheduler = Scheduler(store, grace=0)
    await store.push("n", dict(REMOVED), ttl=0, id="x")
    async with scheduler:  # (no handler serves "n")
        assert await scheduler.schedules("n") == []
        assert await scheduler.run_now("n", "x") is False
        assert await scheduler.pause("n", "x") is False
        assert await scheduler.unschedule("n", "x") is False
        await scheduler.schedule("n", Every(60), id="x", element="e")
        (info,) = await scheduler.schedules("n")
        scheduler.stop()
    assert (info.id, info.element, info.next_run) == ("x", "e", T0)


async def test_cancel_on_a_schedule_removes_it_and_returns_its_element(store: MemoryStore) -> None:
    """``cancel`` is for one-shot work, but given a schedule's id it removes the schedule and
    returns the element it was given, not the envelope it is stored in."""
    scheduler = Scheduler(store, grace=0)
    async with scheduler:
        await scheduler.schedule("n", Every(60), id="s", element={"user": 7})
        assert await scheduler.cancel("n", "s") == {"user": 7}
        assert await scheduler.cancel("n", "s") is None
        assert await scheduler.schedules("n") == []
        scheduler.stop()


class ClaimsMeanwhile(MemoryStore):
    """A store shared with a worker of another process, which claims the schedule's due
    occurrence once ``armed``: just after the scheduler's first read (``moment`` "read") or just
    before its first write (``moment`` "write"), between a check that nothing runs and the
    change decided on it."""

    def __init__(self, clock: FakeClock, moment: str) -> None:
        super().__init__(clock=clock)
        self.moment = moment
        self.armed = False
        self.claims: list[Claim] = []

    async def _meanwhile(self, moment: str, name: str) -> None:
        if self.armed and moment == self.moment:
            self.armed = False
            self.claims += await self.claim(name, lease=60)

    async def read(self, name: str, id: str) -> tuple[Any, ElementInfo] | None:
        out = await super().read(name, id)
        await self._meanwhile("read", name)
        return out

    async def push(self, name: str, element: Any, **options: Any) -> str:
        await self._meanwhile("write", name)
        return await super().push(name, element, **options)

    async def pull(self, name: str, id: str) -> Any:
        await self._meanwhile("write", name)
        return await super().pull(name, id)

    async def update(self, name: str, id: str, element: Any, *, token: int | None = None) -> Any:
        await self._meanwhile("write", name)
        return await super().update(name, id, element, token=token)

    async def replace_if(self, name: str, items: Iterable[tuple[str, int, Any, Seconds]]) -> list[int | None]:
        await self._meanwhile("write", name)
        return await super().replace_if(name, items)

    async def update_if(self, name: str, id: str, revision: int, element: Any) -> int | None:
        await self._meanwhile("write", name)
        return await super().update_if(name, id, revision, element)

    async def pull_if(self, name: str, id: str, revision: int) -> bool:
        await self._meanwhile("write", name)
        return await super().pull_if(name, id, revision)


@pytest.mark.parametrize("moment", ["read", "write"])
@pytest.mark.parametrize("change", ["unschedule", "new trigger", "new element", "pause"])
async def test_an_occurrence_claimed_while_a_schedule_is_changed_is_not_run_over(
    clock: FakeClock, moment: str, change: str
) -> None:
    """An occurrence claimed by another process just after the scheduler read the schedule to
    change it (``unschedule``, ``schedule``, ``pause``) keeps its claim: the change is written
    into the element it holds and applies when its run ends. A check that nothing runs followed
    by a replace or a pull (now each conditional on the revision read) used to pull the
    occurrence from under its worker, fencing its end out, and a schedule filed after it came due
    beside the run."""
    scheduler = Scheduler(ClaimsMeanwhile(clock, moment), grace=0)
    store = scheduler.store
    assert isinstance(store, ClaimsMeanwhile)
    async with scheduler:  # (no handler serves "n": the other process does)
        await scheduler.schedule("n", Every(60), id="s", element="old")  # due now
        store.armed = True
        if change == "unschedule":
            assert await scheduler.unschedule("n", "s") is True
            assert await scheduler.schedules("n") == []
        elif change == "new trigger":
            await scheduler.schedule("n", Every(10), id="s", element="old")
        elif change == "new element":
            await scheduler.schedule("n", Every(60), id="s", element="new")
        else:
            assert await scheduler.pause("n", "s") is True
        (running,) = store.claims
        info = await store.info("n", "s")
        assert info is not None
        assert (info.claimed, info.attempt) == (True, 1)  # still the run's, nothing beside it
        assert await store.size("n") == 1
        # The run ends: the worker files the next occurrence, as its runner does.
        following = with_next(running.element, nominal_of(running.element) + 60)
        assert await rearm(
            store, "n", [("s", running.token, running.revision, running.element, following, 60)]
        ) == [True]
        after = await store.look("n", "s")
        scheduler.stop()
    assert running.element["element"] == "old"
    if change == "unschedule":
        assert after is None
    elif change == "new trigger":
        assert after["trigger"] == {"every": 10.0}  # (re-planned, due at once for a runner)
    elif change == "new element":
        assert after["element"] == "new"
    else:
        assert after["paused"] is True


async def test_a_new_trigger_during_an_extra_run_starts_after_that_run(
    store: MemoryStore, clock: FakeClock
) -> None:
    """A new trigger given while an extra run (``run_now``) runs is planned from that run, not
    from the occurrence the extra run stood in front of: a daily schedule made hourly during a
    run asked for at 12:30 runs hourly from 13:00, not from the next day."""
    scheduler = Scheduler(store, grace=0)
    seen: list[tuple[Any, datetime]] = []
    release = anyio.Event()

    @scheduler.handler("digest", lease=600)
    async def digest(element: Any) -> None:
        when = current_delivery().scheduled_for
        assert when is not None
        seen.append((element, when))
        if element == "daily":
            await release.wait()

    async with scheduler:
        await scheduler.schedule("digest", Cron("0 14 * * *"), id="d", element="daily")
        await advance(clock, 30 * 60)
        assert await scheduler.run_now("digest", "d") is True
        await advance(clock, 60)
        assert seen == [("daily", T0 + timedelta(minutes=30))]
        await scheduler.schedule("digest", Cron("0 * * * *"), id="d", element="hourly")
        (during,) = await scheduler.schedules("digest")
        assert during.next_run == T0 + timedelta(hours=1)
        release.set()
        await advance(clock, 0)
        info = await store.info("digest", "d")
        assert info is not None
        assert not info.claimed  # filed for 13:00 again by the runner that claimed it at once
        await advance(clock, 150 * 60, step=60)
        scheduler.stop()
    assert seen == [
        ("daily", T0 + timedelta(minutes=30)),
        ("hourly", T0 + timedelta(hours=1)),
        ("hourly", T0 + timedelta(hours=2)),
        ("hourly", T0 + timedelta(hours=3)),
    ]


async def test_an_occurrence_made_due_early_is_filed_for_its_time(
    store: MemoryStore, clock: FakeClock
) -> None:
    """A schedule's element made due before its time by hand (``Store.reschedule``) is not run
    early: the runner files it again for its nominal time (``run_now`` runs one out of turn)."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("sync")(recorder)
    async with scheduler:
        await scheduler.schedule("sync", Every(60, start=T0 + timedelta(seconds=60)), id="s")
        assert await store.reschedule("sync", "s", ttl=0) is True
        await advance(clock, 0)
        assert recorder.runs == []
        info = await store.info("sync", "s")
        assert info is not None
        assert info.due - clock() == pytest.approx(60.0)
        await advance(clock, 60)
        scheduler.stop()
    assert recorder.runs == [T0 + timedelta(seconds=60)]


async def test_declared_schedules_are_upserted_and_move_nothing(store: MemoryStore, clock: FakeClock) -> None:
    def make() -> tuple[Scheduler, Recorder]:
        scheduler = Scheduler(store, grace=0)
        recorder = Recorder()
        scheduler.handler("digest", schedule=Cron("0 9 * * MON-FRI", tz="Europe/Paris"))(recorder)
        return scheduler, recorder

    first, _ = make()
    async with first:
        (info,) = await first.schedules("digest")
        first.stop()
    assert info == ScheduleInfo(
        id="digest",
        trigger=Cron("0 9 * * MON-FRI", tz="Europe/Paris"),
        next_run=datetime(2026, 1, 6, 8, 0, tzinfo=UTC),  # Tuesday 09:00 in Paris
        element=None,
        paused=False,
    )
    due_before = (await store.info("digest", "digest")).due  # type: ignore[union-attr]
    await advance(clock, 3600)
    # Ten workers restart and declare the same schedule, at once: nothing moves.
    schedulers = [make()[0] for _ in range(10)]
    async with anyio.create_task_group() as tg:
        for s in schedulers:
            tg.start_soon(s.run)
        await wait_all_tasks_blocked()
        after = await store.info("digest", "digest")
        assert after is not None
        assert after.due == due_before
        assert await store.size("digest") == 1
        for s in schedulers:
            s.stop()
    # A worker that declares another trigger moves it.
    changed = Scheduler(store, grace=0)
    changed.handler("digest", schedule=Cron("0 7 * * *"))(Recorder())
    async with changed:
        (info,) = await changed.schedules("digest")
        changed.stop()
    assert info.next_run == datetime(2026, 1, 6, 7, 0, tzinfo=UTC)


async def test_a_schedule_no_longer_declared_is_removed_at_start(
    store: MemoryStore, clock: FakeClock
) -> None:
    """The code is the source of truth for declared schedules: code that drops ``schedule=`` from
    a handler drops the schedule at its next start (as deleting a Celery beat entry does), while
    a schedule filed at run time, even under the handler's name, stays."""

    def start(**declared: Any) -> Scheduler:
        scheduler = Scheduler(store, grace=0)
        for name in ("digest", "sync", "taken"):
            scheduler.handler(name, schedule=declared.get(name))(Recorder())
        return scheduler

    first = start(digest=Every(3600), taken=Every(3600))
    async with first:
        await first.schedule("sync", Every(600), id="sync")  # at run time, under the handler's name
        await first.schedule("digest", Every(600), id="other")
        await first.schedule("taken", Every(60), id="taken")  # a declared one, changed at run time
        first.stop()
    assert await store.look("digest", "digest") is not None
    second = start()  # the same handlers, none declaring a schedule
    with capture_logs() as logs:
        async with second:
            kept = {
                name: [info.id for info in await second.schedules(name)]
                for name in ("digest", "sync", "taken")
            }
            second.stop()
    assert kept == {"digest": ["other"], "sync": ["sync"], "taken": ["taken"]}
    (removed,) = [entry for entry in logs if entry["event"].startswith("schedule removed")]
    assert removed["log_level"] == "warning"
    assert (removed["dehydrator"], removed["trigger"]) == ("digest", str(Every(3600)))
    third = start(digest=Every(3600))  # declared again: back, from now on
    async with third:
        (digest, _) = sorted(await third.schedules("digest"), key=lambda info: info.id)
        third.stop()
    assert (digest.id, digest.trigger) == ("digest", Every(3600))


async def test_a_schedule_no_longer_declared_waits_for_its_running_occurrence(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Dropped at a start while another process runs one of its occurrences: the run keeps its
    claim (the schedule is gone from the listings), and the schedule goes when the run ends."""
    first = Scheduler(store, grace=0)
    first.handler("digest", schedule=Every(3600))(Recorder())
    async with first:
        await advance(clock, 0)
        first.stop()
    clock.advance(3600)
    (running,) = await store.claim("digest", lease=60)  # another process's worker runs it
    second = Scheduler(store, grace=0)
    second.handler("digest")(Recorder())
    async with second:
        assert await second.schedules("digest") == []
        info = await store.info("digest", "digest")
        assert info is not None
        assert info.claimed  # still the run's
        second.stop()
    following = with_next(running.element, nominal_of(running.element) + 3600)
    ended = [("digest", running.token, running.revision, running.element, following, 3600)]
    assert await rearm(store, "digest", ended) == [True]
    assert await store.size("digest") == 0


async def test_a_declared_schedule_takes_misfire_and_grace_and_the_code_wins_at_start(
    store: MemoryStore, clock: FakeClock
) -> None:
    def make(**policy: Any) -> Scheduler:
        scheduler = Scheduler(store, grace=0)
        scheduler.handler("job", schedule=Every(10), **policy)(Recorder())
        return scheduler

    first = make(misfire="skip", grace=timedelta(seconds=30))
    async with first:
        (info,) = await first.schedules("job")
        assert (info.misfire, info.grace) == ("skip", 30.0)
        # Changed at run time on the declared id: it holds until the next start.
        await first.schedule("job", Every(10), id="job", misfire="all")
        (info,) = await first.schedules("job")
        assert (info.misfire, info.grace) == ("all", None)
        first.stop()
    again = make(misfire="skip", grace=30)
    async with again:
        (info,) = await again.schedules("job")
        assert (info.misfire, info.grace) == ("skip", 30.0)
        again.stop()
    # Declared with the default policy: coalesce, no grace.
    plain = make()
    async with plain:
        (info,) = await plain.schedules("job")
        assert (info.misfire, info.grace) == ("coalesce", None)
        plain.stop()
    # "skip" declared without a grace gets the default one.
    skip = make(misfire="skip")
    async with skip:
        (info,) = await skip.schedules("job")
        assert (info.misfire, info.grace) == ("skip", SKIP_GRACE)
        skip.stop()


async def test_a_declared_schedule_runs_its_misfire_policy_after_downtime(
    store: MemoryStore, clock: FakeClock
) -> None:
    def make(recorder: Recorder) -> Scheduler:
        scheduler = Scheduler(store, grace=0)
        scheduler.handler("job", schedule=Every(10, start=T0), misfire="all")(recorder)
        return scheduler

    before, after = Recorder(), Recorder()
    async with make(before) as first:
        await advance(clock, 5)
        first.stop()
    await advance(clock, 30)  # down from 5 to 35: 10, 20 and 30 were missed
    async with make(after) as second:
        await advance(clock, 0)
        second.stop()
    assert before.runs == [T0]
    assert after.runs == [T0 + timedelta(seconds=s) for s in (10, 20, 30)]


def test_handler_checks_misfire_and_grace_when_registering() -> None:
    scheduler = Scheduler()
    with pytest.raises(InvalidArgumentError, match="misfire, grace and spread go with schedule="):
        scheduler.handler("a", misfire="all")
    with pytest.raises(InvalidArgumentError, match="misfire, grace and spread go with schedule="):
        scheduler.handler("a", grace=5)
    with pytest.raises(InvalidArgumentError, match="misfire, grace and spread go with schedule="):
        scheduler.handler("a", spread=60)
    with pytest.raises(InvalidArgumentError, match="spread"):
        scheduler.handler("a", schedule=Every(1), spread=-1)
    with pytest.raises(InvalidTypeError, match="spread"):
        scheduler.handler("a", schedule=Every(1), spread="1m")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="misfire must be one of"):
        scheduler.handler("a", schedule=Every(1), misfire="never")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="grace must be positive"):
        scheduler.handler("a", schedule=Every(1), misfire="skip", grace=0)
    with pytest.raises(InvalidArgumentError, match="grace goes with misfire='skip' only"):
        scheduler.handler("a", schedule=Every(1), grace=5)
    with pytest.raises(InvalidTypeError, match="grace"):
        scheduler.handler("a", schedule=Every(1), misfire="skip", grace="5s")  # type: ignore[arg-type]
    assert scheduler.handlers == []  # nothing was registered


async def test_schedule_replaces_the_element_and_keeps_the_next_run(
    store: MemoryStore, clock: FakeClock
) -> None:
    scheduler = Scheduler(store)
    async with scheduler:
        # No handler for "reminders" here: another process may serve it.
        await scheduler.schedule(
            "reminders", Cron("0 8 * * *", tz="Europe/Paris"), id="user-1", element={"v": 1}
        )
        info = await store.info("reminders", "user-1")
        await advance(clock, 60)
        await scheduler.schedule(
            "reminders", Cron("0 8 * * *", tz="Europe/Paris"), id="user-1", element={"v": 2}
        )
        again = await store.info("reminders", "user-1")
        assert info is not None
        assert again is not None
        assert again.due == pytest.approx(info.due)
        (listed,) = await scheduler.schedules("reminders")
        assert listed.element == {"v": 2}
        assert listed.next_run == datetime(2026, 1, 6, 7, 0, tzinfo=UTC)
        # Another trigger: filed from now on.
        await scheduler.schedule("reminders", Every(3600), id="user-1", element={"v": 2})
        (listed,) = await scheduler.schedules("reminders")
        assert listed.trigger == Every(3600)
        assert listed.next_run == T0 + timedelta(seconds=60)
        assert await scheduler.unschedule("reminders", "user-1") is True
        assert await scheduler.unschedule("reminders", "user-1") is False
        assert await scheduler.unschedule("reminders", "never") is False
        assert await scheduler.schedules("reminders") == []
        scheduler.stop()


# Built outside the event loop: a zone's first use reads its file (blockbuster would object).
PARIS_DAILY = Cron("@daily", tz="Europe/Paris")
PARIS_8AM = Cron("0 8 * * *", tz="Europe/Paris")


async def test_schedule_many_files_each_as_schedule_would(store: MemoryStore, clock: FakeClock) -> None:
    """A batch per 1,000 new ids; the result is what one schedule() per item gives."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("sync")(recorder)
    async with scheduler:
        items = [(f"user-{i}", Every(3600, start=T0 + timedelta(seconds=i)), {"u": i}) for i in range(2500)]
        await scheduler.schedule_many("sync", items)
        listed = {info.id: info for info in await scheduler.schedules("sync")}
        assert len(listed) == 2500
        assert listed["user-7"] == ScheduleInfo(
            id="user-7",
            trigger=Every(3600, start=T0 + timedelta(seconds=7)),
            next_run=T0 + timedelta(seconds=7),
            element={"u": 7},
            paused=False,
        )
        # The same as schedule() files (in a name nobody serves, so nothing runs meanwhile).
        await scheduler.schedule_many("idle", [("many", PARIS_DAILY, 1)], misfire="all")
        await scheduler.schedule("idle", PARIS_DAILY, id="one", element=1, misfire="all")
        assert await store.look("idle", "many") == await store.look("idle", "one")
        assert (await store.info("idle", "many")).due == (await store.info("idle", "one")).due  # type: ignore[union-attr]
        await advance(clock, 10)
        assert sorted(recorder.runs) == [T0 + timedelta(seconds=i) for i in range(11)]
        scheduler.stop()


class CountingStore(MemoryStore):
    """A memory store that counts its look and look_many calls (the round trips they stand for)."""

    looks = 0
    batches = 0

    async def look(self, name: str, id: str) -> Any:
        self.looks += 1
        return await super().look(name, id)

    async def look_many(self, name: str, ids: Any) -> list[Any]:
        self.batches += 1
        return await super().look_many(name, ids)


async def test_schedules_reads_elements_a_batch_at_a_time_up_to_limit(clock: FakeClock) -> None:
    async with CountingStore(clock=clock) as store:
        scheduler = Scheduler(store)
        async with scheduler:
            await scheduler.schedule_many("r", [(f"u{i:04d}", Every(60 + i), i) for i in range(2500)])
            await scheduler.defer("r", "one-shot", id="one-shot", delay=30)
            store.looks = store.batches = 0
            listed = await scheduler.schedules("r")
            assert (store.looks, store.batches) == (0, 3)  # 2,501 ids: 3 look_many, no look
            assert [info.id for info in listed] == [f"u{i:04d}" for i in range(2500)]  # next first
            store.batches = 0
            assert [info.id for info in await scheduler.schedules("r", limit=3)] == [
                "u0000",
                "u0001",
                "u0002",
            ]
            assert store.batches == 1
            assert len(await scheduler.schedules("r", limit=2500)) == 2500
            for bad in (0, -1, 1.5, True):
                with pytest.raises(InvalidArgumentError, match="limit"):
                    await scheduler.schedules("r", limit=bad)  # type: ignore[arg-type]
            scheduler.stop()


async def test_schedule_many_again_moves_nothing_and_upserts_what_changed(
    store: MemoryStore, clock: FakeClock
) -> None:
    scheduler = Scheduler(store, grace=0)
    async with scheduler:
        items: list[tuple[str, Cron | Every, Any]] = [(f"u{i}", PARIS_8AM, i) for i in range(1500)]
        await scheduler.schedule_many("reminders", items)
        due = {id: (await store.info("reminders", id)).due for id, _, _ in items}  # type: ignore[union-attr]
        await advance(clock, 60)
        # A restart declaring them again, one with a new element, one with a new trigger, and a new id.
        items[3] = ("u3", PARIS_8AM, "changed")
        items[4] = ("u4", Every(600), 4)
        await scheduler.schedule_many("reminders", [*items, ("new", Every(60), None)])
        for id, _, _ in items:
            info = await store.info("reminders", id)
            assert info is not None
            if id != "u4":
                assert info.due == pytest.approx(due[id]), id
        listed = {info.id: info for info in await scheduler.schedules("reminders")}
        assert len(listed) == 1501
        assert listed["u3"].element == "changed"
        assert listed["u4"].trigger == Every(600)
        assert listed["u4"].next_run == T0 + timedelta(seconds=60)
        assert listed["new"].next_run == T0 + timedelta(seconds=60)
        await scheduler.schedule_many("reminders", [])  # nothing to do
        scheduler.stop()


async def test_schedule_many_checks_everything_before_writing(store: MemoryStore) -> None:
    scheduler = Scheduler(store)
    async with scheduler:
        good = ("a", Every(1), None)
        with pytest.raises(InvalidArgumentError, match=r"schedules\[1\] must be an \(id, trigger, element\)"):
            await scheduler.schedule_many("n", [good, ("b", Every(1))])  # type: ignore[list-item]
        with pytest.raises(InvalidTypeError, match="trigger") as caught:
            await scheduler.schedule_many("n", [good, ("b", "@daily", None)])  # type: ignore[list-item]
        assert caught.value.__notes__ == ["in schedules[1]"]
        with pytest.raises(InvalidArgumentError) as bad_id:
            await scheduler.schedule_many("n", [good, ("", Every(1), None)])
        assert bad_id.value.__notes__ == ["in schedules[1]"]
        with pytest.raises(InvalidArgumentError, match=r"schedules\[2\]: id 'a' is given twice"):
            await scheduler.schedule_many("n", [good, ("b", Every(1), None), good])
        with pytest.raises(InvalidArgumentError, match="misfire"):
            await scheduler.schedule_many("n", [good], misfire="never")  # type: ignore[arg-type]
        with pytest.raises(InvalidTypeError, match="iterable of"):
            await scheduler.schedule_many("n", "abc")  # type: ignore[arg-type]
        assert await store.size("n") == 0  # nothing was written
        scheduler.stop()


async def test_schedule_many_files_the_rest_around_one_shot_work(store: MemoryStore) -> None:
    scheduler = Scheduler(store)
    async with scheduler:
        await scheduler.defer("n", "one-shot", id="taken-2", delay=60)
        await scheduler.defer("n", "one-shot", id="taken-1", delay=60)
        items = [(f"s{i}", Every(60), i) for i in range(10)]
        items[5] = ("taken-1", Every(60), 5)
        items[8] = ("taken-2", Every(60), 8)
        with pytest.raises(DuplicateIdError, match="'taken-1'") as caught:
            await scheduler.schedule_many("n", items)
        assert caught.value.__notes__[-1] == (
            "2 id(s) of 'n' hold one-shot work and were not made schedules: 'taken-1', 'taken-2'"
        )
        assert sorted(info.id for info in await scheduler.schedules("n")) == [
            f"s{i}" for i in range(10) if i not in (5, 8)
        ]
        assert await store.look("n", "taken-1") == "one-shot"
        scheduler.stop()


async def test_pause_and_resume(store: MemoryStore, clock: FakeClock) -> None:
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("tick")(recorder)
    async with scheduler:
        await scheduler.schedule("tick", Every(10), id="t")
        await advance(clock, 15, step=5)
        assert len(recorder.runs) == 2
        assert await scheduler.pause("tick", "t") is True
        assert await scheduler.pause("tick", "t") is True  # idempotent
        (info,) = await scheduler.schedules("tick")
        assert (info.paused, info.next_run) == (True, None)
        await advance(clock, 100, step=5)
        assert len(recorder.runs) == 2
        assert await scheduler.resume("tick", "t") is True
        await advance(clock, 5, step=5)
        # Resumed at the next grid point after now; those missed while paused are not run.
        assert recorder.runs[-1] == T0 + timedelta(seconds=120)
        assert await scheduler.pause("tick", "missing") is False
        assert await scheduler.resume("tick", "missing") is False
        scheduler.stop()


async def test_a_resume_at_once_does_not_run_again_what_just_ran(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Paused and resumed within the microsecond of an occurrence that ran (a clock that does not
    move): it goes on from the occurrence the schedule was paused at, not from "now" (that one
    again, its key a second time)."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("tick")(recorder)
    async with scheduler:
        await scheduler.schedule("tick", Every(10, start=T0), id="t")
        await advance(clock, 0)
        assert recorder.runs == [T0]
        assert await scheduler.pause("tick", "t") is True
        assert await scheduler.resume("tick", "t") is True
        (info,) = await scheduler.schedules("tick")
        assert info.next_run == T0 + timedelta(seconds=10)
        await advance(clock, 10)
        scheduler.stop()
    assert recorder.runs == [T0, T0 + timedelta(seconds=10)]


@pytest.mark.parametrize(
    ("misfire", "grace", "expected"),
    [
        # Stopped after the run at 20; restarted at 75: 30, 40, 50, 60, 70 were missed.
        ("coalesce", None, [70, 80]),
        ("all", None, [30, 40, 50, 60, 70, 80]),
        ("skip", None, [80]),
        ("skip", 25, [50, 60, 70, 80]),
    ],
)
async def test_misfire_after_five_missed_intervals(
    store: MemoryStore, clock: FakeClock, misfire: Any, grace: float | None, expected: list[int]
) -> None:
    first = Scheduler(store, grace=0)
    before = Recorder()
    first.handler("job")(before)
    async with first:
        await first.schedule("job", Every(10), id="j", misfire=misfire, grace=grace)
        await advance(clock, 25, step=5)
        first.stop()
    assert before.runs == [T0 + timedelta(seconds=s) for s in (0, 10, 20)]
    await advance(clock, 50)  # down at 25 .. 75
    second = Scheduler(store, grace=0)
    after = Recorder()
    second.handler("job")(after)
    async with second:
        await advance(clock, 5.5, step=0.5)  # up again at 75, until 80.5
        second.stop()
    assert after.runs == [T0 + timedelta(seconds=s) for s in expected]


class RacingStore(MemoryStore):
    """A memory store that runs ``race`` once, just before a worker's conditional ``update_if``
    (its write-back under the claim's revision) lands."""

    race: Any = None

    async def update_if(self, name: str, id: str, revision: int, element: Any) -> int | None:
        if self.race is not None:
            race, self.race = self.race, None
            await race()
        return await super().update_if(name, id, revision, element)


@pytest.mark.parametrize("change", ["pause", "schedule"])
async def test_a_change_made_as_a_late_occurrence_starts_is_kept(clock: FakeClock, change: str) -> None:
    """A late occurrence records the occurrence it runs for (coalesced) before it runs, under its
    claim: a pause or a new element filed in between is kept (it was written over: a paused
    schedule came back unpaused, due in 31 years, and never ran again)."""
    async with RacingStore(clock=clock) as store:
        first = Scheduler(store, grace=0)
        first.handler("job")(Recorder())
        async with first:
            await first.schedule("job", Every(10), id="j", element="old")
            await advance(clock, 0)
            first.stop()
        await advance(clock, 50)  # missed: 10 .. 50
        second = Scheduler(store, grace=0)
        recorder = Recorder()
        second.handler("job")(recorder)
        if change == "pause":
            store.race = lambda: second.pause("job", "j")
        else:
            store.race = lambda: second.schedule("job", Every(10), id="j", element="new")
        async with second:
            await advance(clock, 0)
            assert store.race is None  # it ran
            (info,) = await second.schedules("job")
            if change == "pause":
                assert info.paused
                await advance(clock, 35, step=5)  # (paused, it is not run at 60, 70, 80)
                assert await second.resume("job", "j") is True
            else:
                assert info.element == "new"
            await advance(clock, 20, step=5)
            second.stop()
    # The occurrence claimed as the change came runs (for the coalesced time, 50), once; after it
    # the schedule carries on as changed: resumed at 85 (runs at 90, 100), or with its new element
    # from 60.
    if change == "pause":
        assert recorder.runs == [T0 + timedelta(seconds=s) for s in (50, 90, 100)]
    else:
        assert recorder.runs == [T0 + timedelta(seconds=s) for s in (50, 60, 70)]
        assert recorder.elements == ["old", "new", "new"]


async def test_skip_without_a_grace_runs_occurrences_claimed_a_little_late(
    store: MemoryStore, clock: FakeClock
) -> None:
    """A real claim always comes a little after the nominal time: with a grace of 0, ``skip``
    skipped every occurrence and filed the next, forever. The clock here lands 5 ms past each
    occurrence, as a real one does; the default grace (1 s) runs them all."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("job")(recorder)
    async with scheduler:
        await scheduler.schedule("job", Every(10), id="j", misfire="skip")
        (info,) = await scheduler.schedules("job")
        assert (info.misfire, info.grace) == ("skip", SKIP_GRACE)
        await advance(clock, 0.005)
        await advance(clock, 30, step=10)  # at 10.005, 20.005, 30.005
        # Late by more than the grace: skipped, and the next one runs on time.
        await advance(clock, 9.995 + 1.5)  # at 41.5: 40 is 1.5 s late
        await advance(clock, 8.5)  # at 50
        scheduler.stop()
    assert recorder.runs == [T0 + timedelta(seconds=s) for s in (0, 10, 20, 30, 50)]


async def test_skip_reads_a_stored_grace_of_0_as_the_default(store: MemoryStore, clock: FakeClock) -> None:
    """A schedule filed with grace 0 before a grace had to be positive runs as with the default."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("job")(recorder)
    async with scheduler:
        await scheduler.schedule("idle", Every(10), id="j", misfire="skip")
        envelope = await store.look("idle", "j")
        await store.push("job", {**envelope, "grace": 0}, ttl=0, id="j")
        await advance(clock, 0.005)
        await advance(clock, 20, step=10)
        (info,) = await scheduler.schedules("job")
        assert info.grace == SKIP_GRACE
        scheduler.stop()
    assert recorder.runs == [T0 + timedelta(seconds=s) for s in (0, 10, 20)]


async def test_all_runs_at_most_the_100_most_recent_missed(store: MemoryStore, clock: FakeClock) -> None:
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("job")(recorder)
    async with scheduler:
        await scheduler.schedule("job", Every(1), id="j", misfire="all")
        await advance(clock, 0)
        scheduler.stop()
    await advance(clock, 1000.5)
    again = Scheduler(store, grace=0)
    again.handler("job")(recorder)
    async with again:
        await advance(clock, 0)
        again.stop()
    later = recorder.runs[1:]
    assert len(later) == 100
    assert later[0] == T0 + timedelta(seconds=901)
    assert later[-1] == T0 + timedelta(seconds=1000)


async def test_two_schedulers_on_one_store_run_each_occurrence_once(
    store: MemoryStore, clock: FakeClock
) -> None:
    recorders = [Recorder(), Recorder()]
    schedulers = []
    for recorder in recorders:
        scheduler = Scheduler(store, grace=0)
        scheduler.handler("tick", schedule=Every(0.5))(recorder)
        schedulers.append(scheduler)
    async with schedulers[0], schedulers[1]:
        await advance(clock, 10, step=0.25)
        for scheduler in schedulers:
            scheduler.stop()
    runs = sorted(recorders[0].runs + recorders[1].runs)
    assert runs == [T0 + timedelta(seconds=0.5 * k) for k in range(21)]
    # Which of the two runs an occurrence is up to the claims; none runs twice, none is missed.


async def test_a_lost_lease_redelivers_the_occurrence_and_the_schedule_carries_on(
    store: MemoryStore, clock: FakeClock
) -> None:
    recorder = Recorder()
    scheduler = Scheduler(store, grace=0)
    scheduler.handler("job", lease=30)(recorder)
    async with scheduler:
        await scheduler.schedule("job", Every(60), id="j")
        scheduler.stop()
    # A worker claims the first occurrence and dies (never acks, never renews).
    await advance(clock, 0)
    (claim,) = await store.claim("job", lease=30)
    assert nominal_of(claim.element) == _ts(T0)
    await advance(clock, 30)
    again = Scheduler(store, grace=0)
    again.handler("job", lease=30)(recorder)
    async with again:
        await advance(clock, 91, step=1)
        again.stop()
    assert recorder.runs == [T0, T0 + timedelta(seconds=60), T0 + timedelta(seconds=120)]
    assert recorder.attempts == [2, 1, 1]
    # The dead worker's token can no longer file anything.
    assert await rearm(
        store, "job", [("j", claim.token, claim.revision, claim.element, claim.element, 0)]
    ) == [False]


async def test_a_dead_lettered_occurrence_files_the_next(store: MemoryStore, clock: FakeClock) -> None:
    scheduler = Scheduler(store, grace=0)
    calls: list[datetime] = []

    @scheduler.handler("flaky", retry=Retry(attempts=2, backoff=lambda attempt: 0.0))
    async def flaky(element: Any) -> None:
        when = current_delivery().scheduled_for
        assert when is not None
        calls.append(when)
        if when == T0:
            raise RuntimeError("first occurrence fails")

    async with scheduler:
        await scheduler.schedule("flaky", Every(60), id="f", element="payload")
        await advance(clock, 61, step=1)
        (letter,) = await scheduler.dead_letters("flaky")
        scheduler.stop()
    assert calls == [T0, T0, T0 + timedelta(seconds=60)]
    assert letter.id == f"f@{T0.isoformat()}"
    assert letter.element == "payload"
    assert letter.attempts == 2


async def test_a_requeued_occurrence_runs_as_that_occurrence(store: MemoryStore, clock: FakeClock) -> None:
    """A dead-lettered occurrence put back runs with its ``scheduled_for`` (the idempotency key its
    first runs had: handlers that read it work on a requeue too), once, and files nothing next;
    failing again, it goes back under the same dead letter id. It is not a schedule: listing,
    pausing or removing schedules does not see it."""
    scheduler = Scheduler(store, grace=0)
    calls: list[tuple[datetime | None, Any]] = []
    fixed = False

    @scheduler.handler("flaky", retry=Retry(attempts=2, backoff=lambda attempt: 0.0))
    async def flaky(element: Any) -> None:
        when = current_delivery().scheduled_for
        calls.append((when, element))
        assert when is not None  # a handler that uses its key
        if when == T0 and not fixed:
            raise RuntimeError("the first occurrence fails until fixed")

    async with scheduler:
        await scheduler.schedule("flaky", Every(60), id="f", element="payload")
        await advance(clock, 1)
        (letter,) = await scheduler.dead_letters("flaky")
        assert letter.id == f"f@{T0.isoformat()}"
        assert await scheduler.requeue("flaky") == [letter.id]  # still broken: fails again
        await advance(clock, 1)
        (again,) = await scheduler.dead_letters("flaky")
        assert again.id == letter.id
        assert await scheduler.requeue("flaky", delay=3600) == [letter.id]
        assert [info.id for info in await scheduler.schedules("flaky")] == ["f"]
        assert await scheduler.pause("flaky", letter.id) is False
        assert await scheduler.unschedule("flaky", letter.id) is False
        fixed = True
        assert await scheduler.run_now("flaky", letter.id) is True
        await advance(clock, 1)
        assert await scheduler.dead_letters("flaky") == []
        assert await store.look("flaky", letter.id) is None  # run once, nothing filed after it
        (info,) = await scheduler.schedules("flaky")
        scheduler.stop()
    assert calls == [(T0, "payload")] * 5
    assert info.next_run == T0 + timedelta(seconds=60)  # the schedule went on without it


async def test_a_first_occurrence_now_is_due_now_on_a_clock_that_does_not_move() -> None:
    """``Every`` without a start runs first at the microsecond it is filed. That microsecond, back
    in float seconds, can be a hair past the wall time it was floored from (one filing in 170 or
    so): it was filed 0.24 µs ahead, and on a fake clock whose wall is the real time it never came
    due. Each of 2,000 filings here is due at the clock's very time."""
    clock = FakeClock(1000.0)  # no wall origin: wall() is the real time
    async with MemoryStore(clock=clock) as store:
        scheduler = Scheduler(store)
        for i in range(2000):
            await scheduler.schedule("many", Every(3600), id=f"s{i}")
        late = [id for id in await store.ids("many") if (await store.info("many", id)).due != clock()]  # type: ignore[union-attr]
    assert late == []


async def test_one_shot_work_has_no_scheduled_for(store: MemoryStore, clock: FakeClock) -> None:
    scheduler = Scheduler(store, grace=0)
    seen: list[Any] = []

    @scheduler.handler("once")
    async def once(element: Any) -> None:
        seen.append(current_delivery().scheduled_for)

    async with scheduler:
        await scheduler.defer("once", "x")
        await advance(clock, 0)
        scheduler.stop()
    assert seen == [None]


async def test_defer_at_reads_the_store_clock(store: MemoryStore, clock: FakeClock) -> None:
    """FakeClock(start=datetime) gives wall time: defer(at=...) counts from it, not from the real now."""
    scheduler = Scheduler(store, grace=0)
    async with scheduler:
        await scheduler.defer("later", "x", at=T0 + timedelta(minutes=5), id="x")
        info = await store.info("later", "x")
        assert info is not None
        assert info.ttl == pytest.approx(300)
        scheduler.stop()


async def test_bad_input(store: MemoryStore) -> None:
    scheduler = Scheduler(store)
    async with scheduler:
        with pytest.raises(InvalidArgumentError, match="misfire"):
            await scheduler.schedule("n", Every(1), id="a", misfire="never")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="grace"):
            await scheduler.schedule("n", Every(1), id="a", misfire="skip", grace=-1)
        for zero in (0, 0.0, timedelta(0)):
            with pytest.raises(InvalidArgumentError, match=r"grace must be positive.*would skip every"):
                await scheduler.schedule("n", Every(1), id="a", misfire="skip", grace=zero)
        with pytest.raises(InvalidArgumentError, match="grace goes with misfire='skip' only"):
            await scheduler.schedule("n", Every(1), id="a", grace=5)
        with pytest.raises(InvalidArgumentError, match="grace goes with misfire='skip' only"):
            await scheduler.schedule_many("n", [("a", Every(1), None)], misfire="all", grace=5)
        assert await store.size("n") == 0
        with pytest.raises(InvalidTypeError, match="trigger"):
            await scheduler.schedule("n", "0 * * * *", id="a")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await scheduler.schedule("n", Every(1), id="")
        await scheduler.defer("n", "one-shot", id="taken", delay=60)
        with pytest.raises(DuplicateIdError, match="'taken' is already dehydrating") as caught:
            await scheduler.schedule("n", Every(1), id="taken")
        assert "holds one-shot work, not a schedule" in caught.value.__notes__[0]
        assert await scheduler.unschedule("n", "taken") is False  # one-shot work is left alone
        assert await store.look("n", "taken") == "one-shot"
        scheduler.stop()
    with pytest.raises(InvalidTypeError):
        scheduler.handler("x", schedule="@daily")  # type: ignore[arg-type]


def test_the_blocking_facade_schedules_too() -> None:
    scheduler = Scheduler()
    with SyncScheduler(scheduler) as s:
        s.schedule("n", Cron("@daily"), id="d", element=1)
        s.schedule_many("m", [("e", Every(60), 2)])
        assert [i.id for i in s.schedules("m")] == ["e"]
        (info,) = s.schedules("n")
        assert (info.id, info.element, info.paused) == ("d", 1, False)
        assert s.pause("n", "d") is True
        assert s.resume("n", "d") is True
        assert s.unschedule("n", "d") is True


# -- spread: schedules sharing a trigger, each at a fixed offset -----------------------------------


def test_a_spread_gives_each_id_a_fixed_offset_and_spreads_many_evenly() -> None:
    offsets = [spread_offset(f"user-{i}", 600.0) for i in range(2000)]
    assert all(0 <= o < 600 for o in offsets)
    assert offsets == [spread_offset(f"user-{i}", 600.0) for i in range(2000)]  # the same each time
    # Even: every minute of the ten gets about a tenth of them.
    per_minute = [sum(1 for o in offsets if m * 60 <= o < (m + 1) * 60) for m in range(10)]
    assert all(140 <= count <= 260 for count in per_minute), per_minute
    assert spread_offset("user-1", None) == 0.0
    assert spread_offset("user-1", 300.0) == pytest.approx(spread_offset("user-1", 600.0) / 2)


async def test_spread_schedules_run_at_their_offsets_with_the_nominal_scheduled_for(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Twenty daily reminders at noon spread over 10 minutes: each is due at noon plus its own
    offset, every day the same one; ``scheduled_for`` is noon, and each runs once a day. Filed at
    noon, today's occurrence is still ahead of each one's offset: it runs today."""
    scheduler = Scheduler(store, grace=0)
    seen: dict[str, list[tuple[datetime, datetime]]] = {}

    @scheduler.handler("remind")
    async def remind(element: str) -> None:
        when = current_delivery().scheduled_for
        assert when is not None
        seen.setdefault(element, []).append((when, datetime.fromtimestamp(wall(store.clock), UTC)))

    ids = [f"u{i}" for i in range(20)]
    async with scheduler:
        await scheduler.schedule_many(
            "remind", [(id, Cron("0 12 * * *"), id) for id in ids[:10]], spread=timedelta(minutes=10)
        )
        for id in ids[10:]:
            await scheduler.schedule("remind", Cron("0 12 * * *"), id=id, element=id, spread=600)
        infos = {info.id: info for info in await scheduler.schedules("remind")}
        for id in ids:
            offset = spread_offset(id, 600.0)
            assert infos[id].spread == 600.0
            assert infos[id].offset == pytest.approx(offset)
            assert infos[id].next_run == T0
            info = await store.info("remind", id)
            assert info is not None
            assert wall(store.clock) + info.ttl == pytest.approx(_ts(T0) + offset)
        for day in range(2):
            await advance(clock, _ts(T0 + timedelta(days=day)) - wall(store.clock))  # to noon
            await advance(clock, 700, step=50)  # its ten minutes, and then some
        scheduler.stop()
    assert sorted(seen) == sorted(ids)
    for id, runs in seen.items():
        offset = spread_offset(id, 600.0)
        assert [nominal for nominal, _ in runs] == [T0 + timedelta(days=d) for d in range(2)]
        for nominal, ran in runs:
            assert 0 <= (ran - nominal).total_seconds() - offset < 50  # at its offset (steps of 50 s)


async def test_skip_counts_lateness_from_the_offset_time(store: MemoryStore, clock: FakeClock) -> None:
    """With ``misfire="skip"`` and a grace shorter than the offset, a spread schedule still runs
    every occurrence it claims on time: it is late only past its own offset."""
    id = next(f"s{i}" for i in itertools.count() if spread_offset(f"s{i}", 60.0) > 20)
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("job")(recorder)
    async with scheduler:
        await scheduler.schedule("job", Every(60, start=T0), id=id, misfire="skip", grace=1, spread=60)
        await advance(clock, 180, step=0.5)
        scheduler.stop()
    assert recorder.runs == [T0 + timedelta(seconds=s) for s in (0, 60, 120)]


async def test_a_changed_spread_moves_the_next_run_and_the_same_moves_nothing(
    store: MemoryStore, clock: FakeClock
) -> None:
    scheduler = Scheduler(store)
    async with scheduler:
        await scheduler.schedule("job", Every(3600, start=T0 + timedelta(hours=1)), id="j", spread=60)
        first = await store.info("job", "j")
        assert first is not None
        await scheduler.schedule("job", Every(3600, start=T0 + timedelta(hours=1)), id="j", spread=60)
        assert await store.info("job", "j") == first  # nothing written
        await scheduler.schedule("job", Every(3600, start=T0 + timedelta(hours=1)), id="j", spread=600)
        moved = await store.info("job", "j")
        assert moved is not None
        assert moved.due - first.due == pytest.approx(spread_offset("j", 600.0) - spread_offset("j", 60.0))
        await scheduler.schedule("job", Every(3600, start=T0 + timedelta(hours=1)), id="j")
        plain = await store.info("job", "j")
        assert plain is not None
        assert wall(store.clock) + plain.ttl == pytest.approx(_ts(T0 + timedelta(hours=1)))
        (info,) = await scheduler.schedules("job")
        assert (info.spread, info.offset) == (None, 0.0)


async def test_resume_files_a_spread_schedule_at_its_offset(store: MemoryStore, clock: FakeClock) -> None:
    scheduler = Scheduler(store)
    async with scheduler:
        await scheduler.schedule("job", Every(3600, start=T0), id="j", spread=1800)
        assert await scheduler.pause("job", "j")
        await advance(clock, 7200)
        assert await scheduler.resume("job", "j")
        (info,) = await scheduler.schedules("job")
        offset = spread_offset("j", 1800.0)
        # The next nominal time whose offset time is still ahead.
        nominal = next(
            T0 + timedelta(hours=h)
            for h in range(10)
            if _ts(T0 + timedelta(hours=h)) + offset >= _ts(T0) + 7200
        )
        assert info.next_run == nominal
        element = await store.info("job", "j")
        assert element is not None
        assert wall(store.clock) + element.ttl == pytest.approx(_ts(nominal) + offset)


# -- run now ---------------------------------------------------------------------------------------


async def test_run_now_runs_an_extra_occurrence_and_keeps_the_next(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Run now is an extra run, out of turn: the occurrence that was next still runs at its time
    (it used to run early in its place, leaving that time without its run)."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("digest")(recorder)
    async with scheduler:
        await scheduler.schedule("digest", Cron("0 14 * * *"), id="d", element="e")  # T0 is 12:00
        await advance(clock, 30 * 60)
        assert await scheduler.run_now("digest", "d") is True
        await advance(clock, 0)
        assert recorder.runs == [T0 + timedelta(minutes=30)]  # scheduled_for: when it was asked
        assert recorder.elements == ["e"]
        (info,) = await scheduler.schedules("digest")
        assert info.next_run == T0 + timedelta(hours=2)
        assert "extra" not in await store.look("digest", "d")  # the request ends with the run
        await advance(clock, 90 * 60, step=60)
        (info,) = await scheduler.schedules("digest")
        scheduler.stop()
    assert recorder.runs == [T0 + timedelta(minutes=30), T0 + timedelta(hours=2)]
    assert info.next_run == T0 + timedelta(days=1, hours=2)


class _WriteAfterRead(MemoryStore):
    """A store on which ``then`` (another process's write) lands right after the next ``read``."""

    then: Any = None

    async def read(self, name: str, id: str) -> tuple[Any, ElementInfo] | None:
        found = await super().read(name, id)
        then, self.then = self.then, None
        if then is not None:
            await then()
        return found


async def test_run_now_of_a_schedule_changed_meanwhile_writes_nothing(clock: FakeClock) -> None:
    """Run now writes the schedule it read only if it is still that revision: one paused between
    the read and the write stays paused, with no extra run asked."""
    async with _WriteAfterRead(clock=clock) as store:
        scheduler = Scheduler(store, grace=0)
        scheduler.handler("digest")(Recorder())
        await scheduler.schedule("digest", Cron("0 14 * * *"), id="d", element="e")

        async def pause() -> None:
            assert await scheduler.pause("digest", "d") is True

        store.then = pause
        assert await Admin(store).run_now("digest", "d") == "changed"
        element = await store.look("digest", "d")
        assert element["paused"]
        assert "extra" not in element
        assert await Admin(store).run_now("digest", "d") == "paused"


async def test_every_run_now_has_a_key_of_its_own(store: MemoryStore, clock: FakeClock) -> None:
    """A run now at the very microsecond of an occurrence that ran, or of an extra run made
    before (a clock that did not move), is scheduled for a microsecond later: with the same key,
    a handler that skips keys it has seen would skip the run that was asked for."""
    scheduler = Scheduler(store, grace=0)
    recorder = Recorder()
    scheduler.handler("tick")(recorder)
    async with scheduler:
        await scheduler.schedule("tick", Every(60, start=T0), id="t")
        await advance(clock, 0)
        assert recorder.runs == [T0]  # the first occurrence, at T0
        for _ in range(3):  # the clock stands still
            assert await scheduler.run_now("tick", "t") is True
            await advance(clock, 0)
        await advance(clock, 60)
        scheduler.stop()
    micro = timedelta(microseconds=1)
    assert recorder.runs == [T0, T0 + micro, T0 + 2 * micro, T0 + 3 * micro, T0 + timedelta(seconds=60)]


async def test_a_failing_extra_run_keeps_its_key_and_is_dead_lettered(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Retries of an extra run have the same ``scheduled_for`` (an idempotency key); once it is
    dead-lettered, the schedule goes on from the occurrence that was next."""
    scheduler = Scheduler(store, grace=0)
    calls: list[tuple[datetime | None, int]] = []

    @scheduler.handler("job", retry=Retry(attempts=2, backoff=lambda attempt: 0.0))
    async def job(element: Any) -> None:
        delivery = current_delivery()
        calls.append((delivery.scheduled_for, delivery.attempt))
        if delivery.scheduled_for != T0 + timedelta(hours=1):
            raise RuntimeError("only the hourly run works")

    async with scheduler:
        await scheduler.schedule("job", Every(3600, start=T0 + timedelta(hours=1)), id="j", element="payload")
        await advance(clock, 600)
        assert await scheduler.run_now("job", "j") is True
        await advance(clock, 0)
        await advance(clock, 0)
        (letter,) = await scheduler.dead_letters("job")
        (info,) = await scheduler.schedules("job")
        await advance(clock, 3000, step=60)
        scheduler.stop()
    asked = T0 + timedelta(minutes=10)
    assert calls == [(asked, 1), (asked, 2), (T0 + timedelta(hours=1), 1)]
    assert letter.id == f"j@{asked.isoformat()}"
    assert (letter.element, letter.attempts) == ("payload", 2)
    assert info.next_run == T0 + timedelta(hours=1)


async def test_an_extra_run_failing_past_the_next_time_becomes_that_occurrence(
    store: MemoryStore, clock: FakeClock
) -> None:
    """A schedule is one element: while an extra run waits for its retry, the occurrence that was
    next cannot come due. A retry at or after that time is that occurrence (scheduled_for its
    nominal time), not a second extra run, and the schedule goes on from it."""
    scheduler = Scheduler(store, grace=0)
    calls: list[tuple[datetime | None, int]] = []

    @scheduler.handler("job", retry=Retry(attempts=3, backoff=lambda attempt: 3600.0))
    async def job(element: Any) -> None:
        delivery = current_delivery()
        calls.append((delivery.scheduled_for, delivery.attempt))
        if delivery.attempt == 1:
            raise RuntimeError("first try fails")

    async with scheduler:
        await scheduler.schedule("job", Cron("0 14 * * *"), id="j")
        await advance(clock, 90 * 60)  # 13:30
        assert await scheduler.run_now("job", "j") is True
        await advance(clock, 0)
        await advance(clock, 3600, step=60)  # its retry, at 14:30
        (info,) = await scheduler.schedules("job")
        scheduler.stop()
    assert calls == [(T0 + timedelta(minutes=90), 1), (T0 + timedelta(hours=2), 2)]
    assert info.next_run == T0 + timedelta(days=1, hours=2)
    assert "extra" not in await store.look("job", "j")


async def test_run_now_of_one_shot_work_and_what_it_refuses(store: MemoryStore, clock: FakeClock) -> None:
    scheduler = Scheduler(store, grace=0)
    seen: list[tuple[Any, datetime | None]] = []

    @scheduler.handler("work")
    async def work(element: Any) -> None:
        seen.append((element, current_delivery().scheduled_for))

    async with scheduler:
        await scheduler.defer("work", "later", delay=3600, id="w")
        await scheduler.schedule("work", Every(60, start=T0 + timedelta(hours=1)), id="s")
        await scheduler.pause("work", "s")
        await store.push("held", "x", ttl=0, id="h")
        (claim,) = await store.claim("held", lease=30)  # a worker holds it
        assert await scheduler.run_now("work", "w") is True
        assert await scheduler.run_now("work", "nope") is False
        assert await scheduler.run_now("work", "s") is False  # paused: resume it to run it
        assert await scheduler.run_now("held", "h") is False
        for bad in ("", 7):
            with pytest.raises((InvalidArgumentError, InvalidTypeError)):
                await scheduler.run_now(bad, "w")  # type: ignore[arg-type]
            with pytest.raises((InvalidArgumentError, InvalidTypeError)):
                await scheduler.run_now("work", bad)  # type: ignore[arg-type]
        await advance(clock, 0)
        scheduler.stop()
    assert seen == [("later", None)]
    assert "extra" not in await store.look("work", "s")
    assert await store.ack("held", [("h", claim.token)]) == [True]  # the holder's claim is untouched
