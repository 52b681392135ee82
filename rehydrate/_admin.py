"""Operating a store: what ``rehydrate`` commands, the dashboard and users' own tools do to it.

:class:`Admin` needs no handlers and no running scheduler: only a store (opened by its owner). It
is the one place where pausing, resuming, removing and running schedules now, and listing and
requeueing dead letters, are written; :class:`~rehydrate.Scheduler`'s methods of the same names
call it (after dropping what their own process holds ahead of time, see ``claim_ahead``).

Every operation that can fail for a reason an operator should hear about (no such element, a
worker holds it, a paused schedule) answers with what it did, as a string a tool can branch on,
rather than raising: those are states of the data, not mistakes in the call.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal, TypeAlias

import attrs

from rehydrate._clock import wall
from rehydrate._core import _validate
from rehydrate._core._records import ElementInfo, Summary, WorkerRecord, is_held
from rehydrate._core._triggers import US, Misfire, Trigger, trigger_from_dict
from rehydrate._core._validate import Seconds
from rehydrate._deliveries import DEAD_SUFFIX, DeadLetter
from rehydrate._schedules import (
    PAUSED_TTL,
    REMOVED,
    ScheduleInfo,
    anchor_of,
    check_trigger,
    extra_time,
    first_run,
    is_envelope,
    is_removed,
    is_schedule,
    new_schedule,
    nominal_of,
    offset_of,
    replanned,
    replay_envelope,
    rewritten,
    schedule_info,
    trigger_of,
    ttl_until,
    validate_misfire,
    validate_spread,
    with_extra,
    with_next,
    with_paused,
)
from rehydrate.abc import Store
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
)

__all__ = [
    "Admin",
    "DehydratorInfo",
    "LimitStatus",
    "Pause",
    "Removal",
    "Resume",
    "RunNow",
    "change_schedule",
    "limit_row",
    "limit_totals",
    "remove_schedule",
    "upsert_schedule",
]

#: What :meth:`Admin.run_now` did: made a schedule's extra run or one-shot work due, or not
#: (no such element, a worker holds it, a paused schedule, or claimed or removed meanwhile).
RunNow: TypeAlias = Literal["schedule", "one-shot", "unknown", "held", "paused", "changed"]
#: What :meth:`Admin.pause` did: paused it, found it paused already, found nothing, or found
#: one-shot work (which has no schedule to pause).
Pause: TypeAlias = Literal["paused", "unchanged", "unknown", "one-shot"]
#: What :meth:`Admin.resume` did: resumed it, found it not paused, found nothing, or one-shot work.
Resume: TypeAlias = Literal["resumed", "unchanged", "unknown", "one-shot"]
#: What :meth:`Admin.remove` did: cancelled one-shot work, unscheduled a schedule, found nothing,
#: or found a schedule removed already whose last run is still ending.
Removal: TypeAlias = Literal["one-shot", "schedule", "unknown", "ending"]

# Elements are read this many to a look_many when listing.
_LOOK_BATCH = 1000


@attrs.frozen(kw_only=True)
class DehydratorInfo:
    """One dehydrator at a glance: :class:`~rehydrate.Summary`'s counts and its dead letters."""

    name: str
    #: Every element held: waiting, due and claimed (schedules included).
    size: int
    #: Elements due now, claims whose lease has run out included.
    due: int
    #: Elements under a claim that has not been acked or rescheduled.
    claimed: int
    #: Dead letters kept for it (in ``<name>.dead``).
    dead: int
    #: Seconds until the next element is due (``0.0`` if one is); ``None`` when empty.
    ttn: float | None


