"""Limits across worker processes: are they kept, is the capacity used, side by side with Dramatiq.

    python benchmarks/bench_limits.py [--scenarios concurrency,rate,keys,hol,sigkill]
        [--stores redis,sqlite,postgres] [--systems rehydrate,dramatiq] [--jobs 5000] [--repeat 3]
        [--quick] [--write-docs]

Each run starts ``--workers`` (4) worker processes on a fresh store (a throwaway Redis server on a
free loopback port, a temporary SQLite file, or a throwaway PostgreSQL server made by ``initdb``),
pushes the scenario's jobs from this process, and waits until they have run. A job writes ``S <id>
<wall time> <attempt>`` when it starts and ``E <id> <wall time>`` when its work is done (before its
limit is released), one ``write`` on an ``O_APPEND`` descriptor of its process's file; everything
below is computed from those stamps, outside the systems measured. Each worker process runs at most
``--per-process`` (8) jobs at once: Dramatiq's default thread count, the same for both systems.

Scenarios (all jobs ``--job-ms`` (20 ms) of sleep, due at one instant unless said):

* ``concurrency``: ``Concurrency(10)``, ``--jobs`` jobs. Max running at once (must be <= 10) and
  utilization = jobs/s / (10 / job time), jobs/s counted from the due instant to the last end.
* ``rate``: ``Rate(200, per=1 s)``, ``--jobs`` jobs. Max starts in any sliding 1 s window (must be
  <= 200) and utilization = starts after the first window's 200, per second, / 200. A rate counts
  a start when the store grants it, on the store's clock, and the handler starts a little later:
  for rehydrate the windows are also counted from the store's own record of the grants (read from
  where it keeps them, see :class:`StoreStarts`), and each worker stamps the moment
  ``limit_acquire`` answered granted, for the grant-to-start delay.
* ``keys``: 1,000 keys with ``Concurrency(1)`` each, ``--jobs`` jobs (id mod 1,000): never two at
  once for a key; jobs/s against the same jobs with no limits (the ``unlimited`` row) in the same
  run.
* ``hol``: head-of-line. ``Concurrency(1)`` per key; one key with ``--hol-backlog`` (10,000) due at
  once, another with ``--hol-other`` (100) due evenly over ``--hol-spread`` (5 s) from half a second
  later. The other key's lateness (its start minus its due time): p99 (aim under 50 ms).
* ``sigkill``: ``Concurrency(10)``, ``--kill-jobs`` (400) jobs of ``--kill-job-ms`` (200 ms), a lease
  of ``--lease`` (5 s). One second after the due instant, the worker running the most jobs is
  SIGKILLed. Its jobs count as running until the kill (they really stopped then); "slots back" is
  the time from the kill until a job other than the victim's runs in one of the slots it held: at
  most the lease (which counts from the victim's last renewal, before the kill), and not much less
  than the lease minus its renewal interval; never back means the limit lost capacity for good.

Violations are starts that took a limit beyond its bound (the count of running jobs, or of starts
in the sliding window, at that start). Wasted attempts are deliveries that could not run: for
Dramatiq, the ``RateLimitExceeded`` raised in the job (each a message retried with a backoff); for
rehydrate, the starts beyond each job's first and the attempts numbered above 1 (an element waiting
for its limit is not an attempt), and in brackets the claims handed back unrun for want of room
("parked", from the scheduler's stats where they count them: a store round trip each, not an
attempt). Figures are medians of ``--repeat`` runs; violations, the max
concurrency or window and wasted attempts are the worst run's.

Dramatiq (``peers/limits_dramatiq.py``) runs on its Redis backend only, in its own virtual
environment under the temporary directory (made once from ``peers/requirements/dramatiq.txt``; or
``--dramatiq-python``), with ``RedisBroker`` workers of ``--per-process`` threads,
``ConcurrentRateLimiter`` / ``WindowRateLimiter``, ``max_retries=None`` (a refused message is retried
until it runs) and a backoff of ``--dramatiq-backoff`` ms (min,max; Dramatiq's default minimum of
15 s would leave its workers idle for most of every run). ``--write-docs`` writes the tables into
``docs/benchmarks.md`` between its ``<!-- table: limits -->`` markers, the rate's between its
``<!-- table: limits-rate -->`` markers (a run of the rate alone leaves the other block as it is).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# After $PYTHONPATH's entries (which follow the script's directory): a run against another
# checkout's library names it there; before the site-packages.
sys.path.insert(1 + len([p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]), str(ROOT))

SCENARIOS = ["concurrency", "rate", "keys", "hol", "sigkill"]
STORES = ["redis", "sqlite", "postgres"]
SYSTEMS = ["rehydrate", "dramatiq"]
Limit = tuple[str, int, float]  # ("concurrency", n, 0) or ("rate", n, per seconds)
#: A rate counts a start when its slot is granted; the stamp comes a little later (later still on a
#: loaded machine), so two starts granted a window apart can be stamped a little closer. The rate
#: table also gives the most starts in a window this much shorter: what stamps' jitter cannot explain.
STAMP_SLACK = 0.01


@dataclass
class Run:
    """One run's plan: the jobs ``(id, key, due offset s)``, their limits, and when it is done."""

    scenario: str
    label: str  # the row's name within the scenario ("limited", "unlimited")
    limits: list[Limit]
    keyed: bool
    jobs: list[tuple[int, str, float]]
    job_s: float
    lease: float
    done_ids: list[int]  # the ids whose stamp ends the run
    done_on: str = "E"  # "E": their work is done; "S": they have started
    kill_after: float | None = None  # SIGKILL the busiest worker this long after the due instant


