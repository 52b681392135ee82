"""rehydrate, measured by the same method as its peers: ``Scheduler.defer(delay=/at=)``.

Run by ``run.py`` with the interpreter that runs ``run.py`` (the project's environment, where
rehydrate is installed). ``--config``:

* ``redis``: a worker process, ``rehydrate worker peer_rehydrate:make_scheduler --store URL``, on
  the throwaway Redis server; the producer defers through a ``Scheduler`` of its own;
* ``sqlite``: the same on a SQLite file (a worker process and the producer share it);
* ``memory``: the scheduler and its handler in the producer's own process and event loop.

The handler has the scheduler's defaults (concurrency 100, claims of up to 100, lease 30 s).
``--producers 64`` defers from 64 tasks at once instead of one.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import harness

NAME = "peers"
HERE = Path(__file__).resolve().parent


def make_scheduler() -> Any:
    """The worker's target: a scheduler whose one handler stamps each job."""
    from rehydrate import Scheduler

    scheduler = Scheduler()

    @scheduler.handler(NAME)
    async def noop(element: int) -> None:
        harness.stamp(element)

    return scheduler


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from rehydrate import Scheduler

    config = args.config or "redis"
    proc = None
    if config == "memory":
        producer = make_scheduler()
    else:
        if config == "redis":
            url = args.redis
        elif config == "sqlite":
            url = f"sqlite:///{os.environ[harness.STAMPS_ENV]}.db"
        else:
            raise ValueError(f"unknown config {config!r}: redis, sqlite or memory")
        proc = harness.start_worker(
            [
                sys.executable,
                "-m",
                "rehydrate",
                "-q",
                "worker",
                "peer_rehydrate:make_scheduler",
                "--store",
                url,
            ],
            harness.worker_log(),
            env={"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))},
        )
        producer = Scheduler(url)
    try:
        async with producer:

            async def enqueue_in(i: int, delay: float) -> None:
                await producer.defer(NAME, i, delay=delay)

            async def enqueue_at(i: int, when: float) -> None:
                await producer.defer(NAME, i, at=datetime.fromtimestamp(when, UTC))

            figures = await harness.measure(enqueue_in, enqueue_at, **harness.measure_args(args))
    finally:
        if proc is not None:
            harness.stop_worker(proc)
    label = {
        "redis": "rehydrate, Redis, worker process",
        "sqlite": "rehydrate, SQLite, worker process",
        "memory": "rehydrate, memory store, same process",
    }[config]
    if args.producers > 1:
        label += f", {args.producers} producer tasks"
    versions = {"rehydrate": version("rehydrate")}
    if config == "redis":
        versions["coredis"] = version("coredis")
    return {"system": label, "versions": versions, **figures}


if __name__ == "__main__":
    args = harness.parser(__doc__ or "").parse_args()
    sys.exit(harness.main(run, args))
