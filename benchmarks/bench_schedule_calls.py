"""What changing a schedule costs a caller: store round trips per call, on each store.

    python benchmarks/bench_schedule_calls.py [--n 1000] [--stores memory,sqlite,redis,postgres]

For each store, ``--n`` schedules (``Every(1 h)``, none of them running) are filed with
``schedule_many``, then each is changed in turn, one call at a time: ``schedule()`` with a new
element, ``pause``, ``resume``, ``unschedule``. Beside them, in the same run on the same store,
the least one call can cost: ``Store.look`` of the same ids, one round trip each (the floor). The
table gives the median time per call and its ratio to the floor. Each call makes two store calls
(the read, then the change decided on it, the check that no occurrence runs included): on Redis
the ratio is about 2; on SQLite and PostgreSQL the write also commits (an fsync), which costs
more than a read.

Redis: a throwaway server (``tests/redis_server.py``); PostgreSQL: a throwaway cluster
(``tests/pg_server.py``), skipped with one line where its binaries are not installed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rehydrate import Every, Scheduler  # noqa: E402

CALLS = ("look (the floor)", "schedule(), new element", "pause", "resume", "unschedule")


async def per_call(n: int, call: Callable[[int], Awaitable[Any]]) -> float:
    """Median seconds of ``call(i)`` for i in range(n), one at a time."""
    times = []
    for i in range(n):
        start = time.perf_counter()
        await call(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def measure(url: str, n: int) -> dict[str, float]:
    scheduler = Scheduler(url)
    every = Every(3600)
    async with scheduler:  # (no handler: nothing runs, as when another process serves them)
        await scheduler.schedule_many("s", [(f"u{i}", every, {"v": 0}) for i in range(n)])
        store = scheduler.store
        return {
            CALLS[0]: await per_call(n, lambda i: store.look("s", f"u{i}")),
            CALLS[1]: await per_call(
                n, lambda i: scheduler.schedule("s", every, id=f"u{i}", element={"v": 1})
            ),
            CALLS[2]: await per_call(n, lambda i: scheduler.pause("s", f"u{i}")),
            CALLS[3]: await per_call(n, lambda i: scheduler.resume("s", f"u{i}")),
            CALLS[4]: await per_call(n, lambda i: scheduler.unschedule("s", f"u{i}")),
        }


@contextmanager
def store_urls(stores: list[str]) -> Iterator[list[tuple[str, str]]]:
    with ExitStack() as stack:
        urls = []
        for store in stores:
            if store == "memory":
                urls.append((store, "memory://"))
            elif store == "sqlite":
                tmp = stack.enter_context(tempfile.TemporaryDirectory())
                urls.append((store, f"sqlite:///{tmp}/calls.db"))
            elif store == "redis":
                from tests.redis_server import RedisServer

                urls.append((store, stack.enter_context(RedisServer()).url))
            elif store == "postgres":
                from tests.pg_server import SKIP_REASON, PostgresServer, pg_bin_dir

                if pg_bin_dir() is None:
                    print(f"postgres: skipped, {SKIP_REASON}")
                    continue
                urls.append((store, stack.enter_context(PostgresServer(fsync=True)).url))
            else:
                raise SystemExit(f"unknown store {store!r}")
        yield urls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--stores", default="memory,sqlite,redis,postgres")
    args = parser.parse_args()
    print(f"schedule calls: {args.n} schedules, one call at a time; load average {os.getloadavg()[0]:.2f}")
    print()
    print("| store | call | median per call | against the floor |")
    print("| --- | --- | ---: | ---: |")
    with store_urls(args.stores.split(",")) as urls:
        for store, url in urls:
            figures = anyio.run(measure, url, args.n)
            floor = figures[CALLS[0]]
            for call in CALLS:
                ratio = "" if call == CALLS[0] else f"{figures[call] / floor:.2f}x"
                print(f"| {store} | {call} | {figures[call] * 1e6:,.0f} µs | {ratio} |")
    print()
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
