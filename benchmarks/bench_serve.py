"""Benchmark ``rehydrate serve`` against ReDe's module, with redis-benchmark, side by side.

Run from the repository root::

    python benchmarks/bench_serve.py --rede-module /path/to/rede/src/module.so
    REDE_MODULE=/path/to/module.so python benchmarks/bench_serve.py --quick
    python benchmarks/bench_serve.py --rede-module PATH --write-docs   # table "serve" in docs/benchmarks.md

The module is not built here: give the path of a built ``module.so`` (TamarLabs/ReDe, built with
``-fcommon``). Without one, the module's columns are left out, and the script says so.

Measured in one run, each figure the median of ``--runs`` runs, the sides taking turns:

1. ``redis-benchmark -c 50`` and again with ``-P 16``, against (a) ``rehydrate serve --store
   memory://`` and (b) ReDe's module loaded into a throwaway ``redis-server``: ``PING`` (the floor
   of the connection), ``REDE.PUSH`` (distinct ids: two ``__rand_int__`` in each),
   ``REDE.GIDPUSH``, ``REDE.PULL`` and ``REDE.LOOK`` (random ids among ``--filled`` elements
   pushed first with an hour's TTL: LOOK always finds one, PULL finds fewer as it removes them),
   ``REDE.POLL`` and ``REDE.TTN`` on that dehydrator (nothing due: the cost of asking).
   Requests per second and p99 latency (redis-benchmark's ``--csv``), and serve's ratio to the
   module. ReDe's own module is slow at GIDPUSH (its id generator), so GIDPUSH runs fewer requests.
2. ``rehydrate serve --store redis://`` (a throwaway ``redis-server``) with ``redis-benchmark -c
   50``, beside the same operations made with the Python API in this process (``open_store`` of
   the same server, 50 tasks each awaiting one call after another): what a client in another
   language pays over a Python producer.
3. Memory per element at ``--memory-elements`` (1M) 16-byte elements with 24-digit ids, one
   dehydrator, an hour's TTL: the module's ``used_memory`` growth (``INFO memory``); serve on
   memory://, its process's RSS growth (the Python objects and the allocator's slack); serve on
   Redis, the Redis server's ``used_memory`` growth (the store's layout in Redis).

The issue's aims, for the record: at least 1.0x the module's requests/s at 50 clients, 0.5x
pipelined, and a p99 within 1.5x.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.redis_server import RedisServer, _free_port  # noqa: E402

CLIENTS = 50
PIPELINE = 16
TTL_MS = 3_600_000  # an hour: nothing pushed here falls due during the run
ELEMENT = b"x" * 16
FILLED = "filled"
RAND = 2_000_000_000  # redis-benchmark's -r: an int; two __rand_int__ per id make it distinct


def _commands(filled: int) -> list[tuple[str, list[str], int]]:
    """(label, the command, redis-benchmark's -r): what both servers are asked."""
    element = ELEMENT.decode()
    return [
        ("PING", ["PING"], 0),
        ("REDE.PUSH", ["REDE.PUSH", "pushed", str(TTL_MS), element, "__rand_int____rand_int__"], RAND),
        ("REDE.GIDPUSH", ["REDE.GIDPUSH", "gid", str(TTL_MS), element], 0),
        ("REDE.PULL", ["REDE.PULL", FILLED, "__rand_int__"], filled),
        ("REDE.LOOK", ["REDE.LOOK", FILLED, "__rand_int__"], filled),
        ("REDE.POLL", ["REDE.POLL", FILLED], 0),
        ("REDE.TTN", ["REDE.TTN", FILLED], 0),
    ]


# -- servers -------------------------------------------------------------------------------------------


def _wait_for_ping(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            if s.recv(64).startswith(b"+PONG"):
                return
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the server on port {port} did not answer PING within {timeout} s")
        time.sleep(0.05)


@contextlib.contextmanager
def serve(store: str) -> Iterator[tuple[int, int]]:
    """``rehydrate serve --store store`` on a free port: (port, pid)."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "rehydrate", "-qq", "serve", "--store", store, "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        _wait_for_ping(port, process)
        yield port, process.pid
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def redis_server(module: str | None = None) -> Iterator[RedisServer]:
    extra = ("--loadmodule", module) if module else ()
    with RedisServer("redis", extra_args=extra) as server:
        yield server


def _command(port: int, *args: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(_resp([a.encode() for a in args]))
        data = b""
        while not data.endswith(b"\r\n"):
            data += s.recv(65536)
        return data


def _resp(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def fill(port: int, name: str, count: int, *, ids: Callable[[int], str] = "{:012d}".format) -> None:
    """Push ``count`` elements into ``name`` with ids ``ids(i)``, pipelined by a thousand."""
    batch = 1000
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        for start in range(0, count, batch):
            stop = min(start + batch, count)
            request = b"".join(
                _resp([b"REDE.PUSH", name.encode(), b"%d" % TTL_MS, ELEMENT, ids(i).encode()])
                for i in range(start, stop)
            )
            s.sendall(request)
            expected, data = stop - start, b""
            while data.count(b"\r\n") < expected:
                chunk = s.recv(1 << 20)
                if not chunk:
                    raise SystemExit("the server closed the connection while filling")
                data += chunk
            if data != b"+OK\r\n" * expected:
                raise SystemExit(f"filling {name}: {data[:200]!r}")


def used_memory(port: int) -> int:
    info = _command(port, "INFO", "memory").decode()
    for line in info.splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    raise SystemExit("no used_memory in INFO memory")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- redis-benchmark -----------------------------------------------------------------------------------


def redis_benchmark(
    port: int, command: list[str], *, requests: int, pipeline: int, rand: int
) -> tuple[float, float]:
    """(requests/s, p99 ms) of one redis-benchmark run; an error reply ends the benchmark."""
    args = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS), "-n", str(requests)]
    args += ["-P", str(pipeline), "--csv"]
    if rand:
        args += ["-r", str(rand)]
    done = subprocess.run([*args, *command], capture_output=True, text=True, timeout=600)
    rows = [
        line for line in done.stdout.splitlines() if line.startswith('"') and not line.startswith('"test"')
    ]
    if done.returncode != 0 or not rows or "Error from server" in done.stdout + done.stderr:
        raise SystemExit(
            f"redis-benchmark failed: {shutil.which('redis-benchmark')} {command}: {done.stdout[-300:]} {done.stderr[-300:]}"
        )
    fields = [field.strip('"') for field in rows[-1].split('","')]
    return float(fields[1]), float(fields[6])


# -- the Python API, for the same operations -----------------------------------------------------------


def python_api(url: str, label: str, name: str, *, requests: int, filled: int) -> tuple[float, float]:
    """(operations/s, p99 ms) of ``requests`` calls made by 50 tasks, each awaiting one call after
    another, on ``open_store(url)``: what redis-benchmark -c 50 does through serve."""
    import anyio

    from rehydrate.stores import open_store

    latencies: list[float] = []
    element = ELEMENT.decode()
    rng = random.Random()  # unseeded: each run pushes ids of its own

    def operation(store: Any) -> Callable[[], Awaitable[Any]]:
        if label == "REDE.PUSH":
            return lambda: store.push(
                f"{name}-pushed", element, ttl=TTL_MS / 1000, id=f"{rng.getrandbits(80):024d}"
            )
        if label == "REDE.GIDPUSH":
            return lambda: store.push(f"{name}-gid", element, ttl=TTL_MS / 1000)
        if label == "REDE.PULL":
            return lambda: store.pull(name, f"{rng.randrange(filled):012d}")
        if label == "REDE.LOOK":
            return lambda: store.look(name, f"{rng.randrange(filled):012d}")
        if label == "REDE.POLL":
            return lambda: store.poll(name)
        if label == "REDE.TTN":
            return lambda: store.ttn(name)
        raise ValueError(label)

    async def main() -> float:
        async with open_store(url) as store:
            call = operation(store)
            per_task = requests // CLIENTS

            async def client() -> None:
                clock = time.perf_counter
                for _ in range(per_task):
                    started = clock()
                    await call()
                    latencies.append(clock() - started)

            started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for _ in range(CLIENTS):
                    tg.start_soon(client)
            return per_task * CLIENTS / (time.perf_counter() - started)

    rate: float = anyio.run(main)
    latencies.sort()
    return rate, latencies[int(len(latencies) * 0.99)] * 1000


# -- the parts -----------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values)


def part_memory_store(module: str | None, *, requests: int, runs: int, filled: int) -> list[dict[str, Any]]:
    """serve on memory:// beside the module, each command at -c 50 and -c 50 -P 16."""
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        serve_port, _ = stack.enter_context(serve("memory://"))
        ports = {"serve": serve_port}
        if module:
            ports["module"] = stack.enter_context(redis_server(module)).port
        for port in ports.values():
            fill(port, FILLED, filled)
        for label, command, rand in _commands(filled):
            for pipeline in (1, PIPELINE):
                n = requests * (4 if pipeline > 1 else 1)
                if label == "REDE.GIDPUSH":
                    n = min(n, 10_000)  # the module makes about 2,000 ids a second
                figures: dict[str, list[tuple[float, float]]] = {side: [] for side in ports}
                for run in range(runs):
                    sides = list(ports.items())
                    for side, port in sides if run % 2 == 0 else reversed(sides):
                        figures[side].append(
                            redis_benchmark(port, command, requests=n, pipeline=pipeline, rand=rand)
                        )
                row: dict[str, Any] = {"command": label, "pipeline": pipeline, "requests": n}
                for side, values in figures.items():
                    row[f"{side}_rps"] = _median([v[0] for v in values])
                    row[f"{side}_p99"] = _median([v[1] for v in values])
                results.append(row)
                print(_memory_row(row, bool(module)), flush=True)
    return results


def part_redis_store(*, requests: int, runs: int, filled: int) -> list[dict[str, Any]]:
    """serve on a Redis store beside the Python API on the same server, at 50 clients."""
    results: list[dict[str, Any]] = []
    with redis_server() as redis, serve(redis.url) as (port, _):
        fill(port, "filled-serve", filled)
        fill(port, "filled-py", filled)
        for label, command, rand in _commands(filled):
            if label == "PING":
                continue
            command = [a if a != FILLED else "filled-serve" for a in command]
            n = min(requests, 20_000)
            served, direct = [], []
            for run in range(runs):
                for side in ("serve", "python") if run % 2 == 0 else ("python", "serve"):
                    if side == "serve":
                        served.append(redis_benchmark(port, command, requests=n, pipeline=1, rand=rand))
                    else:
                        direct.append(python_api(redis.url, label, "filled-py", requests=n, filled=filled))
            row = {
                "command": label,
                "requests": n,
                "serve_rps": _median([v[0] for v in served]),
                "serve_p99": _median([v[1] for v in served]),
                "python_rps": _median([v[0] for v in direct]),
                "python_p99": _median([v[1] for v in direct]),
            }
            results.append(row)
            print(_redis_row(row), flush=True)
    return results


def part_memory_per_element(
    module: str | None, *, count: int, redis_too: bool
) -> list[tuple[str, str, float]]:
    """Bytes per element after ``count`` pushes into one dehydrator: (what, how measured, bytes)."""
    ids = "{:024d}".format
    out: list[tuple[str, str, float]] = []
    if module:
        with redis_server(module) as server:
            before = used_memory(server.port)
            fill(server.port, "memory", count, ids=ids)
            out.append(
                (
                    "ReDe's module",
                    "redis-server's INFO used_memory growth",
                    (used_memory(server.port) - before) / count,
                )
            )
    with serve("memory://") as (port, pid):
        fill(port, "warm-up", 1000, ids=ids)
        before = rss(pid)
        fill(port, "memory", count, ids=ids)
        out.append(("serve, memory://", "the serve process's RSS growth", (rss(pid) - before) / count))
    if redis_too:
        with redis_server() as redis, serve(redis.url) as (port, _):
            fill(port, "warm-up", 1000, ids=ids)
            before = used_memory(redis.port)
            fill(port, "memory", count, ids=ids)
            out.append(
                (
                    "serve, Redis store",
                    "redis-server's INFO used_memory growth",
                    (used_memory(redis.port) - before) / count,
                )
            )
    for what, how, per in out:
        print(f"memory per element: {what}: {per:.0f} bytes ({how})", flush=True)
    return out


# -- tables --------------------------------------------------------------------------------------------


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _memory_row(row: dict[str, Any], module: bool) -> str:
    mode = f"-c {CLIENTS}" + (f" -P {row['pipeline']}" if row["pipeline"] > 1 else "")
    cells = [f"`{row['command']}`", mode, f"{row['serve_rps']:,.0f}", f"{row['serve_p99']:.2f}"]
    if module:
        cells += [
            f"{row['module_rps']:,.0f}",
            f"{row['module_p99']:.2f}",
            _ratio(row["serve_rps"], row["module_rps"]),
            _ratio(row["serve_p99"], row["module_p99"]),
        ]
    return "| " + " | ".join(cells) + " |"


def _redis_row(row: dict[str, Any]) -> str:
    cells = [
        f"`{row['command']}`",
        f"{row['serve_rps']:,.0f}",
        f"{row['serve_p99']:.2f}",
        f"{row['python_rps']:,.0f}",
        f"{row['python_p99']:.2f}",
        _ratio(row["serve_rps"], row["python_rps"]),
    ]
    return "| " + " | ".join(cells) + " |"


def tables(
    memory: list[dict[str, Any]],
    redis: list[dict[str, Any]],
    per_element: list[tuple[str, str, float]],
    module: bool,
) -> list[str]:
    rows = ["On `memory://` beside ReDe's module (requests/s; p99 in ms; ratios serve/module):", ""]
    if module:
        rows += [
            "| command | redis-benchmark | serve req/s | serve p99 | module req/s | module p99 | req/s ratio | p99 ratio |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
    else:
        rows += ["| command | redis-benchmark | serve req/s | serve p99 |", "| --- | --- | ---: | ---: |"]
    rows += [_memory_row(row, module) for row in memory]
    if redis:
        rows += [
            "",
            f"On a Redis store, serve (`redis-benchmark -c {CLIENTS}`) beside the Python API ({CLIENTS} tasks):",
            "",
            "| command | serve req/s | serve p99 | Python API ops/s | Python API p99 | ratio |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        rows += [_redis_row(row) for row in redis]
    if per_element:
        rows += [
            "",
            "Memory per element:",
            "",
            "| what | measured as | bytes per element |",
            "| --- | --- | ---: |",
        ]
        rows += [f"| {what} | {how} | {per:,.0f} |" for what, how, per in per_element]
    return rows


def aims(memory: list[dict[str, Any]]) -> list[str]:
    """The issue's aims, met or not, per command."""
    out = []
    for row in memory:
        if "module_rps" not in row:
            continue
        want = 1.0 if row["pipeline"] == 1 else 0.5
        ratio = row["serve_rps"] / row["module_rps"]
        p99 = row["serve_p99"] / row["module_p99"] if row["module_p99"] else 0
        met = ratio >= want and (row["pipeline"] > 1 or p99 <= 1.5)
        out.append(
            f"{row['command']} -P {row['pipeline']}: {ratio:.2f}x (aim {want}x), p99 {p99:.2f}x: {'met' if met else 'not met'}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rede-module", metavar="PATH", default=os.environ.get("REDE_MODULE"))
    parser.add_argument(
        "--requests", type=int, default=100_000, help="per redis-benchmark run at -P 1 (x4 pipelined)"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--filled", type=int, default=100_000, help="elements pushed before PULL, LOOK, POLL, TTN"
    )
    parser.add_argument("--memory-elements", type=int, default=1_000_000)
    parser.add_argument("--skip-redis", action="store_true", help="leave out the Redis store")
    parser.add_argument("--quick", action="store_true", help="20,000 requests, 100,000 elements for memory")
    parser.add_argument(
        "--write-docs", action="store_true", help="write table 'serve' into docs/benchmarks.md"
    )
    args = parser.parse_args()
    if shutil.which("redis-benchmark") is None or shutil.which("redis-server") is None:
        raise SystemExit("redis-benchmark and redis-server are needed on PATH")
    if args.quick:
        args.requests, args.memory_elements, args.filled = 20_000, 100_000, 20_000
    if args.write_docs:
        from doctables import check_table

        check_table("serve")
    module = args.rede_module
    if module and not Path(module).is_file():
        raise SystemExit(f"--rede-module {module}: no such file")
    if not module:
        print("no ReDe module given (--rede-module PATH or REDE_MODULE): serve is measured alone", flush=True)
    load = os.getloadavg()[0]
    memory = part_memory_store(module, requests=args.requests, runs=args.runs, filled=args.filled)
    redis = (
        []
        if args.skip_redis
        else part_redis_store(requests=args.requests, runs=args.runs, filled=args.filled)
    )
    per_element = part_memory_per_element(module, count=args.memory_elements, redis_too=not args.skip_redis)
    rows = tables(memory, redis, per_element, bool(module))
    notes = aims(memory)
    print()
    print("\n".join(rows))
    print()
    print("\n".join(notes))
    if args.write_docs:
        from doctables import write_table

        made = [
            f"Medians of {args.runs} runs, the sides taking turns; {args.filled:,} elements filled first."
        ]
        aimed = "The issue's aims, per command:\n\n" + "\n".join(f"- {line}" for line in notes)
        write_table("serve", rows, [*made, aimed], load_before=load)


if __name__ == "__main__":
    main()
