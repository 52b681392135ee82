"""Helpers for testing code that uses rehydrate: move time forward instead of sleeping."""

from __future__ import annotations

import heapq
import itertools
from datetime import timedelta

import anyio

from rehydrate._core import _validate

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that stands still until told to move.

    Pass it wherever rehydrate takes a clock (``Dehydrator(clock=clock)``,
    ``MemoryStore(clock=clock)``) and call :meth:`advance` to let time pass: everything sleeping on
    it (a scheduler waiting for the next due time, a lease being renewed) wakes when its deadline is
    reached. It never goes backwards.

    >>> clock = FakeClock()
    >>> clock.advance(1.5)
    1.5
    >>> clock()
    1.5

    In an async test, follow ``advance`` with ``await anyio.wait_all_tasks_blocked()`` to let
    the woken tasks run before asserting.
    """

    real = False

    def __init__(self, start: float = 0.0) -> None:
        if isinstance(start, bool) or not isinstance(start, (int, float)):
            raise _validate.InvalidTypeError(f"start must be a number, not {type(start).__name__}")
        self._now = float(start)
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    def advance(self, seconds: float | int | timedelta) -> float:
        """Move the clock ``seconds`` forward, wake the sleepers it passes, return the new time."""
        self._now += _validate.seconds(seconds, "seconds")
        sleepers = self._sleepers
        while sleepers and sleepers[0][0] <= self._now:
            heapq.heappop(sleepers)[2].set()
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Return once the clock has been advanced by ``seconds`` (at once if ``seconds <= 0``)."""
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), event))
        await event.wait()

    def __repr__(self) -> str:
        return f"FakeClock({self._now!r})"
