"""Retry policy maths: pure, so backoff can be tested without waiting."""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs

from rehydrate._core import _validate
from rehydrate.errors import InvalidArgumentError

__all__ = ["Backoff", "Retry"]


def _non_negative(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    _validate.seconds(value, attribute.name)


def _fraction(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise InvalidArgumentError(f"{attribute.name} must be between 0 and 1, got {value!r}")


@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential backoff with jitter and a cap.

    The n-th retry waits ``min(maximum, initial * multiplier ** (n - 1))`` seconds, less a random
    part of up to ``jitter`` of it, so workers that failed together do not retry together.
    """

    initial: float = attrs.field(default=1.0, validator=_non_negative)
    multiplier: float = attrs.field(default=2.0, validator=_non_negative)
    maximum: float = attrs.field(default=300.0, validator=_non_negative)
    jitter: float = attrs.field(default=0.2, validator=_fraction)

    def __call__(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retrying after failed attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            raise InvalidArgumentError(f"attempt must be at least 1, got {attempt!r}")
        try:
            delay = min(self.maximum, self.initial * self.multiplier ** (attempt - 1))
        except OverflowError:
            delay = self.maximum
        if self.jitter:
            delay *= 1.0 - self.jitter * (rng or random).random()
        return delay


def _as_tuple(value: object) -> tuple[type[BaseException], ...]:
    """``on=ValueError`` means ``on=(ValueError,)``; the validator checks what is inside."""
    return value if isinstance(value, tuple) else (value,)


@attrs.define(frozen=True, kw_only=True, eq=False)
class Retry(Exception):
    """How a handler's failures are retried, and a way for a handler to ask for a retry.

    As a policy (``@scheduler.handler(..., retry=Retry(attempts=5))``): an element gets at most
    ``attempts`` attempts; after each failure it is rescheduled ``backoff(attempt)`` seconds
    later; after the last one it goes to the dead letters. A run whose lease ran out (its worker
    died) counts as an attempt; one handed back unfinished (a graceful stop) does not. Only the
    exceptions in ``on`` (every ``Exception`` by default) are retried: with
    ``on=(TimeoutError, ConnectionError)``, a ``ValueError`` (a payload that will never parse)
    goes to the dead letters at once.

    Raised from a handler (``raise Retry(delay=30)``): retry this element after ``delay`` seconds
    instead of the backoff (it still counts as an attempt; ``attempts`` here is ignored).

    Why one class for both (arq keeps ``Retry`` as an exception only): the raised form is the
    policy applied to one element, and says so in the same words (``delay``); a user learns one
    name, and ``retry=`` and ``raise`` cannot drift apart. What it costs: on a raised ``Retry``
    only ``delay`` counts (``attempts``, ``backoff`` and ``on`` stay the handler's), and a policy
    is an exception nobody raises. We judged that smaller than a second public name and the
    deprecation of ``retry=Retry(...)`` everywhere it is written; if the two ever need fields of
    their own, the exception becomes a subclass, so ``raise Retry(...)`` keeps working.
    """

    attempts: int = attrs.field(default=5)
    backoff: Callable[[int], float] = attrs.field(factory=Backoff)
    delay: float | None = attrs.field(default=None)
    on: tuple[type[BaseException], ...] = attrs.field(default=(Exception,), converter=_as_tuple)

    @attempts.validator
    def _check_attempts(self, _: object, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgumentError(f"attempts must be an int of at least 1, got {value!r}")

    @backoff.validator
    def _check_backoff(self, _: object, value: object) -> None:
        if not callable(value):
            raise InvalidArgumentError("backoff must be a Backoff or a callable(attempt) -> seconds")

    @delay.validator
    def _check_delay(self, _: object, value: float | None) -> None:
        if value is not None:
            _validate.seconds(value, "delay")

    @on.validator
    def _check_on(self, _: object, value: tuple[object, ...]) -> None:
        if not value or not all(isinstance(t, type) and issubclass(t, BaseException) for t in value):
            raise InvalidArgumentError("on must be an exception class or a non-empty tuple of them")

    def retries(self, exc: BaseException) -> bool:
        """Whether a handler's failure with ``exc`` may be retried (a raised ``Retry`` always may)."""
        return isinstance(exc, (Retry, *self.on))

    def delay_after(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt``."""
        if self.delay is not None:
            return _validate.seconds(self.delay, "delay")
        if isinstance(self.backoff, Backoff):
            return self.backoff(attempt, rng)
        return _validate.seconds(self.backoff(attempt), "backoff(attempt)")

    def __str__(self) -> str:
        if self.delay is not None:
            return f"retry requested in {self.delay} s"
        return f"retry up to {self.attempts} attempts"
