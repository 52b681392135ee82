"""``rehydrate bench``: run the scripts in ``benchmarks/`` one after another and print their tables.

The benchmarks live in the source tree, not in the installed package (they need the baselines and
servers beside them), so this finds ``benchmarks/`` next to the package, in the current directory,
or where ``--dir`` says. Each runs in its own process (a clean heap, a fair GC), with a progress
line on stderr while it works.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Final

from rehydrate.cli._common import CLIError
from rehydrate.cli._parser import Commands, exits

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

#: name -> (script, extra arguments for --quick)
BENCHMARKS: Final = {
    "core": ("bench_core.py", ["--quick"]),
    "push-floor": ("bench_push_floor.py", ["--quick", "--repeat", "3"]),
    "scheduler": ("bench_scheduler.py", ["--n", "5000", "--repeat", "1"]),
    "sqlite": ("bench_sqlite.py", ["--n", "5000"]),
    "redis": ("bench_redis.py", ["--quick"]),
    "workers": ("bench_workers.py", ["--n", "5000", "--repeat", "1"]),
    "redis-lateness": ("bench_redis_lateness.py", ["--quick"]),
    "defer": ("bench_defer.py", ["--quick"]),
    "retries": ("bench_retries.py", ["--n", "1000", "--repeat", "1"]),
    "schedules": ("bench_schedules.py", ["--quick", "--peers", ""]),
    "cli": ("bench_cli.py", ["--n", "5"]),
}
_SPINNER: Final = "|/-\\"


def find_directory(given: str | None) -> Path:
    from pathlib import Path

    if given is not None:
        path = Path(given)
        if not path.is_dir():
            raise CLIError(f"--dir {given!r} is not a directory")
        return path
    candidates = [Path(__file__).resolve().parents[2] / "benchmarks", Path.cwd() / "benchmarks"]
    for path in candidates:
        if (path / BENCHMARKS["core"][0]).is_file():
            return path
    raise CLIError(
        "benchmarks/ not found: run this from a checkout of rehydrate's source, or pass --dir PATH"
    )


async def _run_one(
    name: str, command: list[str], cwd: Path, show_progress: bool
) -> tuple[int, str, str, float]:
    import subprocess

    import anyio

    started = time.monotonic()
    result: list[subprocess.CompletedProcess[bytes]] = []
    finished = anyio.Event()

    async def execute() -> None:
        result.append(await anyio.run_process(command, cwd=cwd, check=False, stdin=subprocess.DEVNULL))
        finished.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(execute)
        tick = 0
        while not finished.is_set():
            if show_progress:
                elapsed = time.monotonic() - started
                line = f"\r  {_SPINNER[tick % 4]} {name}: running, {elapsed:5.0f}s"
                print(line, end="", file=sys.stderr, flush=True)
            tick += 1
            with anyio.move_on_after(0.25):
                await finished.wait()
    if show_progress:
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr, flush=True)
    done = result[0]
    return (
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
        (time.monotonic() - started),
    )


async def bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    directory = find_directory(args.dir)
    chosen = args.names or list(BENCHMARKS)
    unknown = [name for name in chosen if name not in BENCHMARKS]
    if unknown:
        raise CLIError(f"unknown benchmark {unknown[0]!r}: choose from {', '.join(BENCHMARKS)}")
    failed = 0
    show_progress = sys.stderr.isatty()
    for i, name in enumerate(chosen, 1):
        script, quick = BENCHMARKS[name]
        path = directory / script
        if not path.is_file():
            raise CLIError(f"benchmark {name!r}: {path} not found")
        command = [sys.executable, str(path), *(quick if args.quick else [])]
        print(
            f"== [{i}/{len(chosen)}] {name}: {' '.join([Path(sys.executable).name, script, *command[2:]])}",
            flush=True,
        )
        code, out, err, elapsed = await _run_one(name, command, directory.parent, show_progress)
        print(out.rstrip(), flush=True)
        if code != 0:
            failed += 1
            tail = "\n".join(err.strip().splitlines()[-15:])
            print(f"rehydrate: benchmark {name!r} failed (status {code}):\n{tail}", file=sys.stderr)
        else:
            print(f"-- {name}: {elapsed:.0f}s\n", flush=True)
    return 1 if failed else 0


def register(commands: Commands) -> None:
    """Add ``rehydrate bench``."""
    command = commands.add(
        "bench",
        "run the benchmarks in benchmarks/ and print their tables",
        "Run the benchmark scripts of a source checkout, one after the other, and print their tables.",
        exits("all ran", "one failed (its output is shown), or an error"),
        run,
    )
    command.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"which to run: {', '.join(BENCHMARKS)} (default: all)",
    )
    command.add_argument("--quick", action="store_true", help="smaller runs: minutes, not tens of minutes")
    command.add_argument("--dir", help="the benchmarks directory (default: found beside the package or in .)")


def run(args: argparse.Namespace) -> int:
    import anyio

    return anyio.run(bench, args)
