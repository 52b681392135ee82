"""``rehydrate schedules|schedule|unschedule|pause|resume|run-now``: recurring schedules from the shell.

Each is one :class:`~rehydrate.Admin` call on the store (``schedule``: one
:meth:`~rehydrate.Scheduler.schedule`), no handler needed: the workers that serve the dehydrator
run the occurrences. An unknown id exits with status 1, like ``pull``.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rehydrate.cli._common import (
    CLIError,
    aware_datetime,
    duration,
    emit_json,
    positive_duration,
    positive_int,
    seconds_text,
    table,
    wants_json,
)
from rehydrate.cli._parser import Commands
from rehydrate.cli._verbs import run_verb

if TYPE_CHECKING:  # the scheduler is imported by the verbs that run, not by building the parser
    from rehydrate._core._triggers import Trigger
    from rehydrate._schedules import ScheduleInfo
    from rehydrate.abc import Store

#: rehydrate._core._triggers.MISFIRE, spelled out so that building the parser imports nothing.
_MISFIRE = ("coalesce", "all", "skip")

__all__ = ["register"]


def register(commands: Commands) -> None:
    """Add the schedule verbs; each runs as a store verb does (``_verbs.run_verb``)."""
    command, store, run = commands.add, commands.store, run_verb
    exits = (
        "exit status:\n  0    done\n  1    {one}, or an error (one line on stderr)\n"
        "  2    a malformed command line"
    )

    listing = command(
        "schedules",
        "list recurring schedules: trigger, next run, paused",
        "List the recurring schedules of NAME (or of every dehydrator): id, trigger, next run in "
        "local time and relative to now, and whether paused.",
        exits.format(one="never"),
        run,
        store,
    )
    listing.add_argument("name", nargs="?", metavar="NAME", help="only this dehydrator")
    listing.add_argument("--limit", type=positive_int, help="at most this many (in all)")
    listing.set_defaults(verb=schedules)

    add = command(
        "schedule",
        "file or change a recurring schedule (--cron EXPR [--tz ZONE] or --every DURATION)",
        "File the recurring schedule ID of NAME, or change it (same trigger: its next run is kept). "
        "The workers serving NAME run PAYLOAD at each occurrence, once among them.",
        exits.format(one="a bad expression, zone or duration"),
        run,
        store,
    )
    add.add_argument("name", metavar="NAME", help="the dehydrator whose handler runs it")
    add.add_argument("id", metavar="ID", help="the schedule's id")
    add.add_argument(
        "payload", nargs="?", default=None, metavar="PAYLOAD", help="JSON element ('-' reads stdin)"
    )
    trigger = add.add_mutually_exclusive_group(required=True)
    trigger.add_argument("--cron", metavar="EXPR", help="5 fields, e.g. '0 9 * * MON-FRI', or @daily...")
    trigger.add_argument("--every", type=positive_duration, metavar="DURATION", help="e.g. 30s, 15m, 1h")
    add.add_argument("--tz", metavar="ZONE", help="the cron's time zone, e.g. Europe/Paris (default UTC)")
    add.add_argument(
        "--start", type=aware_datetime, help="with --every: the grid's anchor (ISO 8601 with an offset or Z)"
    )
    add.add_argument(
        "--misfire", choices=_MISFIRE, default="coalesce", help="after downtime (default coalesce)"
    )
    add.add_argument(
        "--grace",
        type=duration,
        help="with --misfire skip: run those at most this late (default 1s; must be positive)",
    )
    add.add_argument(
        "--spread",
        type=duration,
        help="run at a fixed offset within this window after each nominal time, taken from the "
        "id (spreads many schedules of one trigger), e.g. 10m",
    )
    add.set_defaults(verb=schedule)
    _intermixed(add)

    no_schedule = "no such schedule"
    for verb, function, help, what, one, id_help in [
        (
            "unschedule",
            unschedule,
            "remove a recurring schedule",
            "Remove the schedule ID of NAME.",
            no_schedule,
            None,
        ),
        (
            "pause",
            pause,
            "pause a recurring schedule",
            "Pause the schedule ID of NAME until resumed.",
            no_schedule,
            None,
        ),
        (
            "resume",
            resume,
            "resume a paused schedule from its next occurrence",
            "Resume the schedule ID of NAME from its next occurrence (none missed while paused runs).",
            no_schedule,
            None,
        ),
        (
            "run-now",
            run_now,
            "run a schedule once now, out of turn (or make an element due now)",
            "Run the schedule ID of NAME once now: an extra occurrence, whose scheduled_for is now; "
            "the occurrence that was next still runs at its time. An element that is not a schedule "
            "becomes due now.",
            "no such element, a worker holds it, or a paused schedule",
            "the schedule's (or element's) id",
        ),
    ]:
        sub = command(verb, help, what, exits.format(one=one), run, store)
        sub.add_argument("name", metavar="NAME", help="the dehydrator")
        sub.add_argument("id", metavar="ID", help=id_help or "the schedule's id")
        sub.set_defaults(verb=function)


def _intermixed(parser: argparse.ArgumentParser) -> None:
    """Let PAYLOAD come after the options (``schedule NAME ID --every 5m '{"a": 1}'``).

    argparse fills an optional positional from the first run of positionals (``NAME ID``) and
    then refuses a later one; its intermixed parsing takes them wherever they are.
    """
    plain = parser.parse_known_args
    busy = False

    def parse_known_args(args: Any = None, namespace: Any = None) -> Any:
        nonlocal busy
        if busy:  # parse_known_intermixed_args calls parse_known_args itself
            return plain(args, namespace)
        busy = True
        try:
            return parser.parse_known_intermixed_args(args, namespace)
        finally:
            busy = False

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def _trigger(args: argparse.Namespace) -> Trigger:
    from rehydrate._core._triggers import Cron, Every

    if args.cron is not None:
        if args.start is not None:
            raise CLIError("--start goes with --every (a cron expression is its own calendar)")
        return Cron(args.cron, tz=args.tz or "UTC")
    if args.tz is not None:
        raise CLIError("--tz goes with --cron (--every counts seconds, not local time)")
    return Every(args.every, start=args.start)


async def schedule(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin
    from rehydrate._core._durations import format_duration

    trigger = _trigger(args)
    if args.grace is not None and args.misfire != "skip":
        raise CLIError(f"--grace goes with --misfire skip (--misfire {args.misfire} skips nothing)")
    admin = Admin(store)
    await admin.schedule(
        args.name,
        trigger,
        id=args.id,
        element=args.payload,
        misfire=args.misfire,
        grace=args.grace,
        spread=args.spread,
    )
    info = await admin.find_schedule(args.name, args.id)
    if wants_json(args):
        emit_json(_row(args.name, info) if info is not None else {"name": args.name, "id": args.id})
    elif info is not None:
        spread = (
            f" (spread {format_duration(info.spread)}: runs {seconds_text(info.offset)} after)"
            if info.spread
            else ""
        )
        print(f"scheduled {args.id} in {args.name}: {info.trigger}, next run {_when(info)}{spread}")
    return 0


async def unschedule(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin

    return _done(args, await Admin(store).unschedule(args.name, args.id), "removed")


async def pause(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin

    outcome = await Admin(store).pause(args.name, args.id)
    return _done(args, outcome in ("paused", "unchanged"), "paused")


async def resume(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin

    outcome = await Admin(store).resume(args.name, args.id)
    return _done(args, outcome in ("resumed", "unchanged"), "resumed")


async def run_now(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin

    outcome = await Admin(store).run_now(args.name, args.id)
    due = outcome in ("one-shot", "schedule")
    if wants_json(args):
        emit_json({"name": args.name, "id": args.id, "due": due})
    elif due:
        print(f"{args.id} in {args.name} is due now")
    else:
        why = {
            "unknown": "there is no such element",
            "held": "a worker holds it and is running it now",
            "paused": "it is a paused schedule (resume it first)",
        }.get(outcome, "it was claimed or removed meanwhile")
        print(f"rehydrate: {args.id!r} in {args.name!r} was not made due: {why}", file=sys.stderr)
    return 0 if due else 1


def _done(args: argparse.Namespace, found: bool, what: str) -> int:
    if wants_json(args):
        emit_json({"name": args.name, "id": args.id, what: found})
    elif found:
        print(f"{what} schedule {args.id} in {args.name}")
    else:
        print(f"rehydrate: no schedule {args.id!r} in {args.name!r}", file=sys.stderr)
    return 0 if found else 1


def _when(info: ScheduleInfo) -> str:
    if info.next_run is None:
        return "-"
    local = info.next_run.astimezone()
    left = info.next_run.timestamp() - time.time()
    relative = f"in {seconds_text(left)}" if left > 0 else f"{seconds_text(-left)} ago"
    return f"{local:%Y-%m-%d %H:%M:%S %Z} ({relative})"


def _row(name: str, info: ScheduleInfo) -> dict[str, Any]:
    from rehydrate._schedules import schedule_row

    return schedule_row(name, info)


async def schedules(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin

    admin = Admin(store)
    names = [args.name] if args.name else await admin.names()
    found: list[tuple[str, ScheduleInfo]] = []
    for name in names:
        left = None if args.limit is None else args.limit - len(found)
        if left == 0:
            break
        found += [(name, info) for info in await admin.schedules(name, limit=left)]
    if wants_json(args):
        emit_json([_row(name, info) for name, info in found])
        return 0
    if not found:
        print("no schedules" + (f" in {args.name}" if args.name else ""))
        return 0
    rows = [
        [name, info.id, str(info.trigger), _when(info), "yes" if info.paused else "no"]
        for name, info in found
    ]
    print(table(["NAME", "ID", "TRIGGER", f"NEXT RUN ({datetime.now().astimezone():%Z})", "PAUSED"], rows))
    return 0
