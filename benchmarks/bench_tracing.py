"""What tracing costs a delivery and a defer: OpenTelemetry unused, imported, and recording.

    python benchmarks/bench_tracing.py [--n 20000] [--repeat 5] [--backends asyncio,trio]

Deliveries: N elements all due at once on the memory store, a no-op async handler; CPU time
per delivery (this process's, ``time.process_time``) from the first delivery to the last, and
deliveries per second. Defers: N ``scheduler.defer`` calls in a row (inside a span where a span
is the point). Each row is a median of ``--repeat`` runs, the rows taking turns in every round,
all in this one process; the ratio is of CPU time to the first row's (CPU time, not wall time:
the machine is shared, and wall time moves with the others' load).

- ``unused``: the application never imported OpenTelemetry. This process has (for the other
  rows), so the rows hide ``opentelemetry.trace`` from ``sys.modules`` while they run: that
  lookup is all rehydrate does to decide (``rehydrate/_tracing.py``).
- ``imported, no provider``: the API imported, no SDK tracer provider set (installed, unused).
- ``SDK, no context``: an SDK provider (spans recorded, then dropped: no processor), elements
  without a trace context (each delivery a new trace).
- ``SDK, deferred in a span``: the same, elements carrying a context (parent, link, extract).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from rehydrate import Scheduler
from rehydrate._tracing import wrap

#: A W3C context as a defer inside a span would store it.
CARRIER = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


@contextlib.contextmanager
def unused() -> Iterator[None]:
    """Run as if the application had never imported OpenTelemetry."""
    module = sys.modules.pop("opentelemetry.trace")
    try:
        yield
    finally:
        sys.modules["opentelemetry.trace"] = module


async def deliveries(
    n: int, provider: TracerProvider | None, carrier: dict[str, str] | None
) -> tuple[float, float]:
    scheduler = Scheduler(grace=5, tracer_provider=provider)
    count = 0
    done = anyio.Event()
    first = cpu = 0.0

    @scheduler.handler("burst", concurrency=1000, lease=60)
    async def noop(element: Any) -> None:
        nonlocal count, first, cpu
        if not count:
            first, cpu = time.perf_counter(), time.process_time()
        count += 1
        if count == n:
            done.set()

    async with scheduler.store:
        await scheduler.store.push_many("burst", [(wrap(i, carrier), 0, None) for i in range(n)])
    async with scheduler:
        with anyio.fail_after(120):
            await done.wait()
        end, cpu_end = time.perf_counter(), time.process_time()
    assert scheduler.stats().acked == n
    return (cpu_end - cpu) / n * 1e6, n / (end - first)


async def defers(n: int, provider: TracerProvider | None, in_span: bool) -> tuple[float, float]:
    scheduler = Scheduler(grace=5, tracer_provider=provider)
    span = (
        trace.use_span(provider.get_tracer("bench").start_span("request"), end_on_exit=True)
        if in_span and provider is not None
        else contextlib.nullcontext()
    )
    async with scheduler:
        with span:
            start, cpu = time.perf_counter(), time.process_time()
            for i in range(n):
                await scheduler.defer("later", i, delay=3600)
            end, cpu_end = time.perf_counter(), time.process_time()
        scheduler.stop()
    return (cpu_end - cpu) / n * 1e6, n / (end - start)


Row = tuple[str, Callable[[], Any], Callable[[], contextlib.AbstractContextManager[None]]]


def run(backend: str, n: int, repeat: int) -> None:
    sdk = TracerProvider()  # no processor: spans are recorded and dropped
    table: list[tuple[str, list[Row]]] = [
        (
            "deliver",
            [
                ("unused", lambda: deliveries(n, None, None), unused),
                ("imported, no provider", lambda: deliveries(n, None, None), contextlib.nullcontext),
                ("SDK, no context", lambda: deliveries(n, sdk, None), contextlib.nullcontext),
                ("SDK, deferred in a span", lambda: deliveries(n, sdk, CARRIER), contextlib.nullcontext),
            ],
        ),
        (
            "defer",
            [
                ("unused", lambda: defers(n, None, False), unused),
                ("imported, no provider", lambda: defers(n, None, False), contextlib.nullcontext),
                ("SDK, no span", lambda: defers(n, sdk, False), contextlib.nullcontext),
                ("SDK, in a span", lambda: defers(n, sdk, True), contextlib.nullcontext),
            ],
        ),
    ]
    for what, rows in table:
        results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in rows}
        for _ in range(repeat):
            for name, make, setting in rows:
                gc.collect()
                with setting():
                    results[name].append(anyio.run(make, backend=backend))
        base = statistics.median(cpu for cpu, _ in results[rows[0][0]])
        for name, _, _ in rows:
            cpu = statistics.median(cpu for cpu, _ in results[name])
            rate = statistics.median(rate for _, rate in results[name])
            print(f"| {backend} | {what} | {name} | {cpu:.1f} | {cpu / base:.2f} | {rate:,.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backends", default="asyncio,trio")
    args = parser.parse_args()
    print(f"rehydrate tracing benchmark: Python {platform.python_version()} on {platform.platform()}")
    print(
        f"{args.n} elements, memory store, no-op async handler; medians of {args.repeat}, rows interleaved\n"
    )
    print("| backend | what | OpenTelemetry | CPU us each | CPU ratio | per second (wall) |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for backend in args.backends.split(","):
        run(backend, args.n, args.repeat)
    with open("/proc/loadavg") as f:
        print(f"\nload average at the end: {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