def plans(scenario: str, args: argparse.Namespace) -> list[Run]:
    job_s = args.job_ms / 1000
    n = args.jobs
    if scenario == "concurrency":
        jobs = [(i, "all", 0.0) for i in range(n)]
        return [Run(scenario, "limited", [("concurrency", 10, 0)], False, jobs, job_s, 30, list(range(n)))]
    if scenario == "rate":
        jobs = [(i, "all", 0.0) for i in range(n)]
        return [Run(scenario, "limited", [("rate", 200, 1.0)], False, jobs, job_s, 30, list(range(n)))]
    if scenario == "keys":
        jobs = [(i, f"k{i % args.keys}", 0.0) for i in range(n)]
        return [
            Run(scenario, "limited", [("concurrency", 1, 0)], True, jobs, job_s, 30, list(range(n))),
            Run(scenario, "unlimited", [], True, jobs, job_s, 30, list(range(n))),
        ]
    if scenario == "hol":
        hot = [(i, "hot", 0.0) for i in range(args.hol_backlog)]
        other = [
            (args.hol_backlog + j, "other", 0.5 + args.hol_spread * j / args.hol_other)
            for j in range(args.hol_other)
        ]
        done = [i for i, _, _ in other]
        return [Run(scenario, "limited", [("concurrency", 1, 0)], True, hot + other, job_s, 30, done, "S")]
    if scenario == "sigkill":
        jobs = [(i, "all", 0.0) for i in range(args.kill_jobs)]
        return [
            Run(
                scenario,
                "limited",
                [("concurrency", 10, 0)],
                False,
                jobs,
                args.kill_job_ms / 1000,
                args.lease,
                list(range(args.kill_jobs)),
                kill_after=1.0,
            )
        ]
    raise ValueError(scenario)


# -- the rehydrate worker (a process of its own, run as this script with --role worker) ------------


def rehydrate_worker(spec: dict[str, Any]) -> None:
    import anyio

    from rehydrate import Scheduler, current_delivery, open_store

    fd = os.open(
        os.path.join(spec["stamps"], f"rehydrate-{os.getpid()}.stamps"),
        os.O_WRONLY | os.O_APPEND | os.O_CREAT,
        0o644,
    )
    options: dict[str, Any] = {}
    if spec["limits"]:  # imported only here: the runs without limits run on any version
        from rehydrate import Concurrency, Rate

        limits = [
            Concurrency(n) if kind == "concurrency" else Rate(n, per=per) for kind, n, per in spec["limits"]
        ]
        options["limits"] = limits
        if spec["keyed"]:
            options["limit_key"] = lambda element: element["k"]
    job_s = spec["job_s"]

    async def main() -> None:
        store = open_store(spec["url"])
        if spec["limits"]:
            # The moment the store's step answered "granted" (and when it was asked), beside the
            # handler's start: how late a start comes after its grant. The step's holder id is
            # "name/element id/claim token".
            acquire = store.limit_acquire

            async def stamped(limit: str, key: str, holder: str, spec: Any, **kw: Any) -> Any:
                asked = time.time()
                answer = await acquire(limit, key, holder, spec, **kw)
                if answer.granted:
                    i = int(holder.split("/")[1])
                    os.write(fd, b"G %d %.6f %.6f\n" % (i, time.time(), asked))
                return answer

            setattr(store, "limit_acquire", stamped)  # noqa: B010 (a method, not an attribute)
        scheduler = Scheduler(store, grace=10)

        @scheduler.handler(spec["name"], concurrency=spec["threads"], lease=spec["lease"], **options)
        async def job(element: dict[str, Any]) -> None:
            i = element["i"]
            os.write(fd, b"S %d %.6f %d\n" % (i, time.time(), current_delivery().attempt))
            await anyio.sleep(job_s)
            os.write(fd, b"E %d %.6f\n" % (i, time.time()))

        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async with store, scheduler:
                os.close(os.open(os.path.join(spec["stamps"], f"ready-{os.getpid()}"), os.O_CREAT))
                async for _ in signals:
                    break
                # Claims handed back unrun for want of room (not attempts), where the stats say.
                parked = getattr(scheduler.stats(spec["name"]), "parked", None)
                if isinstance(parked, int):
                    os.write(fd, b"P %d %.6f\n" % (parked, time.time()))

    anyio.run(main)


