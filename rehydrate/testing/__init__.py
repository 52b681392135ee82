"""Helpers for testing code that uses rehydrate: move time forward instead of sleeping.

Test on a memory store with production's serializer: ``MemoryStore(clock=clock,
serializer="json")``, or ``open_store("memory://?serializer=json", clock=clock)`` (``"msgpack"``
if production uses it). Without one, the memory store hands a handler the very object deferred,
so a test passes with a datetime or a set that every durable store refuses, or a tuple that it
hands back as a list. With one, the test fails where production would: the element is refused at
the ``defer`` with the durable stores' :class:`~rehydrate.errors.InvalidTypeError`, and every
handler, dead letter and read gets the element as they would give it.

>>> import anyio
>>> from rehydrate import open_store
>>> async def main() -> object:
...     async with open_store("memory://?serializer=json") as store:
...         await store.push("jobs", ("a", 1), ttl=0, id="x")
...         return await store.look("jobs", "x")
>>> anyio.run(main)
['a', 1]
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import anyio

from rehydrate._clock import ClockBase
from rehydrate._core import _validate

__all__ = ["FakeClock"]


class FakeClock(ClockBase):
    """A clock that stands still until told to move.

    Pass it wherever rehydrate takes a clock (``Dehydrator(clock=clock)``,
    ``MemoryStore(clock=clock)``) and call :meth:`advance` to let time pass: everything waiting on
    it (a scheduler waiting for the next due time, a lease being renewed) wakes when its deadline is
    reached. It never goes backwards.

    >>> clock = FakeClock()
    >>> clock.advance(1.5)
    1.5
    >>> clock()
    1.5

    ``FakeClock(start=datetime(2026, 3, 29, tzinfo=UTC))`` gives it a wall-clock origin: it reads
    Unix time from there, so a test of a cron schedule crosses a daylight-saving change in
    milliseconds. With a number (or nothing), its wall time is the real time plus how far it was
    advanced.

    In an async test, follow ``advance`` with ``await anyio.wait_all_tasks_blocked()`` to let
    the woken tasks run before asserting.
    """

    def __init__(self, start: float | datetime = 0.0) -> None:
        if isinstance(start, datetime):
            if start.tzinfo is None or start.utcoffset() is None:
                raise _validate.InvalidArgumentError(
                    "start must be an aware datetime (e.g. datetime(2026, 3, 29, tzinfo=UTC))"
                )
            # A wall-clock origin: the clock reads Unix time, and wall() is its own reading.
            start = start.timestamp()
            self._wall_origin: float | None = start
        elif isinstance(start, bool) or not isinstance(start, (int, float)):
            raise _validate.InvalidTypeError(
                f"start must be a number or an aware datetime, not {type(start).__name__}"
            )
        else:
            # No origin given: wall time is the real time, plus the time the fake clock advanced.
            self._wall_origin = None
        self._start = self._now = float(start)
        #: ``(deadline, seq, alarm)`` for every scope waiting on this clock (a heap).
        self._alarms: list[tuple[float, int, _Alarm]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        """Unix time by this clock: cron, ``Every(start=...)`` and ``defer(at=...)`` read it."""
        if self._wall_origin is not None:
            return self._now
        return time.time() + (self._now - self._start)

    def advance(self, seconds: float | int | timedelta) -> float:
        """Move the clock ``seconds`` forward, wake the waits it passes, return the new time."""
        self._now += _validate.seconds(seconds, "seconds")
        alarms = self._alarms
        while alarms and alarms[0][0] <= self._now:
            cancel = heapq.heappop(alarms)[2].cancel
            if cancel is not None:
                cancel()
        return self._now

    @contextmanager
    def move_on_at(self, deadline: float) -> Iterator[anyio.CancelScope]:
        """A cancel scope that :meth:`advance` cancels once the clock reaches ``deadline``."""
        scope = anyio.CancelScope()
        alarm = _Alarm(scope.cancel)
        if deadline <= self._now:
            scope.cancel()
        else:
            heapq.heappush(self._alarms, (deadline, next(self._seq), alarm))
        try:
            with scope:
                yield scope
        finally:
            alarm.cancel = None  # dropped when the clock gets there

    def __repr__(self) -> str:
        return f"FakeClock({self._now!r})"


class _Alarm:
    """What :meth:`FakeClock.advance` does at a deadline; ``None`` once the scope has been left."""

    __slots__ = ("cancel",)

    def __init__(self, cancel: Callable[[], None]) -> None:
        self.cancel: Callable[[], None] | None = cancel
