"""Triggers: when a recurring schedule's occurrences fall. Pure: every time is an argument.

Times here are Unix seconds (``float``), the wall time of an occurrence whatever the store's clock:
the scheduler maps them to and from the store's clock (``rehydrate._clock.wall``).

Cron expressions are parsed and walked by ``cronsim`` (not a parser of our own). It was chosen
over ``croniter`` because croniter runs ``30 2 * * *`` twice on the day clocks go back in
Europe/Paris (croniter 7.0.0), which breaks the daylight-saving rule below, and because building
an iterator and taking one occurrence, which is what filing the next occurrence costs, takes
several times less time with cronsim (``benchmarks/bench_cron.py``, its figures in
``docs/benchmarks.md``). Both are maintained.

**The daylight-saving rule** (``Cron`` with a ``tz``): an expression names local (wall-clock) times.

* A named time that does not exist (skipped when clocks go forward) runs once, at the first
  instant after the gap: ``30 2 * * *`` runs at 03:00 in Europe/Paris on the spring-forward day,
  Lord Howe's 02:00 at 02:30; several named times in one gap run once, together.
* A named time that happens twice (clocks go back) runs once, at its first occurrence; unless the
  hour field names every hour (``*``, ``*/1``, ``0-23``, a list of all 24): such an expression
  follows real time and runs each time the clock shows a time it names, so ``0 * * * *`` runs at
  both 02:00s of a fall-back night in Paris (and, where clocks move a whole hour, never skips or
  repeats an hour of real time).

What counts is the hours a field names, not its spelling: ``0 0-23 * * *`` is ``0 * * * *``, and
``0 */2 * * *`` names local times. cronsim's own test is the spelling (Debian cron's: real time
when the minute or the hour field starts with ``*``), so the expression it is given is respelled
to the same values (:func:`_walked`); and across a transition, where its real-time walk skips a
gap's time or a time shown again that starts exactly at the transition, :meth:`Cron._across`
walks each side's wall clock itself. ``tests/test_triggers.py`` checks the rule against a
minute-by-minute reference.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Final, Literal, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from rehydrate._core import _validate
from rehydrate._core._durations import format_duration
from rehydrate.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "ALL_MAX",
    "MISFIRE",
    "US",
    "Cron",
    "Every",
    "Misfire",
    "Trigger",
    "trigger_from_dict",
    "us",
]

Misfire: TypeAlias = Literal["coalesce", "all", "skip"]
MISFIRE: Final = ("coalesce", "all", "skip")
#: ``misfire="all"`` runs at most this many missed occurrences (the most recent ones).
ALL_MAX: Final = 100

_ALIASES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS: Final = ("minute", "hour", "day-of-month", "month", "day-of-week")
#: A µs: occurrences are compared at this resolution (cron's are whole minutes).
_EPSILON: Final = 1e-6


_ALL_HOURS: Final = frozenset(range(24))
#: How many answers of :meth:`Cron.after` each cron keeps (then it starts again).
_MEMO_SIZE: Final = 256


def _walked(parts: list[str], minutes: set[int], hours: set[int], every_hour: bool) -> str:
    """The 5 fields to hand cronsim: the same values, spelled so that its test (real time when the
    minute or the hour field starts with ``*``) gives the daylight-saving rule of this module."""
    minute, hour, *rest = parts
    if every_hour:
        hour = "*"  # 0-23, */1, a list of all 24: real time, as * is
    else:
        # Named local times: no field of the two may start with * (*/2 -> 0,2,...,22).
        if hour.startswith("*"):
            hour = ",".join(map(str, sorted(hours)))
        if minute.startswith("*"):
            minute = ",".join(map(str, sorted(minutes)))
    return " ".join([minute, hour, *rest])


def _zone(tz: object) -> tzinfo:
    if not isinstance(tz, str):
        raise InvalidTypeError(f"tz must be a time zone name (str), not {type(tz).__name__}")
    if tz.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgumentError(f"tz: unknown time zone {tz!r}") from exc


def _at(ts: float, zone: tzinfo) -> datetime:
    return datetime.fromtimestamp(ts, UTC).astimezone(zone)


@attrs.frozen(eq=True)
class Cron:
    """A 5-field cron expression in a time zone: ``Cron("0 9 * * MON-FRI", tz="Europe/Paris")``.

    Fields: minute, hour, day of month, month, day of week, with names (``JAN``, ``MON``), ranges,
    steps and lists, or one of ``@hourly``, ``@daily``, ``@weekly``, ``@monthly``, ``@yearly``. A bad
    expression or an unknown zone raises :class:`~rehydrate.errors.InvalidArgumentError` here,
    naming the bad field. See the module docstring for what happens when clocks change.
    """

    expression: str
    tz: str = attrs.field(default="UTC", kw_only=True)
    _zone: tzinfo = attrs.field(init=False, eq=False, repr=False)
    #: The expression cronsim walks: the same values, spelled for the daylight-saving rule.
    _fields: str = attrs.field(init=False, eq=False, repr=False)
    #: Whether the hour field names every hour: the expression follows real time.
    _every_hour: bool = attrs.field(init=False, eq=False, repr=False)
    #: :meth:`after`'s recent answers. One ``Cron`` serves every schedule of its expression and
    #: zone (``trigger_from_dict`` caches them), and the schedules of one cron minute (a reminder
    #: at 08:00 for each of 100,000 users) all ask for the occurrence after the same time: a walk
    #: of cronsim costs many times a dictionary look-up here.
    _after_memo: dict[float, float] = attrs.field(init=False, eq=False, repr=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        from cronsim import CronSim, CronSimError

        if not isinstance(self.expression, str):
            raise InvalidTypeError(f"a cron expression must be a str, not {type(self.expression).__name__}")
        text = " ".join(self.expression.split())
        fields = _ALIASES.get(text.lower(), text)
        parts = fields.split(" ")
        if text.startswith("@") and text.lower() not in _ALIASES:
            raise InvalidArgumentError(
                f"cron expression {self.expression!r}: unknown alias (known: {', '.join(_ALIASES)})"
            )
        if len(parts) != 5:
            raise InvalidArgumentError(
                f"cron expression {self.expression!r}: needs 5 fields ({' '.join(_FIELDS)}), "
                f"got {len(parts) if text else 0}"
            )
        zone = _zone(self.tz)
        try:
            parsed = CronSim(fields, datetime(2000, 1, 1))
        except CronSimError as exc:
            # cronsim says "Bad minute", "Bad day-of-week"...: name the field and its text.
            message = str(exc)
            for i, field in enumerate(_FIELDS):
                if message.lower().endswith(field):
                    raise InvalidArgumentError(
                        f"cron expression {self.expression!r}: bad {field} field {parts[i]!r}"
                    ) from None
            raise InvalidArgumentError(f"cron expression {self.expression!r}: {message}") from None
        every_hour = parsed.hours == _ALL_HOURS
        object.__setattr__(self, "_zone", zone)
        object.__setattr__(self, "_fields", _walked(parts, parsed.minutes, parsed.hours, every_hour))
        object.__setattr__(self, "_every_hour", every_hour)

    def after(self, ts: float) -> float:
        """The first occurrence strictly after Unix time ``ts``."""
        memo = self._after_memo
        known = memo.get(ts)
        if known is not None:
            return known
        result = self._after(ts)
        if len(memo) >= _MEMO_SIZE:
            memo.clear()  # one step (a ``Cron`` may be shared by event loops in several threads)
        memo[ts] = result
        return result

    def _after(self, ts: float) -> float:
        from cronsim import CronSim

        start = _at(ts, self._zone)
        # cronsim gives the first match strictly after ``start`` but reads its wall time, not its
        # fold: from the second 02:00 of a fall-back it would give that 02:00 again. Step on.
        found: datetime = next(CronSim(self._fields, start))
        result = found.timestamp()
        step = 60.0
        while result <= ts + _EPSILON:
            found = next(CronSim(self._fields, _at(ts + step, self._zone)))
            result = found.timestamp()
            step += 60.0
        if self._every_hour and found.utcoffset() != start.utcoffset():
            # (An expression of named local times has its transitions handled by cronsim.)
            result = self._across(ts, result)
        return result

    def before(self, ts: float) -> float | None:
        """The last occurrence at or before Unix time ``ts`` (``None`` if there is none)."""
        from cronsim import CronSim

        start = _at(ts + _EPSILON, self._zone)
        try:
            found: datetime = next(CronSim(self._fields, start, reverse=True))
        except StopIteration:
            return None
        result = found.timestamp()
        if result > ts + _EPSILON:  # a gap rounded up past ts: the one before it
            return self.before(result - 60.0)
        if found.utcoffset() == start.utcoffset():
            return result  # no change of offset between them: cronsim's walk is a plain clock's
        # Across a transition cronsim's reverse walk may stop short of what after() runs (the
        # end of a gap, a time shown again after a fall-back): walk on with after(). The first
        # occurrence at or after cronsim's answer, then each next one still at or before ts.
        first = self.after(result - 1e-3)
        if first > ts + _EPSILON:
            return self.before(result - 1e-3)  # cronsim's answer is no occurrence: look before it
        while (following := self.after(first)) <= ts + _EPSILON:
            first = following
        return first

    def _across(self, ts: float, found: float) -> float:
        """Real time across a change of offset between ``ts`` and ``found`` (cronsim's answer).

        On each side of the transition the local clock is a plain clock, so the first match is
        looked for on the wall times before it, then at the transition: a named time in a spring
        gap runs at the gap's end (cronsim skips it), and one that the clock shows again after a
        fall-back (Lord Howe's 01:30) runs again, as a wildcard hour's 02:00 does in Paris (cronsim
        misses a repeat that starts exactly at the transition).
        """
        from cronsim import CronSim

        zone = self._zone
        before = _at(ts, zone).utcoffset()
        after = _at(found, zone).utcoffset()
        if before is None or after is None or before == after:
            return found
        # The transition: the first instant whose offset is the new one (a whole second).
        lo, hi = ts, found
        while hi - lo > 1e-3:
            mid = (lo + hi) / 2
            if _at(mid, zone).utcoffset() == before:
                lo = mid
            else:
                hi = mid
        transition = float(round(hi))
        if not ts < transition <= found:
            return found
        at = datetime.fromtimestamp(transition, UTC).replace(tzinfo=None)
        wall_before, wall_after = at + before, at + after  # the wall clock leaves one, shows the other
        candidate: datetime = next(CronSim(self._fields, _at(ts, zone).replace(tzinfo=None)))
        if candidate < wall_before:  # before the transition, on the old clock
            return min(found, (candidate - before).replace(tzinfo=UTC).timestamp())
        if candidate < wall_after:  # in a spring gap: at its end
            return transition
        # The first wall time at or after the one the transition shows, on the new clock.
        candidate = next(CronSim(self._fields, wall_after - timedelta(microseconds=1)))
        result = (candidate - after).replace(tzinfo=UTC).timestamp()
        if result < found and _at(result, zone).utcoffset() == after:
            return result
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"cron": self.expression, "tz": self.tz}

    def __str__(self) -> str:
        """``cron 0 9 * * MON-FRI (Europe/Paris)``: as written, and always with its zone (a cron
        listed beside local times must not pass for one of them)."""
        return f"cron {self.expression} ({self.tz})"


#: Microseconds in a second. Every's occurrences are whole microseconds (``datetime``'s resolution),
#: counted in integers: exact however many intervals from the anchor, whatever the interval.
US: Final = 1_000_000


def us(seconds: float) -> int:
    """Unix seconds as whole microseconds: how an ``Every`` counts, and how envelopes keep times."""
    return round(seconds * US)


def _start(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgumentError("start must be an aware datetime (a naive one is ambiguous)")
        return us(value.timestamp()) / US
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"start must be finite, got {value!r}")
        return us(value) / US
    raise InvalidTypeError(f"start must be an aware datetime or Unix seconds, not {type(value).__name__}")


def _as_interval(value: object) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidTypeError(
            f"interval must be a number of seconds or a datetime.timedelta, not {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgumentError(f"interval must be positive, got {value!r}")
    seconds = _validate.seconds(seconds, "interval")
    if us(seconds) < 1:
        raise InvalidArgumentError(f"interval must be at least a microsecond, got {value!r}")
    return us(seconds) / US


@attrs.frozen(eq=True)
class Every:
    """Fixed intervals: ``Every(timedelta(minutes=30))``, ``Every(0.5)``.

    Occurrences are ``start + k * interval``: anchored, so they never drift with the time a handler
    takes. ``start`` (an aware datetime) defaults to when the schedule is first filed; the first
    occurrence is the first of them at or after that moment. Times are whole microseconds, as a
    ``datetime``'s are (an interval or start with more digits is rounded to the microsecond), and
    the occurrences are counted in integers: ``Every(0.01)`` steps exactly 10,000 µs at a time,
    however far from its anchor (in floating-point seconds a step could round back onto the
    occurrence it started from, and run it again).
    """

    interval: float = attrs.field(converter=_as_interval)
    start: float | None = attrs.field(default=None, kw_only=True, converter=_start)
    #: ``interval`` in whole microseconds (what the occurrences are counted in).
    interval_us: int = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "interval_us", us(self.interval))

    def after(self, ts: float, anchor: float) -> float:
        """The first occurrence strictly after ``ts``, counting from ``anchor``."""
        return self.after_us(us(ts), us(anchor)) / US

    def after_us(self, t: int, anchor: int) -> int:
        """:meth:`after` in whole microseconds (what envelopes keep): no float on the way."""
        k = (t - anchor) // self.interval_us + 1
        return anchor + k * self.interval_us if k > 0 else anchor  # (max() costs a call: once per occurrence)

    def at_or_after(self, ts: float, anchor: float) -> float:
        """The first occurrence at or after ``ts`` (a time within its microsecond counts)."""
        a = us(anchor)
        k = -((a - math.floor(ts * US)) // self.interval_us)
        return (a + max(k, 0) * self.interval_us) / US

    def before(self, ts: float, anchor: float) -> float | None:
        """The last occurrence at or before ``ts`` (``None`` before the anchor)."""
        a, t = us(anchor), us(ts)
        if t < a:
            return None
        return (a + (t - a) // self.interval_us * self.interval_us) / US

    def to_dict(self) -> dict[str, Any]:
        return {"every": self.interval, "start": self.start}

    def __str__(self) -> str:
        """``every 5s``, ``every 1h30m``: the interval as ``--every`` takes it (not ``0:00:05``)."""
        text = f"every {format_duration(self.interval)}"
        if self.start is not None:
            text += f" from {datetime.fromtimestamp(self.start, UTC).isoformat()}"
        return text


Trigger: TypeAlias = Cron | Every


def trigger_from_dict(data: object) -> Trigger:
    """The trigger :meth:`Cron.to_dict` or :meth:`Every.to_dict` described.

    Cached: every occurrence a worker runs reads its schedule's trigger back, and parsing a cron
    expression costs more than the rest of filing the next occurrence.
    """
    if isinstance(data, dict):
        try:
            if "cron" in data:
                return _cached("cron", data["cron"], data.get("tz", "UTC"))
            if "every" in data:
                return _cached("every", data["every"], data.get("start"))
        except TypeError:  # unhashable parts: not something to_dict wrote
            pass
    raise InvalidArgumentError(f"not a stored trigger: {data!r}")


@functools.lru_cache(maxsize=4096)
def _cached(kind: str, first: Any, second: Any) -> Trigger:
    if kind == "cron":
        return Cron(first, tz=second)
    return Every(first, start=second)
