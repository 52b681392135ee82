"""Random programs against recurring schedules keep the guarantees the docs state.

Each program is a sequence of what an application and its operators do to a few ``Every``
schedules served by one or two schedulers sharing a memory store on a ``FakeClock``: time passes,
handlers fail or run long, schedules are filed again (with another element, policy or trigger),
paused, resumed, run now, removed, and the schedulers restart after downtime. Whatever the
sequence, these must hold:

* two runs of one schedule never overlap (the next occurrence is filed when the current one ends);
* no occurrence succeeds twice (its ``scheduled_for`` is the handler's idempotency key; a
  schedule removed and filed again is another schedule; a run now made at the very microsecond
  of an occurrence of another trigger the schedule had or is given shares that key, which only a
  clock that does not move allows: :meth:`World.shared`);
* every ``scheduled_for`` is a time of one of the schedule's grids (the triggers it was filed
  with), or the time of a ``run_now`` that returned ``True`` (a microsecond later where that
  time was already another run's key);
* afterwards, with nothing failing, every live schedule that is not paused runs on its grid again
  (nothing was lost), and ``schedules()`` lists exactly the live ones with their paused flags.

Each call is made once the schedulers have done what they can at that moment (no claim under
way). ``schedule`` (a new element, policy or trigger), ``unschedule``, ``pause``, ``resume`` and
``run_now`` are made at any time, long runs included: a schedule removed and filed again under
its id during a run is another schedule, which must not run beside that run either.

How many programs: the hypothesis profile (``tests/conftest.py``).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rehydrate import Every, Retry, Scheduler, current_delivery
from rehydrate._clock import wall
from rehydrate.abc import Store
from rehydrate.stores import MemoryStore, SQLiteStore
from rehydrate.testing import FakeClock

pytestmark = pytest.mark.anyio

_T = TypeVar("_T")

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
PERIOD = 60.0
#: Each schedule's phase on the grid: ``a`` at :00, ``b`` at :20, ``c`` at :40 of each minute.
PHASE = {"a": 0.0, "b": 20.0, "c": 40.0}
#: Longer than any run a program makes (a slow run and its retries): no lease runs out.
LEASE = 900.0
STEP = 5.0
#: A schedule is filed on its phase's grid or on that grid shifted (another trigger: filed again
#: so, the schedule is re-planned, in place if one of its occurrences runs).
SHIFTS = (0.0, 7.0)

ids = st.sampled_from(sorted(PHASE))
ops = st.one_of(
    st.tuples(st.just("advance"), st.sampled_from([5.0, 20.0, 60.0, 130.0, 300.0])),
    st.tuples(st.just("fail"), ids, st.integers(1, 4)),
    st.tuples(st.just("slow"), ids, st.sampled_from([30.0, 90.0, 150.0])),
    st.tuples(
        st.just("schedule"), ids, st.sampled_from(["coalesce", "all", "skip"]), st.sampled_from(SHIFTS)
    ),
    st.tuples(st.just("unschedule"), ids),
    st.tuples(st.just("pause"), ids),
    st.tuples(st.just("resume"), ids),
    st.tuples(st.just("run_now"), ids),
    st.tuples(st.just("restart"), st.sampled_from([0.0, 100.0, 400.0])),
)


class World:
    """The handler the schedulers share, and what the program did, for the checks."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.running: set[str] = set()
        self.overlaps: list[tuple[str, datetime]] = []
        #: Per (id, incarnation, scheduled_for): how many runs succeeded. A schedule removed and
        #: filed again is a new one (its first occurrence may be the very time the old one ran).
        self.successes: Counter[tuple[str, int, datetime]] = Counter()
        #: Each element filed: the incarnation of its schedule (``unschedule`` starts a new one).
        self.incarnation_of: dict[int, int] = {}
        self.incarnations: Counter[str] = Counter()
        self.runs: list[tuple[str, datetime]] = []
        #: Per id: how many of its next runs fail, and how long its next run takes.
        self.failing: Counter[str] = Counter()
        self.slow: dict[str, float] = {}
        #: The times of the ``run_now`` calls that returned True, per id.
        self.requests: dict[str, set[datetime]] = {id: set() for id in PHASE}
        #: Per id, the shifts of its grid it was ever filed with (see SHIFTS), the one it has
        #: now, and the times at which it was given another; per key, the elements (filings) of
        #: its successful runs.
        self.shifts: dict[str, set[float]] = {id: set() for id in PHASE}
        self.shift_now: dict[str, float] = {}
        self.retriggered: dict[str, set[datetime]] = {id: set() for id in PHASE}
        self.success_elements: dict[tuple[str, int, datetime], set[int]] = {}
        #: The live schedules (filed and not removed), and which of them are paused.
        self.live: set[str] = set()
        self.paused: set[str] = set()
        self.elements = 0

    async def __call__(self, element: Any) -> None:
        delivery = current_delivery()
        id, when = delivery.id, delivery.scheduled_for
        assert when is not None
        if id in self.running:
            self.overlaps.append((id, when))
        self.running.add(id)
        try:
            self.runs.append((id, when))
            if (seconds := self.slow.pop(id, 0.0)) > 0:
                await self.clock.sleep_until(self.clock() + seconds)
            if self.failing[id] > 0:
                self.failing[id] -= 1
                raise RuntimeError(f"{id} fails at {when}")
            key = (id, self.incarnation_of[element], when)
            self.successes[key] += 1
            self.success_elements.setdefault(key, set()).add(element)
        finally:
            self.running.discard(id)

    def requested(self, id: str, when: datetime) -> bool:
        """Whether ``when`` is the key of a run now of ``id``: the time of the call, or a few
        microseconds after it where that time was already another run's key."""
        return any(timedelta(0) <= when - at < timedelta(milliseconds=1) for at in self.requests[id])

    def shared(self, id: str, incarnation: int, when: datetime) -> bool:
        """Whether two runs may share the key ``when``: runs of two filings of the schedule, one
        giving it another trigger at that very time, on a fake clock that did not move since the
        other ran (the new trigger's occurrence then, or a run now then, takes that time as its
        key, and the schedule no longer knows the other trigger's). A real clock has moved on."""
        elements = self.success_elements.get((id, incarnation, when), set())
        return len(elements) > 1 and when in self.retriggered[id]

    def on_grid(self, id: str, when: datetime) -> bool:
        """Whether ``when`` is a time of one of the grids the schedule ``id`` was filed with."""
        for shift in self.shifts[id]:
            offset = (when - T0).total_seconds() - PHASE[id] - shift
            if offset >= 0 and offset % PERIOD == 0:
                return True
        return False