async def rehydrate_produce(url: str, name: str, jobs: list[tuple[int, str, float]], t0: float) -> None:
    from rehydrate import open_store

    async with open_store(url) as store:
        for lo in range(0, len(jobs), 1000):
            batch = jobs[lo : lo + 1000]
            now = time.time()
            await store.push_many(
                name, [({"i": i, "k": key}, max(0.0, t0 + due - now), str(i)) for i, key, due in batch]
            )


# -- stamps and what they say ----------------------------------------------------------------------


@dataclass
class Stamps:
    starts: dict[int, list[tuple[float, int, int]]] = field(default_factory=lambda: defaultdict(list))
    ends: dict[int, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    #: id -> (answered, asked) of each granted ``limit_acquire``, in the worker's clock.
    grants: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    refused: int = 0
    parked: int | None = None


def read_stamps(directory: Path) -> Stamps:
    out = Stamps()
    for path in directory.glob("*.stamps"):
        pid = int(path.stem.rsplit("-", 1)[1])
        for line in path.read_bytes().split(b"\n"):
            parts = line.split()
            if len(parts) < 3:  # the unfinished last line of a file being written
                continue
            kind, i, t = parts[0], int(parts[1]), float(parts[2])
            if kind == b"S":
                out.starts[i].append((t, pid, int(parts[3]) if len(parts) > 3 else 1))
            elif kind == b"E":
                out.ends[i].append((t, pid))
            elif kind == b"G" and len(parts) > 3:
                out.grants[i].append((t, float(parts[3])))
            elif kind == b"W":
                out.refused += 1
            elif kind == b"P":
                out.parked = (out.parked or 0) + i
    return out


def intervals(stamps: Stamps, killed: dict[int, float], until: float) -> list[tuple[int, float, float, int]]:
    """``(id, start, end, pid)`` of every run of a job: a start's end is its process's next end of
    that id; a job that never ended ran until its process was killed, or until ``until``."""
    out = []
    for i, starts in stamps.starts.items():
        ends = sorted(stamps.ends.get(i, []))
        for t, pid, _ in sorted(starts):
            end = next((e for e, p in ends if p == pid and e >= t), None)
            if end is not None:
                ends.remove((end, pid))
            else:
                end = killed.get(pid, until)
            out.append((i, t, end, pid))
    return out


def peak_running(spans: list[tuple[float, float]], limit: int) -> tuple[int, int]:
    """The most spans open at once, and how many starts found ``limit`` or more already open."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    running = peak = over = 0
    for _, step in events:
        running += step
        if step > 0 and running > limit:
            over += 1
        peak = max(peak, running)
    return peak, over


def peak_window(starts: list[float], limit: int, per: float) -> tuple[int, int]:
    """The most starts in any window of ``per`` seconds, and how many starts made one exceed ``limit``."""
    ordered = sorted(starts)
    lo = peak = over = 0
    for hi, t in enumerate(ordered):
        while ordered[lo] <= t - per:
            lo += 1
        count = hi - lo + 1
        peak = max(peak, count)
        if count > limit:
            over += 1
    return peak, over


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def analyse(
    run: Run,
    stamps: Stamps,
    t0: float,
    killed: dict[int, float],
    until: float,
    victim_held: int,
    grants: StoreStarts | None = None,
) -> dict[str, Any]:
    spans = intervals(stamps, killed, until)
    by_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    key_of = {i: key for i, key, _ in run.jobs}
    for i, s, e, _ in spans:
        by_key[key_of[i] if run.keyed else "all"].append((s, e))
    out: dict[str, Any] = {"ran": len(stamps.starts), "jobs": len(run.jobs)}
    violations = 0
    peak = 0
    out["peak_slack"] = 0
    for kind, n, per in run.limits:
        for key_spans in by_key.values():
            if kind == "concurrency":
                p, v = peak_running(key_spans, n)
            else:
                p, v = peak_window([s for s, _ in key_spans], n, per)
                inner = peak_window([s for s, _ in key_spans], n, per - STAMP_SLACK)[0]
                out["peak_slack"] = max(out["peak_slack"], inner)
            peak, violations = max(peak, p), violations + v
    if not run.limits:
        peak = max(peak_running(s, 10**9)[0] for s in by_key.values())
    out["peak"], out["violations"] = peak, violations
    reruns = sum(len(v) - 1 for v in stamps.starts.values())
    late_attempts = sum(max(a for _, _, a in v) - 1 for v in stamps.starts.values())
    out["wasted"] = stamps.refused + (0 if killed else reruns + late_attempts)
    out["reruns"] = reruns
    if stamps.parked is not None:
        out["parked"] = stamps.parked
    first_start = {i: min(t for t, _, _ in v) for i, v in stamps.starts.items()}
    if run.scenario == "hol":
        due = {i: t0 + d for i, _, d in run.jobs}
        late = [first_start[i] - due[i] for i in run.done_ids if i in first_start]
        out["p50_ms"] = percentile(late, 0.5) * 1000
        out["p99_ms"] = percentile(late, 0.99) * 1000
        out["max_ms"] = max(late) * 1000
        hot = len(by_key.get("hot", []))
        out["hot_ran"] = hot
        out["jobs_per_s"] = hot / max(1e-9, until - t0)
        return out
    last_end = max(e for _, _, e, _ in spans)
    out["jobs_per_s"] = len(first_start) / (last_end - t0)
    kinds = {kind: (n, per) for kind, n, per in run.limits}
    if "rate" in kinds:
        n, per = kinds["rate"]
        if grants is not None:
            # What the limit promises: starts as the store granted them, on its clock.
            granted = grants.times()
            out["grants"] = len(granted)
            out["grant_peak"], out["grant_violations"] = peak_window(granted, n, per * grants.scale)
        # What a handler sees: its start stamp, a little after its grant's answer.
        delays = []
        for i, starts in stamps.starts.items():
            for t, _, _ in starts:
                answered = [g for g, _ in stamps.grants.get(i, []) if g <= t]
                if answered:
                    delays.append(t - max(answered))
        if delays:
            out["delay_p50_ms"] = percentile(delays, 0.5) * 1000
            out["delay_p99_ms"] = percentile(delays, 0.99) * 1000
            out["delay_max_ms"] = max(delays) * 1000
        asks = [g - a for v in stamps.grants.values() for g, a in v]
        if asks:
            out["acquire_p99_ms"] = percentile(asks, 0.99) * 1000
        last_start = max(first_start.values())
        if len(first_start) > n:  # the first window's n may all start at once: counted after them
            out["utilization"] = ((len(first_start) - n) / (last_start - t0)) / (n / per)
    elif "concurrency" in kinds and not run.keyed:
        out["utilization"] = out["jobs_per_s"] / (kinds["concurrency"][0] / run.job_s)
    if run.kill_after is not None and killed:
        kill_t = next(iter(killed.values()))
        others = [(s, e) for _, s, e, pid in spans if pid not in killed]
        bound = kinds["concurrency"][0] - victim_held
        back = math.inf
        for t, step in sorted([(s, 1) for s, _ in others] + [(e, -1) for _, e in others]):
            if t > kill_t:
                running = sum(1 for s, e in others if s <= t < e)
                if step > 0 and running > bound:
                    back = t - kill_t
                    break
        out["held"], out["back_s"] = victim_held, back
        # Never back, but the work was all done before the lease ran out: nothing to say.
        out["moot"] = math.isinf(back) and last_end < kill_t + run.lease
        out["unfinished"] = sum(1 for i in run.done_ids if not stamps.ends.get(i))
    return out


# -- running one scenario on one system ------------------------------------------------------------


REQUIREMENTS = HERE / "peers" / "requirements" / "dramatiq.txt"


def dramatiq_python(given: str | None) -> Path:
    """Dramatiq's interpreter: ``--dramatiq-python``, or a virtual environment under the temporary
    directory, made from the pinned requirements (again when they change)."""
    if given:
        return Path(given)
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    venv = Path(tempfile.gettempdir()) / f"rehydrate-bench-dramatiq-{wanted[:12]}"
    python = venv / "bin" / "python"
    if python.exists() and (venv / ".ok").exists():
        return python
    print(f"installing Dramatiq into {venv} from {REQUIREMENTS.relative_to(ROOT)}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(REQUIREMENTS)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise SystemExit(f"pip install -r {REQUIREMENTS.name} failed: {done.stderr.strip()[-300:]}")
    (venv / ".ok").touch()
    return python


@contextmanager
def store_url(store: str, shared: dict[str, Any]) -> Iterator[str]:
    """A fresh store for one run: a new Redis server, a new SQLite file, or new tables' names on the
    bench's PostgreSQL server (the dehydrator's name is new for every run anyway)."""
    if store == "redis":
        from tests.redis_server import RedisServer

        with RedisServer() as server:
            yield server.url
    elif store == "sqlite":
        with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp:
            yield f"sqlite:///{tmp}/limits.db"
    else:
        yield shared["postgres"].url


class StoreStarts:
    """The store's own record of a rate's starts: the time of every grant, as the store counted it
    (its clock: Redis's ``TIME``, PostgreSQL's, the SQLite worker's). No public view gives those
    times (``Store.limits()`` counts them), so the benchmark reads them where the store keeps them:
    the starts sorted set on Redis, the starts table on SQLite and PostgreSQL. A start stays there
    at least a window after its grant, so a read every tenth of a second sees every one; each is
    remembered by its identity (sorted set member, row) and time.
    """

    def __init__(self, store: str, url: str, name: str) -> None:
        self.store, self.name = store, name
        self.seen: set[tuple[str, float]] = set()
        #: The store's unit of time per second: Redis keeps µs, integral, compared exactly.
        self.scale = 1_000_000 if store == "redis" else 1
        self._conn: Any
        if store == "redis":
            import redis

            self._conn = redis.Redis.from_url(url)
        elif store == "sqlite":
            import sqlite3

            self._conn = sqlite3.connect(
                f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True, timeout=10
            )
        else:
            import psycopg

            self._conn = psycopg.connect(url, autocommit=True)

    def read(self) -> None:
        if self.store == "redis":
            for key in self._conn.scan_iter(match="*:limit:{*:t", count=1000):
                for member, score in self._conn.zrange(key, 0, -1, withscores=True):
                    self.seen.add((member.decode(), int(score)))
            return
        table, column = (
            ("rehydrate_limit_starts", "rowid")
            if self.store == "sqlite"
            else (
                "public.rehydrate_limit_starts",
                "ctid::text",
            )
        )
        mark = "?" if self.store == "sqlite" else "%s"
        rows = self._conn.execute(f"SELECT {column}, at FROM {table} WHERE lim = {mark}", (self.name,))
        self.seen.update((str(row), float(at)) for row, at in rows.fetchall())

    def times(self) -> list[float]:
        """Every grant's time, in the store's unit (see :attr:`scale`)."""
        return sorted(t for _, t in self.seen)

    def close(self) -> None:
        self._conn.close()


def expected_s(run: Run) -> float:
    """How long the run should take, to bound the waits (three times that, plus a minute)."""
    total = len(run.jobs) * run.job_s
    for kind, n, per in run.limits:
        total = max(
            total, len(run.jobs) * run.job_s / n if kind == "concurrency" else len(run.jobs) * per / n
        )
    if run.scenario == "hol":
        total = 2 * max(d for _, _, d in run.jobs) + 5
    return total + (run.lease * 2 if run.kill_after else 0)


def one_run(
    system: str, store: str, run: Run, args: argparse.Namespace, shared: dict[str, Any]
) -> dict[str, Any]:
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-limits-stamps-")))
        url = stack.enter_context(store_url(store, shared))
        name = f"limits-{run.scenario}-{uuid.uuid4().hex[:8]}"
        spec: dict[str, Any] = {
            "url": url,
            "redis": url,
            "name": name,
            "limits": run.limits,
            "keyed": run.keyed,
            "job_s": run.job_s,
            "lease": run.lease,
            "threads": args.per_process,
            "stamps": str(tmp),
            "min_backoff_ms": args.dramatiq_backoff[0],
            "max_backoff_ms": args.dramatiq_backoff[1],
        }
        spec_path = tmp / "spec.json"
        spec_path.write_text(json.dumps(spec))
        if system == "rehydrate":
            argv = [sys.executable, __file__, "--role", "worker", "--spec", str(spec_path)]
        else:
            argv = [
                str(shared["dramatiq"]),
                str(HERE / "peers" / "limits_dramatiq.py"),
                "worker",
                str(spec_path),
            ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path[1 : sys.path.index(str(ROOT)) + 1]])}
        logs = (tmp / "workers.log").open("ab")
        procs = [
            subprocess.Popen(argv, stdout=logs, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
            for _ in range(args.workers)
        ]

        def log_tail() -> str:
            return "\n".join((tmp / "workers.log").read_text(errors="replace").splitlines()[-8:])

        def stop_all() -> None:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)

        stack.callback(stop_all)
        deadline = time.monotonic() + 60
        while len(list(tmp.glob("ready-*"))) < args.workers:
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                return {"error": f"the workers did not start:\n{log_tail()}"}
            time.sleep(0.05)

        # The due instant: far enough ahead that every job is sent before it.
        t0 = time.time() + 1.0 + len(run.jobs) * (0.0008 if system == "dramatiq" else 0.0001)
        if system == "rehydrate":
            import anyio

            anyio.run(rehydrate_produce, url, name, run.jobs, t0)
        else:
            spec["jobs"] = [(i, key, t0 + due) for i, key, due in run.jobs]
            jobs_path = tmp / "produce.json"
            jobs_path.write_text(json.dumps(spec))
            sent = subprocess.run(
                [
                    str(shared["dramatiq"]),
                    str(HERE / "peers" / "limits_dramatiq.py"),
                    "produce",
                    str(jobs_path),
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if sent.returncode != 0:
                return {"error": f"Dramatiq's producer failed: {sent.stderr.strip()[-400:]}"}
        overrun = max(0.0, time.time() - t0)

        grants: StoreStarts | None = None
        if system == "rehydrate" and any(kind == "rate" for kind, _, _ in run.limits):
            grants = StoreStarts(store, url, name)
            stack.callback(grants.close)
        killed: dict[int, float] = {}
        victim_held = 0
        limit_s = 3 * expected_s(run) + 60
        deadline = time.monotonic() + limit_s
        timed_out = False
        while True:
            time.sleep(0.1)
            if grants is not None:
                grants.read()
            if run.kill_after is not None and not killed and time.time() >= t0 + run.kill_after:
                stamps = read_stamps(tmp)
                in_flight: dict[int, int] = defaultdict(int)
                for i, starts in stamps.starts.items():
                    for _, pid, _ in starts:
                        in_flight[pid] += 1
                    for _, pid in stamps.ends.get(i, []):
                        in_flight[pid] -= 1
                victim = max(procs, key=lambda p: in_flight.get(p.pid, 0))
                victim_held = in_flight.get(victim.pid, 0)
                victim.kill()
                killed[victim.pid] = time.time()
            stamps = read_stamps(tmp)
            marks = stamps.ends if run.done_on == "E" else stamps.starts
            if all(marks.get(i) for i in run.done_ids):
                break
            alive = [p for p in procs if p.pid not in killed]
            if any(p.poll() is not None for p in alive):
                return {"error": f"a worker exited:\n{log_tail()}"}
            if time.monotonic() > deadline:
                timed_out = True
                break
        until = time.time()
        if grants is not None:
            grants.read()
        stop_all()
        result = analyse(run, read_stamps(tmp), t0, killed, until, victim_held, grants)
        result["overrun_s"] = overrun
        if timed_out:
            result["timed_out"] = limit_s
        return result
    raise AssertionError("unreachable")


# -- the tables ------------------------------------------------------------------------------------


def fmt_rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return ""
    return f" ({value / base:.2f}x)"


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    good = [r for r in runs if "error" not in r]
    if not good:
        return None

    def med(key: str) -> float | None:
        values = [r[key] for r in good if key in r]
        return float(statistics.median(values)) if values else None

    return {
        "n": len(good),
        "of": len(runs),
        "jobs_per_s": med("jobs_per_s"),
        "utilization": med("utilization"),
        "p50_ms": med("p50_ms"),
        "p99_ms": med("p99_ms"),
        "max_ms": med("max_ms"),
        "back_s": med("back_s"),
        "peak": max(r["peak"] for r in good),
        "peak_slack": max(r.get("peak_slack", 0) for r in good),
        "violations": max(r["violations"] for r in good),
        "wasted": max(r["wasted"] for r in good),
        "parked": max((r["parked"] for r in good if "parked" in r), default=None),
        "held": med("held"),
        "delay_p50_ms": med("delay_p50_ms"),
        "delay_p99_ms": med("delay_p99_ms"),
        "grant_peak": max((r["grant_peak"] for r in good if "grant_peak" in r), default=None),
        "grant_violations": max(
            (r["grant_violations"] for r in good if "grant_violations" in r), default=None
        ),
        "grants": min((r["grants"] for r in good if "grants" in r), default=None),
        "ran": min(r["ran"] for r in good),
        "moot": all(r.get("moot", False) for r in good),
        "unfinished": max((r.get("unfinished", 0) for r in good), default=0),
        "timed_out": any("timed_out" in r for r in good),
        "overrun": any(r.get("overrun_s", 0) > 0 for r in good),
    }


TITLES = {
    "concurrency": "Concurrency(10), {jobs:,} jobs of {job_ms:g} ms",
    "rate": "Rate(200, per=1 s), {jobs:,} jobs of {job_ms:g} ms",
    "keys": "{keys:,} keys with Concurrency(1) each, {jobs:,} jobs of {job_ms:g} ms",
    "hol": "Head-of-line: Concurrency(1) per key, one key with {hol_backlog:,} due, another's {hol_other:,} due over {hol_spread:g} s",
    "sigkill": "SIGKILL: Concurrency(10), {kill_jobs:,} jobs of {kill_job_ms:g} ms, lease {lease:g} s, the busiest of the workers killed 1 s in",
}


def table(
    scenario: str, results: dict[tuple[str, str, str], list[dict[str, Any]]], args: argparse.Namespace
) -> list[str]:
    """One Markdown table: a row per system, store (and label), ratios to Dramatiq on Redis."""
    head = {
        "hol": "| system | store | other key's p50 lateness | p99 | max | saturated key's jobs/s | max at once per key | violations | wasted attempts | runs |",
        "sigkill": "| system | store | jobs/s | max at once | violations | slots held by the victim | slots back after | unfinished | runs |",
        "rate": "| system | store | jobs/s | utilization | max granted in 1 s (store's record) | violations by grants "
        f"| max handler starts in 1 s (in {1 - STAMP_SLACK:g} s) | starts over 200 by stamps "
        "| grant→start p50 | p99 | wasted attempts | runs |",
    }.get(
        scenario,
        f"| system | store | jobs/s | utilization | {'max at once' + (' per key' if scenario == 'keys' else '')} | violations | wasted attempts | runs |",
    )
    rows = [head, "| " + " | ".join(["---"] * 2 + ["---:"] * (head.count("|") - 4) + ["---"]) + " |"]
    order = {name: n for n, name in enumerate(SYSTEMS + STORES)}
    summaries = {
        k: summarise(results[k])
        for k in sorted(
            (k for k in results if k[0] == scenario),
            key=lambda k: (order[k[1]], order[k[2].split(" ")[0]], k[2]),
        )
    }
    base: dict[str, dict[str, Any]] = {}
    for (_, system, store_label), s in summaries.items():
        if system == "dramatiq" and s is not None:
            base[store_label.split(" ", 1)[1] if " " in store_label else ""] = s
    for (_, system, store_label), s in summaries.items():
        store, _, label = store_label.partition(" ")
        name = f"{'rehydrate' if system == 'rehydrate' else 'Dramatiq'}{' ' + label if label else ''}"
        if s is None:
            error = (
                next(r["error"] for r in results[(scenario, system, store_label)]).strip().splitlines()[-1]
            )
            rows.append(f"| {name} | {store} | failed: {error} |" + " |" * (head.count("|") - 4))
            continue
        b = base.get(label) if system != "dramatiq" else None
        parked = "" if s["parked"] is None else f" ({s['parked']:,} parked)"
        runs = (
            f"{s['n']} of {s['of']}"
            + ("; timed out" if s["timed_out"] else "")
            + ("; sending overran the due instant" if s["overrun"] else "")
        )
        if scenario == "hol":
            rows.append(
                f"| {name} | {store} | {s['p50_ms']:,.1f} ms | {s['p99_ms']:,.1f} ms{ratio(s['p99_ms'], b.get('p99_ms') if b else None)} "
                f"| {s['max_ms']:,.1f} ms | {fmt_rate(s['jobs_per_s'])} | {s['peak']} | {s['violations']} | {s['wasted']:,}{parked} | {runs} |"
            )
        elif scenario == "sigkill":
            back = "never" if s["back_s"] is None or math.isinf(s["back_s"]) else f"{s['back_s']:.2f} s"
            if s["moot"]:
                back = "(all done within the lease)"
            rows.append(
                f"| {name} | {store} | {fmt_rate(s['jobs_per_s'])}{ratio(s['jobs_per_s'], b.get('jobs_per_s') if b else None)} "
                f"| {s['peak']} | {s['violations']} | {s['held']:.0f} | {back} | {s['unfinished']} | {runs} |"
            )
        elif scenario == "rate":
            util = (
                ""
                if s["utilization"] is None
                else f"{s['utilization']:.2f}{ratio(s['utilization'], b.get('utilization') if b else None)}"
            )
            if s["grant_peak"] is None:
                granted = "(not recorded)" if system == "rehydrate" else "n/a"
                over = ""
            else:
                short = s["grants"] < s["ran"]  # a start the reads missed: the peak is a floor
                granted = f"{s['grant_peak']}" + (f" (of {s['grants']:,} read)" if short else "")
                over = f"{s['grant_violations']}"
            delay = (
                ("", "")
                if s["delay_p50_ms"] is None
                else (f"{s['delay_p50_ms']:,.1f} ms", f"{s['delay_p99_ms']:,.1f} ms")
            )
            rows.append(
                f"| {name} | {store} | {fmt_rate(s['jobs_per_s'])}{ratio(s['jobs_per_s'], b.get('jobs_per_s') if b else None)} "
                f"| {util} | {granted} | {over or 'n/a'} | {s['peak']} ({s['peak_slack']}) | {s['violations']} "
                f"| {delay[0]} | {delay[1]} | {s['wasted']:,}{parked} | {runs} |"
            )
        else:
            util = (
                ""
                if s["utilization"] is None
                else f"{s['utilization']:.2f}{ratio(s['utilization'], b.get('utilization') if b else None)}"
            )
            if scenario == "keys" and not label:
                free = summaries.get((scenario, system, f"{store} unlimited"))
                if free is not None and free["jobs_per_s"]:
                    util = f"{s['jobs_per_s'] / free['jobs_per_s']:.2f} of unlimited"
            rows.append(
                f"| {name} | {store} | {fmt_rate(s['jobs_per_s'])}{ratio(s['jobs_per_s'], b.get('jobs_per_s') if b else None)} "
                f"| {util} | {s['peak']} | {s['violations']} | {s['wasted']:,}{parked} | {runs} |"
            )
    return rows


# -- main ------------------------------------------------------------------------------------------


def doc_table(scenario: str) -> str:
    """The block of ``docs/benchmarks.md`` a scenario's table goes in: the rate's is a block of its
    own, so that it can be run again alone without rewriting the others' figures."""
    return "limits-rate" if scenario == "rate" else "limits"


def doc_tables(scenarios: list[str]) -> list[str]:
    return sorted({doc_table(s) for s in scenarios})


def csv(choices: list[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        chosen = [c.strip() for c in text.split(",") if c.strip()]
        bad = [c for c in chosen if c not in choices]
        if bad or not chosen:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)} (got {text!r})")
        return chosen

    return parse


def backoff(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"MIN,MAX in milliseconds, not {text!r}") from None
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError("0 < MIN <= MAX")
    return lo, hi


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", type=csv(SCENARIOS), default=SCENARIOS)
    parser.add_argument(
        "--stores", type=csv(STORES), default=STORES, help="rehydrate's stores (Dramatiq: Redis)"
    )
    parser.add_argument("--systems", type=csv(SYSTEMS), default=SYSTEMS)
    parser.add_argument("--jobs", type=int, help="jobs per run of concurrency, rate, keys (default 5,000)")
    parser.add_argument("--job-ms", type=float, default=20.0)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--hol-backlog", type=int, help="the saturated key's jobs (default 10,000)")
    parser.add_argument("--hol-other", type=int, help="the other key's jobs (default 100)")
    parser.add_argument("--hol-spread", type=float, default=5.0)
    parser.add_argument("--kill-jobs", type=int, help="default 400")
    parser.add_argument("--kill-job-ms", type=float, default=200.0)
    parser.add_argument(
        "--lease",
        type=float,
        default=5.0,
        help="sigkill: the lease (Dramatiq: limiter ttl, heartbeat timeout)",
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--per-process", type=int, default=8, help="jobs at once per worker process")
    parser.add_argument("--repeat", type=int, help="runs per row (default 3, --quick 1)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: a tenth of the jobs, one run")
    parser.add_argument("--dramatiq-backoff", type=backoff, default=(20, 1000), metavar="MIN,MAX")
    parser.add_argument("--dramatiq-python", help="an interpreter with dramatiq[redis] installed")
    parser.add_argument("--json", metavar="FILE", help="also write every run's figures to FILE")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--role", choices=["bench", "worker"], default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "worker":
        rehydrate_worker(json.loads(Path(args.spec).read_text()))
        return 0
    if args.write_docs and args.quick:
        parser.error("--write-docs with --quick: a smoke test's figures do not belong in the docs")
    defaults = {
        "jobs": (500, 5000),
        "hol_backlog": (1000, 10_000),
        "hol_other": (20, 100),
        "kill_jobs": (150, 400),
        "repeat": (1, 3),
    }
    for key, (quick, full) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    if (
        min(
            args.jobs,
            args.keys,
            args.hol_backlog,
            args.hol_other,
            args.kill_jobs,
            args.workers,
            args.per_process,
            args.repeat,
        )
        < 1
    ):
        parser.error("counts must be positive")
    if args.write_docs:
        from doctables import check_table

        for name in doc_tables(args.scenarios):
            check_table(name)

    load_before = os.getloadavg()[0]
    shared: dict[str, Any] = {}
    cells: list[tuple[str, str, str]] = []  # (system, store, run label) in table order
    for system in args.systems:
        for store in args.stores if system == "rehydrate" else ["redis"]:
            cells.append((system, store, ""))
    with ExitStack() as stack:
        if "dramatiq" in args.systems:
            shared["dramatiq"] = dramatiq_python(args.dramatiq_python)
            versions = subprocess.run(
                [
                    str(shared["dramatiq"]),
                    "-c",
                    "from importlib.metadata import version as v; print('dramatiq', v('dramatiq'), 'redis-py', v('redis'))",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            shared["versions"] = dict(zip(versions[::2], versions[1::2], strict=True))
        if "postgres" in args.stores and "rehydrate" in args.systems:
            from tests.pg_server import PostgresServer

            shared["postgres"] = stack.enter_context(PostgresServer(fsync=True))
        results: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
        for round_ in range(args.repeat):
            for scenario in args.scenarios:
                for run in plans(scenario, args):
                    for system, store, _ in cells:
                        began = time.monotonic()
                        result = one_run(system, store, run, args, shared)
                        cell = (scenario, system, f"{store} {run.label}" if run.label != "limited" else store)
                        results[cell].append(result)
                        took = time.monotonic() - began
                        what = f"round {round_ + 1}/{args.repeat} {scenario} {run.label} {system} {store}"
                        if "error" in result:
                            print(f"{what}: FAILED in {took:.0f} s: {result['error']}", file=sys.stderr)
                        else:
                            brief = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
                            print(f"{what} ({took:.0f} s): {brief}", file=sys.stderr, flush=True)

    from tests.redis_server import pick_server

    kind, _ = pick_server(None)
    versions_note = ", ".join(f"{k} {v}" for k, v in shared.get("versions", {}).items())
    method = (
        f"{args.workers} worker processes of {args.per_process} jobs at once each; a new store per run "
        f"({kind} server, SQLite file; PostgreSQL tables on one throwaway server, fsync on); medians of "
        f"{args.repeat} run(s), the worst run's max and violations; ratios (x) to Dramatiq on Redis"
        + (
            f"; Dramatiq {versions_note}, max_retries=None, backoff {args.dramatiq_backoff[0]}-{args.dramatiq_backoff[1]} ms"
            if versions_note
            else ""
        )
    )
    print(method + "\n")
    blocks: dict[str, list[str]] = defaultdict(list)
    for scenario in args.scenarios:
        title = TITLES[scenario].format(**vars(args))
        rows = table(scenario, results, args)
        print(f"{title}\n")
        print("\n".join(rows) + "\n")
        blocks[doc_table(scenario)] += [f"**{title}**", "", *rows, ""]
    if args.write_docs:
        from doctables import write_table

        for name, lines in blocks.items():
            write_table(name, lines, [method + "."], load_before=load_before)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"command": sys.argv, "runs": {" ".join(k): v for k, v in results.items()}})
        )
    return 0 if all(summarise(v) is not None for v in results.values()) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
