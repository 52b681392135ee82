"""The machinery that serves one handler: claims, runs, renews, acks, retries, dead-letters.

A :class:`Runner` per handler owns that handler's running state and the small workers that share
the job: the :class:`_LeaseKeeper` renews leases, the :class:`_Acker` sends acks in batches (the
:class:`_Rearmer` the next occurrences of schedules), the :class:`_Workers` run the handler up to
its concurrency. A schedule's claimed occurrence is planned and filed again by its
:class:`~rehydrate._occurrences.Occurrences`: the runner delivers it as any element. What a
handler *is* (its name, function, retry policy, lease, concurrency) is a frozen
:class:`HandlerSpec`, registered on the scheduler before anything runs; the scheduler itself only
registers handlers, starts runners and stops them.

The hot path (claim, dispatch, deliver, ack) is written inline with locals on purpose:
``benchmarks/bench_scheduler.py`` measures it against the event loop's own timers.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import functools
import itertools
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.abc
import attrs
import structlog
from anyio.streams.memory import MemoryObjectSendStream

from rehydrate._clock import wall
from rehydrate._core._limits import LimitSpec
from rehydrate._core._records import Claim, set_claimed_at
from rehydrate._core._retry import Retry
from rehydrate._core._triggers import Trigger
from rehydrate._deliveries import DEAD_SUFFIX, Counters, Delivery, delivery_from_claim, delivery_var
from rehydrate._limits import HandlerLimits
from rehydrate._occurrences import Occurrences, rearm_lists
from rehydrate._retries import Rescheduler
from rehydrate._schedules import KEY as SCHEDULE_KEY
from rehydrate._schedules import PAUSED_TTL, REMOVED, Envelope, Occurrence, is_envelope
from rehydrate._tracing import KEY as TRACE_KEY
from rehydrate._tracing import Tracing, unwrap
from rehydrate.abc import Store, Subscription
from rehydrate.errors import DuplicateIdError, LimitKeyError, RehydrateError
from rehydrate.serializers import Encoded

__all__ = [
    "DEAD_SUFFIX",
    "HandlerSpec",
    "Runner",
    "Settings",
    "feed_channel",
    "handler_label",
    "release",
    "release_many",
]

logger = structlog.get_logger("rehydrate")

#: Store errors in a loop are retried after this backoff, doubling up to the cap.
_ERROR_BACKOFF: Final = (0.05, 5.0)
#: A lease renewal later than this fraction of the lease means the event loop was blocked.
_STALL_FRACTION: Final = 0.25
#: How long one batch of acks may take before it is given up (the leases bring the elements back).
_ACK_TIMEOUT: Final = 10.0
#: A worker checkpoints after this many elements in a row without waiting for work: a loop turn
#: for the timers and other tasks, and another worker woken. This many no-op handlers run well
#: within a millisecond, so timers are not held up; a smaller stride makes the turns cost a
#: burst's handlers more than the timers gain (docs/benchmarks.md, "Measurements behind the code").
_STRIDE: Final = 128
#: While claims wait for a worker, acks (and rearms) wait this long at most for them to start
#: (and an eighth of the lease at most, so as never to endanger it): bookkeeping after the
#: handlers' starts, in batches. Longer than a burst of a thousand takes to start (see
#: docs/benchmarks.md, "Measurements behind the code"), so that its acks do not stop the loop
#: half-way through it.
_BOOKKEEPING_DELAY: Final = 0.05
#: A stopping runner hands its claims back this many to a store call, each call given 2 s.
_RELEASE_BATCH: Final = 1000
#: How many claims the claim loop of a limited handler asks for while the claims of a full key
#: are being parked in bulk (beyond its free workers): a few store steps per this many parked.
_PARK_BATCH: Final = 1000
#: Claims held (``claim_ahead``) and due within this long of the last release are the same burst:
#: bookkeeping keeps waiting for them.
_HELD_SOON: Final = 0.002


@attrs.frozen(kw_only=True)
class HandlerSpec:
    """A registered handler: what it is, fixed before the scheduler runs."""

    name: str
    func: Callable[[Any], Any]
    is_async: bool
    retry: Retry
    lease: float
    concurrency: int
    batch: int
    #: ``module.qualname`` of ``func``, for the logs.
    label: str
    #: A schedule declared with the handler (``handler(name, schedule=...)``), filed at start.
    schedule: Trigger | None = None
    #: Seconds before their due time that elements are claimed, then held until due (0: none).
    claim_ahead: float = 0.0
    #: The handler's limits (``handler(limits=...)``), as the store takes them; ``None``: none.
    limits: LimitSpec | None = None
    #: The partition key function (``handler(limit_key=...)``); ``None``: one key.
    limit_key: Callable[[Any], Any] | None = None


@attrs.define(eq=False, kw_only=True)
class Settings:
    """The scheduler's settings that its runners read when they need them (shutdown, failures).

    Shared, not copied: ``rehydrate worker --grace`` sets ``scheduler.grace`` on a scheduler a
    module made, and it applies to the runners of that scheduler.
    """

    grace: float
    sync_grace: float
    dead_letter_ttl: float
    rng: random.Random
    tracing: Tracing = attrs.field(factory=Tracing)


def handler_label(func: Callable[..., Any]) -> str:
    """A handler's name for the logs: ``module.qualname``."""
    name = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{getattr(func, '__module__', None) or type(func).__module__}.{name}"


class _GaveUp(Exception):
    """Shutdown stopped waiting for a handler thread that is still running."""


