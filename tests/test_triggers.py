"""Triggers: cron in time zones (the daylight-saving rule), fixed intervals, bad input."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from rehydrate import Cron, Every, InvalidArgumentError, InvalidTypeError
from rehydrate._core._triggers import trigger_from_dict


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def _walk(cron: Cron, start: float, until: float) -> list[datetime]:
    out: list[datetime] = []
    t = start
    while True:
        t = cron.after(t)
        if t >= until:
            return out
        out.append(datetime.fromtimestamp(t, UTC))


# Spring-forward and fall-back days of 2026 (UTC bounds of a window around them).
DST = {
    "Europe/Paris": ((2026, 3, 29), (2026, 10, 25)),
    "America/New_York": ((2026, 3, 8), (2026, 11, 1)),
    "Australia/Lord_Howe": ((2026, 10, 4), (2026, 4, 5)),
}


def _local_day_bounds(tz: str, day: tuple[int, int, int]) -> tuple[float, float]:
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(tz)
    start = datetime(*day, tzinfo=zone)
    return start.timestamp(), (start + timedelta(days=1)).replace(tzinfo=zone).timestamp()


@pytest.mark.parametrize("tz", sorted(DST))
def test_a_time_in_the_spring_gap_runs_once_at_the_first_instant_after_it(tz: str) -> None:
    from zoneinfo import ZoneInfo

    spring, _ = DST[tz]
    lo, hi = _local_day_bounds(tz, spring)
    runs = _walk(Cron("30 2 * * *", tz=tz), lo - 1, hi)
    assert len(runs) == 1
    (run,) = runs
    local = run.astimezone(ZoneInfo(tz))
    # The first instant after the gap: one second earlier is before the jump (another offset).
    before = datetime.fromtimestamp(run.timestamp() - 1, UTC).astimezone(ZoneInfo(tz))
    if tz == "Australia/Lord_Howe":
        # Its gap is 02:00-02:30: 02:30 exists, and it is the first instant after the gap.
        assert (local.hour, local.minute) == (2, 30)
    else:
        assert (local.hour, local.minute) == (3, 0)
    assert before.utcoffset() != local.utcoffset()


@pytest.mark.parametrize("tz", sorted(DST))
def test_a_time_that_happens_twice_runs_once_on_the_fall_back_day(tz: str) -> None:
    from zoneinfo import ZoneInfo

    _, fall = DST[tz]
    lo, hi = _local_day_bounds(tz, fall)
    for expression in ("30 2 * * *", "30 1 * * *", "45 1 * * *"):
        runs = _walk(Cron(expression, tz=tz), lo - 1, hi)
        assert len(runs) == 1, (expression, runs)
        local = runs[0].astimezone(ZoneInfo(tz))
        assert (local.hour, local.minute) == (int(expression.split()[1]), int(expression.split()[0]))


#: Every spelling of an hour field that names every hour: each follows real time.
EVERY_HOUR = [
    "0 * * * *",
    "0 */1 * * *",
    "0 0-23 * * *",
    "0 0-23/1 * * *",
    f"0 {','.join(map(str, range(24)))} * * *",
    "@hourly",
]


@pytest.mark.parametrize("tz", ["Europe/Paris", "America/New_York"])
@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("expression", EVERY_HOUR)
def test_hourly_never_skips_or_repeats_an_hour_of_real_time(tz: str, which: int, expression: str) -> None:
    day = DST[tz][which]
    lo, hi = _local_day_bounds(tz, day)
    runs = _walk(Cron(expression, tz=tz), lo - 1, hi)
    assert len(runs) == (23 if which == 0 else 25)  # the local day is 23 or 25 hours long
    gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(runs)}
    assert gaps == {3600.0}
    assert len(set(runs)) == len(runs)


def test_hourly_in_lord_howe_runs_each_local_hour_once_across_its_half_hour_shifts() -> None:
    from zoneinfo import ZoneInfo

    zone = ZoneInfo("Australia/Lord_Howe")
    spring, fall = DST["Australia/Lord_Howe"]
    lo, hi = _local_day_bounds("Australia/Lord_Howe", spring)
    runs = [
        r.astimezone(zone).strftime("%H:%M")
        for r in _walk(Cron("0 * * * *", tz="Australia/Lord_Howe"), lo - 1, hi)
    ]
    # 02:00 does not exist (02:00 -> 02:30): it runs at 02:30, the first instant after the gap.
    assert runs[:4] == ["00:00", "01:00", "02:30", "03:00"]
    assert len(runs) == 24
    assert len(set(runs)) == 24
    lo, hi = _local_day_bounds("Australia/Lord_Howe", fall)
    runs = [
        r.astimezone(zone).strftime("%H:%M")
        for r in _walk(Cron("0 * * * *", tz="Australia/Lord_Howe"), lo - 1, hi)
    ]
    # 01:30-02:00 happens twice: no whole hour in it, so every hour runs once.
    assert runs == [f"{h:02d}:00" for h in range(24)]


def test_an_hour_field_that_skips_hours_names_local_times() -> None:
    """``0 */2 * * *`` does not name every hour: on Paris's fall-back night its 02:00 runs once
    (cronsim alone would run both, as it goes by the ``*`` the field starts with)."""
    from zoneinfo import ZoneInfo

    lo, hi = _local_day_bounds("Europe/Paris", DST["Europe/Paris"][1])
    for expression in ("0 */2 * * *", "0 0-22/2 * * *", "*/30 2 * * *"):
        runs = _walk(Cron(expression, tz="Europe/Paris"), lo - 1, hi)
        local = [r.astimezone(ZoneInfo("Europe/Paris")).strftime("%H:%M%z") for r in runs]
        assert len(local) == len({r[:5] for r in local}), (expression, local)
    runs = _walk(Cron("0 */2 * * *", tz="Europe/Paris"), lo - 1, hi)
    assert len(runs) == 12
    assert runs[1].astimezone(ZoneInfo("Europe/Paris")).utcoffset() == timedelta(hours=2)  # the first 02:00


def _reference(expression: str, tz: str, lo: float, hi: float) -> list[float]:
    """The daylight-saving rule, minute by minute of real time, for an expression whose day fields
    are ``*``: run at each minute whose wall time the expression names (only the first time that
    wall time is shown, unless the hour field names every hour), and at the end of a spring gap
    in which it names a time."""
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    parsed = CronSim(expression, datetime(2000, 1, 1))
    every_hour = parsed.hours == set(range(24))

    def named(wall: datetime) -> bool:
        return wall.minute in parsed.minutes and wall.hour in parsed.hours

    zone = ZoneInfo(tz)
    runs: list[float] = []
    shown: set[datetime] = set()
    previous: timedelta | None = None
    t = (int(lo) // 60 + 1) * 60
    while t < hi:
        local = datetime.fromtimestamp(t, UTC).astimezone(zone)
        wall, offset = local.replace(tzinfo=None), local.utcoffset()
        assert offset is not None
        run = named(wall) and (every_hour or wall not in shown)
        if previous is not None and offset > previous:  # clocks went forward: the gap's wall times
            gap = wall - (offset - previous)
            run = run or any(
                named(gap + timedelta(minutes=m)) for m in range((wall - gap) // timedelta(minutes=1))
            )
        if run:
            runs.append(float(t))
        shown.add(wall)
        previous = offset
        t += 60
    return runs


RULE_EXPRESSIONS = [
    *EVERY_HOUR[:5],
    "30 * * * *",
    "15,45 * * * *",
    "59 * * * *",
    "*/20 * * * *",
    "* * * * *",
    "0 */2 * * *",
    "*/7 */3 * * *",
    "30 2 * * *",
    "15 2 * * *",
    "45 1 * * *",
    "30 1 * * *",
    "0 1-3 * * *",
    "*/10 1-3 * * *",
    "* 2 * * *",
    "15,45 2 * * *",
]


@pytest.mark.parametrize(("tz", "which"), [(tz, which) for tz in sorted(DST) for which in (0, 1)])
def test_the_daylight_saving_rule_against_a_minute_by_minute_reference(tz: str, which: int) -> None:
    from zoneinfo import ZoneInfo

    day = DST[tz][which]
    lo = datetime(*day, tzinfo=ZoneInfo(tz)).timestamp() - 3 * 3600
    hi = lo + 30 * 3600
    for expression in RULE_EXPRESSIONS:
        cron = Cron(expression, tz=tz)
        runs = [r.timestamp() for r in _walk(cron, lo, hi)]
        assert runs == _reference(expression, tz, lo, hi), expression
        # before() agrees with after(): each run is the last at or before itself, and the one
        # before it is the last before it (just before, and halfway between).
        for previous, run in itertools.pairwise(runs):
            assert cron.before(run) == run, expression
            assert cron.before(run - 0.5) == previous, expression
            assert cron.before((previous + run) / 2) == previous, expression


def test_cron_names_ranges_steps_lists_and_aliases() -> None:
    start = _utc(2026, 1, 1)  # a Thursday
    assert datetime.fromtimestamp(Cron("0 9 * * MON-FRI").after(_utc(2026, 1, 2, 10)), UTC) == datetime(
        2026, 1, 5, 9, tzinfo=UTC
    )
    assert Cron("*/15 * * * *").after(start) == start + 900
    assert Cron("0 0,12 * * *").after(start) == start + 12 * 3600
    assert Cron("0 0 1 JAN,JUL *").after(start) == _utc(2026, 7, 1)
    assert Cron("@hourly").after(start) == start + 3600
    assert Cron("@daily").after(start) == start + 86400
    assert Cron("@weekly").after(start) == _utc(2026, 1, 4)  # Sunday
    assert Cron("@monthly").after(start) == _utc(2026, 2, 1)
    assert Cron("@yearly").after(start) == _utc(2027, 1, 1)
    assert Cron("0 8 * * *", tz="Europe/Paris").after(start) == _utc(2026, 1, 1, 7)


def test_cron_after_is_strictly_after_and_before_is_at_or_before() -> None:
    cron = Cron("*/5 * * * *")
    t = _utc(2026, 1, 1, 0, 5)
    assert cron.after(t) == t + 300
    assert cron.before(t) == t
    assert cron.before(t + 299) == t


def test_cron_after_remembers_recent_answers_within_a_bound() -> None:
    """Schedules of one cron minute ask the shared ``Cron`` for the same occurrence: the answer
    is kept (a walk of cronsim costs many times a look-up), is the same as a fresh walk's, and the memory
    of answers stays bounded however many times are asked about."""
    from rehydrate._core import _triggers

    shared = Cron("30 2 * * *", tz="Europe/Paris")
    start = _utc(2026, 10, 20)
    times = [start + 3600 * i for i in range(2 * _triggers._MEMO_SIZE)]  # across the fall-back day
    first = [shared.after(t) for t in times]
    assert [shared.after(t) for t in times] == first  # answered again, from memory or not
    assert [Cron("30 2 * * *", tz="Europe/Paris").after(t) for t in times] == first
    assert len(shared._after_memo) <= _triggers._MEMO_SIZE
    assert shared == Cron("30 2 * * *", tz="Europe/Paris")  # the memory is no part of its value


@pytest.mark.parametrize(
    ("expression", "field"),
    [
        ("61 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day-of-month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day-of-week"),
        ("* * * * FUN", "day-of-week"),
    ],
)
def test_a_bad_cron_field_is_named(expression: str, field: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"bad {field} field"):
        Cron(expression)


@pytest.mark.parametrize("expression", ["* * * *", "* * * * * *", "", "@reboot"])
def test_a_malformed_cron_expression_is_refused(expression: str) -> None:
    with pytest.raises(InvalidArgumentError, match="cron expression"):
        Cron(expression)


def test_an_unknown_zone_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown time zone 'Mars/Olympus'"):
        Cron("* * * * *", tz="Mars/Olympus")
    with pytest.raises(InvalidTypeError):
        Cron("* * * * *", tz=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError):
        Cron(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "interval", [0, -1, 0.0, timedelta(0), timedelta(seconds=-5), float("nan"), float("inf")]
)
def test_every_needs_a_positive_interval(interval: object) -> None:
    with pytest.raises(InvalidArgumentError, match="interval must be positive"):
        Every(interval)


def test_every_counts_whole_microseconds_exactly() -> None:
    """Every step lands on the anchor's grid, however small the interval and however far from the
    anchor (in floating-point seconds, ``Every(0.01)`` 2e9 s from 0 rounded back onto the
    occurrence it started from in four steps out of ten, and ran it again)."""
    anchor = 1795762861.982641
    steps: list[tuple[float | timedelta, int]] = [
        (0.01, 10_000),
        (0.1, 100_000),
        (timedelta(microseconds=7), 7),
        (1.1, 1_100_000),
    ]
    for interval, step_us in steps:
        every = Every(interval)
        t = anchor
        for _ in range(20_000):
            following = every.after(t, anchor)
            assert round(following * 1e6) - round(t * 1e6) == step_us
            assert every.before(following, anchor) == following
            assert every.at_or_after(following, anchor) == following
            t = following
    # Times are microseconds, as a datetime's: more digits are rounded; less than one is refused.
    assert Every(0.0000014).interval == 0.000001
    assert Every(60, start=1.0000004).start == 1.0
    with pytest.raises(InvalidArgumentError, match="at least a microsecond"):
        Every(0.0000004)


def test_every_refuses_bad_types_and_naive_starts() -> None:
    with pytest.raises(InvalidTypeError):
        Every("5")
    with pytest.raises(InvalidTypeError):
        Every(True)
    with pytest.raises(InvalidArgumentError, match="aware"):
        Every(5, start=datetime(2026, 1, 1))


def test_every_is_anchored_and_never_drifts() -> None:
    every = Every(timedelta(minutes=30))
    anchor = _utc(2026, 1, 1)
    assert every.interval == 1800.0
    assert every.after(anchor, anchor) == anchor + 1800
    # A run that ended late does not move the grid.
    assert every.after(anchor + 1800 + 7.3, anchor) == anchor + 3600
    assert every.at_or_after(anchor + 1800, anchor) == anchor + 1800
    assert every.before(anchor + 3599, anchor) == anchor + 1800
    assert every.before(anchor - 1, anchor) is None


def test_triggers_compare_and_round_trip_through_a_dict() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for trigger in (Cron("0 9 * * MON-FRI", tz="Europe/Paris"), Every(60), Every(0.5, start=start)):
        assert trigger_from_dict(trigger.to_dict()) == trigger
    assert Cron("0 9 * * *") == Cron("0 9 * * *", tz="UTC")
    assert Cron("0 9 * * *") != Cron("0 9 * * *", tz="Europe/Paris")
    assert Every(60) == Every(timedelta(minutes=1))
    assert Every(60) != Every(60, start=start)
    with pytest.raises(InvalidArgumentError):
        trigger_from_dict({"nope": 1})


def test_an_envelope_stores_only_what_differs_from_the_defaults() -> None:
    """The envelope read at every occurrence leaves out default values (a third of its JSON), keeps
    times as whole microseconds with ``next`` last (the end a store rewrites for the next
    occurrence), and reads back as the same schedule."""
    from rehydrate._schedules import make_envelope, schedule_info, with_paused, with_policy

    lean = make_envelope(Every(60), element={"u": 1}, next=120.0, anchor=60.0, misfire="coalesce", grace=None)
    assert lean == {
        "rehydrate.schedule": 1,
        "trigger": {"every": 60.0},
        "element": {"u": 1},
        "anchor": 60_000_000,
        "next": 120_000_000,
    }
    assert list(lean)[-1] == "next"
    cron = make_envelope(Cron("0 9 * * *"), element=None, next=9.0, anchor=None, misfire="skip", grace=5.0)
    assert cron == {
        "rehydrate.schedule": 1,
        "trigger": {"cron": "0 9 * * *"},
        "element": None,
        "misfire": "skip",
        "grace": 5.0,
        "next": 9_000_000,
    }
    assert list(cron)[-1] == "next"
    assert list(with_paused(cron, True))[-1] == "next"
    assert list(with_policy(lean, "all", None, 30.0))[-1] == "next"
    info = schedule_info("c", with_paused(cron, True))
    assert (info.trigger, info.misfire, info.grace, info.paused, info.next_run) == (
        Cron("0 9 * * *"),
        "skip",
        5.0,
        True,
        None,
    )
    assert with_paused(with_paused(cron, True), False) == cron
    assert with_policy(cron, "coalesce", None) == {
        k: v for k, v in cron.items() if k not in ("misfire", "grace")
    }
    paris = make_envelope(
        Cron("0 9 * * *", tz="Europe/Paris"), element=1, next=9.0, anchor=None, misfire="all", grace=None
    )
    assert paris["trigger"] == {"cron": "0 9 * * *", "tz": "Europe/Paris"}
    assert paris["misfire"] == "all"
    anchored = Every(60, start=datetime(2026, 1, 1, tzinfo=UTC))
    assert (
        trigger_from_dict(
            make_envelope(anchored, element=1, next=1.0, anchor=1.0, misfire="coalesce", grace=None)[
                "trigger"
            ]
        )
        == anchored
    )
