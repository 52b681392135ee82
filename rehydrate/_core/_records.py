"""The records the store contract speaks of: what ``claim``, ``info`` and ``summary`` return.

They live apart from the :class:`~rehydrate.Dehydrator` so that the contract (``rehydrate.abc``)
and every store can name them without importing an implementation. Frozen: a record is a
snapshot, never a handle on the element.

Plain slotted classes, not attrs classes as elsewhere: every store imports these, and so does
each ``rehydrate`` command that touches one, where importing attrs and generating the classes'
methods was a large share of a one-shot verb's start-up (``benchmarks/bench_cli.py``). What attrs gave
them is here by hand: keyword-only ``__init__``, a ``repr``, equality and hashing on the fields
that say which element it is, immutability, pickling.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, NoReturn

__all__ = ["Claim", "ElementInfo", "Summary", "WorkerRecord"]


class _Record:
    """Frozen, slotted, compared and hashed by ``_eq`` fields, shown with all ``_fields``."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]]
    #: The fields equality and the hash look at (all of them, unless a record says otherwise).
    _eq: ClassVar[tuple[str, ...]]

    def __init_subclass__(cls) -> None:
        cls._eq = vars(cls).get("_eq") or cls._fields

    def _values(self, names: tuple[str, ...]) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in names)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({shown})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values(self._eq) == other._values(self._eq)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values(self._eq)))

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self._values(self._fields)))


def _rebuild(cls: type[_Record], values: tuple[Any, ...]) -> _Record:
    record = object.__new__(cls)
    for name, value in zip(cls._fields, values, strict=True):
        object.__setattr__(record, name, value)
    return record


_set = object.__setattr__


class Claim(_Record):
    """One element taken by :meth:`Dehydrator.claim`, leased to the claimer until ``lease_until``.

    ``attempt`` is 1 on first delivery and one more with every claim since, except the claims
    handed back unrun (``Store.hand_back``: a graceful stop, ``claim_ahead``): this claim, plus
    each earlier one that failed, was retried, or lost its lease. ``token`` identifies this very
    claim: pass it back to ``ack``, ``extend``, ``reschedule`` or ``xack`` to fence them. Once the
    lease runs out and someone else claims the element, or the element is pulled and a new one
    pushed under its id, a stale claimer's fenced calls do nothing. (Fencing with ``attempt`` alone,
    as ReDe's XACK does, cannot tell a new element under a reused id from the old one.)

    Two claims are equal when ``id``, ``element``, ``attempt`` and ``lease_until`` are.
    """

    __slots__ = ("attempt", "claimed_at", "due", "element", "id", "lease_until", "revision", "token")
    _fields = ("id", "element", "attempt", "lease_until", "token", "due", "claimed_at", "revision")
    _eq = ("id", "element", "attempt", "lease_until")

    id: str
    element: Any
    attempt: int
    lease_until: float
    #: The fencing token: unique to this claim in the store, never reused.
    token: int
    #: When the element became due (its lateness is ``claimed_at - due``).
    due: float
    #: When it was claimed, in the same clock.
    claimed_at: float
    #: The element's revision as this claim filed it (see :class:`ElementInfo`): a write
    #: conditional on it (``Store.replace_if``) succeeds only if nobody changed the element
    #: since, the claim's own lease renewals aside.
    revision: int

    def __init__(
        self,
        *,
        id: str,
        element: Any,
        attempt: int,
        lease_until: float,
        token: int = 0,
        due: float = 0.0,
        claimed_at: float = 0.0,
        revision: int = 0,
    ) -> None:
        # Through the slots' own setters: a claim is made per element claimed, and this is
        # faster than ``object.__setattr__`` (or attrs's frozen ``__init__``).
        _claim_id(self, id)
        _claim_element(self, element)
        _claim_attempt(self, attempt)
        _claim_lease_until(self, lease_until)
        _claim_token(self, token)
        _claim_due(self, due)
        set_claimed_at(self, claimed_at)
        set_claim_revision(self, revision)

    @property
    def lateness(self) -> float:
        """Seconds between the element's due time and its claim."""
        return max(0.0, self.claimed_at - self.due)


#: The slots' setters of :class:`Claim`, in ``Claim._fields`` order: :func:`new_claim` calls
#: them, and so does a loop that makes claims and cannot afford a call of it each (the memory
#: store's).
CLAIM_SETTERS: Final = tuple(vars(Claim)[name].__set__ for name in Claim._fields)
(
    _claim_id,
    _claim_element,
    _claim_attempt,
    _claim_lease_until,
    _claim_token,
    _claim_due,
    set_claimed_at,
    set_claim_revision,
) = CLAIM_SETTERS


