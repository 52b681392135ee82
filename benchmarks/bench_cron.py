"""cronsim against croniter: why rehydrate walks cron expressions with cronsim.

    .venv/bin/python benchmarks/bench_cron.py [--number 2000] [--repeat 7]

croniter is not a dependency of rehydrate: this installs it, with the project's cronsim, into a
virtual environment of its own (``peers/requirements/cron.txt``, through ``peers/run.py``'s
``ensure_venv``, under ``benchmarks/peers/.venvs/cron``), and runs ``peers/peer_cron.py`` there,
so both libraries are measured in the same interpreter. Then, in this interpreter, it times
rehydrate's own ``Cron.after`` (cronsim plus the daylight-saving rule's checks), which is what
filing a schedule's next occurrence costs.

Two things are compared:

* **cost**: building an iterator at an aware start (Europe/Paris) and taking one occurrence, the
  median per call over ``--repeat`` rounds of ``--number`` calls, for three expressions;
* **correctness**: the runs of ``30 2 * * *`` on Paris's fall-back day (02:30 happens twice;
  rehydrate's rule runs it once, at the first).

It prints one Markdown table with the date, the command, the versions and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
sys.path.insert(0, str(HERE.parent))

from rehydrate import Cron  # noqa: E402

TZ = "Europe/Paris"


def rehydrate_timing(expression: str, number: int, repeat: int) -> float:
    """Median µs per ``Cron(expression, tz=TZ).after(ts)`` (the trigger built once, as a stored
    schedule's is: ``trigger_from_dict`` caches it)."""
    cron = Cron(expression, tz=TZ)
    start = datetime(2026, 1, 5, 11, 0, 30, tzinfo=UTC).timestamp()
    starts = [start + 60 * i for i in range(number)]
    rounds = []
    for _ in range(repeat):
        began = time.perf_counter()
        for ts in starts:
            cron.after(ts)
        rounds.append((time.perf_counter() - began) / number * 1e6)
    return statistics.median(rounds)


def rehydrate_fall_back(expression: str) -> list[str]:
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(TZ)
    cron = Cron(expression, tz=TZ)
    t = datetime(2026, 10, 25, tzinfo=zone).timestamp() - 1
    end = (datetime(2026, 10, 25, tzinfo=zone) + timedelta(days=1)).timestamp()
    out = []
    while (t := cron.after(t)) < end:
        out.append(datetime.fromtimestamp(t, zone).strftime("%H:%M%z"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--reinstall", action="store_true", help="make the virtual environment anew")
    args = parser.parse_args()
    expressions = ["30 2 * * *", "0 9 * * MON-FRI", "*/15 * * * *"]
    sys.path.insert(0, str(PEERS))
    from run import ensure_venv  # type: ignore[import-not-found]

    python = ensure_venv("cron", args.reinstall)
    load_start = os.getloadavg()
    argv = [str(python), str(PEERS / "peer_cron.py"), "--expressions", "|".join(expressions)]
    argv += ["--number", str(args.number), "--repeat", str(args.repeat)]
    done = subprocess.run(
        argv,
        cwd=PEERS,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    peer = json.loads(done.stdout.strip().splitlines()[-1])
    ours = {e: rehydrate_timing(e, args.number, args.repeat) for e in expressions}
    load_end = os.getloadavg()
    command = "python benchmarks/bench_cron.py" + (
        f" --number {args.number} --repeat {args.repeat}" if (args.number, args.repeat) != (2000, 7) else ""
    )
    versions = peer["versions"]
    print(
        f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, `{command}`, Python {platform.python_version()} "
        f"{platform.machine()}, {os.cpu_count()} cores; load average "
        f"{' '.join(f'{x:.2f}' for x in load_start)} at start, {' '.join(f'{x:.2f}' for x in load_end)} at end"
    )
    print(
        f"# cronsim {versions['cronsim']}, croniter {versions['croniter']}: an iterator built at an aware "
        f"start in {TZ} and one occurrence taken, median of {args.repeat} rounds of {args.number} calls"
    )
    print()
    print("| expression | cronsim | croniter | croniter / cronsim | rehydrate `Cron.after` |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for e in expressions:
        a, b = peer["timings"]["cronsim"][e], peer["timings"]["croniter"][e]
        print(f"| `{e}` | {a:.1f} µs | {b:.1f} µs | {b / a:.1f}x | {ours[e]:.1f} µs |")
    print()
    print(f"`30 2 * * *` on {TZ}'s fall-back day (2026-10-25), walking occurrence to occurrence:")
    print()
    for name, runs in [*peer["fall_back"].items(), ("rehydrate", rehydrate_fall_back("30 2 * * *"))]:
        print(f"- {name}: {len(runs)} run(s), at {', '.join(runs)}")


if __name__ == "__main__":
    main()
