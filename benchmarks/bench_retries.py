"""A failure storm: every handler in flight fails at once, and each failure files a delayed retry.

    python benchmarks/bench_retries.py [--n 5000] [--concurrency 1000] [--repeat 3]
                                       [--stores redis,sqlite,memory] [--backend asyncio]

For each store, ``--n`` elements due at once are claimed by a ``Scheduler`` whose handler
(``concurrency``) blocks on an event and then raises, all together (a downstream service went
down); each failure is retried in 60 s. Logging as a service would have it: warnings and up
(structlog's default would print every failure's traceback, and that would be what is measured). Measured from the moment they fail to the last retry
filed: failures handled per second and the store calls it took, side by side with the same run
through the store's one-at-a-time ``reschedule`` (the store's ``reschedule_many`` replaced by the
contract's default, a loop of ``reschedule``: what every failure cost before retries were
coalesced). Rounds alternate the order; medians.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rehydrate import Retry, Scheduler
from rehydrate.abc import Store
from rehydrate.stores import MemoryStore, RedisStore, SQLiteStore
from tests.redis_server import RedisServer

NAME = "storm"


def one_by_one(cls: type[Any]) -> type[Any]:
    """The store with ``reschedule_many`` as the contract's default: one ``reschedule`` per item."""
    return type(f"{cls.__name__}OneByOne", (cls,), {"reschedule_many": Store.reschedule_many})


async def storm(store: Store, n: int, concurrency: int) -> dict[str, float]:
    scheduler = Scheduler(store, grace=0, heartbeat=None)
    gate = anyio.Event()
    started = 0
    all_started = anyio.Event()
    calls = {"reschedule": 0, "reschedule_many": 0}
    for verb in calls:
        original = getattr(store, verb)

        def counted(*args: Any, _original: Any = original, _verb: str = verb, **kwargs: Any) -> Any:
            calls[_verb] += 1
            return _original(*args, **kwargs)

        setattr(store, verb, counted)

    @scheduler.handler(
        NAME,
        concurrency=concurrency,
        batch=min(concurrency, 1000),
        lease=120,
        retry=Retry(attempts=2, delay=60),
    )
    async def handler(element: int) -> None:
        nonlocal started
        started += 1
        if started == n:
            all_started.set()
        await gate.wait()
        raise ConnectionError("downstream is down")

    async with store, scheduler:
        for chunk in range(0, n, 1000):
            await store.push_many(NAME, [(i, 0, f"e{i}") for i in range(chunk, min(n, chunk + 1000))])
        # concurrency >= n: every element is in a handler before the storm.
        await all_started.wait()
        t0 = time.perf_counter()
        gate.set()
        # The scheduler has no hook for "retried": look every half millisecond.
        while scheduler.stats(NAME).retried < n:  # noqa: ASYNC110
            await anyio.sleep(0.0005)
        elapsed = time.perf_counter() - t0
        scheduler.stop()
    return {
        "rate": n / elapsed,
        "ms": elapsed * 1000,
        # The one-by-one store's reschedule_many is a loop of reschedule: a round trip each.
        "calls": calls["reschedule"] or calls["reschedule_many"],
    }


async def main_async(args: argparse.Namespace) -> None:
    server = RedisServer(None).start() if "redis" in args.stores else None
    tmp = tempfile.TemporaryDirectory()
    try:

        def make(kind: str, batched: bool) -> Callable[[], Awaitable[dict[str, float]]]:
            async def run() -> dict[str, float]:
                store: Store
                if kind == "redis":
                    assert server is not None
                    cls = RedisStore if batched else one_by_one(RedisStore)
                    store = cls.from_url(server.url, prefix=f"bench-{uuid.uuid4().hex[:8]}")
                elif kind == "sqlite":
                    cls = SQLiteStore if batched else one_by_one(SQLiteStore)
                    store = cls(Path(tmp.name) / f"{uuid.uuid4().hex[:8]}.db")
                else:
                    store = (MemoryStore if batched else one_by_one(MemoryStore))()
                return await storm(store, args.n, args.concurrency)

            return run

        rows: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {}
        for kind in args.stores:
            rows[f"{kind}: reschedule_many (coalesced)"] = make(kind, True)
            rows[f"{kind}: reschedule one by one (before)"] = make(kind, False)
        results: dict[str, list[dict[str, float]]] = {label: [] for label in rows}
        load_before = os.getloadavg()
        for r in range(args.repeat):
            order = list(rows) if r % 2 == 0 else list(reversed(rows))
            for label in order:
                results[label].append(await rows[label]())
        load_after = os.getloadavg()
        print(
            f"bench_retries.py, backend {args.backend}, Python {platform.python_version()}, "
            f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
            f"{args.n:,} handlers failing at once (concurrency {args.concurrency}), medians of {args.repeat}"
            + (f"; {server.kind}" if server is not None else "")
        )
        print()
        print("| store: retries filed by | failures/s | all retried in | round trips | ratio |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for kind in args.stores:
            base = statistics.median(x["rate"] for x in results[f"{kind}: reschedule one by one (before)"])
            for label in (f"{kind}: reschedule_many (coalesced)", f"{kind}: reschedule one by one (before)"):
                runs = results[label]
                rate = statistics.median(x["rate"] for x in runs)
                ms = statistics.median(x["ms"] for x in runs)
                calls = statistics.median(x["calls"] for x in runs)
                print(f"| {label} | {rate:,.0f} | {ms:,.1f} ms | {calls:,.0f} | {rate / base:.2f}x |")
    finally:
        if server is not None:
            server.cleanup()
        tmp.cleanup()


def main() -> int:
    # As a service would run: warnings and errors logged, the per-failure info lines dropped
    # (structlog's default prints each with its traceback, which would be what is measured).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=None, help="default: n")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", type=lambda s: s.split(","), default=["redis", "sqlite", "memory"])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args()
    args.concurrency = args.concurrency or args.n
    anyio.run(main_async, args, backend=args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
