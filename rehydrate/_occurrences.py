"""Running a schedule's occurrences: what a claim of one stands for, and what is filed after it.

A claimed element that is a schedule's envelope (``rehydrate._schedules``) is not work as it is:
:meth:`Occurrences.begin` plans it (``rehydrate._schedules.plan``, the one planner) and either
hands back the :class:`~rehydrate._schedules.Occurrence` to deliver, or files the schedule again
without running it (paused, made due early, skipped, removed). When the delivery ends, done or
dead-lettered, :meth:`Occurrences.finish` files the next occurrence in its place. The
:class:`~rehydrate._runner.Runner` only delivers: it calls these three (and :meth:`write_back`
before running an occurrence whose nominal time planning moved).

Filing goes through the runner's rearmer (``file``): one :func:`rearm` for every occurrence that
ended meanwhile, as acks (``ack``) go in batches.

:func:`rearm` is where a run's end is decided, from the store's primitives alone: one
``Store.replace_if`` on the revision the claim read (the claim ended and the next occurrence filed
in one atomic step: nobody can claim the id between the two, so occurrences never overlap, and a
stale worker, whose claim's revision is gone, never files a second next). Where that fails, the
element is read again and the run's end settled by the rules of a change made while it ran
(:func:`~rehydrate._schedules.merge_next`), with a write conditional on what was read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from rehydrate._clock import wall_reader
from rehydrate._core import _validate
from rehydrate._core._records import Claim
from rehydrate._core._triggers import US, Trigger, trigger_from_dict, us
from rehydrate._core._validate import Seconds
from rehydrate._schedules import (
    REMOVED,
    Envelope,
    Occurrence,
    Refile,
    is_removed,
    merge_next,
    next_run,
    nominal_of,
    plan,
)
from rehydrate.abc import Store
from rehydrate.errors import InvalidArgumentError, RehydrateError
from rehydrate.serializers import Encoded, JSONSerializer
from rehydrate.stores._base import StoreBase

__all__ = ["File", "Occurrences", "rearm", "rearm_lists"]

logger = structlog.get_logger("rehydrate")

#: Files a schedule when its claim ends: ``(id, token, revision, the envelope the run held, the
#: envelope to file, due at (wall time), whether it ends a run)``, sent in a batch later (the
#: runner's rearmer).
File = Callable[[str, int, int, Envelope, "Envelope | Encoded", float, bool], None]

#: How many times the end of one run is read and tried again when the element keeps changing
#: under it (each try is a write conditional on what was read): past that, its lease brings the
#: occurrence back, as when a worker dies.
_TRIES: Final = 8


async def rearm(
    store: Store, name: str, items: Iterable[tuple[str, int, int, Any, Any, Seconds]]
) -> list[bool]:
    """End each run ``(id, token, revision, held, element, ttl)`` and file ``element`` in its
    place, due in ``ttl`` seconds, unclaimed; per item, whether it did (or settled the run
    otherwise).

    ``token`` is the run's claim; ``revision`` and ``held`` the element's revision and value as
    the claim read it (or as the worker's own :meth:`Occurrences.write_back` left it). The batch
    is one ``Store.replace_if`` (one round trip); an item given as
    :data:`~rehydrate._schedules.REMOVED` (a claimed schedule unscheduled during a run whose
    worker died) is removed instead, by ``Store.pull_if``. An item that fails there was written
    by someone else since, and is settled by :func:`_settle`: ``False`` when the run no longer
    holds the element (gone, claimed again after its lease ran out, replaced), so a stale worker
    files nothing. Every item is checked before anything is done.
    """
    _validate.element_id(name, "name")
    batch = list(items)
    checked: list[tuple[str, int, Any, float]] = []
    for index, (id, token, revision, _, element, ttl) in enumerate(batch):
        if _validate.token(token) is None:
            raise InvalidArgumentError(f"items[{index}]: ending a run needs its claim's token")
        checked += _validate.conditional_replaces([(id, revision, element, ttl)])
    return await rearm_lists(
        store,
        name,
        [item[0] for item in checked],
        [item[1] for item in batch],
        [item[1] for item in checked],
        [item[3] for item in batch],
        [item[2] for item in checked],
        [item[3] for item in checked],
    )


async def rearm_lists(
    store: Store,
    name: str,
    ids: list[str],
    tokens: list[int],
    revisions: list[int],
    held: list[Any],
    elements: list[Any],
    ttls: list[float],
    *,
    removing: bool = True,
) -> list[bool]:
    """:func:`rearm` of items given as parallel lists, checked (the runner's rearmer keeps its
    occurrences so): one list per field. ``removing=False`` says that no element is
    :data:`~rehydrate._schedules.REMOVED` (the rearmer knows: it is the one constant)."""
    if removing and any(type(e) is dict and e.get("removed") is True and e == REMOVED for e in elements):
        return await _rearm_removing(store, name, ids, tokens, revisions, held, elements, ttls)
    try:
        done = await store.replace_if(name, zip(ids, revisions, elements, ttls, strict=True))
    except InvalidArgumentError:
        if len(set(ids)) == len(ids):
            raise
        # (Rare: a run that outlived its lease ended beside the next claim's, in one batch.
        # ``replace_if`` takes an id once: each item on its own, in the order given.)
        out: list[bool] = []
        for item in zip(ids, tokens, revisions, held, elements, ttls, strict=True):
            out += await rearm_lists(store, name, *([value] for value in item))
        return out
    if all(done):  # (the common case: every run ended as claimed, each given a revision > 0)
        return [True] * len(done)
    return await _settle_all(
        store, name, [revision is not None for revision in done], ids, tokens, held, elements, ttls
    )


async def _rearm_removing(
    store: Store,
    name: str,
    ids: list[str],
    tokens: list[int],
    revisions: list[int],
    held: list[Any],
    elements: list[Any],
    ttls: list[float],
) -> list[bool]:
    """:func:`rearm_lists` of a batch that holds :data:`~rehydrate._schedules.REMOVED` (the claim
    of a schedule unscheduled during a run whose worker died): those removed by ``pull_if``."""
    removed = {i for i, e in enumerate(elements) if type(e) is dict and is_removed(e)}
    filing = [i for i in range(len(ids)) if i not in removed]
    done = await store.replace_if(name, [(ids[i], revisions[i], elements[i], ttls[i]) for i in filing])
    out = [False] * len(ids)
    for index, filed in zip(filing, done, strict=True):
        out[index] = filed is not None
    for index in sorted(removed):
        out[index] = await store.pull_if(name, ids[index], revisions[index])
    return await _settle_all(store, name, out, ids, tokens, held, elements, ttls)


async def _settle_all(
    store: Store,
    name: str,
    out: list[bool],
    ids: list[str],
    tokens: list[int],
    held: list[Any],
    elements: list[Any],
    ttls: list[float],
) -> list[bool]:
    """``out`` with each item that failed settled (:func:`_settle`)."""
    for index, ok in enumerate(out):
        if not ok:
            out[index] = await _settle(
                store, name, ids[index], tokens[index], held[index], elements[index], ttls[index]
            )
    return out


async def _held(store: Store, name: str, id: str, token: int) -> tuple[Any, int] | None:
    """The element ``id`` and its revision, if it is still under the claim ``token``; else
    ``None``. The read gives the revision, and an ``extend`` fenced by the token (to the lease
    end the read saw: a renewal, which keeps the revision) says whose claim it is: a write
    conditional on that revision then lands only while the claim still holds it."""
    found = await store.read(name, id)
    if found is None or not found[1].claimed:
        return None
    element, info = found
    lease = max(0.0, info.due - float(store.clock()))
    if await store.extend(name, id, lease=lease, token=token) is None:
        return None
    return element, info.revision


async def _settle(store: Store, name: str, id: str, token: int, claimed: Any, given: Any, ttl: float) -> bool:
    """The end of a run whose element was written by someone else while it ran: still under
    its claim, it is ended by :func:`~rehydrate._schedules.merge_next`'s rules (a change kept,
    with the next time given; re-planned, filed as stored at once; unscheduled, removed), each
    write conditional on the revision read; tried again while it keeps changing."""
    if type(given) is Encoded:
        given = given.element
    for _ in range(_TRIES):
        held = await _held(store, name, id, token)
        if held is None:
            return False  # gone, or no longer under this claim: fenced
        stored, revision = held
        merged, at_once = merge_next(stored, given, claimed)
        if at_once is None:
            if await store.pull_if(name, id, revision):
                return True
        elif (await store.replace_if(name, [(id, revision, merged, 0.0 if at_once else ttl)]))[0] is not None:
            return True
    logger.warning(
        "schedule kept changing while its run ended; its lease will bring it back",
        dehydrator=name,
        id=id,
    )
    return False


class Occurrences:
    """The occurrences of one handler's schedules: planned when claimed, filed again when over."""

    def __init__(self, store: Store, name: str, *, file: File, ack: Callable[[str, int], None]) -> None:
        self._store = store
        self._name = name
        self._file = file
        self._ack = ack
        #: The store clock's wall time, looked up once (a store's clock is made with it): it is
        #: read at every occurrence.
        self._wall = wall_reader(store.clock)
        #: The last ``scheduled_for`` made, and its nominal time (see :meth:`_when`).
        self._last_nominal = math.nan
        self._last_when = datetime.fromtimestamp(0, UTC)
        #: The last stored trigger read, and the trigger it stands for (see :meth:`_trigger`).
        self._last_raw: object = None
        self._last_trigger: Trigger | None = None
        #: The store's JSON serializer, where the store takes an element it already wrote
        #: (:class:`~rehydrate.serializers.Encoded`): an occurrence's envelope is then encoded as
        #: it is claimed, and its next one filed as those bytes with another ``next`` (see
        #: :meth:`finish`), not encoded again. So a handler's change to its element in place stays
        #: with that run, as it does on every store that keeps bytes.
        serializer = getattr(store, "serializer", None) if isinstance(store, StoreBase) else None
        self._dumps = serializer.dumps if type(serializer) is JSONSerializer else None

    def begin(self, claim: Claim) -> Occurrence | None:
        """The occurrence a claimed envelope stands for, by its schedule's misfire policy, on the
        store's clock; ``None`` when none is to run (skipped, paused, early, removed): then what
        comes after it is already handed to ``file``, fenced by the claim as every rearm.

        Not async: an occurrence on time (the common case) needs no store call before it runs,
        and a coroutine per occurrence costs more than its planning. One whose nominal time moved
        is ``moved``: :meth:`write_back` it before it runs.
        """
        envelope: Envelope = claim.element
        try:
            raw = envelope["trigger"]
            # The last trigger read, kept: the occurrences of a burst mostly share theirs (the very
            # dict on the memory store, an equal one decoded on the others), and comparing it
            # with the last costs less than the cache's hashing of its parts.
            trigger = self._last_trigger
            if trigger is None or (raw is not self._last_raw and raw != self._last_raw):
                trigger = trigger_from_dict(raw)
                self._last_raw, self._last_trigger = raw, trigger
        except (RehydrateError, KeyError, TypeError, ValueError) as exc:
            return self._unplanned(claim, exc)
        planned = plan(claim.id, envelope, trigger, float(self._wall()), claim.attempt)
        if type(planned) is Occurrence:
            nominal = planned.nominal
            planned.scheduled_for = self._last_when if nominal == self._last_nominal else self._when(nominal)
            if self._dumps is not None:
                planned.encoded = self._dumps(planned.envelope)
            return planned
        assert isinstance(planned, Refile)
        if planned.skipped is not None:
            logger.info(
                "schedule: an occurrence later than its grace was skipped",
                dehydrator=self._name,
                id=claim.id,
                skipped=planned.skipped,
                next=nominal_of(planned.envelope),
            )
        self._file(claim.id, claim.token, claim.revision, envelope, planned.envelope, planned.due, False)
        return None

    def _unplanned(self, claim: Claim, exc: Exception) -> Occurrence | None:
        """A claimed envelope whose trigger cannot be read: a requeued occurrence (it has none),
        run once; a removed schedule, given back as it is (:func:`rearm` removes it, or files what a
        ``schedule()`` wrote into it since, at once); else a damaged one, run once and not filed
        again."""
        envelope: Envelope = claim.element
        if envelope.get("replay"):
            return self._ready(Occurrence(None, envelope, nominal_of(envelope)))
        if is_removed(envelope):
            self._file(claim.id, claim.token, claim.revision, envelope, REMOVED, -math.inf, False)
            return None
        logger.error(
            "a schedule's trigger cannot be read; it is run once",
            dehydrator=self._name,
            id=claim.id,
            exc_info=exc,
        )
        try:
            nominal = nominal_of(envelope)
        except (KeyError, TypeError, ValueError):
            nominal = 0.0
        return self._ready(Occurrence(None, envelope, nominal))

    def _ready(self, occurrence: Occurrence) -> Occurrence:
        occurrence.scheduled_for = self._when(occurrence.nominal)
        return occurrence

    def _when(self, nominal: float) -> datetime:
        """``scheduled_for`` of an occurrence: the aware datetime of its nominal time.

        The last one is kept: the occurrences of a burst share their nominal time (a cron
        minute, a fan-out), and making a datetime costs a tenth of a delivery.
        """
        if nominal != self._last_nominal:
            self._last_nominal = nominal
            self._last_when = datetime.fromtimestamp(nominal, UTC)
        return self._last_when

    async def write_back(self, claim: Claim, occurrence: Occurrence) -> None:
        """Record a moved nominal time before the occurrence runs, so a retry runs this same one.

        Conditional on the claim's revision, and the new revision kept for :meth:`finish`: the
        run's end is then conditional on it in turn. Written over by someone else since the
        claim (a change made while it runs), the change is kept (``merge_next``) and the run's
        end settles it again (:func:`rearm`); a schedule replaced, removed or claimed again
        since is left as it is: the occurrence runs, and files nothing.
        """
        store, name, id = self._store, self._name, claim.id
        try:
            revision = await store.update_if(name, id, claim.revision, occurrence.envelope)
            if revision is not None:
                occurrence.revision = revision
                return
            for _ in range(_TRIES):
                held = await _held(store, name, id, claim.token)
                if held is None:
                    logger.info(
                        "schedule changed after this occurrence was claimed: it runs, and files no next one",
                        dehydrator=name,
                        id=id,
                    )
                    return
                stored, revision = held
                merged = merge_next(stored, occurrence.envelope, claim.element)[0]
                # (No revision kept: the run's end finds the change, and keeps it again.)
                if merged is stored or await store.update_if(name, id, revision, merged) is not None:
                    return
        except RehydrateError as exc:
            logger.warning(
                "schedule: could not record a coalesced occurrence",
                dehydrator=name,
                id=id,
                exc_info=exc,
            )

    def finish(self, claim: Claim, occurrence: Occurrence) -> None:
        """The occurrence is over (done, or dead-lettered): file the next one in its place; a
        requeued or unreadable one, which has no schedule behind it, is only acked."""
        upcoming = occurrence.following
        if upcoming is None:
            if occurrence.trigger is None:
                self._ack(claim.id, claim.token)
                return
            upcoming = us(next_run(occurrence.envelope, occurrence.trigger))
        # ``next`` keeps its place, the last (with_next's copy, without its check: every envelope
        # is written so). A copy, then the one key set: ``{**envelope, "next": ...}`` builds two
        # dicts and merges them, which counts as a measurable share of an occurrence
        # (``bench_instructions.py``).
        held = occurrence.envelope
        envelope = held.copy()
        envelope["next"] = upcoming
        filed: Envelope | Encoded = envelope
        encoded = occurrence.encoded
        if encoded is not None:
            # The bytes encoded as it was claimed, their end (``next``, the last key: every
            # envelope is written so) made the upcoming one's.
            end = b'"next":%d}' % held["next"] if type(held["next"]) is int else b""
            if end and encoded.endswith(end):
                filed = Encoded(encoded[: -len(end)] + b'"next":%d}' % upcoming, "json", envelope)
        revision = occurrence.revision
        if revision is None:
            revision = claim.revision
        if not occurrence.moved:
            held = claim.element  # (what the run holds: an extra run files another end than it)
        self._file(claim.id, claim.token, revision, held, filed, upcoming / US + occurrence.offset, True)

    def dead_letter(self, claim: Claim, occurrence: Occurrence) -> tuple[str, str]:
        """The id of a failed occurrence's dead letter and its ``scheduled_for`` (ISO 8601): one
        dead letter per occurrence, named by its nominal time, while the schedule carries on (a
        requeued one, see ``replay_envelope``, is named so already)."""
        when = datetime.fromtimestamp(occurrence.nominal, UTC).isoformat()
        if occurrence.envelope.get("replay"):
            return claim.id, when
        return f"{claim.id}@{when}", when
