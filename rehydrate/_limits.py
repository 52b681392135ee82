"""Global concurrency and rate limits, per key, across every process sharing a store.

The stores keep each limit key's state and make each step atomic (``Store.limit_acquire``,
``limit_renew``, ``limit_release``; the rules are ``rehydrate._core._limits``). This module is the
policy above them, once for every store:

* :class:`Concurrency` and :class:`Rate`, the declarations, checked where they are written;
* :class:`Limiter`, a limit usable from any code (``async with limiter.hold(key):``);
* :class:`HandlerLimits`, what a runner asks before it starts a limited handler: it takes a
  slot, or *parks* the element (hands its claim back unrun, its attempt undone, filed out of the
  due range and queued as a waiter of its key), so that a worker never polls a full limit and the
  elements of other keys are claimed and run meanwhile.

Waking: every step answers which waiters to file earlier (``LimitAnswer.wake``), and the caller
files them with ``Store.reschedule`` fenced by their attempt; the store's own notification
(Redis pub/sub, PostgreSQL ``NOTIFY``, SQLite's datagram, the memory store's events) then wakes
the claim loops of their dehydrator, as for any element that became due.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Final

import anyio
import attrs
import structlog

from rehydrate._core import _validate
from rehydrate._core._limits import ON_ITS_WAY, LimitSpec, Wake, check_key, check_names
from rehydrate._core._records import Claim
from rehydrate._core._validate import Seconds
from rehydrate._deliveries import Counters
from rehydrate.abc import Store
from rehydrate.errors import InvalidArgumentError, InvalidTypeError, LimitKeyError, RehydrateError

__all__ = [
    "DEFAULT_KEY",
    "Concurrency",
    "HandlerLimits",
    "Limit",
    "Limiter",
    "Rate",
    "apply_wakes",
    "spec_of",
]

logger = structlog.get_logger("rehydrate")

#: The partition key of a limit without a key function: one key for everything.
DEFAULT_KEY: Final = "*"
#: A :class:`Limiter`'s waiter leaves a marker element in a dehydrator of its own (this prefix
#: and its holder id), so that a release in any process wakes it, and it alone, through the
#: store's notification (which tells of the earliest element of a dehydrator: with every
#: waiter's marker in one, a marker moved up behind another would wake nobody).
WAKE_PREFIX: Final = "rehydrate.limits:"
#: Store calls a limit makes outside the hot path (releases, wakes) get this long at most.
_STEP_TIMEOUT: Final = 10.0


def _positive_n(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{what} takes a whole number, not {type(value).__name__}")
    if value < 1:
        raise InvalidArgumentError(f"{what} must be at least 1, got {value!r}")
    return value


def _concurrency_n(value: object) -> int:
    return _positive_n(value, "Concurrency(n)")


def _rate_n(value: object) -> int:
    return _positive_n(value, "Rate(n)")


def _window(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise InvalidTypeError(
            f"Rate's per must be seconds or a datetime.timedelta, not {type(value).__name__}"
        )
    seconds = _validate.seconds(value, "Rate's per")
    if seconds <= 0:
        raise InvalidArgumentError(f"Rate's per must be positive, got {value!r}")
    return seconds


@attrs.frozen
class Concurrency:
    """At most ``n`` holders at once per key, across every process sharing the store: a handler
    counts from the moment its slot is taken (before it is called) until it returns or raises
    (or its lease runs out, if its process died)."""

    n: int = attrs.field(converter=_concurrency_n)


@attrs.frozen
class Rate:
    """At most ``n`` starts per key in any window of ``per`` seconds (or a ``timedelta``),
    sliding: a start is counted when its slot is granted (before the handler is called),
    whether it then succeeds or fails, and stays counted for ``per`` seconds. Running time does
    not count: that is :class:`Concurrency`'s."""

    n: int = attrs.field(converter=_rate_n)
    per: float = attrs.field(default=1.0, converter=_window)


#: What ``limits=`` takes.
Limit = Concurrency | Rate


def spec_of(limits: Iterable[object], lease: float) -> LimitSpec:
    """The store's form of a list of limits: the smallest concurrency (several make no sense
    beside it) and every rate; ``InvalidArgumentError`` for an empty list or anything else."""
    if isinstance(limits, (Concurrency, Rate)):
        limits = [limits]
    if isinstance(limits, (str, bytes)) or not isinstance(limits, Iterable):
        raise InvalidTypeError(
            f"limits must be a list of rehydrate.Concurrency and rehydrate.Rate, not {type(limits).__name__}"
        )
    concurrency: int | None = None
    rates: list[tuple[int, float]] = []
    for limit in limits:
        if isinstance(limit, Concurrency):
            concurrency = limit.n if concurrency is None else min(concurrency, limit.n)
        elif isinstance(limit, Rate):
            rates.append((limit.n, limit.per))
        else:
            raise InvalidTypeError(
                f"a limit is a rehydrate.Concurrency or a rehydrate.Rate, not {type(limit).__name__}"
            )
    if concurrency is None and not rates:
        raise InvalidArgumentError("limits must name at least one Concurrency or Rate")
    return LimitSpec(concurrency=concurrency, rates=tuple(sorted(set(rates))), lease=float(lease))


