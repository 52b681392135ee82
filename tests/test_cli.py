"""The ``rehydrate`` command: ReDe's verbs, stats, dead letters and the error paths, against every store.

The verbs run in this process through ``rehydrate.cli._main.run`` (the memory store is lent to it,
since a memory store lives only as long as one command); ``demo`` and ``bench`` run as real
subprocesses. Worker signal handling is in ``test_cli_worker.py``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Generator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from rehydrate import Retry, Scheduler
from rehydrate.abc import Store
from rehydrate.cli._common import duration
from rehydrate.cli._main import run
from rehydrate.stores import MemoryStore, open_store
from tests import no_sniffio
from tests.redis_server import shared_server_url

ROOT = Path(__file__).resolve().parent.parent

#: The Redis database the CLI tests use (flushed before each), away from the store tests' prefixes.
REDIS_DB = 11

Result = tuple[int, str, str]


class CLI:
    """Runs the command against one store, the way a shell would (or lending the memory store)."""

    def __init__(self, kind: str, url: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.kind = kind
        self.url = url
        self.memory = MemoryStore() if kind == "memory" else None
        if self.memory is not None:
            anyio.run(self.memory.open)  # lent open, as a store given to a scheduler is
        self._capsys = capsys

    def __call__(self, *argv: str) -> Result:
        self._capsys.readouterr()
        if self.memory is not None:
            code = run(list(argv), store=self.memory)
        else:
            code = run(["--store", self.url, *argv])
        out, err = self._capsys.readouterr()
        return code, out, err

    def json(self, *argv: str) -> Any:
        code, out, err = self(*argv)
        assert code == 0, err
        return json.loads(out)

    def store(self) -> Store | str:
        return self.memory if self.memory is not None else self.url


@pytest.fixture(params=["memory", "sqlite", "redis"])
def cli(request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> CLI:
    kind = request.param
    if kind == "memory":
        url = "memory://"
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'cli.db'}"
    else:
        url = shared_server_url(request.config).rsplit("/", 1)[0] + f"/{REDIS_DB}"
        anyio.run(_flush, url)
    return CLI(kind, url, capsys)


async def _flush(url: str) -> None:
    import coredis

    async with coredis.Redis.from_url(url) as client:
        await client.flushdb()


# -- arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1500ms", 1.5),
        ("5s", 5),
        ("2m", 120),
        ("1h", 3600),
        ("1d", 86400),
        ("1m30s", 90),
        ("2.5", 2.5),
        (" 0 ", 0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "s", "-1s", "-3", "1s5", "nan", "inf", "5 s", "ms"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(Exception, match="invalid duration"):
        duration(text)


# -- the verbs -----------------------------------------------------------------------------------


def test_verbs_round_trip(cli: CLI) -> None:
    assert cli.json("push", "jobs", '{"to": "ann"}', "--id", "a") == {"id": "a", "ttl": 0.0}
    later = cli.json("push", "jobs", '"later"', "--delay", "1h")
    assert later["ttl"] == 3600
    assert isinstance(later["id"], str)
    assert later["id"]
    assert cli.json("push", "jobs", "[1, 2]", "--id", "b", "--delay", "0") == {"id": "b", "ttl": 0.0}
    assert cli.json("xpoll", "jobs") == ["a", "b"]
    assert cli.json("xpoll", "jobs", "--limit", "1") == ["a"]
    assert cli.json("look", "jobs", "a") == {"to": "ann"}
    assert cli.json("update", "jobs", "a", '{"to": "bob"}') == {"to": "ann"}
    assert cli.json("look", "jobs", "a") == {"to": "bob"}
    assert cli("push", "jobs", "1", "--id", "a")[0] == 1  # already there
    assert cli.json("push", "jobs", '{"to": "cy"}', "--id", "a", "--replace") == {"id": "a", "ttl": 0.0}
    assert cli.json("look", "jobs", "a") == {"to": "cy"}
    assert cli.json("update", "jobs", "a", '{"to": "bob"}') == {"to": "cy"}
    assert cli.json("ttn", "jobs") == 0.0
    assert cli.json("xack", "jobs", "a", later["id"]) == [
        {"id": "a", "element": {"to": "bob"}},
        {"id": later["id"], "element": None},  # not due: XACK leaves it alone
    ]
    assert cli.json("poll", "jobs") == [[1, 2]]
    assert cli.json("poll", "jobs") == []
    assert 3590 < cli.json("ttn", "jobs") <= 3600
    assert cli.json("pull", "jobs", later["id"]) == "later"
    assert cli.json("ttn", "jobs") is None
    assert cli.json("stats") == []


def test_push_at_and_stdin(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.json("push", "jobs", "1", "--id", "past", "--at", "2001-01-01T00:00:00+00:00")["ttl"] == 0.0
    ttl = cli.json("push", "jobs", "2", "--id", "future", "--at", "2050-01-01T00:00:00Z")["ttl"]
    assert ttl > 20 * 365 * 86400
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO('{"from": "stdin"}'))
    cli.json("push", "jobs", "-", "--id", "piped")
    assert cli.json("look", "jobs", "piped") == {"from": "stdin"}


def test_a_time_or_duration_the_api_refuses_is_refused_and_nothing_is_pushed(cli: CLI) -> None:
    """``--at`` without an offset was taken as UTC where ``defer(at=naive)`` is refused, and
    ``--delay -5s`` was "expected one argument": each is now the API's refusal, exit status 1."""
    for argv, says in [
        (["--at", "2026-12-24T18:00:00"], "--at: invalid time '2026-12-24T18:00:00': add a UTC offset or Z"),
        (["--at", "2026-12-24 18:00"], "--at: invalid time '2026-12-24 18:00': add a UTC offset or Z"),
        (["--delay", "-5s"], "--delay: invalid duration '-5s': it must not be negative"),
        (["--delay=-5s"], "--delay: invalid duration '-5s': it must not be negative"),
        (["--delay", "-.5"], "--delay: invalid duration '-.5': it must not be negative"),
        (["--delay", "5x"], "--delay: invalid duration '5x': use a number of seconds or e.g. 1500ms"),
    ]:
        code, out, err = cli("push", "jobs", "1", "--id", "a", *argv)
        assert (code, out) == (1, ""), err
        (line,) = err.splitlines()
        assert line.startswith(f"rehydrate: error: {says}")
    assert cli("look", "jobs", "a")[0] == 1  # nothing was pushed
    for at in ("2026-12-24T18:00:00Z", "2026-12-24T18:00:00+01:00", "2026-12-24T18:00:00-05:00"):
        assert cli("push", "jobs", "1", "--at", at)[0] == 0
    assert cli.json("push", "jobs", "1", "--id", "now", "--delay", "-0s")["ttl"] == 0.0


