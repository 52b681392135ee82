"""What the subcommands share: argument types, output, the store URL, and logging.

The command is the one place in rehydrate that configures logging (the library only emits). The
store verbs never log, so they never import structlog: a verb's start-up is what a shell script
pays for every call (``benchmarks/bench_cli.py``).

Output is rendered in full before it is written, and written so that it cannot fail to encode: a
string the terminal's encoding cannot hold is escaped (JSON's ``\\uXXXX``), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, Final, TextIO

from rehydrate._core._durations import parse_duration
from rehydrate.errors import InvalidArgumentError, RehydrateError

if TYPE_CHECKING:
    from rehydrate.abc import Store

#: Where the store URL comes from when ``--store`` is not given.
STORE_ENV: Final = "REHYDRATE_STORE"


class CLIError(Exception):
    """A mistake a person can make (bad argument, missing module...): one line, exit status 1."""


class BadValue(CLIError):
    """A value an option cannot take (a bad duration, time or number): exit status 1, like any
    other value the command refuses (a payload, a store URL), in one line naming the option.

    Raised by the ``type=`` functions below. Not an :class:`argparse.ArgumentTypeError` on purpose:
    argparse would make it a usage error (exit status 2, the status of a command line that does
    not parse); the command's parser prefixes the option's name and lets it through.
    """


_DURATION_SYNTAX: Final = "use a number of seconds or e.g. 1500ms, 5s, 2m, 1h, 1m30s"


def duration(text: str) -> float:
    """Parse ``1500ms``, ``5s``, ``2m``, ``1h``, ``1d``, ``1m30s`` or plain seconds (``2.5``): the
    spelling ``format_duration`` writes (``rehydrate schedules`` lists ``every 1m30s``).

    A negative one (``-5s``) reads, and is refused as the API refuses ``delay=-5``.
    """
    cleaned = text.strip()
    negative = cleaned.startswith("-")
    try:
        seconds = parse_duration(cleaned.removeprefix("-"))
    except InvalidArgumentError:
        try:
            seconds = float(cleaned)
        except ValueError:
            raise BadValue(f"invalid duration {text!r}: {_DURATION_SYNTAX}") from None
    if not math.isfinite(seconds):
        raise BadValue(f"invalid duration {text!r}: it must be finite ({_DURATION_SYNTAX})")
    if negative and seconds != 0:
        raise BadValue(f"invalid duration {text!r}: it must not be negative")
    return abs(seconds)


def positive_duration(text: str) -> float:
    """A duration that is more than zero (``--every``: a period of 0 would never move on)."""
    seconds = duration(text)
    if seconds <= 0:
        raise BadValue(f"invalid duration {text!r}: it must be positive, e.g. 30s, 15m, 1h")
    return seconds


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadValue(f"invalid number {text!r}: expected a whole number") from None
    if value < 1:
        raise BadValue(f"invalid number {text!r}: it must be at least 1")
    return value


def aware_datetime(text: str) -> datetime:
    """An ISO 8601 time with a UTC offset or ``Z``; one without is refused, as the API refuses a
    naive ``datetime``: whose 18:00 it means is a guess (the machine's zone? UTC?)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BadValue(f"invalid time {text!r}: use ISO 8601, e.g. 2026-12-24T18:00:00+01:00") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise BadValue(
            f"invalid time {text!r}: add a UTC offset or Z, e.g. 2026-12-24T18:00:00+01:00 or "
            "2026-12-24T18:00:00Z (without one it is ambiguous)"
        )
    return value


def port(text: str) -> int:
    """A TCP port from the command line."""
    try:
        value = int(text)
    except ValueError:
        raise BadValue(f"invalid port {text!r}: expected a whole number") from None
    if not 0 < value < 65536:
        raise BadValue(f"invalid port {text!r}: it must be from 1 to 65535")
    return value


def interval(text: str) -> float:
    """A ``stats --watch`` refresh period: at least :data:`MIN_INTERVAL` (a redraw is not free)."""
    seconds = duration(text)
    if seconds < MIN_INTERVAL:
        raise BadValue(f"invalid interval {text!r}: it must be at least {MIN_INTERVAL * 1000:.0f}ms")
    return seconds


#: The shortest ``stats --watch --interval``.
MIN_INTERVAL: Final = 0.1


