"""The scheduler: a timer loop per dehydrator that sleeps until TTN and delivers at least once.

For each dehydrator with a handler, one claim loop:

1. subscribes to the store's "something may be due sooner" notifications (before reading TTN, so
   nothing slips between reading it and going to sleep);
2. claims due elements in batches, as many as the handler has free slots, each under a lease;
3. starts one task per claimed element; the task runs the handler and queues a fenced ack;
4. when nothing more is due, sleeps exactly until the store's TTN or until notified.

Beside it, a lease keeper renews the lease of every running element at half its length (so a slow
handler is never delivered twice to healthy workers) and an acker sends finished elements' acks in
batches. A failed element is rescheduled with backoff, then dead-lettered. If the process dies, the
leases run out and the elements are delivered again: at least once, nothing lost.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import math
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import anyio
import anyio.abc
import attrs
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from rehydrate._core import _validate
from rehydrate._core._dehydrator import Claim
from rehydrate._core._retry import Retry
from rehydrate._core._validate import Seconds
from rehydrate.abc import Store, Subscription
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
)
from rehydrate.errors import (
    # Defined in rehydrate.errors; re-exported for the modules that import it from here.
    SchedulerNotRunningError as SchedulerNotRunningError,
)

__all__ = ["DeadLetter", "Delivery", "Scheduler", "Stats", "current_delivery"]

logger = structlog.get_logger("rehydrate")

Handler = TypeVar("Handler", bound=Callable[..., Any])

#: Suffix of the dehydrator that holds a dehydrator's dead letters.
DEAD_SUFFIX: Final = ".dead"
#: How many lateness samples the stats keep (the most recent ones).
_LATENESS_SAMPLES: Final = 10_000
#: Store errors in a loop are retried after this backoff, doubling up to the cap.
_ERROR_BACKOFF: Final = (0.05, 5.0)
#: A lease renewal later than this fraction of the lease means the event loop was blocked.
_STALL_FRACTION: Final = 0.25
#: How long one batch of acks may take before it is given up (the leases bring the elements back).
_ACK_TIMEOUT: Final = 10.0


@attrs.frozen(kw_only=True)
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
    #: 1 on first delivery; counts every claim.
    attempt: int
    #: When it was due and when it was claimed, in the store's clock.
    due: float
    claimed_at: float
    lease_until: float
    #: The claim's fencing token (see :class:`~rehydrate.Claim`).
    token: int = attrs.field(eq=False)
    _store: Store = attrs.field(repr=False, alias="store")
    #: The scheduler's counters, for deliveries from a channel (a handler's are counted for it).
    _counters: _Counters | None = attrs.field(default=None, repr=False, eq=False, alias="counters")

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

    @classmethod
    def _from_claim(
        cls, name: str, claim: Claim, store: Store, counters: _Counters | None = None
    ) -> Delivery:
        return cls(
            name=name,
            id=claim.id,
            element=claim.element,
            attempt=claim.attempt,
            due=claim.due,
            claimed_at=claim.claimed_at,
            lease_until=claim.lease_until,
            token=claim.token,
            store=store,
            counters=counters,
        )


_current: contextvars.ContextVar[Delivery] = contextvars.ContextVar("rehydrate_delivery")


def current_delivery() -> Delivery:
    """The delivery a handler is running for (id, attempt, lateness...), from inside the handler."""
    try:
        return _current.get()
    except LookupError:
        raise SchedulerNotRunningError("current_delivery() is only available inside a handler") from None


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
    in_flight: int
    lateness_p50: float | None
    lateness_p99: float | None
    lateness_max: float | None


@attrs.define(eq=False)
class _Counters:
    delivered: int = 0
    acked: int = 0
    retried: int = 0
    dead_lettered: int = 0
    lost: int = 0
    in_flight: int = 0
    lateness: deque[float] = attrs.field(factory=lambda: deque(maxlen=_LATENESS_SAMPLES))
    lateness_max: float | None = None

    def record_lateness(self, seconds: float) -> None:
        self.lateness.append(seconds)
        if self.lateness_max is None or seconds > self.lateness_max:
            self.lateness_max = seconds


def _percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@attrs.define(eq=False)
class _Route:
    """A registered handler and the state of its claim loop."""

    name: str
    func: Callable[[Any], Any]
    is_async: bool
    retry: Retry
    lease: float
    concurrency: int
    batch: int
    limiter: anyio.CapacityLimiter | None = None
    in_flight: int = 0
    slot_freed: anyio.Event | None = None
    claim_scope: anyio.CancelScope | None = None
    idle: anyio.Event | None = None
    #: The shielded scopes of the handler threads running now, and when shutdown gives up on them.
    threads: set[anyio.CancelScope] = attrs.field(factory=set)
    give_up_at: float | None = None


class _LeaseKeeper:
    """Renews the lease of every running element of one route at half its length.

    All leases of a route have the same length, so renewals come due in the order they were
    queued: a FIFO, not a heap. Finished elements are dropped when they reach the front.

    It also measures its own lateness: it knows when it meant to renew a lease and when it got to
    run. A renewal later than a quarter of the lease means the event loop was blocked (a
    ``time.sleep`` in an ``async def``): the lease may have run out and the element been
    delivered again, so it says so, once per stall.
    """

    def __init__(self, store: Store, route: _Route) -> None:
        self._store = store
        self._route = route
        self._queue: deque[tuple[float, str, int]] = deque()
        self._active: dict[str, int] = {}
        self._wake = anyio.Event()
        #: Shielded: leases are kept while shutdown waits for handler threads, until :meth:`stop`.
        self._scope = anyio.CancelScope(shield=True)
        #: Renewals due up to this time were late because of a stall already reported.
        self._reported_until = -math.inf

    def stop(self) -> None:
        self._scope.cancel()

    def add(self, claim: Claim) -> None:
        self._active[claim.id] = claim.token
        self._queue.append((claim.claimed_at + self._route.lease / 2, claim.id, claim.token))
        if len(self._queue) == 1:
            self._wake.set()

    def discard(self, id: str, token: int) -> None:
        if self._active.get(id) == token:
            del self._active[id]

    async def run(self) -> None:
        with self._scope:
            await self._run()

    def _check_stall(self, meant: float, now: float) -> None:
        """Report a renewal meant for ``meant`` and run at ``now``, if late past the stall limit.

        Checked on waking (whether or not the element is still running: one claimed again after
        its lease ran out is the duplicate to explain) and on each renewal; once per stall.
        """
        route = self._route
        if now - meant > route.lease * _STALL_FRACTION and meant > self._reported_until:
            self._reported_until = now
            logger.warning(
                "event loop blocked: a lease renewal came late",
                dehydrator=route.name,
                handler=_name_of(route.func),
                stall=round(now - meant, 3),
                lease=route.lease,
                hint="an element whose lease ran out may be delivered twice; "
                "do not block in an async def handler (use a plain def: it runs in a thread)",
            )

    async def _run(self) -> None:
        store, route = self._store, self._route
        clock = store.clock
        queue, active = self._queue, self._active
        half = route.lease / 2
        while True:
            while queue and active.get(queue[0][1]) != queue[0][2]:
                queue.popleft()
            if not queue:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            renew_at, id, token = queue[0]
            now = clock()
            if renew_at > now:
                # Later entries renew later; finished ones are skipped on waking.
                await clock.sleep(renew_at - now)
                self._check_stall(renew_at, clock())
                continue
            queue.popleft()
            self._check_stall(renew_at, now)
            try:
                until = await store.extend(route.name, id, lease=route.lease, token=token)
            except RehydrateError as exc:
                logger.warning(
                    "lease renewal failed, will retry",
                    dehydrator=route.name,
                    id=id,
                    exc_info=exc,
                )
                queue.appendleft((clock() + min(half, 1.0), id, token))
                continue
            if until is None:
                if active.pop(id, None) is not None:
                    logger.warning(
                        "lease lost: the element was acked, pulled or claimed again elsewhere",
                        dehydrator=route.name,
                        id=id,
                    )
            else:
                queue.append((clock() + half, id, token))


class _Acker:
    """Sends the fenced acks of finished elements in batches: one store call for many."""

    def __init__(self, store: Store, name: str, counters: _Counters) -> None:
        self._store = store
        self._name = name
        self._counters = counters
        self._pending: list[tuple[str, int]] = []
        self._wake = anyio.Event()

    def add(self, id: str, token: int) -> None:
        self._pending.append((id, token))
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await self.flush()

    async def flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:1000], self._pending[1000:]
            results: list[bool] | None = None
            try:
                # Shielded: a batch cut off half-way would be neither counted nor known to be sent.
                with anyio.CancelScope(shield=True), anyio.move_on_after(_ACK_TIMEOUT):
                    results = await self._store.ack(self._name, batch)
            except RehydrateError as exc:
                # The leases will run out and the elements come back: at least once, nothing lost.
                logger.error(
                    "ack failed; the elements will be delivered again",
                    dehydrator=self._name,
                    count=len(batch),
                    exc_info=exc,
                )
                continue
            if results is None:
                logger.error("ack timed out; the elements will be delivered again", dehydrator=self._name)
                continue
            acked = sum(results)
            self._counters.acked += acked
            if acked != len(batch):
                self._counters.lost += len(batch) - acked
                for (id, _), ok in zip(batch, results, strict=True):
                    if not ok:
                        logger.warning(
                            "ack fenced out: the lease had run out and the element was claimed again "
                            "(or cancelled)",
                            dehydrator=self._name,
                            id=id,
                        )


class _Workers:
    """Long-lived tasks that run a route's handler, started as needed up to its concurrency.

    Starting a task per element costs more than a no-op handler; a worker that finishes one
    element takes the next from the stream, and new workers start only when none is free.
    """

    def __init__(self, route: _Route, run: Callable[[Claim], Awaitable[None]]) -> None:
        self._route = route
        self._run = run
        self._send, self._receive = anyio.create_memory_object_stream[Claim](math.inf)
        self._count = 0
        self.group: anyio.abc.TaskGroup | None = None

    def dispatch(self, claim: Claim) -> None:
        send = self._send
        send.send_nowait(claim)
        if self._count < self._route.concurrency and send.statistics().current_buffer_used:
            assert self.group is not None
            self._count += 1
            self.group.start_soon(self._work)

    async def _work(self) -> None:
        run = self._run
        async for claim in self._receive:
            await run(claim)

    def drain(self) -> list[Claim]:
        """Close the stream and return the claims no worker took (once the workers have ended)."""
        self._send.close()
        left = []
        with self._receive:
            while True:
                try:
                    left.append(self._receive.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    return left


def _as_store(store: Store | str | None) -> tuple[Store, bool]:
    """The store to use, and whether the scheduler owns it (opened from a URL, so closes it)."""
    if store is None:
        from rehydrate.stores import MemoryStore

        return MemoryStore(), True
    if isinstance(store, str):
        from rehydrate.stores import open_store

        return open_store(store), True
    if isinstance(store, Store):
        return store, False
    raise InvalidTypeError(f"store must be a Store, a URL or None, not {type(store).__name__}")


def _only(group: BaseExceptionGroup[BaseException], exc: BaseException) -> bool:
    """Whether ``group`` holds ``exc`` and nothing else (nested groups included)."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseExceptionGroup):
            stack.extend(item.exceptions)
        else:
            leaves.append(item)
    return leaves == [exc]


