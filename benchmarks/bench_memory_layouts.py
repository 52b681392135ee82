"""Candidate Redis layouts for the store's next format (issue 44), prototyped in Lua on a
throwaway Redis: bytes per pending element, and claim + ack per second through naive scripts.

Run from the repository root::

    python benchmarks/bench_memory_layouts.py [N [PAYLOAD]]     # default 200,000 and 100 bytes

Not wired into any store: it fills each layout with pipelined commands and measures ``INFO
memory`` as ``bench_memory.py`` does. The element map is bucketed: ``m:<k>`` hashes of id to a
24-byte binary header plus the payload, ``k`` a hash of the id over ``N / ids per bucket``
buckets; it stays a listpack only while ``hash-max-listpack-value`` admits header plus payload.
The due order is one of:

* ``zset``: one sorted set of ids by due time (today's index);
* ``lists``: a list per distinct TTL of ``due (8 bytes) .. id`` (in due order, since one TTL),
  and a sorted set ``h`` of the lists scored by their first entry's due time;
* ``buckets``: a small sorted set per time bucket (``width`` seconds) of id by due time, a
  listpack while it holds at most ``zset-max-listpack-entries``, and ``h`` of the buckets.

The claim scripts hash each id again (``redis.sha1hex``) to find its bucket: a store would carry
the bucket in the entry. Their rates are what naive Lua does, not a target.
"""

from __future__ import annotations

import hashlib
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_memory import Resp, ident, ttls  # noqa: E402

from tests.redis_server import RedisServer  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
P = int(sys.argv[2]) if len(sys.argv) > 2 else 100
DUE = 20_000
BATCH = 1000
HDR = struct.Struct("<qQIH2x")  # due µs, revision/seq, ttl or lease ms, attempt: 24 bytes

# Claim from per-queue lists (per TTL, or per time bucket), heads in a zset scored by first due.
# Entries: 8-byte big-endian due µs .. id. Lists hold one TTL: due order; time buckets are
# sorted sets (listpack while small) of id scored by due.
CLAIM_LISTS = r"""
local H, now, limit, base = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local nb = tonumber(ARGV[4])
local out = {}
while #out < limit do
  local head = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  if #head == 0 or tonumber(head[2]) > now then break end
  local q = head[1]
  local entries = redis.call('LRANGE', q, 0, limit - #out - 1)
  local taken = 0
  for _, e in ipairs(entries) do
    local due = struct.unpack('>i8', e)
    if due > now then break end
    local id = string.sub(e, 9)
    local b = base .. (redis.sha1hex(id):sub(1, 6) and (tonumber(redis.sha1hex(id):sub(1, 6), 16) % nb))
    local v = redis.call('HGET', b, id)
    if v then out[#out + 1] = id; out[#out + 1] = v end
    taken = taken + 1
  end
  redis.call('LTRIM', q, taken, -1)
  local first = redis.call('LINDEX', q, 0)
  if first then redis.call('ZADD', H, struct.unpack('>i8', first), q) else redis.call('ZREM', H, q) end
  if taken < #entries then break end
end
return out
"""
CLAIM_BUCKETS = r"""
local H, now, limit, base = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local nb = tonumber(ARGV[4])
local out = {}
while #out < 2 * limit do
  local head = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  if #head == 0 or tonumber(head[2]) > now then break end
  local q = head[1]
  local ids = redis.call('ZRANGE', q, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit - #out / 2)
  for _, id in ipairs(ids) do
    local b = base .. (tonumber(redis.sha1hex(id):sub(1, 6), 16) % nb)
    local v = redis.call('HGET', b, id)
    if v then out[#out + 1] = id; out[#out + 1] = v end
  end
  if #ids > 0 then redis.call('ZREM', q, unpack(ids)) end
  local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
  if #first > 0 then redis.call('ZADD', H, first[2], q) else redis.call('ZREM', H, q) end
  if #out / 2 < limit and #first > 0 and tonumber(first[2]) <= now then else if #first > 0 then break end end
end
return out
"""
ACK = r"""
local base, nb = ARGV[1], tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  n = n + redis.call('HDEL', base .. (tonumber(redis.sha1hex(id):sub(1, 6), 16) % nb), id)
end
return n
"""


def bucket(id: str, nb: int) -> int:
    return int(hashlib.sha1(id.encode()).hexdigest()[:6], 16) % nb