class _LeaseKeeper:
    """Renews the lease of every running element of one handler at half its length.

    All leases of a handler have the same length, so renewals come due in the order the claims
    were made: a FIFO, not a heap. Its entries are the claim loop's batches, not elements: one
    ``(renew at, batch number)`` per store call, and per batch a dict of the ids still running
    (id -> token), from which a finished element is removed at once. A tuple per element kept
    until half its lease (30 s by default, 300,000 of them at 10,000 deliveries a second) held
    memory for finished work and fed the garbage collector a long-lived object per delivery.

    It also measures its own lateness: it knows when it meant to renew a lease and when it got to
    run. A renewal later than a quarter of the lease means the event loop was blocked (a
    ``time.sleep`` in an ``async def``): the lease may have run out and the element been
    delivered again, so it says so, once per stall.
    """

    def __init__(self, store: Store, handler: HandlerSpec) -> None:
        self._store = store
        self._handler = handler
        self._queue: deque[tuple[float, int]] = deque()
        #: Per batch, its elements still running: id -> the token of their claim.
        self._batches: dict[int, dict[str, int]] = {}
        #: Each running element's batch, its dict in ``_batches`` (an id claimed again since
        #: belongs to its latest).
        self._home: dict[str, dict[str, int]] = {}
        self._numbers = itertools.count()
        self._wake = anyio.Event()
        #: Shielded: leases are kept while shutdown waits for handler threads, until :meth:`stop`.
        self._scope = anyio.CancelScope(shield=True)
        #: Renewals due up to this time were late because of a stall already reported.
        self._reported_until = -math.inf

    def stop(self) -> None:
        self._scope.cancel()

    def add_many(self, claims: list[Claim]) -> None:
        """Keep the leases of one claim call's elements (made at one time, so renewed together)."""
        if claims:
            self._file(claims[0].claimed_at + self._handler.lease / 2, {c.id: c.token for c in claims})

    def _file(self, renew_at: float, members: dict[str, int]) -> None:
        number = next(self._numbers)
        self._batches[number] = members
        home = self._home
        for id in members:
            home[id] = members
        self._queue.append((renew_at, number))
        if len(self._queue) == 1:
            self._wake.set()

    def discard(self, id: str, token: int) -> None:
        members = self._home.get(id)
        if members is not None and members.get(id) == token:
            del members[id]
            del self._home[id]

    async def run(self) -> None:
        with self._scope:
            await self._run()

    def _check_stall(self, meant: float, now: float) -> None:
        """Report a renewal meant for ``meant`` and run at ``now``, if late past the stall limit.

        Checked on waking (whether or not the element is still running: one claimed again after
        its lease ran out is the duplicate to explain) and on each renewal; once per stall.
        """
        handler = self._handler
        if now - meant > handler.lease * _STALL_FRACTION and meant > self._reported_until:
            self._reported_until = now
            logger.warning(
                "event loop blocked: a lease renewal came late",
                dehydrator=handler.name,
                handler=handler.label,
                stall=round(now - meant, 3),
                lease=handler.lease,
                hint="an element whose lease ran out may be delivered twice; "
                "do not block in an async def handler (use a plain def: it runs in a thread)",
            )

    async def _run(self) -> None:
        clock = self._store.clock
        queue, batches = self._queue, self._batches
        while True:
            while queue and not batches.get(queue[0][1]):
                batches.pop(queue.popleft()[1], None)  # every element of it has finished
            if not queue:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            renew_at, number = queue[0]
            now = clock()
            if renew_at > now:
                # Later entries renew later; finished ones are skipped on waking.
                await clock.sleep_until(renew_at)
                self._check_stall(renew_at, clock())
                continue
            queue.popleft()
            self._check_stall(renew_at, now)
            await self._renew(number)

    async def _renew(self, number: int) -> None:
        """Renew the leases of batch ``number``'s running elements, and file those renewed as a
        batch of their own. The batch stays in place meanwhile: an element that finishes while
        its neighbours are renewed is discarded from it as at any other time."""
        store, handler, clock = self._store, self._handler, self._store.clock
        members, home = self._batches[number], self._home
        half = handler.lease / 2
        failed: dict[str, int] = {}
        for id, token in list(members.items()):
            if members.get(id) != token:
                continue  # finished meanwhile
            if home.get(id) is not members:
                del members[id]  # claimed again since: its latest claim's batch keeps it
                continue
            try:
                until = await store.extend(handler.name, id, lease=handler.lease, token=token)
            except RehydrateError as exc:
                logger.warning(
                    "lease renewal failed, will retry",
                    dehydrator=handler.name,
                    id=id,
                    exc_info=exc,
                )
                failed[id] = token
                continue
            if until is None and members.pop(id, None) is not None:
                if home.get(id) is members:  # (not if claimed again while this call ran)
                    del home[id]
                logger.warning(
                    "lease lost: the element was acked, pulled or claimed again elsewhere",
                    dehydrator=handler.name,
                    id=id,
                )
        del self._batches[number]
        renewed = {id: token for id, token in members.items() if id not in failed}
        if failed:
            # Tried again soon; before the batches renewed at half a lease, so at the front.
            self._file(clock() + min(half, 1.0), failed)
            self._queue.rotate(1)
        if renewed:
            self._file(clock() + half, renewed)


class _Bookkeeper:
    """What the acker and the rearmer share: what waits is sent in batches, one store call for many.

    Starting handlers comes first: while claims wait for a worker (a burst), a batch waits until
    they have all started, or ``_BOOKKEEPING_DELAY`` (an eighth of the lease) at most, so that
    the bookkeeping of a burst goes in a few calls after it instead of between its handlers'
    starts. A subclass's ``add``
    (at every delivery, so written out there) wakes :meth:`run` through ``_wake`` and ``_woken``.
    """

    def __init__(self, store: Store, name: str, counters: Counters, workers: _Workers, lease: float) -> None:
        self._store = store
        self._name = name
        self._counters = counters
        self._workers = workers
        self._delay = min(_BOOKKEEPING_DELAY, lease / 8)
        self._wake = anyio.Event()
        #: ``_wake`` is set (or about to be): the first add since the last batch sets it, the
        #: others need not (an event's ``set`` is two calls deep, at every delivery).
        self._woken = False

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake, self._woken = anyio.Event(), False
            await self._workers.started(self._delay)
            await self.flush()

    async def flush(self) -> None:
        raise NotImplementedError


