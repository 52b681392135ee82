"""Schedules on the real stores.

* Filed in batches (``Scheduler.schedule_many``) on every store of the contract suite. The upsert's
  rules are tested at length on the memory store (tests/test_schedules.py); here, that each store's
  ``push_many`` and its all-or-nothing ``DuplicateIdError`` carry them: a first filing in batches,
  then a restart declaring the same ones (nothing moves) with one changed and one new.
* A store restart loses no schedule, on each durable store: SQLite (the file closed and opened
  again), Redis (the server SIGKILLed and started again on its AOF) and PostgreSQL (a server of
  the test's own, stopped with ``pg_ctl -m immediate`` and started again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from rehydrate import Cron, Every, Retry, Scheduler, current_delivery
from rehydrate._clock import wall
from rehydrate._core._triggers import trigger_from_dict
from rehydrate._schedules import nominal_of
from rehydrate.abc import Store
from rehydrate.stores import PostgresStore, RedisStore, SQLiteStore
from tests.pg_server import PostgresServer, skip_without_server
from tests.redis_server import RedisServer

from .harnesses import Harness

pytestmark = pytest.mark.anyio

#: Far from any test's now: a schedule that does not run by itself during one.
NEW_YEAR = Cron("0 0 1 1 *")


async def test_schedule_many_files_in_batches_and_moves_nothing_when_declared_again(harness: Harness) -> None:
    store = harness.store
    scheduler = Scheduler(store, heartbeat=None)
    items: list[tuple[str, Every, Any]] = [(f"user-{i}", Every(3600), {"user": i}) for i in range(1200)]
    async with scheduler:
        await scheduler.schedule_many("reminders", items)
        assert await store.size("reminders") == 1200
        before = {id: await store.look("reminders", id) for id in ("user-0", "user-999", "user-1199")}
        harness.advance(30)
        items[999] = ("user-999", Every(3600), "changed")
        items[1199] = ("user-1199", Every(600), {"user": 1199})
        await scheduler.schedule_many("reminders", [*items, ("new", Every(60), None)])
        assert await store.size("reminders") == 1201
        after = {id: await store.look("reminders", id) for id in before}
        # Each envelope's next run: kept where the trigger is the same, from now on where it changed.
        assert after["user-0"] == before["user-0"]
        assert after["user-999"] == {**before["user-999"], "element": "changed"}
        # (from now: 30 s on, and the real time the filings took where the clock reads it)
        assert 29.9 <= nominal_of(after["user-1199"]) - nominal_of(before["user-1199"]) < 60
        assert trigger_from_dict(after["user-1199"]["trigger"]) == Every(600)
        assert trigger_from_dict((await store.look("reminders", "new"))["trigger"]) == Every(60)
        scheduler.stop()


async def test_run_now_is_an_extra_run_on_every_store(harness: Harness) -> None:
    """``Scheduler.run_now`` through each store's ``update`` and fenced ``reschedule``, and the
    runner's filing of the schedule again without the request (the stores that keep a claimed
    envelope's bytes encode the changed envelope anew): one run now, the next run unchanged."""
    store = harness.store
    scheduler = Scheduler(store, heartbeat=None, grace=1)
    ran: list[tuple[Any, Any]] = []
    done = anyio.Event()

    @scheduler.handler("digest")
    async def digest(element: Any) -> None:
        ran.append((element, current_delivery().scheduled_for))
        done.set()

    async with scheduler:
        await scheduler.schedule("digest", NEW_YEAR, id="d", element={"team": 7})
        (before,) = await scheduler.schedules("digest")
        assert await scheduler.run_now("digest", "d") is True
        with anyio.fail_after(10):
            await done.wait()
        scheduler.stop()  # (and the schedule is filed again as the scheduler stops, at the latest)
    (after,) = await scheduler.schedules("digest")
    info = await store.info("digest", "d")
    assert [element for element, _ in ran] == [{"team": 7}]
    assert ran[0][1] is not None
    assert ran[0][1] < before.next_run  # scheduled_for: when it was asked for
    assert after == before
    assert "extra" not in await store.look("digest", "d")
    assert info is not None
    assert not info.claimed
    assert before.next_run is not None
    assert info.due == pytest.approx(before.next_run.timestamp() - wall(store.clock) + store.clock(), abs=5)


