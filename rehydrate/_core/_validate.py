"""Argument checks shared by the core and the stores.

They run before any state changes, so a call that raises leaves everything as it was.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta
from operator import itemgetter
from typing import Any, Final, TypeAlias

from rehydrate.errors import DuplicateIdError, InvalidArgumentError, InvalidTypeError

__all__ = ["MAX_SECONDS", "InvalidArgumentError", "InvalidTypeError", "Seconds"]

#: What the API accepts wherever it takes a duration: seconds, or a timedelta.
Seconds: TypeAlias = float | int | timedelta

#: The longest duration (ttl, lease, delay) any call accepts: 10**9 seconds, about 31.7 years.
#: One limit for every store, so a schedule that works on one works on all. The Redis store keeps
#: due times as integer microseconds of Unix time in Lua doubles, exact up to 2**53 us (the year
#: 2255), and a limit of a round number of seconds keeps ``now + ttl`` far inside that; SQLite and
#: the memory store would take more, but then a move between stores would fail late, on data.
#: A delayed delivery decades away is a calendar's job: ``--at 9999-12-31`` is refused everywhere.
MAX_SECONDS: Final = 1_000_000_000
#: MAX_SECONDS as a float, for the common case's test: a float compared with an int converts
#: the int at every comparison.
_MAX_FLOAT: Final = float(MAX_SECONDS)


def seconds(value: object, name: str) -> float:
    """Return ``value`` as a finite, non-negative number of seconds.

    ``bool`` is refused although it is an ``int``: ``ttl=True`` is a bug, not one second.
    """
    # The common case first, one type check and one chained compare (NaN fails it): every ttl of
    # every push, replace_if and reschedule comes through here.
    if type(value) is float and 0.0 <= value <= _MAX_FLOAT:
        return value
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, int) and value > MAX_SECONDS:  # before float(): 10**400 overflows it
            raise _too_long(name, value)
        result = float(value)
    else:
        raise InvalidTypeError(
            f"{name} must be a number of seconds or a datetime.timedelta, not {type(value).__name__}"
        )
    if math.isnan(result) or math.isinf(result):
        raise InvalidArgumentError(f"{name} must be finite, got {value!r}")
    if result < 0:
        raise InvalidArgumentError(f"{name} must not be negative, got {value!r}")
    if result > MAX_SECONDS:
        raise _too_long(name, value)
    return result


def _too_long(name: str, value: object) -> InvalidArgumentError:
    shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
    return InvalidArgumentError(
        f"{name} must be at most {MAX_SECONDS:,} seconds (about 31.7 years), got {shown}"
    )


def element_id(value: object, name: str = "id") -> str:
    """Return ``value`` if it is a non-empty ``str`` of valid Unicode text.

    Valid text is what UTF-8 can encode: no lone surrogates (``"\\ud800"``, which a decoder's
    ``surrogateescape`` makes of undecodable bytes). Every store keeps ids and names as UTF-8 (or
    prints them), so one that cannot be encoded is refused here, by every store alike.
    """
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidArgumentError(f"{name} must not be empty")
    if not value.isascii():
        text(value, name)
    return value


def text(value: str, name: str) -> str:
    """Return ``value`` if UTF-8 can encode it (no lone surrogates)."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        bad = value[exc.start : exc.end]
        raise InvalidArgumentError(
            f"{name} must be valid Unicode text (encodable as UTF-8), but it holds the lone "
            f"surrogate {bad!r} at index {exc.start}"
        ) from None
    return value


def limit(value: object) -> int | None:
    """Return ``value`` if it is ``None`` (no limit) or an ``int`` of at least 1."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"limit must be an int or None, not {type(value).__name__}")
    if value < 1:
        raise InvalidArgumentError(f"limit must be at least 1, got {value!r}")
    return value


def limit_or_inf(value: object) -> float:
    """Like :func:`limit`, with "no limit" as infinity so loops can count down without a branch."""
    checked = limit(value)
    return math.inf if checked is None else checked


def flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be True or False, not {type(value).__name__}")
    return value


def replace(value: object, id: object) -> bool:
    """``push``'s ``replace`` flag: a bool, and only with an ``id`` (there is nothing to replace
    without one, and silently pushing a new element would hide the caller's mistake)."""
    flag(value, "replace")
    if value and id is None:
        raise InvalidArgumentError("replace=True needs the id of the element to replace")
    return bool(value)


