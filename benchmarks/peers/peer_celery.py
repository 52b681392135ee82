"""Celery: tasks sent with ``apply_async(countdown=)`` / ``apply_async(eta=)`` to a Redis broker,
one worker process with the threads pool.

Run by ``run.py`` in Celery's own virtual environment. Settings are Celery's defaults (threads pool
of as many threads as CPUs, prefetch multiplier 4, no result backend) but for the pool. ETA tasks
are fetched at once and held in the worker's memory until due: that is Celery's design, measured
as it is.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import harness
from celery import Celery

app = Celery("peers", broker=os.environ.get("PEERS_REDIS", "redis://127.0.0.1:1/0"))
app.conf.broker_connection_retry_on_startup = True
app.conf.task_ignore_result = True


@app.task(name="noop")
def noop(i: int) -> None:
    harness.stamp(i)


def worker(args: argparse.Namespace) -> int:
    app.worker_main(["worker", "--pool=threads", "--loglevel=WARNING"])  # warm shutdown on SIGTERM
    return 0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    proc = harness.start_worker(
        [sys.executable, __file__, "--worker"], harness.worker_log(), env={"PEERS_REDIS": args.redis}
    )
    try:
        # Celery's producer API is synchronous: each call blocks until the broker has the message.

        async def enqueue_in(i: int, delay: float) -> None:
            noop.apply_async((i,), countdown=delay or None)

        async def enqueue_at(i: int, when: float) -> None:
            noop.apply_async((i,), eta=datetime.fromtimestamp(when, UTC))

        figures = await harness.measure(enqueue_in, enqueue_at, **harness.measure_args(args))
    finally:
        harness.stop_worker(proc)
    return {
        "system": "Celery, threads pool",
        "versions": {"celery": version("celery"), "kombu": version("kombu"), "redis-py": version("redis")},
        **figures,
    }


if __name__ == "__main__":
    args = harness.parser(__doc__ or "").parse_args()
    if args.redis:
        os.environ["PEERS_REDIS"] = args.redis
        app.conf.broker_url = args.redis
    sys.exit(worker(args) if args.worker else harness.main(run, args))
