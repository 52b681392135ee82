"""Recurring schedules on the dehydrator: a schedule is an element due at its next occurrence.

The element a schedule files is an *envelope* (a small dict the store's serializer writes like any
element): the trigger, the misfire policy, whether it is paused, the nominal time of the occurrence
it stands for, and the user's element. Nothing about schedules lives in a store's columns, so every
store serves them through the one contract's compare-and-set primitives: a run ends with
``Store.replace_if`` on the revision its claim read, which ends the claim and files the next
occurrence in one atomic step (``rehydrate._occurrences.rearm``).

Times in an envelope are Unix seconds (wall time). The store's clock is mapped to wall time
through ``rehydrate._clock.wall`` when an occurrence is filed, planned or listed, so a
``FakeClock(start=datetime)`` moves cron schedules too.

This module is the pure part (the envelope and the planning: which occurrence runs when claimed,
which is filed next); the scheduler and its runners do the store calls.
"""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple, cast

import attrs

from rehydrate._core import _validate
from rehydrate._core._triggers import (
    ALL_MAX,
    MISFIRE,
    US,
    Cron,
    Every,
    Misfire,
    Trigger,
    trigger_from_dict,
    us,
)
from rehydrate._core._validate import MAX_SECONDS
from rehydrate.errors import InvalidArgumentError, InvalidTypeError, RehydrateError

__all__ = [
    "Envelope",
    "EARLY_US",
    "KEY",
    "Occurrence",
    "PAUSED_TTL",
    "REMOVED",
    "Refile",
    "SKIP_GRACE",
    "ScheduleInfo",
    "anchor_of",
    "check_trigger",
    "extra_time",
    "first_after",
    "first_run",
    "is_envelope",
    "is_removed",
    "is_schedule",
    "make_envelope",
    "merge_next",
    "next_run",
    "new_schedule",
    "nominal_of",
    "offset_of",
    "plan",
    "replanned",
    "replay_envelope",
    "rewritten",
    "running_us",
    "schedule_row",
    "spread_offset",
    "stored_trigger",
    "trigger_of",
    "ttl_until",
    "validate_misfire",
    "validate_spread",
    "with_declared",
    "with_extra",
    "with_next",
    "with_paused",
    "with_policy",
    "without_extra",
]

#: The key that marks an element as a schedule's envelope (its value: the envelope's version).
KEY: Final = "rehydrate.schedule"
#: A dict of plain data (JSON-able): what a schedule's element is in the store.
Envelope = dict[str, Any]
#: ``misfire="skip"``'s grace when none is given, in seconds (APScheduler 3's
#: ``misfire_grace_time`` is 1 s too). Every claim arrives a little after its occurrence's nominal
#: time: a delivery on a healthy worker is milliseconds late, a worker busy with a burst some
#: tens of milliseconds. A second runs all of those, and still skips an occurrence that comes
#: back after real downtime.
SKIP_GRACE: Final = 1.0


@attrs.frozen(kw_only=True)
class ScheduleInfo:
    """One recurring schedule, as :meth:`Admin.schedules` (and :meth:`Scheduler.schedules`) lists it."""

    id: str
    trigger: Trigger
    #: When the next occurrence is due (aware, UTC); ``None`` while paused. While an occurrence
    #: runs (or waits for a retry), it is that occurrence's nominal time.
    next_run: datetime | None
    element: Any
    paused: bool
    misfire: Misfire = "coalesce"
    #: With ``misfire="skip"``, how late an occurrence may run, in seconds; ``None`` otherwise.
    grace: float | None = None
    #: The window (seconds) this schedule was filed with (``spread=``), ``None`` if none.
    spread: float | None = None
    #: Its occurrences are due this many seconds after their nominal times (``next_run``): its
    #: fixed place in ``spread``, from a hash of its id; 0 without a spread.
    offset: float = 0.0


