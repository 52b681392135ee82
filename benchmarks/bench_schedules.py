"""Recurring schedules against one-shot deliveries, on the same store in the same run.

    python benchmarks/bench_schedules.py [--stores memory,sqlite,redis] [--n 100000]
                                         [--period 60] [--seconds 180] [--quick] [--write-docs]

For each store, one process with one ``Scheduler`` (a no-op async handler, concurrency 500,
claim batch 200):

* **create**: ``--n`` per-entity schedules ``Every(period)``, their starts spread evenly over one
  period, filed through ``Scheduler.schedule_many`` (a ``push_many`` per 1,000).
* **fire**: the schedules run for ``--seconds`` (the issue asks for 3 minutes; ``--quick`` runs
  20 s): occurrences per second (offered: n / period) and lateness p50/p99 (the store's wall
  clock in the handler minus the occurrence's nominal time).
* **one-shot, same load**: the same number of one-shot elements due evenly over the same
  seconds, at the same rate, from an instant after all of them are filed: lateness p50/p99.
* **burst**: ``min(n, 20000)`` schedules all due at the same instant, against as many one-shot
  elements due at one instant: occurrences/s and deliveries/s from that instant to the last one
  (each occurrence also computes and files its next one in the same store call as its ack);
  ``--burst-rounds`` rounds (3 by default), taking turns, medians. Beside them as many cron
  schedules (``* * * * *``) due at the same minute: a cron minute's crowd, whose occurrences
  each ask the cron for the next one.

The aim (issue #13): occurrences/s >= 0.8x one-shot deliveries/s and a p99 lateness within 5 ms
of the one-shot path.

* **APScheduler 4** side by side (``--peers memory,sqlite --peer-n 10000,100000``): its
  ``IntervalTrigger`` schedules, same period and firing window, run by
  ``peers/peer_apscheduler_schedules.py`` in the virtual environment ``peers/run.py`` installs
  (APScheduler is not a dependency of rehydrate). A run that cannot file its schedules within
  ``--peer-create-limit`` seconds says how far it got.

The full run (the default: 100,000 schedules, ``Every(60 s)``, 3 minutes of firing) takes about
7 minutes a store plus the APScheduler runs; ``--quick`` is a smoke test (5,000, ``Every(10 s)``,
20 s). ``--write-docs`` also writes the table, the bursts round by round, the verdicts, the
command line and the run's conditions into ``docs/benchmarks.md``, between its
``<!-- table: schedules -->`` markers (``doctables.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rehydrate import Cron, Every, Scheduler, current_delivery, open_store
from rehydrate._clock import wall
from rehydrate.abc import Store

HERE = Path(__file__).resolve().parent
#: The aims of issue #13: occurrences/s at least this times one-shot deliveries/s (burst), and a
#: p99 lateness at most this many ms above the one-shot path's at the same rate.
RATIO_AIM = 0.8
P99_AIM_MS = 5.0


def pct(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000


class Recorder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.late: list[float] = []
        self.stamps: list[float] = []
        self.target: int | None = None
        self.reached = anyio.Event()
        #: The last scheduled_for seen and its Unix time: the occurrences of a burst share one
        #: datetime, and an aware datetime's timestamp() would weigh on the occurrences' side of
        #: the comparison, where a one-shot's lateness is a subtraction.
        self._when: datetime | None = None
        self._when_ts = 0.0

    async def __call__(self, element: Any) -> None:
        d = current_delivery()
        now = wall(self.store.clock)
        if d.scheduled_for is not None:
            if d.scheduled_for is not self._when:
                self._when, self._when_ts = d.scheduled_for, d.scheduled_for.timestamp()
            self.late.append(now - self._when_ts)
        else:
            self.late.append(self.store.clock() - d.due)
        self.stamps.append(now)
        if self.target is not None and len(self.stamps) >= self.target:
            self.reached.set()


async def create(scheduler: Scheduler, name: str, n: int, period: float, first: float) -> float:
    """File n schedules Every(period), starts spread over one period from ``first``; seconds taken."""
    started = time.perf_counter()
    await scheduler.schedule_many(
        name,
        (
            (f"u{i}", Every(period, start=datetime.fromtimestamp(first + period * i / n, UTC)), {"user": i})
            for i in range(n)
        ),
    )
    return time.perf_counter() - started


async def _create_fixed(scheduler: Scheduler, name: str, n: int, start: datetime) -> None:
    every = Every(3600, start=start)
    await scheduler.schedule_many(name, ((f"u{i}", every, {"user": i}) for i in range(n)))


BURSTS = ("burst-o", "burst-s", "burst-c")


async def run_store(url: str, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    store = open_store(url)
    scheduler = Scheduler(store, grace=1)
    names = ["sched", "once"] + [f"{kind}{r}" for r in range(args.burst_rounds) for kind in BURSTS]
    recorders = {name: Recorder(store) for name in names}
    for name, recorder in recorders.items():
        scheduler.handler(name, concurrency=500, batch=200, lease=60)(recorder)
    async with store, scheduler:
        now = wall(store.clock)
        lead = max(5.0, args.n / 20000)  # time to file them before the first is due
        out["create_s"] = await create(scheduler, "sched", args.n, args.period, now + lead)
        out["create_per_s"] = args.n / out["create_s"]
        began = wall(store.clock)
        if began < now + lead:
            await anyio.sleep(now + lead - began)
        window_start = wall(store.clock)
        await anyio.sleep(args.seconds)
        window_end = wall(store.clock)
        s = recorders["sched"]
        in_window = [i for i, t in enumerate(s.stamps) if window_start <= t < window_end]
        out["sched_rate"] = len(in_window) / (window_end - window_start)
        late = [s.late[i] for i in in_window]
        out["sched_p50"], out["sched_p99"] = pct(late, 0.5), pct(late, 0.99)
        # Stop the schedules (so they do not load the one-shot phase), then one-shot at the same rate.
        await store_clear(store, "sched")
        # Due from one instant after every one is filed: filing 300,000 takes seconds, and the
        # elements due meanwhile would wait for the pushes (their lateness would measure those).
        count = int(args.n / args.period * args.seconds)
        first_due = wall(store.clock) + max(3.0, 1.5 * count / out["create_per_s"] + 1.0)
        for chunk in range(0, count, 5000):
            now = wall(store.clock)
            await store.push_many(
                "once",
                [
                    ({"i": i}, first_due + args.seconds * i / count - now, f"o{i}")
                    for i in range(chunk, min(count, chunk + 5000))
                ],
            )
        await anyio.sleep(first_due + args.seconds + 2.0 - wall(store.clock))
        o = recorders["once"]
        out["once_rate"] = len(o.stamps) / args.seconds
        out["once_p50"], out["once_p99"] = pct(o.late, 0.5), pct(o.late, 0.99)
        # Burst: as many schedules as one-shot elements, all due at one instant; in turn, a
        # fresh dehydrator each round.
        burst = min(args.n, 20000)
        rates: dict[str, list[float]] = {kind: [] for kind in BURSTS}
        for round_ in range(args.burst_rounds):
            for kind in BURSTS:
                name = f"{kind}{round_}"
                recorder = recorders[name]
                recorder.target = burst
                # Due once everything is filed (creating schedules runs at the rate measured above).
                instant = wall(store.clock) + max(3.0, 1.5 * burst / out["create_per_s"] + 1.0)
                if kind == "burst-s":
                    # One start for all: every one of them is due at ``instant``.
                    await _create_fixed(scheduler, name, burst, datetime.fromtimestamp(instant, UTC))
                elif kind == "burst-c":
                    instant = math.ceil(instant / 60) * 60.0  # the next whole minute after it
                    every_minute = Cron("* * * * *")
                    await scheduler.schedule_many(
                        name, ((f"u{i}", every_minute, {"user": i}) for i in range(burst))
                    )
                else:
                    for chunk in range(0, burst, 5000):
                        ttl = max(0.0, instant - wall(store.clock))
                        await store.push_many(
                            name, [({"i": i}, ttl, f"b{i}") for i in range(chunk, min(burst, chunk + 5000))]
                        )
                with anyio.move_on_after(instant - wall(store.clock) + 120):
                    await recorder.reached.wait()
                if len(recorder.stamps) < burst:
                    print(f"{name}: only {len(recorder.stamps)} of {burst} in time", file=sys.stderr)
                first = min(recorder.stamps[:burst])
                rates[kind].append(burst / max(1e-9, max(recorder.stamps[:burst]) - min(instant, first)))
                if kind != "burst-o":
                    await store_clear(store, name)  # (their next occurrences: not to fire later)
        for kind, values in rates.items():
            out[f"{kind}_rate"] = statistics.median(values)
            out[f"{kind}_rates"] = values
        scheduler.stop()
    return out


async def store_clear(store: Store, name: str) -> None:
    while ids := await store.ids(name, limit=5000):
        for id in ids:
            await store.pull(name, id)


PEERS = HERE / "peers"


def run_peer(store: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """APScheduler 4's schedules in its own virtual environment (made by ``peers/run.py``'s
    ``ensure_venv``): one subprocess, its JSON line."""
    sys.path.insert(0, str(PEERS))
    from run import ensure_venv  # type: ignore[import-not-found]

    python = ensure_venv("apscheduler", False)
    argv = [str(python), str(PEERS / "peer_apscheduler_schedules.py"), "--store", store, "--n", str(n)]
    argv += ["--period", str(args.period), "--seconds", str(args.seconds)]
    argv += ["--create-limit", str(args.peer_create_limit)]
    limit = max(5.0, n / 2000) + args.seconds + args.peer_create_limit + 60
    try:
        done = subprocess.run(argv, cwd=PEERS, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {limit:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stores", default="memory,sqlite,redis")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--period", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument(
        "--burst-rounds", type=int, default=3, help="rounds of the burst comparison, taking turns (medians)"
    )
    parser.add_argument(
        "--peers",
        default="memory,sqlite",
        help="APScheduler 4 data stores to run side by side ('' for none)",
    )
    parser.add_argument("--peer-n", default="10000,100000", help="APScheduler schedule counts")
    parser.add_argument(
        "--peer-create-limit",
        type=float,
        default=600.0,
        help="seconds an APScheduler run may spend filing its schedules before it is given up",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="n=5000, period=10 s, 20 s of firing; APScheduler at 5,000",
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="also write the table into docs/benchmarks.md (between <!-- table: schedules --> markers)",
    )
    args = parser.parse_args()
    if args.write_docs and args.quick:
        parser.error("--write-docs with --quick: a smoke test's figures do not belong in the docs")
    if args.write_docs:
        from doctables import check_table

        check_table("schedules")
    load_before = os.getloadavg()[0]
    # The library never configures logging; this script keeps its info lines (a schedule pulled
    # while an occurrence ran, when the fire phase is cleared) off the table.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.quick:
        args.n, args.period, args.seconds, args.peer_n = 5000, 10.0, 20.0, "5000"
    print(
        f"# {platform.python_version()} {platform.machine()}, Every({args.period:g} s), "
        f"{args.seconds:g} s of firing; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; "
        f"load average at start {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    results: dict[str, dict[str, Any]] = {}
    for kind in args.stores.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            if kind == "memory":
                results[kind] = anyio.run(run_store, "memory://", args)
            elif kind == "sqlite":
                results[kind] = anyio.run(run_store, f"sqlite:///{tmp}/bench.db", args)
            elif kind == "redis":
                from tests.redis_server import RedisServer

                with RedisServer() as server:
                    results[kind] = anyio.run(run_store, server.url, args)
            else:
                raise SystemExit(f"unknown store {kind!r}")
        print(f"{kind}: done", file=sys.stderr)
    peers: dict[str, dict[str, Any]] = {}
    for store in filter(None, args.peers.split(",")):
        for n in (int(x) for x in args.peer_n.split(",")):
            peers[f"APScheduler {store} {n:,}"] = run_peer(store, n, args)
            print(f"APScheduler {store} {n}: done", file=sys.stderr)
    print(f"# load average at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    rows = [
        "| system | schedules | create/s | fire occ/s (offered) | p50 late | p99 late | "
        "one-shot p50 / p99, same rate | p99 diff | burst occ/s | burst one-shot/s | ratio | "
        "cron burst occ/s | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(rows))
    notes: list[str] = []
    offered = args.n / args.period
    for kind, r in results.items():
        rows.append(
            f"| rehydrate {kind} | {args.n:,} | {r['create_per_s']:,.0f} | "
            f"{r['sched_rate']:,.0f} ({offered:,.0f}) | {r['sched_p50']:.1f} ms | {r['sched_p99']:.1f} ms | "
            f"{r['once_p50']:.1f} / {r['once_p99']:.1f} ms | {r['sched_p99'] - r['once_p99']:+.1f} ms | "
            f"{r['burst-s_rate']:,.0f} | {r['burst-o_rate']:,.0f} | "
            f"{r['burst-s_rate'] / r['burst-o_rate']:.2f} | {r['burst-c_rate']:,.0f} | "
            f"{r['burst-c_rate'] / r['burst-o_rate']:.2f} |"
        )
        print(rows[-1])
    print()
    for kind, r in results.items():
        rounds = ", ".join(
            f"{o:,.0f} / {s_:,.0f} / {c:,.0f}"
            for o, s_, c in zip(r["burst-o_rates"], r["burst-s_rates"], r["burst-c_rates"], strict=True)
        )
        notes.append(f"* {kind} bursts, one-shot / Every / cron per second, round by round: {rounds}")
        print(notes[-1])
    # The verdict per store against both aims of issue #13, so no reader has to work it out.
    print()
    for kind, r in results.items():
        ratio = r["burst-s_rate"] / r["burst-o_rate"]
        diff = r["sched_p99"] - r["once_p99"]
        notes.append(
            f"* {kind}: occurrences/s {ratio:.2f}x one-shot (aim >= {RATIO_AIM}x): "
            f"{'met' if ratio >= RATIO_AIM else 'NOT met'}; p99 lateness {diff:+.1f} ms against "
            f"one-shot (aim <= +{P99_AIM_MS:g} ms): {'met' if diff <= P99_AIM_MS else 'NOT met'}"
        )
        print(notes[-1])
    for label, p in peers.items():
        if "error" in p:
            rows.append(f"| {label} | | | {p['error']} | | | | | | | |")
            print(rows[-1])
            continue
        n = int(label.rsplit(" ", 1)[1].replace(",", ""))
        rows.append(
            f"| {label.rsplit(' ', 1)[0]} | {n:,} | {p['create_per_s']:,.0f} | "
            f"{p['sched_rate']:,.0f} ({n / args.period:,.0f}) | {p['sched_p50']:.1f} ms | "
            f"{p['sched_p99']:.1f} ms | | | | | |"
        )
        print(rows[-1])
    if args.write_docs:
        from doctables import write_table

        write_table("schedules", rows, ["\n".join(notes)] if notes else [], load_before=load_before)


if __name__ == "__main__":
    main()