class _GaveUp(Exception):
    """Shutdown stopped waiting for a handler thread that is still running."""


def _name_of(func: Callable[..., Any]) -> str:
    """A handler's name for the logs: ``module.qualname``."""
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{getattr(func, '__module__', None) or type(func).__module__}.{name}"


def _positive_int(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{name} must be an int of at least 1, got {value!r}")
    return value


def _delay_until(at: datetime) -> float:
    if not isinstance(at, datetime):
        raise InvalidTypeError(f"at must be a datetime, not {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidArgumentError(
            "at must be an aware datetime (with a tzinfo, e.g. datetime.now(UTC) + ...): "
            "a naive one is ambiguous"
        )
    return max(0.0, (at - datetime.now(UTC)).total_seconds())


class Scheduler:
    """Delayed delivery: defer elements to named dehydrators, and handle them when they are due.

    ::

        scheduler = Scheduler()                      # memory:// by default

        @scheduler.handler("reminders", retry=Retry(attempts=5), lease=30)
        async def send_reminder(element): ...

        async with scheduler:                        # runs the timer loops in a task group
            await scheduler.defer("reminders", {"user": 7}, delay=30, id="user-7")

    ``store`` is a :class:`~rehydrate.abc.Store`, a store URL, or ``None`` for a new memory store.
    A store given as an object is opened but not closed by the scheduler; one it made is both.
    ``grace`` is how long shutdown waits for running handlers before cancelling them (their
    elements are handed back to the store at once). Dead letters are kept ``dead_letter_ttl``.

    A plain ``def`` handler runs in a thread, and a thread cannot be cancelled: handing its element
    back while it runs would let it run twice. So after ``grace``, shutdown waits up to
    ``sync_grace`` more for handler threads (keeping their leases alive), and acks or reschedules
    each one that ends, as usual. At ``grace + sync_grace`` it gives up on the threads still
    running, with a warning: their elements are neither acked nor handed back, and come back when
    their leases run out (within ``lease`` seconds); if the thread still completes its work, that
    element runs twice. The interpreter may still wait for such a thread when it exits.
    """

    def __init__(
        self,
        store: Store | str | None = None,
        *,
        grace: Seconds = 10.0,
        sync_grace: Seconds = 20.0,
        dead_letter_ttl: Seconds = timedelta(days=365),
        rng: random.Random | None = None,
    ) -> None:
        self.store, self._owns_store = _as_store(store)
        self.grace = _validate.seconds(grace, "grace")
        self.sync_grace = _validate.seconds(sync_grace, "sync_grace")
        self.dead_letter_ttl = _validate.seconds(dead_letter_ttl, "dead_letter_ttl")
        self._rng = rng or random.Random()
        self._routes: dict[str, _Route] = {}
        self._counters = _Counters()
        self._tg: anyio.abc.TaskGroup | None = None
        self._running = False
        self._stopping = False
        self._stopped: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"<Scheduler store={self.store!r} handlers={sorted(self._routes)}>"

    @property
    def handlers(self) -> list[str]:
        """The names of the dehydrators that have a handler, sorted."""
        return sorted(self._routes)

    def _override(self, *, store: Store | str | None = None, concurrency: int | None = None) -> None:
        """For ``rehydrate worker --store/--concurrency``: change how a scheduler runs before it does.

        ``concurrency`` replaces every handler's (and its claim batch becomes ``min(N, 100)``).
        """
        if self._running:
            raise RehydrateError("a running scheduler cannot change its store or concurrency")
        if concurrency is not None:
            _positive_int(concurrency, "concurrency")
        if store is not None:
            self.store, self._owns_store = _as_store(store)
        if concurrency is not None:
            for route in self._routes.values():
                route.concurrency = concurrency
                route.batch = min(concurrency, 100)

    # -- registration ----------------------------------------------------------------------------

    def handler(
        self,
        name: str,
        *,
        retry: Retry | None = None,
        lease: Seconds = 30.0,
        concurrency: int = 100,
        batch: int | None = None,
    ) -> Callable[[Handler], Handler]:
        """Register the decorated function as the handler of dehydrator ``name``.

        It is called with each due element; an ``async def`` runs in the event loop, a plain
        function in a worker thread. Returning means done (the element is acked); raising means
        failed (retried per ``retry``, then dead-lettered). At most ``concurrency`` elements run at
        once; they are claimed ``batch`` at a time (default: ``min(concurrency, 100)``). Each runs
        under a ``lease`` (seconds) renewed at half its length while the handler runs.
        """
        _validate.element_id(name, "name")
        if name in self._routes:
            raise InvalidArgumentError(f"dehydrator {name!r} already has a handler")
        if retry is not None and not isinstance(retry, Retry):
            raise InvalidTypeError(f"retry must be a rehydrate.Retry, not {type(retry).__name__}")
        seconds = _validate.seconds(lease, "lease")
        if seconds <= 0:
            raise InvalidArgumentError("lease must be positive")
        _positive_int(concurrency, "concurrency")
        size = min(concurrency, 100) if batch is None else _positive_int(batch, "batch")

        def register(func: Handler) -> Handler:
            if not callable(func):
                raise InvalidTypeError("a handler must be callable")
            route = _Route(
                name=name,
                func=func,
                is_async=inspect.iscoroutinefunction(func)
                or inspect.iscoroutinefunction(type(func).__call__),
                retry=retry or Retry(),
                lease=seconds,
                concurrency=concurrency,
                batch=size,
            )
            self._routes[name] = route
            if self._tg is not None:
                self._tg.start_soon(self._serve, route)
            return func

        return register

    # -- deferring -------------------------------------------------------------------------------

    async def defer(
        self,
        name: str,
        element: Any,
        *,
        delay: Seconds | None = None,
        at: datetime | None = None,
        id: str | None = None,
        replace: bool = False,
    ) -> str:
        """Deliver ``element`` to ``name``'s handler after ``delay`` seconds or at ``at``; its id.

        ``at`` must be timezone-aware. With neither, it is due at once. Raises
        ``DuplicateIdError`` if ``id`` is already deferred in ``name``, unless ``replace``: then
        the pending element is replaced by this one, atomically, and due anew (a debounce). If
        the old one is running, it finishes, and its ack cannot touch the new one.
        """
        self._check_running("defer")
        ttl = self._ttl(delay, at)
        if replace and id is None:
            raise InvalidArgumentError("replace needs an id: the element to replace is named by it")
        return await self.store.push(name, element, ttl=ttl, id=id, replace=replace)

    async def cancel(self, name: str, id: str) -> Any:
        """Remove a deferred element before it is delivered (PULL); the element, or ``None``."""
        self._check_running("cancel")
        return await self.store.pull(name, id)

    def _check_running(self, method: str) -> None:
        """Refuse a call that needs the store open, the same way for every store.

        A store the scheduler made (from a URL, or the default memory store) is open only while
        the scheduler runs. A store given as an object may have been opened by its owner (the
        ``rehydrate dead`` command does so): its own error applies.
        """
        if not self._running and self._owns_store:
            raise SchedulerNotRunningError(
                f"Scheduler.{method}() needs the scheduler running: use `async with scheduler:` "
                "(or `await scheduler.run()`, or `with SyncScheduler(scheduler) as s:`)"
            )

    @staticmethod
    def _ttl(delay: Seconds | None, at: datetime | None) -> float:
        if delay is not None and at is not None:
            raise InvalidArgumentError("give delay or at, not both")
        if at is not None:
            return _delay_until(at)
        return 0.0 if delay is None else _validate.seconds(delay, "delay")

    # -- dead letters ----------------------------------------------------------------------------

    async def dead_letters(self, name: str, *, limit: int | None = None) -> list[DeadLetter]:
        """The elements of ``name`` that failed every attempt, oldest first."""
        self._check_running("dead_letters")
        dead = _validate.element_id(name, "name") + DEAD_SUFFIX
        letters = []
        for id in await self.store.ids(dead, limit=limit):
            record = await self.store.look(dead, id)
            if isinstance(record, dict):
                letters.append(
                    DeadLetter(
                        id=id,
                        element=record.get("element"),
                        error=str(record.get("error", "")),
                        attempts=int(record.get("attempts", 0)),
                        failed_at=float(record.get("failed_at", 0.0)),
                    )
                )
        return letters

    async def requeue(self, name: str, ids: Iterable[str] | None = None, *, delay: Seconds = 0) -> list[str]:
        """Put dead letters back into ``name`` (all of them, or ``ids``), due in ``delay``; the ids moved.

        A dead letter whose id is live again in ``name`` stays where it is.
        """
        self._check_running("requeue")
        dead = _validate.element_id(name, "name") + DEAD_SUFFIX
        ttl = _validate.seconds(delay, "delay")
        chosen = list(await self.store.ids(dead)) if ids is None else list(_validate.ids(tuple(ids)))
        moved = []
        for id in chosen:
            record = await self.store.look(dead, id)
            if not isinstance(record, dict):
                continue
            try:
                await self.store.push(name, record.get("element"), ttl=ttl, id=id)
            except DuplicateIdError:
                continue
            await self.store.pull(dead, id)
            moved.append(id)
        return moved

    # -- stats -----------------------------------------------------------------------------------

    def stats(self) -> Stats:
        """Counters since the scheduler was made, and the lateness of the recent deliveries."""
        c = self._counters
        ordered = sorted(c.lateness)
        return Stats(
            delivered=c.delivered,
            acked=c.acked,
            retried=c.retried,
            dead_lettered=c.dead_lettered,
            lost=c.lost,
            in_flight=c.in_flight,
            lateness_p50=_percentile(ordered, 0.50) if ordered else None,
            lateness_p99=_percentile(ordered, 0.99) if ordered else None,
            lateness_max=c.lateness_max,
        )

    # -- channels --------------------------------------------------------------------------------

    @asynccontextmanager
    async def channel(
        self, name: str, *, lease: Seconds = 30.0, prefetch: int = 0, batch: int = 100
    ) -> AsyncIterator[MemoryObjectReceiveStream[Delivery]]:
        """Receive due elements of ``name`` as :class:`Delivery` objects, over a memory stream.

        ``async with scheduler.channel("reminders") as deliveries: async for d in deliveries:``.
        The consumer calls ``await d.ack()`` (or ``d.retry(delay)``); an unacked delivery comes back
        after its ``lease``. Elements are claimed only when the consumer can take them: at most
        ``prefetch`` wait in the stream (plus one being handed over), so leases do not run out in a
        buffer. Needs the scheduler running (inside ``async with scheduler``).
        """
        self._check_running("channel")
        _validate.element_id(name, "name")
        seconds = _validate.seconds(lease, "lease")
        if seconds <= 0:
            raise InvalidArgumentError("lease must be positive")
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0:
            raise InvalidArgumentError(f"prefetch must be an int of at least 0, got {prefetch!r}")
        _positive_int(batch, "batch")
        send, receive = anyio.create_memory_object_stream[Delivery](max_buffer_size=prefetch)
        with receive:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._feed, name, seconds, prefetch, batch, send)
                try:
                    yield receive
                finally:
                    tg.cancel_scope.cancel()
            # The feeder has ended (handing back what it held): hand back what it had buffered
            # for the consumer. Draining earlier would wake the feeder to claim more.
            with anyio.CancelScope(shield=True):
                while True:
                    try:
                        delivery = receive.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    await self._release(name, delivery.id, delivery.token)

    async def _feed(
        self,
        name: str,
        lease: float,
        prefetch: int,
        batch: int,
        send: MemoryObjectSendStream[Delivery],
    ) -> None:
        store = self.store
        async with send, store.subscribe(name) as subscription:
            backoff = _ERROR_BACKOFF[0]
            while True:
                room = max(1, min(batch, prefetch + 1 - send.statistics().current_buffer_used))
                try:
                    claims = await store.claim(name, lease=lease, limit=room)
                except RehydrateError as exc:
                    backoff = await self._store_trouble(name, exc, backoff)
                    continue
                backoff = _ERROR_BACKOFF[0]
                for i, claim in enumerate(claims):
                    try:
                        await send.send(Delivery._from_claim(name, claim, store, self._counters))
                    except BaseException as exc:
                        # The consumer left: hand back this claim and the rest of the batch.
                        with anyio.CancelScope(shield=True):
                            for left in claims[i:]:
                                await self._release(name, left.id, left.token)
                        if isinstance(exc, (anyio.BrokenResourceError, anyio.ClosedResourceError)):
                            return
                        raise
                    self._counters.delivered += 1
                    self._counters.record_lateness(claim.lateness)
                if len(claims) < room:
                    await self._sleep_until_due(name, subscription)

    # -- running ---------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._running:
            raise RehydrateError("this scheduler is already running")
        await self.store.open()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._running = True
        self._stopping = False
        self._stopped = anyio.Event()
        for route in self._routes.values():
            tg.start_soon(self._serve, route)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self.stop()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The task group wraps what the body of ``async with scheduler:`` raised; when that is
            # all that went wrong, let it out as itself so ``except DuplicateIdError:`` works.
            if exc is not None and _only(group, exc):
                return False
            raise
        finally:
            self._tg = None
            self._running = False
            if self._owns_store:
                # Not in a shielded scope of ours: a store may close a task group it opened in
                # open() (coredis's pool), which must exit in the scope it was entered in. Stores
                # shield what must finish (SQLite's connection close) themselves.
                await self.store.aclose()

    def stop(self) -> None:
        """Stop claiming; running handlers get ``grace`` seconds, then are cancelled. Idempotent.

        Handler threads (plain ``def`` handlers) are waited for ``sync_grace`` seconds more.
        """
        self._stopping = True
        if self._stopped is not None:
            self._stopped.set()
        for route in self._routes.values():
            if route.claim_scope is not None:
                route.claim_scope.cancel()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve every handler until cancelled or until :meth:`stop`, then shut down gracefully.

        With ``await task_group.start(scheduler.run)``, returns once the store is open and the
        handlers are being served (and raises if the store could not be opened).
        """
        async with self:
            assert self._stopped is not None
            task_status.started()
            await self._stopped.wait()

    async def _serve(self, route: _Route) -> None:
        store = self.store
        keeper = _LeaseKeeper(store, route)
        acker = _Acker(store, route.name, self._counters)
        if not route.is_async:
            route.limiter = anyio.CapacityLimiter(route.concurrency)
        route.claim_scope = anyio.CancelScope()
        if self._stopping:
            route.claim_scope.cancel()
        workers = _Workers(route, lambda claim: self._deliver(route, claim, keeper, acker))
        try:
            async with anyio.create_task_group() as work:
                work.start_soon(keeper.run)
                work.start_soon(acker.run)
                try:
                    async with anyio.create_task_group() as handlers:
                        workers.group = handlers
                        try:
                            with route.claim_scope:
                                async with store.subscribe(route.name) as subscription:
                                    await self._claim_loop(route, workers, keeper, subscription)
                            # Stopping: no more claims. Give running handlers their grace period.
                            with anyio.move_on_after(self.grace):
                                while route.in_flight:
                                    route.idle = anyio.Event()
                                    await route.idle.wait()
                        finally:
                            # Async handlers are cancelled now; threads cannot be, so they get
                            # ``sync_grace`` more (their leases kept) before shutdown gives up.
                            route.give_up_at = anyio.current_time() + self.sync_grace
                            for scope in route.threads:
                                scope.deadline = route.give_up_at
                            handlers.cancel_scope.cancel()
                finally:
                    keeper.stop()
                    work.cancel_scope.cancel()
        finally:
            # Every task of the route has ended: send the acks of the handlers that finished,
            # and hand back anything claimed that no worker started.
            with anyio.CancelScope(shield=True):
                await acker.flush()
                for claim in workers.drain():
                    route.in_flight -= 1
                    self._counters.in_flight -= 1
                    await self._release(route.name, claim.id, claim.token)

    async def _claim_loop(
        self, route: _Route, workers: _Workers, keeper: _LeaseKeeper, subscription: Subscription
    ) -> None:
        store = self.store
        name = route.name
        backoff = _ERROR_BACKOFF[0]
        while True:
            free = route.concurrency - route.in_flight
            if free <= 0:
                route.slot_freed = anyio.Event()
                await route.slot_freed.wait()
                continue
            want = min(free, route.batch)
            try:
                claims = await store.claim(name, lease=route.lease, limit=want)
            except RehydrateError as exc:
                backoff = await self._store_trouble(name, exc, backoff)
                continue
            backoff = _ERROR_BACKOFF[0]
            for claim in claims:
                route.in_flight += 1
                self._counters.in_flight += 1
                keeper.add(claim)
                workers.dispatch(claim)
            if len(claims) < want:
                await self._sleep_until_due(name, subscription)
            else:
                await anyio.lowlevel.checkpoint()

    async def _sleep_until_due(self, name: str, subscription: Subscription) -> None:
        try:
            ttn = await self.store.ttn(name)
        except RehydrateError as exc:
            await self._store_trouble(name, exc, _ERROR_BACKOFF[0])
            return
        if ttn is None or ttn > 0:
            await subscription.wait(ttn)

    async def _release(self, name: str, id: str, token: int) -> None:
        """Hand a claimed element back, due at once; if that fails its lease brings it back."""
        with anyio.move_on_after(2.0), contextlib.suppress(RehydrateError):
            await self.store.reschedule(name, id, ttl=0, token=token)

    async def _store_trouble(self, name: str, exc: BaseException, backoff: float) -> float:
        logger.error("store call failed, retrying", dehydrator=name, retry_in=backoff, exc_info=exc)
        await anyio.sleep(backoff)
        return min(backoff * 2, _ERROR_BACKOFF[1])

    async def _deliver(self, route: _Route, claim: Claim, keeper: _LeaseKeeper, acker: _Acker) -> None:
        counters = self._counters
        counters.delivered += 1
        counters.record_lateness(claim.lateness)
        delivery = Delivery._from_claim(route.name, claim, self.store)
        context_token = _current.set(delivery)
        try:
            if route.is_async:
                await route.func(claim.element)
            else:
                await self._in_thread(route, claim)
        except _GaveUp:
            # Neither acked nor handed back: its lease (no longer renewed) brings it back.
            logger.warning(
                "gave up waiting for a handler thread",
                dehydrator=route.name,
                id=claim.id,
                handler=_name_of(route.func),
                grace=self.grace,
                sync_grace=self.sync_grace,
                lease=route.lease,
            )
        except anyio.get_cancelled_exc_class():
            # Shutting down: hand the element back now rather than when its lease runs out.
            with anyio.CancelScope(shield=True):
                await self._release(route.name, claim.id, claim.token)
            raise
        except Exception as exc:
            # Shielded: a thread that failed during shutdown is rescheduled, not handed back.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_ACK_TIMEOUT):
                await self._failed(route, claim, exc)
        else:
            acker.add(claim.id, claim.token)
        finally:
            _current.reset(context_token)
            keeper.discard(claim.id, claim.token)
            route.in_flight -= 1
            counters.in_flight -= 1
            if route.slot_freed is not None:
                route.slot_freed.set()
            if route.idle is not None and not route.in_flight:
                route.idle.set()

    async def _in_thread(self, route: _Route, claim: Claim) -> None:
        """Run a plain ``def`` handler in a worker thread, and wait for it even while shutting down.

        A thread cannot be cancelled: handing its element back while it runs would let the element
        run twice. So its wait is shielded until shutdown gives up on it (``sync_grace`` after the
        grace period), and then :class:`_GaveUp` leaves the element to its lease.
        """
        context = contextvars.copy_context()
        with anyio.CancelScope(shield=True) as scope:
            if route.give_up_at is not None:
                scope.deadline = route.give_up_at
            route.threads.add(scope)
            try:
                await anyio.to_thread.run_sync(
                    functools.partial(context.run, route.func, claim.element),
                    limiter=route.limiter,
                    abandon_on_cancel=True,
                )
            finally:
                route.threads.discard(scope)
        if scope.cancelled_caught:
            raise _GaveUp

    async def _failed(self, route: _Route, claim: Claim, exc: Exception) -> None:
        # The traceback goes with every failure (``exc_info``): structlog renders it on a console
        # and as a field in JSON. Event names are constant; what varies is in the fields.
        log = logger.bind(
            dehydrator=route.name, id=claim.id, attempt=claim.attempt, handler=_name_of(route.func)
        )
        try:
            retryable = route.retry.retries(exc)
            if claim.attempt >= route.retry.attempts or not retryable:
                await self._dead_letter(route, claim, exc)
                self._counters.dead_lettered += 1
                why = "last attempt" if retryable else "error not retried"
                log.warning("handler failed: dead-lettered", reason=why, exc_info=exc)
                return
            if isinstance(exc, Retry) and exc.delay is not None:
                delay = exc.delay_after(claim.attempt)
            else:
                delay = route.retry.delay_after(claim.attempt, self._rng)
            if await self.store.reschedule(route.name, claim.id, ttl=delay, token=claim.token):
                self._counters.retried += 1
                log.info("handler failed, will retry", retry_in=round(delay, 3), exc_info=exc)
            else:
                self._counters.lost += 1
                log.warning("handler failed after its lease was lost", exc_info=exc)
        except RehydrateError as store_exc:
            log.error(
                "could not reschedule a failed element; its lease will bring it back",
                store_error=repr(store_exc),
                exc_info=exc,
            )

    async def _dead_letter(self, route: _Route, claim: Claim, exc: BaseException) -> None:
        record = {
            "element": claim.element,
            "error": repr(exc)[:2000],
            "attempts": claim.attempt,
            "failed_at": time.time(),
        }
        # A DuplicateIdError means an earlier try got this far, then lost its ack.
        with contextlib.suppress(DuplicateIdError):
            await self.store.push(route.name + DEAD_SUFFIX, record, ttl=self.dead_letter_ttl, id=claim.id)
        await self.store.ack(route.name, [(claim.id, claim.token)])
