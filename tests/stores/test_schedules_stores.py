"""Schedules filed in batches (``Scheduler.schedule_many``) on every store of the contract suite.

The upsert's rules are tested at length on the memory store (tests/test_schedules.py); here, that
each store's ``push_many`` and its all-or-nothing ``DuplicateIdError`` carry them: a first filing in
batches, then a restart declaring the same ones (nothing moves) with one changed and one new.
"""

from __future__ import annotations

from typing import Any

import pytest

from rehydrate import Every, Scheduler

from .harnesses import Harness

pytestmark = pytest.mark.anyio


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
        assert 29.9 <= after["user-1199"]["next"] - before["user-1199"]["next"] < 60
        assert after["user-1199"]["trigger"] == Every(600).to_dict()
        assert (await store.look("reminders", "new"))["trigger"] == Every(60).to_dict()
        scheduler.stop()
