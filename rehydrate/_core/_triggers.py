"""Triggers: when a recurring schedule's occurrences fall. Pure: every time is an argument.

Times here are Unix seconds (``float``), the wall time of an occurrence whatever the store's clock:
the scheduler maps them to and from the store's clock (``rehydrate._clock.wall``).

Cron expressions are parsed and walked by ``cronsim`` (not a parser of our own). It was chosen
over ``croniter`` because croniter runs ``30 2 * * *`` twice on the day clocks go back in
Europe/Paris (measured with croniter 7.0), which breaks the daylight-saving rule below, and
because building an iterator and taking one occurrence, which is what filing the next occurrence
costs, measured 3-4x faster with cronsim. Both are maintained.

**The daylight-saving rule** (``Cron`` with a ``tz``): an expression names local times.

* A named local time that does not exist (skipped when clocks go forward) runs once, at the first
  instant after the gap (``30 2 * * *`` runs at 03:00 in Europe/Paris on the spring-forward day).
* A named local time that happens twice (clocks go back) runs once, at its first occurrence,
  unless the hour field is ``*``: an expression that runs every hour follows real time, so
  ``0 * * * *`` runs at both 02:00s and never skips or repeats an hour of real time.
"""

from __future__ import annotations

import functools
import math
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Final, Literal, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from rehydrate._core import _validate
from rehydrate.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "ALL_MAX",
    "MISFIRE",
    "Cron",
    "Every",
    "Misfire",
    "Trigger",
    "trigger_from_dict",
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
    _fields: str = attrs.field(init=False, eq=False, repr=False)
    _every_hour: bool = attrs.field(init=False, eq=False, repr=False)

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
            CronSim(fields, datetime(2000, 1, 1))
        except CronSimError as exc:
            # cronsim says "Bad minute", "Bad day-of-week"...: name the field and its text.
            message = str(exc)
            for i, field in enumerate(_FIELDS):
                if message.lower().endswith(field):
                    raise InvalidArgumentError(
                        f"cron expression {self.expression!r}: bad {field} field {parts[i]!r}"
                    ) from None
            raise InvalidArgumentError(f"cron expression {self.expression!r}: {message}") from None
        object.__setattr__(self, "_zone", zone)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_every_hour", parts[1] == "*")

    def after(self, ts: float) -> float:
        """The first occurrence strictly after Unix time ``ts``."""
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
        if found.utcoffset() != start.utcoffset():
            result = self._gap(ts, result)
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
        return result

    def _gap(self, ts: float, found: float) -> float:
        """A spring-forward lies between ``ts`` and ``found``: a named local time in its gap runs
        at the gap's end (cronsim skips those of an expression that runs every hour)."""
        from cronsim import CronSim

        zone = self._zone
        lo, hi = ts, found
        before = _at(lo, zone).utcoffset()
        after = _at(hi, zone).utcoffset()
        if before is None or after is None or after <= before:
            return found  # clocks went back: nothing skipped
        # The transition: the first instant whose offset is the new one (a whole second).
        while hi - lo > 1e-3:
            mid = (lo + hi) / 2
            if _at(mid, zone).utcoffset() == before:
                lo = mid
            else:
                hi = mid
        transition = round(hi)
        if transition >= found or transition <= ts:
            return found
        # The local wall times of the gap: [transition's local time less the shift, its local time).
        wall_after = _at(transition, zone).replace(tzinfo=None)
        wall_gap = wall_after - (after - before)
        naive_from = max(wall_gap - timedelta(microseconds=1), _at(ts, zone).replace(tzinfo=None))
        candidate: datetime = next(CronSim(self._fields, naive_from))
        if wall_gap <= candidate < wall_after:
            return float(transition)
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"cron": self.expression, "tz": self.tz}

    def __str__(self) -> str:
        return self.expression if self.tz == "UTC" else f"{self.expression} ({self.tz})"


def _start(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgumentError("start must be an aware datetime (a naive one is ambiguous)")
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"start must be finite, got {value!r}")
        return float(value)
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
    return _validate.seconds(seconds, "interval")


@attrs.frozen(eq=True)
class Every:
    """Fixed intervals: ``Every(timedelta(minutes=30))``, ``Every(0.5)``.

    Occurrences are ``start + k * interval``: anchored, so they never drift with the time a handler
    takes. ``start`` (an aware datetime) defaults to when the schedule is first filed; the first
    occurrence is the first of them at or after that moment.
    """

    interval: float = attrs.field(converter=_as_interval)
    start: float | None = attrs.field(default=None, kw_only=True, converter=_start)

    def after(self, ts: float, anchor: float) -> float:
        """The first occurrence strictly after ``ts``, counting from ``anchor``."""
        k = math.floor((ts - anchor) / self.interval + _EPSILON) + 1
        return anchor + max(k, 0) * self.interval

    def at_or_after(self, ts: float, anchor: float) -> float:
        k = math.ceil((ts - anchor) / self.interval - _EPSILON)
        return anchor + max(k, 0) * self.interval

    def before(self, ts: float, anchor: float) -> float | None:
        """The last occurrence at or before ``ts`` (``None`` before the anchor)."""
        if ts < anchor - _EPSILON:
            return None
        return anchor + math.floor((ts - anchor) / self.interval + _EPSILON) * self.interval

    def to_dict(self) -> dict[str, Any]:
        return {"every": self.interval, "start": self.start}

    def __str__(self) -> str:
        text = f"every {timedelta(seconds=self.interval)}"
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