def new_claim(
    id: str,
    element: Any,
    attempt: int,
    lease_until: float,
    token: int,
    due: float,
    claimed_at: float,
    revision: int = 0,
) -> Claim:
    """A :class:`Claim` from positional fields, in ``Claim._fields`` order: what the stores make
    for each element they claim (a third cheaper than the keyword-only constructor)."""
    claim = _new_record(Claim)
    _claim_id(claim, id)
    _claim_element(claim, element)
    _claim_attempt(claim, attempt)
    _claim_lease_until(claim, lease_until)
    _claim_token(claim, token)
    _claim_due(claim, due)
    set_claimed_at(claim, claimed_at)
    set_claim_revision(claim, revision)
    return claim


_new_record = object.__new__


class ElementInfo(_Record):
    """What :meth:`Dehydrator.info` knows about one element, in the dehydrator's clock."""

    __slots__ = ("attempt", "claimed", "due", "id", "revision", "ttl")
    _fields = ("id", "due", "ttl", "attempt", "claimed", "revision")
    _eq = ("id", "due", "ttl", "attempt", "claimed")

    id: str
    #: When the element is (or was) due, in the dehydrator's clock.
    due: float
    #: The TTL (or lease) it was last scheduled with, in seconds.
    ttl: float
    #: How many times it has been claimed, less the claims handed back unrun (see :class:`Claim`).
    attempt: int
    #: Whether it is under a claim that has not been acked or rescheduled (its lease may have run out).
    claimed: bool
    #: The element's revision: a number that every write of the element changes (a push, a
    #: replace, an update, a claim, a reschedule, a hand-back, a conditional write) and a
    #: lease's renewal (``extend``) keeps, never given twice in a store, so never to a new element under a
    #: reused id. The conditional writes (``Store.replace_if``, ``update_if``, ``pull_if``)
    #: take it: compare-and-set. Not part of equality (two reads of one state are equal).
    revision: int

    def __init__(
        self, *, id: str, due: float, ttl: float, attempt: int, claimed: bool, revision: int = 0
    ) -> None:
        _set(self, "id", id)
        _set(self, "due", due)
        _set(self, "ttl", ttl)
        _set(self, "attempt", attempt)
        _set(self, "claimed", claimed)
        _set(self, "revision", revision)


def is_held(info: ElementInfo, now: float) -> bool:
    """Whether a worker holds the element at ``now``: claimed, its lease running (one that ran
    out is as good as due: its worker is taken for dead, as by a claim)."""
    return info.claimed and info.due > now


class Summary(_Record):
    """A dehydrator at a glance (``rehydrate stats``): counts, and the time to the next due element."""

    __slots__ = ("claimed", "due", "size", "ttn")
    _fields = ("size", "due", "claimed", "ttn")

    #: Every element held: waiting, due and claimed.
    size: int
    #: Elements due now, claims whose lease has run out included.
    due: int
    #: Elements under a claim that has not been acked or rescheduled (its lease may have run out).
    claimed: int
    #: Seconds until the next element is due (``0.0`` if one is); ``None`` when empty.
    ttn: float | None

    def __init__(self, *, size: int, due: int, claimed: int, ttn: float | None) -> None:
        _set(self, "size", size)
        _set(self, "due", due)
        _set(self, "claimed", claimed)
        _set(self, "ttn", ttn)


class WorkerRecord(_Record):
    """A running worker as the store last heard of it (:meth:`Store.workers`).

    A :class:`~rehydrate.Scheduler` sends one every few seconds (its heartbeat); a worker that
    stopped cleanly is gone, one that died stays listed, no longer ``alive``, for a while after its
    heartbeat expired, so an operator can see what went missing and when. (Not hashable: ``data``
    is a dict.)
    """

    __slots__ = ("age", "alive", "data", "expires", "id", "last_seen")
    _fields = ("id", "data", "last_seen", "expires", "age", "alive")

    #: The worker's id (``host:pid:random`` for a scheduler).
    id: str
    #: What the worker sent with its last heartbeat, as a JSON object (see ``docs/monitoring.md``).
    data: dict[str, Any]
    #: When the store received the last heartbeat, in the store's clock.
    last_seen: float
    #: When that heartbeat expires (or expired), in the store's clock.
    expires: float
    #: Seconds since the last heartbeat, when the store answered.
    age: float
    #: Whether the heartbeat had not yet expired when the store answered.
    alive: bool

    def __init__(
        self, *, id: str, data: dict[str, Any], last_seen: float, expires: float, age: float, alive: bool
    ) -> None:
        _set(self, "id", id)
        _set(self, "data", data)
        _set(self, "last_seen", last_seen)
        _set(self, "expires", expires)
        _set(self, "age", age)
        _set(self, "alive", alive)
