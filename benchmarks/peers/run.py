"""rehydrate side by side with arq, SAQ, APScheduler 4 and Celery: one method, one sitting, one table.

    .venv/bin/python benchmarks/peers/run.py [--quick] [--systems arq,saq,...] [--repeat 3]
        [--write-docs]

Run it with the project's environment (rehydrate and the test extra installed). It installs each
peer into its own virtual environment under ``benchmarks/peers/.venvs/`` from the pinned
``requirements/<peer>.txt`` (once; again when the file changes), starts a throwaway Redis (or
Valkey) server on a free loopback port for every run of every system, runs the systems in turn,
round after round (so a change in the machine's load touches all of them alike), and prints the
medians as one Markdown table.

The method (``harness.py``): 2,000 no-op jobs with delays uniform over 0-3 s, deferred one by one
with each library's normal call, for lateness = wall time at the job's first line minus (wall
time before the enqueue call + delay); 10,000 jobs due at one instant for jobs/s = 10,000 / (the
last job's start - that instant), the same 10,000 defers timed for enqueue/s. Workers run in a
separate process where the library has workers. Every job writes its start to a file of stamps.
``--quick``: 200 and 1,000 jobs, one round (a smoke test; its figures mean little).
``--write-docs``: also write the table, the command line and the run's conditions into
``docs/benchmarks.md``, between its ``<!-- table: peers -->`` markers (``../doctables.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = HERE / ".venvs"


@dataclass(frozen=True)
class System:
    peer: str | None  # the virtual environment (and requirements file) it runs in; None: this interpreter
    script: str
    args: tuple[str, ...] = ()
    redis: bool = True


SYSTEMS: dict[str, System] = {
    "floor": System(None, "peer_floor.py", redis=False),
    "rehydrate-redis": System(None, "peer_rehydrate.py", ("--config", "redis")),
    "rehydrate-redis-64": System(None, "peer_rehydrate.py", ("--config", "redis", "--producers", "64")),
    "rehydrate-sqlite": System(None, "peer_rehydrate.py", ("--config", "sqlite"), redis=False),
    "rehydrate-memory": System(None, "peer_rehydrate.py", ("--config", "memory"), redis=False),
    "arq": System("arq", "peer_arq.py"),
    "arq-10ms": System("arq", "peer_arq.py", ("--config", "poll10ms")),
    "saq": System("saq", "peer_saq.py"),
    "apscheduler": System("apscheduler", "peer_apscheduler.py", ("--config", "memory"), redis=False),
    "apscheduler-sqlite": System("apscheduler", "peer_apscheduler.py", ("--config", "sqlite"), redis=False),
    "celery": System("celery", "peer_celery.py"),
}
# APScheduler's SQLite data store ran about 10 jobs/s here: 10,000 jobs would take a quarter of an
# hour a round, so it runs only when named.
DEFAULT = [name for name in SYSTEMS if name != "apscheduler-sqlite"]
BASELINE = "rehydrate-redis"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ensure_venv(peer: str, reinstall: bool) -> Path:
    """The peer's interpreter, after installing its pinned requirements if they changed."""
    requirements = HERE / "requirements" / f"{peer}.txt"
    venv = VENVS / peer
    python = venv / "bin" / "python"
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    marker = venv / ".requirements-sha256"
    if not reinstall and python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    log(f"installing {peer} into {venv.relative_to(ROOT)} from {requirements.relative_to(ROOT)}")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(requirements)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        raise RuntimeError(f"pip install -r {requirements.name} failed: {(errors or ['?'])[-1]}")
    marker.write_text(wanted)
    return python


def server_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    name = "Valkey" if "valkey" in out.lower() else "Redis"
    for word in out.split():
        if word.startswith("v="):
            return f"{name} {word[2:]}"
    return out.strip()


