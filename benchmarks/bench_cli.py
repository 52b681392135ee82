"""Benchmark the ``rehydrate`` command's start-up: whole processes, wall time, against a SQLite file.

Run from the repository root::

    python benchmarks/bench_cli.py            # 20 runs of each command
    python benchmarks/bench_cli.py --n 50
    python benchmarks/bench_cli.py --against /tmp/old   # and an older checkout, side by side

A shell script pays for a whole process per verb: the interpreter, the imports, the store's open and
one transaction. Each command runs ``--n`` times as ``python -m rehydrate VERB ... --store
sqlite:///<temp file>``, the commands taking turns (round robin, so a busy machine weighs on all of
them alike), beside two baselines in the same run:

* ``python -c pass``: the interpreter alone;
* ``python -c "import sqlite3, anyio"``: the floor, what any verb on SQLite must import anyway.

Bytecode caches are used (and written by the first run), as in an installed package: without
them each run would compile rehydrate's modules again. The table gives the median and p90 wall time of each and its ratio to the floor's median. The
target is a ``push`` under 100 ms (median) on an idle machine; on a loaded one, read the ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``command``: the CPU time is the child's user + system time."""
    cpu = _cpu()
    started = time.perf_counter()
    # ``python -m`` puts the working directory first on sys.path: run in the checkout measured.
    done = subprocess.run(command, env=env, capture_output=True, cwd=env["PYTHONPATH"], check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return elapsed, _cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="runs of each command (default 20)")
    parser.add_argument("--dir", help="where the temporary database goes (default: the system's temp dir)")
    parser.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="also measure the rehydrate of this source checkout (e.g. an older commit), in the same run",
    )
    args = parser.parse_args()
    python = sys.executable
    checkouts = {"": ROOT} | ({"against: ": Path(args.against).resolve()} if args.against else {})
    runs: dict[str, tuple[list[str], dict[str, str]]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for prefix, root in checkouts.items():
            env = {**os.environ, "PYTHONPATH": str(root)}  # also the working directory (see _time)
            env.pop("REHYDRATE_STORE", None)
            # As installed (pip compiles the modules): bytecode caches are used, written by the first run.
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            url = f"sqlite:///{Path(tmp) / f'bench{len(runs)}.db'}"
            cli = [python, "-m", "rehydrate"]
            # Elements for look and pull (one pulled per run) and one that is due, for stats and ttn.
            for id in ["kept", *(f"p{i}" for i in range(args.n))]:
                _time([*cli, "push", "jobs", "1", "--id", id, "--store", url], env)
            if not prefix:
                runs["python -c pass"] = ([python, "-c", "pass"], env)
                runs["floor: import sqlite3, anyio"] = ([python, "-c", "import sqlite3, anyio"], env)
                runs["anyio.run(sleep, 0)"] = (
                    [python, "-c", "import sqlite3, anyio; anyio.run(anyio.sleep, 0)"],
                    env,
                )
            for verb, rest in [
                ("push", ["jobs", '{"n": 1}', "--delay", "1h"]),
                ("look", ["jobs", "kept"]),
                ("pull", ["jobs", "{i}"]),
                ("ttn", ["jobs"]),
                ("stats", []),
            ]:
                runs[f"{prefix}rehydrate {verb}"] = ([*cli, verb, *rest, "--store", url], env)
        walls: dict[str, list[float]] = {label: [] for label in runs}
        cpus: dict[str, list[float]] = {label: [] for label in runs}
        for i in range(args.n):
            for label, (command, env) in runs.items():
                argv = [part.replace("{i}", f"p{i}") for part in command]
                wall, cpu = _time(argv, env)
                walls[label].append(wall)
                cpus[label].append(cpu)
    floor = "floor: import sqlite3, anyio"
    wall_floor = statistics.median(walls[floor])
    cpu_floor = statistics.median(cpus[floor])
    print(
        f"# rehydrate CLI start-up, {args.n} runs each, SQLite ({platform.python_version()}, {os.cpu_count()} CPUs)"
    )
    print()
    print("| command | wall median ms | wall p90 ms | wall / floor | CPU median ms | CPU / floor |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label in runs:
        wall, cpu = statistics.median(walls[label]), statistics.median(cpus[label])
        print(
            f"| {label} | {wall * 1000:.1f} | {_percentile(walls[label], 0.9) * 1000:.1f} | "
            f"{wall / wall_floor:.2f} | {cpu * 1000:.1f} | {cpu / cpu_floor:.2f} |"
        )
    print()
    print("CPU is the process's user + system time: what the verb costs, whatever else the machine runs.")


if __name__ == "__main__":
    main()
