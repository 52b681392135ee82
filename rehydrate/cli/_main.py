"""Argument parsing and dispatch for the ``rehydrate`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rehydrate.cli import _demo


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rehydrate", description="Delayed delivery, reliably: run and inspect dehydrators."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="a short tour on the embedded store, no server needed")
    demo.add_argument("--elements", type=int, default=30, help="how many elements to dehydrate (default 30)")
    demo.set_defaults(run=_demo.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo" and args.elements < 1:
        parser.error("--elements must be at least 1")
    result: int = args.run(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