def schedule_info(id: str, envelope: Envelope) -> ScheduleInfo:
    """The :class:`ScheduleInfo` of the schedule ``id`` filed as ``envelope``."""
    paused = bool(envelope.get("paused"))
    misfire = envelope.get("misfire", "coalesce")
    return ScheduleInfo(
        id=id,
        trigger=trigger_from_dict(envelope["trigger"]),
        next_run=None if paused else datetime.fromtimestamp(nominal_of(envelope), UTC),
        element=envelope.get("element"),
        paused=paused,
        misfire=misfire,
        grace=(envelope.get("grace") or SKIP_GRACE) if misfire == "skip" else None,
        spread=envelope.get("spread"),
        offset=offset_of(id, envelope),
    )


def schedule_row(name: str, info: ScheduleInfo) -> dict[str, Any]:
    """The schedule ``info`` of ``name`` as plain data: the row ``rehydrate schedules`` prints as
    JSON, and the dashboard's ``/schedules`` answers (with a few keys of its own), so that a
    script reads both alike. ``next_run`` is ISO 8601 (UTC), ``None`` while paused."""
    return {
        "name": name,
        "id": info.id,
        "trigger": info.trigger.to_dict(),
        "next_run": None if info.next_run is None else info.next_run.isoformat(),
        "paused": info.paused,
        "misfire": info.misfire,
        "grace": info.grace,
        "spread": info.spread,
        "offset": info.offset,
        "element": info.element,
    }


def is_envelope(element: object) -> bool:
    return type(element) is dict and element.get(KEY) == 1 and "trigger" in element and "next" in element


def is_schedule(element: object) -> bool:
    """An envelope that stands for a schedule (not a requeued occurrence, see
    :func:`replay_envelope`, nor a removed one, see :data:`REMOVED`): what ``schedules()``,
    ``pause`` and the others act on."""
    return (
        is_envelope(element)
        and "replay" not in cast("Envelope", element)
        and "removed" not in cast("Envelope", element)
    )


#: What ``Scheduler.unschedule`` writes into a schedule while one of its occurrences runs, in
#: place of removing it: the element stays under the run's claim, so that nothing filed under
#: the same id meanwhile (``schedule()`` again) comes due beside the run; ``schedule()`` writes
#: into it as into any running schedule. The run's end (``rehydrate._occurrences.rearm``)
#: removes the element when it is still this as the claim ends, and a runner that claims it (its
#: worker died) ends it as it is, which removes it, or files what was written into it meanwhile.
#: An envelope (so a runner plans it, and never hands it to a handler as one-shot work), but no
#: schedule: no listing, pause or run now sees it.
REMOVED: Final[Envelope] = {KEY: 1, "trigger": None, "removed": True, "next": None}


def is_removed(element: object) -> bool:
    """Whether ``element`` is :data:`REMOVED`: a schedule unscheduled while an occurrence ran."""
    return type(element) is dict and element.get("removed") is True and element == REMOVED


def merge_next(stored: Any, given: Any, claimed: Any) -> tuple[Any, bool | None]:
    """What ends a run whose element someone else wrote while it ran, and whether due at once:
    ``stored`` is what the element holds now, ``claimed`` what the run held (as claimed, or as
    it wrote it back), ``given`` what it meant to file.

    A schedule unscheduled while its occurrence ran (stored as :data:`REMOVED`) is removed
    (``None``); one given as ``REMOVED`` (by the runner that claimed it so) but written into since
    (``schedule()`` again) is filed as stored, at once. Given the envelope it held with another
    end only (the keys a run changes: ``next``, an extra run's ``extra`` and ``last_extra``): if
    the stored one still ends as the held one did, it was changed before its end meanwhile (its
    element, policy, a pause) and is filed so, with the end given; if it ends otherwise, it was
    re-planned meanwhile (``schedule()`` gave it another trigger and wrote that trigger's first
    occurrence into it), and is filed as stored, at once, for the runner that claims it to file
    for its time. Anything else is filed as given.
    """
    if type(stored) is dict and stored.get("removed") is True and stored == REMOVED:
        return stored, None
    if type(given) is dict and given.get("removed") is True and given == REMOVED:
        return stored, True
    if not _ends_only(claimed, given):
        return given, False
    if type(stored) is not dict or any(stored.get(key) != claimed.get(key) for key in _ENDS):
        return stored, True
    merged = {key: value for key, value in stored.items() if key not in _ENDS}
    merged.update((key, given[key]) for key in _ENDS if key in given)
    return merged, False


