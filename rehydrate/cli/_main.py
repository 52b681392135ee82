"""Argument parsing and dispatch for the ``rehydrate`` command.

Mistakes a person can make (a bad URL, duration or JSON payload, an unreachable server, a module
that is not there) print one line and exit non-zero: 2 for a malformed command line, 1 otherwise.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

import anyio

from rehydrate.abc import Store
from rehydrate.cli import _bench, _common, _demo, _migrate, _verbs, _worker
from rehydrate.cli._common import CLIError, aware_datetime, duration, payload, positive_int
from rehydrate.errors import RehydrateError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rehydrate", description="Delayed delivery, reliably: run and inspect dehydrators.")
    parser.add_argument("-v", "--verbose", dest="verbosity", action="count", default=0, help="more logging")
    parser.add_argument("-q", "--quiet", dest="quiet", action="count", default=0, help="less logging")
    parser.add_argument(
        "--log-format",
        choices=["console", "json"],
        default="console",
        help="console lines (coloured on a terminal) or JSON lines; logs go to stderr",
    )
    parser.add_argument("--store", dest="global_store", metavar="URL", help="the store, for any command")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    store = _Parser(add_help=False)
    store.add_argument(
        "--store",
        metavar="URL",
        help=f"memory://, sqlite:///path.db, redis://host:6379/0 (default: ${_common.STORE_ENV})",
    )
    store.add_argument(
        "--format",
        choices=["auto", "json", "text"],
        default="auto",
        help="output: JSON when piped, text on a terminal (auto), or as given",
    )

    # -- running ---------------------------------------------------------------------------------
    worker = commands.add_parser(
        "worker",
        help="run a scheduler's handlers until SIGTERM/SIGINT/SIGHUP",
        description=_worker.DESCRIPTION,
        epilog=_worker.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worker.add_argument("target", metavar="MODULE:ATTR", help="e.g. myapp.tasks:scheduler")
    worker.add_argument("--store", metavar="URL", help=_worker.STORE_HELP)
    worker.add_argument(
        "--concurrency", type=positive_int, metavar="N", help="elements in flight per handler"
    )
    worker.add_argument(
        "--processes", type=positive_int, default=1, metavar="N", help="worker processes (default 1)"
    )
    worker.add_argument(
        "--grace", type=duration, metavar="DURATION", help="shutdown grace (default: the scheduler's)"
    )
    worker.add_argument(
        "--backend", choices=["asyncio", "trio"], default="asyncio", help="event loop (default asyncio)"
    )
    worker.set_defaults(run=_worker.run)

    demo = commands.add_parser("demo", help="a short tour on the embedded store, no server needed")
    demo.add_argument(
        "--elements", type=positive_int, default=300, help="how many elements to defer (default 300)"
    )
    demo.add_argument(
        "--seconds", type=duration, default=6.0, help="spread their delays over this long (default 6s)"
    )
    demo.add_argument("--seed", type=int, default=7, help="random seed for the delays")
    demo.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    demo.set_defaults(run=_demo.run)

    bench = commands.add_parser("bench", help="run the benchmarks in benchmarks/ and print their tables")
    bench.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"which to run: {', '.join(_bench.BENCHMARKS)} (default: all)",
    )
    bench.add_argument("--quick", action="store_true", help="smaller runs: minutes, not tens of minutes")
    bench.add_argument("--dir", help="the benchmarks directory (default: found beside the package or in .)")
    bench.set_defaults(run=_bench.run)

    migrate = commands.add_parser(
        "migrate",
        help="create (or check, with --check) the store's tables",
        description="Create or upgrade the tables of a store that keeps a schema in a shared database "
        "(PostgreSQL); with --check, change nothing and exit 1 unless the schema is up to date.",
    )
    migrate.add_argument("--store", metavar="URL", help=f"the store (default: ${_common.STORE_ENV})")
    migrate.add_argument("--check", action="store_true", help="only check; create nothing")
    migrate.set_defaults(run=_migrate.run)

    # -- ReDe's verbs ----------------------------------------------------------------------------
    def verb(name: str, help: str, func: _verbs.Verb) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, parents=[store])
        sub.add_argument("name", metavar="NAME", help="the dehydrator")
        sub.set_defaults(run=_run_verb, verb=func)
        return sub

    push = verb("push", "dehydrate a JSON payload for a while (PUSH/GIDPUSH)", _verbs.push)
    push.add_argument("payload", type=str, metavar="PAYLOAD", help="JSON ('-' reads stdin)")
    when = push.add_mutually_exclusive_group()
    when.add_argument("--delay", type=duration, default=0.0, help="e.g. 1500ms, 5s, 2m, 1h (default 0)")
    when.add_argument("--at", type=aware_datetime, help="ISO 8601 time; without an offset it is UTC")
    push.add_argument("--id", help="the element's id (default: a generated one)")
    push.add_argument("--replace", action="store_true", help="replace the element under --id, due anew")
    for name, help, func in [
        ("pull", "remove and print an element, due or not (PULL)", _verbs.pull),
        ("look", "print an element without removing it (LOOK)", _verbs.look),
    ]:
        verb(name, help, func).add_argument("id", metavar="ID")
    for name, help, func in [
        ("poll", "remove and print every due element, in due order (POLL)", _verbs.poll),
        ("xpoll", "print the ids of the due elements, removing nothing (XPOLL)", _verbs.xpoll),
    ]:
        verb(name, help, func).add_argument("--limit", type=positive_int, help="at most this many")
    verb("xack", "remove the given due elements and print them (XACK)", _verbs.xack).add_argument(
        "ids", nargs="+", metavar="ID"
    )
    verb("ttn", "seconds until the next element is due (TTN)", _verbs.ttn)
    update = verb("update", "replace an element's payload, keeping its due time (UPDATE)", _verbs.update)
    update.add_argument("id", metavar="ID")
    update.add_argument("payload", type=str, metavar="PAYLOAD", help="JSON ('-' reads stdin)")

    # -- operating -------------------------------------------------------------------------------
    stats = commands.add_parser(
        "stats", help="size, due, claimed, dead letters and next due, per dehydrator", parents=[store]
    )
    stats.add_argument("name", nargs="?", metavar="NAME", help="only this dehydrator")
    stats.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    stats.add_argument(
        "--interval", type=duration, default=1.0, help="refresh period with --watch (default 1s)"
    )
    stats.add_argument("--count", type=positive_int, help="with --watch, stop after this many refreshes")
    stats.set_defaults(run=_run_verb, verb=_verbs.stats)

    dead = verb("dead", "list a dehydrator's dead letters", _verbs.dead)
    dead.add_argument("--limit", type=positive_int, help="at most this many")
    requeue = verb("requeue", "put dead letters back (all, or the given ids)", _verbs.requeue)
    requeue.add_argument("ids", nargs="*", metavar="ID")
    requeue.add_argument("--delay", type=duration, default=0.0, help="due after this long (default 0)")
    return parser


def _run_verb(args: argparse.Namespace, store: Store | None = None) -> int:
    """Open the store, run one verb, close the store (unless it was lent to us, as tests do)."""
    if getattr(args, "payload", None) is not None:
        args.payload = payload(args.payload)

    async def body() -> int:
        verb: _verbs.Verb = args.verb
        if store is not None:
            return await verb(args, store)
        async with _common.open_from(args) as opened:
            return await verb(args, opened)

    try:
        return anyio.run(body)
    except KeyboardInterrupt:  # stats --watch ends with Ctrl-C
        return 0


def _person_error(exc: BaseException) -> BaseException | None:
    """The mistake to report in one line, if ``exc`` is (or a task group wraps only) such mistakes."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_person_error(e) for e in exc.exceptions]
        return leaves[0] if leaves and all(leaves) else None
    if isinstance(exc, (CLIError, RehydrateError)):
        return exc
    return None


def _message(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, CLIError):
        return text
    return f"{text} ({type(exc).__name__})" if text else type(exc).__name__


def run(argv: Sequence[str] | None = None, *, store: Store | None = None) -> int:
    """Parse ``argv`` and run it; ``store`` lends an open store to the verbs (for tests)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.verbosity -= args.quiet
    if getattr(args, "store", None) is None and args.global_store is not None:
        args.store = args.global_store
    _common.configure_logging(args.log_format, args.verbosity)
    try:
        lent = store is not None and getattr(args, "verb", None) is not None
        result: int = _run_verb(args, store) if lent else args.run(args)
        return result
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        mistake = _person_error(exc)
        if mistake is None:
            raise
        print(f"rehydrate: error: {_message(mistake)}", file=sys.stderr)
        if args.verbosity > 0:
            raise
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