class _Acker(_Bookkeeper):
    """Sends the fenced acks of finished elements in batches (see :class:`_Bookkeeper`)."""

    def __init__(self, store: Store, name: str, counters: Counters, workers: _Workers, lease: float) -> None:
        super().__init__(store, name, counters, workers, lease)
        self._pending: list[tuple[str, int]] = []

    def add(self, id: str, token: int) -> None:
        self._pending.append((id, token))
        if not self._woken:
            self._woken = True
            self._wake.set()

    async def flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:1000], self._pending[1000:]
            results: list[bool] | None = None
            try:
                # Shielded: a batch cut off half-way would be neither counted nor known to be sent.
                # (One scope both shields and times out: a flush can follow every short claim.)
                with anyio.CancelScope(shield=True, deadline=anyio.current_time() + _ACK_TIMEOUT):
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


class _Rearmer(_Bookkeeper):
    """Files the next occurrences of schedules in batches: one :func:`~rehydrate._occurrences.rearm`
    (one ``replace_if``) for many.

    Like the acker, and for the same reason: an occurrence that ends is acked and its next one
    filed in one store call, and one call serves every occurrence that ended meanwhile. The ttl
    of each is measured when the batch is sent, from its nominal time on the store's clock.

    What waits is kept in parallel lists, not a tuple per occurrence: each new envelope already
    waits here as an object the garbage collector counts, and with a tuple beside it a burst's
    occurrences would reach the collector's threshold (700 objects) between two batches, a
    collection every few hundred occurrences (``benchmarks/bench_schedules.py``).
    """

    def __init__(self, store: Store, name: str, counters: Counters, workers: _Workers, lease: float) -> None:
        super().__init__(store, name, counters, workers, lease)
        #: Per occurrence that ended: its id, claim token, and the revision and envelope its run
        #: ends on, the envelope to file, the wall time it is due at, and whether it ends a run (not a skipped
        #: or paused occurrence).
        self._ids: list[str] = []
        self._tokens: list[int] = []
        self._revisions: list[int] = []
        self._held: list[Envelope] = []
        self._envelopes: list[Envelope | Encoded] = []
        self._due: list[float] = []
        self._finished: list[bool] = []
        #: Whether an envelope waiting is :data:`~rehydrate._schedules.REMOVED` (the one constant:
        #: a claimed schedule unscheduled during a run whose worker died), to be pulled, not filed.
        self._removing = False

    def add(
        self,
        id: str,
        token: int,
        revision: int,
        held: Envelope,
        envelope: Envelope | Encoded,
        due: float,
        finished: bool,
    ) -> None:
        self._ids.append(id)
        self._tokens.append(token)
        self._revisions.append(revision)
        self._held.append(held)
        if envelope is REMOVED:
            self._removing = True
        self._envelopes.append(envelope)
        self._due.append(due)
        self._finished.append(finished)
        if not self._woken:
            self._woken = True
            self._wake.set()

    def _take(
        self,
    ) -> tuple[
        list[str], list[int], list[int], list[Envelope], list[Envelope | Encoded], list[float], list[bool]
    ]:
        """The first 1,000 waiting (a store call's worth), out of the lists."""
        lists = (
            self._ids,
            self._tokens,
            self._revisions,
            self._held,
            self._envelopes,
            self._due,
            self._finished,
        )
        taken = tuple(pending[:1000] for pending in lists)
        for pending in lists:
            del pending[:1000]
        return taken  # type: ignore[return-value]

    async def flush(self) -> None:
        store, name, counters = self._store, self._name, self._counters
        while self._ids:
            ids, tokens, revisions, held, envelopes, due, finished = self._take()
            results: list[bool] | None = None
            try:
                # Shielded: the next occurrences are filed even while shutting down.
                with anyio.CancelScope(shield=True, deadline=anyio.current_time() + _ACK_TIMEOUT):
                    now = wall(store.clock)
                    # ``ttl_until`` written out, without a call (runs once per occurrence);
                    # PAUSED_TTL is the longest ttl.
                    ttls = [
                        0.0 if (ttl := at - now) < 1e-6 else ttl if ttl < PAUSED_TTL else PAUSED_TTL
                        for at in due
                    ]
                    # (REMOVED is among these only if one was added since the last batch that
                    # left nothing waiting: told so, the batch is searched for it.)
                    removing = self._removing
                    self._removing = removing and bool(self._ids)
                    results = await rearm_lists(
                        store, name, ids, tokens, revisions, held, envelopes, ttls, removing=removing
                    )
            except RehydrateError as exc:
                logger.error(
                    "could not file schedules' next occurrences; their leases will bring these back",
                    dehydrator=name,
                    count=len(ids),
                    exc_info=exc,
                )
                continue
            if results is None:
                logger.error("filing schedules' next occurrences timed out", dehydrator=name)
                continue
            if all(results):  # the common case, counted at once
                counters.acked += sum(finished)
                continue
            for id, ended, ok in zip(ids, finished, results, strict=True):
                if ok:
                    counters.acked += ended
                    continue
                counters.lost += 1
                logger.info(
                    "schedule changed while an occurrence ran (replaced, paused, removed or claimed "
                    "again after its lease ran out): this occurrence files no next one",
                    dehydrator=name,
                    id=id,
                )


