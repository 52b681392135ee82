"""What the dashboard derives from summaries sampled over time: pure, no I/O, time passed in.

The store contract has no delivery counters (those come with worker heartbeats), so the dashboard
samples each dehydrator every few seconds and derives what the samples can honestly tell:

* **left**: elements that left the dehydrator between two samples (acked, cancelled, or moved
  to the dead letters), counted exactly by comparing the two samples' id sets while the dehydrator
  holds at most :data:`ID_SET_LIMIT` elements; above that, the net fall in size, a lower bound
  (``exact`` says which);
* **arrived**: likewise, new ids;
* **oldest due**: how long the earliest due element has been waiting (its due time against the
  store's clock). It is a floor on the lateness of the next delivery, not a per-delivery figure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

import attrs

__all__ = ["ID_SET_LIMIT", "History", "Point", "Reading", "iso"]

#: Up to this many elements, a sample keeps a dehydrator's id set so throughput is counted exactly.
ID_SET_LIMIT = 10_000


@attrs.frozen(kw_only=True)
class Reading:
    """One dehydrator as read from the store at one instant."""

    name: str
    size: int
    due: int
    claimed: int
    dead: int
    #: Seconds until the earliest element is due; negative when it is overdue; ``None`` if empty.
    next_due: float | None
    #: The ids held, when the dehydrator is small enough to list them (see :data:`ID_SET_LIMIT`).
    ids: frozenset[str] | None = attrs.field(default=None, repr=False, eq=False)

    @property
    def oldest_due(self) -> float:
        """Seconds the earliest due element has waited past its due time (0 when none is due)."""
        return max(0.0, -self.next_due) if self.next_due is not None else 0.0


@attrs.frozen(kw_only=True)
class Point:
    """One dehydrator between two samples: what the charts plot."""

    #: Unix time of the later sample.
    at: float
    size: int
    due: int
    claimed: int
    dead: int
    next_due: float | None
    oldest_due: float
    #: Elements that left / arrived per second since the previous sample (``None`` at the first one).
    left_rate: float | None
    arrived_rate: float | None
    #: Whether the rates were counted from id sets (``True``) or are net size changes (a lower bound).
    exact: bool

    def as_json(self) -> dict[str, object]:
        """The point as the dashboard's JSON gives it, in the names and forms of ``rehydrate stats
        --format json``: ``next_due_in`` (seconds from the sample, negative when overdue) and
        ``next_due_at`` (ISO 8601 UTC), ``at`` in ISO 8601 too."""
        data = attrs.asdict(self)
        del data["next_due"]
        data["at"] = iso(self.at)
        data["next_due_in"] = self.next_due
        data["next_due_at"] = None if self.next_due is None else iso(self.at + self.next_due)
        return data


def iso(timestamp: float) -> str:
    """Unix time as the JSON of the dashboard and of the command give it: ISO 8601, UTC, to the
    millisecond (``2026-12-02T08:00:00.000+00:00``)."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")


def _rates(before: Reading, after: Reading, seconds: float) -> tuple[float, float, bool]:
    if before.ids is not None and after.ids is not None:
        left = len(before.ids - after.ids)
        arrived = len(after.ids - before.ids)
        return left / seconds, arrived / seconds, True
    change = after.size - before.size
    return max(0, -change) / seconds, max(0, change) / seconds, False


class History:
    """The last ``keep`` points of every dehydrator, fed one sample (all dehydrators) at a time."""

    def __init__(self, *, keep: int = 300) -> None:
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"keep must be an int of at least 1, got {keep!r}")
        self.keep = keep
        self._last: dict[str, tuple[float, Reading]] = {}
        self._points: dict[str, deque[Point]] = {}
        #: Unix time of the latest sample, or ``None`` before the first.
        self.sampled_at: float | None = None

    def add(self, at: float, readings: Iterable[Reading]) -> dict[str, Point]:
        """Record a sample taken at Unix time ``at``; return each dehydrator's new point.

        A dehydrator missing from a sample has emptied: it is dropped (its history with it) once it
        has neither elements nor dead letters.
        """
        if self.sampled_at is not None and at <= self.sampled_at:
            raise ValueError(f"samples must move forward in time: {at} after {self.sampled_at}")
        new: dict[str, Point] = {}
        seen = set()
        for reading in readings:
            seen.add(reading.name)
            previous = self._last.get(reading.name)
            left: float | None
            arrived: float | None
            if previous is None:
                left = arrived = None
                exact = reading.ids is not None
            else:
                left, arrived, exact = _rates(previous[1], reading, at - previous[0])
            point = Point(
                at=at,
                size=reading.size,
                due=reading.due,
                claimed=reading.claimed,
                dead=reading.dead,
                next_due=reading.next_due,
                oldest_due=reading.oldest_due,
                left_rate=left,
                arrived_rate=arrived,
                exact=exact,
            )
            self._points.setdefault(reading.name, deque(maxlen=self.keep)).append(point)
            self._last[reading.name] = (at, reading)
            new[reading.name] = point
        for gone in set(self._last) - seen:
            del self._last[gone]
            del self._points[gone]
        self.sampled_at = at
        return new

    def points(self) -> Mapping[str, list[Point]]:
        """Every dehydrator's points, oldest first, by name (sorted)."""
        return {name: list(self._points[name]) for name in sorted(self._points)}

    def latest(self) -> dict[str, Point]:
        return {name: self._points[name][-1] for name in sorted(self._points)}
