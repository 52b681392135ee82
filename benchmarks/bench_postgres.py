"""Benchmark PostgresStore through the async Store API, on a throwaway server started for the run.

Run from the repository root::

    python benchmarks/bench_postgres.py                  # N = 20,000, median of 3
    python benchmarks/bench_postgres.py --n 5000 --backend trio
    python benchmarks/bench_postgres.py --url postgresql://user@host/db   # an existing server

Phases (each on fresh tables; elements are small ints, JSON; the fill before a phase is not timed),
as in ``bench_sqlite.py``:

* push: N single ``push`` calls (one statement, one commit each).
* push_many: N elements in ``push_many`` batches of ``--batch``; right after it, on the same
  load, its floor: the same rows serialized the same way, written by a raw psycopg binary ``COPY``
  per batch into a bare table with the same columns, primary key and ``(name, due, seq)`` index
  (no sequence, counters, head check or NOTIFY). The ratio push_many / floor is the figure to read
  on a loaded machine (median of the per-run ratios).
* pull: N single ``pull`` calls of waiting elements.
* poll: N due elements taken by ``poll(limit=--batch)`` until empty (elements/s).
* claim+ack: N due elements, ``claim(limit=--batch)`` then one ``ack`` batch, until empty.
* claim+ack x1: ``claim(limit=1)`` then ``ack`` of that one claim, one element at a time.

Measured with ``synchronous_commit=on`` (the default: a commit is flushed to the WAL on disk before
the call returns) and ``off``. Beside them, what the thread hop costs (the store runs psycopg's sync
API in worker threads so that it works on trio too):

* raw sync: ``SELECT 1`` on a psycopg connection, called directly (no event loop);
* raw in thread: the same call through ``anyio.to_thread.run_sync`` with a capacity limiter, as
  the store makes it;
* raw async: the same on psycopg's ``AsyncConnection`` (asyncio only; skipped on trio);
* ttn: the store's cheapest read (one indexed row), for a store call end to end.

Then the dead tuples the claim/ack churn leaves: ``--churn`` deliveries (claim + ack batches) on
one table, and ``n_dead_tup`` / table size before and after autovacuum has had a few seconds.

With ``--push-parts``, where push_many's server time goes: its statement run directly on the same
rows, then without the counters, without the head check and NOTIFY, without the sequence and
ordering, and a plain ``INSERT ... unnest`` (median of ``--repeat``).

Last, the floors of cross-process lateness (``--floor-n``; read beside ``bench_workers.py --store
postgres``): a bare LISTEN loop in another process woken by NOTIFYs sent evenly over 2 s (time
from sending to waking), and in that process a timer wake plus one ``SELECT 1`` through a worker
thread, for 200 deadlines over 2 s.

Machine-dependent; the machine this ran on may be shared: quote medians and ratios.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rehydrate.stores._postgres import PostgresStore  # noqa: E402
from tests.pg_server import drop_tables  # noqa: E402

NAME = "bench"
perf = time.perf_counter

Phase = Callable[[PostgresStore, int, int, float], Awaitable[tuple[int, float, bool]]]


async def fill(store: PostgresStore, n: int, batch: int, ttl: float) -> None:
    for start in range(0, n, batch):
        await store.push_many(NAME, [(i, ttl, f"e{i}") for i in range(start, min(n, start + batch))])


async def phase_push(store: PostgresStore, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    t0 = perf()
    for i in range(n):
        await store.push(NAME, i, ttl=3600, id=f"e{i}")
        if i & 63 == 63 and perf() - t0 > cap:
            return i + 1, perf() - t0, True
    return n, perf() - t0, False


async def phase_push_many(store: PostgresStore, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    t0 = perf()
    for start in range(0, n, batch):
        await store.push_many(NAME, [(i, 3600, f"e{i}") for i in range(start, min(n, start + batch))])
        if perf() - t0 > cap:
            return min(n, start + batch), perf() - t0, True
    return n, perf() - t0, False


async def phase_pull(store: PostgresStore, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    await fill(store, n, batch, 3600)
    t0 = perf()
    for i in range(n):
        await store.pull(NAME, f"e{i}")
        if i & 63 == 63 and perf() - t0 > cap:
            return i + 1, perf() - t0, True
    return n, perf() - t0, False


async def phase_poll(store: PostgresStore, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    await fill(store, n, batch, 0)
    done = 0
    t0 = perf()
    while got := await store.poll(NAME, limit=batch):
        done += len(got)
        if perf() - t0 > cap:
            return done, perf() - t0, True
    return done, perf() - t0, False


async def _claim_ack(
    store: PostgresStore, n: int, batch: int, cap: float, limit: int
) -> tuple[int, float, bool]:
    await fill(store, n, batch, 0)
    done = 0
    t0 = perf()
    while claims := await store.claim(NAME, lease=600, limit=limit):
        acked = await store.ack(NAME, [(c.id, c.token) for c in claims])
        done += sum(acked)
        if perf() - t0 > cap:
            return done, perf() - t0, True
    return done, perf() - t0, False


async def phase_claim_ack(store: PostgresStore, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    return await _claim_ack(store, n, batch, cap, batch)


async def phase_claim_ack_single(
    store: PostgresStore, n: int, batch: int, cap: float
) -> tuple[int, float, bool]:
    return await _claim_ack(store, n, batch, cap, 1)


async def phase_ttn(store: PostgresStore, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    await store.push(NAME, 0, ttl=3600, id="x")
    t0 = perf()
    for i in range(n):
        await store.ttn(NAME)
        if i & 63 == 63 and perf() - t0 > cap:
            return i + 1, perf() - t0, True
    return n, perf() - t0, False


FLOOR_TABLE = """CREATE TABLE {table} (
    name text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL,
    due bigint NOT NULL,
    seq bigint NOT NULL,
    attempt bigint NOT NULL DEFAULT 0,
    claimed boolean NOT NULL DEFAULT false,
    ttl double precision NOT NULL,
    serializer text NOT NULL,
    payload bytea NOT NULL,
    PRIMARY KEY (name, id)
) WITH (fillfactor = 85)"""


def push_many_floor(url: str, n: int, batch: int, mode: str) -> float:
    """The floor for push_many: the same rows, serialized the same way, by a binary ``COPY`` per batch
    (one transaction each) into a bare table with the store's columns, primary key and due index;
    no sequence, counters, head check or NOTIFY. Rows per second."""
    import psycopg

    from rehydrate.serializers import get_serializer

    dumps = get_serializer("json").dumps
    table = f"floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True, options=f"-c synchronous_commit={mode}") as conn:
        conn.execute(FLOOR_TABLE.format(table=table))
        conn.execute(f"CREATE INDEX ON {table} (name, due, seq)")
        copy = f"COPY {table} (name, id, due, seq, ttl, serializer, payload) FROM STDIN (FORMAT BINARY)"
        seq = 0
        t0 = perf()
        for start in range(0, n, batch):
            due = int(time.time() * 1e6) + 3600 * 1_000_000
            with conn.cursor() as cur, cur.copy(copy) as out:
                out.set_types(["text", "text", "int8", "int8", "float8", "text", "bytea"])
                for i in range(start, min(n, start + batch)):
                    seq += 1
                    out.write_row((NAME, f"e{i}", due, seq, 3600.0, "json", dumps(i)))
        seconds = perf() - t0
        conn.execute(f"DROP TABLE {table}")
    return n / seconds


FLOOR = "push_many floor (raw COPY)"


def push_parts(url: str, n: int, batch: int) -> dict[str, float]:
    """Where push_many's server time goes: the store's push statement run directly (no store, no
    thread), then with its parts taken away one by one, then a plain ``INSERT ... unnest``, all on
    the same rows (serialized beforehand) into the store's table. Rows per second."""
    import re

    import psycopg

    async def tables() -> Any:
        store = PostgresStore.from_url(url, table=f"parts_{uuid.uuid4().hex[:8]}")
        async with store:
            pass
        return store

    store = anyio.run(tables)
    sql, names = store._sql, store._sql.identifiers
    full = sql.push
    no_counts = re.sub(r",\s*cnt AS \(.*?excluded\.claimed\s*\)", "", full, flags=re.S)
    no_head = re.sub(r"head AS MATERIALIZED \(.*?\),\n", "", no_counts, flags=re.S)
    no_head = re.sub(r"SELECT count\(\*\), CASE.*FROM ins$", "SELECT count(*) FROM ins", no_head, flags=re.S)
    no_seq = no_head.replace(f"nextval('{names['seq_name']}')", "s.ord").replace(
        "FROM (SELECT * FROM src ORDER BY ord) s, t", "FROM src s, t"
    )
    plain = (
        f"INSERT INTO {names['table']} (name, id, due, seq, ttl, serializer, payload)"
        " SELECT %(name)s, u.id, u.ttl, 0, u.ttl / 1e6, %(codec)s, u.payload"
        " FROM unnest(%(ids)b::text[], %(payloads)b::bytea[], %(ttls)b::bigint[]) AS u(id, payload, ttl)"
    )
    variants = {
        "push statement, direct": full,
        "- the counters": no_counts,
        "- the head check and NOTIFY": no_head,
        "- the sequence and ordering": no_seq,
        "plain INSERT ... unnest": plain,
    }
    if len(set(variants.values())) != len(variants):
        raise SystemExit("push_parts: the push statement changed shape; update the variants")
    dumps = store.serializer.dumps
    batches = [
        ([f"e{i}" for i in range(lo, min(n, lo + batch))], [dumps(i) for i in range(lo, min(n, lo + batch))])
        for lo in range(0, n, batch)
    ]
    base = {"name": NAME, "codec": "json", "channel": "parts", "note": NAME, "pin": None, "skew": 0}
    out: dict[str, float] = {}
    options = "-c plan_cache_mode=force_custom_plan -c enable_bitmapscan=off"
    with psycopg.connect(url, autocommit=True, options=options) as conn:
        for label, statement in variants.items():
            conn.execute(f"TRUNCATE {names['table']}, {names['counts']}")
            t0 = perf()
            for ids, payloads in batches:
                params = dict(base, ids=ids, payloads=payloads, ttls=[3600_000_000] * len(ids))
                conn.execute(statement, params, prepare=True)
            out[label] = n / (perf() - t0)
        for statement in sql.drop:
            conn.execute(statement)
    return out


