"""Scheduler lateness and throughput on the memory store, beside the event loop's own timers.

    python benchmarks/bench_scheduler.py [--n 20000] [--spread 2.0] [--repeat 3]

Part 1 (lateness): defer N elements with delays spread evenly over ``spread`` seconds to a no-op
async handler and record, in the handler, how late each is (monotonic now minus its due time).
The floor, in the same process and event loop: the same due times fired by the loop's own timers
(``loop.call_at`` on asyncio; one task per element doing ``sleep_until`` on trio).

Part 2 (throughput): N elements all due at once, delivered to a no-op async handler; deliveries
per second from the first delivery to the last ack.

Runs on asyncio and trio; prints medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from typing import Any

import anyio

import rehydrate
from rehydrate import Scheduler, current_delivery


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)

    def p(f: float) -> float:
        return ordered[min(len(ordered) - 1, int(f * len(ordered)))]

    return p(0.50) * 1000, p(0.99) * 1000, ordered[-1] * 1000


async def scheduler_lateness(n: int, spread: float) -> tuple[float, float, float, float]:
    scheduler = Scheduler(grace=5)
    late: list[float] = []
    done = anyio.Event()

    @scheduler.handler("bench", concurrency=1000, lease=60)
    async def noop(element: Any) -> None:
        late.append(time.monotonic() - current_delivery().due)
        if len(late) == n:
            done.set()

    async with scheduler:
        start = time.monotonic() + 0.2
        items = []
        for i in range(n):
            due = start + spread * i / n
            items.append((i, max(0.0, due - time.monotonic()), None))
            if len(items) == 1000:
                await scheduler.store.push_many("bench", items)
                items = []
        if items:
            await scheduler.store.push_many("bench", items)
        with anyio.fail_after(spread + 30):
            await done.wait()
        elapsed = time.monotonic() - start
    return (*percentiles(late), n / elapsed)


async def floor_lateness(n: int, spread: float, backend: str) -> tuple[float, float, float]:
    late: list[float] = []
    start = time.monotonic() + 0.2
    dues = [start + spread * i / n for i in range(n)]
    if backend == "asyncio":
        import asyncio

        loop = asyncio.get_running_loop()
        finished = asyncio.Event()

        def fire(due: float) -> None:
            late.append(time.monotonic() - due)
            if len(late) == n:
                finished.set()

        offset = loop.time() - time.monotonic()
        for due in dues:
            loop.call_at(due + offset, fire, due)
        await finished.wait()
    else:
        import trio

        async def sleeper(i: int) -> None:
            due = dues[i]
            await trio.sleep_until(due + trio.current_time() - time.monotonic())
            late.append(time.monotonic() - due)

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(sleeper, i)
            # Spawning 20,000 tasks takes a while: give the floor the same head start from here.
            start = time.monotonic() + 0.2
            dues[:] = [start + spread * i / n for i in range(n)]
    return percentiles(late)


async def scheduler_throughput(n: int) -> float:
    scheduler = Scheduler(grace=5)
    count = 0
    done = anyio.Event()
    first = 0.0

    @scheduler.handler("burst", concurrency=1000, lease=60)
    async def noop(element: Any) -> None:
        nonlocal count, first
        if not count:
            first = time.perf_counter()
        count += 1
        if count == n:
            done.set()

    async with scheduler.store:  # filled before the scheduler starts (a store must be open)
        await scheduler.store.push_many("burst", [(i, 0, None) for i in range(n)])
    async with scheduler:
        with anyio.fail_after(120):
            await done.wait()
        end = time.perf_counter()
    assert scheduler.stats().acked == n
    return n / (end - first)


def run(backend: str, n: int, spread: float, repeat: int) -> dict[str, Any]:
    rows: dict[str, list[Any]] = {"scheduler": [], "floor": [], "throughput": []}
    for _ in range(repeat):
        gc.collect()
        rows["scheduler"].append(anyio.run(scheduler_lateness, n, spread, backend=backend))
        gc.collect()
        rows["floor"].append(anyio.run(floor_lateness, n, spread, backend, backend=backend))
        gc.collect()
        rows["throughput"].append(anyio.run(scheduler_throughput, n, backend=backend))

    def med(xs: list[list[float]], i: int) -> float:
        return statistics.median(x[i] for x in xs)

    return {
        "scheduler": [med(rows["scheduler"], i) for i in range(4)],
        "floor": [med(rows["floor"], i) for i in range(3)],
        "throughput": statistics.median(rows["throughput"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backends", default="asyncio,trio")
    args = parser.parse_args()
    print(
        f"rehydrate {rehydrate.__name__} scheduler benchmark: Python {platform.python_version()} on {platform.platform()}"
    )
    print(
        f"{args.n} elements due over {args.spread} s, no-op async handler, memory store; medians of {args.repeat}\n"
    )
    print(f"{'backend':<8} {'what':<26} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'deliveries/s':>13}")
    ok = True
    for backend in args.backends.split(","):
        result = run(backend, args.n, args.spread, args.repeat)
        s, f = result["scheduler"], result["floor"]
        floor_name = "loop.call_at" if backend == "asyncio" else "trio.sleep_until per task"
        print(f"{backend:<8} {'rehydrate Scheduler':<26} {s[0]:8.2f} {s[1]:8.2f} {s[2]:8.2f} {s[3]:13,.0f}")
        print(f"{backend:<8} {'floor: ' + floor_name:<26} {f[0]:8.2f} {f[1]:8.2f} {f[2]:8.2f}")
        print(f"{backend:<8} {'all due at once':<26} {'':8} {'':8} {'':8} {result['throughput']:13,.0f}")
        gap = s[1] - f[1]
        bar_late = gap <= 2.0
        print(
            f"{backend:<8} bar: p99 within 2 ms of the floor's p99: {gap:+.2f} ms -> {'PASS' if bar_late else 'FAIL'}"
        )
        ok &= bar_late
        if backend == "asyncio":
            bar_tp = result["throughput"] >= 20_000
            print(
                f"{backend:<8} bar: >= 20,000 deliveries/s all due: {result['throughput']:,.0f} -> {'PASS' if bar_tp else 'FAIL'}"
            )
            ok &= bar_tp
        print()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
