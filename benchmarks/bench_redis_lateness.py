"""Lateness through the Redis store, the worker in another process, beside a bare ZSET consumer.

    python benchmarks/bench_redis_lateness.py [--n 20000] [--spread 2.0] [--repeat 3]
        [--patterns even,uniform,burst] [--backends asyncio,trio] [--lead 2.0] [--quick]
        [--claim-ahead 0.05]

Issue #18's Redis comparison. A throwaway Redis (or Valkey) server; for each arrival pattern of
``bench_scheduler.due_offsets`` (``even``, ``uniform``, ``burst``: 1,000 due within the same
millisecond every 100 ms), N elements due over ``--spread`` seconds, deferred one by one from this
process before the first is due (``--lead`` seconds ahead; the run fails if deferring took longer),
and delivered in another process:

* rehydrate: a worker process running a ``Scheduler`` on the Redis store with a no-op async
  handler (``concurrency=1000``, the default batch); the producer calls
  ``await scheduler.defer(...)`` for each element. Twice per backend: with the defaults, and with
  ``claim_ahead`` (``--claim-ahead`` seconds, 0 to leave it out), which claims what falls due
  within that long and holds it in the worker until its time.
* the floor: a bare consumer process (coredis on asyncio, the store's client): a ZSET scored by
  the due time (the server's ``TIME`` in microseconds, read by the add script). One Lua script
  takes what is due atomically (``TIME``, ``ZRANGEBYSCORE -inf now WITHSCORES LIMIT 0 100``,
  ``ZREM`` of those, and the new head's score, all in one round trip); the consumer then sleeps
  until that head is due or until a pub/sub message, which the add script publishes when an
  element goes in ahead of the current head. This is the least a correct delayed delivery does
  over Redis (no leases, no acks, no payloads, no retries): the floor.

Both record lateness as the server's clock at delivery minus the element's due time, each process
reading the server's clock the same way (``ServerClock``: the local monotonic clock plus the
offset to ``TIME`` measured at start-up, the best of three round trips); rehydrate in the handler,
the floor when the take script's reply is in hand. Also the consumer's CPU time from its first
delivery to its last, per element (``time.process_time``): what the process spends per element
while the due times pass; and the server's time in commands per element over the same while
(``INFO commandstats``, reset once the last element is deferred). Medians of ``--repeat`` runs of p50, p99 and
max, the gaps to the floor, the load average at the start and the end, and whether p99 is within
3 ms of the floor's (the issue's bar).

``REHYDRATE_BENCH_PROFILE=DIR`` runs each rehydrate worker under cProfile and writes
``DIR/worker-<backend>-<pattern>-<run>.prof``.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scheduler import PATTERNS, due_offsets, percentiles

from rehydrate import Scheduler, current_delivery, open_store
from rehydrate._clock import ServerClock
from rehydrate.cli._worker import settle_heap

#: The server's time in µs, as the store's own time script reads it.
TIME = """
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
"""

#: KEYS[1] the ZSET, KEYS[2] the wake channel; ARGV[1] the member, ARGV[2] the delay in µs.
#: The due time is the server's TIME plus the delay, as the store's push script does.
ADD = """
local t = redis.call('TIME')
local due = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[2])
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[1], due, ARGV[1])
if head[2] == nil or due < tonumber(head[2]) then
  redis.call('PUBLISH', KEYS[2], '')
end
return due
"""

#: KEYS[1] the ZSET; ARGV[1] at most this many. Returns {head score or -1, member, score, ...}:
#: what was due (removed), and the score of the element now at the head.
TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
if #due > 0 then
  local members = {}
  for i = 1, #due, 2 do
    members[#members + 1] = due[i]
  end
  redis.call('ZREM', KEYS[1], unpack(members))
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local out = {head[2] or '-1'}
for i = 1, #due do
  out[#out + 1] = due[i]
end
return out
"""


async def server_clock(client: Any) -> ServerClock:
    """A ``ServerClock`` set the way the Redis store sets its own: the best of three ``TIME`` calls."""
    clock = ServerClock("redis")
    read = client.register_script(TIME)
    samples = []
    for _ in range(3):
        before = time.monotonic()
        micros = int(await read(keys=[], args=[]))
        samples.append((micros / 1e6, before, time.monotonic()))
    server, before, after = min(samples, key=lambda s: s[2] - s[1])
    clock.set_offset(server, (before + after) / 2)
    return clock


