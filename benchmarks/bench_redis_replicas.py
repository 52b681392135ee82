"""What ``min_replicas=1`` costs: pushes per second with and without waiting for a replica.

    python benchmarks/bench_redis_replicas.py [--n 3000] [--repeat 5] [--tasks 1,32]

Starts a primary and a replica (throwaway servers on loopback) and pushes ``--n`` elements, one
``push`` per element, from one task (every push waits for its own round trip, and for ``WAIT``
with ``min_replicas``) and from several concurrent tasks. Each round runs the plain store and
the ``min_replicas=1`` store back to back; medians of ``--repeat`` rounds and their ratio.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rehydrate.stores._redis import RedisStore
from tests.redis_cluster import admin
from tests.redis_server import RedisServer, drop_prefix


async def pushes_per_second(url: str, n: int, tasks: int) -> float:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    async with RedisStore.from_url(f"{url}{'&' if '?' in url else '?'}prefix={prefix}") as store:

        async def push(k: int) -> None:
            for i in range(k, n, tasks):
                await store.push("d", i, ttl=60)

        began = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for k in range(tasks):
                tg.start_soon(push, k)
        took = time.perf_counter() - began
    await drop_prefix(url.split("?")[0], prefix)
    return n / took


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tasks", default="1,32")
    args = parser.parse_args()
    tasks = [int(t) for t in args.tasks.split(",")]
    with RedisServer() as primary, RedisServer() as replica:
        admin(replica.port, "REPLICAOF", "127.0.0.1", primary.port)
        while "state=online" not in str(admin(primary.port, "INFO", "replication")):
            time.sleep(0.05)
        print(f"min_replicas cost: {primary.kind} primary + replica on loopback, {args.n} pushes")
        print(f"Python {platform.python_version()} on {platform.platform()}; medians of {args.repeat}\n")
        plain_url = primary.url
        waiting_url = f"{primary.url}?min_replicas=1&replica_timeout=1s"
        print(f"{'concurrent tasks':<18} {'plain push/s':>14} {'min_replicas=1':>16} {'ratio':>8}")
        for t in tasks:
            plain: list[float] = []
            waiting: list[float] = []
            for _ in range(args.repeat):
                plain.append(anyio.run(pushes_per_second, plain_url, args.n, t))
                waiting.append(anyio.run(pushes_per_second, waiting_url, args.n, t))
            p, w = statistics.median(plain), statistics.median(waiting)
            print(f"{t:<18} {p:14,.0f} {w:16,.0f} {w / p:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
