"""arq: jobs deferred with ``enqueue_job(..., _defer_by=/_defer_until=)``, one worker process.

Run by ``run.py`` in arq's own virtual environment. ``--config poll10ms`` sets the worker's
``poll_delay`` to 10 ms; otherwise every setting is arq's default (poll 0.5 s, ``max_jobs`` 10).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import harness
from arq import Worker, create_pool
from arq.connections import RedisSettings

POLL = {"": 0.5, "poll10ms": 0.01}


async def noop(ctx: dict[str, Any], i: int) -> None:
    harness.stamp(i)


def worker(args: argparse.Namespace) -> int:
    w = Worker(
        functions=[noop],  # type: ignore[list-item]
        redis_settings=RedisSettings.from_dsn(args.redis),
        poll_delay=POLL[args.config],
    )
    w.run()  # handles SIGTERM itself
    return 0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    proc = harness.start_worker(
        [sys.executable, __file__, "--worker", "--redis", args.redis, "--config", args.config],
        harness.worker_log(),
    )
    try:
        pool = await create_pool(RedisSettings.from_dsn(args.redis))
        try:

            async def enqueue_in(i: int, delay: float) -> None:
                await pool.enqueue_job("noop", i, _defer_by=delay or None)

            async def enqueue_at(i: int, when: float) -> None:
                await pool.enqueue_job("noop", i, _defer_until=datetime.fromtimestamp(when, UTC))

            figures = await harness.measure(enqueue_in, enqueue_at, **harness.measure_args(args))
        finally:
            await pool.aclose()
    finally:
        harness.stop_worker(proc)
    label = "arq, poll 10 ms" if args.config else "arq, default poll 0.5 s"
    return {"system": label, "versions": {"arq": version("arq"), "redis-py": version("redis")}, **figures}


if __name__ == "__main__":
    args = harness.parser(__doc__ or "").parse_args()
    sys.exit(worker(args) if args.worker else harness.main(run, args))
