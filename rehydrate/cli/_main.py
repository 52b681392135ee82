"""Argument parsing and dispatch for the ``rehydrate`` command.

Mistakes a person can make (a bad URL, duration or JSON payload, an unreachable server, a module
that is not there) print one line and exit non-zero: 2 for a malformed command line, 1 otherwise.
Output closed early (``rehydrate look ... | head``) exits quietly with 141, the status of a command
killed by SIGPIPE, as ``cat`` or ``git`` report it to a shell with ``set -o pipefail``. Anything
else is a bug and keeps its traceback.

Start-up time matters (a shell script pays it per verb): the modules of ``worker``, ``demo``,
``bench`` and ``completion``, the scheduler and structlog are imported only by the commands that
use them.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, cast

from rehydrate._version import __version__
from rehydrate.cli import _common
from rehydrate.cli._common import (
    BadValue,
    aware_datetime,
    duration,
    error_line,
    error_message,
    interval,
    leaves,
    payload,
    person_error,
    positive_int,
    unicode_text,
)
from rehydrate.cli._dashboard import TOKEN_ENV, port

if TYPE_CHECKING:
    from rehydrate.abc import Store

#: The exit status when the output was closed early: 128 + SIGPIPE, what a shell reports for a
#: command killed by a closed pipe.
EXIT_CLOSED_PIPE: Final = 141

_JSON_ERRORS = False  # --log-format json was asked for: parse errors too are JSON lines


#: What argparse takes for a value rather than an option: a dash and a digit (``-1``, ``-5s``,
#: ``-.5``), as Python 3.13's argparse does. Python 3.11's took only numbers, so ``--delay -5s``
#: failed with "expected one argument" instead of being refused as a negative duration.
_NEGATIVE: Final = re.compile(r"^-\.?\d")


def _option_name(action: argparse.Action) -> str:
    """How an option is named in an error: its long spelling (``--delay``), or a positional's."""
    if action.option_strings:
        return max(action.option_strings, key=len)
    return str(action.metavar or action.dest)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        """A value refused by its ``type=`` (:class:`BadValue`) leaves the parser as it is, with
        the option's name, to be reported in one line with exit status 1; argparse would report
        it as a malformed command line (exit status 2)."""
        try:
            return super()._get_value(action, arg_string)
        except BadValue as exc:
            raise BadValue(f"{_option_name(action)}: {exc}") from None

    def error(self, message: str) -> NoReturn:
        text = f"{message} (see {self.prog} --help)"
        if _JSON_ERRORS:
            self.exit(2, error_line(text, "json") + "\n")
        self.exit(2, f"{self.prog}: error: {text}\n")


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


def _exits(zero: str, one: str | None) -> str:
    lines = [
        "exit status:",
        f"  0    {zero}",
        *([f"  1    {one}"] if one else []),
        "  2    a malformed command line",
    ]
    return "\n".join(lines)


def _wrap(text: str) -> str:
    """Fill each paragraph to 78 columns; indented lines (examples, tables) stay as they are."""
    import textwrap

    return "\n\n".join(
        p if p.startswith(" ") or "\n " in p else textwrap.fill(p, 78) for p in text.split("\n\n")
    )


def _epilog(one: str, *more: str) -> str:
    return "\n\n".join([*more, _OUTPUT, _DASHES, _EXIT_VERB.format(one=one)])


class _WorkerTexts:
    """The worker's help, from its module, which is imported only when needed (it is not light)."""

    def __init__(self, load: bool) -> None:
        if load:
            from rehydrate.cli import _worker

            self.description, self.epilog, self.store_help = (
                _worker.DESCRIPTION,
                _worker.EPILOG,
                _worker.STORE_HELP,
            )
        else:  # a store verb is running: the worker's help cannot be asked for
            self.description = self.epilog = self.store_help = "(see rehydrate worker --help)"