async def apply_wakes(store: Store, wakes: Sequence[Wake], counters: Counters | None = None) -> list[Wake]:
    """File the woken waiters' elements earlier, each fenced by its attempt: one claimed (or
    gone) since is left alone. A failure is logged: the waiter is still due at its own time.
    ``counters``: a handler's, whose ``limit_woken`` counts them. Returns the wakes that found
    their element claimed or gone (not moved)."""
    if counters is not None:
        counters.limit_woken += len(wakes)
    missed = []
    for wake in wakes:
        try:
            if not await store.reschedule(wake.name, wake.id, ttl=wake.ttl, attempt=wake.attempt):
                missed.append(wake)
        except RehydrateError as exc:
            logger.warning(
                "could not wake a waiter of a limit", dehydrator=wake.name, id=wake.id, exc_info=exc
            )
    return missed


#: When a wake finds its element claimed, it is tried again this long after, then once more
#: after the second delay (real seconds): see :class:`_Rewaker`.
_REWAKE_AFTER: Final = (0.05, 0.5)
#: A wake filing an element later than now is looked at again this long after ON_ITS_WAY.
_LOOK_AGAIN_MARGIN: Final = 0.25


class _Rewaker:
    """Wakes tried again, in the background, when they found their element claimed; and the
    elements filed later than now by a wake, looked at again once a wake racing them has landed.

    A waiter is queued by one step and its element handed back by the next call: a release that
    wakes it in between finds the element still claimed by the worker parking it (the fence
    refuses it), and the hand-back then files it at the time its refusal named (a lease's end, a
    horizon out), with the room it was woken for left empty and nobody due to take it. The same
    wake tried again once the element is handed back (its attempt is the waiter's again) moves it
    up; one claimed to run (or gone) is left alone by the fence, as before.

    Two wakes of one element from two steps (a park step filing the head at the earliest chance,
    then a release filing it now) are two ``reschedule`` calls from different tasks or processes,
    which may land in either order: the earlier step's landing last files the element at a lease's
    end while the key's FIFO has it on its way now, and the room it was woken for stays empty (a
    horizon, if no other step comes). Only a wake filing an element later than now can do that
    harm, so each such element is looked at again :data:`ON_ITS_WAY` after its wake (and a little
    more): still waiting under the same attempt, it is parked again, a step that keeps its place
    and files it as the key's state says now (due now if there is room for it).
    """

    def __init__(self, store: Store, recheck: Callable[[list[tuple[str, Wake]]], Awaitable[None]]) -> None:
        self._store = store
        self._recheck = recheck
        self._pending: list[Wake] = []
        self._more = anyio.Event()
        self._watched: list[tuple[str, Wake]] = []
        self._watch_more = anyio.Event()

    def add(self, wakes: Sequence[Wake]) -> None:
        if wakes:
            self._pending.extend(wakes)
            self._more.set()

    def watch(self, key: str, wakes: Iterable[Wake]) -> None:
        """Look again at these elements (filed later than now by a wake of ``key``)."""
        more = [(key, wake) for wake in wakes if wake.ttl > 0.0]
        if more:
            self._watched.extend(more)
            self._watch_more.set()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._rewake)
            tg.start_soon(self._look_again)

    async def _rewake(self) -> None:
        while True:
            await self._more.wait()
            self._more = anyio.Event()
            wakes, self._pending = self._pending, []
            for delay in _REWAKE_AFTER:  # (those added meanwhile wait for the next round)
                await anyio.sleep(delay)
                wakes = await apply_wakes(self._store, wakes)
                if not wakes:
                    break

    async def _look_again(self) -> None:
        while True:
            await self._watch_more.wait()
            self._watch_more = anyio.Event()
            # (on the store's clock: the steps count ON_ITS_WAY on it)
            await self._store.clock.sleep(ON_ITS_WAY + _LOOK_AGAIN_MARGIN)
            watched, self._watched = self._watched, []
            await self._recheck(watched)


