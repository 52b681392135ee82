"""APScheduler 4's recurring schedules, measured as ``benchmarks/bench_schedules.py`` measures ours.

Run by ``bench_schedules.py`` in APScheduler's own virtual environment (the one ``run.py`` makes
from ``requirements/apscheduler.txt``; APScheduler is not a dependency of rehydrate):

    .venvs/apscheduler/bin/python peer_apscheduler_schedules.py --store memory --n 10000 \
        --period 60 --seconds 180

``--n`` schedules ``IntervalTrigger(seconds=period, start_time=...)``, their starts spread evenly
over one period from a few seconds ahead, filed with ``add_schedule`` by 64 concurrent callers (one on SQLite, where more end in
"database is locked");
then they fire for ``--seconds``: occurrences per second, and lateness p50/p99 (wall time at the
job's first line minus the job's ``scheduled_fire_time``). The task allows any number of running
jobs (APScheduler's default is one per task, which would serialise every schedule of one task),
and the scheduler runs 500 jobs at once, as the rehydrate side runs its handler 500 at a time.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

from apscheduler import AsyncScheduler, current_job
from apscheduler.triggers.interval import IntervalTrigger

LATE: list[float] = []
STAMPS: list[float] = []


async def noop(user: int) -> None:
    now = time.time()
    fire = current_job.get().scheduled_fire_time
    if fire is not None:
        LATE.append(now - fire.timestamp())
    STAMPS.append(now)


def pct(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000


async def run(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    versions = {"apscheduler": version("apscheduler")}
    kwargs: dict[str, Any] = {"max_concurrent_jobs": 500}
    if args.store == "sqlite":
        from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore

        kwargs["data_store"] = SQLAlchemyDataStore(f"sqlite+aiosqlite:///{tmp}/aps.sqlite")
        versions |= {"sqlalchemy": version("sqlalchemy"), "aiosqlite": version("aiosqlite")}
    elif args.store != "memory":
        raise ValueError(f"unknown store {args.store!r}: memory or sqlite")
    out: dict[str, Any] = {}
    async with AsyncScheduler(**kwargs) as scheduler:
        await scheduler.configure_task(noop, max_running_jobs=None)
        lead = max(5.0, args.n / 2000)
        first = time.time() + lead
        ids = iter(range(args.n))

        created = 0
        give_up = time.perf_counter() + args.create_limit

        async def caller() -> None:
            nonlocal created
            for i in ids:
                if time.perf_counter() > give_up:
                    return
                start = datetime.fromtimestamp(first + args.period * i / args.n, UTC)
                trigger = IntervalTrigger(seconds=args.period, start_time=start)
                await scheduler.add_schedule(noop, trigger, id=f"u{i}", args=(i,))
                created += 1

        started = time.perf_counter()
        # SQLite takes one writer at a time: 64 callers there end in "database is locked".
        await asyncio.gather(*(caller() for _ in range(1 if args.store == "sqlite" else 64)))
        out["create_s"] = time.perf_counter() - started
        out["create_per_s"] = created / out["create_s"]
        if created < args.n:
            await scheduler.stop()
            return {
                "error": f"filed {created:,} of {args.n:,} schedules in {out['create_s']:.0f} s "
                f"({out['create_per_s']:,.0f}/s), gave up",
                "versions": versions,
            }
        await scheduler.start_in_background()
        if time.time() < first:
            await asyncio.sleep(first - time.time())
        window_start = time.time()
        await asyncio.sleep(args.seconds)
        window_end = time.time()
        # Occurrences whose job started inside the window; their lateness.
        picked = [i for i, t in enumerate(STAMPS) if window_start <= t < window_end]
        out["sched_rate"] = len(picked) / (window_end - window_start)
        late = [LATE[i] for i in picked]
        out["sched_p50"], out["sched_p99"] = pct(late, 0.5), pct(late, 0.99)
        out["late_count"] = len(late)
        await scheduler.stop()
    return {"system": f"APScheduler 4 ({args.store} data store)", "versions": versions, **out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default="memory", choices=("memory", "sqlite"))
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--period", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--create-limit", type=float, default=600.0, help="seconds to file them in")
    args = parser.parse_args()
    # APScheduler logs a line per job at INFO through the root logger only if configured: it is not.
    try:
        with tempfile.TemporaryDirectory(prefix="aps-schedules-") as tmp:
            result = asyncio.run(run(args, tmp))
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        result = {"error": f"{type(exc).__name__}: {exc}"}
    result.setdefault("python", platform.python_version())
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
