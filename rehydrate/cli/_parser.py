"""What the command modules build their commands with: the parser and :class:`Commands`.

Each command module (``_worker``, ``_verbs``, ``_schedules``...) has a ``register(commands)`` that
adds its commands to a :class:`Commands` and binds the function that runs each; ``_main`` builds
the ``rehydrate`` parser from them. Registering is cheap: a command module imports what it needs
to *run* inside the function that runs it, so that building the parser imports nothing heavy.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any, Final, NoReturn, cast

from rehydrate.cli._common import STORE_ENV, BadValue, error_line

__all__ = ["Commands", "Parser", "exits", "wrap"]

#: What argparse takes for a value rather than an option: a dash and a digit (``-1``, ``-5s``,
#: ``-.5``), as Python 3.13's argparse does. Python 3.11's took only numbers, so ``--delay -5s``
#: failed with "expected one argument" instead of being refused as a negative duration.
_NEGATIVE: Final = re.compile(r"^-\.?\d")


def _option_name(action: argparse.Action) -> str:
    """How an option is named in an error: its long spelling (``--delay``), or a positional's."""
    if action.option_strings:
        return max(action.option_strings, key=len)
    return str(action.metavar or action.dest)


class Parser(argparse.ArgumentParser):
    """The parser of ``rehydrate`` and of each of its commands.

    ``json_errors``: report a malformed command line as a JSON log line (``--log-format json``
    was asked for: a log collector reads the errors too).
    """

    def __init__(self, *args: Any, json_errors: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self.json_errors = json_errors
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
        if self.json_errors:
            self.exit(2, error_line(text, "json") + "\n")
        self.exit(2, f"{self.prog}: error: {text}\n")


def wrap(text: str) -> str:
    """Fill each paragraph to 78 columns; indented lines (examples, tables) stay as they are."""
    import textwrap

    return "\n\n".join(
        p if p.startswith(" ") or "\n " in p else textwrap.fill(p, 78) for p in text.split("\n\n")
    )


def exits(zero: str, one: str | None) -> str:
    """The ``exit status:`` table of a command's help: what 0 and 1 mean (2 is always a usage
    error)."""
    lines = [
        "exit status:",
        f"  0    {zero}",
        *([f"  1    {one}"] if one else []),
        "  2    a malformed command line",
    ]
    return "\n".join(lines)


class _Unused:
    """What :meth:`Commands.add` returns for a command that is not the one to run: it takes every
    call that builds a parser and keeps nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


class Commands:
    """Where a command module's ``register`` adds its commands.

    ``only``: the command the command line names, to be built alone (building every command's
    parser was a third of a one-shot verb's start-up); the others are not built.
    """

    def __init__(
        self,
        subparsers: argparse._SubParsersAction[Parser],
        *,
        common: Parser,
        only: str | None,
        whole: Callable[[], argparse.ArgumentParser],
        json_errors: bool,
    ) -> None:
        self._subparsers = subparsers
        self._common = common
        self._only = only
        self._json_errors = json_errors
        #: Builds the whole ``rehydrate`` parser, every command in it (what completion walks).
        self.whole = whole
        #: The options of the commands that open a store and print what they find.
        self.store = Parser(add_help=False)
        self.store.add_argument(
            "--store",
            metavar="URL",
            help=f"memory://, sqlite:///path.db, redis://host:6379/0 (default: ${STORE_ENV})",
        )
        self.store.add_argument(
            "--format",
            choices=["auto", "json", "text"],
            help="output: JSON when piped, text on a terminal (auto, the default), or as given",
        )

    def add(
        self,
        name: str,
        help: str,
        description: str,
        epilog: str,
        run: Callable[..., int],
        *parents: Parser,
    ) -> Parser:
        """Add the command ``name``, run by ``run(args)``; its help is wrapped to 78 columns.

        It takes the options that work on both sides of the command (``-v``, ``-q``,
        ``--log-format``) and those of ``parents``.
        """
        if self._only is not None and name != self._only:
            return cast(Parser, _Unused())
        sub: Parser = self._subparsers.add_parser(
            name,
            help=help,
            description=wrap(description),
            epilog=wrap(epilog),
            parents=[self._common, *parents],
            json_errors=self._json_errors,
        )
        sub.set_defaults(run=run, parser=sub)
        return sub
