"""What the subcommands share: argument types, output, the store URL, and logging.

The command is the one place in rehydrate that configures logging (the library only emits).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any, Final, TextIO

import structlog

from rehydrate.abc import Store
from rehydrate.stores import open_store

#: Where the store URL comes from when ``--store`` is not given.
STORE_ENV: Final = "REHYDRATE_STORE"

_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART: Final = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h|d)")


class CLIError(Exception):
    """A mistake a person can make (bad argument, missing module...): one line, exit status 1."""


def duration(text: str) -> float:
    """Parse ``1500ms``, ``5s``, ``2m``, ``1h``, ``1d``, ``1m30s`` or plain seconds (``2.5``)."""
    cleaned = text.strip().lower()
    try:
        seconds = float(cleaned)
    except ValueError:
        parts = _PART.findall(cleaned)
        if not parts or "".join(number + unit for number, unit in parts) != cleaned:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r}: use a number of seconds or e.g. 1500ms, 5s, 2m, 1h, 1m30s"
            ) from None
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: it must be finite and not negative")
    return seconds


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}: it must be at least 1")
    return value


def aware_datetime(text: str) -> datetime:
    """An ISO 8601 time; one without a UTC offset is taken as UTC (and said so in ``--help``)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use ISO 8601, e.g. 2026-12-24T18:00:00+01:00"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def payload(text: str) -> Any:
    """A JSON payload; ``-`` reads it from standard input."""
    source = sys.stdin.read() if text == "-" else text
    try:
        return json.loads(source)
    except json.JSONDecodeError as exc:
        shown = source if len(source) <= 40 else source[:37] + "..."
        raise CLIError(
            f"invalid JSON payload {shown!r}: {exc.msg} at column {exc.colno} (quote strings: '\"hello\"')"
        ) from None


def store_url(args: argparse.Namespace) -> str:
    url: str | None = args.store or os.environ.get(STORE_ENV)
    if not url:
        raise CLIError(f"no store: give --store URL or set {STORE_ENV} (e.g. sqlite:///jobs.db)")
    return url


#: The verbs that may create a missing database: the ones that add elements. Any other verb finds
#: nothing in a new database, so a mistyped path is reported rather than created.
_CREATORS: Final = frozenset({"push"})


def open_from(args: argparse.Namespace, *, create: bool | None = None) -> Store:
    """The store of ``--store``/``$REHYDRATE_STORE``, unopened.

    ``create``: whether a missing database may be created; by default only for :data:`_CREATORS`.
    """
    url = store_url(args)
    if create is None:
        create = getattr(getattr(args, "verb", None), "__name__", None) in _CREATORS
    store = open_store(url, create=create)
    if url.startswith("memory:") and not getattr(args, "quiet_memory", False):
        structlog.get_logger("rehydrate.cli").warning(
            "memory:// lives only as long as this command; use sqlite:// or redis:// to keep elements"
        )
    return store


# -- output ------------------------------------------------------------------------------------


def wants_json(args: argparse.Namespace, stream: IO[str] | None = None) -> bool:
    """JSON when asked, or when the output is not a terminal (piped into ``jq``, a file...)."""
    fmt: str = getattr(args, "format", "auto")
    if fmt != "auto":
        return fmt == "json"
    return not (stream or sys.stdout).isatty()


def emit_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, default=repr))


def show(value: Any) -> str:
    """An element as a person reads it: JSON, compact."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds == 0:
        return "now"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def utc_text(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


# -- logging -----------------------------------------------------------------------------------


def configure_logging(log_format: str, verbosity: int, stream: TextIO | None = None) -> None:
    """Console lines for people (colours on a terminal), or JSON lines; level from ``-v``/``-q``."""
    out = stream or sys.stderr
    level = {-2: logging.ERROR, -1: logging.WARNING, 0: logging.INFO}.get(verbosity, logging.DEBUG)
    if verbosity < -2:
        level = logging.CRITICAL
    renderer: Any
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer(default=repr)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if log_format == "json":
        processors += [structlog.processors.dict_tracebacks]
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # One write per line (PrintLogger writes the line and its newline apart): the lines of
        # worker processes sharing a pipe do not interleave.
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
