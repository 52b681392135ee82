"""How fast can a queue-map push be next to heapq's? The filing step alone, measured on its own.

Run from the repository root::

    python benchmarks/bench_push_floor.py            # N = 1,000,000
    python benchmarks/bench_push_floor.py --quick    # N = 100,000

``bench_core.py`` times whole pushes: argument checks, the clock, the id index, a node, and the
filing of that node. Everything but the filing is the same work in the Dehydrator and in the heapq
baseline. This script times the filing step by itself, on the same nodes and due times as
``bench_core.py`` (element ``i`` at ``i`` µs with TTL ``1 + (i % M) * 0.001`` s), in one process:

* heap: ``heappush(heap, node)``, the baseline's filing;
* queue-map: what the Dehydrator does, written out: look the TTL's queue up in a dict and append
  the node to it; or make a queue for a new TTL; or, with no room for one (past 1,024 TTLs),
  heappush the node loose, and the next 63 nodes too without looking their TTLs up.

Each loop's cost less that of the same loop with an empty body, per element, median of
``--repeat`` runs with ``gc`` disabled. Then whole pushes of both, as ``bench_core.py`` times them.
The last column is the ceiling: the ratio a Dehydrator push would reach if it did exactly the
baseline's work with the queue-map's filing in place of heappush, and nothing else.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from collections.abc import Callable
from heapq import heappush
from pathlib import Path
from time import perf_counter as perf
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_core import ARRIVAL_STEP, TTL_BASE, TTL_STEP, HeapqBaseline, SetClock, Workload, fill

from rehydrate import Dehydrator
from rehydrate._core._dehydrator import _QUEUES_MAX, _SKIP, _Queue

MS = [1, 16, 1_000, 100_000, 1_000_000]


def heap_filing(nodes: list[list[Any]], ttls: list[float]) -> float:
    heap: list[list[Any]] = []
    t0 = perf()
    for _seq, node, _ttl in zip(range(len(nodes)), nodes, ttls, strict=True):
        heappush(heap, node)
    return perf() - t0


def queue_map_filing(nodes: list[list[Any]], ttls: list[float]) -> float:
    queues: dict[float, _Queue] = {}
    heads: list[list[Any]] = []
    loose_until = 0
    t0 = perf()
    for seq, node, ttl in zip(range(len(nodes)), nodes, ttls, strict=True):
        if seq < loose_until:
            heappush(heads, node)
            continue
        queue = queues.get(ttl)
        if queue is not None:
            queue.items.append(node)
        elif len(queues) >= _QUEUES_MAX:
            loose_until = seq + 1 + _SKIP
            heappush(heads, node)
        else:
            queue = queues[ttl] = _Queue(ttl, False)
            queue.items.append(node)
            heappush(heads, [node[0], seq, queue])
    return perf() - t0


def empty_loop(nodes: list[list[Any]], ttls: list[float]) -> float:
    t0 = perf()
    for _seq, _node, _ttl in zip(range(len(nodes)), nodes, ttls, strict=True):
        pass
    return perf() - t0


def whole_pushes(impl: Callable[..., Any], w: Workload) -> float:
    clock = SetClock()
    obj = impl(clock=clock)
    t0 = perf()
    fill(obj, clock, w)
    return perf() - t0


def median_ns(runs: list[float], n: int) -> float:
    return statistics.median(runs) / n * 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="elements per run (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="N = 100,000")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure, median taken (default 5)")
    parser.add_argument(
        "--ttls", help="comma-separated M values (default: those of 1, 16, 1000, 100000, 1000000 up to N)"
    )
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else args.n
    try:
        ms = [int(m) for m in args.ttls.split(",")] if args.ttls else [m for m in MS if m <= n]
    except ValueError:
        parser.error(f"--ttls: comma-separated integers, not {args.ttls!r}")
    if n < 1 or args.repeat < 1 or any(not 1 <= m <= n for m in ms):
        parser.error("--n and --repeat must be >= 1, and every M between 1 and N")

    w = Workload(n)
    print(f"push filing step, N = {n:,}, median of {args.repeat}, gc disabled; ns per element")
    header = (
        "M",
        "heappush",
        "queue-map filing",
        "filing ratio",
        "heapq push",
        "Dehydrator push",
        "push ratio",
        "ceiling",
    )
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    gc.disable()
    try:
        for m in ms:
            w.set_m(m, TTL_BASE, TTL_STEP)
            nodes = [
                [i * ARRIVAL_STEP + ttl, i, id, element, 0]
                for i, (ttl, id, element) in enumerate(zip(w.ttls, w.ids, w.elements, strict=True))
            ]
            runs: dict[str, list[float]] = {k: [] for k in ("empty", "heap", "qmap", "base", "dehy")}
            for _ in range(args.repeat):
                for key, step in (("empty", empty_loop), ("heap", heap_filing), ("qmap", queue_map_filing)):
                    gc.collect()
                    runs[key].append(step(nodes, w.ttls))
                for key, impl in (("base", HeapqBaseline), ("dehy", Dehydrator)):
                    gc.collect()
                    runs[key].append(whole_pushes(impl, w))
            empty = median_ns(runs["empty"], n)
            heap = median_ns(runs["heap"], n) - empty
            qmap = median_ns(runs["qmap"], n) - empty
            base = median_ns(runs["base"], n)
            dehy = median_ns(runs["dehy"], n)
            ceiling = base / (base - heap + qmap)
            print(
                f"{m:,} | {heap:.1f} | {qmap:.1f} | {heap / qmap:.2f}x | {base:.0f} | {dehy:.0f} | "
                f"{base / dehy:.2f}x | {ceiling:.2f}x",
                flush=True,
            )
            del nodes
    finally:
        gc.enable()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
