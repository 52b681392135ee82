"""Instructions per element: a schedule's occurrence against a one-shot delivery, counted by callgrind.

    python benchmarks/bench_instructions.py [--stores memory,sqlite] [--n 6000] [--base 1000]
        [--backend asyncio|trio] [--write-docs]

``--write-docs`` also writes the table, the command line and the run's conditions into
``docs/benchmarks.md``, between its ``<!-- table: instructions -->`` markers
(``instructions-trio`` with ``--backend trio``; see ``doctables.py``).

Issue #13 asks occurrences/s to reach 0.8x one-shot deliveries/s. On a shared, noisy machine the
clock cannot settle a few percent either way (a burst's rate moves by 30% between rounds), so
this counts the instructions instead, which callgrind gives the same run after run whatever else
the machine does. Per store, four processes under ``valgrind --tool=callgrind``, each with a
``FakeClock`` (no real waiting):

* ``--n`` one-shot elements due at one instant, delivered to a no-op async handler (concurrency
  500, claim batch 200, as ``bench_schedules.py``), and the same filing with nothing delivered;
* the same with ``--n`` schedules ``Every(1 h)`` due at that instant (each occurrence plans,
  runs and files its next one).

Each is run again at ``--base`` elements, and the per-element figure is the difference of the
differences: ((delivered - filed only) at n - (delivered - filed only) at base) / (n - base), so
start-up, filing and shutdown cancel out. Python's hash seed is fixed (``PYTHONHASHSEED=0``).
Needs ``valgrind`` on the PATH; both stores take a few minutes on a small machine.

The one-shot column is also issue #18's measure of a delivery's own cost: a burst's last
element waits for every delivery before it, so its lateness moves with this figure. ``--backend
trio`` counts it on trio, where that issue's bursts are furthest from their floor.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from doctables import check_table, write_table  # noqa: E402


def child(kind: str, n: int, store_url: str, deliver: bool, backend: str = "asyncio") -> None:
    """One burst (or only its filing), in this process: what callgrind counts."""
    sys.path.insert(0, str(ROOT))
    import anyio

    from rehydrate import Every, Scheduler, current_delivery, open_store
    from rehydrate.testing import FakeClock

    start = datetime(2026, 1, 1, tzinfo=UTC)

    async def main() -> None:
        clock = FakeClock(start)
        store = open_store(store_url, clock=clock)
        scheduler = Scheduler(store, grace=1)
        done = anyio.Event()
        count = 0

        @scheduler.handler("h", concurrency=500, batch=200, lease=60)
        async def handler(element: Any) -> None:
            nonlocal count
            current_delivery()
            count += 1
            if count >= n:
                done.set()

        async with store, scheduler:
            if kind == "occurrence":
                every = Every(3600, start=start + timedelta(seconds=10))
                await scheduler.schedule_many("h", ((f"u{i}", every, {"user": i}) for i in range(n)))
            else:
                await store.push_many("h", [({"i": i}, 10.0, f"b{i}") for i in range(n)])
            await anyio.sleep(0.05)
            if deliver:
                clock.advance(10)
                await done.wait()
                await anyio.sleep(0.05)
            scheduler.stop()

    anyio.run(main, backend=backend)


def count(kind: str, n: int, store: str, deliver: bool, backend: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        url = "memory://" if store == "memory" else f"sqlite:///{tmp}/bench.db"
        argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
        argv += [__file__, "--child", kind, str(n), url, "deliver" if deliver else "file", backend]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({' '.join(argv[4:])}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_element(kind: str, store: str, n: int, base: int, backend: str) -> float:
    runs = [(size, deliver) for size in (n, base) for deliver in (True, False)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counted = list(pool.map(lambda run: count(kind, run[0], store, run[1], backend), runs))
    big, big_filed, small, small_filed = counted
    return ((big - big_filed) - (small - small_filed)) / (n - base)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, n, url, mode, backend = sys.argv[2:7]
        child(kind, int(n), url, mode == "deliver", backend)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="memory,sqlite")
    parser.add_argument("--n", type=int, default=6000)
    parser.add_argument("--base", type=int, default=1000)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="also write the table into docs/benchmarks.md (between <!-- table: instructions --> markers)",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (Debian: apt-get install valgrind)")
    if not 0 < args.base < args.n:
        raise SystemExit("--base must be positive and less than --n")
    # One table per backend: a trio count never overwrites the asyncio one.
    table_name = "instructions" if args.backend == "asyncio" else f"instructions-{args.backend}"
    if args.write_docs:
        check_table(table_name)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    for store in stores:
        if store not in ("memory", "sqlite"):
            raise SystemExit(f"unknown store {store!r}: memory or sqlite (Redis's work is in its server)")
    load_before = os.getloadavg()[0]
    print(
        f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, n = {args.n}, base = {args.base}, {args.backend}, "
        f"Python {sys.version.split()[0]}"
    )
    rows = [
        f"| store ({args.backend}) | one-shot delivery | occurrence | one-shot / occurrence (aim >= 0.8) |",
        "| --- | ---: | ---: | ---: |",
    ]
    print("\n".join(rows))
    for store in stores:
        once = per_element("once", store, args.n, args.base, args.backend)
        occurrence = per_element("occurrence", store, args.n, args.base, args.backend)
        rows.append(f"| {store} | {once:,.0f} | {occurrence:,.0f} | {once / occurrence:.3f} |")
        print(rows[-1], flush=True)
    if args.write_docs:
        write_table(table_name, rows, load_before=load_before)


if __name__ == "__main__":
    main()
