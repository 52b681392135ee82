"""Argument parsing and dispatch for the ``rehydrate`` command.

Mistakes a person can make (a bad URL, duration or JSON payload, an unreachable server, a module
that is not there) print one line and exit non-zero: 2 for a malformed command line, 1 otherwise.
Output closed early (``rehydrate look ... | head``) exits quietly with 141, the status of a command
killed by SIGPIPE, as ``cat`` or ``git`` report it to a shell with ``set -o pipefail``. Anything
else is a bug and keeps its traceback.

Each command is added by its own module, with its help and the function that runs it (their
``register``, see ``_parser``); this one has the main parser, the options that work before or
after the command, and the dispatch. Start-up time matters (a shell script pays it per verb): a
command line that names a command imports that command's module alone, and a command module imports
what it needs to run (the scheduler, structlog, the event loop) only when it runs.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import itertools
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from rehydrate._version import __version__
from rehydrate.cli import _common
from rehydrate.cli._common import BadValue, error_line, error_message, leaves, person_error
from rehydrate.cli._parser import Commands, Parser, wrap

if TYPE_CHECKING:
    from rehydrate.abc import Store

#: The exit status when the output was closed early: 128 + SIGPIPE, what a shell reports for a
#: command killed by a closed pipe.
EXIT_CLOSED_PIPE: Final = 141

#: The modules that add commands (each with its ``register``), in the order ``rehydrate --help``
#: lists them, and the commands each adds: a command line that names one imports its module alone
#: (a shell script pays the start-up of every ``rehydrate push``).
COMMANDS: Final = {
    "rehydrate.cli._worker": ("worker",),
    "rehydrate.cli._demo": ("demo",),
    "rehydrate.cli._bench": ("bench",),
    "rehydrate.cli._completion": ("completion",),
    "rehydrate.cli._migrate": ("migrate",),
    "rehydrate.cli._dashboard": ("dashboard",),
    "rehydrate.cli._serve": ("serve",),
    "rehydrate.cli._verbs": (
        *("push", "pull", "look", "poll", "xpoll", "xack", "ttn", "update"),  # ReDe's verbs
        *("stats", "workers", "dead", "requeue"),
    ),
    "rehydrate.cli._schedules": ("schedules", "schedule", "unschedule", "pause", "resume", "run-now"),
    "rehydrate.cli._limits": ("limits",),
}
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


def build_parser(*, only: str | None = None, json_errors: bool = False) -> argparse.ArgumentParser:
    """The command line: every command, or with ``only``, that command alone, from its module
    alone (the main parser's help then lists it alone: ``rehydrate -h push`` builds them all).
    ``json_errors``: see :class:`Parser`."""
    parser = Parser(
        prog="rehydrate",
        description="Delayed delivery, reliably: run and inspect dehydrators.",
        epilog=wrap(
            "The options above work before or after the command. 'rehydrate COMMAND --help' for more; "
            "'rehydrate completion bash|zsh|fish' for shell completion."
        ),
        json_errors=json_errors,
    )
    parser.add_argument("--version", action="version", version=f"rehydrate {__version__}")
    # Options that work on both sides of the command: the command's own copy has a dest of its own
    # (a subparser's defaults would overwrite the main parser's values), merged in _merge().
    for side, prefix in [(parser, "global_"), (common := Parser(add_help=False), "")]:
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
    commands = Commands(
        parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser),
        common=common,
        only=only,
        whole=functools.partial(build_parser, json_errors=json_errors),
        json_errors=json_errors,
    )
    for module, names in COMMANDS.items():
        if only is None or only in names:
            importlib.import_module(module).register(commands)
    return parser


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
    words = list(sys.argv[1:] if argv is None else argv)
    json_errors = "--log-format=json" in words or any(
        a == "--log-format" and b == "json" for a, b in itertools.pairwise(words)
    )
    named = _command_of(words)
    only = None
    known = named is not None and any(named in names for names in COMMANDS.values())
    if known and not {"-h", "--help"} & set(words[: words.index(str(named))]):
        only = named  # its parser alone; ``rehydrate -h push`` still lists every command
    parser = build_parser(only=only, json_errors=json_errors)
    try:
        args = parser.parse_args(words)
    except BadValue as exc:  # a value the command cannot use: 1, as any value it refuses later
        print(error_line(str(exc), "json" if json_errors else "console"), file=sys.stderr)
        return 1
    if args.command is None:  # like git and pip: the help, on stdout; a command was missing (2)
        parser.print_help()
        return 2
    _merge(args)
    if not getattr(args, "light", False):
        _common.configure_logging(args.log_format, args.verbosity)
    try:
        if getattr(args, "backend", None) is not None:  # demo and worker
            _common.require_backend(args.backend)
        # A store lent to the command line (by tests) goes to the store verbs' runner.
        lent = store is not None and getattr(args, "verb", None) is not None
        result: int = args.run(args, store) if lent else args.run(args)
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
