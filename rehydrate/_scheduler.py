"""The scheduler: register handlers, defer elements, and run a timer loop per handler.

For each dehydrator with a handler, one claim loop (a :class:`~rehydrate._runner.Runner`):

1. subscribes to the store's "something may be due sooner" notifications (before reading TTN, so
   nothing slips between reading it and going to sleep);
2. claims due elements in batches, as many as the handler has free slots, each under a lease;
3. hands each claimed element to a worker task, which runs the handler and queues a fenced ack;
4. when nothing more is due, sleeps exactly until the store's TTN or until notified.

Beside it, a lease keeper renews the lease of every running element at half its length (so a slow
handler is never delivered twice to healthy workers) and an acker sends finished elements' acks in
batches. A failed element is rescheduled with backoff, then dead-lettered. If the process dies, the
leases run out and the elements are delivered again: at least once, nothing lost.

The layout: this module is the public face (registration, ``defer``, dead letters, stats, start
and stop); ``_runner.py`` serves each handler; ``_deliveries.py`` holds the records handed out
(:class:`Delivery`, :class:`DeadLetter`, :class:`Stats`).
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Self, TypeVar, cast

import anyio
import anyio.abc
import attrs
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream

from rehydrate._admin import Admin, RunNow, remove_schedule, upsert_schedule
from rehydrate._batcher import DeferBatcher
from rehydrate._clock import wall
from rehydrate._core import _validate
from rehydrate._core._retry import Retry
from rehydrate._core._triggers import Misfire, Trigger
from rehydrate._core._validate import Seconds
from rehydrate._deliveries import Counters, DeadLetter, Delivery, Stats, current_delivery, stats_of
from rehydrate._heartbeat import Heartbeat, new_worker_id
from rehydrate._limits import Limit, Limiter, spec_of
from rehydrate._runner import (
    DEAD_SUFFIX,
    HandlerSpec,
    Runner,
    Settings,
    feed_channel,
    handler_label,
    release,
    release_many,
)
from rehydrate._schedules import (
    Envelope,
    ScheduleInfo,
    check_trigger,
    is_envelope,
    is_schedule,
    new_schedule,
    trigger_of,
    ttl_until,
    validate_misfire,
    validate_spread,
)
from rehydrate._tracing import Tracing, unwrap
from rehydrate.abc import Clock, Store
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    SchedulerNotRunningError,
    StoreNotOpenError,
)

__all__ = [
    "DEAD_SUFFIX",
    "DeadLetter",
    "Delivery",
    "ScheduleInfo",
    "Scheduler",
    "SchedulerNotRunningError",
    "Stats",
    "current_delivery",
]

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

logger = structlog.get_logger("rehydrate")

#: A handler: called with one argument, the element (``async def`` or plain ``def``). Bound so
#: that a type checker refuses ``async def handle()`` where registration would refuse it.
Handler = TypeVar("Handler", bound=Callable[[Any], object])


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


def _check_handler(func: object, name: str) -> None:
    """Refuse, at registration, a handler that cannot be called with the element alone.

    Otherwise it registers, and every delivery fails with ``TypeError``, is retried and ends as a
    dead letter. A signature that cannot be read (some builtins) is given the benefit of the doubt.
    """
    if not callable(func):
        raise InvalidTypeError(f"the handler of {name!r} must be callable, not {type(func).__name__}")
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError as exc:
        bare = signature.replace(  # the parameters as a person reads them: no annotations
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        raise InvalidTypeError(
            f"the handler of {name!r} must take one positional argument, the element: "
            f"{handler_label(func)}{bare} cannot ({exc})"
        ) from None


def _positive_int(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{name} must be an int of at least 1, got {value!r}")
    return value


def _heartbeat_interval(value: Seconds | None) -> float | None:
    if value is None:
        return None
    seconds = _validate.seconds(value, "heartbeat")
    if seconds <= 0:
        raise InvalidArgumentError("heartbeat must be positive (or None: no heartbeats)")
    return seconds


def _delay_until(at: datetime, clock: Clock) -> float:
    """Seconds from now until ``at``, by the store's clock (a FakeClock's wall time in tests)."""
    if not isinstance(at, datetime):
        raise InvalidTypeError(f"at must be a datetime, not {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidArgumentError(
            "at must be an aware datetime (with a tzinfo, e.g. datetime.now(UTC) + ...): "
            "a naive one is ambiguous"
        )
    return max(0.0, at.timestamp() - wall(clock))


_P = ParamSpec("_P")
# schedule_many files new schedules this many to a push_many, and upserts the rest this many at once.
_SCHEDULE_BATCH = 1000
_UPSERT_CONCURRENCY = 64
_T = TypeVar("_T")


def _not_running(method: str) -> SchedulerNotRunningError:
    return SchedulerNotRunningError(
        f"Scheduler.{method}() needs the scheduler running: use `async with scheduler:` "
        "(or `await scheduler.run()`, or `with SyncScheduler(scheduler) as s:`)"
    )


def _needs_the_store(
    method: Callable[Concatenate[Scheduler, _P], Awaitable[_T]],
) -> Callable[Concatenate[Scheduler, _P], Coroutine[Any, Any, _T]]:
    """A :class:`Scheduler` method that calls the store: outside ``async with scheduler`` it
    raises :class:`SchedulerNotRunningError`, the same for every store (the user holds a
    scheduler, so "use async with store" would point at the wrong object)."""
    name = method.__name__

    @functools.wraps(method)
    async def call(self: Scheduler, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        self._check_running(name)
        try:
            return await method(self, *args, **kwargs)
        except StoreNotOpenError as exc:
            if self._running:
                raise
            raise _not_running(name) from exc

    return call


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

    While it serves handlers (or a :meth:`channel`), the scheduler sends a heartbeat to the store
    every ``heartbeat`` seconds (its id, host, pid, handlers and counters; ``None`` sends none):
    ``rehydrate workers`` and the dashboard list the workers alive, and a worker that died shows
    as expired after three intervals. A scheduler that only defers (no handlers, or run with
    :meth:`producer`) delivers nothing, so it sends none and is not listed. See
    ``docs/monitoring.md``.

    A process that only defers (a web app) runs the scheduler with ``async with
    scheduler.producer():``: the same scheduler, its handlers left to the workers. See
    ``docs/web-apps.md``.

    With OpenTelemetry in use, a defer made inside a span carries that trace to its delivery,
    which runs in a span of its own (see the monitoring guide). ``tracer_provider`` is the
    provider to record with; by default the global one.
    """

    def __init__(
        self,
        store: Store | str | None = None,
        *,
        grace: Seconds = 10.0,
        sync_grace: Seconds = 20.0,
        dead_letter_ttl: Seconds = timedelta(days=365),
        heartbeat: Seconds | None = 5.0,
        rng: random.Random | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.store, self._owns_store = _as_store(store)
        if rng is not None and not isinstance(rng, random.Random):
            raise InvalidTypeError(f"rng must be a random.Random, not {type(rng).__name__}")
        self._settings = Settings(
            grace=_validate.seconds(grace, "grace"),
            sync_grace=_validate.seconds(sync_grace, "sync_grace"),
            dead_letter_ttl=_validate.seconds(dead_letter_ttl, "dead_letter_ttl"),
            rng=rng or random.Random(),
            tracing=Tracing(tracer_provider),
        )
        self._handlers: dict[str, HandlerSpec] = {}
        #: The misfire policy and grace of each schedule declared with a handler (``handler(name,
        #: schedule=...)``; the trigger is the handler's ``schedule``).
        self._declared: dict[str, tuple[Misfire, float | None, float | None]] = {}
        #: The runner of each handler while the scheduler runs.
        self._runners: dict[str, Runner] = {}
        #: The counters of each dehydrator served (by a handler or a channel), since it was made.
        self._counters: dict[str, Counters] = {}
        self._histograms = False
        self._heartbeat_interval = _heartbeat_interval(heartbeat)
        self._worker_id = new_worker_id()
        #: What the heartbeat waits on (``None``: real time; see ``_heartbeat.py``); tests set it.
        self._heartbeat_clock: Clock | None = None
        #: Set when this scheduler first serves something (a handler, a channel) while it runs,
        #: or stops: a heartbeat waits for it (a scheduler that only defers is no worker).
        self._serving: anyio.Event | None = None
        #: ``False`` while run by :meth:`producer`: handlers are registered but not served.
        self._serve = True
        self._tg: anyio.abc.TaskGroup | None = None
        self._running = False
        self._stopping = False
        self._stopped: anyio.Event | None = None
        #: Coalesces concurrent defers while the scheduler runs (pushes them directly otherwise).
        self._batcher = DeferBatcher(self.store)

    def __repr__(self) -> str:
        return f"<Scheduler store={self.store!r} handlers={sorted(self._handlers)}>"

    @property
    def handlers(self) -> list[str]:
        """The names of the dehydrators that have a handler, sorted."""
        return sorted(self._handlers)

    @property
    def limited_handlers(self) -> list[str]:
        """The names of the handlers declared with ``limits=``, sorted (``/metrics`` of a worker
        counts their parked, granted and woken elements from the start)."""
        return sorted(name for name, h in self._handlers.items() if h.limits is not None)

    @property
    def grace(self) -> float:
        """Seconds shutdown waits for running handlers before cancelling them (see the class)."""
        return self._settings.grace

    @grace.setter
    def grace(self, value: Seconds) -> None:
        self._settings.grace = _validate.seconds(value, "grace")

    @property
    def sync_grace(self) -> float:
        """Seconds more, past ``grace``, that shutdown waits for handler threads (see the class)."""
        return self._settings.sync_grace

    @sync_grace.setter
    def sync_grace(self, value: Seconds) -> None:
        self._settings.sync_grace = _validate.seconds(value, "sync_grace")

    @property
    def heartbeat(self) -> float | None:
        """Seconds between heartbeats to the store (``None``: none are sent). Set before running."""
        return self._heartbeat_interval

    @heartbeat.setter
    def heartbeat(self, value: Seconds | None) -> None:
        if self._running:
            raise RehydrateError("a running scheduler cannot change its heartbeat")
        self._heartbeat_interval = _heartbeat_interval(value)

    @property
    def worker_id(self) -> str:
        """This scheduler's id in the store's list of workers (``host:pid:random``)."""
        return self._worker_id

    @property
    def dead_letter_ttl(self) -> float:
        """Seconds a dead letter is kept."""
        return self._settings.dead_letter_ttl

    @dead_letter_ttl.setter
    def dead_letter_ttl(self, value: Seconds) -> None:
        self._settings.dead_letter_ttl = _validate.seconds(value, "dead_letter_ttl")

    def use_store(self, store: Store | str) -> None:
        """Serve ``store`` (a :class:`~rehydrate.abc.Store` or a URL) instead of the one given at
        construction: how ``rehydrate worker --store`` points a user's scheduler elsewhere. Only
        before it runs; a store made from a URL is opened and closed with the scheduler."""
        if self._running:
            raise RehydrateError("a running scheduler cannot change its store")
        if store is None:
            raise InvalidTypeError("store must be a Store or a URL, not None")
        self.store, self._owns_store = _as_store(store)
        self._batcher = DeferBatcher(self.store)

    def set_concurrency(self, concurrency: int) -> None:
        """Give every handler registered so far this ``concurrency`` (and a claim batch of
        ``min(concurrency, 100)``), as ``rehydrate worker --concurrency`` does: the capacity of a
        process is the deployer's call, not the code's. Only before the scheduler runs."""
        if self._running:
            raise RehydrateError("a running scheduler cannot change its concurrency")
        _positive_int(concurrency, "concurrency")
        for name, handler in self._handlers.items():
            self._handlers[name] = attrs.evolve(handler, concurrency=concurrency, batch=min(concurrency, 100))

    # -- registration ----------------------------------------------------------------------------

    def handler(
        self,
        name: str,
        *,
        retry: Retry | None = None,
        lease: Seconds = 30.0,
        concurrency: int = 100,
        batch: int | None = None,
        schedule: Trigger | None = None,
        misfire: Misfire | None = None,
        grace: Seconds | None = None,
        spread: Seconds | None = None,
        claim_ahead: Seconds = 0.0,
        limits: Iterable[Limit] | None = None,
        limit_key: Callable[[Any], Any] | None = None,
    ) -> Callable[[Handler], Handler]:
        """Register the decorated function as the handler of dehydrator ``name``.

        It is called with each due element, its one positional argument (a callable that cannot
        take it, such as ``async def handle()``, raises ``InvalidTypeError`` here rather than
        fail every delivery); an ``async def`` runs in the event loop (it must not block it: a
        stall past a quarter of the lease is logged, as the lease may run out), a plain function
        in a worker thread (which shutdown waits for: see ``sync_grace``).
        Returning means done (the element is acked); raising means failed (retried per
        ``retry``, then dead-lettered). At most ``concurrency`` elements run at once; they are
        claimed ``batch`` at a time (default: ``min(concurrency, 100)``). Each runs under a
        ``lease`` (seconds) renewed at half its length while the handler runs.

        ``schedule`` (a :class:`~rehydrate.Cron` or :class:`~rehydrate.Every`) declares a recurring
        schedule with id ``name`` and element ``None``, filed when the scheduler starts: an
        upsert, so any number of processes declaring the same schedule move nothing (see
        :meth:`schedule`). Per-entity schedules are filed at run time with :meth:`schedule`.
        ``misfire`` (default ``"coalesce"``), ``grace`` and ``spread`` are as in :meth:`schedule`;
        they go with ``schedule`` only. The code is the source of truth for a declared schedule:
        each start files it as declared, so a :meth:`schedule` call at run time on the same id
        (another trigger, element, ``misfire``, ``grace`` or ``spread``) lasts until the next start.

        ``claim_ahead`` (seconds, default 0: off) claims elements that long before they fall due
        and holds them in this process until their time, so that a burst (a thousand elements due
        in the same millisecond) costs no store round trip when it is due: its handlers start as
        fast as they can be called. Held elements count towards ``concurrency`` and their leases
        run while they wait, so it must be under half the ``lease``. The price: an element is
        taken from the store up to ``claim_ahead`` early, so a ``cancel`` (or ``unschedule``,
        ``pause``, a replacing ``defer``) made by another process within that window no longer
        stops it (made through this scheduler, it still does), and no other worker can take it.
        Claimed elements whose lease has not run out are never taken early. Keep it short (the
        time a burst takes to claim: milliseconds in process, tens of milliseconds over a
        network). Needs a store whose ``claim`` takes ``ahead`` (every store of this package).

        ``limits`` (:class:`~rehydrate.Concurrency`, :class:`~rehydrate.Rate`, several at once)
        bound the handler across every process sharing the store, per partition key:
        ``limit_key`` (a function of the element, returning a ``str`` or an ``int``; without it,
        one key) picks it. An element whose key has no room is not run and not counted as an
        attempt: it is handed back and waits, out of the due range, until a release (or the
        earliest lease end or window slide) wakes it, while other keys' elements run. A
        ``limit_key`` that raises or returns no key fails that element (retry policy). The
        limit's name is the handler's: :meth:`limiter` with this name shares it. Each slot's lease
        is the handler's ``lease``, renewed at half of it while the handler runs. Schedule
        occurrences are not limited (see ``docs/limits.md``).
        """
        _validate.element_id(name, "name")
        if name in self._handlers:
            raise InvalidArgumentError(f"dehydrator {name!r} already has a handler")
        if retry is not None and not isinstance(retry, Retry):
            raise InvalidTypeError(f"retry must be a rehydrate.Retry, not {type(retry).__name__}")
        seconds = _validate.seconds(lease, "lease")
        if seconds <= 0:
            raise InvalidArgumentError("lease must be positive")
        _positive_int(concurrency, "concurrency")
        size = min(concurrency, 100) if batch is None else _positive_int(batch, "batch")
        ahead = _validate.seconds(claim_ahead, "claim_ahead")
        if ahead >= seconds / 2:
            raise InvalidArgumentError(
                f"claim_ahead must be under half the lease ({seconds / 2:g} s), got {claim_ahead!r}: "
                "held elements' leases run while they wait"
            )
        spec = None if limits is None else spec_of(limits, seconds)
        if limit_key is not None:
            if spec is None:
                raise InvalidArgumentError("limit_key goes with limits= (it partitions them)")
            if not callable(limit_key):
                raise InvalidTypeError(f"limit_key must be callable, not {type(limit_key).__name__}")
        policy: tuple[Misfire, float | None, float | None] | None = None
        if schedule is not None:
            check_trigger(schedule)
            chosen: Misfire = "coalesce" if misfire is None else misfire
            policy = (chosen, validate_misfire(chosen, grace), validate_spread(spread))
        elif misfire is not None or grace is not None or spread is not None:
            raise InvalidArgumentError(
                "misfire, grace and spread go with schedule= (they are the declared schedule's "
                "policy; a schedule filed at run time takes them in Scheduler.schedule)"
            )

        def register(func: Handler) -> Handler:
            _check_handler(func, name)
            handler = HandlerSpec(
                name=name,
                func=func,
                is_async=inspect.iscoroutinefunction(func)
                or inspect.iscoroutinefunction(type(func).__call__),
                retry=retry or Retry(),
                lease=seconds,
                concurrency=concurrency,
                batch=size,
                label=handler_label(func),
                schedule=schedule,
                claim_ahead=ahead,
                limits=spec,
                limit_key=limit_key,
            )
            self._check_claim_ahead(handler)
            self._handlers[name] = handler
            if policy is not None:
                self._declared[name] = policy
            if self._tg is not None and self._serve:
                self._start(handler)
            return func

        return register

    # -- deferring -------------------------------------------------------------------------------

    @_needs_the_store
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

        While the scheduler runs, defers issued concurrently (from many tasks) go to the store
        together, one ``push_many`` per dehydrator and round trip; each still returns its own id
        or raises its own error once its element is stored, and its due time counts from this
        call. A defer cancelled before its batch was sent is not stored; after, it is.
        """
        ttl = self._ttl(delay, at, self.store.clock)
        if replace and id is None:
            raise InvalidArgumentError("replace needs an id: the element to replace is named by it")
        producer = self._settings.tracing.producer(name, ttl)
        if producer is None:
            return await self._push(name, element, ttl, id, replace)
        with producer:
            return producer.pushed(await self._push(name, producer.wrap(element), ttl, id, replace))

    async def _push(self, name: str, element: Any, ttl: float, id: str | None, replace: bool) -> str:
        """One defer's store call: a replace on its own (atomic), the others through the batcher."""
        if replace:
            pushed = await self.store.push(name, element, ttl=ttl, id=id, replace=True)
            await self._unhold(name, pushed, give_back=False)  # (the one held is replaced)
            return pushed
        return await self._batcher.push(name, element, ttl, id)

    async def _unhold(self, name: str, id: str, *, give_back: bool) -> None:
        """Drop the claim this process holds on ``id`` ahead of its due time (``claim_ahead``),
        if any, after a change made through this scheduler: a cancelled, unscheduled or replaced
        element must not run from a stale claim. With ``give_back`` (the element is still there,
        changed: paused, rescheduled, made due now) it is handed back to the store, due when it
        was (fenced by the claim: a no-op if someone else changed it meanwhile). A claim held by
        another process is out of reach: there, ``claim_ahead`` is the window in which a change
        comes too late."""
        runner = self._runners.get(name)
        claim = None if runner is None else runner.forget_held(id)
        if claim is not None and give_back:
            ttl = max(0.0, claim.due - self.store.clock())
            await release(self.store, name, id, claim.token, ttl)

    @_needs_the_store
    async def cancel(self, name: str, id: str) -> Any:
        """Remove a deferred element before it is delivered (PULL); the element, or ``None``.

        A schedule under ``id`` is removed too, and the element it was given is returned (not
        the envelope it is stored in); :meth:`unschedule` is the better way there: it lets an
        occurrence in flight end before the schedule goes (this pulls it from under its worker,
        whose end then files nothing).
        """
        pulled = await self.store.pull(name, id)
        await self._unhold(name, id, give_back=False)
        if is_envelope(pulled):
            return pulled.get("element")
        element, _ = unwrap(pulled)
        return element

    @_needs_the_store
    async def run_now(self, name: str, id: str) -> bool:
        """Deliver ``id`` of ``name`` now rather than at its time; ``False`` if there is no such
        element, a worker holds it (its lease runs), or it is a paused schedule.

        One-shot work becomes due now (and is delivered once, as before). A schedule runs an
        extra occurrence now, out of turn: ``scheduled_for`` is the time of this call, and the
        occurrence that was next still runs at its own time (running it early instead would
        leave that time without its run, and give a handler an idempotency key from the
        future). The extra run is retried and dead-lettered like any occurrence; one still
        failing when the schedule's own time comes becomes that occurrence.
        """
        return await self._run_now(name, id) in ("one-shot", "schedule")

    @_needs_the_store
    async def run_now_outcome(self, name: str, id: str) -> RunNow:
        """:meth:`run_now`, saying what it did, so that a tool can tell a person why nothing ran:
        see :meth:`Admin.run_now <rehydrate.Admin.run_now>` for the outcomes. An element this
        process claimed ahead of its due time (``claim_ahead``) runs at once (``"one-shot"``).
        """
        return await self._run_now(name, id)

    async def _run_now(self, name: str, id: str) -> RunNow:
        _validate.element_id(name, "name")
        _validate.element_id(id)
        runner = self._runners.get(name)
        if runner is not None and runner.run_held_now(id):  # claimed ahead here: run it now
            return "one-shot"
        return await Admin(self.store).run_now(name, id)

    def _check_running(self, method: str) -> None:
        """Refuse a call that needs the store open, the same way for every store.

        A store the scheduler made (from a URL, or the default memory store) is open only while
        the scheduler runs. A store given as an object may have been opened by its owner (the
        ``rehydrate dead`` command does so): if it was not, its ``StoreNotOpenError`` becomes
        this same error (see :func:`_needs_the_store`).
        """
        if not self._running and self._owns_store:
            raise _not_running(method)

    @staticmethod
    def _ttl(delay: Seconds | None, at: datetime | None, clock: Clock) -> float:
        if delay is not None and at is not None:
            raise InvalidArgumentError("give delay or at, not both")
        if at is not None:
            return _delay_until(at, clock)
        return 0.0 if delay is None else _validate.seconds(delay, "delay")

    # -- recurring schedules ---------------------------------------------------------------------

    @_needs_the_store
    async def schedule(
        self,
        name: str,
        trigger: Trigger,
        *,
        id: str,
        element: Any = None,
        misfire: Misfire = "coalesce",
        grace: Seconds | None = None,
        spread: Seconds | None = None,
    ) -> None:
        """File (or change) the recurring schedule ``id`` of ``name``: its handler gets ``element``
        at each occurrence of ``trigger`` (a :class:`~rehydrate.Cron` or :class:`~rehydrate.Every`).

        An upsert. For an ``id`` that is already a schedule: the same trigger keeps its next run
        time (only the element, ``misfire`` and ``grace`` change, and nothing is written if they
        did not), and a change made while an occurrence runs is written into the element its
        worker holds, to be filed with the next occurrence when the run ends (never beside it);
        another trigger is filed from now on (during a run, written in the same way: its
        occurrences that pass meanwhile are missed, and follow ``misfire`` once the run ends).
        A paused schedule stays paused. Raises
        ``DuplicateIdError`` if ``id`` holds one-shot work. ``name`` need not have a handler here
        (another process may serve it).

        Each occurrence runs under a lease like any delivery (once among healthy workers, at
        least once if a worker dies); the next is filed when it ends, done or dead-lettered, in
        the same store step, so occurrences never overlap. After downtime, ``misfire`` says what
        the missed ones become: ``"coalesce"`` one run (for the latest), ``"all"`` each in turn
        (the most recent 100 at most), ``"skip"`` none later than ``grace`` seconds (default 1:
        every claim comes a little after its nominal time, so a grace must be positive; it goes
        with ``"skip"`` only, and anything else raises ``InvalidArgumentError``).

        ``spread`` (seconds or a timedelta) spreads the schedules of a name that share a trigger
        over that window, so that 100,000 reminders at 08:00 do not all fall due in the same
        second: each schedule runs at a fixed offset in ``[0, spread)`` after every nominal time,
        taken from a hash of its id (the same in every process, after every restart). Its
        handler still sees the nominal time as ``scheduled_for``, and the misfire policy counts
        lateness from the offset time.
        """
        admin = Admin(self.store)
        await admin.schedule(
            name, trigger, id=id, element=element, misfire=misfire, grace=grace, spread=spread
        )
        await self._unhold(name, id, give_back=True)  # (comes back as the schedule is now)

    @_needs_the_store
    async def schedule_many(
        self,
        name: str,
        schedules: Iterable[tuple[str, Trigger, Any]],
        *,
        misfire: Misfire = "coalesce",
        grace: Seconds | None = None,
        spread: Seconds | None = None,
    ) -> None:
        """:meth:`schedule` for many ``(id, trigger, element)`` at once: a schedule per user, say.

        The same upsert as :meth:`schedule` for each, but the ids that are new are filed a batch
        at a time (one ``push_many`` per 1,000, one round trip on Redis and one transaction on
        SQLite or PostgreSQL) instead of two round trips each; in a batch that meets an id already
        filed (a restart declaring the same schedules), each schedule of that batch goes through
        :meth:`schedule`'s own path, so an unchanged one moves nothing.

        Everything is checked before anything is written: a bad item, or an id given twice, raises
        ``InvalidArgumentError`` naming its index. An id that holds one-shot work does not stop the
        others: they are all filed, then ``DuplicateIdError`` is raised for the first such id
        (its notes list them all).
        """
        _validate.element_id(name, "name")
        grace_s = validate_misfire(misfire, grace)
        spread_s = validate_spread(spread)
        if isinstance(schedules, str | bytes | dict):
            raise InvalidTypeError(
                f"schedules must be an iterable of (id, trigger, element), not {type(schedules).__name__}"
            )
        items: list[tuple[str, Trigger, Any]] = []
        seen: set[str] = set()
        for index, item in enumerate(schedules):
            if not isinstance(item, tuple) or len(item) != 3:
                raise InvalidArgumentError(
                    f"schedules[{index}] must be an (id, trigger, element) tuple, not {item!r:.80}"
                )
            id, trigger, element = item
            try:
                _validate.element_id(id)
                check_trigger(trigger)
            except RehydrateError as exc:
                exc.add_note(f"in schedules[{index}]")
                raise
            if id in seen:
                raise InvalidArgumentError(f"schedules[{index}]: id {id!r} is given twice")
            seen.add(id)
            items.append((id, trigger, element))
        conflicts: list[DuplicateIdError] = []
        limiter = anyio.CapacityLimiter(_UPSERT_CONCURRENCY)

        async def upsert(id: str, trigger: Trigger, element: Any) -> None:
            async with limiter:
                try:
                    await upsert_schedule(self.store, name, trigger, id, element, misfire, grace_s, spread_s)
                except DuplicateIdError as exc:
                    conflicts.append(exc)
                else:
                    await self._unhold(name, id, give_back=True)

        for start in range(0, len(items), _SCHEDULE_BATCH):
            batch = items[start : start + _SCHEDULE_BATCH]
            store = self.store
            now = wall(store.clock)
            planned = []
            for id, trigger, element in batch:
                envelope, due, _ = new_schedule(
                    id, trigger, element, now, misfire=misfire, grace=grace_s, spread=spread_s
                )
                planned.append((envelope, due, id))
            # The ttls from the clock read just before filing, not the one the batch was planned
            # at: building a batch of envelopes takes milliseconds, and each of them would make
            # every first occurrence of the batch that much later than its nominal time.
            filed_at = wall(store.clock)
            fresh = [(envelope, ttl_until(due, filed_at), id) for envelope, due, id in planned]
            try:
                await store.push_many(name, fresh)
            except DuplicateIdError:
                # Some are filed already (all or nothing: none of this batch was written).
                async with anyio.create_task_group() as tg:
                    for id, trigger, element in batch:
                        tg.start_soon(upsert, id, trigger, element)
        if conflicts:
            order = {id: index for index, (id, _, _) in enumerate(items)}
            conflicts.sort(key=lambda c: order[c.id])
            first_conflict = conflicts[0]
            first_conflict.add_note(
                f"{len(conflicts)} id(s) of {name!r} hold one-shot work and were not made schedules: "
                + ", ".join(repr(c.id) for c in conflicts[:20])
                + (" ..." if len(conflicts) > 20 else "")
            )
            raise first_conflict

    @_needs_the_store
    async def unschedule(self, name: str, id: str) -> bool:
        """Remove the schedule ``id`` of ``name``; ``True`` if it existed. A running occurrence
        finishes and files nothing, and a schedule filed under ``id`` again meanwhile waits for
        it (one-shot work under ``id`` is left alone: use :meth:`cancel`). See
        :meth:`Admin.unschedule <rehydrate.Admin.unschedule>`."""
        _validate.element_id(name, "name")
        _validate.element_id(id)
        runner = self._runners.get(name)
        if runner is not None:
            # Claimed ahead of its due time here (``claim_ahead``): no run to wait for, so it goes
            # at once (the store would take the claim for a running occurrence, and wait for it).
            existing = await self.store.look(name, id)
            if is_schedule(existing) and runner.forget_held(id) is not None:
                return await self.store.pull(name, id) is not None
        return await Admin(self.store).unschedule(name, id)

    @_needs_the_store
    async def schedules(self, name: str, *, limit: int | None = None) -> list[ScheduleInfo]:
        """The schedules of ``name``, next to run first (paused ones last), at most ``limit``:
        :meth:`Admin.schedules <rehydrate.Admin.schedules>`."""
        return await Admin(self.store).schedules(name, limit=limit)

    @_needs_the_store
    async def pause(self, name: str, id: str) -> bool:
        """Stop the schedule ``id`` from running until :meth:`resume`; ``False`` if unknown (and
        ``True`` if paused already). A running occurrence finishes, and the schedule is filed
        paused after it. :meth:`Admin.pause <rehydrate.Admin.pause>` says which it was."""
        outcome = await Admin(self.store).pause(name, id)
        await self._unhold(name, id, give_back=True)  # (comes back paused, and is skipped)
        return outcome in ("paused", "unchanged")

    @_needs_the_store
    async def resume(self, name: str, id: str) -> bool:
        """Run a paused schedule again, from its next occurrence after now (those missed while
        paused are not run), or from the one it was paused at if that is still to come; ``False``
        if unknown. :meth:`Admin.resume <rehydrate.Admin.resume>` says which it was."""
        return await Admin(self.store).resume(name, id) in ("resumed", "unchanged")

    async def _declare(self) -> None:
        """File the schedules declared with handlers, as declared (an upsert each: see
        :meth:`schedule`): the code is their source of truth. So a handler registered without
        ``schedule=`` removes the schedule its name declared before (code that declared one, and
        no longer does); a schedule filed at run time under that id is not marked, and stays."""
        for handler in self._handlers.values():
            name = handler.name
            if handler.schedule is not None:
                misfire, grace, spread = self._declared.get(name, ("coalesce", None, None))
                await upsert_schedule(
                    self.store, name, handler.schedule, name, None, misfire, grace, spread, declared=True
                )
                continue
            removed = await self._remove_declared(name)
            if removed is not None:
                # A warning: a process whose code still declares it (another app serving the same
                # name) would file it again at its start, and the two would take turns.
                logger.warning(
                    "schedule removed: its handler no longer declares it",
                    dehydrator=name,
                    id=name,
                    trigger=str(trigger_of(removed)),
                )

    async def _remove_declared(self, name: str) -> Envelope | None:
        """Remove the schedule that ``name``'s handler declared (marked ``declared``) under its
        name, if there is one; the envelope removed."""
        while True:
            found = await self.store.read(name, name)
            if found is None or not is_schedule(existing := found[0]) or not existing.get("declared"):
                return None
            if await remove_schedule(self.store, name, name, found[1]):
                return cast("Envelope", existing)

    # -- dead letters ----------------------------------------------------------------------------

    @_needs_the_store
    async def dead_letters(self, name: str, *, limit: int | None = None) -> list[DeadLetter]:
        """The elements of ``name`` that failed every attempt, oldest first:
        :meth:`Admin.dead_letters <rehydrate.Admin.dead_letters>`."""
        return await Admin(self.store).dead_letters(name, limit=limit)

    @_needs_the_store
    async def requeue(self, name: str, ids: Iterable[str] | None = None, *, delay: Seconds = 0) -> list[str]:
        """Put dead letters back into ``name`` (all of them, or ``ids``), due in ``delay``; the ids moved.

        A dead letter whose id is live again in ``name`` stays where it is.
        (:meth:`Admin.requeue <rehydrate.Admin.requeue>`.)
        """
        return await Admin(self.store).requeue(name, ids, delay=delay)

    # -- stats -----------------------------------------------------------------------------------

    def stats(self, name: str | None = None) -> Stats:
        """Counters since the scheduler was made, and the lateness of the recent deliveries.

        Of every dehydrator it served (handlers and channels), or of ``name`` only.
        """
        if name is None:
            return stats_of(self._counters.values(), sum(r.in_flight for r in self._runners.values()))
        _validate.element_id(name, "name")
        runner = self._runners.get(name)
        in_flight = 0 if runner is None else runner.in_flight
        return stats_of([self._counters[name]] if name in self._counters else [], in_flight)

    def _counters_of(self, name: str) -> Counters:
        counters = self._counters.get(name)
        if counters is None:
            counters = self._counters[name] = Counters()
            if self._histograms:
                counters.keep_histogram()
        return counters

    def stats_by_name(self) -> dict[str, Stats]:
        """:meth:`stats` of each dehydrator it served (handlers and channels), by name: what
        ``rehydrate worker --metrics-port`` serves, read in one step."""
        return {name: self.stats(name) for name in sorted(self._counters)}

    def keep_lateness_histogram(self) -> None:
        """Count lateness into the buckets of :attr:`Stats.lateness_histogram` from now on
        (``rehydrate worker --metrics-port`` does): a scheduler nobody scrapes pays nothing
        for them per delivery. Idempotent."""
        self._histograms = True
        for counters in self._counters.values():
            counters.keep_histogram()

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
                counters = self._counters_of(name)
                tg.start_soon(feed_channel, self.store, counters, name, seconds, prefetch, batch, send)
                self._now_serving()  # a consumer delivers work: it is a worker
                try:
                    yield receive
                finally:
                    tg.cancel_scope.cancel()
            # The feeder has ended (handing back what it held): hand back what it had buffered
            # for the consumer. Draining earlier would wake the feeder to claim more.
            with anyio.CancelScope(shield=True):
                buffered: list[tuple[str, int, float]] = []
                while True:
                    try:
                        delivery = receive.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    buffered.append((delivery.id, delivery.token, 0.0))
                await release_many(self.store, name, buffered)

    # -- running ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def producer(self) -> AsyncIterator[Self]:
        """Run this scheduler to defer only: ``async with scheduler.producer():``.

        For a process that hands work to others (a web app) on the module that declares the
        handlers: the store opens, and ``defer``, ``cancel``, ``schedule`` and the rest work as
        under ``async with scheduler``, but no handler is served (``rehydrate worker
        module:scheduler`` serves them), the schedules declared with handlers are not filed
        (the workers do that), and no heartbeat is sent: the process is no worker. A
        :meth:`channel` opened inside still consumes, and makes it one.
        """
        if self._running:
            raise RehydrateError("this scheduler is already running")
        self._serve = False
        try:
            async with self:
                yield self
        finally:
            self._serve = True

    async def __aenter__(self) -> Self:
        if self._running:
            raise RehydrateError("this scheduler is already running")
        serve = self._serve
        if serve:
            for handler in self._handlers.values():
                self._check_claim_ahead(handler)  # (the store may have been swapped since)
        await self.store.open()
        try:
            if serve:
                await self._declare()
        except BaseException:
            if self._owns_store:
                await self.store.aclose()
            raise
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._running = True
        self._stopped = anyio.Event()
        if self._stopping:  # stop() came while the store opened (a SIGTERM at start-up): honour it
            self._stopped.set()
        self._batcher = DeferBatcher(self.store)
        if not self.store.capabilities.in_process:
            self._batcher.open()  # now: defers in the body coalesce even before its task runs
            tg.start_soon(self._batcher.run)
        self._serving = anyio.Event()
        if serve:
            for handler in self._handlers.values():
                self._start(handler)
        if self._heartbeat_interval is not None:
            heartbeat = Heartbeat(
                store=self.store,
                worker_id=self._worker_id,
                interval=self._heartbeat_interval,
                concurrency=lambda: {name: h.concurrency for name, h in self._handlers.items()},
                counters=self._counters,
                in_flight=lambda name: r.in_flight if (r := self._runners.get(name)) else 0,
                total=self.stats,
                clock=self._heartbeat_clock,
                limits=lambda: {name: h.limits for name, h in self._handlers.items() if h.limits is not None},
            )
            if self._serving.is_set():  # serving handlers: registered before the body runs
                await tg.start(heartbeat.run, self._stopped)
            else:
                tg.start_soon(self._beat_once_serving, heartbeat, self._serving, self._stopped)
        return self

    @staticmethod
    async def _beat_once_serving(heartbeat: Heartbeat, serving: anyio.Event, stopped: anyio.Event) -> None:
        """Start ``heartbeat`` when the scheduler first serves something: a process that only
        defers (a web app's) delivers nothing, and ``rehydrate workers`` lists those that do."""
        await serving.wait()
        if not stopped.is_set():
            await heartbeat.run(stopped)

    def _now_serving(self) -> None:
        """The scheduler serves a handler or a channel: it is a worker (see the heartbeat)."""
        if self._serving is not None:
            self._serving.set()

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
            self._batcher.close()  # hands back what waits, if its task never got to run
            self._tg = None
            self._running = False
            self._stopping = False  # the next ``async with`` runs anew
            self._runners.clear()
            self._serving = None
            if self._owns_store:
                # Not in a shielded scope of ours: a store may close a task group it opened in
                # open() (coredis's pool), which must exit in the scope it was entered in. Stores
                # shield what must finish (SQLite's connection close) themselves.
                await self.store.aclose()

    def stop(self) -> None:
        """Stop claiming; running handlers get ``grace`` seconds, then are cancelled. Idempotent.

        Handler threads (plain ``def`` handlers) are waited for ``sync_grace`` seconds more. A stop
        that comes before the scheduler runs (a SIGTERM while the store opens) is kept: that run
        stops as soon as it has started.
        """
        self._stopping = True
        self._batcher.stop()
        if self._stopped is not None:
            self._stopped.set()
        if self._serving is not None:
            self._serving.set()  # (a heartbeat still waiting for it wakes, sees the stop, ends)
        for runner in self._runners.values():
            runner.stop()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve every handler until cancelled or until :meth:`stop`, then shut down gracefully.

        With ``await task_group.start(scheduler.run)``, returns once the store is open and the
        handlers are being served (and raises if the store could not be opened).
        """
        async with self:
            assert self._stopped is not None
            task_status.started()
            await self._stopped.wait()

    def limiter(
        self, name: str, *limits: Limit, lease: Seconds = 30.0, renew_every: Seconds | None = None
    ) -> Limiter:
        """A :class:`~rehydrate.Limiter` on this scheduler's store: ``async with
        scheduler.limiter("charge", Concurrency(10)).hold(key):`` from any code. Named as a
        handler, it shares that handler's limit (its slots and windows)."""
        return Limiter(self.store, name, *limits, lease=lease, renew_every=renew_every)

    def _check_claim_ahead(self, handler: HandlerSpec) -> None:
        # Declared by the store's class (Store.capabilities), not found out by inspecting it.
        if handler.limits is not None and not self.store.capabilities.limits:
            raise InvalidArgumentError(
                f"handler {handler.name!r} has limits but {type(self.store).__name__} does not "
                "implement them (its capabilities do not declare limits)"
            )
        if handler.claim_ahead and not self.store.capabilities.claim_ahead:
            raise InvalidArgumentError(
                f"handler {handler.name!r} has claim_ahead={handler.claim_ahead:g} but "
                f"{type(self.store).__name__}.claim takes no ahead= argument "
                "(its capabilities do not declare claim_ahead)"
            )

    def _start(self, handler: HandlerSpec) -> None:
        """Serve ``handler`` in the scheduler's task group (stopped at once if stopping)."""
        assert self._tg is not None
        counters = self._counters_of(handler.name)
        runner = self._runners[handler.name] = Runner(handler, self.store, counters, self._settings)
        if self._stopping:
            runner.stop()
        self._tg.start_soon(runner.run)
        self._now_serving()
