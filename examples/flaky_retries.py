"""Delayed retries of a flaky HTTP call: exponential backoff with jitter, then dead letters.

Three webhooks go to three pretend HTTP services:

* ``flaky`` answers 503 twice, then 200: the webhook is delivered on its third attempt;
* ``outage`` answers 503 for longer than the retry policy lasts: the webhook is dead-lettered,
  then requeued by the operator once the service is back, and delivered;
* ``broken`` answers 400 to everything: a permanent error, not worth retrying
  (``Retry(on=TransientError)``): dead-lettered at once and reported.

After each failed attempt the scheduler reschedules the element ``backoff(attempt)`` seconds later
(doubling each time, less a random part of up to ``jitter`` of it, so that callers that failed
together do not retry together). After ``retry.attempts`` attempts it moves to the dead letters
(the dehydrator ``"webhooks.dead"``) with the last error.

Run it with ``python examples/flaky_retries.py``; ``tests/test_examples.py`` drives :func:`run`
with a fake clock and the retry policy of a real service (seconds, not milliseconds).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import structlog

import rehydrate
from rehydrate import Backoff, DeadLetter, Retry, Scheduler, Stats
from rehydrate.abc import Store
from rehydrate.stores import MemoryStore

WEBHOOKS = "webhooks"


class HTTPError(Exception):
    """A failed HTTP call."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status


class TransientError(HTTPError):
    """A 5xx answer: the service may be back later, so retrying is worth it."""


class PermanentError(HTTPError):
    """A 4xx answer: the request itself is wrong, so retrying will not help."""


@dataclass
class FakeService:
    """An HTTP endpoint that fails its first ``failures`` calls with 503, or every call with 400."""

    failures: int = 0
    permanent: bool = False
    calls: int = 0

    async def post(self, body: str) -> int:
        self.calls += 1
        await anyio.lowlevel.checkpoint()  # a real client would await the network here
        if self.permanent:
            raise PermanentError(400, "Bad Request")
        if self.calls <= self.failures:
            raise TransientError(503, "Service Unavailable")
        return 200


@dataclass
class Report:
    """What happened to the webhooks, for the caller (and the tests) to check."""

    #: webhook id -> (attempt, store-clock time) of every delivery of it, in order.
    attempts: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    #: webhook id -> the attempt that got a 200 (requeued webhooks count from 1 again).
    delivered: dict[str, int] = field(default_factory=dict)
    #: the dead letters found after the first round, and what the operator did with them.
    dead_letters: list[DeadLetter] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    reported: list[DeadLetter] = field(default_factory=list)
    stats: Stats | None = None


class _Settling:
    """Lets :func:`run` wait until every webhook it sent is settled: delivered, or out of attempts."""

    def __init__(self) -> None:
        self._pending: set[str] = set()
        self._done = anyio.Event()

    def expect(self, ids: Iterable[str]) -> None:
        self._pending = set(ids)
        self._done = anyio.Event()
        if not self._pending:
            self._done.set()

    def settle(self, id: str) -> None:
        self._pending.discard(id)
        if not self._pending:
            self._done.set()

    async def wait(self) -> None:
        await self._done.wait()


def is_transient(letter: DeadLetter) -> bool:
    """Whether a dead letter failed for a reason that may have gone away (a 5xx)."""
    # A dead letter keeps the repr of the last exception, not the exception itself.
    return letter.error.startswith(f"{TransientError.__name__}(")


async def run(
    store: Store,
    services: dict[str, FakeService],
    retry: Retry,
    rng: random.Random | None = None,
) -> Report:
    """Send one webhook to each service, then requeue the dead letters that failed transiently."""
    # The scheduler opens the store but does not close it (we gave it a store, not a URL), so the
    # dead letters can be read between the two rounds. ``rng`` makes the jitter reproducible.
    scheduler = Scheduler(store, rng=rng)
    report = Report()
    settling = _Settling()
    start = store.clock()

    def say(message: str) -> None:
        print(f"{store.clock() - start:7.2f}s  {message}")

    @scheduler.handler(WEBHOOKS, retry=retry)
    async def post_webhook(webhook: dict[str, str]) -> None:
        delivery = rehydrate.current_delivery()  # which element, which attempt
        report.attempts.setdefault(delivery.id, []).append((delivery.attempt, store.clock()))
        try:
            await services[webhook["service"]].post(webhook["body"])
        except HTTPError as exc:
            # Raising is how a handler fails: the scheduler reschedules the element with backoff,
            # or dead-letters it after the last attempt, or at once for an error the policy does
            # not retry (``retry.on``: a 400 will not pass on the next attempt).
            if retry.retries(exc) and delivery.attempt < retry.attempts:
                say(f"{delivery.id}: attempt {delivery.attempt} failed ({exc}), will retry")
            else:
                say(f"{delivery.id}: attempt {delivery.attempt} failed ({exc}), giving up")
                settling.settle(delivery.id)
            raise
        say(f"{delivery.id}: delivered on attempt {delivery.attempt}")
        report.delivered[delivery.id] = delivery.attempt
        settling.settle(delivery.id)

    ids = [f"hook-{name}" for name in services]
    settling.expect(ids)
    async with scheduler:
        for name, id in zip(services, ids, strict=True):
            await scheduler.defer(WEBHOOKS, {"service": name, "body": f"order 42 -> {name}"}, id=id)
        await settling.wait()
    # Leaving ``async with`` waited for the running handlers, so the last dead letter is written.

    say("-- every webhook is settled; later, the operator reads the dead letters --")
    report.dead_letters = await scheduler.dead_letters(WEBHOOKS)
    for letter in report.dead_letters:
        say(f"dead letter {letter.id}: {letter.attempts} attempts, last error {letter.error}")
    # The operator's rule: retry what failed transiently (the service is back now); report the rest.
    transient = [letter.id for letter in report.dead_letters if is_transient(letter)]
    report.reported = [letter for letter in report.dead_letters if not is_transient(letter)]

    settling.expect(transient)
    async with scheduler:
        # requeue() moves dead letters back, due in ``delay``, starting again at attempt 1.
        report.requeued = await scheduler.requeue(WEBHOOKS, transient)
        say(f"requeued {report.requeued}")
        await settling.wait()

    for letter in report.reported:
        say(f"needs a human: {letter.id} ({letter.error})")
    report.stats = scheduler.stats()
    return report


async def demo() -> Report:
    services = {
        "flaky": FakeService(failures=2),
        "outage": FakeService(failures=4),
        "broken": FakeService(permanent=True),
    }
    # Short delays so that the demonstration takes a moment; a real policy would start at seconds.
    retry = Retry(
        attempts=4,
        backoff=Backoff(initial=0.05, multiplier=2, maximum=1, jitter=0.5),
        on=TransientError,  # a 5xx may pass later; a 4xx will not
    )
    return await run(MemoryStore(), services, retry)


def main() -> None:
    # rehydrate logs through structlog and leaves its configuration to the application: show its
    # warnings (the dead letters), not its info lines (each retry, which we print ourselves).
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    report = anyio.run(demo)
    assert report.stats is not None
    print(
        f"delivered {sorted(report.delivered)}; still dead: {[letter.id for letter in report.reported]}; "
        f"{report.stats.retried} retries, {report.stats.dead_lettered} dead-lettered"
    )


if __name__ == "__main__":
    main()
