"""The records a scheduler hands out: deliveries, dead letters, stats.

They are the scheduler's public vocabulary, kept apart from the machinery that makes them
(``_runner.py``) and from the :class:`~rehydrate.Scheduler` that registers and starts it.
"""

from __future__ import annotations

import bisect
import contextvars
from collections import deque
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

import attrs

from rehydrate._core._records import Claim
from rehydrate._core._validate import Seconds
from rehydrate.abc import Store
from rehydrate.errors import SchedulerNotRunningError

__all__ = [
    "DEAD_SUFFIX",
    "LATENESS_BUCKETS",
    "Counters",
    "DeadLetter",
    "Delivery",
    "Stats",
    "current_delivery",
    "delivery_from_claim",
    "delivery_var",
    "stats_of",
]

#: Suffix of the dehydrator that holds a dehydrator's dead letters.
DEAD_SUFFIX: Final = ".dead"
#: How many lateness samples the stats keep (the most recent ones), per dehydrator.
_LATENESS_SAMPLES: Final = 10_000
#: The upper bounds (seconds) of the lateness histogram that ``rehydrate worker --metrics-port``
#: serves: from "on time" (the timer loop's own jitter) to "a worker was missing for minutes".
LATENESS_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@attrs.frozen(kw_only=True, slots=False)
class Delivery:
    """One element handed to a handler or a channel, under a lease.

    ``ack()`` removes it for good, ``retry(delay)`` brings it back later, ``extend()`` keeps the lease
    alive. Each is fenced by the claim's ``token``: once the lease has run out and someone else has
    claimed the element (or it was cancelled and a new one deferred under its id), they do nothing
    and return ``False``.
    """

    name: str
    id: str
    element: Any
    #: 1 on first delivery; one more after each run that failed, was retried or lost its lease
    #: (a worker that died); a delivery handed back unrun (a graceful stop) does not count.
    attempt: int
    #: When it was due and when it was claimed, in the store's clock. (With ``claim_ahead``, the
    #: claim comes before the due time: ``claimed_at`` is then when it was handed to the handler,
    #: at or after ``due``, so that ``lateness`` is the handler's.)
    due: float
    claimed_at: float
    lease_until: float
    #: The claim's fencing token (see :class:`~rehydrate.Claim`).
    token: int = attrs.field(eq=False)
    _store: Store = attrs.field(repr=False, alias="store")
    #: The scheduler's counters, for deliveries from a channel (a handler's are counted for it).
    _counters: Counters | None = attrs.field(default=None, repr=False, eq=False, alias="counters")
    #: For an occurrence of a recurring schedule, its nominal time (aware, UTC): an idempotency
    #: key per occurrence. ``None`` for one-shot work.
    scheduled_for: datetime | None = None

    @property
    def lateness(self) -> float:
        """Seconds between the due time and the claim."""
        return max(0.0, self.claimed_at - self.due)

    async def ack(self) -> bool:
        """Done: remove the element. ``False`` if the claim was lost (it will be redelivered)."""
        (ok,) = await self._store.ack(self.name, [(self.id, self.token)])
        self._count(ok, "acked")
        return ok

    async def retry(self, delay: Seconds = 0) -> bool:
        """Give the element back, due again in ``delay`` seconds. ``False`` if the claim was lost."""
        ok = await self._store.reschedule(self.name, self.id, ttl=delay, token=self.token)
        self._count(ok, "retried")
        return ok

    def _count(self, ok: bool, counter: str) -> None:
        """For a channel's delivery: count the outcome, or a lost claim."""
        if self._counters is not None:
            name = counter if ok else "lost"
            setattr(self._counters, name, getattr(self._counters, name) + 1)

    async def extend(self, lease: Seconds) -> float | None:
        """Keep the claim for ``lease`` more seconds; the new ``lease_until``, or ``None`` if lost."""
        return await self._store.extend(self.name, self.id, lease=lease, token=self.token)


def delivery_from_claim(
    name: str,
    claim: Claim,
    store: Store,
    counters: Counters | None = None,
    *,
    element: Any,
    scheduled_for: datetime | None = None,
) -> Delivery:
    """A :class:`Delivery` of ``claim`` from ``name``, made as fast as can be.

    ``element`` is what the handler gets: the claimed element without its trace context, or
    a schedule's element.

    One is made per element delivered, so its ``__dict__`` is given whole, in one step:
    attrs's frozen ``__init__`` goes through ``object.__setattr__`` per field, and slots
    filled one by one through their setters took half as long again as this (the class is
    not slotted for that). The object is the same as the public constructor makes (equal,
    same ``repr``).
    """
    delivery = _new(Delivery)
    _set(
        delivery,
        "__dict__",
        {
            "name": name,
            "id": claim.id,
            "element": element,
            "attempt": claim.attempt,
            "due": claim.due,
            "claimed_at": claim.claimed_at,
            "lease_until": claim.lease_until,
            "token": claim.token,
            "_store": store,
            "_counters": counters,
            "scheduled_for": scheduled_for,
        },
    )
    return delivery


_new = object.__new__
_set = object.__setattr__


