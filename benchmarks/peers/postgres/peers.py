"""rehydrate's PostgreSQL store against procrastinate and pgqueuer, on one server, by one method.

Run by ``run.sh`` beside it (which makes this benchmark's own virtual environment: the peers are
not rehydrate's dependencies)::

    benchmarks/peers/postgres/run.sh [--n 20000] [--repeat 3] [--workers 2]

For each system and configuration, ``--workers`` worker processes run a no-op async job on one
throwaway PostgreSQL server (started once for the whole run, fsync on), and from outside:

* lateness: N jobs due evenly over ``--spread`` seconds, starting ``--lead`` seconds after the
  enqueueing starts (so enqueueing is done before the first is due); each worker records when
  its job starts minus when it was due (wall clock: one machine);
* throughput: N jobs all due at one instant; deliveries per second from that instant to the last.

Configurations: each peer with its defaults (only the concurrency set, like rehydrate's handler
concurrency: it is sizing, not latency tuning) and tuned for latency (its polling interval at
10 ms, bigger fetch batches where it has them). rehydrate has no polling interval to tune: it
runs once, with the handler settings of ``bench_workers.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import platform
import queue as queue_module
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONCURRENCY = 100


# -- the systems -------------------------------------------------------------------------------------


class Rehydrate:
    name = "rehydrate"
    modes = ("default",)

    @staticmethod
    async def setup(url: str) -> None:
        from rehydrate.stores import PostgresStore

        async with PostgresStore.from_url(url) as store:
            await store.migrate()

    @staticmethod
    async def enqueue(url: str, queue: str, dues: list[float]) -> None:
        from rehydrate.stores import PostgresStore

        async with PostgresStore.from_url(url) as store:
            for lo in range(0, len(dues), 1000):
                now = time.time()
                await store.push_many(queue, [(d, max(0.0, d - now), None) for d in dues[lo : lo + 1000]])

    @staticmethod
    async def work(url: str, queue: str, mode: str, record: Any, ready: Any, stop: Any) -> None:
        import anyio.to_thread

        from rehydrate import Scheduler
        from rehydrate.stores import PostgresStore

        store = PostgresStore.from_url(url)
        scheduler = Scheduler(store, grace=2)

        @scheduler.handler(queue, concurrency=500, lease=30, batch=200)
        async def noop(due: float) -> None:
            record(due)

        async with store, scheduler:
            ready.set()
            await anyio.to_thread.run_sync(stop.wait)


class Procrastinate:
    name = "procrastinate"
    modes = ("default", "tuned")

    @staticmethod
    def app(url: str) -> Any:
        import procrastinate

        return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @classmethod
    async def setup(cls, url: str) -> None:
        app = cls.app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    @classmethod
    async def enqueue(cls, url: str, queue: str, dues: list[float]) -> None:
        app = cls.app(url)

        @app.task(name="noop", queue=queue)
        async def noop(due: float) -> None:  # pragma: no cover - defined for deferring
            pass

        async with app.open_async():
            # schedule_at is per call: group the jobs by due millisecond, one batch per group.
            groups: dict[int, list[float]] = {}
            for d in dues:
                groups.setdefault(round(d * 1000), []).append(d)
            for ms, group in sorted(groups.items()):
                at = datetime.fromtimestamp(ms / 1000, UTC)
                await noop.configure(schedule_at=at).batch_defer_async(*({"due": d} for d in group))

    @classmethod
    async def work(cls, url: str, queue: str, mode: str, record: Any, ready: Any, stop: Any) -> None:
        app = cls.app(url)

        @app.task(name="noop", queue=queue)
        async def noop(due: float) -> None:
            record(due)

        options: dict[str, Any] = {
            "queues": [queue],
            "concurrency": CONCURRENCY,
            "install_signal_handlers": False,
        }
        if mode == "tuned":
            options["fetch_job_polling_interval"] = 0.01
        async with app.open_async():
            task = asyncio.create_task(app.run_worker_async(**options))
            ready.set()
            await asyncio.to_thread(stop.wait)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class PgQueuer:
    name = "pgqueuer"
    modes = ("default", "tuned")

    @staticmethod
    async def setup(url: str) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(url)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    @staticmethod
    async def enqueue(url: str, queue: str, dues: list[float]) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(url)
        try:
            queries = Queries(AsyncpgDriver(conn))
            for lo in range(0, len(dues), 1000):
                now = time.time()
                chunk = dues[lo : lo + 1000]
                await queries.enqueue(
                    [queue] * len(chunk),
                    [repr(d).encode() for d in chunk],
                    [0] * len(chunk),
                    [timedelta(seconds=max(0.0, d - now)) for d in chunk],
                )
        finally:
            await conn.close()

    @staticmethod
    async def work(url: str, queue: str, mode: str, record: Any, ready: Any, stop: Any) -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, PgQueuer

        conn = await asyncpg.connect(url)
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(queue)
        async def noop(job: Any) -> None:
            record(float(job.payload))

        options: dict[str, Any] = {"max_concurrent_tasks": CONCURRENCY}
        if mode == "tuned":
            options.update(batch_size=50, dequeue_timeout=timedelta(seconds=0.01))
            pgq.qm.min_dequeue_poll_interval = timedelta(0)  # type: ignore[attr-defined]
        task = asyncio.create_task(pgq.run(**options))
        ready.set()
        await asyncio.to_thread(stop.wait)
        pgq.shutdown.set()
        try:
            await asyncio.wait_for(task, 10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()


SYSTEMS = {s.name: s for s in (Rehydrate, Procrastinate, PgQueuer)}


# -- the harness -------------------------------------------------------------------------------------


def worker(system: str, url: str, queue: str, mode: str, ready: Any, stop: Any, results: Any) -> None:
    late: list[float] = []
    stamps: list[float] = []

    def record(due: float) -> None:
        now = time.time()
        late.append(now - due)
        stamps.append(now)

    import anyio

    anyio.run(SYSTEMS[system].work, url, queue, mode, record, ready, stop)
    results.put((late, stamps))


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    at = lambda f: ordered[min(len(ordered) - 1, int(f * len(ordered)))]  # noqa: E731
    return at(0.5) * 1000, at(0.99) * 1000, ordered[-1] * 1000


def one_run(system: str, mode: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    import anyio

    ctx = mp.get_context("spawn")
    out: dict[str, Any] = {}
    for phase in ("lateness", "throughput"):
        queue = f"b{phase[0]}{uuid.uuid4().hex[:6]}"
        stop, results = ctx.Event(), ctx.Queue()
        readies = [ctx.Event() for _ in range(args.workers)]
        procs = [
            ctx.Process(target=worker, args=(system, url, queue, mode, ready, stop, results))
            for ready in readies
        ]
        for p in procs:
            p.start()
        for ready in readies:
            if not ready.wait(60):
                raise SystemExit(f"{system}: a worker did not start")
        time.sleep(0.5)
        start = time.time() + args.lead
        if phase == "lateness":
            dues = [start + args.spread * i / args.n for i in range(args.n)]
        else:
            dues = [start] * args.n
        anyio.run(SYSTEMS[system].enqueue, url, queue, dues)
        late: list[float] = []
        stamps: list[float] = []
        deadline = time.time() + args.lead + args.spread + args.timeout
        got: list[tuple[list[float], list[float]]] = []
        # Wait for every delivery: the workers report only when stopped, so watch the clock and
        # stop them once the run has had time, then count.
        while time.time() < deadline:
            time.sleep(0.5)
            if _done(url, system, queue, args.n):
                break
        stop.set()
        for _ in procs:
            try:
                got.append(results.get(timeout=60))
            except queue_module.Empty:
                print(f"  {system} {mode} {phase}: a worker reported nothing", file=sys.stderr)
        for p in procs:
            p.join(30)
        for lat, st in got:
            late += lat
            stamps += st
        if len(late) < args.n:
            print(f"  {system} {mode} {phase}: only {len(late)} of {args.n} delivered", file=sys.stderr)
        if not late:
            out[phase] = None
            continue
        if phase == "lateness":
            out["lateness"] = percentiles(late)
        else:
            out["throughput"] = len(late) / (max(stamps) - start)
        out[f"{phase}_count"] = len(late)
    return out


def _done(url: str, system: str, queue: str, n: int) -> bool:
    """Whether the system has handled all n jobs of the queue (asked of the database)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if system == "rehydrate":
            row = conn.execute(
                "SELECT coalesce(sum(size), 0) FROM rehydrate_counts WHERE name = %s", (queue,)
            ).fetchone()
            return row is not None and row[0] == 0
        if system == "procrastinate":
            row = conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE queue_name = %s AND status <> 'succeeded'",
                (queue,),
            ).fetchone()
            done = conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE queue_name = %s AND status = 'succeeded'",
                (queue,),
            ).fetchone()
            return row is not None and done is not None and row[0] == 0 and done[0] >= n
        row = conn.execute("SELECT count(*) FROM pgqueuer WHERE entrypoint = %s", (queue,)).fetchone()
        return row is not None and row[0] == 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument("--lead", type=float, default=3.0, help="seconds from enqueueing to the first due")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds a run may take past its last due"
    )
    parser.add_argument("--systems", default="rehydrate,procrastinate,pgqueuer")
    parser.add_argument("--url", help="an existing server (default: a throwaway one, fsync on)")
    args = parser.parse_args()

    import pgqueuer
    import procrastinate
    import psycopg

    from tests.pg_server import PostgresServer

    server = None if args.url else PostgresServer(fsync=True).start()
    url = args.url or server.url  # type: ignore[union-attr]
    systems = args.systems.split(",")
    table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        import anyio

        for system in systems:
            anyio.run(SYSTEMS[system].setup, url)
        for r in range(args.repeat):
            for system in systems:  # interleaved, so the machine's load falls on all alike
                for mode in SYSTEMS[system].modes:
                    result = one_run(system, mode, url, args)
                    table.setdefault((system, mode), []).append(result)
                    print(f"  run {r + 1}: {system} {mode}: {result}", file=sys.stderr, flush=True)
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
    finally:
        if server is not None:
            server.cleanup()

    print(
        f"\n{args.workers} worker processes per system, one PostgreSQL {version[0] if version else '?'} (fsync on), "
        f"N={args.n:,}, lateness over {args.spread} s; procrastinate {procrastinate.__version__ if hasattr(procrastinate, '__version__') else ''}, "
        f"pgqueuer {pgqueuer.__version__}, Python {platform.python_version()}; medians of {args.repeat}\n"
    )
    print("| system | configuration | lateness p50 ms | p99 ms | max ms | deliveries/s, all due at once |")
    print("|---|---|---:|---:|---:|---:|")
    best_peer = 0.0
    ours = 0.0
    for (system, mode), runs in table.items():
        lat = [r["lateness"] for r in runs if r.get("lateness")]
        tps = [r["throughput"] for r in runs if r.get("throughput")]
        p50 = statistics.median(x[0] for x in lat) if lat else float("nan")
        p99 = statistics.median(x[1] for x in lat) if lat else float("nan")
        mx = statistics.median(x[2] for x in lat) if lat else float("nan")
        tp = statistics.median(tps) if tps else float("nan")
        if system == "rehydrate":
            ours = tp
        elif tps:
            best_peer = max(best_peer, tp)
        print(f"| {system} | {mode} | {p50:,.2f} | {p99:,.2f} | {mx:,.2f} | {tp:,.0f} |")
    if ours and best_peer:
        print(f"\nrehydrate / the faster peer, deliveries/s: {ours / best_peer:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
