"""Memory per pending element: rehydrate's stores beside ReDe's module and the layouts peers use.

Run from the repository root::

    python benchmarks/bench_memory.py --sizes 200000            # a quick run
    python benchmarks/bench_memory.py                           # 1M and 10M, as issue 44 asks
    python benchmarks/bench_memory.py --rede-module /path/to/module.so --write-docs

One throwaway ``redis-server`` (free loopback port, ``--save ""``), with ReDe's module loaded when
one is given (``--rede-module PATH`` or ``$REDE_MODULE``; this script does not build it). For each
size, payload and due-time shape, each layout is filled on an empty server and measured alone:

* **ReDe**: ``REDE.PUSH name ttl_ms payload id`` (C structs, a queue per distinct TTL).
* **zset + strings**: a string per job (``SET arq:job:<id> payload``) and a sorted set of ids
  scored by due time (``ZADD arq:queue``): how arq and rq-scheduler keep delayed jobs.
* **rehydrate**: ``RedisStore.push_many`` in batches, through its public API (JSON elements: a
  string of ``payload - 2`` characters, so the stored payload is ``payload`` bytes).

Bytes per element is ``INFO memory`` ``used_memory`` after the fill less before, over the count.
Push rate is the fill's (pipelines of ``--batch`` commands for ReDe and the zset layout, one
``push_many`` per batch for rehydrate). Deliveries per second: with the fill still pending,
``--due`` more elements are pushed due at once (not timed), then taken and acknowledged until
gone: ``claim`` + ``ack`` batches of ``--batch`` for rehydrate, ``REDE.POLL`` for ReDe (it returns
every expired element and removes them), and for the zset layout a Lua pop (``ZRANGEBYSCORE`` +
``ZREM`` + ``MGET``, ``--batch`` at a time) then a ``DEL`` of the batch's strings.

Due times: ``ttls``: four distinct TTLs (1 h, 2 h, 1 day, 1 week) in turn; ``random``: uniformly
random over a week, starting an hour ahead (for ReDe each element then has a TTL of its own).
Ids are 12 characters (``job000000001``).

Then SQLite and PostgreSQL (``--no-sql`` skips them): the same rows pushed through each store's
``push_many``, and bytes per element on disk of its elements table and indexes (SQLite: ``dbstat``;
PostgreSQL: ``pg_total_relation_size`` after ``VACUUM``), beside a minimal table ``(name, id, due,
payload)`` with its due index ``(name, due)`` holding the same rows, and that table with a
primary key ``(name, id)`` too (what looking an element up by id costs).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import doctables  # noqa: E402

from rehydrate.stores import PostgresStore, RedisStore, SQLiteStore  # noqa: E402
from tests.pg_server import PostgresServer, drop_tables, pg_bin_dir  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

NAME = "bench"
TABLE = "memory"
TTLS = (3600.0, 7200.0, 86400.0, 604800.0)
WEEK = 604800.0
perf = time.perf_counter

Reply = Any


class Resp:
    """A blocking RESP2 connection that pipelines: enough to fill a server fast from Python."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.pos = 0

    def close(self) -> None:
        self.sock.close()

    @staticmethod
    def encode(*args: bytes | str | int | float) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        return b"".join(out)

    def _line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = self.buf[self.pos : end]
                self.pos = end + 2
                return line
            self._more()

    def _more(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("redis-server closed the connection")
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0

    def _reply(self) -> Reply:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) - self.pos < n + 2:
                self._more()
            data = self.buf[self.pos : self.pos + n]
            self.pos += n + 2
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def pipeline(self, commands: Sequence[bytes]) -> list[Reply]:
        self.sock.sendall(b"".join(commands))
        return [self._reply() for _ in commands]

    def call(self, *args: bytes | str | int | float) -> Reply:
        return self.pipeline([self.encode(*args)])[0]

    def used_memory(self) -> int:
        info = self.call("INFO", "memory").decode()
        for line in info.splitlines():
            if line.startswith("used_memory:"):
                return int(line.split(":")[1])
        raise RuntimeError("no used_memory in INFO memory")

    def server_ms(self) -> int:
        sec, usec = self.call("TIME")
        return int(sec) * 1000 + int(usec) // 1000


def ttls(n: int, shape: str, seed: int = 44) -> list[float]:
    """Each element's TTL in seconds (see the module's docstring)."""
    if shape == "ttls":
        return [TTLS[i % len(TTLS)] for i in range(n)]
    rng = random.Random(seed)
    return [3600.0 + rng.random() * WEEK for _ in range(n)]