class _Workers:
    """Long-lived tasks that run a handler, started as needed up to its concurrency.

    Starting a task per element costs more than a no-op handler, and so does a trip through the
    event loop per element: claims wait in a deque, and a worker that finishes one takes the next
    at once. A worker that takes a claim and sees more waiting wakes one more worker (an idle one,
    or a new one up to the concurrency) before it runs the handler: a handler that awaits I/O
    gets company one loop turn later, and one that never awaits drains the deque alone, without
    a task switch per element. A worker that has run ``_STRIDE`` elements without waiting for
    work checkpoints, so a burst cannot keep the loop's timers (leases, other handlers) waiting.
    """

    def __init__(self, concurrency: int, run: Callable[[Claim], Awaitable[None]]) -> None:
        self._concurrency = concurrency
        self._run = run
        self._queue: deque[Claim] = deque()
        #: Idle workers, each waiting on its own event: dispatch wakes the oldest.
        self._sleepers: deque[anyio.Event] = deque()
        self._count = 0
        #: A worker was woken (or started) and has not taken a claim yet: no need to wake another.
        self._waking = False
        self._closed = False
        self.group: anyio.abc.TaskGroup | None = None
        #: Set once no claim waits for a worker and the claim loop has none coming (its last
        #: claim was short); made anew when claims wait again.
        self._emptied = anyio.Event()
        self._emptied.set()
        #: The claim loop's last claim took all it asked for: more is due, and comes next.
        self._more_coming = False
        #: Makes the events: the running backend's, once known (see :func:`event_type`).
        self.new_event: Callable[[], anyio.Event] = anyio.Event

    def dispatch_many(self, claims: list[Claim]) -> None:
        """Queue claims (at least one) for the workers, waking one if none is on its way."""
        queue = self._queue
        if not queue and self._emptied.is_set():
            self._emptied = self.new_event()
        queue.extend(claims)
        if not self._waking:
            self._wake_one()

    def claimed(self, *, more: bool) -> None:
        """The claim loop's word after each claim: whether it took all it asked for (more is due)."""
        self._more_coming = more
        if not more and not self._queue:
            self._emptied.set()

    async def started(self, at_most: float) -> None:
        """Return once every due claim has been taken by a worker (none waits, and the claim loop
        has none coming), or after ``at_most`` seconds (real time: a bound on how long bookkeeping
        waits, not a deadline of the store's), whichever comes first."""
        if self._emptied.is_set():
            return
        with anyio.move_on_after(at_most):
            await self._emptied.wait()

    def _wake_one(self) -> None:
        if self._sleepers:
            self._waking = True
            self._sleepers.popleft().set()
        elif self._count < self._concurrency:
            assert self.group is not None
            self._waking = True
            self._count += 1
            self.group.start_soon(self._work)

    async def _work(self) -> None:
        queue, run, sleepers, new_event = self._queue, self._run, self._sleepers, self.new_event
        checkpoint = anyio.lowlevel.checkpoint
        streak = 0
        self._waking = False  # this is the worker that was started
        while True:
            if not queue:
                if self._closed:
                    return
                if delivery_var.get(None) is not None:
                    delivery_var.set(None)  # (the last element's delivery: let it go)
                awake = new_event()
                sleepers.append(awake)
                try:
                    await awake.wait()
                finally:
                    if not awake.is_set():  # cancelled while idle: no longer one to wake
                        sleepers.remove(awake)
                self._waking = False  # this is the worker that was woken
                streak = 0
                continue
            claim = queue.popleft()
            if not queue:
                if not self._more_coming:
                    self._emptied.set()
            elif not self._waking:
                self._wake_one()
            await run(claim)
            streak += 1
            if streak >= _STRIDE:
                streak = 0
                await checkpoint()

    def drain(self) -> list[Claim]:
        """Stop taking claims and return those no worker took (once the workers have ended)."""
        self._closed = True
        left = list(self._queue)
        self._queue.clear()
        self._emptied.set()
        return left


class _Held:
    """Claims taken ahead of their due time (``claim_ahead``), kept in due order until due."""

    def __init__(self) -> None:
        self._dues: list[float] = []
        self._claims: list[Claim] = []
        self._head = 0
        #: Set when claims are added (one may be due sooner than the releaser sleeps for).
        self.changed = anyio.Event()

    def __len__(self) -> int:
        return len(self._claims) - self._head

    def next_due(self) -> float:
        return self._dues[self._head]

    def add(self, claims: list[Claim], now: float) -> list[Claim]:
        """Hold ``claims`` (in due order, as a claim returns them); return those already due."""
        k = 0
        for claim in claims:
            if claim.due > now:
                break
            k += 1
        if k:
            for claim in claims[:k]:
                set_claimed_at(claim, now)
            due_now, claims = claims[:k], claims[k:]
        else:
            due_now = []
        if claims:
            dues, held = self._dues, self._claims
            if not held or claims[0].due >= dues[-1]:
                dues.extend([claim.due for claim in claims])
                held.extend(claims)
            else:  # due before some held claim (filed since): in its place
                for claim in claims:
                    at = bisect.bisect_right(dues, claim.due, self._head)
                    dues.insert(at, claim.due)
                    held.insert(at, claim)
            self.changed.set()
        return due_now

    def release(self, now: float) -> list[Claim]:
        """Take the claims due by ``now``, their ``claimed_at`` set to it (when they were handed
        to a worker: what their lateness counts to)."""
        head = self._head
        end = bisect.bisect_right(self._dues, now, head)
        out = self._claims[head:end]
        for claim in out:
            set_claimed_at(claim, now)
        if end == len(self._claims):
            self._dues.clear()
            self._claims.clear()
            self._head = 0
        elif end > 4096 and end > len(self._claims) >> 1:
            del self._dues[:end], self._claims[:end]
            self._head = 0
        else:
            self._head = end
        return out

    def remove(self, id: str) -> Claim | None:
        """Take the held claim on ``id`` out (a linear search: for a change made meanwhile)."""
        claims = self._claims
        for at in range(self._head, len(claims)):
            if claims[at].id == id:
                del self._dues[at]
                return claims.pop(at)
        return None

    def drain(self) -> list[Claim]:
        out = self._claims[self._head :]
        self._dues.clear()
        self._claims.clear()
        self._head = 0
        return out