#: The commands that run in one short process and import only what they use.
_STORE_VERBS: Final = frozenset(
    {"push", "pull", "look", "poll", "xpoll", "xack", "ttn", "update", "stats", "dead", "requeue", "workers"}
)
#: The main parser's options that take a value (to find the command in a command line).
_VALUED: Final = frozenset({"--store", "--log-format", "--format"})


def _command_of(words: list[str]) -> str | None:
    """The command a command line names (``None`` if unsure), before it is parsed."""
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in _VALUED:
            skip = True
        elif word == "--":
            return None
        elif not word.startswith("-"):
            return word
    return None


class _Unused:
    """What ``command()`` returns for a command that is not the one to run: it takes every call
    that builds a parser and keeps nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


def build_parser(*, store_verb: bool = False, only: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``store_verb``: a store verb is to run, leave the worker's help out.

    ``only``: build that command alone (the one the command line names). Building every
    command's parser was a third of a one-shot verb's start-up; its help still lists it alone.
    """
    worker_texts = _WorkerTexts(load=not store_verb)
    parser = _Parser(
        prog="rehydrate",
        description="Delayed delivery, reliably: run and inspect dehydrators.",
        epilog=_wrap(
            "The options above work before or after the command. 'rehydrate COMMAND --help' for more; "
            "'rehydrate completion bash|zsh|fish' for shell completion."
        ),
    )
    parser.add_argument("--version", action="version", version=f"rehydrate {__version__}")
    # Options that work on both sides of the command: the command's own copy has a dest of its own
    # (a subparser's defaults would overwrite the main parser's values), merged in run().
    for side, prefix in [(parser, "global_"), (common := _Parser(add_help=False), "")]:
        side.add_argument(
            "-v", "--verbose", dest=prefix + "verbosity", action="count", default=0, help="more logging"
        )
        side.add_argument(
            "-q", "--quiet", dest=prefix + "quiet", action="count", default=0, help="less logging"
        )
        side.add_argument(
            "--log-format",
            dest=prefix + "log_format",
            choices=["console", "json"],
            help="console lines (coloured on a terminal) or JSON lines; logs go to stderr (default console)",
        )
    parser.add_argument(
        "--store", dest="global_store", metavar="URL", help=f"the store (default: ${_common.STORE_ENV})"
    )
    parser.add_argument(
        "--format", dest="global_format", choices=["auto", "json", "text"], help="output of the store verbs"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    store = _Parser(add_help=False)
    store.add_argument(
        "--store",
        metavar="URL",
        help=f"memory://, sqlite:///path.db, redis://host:6379/0 (default: ${_common.STORE_ENV})",
    )
    store.add_argument(
        "--format",
        choices=["auto", "json", "text"],
        help="output: JSON when piped, text on a terminal (auto, the default), or as given",
    )

    def command(name: str, help: str, description: str, epilog: str, run: str, *parents: Any) -> _Parser:
        if only is not None and name != only:
            return cast(_Parser, _Unused())
        sub: _Parser = commands.add_parser(
            name, help=help, description=_wrap(description), epilog=_wrap(epilog), parents=[common, *parents]
        )
        sub.set_defaults(run=run, parser=sub)
        return sub

    # -- running ---------------------------------------------------------------------------------
    worker = command(
        "worker",
        "run a scheduler's handlers until SIGTERM/SIGINT/SIGHUP",
        worker_texts.description,
        worker_texts.epilog,
        "rehydrate.cli._worker:run",
    )
    worker.add_argument("target", metavar="MODULE:ATTR", help="e.g. myapp.tasks:scheduler")
    worker.add_argument("--store", metavar="URL", help=worker_texts.store_help)
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
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop (default asyncio; trio needs pip install 'rehydrate[trio]')",
    )
    worker.add_argument(
        "--heartbeat",
        type=duration,
        metavar="DURATION",
        help="seconds between heartbeats to the store (default: the scheduler's, 5s); expires after 3",
    )
    worker.add_argument(
        "--wait",
        type=duration,
        # A store restarted beside its workers (a compose file, a rolling deploy) is back within
        # a minute; a worker that exited at once would only be restarted into the same failure.
        default=60.0,
        metavar="DURATION",
        help="at start-up, wait this long for a store that cannot be reached, trying again with "
        "backoff (default 1m; 0: fail at once)",
    )
    worker.add_argument(
        "--metrics-port",
        type=port,
        metavar="N",
        help="serve Prometheus metrics on this port (with --processes, child i on N+i)",
    )
    worker.add_argument(
        "--metrics-host", default="127.0.0.1", metavar="HOST", help="where metrics listen (default 127.0.0.1)"
    )

    demo = command(
        "demo",
        "a short tour on the embedded store, no server needed",
        "Defer a few hundred elements to three handlers on the memory store (one always works, one "
        "fails once then succeeds, one always fails and ends as a dead letter), cancel a few, show "
        "progress, and end with a summary: delivered, retried, dead-lettered, lateness.",
        _exits("the outcome was as expected", "it was not, or an error"),
        "rehydrate.cli._demo:run",
    )
    demo.add_argument(
        "--elements", type=positive_int, default=300, help="how many elements to defer (default 300)"
    )
    demo.add_argument(
        "--seconds", type=duration, default=6.0, help="spread their delays over this long (default 6s)"
    )
    demo.add_argument("--seed", type=int, default=7, help="random seed for the delays")
    demo.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop (default asyncio; trio needs pip install 'rehydrate[trio]')",
    )

    bench = command(
        "bench",
        "run the benchmarks in benchmarks/ and print their tables",
        "Run the benchmark scripts of a source checkout, one after the other, and print their tables.",
        _exits("all ran", "one failed (its output is shown), or an error"),
        "rehydrate.cli._bench:run",
    )
    bench.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="which to run: core, push-floor, scheduler, sqlite, redis, workers, redis-lateness, defer, "
        "retries, schedules, cli (default: all)",
    )
    bench.add_argument("--quick", action="store_true", help="smaller runs: minutes, not tens of minutes")
    bench.add_argument("--dir", help="the benchmarks directory (default: found beside the package or in .)")

    completion = command(
        "completion",
        "print a shell completion script (bash, zsh or fish)",
        "Print a completion script for SHELL, generated from this command's own options. Install it:\n\n"
        "  bash: rehydrate completion bash > ~/.local/share/bash-completion/completions/rehydrate\n"
        "  zsh:  rehydrate completion zsh > ~/.zfunc/_rehydrate  (with fpath+=~/.zfunc before compinit)\n"
        "  fish: rehydrate completion fish > ~/.config/fish/completions/rehydrate.fish\n\n"
        "or for this shell only: source <(rehydrate completion bash).",
        _exits("printed", None),
        "rehydrate.cli._main:_completion",
    )
    completion.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell")

    migrate = command(
        "migrate",
        "create (or check, with --check) the store's tables",
        "Create or upgrade the tables of a store that keeps a schema in a shared database "
        "(PostgreSQL); with --check, change nothing and exit 1 unless the schema is up to date.",
        _exits(
            "done (or up to date, with --check)", "the schema is missing or outdated (--check), or an error"
        ),
        "rehydrate.cli._migrate:run",
    )
    migrate.add_argument("--store", metavar="URL", help=f"the store (default: ${_common.STORE_ENV})")
    migrate.add_argument("--check", action="store_true", help="only check; create nothing")

    dashboard = command(
        "dashboard",
        "serve a web dashboard and /metrics (Prometheus) for a store",
        "A live web page of every dehydrator (counts, charts, elements, dead letters, and actions: "
        "requeue, delete, cancel, run now) and /metrics for Prometheus, served by Hypercorn until "
        f"SIGTERM/SIGINT. Beyond loopback it needs a token (--token or ${TOKEN_ENV}). Needs the web "
        "extra: pip install 'rehydrate[web]'.",
        _exits("stopped by a signal", "an error (one line on stderr)"),
        "rehydrate.cli._dashboard:run",
    )
    dashboard.add_argument(
        "--store",
        metavar="URL",
        help=f"memory://, sqlite:///path.db, redis://host:6379/0 (default: ${_common.STORE_ENV})",
    )
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    dashboard.add_argument("--port", type=port, default=8000, help="port to listen on (default 8000)")
    dashboard.add_argument("--token", help=f"required of every visitor (default: ${TOKEN_ENV})")
    dashboard.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop (default asyncio; trio needs pip install 'rehydrate[trio]')",
    )

    from rehydrate.cli import _serve

    _serve.register(command)

    # -- ReDe's verbs ----------------------------------------------------------------------------
    def verb(name: str, help: str, description: str, epilog: str) -> _Parser:
        sub = command(name, help, description, epilog, "rehydrate.cli._main:_run_verb", store)
        sub.add_argument("name", metavar="NAME", help="the dehydrator")
        sub.set_defaults(verb=name, light=True)
        return sub

    def id_argument(sub: _Parser, what: str) -> None:
        sub.add_argument("id", metavar="ID", help=what + " (after '--' if it starts with '-')")

    push = verb(
        "push",
        "dehydrate a JSON payload for a while (PUSH/GIDPUSH)",
        "Dehydrate PAYLOAD into NAME: it is due after --delay (or at --at), under --id or a generated "
        "id, which is printed. ReDe's PUSH (GIDPUSH without --id).",
        _epilog("an element with that id is already there (see --replace)"),
    )
    push.add_argument(
        "payload",
        type=str,
        metavar="PAYLOAD",
        help="JSON, e.g. '{\"to\": \"ann\"}' or '\"text\"' ('-' reads UTF-8 from stdin); no NaN/Infinity",
    )
    when = push.add_mutually_exclusive_group()
    when.add_argument("--delay", type=duration, default=0.0, help="e.g. 1500ms, 5s, 2m, 1h (default 0)")
    when.add_argument(
        "--at", type=aware_datetime, help="ISO 8601 time with a UTC offset or Z, e.g. 2026-12-24T18:00:00Z"
    )
    push.add_argument(
        "--id", help="the element's id (default: a generated one); --id=-x if it starts with '-'"
    )
    push.add_argument("--replace", action="store_true", help="replace the element under --id, due anew")

    pull = verb(
        "pull",
        "remove and print an element, due or not (PULL)",
        "Remove the element ID from NAME, due or not, and print it. If printing fails, it is put back. "
        "ReDe's PULL.",
        _epilog("no element ID in NAME (prints null as JSON)"),
    )
    id_argument(pull, "the element to remove")
    look = verb(
        "look",
        "print an element without removing it (LOOK)",
        "Print the element ID of NAME, leaving it in place. ReDe's LOOK.",
        _epilog("no element ID in NAME (prints null as JSON)"),
    )
    id_argument(look, "the element to print")
    poll = verb(
        "poll",
        "remove and print every due element, in due order (POLL)",
        "Print the due elements of NAME in due order and remove them once printed. They are claimed "
        "first: if printing fails they are due again at once, and if the command is killed they come "
        "back when their 60s lease runs out. ReDe's POLL.",
        _epilog("a printed element could not be removed (claimed again after its lease ran out)"),
    )
    poll.add_argument("--limit", type=positive_int, help="at most this many")
    xpoll = verb(
        "xpoll",
        "print the ids of the due elements, removing nothing (XPOLL)",
        "Print the ids of the due elements of NAME in due order, one a line, removing nothing; "
        "acknowledge them with xack. In text, an id holding a control character (a newline...) or "
        "space at either end, or starting with '\"', is printed as a JSON string. ReDe's XPOLL.",
        _epilog("never (an empty dehydrator prints nothing)"),
    )
    xpoll.add_argument("--limit", type=positive_int, help="at most this many")
    xack = verb(
        "xack",
        "remove the given due elements and print them (XACK)",
        "Remove each ID that is due (or claimed) from NAME and print it; the others are left alone "
        "and printed as null. If printing fails, the removed ones are put back. ReDe's XACK.",
        _epilog("never for unknown ids"),
    )
    xack.add_argument(
        "ids", nargs="+", metavar="ID", help="the elements to remove (after '--' if one starts with '-')"
    )
    verb(
        "ttn",
        "seconds until the next element is due (TTN)",
        "Print the seconds until the next element of NAME is due: 0 if one is, null (JSON) or 'empty' "
        "(text) if NAME holds nothing. ReDe's TTN.",
        _epilog("never for an empty dehydrator"),
    )
    update = verb(
        "update",
        "replace an element's payload, keeping its due time (UPDATE)",
        "Replace the payload of ID in NAME, keeping its due time, and print the old one. ReDe's UPDATE.",
        _epilog("no element ID in NAME"),
    )
    id_argument(update, "the element to change")
    update.add_argument("payload", type=str, metavar="PAYLOAD", help="JSON ('-' reads UTF-8 from stdin)")

    # -- operating -------------------------------------------------------------------------------
    stats = command(
        "stats",
        "size, due, claimed, dead letters and next due, per dehydrator",
        "Print each dehydrator's size, due and claimed elements, dead letters (the elements of "
        "NAME.dead, listed by 'rehydrate dead NAME') and when the next one is due: JSON gives "
        "next_due_in (seconds) and next_due_at (ISO 8601, UTC).",
        _epilog("never"),
        "rehydrate.cli._main:_run_verb",
        store,
    )
    stats.add_argument("name", nargs="?", metavar="NAME", help="only this dehydrator")
    stats.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    stats.add_argument(
        "--interval",
        type=interval,
        default=1.0,
        help="refresh period with --watch (default 1s, at least 100ms)",
    )
    stats.add_argument("--count", type=positive_int, help="with --watch, stop after this many refreshes")
    stats.set_defaults(verb="stats", light=True)

    workers = command(
        "workers",
        "the workers alive (and those that died lately), from their heartbeats",
        "List the workers (running schedulers that serve handlers or channels; a process that only "
        "defers is none) that send heartbeats to the store: alive or expired, "
        "host, pid, handlers with what each has in flight out of its concurrency, lateness (p50/p99 "
        "of recent deliveries) and when each was last heard from. A worker that stopped cleanly is "
        "not listed; one that died is listed as expired for an hour after its heartbeat ran out "
        "(three heartbeat intervals). JSON gives last_seen_ago and expires_in (negative once "
        "expired), in seconds.",
        _epilog("never"),
        "rehydrate.cli._main:_run_verb",
        store,
    )
    workers.set_defaults(verb="workers", light=True)

    dead = verb(
        "dead",
        "list a dehydrator's dead letters",
        "List the dead letters of NAME, oldest first: the elements a scheduler gave up on, kept in "
        "NAME.dead with their error, attempts and failure time (JSON: failed_at, ISO 8601 UTC, and "
        "failed_ago, seconds). Anything else in NAME.dead is listed as it is.",
        _epilog("never"),
    )
    dead.add_argument("--limit", type=positive_int, help="at most this many")
    requeue = verb(
        "requeue",
        "put dead letters back (all, or the given ids)",
        "Put the dead letters of NAME (all, or the given ids) back into NAME, due after --delay. A "
        "dead letter whose id is live again in NAME stays where it is.",
        _epilog("a given id was not requeued"),
    )
    requeue.set_defaults(light=False)
    requeue.add_argument("ids", nargs="*", metavar="ID", help="the dead letters to put back (default: all)")
    requeue.add_argument("--delay", type=duration, default=0.0, help="due after this long (default 0)")

    # -- recurring schedules (their verbs live in _schedules, named module:function) --------------
    from rehydrate.cli import _schedules

    _schedules.add_commands(command, store)
    return parser


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _completion(args: argparse.Namespace) -> int:
    from rehydrate.cli._completion import script

    _common.emit(script(build_parser(), args.shell))
    return 0