def _read_stdin() -> str:
    """Standard input as strict UTF-8, whatever the locale (a byte that is not UTF-8 is refused)."""
    raw = getattr(sys.stdin, "buffer", None)
    if raw is None:  # a text stream put in place of stdin (tests): already decoded
        return sys.stdin.read()
    data: bytes = raw.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CLIError(
            f"standard input is not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} "
            "(JSON payloads are UTF-8 text)"
        ) from None


def _not_a_number(constant: str) -> Any:
    raise CLIError(f"invalid JSON payload: {constant} is not a JSON number (JSON has no NaN or Infinity)")


def payload(text: str) -> Any:
    """A JSON payload; ``-`` reads it from standard input.

    Refused: what ``json.loads`` accepts but JSON does not hold (``NaN``, ``Infinity``, numbers too
    large for a float such as ``1e400``) and strings that are not Unicode text (lone surrogates such
    as ``"\\ud800"``, which no UTF-8 output can print back).
    """
    source = _read_stdin() if text == "-" else text
    try:
        value = json.loads(source, parse_constant=_not_a_number)
    except json.JSONDecodeError as exc:
        shown = source if len(source) <= 40 else source[:37] + "..."
        raise CLIError(
            f"invalid JSON payload {shown!r}: {exc.msg} at column {exc.colno} (quote strings: '\"hello\"')"
        ) from None
    _check_payload(value)
    return value


def _check_payload(value: Any) -> None:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            unicode_text(item, "a string in the JSON payload")
        elif isinstance(item, float) and not math.isfinite(item):
            raise CLIError("invalid JSON payload: a number is too large for a float (JSON has no Infinity)")
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())


def unicode_text(text: str, what: str) -> str:
    """``text`` if it is Unicode text; a lone surrogate (from ``\\ud800`` or bytes that are not UTF-8
    in an argument) cannot be printed or stored faithfully."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CLIError(
            f"{what} is not Unicode text: {text[exc.start]!r} at position {exc.start} "
            "(a lone surrogate, or a byte that is not UTF-8)"
        ) from None
    return text


def require_backend(backend: str) -> str:
    """The anyio backend ``backend``, if it can run here; else a one-line error naming the extra.

    ``demo`` and ``worker`` both take ``--backend``; trio is an optional dependency.
    """
    if backend == "trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            raise CLIError("--backend trio needs trio: pip install 'rehydrate[trio]'") from None
    return backend


def store_url(args: argparse.Namespace) -> str:
    url: str | None = args.store or os.environ.get(STORE_ENV)
    if not url:
        raise CLIError(f"no store: give --store URL or set {STORE_ENV} (e.g. sqlite:///jobs.db)")
    return url


#: The commands that may create a missing database: the ones that add elements. Any other command
#: finds nothing in a new database, so a mistyped path is reported rather than created.
_CREATORS: Final = frozenset({"push", "schedule"})


def creates(args: argparse.Namespace) -> bool:
    """Whether the command may create a missing database: only those of :data:`_CREATORS`."""
    return getattr(args, "command", None) in _CREATORS


def open_from(args: argparse.Namespace, *, create: bool | None = None) -> Store:
    """The store of ``--store``/``$REHYDRATE_STORE``, unopened.

    ``create``: whether a missing database may be created; by default only for :data:`_CREATORS`.
    """
    from rehydrate.stores import open_store  # not for the parser's sake: it is not light

    url = store_url(args)
    store = open_store(url, create=creates(args) if create is None else create)
    if url.startswith("memory:") and not getattr(args, "quiet_memory", False):
        warn(args, "memory:// lives only as long as this command; use sqlite:// or redis:// to keep elements")
    return store


# -- output ------------------------------------------------------------------------------------


def wants_json(args: argparse.Namespace, stream: IO[str] | None = None) -> bool:
    """JSON when asked, or when the output is not a terminal (piped into ``jq``, a file...)."""
    fmt: str = getattr(args, "format", None) or "auto"
    if fmt != "auto":
        return fmt == "json"
    return not (stream or sys.stdout).isatty()


def _encoding(stream: IO[str]) -> str:
    return getattr(stream, "encoding", None) or "utf-8"


def _fits(text: str, stream: IO[str]) -> bool:
    try:
        text.encode(_encoding(stream))
    except UnicodeEncodeError:
        return False
    return True


def json_text(value: Any, stream: IO[str] | None = None) -> str:
    """``value`` as one line of JSON, with non-ASCII as is when the output can hold it, else escaped."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if _fits(text, stream or sys.stdout) else json.dumps(value, ensure_ascii=True, default=repr)