# -- the rehydrate worker process ------------------------------------------------------------------


def rehydrate_worker(
    url: str,
    name: str,
    n: int,
    batch: int,
    backend: str,
    ready: Any,
    results: Any,
    profile: str,
    claim_ahead: float,
) -> None:
    async def main() -> None:
        store = open_store(url)
        scheduler = Scheduler(store, grace=5)
        late: list[float] = []
        cpu = [0.0]
        done = anyio.Event()

        @scheduler.handler(name, concurrency=1000, lease=60, batch=batch, claim_ahead=claim_ahead)
        async def noop(element: Any) -> None:
            late.append(store.clock() - current_delivery().due)
            if len(late) == 1:
                cpu[0] = time.process_time()
            if len(late) == n:
                done.set()

        async with store:
            settle_heap()  # as ``rehydrate worker`` does once its store is open
            async with scheduler:
                ready.set()
                with anyio.fail_after(120):
                    await done.wait()
                cpu[0] = time.process_time() - cpu[0]
        results.put((late, cpu[0]))

    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.runcall(lambda: anyio.run(main, backend=backend))
        profiler.dump_stats(profile)
    else:
        anyio.run(main, backend=backend)


# -- the floor's consumer process ------------------------------------------------------------------


def floor_worker(url: str, key: str, n: int, batch: int, ready: Any, results: Any) -> None:
    async def main() -> None:
        import coredis

        late: list[float] = []
        cpu: list[float] = []
        async with coredis.Redis.from_url(url, decode_responses=False) as client:
            clock = await server_clock(client)
            settle_heap()  # as the rehydrate worker does
            take = client.register_script(TAKE)
            woken = anyio.Event()

            async def listen(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                nonlocal woken
                async with client.pubsub(channels=[key + ":wake"]) as pubsub:
                    while True:
                        message = await pubsub.get_message()
                        if message is None:
                            continue
                        if message["type"] == "subscribe":
                            task_status.started()
                        elif message["type"] == "message":
                            woken.set()

            async with anyio.create_task_group() as tg:
                await tg.start(listen)
                ready.set()
                with anyio.fail_after(120):
                    while len(late) < n:
                        woken = anyio.Event()  # cleared before the take: a later add wakes us
                        reply: list[bytes] = await take(keys=[key], args=[batch])
                        now = clock()
                        for score in reply[2::2]:
                            late.append(now - float(score) / 1e6)
                        if late and not cpu:
                            cpu.append(time.process_time())
                        if len(late) >= n or len(reply) - 1 == 2 * batch:
                            continue  # done, or a full batch: more may be due already
                        head = float(reply[0])
                        if head < 0:
                            await woken.wait()
                        else:
                            with clock.move_on_at(head / 1e6):
                                await woken.wait()
                cpu[0] = time.process_time() - cpu[0]
                tg.cancel_scope.cancel()
        results.put((late, cpu[0]))

    anyio.run(main, backend="asyncio")


# -- the producer (this process) -------------------------------------------------------------------


async def server_time_spent(url: str, reset: bool) -> float:
    """µs the server spent in commands since the last reset (``INFO commandstats``), or reset them.

    Read after the consumer's last delivery and reset after the producer's last defer: the server's
    work while the due times pass (claims, acks, lease renewals, ``ttn``; or the floor's takes).
    """
    import coredis

    async with coredis.Redis.from_url(url, decode_responses=True) as client:
        if reset:
            await client.config_resetstat()
            return 0.0
        stats: dict[str, Any] = await client.info("commandstats")
        return float(
            sum(
                value["usec"]
                for key, value in stats.items()
                if key.startswith("cmdstat_") and key not in ("cmdstat_info", "cmdstat_config|resetstat")
            )
        )


async def produce_rehydrate(url: str, name: str, offsets: list[float], lead: float, producers: int) -> float:
    """Defer every element one by one (``producers`` tasks, each its share in turn).

    Seconds it took; more than ``lead`` means the first were due before the last were deferred.
    """
    async with open_store(url) as store:
        scheduler = Scheduler(store)
        clock = store.clock
        begun = clock()
        start = begun + lead

        async def share(k: int) -> None:
            for i in range(k, len(offsets), producers):
                await scheduler.defer(name, i, delay=max(0.0, start + offsets[i] - clock()))

        async with anyio.create_task_group() as tg:
            for k in range(producers):
                tg.start_soon(share, k)
        return clock() - begun


async def produce_floor(url: str, key: str, offsets: list[float], lead: float, producers: int) -> float:
    """Add every element one by one with the add script, as :func:`produce_rehydrate`."""
    import coredis

    async with coredis.Redis.from_url(url, decode_responses=False) as client:
        clock = await server_clock(client)
        add = client.register_script(ADD)
        keys = [key, key + ":wake"]
        begun = clock()
        start = begun + lead

        async def share(k: int) -> None:
            for i in range(k, len(offsets), producers):
                delay = max(0, round((start + offsets[i] - clock()) * 1e6))
                await add(keys=keys, args=[i, delay])

        async with anyio.create_task_group() as tg:
            for k in range(producers):
                tg.start_soon(share, k)
        return clock() - begun


def one(
    kind: str,
    url: str,
    offsets: list[float],
    lead: float,
    producers: int,
    batch: int,
    backend: str,
    profile: str,
    claim_ahead: float = 0.0,
) -> tuple[float, ...]:
    """One run of ``kind`` (rehydrate or floor): start its process, produce, collect.

    p50, p99, max (ms), seconds the producer took, the consumer's CPU µs per element, and the
    server's µs per element while the due times passed.
    """
    ctx = mp.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    name = f"lateness-{uuid.uuid4().hex[:8]}"
    n = len(offsets)
    if kind == "rehydrate":
        proc = ctx.Process(
            target=rehydrate_worker,
            args=(url, name, n, batch, backend, ready, results, profile, claim_ahead),
        )
    else:
        proc = ctx.Process(target=floor_worker, args=(url, name, n, batch, ready, results))
    proc.start()
    try:
        if not ready.wait(60):
            raise SystemExit(f"the {kind} process did not start")
        gc.collect()
        producer = produce_rehydrate if kind == "rehydrate" else produce_floor
        took = anyio.run(producer, url, name, offsets, lead, producers)
        anyio.run(server_time_spent, url, True)
        if took > lead + min(offsets):
            raise SystemExit(
                f"{kind}: deferring {n} elements one by one took {took:.2f} s, longer than --lead "
                f"{lead} s: the first were due before the last were deferred; raise --lead"
            )
        late, cpu = results.get(timeout=max(offsets) + 60)
        server = anyio.run(server_time_spent, url, False)
        proc.join(30)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
    if len(late) != n:
        raise SystemExit(f"{kind}: {len(late)} deliveries of {n}")
    return (*percentiles(late), took, cpu / n * 1e6, server / n)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument(
        "--lead", type=float, default=2.0, help="seconds from the first defer to the first due time"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--batch",
        type=int,
        default=100,
        help="elements per claim, and per take of the floor (default: the handler's, min(concurrency, 100))",
    )
    parser.add_argument(
        "--producers", type=int, default=8, help="tasks deferring at once, each one element at a time"
    )
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument(
        "--backends", default="asyncio,trio", help="of the rehydrate worker (the floor: asyncio)"
    )
    parser.add_argument("--quick", action="store_true", help="--n 5000 --repeat 1, asyncio only")
    parser.add_argument(
        "--claim-ahead",
        type=float,
        default=0.05,
        help="seconds: also run the worker with this claim_ahead (0: not)",
    )
    args = parser.parse_args()
    if args.quick:
        args.n, args.repeat, args.backends = 5000, 1, "asyncio"
    patterns = args.patterns.split(",")
    backends = args.backends.split(",")
    for pattern in patterns:
        if pattern not in PATTERNS:
            parser.error(f"unknown pattern {pattern!r}: choose from {', '.join(PATTERNS)}")
    for backend in backends:
        if backend not in ("asyncio", "trio"):
            parser.error(f"unknown backend {backend!r}: asyncio or trio")
    if (
        args.n < 1
        or args.repeat < 1
        or args.producers < 1
        or args.batch < 1
        or args.spread <= 0
        or args.lead <= 0
        or args.claim_ahead < 0
    ):
        parser.error(
            "--n, --repeat, --batch and --producers must be positive, --spread and --lead more than 0, "
            "--claim-ahead at least 0"
        )
    profile_dir = os.environ.get("REHYDRATE_BENCH_PROFILE", "")

    from tests.redis_server import RedisServer

    load_start = os.getloadavg()
    print(f"rehydrate Redis lateness benchmark: Python {platform.python_version()} on {platform.platform()}")
    with RedisServer() as server:
        print(
            f"server: {server.kind} ({server.binary}); {args.n:,} elements deferred one by one by "
            f"{args.producers} tasks "
            f"{args.lead} s ahead, due over {args.spread} s; worker in another process, no-op async "
            f"handler (concurrency 1000, batch {args.batch}); floor: a ZSET consumer woken by pub/sub (asyncio, coredis); "
            f"medians of {args.repeat}; load average at the start {load_start[0]:.2f} {load_start[1]:.2f}\n"
        )
        print(
            "| backend | pattern | what | p50 ms | p99 ms | max ms | p99 - floor | max - floor | defer s "
            "| CPU µs/element | server µs/element |"
        )
        print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        verdicts = []
        ok = True
        for pattern in patterns:
            floors: list[tuple[float, ...]] = []
            variants = [("rehydrate Scheduler", 0.0)]
            if args.claim_ahead:
                variants.append(
                    (f"rehydrate Scheduler, claim_ahead={args.claim_ahead * 1000:g} ms", args.claim_ahead)
                )
            ours: dict[tuple[str, float], list[tuple[float, ...]]] = {
                (b, ahead): [] for b in backends for _, ahead in variants
            }
            for r in range(args.repeat):
                offsets = due_offsets(pattern, args.n, args.spread, seed=r)
                floors.append(
                    one("floor", server.url, offsets, args.lead, args.producers, args.batch, "asyncio", "")
                )
                for backend in backends:
                    for _, ahead in variants:
                        tag = f"-ahead{ahead:g}" if ahead else ""
                        profile = (
                            str(Path(profile_dir) / f"worker-{backend}-{pattern}-{r}{tag}.prof")
                            if profile_dir
                            else ""
                        )
                        ours[backend, ahead].append(
                            one(
                                "rehydrate",
                                server.url,
                                offsets,
                                args.lead,
                                args.producers,
                                args.batch,
                                backend,
                                profile,
                                ahead,
                            )
                        )

            def med(rows: list[tuple[float, ...]]) -> list[float]:
                return [statistics.median(row[i] for row in rows) for i in range(6)]

            f = med(floors)
            print(
                f"| asyncio | {pattern} | floor: ZSET + pub/sub | {f[0]:.2f} | {f[1]:.2f} | {f[2]:.2f} "
                f"| | | {f[3]:.2f} | {f[4]:.1f} | {f[5]:.1f} |"
            )
            for backend in backends:
                for what, ahead in variants:
                    s = med(ours[backend, ahead])
                    gap_p99, gap_max = s[1] - f[1], s[2] - f[2]
                    print(
                        f"| {backend} | {pattern} | {what} | {s[0]:.2f} | {s[1]:.2f} | {s[2]:.2f} "
                        f"| {gap_p99:+.2f} | {gap_max:+.2f} | {s[3]:.2f} | {s[4]:.1f} | {s[5]:.1f} |"
                    )
                    passed = gap_p99 <= 3.0
                    ok &= passed
                    verdicts.append(
                        f"{backend} {pattern}, {what}: p99 within 3 ms of the floor's ({gap_p99:+.2f} ms) -> "
                        f"{'PASS' if passed else 'FAIL'}"
                    )
    print()
    print("\n".join(verdicts))
    load_end = os.getloadavg()
    print(
        f"load average at the start {load_start[0]:.2f}, at the end {load_end[0]:.2f} ({time.strftime('%Y-%m-%d')})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