def _ends_only(claimed: Any, given: Any) -> bool:
    """Whether ``given`` is the envelope ``claimed`` with another end only (see ``_ENDS``): the
    same keys before it, holding the very same values (made from it, as a runner makes what it
    files from what it holds)."""
    if type(claimed) is not dict or type(given) is not dict or type(given.get("next")) is not int:
        return False
    keys = [key for key in claimed if key not in _ENDS]
    return keys == [key for key in given if key not in _ENDS] and all(
        claimed[key] is given[key] for key in keys
    )


def replay_envelope(element: Any, nominal: float) -> Envelope:
    """An occurrence to run once more, with no schedule behind it: a dead-lettered occurrence put
    back by ``Scheduler.requeue``. It runs with ``scheduled_for`` its nominal time (the idempotency
    key its first runs had), is retried and dead-lettered under its own id, and files nothing next
    (its schedule has gone on without it)."""
    return {KEY: 1, "trigger": None, "element": element, "replay": True, "next": us(nominal)}


def validate_misfire(misfire: object, grace: object) -> float | None:
    """Check ``misfire`` and ``grace``; the grace in seconds: ``SKIP_GRACE`` for ``"skip"``
    without one, ``None`` for the other policies (which skip nothing, so take no grace)."""
    if misfire not in MISFIRE:
        raise InvalidArgumentError(f"misfire must be one of {', '.join(map(repr, MISFIRE))}, got {misfire!r}")
    if grace is None:
        return SKIP_GRACE if misfire == "skip" else None
    if misfire != "skip":
        raise InvalidArgumentError(
            f"grace goes with misfire='skip' only (misfire={misfire!r} skips no occurrence), "
            f"got grace={grace!r}"
        )
    seconds = _validate.seconds(grace, "grace")
    if seconds <= 0:
        raise InvalidArgumentError(
            f"grace must be positive, got {grace!r}: with misfire='skip', every claim comes a little "
            "after its occurrence's nominal time, so a grace of 0 would skip every occurrence "
            f"(leave it out for the default, {SKIP_GRACE:g} s)"
        )
    return seconds


def validate_spread(spread: object) -> float | None:
    """Check ``spread`` (seconds or a timedelta); ``None`` for no spread (``None`` or 0)."""
    if spread is None:
        return None
    seconds = _validate.seconds(spread, "spread")
    return seconds or None


def spread_offset(id: str, spread: float | None) -> float:
    """How long after its nominal times the schedule ``id`` runs: 0 without a spread, else a
    fixed fraction of the spread taken from a hash of the id (the same in every process and
    after every restart, and even over many ids)."""
    if not spread:
        return 0.0
    digest = hashlib.blake2b(id.encode(), digest_size=8).digest()
    return float(spread) * (int.from_bytes(digest, "big") / 2**64)


def offset_of(id: str, envelope: Envelope) -> float:
    """:func:`spread_offset` of the schedule ``id`` filed as ``envelope``."""
    return spread_offset(id, envelope.get("spread"))


def check_trigger(trigger: object) -> Trigger:
    if not isinstance(trigger, (Cron, Every)):
        raise InvalidTypeError(
            f"trigger must be a rehydrate.Cron or rehydrate.Every, not {type(trigger).__name__}"
        )
    return trigger


def make_envelope(
    trigger: Trigger,
    *,
    element: Any,
    next: float,
    anchor: float | None,
    misfire: Misfire,
    grace: float | None,
    paused: bool = False,
    spread: float | None = None,
) -> Envelope:
    """A schedule's envelope, with only what differs from the defaults written down.

    On the stores that serialize, an envelope is read back at every occurrence: the keys left out
    (no anchor, ``misfire="coalesce"``, no grace, not paused, a trigger's defaults) are a third of
    its JSON and of the time to decode it. Readers take the defaults. Times (``next``, the nominal
    time of the occurrence it stands for, and an ``Every``'s ``anchor``) are whole microseconds:
    an integer costs a tenth of a float to write and read (a float's shortest text is a search),
    and ``next`` is the last key, so a store can file the next occurrence by rewriting the end of
    the bytes it read instead of encoding the whole envelope again (see :func:`with_next`).
    """
    envelope: Envelope = {KEY: 1, "trigger": stored_trigger(trigger), "element": element}
    if anchor is not None:
        envelope["anchor"] = us(anchor)
    if paused:
        envelope["paused"] = True
    envelope["next"] = us(next)
    return with_policy(envelope, misfire, grace, spread)