def run_one(
    name: str, system: System, python: Path, args: argparse.Namespace, server_kind: str
) -> dict[str, Any]:
    """One run of one system: its own throwaway server and stamps file; its figures or its error."""
    from tests.redis_server import RedisServer

    with tempfile.TemporaryDirectory(prefix=f"peers-{name}-") as tmp:
        stamps = Path(tmp) / "stamps"
        argv = [str(python), str(HERE / system.script), *system.args]
        argv += ["--n-late", str(args.n_late), "--n-tp", str(args.n_tp), "--spread", str(args.spread)]
        argv += ["--wait", str(args.wait)]
        server = RedisServer(server_kind).start() if system.redis else None
        try:
            if server is not None:
                argv += ["--redis", server.url]
            proc = subprocess.Popen(
                argv,
                cwd=HERE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "PEERS_STAMPS": str(stamps)},
                start_new_session=True,  # its worker shares its process group: a time-out ends both
            )
            limit = 2 * args.wait + 2 * args.spread + 300
            try:
                out, err = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return {"error": f"no result within {limit:.0f} s: stopped"}
            except BaseException:  # Ctrl-C: end the run and its worker too
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise
        finally:
            if server is not None:
                server.cleanup()
        lines = out.strip().splitlines()
        try:
            result: dict[str, Any] = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            result = {"error": f"exit status {proc.returncode}, no result"}
        if "error" in result:
            worker_log = Path(f"{stamps}.worker.log")
            tail = err.strip().splitlines()[-3:]
            if worker_log.exists():
                tail += worker_log.read_text(errors="replace").strip().splitlines()[-3:]
            result["detail"] = tail
        return result


def fmt_ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def ratio(value: float, base: float | None) -> str:
    if not base:
        return ""
    r = value / base
    return f" ({r:.2f}x)" if r < 10 else f" ({r:,.0f}x)"


def medians_of(results: dict[str, list[dict[str, Any]]]) -> set[str]:
    """The systems with at least one good run."""
    return {name for name, runs in results.items() if any("error" not in r for r in runs)}