class Runner:
    """Serves one handler while the scheduler runs: the claim loop and everything per element.

    Its state is the running state of the handler: how many elements are in flight (counted
    here only; :meth:`Scheduler.stats` adds the runners up), the events the claim loop and
    shutdown wait on, and the handler threads shutdown must wait for.
    """

    def __init__(self, handler: HandlerSpec, store: Store, counters: Counters, settings: Settings) -> None:
        self.handler = handler
        self._store = store
        self._counters = counters
        self._settings = settings
        self.in_flight = 0
        self._slot_freed: anyio.Event | None = None
        #: Makes events: the running backend's class, once running (see :func:`event_type`).
        self._new_event: Callable[[], anyio.Event] = anyio.Event
        self._idle: anyio.Event | None = None
        self._claim_scope = anyio.CancelScope()
        self._limiter = None if handler.is_async else anyio.CapacityLimiter(handler.concurrency)
        #: The shielded scopes of the handler threads running now, and when shutdown gives up on them.
        self._threads: set[anyio.CancelScope] = set()
        self._give_up_at: float | None = None
        self._keeper = _LeaseKeeper(store, handler)
        self._workers = _Workers(handler.concurrency, self._deliver)
        self._acker = _Acker(store, handler.name, counters, self._workers, handler.lease)
        self._rearmer = _Rearmer(store, handler.name, counters, self._workers, handler.lease)
        self._rescheduler = Rescheduler(store, handler.name)
        #: The limits asked before each start (``handler(limits=...)``); ``None`` without.
        self._limits = (
            None
            if handler.limits is None
            else HandlerLimits(store, handler.name, handler.limits, handler.limit_key, counters)
        )
        #: What a schedule's claimed occurrence stands for, and what is filed when it ends.
        self._occurrences = Occurrences(store, handler.name, file=self._rearmer.add, ack=self._acker.add)
        #: Claims taken ahead of their due time (``claim_ahead``), until due; and, at shutdown,
        #: those never handed over, for ``run`` to give back.
        self._held = _Held()
        self._unreleased: list[Claim] = []

    def stop(self) -> None:
        """Stop claiming; :meth:`run` then gives running elements their grace and returns."""
        self._claim_scope.cancel()

    def run_held_now(self, id: str) -> bool:
        """Hand the one-shot element held on ``id`` (``claim_ahead``) to a worker now, before its
        time (``Scheduler.run_now``); ``False`` if none is held, or it is a schedule's occurrence
        (which keeps its time: ``run_now`` runs an extra one, not this one early)."""
        if not self._held:
            return False
        claim = self._held.remove(id)
        if claim is None:
            return False
        if is_envelope(claim.element):
            self._held.add([claim], -math.inf)
            return False
        set_claimed_at(claim, self._store.clock())
        self._workers.dispatch_many([claim])
        return True

    def forget_held(self, id: str) -> Claim | None:
        """Drop the claim held on ``id`` until its due time (``claim_ahead``), if any: it will not
        run. The caller decides whether to hand it back to the store (see Scheduler._unhold)."""
        if not self._held:
            return None
        claim = self._held.remove(id)
        if claim is not None:
            self._keeper.discard(claim.id, claim.token)
            self._done()
        return claim

    async def run(self) -> None:
        store, keeper, acker, workers = self._store, self._keeper, self._acker, self._workers
        try:
            async with anyio.create_task_group() as work:
                work.start_soon(keeper.run)
                work.start_soon(acker.run)
                work.start_soon(self._rearmer.run)
                work.start_soon(self._rescheduler.run)
                if self._limits is not None:
                    work.start_soon(self._limits.renewer.run)
                    work.start_soon(self._limits.rewaker.run)
                try:
                    async with anyio.create_task_group() as handlers:
                        workers.group = handlers
                        workers.new_event = self._new_event = event_type()
                        try:
                            with self._claim_scope:
                                async with anyio.create_task_group() as claiming:
                                    if handler_ahead := self.handler.claim_ahead:
                                        claiming.start_soon(self._release_held, handler_ahead)
                                    await self._subscribed()
                            # Stopping: what is held was never started; run's end gives it back.
                            for claim in self._held.drain():
                                self._done()
                                self._unreleased.append(claim)
                            # Stopping: no more claims. Give running handlers their grace period.
                            with anyio.move_on_after(self._settings.grace):
                                while self.in_flight:
                                    self._idle = anyio.Event()
                                    await self._idle.wait()
                        finally:
                            # Async handlers are cancelled now; threads cannot be, so they get
                            # ``sync_grace`` more (their leases kept) before shutdown gives up.
                            self._give_up_at = anyio.current_time() + self._settings.sync_grace
                            for scope in self._threads:
                                scope.deadline = self._give_up_at
                            handlers.cancel_scope.cancel()
                finally:
                    keeper.stop()
                    work.cancel_scope.cancel()
        finally:
            # Every task of the handler has ended: send the acks of the handlers that finished,
            # and hand back anything claimed that no worker started.
            with anyio.CancelScope(shield=True):
                await acker.flush()
                await self._rearmer.flush()
                back: list[tuple[str, int, float]] = []
                for claim in workers.drain():
                    self._done()
                    back.append((claim.id, claim.token, 0.0))
                now = store.clock()
                for claim in self._unreleased:
                    # Due again when it was due (not at once: that would be early).
                    back.append((claim.id, claim.token, max(0.0, claim.due - now)))
                await release_many(store, self.handler.name, back)

    def _done(self) -> None:
        """One element less in flight: wake the claim loop (a free slot) and shutdown (idle)."""
        self.in_flight -= 1
        if (freed := self._slot_freed) is not None:
            # Once: the claim loop makes a new one when it next waits (a burst's thousand
            # handlers would otherwise each set the same event again).
            self._slot_freed = None
            freed.set()
        if self._idle is not None and not self.in_flight:
            self._idle.set()

    async def _subscribed(self) -> None:
        """Claim while subscribed to the handler's dehydrator; subscribe again if the store fails.

        A store that cannot subscribe now (down at start-up) or whose subscription breaks (a lost
        connection) is retried with backoff, as a failed claim is: the handler carries on once the
        store is back, and the scheduler never stops for it.
        """
        name = self.handler.name
        backoff = _ERROR_BACKOFF[0]
        while True:
            try:
                async with self._store.subscribe(name) as subscription:
                    backoff = _ERROR_BACKOFF[0]
                    await self._claim_loop(subscription)
                return
            except RehydrateError as exc:
                backoff = await _store_trouble(name, exc, backoff)

    async def _claim_loop(self, subscription: Subscription) -> None:
        store, handler, keeper, workers = self._store, self.handler, self._keeper, self._workers
        name, lease, concurrency, batch = handler.name, handler.lease, handler.concurrency, handler.batch
        backoff = _ERROR_BACKOFF[0]
        ahead, clock, held, limits = handler.claim_ahead, store.clock, self._held, self._limits
        parking = False
        while True:
            free = concurrency - self.in_flight
            if free <= 0:
                freed = self._slot_freed = self._new_event()
                await freed.wait()
                continue
            # While claims of a full key are parked in bulk, claim many at once: parking costs a
            # store step per key and batch, and the other keys' elements behind them come sooner
            # (the few claims of other keys beyond the free workers wait for one in the queue).
            want = max(min(free, batch), _PARK_BATCH) if parking else min(free, batch)
            parking = False
            try:
                if ahead:
                    claims = await store.claim(name, lease=lease, limit=want, ahead=ahead)
                else:
                    claims = await store.claim(name, lease=lease, limit=want)
            except RehydrateError as exc:
                backoff = await _store_trouble(name, exc, backoff)
                continue
            backoff = _ERROR_BACKOFF[0]
            keeper.add_many(claims)
            self.in_flight += len(claims)
            if claims:
                # With claim_ahead, those not due yet wait in ``held`` for their time.
                due_now = held.add(claims, clock()) if ahead else claims
                if due_now and limits is not None and limits.has_beliefs():
                    parking, due_now = await self._park_full(due_now)
                if due_now:
                    workers.dispatch_many(due_now)
            more = len(claims) >= want
            workers.claimed(more=more)
            if more:
                await anyio.lowlevel.checkpoint()
            else:
                await _sleep_until_due(store, name, subscription, ahead, bool(claims))

    async def _release_held(self, ahead: float) -> None:
        """Hand the claims taken ahead to the workers when they fall due (``claim_ahead``).

        The claim loop took them up to ``ahead`` seconds early, so that a burst's store round
        trips are over before it is due: at its time, starting its handlers is all that is left.
        """
        clock, held, workers, new_event = self._store.clock, self._held, self._workers, self._new_event
        while True:
            if not held:
                changed = held.changed = new_event()
                await changed.wait()
                continue
            due = held.next_due()
            if due > clock():
                changed = held.changed = new_event()  # (a claim due sooner may come meanwhile)
                await clock.wait(changed, due)
                continue
            now = clock()
            workers.dispatch_many(held.release(now))
            workers.claimed(more=bool(held) and held.next_due() <= now + _HELD_SOON)
            await anyio.lowlevel.checkpoint()

    async def _deliver(self, claim: Claim) -> None:
        handler, counters = self.handler, self._counters
        occurrence: Occurrence | None = None
        # (the key tested first, in place: one-shot work, dicts included, makes no call here)
        if type(element := claim.element) is dict and SCHEDULE_KEY in element and is_envelope(element):
            try:
                occurrence = self._occurrences.begin(claim)
                if occurrence is not None and occurrence.moved:
                    await self._occurrences.write_back(claim, occurrence)
            except BaseException:
                self._keeper.discard(claim.id, claim.token)
                self._done()
                raise
            if occurrence is None:  # not to run: what comes after it is filed already
                self._keeper.discard(claim.id, claim.token)
                self._done()
                return
        slot: tuple[str, str] | None = None
        if self._limits is not None and occurrence is None:
            slot = await self._admit(claim)
            if slot is None:  # parked (not an attempt), or failed for its key
                return
        counters.delivered += 1
        late = claim.claimed_at - claim.due
        counters.record_lateness(late if late > 0.0 else 0.0)  # (Claim.lateness, written out)
        tracing = self._settings.tracing
        if occurrence is None:
            element = claim.element
            if (type(element) is not dict or TRACE_KEY not in element) and tracing.idle():
                span = None  # (what tracing.delivery says then, without building its answer)
            else:
                element, span = tracing.delivery(handler.name, claim, element)
            delivery = delivery_from_claim(handler.name, claim, self._store, element=element)
        else:
            element = occurrence.element
            if (type(element) is not dict or TRACE_KEY not in element) and tracing.idle():
                span = None  # (as for one-shot work above)
            else:
                element, span = tracing.delivery(
                    handler.name, claim, element, scheduled_for=occurrence.nominal
                )
            delivery = delivery_from_claim(
                handler.name, claim, self._store, element=element, scheduled_for=occurrence.scheduled_for
            )
        # Set, never reset: a reset costs as much again, and the next delivery of this worker
        # sets it anew (an idle worker clears it, so it keeps no element alive).
        delivery_var.set(delivery)
        #: How the delivery ended, for its span (when traced).
        outcome, error = "done", None
        try:
            if handler.is_async:
                await handler.func(element)
            else:
                await self._in_thread(claim, element)
        except _GaveUp:
            outcome = "abandoned"
            # Neither acked nor handed back: its lease (no longer renewed) brings it back.
            logger.warning(
                "gave up waiting for a handler thread",
                dehydrator=handler.name,
                id=claim.id,
                handler=handler.label,
                grace=self._settings.grace,
                sync_grace=self._settings.sync_grace,
                lease=handler.lease,
            )
        except anyio.get_cancelled_exc_class():
            outcome = "released"
            # Shutting down: hand the element back now rather than when its lease runs out.
            with anyio.CancelScope(shield=True):
                await release(self._store, handler.name, claim.id, claim.token)
            raise
        except Exception as exc:
            outcome, error = "failed", exc
            # Shielded: a thread that failed during shutdown is rescheduled, not handed back.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_ACK_TIMEOUT):
                outcome = await self._failed(claim, exc, occurrence)
        else:
            if occurrence is None:
                self._acker.add(claim.id, claim.token)
            else:
                self._occurrences.finish(claim, occurrence)
        finally:
            if span is not None:
                span.end(outcome, error)
            if slot is not None:
                assert self._limits is not None
                await self._limits.release(*slot)
            self._keeper.discard(claim.id, claim.token)
            self._done()

    async def _park_full(self, claims: list[Claim]) -> tuple[bool, list[Claim]]:
        """Park the claims of keys believed full in bulk (:meth:`HandlerLimits.park_many`),
        without a worker each; whether most of the batch was parked, and the claims left to run
        (schedule occurrences, other keys)."""
        limits = self._limits
        assert limits is not None
        full: list[tuple[Claim, str]] = []
        rest: list[Claim] = []
        for claim in claims:
            element = claim.element
            if type(element) is dict and SCHEDULE_KEY in element and is_envelope(element):
                rest.append(claim)
                continue
            try:
                key = limits.key_of(unwrap(element)[0])
            except LimitKeyError:
                rest.append(claim)  # failed by its worker, naming the error
                continue
            if limits.believed_full(key):
                full.append((claim, key))
            else:
                rest.append(claim)
        if not full:
            return False, rest
        keeper = self._keeper
        try:
            await limits.park_many(full)  # (handed back first, shielded: none is left held)
        finally:
            for claim, _ in full:
                keeper.discard(claim.id, claim.token)
                self._done()
        return 2 * len(full) >= len(claims), rest

    async def _admit(self, claim: Claim) -> tuple[str, str] | None:
        """Take a slot of the handler's limits for ``claim`` (its holder and key), or park it
        or fail it (``None``: the claim is over, and counted as ended here)."""
        limits = self._limits
        assert limits is not None
        holder = None
        try:
            try:
                key = limits.key_of(unwrap(claim.element)[0])
            except LimitKeyError as exc:
                # The element's own fault: it follows the retry policy, naming the error.
                with anyio.CancelScope(shield=True), anyio.move_on_after(_ACK_TIMEOUT):
                    await self._failed(claim, exc)
                return None
            holder = await limits.admit(claim, key)
            return None if holder is None else (holder, key)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                if holder is not None:
                    await limits.release(holder, key)
                await release(self._store, self.handler.name, claim.id, claim.token)
            holder = None
            raise
        finally:
            if holder is None:
                self._keeper.discard(claim.id, claim.token)
                self._done()

    async def _in_thread(self, claim: Claim, element: Any) -> None:
        """Run a plain ``def`` handler in a worker thread, and wait for it even while shutting down.

        A thread cannot be cancelled: handing its element back while it runs would let the element
        run twice. So its wait is shielded until shutdown gives up on it (``sync_grace`` after the
        grace period), and then :class:`_GaveUp` leaves the element to its lease.
        """
        context = contextvars.copy_context()
        with anyio.CancelScope(shield=True) as scope:
            if self._give_up_at is not None:
                scope.deadline = self._give_up_at
            self._threads.add(scope)
            try:
                await anyio.to_thread.run_sync(
                    functools.partial(context.run, self.handler.func, element),
                    limiter=self._limiter,
                    abandon_on_cancel=True,
                )
            finally:
                self._threads.discard(scope)
        if scope.cancelled_caught:
            raise _GaveUp

    async def _failed(self, claim: Claim, exc: Exception, occurrence: Occurrence | None = None) -> str:
        """Retry or dead-letter a failed element; what became of it (``retried``,
        ``dead_lettered``, ``lost``, or ``failed`` if the store could not be told)."""
        handler, counters = self.handler, self._counters
        # The traceback goes with every failure (``exc_info``): structlog renders it on a console
        # and as a field in JSON. Event names are constant; what varies is in the fields.
        log = logger.bind(dehydrator=handler.name, id=claim.id, attempt=claim.attempt, handler=handler.label)
        try:
            retryable = handler.retry.retries(exc)
            if claim.attempt >= handler.retry.attempts or not retryable:
                await self._dead_letter(claim, exc, occurrence)
                counters.dead_lettered += 1
                why = "last attempt" if retryable else "error not retried"
                log.warning("handler failed: dead-lettered", reason=why, exc_info=exc)
                return "dead_lettered"
            if isinstance(exc, Retry) and exc.delay is not None:
                delay = exc.delay_after(claim.attempt)
            else:
                delay = handler.retry.delay_after(claim.attempt, self._settings.rng)
            if await self._rescheduler.reschedule(claim.id, claim.token, delay):
                counters.retried += 1
                log.info("handler failed, will retry", retry_in=round(delay, 3), exc_info=exc)
                return "retried"
            counters.lost += 1
            log.warning("handler failed after its lease was lost", exc_info=exc)
            return "lost"
        except RehydrateError as store_exc:
            log.error(
                "could not reschedule a failed element; its lease will bring it back",
                store_error=repr(store_exc),
                exc_info=exc,
            )
            return "failed"

    async def _dead_letter(self, claim: Claim, exc: BaseException, occurrence: Occurrence | None) -> None:
        name, ttl = self.handler.name, self._settings.dead_letter_ttl
        element, carrier = unwrap(claim.element) if occurrence is None else (occurrence.element, None)
        record = {
            "element": element,
            "error": repr(exc)[:2000],
            "attempts": claim.attempt,
            "failed_at": time.time(),
        }
        id = claim.id
        if occurrence is not None:
            id, record["scheduled_for"] = self._occurrences.dead_letter(claim, occurrence)
        if carrier is not None:
            record["trace"] = carrier  # so that a requeue carries it on
        # A DuplicateIdError means an earlier try got this far, then lost its ack.
        with contextlib.suppress(DuplicateIdError):
            await self._store.push(name + DEAD_SUFFIX, record, ttl=ttl, id=id)
        if occurrence is None:
            await self._store.ack(name, [(claim.id, claim.token)])
        else:
            self._occurrences.finish(claim, occurrence)