def stored_trigger(trigger: Trigger) -> dict[str, Any]:
    """``trigger.to_dict()`` without its default values (what :func:`trigger_from_dict` assumes)."""
    data = trigger.to_dict()
    if data.get("start", 0) is None:
        del data["start"]
    if data.get("tz") == "UTC":
        del data["tz"]
    return data


def with_policy(
    envelope: Envelope, misfire: Misfire, grace: float | None, spread: float | None = None
) -> Envelope:
    """A copy of ``envelope`` with this misfire policy, grace and spread (the defaults left out)."""
    out = {key: value for key, value in envelope.items() if key not in _POLICY_KEYS}
    if misfire != "coalesce":
        out["misfire"] = misfire
    if grace is not None:
        out["grace"] = grace
    if spread is not None:
        out["spread"] = spread
    return _next_last(out)


_POLICY_KEYS: Final = frozenset({"misfire", "grace", "spread"})


def with_paused(envelope: Envelope, paused: bool) -> Envelope:
    """A copy of ``envelope``, paused or not (not paused is the default, left out)."""
    out = {key: value for key, value in envelope.items() if key != "paused"}
    if paused:
        out["paused"] = True
    return _next_last(out)


def with_next(envelope: Envelope, nominal: float) -> Envelope:
    """A copy of ``envelope`` standing for the occurrence at ``nominal`` (Unix seconds).

    ``next`` stays the last key (the copy of a dict keeps its keys' order), so the encoded copy is
    the encoded original with its end rewritten.
    """
    out = {**envelope, "next": us(nominal)}
    return out if next(reversed(out)) == "next" else _next_last(out)


def with_declared(envelope: Envelope, declared: bool) -> Envelope:
    """A copy of ``envelope`` marked as declared in code (``handler(schedule=...)``) or not.

    The mark is how a start that no longer declares a schedule knows to remove it: a schedule
    filed at run time (``schedule()``) under the same id is left alone.
    """
    out = {key: value for key, value in envelope.items() if key != "declared"}
    if declared:
        out["declared"] = True
    return _next_last(out)


def with_extra(envelope: Envelope, at: int) -> Envelope:
    """A copy of ``envelope`` asking for an extra occurrence, requested at ``at`` (whole
    microseconds, see :func:`extra_time`): what ``Scheduler.run_now`` files, due at once.

    The occurrence it stands for (``next``) is not run early: the extra run comes out of turn,
    with ``scheduled_for`` the request's time, and the schedule is filed again for ``next`` as it
    was. The request is kept in the element, so a retry of the extra run (or its redelivery after
    a worker died) has the same ``scheduled_for``; filing the next occurrence drops it (and keeps
    its time as ``last_extra``).
    """
    return _next_last({**envelope, "extra": at})


def extra_time(envelope: Envelope, now: float) -> int:
    """When an extra run asked for at wall time ``now`` is scheduled for, in whole microseconds.

    The time of the call, unless that would give the extra run the idempotency key of another
    run of this schedule: a call within the microsecond of an extra run already made (two calls
    on a clock that did not move, a test's ``FakeClock``), or at the very microsecond of an
    occurrence of its trigger (which has run, or was missed, and whose key that is). Then it is a
    microsecond later: a handler that skips keys it has seen never skips a run asked for.
    """
    at = us(now)
    last = envelope.get("last_extra")
    if type(last) is int and at <= last:
        at = last + 1
    upcoming = envelope.get("next")
    if type(upcoming) is int and at < upcoming:
        try:
            before = _before(envelope, trigger_from_dict(envelope["trigger"]), at / US)
        except (RehydrateError, KeyError, TypeError, ValueError):
            before = None  # a damaged envelope: its run says what becomes of it (it runs once)
        if before is not None and us(before) == at:
            at += 1
    return at


