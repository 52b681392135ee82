"""The scheduler's hand-backs on every store of the contract suite: what a graceful stop gives
back is no attempt (``Store.hand_back``), through each store's own script, transaction or
statement, and the scheduler's retry policy sees it so."""

from __future__ import annotations

import anyio
import pytest

from rehydrate import Backoff, Retry, Scheduler, current_delivery

from .harnesses import Harness

pytestmark = pytest.mark.anyio

#: Retries due at once: the run after a failure comes without moving any store's clock.
AT_ONCE = Backoff(initial=0, jitter=0)


async def test_graceful_stops_use_up_no_attempt_on_every_store(harness: Harness) -> None:
    """``Retry(attempts=2)``, a long job cut short by two graceful stops (two deploys), then a
    run that fails: it is retried, and only the retry's failure dead-letters it, as attempt 2."""
    store = harness.store
    await store.push("jobs", "long", ttl=0, id="j")
    runs: list[int] = []
    started = anyio.Event()

    def deploy() -> Scheduler:
        scheduler = Scheduler(store, heartbeat=None, grace=0)

        @scheduler.handler("jobs", retry=Retry(attempts=2, backoff=AT_ONCE))
        async def job(element: str) -> None:
            runs.append(current_delivery().attempt)
            started.set()
            if len(runs) <= 2:
                await anyio.sleep_forever()  # the long job, cut short by the stop
            raise ValueError("boom")

        return scheduler

    for n in (1, 2):
        started = anyio.Event()
        async with deploy():  # leaving it stops the scheduler, as SIGTERM does a worker's
            with anyio.fail_after(10):
                await started.wait()
        assert runs == [1] * n
        info = await store.info("jobs", "j")
        assert info is not None
        assert (info.claimed, info.attempt) == (False, 0)
    scheduler = deploy()
    async with scheduler:
        # The dead letter is written after the handler's last failure: looked for, then a nap
        # (the stores work in threads or over sockets, which no event here tells of).
        with anyio.fail_after(10):
            while True:
                if letters := await scheduler.dead_letters("jobs"):
                    break
                await anyio.sleep(0.01)
    assert runs == [1, 1, 1, 2]
    (letter,) = letters
    assert (letter.id, letter.attempts) == ("j", 2)
    assert await store.size("jobs") == 0