def _check_text(args: argparse.Namespace) -> None:
    """Names and ids must be Unicode text (bytes that are not UTF-8 arrive as lone surrogates)."""
    for what in ("name", "id"):
        value = getattr(args, what, None)
        if isinstance(value, str):
            unicode_text(value, f"the {what} {value!r}")
    for value in getattr(args, "ids", None) or []:
        unicode_text(value, f"the id {value!r}")


def _run_verb(args: argparse.Namespace, store: Store | None = None) -> int:
    """Open the store, run one verb, close the store (unless it was lent to us, as tests do)."""
    from rehydrate.cli import _oneshot, _verbs

    _check_text(args)
    if getattr(args, "payload", None) is not None:
        args.payload = payload(args.payload)
    verb: _verbs.Verb = _resolve(args.verb) if ":" in args.verb else getattr(_verbs, args.verb)
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
        if args.verb == "stats":  # stats --watch ends with Ctrl-C
            return 0
        raise  # 130; poll has released its claims, pull and xack put back what they took


def _closed_pipe(exc: BaseException) -> bool:
    found = leaves(exc)
    return bool(found) and all(isinstance(leaf, BrokenPipeError) for leaf in found)


def _merge(args: argparse.Namespace) -> None:
    """The options given before the command, or after it (after wins)."""
    args.verbosity = args.global_verbosity + getattr(args, "verbosity", 0)
    args.verbosity -= args.global_quiet + getattr(args, "quiet", 0)
    args.log_format = getattr(args, "log_format", None) or args.global_log_format or "console"
    if getattr(args, "store", None) is None and args.global_store is not None:
        args.store = args.global_store
    if getattr(args, "format", None) is None:
        args.format = args.global_format or "auto"


