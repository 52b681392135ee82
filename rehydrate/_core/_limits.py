"""The limits' rules, once, for every store: what a key's state is and what each step does to it.

A *limit key* (a limit's name and a partition key) has three parts of state, all in the store's
clock:

* **holders**: holder id -> lease end. A concurrency slot is held until its lease ends (renewed
  while held) or it is released; an expired lease is a free slot (a holder that died frees its
  slot when its lease runs out).
* **starts**: the times of the grants, for the rate windows. A rate ``n per p`` admits a start at
  ``now`` only if fewer than ``n`` starts are in ``(now - p, now]``; since every later start is at
  ``now`` or after, no window of length ``p`` ever holds more than ``n`` starts (on a clock that
  does not go backwards). A start is counted when it is granted, whether or not the work runs,
  and stays counted for ``p`` seconds.
* **waiters**: a FIFO of elements parked until the limit has room, each ``(dehydrator, id)`` with
  the attempt its element was handed back with and the time it is filed due at. Each step ends
  by *waking* at most as many of them as the limit has room for (never all): those at the head
  are moved earlier, to now when there is room, else the head alone to the earliest chance (a
  lease's end, a window sliding), so that a holder that dies still wakes a waiter when its lease
  runs out. The others are filed a *horizon* out (the longest of the lease and the windows) and
  are moved up as the head goes; a waiter whose element did not come back within a horizon of
  its time is forgotten (it was cancelled, or it comes back and queues anew).

The memory store holds this state in :class:`KeyState`; SQLite and PostgreSQL load one key's rows
into one inside a transaction and write back what changed; Redis's scripts do the same steps in
Lua (``_redis_scripts/limit.lua``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from rehydrate._core import _validate
from rehydrate.errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "HEAD_ROWS",
    "ON_ITS_WAY",
    "WAKE_MAX",
    "KeyState",
    "LimitAnswer",
    "LimitInfo",
    "LimitSpec",
    "Wake",
    "Waiter",
    "check_key",
    "check_names",
    "room",
    "wake",
]

#: A step wakes at most this many waiters at once, however much room there is: each woken one
#: that takes its slot moves the next ones up (a grant wakes too), so room is never left idle for
#: long, and a release never wakes a crowd.
WAKE_MAX: Final = 16
#: A waiter woken (due) this long ago still counts as on its way to the room made for it.
ON_ITS_WAY: Final = 1.0
#: How many waiters a store that keeps rows reads from the head of a key's FIFO per step: the
#: most a step wakes, and room to skip the waiters forgotten or on their way.
HEAD_ROWS: Final = WAKE_MAX + 64
#: The longest limit name or partition key, in UTF-8 bytes: they are part of every key, row and
#: script argument of the limit.
MAX_KEY_BYTES: Final = 512


@attrs.frozen(kw_only=True)
class LimitSpec:
    """What a limit key admits, as the stores take it: a concurrency (``None``: none), the rates
    ``(n, per seconds)``, and the lease of a held slot (seconds)."""

    concurrency: int | None
    rates: tuple[tuple[int, float], ...] = ()
    lease: float

    def __attrs_post_init__(self) -> None:
        if self.concurrency is not None and (type(self.concurrency) is not int or self.concurrency < 1):
            raise InvalidArgumentError(f"concurrency must be a positive int, got {self.concurrency!r}")
        for n, per in self.rates:
            if type(n) is not int or n < 1:
                raise InvalidArgumentError(f"a rate's n must be a positive int, got {n!r}")
            if not isinstance(per, float) or not per > 0 or per > _validate.MAX_SECONDS:
                raise InvalidArgumentError(f"a rate's window must be positive seconds, got {per!r}")
        if not isinstance(self.lease, float) or not self.lease > 0 or self.lease > _validate.MAX_SECONDS:
            raise InvalidArgumentError(f"a limit's lease must be positive seconds, got {self.lease!r}")
        if self.concurrency is None and not self.rates:
            raise InvalidArgumentError("a limit needs a concurrency or a rate")

    @property
    def window(self) -> float:
        """How long a start is remembered: the longest window (0 without rates)."""
        return max((per for _, per in self.rates), default=0.0)

    @property
    def horizon(self) -> float:
        """How far out a waiter not at the head is filed, and how long a waiter is remembered
        after its time: the longest of the lease and the windows."""
        return max(self.lease, self.window)


@attrs.define(kw_only=True)
class Waiter:
    """A parked element: where it is, the attempt it was handed back with, when it is due."""

    name: str
    id: str
    attempt: int
    until: float


@attrs.frozen
class Wake:
    """A waiter moved earlier by a step: its element is to be filed due in ``ttl`` seconds
    (``Store.reschedule(name, id, ttl=ttl, attempt=attempt)``: fenced by the attempt, it does
    nothing to an element claimed since)."""

    name: str
    id: str
    attempt: int
    ttl: float


@attrs.frozen(kw_only=True)
class LimitAnswer:
    """What a limit step answers.

    ``granted``: the slot (and the start) was taken (for a release: the holder held a slot).
    ``retry_in``: refused, the seconds until the earliest chance (a lease's end or a window
    sliding; a release may come sooner). ``parked_in``: refused with a waiter, the seconds until
    that waiter's element is to be filed due (``retry_in`` at the head, a horizon out behind it).
    ``wake``: waiters moved earlier, whose elements the caller files anew (see :class:`Wake`).
    ``parked``: for ``Store.limit_park``, the seconds until each parked waiter's element is to be
    filed due, in the order given (the caller files them itself: they are not in ``wake``).
    """

    granted: bool
    retry_in: float | None = None
    parked_in: float | None = None
    wake: tuple[Wake, ...] = ()
    parked: tuple[float, ...] = ()


@attrs.frozen(kw_only=True)
class LimitInfo:
    """One limit key seen from outside (``Store.limits``): its holders with their lease ends (in
    the store's clock), the starts it remembers, and how many elements wait for it."""

    limit: str
    key: str
    holders: dict[str, float]
    starts: int
    waiting: int


def check_names(limit: object, key: object, holder: object | None = None) -> None:
    """A limit name, a partition key and a holder id: non-empty ``str`` of at most
    :data:`MAX_KEY_BYTES` UTF-8 bytes."""
    for value, what in ((limit, "limit"), (key, "limit key"), (holder, "holder")):
        if what == "holder" and value is None:
            continue
        _validate.element_id(value, what)
        assert isinstance(value, str)
        if len(value) > MAX_KEY_BYTES // 4 and len(value.encode()) > MAX_KEY_BYTES:
            raise InvalidArgumentError(f"{what} is longer than {MAX_KEY_BYTES} bytes (UTF-8)")


def check_key(value: object) -> str:
    """What a ``limit_key`` function returned, as the partition key: a ``str`` (or an ``int``,
    written in decimal) of 1 to :data:`MAX_KEY_BYTES` UTF-8 bytes."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidTypeError(f"a limit key must be a str or an int, not {type(value).__name__}")
    text = str(value)
    check_names("limit", text)
    return text


def check_waiter(waiter: object) -> tuple[str, str, int] | None:
    if waiter is None:
        return None
    if not isinstance(waiter, tuple) or len(waiter) != 3:
        raise InvalidTypeError("waiter must be a (dehydrator name, id, attempt) tuple")
    name, id, attempt = waiter
    _validate.element_id(name, "waiter's name")
    _validate.element_id(id, "waiter's id")
    if type(attempt) is not int or attempt < 0:
        raise InvalidArgumentError(f"a waiter's attempt must be a non-negative int, got {attempt!r}")
    return name, id, attempt


def check_waiters(waiters: object) -> list[tuple[str, str, int]]:
    """``limit_park``'s waiters: a non-empty sequence of ``(name, id, attempt)``, no element
    twice."""
    if isinstance(waiters, (str, bytes)) or not isinstance(waiters, Sequence):
        raise InvalidTypeError("waiters must be a sequence of (dehydrator name, id, attempt) tuples")
    out = [w for w in (check_waiter(waiter) for waiter in waiters) if w is not None]
    if len(out) != len(waiters):
        raise InvalidArgumentError("a waiter must be a (dehydrator name, id, attempt) tuple, not None")
    if not out:
        raise InvalidArgumentError("limit_park needs at least one waiter")
    if len({(name, id) for name, id, _ in out}) != len(out):
        raise InvalidArgumentError("limit_park was given the same element twice")
    return out


def check_spec(spec: object) -> LimitSpec:
    if not isinstance(spec, LimitSpec):
        raise InvalidTypeError(f"spec must be a LimitSpec, not {type(spec).__name__}")
    return spec


def room(
    now: float, holders: dict[str, float], starts: Sequence[float], spec: LimitSpec
) -> tuple[int | float, float]:
    """How many more starts the key admits now (``inf``: no bound), and, when none, the earliest
    time one may be: the end of the first lease to run out and the slide of every full window,
    whichever is last. ``holders`` are the live ones; ``starts`` sorted, those in the window."""
    free: int | float = math.inf
    at = now
    if spec.concurrency is not None:
        free = spec.concurrency - len(holders)
        if free <= 0:
            at = max(at, min(holders.values()))
    for n, per in spec.rates:
        first = bisect.bisect_right(starts, now - per)  # starts in (now - per, now]
        inside = len(starts) - first
        if inside >= n:
            free = min(free, 0)
            # The window admits one more once all but n - 1 of its starts have left it.
            at = max(at, starts[first + inside - n] + per)
        else:
            free = min(free, n - inside)
    return max(free, 0), at


def wake(
    now: float, at: float, count: int, head: Iterable[Waiter], horizon: float
) -> tuple[list[Waiter], list[Waiter]]:
    """The waking rule: walk the FIFO from its head, forgetting the waiters more than ``horizon``
    past their time, and move the first ``count`` others that are due after ``at`` to ``at``.

    With room (``at`` is now), a waiter due already counts (it is on its way: its element is
    being claimed) only for :data:`ON_ITS_WAY` seconds after its time: one woken while its
    element was still claimed (it was being parked as the wake came) is filed at its own time,
    and must not keep the room empty until then while others wait. Without room (``at`` is the
    earliest chance, later), every waiter counts: the head alone is to be due then, not every
    waiter in turn. Returns the waiters moved (their ``until`` set) and those forgotten.
    """
    moved: list[Waiter] = []
    stale: list[Waiter] = []
    if count <= 0:
        return moved, stale
    with_room = at <= now
    for waiter in head:
        if waiter.until + horizon <= now:
            stale.append(waiter)
            continue
        if waiter.until > at:
            waiter.until = at
            moved.append(waiter)
        elif with_room and waiter.until + ON_ITS_WAY < now:
            continue
        count -= 1
        if count == 0:
            break
    return moved, stale


def wake_count(free: int | float, at: float, now: float) -> tuple[float, int]:
    """Whom a step wakes: up to the room there is, now (at most :data:`WAKE_MAX`); with no room,
    the head alone, at the earliest chance."""
    if free >= 1:
        return now, int(min(free, WAKE_MAX))
    return at, 1


class KeyState:
    """One limit key's state in memory (the memory store's; the SQL stores build one per step
    from the rows they read)."""

    __slots__ = ("holders", "new_start", "starts", "waiters")

    def __init__(self) -> None:
        self.holders: dict[str, float] = {}
        self.starts: list[float] = []
        #: In FIFO order (insertion order of the dict): (name, id) -> waiter.
        self.waiters: dict[tuple[str, str], Waiter] = {}
        #: The start the last step recorded (``None``: none), for a store that writes rows.
        self.new_start: float | None = None

    @classmethod
    def loaded(
        cls, holders: Iterable[tuple[str, float]], starts: Iterable[float], waiters: Iterable[Waiter]
    ) -> tuple[KeyState, dict[tuple[str, str], tuple[int, float]]]:
        """A state built from a store's rows (the waiters in FIFO order: the head and the
        caller's own, not necessarily all), and what its waiters were, for :meth:`changes`."""
        state = cls()
        state.holders = dict(holders)
        state.starts = sorted(starts)
        for waiter in waiters:
            state.waiters[waiter.name, waiter.id] = waiter
        return state, {key: (w.attempt, w.until) for key, w in state.waiters.items()}

    def changes(
        self, before: dict[tuple[str, str], tuple[int, float]]
    ) -> tuple[list[tuple[str, str]], list[Waiter]]:
        """The waiters to delete and those to write (new or changed), against ``before``."""
        gone = [key for key in before if key not in self.waiters]
        written = [w for key, w in self.waiters.items() if before.get(key) != (w.attempt, w.until)]
        return gone, written

    def prune(self, now: float, window: float) -> None:
        """Forget the leases that ran out and the starts that left every window."""
        holders = self.holders
        if holders:
            for holder in [h for h, until in holders.items() if until <= now]:
                del holders[holder]
        if self.starts:
            del self.starts[: bisect.bisect_right(self.starts, now - window)]

    def idle(self) -> bool:
        return not self.holders and not self.starts and not self.waiters

    def _wake(self, now: float, spec: LimitSpec) -> list[Wake]:
        free, at = room(now, self.holders, self.starts, spec)
        at, count = wake_count(free, at, now)
        moved, stale = wake(now, at, count, list(self._head(count)), spec.horizon)
        for waiter in stale:
            del self.waiters[waiter.name, waiter.id]
        return [Wake(w.name, w.id, w.attempt, max(0.0, w.until - now)) for w in moved]

    def _head(self, count: int) -> Iterable[Waiter]:
        # Stale waiters are skipped without counting: walk until ``count`` live ones are seen.
        for seen, waiter in enumerate(self.waiters.values(), 1):
            yield waiter
            if seen >= count + HEAD_ROWS - WAKE_MAX:
                return

    def acquire(
        self, now: float, holder: str, spec: LimitSpec, waiter: tuple[str, str, int] | None
    ) -> LimitAnswer:
        self.prune(now, spec.window)
        self.new_start = None
        if spec.concurrency is not None and holder in self.holders:  # (a retry of a grant)
            self.holders[holder] = now + spec.lease
            return LimitAnswer(granted=True, wake=tuple(self._wake(now, spec)))
        free, at = room(now, self.holders, self.starts, spec)
        if free >= 1:
            if spec.concurrency is not None:
                self.holders[holder] = now + spec.lease
            if spec.rates:
                bisect.insort(self.starts, now)
                self.new_start = now
            if waiter is not None:
                self.waiters.pop((waiter[0], waiter[1]), None)
            return LimitAnswer(granted=True, wake=tuple(self._wake(now, spec)))
        parked = None
        if waiter is not None:
            key = (waiter[0], waiter[1])
            entry = self.waiters.get(key)
            if entry is None:
                entry = self.waiters[key] = Waiter(name=waiter[0], id=waiter[1], attempt=waiter[2], until=0.0)
            entry.attempt, entry.until = waiter[2], now + spec.horizon
            woken = self._wake(now, spec)
            parked = max(0.0, entry.until - now)
            woken = [w for w in woken if (w.name, w.id) != key]  # (the caller files its own)
        else:
            woken = self._wake(now, spec)
        return LimitAnswer(granted=False, retry_in=max(0.0, at - now), parked_in=parked, wake=tuple(woken))

    def park(self, now: float, spec: LimitSpec, waiters: Sequence[tuple[str, str, int]]) -> LimitAnswer:
        """Queue ``waiters`` (each keeps its place if queued already) without asking for a slot:
        the caller knows the key to be full (a refusal's answer it remembers). Nothing is taken,
        so a stale belief costs no over-admission: the step wakes as any step does, and with room
        the head (maybe one of these) is filed due now. ``retry_in`` is the earliest chance (0:
        there is room, the caller's belief is stale); ``parked`` each waiter's time to be due."""
        self.prune(now, spec.window)
        self.new_start = None
        mine: list[Waiter] = []
        for name, id, attempt in waiters:
            entry = self.waiters.get((name, id))
            if entry is None:
                entry = self.waiters[name, id] = Waiter(name=name, id=id, attempt=attempt, until=0.0)
            entry.attempt, entry.until = attempt, now + spec.horizon
            mine.append(entry)
        free, at = room(now, self.holders, self.starts, spec)
        own = {(w.name, w.id) for w in mine}
        woken = [w for w in self._wake(now, spec) if (w.name, w.id) not in own]
        return LimitAnswer(
            granted=False,
            retry_in=0.0 if free >= 1 else max(0.0, at - now),
            parked=tuple(max(0.0, w.until - now) for w in mine),
            wake=tuple(woken),
        )

    def renew(self, now: float, holder: str, spec: LimitSpec) -> bool:
        until = self.holders.get(holder)
        if until is None or until <= now:
            return False
        self.holders[holder] = now + spec.lease
        return True

    def release(self, now: float, holder: str, spec: LimitSpec) -> LimitAnswer:
        self.prune(now, spec.window)
        held = self.holders.pop(holder, None) is not None
        return LimitAnswer(granted=held, wake=tuple(self._wake(now, spec)))

    def info(self, limit: str, key: str) -> LimitInfo:
        return LimitInfo(
            limit=limit,
            key=key,
            holders=dict(self.holders),
            starts=len(self.starts),
            waiting=len(self.waiters),
        )
