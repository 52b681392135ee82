"""Clocks for the async side: the time, and how to wait for a moment of it.

A clock is asked for deadlines in its own time, never for durations in the event loop's: a clock
whose seconds are real seconds turns a deadline into the loop's (as trio's
``Clock.deadline_to_sleep_time`` does); a fake clock cancels the waits it passes when it is
advanced. Either way the caller writes ``with clock.move_on_at(deadline):`` once, and never asks
which kind of clock it holds.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Final

import anyio

if TYPE_CHECKING:
    from rehydrate.abc import Clock

__all__ = [
    "ClockBase",
    "RealClock",
    "ServerClock",
    "SystemClock",
    "WallClock",
    "wait_or_sleep",
    "wall",
    "wall_reader",
]


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


class ServerClock(RealClock):
    """A server's Unix time as seen from this process, for stores whose server keeps the time.

    The Redis store (``TIME``) and the PostgreSQL store (``clock_timestamp()``) give absolute times
    (due times, leases) in it. It reads ``local`` (this process's monotonic clock) plus the offset
    to the server's clock measured when the store opened (:meth:`set_offset`), and never goes
    backwards. Scripts and statements never use it: they read the server's clock themselves.
    ``pinned_us`` and ``skew_us`` are for tests (``tests/stores/server_clock.py`` sets them): the
    store hands them to the server side, so that every script or statement reads the pinned and
    shifted time, and this clock agrees with them.
    """

    #: How often a store measures the offset again, in seconds of ``local``: a server whose clock
    #: was stepped (a virtual machine resumed, NTP's first sync) would otherwise be misread by
    #: this process until the store is reopened, and leases and ``at=`` times with it.
    resync_every: float = 60.0

    def __init__(self, server: str, *, local: Callable[[], float] = time.monotonic) -> None:
        self._server = server
        self._local = local
        self._offset = time.time() - local()
        self._last = -math.inf
        #: When (by ``local``) the store should measure the offset again; never before it first has.
        self.next_sync = math.inf
        #: Microseconds added to the server's time by every script or statement and by this clock.
        self.skew_us = 0
        #: When set, the server's time is replaced by this (in microseconds).
        self.pinned_us: int | None = None

    def set_offset(self, server_seconds: float, local_seconds: float) -> None:
        """The server read ``server_seconds`` when ``local`` read ``local_seconds``.

        A later offset that is lower holds this clock where it is until the server's time catches
        up (it never goes backwards); a higher one moves it forward at once."""
        self._offset = server_seconds - local_seconds
        self.next_sync = local_seconds + self.resync_every

    def take_sync(self) -> bool:
        """Whether the store should measure the offset again before its next call; once ``True``,
        the next is ``resync_every`` later whatever the measurement does (not again at once, nor
        by every call meanwhile; a failed one leaves the offset as it was)."""
        now = self._local()
        if now < self.next_sync:
            return False
        self.next_sync = now + self.resync_every
        return True

    def __call__(self) -> float:
        if self.pinned_us is not None:
            return (self.pinned_us + self.skew_us) / 1e6
        now = self._local() + self._offset + self.skew_us / 1e6
        if now < self._last:
            return self._last
        self._last = now
        return now

    def wall(self) -> float:
        """The server's clock is Unix time: wall times map onto this clock one to one."""
        return self()

    def __repr__(self) -> str:
        return f"<{self._server} server clock, offset {self._offset:.6f} s>"


async def wait_or_sleep(event: anyio.Event, clock: Clock, timeout: float | None) -> bool:
    """Wait for ``event`` or for ``timeout`` seconds of ``clock``; ``True`` if the event fired."""
    if timeout is not None and timeout <= 0:
        return event.is_set()
    return await clock.wait(event, None if timeout is None else clock() + timeout)


def wall(clock: Clock) -> float:
    """Unix time now by ``clock``: its ``wall()`` if it has one (every clock of this package
    does), else ``time.time()`` (a clock of your own whose seconds are real seconds)."""
    return float(wall_reader(clock)())


def wall_reader(clock: Clock) -> Callable[[], float]:
    """What :func:`wall` calls for ``clock``, for a caller that reads it often (once per
    occurrence) and looks it up once."""
    # ``time.time`` itself where that is all the method does (the system and wall clocks): a
    # method call costs more than the clock read.
    if type(clock) in _READS_TIME:
        return time.time
    method = getattr(clock, "wall", None)
    return method if callable(method) else time.time


#: The clocks whose ``wall()`` is ``time.time()`` (their subclasses may say otherwise).
_READS_TIME: Final = frozenset({SystemClock, WallClock})
