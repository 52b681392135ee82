"""The claim-check pattern, self-cleaning: park a large payload, pass only its id along.

The ReDe README suggests a dehydrator as "a self cleaning claims check, to minimize load on
transportation and manipulation nodes of a pipeline architecture". Here an upload service parks
each uploaded image (a large payload) in the dehydrator ``uploads.parked`` with a TTL, and sends
the thumbnail worker a small ticket that names it. The worker redeems the ticket: it reads the
payload, does its work, then PULLs the payload away. A payload nobody redeems in time expires, and
a janitor collects it with POLL: nothing has to remember to delete it.

* ``cat.png``: redeemed by the worker;
* ``dog.png``: its ticket is lost (a dropped message, a crashed producer): the janitor collects the
  payload when its TTL runs out;
* ``fox.png``: its ticket is delivered after the payload's TTL: the worker finds it expired.

Payloads and tickets share one store here; with ``redis://`` the upload service, the workers and
the janitor can run on different machines.

Run it with ``python examples/claim_check.py``; ``tests/test_examples.py`` drives :func:`run` with
a fake clock.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog

from rehydrate import Scheduler
from rehydrate.abc import Store
from rehydrate.stores import MemoryStore

PARKED = "uploads.parked"  # the claim-check store: large payloads, each with a TTL
THUMBNAILS = "thumbnails"  # the work queue: small tickets that name a parked payload

TTL = 10  # time units a parked payload waits for its ticket to be redeemed
#: filename -> when its ticket reaches the worker (time units after the upload).
UPLOADS = {"cat.png": 1, "dog.png": 2, "fox.png": 15}
LOST = {"dog.png"}  # the tickets that never arrive


async def park(store: Store, filename: str, data: bytes, *, ttl: float) -> str:
    """Check a payload in: keep it ``ttl`` seconds, and return the claim id that redeems it."""
    return await store.push(PARKED, {"filename": filename, "data": data}, ttl=ttl)


async def janitor(store: Store, on_expired: Callable[[dict[str, Any]], None]) -> None:
    """Collect the payloads whose TTL ran out unredeemed: POLL, then sleep until the next expiry."""
    # Subscribe before reading TTN, so a payload parked meanwhile wakes us (the scheduler's rule).
    async with store.subscribe(PARKED) as subscription:
        while True:
            for upload in await store.poll(PARKED):
                on_expired(upload)
            await subscription.wait(await store.ttn(PARKED))  # None: nothing parked, wait for a push


@dataclass
class Outcome:
    thumbnails: dict[str, str] = field(default_factory=dict)  # filename -> sha256 of its payload
    expired_tickets: list[str] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)
    ticket_size: int = 0  # bytes of the largest ticket, as JSON


async def run(store: Store, *, unit: float = 1.0, size: int = 1 << 20) -> Outcome:
    """Upload :data:`UPLOADS` (``size`` bytes each); what the worker and the janitor did."""
    scheduler = Scheduler(store)
    outcome = Outcome()
    clock = store.clock
    start = clock()

    def say(message: str) -> None:
        print(f"{(clock() - start) / unit:5.1f}  {message}")

    def collected(upload: dict[str, Any]) -> None:
        outcome.collected.append(upload["filename"])
        say(f"janitor: {upload['filename']} expired unclaimed, {len(upload['data'])} bytes freed")

    @scheduler.handler(THUMBNAILS)
    async def make_thumbnail(ticket: dict[str, str]) -> None:
        # Read the payload, and remove it only once the work is done: if this handler fails or its
        # process dies, the ticket is delivered again and the payload is still there.
        upload = await store.look(PARKED, ticket["claim"])
        if upload is None:
            say(f"worker: ticket for {ticket['filename']} came too late, its payload expired")
            outcome.expired_tickets.append(ticket["filename"])
            return
        digest = hashlib.sha256(upload["data"]).hexdigest()
        outcome.thumbnails[ticket["filename"]] = digest
        await store.pull(PARKED, ticket["claim"])
        say(f"worker: thumbnail of {ticket['filename']} ({len(upload['data'])} bytes, sha256 {digest[:12]})")

    async with scheduler, anyio.create_task_group() as tg:
        tg.start_soon(janitor, store, collected)
        for filename, delay in UPLOADS.items():
            data = hashlib.sha256(filename.encode()).digest() * (size // 32)
            claim = await park(store, filename, data, ttl=TTL * unit)
            ticket = {"claim": claim, "filename": filename}
            ticket_size = len(json.dumps(ticket))
            outcome.ticket_size = max(outcome.ticket_size, ticket_size)
            ticket_id = await scheduler.defer(THUMBNAILS, ticket, delay=delay * unit)
            say(f"parked {filename} ({len(data)} bytes) as {claim}, sent a {ticket_size}-byte ticket")
            if filename in LOST:
                await scheduler.cancel(THUMBNAILS, ticket_id)  # the message is lost on the way
                say(f"the ticket for {filename} is lost")
        await clock.sleep((max(UPLOADS.values()) + 1) * unit)
        tg.cancel_scope.cancel()  # stop the janitor; leaving the scheduler stops the worker
    return outcome


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"time in units of 50 ms; payloads are parked for {TTL}")
    outcome = anyio.run(functools.partial(run, MemoryStore(), unit=0.05))
    print(
        f"redeemed {sorted(outcome.thumbnails)}, collected {outcome.collected}, "
        f"expired tickets {outcome.expired_tickets}"
    )


if __name__ == "__main__":
    main()