#: The delivery the current task's handler runs for. A worker sets it per element and clears it
#: when it goes idle (``None``) rather than resetting it after each (as costly again): a task
#: that a handler starts copies the context then, and keeps that delivery either way.
delivery_var: contextvars.ContextVar[Delivery | None] = contextvars.ContextVar("rehydrate_delivery")


def current_delivery() -> Delivery:
    """The delivery a handler is running for (id, attempt, lateness...), from inside the handler."""
    delivery = delivery_var.get(None)
    if delivery is None:
        raise SchedulerNotRunningError("current_delivery() is only available inside a handler")
    return delivery


@attrs.frozen(kw_only=True)
class DeadLetter:
    """An element that failed every attempt, as kept in ``<name>.dead``."""

    id: str
    element: Any
    #: ``repr`` of the last exception.
    error: str
    attempts: int
    #: Unix time of the last failure.
    failed_at: float


@attrs.frozen(kw_only=True)
class Stats:
    """Counters since the scheduler started, and the lateness of recent deliveries (seconds)."""

    delivered: int
    acked: int
    retried: int
    dead_lettered: int
    #: Acks that came too late: the lease had run out and the element was claimed again.
    lost: int
    #: Claimed and not yet acked (or retried): running, waiting for a worker, or held until due
    #: (``claim_ahead``).
    in_flight: int
    lateness_p50: float | None
    lateness_p99: float | None
    lateness_max: float | None
    #: Deliveries by lateness, per bucket of :data:`LATENESS_BUCKETS` (upper bounds, seconds) and
    #: one more for the rest (not cumulative); ``None`` unless
    #: :meth:`Scheduler.keep_lateness_histogram` was called.
    lateness_histogram: tuple[int, ...] | None = None
    #: The sum of the lateness counted in ``lateness_histogram`` (``0.0`` without one).
    lateness_sum: float = 0.0
    #: Elements of a limited handler (``handler(limits=...)``) parked because their limit key
    #: was full: handed back unrun, no attempt counted, to run when woken. One element parked
    #: twice counts twice.
    limit_parked: int = 0
    #: Slots (and starts) of a handler's limits taken: the deliveries that were allowed to run.
    limit_granted: int = 0
    #: Parked elements this process's limit steps woke (filed due earlier: at once when there was
    #: room, else at the earliest chance), whoever parked them.
    limit_woken: int = 0


@attrs.define(eq=False)
class Counters:
    """What :meth:`Scheduler.stats` reports for one dehydrator, counted as it happens (in the event
    loop's thread).

    ``histogram`` (bucket counts over :data:`LATENESS_BUCKETS`, then +Inf) and ``lateness_sum``
    are kept only once :meth:`keep_histogram` is called (``rehydrate worker --metrics-port``):
    a scheduler nobody scrapes pays nothing for them per delivery.
    """

    delivered: int = 0
    acked: int = 0
    retried: int = 0
    dead_lettered: int = 0
    lost: int = 0
    lateness: deque[float] = attrs.field(factory=lambda: deque(maxlen=_LATENESS_SAMPLES))
    lateness_max: float | None = None
    histogram: list[int] | None = None
    lateness_sum: float = 0.0
    limit_parked: int = 0
    limit_granted: int = 0
    limit_woken: int = 0

    def keep_histogram(self) -> None:
        """Count lateness into buckets from now on (idempotent)."""
        if self.histogram is None:
            self.histogram = [0] * (len(LATENESS_BUCKETS) + 1)

    def record_lateness(self, seconds: float) -> None:
        self.lateness.append(seconds)
        if self.lateness_max is None or seconds > self.lateness_max:
            self.lateness_max = seconds
        if self.histogram is not None:
            self.histogram[bisect.bisect_left(LATENESS_BUCKETS, seconds)] += 1
            self.lateness_sum += seconds

    def snapshot(self, in_flight: int) -> Stats:
        return stats_of([self], in_flight)


def stats_of(parts: Iterable[Counters], in_flight: int) -> Stats:
    """The :class:`Stats` of several dehydrators' counters together (their sums; the percentiles
    of their recent lateness samples taken together)."""
    parts = list(parts)
    ordered = sorted(sample for part in parts for sample in part.lateness)
    maxima = [part.lateness_max for part in parts if part.lateness_max is not None]
    histograms = [part.histogram for part in parts if part.histogram is not None]
    return Stats(
        delivered=sum(part.delivered for part in parts),
        acked=sum(part.acked for part in parts),
        retried=sum(part.retried for part in parts),
        dead_lettered=sum(part.dead_lettered for part in parts),
        lost=sum(part.lost for part in parts),
        in_flight=in_flight,
        lateness_p50=_percentile(ordered, 0.50) if ordered else None,
        lateness_p99=_percentile(ordered, 0.99) if ordered else None,
        lateness_max=max(maxima) if maxima else None,
        lateness_histogram=tuple(map(sum, zip(*histograms, strict=True))) if histograms else None,
        lateness_sum=sum(part.lateness_sum for part in parts),
        limit_parked=sum(part.limit_parked for part in parts),
        limit_granted=sum(part.limit_granted for part in parts),
        limit_woken=sum(part.limit_woken for part in parts),
    )


def _percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