def make_schedulers(store: Store, world: World, count: int) -> list[Scheduler]:
    schedulers = []
    for _ in range(count):
        scheduler = Scheduler(store, grace=0)
        scheduler.handler("job", lease=LEASE, retry=Retry(attempts=3, backoff=lambda attempt: 10.0))(world)
        schedulers.append(scheduler)
    return schedulers


async def advance(clock: FakeClock, seconds: float) -> None:
    left = seconds
    while left > 1e-9:
        await wait_all_tasks_blocked()
        move = min(STEP, left)
        clock.advance(move)
        left -= move
        await wait_all_tasks_blocked()


async def apply(op: tuple[Any, ...], world: World, scheduler: Scheduler) -> None:
    verb, *args = op
    clock = world.clock
    if verb == "advance":
        await advance(clock, args[0])
    elif verb == "fail":
        world.failing[args[0]] += args[1]
    elif verb == "slow":
        world.slow[args[0]] = args[1]
    elif verb == "schedule":
        id, misfire, shift = args
        world.elements += 1
        world.incarnation_of[world.elements] = world.incarnations[id]
        if id in world.live and shift != world.shift_now.get(id):
            world.retriggered[id].add(datetime.fromtimestamp(wall(clock), UTC))
        world.shift_now[id] = shift
        world.shifts[id].add(shift)
        start = T0 + timedelta(seconds=PHASE[id] + shift)
        await scheduler.schedule(
            "job",
            Every(PERIOD, start=start),
            id=id,
            element=world.elements,
            misfire=misfire,
            grace=10 if misfire == "skip" else None,
        )
        world.live.add(id)
    elif verb == "unschedule":
        id = args[0]
        assert await scheduler.unschedule("job", id) is (id in world.live)
        world.incarnations[id] += 1
        world.live.discard(id)
        world.paused.discard(id)
    elif verb == "pause":
        id = args[0]
        assert await scheduler.pause("job", id) is (id in world.live)
        if id in world.live:
            world.paused.add(id)
    elif verb == "resume":
        id = args[0]
        assert await scheduler.resume("job", id) is (id in world.live)
        world.paused.discard(id)
    elif verb == "run_now":
        id = args[0]
        at = datetime.fromtimestamp(wall(clock), UTC)
        if await scheduler.run_now("job", id):
            assert id in world.live
            assert id not in world.paused
            world.requests[id].add(at)
    await wait_all_tasks_blocked()