def fill(r: Resp, layout: str, n: int, per_bucket: int, width_s: int, now_us: int, times: list[float]) -> int:
    nb = max(1, n // per_bucket)
    body = b"x" * P
    cmds: list[bytes] = []
    for i in range(n):
        id = ident(i)
        t = times[i]
        due = now_us + int(t * 1e6)
        cmds.append(
            Resp.encode(
                "HSET", f"m:{bucket(id, nb)}", id, HDR.pack(due, i + 1, int(t * 1000) & 0xFFFFFFFF, 0) + body
            )
        )
        if layout == "lists":
            q = f"q:{int(t * 1000)}"
            cmds.append(Resp.encode("RPUSH", q, struct.pack(">q", due) + id.encode()))
            cmds.append(Resp.encode("ZADD", "h", "NX", due, q))
        elif layout == "buckets":
            q = f"b:{due // int(width_s * 1e6)}"
            cmds.append(Resp.encode("ZADD", q, due, id))
            cmds.append(Resp.encode("ZADD", "h", "LT", due, q))
        elif layout == "zset":
            cmds.append(Resp.encode("ZADD", "z", due, id))
        if len(cmds) >= 3000:
            r.pipeline(cmds)
            cmds = []
    if cmds:
        r.pipeline(cmds)
    return nb


def run(
    r: Resp, layout: str, shape: str, per_bucket: int, width_s: int, listpack_value: int
) -> tuple[float, float, str, float | None]:
    r.call("FLUSHALL")
    r.call("MEMORY", "PURGE")
    r.call("CONFIG", "SET", "hash-max-listpack-value", listpack_value)
    before = r.used_memory()
    now_us = int(r.server_ms() * 1000)
    times = ttls(N, shape)
    start = time.perf_counter()
    nb = fill(r, layout, N, per_bucket, width_s, now_us, times)
    push = N / (time.perf_counter() - start)  # (client-bound: pipelined from Python)
    used = (r.used_memory() - before) / N
    enc = r.call("OBJECT", "ENCODING", "m:0").decode()
    rate = None
    if layout in ("lists", "buckets"):
        now_us = int(r.server_ms() * 1000)
        # Due elements: a fifth TTL (lists) or the current time bucket (buckets).
        cmds: list[bytes] = []
        for i in range(DUE):
            id = "due" + ident(i)[3:]
            due = now_us - 1
            cmds.append(Resp.encode("HSET", f"m:{bucket(id, nb)}", id, HDR.pack(due, N + i, 0, 0) + b"x" * P))
            if layout == "lists":
                cmds += [
                    Resp.encode("RPUSH", "q:0", struct.pack(">q", due) + id.encode()),
                    Resp.encode("ZADD", "h", "LT", due, "q:0"),
                ]
            else:
                q = f"b:{due // int(width_s * 1e6)}"
                cmds += [Resp.encode("ZADD", q, due, id), Resp.encode("ZADD", "h", "LT", due, q)]
        r.pipeline(cmds)
        script = CLAIM_LISTS if layout == "lists" else CLAIM_BUCKETS
        sha = r.call("SCRIPT", "LOAD", script).decode()
        ack = r.call("SCRIPT", "LOAD", ACK).decode()
        got = 0
        start = time.perf_counter()
        while got < DUE:
            out = r.call("EVALSHA", sha, 1, "h", int(r.server_ms() * 1000), BATCH, "m:", nb)
            ids = out[0::2]
            if not ids:
                break
            r.call("EVALSHA", ack, 0, "m:", nb, *ids)
            got += len(ids)
        rate = got / (time.perf_counter() - start)
    return used, push, enc, rate


def main() -> None:
    server = RedisServer("redis").start()
    try:
        report(Resp(server.port))
    finally:
        server.stop()


def report(r: Resp) -> None:
    print(f"N={N:,} payload={P} header={HDR.size} bytes")
    print(
        "| layout | due times | ids per map bucket | time bucket | hash-max-listpack-value | map encoding | bytes/element | claim+ack/s |"
    )
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    cases = [
        ("zset", "ttls", 64, 0, 64),
        ("zset", "ttls", 64, 0, 1024),
        ("lists", "ttls", 64, 0, 64),
        ("lists", "ttls", 64, 0, 1024),
        ("lists", "ttls", 128, 0, 1024),
        ("buckets", "random", 64, 60, 1024),
        ("buckets", "random", 64, 600, 1024),
        ("buckets", "random", 128, 60, 1024),
        ("buckets", "ttls", 64, 60, 1024),
    ]
    for layout, shape, per_bucket, width, lpv in cases:
        used, _, enc, rate = run(r, layout, shape, per_bucket, width, lpv)
        print(
            f"| {layout} | {shape} | {per_bucket} | {width or '-'} | {lpv} | {enc} | {used:,.0f} | {f'{rate:,.0f}' if rate else '-'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