async def test_run_now_outcome_says_what_it_did_on_every_store(harness: Harness) -> None:
    """``Scheduler.run_now_outcome``: what ``run_now`` did, or why nothing was made due (what the
    dashboard and ``rehydrate run-now`` tell a person), through each store."""
    store = harness.store
    scheduler = Scheduler(store, heartbeat=None)
    async with scheduler:  # (no handler: nothing is claimed but by the test)
        await scheduler.schedule("digest", NEW_YEAR, id="d", element={"team": 7})
        await scheduler.schedule("digest", NEW_YEAR, id="p", element=None)
        assert await scheduler.pause("digest", "p") is True
        await store.push("work", "later", ttl=3600, id="w")
        await store.push("work", "busy", ttl=0, id="h")
        (held,) = await store.claim("work", lease=60)
        assert held.id == "h"
        (before,) = [info for info in await scheduler.schedules("digest") if info.id == "d"]
        assert await scheduler.run_now_outcome("digest", "d") == "schedule"
        assert await scheduler.run_now_outcome("work", "w") == "one-shot"
        assert await scheduler.run_now_outcome("digest", "p") == "paused"
        assert await scheduler.run_now_outcome("work", "h") == "held"
        assert await scheduler.run_now_outcome("work", "nope") == "unknown"
        assert await store.ttn("work") == 0.0  # w is due now; h still holds its lease
        assert (await store.info("work", "h")).claimed  # type: ignore[union-attr]
        (after,) = [info for info in await scheduler.schedules("digest") if info.id == "d"]
        assert after == before  # an extra run: the next run is kept
        assert "extra" in await store.look("digest", "d")
        scheduler.stop()


async def test_a_schedule_changed_while_it_runs_waits_for_the_run_on_every_store(harness: Harness) -> None:
    """``schedule()`` with a new element, ``pause`` and ``resume`` while an occurrence runs: each
    change is written into the element the worker holds (through each store's ``update``), nothing
    else comes due meanwhile (no second run beside the first, however long it takes), and the
    occurrence after it is filed as changed when it ends (each store's ``rearm`` keeps what was
    written)."""
    store = harness.store
    scheduler = Scheduler(store, heartbeat=None, grace=1)
    started, release = anyio.Event(), anyio.Event()
    ran: list[Any] = []

    @scheduler.handler("sync")
    async def sync(element: Any) -> None:
        ran.append(element)
        started.set()
        await release.wait()

    trigger = Every(3600)
    async with scheduler:
        await scheduler.schedule("sync", trigger, id="s", element="old")  # first run: now
        with anyio.fail_after(10):
            await started.wait()
        (before,) = await scheduler.schedules("sync")
        await scheduler.schedule("sync", trigger, id="s", element="new")
        (during,) = await scheduler.schedules("sync")
        info = await store.info("sync", "s")
        assert info is not None
        assert info.claimed  # still held by the run: not filed anew beside it
        assert during.element == "new"
        # Paused and resumed during the run: the same, in the element the run holds.
        assert await scheduler.pause("sync", "s") is True
        assert [i.paused for i in await scheduler.schedules("sync")] == [True]
        assert await scheduler.resume("sync", "s") is True
        assert (await store.info("sync", "s")).claimed  # type: ignore[union-attr]
        release.set()
        scheduler.stop()  # (the run ends, and its next occurrence is filed as the scheduler stops)
    (after,) = await scheduler.schedules("sync")
    assert ran == ["old"]
    assert after.element == "new"
    assert not after.paused
    assert before.next_run is not None
    assert after.next_run == before.next_run + timedelta(seconds=3600)