PHASES: dict[str, Phase] = {
    "push": phase_push,
    "push_many": phase_push_many,
    "pull": phase_pull,
    "poll": phase_poll,
    "claim+ack": phase_claim_ack,
    "claim+ack x1": phase_claim_ack_single,
    "ttn": phase_ttn,
}


async def raw_rates(url: str, n: int, backend: str) -> dict[str, float]:
    """``SELECT 1`` round trips/s: direct, through a worker thread, and on psycopg's async API."""
    import psycopg

    out: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = perf()
        for _ in range(n):
            conn.execute("SELECT 1", prepare=True).fetchone()
        out["raw sync"] = n / (perf() - t0)
        limiter = anyio.CapacityLimiter(4)
        t0 = perf()
        for _ in range(n):
            await anyio.to_thread.run_sync(
                lambda: conn.execute("SELECT 1", prepare=True).fetchone(), limiter=limiter
            )
        out["raw in thread"] = n / (perf() - t0)
    if backend == "asyncio":
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
            t0 = perf()
            for _ in range(n):
                await (await aconn.execute("SELECT 1", prepare=True)).fetchone()
            out["raw async"] = n / (perf() - t0)
    return out


async def churn(url: str, deliveries: int, batch: int) -> list[tuple[str, str]]:
    """Dead tuples and table size after ``deliveries`` claim + ack round trips, then after autovacuum."""
    table = f"churn_{uuid.uuid4().hex[:8]}"
    rows: list[tuple[str, str]] = []
    async with PostgresStore.from_url(url, table=table, synchronous_commit="off") as store:

        async def stats() -> tuple[int, int, str]:
            def body(conn: Any) -> tuple[int, int, str]:
                conn.execute("SELECT pg_stat_force_next_flush()")
                row = conn.execute(
                    "SELECT n_live_tup, n_dead_tup, pg_size_pretty(pg_total_relation_size(relid))"
                    " FROM pg_stat_user_tables WHERE relname = %s",
                    (table,),
                ).fetchone()
                return row or (0, 0, "?")

            return await store._run(body)

        done = 0
        t0 = perf()
        while done < deliveries:
            await store.push_many(NAME, [(i, 0, None) for i in range(batch)])
            while claims := await store.claim(NAME, lease=600, limit=batch):
                done += sum(await store.ack(NAME, [(c.id, c.token) for c in claims]))
        seconds = perf() - t0
        await anyio.sleep(1.0)  # the statistics collector
        _live, dead, size = await stats()
        rows.append((f"after {done:,} deliveries ({done / seconds:,.0f}/s)", f"{dead:,} dead, {size}"))
        # autovacuum wakes every autovacuum_naptime (60 s by default): wait for it to pass.
        waited = 0.0
        while dead > done // 10 and waited < 90:
            await anyio.sleep(5)
            waited += 5
            _live, dead, size = await stats()
        rows.append((f"{waited:.0f} s later (autovacuum)", f"{dead:,} dead, {size}"))
        await store.push_many(NAME, [(i, 0, None) for i in range(batch)])
        while claims := await store.claim(NAME, lease=600, limit=batch):
            await store.ack(NAME, [(c.id, c.token) for c in claims])
        await anyio.sleep(1.0)
        _live, dead, size = await stats()
        rows.append((f"then {batch:,} more deliveries", f"{dead:,} dead, {size}"))
        await drop_tables(store)
    return rows


