"""ReDe's verbs from the shell, and ``stats``, ``dead``, ``requeue``: one store call each.

Output is JSON when piped and readable on a terminal. An element that is not there (``pull``,
``look`` of an unknown id) prints ``null`` (JSON) or a note on stderr, and exits with status 1 so
scripts can test for it.

A verb that removes elements never removes what it could not hand over. ``poll`` claims the due
elements (a lease of :data:`POLL_LEASE`), prints them, and acks them only once the output was
written and flushed; if writing fails (a closed pipe, a full disk, Ctrl-C) the claims are released
at once, and if the process dies outright their lease brings them back. ``pull`` and ``xack`` name
their elements, so they remove them, print them, and put back whatever they removed if writing fails.
Output is rendered in full before any of it is written (see ``_common.emit``).

Times in JSON output come in two forms with the same stem: ``*_at`` is an ISO 8601 UTC time,
``*_in`` / ``*_ago`` are seconds from now.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from rehydrate._backend import running_backend
from rehydrate.cli import _common
from rehydrate.cli._common import (
    CLIError,
    aware_datetime,
    capacity_text,
    due_text,
    duration,
    emit,
    interval,
    json_text,
    payload,
    plural,
    positive_int,
    saturation_text,
    seconds_text,
    show,
    show_id,
    table,
    unicode_text,
    utc_text,
    wants_json,
)
from rehydrate.cli._parser import Commands, Parser
from rehydrate.errors import DuplicateIdError, UnknownIdError

if TYPE_CHECKING:
    from rehydrate._core._records import Claim, ElementInfo
    from rehydrate.abc import Store

Verb = Callable[[argparse.Namespace, "Store"], Awaitable[int]]

#: Where a scheduler keeps the dead letters of ``name``: ``name + DEAD_SUFFIX`` (the scheduler's own
#: constant, repeated here so that a verb does not import the scheduler; a test checks they agree).
DEAD_SUFFIX: Final = ".dead"
#: How long ``poll`` holds what it claimed while it prints; what a killed ``poll`` costs in delay.
POLL_LEASE: Final = 60.0


def _shielded() -> contextlib.AbstractContextManager[Any]:
    """Shielded from cancellation, in an event loop; a one-shot verb has none and cannot be cancelled."""
    if running_backend() is None:
        return contextlib.nullcontext()
    import anyio

    return anyio.CancelScope(shield=True)


async def _sleep(seconds: float) -> None:
    import anyio

    await anyio.sleep(seconds)


def _missing(args: argparse.Namespace, what: str) -> int:
    if wants_json(args):
        emit("null")
    else:
        print(f"rehydrate: {what}", file=sys.stderr)
    return 1


def _note(text: str) -> None:
    """A remark on stderr (never fails: stderr may be a closed pipe too)."""
    with contextlib.suppress(OSError):
        emit(text, sys.stderr)


async def _put_back(store: Store, name: str, taken: list[tuple[str, Any, ElementInfo | None]]) -> None:
    """Push back what a verb removed but could not hand over, due when it was due."""
    now = float(store.clock())
    kept = []
    for id, element, info in taken:
        if info is None or await store.info(name, id) is not None:
            continue  # not removed by us (unknown, not due), or something is there again
        ttl = max(0.0, info.due - now)
        try:
            await store.push(name, element, ttl=ttl, id=id)
        except DuplicateIdError:
            _note(f"rehydrate: could not put back {show_id(id)}: a new element took its id meanwhile")
        else:
            kept.append(id)
    if kept:
        _note(f"rehydrate: output failed; put back {plural(len(kept), 'element')} into {show_id(name)}")


async def push(args: argparse.Namespace, store: Store) -> int:
    if args.at is not None:
        ttl = max(0.0, (args.at - datetime.now(UTC)).total_seconds())
    else:
        ttl = args.delay
    try:
        id = await store.push(args.name, args.payload, ttl=ttl, id=args.id, replace=args.replace)
    except DuplicateIdError:
        raise CLIError(
            f"an element with id {args.id!r} is already in {args.name!r} (use --replace to re-defer it)"
        ) from None
    if wants_json(args):
        emit(json_text({"id": id, "ttl": ttl}))
    else:
        emit(f"pushed {show_id(id)} to {show_id(args.name)}, {due_text(ttl)}")
    return 0


async def pull(args: argparse.Namespace, store: Store) -> int:
    # ``None`` is also a valid JSON payload: ask whether the id is there, not what it holds.
    info = await store.info(args.name, args.id)
    if info is None:
        return _missing(args, f"no element {args.id!r} in {args.name!r}")
    element = await store.pull(args.name, args.id)
    text = json_text(element) if wants_json(args) else show(element)
    try:
        emit(text)
    except BaseException:
        with _shielded():
            await _put_back(store, args.name, [(args.id, element, info)])
        raise
    return 0


async def look(args: argparse.Namespace, store: Store) -> int:
    info = await store.info(args.name, args.id)
    element = await store.look(args.name, args.id)
    if info is None and element is None:
        return _missing(args, f"no element {args.id!r} in {args.name!r}")
    emit(json_text(element) if wants_json(args) else show(element))
    return 0


async def poll(args: argparse.Namespace, store: Store) -> int:
    claims: list[Claim] = []
    while args.limit is None or len(claims) < args.limit:
        batch = await store.claim(
            args.name, lease=POLL_LEASE, limit=None if args.limit is None else args.limit - len(claims)
        )
        if not batch:
            break
        claims += batch
    elements = [claim.element for claim in claims]
    as_json = wants_json(args)
    text = json_text(elements) if as_json else "\n".join(show(element) for element in elements)
    try:
        if as_json or elements:
            emit(text)
    except BaseException:
        with _shielded():
            for claim in claims:  # due again now, not at the end of the lease
                await store.reschedule(args.name, claim.id, ttl=0.0, token=claim.token)
        raise
    acked = await store.ack(args.name, [(claim.id, claim.token) for claim in claims]) if claims else []
    if not as_json:
        _note(f"({plural(len(elements), 'due element')} removed from {show_id(args.name)})")
    if not all(acked):
        _note(
            f"rehydrate: {plural(acked.count(False), 'printed element')} outlived the {POLL_LEASE:g}s lease "
            "and were claimed again before removal: they will be delivered again"
        )
        return 1
    return 0


async def xpoll(args: argparse.Namespace, store: Store) -> int:
    ids = await store.xpoll(args.name, limit=args.limit)
    if wants_json(args):
        emit(json_text(ids))
    elif ids:
        emit("\n".join(show_id(id) for id in ids))
    return 0


async def xack(args: argparse.Namespace, store: Store) -> int:
    infos = [await store.info(args.name, id) for id in args.ids]
    elements = await store.xack(args.name, *args.ids)
    if wants_json(args):
        text = json_text([{"id": id, "element": e} for id, e in zip(args.ids, elements, strict=True)])
    else:
        text = "\n".join(
            f"{show_id(id)}: {show(e) if e is not None else '(unknown or not due: left alone)'}"
            for id, e in zip(args.ids, elements, strict=True)
        )
    try:
        emit(text)
    except BaseException:
        with _shielded():
            await _put_back(store, args.name, list(zip(args.ids, elements, infos, strict=True)))
        raise
    return 0


async def ttn(args: argparse.Namespace, store: Store) -> int:
    seconds = await store.ttn(args.name)
    if wants_json(args):
        emit(json_text(seconds))
    else:
        emit("empty" if seconds is None else seconds_text(seconds))
    return 0


async def update(args: argparse.Namespace, store: Store) -> int:
    try:
        old = await store.update(args.name, args.id, args.payload)
    except UnknownIdError:
        raise CLIError(f"no element {args.id!r} in {args.name!r} to update") from None
    if wants_json(args):
        emit(json_text(old))
    else:
        emit(f"updated {show_id(args.id)} in {show_id(args.name)}; it held {show(old)}")
    return 0


# -- operating ---------------------------------------------------------------------------------


async def _stats_rows(store: Store, only: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each dehydrator's row, and each limit's keys added up (``limit_totals``), by limit."""
    # ``x.dead`` holds x's dead letters (the scheduler's naming): its count is x's DEAD column, and
    # ``rehydrate dead x`` lists every element it holds, so the two always agree.
    from rehydrate._admin import Admin, limit_totals

    admin = Admin(store)
    totals: dict[str, Any] = {}
    if store.capabilities.limits:
        totals = limit_totals(await admin.limits(only))
    rows = []
    for name in [only] if only is not None else await admin.names():
        info = await admin.dehydrator(name)
        now = time.time()
        rows.append(
            {
                "name": name,
                "size": info.size,
                "due": info.due,
                "claimed": info.claimed,
                "dead": info.dead,
                "next_due_in": info.ttn,
                "next_due_at": None if info.ttn is None else utc_text(now + info.ttn, "milliseconds"),
                "limit": totals.get(name),
            }
        )
    return rows, totals