def test_missing_elements_exit_1(cli: CLI) -> None:
    cli.json("push", "jobs", "null", "--id", "n")
    assert cli("look", "jobs", "n") == (0, "null\n", "")  # a null payload is there; a missing id is not
    assert cli("look", "jobs", "nope")[:2] == (1, "null\n")
    code, out, err = cli("pull", "jobs", "nope", "--format", "text")
    assert (code, out) == (1, "")
    assert "no element 'nope' in 'jobs'" in err
    code, _, err = cli("update", "jobs", "nope", "1")
    assert code == 1
    assert err.strip().endswith("no element 'nope' in 'jobs' to update")


def test_text_output(cli: CLI) -> None:
    code, out, _ = cli("push", "jobs", '{"n": 1}', "--id", "a", "--delay", "90s", "--format", "text")
    assert (code, out) == (0, "pushed a to jobs, due in 90.0s\n")
    cli("push", "jobs", "2", "--id", "b", "--format", "text")
    assert cli("ttn", "jobs", "--format", "text")[1] == "now\n"
    assert cli("look", "jobs", "a", "--format", "text")[1] == '{"n": 1}\n'
    code, out, _ = cli("stats", "--format", "text")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["NAME", "SIZE", "DUE", "CLAIMED", "DEAD", "NEXT", "DUE"]
    assert row.split() == ["jobs", "2", "1", "0", "0", "now"]
    code, out, err = cli("poll", "jobs", "--format", "text")
    assert out == "2\n"
    assert "(1 due element removed from jobs)" in err
    cli("push", "jobs", "3", "--id", "c")
    cli("push", "jobs", "4", "--id", "d")
    assert cli("poll", "jobs", "--format", "text")[2] == "(2 due elements removed from jobs)\n"
    assert cli("push", "jobs", "5", "--id", "e", "--format", "text")[1] == "pushed e to jobs, due now\n"


# -- operating: stats, dead letters, requeue -----------------------------------------------------


async def _dead_letters(store: Store | str, ids: list[str]) -> None:
    scheduler = Scheduler(store)

    @scheduler.handler("jobs", retry=Retry(attempts=1))
    async def fail(element: Any) -> None:
        raise ValueError(f"boom {element}")

    async with scheduler:
        for id in ids:
            await scheduler.defer("jobs", {"n": id}, id=id)
        with anyio.fail_after(10):
            while scheduler.stats().dead_lettered < len(ids):  # noqa: ASYNC110 - polls stats, no event
                await anyio.sleep(0.01)


def test_stats_dead_and_requeue(cli: CLI) -> None:
    anyio.run(_dead_letters, cli.store(), ["a", "b", "c"])
    cli.json("push", "jobs", "1", "--id", "waiting", "--delay", "1h")
    cli.json("push", "other", "1", "--id", "x")
    rows = cli.json("stats")
    next_due_at = [datetime.fromisoformat(row.pop("next_due_at")) for row in rows]
    assert rows == [
        {
            "name": "jobs",
            "size": 1,
            "due": 0,
            "claimed": 0,
            "dead": 3,
            "next_due_in": pytest.approx(3600, abs=5),
            "limit": None,
        },
        {"name": "other", "size": 1, "due": 1, "claimed": 0, "dead": 0, "next_due_in": 0.0, "limit": None},
    ]
    now = datetime.now(UTC)
    assert (next_due_at[0] - now).total_seconds() == pytest.approx(3600, abs=5)
    assert (next_due_at[1] - now).total_seconds() == pytest.approx(0, abs=5)
    assert [row["name"] for row in cli.json("stats", "other")] == ["other"]
    letters = cli.json("dead", "jobs")
    assert [d["id"] for d in letters] == ["a", "b", "c"]
    assert letters[0]["element"] == {"n": "a"}
    assert letters[0]["attempts"] == 1
    assert "boom" in letters[0]["error"]
    failed_at = datetime.fromisoformat(letters[0]["failed_at"])  # absolute, and relative beside it
    assert (datetime.now(UTC) - failed_at).total_seconds() == pytest.approx(letters[0]["failed_ago"], abs=5)
    assert len(cli.json("dead", "jobs", "--limit", "2")) == 2
    code, out, _ = cli("dead", "jobs", "--format", "text")
    assert out.splitlines()[0].split()[:2] == ["ID", "ATTEMPTS"]
    assert len(out.splitlines()) == 4

    assert cli.json("requeue", "jobs", "a", "--delay", "1h") == {"requeued": ["a"], "missing": []}
    code, out, _ = cli("requeue", "jobs", "b", "zz")
    assert code == 1
    assert json.loads(out) == {"requeued": ["b"], "missing": ["zz"]}
    assert cli.json("requeue", "jobs") == {"requeued": ["c"], "missing": []}
    assert [d["id"] for d in cli.json("dead", "jobs")] == []
    assert cli.json("look", "jobs", "a") == {"n": "a"}
    (jobs,) = cli.json("stats", "jobs")
    assert (jobs["size"], jobs["due"], jobs["dead"]) == (4, 2, 0)