def without_extra(envelope: Envelope, ran: int | None = None) -> Envelope:
    """A copy of ``envelope`` without a request for an extra run (see :func:`with_extra`); with
    ``ran``, the time of the extra run that was made for it, kept as ``last_extra``."""
    out = {key: value for key, value in envelope.items() if key != "extra"}
    if ran is not None:
        out["last_extra"] = ran  # (placed among the last keys by _next_last, see _ENDS)
    return _next_last(out)


#: The keys a worker changes as an occurrence ends, kept last in this order: what it files is the
#: claimed envelope with another end, and what was written before them meanwhile (a pause, a new
#: element) is kept (:func:`merge_next`).
_ENDS: Final = ("last_extra", "extra", "next")


def _next_last(envelope: Envelope) -> Envelope:
    for key in _ENDS:
        if key in envelope:
            envelope[key] = envelope.pop(key)
    return envelope


def nominal_of(envelope: Envelope) -> float:
    """The nominal time (Unix seconds) of the occurrence ``envelope`` stands for."""
    return _seconds(envelope["next"])


def anchor_of(envelope: Envelope) -> float | None:
    """An ``Every`` schedule's anchor (Unix seconds): where its occurrences are counted from."""
    value = envelope.get("anchor")
    return None if value is None else _seconds(value)


def _seconds(value: Any) -> float:
    """A time an envelope keeps: whole microseconds (float seconds, as earlier builds wrote)."""
    return value / US if type(value) is int else float(value)


def _after(envelope: Envelope, trigger: Trigger, ts: float) -> float:
    if isinstance(trigger, Every):
        return trigger.after(ts, _anchor(envelope))
    return trigger.after(ts)


def _before(envelope: Envelope, trigger: Trigger, ts: float) -> float | None:
    if isinstance(trigger, Every):
        return trigger.before(ts, _anchor(envelope))
    return trigger.before(ts)


def _anchor(envelope: Envelope) -> float:
    anchor = anchor_of(envelope)
    if anchor is None:
        raise KeyError("anchor")  # an Every's envelope always has one: this one is damaged
    return anchor


def first_run(trigger: Trigger, anchor: float | None, now: float) -> float:
    """The first occurrence of a schedule filed at wall time ``now``: an ``Every``'s first grid
    point at or after ``now`` (``now`` itself when it has no ``start``), a cron's first match after."""
    if isinstance(trigger, Every):
        assert anchor is not None
        return trigger.at_or_after(now, anchor)
    return trigger.after(now)


def new_schedule(
    id: str,
    trigger: Trigger,
    element: Any,
    now: float,
    *,
    misfire: Misfire,
    grace: float | None,
    spread: float | None,
    declared: bool = False,
    paused: bool = False,
    after_us: int | None = None,
) -> tuple[Envelope, float, bool]:
    """The schedule ``id`` filed at wall time ``now``: its envelope, when its first occurrence is
    due (wall time: its nominal time, found on the schedule's own clock, plus its spread offset;
    ``inf`` while paused), and whether that occurrence is after ``after_us``.

    With ``after_us`` (whole microseconds), its first occurrence after it: a schedule written
    into one whose occurrence runs, which must not take that occurrence's time (its key, and the
    end the store compares). Filed a microsecond later each time, four times at most (one or two
    do); the last one tried if none is.
    """
    offset = spread_offset(id, spread)
    for _ in range(4):
        # An ``Every`` counts from its ``start``, or from when it is first filed (that
        # microsecond, so its first occurrence is due at once).
        anchor = None
        if isinstance(trigger, Every):
            anchor = math.floor(now * US) / US if trigger.start is None else trigger.start
        first = first_run(trigger, anchor, now - offset)
        envelope = make_envelope(
            trigger,
            element=element,
            next=first,
            anchor=anchor,
            misfire=misfire,
            grace=grace,
            paused=paused,
            spread=spread,
        )
        found = after_us is None or envelope["next"] > after_us
        if found:
            break
        now += 1 / US
    if declared:
        envelope = with_declared(envelope, True)
    return envelope, math.inf if paused else first + offset, found