def ident(i: int) -> str:
    return f"job{i:09d}"


class Result:
    def __init__(self, bytes_per: float, push_rate: float, deliveries: float) -> None:
        self.bytes_per = bytes_per
        self.push_rate = push_rate
        self.deliveries = deliveries


# ReDe -------------------------------------------------------------------------------------------


def run_rede(r: Resp, n: int, payload: int, shape: str, batch: int, due: int) -> Result:
    body = b"x" * payload
    before = r.used_memory()
    times = ttls(n, shape)
    start = perf()
    for s in range(0, n, batch):
        cmds = [
            Resp.encode("REDE.PUSH", NAME, int(times[i] * 1000), body, ident(i))
            for i in range(s, min(n, s + batch))
        ]
        r.pipeline(cmds)
    push_rate = n / (perf() - start)
    used = r.used_memory() - before
    for s in range(0, due, batch):
        r.pipeline(
            [Resp.encode("REDE.PUSH", NAME, 0, body, f"due{i:09d}") for i in range(s, min(due, s + batch))]
        )
    time.sleep(0.01)
    got = 0
    start = perf()
    while got < due:
        got += len(r.call("REDE.POLL", NAME))
    deliveries = got / (perf() - start)
    return Result(used / n, push_rate, deliveries)


# A sorted set of ids plus a string per job ------------------------------------------------------

ZQUEUE = "arq:queue"
ZJOB = "arq:job:"
ZPOP = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return {} end
redis.call('ZREM', KEYS[1], unpack(ids))
local keys = {}
for i, id in ipairs(ids) do keys[i] = ARGV[3] .. id end
local payloads = redis.call('MGET', unpack(keys))
local out = {}
for i, id in ipairs(ids) do out[2 * i - 1] = id; out[2 * i] = payloads[i] end
return out
"""


def run_zset(r: Resp, n: int, payload: int, shape: str, batch: int, due: int) -> Result:
    body = b"x" * payload
    sha = r.call("SCRIPT", "LOAD", ZPOP).decode()
    before = r.used_memory()
    times = ttls(n, shape)
    now = r.server_ms()
    start = perf()
    for s in range(0, n, batch):
        cmds: list[bytes] = []
        for i in range(s, min(n, s + batch)):
            id = ident(i)
            cmds.append(Resp.encode("SET", ZJOB + id, body))
            cmds.append(Resp.encode("ZADD", ZQUEUE, now + int(times[i] * 1000), id))
        r.pipeline(cmds)
    push_rate = n / (perf() - start)
    used = r.used_memory() - before
    now = r.server_ms()
    for s in range(0, due, batch):
        cmds = []
        for i in range(s, min(due, s + batch)):
            cmds.append(Resp.encode("SET", f"{ZJOB}due{i:09d}", body))
            cmds.append(Resp.encode("ZADD", ZQUEUE, now, f"due{i:09d}"))
        r.pipeline(cmds)
    got = 0
    start = perf()
    while got < due:
        popped = r.call("EVALSHA", sha, 1, ZQUEUE, r.server_ms(), batch, ZJOB)
        ids = popped[0::2]
        if ids:
            r.call("DEL", *[ZJOB.encode() + id for id in ids])
        got += len(ids)
    deliveries = got / (perf() - start)
    return Result(used / n, push_rate, deliveries)


# rehydrate's Redis store ------------------------------------------------------------------------


async def run_rehydrate(url: str, r: Resp, n: int, payload: int, shape: str, batch: int, due: int) -> Result:
    element = "x" * (payload - 2)
    times = ttls(n, shape)
    before = r.used_memory()
    async with RedisStore.from_url(url, batch_size=batch) as store:
        start = perf()
        for s in range(0, n, batch):
            await store.push_many(NAME, [(element, times[i], ident(i)) for i in range(s, min(n, s + batch))])
        push_rate = n / (perf() - start)
        used = r.used_memory() - before
        for s in range(0, due, batch):
            await store.push_many(NAME, [(element, 0, f"due{i:09d}") for i in range(s, min(due, s + batch))])
        got = 0
        start = perf()
        while got < due:
            claims = await store.claim(NAME, lease=600, limit=batch)
            await store.ack(NAME, [(c.id, c.token) for c in claims])
            got += len(claims)
        deliveries = got / (perf() - start)
    return Result(used / n, push_rate, deliveries)


# SQLite and PostgreSQL ----------------------------------------------------------------------------

MINIMAL = (
    "CREATE TABLE {t} (name TEXT NOT NULL, id TEXT NOT NULL, due {due} NOT NULL, payload {blob} NOT NULL{pk})"
)
MINIMAL_INDEX = "CREATE INDEX {t}_due ON {t} (name, due)"


async def fill_store(store: Any, n: int, payload: int, shape: str, batch: int) -> float:
    element = "x" * (payload - 2)
    times = ttls(n, shape)
    start = perf()
    for s in range(0, n, batch):
        await store.push_many(NAME, [(element, times[i], ident(i)) for i in range(s, min(n, s + batch))])
    return n / (perf() - start)


def sqlite_sizes(path: str, n: int) -> dict[str, float]:
    """Bytes per element of the store's elements table and indexes, and of the minimal tables."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:

        def size(like: Sequence[str]) -> int:
            where = " OR ".join("name LIKE ?" for _ in like)
            (total,) = conn.execute(f"SELECT sum(pgsize) FROM dbstat WHERE {where}", tuple(like)).fetchone()
            return int(total)

        out = {"store": size(["rehydrate_elements%", "sqlite_autoindex_rehydrate_elements%"]) / n}
        for label, pk in (("minimal", ""), ("minimal+pk", ", PRIMARY KEY (name, id)")):
            t = "minimal_pk" if pk else "minimal"
            conn.execute(MINIMAL.format(t=t, due="REAL", blob="BLOB", pk=pk))
            conn.execute(MINIMAL_INDEX.format(t=t))
            conn.execute("BEGIN")
            conn.execute(
                f"INSERT INTO {t} SELECT name, id, due, payload FROM rehydrate_elements ORDER BY rowid"
            )
            conn.execute("COMMIT")
            out[label] = size([f"{t}", f"{t}_due", f"sqlite_autoindex_{t}%"]) / n
        return out
    finally:
        conn.close()


