"""What the stores behind a network server (Redis, PostgreSQL) share: one retry policy for
transient failures, the server clock's sampling, and the check of their integer options.

* :class:`Backoff`: a call that met a transient failure (a lost connection, a timeout, a
  serialization failure) is tried again ``retries`` times, ``first`` seconds apart and doubling,
  at most :data:`MAX_PAUSE` apart; then the store's own
  :class:`~rehydrate.errors.StoreUnavailableError` is raised. What counts as transient is each
  client's to say; how long to wait, and when to give up, is here.
* :func:`set_offset`: a store's clock is the server's (:class:`~rehydrate._clock.ServerClock`):
  this process's monotonic clock plus an offset, measured from a few readings of the server's
  time, each between two readings of the local clock. The reading with the shortest round trip
  is the one least off; the server read it, at best guess, halfway through.
* :func:`int_option`: ``retries``, ``batch_size``, ``pool_size``... an ``int`` within bounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Final

import anyio
import attrs

from rehydrate._clock import ServerClock
from rehydrate.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["MAX_PAUSE", "SAMPLES", "Backoff", "int_option", "local_clock", "set_offset"]

#: The longest pause between two attempts of a call.
MAX_PAUSE: Final = 2.0
#: How many readings of the server's time one measure of the clock offset takes.
SAMPLES: Final = 3


def int_option(value: object, name: str, low: int, high: int) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) from ``low`` to ``high``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be between {low} and {high}, got {value!r}")
    return value


@attrs.frozen
class Backoff:
    """How a remote store retries a call that met a transient failure (see the module docstring).

    ``retries`` (at least 0) more attempts after the first, the first pause ``first`` seconds.
    """

    retries: int
    first: float

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt number ``attempt`` (1-based): ``first`` doubled each
        time, at most :data:`MAX_PAUSE`."""
        return float(min(self.first * 2 ** (attempt - 1), MAX_PAUSE))

    async def pause(
        self,
        attempt: int,
        exc: BaseException,
        unavailable: Callable[[BaseException, int], BaseException],
        *,
        retries: int | None = None,
    ) -> int:
        """After failed attempt ``attempt`` (1-based), which met ``exc``: raise
        ``unavailable(exc, attempt)`` if that was the last one allowed (``retries``, this
        policy's unless given: ``open`` makes one attempt, so that a wrong URL fails fast), else
        wait :meth:`delay` and give the next attempt's number."""
        if attempt > (self.retries if retries is None else retries):
            raise unavailable(exc, attempt) from exc
        await anyio.sleep(self.delay(attempt))
        return attempt + 1


def local_clock() -> float:
    """This process's clock: a store's clock is this plus the offset measured to the server's."""
    return time.monotonic()


def set_offset(clock: ServerClock, samples: Iterable[tuple[float, float, int]]) -> None:
    """Set ``clock``'s offset from readings ``(local before, local after, server µs)`` of the
    server's time: the one with the shortest round trip, read halfway through it."""
    before, after, micros = min(samples, key=lambda sample: sample[1] - sample[0])
    clock.set_offset(micros / 1e6, (before + after) / 2)