class InlineSQLiteStore(SQLiteStore):
    """The SQLite store with its statements run in the event loop's thread, not a worker thread:
    ``wait_all_tasks_blocked`` then means that every store call has returned, and a program
    runs the same every time."""

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        conn = self._conn
        if conn is None:
            raise self._not_open()
        await anyio.lowlevel.checkpoint()
        return self._in_thread(conn, fn)

    async def subscribed(self, count: int) -> None:
        """Return once ``count`` runners have subscribed: subscribing binds a socket in a worker
        thread, which ``wait_all_tasks_blocked`` does not wait for (a runner not yet subscribed
        when the clock is advanced would sleep through it)."""
        with anyio.fail_after(10):
            while True:
                subscriptions = self._subscribers.get("job", set())
                if len(subscriptions) >= count and all(s.listener is not None for s in subscriptions):
                    return
                await anyio.sleep(0.001)  # (a worker thread binds it: no event to wait on)


programs = st.lists(ops, max_size=25)
counts = st.sampled_from([1, 2])
#: Found by these tests before a new trigger was written into a running schedule: the new
#: trigger's first occurrence (:27) ran beside the slow run of :20.
NEW_TRIGGER_DURING_A_RUN = [
    ("advance", 20.0),
    ("slow", "b", 30.0),
    ("schedule", "b", "coalesce", 0.0),
    ("schedule", "b", "coalesce", 7.0),
]

#: Found by these tests once ``unschedule`` was made during runs too, before it left a running
#: schedule under its claim: the schedule filed again ran its first occurrence beside the run.
UNSCHEDULE_DURING_A_RUN = [
    ("slow", "a", 30.0),
    ("schedule", "a", "coalesce", 0.0),
    ("unschedule", "a"),
    ("schedule", "a", "coalesce", 0.0),
]


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, count=counts)
@example(program=NEW_TRIGGER_DURING_A_RUN, count=1)
@example(program=UNSCHEDULE_DURING_A_RUN, count=1)
async def test_random_programs_keep_the_schedule_guarantees(
    program: list[tuple[Any, ...]], count: int
) -> None:
    clock = FakeClock(start=T0)
    async with MemoryStore(clock=clock) as store:
        await run_program(store, clock, program, count)


@pytest.mark.loop_may_block  # (InlineSQLiteStore, on purpose)
@settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    # A fifth as many (at least 5): each program writes a file, with an fsync per transaction.
    max_examples=max(5, settings().max_examples // 5),
)
@given(program=programs, count=counts)
@example(program=NEW_TRIGGER_DURING_A_RUN, count=1)
@example(program=UNSCHEDULE_DURING_A_RUN, count=1)
async def test_random_programs_keep_the_schedule_guarantees_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory, program: list[tuple[Any, ...]], count: int
) -> None:
    """The same on SQLite: its ``update`` and ``rearm`` rewrite stored bytes (see the stores)."""
    clock = FakeClock(start=T0)
    path = tmp_path_factory.mktemp("random") / "jobs.db"
    async with InlineSQLiteStore(path, clock=clock) as store:
        await run_program(store, clock, program, count)


async def run_program(store: Store, clock: FakeClock, program: list[tuple[Any, ...]], count: int) -> None:
    """Run ``program`` with ``count`` schedulers on ``store``, then check the guarantees."""
    world = World(clock)
    stack = AsyncExitStack()
    schedulers = make_schedulers(store, world, count)
    for scheduler in schedulers:
        await stack.enter_async_context(scheduler)
    subscribed = getattr(store, "subscribed", None)
    if subscribed is not None:
        await subscribed(count)
    try:
        for op in program:
            if op[0] == "restart":
                for scheduler in schedulers:
                    scheduler.stop()
                await stack.aclose()
                await advance(clock, op[1])
                schedulers = make_schedulers(store, world, count)
                for scheduler in schedulers:
                    await stack.enter_async_context(scheduler)
                if subscribed is not None:
                    await subscribed(count)
                await wait_all_tasks_blocked()  # what was missed is claimed (see the module)
            else:
                await apply(op, world, schedulers[0])
        # Nothing fails or runs long from here: what is live and not paused runs on its grid.
        world.failing.clear()
        world.slow.clear()
        await advance(clock, 200.0)  # the runs under way end, retries run out
        before = len(world.runs)
        since = clock()
        await advance(clock, 3 * PERIOD)
        infos = {info.id: info for info in await schedulers[0].schedules("job")}
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        await stack.aclose()

    assert world.overlaps == []
    assert [key for key, times in world.successes.items() if times > 1 and not world.shared(*key)] == []
    for id, when in world.runs:
        assert world.on_grid(id, when) or world.requested(id, when), (id, when)
    assert set(infos) == world.live
    assert {id for id, info in infos.items() if info.paused} == world.paused
    ran = Counter(id for id, _ in world.runs[before:])
    for id in world.live - world.paused:
        assert ran[id] >= 2, (id, ran, since)
        next_run = infos[id].next_run
        assert next_run is not None
        assert next_run > datetime.fromtimestamp(wall(clock), UTC) - timedelta(seconds=1)
    for id in world.paused:
        assert ran[id] == 0
