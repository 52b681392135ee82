"""The records the store contract speaks of: what ``claim``, ``info`` and ``summary`` return.

They live apart from the :class:`~rehydrate.Dehydrator` so that the contract (``rehydrate.abc``)
and every store can name them without importing an implementation. Frozen: a record is a
snapshot, never a handle on the element.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Claim", "ElementInfo", "Summary"]


@attrs.frozen(kw_only=True)
class Claim:
    """One element taken by :meth:`Dehydrator.claim`, leased to the claimer until ``lease_until``.

    ``attempt`` is 1 on first delivery and counts every claim since. ``token`` identifies this very
    claim: pass it back to ``ack``, ``extend``, ``reschedule`` or ``xack`` to fence them. Once the
    lease runs out and someone else claims the element, or the element is pulled and a new one
    pushed under its id, a stale claimer's fenced calls do nothing. (Fencing with ``attempt`` alone,
    as ReDe's XACK does, cannot tell a new element under a reused id from the old one.)
    """

    id: str
    element: Any
    attempt: int
    lease_until: float
    #: The fencing token: unique to this claim in the store, never reused.
    token: int = attrs.field(default=0, eq=False)
    #: When the element became due (its lateness is ``claimed_at - due``).
    due: float = attrs.field(default=0.0, eq=False)
    #: When it was claimed, in the same clock.
    claimed_at: float = attrs.field(default=0.0, eq=False)

    @property
    def lateness(self) -> float:
        """Seconds between the element's due time and its claim."""
        return max(0.0, self.claimed_at - self.due)


@attrs.frozen(kw_only=True)
class ElementInfo:
    """What :meth:`Dehydrator.info` knows about one element, in the dehydrator's clock."""

    id: str
    #: When the element is (or was) due, in the dehydrator's clock.
    due: float
    #: The TTL (or lease) it was last scheduled with, in seconds.
    ttl: float
    #: How many times it has been claimed.
    attempt: int
    #: Whether it is under a claim that has not been acked or rescheduled (its lease may have run out).
    claimed: bool


@attrs.frozen(kw_only=True)
class Summary:
    """A dehydrator at a glance (``rehydrate stats``): counts, and the time to the next due element."""

    #: Every element held: waiting, due and claimed.
    size: int
    #: Elements due now, claims whose lease has run out included.
    due: int
    #: Elements under a claim that has not been acked or rescheduled (its lease may have run out).
    claimed: int
    #: Seconds until the next element is due (``0.0`` if one is); ``None`` when empty.
    ttn: float | None
