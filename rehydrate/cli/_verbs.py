"""ReDe's verbs from the shell, and ``stats``, ``dead``, ``requeue``: one store call each.

Output is JSON when piped and readable on a terminal. An element that is not there (``pull``,
``look`` of an unknown id) prints ``null`` (JSON) or a note on stderr, and exits with status 1 so
scripts can test for it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio

from rehydrate._scheduler import DEAD_SUFFIX, Scheduler
from rehydrate.abc import Store
from rehydrate.cli._common import (
    CLIError,
    emit_json,
    seconds_text,
    show,
    table,
    utc_text,
    wants_json,
)
from rehydrate.errors import UnknownIdError

Verb = Callable[[argparse.Namespace, Store], Awaitable[int]]


def _missing(args: argparse.Namespace, what: str) -> int:
    if wants_json(args):
        emit_json(None)
    else:
        print(f"rehydrate: {what}", file=sys.stderr)
    return 1


async def push(args: argparse.Namespace, store: Store) -> int:
    if args.at is not None:
        ttl = max(0.0, (args.at - datetime.now(UTC)).total_seconds())
    else:
        ttl = args.delay
    if args.replace and args.id is None:
        raise CLIError("--replace needs --id: the element to replace")
    id = await store.push(args.name, args.payload, ttl=ttl, id=args.id, replace=args.replace)
    if wants_json(args):
        emit_json({"id": id, "ttl": ttl})
    else:
        print(f"pushed {id} to {args.name}, due in {seconds_text(ttl)}")
    return 0


async def pull(args: argparse.Namespace, store: Store) -> int:
    return await _one(args, store, "pulled")


async def look(args: argparse.Namespace, store: Store) -> int:
    return await _one(args, store, "look")


async def _one(args: argparse.Namespace, store: Store, verb: str) -> int:
    # ``None`` is also a valid JSON payload: ask whether the id is there, not what it holds.
    info = await store.info(args.name, args.id)
    element = await (store.pull if verb == "pulled" else store.look)(args.name, args.id)
    if info is None and element is None:
        return _missing(args, f"no element {args.id!r} in {args.name!r}")
    if wants_json(args):
        emit_json(element)
    else:
        print(show(element))
    return 0


async def poll(args: argparse.Namespace, store: Store) -> int:
    elements = await store.poll(args.name, limit=args.limit)
    if wants_json(args):
        emit_json(elements)
    else:
        for element in elements:
            print(show(element))
        print(f"({len(elements)} due elements removed from {args.name})", file=sys.stderr)
    return 0


async def xpoll(args: argparse.Namespace, store: Store) -> int:
    ids = await store.xpoll(args.name, limit=args.limit)
    if wants_json(args):
        emit_json(ids)
    else:
        for id in ids:
            print(id)
    return 0


async def xack(args: argparse.Namespace, store: Store) -> int:
    elements = await store.xack(args.name, *args.ids)
    if wants_json(args):
        emit_json([{"id": id, "element": e} for id, e in zip(args.ids, elements, strict=True)])
    else:
        for id, element in zip(args.ids, elements, strict=True):
            print(f"{id}: {show(element) if element is not None else '(unknown or not due: left alone)'}")
    return 0


async def ttn(args: argparse.Namespace, store: Store) -> int:
    seconds = await store.ttn(args.name)
    if wants_json(args):
        emit_json(seconds)
    else:
        print("empty" if seconds is None else seconds_text(seconds))
    return 0


async def update(args: argparse.Namespace, store: Store) -> int:
    try:
        old = await store.update(args.name, args.id, args.payload)
    except UnknownIdError:
        raise CLIError(f"no element {args.id!r} in {args.name!r} to update") from None
    if wants_json(args):
        emit_json(old)
    else:
        print(f"updated {args.id} in {args.name}; it held {show(old)}")
    return 0


# -- operating ---------------------------------------------------------------------------------


async def _stats_rows(store: Store, only: str | None) -> list[dict[str, Any]]:
    if only is not None:
        names = [only]
    else:
        names = sorted({n.removesuffix(DEAD_SUFFIX) for n in await store.names()})
    rows = []
    for name in names:
        summary = await store.summary(name)
        rows.append(
            {
                "name": name,
                "size": summary.size,
                "due": summary.due,
                "claimed": summary.claimed,
                "dead": await store.size(name + DEAD_SUFFIX),
                "next_due": summary.ttn,
            }
        )
    return rows


def _stats_text(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no dehydrators hold elements"
    headers = ["NAME", "SIZE", "DUE", "CLAIMED", "DEAD", "NEXT DUE"]
    return table(
        headers,
        [
            [
                r["name"],
                *(str(r[key]) for key in ("size", "due", "claimed", "dead")),
                seconds_text(r["next_due"]),
            ]
            for r in rows
        ],
    )


async def stats(args: argparse.Namespace, store: Store) -> int:
    as_json = wants_json(args)
    if not args.watch:
        rows = await _stats_rows(store, args.name)
        emit_json(rows) if as_json else print(_stats_text(rows))
        return 0
    # --watch: redraw on a terminal, or one JSON line per refresh when piped; Ctrl-C ends it.
    refreshes = 0
    deadline = time.monotonic()
    while args.count is None or refreshes < args.count:
        rows = await _stats_rows(store, args.name)
        if as_json:
            emit_json({"at": time.time(), "dehydrators": rows})
        else:
            stamp = datetime.now(UTC).strftime("%H:%M:%S")
            screen = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
            print(
                f"{screen}rehydrate stats  {stamp}  every {seconds_text(args.interval)}\n{_stats_text(rows)}"
            )
        sys.stdout.flush()
        refreshes += 1
        if args.count is not None and refreshes >= args.count:
            break
        deadline += args.interval
        await anyio.sleep(max(0.0, deadline - time.monotonic()))
    return 0


async def dead(args: argparse.Namespace, store: Store) -> int:
    letters = await Scheduler(store).dead_letters(args.name, limit=args.limit)
    if wants_json(args):
        emit_json(
            [
                {
                    "id": d.id,
                    "element": d.element,
                    "error": d.error,
                    "attempts": d.attempts,
                    "failed_at": d.failed_at,
                }
                for d in letters
            ]
        )
        return 0
    if not letters:
        print(f"no dead letters in {args.name}")
        return 0
    rows = [[d.id, str(d.attempts), utc_text(d.failed_at), d.error, show(d.element)] for d in letters]
    print(table(["ID", "ATTEMPTS", "FAILED AT (UTC)", "ERROR", "ELEMENT"], rows))
    return 0


async def requeue(args: argparse.Namespace, store: Store) -> int:
    asked = args.ids or None
    moved = await Scheduler(store).requeue(args.name, asked, delay=args.delay)
    missing = [id for id in (asked or []) if id not in set(moved)]
    if wants_json(args):
        emit_json({"requeued": moved, "missing": missing})
    else:
        print(
            f"requeued {len(moved)} dead letters into {args.name}"
            + (f": {', '.join(moved)}" if moved else "")
        )
        if missing:
            print(
                "rehydrate: not requeued (no such dead letter, or the id is live again): "
                + ", ".join(missing),
                file=sys.stderr,
            )
    return 1 if missing else 0