async def run_sqlite(n: int, payload: int, shape: str, batch: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        path = os.path.join(tmp, "memory.db")
        async with SQLiteStore(path, synchronous="NORMAL") as store:
            rate = await fill_store(store, n, payload, shape, batch)
        out = await anyio.to_thread.run_sync(sqlite_sizes, path, n)
        out["push_rate"] = rate
        return out


def _pg_sizes(url: str, n: int) -> dict[str, float]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:

        def size(table: str) -> int:
            conn.execute(f"VACUUM ANALYZE {table}")
            row = conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()
            assert row is not None
            return int(row[0])

        out = {"store": size(f"public.{TABLE}") / n}
        for label, pk in (("minimal", ""), ("minimal+pk", ", PRIMARY KEY (name, id)")):
            t = "minimal_pk" if pk else "minimal"
            conn.execute(f"DROP TABLE IF EXISTS {t}")
            conn.execute(
                MINIMAL.format(t=t, due="bigint", blob="bytea", pk=pk).replace("TEXT", 'text COLLATE "C"')
            )
            conn.execute(MINIMAL_INDEX.format(t=t))
            conn.execute(f"INSERT INTO {t} SELECT name, id, due, payload FROM public.{TABLE} ORDER BY seq")
            out[label] = size(t) / n
            conn.execute(f"DROP TABLE {t}")
        return out


async def run_postgres(url: str, n: int, payload: int, shape: str, batch: int) -> dict[str, float]:
    async with PostgresStore.from_url(url, table=TABLE) as store:
        rate = await fill_store(store, n, payload, shape, batch)
        out = await anyio.to_thread.run_sync(_pg_sizes, url, n)
        out["push_rate"] = rate
        await drop_tables(store)
    return out


# The run -------------------------------------------------------------------------------------------

LAYOUTS = ("rede", "zset", "rehydrate")
LABELS = {"rede": "ReDe module", "zset": "zset + strings", "rehydrate": "rehydrate RedisStore"}


def cases(args: argparse.Namespace) -> Iterator[tuple[int, int, str]]:
    for n in args.sizes:
        for payload in args.payloads:
            for shape in args.shapes:
                yield n, payload, shape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ints = lambda s: [int(float(x)) for x in s.split(",")]  # noqa: E731
    parser.add_argument("--sizes", type=ints, default=[1_000_000, 10_000_000], help="comma-separated")
    parser.add_argument("--payloads", type=ints, default=[100, 1000], help="payload bytes, comma-separated")
    parser.add_argument("--shapes", type=lambda s: s.split(","), default=["ttls", "random"])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--due", type=int, default=50_000, help="elements delivered for the rate")
    parser.add_argument("--rede-module", default=os.environ.get("REDE_MODULE"))
    parser.add_argument("--no-sql", action="store_true", help="skip SQLite and PostgreSQL")
    parser.add_argument("--write-docs", action="store_true", help="write the tables into docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.write_docs:
        doctables.check_table("memory-redis")
        doctables.check_table("memory-sql")
    load = os.getloadavg()[0]
    layouts = list(LAYOUTS)
    if not args.rede_module:
        print("no ReDe module (--rede-module PATH or $REDE_MODULE): ReDe is left out", file=sys.stderr)
        layouts.remove("rede")
    extra = ("--loadmodule", str(Path(args.rede_module).resolve())) if args.rede_module else ()
    redis_rows: list[str] = []
    sql_rows: list[str] = []
    server = RedisServer("redis", extra_args=extra).start()
    try:
        r = Resp(server.port)
        version = r.call("INFO", "server").decode().split("redis_version:")[1].split()[0]
        print(
            f"Redis {version}; ids of 12 characters; deliveries: {args.due:,} due elements, batch {args.batch}"
        )
        head = (
            "| pending | payload | due times | layout | bytes/element | vs ReDe | push/s | deliveries/s |",
            "| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |",
        )
        redis_rows += head
        print("\n".join(head))
        for n, payload, shape in cases(args):
            results: dict[str, Result] = {}
            for layout in layouts:
                r.call("FLUSHALL")
                r.call("MEMORY", "PURGE")
                if layout == "rede":
                    results[layout] = run_rede(r, n, payload, shape, args.batch, args.due)
                elif layout == "zset":
                    results[layout] = run_zset(r, n, payload, shape, args.batch, args.due)
                else:
                    results[layout] = anyio.run(
                        run_rehydrate, server.url, r, n, payload, shape, args.batch, args.due
                    )
                res = results[layout]
                base = results.get("rede")
                ratio = f"{res.bytes_per / base.bytes_per:.2f}x" if base else "n/a"
                row = (
                    f"| {n:,} | {payload:,} | {shape} | {LABELS[layout]} | {res.bytes_per:,.0f} | {ratio} |"
                    f" {res.push_rate:,.0f} | {res.deliveries:,.0f} |"
                )
                redis_rows.append(row)
                print(row, flush=True)
            r.call("FLUSHALL")
        r.close()
    finally:
        server.stop()
    if not args.no_sql:
        head = (
            "| elements | payload | due times | store | bytes/element | minimal | ratio | minimal + pk | ratio |",
            "| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |",
        )
        sql_rows += head
        print()
        print("\n".join(head))
        pg: PostgresServer | None = None
        if pg_bin_dir() is None:
            print("no PostgreSQL server binaries (initdb, pg_ctl): PostgreSQL is left out", file=sys.stderr)
        else:
            pg = PostgresServer().start()
        try:
            runs: list[tuple[str, Callable[[int, int, str], Any]]] = [
                ("SQLite", lambda n, p, s: anyio.run(run_sqlite, n, p, s, args.batch))
            ]
            if pg is not None:
                url = pg.url
                runs.append(("PostgreSQL", lambda n, p, s: anyio.run(run_postgres, url, n, p, s, args.batch)))
            for n, payload, shape in cases(args):
                for label, run in runs:
                    out = run(n, payload, shape)
                    row = (
                        f"| {n:,} | {payload:,} | {shape} | {label} | {out['store']:,.0f} |"
                        f" {out['minimal']:,.0f} | {out['store'] / out['minimal']:.2f}x |"
                        f" {out['minimal+pk']:,.0f} | {out['store'] / out['minimal+pk']:.2f}x |"
                    )
                    sql_rows.append(row)
                    print(row, flush=True)
        finally:
            if pg is not None:
                pg.stop()
    if args.write_docs:
        notes = [
            "Bytes per element: `used_memory` after the fill less before (Redis), the elements "
            "table and its indexes on disk (SQLite `dbstat`; PostgreSQL `pg_total_relation_size` "
            "after `VACUUM`). Ratios are against ReDe's module (Redis) and the minimal table "
            "`(name, id, due, payload)` with its `(name, due)` index, without and with a primary "
            "key `(name, id)` (SQL), filled in the same run."
        ]
        doctables.write_table("memory-redis", redis_rows, notes[:0], load_before=load)
        if sql_rows:
            doctables.write_table("memory-sql", sql_rows, notes, load_before=load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
