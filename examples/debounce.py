"""Debounce: a burst of edits to a document gives one delivery, with the latest content.

Every edit re-defers the document under its own id, ``quiet`` seconds from now, replacing the
delivery still pending. So the handler (here: reindex the document for search) runs once the
user has stopped typing for ``quiet`` seconds, with what they typed last. ``max_wait`` bounds the
wait: a burst that never pauses is still delivered ``max_wait`` after its first edit.

Plain debouncing is one call: ``defer(..., id=doc, replace=True)`` files the new content in place
of the pending one, due anew. This example also counts the edits of a burst and bounds its wait,
so it needs what the pending element held: it takes it back with ``cancel`` (ReDe's PULL, which
returns the element) and defers the merged one (``defer`` raises ``DuplicateIdError`` if another
edit got in between, and it merges again).

Run it with ``python examples/debounce.py``; ``tests/test_examples.py`` drives :func:`run` with a
fake clock.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from rehydrate import DuplicateIdError, Scheduler, current_delivery
from rehydrate.abc import Store
from rehydrate.stores import MemoryStore

REINDEX = "reindex"

#: document -> (how many edits the user makes, how many time units apart).
TYPING: dict[str, tuple[int, int]] = {
    "readme": (5, 1),  # a quick burst: one delivery, 10 units after the last edit
    "notes": (2, 3),
    "essay": (12, 4),  # never pauses for 10 units: delivered at 25 units (max_wait), then again
}
QUIET = 10  # units of silence before a document is reindexed
MAX_WAIT = 25  # units after a burst's first edit when it is reindexed even if edits continue


@dataclass(frozen=True)
class Reindexed:
    doc: str
    content: str
    #: How many edits the delivery stands for, and when it ran (time units since the start).
    edits: int
    at: float


async def edit(scheduler: Scheduler, doc: str, content: str, *, quiet: float, max_wait: float) -> float:
    """Record an edit of ``doc``: (re)defer its reindexing with ``content``; the delay chosen."""
    now = scheduler.store.clock()
    while True:
        # Take back the pending delivery, if any. (If it is already running, the handler finishes
        # with the content it has, and this newer content is delivered after it.)
        pending: dict[str, Any] | None = await scheduler.cancel(REINDEX, doc)
        first = now if pending is None else pending["first_edit"]
        edits = 1 if pending is None else pending["edits"] + 1
        delay = max(0.0, min(quiet, first + max_wait - now))
        element = {"doc": doc, "content": content, "first_edit": first, "edits": edits}
        try:
            await scheduler.defer(REINDEX, element, delay=delay, id=doc)
        except DuplicateIdError:
            continue  # another edit of this document got in between the two calls: replace it
        return delay


async def run(store: Store, *, unit: float = 1.0) -> list[Reindexed]:
    """Type :data:`TYPING` into three documents at once; the deliveries, in the order they ran."""
    scheduler = Scheduler(store)
    clock = store.clock
    start = clock()
    quiet, max_wait = QUIET * unit, MAX_WAIT * unit
    reindexed: list[Reindexed] = []

    def say(message: str) -> None:
        print(f"{(clock() - start) / unit:6.1f}  {message}")

    @scheduler.handler(REINDEX)
    async def reindex(element: dict[str, Any]) -> None:
        done = Reindexed(element["doc"], element["content"], element["edits"], (clock() - start) / unit)
        reindexed.append(done)
        say(
            f"reindex {done.doc!r} with {done.content!r} ({done.edits} edits merged, "
            f"attempt {current_delivery().attempt})"
        )

    async def type_into(doc: str, count: int, gap: int) -> None:
        for n in range(1, count + 1):
            delay = await edit(scheduler, doc, f"{doc} v{n}", quiet=quiet, max_wait=max_wait)
            say(f"  edit {doc} v{n}: reindex in {delay / unit:.1f}")
            if n < count:
                await clock.sleep(gap * unit)

    async with scheduler:
        async with anyio.create_task_group() as users:
            for doc, (count, gap) in TYPING.items():
                users.start_soon(type_into, doc, count, gap)
        # Everyone has stopped typing: after ``quiet`` more, every document has been reindexed.
        await clock.sleep(quiet + 5 * unit)
    return reindexed


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print("time in units of 20 ms: quiet", QUIET, "max_wait", MAX_WAIT)
    reindexed = anyio.run(functools.partial(run, MemoryStore(), unit=0.02))
    edits = sum(count for count, _ in TYPING.values())
    print(f"{edits} edits, {len(reindexed)} reindexings")


if __name__ == "__main__":
    main()