def _stats_text(rows: list[dict[str, Any]], totals: dict[str, Any]) -> str:
    if not rows:
        text = "no dehydrators hold elements"
    else:
        headers = ["NAME", "SIZE", "DUE", "CLAIMED", "DEAD", "NEXT DUE"]
        text = table(
            headers,
            [
                [
                    show_id(r["name"]),
                    *(str(r[key]) for key in ("size", "due", "claimed", "dead")),
                    seconds_text(r["next_due_in"]),
                ]
                for r in rows
            ],
        )
    if totals:
        headers = ["LIMIT", "KEYS", "HOLDERS", "WAITING", "CAPACITY (PER KEY)", "SATURATION (FULLEST KEY)"]
        text += "\n\n" + table(
            headers,
            [
                [
                    show_id(limit),
                    str(t["keys"]),
                    str(t["holders"]),
                    str(t["waiting"]),
                    capacity_text(t["concurrency"], t["rates"]),
                    saturation_text(t["saturation"]),
                ]
                for limit, t in totals.items()
            ],
        )
    return text


async def stats(args: argparse.Namespace, store: Store) -> int:
    as_json = wants_json(args)
    if not args.watch:
        rows, totals = await _stats_rows(store, args.name)
        emit(json_text(rows) if as_json else _stats_text(rows, totals))
        return 0
    # --watch: redraw on a terminal, or one JSON line per refresh when piped; Ctrl-C ends it.
    refreshes = 0
    deadline = time.monotonic()
    while args.count is None or refreshes < args.count:
        rows, totals = await _stats_rows(store, args.name)
        if as_json:
            emit(
                json_text(
                    {"at": utc_text(time.time(), "milliseconds"), "dehydrators": rows, "limits": totals}
                )
            )
        else:
            stamp = datetime.now(UTC).strftime("%H:%M:%S")
            screen = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
            emit(
                f"{screen}rehydrate stats  {stamp}  every {seconds_text(args.interval)}\n"
                f"{_stats_text(rows, totals)}"
            )
        refreshes += 1
        if args.count is not None and refreshes >= args.count:
            break
        deadline += args.interval
        await _sleep(max(0.0, deadline - time.monotonic()))
    return 0


