"""The store contract, run against every store of this package.

The suite itself is ``rehydrate.testing.contract``, exported so that a store written elsewhere
runs the same tests (``docs/reference/testing.md``); here each of its parts runs over every
harness (``tests/stores/conftest.py``), on asyncio and trio. What only this package's stores
promise is checked beside it.
"""

from __future__ import annotations

import attrs
import pytest

from rehydrate.abc import Capabilities, Store
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock, contract
from rehydrate.testing.contract import Harness

pytestmark = pytest.mark.anyio


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

    every = Capabilities(claim_ahead=True, rearm=True, workers=True, limits=True)
    # (Beyond the verbs: a schema to migrate where the store keeps one; no round trip in memory.)
    assert MemoryStore.capabilities == attrs.evolve(every, in_process=True)
    assert SQLiteStore.capabilities == attrs.evolve(every, migrate=True)
    assert RedisStore.capabilities == every
    assert PostgresStore.capabilities == attrs.evolve(every, migrate=True)


class _Defaults(MemoryStore):
    """A store that leaves ``replace_unless_held`` and ``pull_unless_held`` to :class:`Store`."""

    replace_unless_held = Store.replace_unless_held
    pull_unless_held = Store.pull_unless_held


async def test_the_default_unless_held_verbs_keep_the_contract() -> None:
    """A store that does not implement them gets :class:`Store`'s (a read, then the change:
    the same answers, without the atomicity)."""
    for test in (TestVerbs().test_replace_unless_held, TestVerbs().test_pull_unless_held):
        clock = FakeClock(1000.0)
        async with _Defaults(clock=clock) as store:
            await test(Harness(store=store, advance=clock.advance))