async def feed_channel(
    store: Store,
    counters: Counters,
    name: str,
    lease: float,
    prefetch: int,
    batch: int,
    send: MemoryObjectSendStream[Delivery],
) -> None:
    """Claim due elements of ``name`` only as fast as a channel's consumer takes them."""
    async with send, store.subscribe(name) as subscription:
        backoff = _ERROR_BACKOFF[0]
        while True:
            room = max(1, min(batch, prefetch + 1 - send.statistics().current_buffer_used))
            try:
                claims = await store.claim(name, lease=lease, limit=room)
            except RehydrateError as exc:
                backoff = await _store_trouble(name, exc, backoff)
                continue
            backoff = _ERROR_BACKOFF[0]
            for i, claim in enumerate(claims):
                try:
                    # A channel's consumer runs in its own task and context: no span, only the element.
                    element = unwrap(claim.element)[0]
                    await send.send(delivery_from_claim(name, claim, store, counters, element=element))
                except BaseException as exc:
                    # The consumer left: hand back this claim and the rest of the batch.
                    with anyio.CancelScope(shield=True):
                        await release_many(store, name, [(left.id, left.token, 0.0) for left in claims[i:]])
                    if isinstance(exc, (anyio.BrokenResourceError, anyio.ClosedResourceError)):
                        return
                    raise
                counters.delivered += 1
                counters.record_lateness(claim.lateness)
            if len(claims) < room:
                await _sleep_until_due(store, name, subscription, 0.0, False)


