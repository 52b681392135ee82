"""The producer's side: ``await scheduler.defer(...)`` one at a time, and from 64 tasks at once.

Run from the repository root::

    python benchmarks/bench_defer.py              # 5,000 sequential, 20,000 concurrent, 5 rounds
    python benchmarks/bench_defer.py --quick      # 1,000 and 5,000, 1 round
    python benchmarks/bench_defer.py --backend trio

A throwaway Redis (or Valkey) server is started on a free loopback port (``tests/redis_server.py``).
In one process, the rows take turns round after round (a shared machine drifts; none should
always run in another's wake), and the table gives medians:

* floors: ``EVALSHA`` of a one-line script (``return 1``) awaited one after the other, through
  coredis, and through a bare socket (one send, one receive: what the wire and the server cost);
* ``defer``, sequential: ``Scheduler.defer`` awaited one after the other, with the latency of each
  call (p50, p99); as shipped, and with the push sent through coredis as before (the "lane" off);
* ``defer``, 64 tasks: 64 producer tasks deferring at once, as shipped (concurrent defers coalesce
  into one ``push_many`` per tick) and with coalescing off (one script call per defer, as before);
  with the script calls the server ran per defer (``INFO commandstats``);
* the memory store, sequential and 64 tasks (it does not coalesce: nothing to gain), beside its
  own ``push`` awaited one by one (what ``defer`` wraps).

Every element is a small dict deferred 1,000 s ahead (nothing is delivered: no handler).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rehydrate import Scheduler
from rehydrate.stores import MemoryStore, RedisStore
from tests.redis_server import RedisServer

NAME = "bench"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def evalsha_calls(client: Any) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


Result = dict[str, float]


async def floor_coredis(url: str, n: int) -> Result:
    import coredis

    async with coredis.Redis.from_url(url) as client:
        sha = await client.script_load("return 1")
        lat = []
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            await client.evalsha(sha, keys=["k"], args=["a"])
            lat.append(time.perf_counter() - t)
        return {
            "rate": n / (time.perf_counter() - t0),
            "p50": percentile(lat, 0.5),
            "p99": percentile(lat, 0.99),
        }


async def floor_socket(port: int, n: int) -> Result:
    sha = hashlib.sha1(b"return 1").hexdigest().encode()
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$8\r\nreturn 1\r\n")
        await stream.receive()
        command = b"*5\r\n$7\r\nEVALSHA\r\n$40\r\n" + sha + b"\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\na\r\n"
        lat = []
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            await stream.send(command)
            reply = await stream.receive()
            while not reply.endswith(b"\r\n"):
                reply += await stream.receive()
            lat.append(time.perf_counter() - t)
        return {
            "rate": n / (time.perf_counter() - t0),
            "p50": percentile(lat, 0.5),
            "p99": percentile(lat, 0.99),
        }


async def defers(store: Any, n: int, producers: int, *, coalesce: bool = True, lane: bool = True) -> Result:
    """Defers/s (and per-call latency, sequential) through a running scheduler on ``store``."""
    if not coalesce:
        store._coalesce_pushes = False
    async with store, Scheduler(store) as scheduler:
        if not lane:
            store._backend._lane = None
        client = store._backend._get() if isinstance(store, RedisStore) else None
        calls_before = await evalsha_calls(client) if client is not None else 0
        lat: list[float] = []
        per = n // producers

        async def produce() -> None:
            for i in range(per):
                t = time.perf_counter()
                await scheduler.defer(NAME, {"i": i}, delay=1000)
                lat.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        if producers == 1:
            await produce()
        else:
            async with anyio.create_task_group() as tg:
                for _ in range(producers):
                    tg.start_soon(produce)
        elapsed = time.perf_counter() - t0
        out = {"rate": per * producers / elapsed, "p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99)}
        if client is not None:
            out["calls"] = (await evalsha_calls(client) - calls_before) / (per * producers)
            await client.delete([f"{store._prefix}:{{{NAME}}}:{k}" for k in "ezs"])
            await client.srem(store._registry, [NAME])
    return out


async def main_async(args: argparse.Namespace) -> None:
    server = RedisServer(args.server if args.server != "auto" else None).start()
    try:

        def redis(**kw: Any) -> Callable[[], Awaitable[Result]]:
            async def run() -> Result:
                store = RedisStore.from_url(server.url, prefix=f"bench-{uuid.uuid4().hex[:8]}")
                producers = kw.pop("producers")
                try:
                    return await defers(store, args.single if producers == 1 else args.n, producers, **kw)
                finally:
                    kw["producers"] = producers

            return run

        def memory(producers: int) -> Callable[[], Awaitable[Result]]:
            async def run() -> Result:
                return await defers(MemoryStore(), args.memory, producers)

            return run

        async def memory_push() -> Result:
            """The memory store's own push, awaited one by one: what ``defer`` wraps."""
            async with MemoryStore() as store:
                lat = []
                t0 = time.perf_counter()
                for i in range(args.memory):
                    t = time.perf_counter()
                    await store.push(NAME, {"i": i}, ttl=1000)
                    lat.append(time.perf_counter() - t)
                elapsed = time.perf_counter() - t0
            return {"rate": args.memory / elapsed, "p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99)}

        rows: dict[str, Callable[[], Awaitable[Result]]] = {
            "floor: EVALSHA 'return 1', coredis": lambda: floor_coredis(server.url, args.single),
            "floor: EVALSHA 'return 1', bare socket": lambda: floor_socket(server.port, args.single),
            "defer, sequential": redis(producers=1),
            "defer, sequential, push through coredis (before)": redis(producers=1, lane=False),
            "defer, 64 tasks": redis(producers=64),
            "defer, 64 tasks, not coalesced (before)": redis(producers=64, coalesce=False, lane=False),
            "memory store: store.push, sequential (floor)": memory_push,
            "memory store: defer, sequential": memory(1),
            "memory store: defer, 64 tasks": memory(64),
        }
        results: dict[str, list[Result]] = {label: [] for label in rows}
        load_before = os.getloadavg()
        for r in range(args.repeat):
            order = list(rows)
            if r % 2:
                order.reverse()
            for label in order:
                results[label].append(await rows[label]())
        load_after = os.getloadavg()
        print(
            f"bench_defer.py on {server.kind} ({server.url.rsplit('/', 1)[0]}), backend {args.backend}, "
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
            f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; medians of {args.repeat} rounds; "
            f"{args.single:,} sequential defers, {args.n:,} from 64 tasks, {args.memory:,} on memory"
        )
        print()
        print("| row | defers/s | p50 latency | p99 latency | script calls per defer |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for label, runs in results.items():
            rate = statistics.median(x["rate"] for x in runs)
            p50 = statistics.median(x["p50"] for x in runs) * 1e6
            p99 = statistics.median(x["p99"] for x in runs) * 1e6
            calls = f"{statistics.median(x['calls'] for x in runs):.3f}" if "calls" in runs[0] else ""
            print(f"| {label} | {rate:,.0f} | {p50:,.0f} µs | {p99:,.0f} µs | {calls} |")
    finally:
        server.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=["auto", "redis", "valkey"], default="auto")
    parser.add_argument("--single", type=int, default=5_000, help="sequential defers (and floor calls)")
    parser.add_argument("--n", type=int, default=20_000, help="defers from 64 tasks")
    parser.add_argument("--memory", type=int, default=50_000, help="defers to the memory store")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 / 5,000 / 10,000, one round")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    if args.quick:
        args.single, args.n, args.memory, args.repeat = 1_000, 5_000, 10_000, 1
    anyio.run(main_async, args, backend=args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