def table(results: dict[str, list[dict[str, Any]]], order: list[str], n_tp: int) -> list[str]:
    rows = [
        f"| system | p50 lateness | p99 | max | jobs/s, {n_tp:,} due at once | enqueue/s, one at a time | runs |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    medians: dict[str, dict[str, float]] = {}
    for name in order:
        good = [r for r in results.get(name, []) if "error" not in r]
        if good:
            medians[name] = {
                k: statistics.median(r[k] for r in good)
                for k in ("p50_ms", "p99_ms", "max_ms", "jobs_per_s", "enqueue_per_s")
            }
    base = medians.get(BASELINE)
    for name in order:
        runs = results.get(name, [])
        good = [r for r in runs if "error" not in r]
        label = next((r["system"] for r in good), name)
        if name not in medians:
            error = next((r["error"] for r in runs if "error" in r), "not run")
            rows.append(f"| {label} | failed: {error} | | | | | 0 of {len(runs)} |")
            continue
        m = medians[name]
        notes = [f"{len(good)} of {len(runs)}"]
        if any(r["overrun_s"] > 0 for r in good):
            notes.append("enqueue overran the due instant")
        if any(r["duplicates"] for r in good):
            notes.append(f"{max(r['duplicates'] for r in good)} ran twice")
        b = base if name != BASELINE else None
        rows.append(
            f"| {label} | {fmt_ms(m['p50_ms'])} | {fmt_ms(m['p99_ms'])}{ratio(m['p99_ms'], b and b['p99_ms'])} "
            f"| {fmt_ms(m['max_ms'])} | {m['jobs_per_s']:,.0f}{ratio(m['jobs_per_s'], b and b['jobs_per_s'])} "
            f"| {m['enqueue_per_s']:,.0f}{ratio(m['enqueue_per_s'], b and b['enqueue_per_s'])} | {'; '.join(notes)} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="200 + 1,000 jobs, one round: a smoke test")
    parser.add_argument(
        "--systems",
        default=",".join(DEFAULT),
        help=f"comma-separated, from: {', '.join(SYSTEMS)} (default: all but apscheduler-sqlite)",
    )
    parser.add_argument("--repeat", type=int, help="rounds; the table gives medians (default 3, --quick 1)")
    parser.add_argument("--n-late", type=int, help="jobs for lateness (default 2,000)")
    parser.add_argument(
        "--n-tp", type=int, help="jobs due at once, for jobs/s and enqueue/s (default 10,000)"
    )
    parser.add_argument("--spread", type=float, default=3.0, help="delays uniform over [0, spread) s")
    parser.add_argument("--wait", type=float, help="longest wait for one phase's jobs, s (default 300)")
    parser.add_argument("--server", choices=["redis", "valkey", "auto"], default="auto")
    parser.add_argument("--reinstall", action="store_true", help="make the peers' environments anew")
    parser.add_argument("--json", metavar="FILE", help="also write every run's figures to FILE")
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="also write the table into docs/benchmarks.md (between <!-- table: peers --> markers)",
    )
    args = parser.parse_args()
    if args.write_docs and args.quick:
        parser.error("--write-docs with --quick: a smoke test's figures do not belong in the docs")
    if args.write_docs:
        sys.path.insert(0, str(HERE.parent))
        from doctables import check_table

        check_table("peers")
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown or not chosen:
        parser.error(
            f"unknown system(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SYSTEMS)}"
        )
    defaults = {"repeat": (1, 3), "n_late": (200, 2000), "n_tp": (1000, 10_000), "wait": (120.0, 300.0)}
    for key, (quick, full) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    if min(args.repeat, args.n_late, args.n_tp) < 1 or args.spread <= 0 or args.wait <= 0:
        parser.error("--repeat, --n-late, --n-tp, --spread and --wait must be positive")

    sys.path.insert(0, str(ROOT))
    try:
        import rehydrate  # noqa: F401
        from tests.redis_server import pick_server
    except ImportError as exc:
        raise SystemExit(f"run this with the project's environment (.venv/bin/python): {exc}") from None
    kind, binary = pick_server(None if args.server == "auto" else args.server)

    pythons: dict[str, Path] = {}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
    for name in chosen:
        peer = SYSTEMS[name].peer
        if peer is None:
            pythons[name] = Path(sys.executable)
            continue
        try:
            pythons[name] = ensure_venv(peer, args.reinstall)
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            log(f"{name}: cannot be installed here: {exc}")
            results[name].append({"error": f"not installed: {exc}"})

    # A SIGTERM ends the run in progress (its worker too) and the throwaway server, like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = datetime.now(UTC)
    load_before = os.getloadavg()
    for round_ in range(args.repeat):
        for name in chosen:
            if name not in pythons:
                continue
            t = time.monotonic()
            result = run_one(name, SYSTEMS[name], pythons[name], args, kind)
            results[name].append(result)
            took = time.monotonic() - t
            if "error" in result:
                log(f"round {round_ + 1}/{args.repeat} {name}: FAILED in {took:.0f} s: {result['error']}")
                for line in result.get("detail", []):
                    log(f"    {line}")
            else:
                log(
                    f"round {round_ + 1}/{args.repeat} {name}: p99 {fmt_ms(result['p99_ms'])}, "
                    f"{result['jobs_per_s']:,.0f} jobs/s, {result['enqueue_per_s']:,.0f} enqueue/s ({took:.0f} s)"
                )
    load_after = os.getloadavg()

    versions: dict[str, str] = {}
    for runs in results.values():
        for r in runs:
            versions.update(r.get("versions", {}))
    print(f"Side by side, {started:%Y-%m-%d %H:%M} UTC: {' '.join(['python', *sys.argv])}")
    print(
        f"Python {platform.python_version()} ({platform.python_implementation()}), {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after; server {server_version(binary)} ({kind}), a new one per run"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    method = (
        f"{args.n_late:,} jobs with delays uniform over 0-{args.spread:g} s for lateness; {args.n_tp:,} due at "
        f"one instant for jobs/s and enqueue/s; medians of {args.repeat} round(s)"
        + (f"; (ratios) to {BASELINE}" if BASELINE in medians_of(results) else "")
    )
    print(method + "\n")
    rows = table(results, chosen, args.n_tp)
    for row in rows:
        print(row)
    if args.write_docs:
        from doctables import write_table

        notes = [
            method + ".",
            f"Server {server_version(binary)} ({kind}), a new one per run; "
            + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
            + ".",
        ]
        write_table("peers", rows, notes, load_before=load_before[0])
    if args.json:
        Path(args.json).write_text(
            json.dumps({"command": sys.argv, "started": started.isoformat(), "runs": results})
        )
    failed = [n for n in chosen if not any("error" not in r for r in results[n])]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