async def _beat(store: Store | str, worker: str, data: dict[str, Any], ttl: float) -> None:
    if isinstance(store, str):
        async with open_store(store) as opened:
            await opened.heartbeat(worker, data, ttl=ttl)
    else:
        await store.heartbeat(worker, data, ttl=ttl)


def test_workers(cli: CLI) -> None:
    cli.json("push", "jobs", "1")  # a store there (a reading verb creates no SQLite file)
    assert cli.json("workers") == []
    code, out, _ = cli("workers", "--format", "text")
    assert (code, out) == (0, "no workers: none is running, or they send no heartbeats to this store\n")
    handlers = {
        "jobs": {"concurrency": 10, "in_flight": 3, "lateness_p50": 0.002, "lateness_p99": 0.04},
        "mail": {"concurrency": 2, "in_flight": 0, "lateness_p50": None, "lateness_p99": None},
    }
    data = {
        "host": "box",
        "pid": 42,
        "backend": "trio",
        "version": "9.9",
        "started_at": 1_700_000_000.0,
        "handlers": handlers,
        "totals": {"in_flight": 3, "lateness_p50": 0.002, "lateness_p99": 0.04},
    }
    anyio.run(_beat, cli.store(), "box:42:abc", data, 60.0)
    anyio.run(_beat, cli.store(), "box:7:dead", {"host": "box", "pid": 7}, 0.001)
    time.sleep(0.005)  # past its ttl (an in-memory store can be read again within the millisecond)
    rows = cli.json("workers")
    assert [(r["id"], r["alive"]) for r in rows] == [("box:42:abc", True), ("box:7:dead", False)]
    alive, dead = rows
    assert alive["handlers"] == handlers
    assert (alive["host"], alive["pid"], alive["backend"], alive["in_flight"]) == ("box", 42, "trio", 3)
    assert alive["started_at"] == "2023-11-14T22:13:20+00:00"
    assert alive["last_seen_ago"] == pytest.approx(0, abs=5)
    assert alive["expires_in"] == pytest.approx(60, abs=5)
    assert dead["expires_in"] < 0
    assert (dead["handlers"], dead["in_flight"], dead["lateness_p99"]) == ({}, None, None)
    code, out, _ = cli("workers", "--format", "text")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["STATUS", "ID", "HOST", "PID"]
    assert lines[1].split()[:4] == ["alive", "box:42:abc", "box", "42"]
    assert "jobs 3/10, mail 0/2" in lines[1]
    assert "2ms / 40ms" in lines[1]
    assert lines[2].split()[:2] == ["EXPIRED", "box:7:dead"]
    assert lines[3] == "1 worker alive, 1 expired"


def test_stats_watch(cli: CLI) -> None:
    cli.json("push", "jobs", "1")
    code, out, _ = cli("stats", "--watch", "--interval", "100ms", "--count", "2")
    assert code == 0
    frames = [json.loads(line) for line in out.splitlines()]
    assert len(frames) == 2
    assert all(frame["dehydrators"][0]["size"] == 1 for frame in frames)
    assert all(datetime.fromisoformat(frame["at"]).tzinfo is not None for frame in frames)
    code, out, _ = cli("stats", "--watch", "--interval", "0.1", "--count", "2", "--format", "text")
    assert out.count("rehydrate stats") == 2


def test_stats_watch_interval_has_a_minimum(capsys: pytest.CaptureFixture[str]) -> None:
    """``--interval 0`` redrew 1,000 times a second: below 100ms is refused, as any bad value is."""
    assert run(["--store", "memory://", "stats", "--watch", "--interval", "0", "--count", "3"]) == 1
    assert "--interval: invalid interval '0': it must be at least 100ms" in capsys.readouterr().err


# -- mistakes: one line, non-zero ----------------------------------------------------------------

