"""The ``rehydrate`` command: ReDe's verbs, stats, dead letters and the error paths, against every store.

The verbs run in this process through ``rehydrate.cli._main.run`` (the memory store is lent to it,
since a memory store lives only as long as one command); ``demo`` and ``bench`` run as real
subprocesses. Worker signal handling is in ``test_cli_worker.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from rehydrate import Retry, Scheduler
from rehydrate.abc import Store
from rehydrate.cli._common import duration
from rehydrate.cli._main import run
from rehydrate.stores import MemoryStore
from tests.redis_server import shared_server_url

ROOT = Path(__file__).resolve().parent.parent

#: The Redis database the CLI tests use (flushed before each), away from the store tests' prefixes.
REDIS_DB = 11

Result = tuple[int, str, str]


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """The command configures structlog for the process; give the other tests their default back."""
    yield
    structlog.reset_defaults()


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
    ttl = cli.json("push", "jobs", "2", "--id", "future", "--at", "2050-01-01T00:00:00")["ttl"]
    assert ttl > 20 * 365 * 86400
    monkeypatch.setattr(sys, "stdin", __import__("io").StringIO('{"from": "stdin"}'))
    cli.json("push", "jobs", "-", "--id", "piped")
    assert cli.json("look", "jobs", "piped") == {"from": "stdin"}


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
    assert "1 due elements removed" in err


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
    assert cli.json("stats") == [
        {
            "name": "jobs",
            "size": 1,
            "due": 0,
            "claimed": 0,
            "dead": 3,
            "next_due": pytest.approx(3600, abs=5),
        },
        {"name": "other", "size": 1, "due": 1, "claimed": 0, "dead": 0, "next_due": 0.0},
    ]
    assert [row["name"] for row in cli.json("stats", "other")] == ["other"]
    letters = cli.json("dead", "jobs")
    assert [d["id"] for d in letters] == ["a", "b", "c"]
    assert letters[0]["element"] == {"n": "a"}
    assert letters[0]["attempts"] == 1
    assert "boom" in letters[0]["error"]
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


def test_stats_watch(cli: CLI) -> None:
    cli.json("push", "jobs", "1")
    code, out, _ = cli("stats", "--watch", "--interval", "10ms", "--count", "3")
    assert code == 0
    frames = [json.loads(line) for line in out.splitlines()]
    assert len(frames) == 3
    assert all(frame["dehydrators"][0]["size"] == 1 for frame in frames)
    code, out, _ = cli("stats", "--watch", "--interval", "0", "--count", "2", "--format", "text")
    assert out.count("rehydrate stats") == 2


# -- mistakes: one line, non-zero ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["push", "jobs", "{bad"], 1, "invalid JSON payload '{bad'"),
        (["push", "jobs", "1", "--replace"], 1, "--replace needs --id"),
        (["push", "jobs", "1", "--delay", "5x"], 2, "invalid duration '5x'"),
        (["push", "jobs", "1", "--at", "tomorrow"], 2, "invalid time 'tomorrow'"),
        (["--store", "ftp://host", "ttn", "jobs"], 1, "unsupported store URL 'ftp://host'"),
        (["ttn", "jobs", "--store", "ftp://host"], 1, "unsupported store URL 'ftp://host'"),
        (["poll", "jobs", "--limit", "0"], 2, "it must be at least 1"),
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
        if "--store" in argv or argv[0] in ("worker", "bench", "frobnicate")
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


@pytest.mark.parametrize("name", ["scheduler", "sqlite", "workers", "redis", "core", "push-floor"])
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