@attrs.frozen(kw_only=True)
class LimitStatus:
    """One limit key now (:meth:`Admin.limits`): who holds its slots, what waits, how full it is.

    The store keeps a key's state, not its limits (each caller brings those to every step): the
    capacity comes from the heartbeats of the workers alive that serve a handler of that name
    with ``limits=``. A limit used only through ``Limiter.hold``, or with no worker alive, has
    ``concurrency=None``, ``rates=()`` and ``saturation=None``.
    """

    #: The limit's name (the handler's dehydrator, or a ``Limiter``'s name).
    limit: str
    #: The partition key (``"*"`` without ``limit_key``).
    key: str
    #: Slots held now (leases not run out).
    holders: int
    #: The holders' ids (a handler's: ``name/element id/claim token``), sorted.
    holder_ids: tuple[str, ...]
    #: Starts still inside the longest rate window.
    starts: int
    #: Elements parked (and ``hold`` callers) waiting for room, in the key's FIFO.
    waiting: int
    #: The concurrency the workers declare, if any (``None``: none known).
    concurrency: int | None
    #: The rates ``(n, per seconds)`` the workers declare.
    rates: tuple[tuple[int, float], ...]
    #: How full the key is, ``0.0`` to ``1.0`` (``1.0``: a newcomer would wait): the higher of
    #: holders over the concurrency and starts over the ``n`` of the longest window's rate (the
    #: starts the store counts are those of that window). ``None``: no limit known.
    saturation: float | None


def limit_row(status: LimitStatus) -> dict[str, Any]:
    """One limit key as JSON: what ``rehydrate limits`` prints and the dashboard serves."""
    return {
        "limit": status.limit,
        "key": status.key,
        "holders": status.holders,
        "waiting": status.waiting,
        "starts": status.starts,
        "concurrency": status.concurrency,
        "rates": [[n, per] for n, per in status.rates],
        "saturation": status.saturation,
        "holder_ids": list(status.holder_ids),
    }


def limit_totals(statuses: Iterable[LimitStatus]) -> dict[str, dict[str, Any]]:
    """Each limit's keys added up, by limit name: ``keys`` with state, ``holders``, ``waiting``,
    ``concurrency`` and ``rates`` (per key), and ``saturation``, that of its fullest key
    (``rehydrate stats``, ``/metrics``: one row per limit however many keys it has)."""
    out: dict[str, dict[str, Any]] = {}
    for status in statuses:
        entry = out.setdefault(
            status.limit,
            {
                "keys": 0,
                "holders": 0,
                "waiting": 0,
                "concurrency": status.concurrency,
                "rates": [[n, per] for n, per in status.rates],
                "saturation": None,
            },
        )
        entry["keys"] += 1
        entry["holders"] += status.holders
        entry["waiting"] += status.waiting
        if status.saturation is not None:
            entry["saturation"] = max(entry["saturation"] or 0.0, status.saturation)
    return out


def _saturation(
    holders: int, starts: int, concurrency: int | None, rates: tuple[tuple[int, float], ...]
) -> float | None:
    parts: list[float] = []
    if concurrency is not None:
        parts.append(holders / concurrency)
    if rates:
        n, _ = max(rates, key=lambda rate: (rate[1], -rate[0]))
        parts.append(starts / n)
    return min(1.0, max(parts)) if parts else None


def _declared_limits(
    workers: Iterable[WorkerRecord],
) -> dict[str, tuple[int | None, tuple[tuple[int, float], ...]]]:
    """Each limited handler's limits, as the live workers' heartbeats declare them (the most
    recently seen worker first: during a roll-out, the newest declaration)."""
    found: dict[str, tuple[int | None, tuple[tuple[int, float], ...]]] = {}
    for worker in sorted(workers, key=lambda w: -w.last_seen):
        handlers = worker.data.get("handlers") if worker.alive else None
        if not isinstance(handlers, dict):
            continue
        for name, entry in handlers.items():
            spec = entry.get("limits") if isinstance(entry, dict) else None
            if name in found or not isinstance(spec, dict):
                continue
            concurrency = spec.get("concurrency")
            try:
                rates = tuple((int(n), float(per)) for n, per in spec.get("rates") or ())
            except (TypeError, ValueError):
                continue  # a record this version cannot read: no capacity rather than a wrong one
            found[name] = (concurrency if isinstance(concurrency, int) and concurrency > 0 else None, rates)
    return found


def _positive_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidArgumentError(f"limit must be an int of at least 1, got {limit!r}")
    return limit


