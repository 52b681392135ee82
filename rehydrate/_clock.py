"""Clocks for the async side: the time, and how to wait for a moment of it.

A clock is asked for deadlines in its own time, never for durations in the event loop's: a clock
whose seconds are real seconds turns a deadline into the loop's (as trio's
``Clock.deadline_to_sleep_time`` does); a fake clock cancels the waits it passes when it is
advanced. Either way the caller writes ``with clock.move_on_at(deadline):`` once, and never asks
which kind of clock it holds.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from rehydrate.abc import Clock

__all__ = ["ClockBase", "RealClock", "SystemClock", "WallClock", "wait_or_sleep", "wall"]


class ClockBase(ABC):
    """The :class:`~rehydrate.abc.Clock` verbs, given the time and a cancel scope with a deadline."""

    @abstractmethod
    def __call__(self) -> float:
        """The current time in seconds. Never goes backwards."""

    @abstractmethod
    def move_on_at(self, deadline: float) -> AbstractContextManager[anyio.CancelScope]:
        """A cancel scope that is cancelled once this clock reads ``deadline``."""

    def wall(self) -> float:
        """Unix time now, as this clock sees it: how wall times (cron, ``defer(at=...)``) map onto it.

        A wall time ``w`` is this clock's ``self() + (w - self.wall())``. Real clocks say
        ``time.time()`` (a clock already in Unix time, :class:`WallClock`, says its own reading);
        a ``FakeClock`` says its fake time, so a test crosses a daylight-saving change at once.
        """
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        """Return once this clock reads ``deadline`` (after one checkpoint if it already does)."""
        if deadline <= self():
            await anyio.lowlevel.checkpoint()  # lets the others run, as ``sleep(0)`` does
            return
        with self.move_on_at(deadline):
            await anyio.sleep_forever()

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock."""
        await self.sleep_until(self() + seconds)

    async def wait(self, event: anyio.Event, deadline: float | None) -> bool:
        """Wait for ``event``, or until this clock reads ``deadline``; ``True`` if the event is set."""
        if event.is_set():
            return True
        if deadline is None:
            await event.wait()
            return True
        with self.move_on_at(deadline):
            await event.wait()
        return event.is_set()


class RealClock(ClockBase):
    """A clock whose seconds pass in real time: the event loop times its waits directly."""

    def move_on_at(self, deadline: float) -> anyio.CancelScope:
        # The loop's clock and this one tick together: translate the deadline once.
        return anyio.CancelScope(deadline=anyio.current_time() + (deadline - self()))

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(deadline - self())

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class SystemClock(RealClock):
    """``time.monotonic``: immune to wall-clock steps; the memory store's default."""

    def __call__(self) -> float:
        return time.monotonic()

    def __repr__(self) -> str:
        return "SystemClock()"


class WallClock(RealClock):
    """``time.time``: survives a restart, so durable stores keep due times in it."""

    def __call__(self) -> float:
        return time.time()

    def wall(self) -> float:
        return self()

    def __repr__(self) -> str:
        return "WallClock()"


async def wait_or_sleep(event: anyio.Event, clock: Clock, timeout: float | None) -> bool:
    """Wait for ``event`` or for ``timeout`` seconds of ``clock``; ``True`` if the event fired."""
    if timeout is not None and timeout <= 0:
        return event.is_set()
    return await clock.wait(event, None if timeout is None else clock() + timeout)


def wall(clock: Clock) -> float:
    """Unix time now by ``clock``: its ``wall()`` if it has one (every clock of this package
    does), else ``time.time()`` (a clock of your own whose seconds are real seconds)."""
    method = getattr(clock, "wall", None)
    return float(method()) if callable(method) else time.time()