#: What a bad duration's line says it accepts.
SYNTAX = "use a number of seconds or e.g. 1500ms, 5s, 2m, 1h, 1m30s"
#: What a time without a UTC offset is told.
NAIVE = "add a UTC offset or Z, e.g. 2026-12-24T18:00:00+01:00 or 2026-12-24T18:00:00Z"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["push", "jobs", "{bad"], 1, "invalid JSON payload '{bad'"),
        (["push", "jobs", "1", "--replace"], 2, "--replace needs --id"),
        (["push", "jobs", "NaN"], 1, "NaN is not a JSON number (JSON has no NaN or Infinity)"),
        (["push", "jobs", "[1, -Infinity]"], 1, "-Infinity is not a JSON number"),
        (["push", "jobs", "1e400"], 1, "a number is too large for a float"),
        (["push", "jobs", '"\\ud800"'], 1, "a string in the JSON payload is not Unicode text"),
        (["push", "jobs", '{"\\udfff": 1}'], 1, "a string in the JSON payload is not Unicode text"),
        (["push", "jobs", "1", "--id", "a\udcff"], 1, "the id 'a\\udcff' is not Unicode text"),
        (["stats", "--watch", "--interval", "10ms"], 1, "--interval: invalid interval '10ms'"),
        (["push", "jobs", "1", "--delay", "5x"], 1, f"--delay: invalid duration '5x': {SYNTAX}"),
        (
            ["push", "jobs", "1", "--delay", "-5s"],
            1,
            "--delay: invalid duration '-5s': it must not be negative",
        ),
        (["push", "jobs", "1", "--delay=-5s"], 1, "--delay: invalid duration '-5s': it must not be negative"),
        (["push", "jobs", "1", "--delay", "-1m30s"], 1, "invalid duration '-1m30s': it must not be negative"),
        (["push", "jobs", "1", "--delay", "nan"], 1, "--delay: invalid duration 'nan': it must be finite"),
        (["push", "jobs", "1", "--at", "tomorrow"], 1, "--at: invalid time 'tomorrow': use ISO 8601"),
        (
            ["push", "jobs", "1", "--at", "2026-12-24T18:00:00"],
            1,
            f"--at: invalid time '2026-12-24T18:00:00': {NAIVE}",
        ),
        (["push", "jobs", "1", "--delay", "5s", "--at", "2026-12-24T18:00Z"], 2, "not allowed with argument"),
        (["push", "jobs", "1", "--delay"], 2, "argument --delay: expected one argument"),
        (
            ["requeue", "jobs", "--delay", "-1m"],
            1,
            "--delay: invalid duration '-1m': it must not be negative",
        ),
        (["worker", "json:loads", "--grace", "5x"], 1, f"--grace: invalid duration '5x': {SYNTAX}"),
        (["worker", "json:loads", "--heartbeat", "-5s"], 1, "--heartbeat: invalid duration '-5s'"),
        (["worker", "json:loads", "--concurrency", "0"], 1, "--concurrency: invalid number '0'"),
        (["demo", "--seconds", "soon"], 1, f"--seconds: invalid duration 'soon': {SYNTAX}"),
        (["--store", "ftp://host", "ttn", "jobs"], 1, "unsupported store URL 'ftp://host'"),
        (["ttn", "jobs", "--store", "ftp://host"], 1, "unsupported store URL 'ftp://host'"),
        (["poll", "jobs", "--limit", "0"], 1, "--limit: invalid number '0': it must be at least 1"),
        (["push", "", "1"], 1, "name must not be empty (InvalidArgumentError)"),
        (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
        (["worker", "no_such_module_here:scheduler"], 1, "module 'no_such_module_here' not found"),
        (["worker", "json:loads"], 1, "calling json:loads failed"),
        (["worker", "json:dumps.__doc__"], 1, "is a str, not a rehydrate.Scheduler"),
        (["worker", "json:nothing"], 1, "'json' has no attribute 'nothing'"),
        (["worker", "json"], 1, "use MODULE:ATTR"),
        (["bench", "nope", "--dir", "."], 1, "unknown benchmark 'nope'"),
        (["bench", "--dir", "/no/such/dir"], 1, "--dir '/no/such/dir' is not a directory"),
    ],
)
def test_mistakes_print_one_line(
    argv: list[str], code: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = (
        argv
        if "--store" in argv or argv[0] in ("worker", "bench", "frobnicate", "demo")
        else [
            "--store",
            f"sqlite:///{tmp_path / 'x.db'}",
            *argv,
        ]
    )
    if code == 2:
        with pytest.raises(SystemExit) as exit:
            run(full)
        got = exit.value.code
    else:
        got = run(full)
    _, err = capsys.readouterr()
    assert got == code
    assert len(err.strip().splitlines()) == 1, err
    assert message in err
    assert "Traceback" not in err


def test_a_worker_refuses_a_handler_that_cannot_take_the_element(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It served, and every delivery failed with TypeError, was retried and dead-lettered: now
    the worker does not start, and says which handler in one line."""
    (tmp_path / "noargs_tasks.py").write_text(
        textwrap.dedent(
            """
            from rehydrate import Scheduler

            scheduler = Scheduler()

            @scheduler.handler("emails")
            async def send():
                pass
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "noargs_tasks", raising=False)
    assert run(["worker", "noargs_tasks:scheduler", "--store", "memory://"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "rehydrate: error: importing 'noargs_tasks' failed: InvalidTypeError: the handler of 'emails' "
        "must take one positional argument, the element: noargs_tasks.send() cannot (too many "
        "positional arguments)"
    )


def test_no_store(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("REHYDRATE_STORE", raising=False)
    assert run(["ttn", "jobs"]) == 1
    assert "no store: give --store URL or set REHYDRATE_STORE" in capsys.readouterr().err


def test_store_from_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REHYDRATE_STORE", f"sqlite:///{tmp_path / 'env.db'}")
    assert run(["push", "jobs", "1", "--id", "e"]) == 0
    assert run(["look", "jobs", "e"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1"


def test_unreachable_redis() -> None:
    """In a subprocess, as a user meets it (coredis leaves a failed connection's buffers to the GC)."""
    from tests.redis_server import _free_port

    done = _command("ttn", "jobs", "--store", f"redis://127.0.0.1:{_free_port()}/0")
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "is unavailable after" in done.stderr


# -- demo and bench, as a user runs them ---------------------------------------------------------


def _command(*argv: str, cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rehydrate", *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_demo() -> None:
    done = _command("demo", "--elements", "100", "--seconds", "1")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "deferred 100 elements over 1s to 3 handlers" in out
    assert "cancelled 5 emails" in out
    # 100 elements: 5 doomed (n % 20 == 0), 15 invoices (other n % 5 == 0), 80 emails, 5 cancelled.
    assert "dead-lettered 5 (kept in 'doomed.dead': 5)" in out
    assert "retried       25 (15 invoices failed once, then succeeded; 5 doomed failed 2 times" in out
    assert "lateness      p50" in out
    assert "[########################] 95/95 done" in out
    assert done.stderr == ""  # the expected failures are logged only with -v


def test_bench_runs_the_scripts(tmp_path: Path) -> None:
    good = 'print("| verb | ops/s |")\nprint("| push | 123 |")\n'
    (tmp_path / "bench_scheduler.py").write_text(good + "import sys\nprint(sys.argv[1:])\n")
    (tmp_path / "bench_sqlite.py").write_text('import sys\nprint("half a table")\nsys.exit("it broke")\n')
    done = _command("bench", "scheduler", "--dir", str(tmp_path), "--quick")
    assert done.returncode == 0, done.stderr
    assert "| push | 123 |" in done.stdout
    assert "['--n', '5000', '--repeat', '1']" in done.stdout
    done = _command("bench", "scheduler", "sqlite", "--dir", str(tmp_path))
    assert done.returncode == 1
    assert "| push | 123 |" in done.stdout
    assert "half a table" in done.stdout
    assert "benchmark 'sqlite' failed (status 1)" in done.stderr
    assert "it broke" in done.stderr


def _bench_names() -> list[str]:
    from rehydrate.cli._bench import BENCHMARKS

    return list(BENCHMARKS)


@pytest.mark.parametrize("name", _bench_names())
def test_bench_quick_arguments_are_the_scripts_own(name: str) -> None:
    """``--quick`` passes each real script arguments it accepts (checked by its own parser)."""
    from rehydrate.cli._bench import BENCHMARKS

    script, quick = BENCHMARKS[name]
    probe = textwrap.dedent(
        f"""
        import runpy, sys, argparse
        seen = {{}}
        original = argparse.ArgumentParser.parse_args
        def parse_args(self, args=None, namespace=None):
            seen["args"] = original(self, args, namespace)
            raise SystemExit(0)
        argparse.ArgumentParser.parse_args = parse_args
        sys.argv = [{script!r}, *{quick!r}]
        try:
            runpy.run_path("benchmarks/{script}", run_name="__main__")
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        assert "args" in seen
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_python_dash_m_and_help() -> None:
    done = _command("--help")
    assert done.returncode == 0
    for command in (
        "worker",
        "demo",
        "bench",
        "push",
        "pull",
        "look",
        "poll",
        "xpoll",
        "xack",
        "ttn",
        "update",
    ):
        assert command in done.stdout
    for command in ("stats", "dead", "requeue"):
        assert command in done.stdout


# -- issue 11: nothing lost in printing, one line for every mistake ------------------------------


def _sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'pipe.db'}"


async def _fill(url: str, name: str, elements: list[tuple[str, Any]]) -> None:
    from rehydrate.stores import open_store

    async with open_store(url) as store:
        await store.push_many(name, [(element, 0.0, id) for id, element in elements])


async def _summary(url: str, name: str) -> tuple[int, int, list[str]]:
    """(size, claimed, ids) of ``name``."""
    from rehydrate.stores import open_store

    async with open_store(url) as store:
        summary = await store.summary(name)
        return summary.size, summary.claimed, await store.ids(name)


def _closed_early(*argv: str, read: int = 20) -> tuple[int, bytes, str]:
    """Run the command with its stdout read for ``read`` bytes and then closed (``| head -c 20``)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rehydrate", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    head = process.stdout.read(read)
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    return process.returncode, head, err.decode()


#: Enough output to fill a pipe's buffer (64 KiB on Linux): writing blocks until the reader closes it.
_BIG = 40 * [("e", "x" * 4000)]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_poll_into_a_closed_pipe_removes_nothing(tmp_path: Path, fmt: str) -> None:
    """``rehydrate poll ... | head -c 20``: a quiet exit (141), and every element is still there, due."""
    url = _sqlite_url(tmp_path)
    anyio.run(_fill, url, "bp", [(f"e{i}", element) for i, (_, element) in enumerate(_BIG)])
    code, head, err = _closed_early("poll", "bp", "--format", fmt, "--store", url)
    assert code == 141, err
    assert head
    assert "Traceback" not in err
    assert anyio.run(_summary, url, "bp") == (40, 0, [f"e{i}" for i in range(40)])


@pytest.mark.parametrize("verb", ["pull", "xack"])
def test_pull_and_xack_into_a_closed_pipe_put_back(tmp_path: Path, verb: str) -> None:
    url = _sqlite_url(tmp_path)
    anyio.run(_fill, url, "bp", [("big", "x" * 200_000)])
    code, _, err = _closed_early(verb, "bp", "big", "--store", url)
    assert code == 141, err
    assert "Traceback" not in err
    assert anyio.run(_summary, url, "bp") == (1, 0, ["big"])


@pytest.mark.parametrize("verb", ["look", "dead", "stats", "xpoll", "ttn"])
def test_read_only_verbs_into_a_closed_pipe_exit_quietly(tmp_path: Path, verb: str) -> None:
    url = _sqlite_url(tmp_path)
    elements = [(f"{i:05d}" + "i" * 2000, "x" * 200_000 if i == 0 else i) for i in range(100)]
    anyio.run(_fill, url, "bp", elements)
    anyio.run(_fill, url, "bp.dead", elements)
    argv = {"look": ["bp", elements[0][0]], "dead": ["bp"], "stats": [], "xpoll": ["bp"], "ttn": ["bp"]}[verb]
    code, head, err = _closed_early(verb, *argv, "--format", "text", "--store", url)
    # stats and ttn print a short line: it may well be written in full before the pipe is closed.
    assert code in ((0, 141) if verb in ("stats", "ttn") else (141,)), err
    assert head
    assert "Traceback" not in err
    assert err == ""


def test_lone_surrogates_print_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """An element the output cannot encode (lone surrogates: held by an older version, or by the
    memory store) prints as JSON escapes, and ``poll`` still hands it over."""
    store = MemoryStore()
    anyio.run(_open_and_push, store, "sur", "\ud800 and \U0001f600", "s1")
    assert run(["look", "sur", "s1", "--format", "json"], store=store) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == "\ud800 and \U0001f600"
    assert run(["poll", "sur", "--format", "text"], store=store) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == "\ud800 and \U0001f600"
    assert run(["ttn", "sur"], store=store) == 0
    assert capsys.readouterr().out == "null\n"  # gone: it was printed


async def _open_and_push(store: Store, name: str, element: Any, id: str) -> None:
    await store.open()
    await store.push(name, element, ttl=0, id=id)


@pytest.mark.parametrize(
    "env",
    [{"LC_ALL": "C.UTF-8"}, {"LC_ALL": "C.UTF-8", "PYTHONUTF8": "0", "PYTHONIOENCODING": "utf-8:strict"}],
    ids=["c-utf8", "strict"],
)
def test_stdin_that_is_not_utf8_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    url = _sqlite_url(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", "push", "jobs", "-", "--store", url],
        input=b'"caf\xe9"',
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=60,
    )
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert err.strip().splitlines() == [
        "rehydrate: error: standard input is not UTF-8: byte 0xe9 at offset 4 (JSON payloads are UTF-8 text)"
    ]
    assert anyio.run(_summary, url, "jobs") == (0, 0, [])


def test_stdin_reads_utf8_whatever_the_locale(tmp_path: Path) -> None:
    url = _sqlite_url(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", "push", "jobs", "-", "--id", "c", "--store", url],
        input='"café"'.encode(),
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", "look", "jobs", "c", "--store", url],
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "café"  # escaped for an ASCII output, not a traceback


_NO_TRIO = (
    "import sys; sys.modules['trio'] = None; from rehydrate.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.parametrize(
    "argv", [["demo", "--backend", "trio"], ["worker", "json:loads", "--backend", "trio"]]
)
def test_backend_trio_without_trio(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NO_TRIO, *argv], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "rehydrate: error: --backend trio needs trio: pip install 'rehydrate[trio]'"
    ]


def test_duplicate_id_says_what_to_do(cli: CLI) -> None:
    cli.json("push", "emails", "1", "--id", "dupe")
    code, out, err = cli("push", "emails", "2", "--id", "dupe")
    assert (code, out) == (1, "")
    assert err == (
        "rehydrate: error: an element with id 'dupe' is already in 'emails' (use --replace to re-defer it)\n"
    )


def test_error_line_is_json_with_log_format_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", f"sqlite:///{tmp_path / 'x.db'}"]
    for argv in (
        ["--log-format", "json", "push", "jobs", "{bad"],
        ["push", "jobs", "{bad", "--log-format=json"],
    ):
        assert run([*store, *argv]) == 1
        (line,) = capsys.readouterr().err.splitlines()
        record = json.loads(line)
        assert record["level"] == "error"
        assert record["event"].startswith("invalid JSON payload '{bad'")
        assert datetime.fromisoformat(record["timestamp"]).tzinfo is not None
    assert run(["--log-format", "json", "push", "jobs", "1", "--delay", "5x"]) == 1
    assert json.loads(capsys.readouterr().err)["event"].startswith("--delay: invalid duration '5x'")
    with pytest.raises(SystemExit) as exit:  # a command line that does not parse: still a JSON line
        run(["--log-format", "json", "push", "jobs", "1", "--delay"])
    assert exit.value.code == 2
    assert "expected one argument" in json.loads(capsys.readouterr().err)["event"]


def test_common_options_on_both_sides(cli: CLI) -> None:
    """``--format`` (like ``--store``, ``-q``, ``--log-format``) works before and after the command."""
    assert cli("--format", "text", "push", "jobs", "1", "--id", "a")[1] == "pushed a to jobs, due now\n"
    assert cli("push", "jobs", "1", "--id", "b", "--format", "text")[1] == "pushed b to jobs, due now\n"
    assert cli("--format", "json", "look", "jobs", "a", "--format", "text")[1] == "1\n"  # after wins
    assert cli("-q", "ttn", "jobs")[0] == 0
    assert cli("ttn", "jobs", "-q", "--log-format", "json")[0] == 0


def test_dead_and_stats_agree_on_name_dead(cli: CLI) -> None:
    """``x.dead`` is x's dead letters: ``stats`` counts in x's row what ``dead x`` lists."""
    anyio.run(_dead_letters, cli.store(), ["a"])
    cli.json("push", "jobs.dead", '{"by": "hand"}', "--id", "manual")
    cli.json("push", "lonely.dead", "1", "--id", "m")
    rows = {row["name"]: row for row in cli.json("stats")}
    assert set(rows) == {"jobs", "lonely"}
    for name in ("jobs", "lonely"):
        assert rows[name]["dead"] == len(cli.json("dead", name))
    letters = {d["id"]: d for d in cli.json("dead", "jobs")}
    assert letters["a"]["attempts"] == 1
    assert letters["manual"] == {
        "id": "manual",
        "element": {"by": "hand"},
        "error": None,
        "attempts": None,
        "failed_at": None,
        "failed_ago": None,
    }
    assert len(cli("dead", "jobs", "--format", "text")[1].splitlines()) == 3


def test_dead_suffix_is_the_schedulers() -> None:
    from rehydrate._runner import DEAD_SUFFIX
    from rehydrate.cli._verbs import DEAD_SUFFIX as CLI_DEAD_SUFFIX

    assert CLI_DEAD_SUFFIX == DEAD_SUFFIX


def test_text_ids_are_unambiguous(cli: CLI) -> None:
    ids = ["plain", "two\nlines", '"quoted', " padded ", "tab\there"]
    for id in ids:
        cli.json("push", "jobs", "1", "--id", id)
    lines = cli("xpoll", "jobs", "--format", "text")[1].splitlines()
    assert len(lines) == len(ids)
    assert [line if line == "plain" else json.loads(line) for line in lines] == ids
    assert cli("push", "jobs", "1", "--id", "new\nline", "--format", "text")[1] == (
        'pushed "new\\nline" to jobs, due now\n'
    )


def test_ids_starting_with_a_dash(cli: CLI) -> None:
    cli.json("push", "jobs", "1", "--id=-x")
    assert cli.json("look", "jobs", "--", "-x") == 1
    assert cli.json("xack", "jobs", "--", "-x") == [{"id": "-x", "element": 1}]
    cli.json("push", "jobs", "-1", "--id=-y")  # a negative number is a payload, no -- needed
    assert cli.json("pull", "jobs", "--", "-y") == -1
    assert "--id=-x" in _command("push", "--help").stdout


def test_version() -> None:
    import rehydrate

    done = _command("--version")
    assert done.returncode == 0
    assert done.stdout == f"rehydrate {rehydrate.__version__}\n"
    assert rehydrate.__version__ == importlib.metadata.version("rehydrate") == "0.1.0"


def test_bare_command_prints_help() -> None:
    done = _command()
    assert done.returncode == 2
    assert done.stdout.startswith("usage: rehydrate")
    assert "push" in done.stdout
    assert "Traceback" not in done.stderr


def _parser_commands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    from rehydrate.cli._main import build_parser

    actions = (parser or build_parser())._actions
    (commands,) = (a for a in actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


def test_a_commands_parser_alone_is_the_one_in_the_whole() -> None:
    """A command line that names a command builds that command's parser alone, from its module
    alone (start-up): every command of ``COMMANDS`` is there, in that order, and its help alone is
    its help in the whole parser."""
    from rehydrate.cli._main import COMMANDS, build_parser

    commands = _parser_commands()
    assert list(commands) == [name for names in COMMANDS.values() for name in names]
    for name, whole in commands.items():
        (alone,) = _parser_commands(build_parser(only=name)).values()
        assert alone.format_help() == whole.format_help(), name


def test_a_store_verbs_parser_alone_parses_as_the_whole_one() -> None:
    """A one-shot verb builds its own parser only (start-up); it must read a command line as the
    whole parser does, and its help must be the same."""
    from rehydrate.cli._main import build_parser

    store = ["--store", "sqlite:///x.db", "--format", "json", "-v"]
    lines = {
        "push": ["jobs", '{"a": 1}', "--delay", "2m", "--id", "a", "--replace"],
        "pull": ["jobs", "a"],
        "look": ["jobs", "a"],
        "poll": ["jobs", "--limit", "3"],
        "xpoll": ["jobs"],
        "xack": ["jobs", "a", "b"],
        "ttn": ["jobs"],
        "update": ["jobs", "a", "2"],
        "stats": ["jobs"],
        "dead": ["jobs"],
        "requeue": ["jobs", "a", "--delay", "5s"],
        "workers": [],
    }
    commands = _parser_commands()
    for verb, argv in lines.items():
        whole = vars(build_parser().parse_args(["-q", verb, *argv, *store]))
        alone = vars(build_parser(only=verb).parse_args(["-q", verb, *argv, *store]))
        assert (
            whole.pop("parser").format_help()
            == alone.pop("parser").format_help()
            == (commands[verb].format_help())
        )
        assert whole == alone, verb


def test_every_command_says_what_it_does() -> None:
    for name, parser in _parser_commands().items():
        assert parser.description, name
        assert "exit status" in (parser.epilog or ""), name  # the worker's help is laid out its own way
        for action in parser._actions:
            assert action.help, (name, action.dest)
    pull = _command("pull", "--help").stdout
    assert "  1    no element ID in NAME (prints null as JSON), or an error" in pull
    assert "PULL" in pull


def test_bench_help_names_every_benchmark() -> None:
    from rehydrate.cli._bench import BENCHMARKS

    help = " ".join((_parser_commands()["bench"]._actions[-3].help or "").split())
    assert help == f"which to run: {', '.join(BENCHMARKS)} (default: all)"


def test_completion_bash() -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = _command("completion", "bash").stdout
    probe = textwrap.dedent(
        """
        complete() { :; }
        eval "$SCRIPT"
        ask() {
            COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _rehydrate; echo "${COMPREPLY[*]}"
        }
        ask rehydrate pu
        ask rehydrate --store sqlite:///x.db st
        ask rehydrate push jobs 1 --fo
        ask rehydrate push jobs --format ''
        ask rehydrate completion ''
        ask rehydrate -v demo --backend t
        """
    )
    done = subprocess.run(
        ["bash", "-c", probe],
        env={**os.environ, "SCRIPT": script},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "push pull",
        "stats",
        "--format",
        "auto json text",
        "bash zsh fish",
        "trio",
    ]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_completion_zsh_and_fish_parse(shell: str, tmp_path: Path) -> None:
    done = _command("completion", shell)
    assert done.returncode == 0
    assert "push" in done.stdout
    assert "format" in done.stdout
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed: the script was generated, not parsed")
    (tmp_path / "script").write_text(done.stdout)
    checked = subprocess.run(
        [shell, "-n", str(tmp_path / "script")], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("width", [40, 80, 200])
def test_demo_progress_line_fits_the_terminal(width: int) -> None:
    from rehydrate.cli._demo import _progress_line

    line = _progress_line(Scheduler(), 95, 95, 0.0, width)
    assert len(line) <= width
    assert "95/95 done" in line
    if width >= 120:
        assert line.startswith("[########################] 95/95 done")
        assert "lateness p99" in line
    elif width == 80:
        assert "dead 0" in line
    assert len(_progress_line(Scheduler(), 5, 95, 0.0, 10)) <= 10


def test_verbs_do_not_import_the_scheduler_or_structlog(tmp_path: Path) -> None:
    """What keeps a verb's start-up short (``benchmarks/bench_cli.py`` measures it)."""
    url = _sqlite_url(tmp_path)
    probe = textwrap.dedent(
        f"""
        import sys
        from rehydrate.cli._main import run
        verbs = ["push", "j", "1", "--id", "a"], ["look", "j", "a"], ["poll", "j"], ["stats"], ["dead", "j"]
        for argv in verbs:
            assert run([*argv, "--store", {url!r}]) == 0, argv
        heavy = sorted({{"rehydrate._scheduler", "structlog", "rehydrate.cli._worker", "rehydrate.cli._demo"}}
                       & set(sys.modules))
        assert not heavy, heavy
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr


def test_building_every_commands_parser_imports_nothing_heavy() -> None:
    """Each command module imports what it needs to run inside the function that runs it:
    ``rehydrate --help`` (and completion, which walks the whole parser) stays light."""
    probe = textwrap.dedent(
        """
        import sys
        from rehydrate.cli._main import build_parser
        build_parser().format_help()
        heavy = {"rehydrate._scheduler", "rehydrate.stores._memory", "structlog", "anyio", "asyncio"}
        heavy |= {"subprocess", "socket"}
        assert not heavy & set(sys.modules), sorted(heavy & set(sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr


# -- issue 11: a one-shot verb on SQLite starts no event loop ------------------------------------


def test_one_shot_sqlite_verbs_start_no_event_loop(tmp_path: Path) -> None:
    """What a shell script pays per verb: ``push``, ``look``, ``poll`` on SQLite import neither
    asyncio nor trio and start no thread (``benchmarks/bench_cli.py`` times it); the element goes
    through all the same."""
    url = f"sqlite:///{tmp_path / 'oneshot.db'}"
    probe = textwrap.dedent(
        f"""
        import contextlib, io, json, sys, threading
        from rehydrate.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["push", "q", '{{"to": "ann"}}', "--id", "a", "--store", {url!r}]) == 0
            assert main(["look", "q", "a", "--store", {url!r}]) == 0
            assert main(["poll", "q", "--store", {url!r}]) == 0
        print(json.dumps({{
            "lines": out.getvalue().splitlines(),
            "loops": sorted(m for m in ("asyncio", "trio") if m in sys.modules),
            "threads": threading.active_count(),
        }}))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["loops"] == []
    assert seen["threads"] == 1
    assert [json.loads(line) for line in seen["lines"][1:]] == [{"to": "ann"}, [{"to": "ann"}]]


def test_stats_watch_on_sqlite_still_gets_an_event_loop(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'watch.db'}"
    anyio.run(_fill, url, "w", [("a", 1)])
    done = _command("stats", "--watch", "--count", "2", "--interval", "100ms", "--store", url)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["dehydrators"][0]["size"] for line in done.stdout.splitlines()] == [1, 1]


def test_drive_refuses_a_coroutine_that_suspends() -> None:
    from rehydrate.cli._oneshot import drive

    class Suspend:
        """What an event loop's sleep does underneath: yield to the loop."""

        def __await__(self) -> Generator[None, None, None]:
            yield

    async def needs_a_loop() -> None:
        await Suspend()

    with pytest.raises(RuntimeError, match="needs an event loop"):
        drive(needs_a_loop())


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
@pytest.mark.parametrize("verb", ["pull", "xack"])
def test_put_back_without_sniffio(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, verb: str
) -> None:
    """As on a plain ``pip install 'rehydrate[redis,web]'`` (no sniffio: ``tests/no_sniffio.py``),
    an element printed into a closed pipe is put back, without an event loop (SQLite's one-shot
    verbs) and in one (Redis): it was lost, the put-back failing on ``import sniffio``."""
    if kind == "sqlite":
        url = _sqlite_url(tmp_path)
    else:
        url = shared_server_url(request.config) + f"?prefix=cli-{uuid.uuid4().hex[:12]}"
    anyio.run(_fill, url, "bp", [("big", "x" * 200_000)])
    process = subprocess.Popen(
        no_sniffio.rehydrate(verb, "bp", "big", "--store", url),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdout.read(20)
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert process.returncode == 141, err.decode()
    assert "Traceback" not in err.decode()
    assert anyio.run(_summary, url, "bp") == (1, 0, ["big"])