@pytest.mark.parametrize("extra", [False, True], ids=["occurrence", "run_now"])
async def test_a_new_trigger_during_a_run_waits_for_it_on_every_store(harness: Harness, extra: bool) -> None:
    """``schedule()`` with another trigger while an occurrence runs: the new trigger and its first
    occurrence are written into the element the worker holds (each store's ``update``), so no
    occurrence of it runs beside the one running, however many pass; when the run ends, each
    store's ``rearm`` sees the end it claimed changed and files the schedule as stored, at once;
    the missed occurrences are coalesced into one run, and the schedule goes on from the new
    trigger. The same during an extra run (``run_now``) of a schedule whose next occurrence is
    months away: the new trigger starts from that run, not from that occurrence."""
    store = harness.store
    scheduler = Scheduler(store, heartbeat=None, grace=1)
    first, second, release = anyio.Event(), anyio.Event(), anyio.Event()
    ran: list[tuple[Any, Any]] = []

    @scheduler.handler("sync", lease=600)
    async def sync(element: Any) -> None:
        ran.append((element, current_delivery().scheduled_for))
        (first if len(ran) == 1 else second).set()
        if element == "old":
            await release.wait()

    async with scheduler:
        if extra:
            await scheduler.schedule("sync", NEW_YEAR, id="s", element="old")
            assert await scheduler.run_now("sync", "s") is True
        else:
            await scheduler.schedule("sync", Every(3600), id="s", element="old")  # first run: now
        with anyio.fail_after(10):
            await first.wait()
        await scheduler.schedule("sync", Every(60), id="s", element="new")
        info = await store.info("sync", "s")
        assert info is not None
        assert info.claimed  # still held by the run: not filed beside it
        (during,) = await scheduler.schedules("sync")
        assert (during.trigger, during.element) == (Every(60), "new")
        assert during.next_run is not None
        assert abs(during.next_run.timestamp() - wall(store.clock)) < 5  # from now
        harness.advance(150)  # the new trigger's occurrences at +0, +60 and +120 pass meanwhile
        await anyio.sleep(0.3)
        assert len(ran) == 1
        release.set()
        with anyio.fail_after(10):
            await second.wait()
        scheduler.stop()
    (after,) = await scheduler.schedules("sync")
    assert [element for element, _ in ran] == ["old", "new"]
    assert ran[1][1] == during.next_run + timedelta(seconds=120)  # coalesced: the last one missed
    assert (after.trigger, after.element) == (Every(60), "new")
    assert after.next_run == during.next_run + timedelta(seconds=180)


async def test_unschedule_during_a_run_and_filing_again_wait_for_it_on_every_store(harness: Harness) -> None:
    """``unschedule`` while an occurrence runs writes ``REMOVED`` into the element the worker
    holds (each store's ``update``), and a schedule filed again under the same id is written into
    it in turn: none of its occurrences runs beside the run; when the run ends, each store's
    ``rearm`` files it at once, and the missed ones are coalesced. Unscheduled and not filed
    again, the element goes when the run ends."""
    store = harness.store
    scheduler = Scheduler(store, heartbeat=None, grace=1)
    release = anyio.Event()
    ran: list[tuple[Any, Any]] = []
    arrived = [anyio.Event() for _ in range(4)]

    async def runs(count: int) -> None:
        with anyio.fail_after(10):
            await arrived[count - 1].wait()

    @scheduler.handler("sync", lease=600)
    async def sync(element: Any) -> None:
        ran.append((element, current_delivery().scheduled_for))
        arrived[min(len(ran), len(arrived)) - 1].set()
        if element in ("old", "lone"):
            await release.wait()

    async with scheduler:
        await scheduler.schedule("sync", Every(3600), id="s", element="old")  # first run: now
        await scheduler.schedule("sync", Every(3600), id="lone", element="lone")
        await runs(2)
        assert await scheduler.unschedule("sync", "s") is True
        assert await scheduler.unschedule("sync", "lone") is True
        assert await scheduler.schedules("sync") == []
        await scheduler.schedule("sync", Every(60), id="s", element="new")
        (during,) = await scheduler.schedules("sync")
        assert (during.id, during.element) == ("s", "new")
        assert during.next_run is not None
        assert (await store.info("sync", "s")).claimed  # type: ignore[union-attr]
        harness.advance(150)  # the new schedule's occurrences at +0, +60 and +120 pass meanwhile
        await anyio.sleep(0.3)
        assert len(ran) == 2
        release.set()
        await runs(3)
        scheduler.stop()
    assert sorted(element for element, _ in ran[:2]) == ["lone", "old"]
    assert ran[2:] == [("new", during.next_run + timedelta(seconds=120))]  # coalesced
    assert await store.look("sync", "lone") is None
    (after,) = await scheduler.schedules("sync")
    assert (after.trigger, after.element) == (Every(60), "new")


async def test_a_requeued_occurrence_keeps_its_scheduled_for_on_every_store(harness: Harness) -> None:
    """A dead-lettered occurrence goes back through each store (its envelope serialized, with no
    trigger) and runs with the ``scheduled_for`` its first run had, once: the handler fixed and
    the workers restarted, the dead letter is requeued."""
    store = harness.store
    seen: list[Any] = []

    def start(fails: bool) -> tuple[Scheduler, anyio.Event]:
        scheduler = Scheduler(store, heartbeat=None, grace=1)
        ran = anyio.Event()

        @scheduler.handler("nightly", retry=Retry(attempts=1))
        async def nightly(element: Any) -> None:
            seen.append((element, current_delivery().scheduled_for))
            ran.set()
            if fails:
                raise RuntimeError("fails until fixed")

        return scheduler, ran

    broken, ran = start(fails=True)
    async with broken:
        await broken.schedule("nightly", Every(3600), id="n", element={"team": 7})  # due now
        with anyio.fail_after(10):
            await ran.wait()
        broken.stop()  # (the dead letter is written before the scheduler is done)
    fixed, ran = start(fails=False)
    async with fixed:
        (letter,) = await fixed.dead_letters("nightly")
        assert await fixed.requeue("nightly") == [letter.id]
        with anyio.fail_after(10):
            await ran.wait()
        fixed.stop()
    assert len(seen) == 2
    assert seen[1] == seen[0]
    assert seen[0][1] is not None
    assert letter.id == f"n@{seen[0][1].isoformat()}"
    assert await fixed.dead_letters("nightly") == []
    assert [info.id for info in await fixed.schedules("nightly")] == ["n"]