def _offset(offset: object) -> int:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidArgumentError(f"offset must be an int of at least 0, got {offset!r}")
    return offset


def _nominal_of_record(record: dict[str, Any]) -> float | None:
    """The nominal time (Unix seconds) of the occurrence a dead letter holds, ``None`` for
    one-shot work (or a record whose ``scheduled_for`` cannot be read: it goes back as it is)."""
    text = record.get("scheduled_for")
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return None if when.tzinfo is None else when.timestamp()


async def change_schedule(
    store: Store, name: str, id: str, info: ElementInfo, envelope: Any, ttl: float, held: Any
) -> bool:
    """Write a change of the schedule ``id``, read at ``info`` (its revision), unless it changed
    since (``False``: read it again, and compare with that).

    Nobody holds it: ``envelope`` is filed in its place, due in ``ttl`` (``Store.replace_if``).
    An occurrence of it runs (claimed, its lease running): ``held`` goes into the element the
    worker holds, its claim and lease kept (``Store.update_if``), and the run's end files the
    occurrence after it as changed (``rehydrate._occurrences.rearm``); filing the schedule anew
    instead would file its next occurrence at once, to run beside the one still running. Both
    writes compare the revision and write in one atomic step: a claim between the read and the
    write changes the revision, so the change is never filed beside an occurrence claimed
    meanwhile.
    """
    if is_held(info, store.clock()):
        return await store.update_if(name, id, info.revision, held) is not None
    return (await store.replace_if(name, [(id, info.revision, envelope, ttl)]))[0] is not None


async def remove_schedule(store: Store, name: str, id: str, info: ElementInfo) -> bool:
    """Remove the schedule under ``id``, read at ``info``, unless it changed since (``False``:
    read it again). Nobody holds it: pulled (``Store.pull_if``). An occurrence runs: the
    schedule stays under its claim, as ``REMOVED``, and goes when the run ends, so that nothing
    filed under this id meanwhile (a ``schedule()`` again) comes due beside the run."""
    if is_held(info, store.clock()):
        return await store.update_if(name, id, info.revision, dict(REMOVED)) is not None
    return await store.pull_if(name, id, info.revision)


async def upsert_schedule(
    store: Store,
    name: str,
    trigger: Trigger,
    id: str,
    element: Any,
    misfire: Misfire,
    grace: float | None,
    spread: float | None = None,
    declared: bool = False,
) -> None:
    """File (or change) the schedule ``id`` of ``name`` as :meth:`Admin.schedule` says, on
    checked arguments (``declared``: by a handler's ``schedule=``, see ``Scheduler``)."""
    while True:
        found = await store.read(name, id)
        now = wall(store.clock)
        if found is None:
            envelope, due, _ = new_schedule(
                id, trigger, element, now, misfire=misfire, grace=grace, spread=spread, declared=declared
            )
            try:
                await store.push(name, envelope, ttl=ttl_until(due, now), id=id)
            except DuplicateIdError:
                continue  # filed meanwhile (another process declaring it): compare with that
            return
        existing, info = found
        # Whether an occurrence runs now: a change goes into the element its worker holds
        # (``change_schedule``), and the run's end files it.
        held = is_held(info, store.clock())
        if is_removed(existing):
            # Unscheduled while an occurrence ran: a new schedule, which waits for that run
            # (written into the element it holds, as any change during a run; filed at once
            # when the run ends, for the runner that claims it to file for its time). Held,
            # its first occurrence after now: never the running one's nominal time (due by
            # now), whose key that is, and whose end would take it for its own.
            # (A runner that claims the marker meanwhile runs nothing: replacing it is safe.)
            envelope, due, _ = new_schedule(
                id,
                trigger,
                element,
                now,
                after_us=math.floor(now * US) if held else None,
                misfire=misfire,
                grace=grace,
                spread=spread,
                declared=declared,
            )
            if await change_schedule(store, name, id, info, envelope, ttl_until(due, now), envelope):
                return
            continue  # changed meanwhile: compare with that
        if not is_envelope(existing):
            error = DuplicateIdError(id)
            error.add_note(f"{id!r} in {name!r} holds one-shot work, not a schedule")
            raise error
        if trigger_of(existing) == trigger:
            envelope, due = rewritten(
                id, existing, element, misfire=misfire, grace=grace, spread=spread, declared=declared
            )
            if envelope == existing:
                return  # nothing changed: nothing moves
        else:
            # (An envelope whose ``next`` is not µs is from before that: filed anew, as is one
            # with no occurrence after the running one: as when nothing runs.)
            running = held and type(existing.get("next")) is int
            envelope, due, later = replanned(
                id,
                existing,
                trigger,
                element,
                now,
                running=running,
                misfire=misfire,
                grace=grace,
                spread=spread,
                declared=declared,
            )
            if not (running and later):
                held = False
        if held:
            if await store.update_if(name, id, info.revision, envelope) is not None:
                return
        else:
            filed = await store.replace_if(name, [(id, info.revision, envelope, ttl_until(due, now))])
            if filed[0] is not None:
                return
        # Changed meanwhile (claimed since the read, say: its next occurrence would come due
        # beside it): compare with that.


