"""``rehydrate limits``: each limit key's holders, waiting elements and saturation, from the shell.

One :meth:`~rehydrate.Admin.limits` call on the store, no handler needed. The capacities come
from the heartbeats of the live workers that declare the limits (``handler(limits=...)``); a
limit nobody alive declares shows ``-``. ``rehydrate stats`` shows the same added up per limit.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rehydrate.cli._common import capacity_text, emit, json_text, saturation_text, show_id, table, wants_json
from rehydrate.cli._parser import Commands
from rehydrate.cli._verbs import run_verb

if TYPE_CHECKING:  # the admin is imported by the verb that runs, not by building the parser
    from rehydrate.abc import Store

__all__ = ["register"]


def register(commands: Commands) -> None:
    """Add ``limits``; it runs as a store verb does (``_verbs.run_verb``)."""
    listing = commands.add(
        "limits",
        "each limit key's holders, waiting elements and saturation",
        "List every limit key with state (slots held, starts in a window, or elements waiting), "
        "for every limit or only LIMIT: holders, elements waiting for room, starts in the longest "
        "window, the capacity the live workers declare (CONCURRENCY, then RATE/WINDOW) and how "
        "full the key is (100%: a newcomer waits). Idle keys are not listed. JSON (--format json, "
        "or piped) gives one object per key: limit, key, holders, waiting, starts, concurrency, "
        "rates ([n, seconds] pairs), saturation (0 to 1, null: no worker declares the limit) and "
        "holder_ids.",
        "exit status:\n  0    done (an empty list too)\n  1    an error (one line on stderr)\n"
        "  2    a malformed command line",
        run_verb,
        commands.store,
    )
    listing.add_argument("limit", nargs="?", metavar="LIMIT", help="only this limit (a handler's name)")
    listing.set_defaults(verb=limits, light=True)


async def limits(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin, limit_row

    rows = [limit_row(status) for status in await Admin(store).limits(args.limit)]
    if wants_json(args):
        emit(json_text(rows))
        return 0
    if not rows:
        emit("no limit holds a slot or has waiters" + (f" in {args.limit}" if args.limit else ""))
        return 0
    headers = ["LIMIT", "KEY", "HOLDERS", "WAITING", "STARTS", "CAPACITY", "SATURATION"]
    emit(
        table(
            headers,
            [
                [
                    show_id(r["limit"]),
                    show_id(r["key"]),
                    str(r["holders"]),
                    str(r["waiting"]),
                    str(r["starts"]),
                    capacity_text(r["concurrency"], r["rates"]),
                    saturation_text(r["saturation"]),
                ]
                for r in rows
            ],
        )
    )
    return 0
