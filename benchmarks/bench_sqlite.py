"""Benchmark SQLiteStore against MemoryStore, measured in the same run, through the async Store API.

Run from the repository root::

    python benchmarks/bench_sqlite.py                 # N = 20,000
    python benchmarks/bench_sqlite.py --n 5000 --backend trio
    python benchmarks/bench_sqlite.py --dir /mnt/disk  # where the temporary database files go

Phases (each on a fresh store and, for SQLite, a fresh file; elements are small ints, JSON for
SQLite; the fill before a phase is not timed):

* push: N single ``push`` calls (one transaction and, with ``synchronous=FULL``, one fsync each).
* push_many: N elements in ``push_many`` batches of ``--batch``.
* pull: N single ``pull`` calls of waiting elements.
* poll: N due elements taken by ``poll(limit=--batch)`` until empty (elements/s).
* claim+ack: N due elements, ``claim(limit=--batch)`` then one ``ack`` batch, until empty (elements/s).
* claim+ack x1: ``claim(limit=1)`` then ``ack`` of that one claim, one element at a time.

Loops that run longer than ``--cap`` seconds are stopped; their rate is taken over the elements
they handled and marked ``*``. SQLite is measured with ``synchronous=FULL`` (the default: every
commit is fsynced) and ``NORMAL`` (no fsync per commit in WAL mode; loses the last commits on power
loss, not on a process crash). The ratio columns are SQLite's rate over the memory store's.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rehydrate.abc import Store  # noqa: E402
from rehydrate.stores import MemoryStore  # noqa: E402
from rehydrate.stores._sqlite import SQLiteStore  # noqa: E402

NAME = "bench"
perf = time.perf_counter

#: A phase: given an opened store, N, the batch size and the cap, return (operations, seconds, capped).
Phase = Callable[[Store, int, int, float], Awaitable[tuple[int, float, bool]]]


async def fill(store: Store, n: int, batch: int, ttl: float) -> None:
    for start in range(0, n, batch):
        await store.push_many(NAME, [(i, ttl, f"e{i}") for i in range(start, min(n, start + batch))])


async def phase_push(store: Store, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    t0 = perf()
    for i in range(n):
        await store.push(NAME, i, ttl=3600, id=f"e{i}")
        if i & 63 == 63 and perf() - t0 > cap:
            return i + 1, perf() - t0, True
    return n, perf() - t0, False


async def phase_push_many(store: Store, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    t0 = perf()
    for start in range(0, n, batch):
        await store.push_many(NAME, [(i, 3600, f"e{i}") for i in range(start, min(n, start + batch))])
        if perf() - t0 > cap:
            return min(n, start + batch), perf() - t0, True
    return n, perf() - t0, False


async def phase_pull(store: Store, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    await fill(store, n, batch, 3600)
    t0 = perf()
    for i in range(n):
        await store.pull(NAME, f"e{i}")
        if i & 63 == 63 and perf() - t0 > cap:
            return i + 1, perf() - t0, True
    return n, perf() - t0, False


async def phase_poll(store: Store, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    await fill(store, n, batch, 0)
    done = 0
    t0 = perf()
    while got := await store.poll(NAME, limit=batch):
        done += len(got)
        if perf() - t0 > cap:
            return done, perf() - t0, True
    return done, perf() - t0, False


async def _claim_ack(store: Store, n: int, batch: int, cap: float, limit: int) -> tuple[int, float, bool]:
    await fill(store, n, batch, 0)
    done = 0
    t0 = perf()
    while claims := await store.claim(NAME, lease=600, limit=limit):
        acked = await store.ack(NAME, [(c.id, c.token) for c in claims])
        done += sum(acked)
        if perf() - t0 > cap:
            return done, perf() - t0, True
    return done, perf() - t0, False


async def phase_claim_ack(store: Store, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    return await _claim_ack(store, n, batch, cap, batch)


async def phase_claim_ack_single(store: Store, n: int, batch: int, cap: float) -> tuple[int, float, bool]:
    return await _claim_ack(store, n, batch, cap, 1)


PHASES: dict[str, Phase] = {
    "push": phase_push,
    "push_many": phase_push_many,
    "pull": phase_pull,
    "poll": phase_poll,
    "claim+ack": phase_claim_ack,
    "claim+ack x1": phase_claim_ack_single,
}


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, dict[str, tuple[float, bool]]]:
    counter = 0

    def make(kind: str) -> Store:
        nonlocal counter
        counter += 1
        if kind == "memory":
            return MemoryStore()
        return SQLiteStore(workdir / f"bench{counter}.db", synchronous=kind)

    results: dict[str, dict[str, tuple[float, bool]]] = {}
    for kind in ("memory", "FULL", "NORMAL"):
        results[kind] = {}
        for phase, fn in PHASES.items():
            async with make(kind) as store:
                ops, seconds, capped = await fn(store, args.n, args.batch, args.cap)
            results[kind][phase] = (ops / seconds if seconds > 0 else float("inf"), capped)
            print(f"  {kind:>6} {phase:<13} {ops:>7} ops in {seconds:6.2f} s", file=sys.stderr, flush=True)
    return results


def fmt_rate(rate: float, capped: bool) -> str:
    return f"{rate:,.0f}{'*' if capped else ' '}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000, help="elements per phase (default 20000)")
    parser.add_argument("--batch", type=int, default=1000, help="batch size of push_many, poll, claim")
    parser.add_argument("--cap", type=float, default=5.0, help="seconds after which a phase is cut short")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--dir", default=None, help="directory for the temporary database files")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rehydrate-bench-", dir=args.dir) as tmp:
        results = anyio.run(run, args, Path(tmp), backend=args.backend)
        where = tmp

    print()
    print(
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {args.backend}, "
        f"N={args.n:,}, batch={args.batch}, files in {os.path.dirname(where)}"
    )
    print()
    header = (
        "phase",
        "memory ops/s",
        "SQLite FULL ops/s",
        "FULL / memory",
        "SQLite NORMAL ops/s",
        "NORMAL / memory",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for phase in PHASES:
        memory, memory_capped = results["memory"][phase]
        row = [phase, fmt_rate(memory, memory_capped)]
        for kind in ("FULL", "NORMAL"):
            rate, capped = results[kind][phase]
            row += [fmt_rate(rate, capped), f"{rate / memory:.3f}"]
        print("| " + " | ".join(row) + " |")
    print()
    print("* cut short after --cap seconds; the rate is over the elements handled.")


if __name__ == "__main__":
    main()
