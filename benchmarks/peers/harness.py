"""The one method every system in the side-by-side comparison runs (standard library only).

Each ``peer_*.py`` script imports this module in its own virtual environment, wires two calls of
its library into :func:`measure` (defer job ``i`` by ``delay`` seconds; defer job ``i`` to an
absolute wall time) and prints one JSON line for ``run.py``.

* **Lateness**: N jobs (2,000) with delays uniform over [0, spread) s (3 s), deferred one by one
  with the library's normal call (awaited where it is async). Lateness = the wall time at the
  job's first line minus (the wall time just before its enqueue call + its delay).
* **Throughput**: M jobs (10,000) all due at one wall-clock instant, set far enough ahead that
  every enqueue is done before it (twice the time the lateness phase's rate predicts, plus a
  second; ``overrun_s`` says by how much it was not). jobs/s = M /
  (the start of the last job - the due instant): the time a team waits, after the instant, until
  the last of them has started; any polling interval counts.
* **Enqueue/s**: the same M defers, one at a time (``producers`` at once for a concurrent row),
  timed from the first call to the return of the last.

Jobs report back the same way for every system: the job's first line appends ``"<id> <wall
time>"`` to a file (:func:`stamp`: one ``write`` on an ``O_APPEND`` descriptor, safe across threads
and processes); the producer reads the file as it grows. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "STAMPS_ENV",
    "TP_BASE",
    "WARMUP_ID",
    "Stamps",
    "emit",
    "main",
    "measure",
    "stamp",
    "start_worker",
    "stop_worker",
]

STAMPS_ENV = "PEERS_STAMPS"
WARMUP_ID = 999_999_999
TP_BASE = 1_000_000

_fd: int | None = None
_fd_pid: int | None = None
_worker: subprocess.Popen[bytes] | None = None  # watched while waiting: a dead worker ends the wait


def stamp(i: int) -> None:
    """A job's first line: append ``"<id> <wall time>"`` to the stamps file named by ``$PEERS_STAMPS``."""
    now = time.time()
    global _fd, _fd_pid
    if _fd is None or _fd_pid != os.getpid():  # opened once per process (after a fork too)
        _fd = os.open(os.environ[STAMPS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_pid = os.getpid()
    os.write(_fd, b"%d %.6f\n" % (int(i), now))


class Stamps:
    """The producer's view of the stamps file: reads what was appended since the last read."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.touch()
        self._offset = 0
        self._tail = b""
        self.seen: dict[int, float] = {}
        self.duplicates = 0

    def read(self) -> int:
        with self.path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        self._offset += len(chunk)
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()  # an unfinished last line waits for the next read
        for line in lines:
            i, _, t = line.partition(b" ")
            key = int(i)
            if key in self.seen:
                self.duplicates += 1
            else:
                self.seen[key] = float(t)
        return len(self.seen)

    async def wait(self, ids: Iterable[int], timeout: float, what: str) -> None:
        """Until every id in ``ids`` has a stamp; ``TimeoutError`` after ``timeout`` seconds."""
        wanted = set(ids)
        deadline = time.monotonic() + timeout
        while True:
            self.read()
            missing = wanted.difference(self.seen)
            if not missing:
                return
            if _worker is not None and _worker.poll() is not None:
                raise RuntimeError(
                    f"{what}: the worker exited with status {_worker.returncode} (see its log)"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what}: {len(missing)} of {len(wanted)} jobs did not run within {timeout:.0f} s"
                )
            await asyncio.sleep(0.05)


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


EnqueueIn = Callable[[int, float], Awaitable[Any]]
EnqueueAt = Callable[[int, float], Awaitable[Any]]


async def _spread(ids: range, producers: int, call: Callable[[int], Awaitable[None]]) -> None:
    async def one(part: range) -> None:
        for i in part:
            await call(i)

    if producers == 1:
        await one(ids)
    else:
        await asyncio.gather(*(one(ids[k::producers]) for k in range(producers)))


async def measure(
    enqueue_in: EnqueueIn,
    enqueue_at: EnqueueAt,
    *,
    n_late: int,
    n_tp: int,
    spread: float,
    producers: int = 1,
    wait: float = 300.0,
    seed: int = 1,
    stamps_path: str | None = None,
) -> dict[str, Any]:
    """Run both phases (see the module's docstring) and return the figures."""
    stamps = Stamps(stamps_path or os.environ[STAMPS_ENV])

    # A first job proves the worker is up and consuming before anything is timed.
    await enqueue_in(WARMUP_ID, 0.0)
    await stamps.wait([WARMUP_ID], 120.0, "warm-up job")

    rng = random.Random(seed)
    delays = [rng.uniform(0.0, spread) for _ in range(n_late)]
    before = [0.0] * n_late

    async def late_one(i: int) -> None:
        before[i] = time.time()
        await enqueue_in(i, delays[i])

    started = time.perf_counter()
    await _spread(range(n_late), producers, late_one)
    late_enqueue_s = time.perf_counter() - started
    await stamps.wait(range(n_late), spread + wait, "lateness phase")
    lateness = sorted(stamps.seen[i] - (before[i] + delays[i]) for i in range(n_late))

    # The due instant: the lateness phase's enqueue rate says how long M defers take; give them
    # twice that, plus a second (defers to one instant can be slower than spread ones).
    due = time.time() + 2.0 * n_tp * late_enqueue_s / n_late + 1.0

    async def tp_one(i: int) -> None:
        await enqueue_at(TP_BASE + i, due)

    started = time.perf_counter()
    await _spread(range(n_tp), producers, tp_one)
    enqueue_s = time.perf_counter() - started
    overrun = time.time() - due
    await stamps.wait(
        (TP_BASE + i for i in range(n_tp)), max(0.0, due - time.time()) + wait, "throughput phase"
    )
    starts = [stamps.seen[TP_BASE + i] for i in range(n_tp)]
    return {
        "p50_ms": _percentile(lateness, 0.50) * 1000,
        "p99_ms": _percentile(lateness, 0.99) * 1000,
        "max_ms": lateness[-1] * 1000,
        "min_ms": lateness[0] * 1000,
        "jobs_per_s": n_tp / (max(starts) - due),
        "first_start_ms": (min(starts) - due) * 1000,
        "enqueue_per_s": n_tp / enqueue_s,
        "overrun_s": overrun if overrun > 0 else 0.0,
        "duplicates": stamps.duplicates,
    }


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--redis", help="redis://127.0.0.1:PORT/0 of the throwaway server")
    p.add_argument("--n-late", type=int, default=2000)
    p.add_argument("--n-tp", type=int, default=10_000)
    p.add_argument("--spread", type=float, default=3.0)
    p.add_argument("--producers", type=int, default=1)
    p.add_argument("--wait", type=float, default=300.0, help="longest wait for a phase's jobs, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", default="", help="a peer-specific variant (e.g. arq's poll delay)")
    p.add_argument("--worker", action="store_true", help="run as the worker process (internal)")
    return p


def measure_args(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "n_late": args.n_late,
        "n_tp": args.n_tp,
        "spread": args.spread,
        "producers": args.producers,
        "wait": args.wait,
        "seed": args.seed,
    }


def emit(result: dict[str, Any]) -> None:
    """The one JSON line ``run.py`` reads (the last line of standard output)."""
    result.setdefault("python", platform.python_version())
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def main(run: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]], args: argparse.Namespace) -> int:
    """Run a peer's producer side under asyncio and emit its figures, or its error."""
    try:
        result = asyncio.run(run(args))
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        emit({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    emit(result)
    return 0


def start_worker(
    argv: list[str], log: str | os.PathLike[str], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a worker process, its output to ``log``. It stays in the producer's process group, so
    ``run.py`` ends both if a run outlives its time limit."""
    global _worker
    with open(log, "ab") as out:
        _worker = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    return _worker


def stop_worker(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM the worker (each library's warm shutdown), SIGKILL it after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def worker_log() -> str:
    return os.environ[STAMPS_ENV] + ".worker.log"
