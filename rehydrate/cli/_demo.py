"""``rehydrate demo``: the first thing to run. A scheduler on the embedded store, no server.

It declares a recurring schedule (a heartbeat, ``Every`` few tenths of a second) and defers a
few hundred elements with delays spread over a few seconds to three handlers: one that
always works, one that fails its first attempt and succeeds on the retry, and one that always fails
and ends as a dead letter. It cancels a few before they are due, shows progress while work is
pending, and ends with a summary: delivered, retried, dead-lettered, lateness p50/p99.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from typing import TYPE_CHECKING, Final

from rehydrate.cli._common import configure_logging, duration, positive_int, require_backend, seconds_text
from rehydrate.cli._parser import Commands, exits

if TYPE_CHECKING:  # imported by the demo as it runs, not by --help
    from rehydrate import Scheduler

#: How the elements are shared between the three handlers.
_FLAKY_EVERY: Final = 5
_DOOMED_EVERY: Final = 20
_CANCELLED: Final = 5
_DOOMED_ATTEMPTS: Final = 3
#: The progress bar's width, when the terminal has room for it.
_BAR: Final = 24


class TransientError(Exception):
    """What the flaky handler raises on a first attempt: a timeout, a 503..."""


class PermanentError(Exception):
    """What the doomed handler always raises: the payload can never be processed."""


def _build(seconds: float) -> tuple[Scheduler, dict[str, int]]:
    import anyio

    from rehydrate import Backoff, Every, Retry, Scheduler, current_delivery

    scheduler = Scheduler(grace=1.0)
    done = {"emails": 0, "invoices": 0, "doomed": 0}
    quick = Backoff(initial=min(0.2, seconds / 10), multiplier=2.0, maximum=1.0, jitter=0.1)

    @scheduler.handler("emails", concurrency=50)
    async def send_email(element: dict[str, int]) -> None:
        await anyio.sleep(0.005)  # the "work"
        done["emails"] += 1

    @scheduler.handler("invoices", retry=Retry(attempts=3, backoff=quick), concurrency=20)
    async def charge(element: dict[str, int]) -> None:
        if current_delivery().attempt == 1:
            raise TransientError("payment provider timed out")
        done["invoices"] += 1

    @scheduler.handler("doomed", retry=Retry(attempts=_DOOMED_ATTEMPTS, backoff=quick))
    def parse(element: dict[str, int]) -> None:  # a plain function runs in a worker thread
        raise PermanentError(f"cannot parse order {element['n']}")

    # A recurring schedule, declared with its handler: an element whose due time is its next
    # occurrence, filed anew as each one ends.
    @scheduler.handler("heartbeat", schedule=Every(_heartbeat_period(seconds)))
    async def heartbeat(element: None) -> None:
        when = current_delivery().scheduled_for
        assert when is not None
        beats.append(when.timestamp())

    beats: list[float] = []
    _BEATS[id(scheduler)] = beats
    return scheduler, done


#: The heartbeat occurrences of each demo scheduler (nominal Unix times), for the summary.
_BEATS: dict[int, list[float]] = {}


def _heartbeat_period(seconds: float) -> float:
    return max(0.25, round(seconds / 8, 2))


def _progress_line(
    scheduler: Scheduler, finished: int, total: int, started: float, width: int | None = None
) -> str:
    """The progress line, at most ``width`` characters (a longer one wraps, and its redraws stack).

    What matters most stays: the bar and the count; then the other figures, dropped from the least
    telling; then a shorter bar; then the line is cut.
    """
    stats = scheduler.stats()
    p99 = seconds_text(stats.lateness_p99) if stats.lateness_p99 is not None else "-"
    extras = [  # most telling first
        f"{time.monotonic() - started:4.1f}s",
        f"dead {stats.dead_lettered}",
        f"retried {stats.retried}",
        f"deliveries {stats.delivered}",
        f"in flight {stats.in_flight}",
        f"lateness p99 {p99}",
    ]
    order = [1, 2, 3, 4, 5, 0]  # shown in this order, the elapsed time last

    def build(bar: int, kept: int) -> str:
        filled = int(bar * finished / total) if total else bar
        head = f"[{'#' * filled}{'.' * (bar - filled)}] {finished}/{total} done"
        return "  ".join([head, *(extras[i] for i in order if i < kept)])

    line = build(_BAR, len(extras))
    if width is None:
        return line
    for kept in range(len(extras), -1, -1):
        line = build(_BAR, kept)
        if len(line) <= width:
            return line
    bar = max(0, _BAR - (len(line) - width))
    line = build(bar, 0)
    return line[: max(0, width)]


async def demo(elements: int, seconds: float, rng: random.Random) -> int:
    import anyio

    scheduler, done = _build(seconds)
    terminal = sys.stdout.isatty()
    async with scheduler:
        started = time.monotonic()
        expected = {"emails": 0, "invoices": 0, "doomed": 0}
        for n in range(elements):
            name = "doomed" if n % _DOOMED_EVERY == 0 else "invoices" if n % _FLAKY_EVERY == 0 else "emails"
            await scheduler.defer(name, {"n": n}, delay=rng.uniform(0.1, seconds), id=f"{name}-{n}")
            expected[name] += 1
        cancelled = 0
        for n in range(1, elements):
            if cancelled == _CANCELLED:
                break
            if n % _FLAKY_EVERY and n % _DOOMED_EVERY and await scheduler.cancel("emails", f"emails-{n}"):
                cancelled += 1
                expected["emails"] -= 1
        total = sum(expected.values())
        print(
            f"deferred {elements} elements over {seconds:g}s to 3 handlers "
            f"(emails {expected['emails'] + cancelled}, invoices {expected['invoices']} that fail once, "
            f"doomed {expected['doomed']} that always fail); "
            f"cancelled {cancelled} emails before they were due"
        )
        last_print = 0.0
        while True:
            finished = done["emails"] + done["invoices"] + scheduler.stats().dead_lettered
            now = time.monotonic()
            if terminal:  # redraw in place: one line, narrower than the terminal, the rest cleared
                width = shutil.get_terminal_size().columns - 1
                line = _progress_line(scheduler, finished, total, started, width)
                print("\r" + line + "\x1b[K", end="", flush=True)
            elif now - last_print >= 1.0 or finished >= total:
                print(_progress_line(scheduler, finished, total, started), flush=True)
                last_print = now
            if finished >= total:
                break
            await anyio.sleep(0.1)
        if terminal:
            print()
        elapsed = time.monotonic() - started
        dead = await scheduler.dead_letters("doomed")
    stats = scheduler.stats()
    p50 = stats.lateness_p50 or 0.0
    p99 = stats.lateness_p99 or 0.0
    print(f"finished in {elapsed:.1f}s")
    print(f"  delivered     {stats.delivered} deliveries ({stats.acked} acked)")
    print(
        f"  retried       {stats.retried} ({expected['invoices']} invoices failed once, then succeeded; "
        f"{expected['doomed']} doomed failed {_DOOMED_ATTEMPTS - 1} times before their last attempt)"
    )
    print(f"  dead-lettered {stats.dead_lettered} (kept in 'doomed.dead': {len(dead)})")
    if dead:
        print(f"    e.g. {dead[0].id}: {dead[0].error} after {dead[0].attempts} attempts")
    print(f"  lateness      p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms (time past due at delivery)")
    beats = _BEATS.pop(id(scheduler), [])
    if beats:
        offsets = ", ".join(f"+{t - beats[0]:.2f}s" for t in beats[:6]) + (", ..." if len(beats) > 6 else "")
        print(
            f"  schedule      'heartbeat' Every({_heartbeat_period(seconds):g}s) ran {len(beats)} "
            f"occurrences, each once, on its grid: {offsets}"
        )
    ok = (
        done["emails"] == expected["emails"]
        and done["invoices"] == expected["invoices"]
        and stats.dead_lettered == expected["doomed"] == len(dead)
    )
    if not ok:
        print(f"rehydrate: unexpected outcome: {done}, expected {expected}", file=sys.stderr)
    return 0 if ok else 1


def register(commands: Commands) -> None:
    """Add ``rehydrate demo``."""
    command = commands.add(
        "demo",
        "a short tour on the embedded store, no server needed",
        "Defer a few hundred elements to three handlers on the memory store (one always works, one "
        "fails once then succeeds, one always fails and ends as a dead letter), cancel a few, show "
        "progress, and end with a summary: delivered, retried, dead-lettered, lateness.",
        exits("the outcome was as expected", "it was not, or an error"),
        run,
    )
    command.add_argument(
        "--elements", type=positive_int, default=300, help="how many elements to defer (default 300)"
    )
    command.add_argument(
        "--seconds", type=duration, default=6.0, help="spread their delays over this long (default 6s)"
    )
    command.add_argument("--seed", type=int, default=7, help="random seed for the delays")
    command.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop (default asyncio; trio needs pip install 'rehydrate[trio]')",
    )


def run(args: argparse.Namespace) -> int:
    import anyio

    if args.verbosity <= 0:  # the failures are the point of the demo: log them only with -v
        configure_logging(args.log_format, -3)
    return anyio.run(
        demo, args.elements, args.seconds, random.Random(args.seed), backend=require_backend(args.backend)
    )
