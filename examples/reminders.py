"""A reminder service: remind a user at a given time, cancel a reminder, change one before it fires.

``Scheduler.defer(..., at=<aware datetime>)`` defers an element to a moment rather than by a
delay. The reminders live in a SQLite file, so they survive a restart: the service is stopped
half-way and started again on the same file, and the remaining reminders still fire on time.

* ``add`` is ``defer(at=...)``; the id it returns is the reminder's handle;
* ``cancel`` is ``Scheduler.cancel`` (ReDe's PULL);
* ``change_text`` is the store's ``update`` (ReDe's UPDATE): it replaces the element and keeps its
  due time. The scheduler has no ``update`` of its own, so it goes through ``scheduler.store``.

Run it with ``python examples/reminders.py``; ``tests/test_examples.py`` drives :func:`run` with a
memory store and a fake clock, reminders minutes apart.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import structlog

import rehydrate
from rehydrate import Scheduler, UnknownIdError, current_delivery
from rehydrate.abc import Store

REMINDERS = "reminders"


@dataclass(frozen=True)
class Fired:
    id: str
    user: str
    text: str
    at: datetime
    #: Seconds between the due time and the delivery.
    lateness: float


def clock_time(at: datetime) -> str:
    return at.strftime("%H:%M:%S.%f")[:-3]


def make_scheduler(store: Store, fired: list[Fired]) -> Scheduler:
    """A scheduler whose handler "sends" each reminder (prints it) and records it in ``fired``."""
    scheduler = Scheduler(store)

    @scheduler.handler(REMINDERS)
    async def remind(reminder: dict[str, str]) -> None:
        delivery = current_delivery()
        at = datetime.fromisoformat(reminder["at"])
        fired.append(Fired(delivery.id, reminder["user"], reminder["text"], at, delivery.lateness))
        print(f"  REMINDER for {reminder['user']}: {reminder['text']} (set for {clock_time(at)})")

    return scheduler


async def add(scheduler: Scheduler, user: str, text: str, at: datetime) -> str:
    """Remind ``user`` of ``text`` at ``at`` (timezone-aware); the reminder's id."""
    # The element is JSON data, as the SQLite and Redis stores' default serializer wants.
    return await scheduler.defer(REMINDERS, {"user": user, "text": text, "at": at.isoformat()}, at=at)


async def cancel(scheduler: Scheduler, id: str) -> bool:
    """Cancel a reminder; ``False`` if it has already fired (or was cancelled)."""
    return await scheduler.cancel(REMINDERS, id) is not None


async def change_text(scheduler: Scheduler, id: str, text: str) -> bool:
    """Change what a reminder says, keeping its time; ``False`` if it has already fired."""
    reminder: dict[str, str] | None = await scheduler.store.look(REMINDERS, id)
    if reminder is None:
        return False
    try:
        await scheduler.store.update(REMINDERS, id, {**reminder, "text": text})
    except UnknownIdError:  # it fired between the look and the update
        return False
    return True


async def upcoming(scheduler: Scheduler) -> list[dict[str, Any]]:
    """The pending reminders, soonest first."""
    reminders = []
    for id in await scheduler.store.ids(REMINDERS):
        reminder = await scheduler.store.look(REMINDERS, id)
        if reminder is not None:
            reminders.append({"id": id, **reminder})
    return reminders


@dataclass
class Outcome:
    fired: list[Fired]
    #: What was pending across the restart, and what the late edit and cancel returned.
    pending_at_restart: list[dict[str, Any]]
    late_change: bool
    late_cancel: bool


async def run(open_store: Callable[[], Store], *, spacing: timedelta) -> Outcome:
    """Set four reminders ``spacing`` apart, cancel one, change one, restart half-way, let them fire.

    ``open_store`` is called once per start of the service: with a SQLite file, the second call
    opens the file the first one wrote; a memory store has to be the same object both times.
    """
    fired: list[Fired] = []
    start = datetime.now(UTC)
    step = spacing.total_seconds()

    print("-- the service starts --")
    async with open_store() as store:
        scheduler = make_scheduler(store, fired)
        async with scheduler:
            tea = await add(scheduler, "ann", "tea is ready", start + spacing)
            standup = await add(scheduler, "bob", "standup in room 2", start + 2 * spacing)
            await add(scheduler, "ann", "dentist", start + 3 * spacing)
            gym = await add(scheduler, "bob", "gym", start + 4 * spacing)
            print(f"  set 4 reminders; cancel bob's gym: {await cancel(scheduler, gym)}")
            changed = await change_text(scheduler, standup, "standup moved to room 4")
            print(f"  change bob's standup: {changed}")
            # Sleep on the store's clock (a fake one in the tests) until the first has fired.
            await store.clock.sleep(1.5 * step)
    # Leaving the blocks stopped the scheduler and closed the store: a restart, or a crash after
    # the last push; the SQLite store had every reminder on disk when ``defer`` returned.
    print("-- the service restarts --")
    async with open_store() as store:
        scheduler = make_scheduler(store, fired)
        pending = await upcoming(scheduler)
        for reminder in pending:
            at = datetime.fromisoformat(reminder["at"])
            print(f"  pending: {reminder['user']}: {reminder['text']} at {clock_time(at)}")
        async with scheduler:
            late_change = await change_text(scheduler, tea, "tea is cold")
            late_cancel = await cancel(scheduler, tea)
            print(f"  change or cancel ann's tea now? {late_change}, {late_cancel}: it has fired")
            await store.clock.sleep(2 * step)
    return Outcome(fired, pending, late_change, late_cancel)


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'reminders.db'}"
        outcome = anyio.run(
            functools.partial(run, lambda: rehydrate.open_store(url), spacing=timedelta(seconds=0.3))
        )
    worst = max(f.lateness for f in outcome.fired)
    print(f"{len(outcome.fired)} reminders fired, at most {worst * 1000:.0f} ms late")


if __name__ == "__main__":
    main()