def _fence(value: object, name: str, low: int) -> int | None:
    """Return ``value`` if it is ``None`` (no fencing) or an ``int`` of at least ``low``."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be an int or None, not {type(value).__name__}")
    if value < low:
        raise InvalidArgumentError(f"{name} must be at least {low}, got {value!r}")
    return value


def attempt(value: object) -> int | None:
    """An attempt count to fence with (ReDe's XACK), or ``None``."""
    return _fence(value, "attempt", 0)


def token(value: object) -> int | None:
    """A :class:`Claim`'s ``token`` to fence with, or ``None``."""
    return _fence(value, "token", 1)


def ids(values: tuple[Any, ...]) -> tuple[str, ...]:
    """Check every id of a variadic call before any is acted upon."""
    for value in values:
        element_id(value)
    return values


def id_list(ids: object) -> list[str]:
    """The ids of a batch read (``look_many``), all checked before any is read: an iterable (not a
    ``str``, which would be read as its characters) of valid ids; an id may come more than once."""
    if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
        raise InvalidTypeError(f"ids must be an iterable of ids (str), not {type(ids).__name__}")
    out = list(ids)
    for index, value in enumerate(out):
        try:
            element_id(value)
        except InvalidArgumentError as exc:  # InvalidTypeError too
            exc.add_note(f"in ids[{index}]")
            raise
    return out


def pushes(items: Iterable[tuple[Any, Seconds, str | None]]) -> list[tuple[Any, float, str | None]]:
    """The ``(element, ttl, id or None)`` items of a ``push_many``, all checked before any is
    filed: each ttl a duration, each id given a valid one, and no id twice in the batch (a
    :class:`~rehydrate.errors.DuplicateIdError`). The elements are the store's to encode."""
    out: list[tuple[Any, float, str | None]] = []
    given: set[str] = set()
    # A batch mostly shares a handful of ttls: each distinct int or float is checked once (keyed
    # by type too, so that 1.0 and 1 stay apart).
    durations: dict[tuple[type, object], float] = {}
    for element, ttl, id in items:
        kind = type(ttl)
        if kind is float or kind is int:
            duration = durations.get((kind, ttl))
            if duration is None:
                duration = durations[(kind, ttl)] = seconds(ttl, "ttl")
        else:
            duration = seconds(ttl, "ttl")
        if id is not None:
            if type(id) is not str or not id or not id.isascii():
                element_id(id)
            if id in given:
                raise DuplicateIdError(id)
            given.add(id)
        out.append((element, duration, id))
    return out


def acks(claims: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The ``(id, token)`` pairs of an ``ack``, all checked before any is acked: a valid id and a
    claim's token each."""
    pairs = list(claims)
    for id, fence in pairs:
        # The common pair in one test each; anything else is checked by what raises.
        if type(id) is not str or not id or not id.isascii():
            element_id(id)
        if (type(fence) is not int or fence < 1) and token(fence) is None:
            raise InvalidArgumentError("ack needs each claim's token")
    return pairs


def reschedules(items: object, verb: str = "reschedule_many") -> list[tuple[str, int, float]]:
    """The ``(id, token, ttl)`` items of a ``reschedule_many`` (or a ``hand_back``: ``verb``), all
    checked before any is acted upon: each a triple with a valid id, a claim's token and a
    duration, and no id twice."""
    if isinstance(items, str | bytes) or not hasattr(items, "__iter__"):
        raise InvalidTypeError(f"items must be an iterable of (id, token, ttl), not {type(items).__name__}")
    out: list[tuple[str, int, float]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) != 3:
            raise InvalidArgumentError(f"items[{index}] must be an (id, token, ttl) tuple, not {item!r:.80}")
        id, fence, ttl = item
        element_id(id)
        checked = token(fence)
        if checked is None:
            raise InvalidArgumentError(f"items[{index}]: {verb} needs each claim's token")
        if id in seen:
            raise InvalidArgumentError(f"items[{index}]: id {id!r} is given twice")
        seen.add(id)
        out.append((id, checked, seconds(ttl, "ttl")))
    return out


def revision(value: object) -> int:
    """An element's revision to compare with (``ElementInfo.revision``): an ``int`` of at least 0.

    ``bool`` is refused: ``revision=True`` is a bug, and comparing it would silently fail.
    """
    if type(value) is int and value >= 0:
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"revision must be an int, not {type(value).__name__}")
    raise InvalidArgumentError(f"revision must not be negative, got {value!r}")


_first: Final = itemgetter(0)


def _conditional_replace(item: object, index: int) -> tuple[str, int, Any, float]:
    """One item of a ``replace_if`` that is not the common case, checked (see below)."""
    if not isinstance(item, tuple) or len(item) != 4:
        raise InvalidArgumentError(
            f"items[{index}] must be an (id, revision, element, ttl) tuple, not {item!r:.80}"
        )
    id, rev, element, ttl = item
    try:
        element_id(id)
        checked = revision(rev)
        duration = seconds(ttl, "ttl")
    except InvalidArgumentError as exc:  # InvalidTypeError too
        exc.add_note(f"in items[{index}] of a replace_if")
        raise
    return (id, checked, element, duration)


def conditional_replaces(items: object) -> list[tuple[str, int, Any, float]]:
    """The ``(id, revision, element, ttl)`` items of a ``replace_if``, all checked before any is
    acted upon: each a 4-tuple with a valid id, a revision and a duration, and no id twice (two
    items on one id could not both hold the revision they compare with).

    The items are kept as given (no tuple made again), but for a ttl the checks converted: after
    them, every ttl is a float. A run's end is a ``replace_if`` per batch of occurrences, so the
    common item (a str id, an int revision, a float ttl) passes one test of each."""
    if isinstance(items, str | bytes) or not hasattr(items, "__iter__"):
        raise InvalidTypeError(
            f"items must be an iterable of (id, revision, element, ttl), not {type(items).__name__}"
        )
    out: list[tuple[str, int, Any, float]] = []
    append = out.append
    for item in items:
        try:
            id, rev, _, ttl = item
        except (TypeError, ValueError):  # (not four things: refused below)
            append(_conditional_replace(item, len(out)))
            continue
        if (
            type(item) is not tuple
            or type(id) is not str
            or not id
            or not id.isascii()
            or type(rev) is not int
            or rev < 0
            or type(ttl) is not float
            or not 0.0 <= ttl <= _MAX_FLOAT
        ):
            item = _conditional_replace(item, len(out))
        append(item)
    if len(set(map(_first, out))) != len(out):
        seen: set[str] = set()
        for index, (id, *_) in enumerate(out):
            if id in seen:
                raise InvalidArgumentError(f"items[{index}]: id {id!r} is given twice in a replace_if")
            seen.add(id)
    return out