def _handlers_text(handlers: dict[str, Any]) -> str:
    """``jobs 3/100, mail 0/10``: in flight out of the concurrency, per handler."""
    parts = []
    for name, entry in handlers.items():
        entry = entry if isinstance(entry, dict) else {}
        limit = entry.get("concurrency")
        parts.append(f"{show_id(name)} {entry.get('in_flight', 0)}/{'-' if limit is None else limit}")
    return ", ".join(parts) or "-"


def _lateness_text(row: dict[str, Any]) -> str:
    if row["lateness_p50"] is None:
        return "-"
    return f"{seconds_text(row['lateness_p50'])} / {seconds_text(row['lateness_p99'])}"


async def workers(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin
    from rehydrate._core._workers import summary

    rows = [summary(w) for w in await Admin(store).workers()]
    if wants_json(args):
        emit(json_text(rows))
        return 0
    if not rows:
        emit("no workers: none is running, or they send no heartbeats to this store")
        return 0
    headers = [
        "STATUS",
        "ID",
        "HOST",
        "PID",
        "HANDLERS (IN FLIGHT/CONCURRENCY)",
        "LATENESS P50/P99",
        "LAST SEEN",
    ]
    lines = [
        [
            "alive" if r["alive"] else "EXPIRED",
            show_id(r["id"]),
            str(r["host"] or "-"),
            str(r["pid"] or "-"),
            _handlers_text(r["handlers"]),
            _lateness_text(r),
            "just now" if r["last_seen_ago"] < 0.001 else f"{seconds_text(r['last_seen_ago'])} ago",
        ]
        for r in rows
    ]
    alive = sum(r["alive"] for r in rows)
    emit(table(headers, lines) + f"\n{plural(alive, 'worker')} alive, {len(rows) - alive} expired")
    return 0


_RECORD_KEYS: Final = frozenset({"element", "error", "attempts", "failed_at"})


async def _dead_letters(store: Store, name: str, limit: int | None) -> list[dict[str, Any]]:
    """Every element of ``name.dead``: a scheduler's dead-letter records, and anything else pushed
    there by hand (shown as its element, with no error, attempts or failure time)."""
    dead = name + DEAD_SUFFIX
    now = time.time()
    letters = []
    for id in await store.ids(dead, limit=limit):
        record = await store.look(dead, id)
        if isinstance(record, dict) and record.keys() >= _RECORD_KEYS:
            failed_at = float(record["failed_at"])
            letters.append(
                {
                    "id": id,
                    "element": record["element"],
                    "error": str(record["error"]),
                    "attempts": int(record["attempts"]),
                    "failed_at": utc_text(failed_at, "milliseconds"),
                    "failed_ago": max(0.0, now - failed_at),
                }
            )
        else:
            letters.append(
                {
                    "id": id,
                    "element": record,
                    "error": None,
                    "attempts": None,
                    "failed_at": None,
                    "failed_ago": None,
                }
            )
    return letters


async def dead(args: argparse.Namespace, store: Store) -> int:
    letters = await _dead_letters(store, args.name, args.limit)
    if wants_json(args):
        emit(json_text(letters))
        return 0
    if not letters:
        emit(f"no dead letters in {show_id(args.name)}")
        return 0
    rows = [
        [
            show_id(d["id"]),
            "-" if d["attempts"] is None else str(d["attempts"]),
            "-" if d["failed_at"] is None else d["failed_at"][:19],
            "-" if d["error"] is None else show_id(d["error"]),
            show(d["element"]),
        ]
        for d in letters
    ]
    emit(table(["ID", "ATTEMPTS", "FAILED AT (UTC)", "ERROR", "ELEMENT"], rows))
    return 0


async def requeue(args: argparse.Namespace, store: Store) -> int:
    from rehydrate._admin import Admin

    asked = args.ids or None
    moved = await Admin(store).requeue(args.name, asked, delay=args.delay)
    missing = [id for id in (asked or []) if id not in set(moved)]
    if wants_json(args):
        emit(json_text({"requeued": moved, "missing": missing}))
    else:
        emit(
            f"requeued {plural(len(moved), 'dead letter')} into {show_id(args.name)}"
            + (f": {', '.join(show_id(id) for id in moved)}" if moved else "")
        )
        if missing:
            _note(
                "rehydrate: not requeued (no such dead letter, not a scheduler's record, or the id is "
                "live again): " + ", ".join(show_id(id) for id in missing)
            )
    return 1 if missing else 0


# -- the commands ------------------------------------------------------------------------------

_EXIT_VERB = """\
exit status:
  0    done
  1    {one}, or an error (one line on stderr)
  2    a malformed command line
  141  the output was closed early (e.g. piped into head)"""
_DASHES = """\
An id or payload that starts with '-' goes after '--' (rehydrate pull jobs -- -x),
or as --id=-x."""
_OUTPUT = "Output: JSON when piped, text on a terminal (--format)."


def _epilog(one: str, *more: str) -> str:
    return "\n\n".join([*more, _OUTPUT, _DASHES, _EXIT_VERB.format(one=one)])


def register(commands: Commands) -> None:
    """Add ReDe's verbs and the operating ones (``stats``, ``workers``, ``dead``, ``requeue``)."""

    def verb(name: str, run: Verb, help: str, description: str, epilog: str) -> Parser:
        sub = commands.add(name, help, description, epilog, run_verb, commands.store)
        sub.add_argument("name", metavar="NAME", help="the dehydrator")
        sub.set_defaults(verb=run, light=True)
        return sub

    def id_argument(sub: Parser, what: str) -> None:
        sub.add_argument("id", metavar="ID", help=what + " (after '--' if it starts with '-')")

    # -- ReDe's verbs
    push_cmd = verb(
        "push",
        push,
        "dehydrate a JSON payload for a while (PUSH/GIDPUSH)",
        "Dehydrate PAYLOAD into NAME: it is due after --delay (or at --at), under --id or a generated "
        "id, which is printed. ReDe's PUSH (GIDPUSH without --id).",
        _epilog("an element with that id is already there (see --replace)"),
    )
    push_cmd.add_argument(
        "payload",
        type=str,
        metavar="PAYLOAD",
        help="JSON, e.g. '{\"to\": \"ann\"}' or '\"text\"' ('-' reads UTF-8 from stdin); no NaN/Infinity",
    )
    when = push_cmd.add_mutually_exclusive_group()
    when.add_argument("--delay", type=duration, default=0.0, help="e.g. 1500ms, 5s, 2m, 1h (default 0)")
    when.add_argument(
        "--at", type=aware_datetime, help="ISO 8601 time with a UTC offset or Z, e.g. 2026-12-24T18:00:00Z"
    )
    push_cmd.add_argument(
        "--id", help="the element's id (default: a generated one); --id=-x if it starts with '-'"
    )
    push_cmd.add_argument("--replace", action="store_true", help="replace the element under --id, due anew")

    pull_cmd = verb(
        "pull",
        pull,
        "remove and print an element, due or not (PULL)",
        "Remove the element ID from NAME, due or not, and print it. If printing fails, it is put back. "
        "ReDe's PULL.",
        _epilog("no element ID in NAME (prints null as JSON)"),
    )
    id_argument(pull_cmd, "the element to remove")
    look_cmd = verb(
        "look",
        look,
        "print an element without removing it (LOOK)",
        "Print the element ID of NAME, leaving it in place. ReDe's LOOK.",
        _epilog("no element ID in NAME (prints null as JSON)"),
    )
    id_argument(look_cmd, "the element to print")
    poll_cmd = verb(
        "poll",
        poll,
        "remove and print every due element, in due order (POLL)",
        "Print the due elements of NAME in due order and remove them once printed. They are claimed "
        "first: if printing fails they are due again at once, and if the command is killed they come "
        "back when their 60s lease runs out. ReDe's POLL.",
        _epilog("a printed element could not be removed (claimed again after its lease ran out)"),
    )
    poll_cmd.add_argument("--limit", type=positive_int, help="at most this many")
    xpoll_cmd = verb(
        "xpoll",
        xpoll,
        "print the ids of the due elements, removing nothing (XPOLL)",
        "Print the ids of the due elements of NAME in due order, one a line, removing nothing; "
        "acknowledge them with xack. In text, an id holding a control character (a newline...) or "
        "space at either end, or starting with '\"', is printed as a JSON string. ReDe's XPOLL.",
        _epilog("never (an empty dehydrator prints nothing)"),
    )
    xpoll_cmd.add_argument("--limit", type=positive_int, help="at most this many")
    xack_cmd = verb(
        "xack",
        xack,
        "remove the given due elements and print them (XACK)",
        "Remove each ID that is due (or claimed) from NAME and print it; the others are left alone "
        "and printed as null. If printing fails, the removed ones are put back. ReDe's XACK.",
        _epilog("never for unknown ids"),
    )
    xack_cmd.add_argument(
        "ids", nargs="+", metavar="ID", help="the elements to remove (after '--' if one starts with '-')"
    )
    verb(
        "ttn",
        ttn,
        "seconds until the next element is due (TTN)",
        "Print the seconds until the next element of NAME is due: 0 if one is, null (JSON) or 'empty' "
        "(text) if NAME holds nothing. ReDe's TTN.",
        _epilog("never for an empty dehydrator"),
    )
    update_cmd = verb(
        "update",
        update,
        "replace an element's payload, keeping its due time (UPDATE)",
        "Replace the payload of ID in NAME, keeping its due time, and print the old one. ReDe's UPDATE.",
        _epilog("no element ID in NAME"),
    )
    id_argument(update_cmd, "the element to change")
    update_cmd.add_argument("payload", type=str, metavar="PAYLOAD", help="JSON ('-' reads UTF-8 from stdin)")

    # -- operating
    stats_cmd = commands.add(
        "stats",
        "size, due, claimed, dead letters and next due, per dehydrator",
        "Print each dehydrator's size, due and claimed elements, dead letters (the elements of "
        "NAME.dead, listed by 'rehydrate dead NAME') and when the next one is due: JSON gives "
        "next_due_in (seconds) and next_due_at (ISO 8601, UTC). Below, each limit with state "
        "(handler(limits=...)): its keys, holders, waiting elements, capacity and the saturation "
        "of its fullest key; JSON gives it as each dehydrator's 'limit' (null: none), with "
        "'rehydrate limits' naming the fields.",
        _epilog("never"),
        run_verb,
        commands.store,
    )
    stats_cmd.add_argument("name", nargs="?", metavar="NAME", help="only this dehydrator")
    stats_cmd.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    stats_cmd.add_argument(
        "--interval",
        type=interval,
        default=1.0,
        help="refresh period with --watch (default 1s, at least 100ms)",
    )
    stats_cmd.add_argument("--count", type=positive_int, help="with --watch, stop after this many refreshes")
    stats_cmd.set_defaults(verb=stats, light=True)

    workers_cmd = commands.add(
        "workers",
        "the workers alive (and those that died lately), from their heartbeats",
        "List the workers (running schedulers) that send heartbeats to the store: alive or expired, "
        "host, pid, handlers with what each has in flight out of its concurrency, lateness (p50/p99 "
        "of recent deliveries) and when each was last heard from. A worker that stopped cleanly is "
        "not listed; one that died is listed as expired for an hour after its heartbeat ran out "
        "(three heartbeat intervals). JSON gives last_seen_ago and expires_in (negative once "
        "expired), in seconds.",
        _epilog("never"),
        run_verb,
        commands.store,
    )
    workers_cmd.set_defaults(verb=workers, light=True)

    dead_cmd = verb(
        "dead",
        dead,
        "list a dehydrator's dead letters",
        "List the dead letters of NAME, oldest first: the elements a scheduler gave up on, kept in "
        "NAME.dead with their error, attempts and failure time (JSON: failed_at, ISO 8601 UTC, and "
        "failed_ago, seconds). Anything else in NAME.dead is listed as it is.",
        _epilog("never"),
    )
    dead_cmd.add_argument("--limit", type=positive_int, help="at most this many")
    requeue_cmd = verb(
        "requeue",
        requeue,
        "put dead letters back (all, or the given ids)",
        "Put the dead letters of NAME (all, or the given ids) back into NAME, due after --delay. A "
        "dead letter whose id is live again in NAME stays where it is.",
        _epilog("a given id was not requeued"),
    )
    requeue_cmd.set_defaults(light=False)
    requeue_cmd.add_argument(
        "ids", nargs="*", metavar="ID", help="the dead letters to put back (default: all)"
    )
    requeue_cmd.add_argument("--delay", type=duration, default=0.0, help="due after this long (default 0)")


def _check_text(args: argparse.Namespace) -> None:
    """Names and ids must be Unicode text (bytes that are not UTF-8 arrive as lone surrogates)."""
    for what in ("name", "id"):
        value = getattr(args, what, None)
        if isinstance(value, str):
            unicode_text(value, f"the {what} {value!r}")
    for value in getattr(args, "ids", None) or []:
        unicode_text(value, f"the id {value!r}")


def run_verb(args: argparse.Namespace, store: Store | None = None) -> int:
    """Run the command's verb (``args.verb``, one call on the store): open the store, run it, close
    the store (unless it was lent to us, as tests do). Runs the schedule verbs too."""
    from rehydrate.cli import _oneshot

    if getattr(args, "replace", False) and args.id is None:
        args.parser.error("--replace needs --id: the element to replace")
    _check_text(args)
    if getattr(args, "payload", None) is not None:
        args.payload = payload(args.payload)
    verb: Verb = args.verb
    if store is None:
        url = _common.store_url(args)
        if _oneshot.applies(args, url):
            return _oneshot.run(verb, args, url)

    import anyio

    async def body() -> int:
        if store is not None:
            return await verb(args, store)
        async with _common.open_from(args) as opened:
            return await verb(args, opened)

    try:
        return anyio.run(body)
    except KeyboardInterrupt:
        if args.command == "stats":  # stats --watch ends with Ctrl-C
            return 0
        raise  # 130; poll has released its claims, pull and xack put back what they took
