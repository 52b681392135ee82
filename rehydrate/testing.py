"""Helpers for testing code that uses rehydrate: move time forward instead of sleeping."""

from __future__ import annotations

from datetime import timedelta

from rehydrate._core import _validate

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that stands still until told to move.

    Pass it wherever rehydrate takes a ``clock`` (``Dehydrator(clock=clock)``) and call
    :meth:`advance` to let time pass. It never goes backwards.

    >>> clock = FakeClock()
    >>> clock.advance(1.5)
    1.5
    >>> clock()
    1.5
    """

    def __init__(self, start: float = 0.0) -> None:
        if isinstance(start, bool) or not isinstance(start, (int, float)):
            raise _validate.InvalidTypeError(f"start must be a number, not {type(start).__name__}")
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    def advance(self, seconds: float | int | timedelta) -> float:
        """Move the clock ``seconds`` forward and return the new time."""
        self._now += _validate.seconds(seconds, "seconds")
        return self._now

    def __repr__(self) -> str:
        return f"FakeClock({self._now!r})"