def _run(argv: Sequence[str] | None, store: Store | None) -> int:
    global _JSON_ERRORS
    words = list(sys.argv[1:] if argv is None else argv)
    _JSON_ERRORS = "--log-format=json" in words or any(
        a == "--log-format" and b == "json" for a, b in itertools.pairwise(words)
    )
    named = _command_of(words)
    only = None
    if named in _STORE_VERBS and not {"-h", "--help"} & set(words[: words.index(named)]):
        only = named  # its parser alone; ``rehydrate -h push`` still lists every command
    parser = build_parser(store_verb=named in _STORE_VERBS, only=only)
    try:
        args = parser.parse_args(words)
    except BadValue as exc:  # a value the command cannot use: 1, as any value it refuses later
        print(error_line(str(exc), "json" if _JSON_ERRORS else "console"), file=sys.stderr)
        return 1
    if args.command is None:  # like git and pip: the help, on stdout; a command was missing (2)
        parser.print_help()
        return 2
    _merge(args)
    if getattr(args, "replace", False) and args.id is None:
        args.parser.error("--replace needs --id: the element to replace")
    if not getattr(args, "light", False):
        _common.configure_logging(args.log_format, args.verbosity)
    try:
        if getattr(args, "backend", None) is not None:  # demo and worker
            _common.require_backend(args.backend)
        lent = store is not None and getattr(args, "verb", None) is not None
        result: int = _run_verb(args, store) if lent else _resolve(args.run)(args)
        return result
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        mistake = person_error(exc)
        if mistake is None:
            raise
        print(error_line(error_message(mistake), args.log_format), file=sys.stderr)
        if args.verbosity > 0:
            raise
        return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass


def run(argv: Sequence[str] | None = None, *, store: Store | None = None) -> int:
    """Parse ``argv`` and run it; ``store`` lends an open store to the verbs (for tests)."""
    try:
        return _run(argv, store)
    except BaseException as exc:
        if not _closed_pipe(exc):
            raise
        _quiet_stdout()
        return EXIT_CLOSED_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    return run(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
