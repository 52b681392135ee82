"""Dramatiq's side of ``benchmarks/bench_limits.py``: the same jobs under ``ConcurrentRateLimiter`` /
``WindowRateLimiter`` on its Redis backend.

Run by ``bench_limits.py`` with the interpreter of Dramatiq's own virtual environment, in one of
two roles, each given the path of the scenario's JSON file:

* ``worker``: one process, a ``dramatiq.Worker`` with ``threads`` threads on a ``RedisBroker``,
  until SIGTERM (SIGKILL in the crash scenario: nothing is cleaned up, as in a real crash);
* ``produce``: sends the scenario's messages (``jobs``: ``[id, key, due wall time]``), each with
  the delay that makes it due at its time, then exits.

A job is what Dramatiq's documentation shows for a limit: ``with limiter.acquire():`` around the
work, so that a full limit raises ``RateLimitExceeded`` and the ``Retries`` middleware sends the
message again after a backoff. ``max_retries=None``: a message is retried until it runs (Dramatiq's
default, 20, would dead-letter work that a busy limit keeps out; that is not what is measured
here); ``min_backoff``/``max_backoff`` come from the scenario (Dramatiq's default minimum, 15 s,
would make every comparison meaningless). Each job writes, with one ``write`` on an ``O_APPEND``
descriptor of a per-process file: ``S <id> <wall> 1`` when it has its slot and starts, ``E <id>
<wall>`` when its work is done (before the slot is released), ``W <id> <wall>`` when the limit
refused it (a delivery that could not run).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.errors import RateLimitExceeded
from dramatiq.rate_limits import ConcurrentRateLimiter, WindowRateLimiter
from dramatiq.rate_limits.backends import RedisBackend

spec: dict[str, Any] = json.loads(Path(sys.argv[2]).read_text())
broker = RedisBroker(url=spec["redis"], heartbeat_timeout=int(spec["lease"] * 1000))
dramatiq.set_broker(broker)
backend = RedisBackend(url=spec["redis"])

_fd: int | None = None


def stamp(kind: str, i: int, extra: str = "") -> None:
    global _fd
    now = time.time()
    if _fd is None:
        path = os.path.join(spec["stamps"], f"dramatiq-{os.getpid()}.stamps")
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, f"{kind} {i} {now:.6f}{extra}\n".encode())


def limiters(key: str) -> list[Any]:
    """The scenario's limits, as Dramatiq spells them, for the job's key."""
    out: list[Any] = []
    for kind, n, per in spec["limits"]:
        name = f"bench-limit-{kind}-{key}"
        if kind == "concurrency":
            out.append(ConcurrentRateLimiter(backend, name, limit=n, ttl=int(spec["lease"] * 1000)))
        else:
            out.append(WindowRateLimiter(backend, name, limit=n, window=int(per)))
    return out


@dramatiq.actor(
    queue_name="bench",
    max_retries=None,
    min_backoff=spec["min_backoff_ms"],
    max_backoff=spec["max_backoff_ms"],
    time_limit=3_600_000,
)
def job(i: int, key: str) -> None:
    held: list[Any] = []
    try:
        for limiter in limiters(key):
            cm = limiter.acquire()
            cm.__enter__()  # raises RateLimitExceeded when full
            held.append(cm)
    except RateLimitExceeded:
        stamp("W", i)
        for cm in reversed(held):
            cm.__exit__(None, None, None)
        raise
    try:
        stamp("S", i, " 1")
        time.sleep(spec["job_s"])
        stamp("E", i)
    finally:
        for cm in reversed(held):
            cm.__exit__(None, None, None)


def worker() -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    w = dramatiq.Worker(broker, worker_threads=spec["threads"], worker_timeout=100)
    w.start()
    open(os.path.join(spec["stamps"], f"ready-{os.getpid()}"), "w").close()
    stop.wait()
    w.stop(timeout=10_000)
    return 0


def produce() -> int:
    now = time.time()
    for i, key, due in spec["jobs"]:
        delay = int(max(0.0, due - time.time()) * 1000)
        job.send_with_options(args=(i, key), delay=delay or None)
    print(json.dumps({"sent": len(spec["jobs"]), "took_s": time.time() - now}))
    return 0


if __name__ == "__main__":
    role = sys.argv[1]
    sys.exit({"worker": worker, "produce": produce}[role]())
