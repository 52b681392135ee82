"""Running a schedule's occurrences: what a claim of one stands for, and what is filed after it.

A claimed element that is a schedule's envelope (``rehydrate._schedules``) is not work as it is:
:meth:`Occurrences.begin` plans it (``rehydrate._schedules.plan``, the one planner) and either
hands back the :class:`~rehydrate._schedules.Occurrence` to deliver, or files the schedule again
without running it (paused, made due early, skipped, removed). When the delivery ends, done or
dead-lettered, :meth:`Occurrences.finish` files the next occurrence in its place. The
:class:`~rehydrate._runner.Runner` only delivers: it calls these three (and :meth:`write_back`
before running an occurrence whose nominal time planning moved).

Filing goes through the runner's rearmer (``file``): one fenced ``Store.rearm`` for every
occurrence that ended meanwhile, as acks (``ack``) go in batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from rehydrate._clock import wall_reader
from rehydrate._core._records import Claim
from rehydrate._core._triggers import US, Trigger, trigger_from_dict, us
from rehydrate._schedules import (
    Envelope,
    Occurrence,
    Refile,
    is_removed,
    next_run,
    nominal_of,
    plan,
)
from rehydrate.abc import Store
from rehydrate.errors import RehydrateError, UnknownIdError

__all__ = ["File", "Occurrences"]

logger = structlog.get_logger("rehydrate")

#: Files a schedule when its claim ends: ``(id, token, envelope, due at (wall time), whether it
#: ends a run)``, sent in a batch later (the runner's rearmer).
File = Callable[[str, int, Envelope, float, bool], None]


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
        self._file(claim.id, claim.token, planned.envelope, planned.due, False)
        return None

    def _unplanned(self, claim: Claim, exc: Exception) -> Occurrence | None:
        """A claimed envelope whose trigger cannot be read: a requeued occurrence (it has none),
        run once; a removed schedule, given back as it is (the store removes it, or files what a
        ``schedule()`` wrote into it since, at once: see ``Store.rearm``); else a damaged one,
        run once and not filed again."""
        envelope: Envelope = claim.element
        if envelope.get("replay"):
            return self._ready(Occurrence(None, envelope, nominal_of(envelope)))
        if is_removed(envelope):
            self._file(claim.id, claim.token, envelope, -math.inf, False)
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

        Fenced by the claim: a schedule replaced or paused since it was claimed keeps what was
        filed (written over, a paused schedule came back unpaused and due in 31 years: lost).
        """
        try:
            await self._store.update(self._name, claim.id, occurrence.envelope, token=claim.token)
        except UnknownIdError:
            logger.info(
                "schedule changed after this occurrence was claimed: it runs, and files no next one",
                dehydrator=self._name,
                id=claim.id,
            )
        except RehydrateError as exc:
            logger.warning(
                "schedule: could not record a coalesced occurrence",
                dehydrator=self._name,
                id=claim.id,
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
        envelope = occurrence.envelope.copy()
        envelope["next"] = upcoming
        self._file(claim.id, claim.token, envelope, upcoming / US + occurrence.offset, True)

    def dead_letter(self, claim: Claim, occurrence: Occurrence) -> tuple[str, str]:
        """The id of a failed occurrence's dead letter and its ``scheduled_for`` (ISO 8601): one
        dead letter per occurrence, named by its nominal time, while the schedule carries on (a
        requeued one, see ``replay_envelope``, is named so already)."""
        when = datetime.fromtimestamp(occurrence.nominal, UTC).isoformat()
        if occurrence.envelope.get("replay"):
            return claim.id, when
        return f"{claim.id}@{when}", when
