"""How late a SQLite subscription in another process learns of a write: datagram vs the nap alone.

    python benchmarks/bench_sqlite_wake.py [--n 200] [--repeat 3]

A subscriber process waits on ``subscribe(name)``; this process pushes ``--n`` elements, each due
sooner than everything before it (so each bumps the name's counter), one every 10-30 ms (random,
so the nap's phase is random too). The figure is the wall time at which the subscriber's ``wait``
returned minus the time the ``push`` returned here (slightly negative when the datagram, sent
right after the commit, arrives before the push has returned to its caller). Two ways, in turn in
each round, in the same sitting:

* ``datagram``: the store as it is (the wake-up socket beside the file);
* ``nap``: the same store with the socket made impossible (a plain file where its directory would
  be), so the subscription falls back to reading the counter row every 50 ms: what every
  cross-process wake-up cost before issue 15;
* ``redis``: the Redis store's pub/sub on a throwaway server, the reference.

The SQLite files are opened with ``synchronous=NORMAL``: an fsync per push would only slow the
producer down, not the wake-up being measured.

Unlike ``bench_workers.py`` (claims, fsyncs, handlers), this measures the wake-up alone. Medians
of ``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rehydrate import open_store


def subscriber(url: str, name: str, ready: Any, stop: Any, results: Any) -> None:
    async def main() -> list[float]:
        woke: list[float] = []

        async def listen(sub: Any) -> None:
            while True:
                if await sub.wait(None):
                    woke.append(time.time())

        async with open_store(url) as store, store.subscribe(name) as sub, anyio.create_task_group() as tg:
            tg.start_soon(listen, sub)
            ready.set()
            await anyio.to_thread.run_sync(stop.wait)  # the harness's stop flag, across processes
            tg.cancel_scope.cancel()
        return woke

    results.put(anyio.run(main))


def one_pass(url: str, n: int) -> list[float]:
    ctx = mp.get_context("spawn")
    name = f"wake-{uuid.uuid4().hex[:8]}"  # a dehydrator of its own: nothing left by another pass
    ready, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=subscriber, args=(url, name, ready, stop, results))
    proc.start()
    if not ready.wait(30):
        raise SystemExit("the subscriber did not start")
    rng = random.Random(n)

    async def produce() -> list[float]:
        returned: list[float] = []
        async with open_store(url) as store:
            for i in range(n):
                await anyio.sleep(rng.uniform(0.01, 0.03))
                await store.push(name, i, ttl=10_000 - i)  # sooner than every earlier one: a bump
                returned.append(time.time())
        return returned

    returned = anyio.run(produce)
    time.sleep(0.2)  # the last wake-up (up to a nap late)
    stop.set()
    woke: list[float] = results.get(timeout=60)
    proc.join(30)
    # A wake-up that covers two pushes (the subscriber was late) leaves the later one unmatched:
    # match each push with the first wake-up at or after it was sent.
    out: list[float] = []
    j = 0
    for t in returned:
        while j < len(woke) and woke[j] < t - 0.005:
            j += 1
        if j < len(woke):
            out.append(woke[j] - t)
    return out


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)

    def at(f: float) -> float:
        return ordered[min(len(ordered) - 1, int(f * len(ordered)))]

    return at(0.5) * 1000, at(0.99) * 1000, ordered[-1] * 1000


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"SQLite wake-up across processes, {args.n} pushes; medians of {args.repeat}")
    print(f"Python {platform.python_version()} on {platform.platform()}; load {os.getloadavg()}\n")
    from tests.redis_server import RedisServer

    runs: dict[str, list[tuple[float, float, float]]] = {"datagram": [], "nap": [], "redis": []}
    with RedisServer() as server:
        for _ in range(args.repeat):
            for how in runs:
                if how == "redis":
                    runs[how].append(percentiles(one_pass(server.url, args.n)))
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    path = f"{tmp}/wake.db"
                    if how == "nap":
                        Path(f"{path}-wake").touch()  # no directory, no socket: the 50 ms nap
                    url = f"sqlite:///{path}?synchronous=normal"
                    runs[how].append(percentiles(one_pass(url, args.n)))
    print(
        f"{'ms after the push returned':<28} {'datagram':>10} {'nap':>10} {'redis':>10} {'nap/datagram':>13}"
    )
    for i, label in enumerate(("p50", "p99", "max")):
        d, nap, redis = (statistics.median(r[i] for r in runs[how]) for how in ("datagram", "nap", "redis"))
        ratio = f"{nap / d:12.1f}x" if d > 0 else f"{'-':>13}"
        print(f"{label:<28} {d:10.2f} {nap:10.2f} {redis:10.2f} {ratio}")
    print(f"\nload average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