async def release(store: Store, name: str, id: str, token: int, ttl: float = 0.0) -> None:
    """Hand a claimed element back unrun, due in ``ttl`` (at once by default), its attempt
    undone (:meth:`Store.hand_back`); if that fails its lease brings it back (and counts it)."""
    await release_many(store, name, [(id, token, ttl)])


async def release_many(store: Store, name: str, items: list[tuple[str, int, float]]) -> None:
    """:func:`release` for each ``(id, token, ttl)``, a store batch at a time (what a stopping
    runner holds may be a burst claimed ahead)."""
    for start in range(0, len(items), _RELEASE_BATCH):
        with anyio.move_on_after(2.0), contextlib.suppress(RehydrateError):
            await store.hand_back(name, items[start : start + _RELEASE_BATCH])


def event_type() -> Callable[[], anyio.Event]:
    """The running backend's event class. ``anyio.Event()`` looks the backend up at each call
    (sniffio, then the backend's factory), which costs more than calling its class directly, on
    trio most (docs/benchmarks.md, "Measurements behind the code"). A worker makes one each time
    it goes idle, and the hand-over of a burst spread over a millisecond makes several per
    element."""
    return type(anyio.Event())


async def _sleep_until_due(
    store: Store, name: str, subscription: Subscription, ahead: float, took: bool
) -> None:
    """After a claim that took fewer than it asked for: sleep until the next element is due (or
    ``ahead`` seconds before, to claim it ahead), or until the subscription says something became
    due sooner.

    Ahead of time, a next element due within ``ahead`` is either one that came within it since
    the claim (the claim's own round trip is enough, with due times close together): claimed at
    once, if the claim took anything; or, after a claim that took nothing, a running lease (a
    claim ahead of time leaves those), waited for in full rather than asked for in a loop.
    """
    clock = store.clock
    asked = clock()
    try:
        ttn = await store.ttn_after_claim(name)
    except RehydrateError as exc:
        await _store_trouble(name, exc, _ERROR_BACKOFF[0])
        return
    if ttn is not None:
        # Counted from the call, not from its answer: a TTN read in a thread or across the
        # network may be older than the moment it comes back, and the wait below counts from
        # now (a slow call would otherwise oversleep by its own length; waking early only
        # costs one more turn).
        ttn = max(0.0, ttn - (clock() - asked))
    if ttn is not None and ahead:
        if ttn > ahead:
            ttn -= ahead
        elif took:
            ttn = 0.0
    if ttn is None or ttn > 0:
        await subscription.wait(ttn)


async def _store_trouble(name: str, exc: BaseException, backoff: float) -> float:
    logger.error("store call failed, retrying", dehydrator=name, retry_in=backoff, exc_info=exc)
    await anyio.sleep(backoff)
    return min(backoff * 2, _ERROR_BACKOFF[1])
