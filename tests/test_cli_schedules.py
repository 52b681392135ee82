"""``rehydrate schedules|schedule|unschedule|pause|resume`` against a SQLite file, in this process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from rehydrate.cli._main import run


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    url = f"sqlite:///{tmp_path / 'cli.db'}"

    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = run(["--store", url, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return call


def test_schedule_list_pause_resume_unschedule(cli: Any) -> None:
    code, out, err = cli(
        "schedule",
        "digest",
        "d1",
        "--cron",
        "0 9 * * MON-FRI",
        "--tz",
        "Europe/Paris",
        '{"team": 7}',
        "--format",
        "json",
    )
    assert code == 0, err
    row = json.loads(out)
    assert row["trigger"] == {"cron": "0 9 * * MON-FRI", "tz": "Europe/Paris"}
    assert row["element"] == {"team": 7}
    assert cli("schedule", "sync", "s", "--every", "30m", "--format", "json")[0] == 0
    code, out, _ = cli("schedules", "--format", "json")
    rows = json.loads(out)
    assert [(r["name"], r["id"], r["paused"]) for r in rows] == [
        ("digest", "d1", False),
        ("sync", "s", False),
    ]
    assert rows[1]["trigger"] == {"every": 1800.0, "start": None}
    code, out, _ = cli("schedules", "digest", "--format", "text")
    assert "0 9 * * MON-FRI (Europe/Paris)" in out
    assert "PAUSED" in out
    assert cli("pause", "sync", "s")[0] == 0
    code, out, _ = cli("schedules", "sync", "--format", "json")
    assert json.loads(out)[0]["paused"] is True
    assert json.loads(out)[0]["next_run"] is None
    assert cli("resume", "sync", "s")[0] == 0
    assert cli("unschedule", "sync", "s")[0] == 0
    code, _, err = cli("unschedule", "sync", "s", "--format", "text")
    assert code == 1
    assert "no schedule 's' in 'sync'" in err
    assert cli("pause", "sync", "nope")[0] == 1
    assert cli("resume", "sync", "nope")[0] == 1


def test_run_now_asks_for_an_extra_run(cli: Any) -> None:
    assert cli("schedule", "digest", "d1", "--cron", "0 9 * * *")[0] == 0
    code, out, _ = cli("schedules", "digest", "--format", "json")
    (before,) = json.loads(out)
    code, out, err = cli("run-now", "digest", "d1", "--format", "json")
    assert code == 0, err
    assert json.loads(out) == {"name": "digest", "id": "d1", "due": True}
    code, out, _ = cli("look", "digest", "d1", "--format", "json")
    assert "extra" in json.loads(out)  # the request, in the schedule's element
    code, out, _ = cli("schedules", "digest", "--format", "json")
    assert json.loads(out) == [before]  # its next run is unchanged
    code, out, _ = cli("ttn", "digest", "--format", "json")
    assert json.loads(out) == 0.0  # due now
    assert cli("pause", "digest", "d1")[0] == 0
    code, _, err = cli("run-now", "digest", "d1", "--format", "text")
    assert code == 1
    assert "a paused schedule" in err
    assert cli("run-now", "digest", "nope")[0] == 1


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--every", "5s", "--tz", "Europe/Paris"], 1, "--tz goes with --cron"),
        (["--cron", "61 * * * *"], 1, "bad minute field '61'"),
        (["--cron", "* * * * *", "--tz", "Mars/Olympus"], 1, "unknown time zone"),
        (["--every", "0s"], 1, "--every: invalid duration '0s': it must be positive"),
        (["--every", "5x"], 1, "--every: invalid duration '5x': use a number of seconds or e.g. 1500ms"),
        (["--every", "-5s"], 1, "--every: invalid duration '-5s': it must not be negative"),
        (
            ["--every", "1h", "--spread", "-1m"],
            1,
            "--spread: invalid duration '-1m': it must not be negative",
        ),
        (
            ["--every", "1h", "--start", "2026-01-01T09:00"],
            1,
            "--start: invalid time '2026-01-01T09:00': add a",
        ),
        (["--cron", "@daily", "--every", "5s"], 2, "not allowed with"),
        ([], 2, "one of the arguments --cron --every is required"),
        (["--every", "5s", "--misfire", "sometimes"], 2, "invalid choice"),
        (["--every", "5s", "--grace", "5s"], 1, "--grace goes with --misfire skip"),
        (["--every", "5s", "--misfire", "all", "--grace", "5s"], 1, "--misfire all skips nothing"),
        (["--every", "5s", "--misfire", "skip", "--grace", "0s"], 1, "grace must be positive"),
    ],
)
def test_bad_schedules_are_refused_in_one_line(cli: Any, argv: list[str], code: int, message: str) -> None:
    if code == 2:
        with pytest.raises(SystemExit) as exit:
            cli("schedule", "n", "i", *argv)
        assert exit.value.code == 2
        return
    got, _, err = cli("schedule", "n", "i", *argv)
    assert got == code
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_skip_without_grace_gets_the_default_grace(cli: Any) -> None:
    code, out, err = cli("schedule", "n", "i", "--every", "5s", "--misfire", "skip", "--format", "json")
    assert code == 0, err
    assert (json.loads(out)["misfire"], json.loads(out)["grace"]) == ("skip", 1.0)
    code, out, err = cli("schedule", "n", "j", "--every", "5s", "--misfire", "skip", "--grace", "1m")
    assert code == 0, err
    code, out, _ = cli("schedules", "n", "--format", "json")
    assert {row["id"]: row["grace"] for row in json.loads(out)} == {"i": 1.0, "j": 60.0}
    code, out, _ = cli("schedule", "n", "k", "--every", "5s", "--format", "json")
    assert json.loads(out)["grace"] is None


def test_a_spread_schedule_shows_its_window_and_offset(cli: Any) -> None:
    from rehydrate._schedules import spread_offset

    code, out, err = cli(
        "schedule", "n", "user-7", "--cron", "0 8 * * *", "--spread", "10m", "--format", "text"
    )
    assert code == 0, err
    assert "spread 10m: runs" in out
    code, out, _ = cli("schedules", "n", "--format", "json")
    (row,) = json.loads(out)
    assert (row["spread"], row["offset"]) == (600.0, pytest.approx(spread_offset("user-7", 600.0)))
    code, out, _ = cli("schedule", "n", "plain", "--every", "1h", "--format", "json")
    assert (json.loads(out)["spread"], json.loads(out)["offset"]) == (None, 0.0)


@pytest.mark.parametrize(
    ("every", "shown"),
    [("5s", "every 5s"), ("90s", "every 1m30s"), ("1h30m", "every 1h30m"), ("1d", "every 1d"),
     ("250ms", "every 250ms"), ("5400", "every 1h30m")],
)  # fmt: skip
def test_schedules_print_durations_as_they_are_written(cli: Any, every: str, shown: str) -> None:
    """``--every 5s`` is listed as ``every 5s`` (it was ``every 0:00:05``), and what is listed can
    be given back to ``--every``; a cron is listed with its zone."""
    code, out, err = cli("schedule", "n", "e", "--every", every, "--format", "text")
    assert code == 0, err
    assert out.startswith(f"scheduled e in n: {shown}, next run ")
    assert cli("schedule", "n", "c", "--cron", "0 9 * * MON-FRI", "--tz", "Europe/Paris")[0] == 0
    code, out, _ = cli("schedules", "n", "--format", "text")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[:3] == ["NAME", "ID", "TRIGGER"]
    listed = {row.split()[1]: row for row in rows}
    assert f" {shown} " in listed["e"]
    assert " cron 0 9 * * MON-FRI (Europe/Paris) " in listed["c"]
    again = shown.removeprefix("every ")
    assert cli("schedule", "n", "again", "--every", again)[0] == 0  # what is listed is typed back
    code, out, _ = cli("schedules", "n", "--format", "json")
    triggers = {row["id"]: row["trigger"] for row in json.loads(out)}
    assert triggers["again"] == triggers["e"]


def test_schedules_limit(cli: Any) -> None:
    for name, id in [("a", "1"), ("a", "2"), ("b", "3")]:
        assert cli("schedule", name, id, "--every", "1h")[0] == 0
    code, out, _ = cli("schedules", "--format", "json", "--limit", "2")
    assert code == 0
    assert [(r["name"], r["id"]) for r in json.loads(out)] == [("a", "1"), ("a", "2")]
    code, out, _ = cli("schedules", "b", "--format", "json", "--limit", "5")
    assert code == 0
    assert [(r["name"], r["id"]) for r in json.loads(out)] == [("b", "3")]
    code, _, err = cli("schedules", "--limit", "0")
    assert code == 1
    assert "--limit: invalid number '0': it must be at least 1" in err


def test_the_demo_shows_a_schedule_firing() -> None:
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", "demo", "--elements", "40", "--seconds", "1"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found = re.search(
        r"'heartbeat' Every\(0\.25s\) ran (\d+) occurrences, each once, on its grid: (.*)", done.stdout
    )
    assert found is not None, done.stdout
    assert int(found.group(1)) >= 3
    assert found.group(2).startswith("+0.00s, +0.25s, +0.50s")


def test_the_command_offers_every_misfire_policy() -> None:
    from rehydrate._core._triggers import MISFIRE
    from rehydrate.cli._schedules import _MISFIRE

    assert _MISFIRE == MISFIRE