def rewritten(
    id: str,
    existing: Envelope,
    element: Any,
    *,
    misfire: Misfire,
    grace: float | None,
    spread: float | None,
    declared: bool = False,
) -> tuple[Envelope, float]:
    """The schedule ``id`` filed as ``existing`` given again with its trigger: its element, policy
    and mark changed, the occurrence it stands for kept; and when that one is due (wall time,
    with the spread given; ``inf`` while paused)."""
    envelope = with_declared(with_policy({**existing, "element": element}, misfire, grace, spread), declared)
    if existing.get("paused"):
        return envelope, math.inf
    return envelope, nominal_of(existing) + spread_offset(id, spread)


def replanned(
    id: str,
    existing: Envelope,
    trigger: Trigger,
    element: Any,
    now: float,
    *,
    running: bool,
    misfire: Misfire,
    grace: float | None,
    spread: float | None,
    declared: bool = False,
) -> tuple[Envelope, float, bool]:
    """The schedule ``id`` filed as ``existing`` given another trigger at wall time ``now``: filed
    anew from now on (paused if it was). While an occurrence runs (``running``), from its first
    occurrence after the one that runs: never that one (a new ``next`` is what tells the store it
    was re-planned; a microsecond after it at the least, as the envelope counts it). As
    :func:`new_schedule`; found ``False``: none after it (then it is filed as if none ran)."""
    offset = spread_offset(id, spread)
    after = running_us(existing, now - offset) if running else None
    since = now if after is None else max(now, after / US + offset)
    return new_schedule(
        id,
        trigger,
        element,
        since,
        misfire=misfire,
        grace=grace,
        spread=spread,
        declared=declared,
        paused=bool(existing.get("paused")),
        after_us=after,
    )


def running_us(envelope: Envelope, now: float) -> int:
    """The nominal time (whole microseconds) of the occurrence that runs while ``envelope`` is
    held, at ``now`` on the schedule's own clock: the extra run asked for by ``run_now`` while
    the occurrence it stands for is still to come (:func:`plan`'s rule), else ``next``."""
    upcoming = envelope["next"]
    requested = envelope.get("extra")
    if type(requested) is int and now < upcoming / US:
        return requested
    return int(upcoming)


def trigger_of(envelope: Envelope) -> Trigger | None:
    """The trigger an envelope holds (``None`` if it cannot be read: then it differs from any)."""
    try:
        return trigger_from_dict(envelope["trigger"])
    except (RehydrateError, KeyError, TypeError, ValueError):
        return None


def first_after(envelope: Envelope, trigger: Trigger, ts: float) -> float:
    """The schedule's first occurrence strictly after wall time ``ts``."""
    return _after(envelope, trigger, ts)


def next_run(envelope: Envelope, trigger: Trigger) -> float:
    """The occurrence after the one ``envelope`` stands for: filed when it ends, late or not
    (a missed one is dealt with by :func:`plan` when it is claimed)."""
    return _after(envelope, trigger, nominal_of(envelope))


class Occurrence:
    """A claimed occurrence to run: the schedule's trigger (``None`` if unreadable), the envelope
    to file again when it ends (its ``next`` the occurrence it stands for), and the nominal time
    (Unix seconds) it runs for, its handler's ``scheduled_for``.

    A plain slotted class: one is made per occurrence delivered, and a frozen attrs class costs
    markedly more to make (``benchmarks/bench_schedules.py``).
    """

    __slots__ = (
        "element",
        "encoded",
        "envelope",
        "following",
        "moved",
        "nominal",
        "offset",
        "revision",
        "scheduled_for",
        "trigger",
    )

    def __init__(
        self,
        trigger: Trigger | None,
        envelope: Envelope,
        nominal: float,
        following: int | None = None,
        moved: bool = False,
        offset: float = 0.0,
    ) -> None:
        self.trigger = trigger
        self.envelope = envelope
        self.nominal = nominal
        #: The occurrence to file when this one ends, if planning already knew it (whole
        #: microseconds, as envelopes keep it).
        self.following = following
        #: Planning moved the nominal time (coalesced, or ``all`` starting later): to be written
        #: back before it runs, so that a retry runs this same occurrence.
        self.moved = moved
        #: How long after its nominal times the schedule runs (its share of a ``spread``).
        self.offset = offset
        #: What the handler gets.
        self.element = envelope.get("element")
        #: ``nominal`` as an aware datetime: set by whoever delivers it (it keeps the last one made).
        self.scheduled_for: datetime | None = None
        #: The element's revision once the worker wrote this occurrence back (``None``: as its
        #: claim read it): what the run's end is conditional on.
        self.revision: int | None = None
        #: ``envelope`` as the store's serializer wrote it when claimed, where the runner keeps it
        #: (``rehydrate._occurrences``): its next occurrence is filed from these bytes.
        self.encoded: bytes | None = None