class _Renewer:
    """Renews the slots one process holds under one limit, every ``every`` seconds: all of them
    in one loop (a slot taken just after a round is renewed at the next, within its lease)."""

    def __init__(self, store: Store, limit: str, spec: LimitSpec, every: float) -> None:
        self._store, self._limit, self._spec, self._every = store, limit, spec, every
        #: holder -> key, of the slots held now.
        self.held: dict[str, str] = {}

    async def run(self) -> None:
        clock = self._store.clock
        while True:
            await clock.sleep(self._every)
            for holder, key in list(self.held.items()):
                try:
                    kept = await self._store.limit_renew(self._limit, key, holder, self._spec)
                except RehydrateError as exc:
                    logger.warning(
                        "limit slot renewal failed, will retry", limit=self._limit, key=key, exc_info=exc
                    )
                    continue
                if not kept and self.held.pop(holder, None) is not None:
                    logger.warning(
                        "limit slot lost: its lease ran out before it was renewed (a blocked event loop?)",
                        limit=self._limit,
                        key=key,
                    )


class Limiter:
    """A limit usable from any code: ``async with limiter.hold(key):`` runs its block with a slot
    of ``key`` held (``Scheduler.limiter`` makes one on the scheduler's store).

    The same limit as the handlers of the dehydrator ``name`` declared with ``limits=`` (one
    state per limit name and key in the store): code and handlers share its slots and windows.
    Everything sharing a limit should declare the same limits; each step is checked against the
    caller's. ``hold`` waits for room without polling: until the earliest chance the store names
    (a lease ending, a window sliding) or until a release anywhere wakes it. The slot's lease
    (``lease``) is renewed every ``renew_every`` seconds (a third of it by default) while the
    block runs; a process that dies frees it when the lease runs out.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        *limits: Limit,
        lease: Seconds = 30.0,
        renew_every: Seconds | None = None,
    ) -> None:
        check_names(name, DEFAULT_KEY)
        seconds = _validate.seconds(lease, "lease")
        if seconds <= 0:
            raise InvalidArgumentError("lease must be positive")
        every = seconds / 3 if renew_every is None else _validate.seconds(renew_every, "renew_every")
        if not 0 < every < seconds:
            raise InvalidArgumentError(
                f"the lease ({seconds:g} s) must be longer than the renewal interval ({every:g} s): "
                "a slot would be lost between two renewals"
            )
        if not store.capabilities.limits:
            raise InvalidArgumentError(f"{type(store).__name__} does not implement limits (its capabilities)")
        self.store = store
        self.name = name
        self.spec = spec_of(limits, seconds)
        self._every = every

    def __repr__(self) -> str:
        return f"Limiter({self.name!r}, {self.spec!r})"

    @contextlib.asynccontextmanager
    async def hold(self, key: str | int = DEFAULT_KEY) -> AsyncIterator[None]:
        """Hold a slot of ``key`` (and count a start in its windows) for the block."""
        part = check_key(key)
        store, spec = self.store, self.spec
        holder = uuid.uuid4().hex
        answer = await store.limit_acquire(self.name, part, holder, spec)
        await apply_wakes(store, answer.wake)
        if not answer.granted:
            await self._wait(part, holder)
        try:
            if spec.concurrency is None:
                yield  # a rate's start is counted; there is no slot to keep
                return
            renewer = _Renewer(store, self.name, spec, self._every)
            renewer.held[holder] = part
            failure: BaseException | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(renewer.run)
                try:
                    yield
                except BaseException as exc:  # raised below, not wrapped in the group's
                    failure = exc
                finally:
                    tg.cancel_scope.cancel()
            if failure is not None:
                raise failure
        finally:
            if spec.concurrency is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_STEP_TIMEOUT):
                    try:
                        done = await store.limit_release(self.name, part, holder, spec)
                        await apply_wakes(store, done.wake)
                    except RehydrateError as exc:
                        logger.warning(
                            "could not release a limit slot; its lease frees it",
                            limit=self.name,
                            exc_info=exc,
                        )

    async def _wait(self, key: str, holder: str) -> None:
        """Queue as a waiter until granted: a marker element in the wake dehydrator, filed when
        the store says, is what a release moves up (and so what wakes this subscription)."""
        store, spec = self.store, self.spec
        wake_name = WAKE_PREFIX + holder
        async with store.subscribe(wake_name) as subscription:
            try:
                while True:
                    answer = await store.limit_acquire(
                        self.name, key, holder, spec, waiter=(wake_name, holder, 0)
                    )
                    await apply_wakes(store, answer.wake)
                    if answer.granted:
                        return
                    wait = answer.parked_in if answer.parked_in is not None else answer.retry_in
                    assert wait is not None
                    await store.push(wake_name, None, ttl=wait, id=holder, replace=True)
                    await subscription.wait(wait)
            finally:
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(_STEP_TIMEOUT),
                    contextlib.suppress(RehydrateError),
                ):
                    await store.pull(wake_name, holder)


class HandlerLimits:
    """What a runner asks before it starts a limited handler, and tells when it ends.

    :meth:`admit` takes the slot (returns its holder and key) or parks the element: hands its
    claim back (``Store.hand_back``: no attempt counted) due when the store says (the earliest
    chance at the head of the key's waiters, a horizon out behind it), and returns ``None``. A
    ``limit_key`` that raises or returns no key gives a :class:`LimitKeyError` for the runner to
    fail the element with. The slots held are renewed at half the handler's lease.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        spec: LimitSpec,
        key: Callable[[Any], Any] | None,
        counters: Counters | None = None,
    ) -> None:
        self._store, self._name, self.spec, self._key = store, name, spec, key
        self.renewer = _Renewer(store, name, spec, spec.lease / 2)
        #: The handler's counters (``Scheduler.stats``): parked, granted, woken.
        self.counters = Counters() if counters is None else counters
        #: The wakes that found their element claimed, tried again (run beside the renewer).
        self.rewaker = _Rewaker(store, self._look_again)
        #: Key -> until when (store clock) it is believed full: a refusal's earliest chance.
        #: Further claims of it are parked without an acquire each (``limit_park``, in bulk).
        #: Only ever a reason to park, never to run: the store decides every admission, and a
        #: park step that finds room says so (``retry_in`` 0) and wakes the head, and this
        #: belief is dropped then, on a release here, or when its time comes.
        self._full: dict[str, float] = {}

    def has_beliefs(self) -> bool:
        """Whether any key is believed full (the claim loop's cheap test before sorting claims)."""
        return bool(self._full)

    def believed_full(self, key: str) -> bool:
        """Whether a refusal lately said ``key`` has no room until a time still to come."""
        full = self._full
        if not full:
            return False
        until = full.get(key)
        if until is None:
            return False
        if until <= self._store.clock():
            del full[key]
            return False
        return True

    def _believe(self, key: str, retry_in: float | None) -> None:
        if retry_in is not None and retry_in > 0.0:
            self._full[key] = self._store.clock() + min(retry_in, self.spec.horizon)
        else:
            self._full.pop(key, None)

    async def park_many(self, claims: list[tuple[Claim, str]]) -> None:
        """Park claims of keys believed full, in bulk: one ``hand_back`` for all, filed a
        horizon out, then one ``limit_park`` step per key (each claim's element queued as a
        waiter), and the few the step files sooner (the head, or any woken with room: the
        belief was stale) rescheduled, fenced by their attempt.

        Handed back before they are queued: a release that wakes one of them finds its element
        filed already, not still claimed (its wake would be lost, and it would wait a horizon).
        A step that fails leaves its elements due a second from now, to come again and ask."""
        store, name, spec = self._store, self._name, self.spec
        horizon = min(spec.horizon, _validate.MAX_SECONDS)
        done: list[bool] = []
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(_STEP_TIMEOUT),
        ):
            try:
                done = await store.hand_back(name, [(claim.id, claim.token, horizon) for claim, _ in claims])
            except RehydrateError as exc:
                logger.error("could not hand claims back; their leases bring them back", exc_info=exc)
                return
        if not done:
            return  # timed out: their leases bring them back
        by_key: dict[str, list[Claim]] = {}
        for (claim, key), handed in zip(claims, done, strict=True):
            if handed:  # (else claimed by another since its lease ran out: not ours to park)
                by_key.setdefault(key, []).append(claim)
        sooner: dict[str, list[Wake]] = {}
        for key, group in by_key.items():
            waiters = [(name, claim.id, max(0, claim.attempt - 1)) for claim in group]
            try:
                answer = await store.limit_park(name, key, spec, waiters)
            except RehydrateError as exc:
                logger.error(
                    "limit step failed; the elements come again shortly", dehydrator=name, exc_info=exc
                )
                sooner[key] = [Wake(name, id, attempt, 1.0) for _, id, attempt in waiters]
                continue
            self._believe(key, answer.retry_in)
            self.counters.limit_parked += len(group)
            sooner[key] = [
                *answer.wake,
                *(
                    Wake(name, id, attempt, ttl)
                    for (_, id, attempt), ttl in zip(waiters, answer.parked, strict=True)
                    if ttl < horizon - 1e-3
                ),
            ]
        for key, wakes in sooner.items():
            await self._wake(key, wakes)

    async def _wake(self, key: str, wakes: Sequence[Wake]) -> None:
        """File the woken waiters of ``key``: those found claimed are tried again, those filed
        later than now looked at again (see :class:`_Rewaker`)."""
        if wakes:
            self.rewaker.add(await apply_wakes(self._store, wakes, self.counters))
            self.rewaker.watch(key, wakes)

    async def _look_again(self, watched: list[tuple[str, Wake]]) -> None:
        """Park again, in one step per key, the watched elements still waiting unclaimed under
        the attempt they were woken with, and file anew those whose filing is not what the step
        says now (a wake that raced theirs); one filed as it should be is left alone, and not
        looked at again (a key full a long time costs one look per wake, not one per second)."""
        store, name = self._store, self._name
        by_key: dict[str, dict[str, Wake]] = {}
        for key, wake in watched:
            by_key.setdefault(key, {})[wake.id] = wake
        horizon = min(self.spec.horizon, _validate.MAX_SECONDS)
        for key, wakes in by_key.items():
            waiters, filed = [], []
            for wake in wakes.values():
                try:
                    info = await store.info(name, wake.id)
                except RehydrateError:
                    continue
                if info is not None and not info.claimed and info.attempt == wake.attempt:
                    waiters.append((name, wake.id, wake.attempt))
                    filed.append(info.due - store.clock())
            if not waiters:
                continue
            try:
                answer = await store.limit_park(name, key, self.spec, waiters)
            except RehydrateError as exc:
                logger.warning("limit step failed; the waiters are due at their own times", exc_info=exc)
                continue
            mine = [
                Wake(name, id, attempt, ttl)
                for (_, id, attempt), ttl, was in zip(waiters, answer.parked, filed, strict=True)
                if abs(min(ttl, horizon) - was) > _LOOK_AGAIN_MARGIN
            ]
            await self._wake(key, answer.wake)
            if mine:
                self.rewaker.add(await apply_wakes(store, mine, self.counters))
                self.rewaker.watch(key, mine)

    def key_of(self, element: Any) -> str:
        if self._key is None:
            return DEFAULT_KEY
        try:
            value = self._key(element)
        except Exception as exc:
            raise LimitKeyError(f"limit_key raised {exc!r}") from exc
        try:
            return check_key(value)
        except InvalidArgumentError as exc:
            raise LimitKeyError(f"limit_key returned no key: {exc}") from None

    async def admit(self, claim: Claim, key: str) -> str | None:
        """The holder id of the slot taken for ``claim``, or ``None``: parked (or handed back
        after a store error, to come again shortly)."""
        store, name, spec = self._store, self._name, self.spec
        if self.believed_full(key):
            await self.park_many([(claim, key)])
            return None
        holder = f"{name}/{claim.id}/{claim.token}"
        try:
            answer = await store.limit_acquire(
                name, key, holder, spec, waiter=(name, claim.id, max(0, claim.attempt - 1))
            )
        except RehydrateError as exc:
            logger.error(
                "limit step failed; the element is handed back", dehydrator=name, id=claim.id, exc_info=exc
            )
            await _hand_back(store, name, claim, 1.0)
            return None
        await self._wake(key, answer.wake)
        if answer.granted:
            self.counters.limit_granted += 1
            if spec.concurrency is not None:
                self.renewer.held[holder] = key
            return holder
        self._believe(key, answer.retry_in)
        # Queued by the refusal (it keeps its place), but still claimed: a release right now
        # could not file it sooner. Handed back first, then parked again (a step that sees the
        # room such a release made, and files it due now if so).
        await self.park_many([(claim, key)])
        return None

    async def release(self, holder: str, key: str) -> None:
        if self.spec.concurrency is None:
            return  # a rate counts starts: nothing to give back
        self.renewer.held.pop(holder, None)
        self._full.pop(key, None)  # room made here: the next of this key asks again
        store = self._store
        with anyio.CancelScope(shield=True), anyio.move_on_after(_STEP_TIMEOUT):
            try:
                answer = await store.limit_release(self._name, key, holder, self.spec)
                await self._wake(key, answer.wake)
            except RehydrateError as exc:
                logger.warning(
                    "could not release a limit slot; its lease frees it", dehydrator=self._name, exc_info=exc
                )


async def _hand_back(store: Store, name: str, claim: Claim, ttl: float) -> None:
    with (
        anyio.CancelScope(shield=True),
        anyio.move_on_after(_STEP_TIMEOUT),
        contextlib.suppress(RehydrateError),
    ):
        await store.hand_back(name, [(claim.id, claim.token, min(max(ttl, 0.0), _validate.MAX_SECONDS))])