@attrs.frozen
class Admin:
    """Inspect and operate a store's dehydrators, schedules and dead letters; no handlers needed.

    ::

        async with open_store("redis://localhost:6379/0") as store:
            admin = Admin(store)
            for info in await admin.dehydrators():
                print(info.name, info.size, info.dead)
            await admin.pause("reports", "daily")
            await admin.requeue("emails")

    What ``rehydrate`` commands and the dashboard do, from your own code. The store must be
    open (``async with store``, or opened by whoever lends it): an ``Admin`` neither opens nor
    closes it. A :class:`~rehydrate.Scheduler` serving the store need not run in this process.

    A change made here to an element that a worker has claimed *ahead* of its due time
    (``claim_ahead``) in another process comes too late for that claim; made through that
    worker's own :class:`~rehydrate.Scheduler`, it does not.
    """

    store: Store = attrs.field()

    @store.validator
    def _check_store(self, _: attrs.Attribute[Store], value: object) -> None:
        if not isinstance(value, Store):
            raise InvalidTypeError(f"store must be a rehydrate.abc.Store, not {type(value).__name__}")

    # -- dehydrators -----------------------------------------------------------------------------

    async def names(self) -> list[str]:
        """The dehydrators holding elements or dead letters, sorted (``x.dead`` counts as ``x``)."""
        return sorted({name.removesuffix(DEAD_SUFFIX) for name in await self.store.names()})

    async def dehydrator(self, name: str) -> DehydratorInfo:
        """``name``'s counts now (zeros for a dehydrator that holds nothing)."""
        _validate.element_id(name, "name")
        summary: Summary = await self.store.summary(name)
        return DehydratorInfo(
            name=name,
            size=summary.size,
            due=summary.due,
            claimed=summary.claimed,
            dead=await self.store.size(name + DEAD_SUFFIX),
            ttn=summary.ttn,
        )

    async def dehydrators(self) -> list[DehydratorInfo]:
        """:meth:`dehydrator` of each of :meth:`names`."""
        return [await self.dehydrator(name) for name in await self.names()]

    async def workers(self) -> list[WorkerRecord]:
        """The workers whose heartbeats the store keeps (alive, and expired for a while).

        Raises ``NotImplementedError`` for a store that keeps none (a third-party store).
        """
        return await self.store.workers()

    # -- limits ----------------------------------------------------------------------------------

    async def limits(self, limit: str | None = None) -> list[LimitStatus]:
        """Every limit key with state (holders, starts in a window, or waiters), sorted by limit
        and key; ``limit``: only that limit's. Idle keys are not listed (the store keeps none).

        Capacity and saturation come from the live workers' heartbeats (see
        :class:`LimitStatus`). Raises ``NotImplementedError`` for a store without limits.
        """
        if limit is not None:
            _validate.element_id(limit, "limit")
        if not self.store.capabilities.limits:
            raise NotImplementedError(f"{type(self.store).__name__} does not implement limits")
        infos = await self.store.limits(limit)
        declared: dict[str, tuple[int | None, tuple[tuple[int, float], ...]]] = {}
        if infos and self.store.capabilities.workers:
            with contextlib.suppress(NotImplementedError):
                declared = _declared_limits(await self.store.workers())
        out = []
        for info in infos:
            concurrency, rates = declared.get(info.limit, (None, ()))
            holders = len(info.holders)
            out.append(
                LimitStatus(
                    limit=info.limit,
                    key=info.key,
                    holders=holders,
                    holder_ids=tuple(sorted(info.holders)),
                    starts=info.starts,
                    waiting=info.waiting,
                    concurrency=concurrency,
                    rates=rates,
                    saturation=_saturation(holders, info.starts, concurrency, rates),
                )
            )
        return out

    # -- elements --------------------------------------------------------------------------------

    async def elements(
        self, name: str, *, offset: int = 0, limit: int = 100
    ) -> list[tuple[ElementInfo, Any]]:
        """A page of ``name``'s elements in due order (schedules' envelopes included, as stored):
        ``limit`` of them from ``offset``, each with its :class:`~rehydrate.ElementInfo`. One
        delivered between the two reads is left out."""
        _validate.element_id(name, "name")
        start = _offset(offset)
        count = _validate.limit(limit)
        if count is None:
            raise InvalidArgumentError("limit must be an int of at least 1: a page has an end")
        ids = (await self.store.ids(name, limit=start + count))[start:]
        rows = []
        for id, element in zip(ids, await self.store.look_many(name, ids), strict=True):
            info = await self.store.info(name, id)
            if info is not None:
                rows.append((info, element))
        return rows

    async def remove(self, name: str, id: str) -> Removal:
        """Remove ``id`` from ``name``, whatever it is: one-shot work is cancelled (it will not
        be delivered), a schedule unscheduled (as :meth:`unschedule`: a run in flight ends, and
        files nothing). ``"unknown"`` if there is nothing under ``id``, ``"ending"`` if it is a
        schedule removed already whose last run is ending."""
        _validate.element_id(name, "name")
        _validate.element_id(id)
        while True:
            found = await self.store.read(name, id)
            if found is None:
                return "unknown"
            element, info = found
            if is_removed(element):
                return "ending"
            if is_schedule(element):
                if await remove_schedule(self.store, name, id, info):
                    return "schedule"
                continue  # changed meanwhile: read again
            await self.store.pull(name, id)
            return "one-shot"

    async def run_now(self, name: str, id: str) -> RunNow:
        """Deliver ``id`` of ``name`` now rather than at its time, and say what was done:

        * ``"schedule"``: an extra run of the schedule ``id`` is due now (its next run is kept:
          see :meth:`Scheduler.run_now <rehydrate.Scheduler.run_now>`);
        * ``"one-shot"``: the element ``id`` is due now;
        * ``"unknown"``: there is no such element (or it is a schedule being removed);
        * ``"held"``: a worker holds it under a running lease (it is running now);
        * ``"paused"``: it is a paused schedule (resume it first);
        * ``"changed"``: a worker claimed it, or it was removed, between the look and the change.
        """
        _validate.element_id(name, "name")
        _validate.element_id(id)
        store = self.store
        found = await store.read(name, id)
        if found is None:
            return "unknown"
        element, info = found
        if is_held(info, store.clock()):
            return "held"
        if is_removed(element):  # unscheduled during a run whose worker died: it goes
            return "unknown"
        schedule = is_schedule(element)
        if schedule:
            if element.get("paused"):
                return "paused"
            # Compare-and-set on the revision read: a schedule replaced, paused or claimed since
            # is not overwritten with this older copy.
            extra = with_extra(element, extra_time(element, wall(store.clock)))
            if await store.update_if(name, id, info.revision, extra) is None:
                return "changed"
        # Fenced by the attempt: a worker that claimed it meanwhile keeps it (and a request left
        # in a schedule's element is dropped when that occurrence ends, see ``with_extra``).
        if not await store.reschedule(name, id, ttl=0, attempt=info.attempt):
            return "changed"
        return "schedule" if schedule else "one-shot"

    # -- schedules -------------------------------------------------------------------------------

    async def schedules(self, name: str, *, limit: int | None = None) -> list[ScheduleInfo]:
        """The schedules of ``name``, next to run first (paused ones last), at most ``limit``.

        Reads the ids of ``name`` (one-shot work included), then their elements a batch at a
        time (``Store.look_many``: one round trip per 1,000 on Redis and PostgreSQL) until
        ``limit`` schedules are found: for inspection, not a hot path.
        """
        _validate.element_id(name, "name")
        _positive_limit(limit)
        ids = await self.store.ids(name)
        out: list[ScheduleInfo] = []
        for start in range(0, len(ids), _LOOK_BATCH):
            chunk = ids[start : start + _LOOK_BATCH]
            for id, envelope in zip(chunk, await self.store.look_many(name, chunk), strict=True):
                if is_schedule(envelope):
                    with contextlib.suppress(RehydrateError):  # (a damaged envelope: not listed)
                        out.append(schedule_info(id, envelope))
                        if limit is not None and len(out) >= limit:
                            return out
        return out

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
        """File (or change) the recurring schedule ``id`` of ``name``, due at each occurrence of
        ``trigger`` with ``element``: what :meth:`Scheduler.schedule <rehydrate.Scheduler.schedule>`
        does (an upsert; see it for ``misfire``, ``grace`` and ``spread``), with no scheduler.

        The same trigger keeps its next run time, and a change made while an occurrence runs is
        filed with the next occurrence when the run ends (never beside it). Raises
        ``DuplicateIdError`` if ``id`` holds one-shot work; the arguments are checked first, as
        by the scheduler. A worker of this store that claimed the schedule *ahead* of its due
        time (``claim_ahead``) runs that claim as it was.
        """
        _validate.element_id(name, "name")
        _validate.element_id(id)
        check_trigger(trigger)
        grace_s, spread_s = validate_misfire(misfire, grace), validate_spread(spread)
        await upsert_schedule(self.store, name, trigger, id, element, misfire, grace_s, spread_s)

    async def find_schedule(self, name: str, id: str) -> ScheduleInfo | None:
        """The schedule ``id`` of ``name`` (one read), ``None`` if there is none (nothing, one-shot
        work, or a schedule removed whose last run is ending)."""
        _validate.element_id(name, "name")
        _validate.element_id(id)
        envelope = await self.store.look(name, id)
        return schedule_info(id, envelope) if is_schedule(envelope) else None

    async def pause(self, name: str, id: str) -> Pause:
        """Stop the schedule ``id`` from running until :meth:`resume`. A running occurrence
        finishes, and the schedule is filed paused after it. ``"unchanged"`` if it was paused."""
        return "paused" if (done := await self._set_paused(name, id, True)) == "done" else done

    async def resume(self, name: str, id: str) -> Resume:
        """Run a paused schedule again, from its next occurrence after now (those missed while
        paused are not run), or from the one it was paused at if that is still to come.
        ``"unchanged"`` if it was not paused."""
        return "resumed" if (done := await self._set_paused(name, id, False)) == "done" else done

    async def _set_paused(
        self, name: str, id: str, paused: bool
    ) -> Literal["done", "unchanged", "unknown", "one-shot"]:
        _validate.element_id(name, "name")
        _validate.element_id(id)
        store = self.store
        while True:
            found = await store.read(name, id)
            if found is None:
                return "unknown"
            existing, info = found
            if not is_schedule(existing):
                return "unknown" if is_removed(existing) else "one-shot"
            if bool(existing.get("paused")) == paused:
                return "unchanged"
            if paused:
                envelope, ttl = with_paused(existing, True), PAUSED_TTL
            else:
                trigger = trigger_from_dict(existing["trigger"])
                now = wall(store.clock)
                offset = offset_of(id, existing)
                # The first occurrence from now on, but not before the one the schedule was
                # paused at (resumed at once, that one has not run; an earlier one has).
                upcoming = max(first_run(trigger, anchor_of(existing), now - offset), nominal_of(existing))
                envelope = with_next(with_paused(existing, False), upcoming)
                ttl = ttl_until(upcoming + offset, now)
            # Filed anew if nobody holds it; while an occurrence runs, paused (or resumed) in the
            # element it holds, so that the next occurrence is filed so when it ends (paused, it
            # comes due and is filed again without running, until resumed), and never beside it.
            held = with_paused(existing, paused)
            if await change_schedule(store, name, id, info, envelope, ttl, held):
                return "done"
            # (changed or removed meanwhile: again)

    async def unschedule(self, name: str, id: str) -> bool:
        """Remove the schedule ``id`` of ``name``; ``True`` if it existed. A running occurrence
        finishes and files nothing, and a schedule filed under ``id`` again meanwhile waits for
        it (one-shot work under ``id`` is left alone: see :meth:`remove`)."""
        _validate.element_id(name, "name")
        _validate.element_id(id)
        while True:
            found = await self.store.read(name, id)
            if found is None or not is_schedule(found[0]):
                return False
            if await remove_schedule(self.store, name, id, found[1]):
                return True

    # -- dead letters ----------------------------------------------------------------------------

    async def dead_letters(self, name: str, *, limit: int | None = None, offset: int = 0) -> list[DeadLetter]:
        """The elements of ``name`` that failed every attempt, oldest first: ``limit`` of them
        (all by default) from ``offset``. Anything else pushed into ``<name>.dead`` by hand (not
        a dead-letter record) is left out."""
        start = _offset(offset)
        count = _validate.limit(limit)
        dead = _validate.element_id(name, "name") + DEAD_SUFFIX
        ids = await self.store.ids(dead, limit=None if count is None else start + count)
        ids = ids[start:]
        records: list[Any] = []
        for at in range(0, len(ids), _LOOK_BATCH):
            records += await self.store.look_many(dead, ids[at : at + _LOOK_BATCH])
        return [
            DeadLetter(
                id=id,
                element=record.get("element"),
                error=str(record.get("error", "")),
                attempts=int(record.get("attempts", 0)),
                failed_at=float(record.get("failed_at", 0.0)),
            )
            for id, record in zip(ids, records, strict=True)
            if isinstance(record, dict)
        ]

    async def requeue(self, name: str, ids: Iterable[str] | None = None, *, delay: Seconds = 0) -> list[str]:
        """Put dead letters back into ``name`` (all of them, or ``ids``), due in ``delay``; the ids moved.

        A dead letter whose id is live again in ``name`` stays where it is, and so does an id
        that is no dead letter: compare the answer with ``ids`` to find them.
        """
        from rehydrate._tracing import wrap  # (not at import: it brings structlog, which verbs avoid)

        dead = _validate.element_id(name, "name") + DEAD_SUFFIX
        ttl = _validate.seconds(delay, "delay")
        store = self.store
        chosen = list(await store.ids(dead)) if ids is None else list(_validate.ids(tuple(ids)))
        moved = []
        for id in chosen:
            record = await store.look(dead, id)
            if not isinstance(record, dict):
                continue
            # The trace context it was deferred with goes back with it; a schedule's occurrence
            # goes back as that occurrence (its scheduled_for, the key its first runs had).
            element = wrap(record.get("element"), record.get("trace"))
            nominal = _nominal_of_record(record)
            if nominal is not None:
                element = replay_envelope(record.get("element"), nominal)
            try:
                await store.push(name, element, ttl=ttl, id=id)
            except DuplicateIdError:
                continue
            await store.pull(dead, id)
            moved.append(id)
        return moved

    async def delete_dead_letter(self, name: str, id: str) -> bool:
        """Delete the dead letter ``id`` of ``name`` for good; ``False`` if there is none."""
        dead = _validate.element_id(name, "name") + DEAD_SUFFIX
        _validate.element_id(id)
        if await self.store.info(dead, id) is None:
            return False
        await self.store.pull(dead, id)
        return True