class Refile(NamedTuple):
    """A claimed occurrence not to run: ``envelope`` is filed again, due at wall time ``due``."""

    envelope: Envelope
    due: float
    #: Skipped by ``misfire="skip"``: the nominal time of the occurrence skipped (for the logs).
    skipped: float | None = None


#: An occurrence claimed more than this long (a second, in microseconds) before its nominal time
#: (its due time, for a spread schedule) was made due early: it is filed for its time instead of
#: run (a wall clock read a little behind the store's is not that).
EARLY_US: Final = 1_000_000


def plan(id: str, envelope: Envelope, trigger: Trigger, now: float, attempt: int) -> Occurrence | Refile:
    """What the claim of the schedule ``id``'s occurrence ``envelope`` (delivery ``attempt``) at
    wall time ``now`` comes to: the :class:`Occurrence` to run, or a :class:`Refile` (paused,
    made due early, skipped by its misfire policy).

    The one planner of occurrences; the first test is its common case (a first delivery of a
    schedule neither paused nor spread nor ``skip``, not early, nothing missed), answered in
    whole microseconds as the envelope keeps them, with no call but the trigger's step: it runs
    once per occurrence. ``now`` is floored to whole microseconds for it (the same answers
    against whole numbers): an int of more than 48 bits against a float takes CPython's slow
    path, several times the cost of comparing two ints (docs/benchmarks.md, "Measurements
    behind the code").
    """
    now_us = int(now * US)
    nominal_us = envelope["next"]
    if (
        attempt == 1
        and type(nominal_us) is int
        and "paused" not in envelope
        and "spread" not in envelope
        and "extra" not in envelope
        and envelope.get("misfire") != "skip"
        and nominal_us <= now_us + EARLY_US
    ):
        if not isinstance(trigger, Every):
            following = us(trigger.after(nominal_us / US))
        elif type(anchor := envelope.get("anchor")) is int:
            following = trigger.after_us(nominal_us, anchor)
        else:
            following = 0  # a damaged envelope: the full planning below says what becomes of it
        if following > now_us:
            return Occurrence(trigger, envelope, nominal_us / US, following)
    # A spread schedule runs ``offset`` after its nominal times: planned on its own clock.
    offset = offset_of(id, envelope) if "spread" in envelope else 0.0
    if (
        type(nominal_us) is int
        and nominal_us + int(offset * US) > now_us + EARLY_US
        and "extra" not in envelope
        and not envelope.get("paused")
    ):
        # Due before its time: re-planned while an occurrence ran (``Scheduler.schedule`` gave
        # it another trigger; the store filed it at once when that run ended), or made due early
        # by hand. Filed for its time, not run.
        return Refile(envelope, nominal_us / US + offset)
    if envelope.get("paused"):
        # Paused while an occurrence ran (``pause`` writes into a running schedule): not run,
        # filed again, still paused, for its first occurrence after now. Not for the longest
        # ttl: a ``resume`` made while this claim lasts is written into it too, and the schedule
        # is then filed as resumed, for that occurrence.
        try:
            upcoming = first_after(envelope, trigger, now - offset)
        except (KeyError, TypeError, ValueError):  # a damaged envelope: left paused for good
            return Refile(envelope, now + PAUSED_TTL)
        return Refile(with_next(envelope, upcoming), upcoming + offset)
    claimed = envelope
    if "extra" in envelope:
        # An extra run asked for by ``Scheduler.run_now``: out of turn while the occurrence it
        # stands for is still to come, filed again for that one once it ends. A request still
        # there at that occurrence's time (its run failing since) is that occurrence.
        requested = envelope["extra"]
        if type(requested) is int and type(nominal_us) is int and now < nominal_us / US + offset:
            # Its time is kept (``last_extra``): a request made later within the same
            # microsecond gets a key of its own (see ``extra_time``).
            return Occurrence(
                trigger, without_extra(envelope, ran=requested), requested / US, nominal_us, False, offset
            )
        envelope = without_extra(envelope)
    run, nominal, following_s = _misfire(envelope, trigger, now - offset, attempt)
    if nominal != nominal_of(envelope):
        envelope = with_next(envelope, nominal)
    if not run:
        return Refile(envelope, nominal + offset, nominal_of(claimed))
    then = None if following_s is None else us(following_s)
    return Occurrence(trigger, envelope, nominal, then, envelope is not claimed, offset)


