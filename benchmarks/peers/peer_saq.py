"""SAQ: jobs deferred with ``queue.enqueue(..., scheduled=<epoch seconds>)``, one worker process.

Run by ``run.py`` in SAQ's own virtual environment; every setting is SAQ's default (concurrency
10, the scheduled set moved to the queue by a timer every second). ``scheduled`` is documented as
whole epoch seconds, but SAQ stores it as a sorted-set score and its own retries pass a float:
the benchmark passes the float, so rounding does not count against it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from importlib.metadata import version
from typing import Any

import harness
from saq import Queue, Worker


async def noop(ctx: dict[str, Any], *, i: int) -> None:
    harness.stamp(i)


def worker(args: argparse.Namespace) -> int:
    async def serve() -> None:  # what ``saq.worker.start`` does, without importing settings by name
        queue = Queue.from_url(args.redis)
        w = Worker(queue=queue, functions=[noop])
        try:
            await queue.connect()
            await w.start()  # handles SIGTERM itself
        finally:
            await queue.disconnect()

    asyncio.run(serve())
    return 0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    proc = harness.start_worker(
        [sys.executable, __file__, "--worker", "--redis", args.redis], harness.worker_log()
    )
    try:
        queue = Queue.from_url(args.redis)
        await queue.connect()
        try:

            async def enqueue_in(i: int, delay: float) -> None:
                if delay:
                    await queue.enqueue("noop", i=i, scheduled=time.time() + delay)
                else:
                    await queue.enqueue("noop", i=i)

            async def enqueue_at(i: int, when: float) -> None:
                await queue.enqueue("noop", i=i, scheduled=when)

            figures = await harness.measure(enqueue_in, enqueue_at, **harness.measure_args(args))
        finally:
            await queue.disconnect()
    finally:
        harness.stop_worker(proc)
    return {
        "system": "SAQ, defaults",
        "versions": {"saq": version("saq"), "redis-py": version("redis")},
        **figures,
    }


if __name__ == "__main__":
    args = harness.parser(__doc__ or "").parse_args()
    sys.exit(worker(args) if args.worker else harness.main(run, args))
