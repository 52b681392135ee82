"""The examples in ``examples/``: driven with a fake clock on both backends, and run as scripts.

Each example keeps its logic in a ``run`` function that takes a store (and the time scale), so
the tests give it a memory store on a :class:`~rehydrate.testing.FakeClock` and realistic delays
(seconds to minutes) and check what happened; then run each script once, as a user would.
"""

from __future__ import annotations

import importlib.util
import itertools
import random
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import anyio
import pytest

from rehydrate import Backoff, Retry, Scheduler
from rehydrate.stores import MemoryStore
from rehydrate.testing import FakeClock

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

T = TypeVar("T")


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (``examples`` is not a package)."""
    spec = importlib.util.spec_from_file_location(f"rehydrate_examples.{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


flaky_retries = load("flaky_retries")
debounce = load("debounce")
reminders = load("reminders")
claim_check = load("claim_check")


async def in_fake_time(clock: FakeClock, step: float, run: Callable[[], Awaitable[T]]) -> T:
    """Await ``run()`` while time moves ``step`` seconds whenever every task is blocked.

    Like trio's autojump clock: the example sleeps on its store's clock as it would in real time,
    and the test takes no longer than the work itself.
    """

    async def pump() -> None:
        while True:
            await anyio.wait_all_tasks_blocked()
            clock.advance(step)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            result = await run()
            tg.cancel_scope.cancel()
    return result


@pytest.mark.anyio
class TestDrivenWithAFakeClock:
    async def test_flaky_retries(self) -> None:
        """Backoff with jitter between attempts; dead letters inspected, requeued or reported."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        services = {
            "flaky": flaky_retries.FakeService(failures=2),
            "outage": flaky_retries.FakeService(failures=4),
            "broken": flaky_retries.FakeService(permanent=True),
        }
        backoff = Backoff(initial=1, multiplier=2, maximum=60, jitter=0.5)
        retry = Retry(attempts=4, backoff=backoff, on=flaky_retries.TransientError)
        step = 0.25
        report = await in_fake_time(
            clock, step, lambda: flaky_retries.run(store, services, retry, random.Random(5))
        )

        assert report.delivered == {"hook-flaky": 3, "hook-outage": 1}
        assert {name: s.calls for name, s in services.items()} == {"flaky": 3, "outage": 5, "broken": 1}
        # Attempt n + 1 comes backoff(n) after attempt n: between half of 2 ** (n - 1) seconds
        # (the jitter) and all of it, give or take one step of the fake clock.
        for id in ("hook-flaky", "hook-outage"):
            times = [t for _, t in report.attempts[id]][:4]  # the outage's first round
            for n, (before, after) in enumerate(itertools.pairwise(times), start=1):
                nominal = 2 ** (n - 1)
                assert 0.5 * nominal <= after - before <= nominal + step
        assert [a for a, _ in report.attempts["hook-outage"]] == [1, 2, 3, 4, 1]

        # Oldest first; which died first depends on the jitter each drew (trio shuffles its tasks).
        dead = sorted((d.id, d.attempts) for d in report.dead_letters)
        assert dead == [("hook-broken", 1), ("hook-outage", 4)]  # a 400 is not retried
        assert report.requeued == ["hook-outage"]
        [reported] = report.reported
        assert reported.id == "hook-broken"
        assert reported.element == {"service": "broken", "body": "order 42 -> broken"}
        assert reported.error == "PermanentError('400 Bad Request')"
        stats = report.stats
        assert (stats.delivered, stats.acked, stats.retried, stats.dead_lettered) == (9, 2, 5, 2)
        assert [d.id for d in await Scheduler(store).dead_letters("webhooks")] == ["hook-broken"]
        assert await store.size("webhooks") == 0

    async def test_debounce(self) -> None:
        """A burst gives one delivery with its last content; max_wait flushes an endless burst."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        got = await in_fake_time(clock, 1, lambda: debounce.run(store, unit=1))

        R = debounce.Reindexed
        assert got == [
            R("notes", "notes v2", edits=2, at=13),  # last edit at 3, quiet 10
            R("readme", "readme v5", edits=5, at=14),  # last edit at 4
            R("essay", "essay v7", edits=7, at=25),  # first edit at 0, max_wait 25
            R("essay", "essay v12", edits=5, at=53),  # a new burst from 28: 44 + min(10, 28 + 25 - 44)
        ]
        assert await store.size("reindex") == 0

    async def test_debounce_edit_replaces_the_pending_delivery(self) -> None:
        """edit() re-defers the same id later with the new content, carrying the burst over."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        await store.open()
        scheduler = Scheduler(store)  # not running: nothing is delivered
        assert await debounce.edit(scheduler, "doc", "a", quiet=30, max_wait=60) == 30
        clock.advance(20)
        assert await debounce.edit(scheduler, "doc", "b", quiet=30, max_wait=60) == 30
        assert await store.size("reindex") == 1
        assert await store.look("reindex", "doc") == {
            "doc": "doc",
            "content": "b",
            "first_edit": 0.0,
            "edits": 2,
        }
        info = await store.info("reindex", "doc")
        assert info is not None
        assert info.due == 50
        clock.advance(35)
        assert await debounce.edit(scheduler, "doc", "c", quiet=30, max_wait=60) == 5  # max_wait

    async def test_reminders(self) -> None:
        """Reminders at datetimes fire in order across a restart; cancelled ones do not; edits show."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        outcome = await in_fake_time(
            clock, 5, lambda: reminders.run(lambda: store, spacing=timedelta(minutes=10))
        )

        assert [(f.user, f.text) for f in outcome.fired] == [
            ("ann", "tea is ready"),
            ("bob", "standup moved to room 4"),
            ("ann", "dentist"),
        ]
        assert [f.at for f in outcome.fired] == sorted(f.at for f in outcome.fired)
        # ``at`` is converted to a delay from the wall clock's now when deferred, so a reminder is
        # due a hair (the real time the test took) before its ten minutes: within one step.
        assert all(0 <= f.lateness <= 5 for f in outcome.fired)
        assert clock() <= 3.5 * 600 + 5
        assert [r["text"] for r in outcome.pending_at_restart] == ["standup moved to room 4", "dentist"]
        assert (outcome.late_change, outcome.late_cancel) == (False, False)
        async with store:  # closed by the example's restart; a memory store keeps its elements
            assert await store.size("reminders") == 0

    async def test_claim_check(self) -> None:
        """Redeemed payloads are pulled; unredeemed ones expire and the janitor's poll collects them."""
        clock = FakeClock()
        store = MemoryStore(clock=clock)
        outcome = await in_fake_time(clock, 0.5, lambda: claim_check.run(store, unit=60, size=4096))

        assert list(outcome.thumbnails) == ["cat.png"]
        assert outcome.collected == ["dog.png", "fox.png"]
        assert outcome.expired_tickets == ["fox.png"]
        assert outcome.ticket_size < 100  # the ticket carries the claim id, not the payload
        assert await store.size("uploads.parked") == 0
        assert await store.size("thumbnails") == 0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "flaky_retries",
            [
                "hook-flaky: delivered on attempt 3",
                "hook-broken: attempt 1 failed (400 Bad Request), giving up",
                "requeued ['hook-outage']",
                "hook-outage: delivered on attempt 1",
                "delivered ['hook-flaky', 'hook-outage']; still dead: ['hook-broken']",
            ],
        ),
        # The two below run in real time (20 ms units, 0.3 s spacing): on a loaded machine a unit
        # can slip, and how edits group or when a cancel lands with it. What they must print
        # whatever the timing is checked here; their exact outcomes, in fake time, above.
        (
            "debounce",
            [
                "reindex 'readme' with 'readme v5'",  # the last edit is always delivered
                "reindex 'essay' with 'essay v12'",
                "19 edits, ",
            ],
        ),
        (
            "reminders",
            [
                "-- the service restarts --",
                "REMINDER for ann: dentist",
                " reminders fired, at most ",
            ],
        ),
        (
            "claim_check",
            [
                "worker: thumbnail of cat.png (1048576 bytes",
                "janitor: dog.png expired unclaimed, 1048576 bytes freed",
                "worker: ticket for fox.png came too late",
                "redeemed ['cat.png'], collected ['dog.png', 'fox.png'], expired tickets ['fox.png']",
            ],
        ),
    ],
)
def test_script_runs(name: str, expected: list[str]) -> None:
    """``python examples/<name>.py`` runs to completion, with warnings as errors, and says so."""
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    for line in expected:
        assert line in done.stdout, f"{line!r} not in:\n{done.stdout}"


def test_examples_use_the_public_api_only() -> None:
    for path in EXAMPLES.rglob("*.py"):  # (a store written against the contract too)
        source = path.read_text()
        assert "rehydrate._" not in source, path.name
        assert "from rehydrate.stores._" not in source, path.name