def _misfire(
    envelope: Envelope, trigger: Trigger, now: float, attempt: int
) -> tuple[bool, float, float | None]:
    """Apply the misfire policy to an occurrence claimed at wall time ``now`` (on the schedule's
    own clock: for a spread schedule, wall time less its offset): whether to run it, for which
    nominal time (or, not run, the occurrence to file instead), and the occurrence after that one
    when this already computed it (``None`` otherwise).

    Only a first delivery is planned: a retry, or a redelivery after a lost lease, runs the
    occurrence it was (a plan that moved the nominal time was written back before it ran).

    * ``coalesce``: when later occurrences were missed too, run once, for the latest of them.
    * ``all``: run each missed occurrence in turn, the most recent ``ALL_MAX`` of them at most.
    * ``skip``: an occurrence later than ``grace`` (default ``SKIP_GRACE``, 1 s) is not run; the
      first occurrence still within ``grace`` of ``now`` (or the next one) is filed instead.
      An envelope with no grace, or 0 (filed before a grace had to be positive), gets the default:
      every claim is a little late, and a grace of 0 would skip every occurrence.
    """
    nominal = nominal_of(envelope)
    if attempt > 1 or envelope.get("paused"):
        return True, nominal, None
    misfire = envelope.get("misfire", "coalesce")
    if misfire == "skip":
        grace = float(envelope.get("grace") or SKIP_GRACE)
        if now - nominal <= grace:
            return True, nominal, None
        # The first occurrence not yet later than grace: it may be due now (within grace) or later.
        if isinstance(trigger, Every):
            later = trigger.at_or_after(now - grace, _anchor(envelope))
        else:
            later = trigger.after(now - grace - 1e-3)  # cron's occurrences are whole minutes
        return False, max(later, _after(envelope, trigger, nominal)), None
    following = _after(envelope, trigger, nominal)
    if following > now:
        return True, nominal, following  # nothing else missed
    latest = _before(envelope, trigger, now)
    if latest is None:
        return True, nominal, None
    if misfire == "coalesce":
        return True, latest, None
    # "all": run this one unless more than ALL_MAX are missed; then start from the ALL_MAX-th last.
    t, count = nominal, 1
    while count <= ALL_MAX:
        t = _after(envelope, trigger, t)
        if t > now:
            return True, nominal, None
        count += 1
    back = latest
    for _ in range(ALL_MAX - 1):
        previous = _before(envelope, trigger, back - 1e-3)
        if previous is None or previous <= nominal:
            break
        back = previous
    return True, back, None


def ttl_until(when: float, now: float) -> float:
    """A ttl for an occurrence at wall time ``when``: never negative, never past the maximum, and 0
    within the microsecond schedules keep their times in.

    A time in whole microseconds, back in float seconds, can be a hair (0.24 µs at today's Unix
    times) past the ``now`` it was floored from: a schedule's first occurrence ``now`` was then
    filed that much ahead, never due on a test's fake clock that does not move.
    """
    ttl = when - now
    return 0.0 if ttl < _US_S else min(ttl, float(MAX_SECONDS))


#: A microsecond, in seconds.
_US_S: Final = 1e-6


#: How long a paused schedule's element waits (it is never due: resume files it anew).
PAUSED_TTL: Final = float(MAX_SECONDS)
