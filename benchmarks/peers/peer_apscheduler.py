"""APScheduler 4: ``add_schedule(noop, DateTrigger(run_time))`` on an ``AsyncScheduler`` running in
the producer's own process and event loop (APScheduler 4 has no separate worker process with the
memory store).

Run by ``run.py`` in APScheduler's own virtual environment. ``--config`` picks the data store:
``memory`` (the default ``MemoryDataStore``) or ``sqlite`` (``SQLAlchemyDataStore`` on a SQLite
file through aiosqlite). Everything else is APScheduler's default (at most 100 jobs at once, and
``max_running_jobs=1`` per task).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import harness
from apscheduler import AsyncScheduler
from apscheduler.triggers.date import DateTrigger


async def noop(i: int) -> None:
    harness.stamp(i)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    versions = {"apscheduler": version("apscheduler")}
    kwargs: dict[str, Any] = {}
    if args.config == "sqlite":
        from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore

        db = os.environ[harness.STAMPS_ENV] + ".sqlite"
        kwargs["data_store"] = SQLAlchemyDataStore(f"sqlite+aiosqlite:///{db}")
        versions |= {"sqlalchemy": version("sqlalchemy"), "aiosqlite": version("aiosqlite")}
    elif args.config not in ("", "memory"):
        raise ValueError(f"unknown config {args.config!r}: memory or sqlite")
    async with AsyncScheduler(**kwargs) as scheduler:
        await scheduler.start_in_background()

        async def enqueue_in(i: int, delay: float) -> None:
            await enqueue_at(i, datetime.now(UTC).timestamp() + delay)

        async def enqueue_at(i: int, when: float) -> None:
            await scheduler.add_schedule(noop, DateTrigger(datetime.fromtimestamp(when, UTC)), args=(i,))

        figures = await harness.measure(enqueue_in, enqueue_at, **harness.measure_args(args))
        await scheduler.stop()
    store = "SQLite store" if args.config == "sqlite" else "memory store"
    return {"system": f"APScheduler 4, {store}, same process", "versions": versions, **figures}


if __name__ == "__main__":
    args = harness.parser(__doc__ or "").parse_args()
    sys.exit(harness.main(run, args))
