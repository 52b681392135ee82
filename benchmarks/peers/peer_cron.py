"""cronsim and croniter in one interpreter (the virtual environment ``bench_cron.py`` installs):
what filing a schedule's next occurrence costs each, and what each runs on a fall-back day.

Prints one JSON line: ``{"versions": {...}, "timings": {library: {expression: µs}}, "fall_back":
{library: [local times]}}``. A timing is the median, over ``--repeat`` rounds of ``--number``
calls, of building an iterator at an aware start (Europe/Paris) and taking one occurrence.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timedelta
from importlib.metadata import version
from zoneinfo import ZoneInfo

from croniter import croniter
from cronsim import CronSim

ZONE = ZoneInfo("Europe/Paris")


def with_cronsim(expression: str, start: datetime) -> datetime:
    return next(CronSim(expression, start))


def with_croniter(expression: str, start: datetime) -> datetime:
    found: datetime = croniter(expression, start).get_next(datetime)
    return found


LIBRARIES = {"cronsim": with_cronsim, "croniter": with_croniter}


def timing(next_of, expression: str, number: int, repeat: int) -> float:
    """Median µs per call over ``repeat`` rounds of ``number`` calls (starts a minute apart)."""
    start = datetime(2026, 1, 5, 12, 0, 30, tzinfo=ZONE)
    starts = [start + timedelta(minutes=i) for i in range(number)]
    rounds = []
    for _ in range(repeat):
        began = time.perf_counter()
        for s in starts:
            next_of(expression, s)
        rounds.append((time.perf_counter() - began) / number * 1e6)
    return statistics.median(rounds)


def fall_back(next_of, expression: str) -> list[str]:
    """The local times ``expression`` runs at on Paris's fall-back day, 2026-10-25 (a 25-hour day),
    walking from one occurrence to the next."""
    day = datetime(2026, 10, 25, tzinfo=ZONE)
    end = datetime(2026, 10, 26, tzinfo=ZONE).timestamp()
    t, out = day - timedelta(seconds=1), []
    while True:
        t = next_of(expression, t)
        if t.timestamp() >= end:
            return out
        out.append(t.astimezone(ZONE).strftime("%H:%M%z"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--expressions", default="30 2 * * *|0 9 * * MON-FRI|*/15 * * * *")
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    expressions = args.expressions.split("|")
    timings = {
        name: {e: timing(next_of, e, args.number, args.repeat) for e in expressions}
        for name, next_of in LIBRARIES.items()
    }
    falls = {name: fall_back(next_of, "30 2 * * *") for name, next_of in LIBRARIES.items()}
    versions = {name: version(name) for name in LIBRARIES}
    print(json.dumps({"versions": versions, "timings": timings, "fall_back": falls}))


if __name__ == "__main__":
    main()
