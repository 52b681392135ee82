"""Durations written as people write them, and read back: ``format_duration`` and ``parse_duration``
(``--every 90s`` listed as ``every 1m30s``, which ``--every`` takes back), and the trigger texts
built on them."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rehydrate import Cron, Every
from rehydrate._core._durations import format_duration, parse_duration
from rehydrate._core._validate import MAX_SECONDS
from rehydrate.cli._common import BadValue, duration
from rehydrate.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (5, "5s"),
        (59, "59s"),
        (60, "1m"),
        (90, "1m30s"),
        (3600, "1h"),
        (5400, "1h30m"),
        (86400, "1d"),
        (90061, "1d1h1m1s"),
        (86400 + 30, "1d30s"),
        (0.25, "250ms"),
        (0.0015, "1.5ms"),
        (0.000001, "0.001ms"),
        (1.5, "1.5s"),
        (60.25, "1m0.25s"),
        (3600.000001, "1h0.000001s"),
        (MAX_SECONDS, "11574d1h46m40s"),
    ],
)
def test_durations_are_written_as_people_write_them(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds
    assert duration(text) == seconds  # the CLI's --every, --delay... read it back


@given(st.integers(min_value=0, max_value=MAX_SECONDS * 1_000_000))
@example(1)  # a microsecond
@example(999_999)
@example(1_000_001)
@example(MAX_SECONDS * 1_000_000 - 1)
def test_parse_reads_back_what_format_wrote(microseconds: int) -> None:
    """Every duration of whole microseconds (what an ``Every`` and a schedule's envelope keep)."""
    seconds = microseconds / 1_000_000
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.floats(min_value=0, max_value=MAX_SECONDS, allow_nan=False))
@example(1.6328125)  # a tie: rounded to the even microsecond, 1.632812
@example(281474977.5710695)  # a tie where a float's ulp is near a tenth of a microsecond
def test_any_float_comes_back_within_half_a_microsecond(seconds: float) -> None:
    # Half a microsecond at most: a tie (1.6328125 s) is rounded to the even microsecond, and the
    # float read back may differ from the exact microsecond by its own rounding (a few ulps of a
    # large value: 281474977.5710695 s).
    back = parse_duration(format_duration(seconds))
    assert abs(back - seconds) <= 5e-7 + 4 * math.ulp(seconds)


def test_the_parser_still_reads_what_it_read() -> None:
    assert parse_duration("1500ms") == 1.5
    assert parse_duration(" 2M ") == 120.0
    assert parse_duration(".5s") == 0.5
    assert parse_duration("1.5h") == 5400.0
    assert parse_duration("2.5") == 2.5
    assert parse_duration("1h1ms") == 3600.001


@pytest.mark.parametrize(
    "text", ["", "5 s", "5x", "m", "1.s", "-5s", "-5", "inf", "nan", "1e400", "9" * 400 + "d"]
)
def test_bad_durations_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid duration"):
        parse_duration(text)
    with pytest.raises(BadValue, match="invalid duration"):  # exit 1, one line (docs/cli.md)
        duration(text)


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan")])
def test_format_refuses_what_is_no_duration(bad: float) -> None:
    with pytest.raises(ValueError, match="finite and not negative"):
        format_duration(bad)
    with pytest.raises(TypeError):
        format_duration("5")  # type: ignore[arg-type]


def test_triggers_read_as_written() -> None:
    """``Every(5)`` is ``every 5s`` (it was ``every 0:00:05``), and a cron names its zone."""
    assert str(Every(5)) == "every 5s"
    assert str(Every(5400)) == "every 1h30m"
    assert str(Every(timedelta(days=1))) == "every 1d"
    assert str(Every(0.25)) == "every 250ms"
    assert str(Every(90, start=0)) == "every 1m30s from 1970-01-01T00:00:00+00:00"
    assert str(Cron("0 9 * * MON-FRI", tz="Europe/Paris")) == "cron 0 9 * * MON-FRI (Europe/Paris)"
    assert str(Cron("@daily")) == "cron @daily (UTC)"