# -- a store restart loses no schedule ------------------------------------------------------------

# Built outside the event loop: a zone's first use reads its file (blockbuster would object).
PARIS_8AM = Cron("0 8 * * *", tz="Europe/Paris")


@attrs.define
class Durable:
    """A durable store's data, and a way to end its server and bring it back on the same data."""

    #: A new store object on the data (not opened).
    open: Callable[[], Store]
    #: Stop the server abruptly and start it again on the same data (blocking; nothing for SQLite).
    restart: Callable[[], None]


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Durable]:
    if request.param == "sqlite":
        # Closing the store and opening the file from a new store object is SQLite's restart.
        yield Durable(open=lambda: SQLiteStore(tmp_path / "schedules.db"), restart=lambda: None)
    elif request.param == "redis":
        # SIGKILL (no shutdown save): the AOF, fsynced at every write, is all that comes back.
        redis = RedisServer(dir=tmp_path, appendonly=True).start()

        def restart() -> None:
            redis.stop(kill=True)
            redis.start()

        try:
            yield Durable(open=lambda: RedisStore.from_url(redis.url, prefix="restart"), restart=restart)
        finally:
            redis.cleanup()
    else:
        # A server of this test's own (half a second to make): pg_ctl stop -m immediate is a crash
        # as far as the database is concerned, and the next start replays the WAL.
        skip_without_server()
        with PostgresServer() as pg:
            yield Durable(open=lambda: PostgresStore.from_url(pg.url), restart=pg.restart)


async def test_a_store_restart_loses_no_schedule(durable: Durable) -> None:
    """Schedules filed (one by one, in a batch, paused, with a misfire policy) are all there after
    the store's server is killed and started again, unchanged, and they fire afterwards."""
    store = durable.open()
    scheduler = Scheduler(store, heartbeat=None)  # files schedules; serves none of them
    try:
        async with scheduler:
            await scheduler.schedule("tick", Every(0.2), id="tick", element={"k": 1})
            await scheduler.schedule_many(
                "reminders", [(f"user-{i}", PARIS_8AM, {"user": i}) for i in range(50)]
            )
            await scheduler.schedule("reminders", Every(60), id="late", misfire="skip", grace=30)
            await scheduler.pause("reminders", "user-7")
            before = {name: await scheduler.schedules(name) for name in ("tick", "reminders")}
            scheduler.stop()
    finally:
        await store.aclose()
    assert len(before["reminders"]) == 51
    await anyio.to_thread.run_sync(durable.restart)

    store = durable.open()
    try:
        async with Scheduler(store, heartbeat=None) as lister:
            after = {name: await lister.schedules(name) for name in ("tick", "reminders")}
            lister.stop()
        assert after == before
        # Served from now on: the schedule fires (its first occurrence, then on its grid).
        runs: list[tuple[float, Any]] = []
        serving = Scheduler(store, heartbeat=None, grace=0)

        @serving.handler("tick")
        async def tick(element: Any) -> None:
            when = current_delivery().scheduled_for
            assert when is not None
            runs.append((when.timestamp(), element))
            if len(runs) == 3:
                three.set()

        three = anyio.Event()
        async with serving:
            with anyio.fail_after(20):
                await three.wait()
            serving.stop()
    finally:
        await store.aclose()
    (info,) = before["tick"]
    assert info.next_run is not None
    anchor = info.next_run.timestamp()
    nominal = [t for t, _ in runs]
    assert nominal == sorted(set(nominal))
    # On the grid to the µs (a Unix time in seconds holds about 7 decimals as a float).
    assert all(abs(t - anchor - 0.2 * round((t - anchor) / 0.2)) < 1e-5 for t in nominal)
    assert all(element == {"k": 1} for _, element in runs)