def show(value: Any) -> str:
    """An element as a person reads it: JSON, compact."""
    try:
        return json_text(value)
    except (TypeError, ValueError):
        return repr(value)


def show_id(id: str) -> str:
    """An id (or name) in text output, unambiguous: quoted as a JSON string when it holds a control
    character (a newline...), a surrogate, or space at either end, or starts with a double quote."""
    if id and id.isprintable() and id == id.strip() and not id.startswith('"') and _fits(id, sys.stdout):
        return id
    return json.dumps(id, ensure_ascii=not _fits(id, sys.stdout))


def emit(text: str, stream: IO[str] | None = None) -> None:
    """Write ``text`` and a newline, all of it, then flush: a closed pipe or full disk shows up here
    and now, before a destructive verb removes what it printed. Text the output cannot encode is
    escaped. The bytes are written in a loop: an unbuffered stdout (``python -u``) may take part of a
    write and drop the rest without an error."""
    out = stream or sys.stdout
    encoding = _encoding(out)
    data = (text + "\n").encode(encoding, errors="backslashreplace")
    binary = getattr(out, "buffer", None)
    if binary is None:  # a text-only stream (a test's StringIO)
        out.write(data.decode(encoding))
        out.flush()
        return
    out.flush()
    view = memoryview(data)
    while view:
        written = binary.write(view)
        view = view[len(view) if written is None else written :]
    binary.flush()


def emit_json(value: Any) -> None:
    emit(json_text(value))


def plural(count: int, singular: str, plural: str | None = None) -> str:
    return f"{count} {singular if count == 1 else plural or singular + 's'}"


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


def due_text(seconds: float) -> str:
    """``due now`` or ``due in 1.5s``."""
    return "due now" if seconds <= 0 else f"due in {seconds_text(seconds)}"


def capacity_text(concurrency: int | None, rates: list[list[Any]]) -> str:
    """``10, 100/1s``: the concurrency, then each rate over its window; ``-`` if none known."""
    parts = [] if concurrency is None else [str(concurrency)]
    parts += [f"{n}/{seconds_text(per)}" for n, per in rates]
    return ", ".join(parts) or "-"


def saturation_text(saturation: float | None) -> str:
    return "-" if saturation is None else f"{saturation:.0%}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def utc_text(timestamp: float, timespec: str = "seconds") -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec=timespec)


# -- errors ------------------------------------------------------------------------------------


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions ``exc`` is made of: itself, or the leaves of an exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in leaves(e)]
    return [exc]


def person_error(exc: BaseException) -> BaseException | None:
    """The mistake to report in one line, if ``exc`` is (or a task group wraps only) such mistakes."""
    found = leaves(exc)
    if found and all(isinstance(leaf, (CLIError, RehydrateError)) for leaf in found):
        return found[0]
    return None


def error_message(exc: BaseException) -> str:
    """The one line that reports a :func:`person_error`."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, CLIError):
        return text
    return f"{text} ({type(exc).__name__})" if text else type(exc).__name__


# -- logging -----------------------------------------------------------------------------------


def error_line(message: str, log_format: str) -> str:
    """The line that reports a mistake on stderr: plain text, or a JSON log line with ``--log-format
    json`` (what a log collector reading the worker's JSON lines expects)."""
    if log_format == "json":
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        return json.dumps({"event": message, "level": "error", "logger": "rehydrate.cli", "timestamp": stamp})
    return f"rehydrate: error: {message}"


def warn(args: argparse.Namespace, message: str) -> None:
    """A warning from a command that otherwise does not log (so structlog is imported only now)."""
    import structlog

    configure_logging(getattr(args, "log_format", "console"), getattr(args, "verbosity", 0))
    structlog.get_logger("rehydrate.cli").warning(message)


def configure_logging(log_format: str, verbosity: int, stream: TextIO | None = None) -> None:
    """Console lines for people (colours on a terminal), or JSON lines; level from ``-v``/``-q``."""
    import logging

    import structlog

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