def _listen_child(url: str, n: int, ready: Any, results: Any) -> None:
    """In another process: how late each NOTIFY arrives at a bare LISTEN loop (its payload is the
    sender's ``time.time()``), then how late a timer wake plus one ``SELECT 1`` through a worker
    thread runs for 200 deadlines over 2 s (what a scheduler does at least per wake)."""
    import psycopg

    late: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("LISTEN floor")
        ready.set()
        for note in conn.notifies():
            late.append(time.time() - float(note.payload))
            if len(late) >= n:
                break

    async def timers() -> list[float]:
        # One wake per 10 ms (a scheduler claims a batch per wake, not one element): a round trip
        # per millisecond would measure a backlog on a loaded machine, not a wake-up.
        out: list[float] = []
        count = 200
        with psycopg.connect(url, autocommit=True) as conn:
            start = time.monotonic() + 0.2
            for k in range(count):
                due = start + 2.0 * k / count
                await anyio.sleep(max(0.0, due - time.monotonic()))
                await anyio.to_thread.run_sync(lambda: conn.execute("SELECT 1", prepare=True).fetchone())
                out.append(time.monotonic() - due)
        return out

    results.put((late, anyio.run(timers)))


def lateness_floor(url: str, n: int) -> dict[str, tuple[float, float, float]]:
    """p50, p99 and max in ms of the two floors measured by :func:`_listen_child`."""
    import multiprocessing as mp

    import psycopg

    ctx = mp.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_listen_child, args=(url, n, ready, results))
    child.start()
    if not ready.wait(30):
        raise SystemExit("the LISTEN process did not start")
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.monotonic()
        for k in range(n):  # n notifications evenly over 2 s
            time.sleep(max(0.0, start + 2.0 * k / n - time.monotonic()))
            conn.execute("SELECT pg_notify('floor', %s)", (repr(time.time()),))
    notify, timer = results.get(timeout=60)
    child.join(30)

    def pct(values: list[float]) -> tuple[float, float, float]:
        ordered = sorted(values)
        return tuple(ordered[min(len(ordered) - 1, int(f * len(ordered)))] * 1000 for f in (0.5, 0.99, 1.0))  # type: ignore[return-value]

    return {
        f"NOTIFY ({n:,}) to a bare LISTEN loop": pct(notify),
        "timer wake (200) + SELECT 1 in a thread": pct(timer),
    }


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    results: dict[str, dict[str, list[float]]] = {}
    capped: set[tuple[str, str]] = set()
    ratios: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for mode in ("on", "off"):
            for phase, fn in PHASES.items():
                table = f"bench_{uuid.uuid4().hex[:8]}"
                async with PostgresStore.from_url(url, table=table, synchronous_commit=mode) as store:
                    ops, seconds, cut = await fn(store, args.n, args.batch, args.cap)
                    await drop_tables(store)
                if cut:
                    capped.add((mode, phase))
                results.setdefault(mode, {}).setdefault(phase, []).append(ops / seconds)
                print(
                    f"  {mode:>3} {phase:<13} {ops:>7} ops in {seconds:6.2f} s", file=sys.stderr, flush=True
                )
                if phase == "push_many":  # the floor right after, on the same load
                    rate = await anyio.to_thread.run_sync(push_many_floor, url, args.n, args.batch, mode)
                    results[mode].setdefault(FLOOR, []).append(rate)
                    ratios.setdefault(mode, []).append(ops / seconds / rate)
        for key, rate in (await raw_rates(url, args.n, args.backend)).items():
            results.setdefault("raw", {}).setdefault(key, []).append(rate)
    return {"results": results, "capped": capped, "ratios": ratios}


