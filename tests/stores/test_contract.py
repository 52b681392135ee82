"""The store contract, run against every store of this package.

The suite itself is ``rehydrate.testing.contract``, exported so that a store written elsewhere
runs the same tests (``docs/reference/testing.md``); here each of its parts runs over every
harness (``tests/stores/conftest.py``), on asyncio and trio. What only this package's stores
promise is checked beside it.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from anyio import wait_all_tasks_blocked

from rehydrate import Every, Scheduler, current_delivery
from rehydrate.abc import Capabilities
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock, contract
from rehydrate.testing.contract import Harness

pytestmark = pytest.mark.anyio

#: The worked example of a store written against the contract alone (``docs/stores.md``).
_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "contract_store"


class TestVerbs(contract.VerbsContract):
    pass


class TestLeases(contract.LeasesContract):
    pass


class TestSummary(contract.SummaryContract):
    pass


class TestSubscriptions(contract.SubscriptionsContract):
    pass


class TestBadInput(contract.BadInputContract):
    async def test_a_cap_is_an_option_of_the_url_and_of_the_constructor(self, harness: Harness) -> None:
        """The contract's check, and the default is this package's backend's own limit, as
        ``docs/stores.md`` names it."""
        await super().test_a_cap_is_an_option_of_the_url_and_of_the_constructor(harness)
        limit = harness.store.max_element_bytes  # type: ignore[attr-defined]
        assert limit in (1_000_000_000 - 65536, 500 * 1024 * 1024, 512 * 1024 * 1024)


class TestLifecycle(contract.LifecycleContract):
    pass


class TestWorkers(contract.WorkersContract):
    pass


class TestSerializers(contract.SerializersContract):
    pass


class TestRevisions(contract.RevisionsContract):
    pass


class TestLimits(contract.LimitsContract):
    pass


def test_every_store_declares_every_capability() -> None:
    """The stores of this package offer all the contract has: none of its tests is skipped on
    them for want of a capability, and the scheduler uses all of it."""
    from rehydrate.stores import PostgresStore, RedisStore, SQLiteStore

    every = Capabilities(claim_ahead=True, workers=True, limits=True)
    # (Beyond the verbs: a schema to migrate where the store keeps one; no round trip in memory.)
    assert MemoryStore.capabilities == attrs.evolve(every, in_process=True)
    assert SQLiteStore.capabilities == attrs.evolve(every, migrate=True)
    assert RedisStore.capabilities == every
    assert PostgresStore.capabilities == attrs.evolve(every, migrate=True)


async def test_a_store_of_the_contract_alone_serves_recurring_schedules() -> None:
    """A schedule's rules are written above the store, on its compare-and-set verbs: a store
    that implements the contract's abstract verbs and nothing else (the worked example of
    ``docs/stores.md``) passes the tests of a schedule changed, removed or ended while it runs
    (once tests of store verbs of their own, ``*_unless_held`` and ``rearm``), and runs a
    schedule's occurrences."""
    sys.path.insert(0, str(_EXAMPLE))
    try:
        from dict_store import DictStore
    finally:
        sys.path.pop(0)

    for test in (
        TestVerbs().test_a_schedule_change_is_filed_anew_unless_a_worker_holds_it,
        TestVerbs().test_a_schedule_is_removed_unless_a_worker_holds_it,
        TestVerbs().test_a_change_written_while_a_schedule_runs_is_kept,
        TestVerbs().test_a_change_written_while_an_extra_run_runs_is_kept,
    ):
        clock = FakeClock(1000.0)
        async with DictStore(clock=clock) as store:
            await test(Harness(store=store, advance=clock.advance))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    clock = FakeClock(start)
    runs: list[datetime | None] = []
    async with DictStore(clock=clock) as store:
        scheduler = Scheduler(store, grace=0)

        @scheduler.handler("job")
        async def job(element: Any) -> None:
            runs.append(current_delivery().scheduled_for)

        async with scheduler:
            await scheduler.schedule("job", Every(10, start=start + timedelta(seconds=10)), id="j")
            for _ in range(3):
                await wait_all_tasks_blocked()
                clock.advance(10)
                await wait_all_tasks_blocked()
            scheduler.stop()
    assert runs == [start + timedelta(seconds=10 * i) for i in (1, 2, 3)]