def fmt(rate: float, cut: bool = False) -> str:
    return f"{rate:,.0f}{'*' if cut else ' '}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000, help="elements per phase (default 20000)")
    parser.add_argument("--batch", type=int, default=1000, help="batch size of push_many, poll, claim")
    parser.add_argument("--cap", type=float, default=5.0, help="seconds after which a phase is cut short")
    parser.add_argument("--repeat", type=int, default=3, help="runs; medians are printed")
    parser.add_argument("--churn", type=int, default=200_000, help="deliveries for the dead-tuple check")
    parser.add_argument(
        "--floor-n", type=int, default=2000, help="NOTIFYs and timers for the lateness floor (0: skip)"
    )
    parser.add_argument(
        "--push-parts", action="store_true", help="also time push_many's statement without each of its parts"
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--url", help="an existing server (default: a throwaway one, fsync on)")
    args = parser.parse_args()

    if args.url:
        url, server = args.url, None
    else:
        from tests.pg_server import PostgresServer

        server = PostgresServer(fsync=True).start()
        url = server.url
    try:
        out = anyio.run(run, args, url, backend=args.backend)
        churned = anyio.run(churn, url, args.churn, args.batch, backend=args.backend) if args.churn else []
        floors = lateness_floor(url, args.floor_n) if args.floor_n else {}
        parts: dict[str, list[float]] = {}
        for _ in range(args.repeat if args.push_parts else 0):
            for label, rate in push_parts(url, args.n, args.batch).items():
                parts.setdefault(label, []).append(rate)
        import psycopg

        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
    finally:
        if server is not None:
            server.cleanup()
    results, capped = out["results"], out["capped"]
    med = {mode: {k: statistics.median(v) for k, v in phases.items()} for mode, phases in results.items()}
    print()
    print(
        f"Python {platform.python_version()}, PostgreSQL {version[0] if version else '?'}, psycopg "
        f"{psycopg.__version__}, {args.backend}, N={args.n:,}, batch={args.batch}, median of {args.repeat}"
    )
    print()
    print("| phase | synchronous_commit=on ops/s | off ops/s | off / on |")
    print("|---|---:|---:|---:|")
    for phase in PHASES:
        on, off = med["on"][phase], med["off"][phase]
        print(
            f"| {phase} | {fmt(on, ('on', phase) in capped)} | {fmt(off, ('off', phase) in capped)} | {off / on:.2f} |"
        )
        if phase == "push_many":
            on, off = med["on"][FLOOR], med["off"][FLOOR]
            print(f"| {FLOOR} | {fmt(on)} | {fmt(off)} | {off / on:.2f} |")
            ratio = {mode: statistics.median(values) for mode, values in out["ratios"].items()}
            print(f"| push_many / floor (median of runs) | {ratio['on']:.2f} | {ratio['off']:.2f} | |")
    print()
    raw = med["raw"]
    print("| round trip (SELECT 1) | /s | µs each | vs raw sync |")
    print("|---|---:|---:|---:|")
    rows = [(k, v) for k, v in raw.items()] + [("store.ttn() (on)", med["on"]["ttn"])]
    for key, rate in rows:
        print(f"| {key} | {rate:,.0f} | {1e6 / rate:,.1f} | {raw['raw sync'] / rate:.2f}x |")
    if churned:
        print()
        print(f"| claim/ack churn ({args.batch} per batch) | dead tuples, total size |")
        print("|---|---:|")
        for what, value in churned:
            print(f"| {what} | {value} |")
    if parts:
        print()
        print("| push_many's statement, direct (synchronous_commit=on) | rows/s | vs direct |")
        print("|---|---:|---:|")
        first = statistics.median(next(iter(parts.values())))
        for label, rates in parts.items():
            print(f"| {label} | {statistics.median(rates):,.0f} | {statistics.median(rates) / first:.2f} |")
    if floors:
        print()
        print("| lateness floor, other process (over 2 s) | p50 ms | p99 ms | max ms |")
        print("|---|---:|---:|---:|")
        for what, (p50, p99, mx) in floors.items():
            print(f"| {what} | {p50:.2f} | {p99:.2f} | {mx:.2f} |")
    print()
    print("* cut short after --cap seconds; the rate is over the elements handled.")


if __name__ == "__main__":
    main()
