"""Benchmark rehydrate.Dehydrator against two reference implementations of the same verbs.

Run from the repository root::

    python benchmarks/bench_core.py            # N = 1,000,000 (takes several minutes)
    python benchmarks/bench_core.py --quick    # N = 100,000
    python benchmarks/bench_core.py --json results.json

Three implementations are measured side by side, in one process, on identical inputs:

1. ``rehydrate.Dehydrator``: the queue-map (one FIFO queue per distinct TTL + an id index) with a
   min-heap of queue heads.
2. ``HeapqBaseline``: the classic ``heapq`` priority-queue recipe (entries are
   ``[due, seq, id, element, attempt]`` lists, a dict from id to entry, lazy deletion). This is
   the bar the Dehydrator is measured against, so it is written to be fast: locals bound, no
   validation beyond the duplicate-id check, no needless allocations.
3. ``ScanningQueueMap``: ReDe's own algorithm, the queue-map *without* the heap of heads: a dict
   from TTL to ``collections.deque`` plus an id index, lazy deletion, and every poll, xpoll, claim
   and ttn visits every queue (O(M) per call, M = number of distinct TTLs).

Workload (per M in ``--ttls``, N elements):

* TTLs: M distinct values ``ttl_j = TTL_BASE + j * TTL_STEP`` (1.0 s + j ms by default, so
  M = 100,000 spans 1 s .. ~101 s); element ``i`` gets ``ttl_(i % M)``, id ``f"e{i}"`` and element
  ``i`` (ids, elements, TTLs and arrival times are built before anything is timed). The default
  M = 1,000,000 = N makes every TTL distinct, as deliveries at given times are; the Dehydrator
  keeps at most 1,024 TTL queues at once and files the other elements loose in its heap.
* Arrivals: element ``i`` is pushed at time ``i * 1e-6`` s (1M arrivals per second). With the
  default TTLs nothing is due before the last push when N <= 1,000,000, and the queues interleave
  finely in due order: for every M >= 2 a due-order merge has to switch queue at almost every
  element (the hardest case for the heap of heads, which otherwise takes whole runs at once).
* Time comes from ``SetClock``, a callable whose value the benchmark sets before each operation
  (``rehydrate.testing.FakeClock.advance`` validates its argument, which would add a
  microsecond to every timed push). All three implementations read the very same clock object,
  so clock overhead is identical. FakeClock itself drives the correctness check.
* ``claim`` returns ``rehydrate.Claim`` objects in all three, so the result type costs the same.

Phases (each measurement on a freshly built structure, ``gc`` disabled throughout and
``gc.collect()`` run between phases; median of ``--repeat`` runs):

* push: N pushes. ttn: ttn() calls while nothing is due. look: N looks. pull: N/2 pulls (every
  other id). These four share one build, in that order.
* poll (all): advance past every due time, one ``poll()``.  poll (limit=1000): repeated until empty.
* xpoll+xack: ``ids = xpoll(limit=1000); xack(*ids)`` until empty.
* claim: ``claim(lease=3600, limit=1000)`` until nothing comes back.
* memory: tracemalloc, a separate build (tracemalloc slows everything down); only what is
  allocated from creating the structure to the end of the N pushes is counted (ids, elements,
  TTLs and times exist beforehand). "retained" is what is still allocated after the pushes,
  "peak" the high-water mark during them. Lower is better.

A drain loop (poll limit / xpoll+xack / claim) that runs longer than ``--cap`` seconds is
stopped; its rate is then taken over the elements it did process, it is marked ``*``, and it is
not repeated (the rate of such loops usually improves as the structure drains, so a capped rate
is pessimistic).

Before timing anything, a correctness check runs every verb on all three implementations with a
small N and refuses to benchmark if any result differs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator
from heapq import heappop, heappush, merge
from itertools import count, islice
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import rehydrate  # noqa: E402
from rehydrate import Claim, Dehydrator  # noqa: E402
from rehydrate.errors import DuplicateIdError, InvalidArgumentError  # noqa: E402
from rehydrate.testing import FakeClock  # noqa: E402

TTL_BASE = 1.0
TTL_STEP = 0.001
ARRIVAL_STEP = 1e-6
BATCH = 1000
LEASE = 3600
TTN_CALLS = 200_000

perf = time.perf_counter


# --------------------------------------------------------------------------------------------
# The clock
# --------------------------------------------------------------------------------------------


class SetClock:
    """A clock that reads ``.t``; the benchmark sets it before each operation."""

    __slots__ = ("t",)

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# --------------------------------------------------------------------------------------------
# Reference implementation 1: heapq + dict, lazy deletion (the heapq docs' recipe)
# --------------------------------------------------------------------------------------------

#: Placeholder for the id of a removed entry (heapq docs: "<removed-task>").
_REMOVED = object()
#: The bars compare data structures, so the baselines make the Dehydrator's argument checks too
#: (ttl and id types and ranges, a clock that never steps back), inlined as the Dehydrator does.
_INF = math.inf


class HeapqBaseline:
    """A binary heap of ``[due, seq, id, element, attempt]`` entries plus a dict id -> entry.

    Removal is lazy: the entry's id slot becomes ``_REMOVED`` (and its element is dropped) and the
    entry is discarded when it reaches the top. ``attempt > 0`` means claimed (this baseline
    has no reschedule, so a claimed element stays claimed until acked).
    """

    __slots__ = ("_clock", "_heap", "_index", "_now", "_seq")

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._heap: list[list[Any]] = []
        self._index: dict[str, list[Any]] = {}
        self._seq = count()
        self._now = -_INF

    def push(self, element: Any, *, ttl: float, id: str) -> str:
        if type(ttl) is float or type(ttl) is int:  # the Dehydrator's checks, inlined as there
            if not 0 <= ttl < _INF:
                raise InvalidArgumentError("ttl must be finite and not negative")
        else:
            raise InvalidArgumentError("ttl must be a number of seconds")
        index = self._index
        if type(id) is not str or not id:
            raise InvalidArgumentError("id must be a non-empty str")
        if id in index:
            raise DuplicateIdError(id)
        now = self._clock()
        if now < self._now:
            now = self._now
        else:
            self._now = now
        entry = [now + ttl, next(self._seq), id, element, 0]
        index[id] = entry
        heappush(self._heap, entry)
        return id

    def pull(self, id: str) -> Any:
        entry = self._index.pop(id, None) if type(id) is str else None
        if entry is None:
            if type(id) is not str or not id:
                raise InvalidArgumentError("id must be a non-empty str")
            return None
        element = entry[3]
        entry[2] = _REMOVED
        entry[3] = None
        return element

    def look(self, id: str) -> Any:
        entry = self._index.get(id)
        return None if entry is None else entry[3]

    def poll(self, *, limit: int | None = None) -> list[Any]:
        heap = self._heap
        index = self._index
        now = self._clock()
        out: list[Any] = []
        append = out.append
        if limit is None:
            while heap and heap[0][0] <= now:
                entry = heappop(heap)
                id = entry[2]
                if id is not _REMOVED:
                    del index[id]
                    append(entry[3])
        else:
            left = limit
            while left and heap and heap[0][0] <= now:
                entry = heappop(heap)
                id = entry[2]
                if id is not _REMOVED:
                    del index[id]
                    append(entry[3])
                    left -= 1
        return out

    def xpoll(self, *, limit: int | None = None) -> list[str]:
        """Best-first walk of the heap tree: the ``limit`` smallest due entries, in order."""
        heap = self._heap
        now = self._clock()
        while heap and heap[0][2] is _REMOVED:
            heappop(heap)
        if not heap or heap[0][0] > now:
            return []
        n = len(heap)
        left = n if limit is None else limit
        out: list[str] = []
        append = out.append
        frontier: list[tuple[list[Any], int]] = [(heap[0], 0)]
        while frontier:
            entry, i = heappop(frontier)
            id = entry[2]
            if id is not _REMOVED:
                append(id)
                left -= 1
                if not left:
                    break
            c = 2 * i + 1
            if c < n:
                child = heap[c]
                if child[0] <= now:
                    heappush(frontier, (child, c))
                c += 1
                if c < n:
                    child = heap[c]
                    if child[0] <= now:
                        heappush(frontier, (child, c))
        return out

    def xack(self, *ids: str, attempt: int | None = None) -> list[Any]:
        index = self._index
        now = self._clock()
        out: list[Any] = []
        append = out.append
        for id in ids:
            entry = index.get(id)
            if (
                entry is None
                or (attempt is not None and entry[4] != attempt)
                or (entry[0] > now and not entry[4])
            ):
                append(None)
                continue
            del index[id]
            append(entry[3])
            entry[2] = _REMOVED
            entry[3] = None
        return out

    def claim(self, *, lease: float, limit: int | None = None) -> list[Claim]:
        heap = self._heap
        now = self._clock()
        taken: list[list[Any]] = []
        take = taken.append
        left = -1 if limit is None else limit
        while left and heap and heap[0][0] <= now:
            entry = heappop(heap)
            if entry[2] is not _REMOVED:
                take(entry)
                left -= 1
        due = now + lease
        seq = self._seq
        out: list[Claim] = []
        append = out.append
        for entry in taken:
            entry[0] = due
            entry[1] = next(seq)
            attempt = entry[4] = entry[4] + 1
            heappush(heap, entry)
            append(Claim(id=entry[2], element=entry[3], attempt=attempt, lease_until=due))
        return out

    def ttn(self) -> float | None:
        heap = self._heap
        while heap and heap[0][2] is _REMOVED:
            heappop(heap)
        if not heap:
            return None
        due: float = heap[0][0]
        return max(0.0, due - self._clock())

    def __len__(self) -> int:
        return len(self._index)


# --------------------------------------------------------------------------------------------
# Reference implementation 2: ReDe's queue-map, scanning every queue (no heap of heads)
# --------------------------------------------------------------------------------------------


class ScanningQueueMap:
    """A dict TTL -> deque of ``[due, seq, id, element, attempt]`` entries, plus an id index.

    Each deque is sorted by due time because the clock never goes back, so push is an append.
    Claimed entries go to the deque of their lease length (same FIFO argument; a TTL and a lease
    of the same length can share one). Removal is lazy (id slot -> ``_REMOVED``); dead heads are
    dropped by the next scan. poll, xpoll, claim and ttn scan every queue: O(M) per call. With a
    limit, the due prefixes of the queues are k-way merged (``heapq.merge``, built afresh per call);
    without one, poll pops every due entry and sorts them.
    """

    __slots__ = ("_clock", "_index", "_now", "_queues", "_seq")

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._queues: dict[float, deque[list[Any]]] = {}
        self._index: dict[str, list[Any]] = {}
        self._seq = count()
        self._now = -_INF

    def push(self, element: Any, *, ttl: float, id: str) -> str:
        if type(ttl) is float or type(ttl) is int:  # the Dehydrator's checks, inlined as there
            if not 0 <= ttl < _INF:
                raise InvalidArgumentError("ttl must be finite and not negative")
        else:
            raise InvalidArgumentError("ttl must be a number of seconds")
        index = self._index
        if type(id) is not str or not id:
            raise InvalidArgumentError("id must be a non-empty str")
        if id in index:
            raise DuplicateIdError(id)
        now = self._clock()
        if now < self._now:
            now = self._now
        else:
            self._now = now
        entry = [now + ttl, next(self._seq), id, element, 0]
        index[id] = entry
        queue = self._queues.get(ttl)
        if queue is None:
            self._queues[ttl] = deque((entry,))
        else:
            queue.append(entry)
        return id

    def pull(self, id: str) -> Any:
        entry = self._index.pop(id, None) if type(id) is str else None
        if entry is None:
            if type(id) is not str or not id:
                raise InvalidArgumentError("id must be a non-empty str")
            return None
        element = entry[3]
        entry[2] = _REMOVED
        entry[3] = None
        return element

    def look(self, id: str) -> Any:
        entry = self._index.get(id)
        return None if entry is None else entry[3]

    def _due_queues(self, now: float) -> list[deque[list[Any]]]:
        """Scan every queue: drop dead heads, forget emptied queues, return those with a due head."""
        queues = self._queues
        due: list[deque[list[Any]]] = []
        empty: list[float] = []
        for key, queue in queues.items():
            head = queue[0]
            if head[2] is _REMOVED:
                popleft = queue.popleft
                while queue and queue[0][2] is _REMOVED:
                    popleft()
                if not queue:
                    empty.append(key)
                    continue
                head = queue[0]
            if head[0] <= now:
                due.append(queue)
        for key in empty:
            del queues[key]
        return due

    def _select(self, now: float, limit: int | None) -> list[list[Any]]:
        """The live due entries in ``(due, seq)`` order, at most ``limit``; nothing is removed."""
        runs = self._due_queues(now)
        if not runs:
            return []

        def due_live(queue: deque[list[Any]]) -> Iterator[list[Any]]:
            for entry in queue:
                if entry[0] > now:
                    return
                if entry[2] is not _REMOVED:
                    yield entry

        merged = due_live(runs[0]) if len(runs) == 1 else merge(*map(due_live, runs))
        return list(islice(merged, limit))

    def poll(self, *, limit: int | None = None) -> list[Any]:
        now = self._clock()
        index = self._index
        if limit is None:
            taken: list[list[Any]] = []
            take = taken.append
            queues = self._queues
            for key in list(queues):
                queue = queues[key]
                popleft = queue.popleft
                while queue and queue[0][0] <= now:
                    entry = popleft()
                    if entry[2] is not _REMOVED:
                        take(entry)
                if not queue:
                    del queues[key]
            taken.sort()  # lists compare by (due, seq): seq is unique
            for entry in taken:
                del index[entry[2]]
            return [entry[3] for entry in taken]
        out: list[Any] = []
        append = out.append
        for entry in self._select(now, limit):
            del index[entry[2]]
            append(entry[3])
            entry[2] = _REMOVED
            entry[3] = None
        return out

    def xpoll(self, *, limit: int | None = None) -> list[str]:
        return [entry[2] for entry in self._select(self._clock(), limit)]

    def xack(self, *ids: str, attempt: int | None = None) -> list[Any]:
        index = self._index
        now = self._clock()
        out: list[Any] = []
        append = out.append
        for id in ids:
            entry = index.get(id)
            if (
                entry is None
                or (attempt is not None and entry[4] != attempt)
                or (entry[0] > now and not entry[4])
            ):
                append(None)
                continue
            del index[id]
            append(entry[3])
            entry[2] = _REMOVED
            entry[3] = None
        return out

    def claim(self, *, lease: float, limit: int | None = None) -> list[Claim]:
        now = self._clock()
        taken = self._select(now, limit)
        if not taken:
            return []
        due = now + lease
        queue = self._queues.get(lease)
        if queue is None:
            queue = self._queues[lease] = deque()
        push = queue.append
        index = self._index
        seq = self._seq
        out: list[Claim] = []
        append = out.append
        for old in taken:
            id, element = old[2], old[3]
            attempt = old[4] + 1
            entry = [due, next(seq), id, element, attempt]
            old[2] = _REMOVED
            old[3] = None
            index[id] = entry
            push(entry)
            append(Claim(id=id, element=element, attempt=attempt, lease_until=due))
        return out

    def ttn(self) -> float | None:
        best = math.inf
        empty: list[float] = []
        for key, queue in self._queues.items():
            head = queue[0]
            if head[2] is _REMOVED:
                popleft = queue.popleft
                while queue and queue[0][2] is _REMOVED:
                    popleft()
                if not queue:
                    empty.append(key)
                    continue
                head = queue[0]
            if head[0] < best:
                best = head[0]
        for key in empty:
            del self._queues[key]
        if best == math.inf:
            return None
        return max(0.0, best - self._clock())

    def __len__(self) -> int:
        return len(self._index)


IMPLS: dict[str, Callable[..., Any]] = {
    "Dehydrator": Dehydrator,
    "heapq": HeapqBaseline,
    "scanning": ScanningQueueMap,
}
NAMES = list(IMPLS)


# --------------------------------------------------------------------------------------------
# Correctness check
# --------------------------------------------------------------------------------------------


def ttl_values(m: int, base: float, step: float) -> list[float]:
    return [base + j * step for j in range(m)]


def _claims(claims: list[Claim]) -> list[tuple[Any, ...]]:
    return [(c.id, c.element, c.attempt, c.lease_until) for c in claims]


def check_same(label: str, results: list[Any]) -> None:
    first = results[0]
    for name, other in zip(NAMES[1:], results[1:], strict=True):
        if other != first:
            raise SystemExit(
                f"correctness check FAILED at {label}: {NAMES[0]} gave {first!r:.300}, "
                f"{name} gave {other!r:.300}"
            )


def sanity_check(ms: list[int], base: float, step: float) -> int:
    """Drive all three with the same calls under a FakeClock; every answer must agree."""
    checks = 0
    n = 3000
    for m in sorted(set(ms)):
        values = ttl_values(min(m, n), base, step)
        for arrival in (1e-3, ARRIVAL_STEP):
            clock = FakeClock()
            objs = [cls(clock=clock) for cls in IMPLS.values()]

            def same(label: str, call: Callable[[Any], Any]) -> None:
                nonlocal checks
                check_same(f"M={m} arrival={arrival} {label}", [call(o) for o in objs])  # noqa: B023
                checks += 1

            for i in range(n):
                ttl = values[i % len(values)]
                same("push", lambda o: o.push(i, ttl=ttl, id=f"e{i}"))  # noqa: B023 (called at once)
                if i % 4 == 3:  # arrivals in bursts of 4 at the same instant: ties on due
                    clock.advance(arrival * 4)
            for o in objs:
                try:
                    o.push("dup", ttl=1.0, id="e0")
                except DuplicateIdError:
                    continue
                raise SystemExit(f"correctness check FAILED: {type(o).__name__} accepted a duplicate id")
            same("len", len)
            same("look", lambda o: [o.look(f"e{i}") for i in range(0, n, 5)] + [o.look("nope")])
            same("pull", lambda o: [o.pull(f"e{i}") for i in range(0, n, 7)] + [o.pull("e0")])
            same("ttn", lambda o: o.ttn())
            same("len", len)
            for rounds in range(10_000):
                clock.advance(0.37 if arrival > ARRIVAL_STEP else 0.05)
                same("ttn", lambda o: o.ttn())
                same("xpoll", lambda o: o.xpoll(limit=50))
                ids = objs[0].xpoll(limit=10)
                same("xack", lambda o: o.xack(*ids, "e1", "nope"))  # noqa: B023 (called at once)
                same("claim", lambda o: _claims(o.claim(lease=0.9, limit=40)))
                same("claim acked", lambda o: o.xack("e3", "e10", attempt=1))
                same("poll", lambda o: o.poll(limit=97))
                same("len", len)
                if rounds % 3 == 2:
                    same("xpoll all", lambda o: o.xpoll())
                    same("poll all", lambda o: o.poll())
                if not len(objs[0]):
                    break
            else:
                raise SystemExit("correctness check did not drain")
            same("ttn empty", lambda o: o.ttn())
        # The benchmark's own pattern, at small scale: one poll of everything, all expired.
        clock = FakeClock()
        objs = [cls(clock=clock) for cls in IMPLS.values()]
        values = ttl_values(m, base, step)
        for i in range(n):
            for o in objs:
                o.push(i, ttl=values[i % m], id=f"e{i}")
            clock.advance(ARRIVAL_STEP)
        clock.advance(base + step * m + 1)
        check_same(f"M={m} poll all expired", [o.poll() for o in objs])
        checks += 1
    return checks


# --------------------------------------------------------------------------------------------
# Workload and phases
# --------------------------------------------------------------------------------------------


class Workload:
    def __init__(self, n: int) -> None:
        self.n = n
        self.ids = [f"e{i}" for i in range(n)]
        self.half_ids = self.ids[::2]
        self.elements = list(range(n))
        self.times = [i * ARRIVAL_STEP for i in range(n)]
        self.ttls: list[float] = []
        self.max_ttl = 0.0

    def set_m(self, m: int, base: float, step: float) -> None:
        values = ttl_values(m, base, step)
        self.ttls = [values[i % m] for i in range(self.n)]
        self.max_ttl = max(values)

    @property
    def after_all_due(self) -> float:
        return self.times[-1] + self.max_ttl + 1.0


def fill(obj: Any, clock: SetClock, w: Workload) -> None:
    push = obj.push
    for t, element, ttl, id in zip(w.times, w.elements, w.ttls, w.ids, strict=True):
        clock.t = t
        push(element, ttl=ttl, id=id)


def build(name: str, w: Workload) -> tuple[Any, SetClock]:
    clock = SetClock()
    obj = IMPLS[name](clock=clock)
    fill(obj, clock, w)
    return obj, clock


class Measurement:
    __slots__ = ("ops", "partial", "seconds")

    def __init__(self, ops: int, seconds: float, partial: bool = False) -> None:
        self.ops = ops
        self.seconds = seconds
        self.partial = partial

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else math.inf


def ttn_calls(name: str, m: int) -> int:
    if name == "scanning":  # O(M) per call: keep the phase near a fraction of a second
        return max(20, min(TTN_CALLS, 4_000_000 // m))
    return TTN_CALLS


def phase_basic(name: str, w: Workload, m: int) -> dict[str, Measurement]:
    """push, then ttn (nothing due), look, pull on the same structure."""
    clock = SetClock()
    obj = IMPLS[name](clock=clock)
    t0 = perf()
    fill(obj, clock, w)
    t1 = perf()
    assert len(obj) == w.n
    out = {"push": Measurement(w.n, t1 - t0)}

    ttn = obj.ttn
    calls = ttn_calls(name, m)
    gc.collect()
    t0 = perf()
    for _ in range(calls):
        ttn()
    t1 = perf()
    left = ttn()
    if left is None or left <= 0:
        raise SystemExit(
            f"{name}: something is due after the pushes (ttn={left!r}); lower --n or raise --ttl-base"
        )
    out["ttn"] = Measurement(calls, t1 - t0)

    look = obj.look
    gc.collect()
    t0 = perf()
    for id in w.ids:
        look(id)
    t1 = perf()
    out["look"] = Measurement(w.n, t1 - t0)

    pull = obj.pull
    gc.collect()
    t0 = perf()
    for id in w.half_ids:
        pull(id)
    t1 = perf()
    assert len(obj) == w.n - len(w.half_ids)
    out["pull"] = Measurement(len(w.half_ids), t1 - t0)
    return out


def phase_poll_all(name: str, w: Workload, checksums: dict[str, str]) -> Measurement:
    obj, clock = build(name, w)
    clock.t = w.after_all_due
    gc.collect()
    t0 = perf()
    got = obj.poll()
    t1 = perf()
    if len(got) != w.n or len(obj) != 0:
        raise SystemExit(f"{name}: poll() returned {len(got)} of {w.n}, {len(obj)} left")
    checksums[name] = hashlib.sha1(repr(got).encode()).hexdigest()
    return Measurement(w.n, t1 - t0)


def _drain(name: str, w: Workload, step: Callable[[Any], int], cap: float) -> Measurement:
    obj, clock = build(name, w)
    clock.t = w.after_all_due
    gc.collect()
    done = 0
    partial = False
    t0 = perf()
    deadline = t0 + cap
    while True:
        k = step(obj)
        if not k:
            break
        done += k
        if perf() > deadline:
            partial = True
            break
    t1 = perf()
    if not partial and (done != w.n or len(obj) != (w.n if step is _claim_batch else 0)):
        raise SystemExit(f"{name}: drained {done} of {w.n}, {len(obj)} left")
    return Measurement(done, t1 - t0, partial)


def _poll_batch(obj: Any) -> int:
    return len(obj.poll(limit=BATCH))


def _xpoll_xack(obj: Any) -> int:
    ids = obj.xpoll(limit=BATCH)
    if ids:
        obj.xack(*ids)
    return len(ids)


def _claim_batch(obj: Any) -> int:
    return len(obj.claim(lease=LEASE, limit=BATCH))


def phase_memory(name: str, w: Workload) -> tuple[float, float]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    clock = SetClock()
    obj = IMPLS[name](clock=clock)
    fill(obj, clock, w)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(obj) == w.n
    del obj
    gc.collect()
    return (current - before) / w.n, (peak - before) / w.n


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------

ROWS: list[tuple[str, str]] = [
    ("push", "push (ops/s)"),
    ("look", "look (ops/s)"),
    ("pull", "pull (ops/s)"),
    ("ttn", "ttn, nothing due (ops/s)"),
    ("poll_all", "poll() all expired (elem/s)"),
    ("poll_batch", f"poll(limit={BATCH}) drain (elem/s)"),
    ("xpoll_xack", f"xpoll({BATCH})+xack drain (elem/s)"),
    ("claim", f"claim(limit={BATCH}) drain (elem/s)"),
]
MEM_ROWS: list[tuple[str, str]] = [
    ("mem_retained", "memory retained (B/elem)"),
    ("mem_peak", "memory peak (B/elem)"),
]


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.1f}"


def fmt_ratio(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.2f}x" if x < 100 else f"{x:.0f}x"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def median_of(samples: list[Measurement]) -> tuple[float | None, bool]:
    if not samples:
        return None, False
    return statistics.median(s.rate for s in samples), any(s.partial for s in samples)


def print_table(
    m: int, n: int, medians: dict[str, dict[str, float | None]], partial: dict[str, dict[str, bool]]
) -> None:
    print()
    print(f"M = {m:,} distinct TTLs, N = {n:,} elements   (median of runs; higher is better)")
    header = f"{'phase':<38}{'Dehydrator':>12}{'heapq':>12}{'scanning':>12}{'vs heapq':>10}{'vs scan':>10}"
    print(header)
    print("-" * len(header))
    for key, label in ROWS:
        row = medians[key]
        cells = []
        for name in NAMES:
            cell = fmt_rate(row.get(name))
            if partial[key].get(name):
                cell += "*"
            cells.append(cell)
        d, h, s = (row.get(name) for name in NAMES)
        print(
            f"{label:<38}{cells[0]:>12}{cells[1]:>12}{cells[2]:>12}"
            f"{fmt_ratio(ratio(d, h)):>10}{fmt_ratio(ratio(d, s)):>10}"
        )
    print(f"{'':<38}{'(lower is better below)':>36}")
    for key, label in MEM_ROWS:
        row = medians[key]
        d, h, s = (row.get(name) for name in NAMES)
        print(
            f"{label:<38}{d:>12.1f}{h:>12.1f}{s:>12.1f}"
            f"{fmt_ratio(ratio(d, h)):>10}{fmt_ratio(ratio(d, s)):>10}"
        )


def bars(m: int, medians: dict[str, dict[str, float | None]]) -> list[tuple[str, float | None, bool | None]]:
    def vs(key: str, other: str) -> float | None:
        return ratio(medians[key].get("Dehydrator"), medians[key].get(other))

    out: list[tuple[str, float | None, bool | None]] = []
    r = vs("poll_all", "heapq")
    out.append(("poll() all expired >= 4x heapq", r, None if r is None else r >= 4.0))
    r = vs("push", "heapq")
    out.append(("push >= 1.0x heapq", r, None if r is None else r >= 1.0))
    r = vs("pull", "heapq")
    out.append(("pull >= 1.0x heapq", r, None if r is None else r >= 1.0))
    r = vs("ttn", "scanning")
    if m == 100_000:
        out.append(("ttn >= 100x scanning (M=100000)", r, None if r is None else r >= 100.0))
    else:
        out.append(("ttn vs scanning (bar only at M=100000)", r, None))
    r = vs("mem_retained", "heapq")
    out.append(("memory <= 1.2x heapq (lower is better)", r, None if r is None else r <= 1.2))
    return out


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="elements per structure (default 1,000,000)")
    parser.add_argument(
        "--ttls",
        default="1,16,1000,100000,1000000",
        help="comma-separated numbers of distinct TTLs; M >= N makes every TTL distinct",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing; the median is reported")
    parser.add_argument("--quick", action="store_true", help="N = 100,000")
    parser.add_argument("--json", metavar="PATH", help="write the raw medians (and samples) here")
    parser.add_argument(
        "--cap",
        type=float,
        default=15.0,
        help="seconds after which a drain loop is stopped and its partial rate kept (default 15)",
    )
    parser.add_argument(
        "--ttl-base", type=float, default=TTL_BASE, help="TTL of queue 0, seconds (default 1.0)"
    )
    parser.add_argument(
        "--ttl-step",
        type=float,
        default=TTL_STEP,
        help="TTL increment between queues, seconds (default 0.001)",
    )
    parser.add_argument("--skip-check", action="store_true", help="skip the correctness check")
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else args.n
    ms = [int(x) for x in args.ttls.split(",") if x.strip()]
    if n < 2 or any(m < 1 for m in ms) or args.repeat < 1:
        parser.error("--n must be >= 2, every M >= 1, --repeat >= 1")
    if args.ttl_base <= 0 or args.ttl_step < 0:
        parser.error("--ttl-base must be > 0 and --ttl-step >= 0")

    src = Path(rehydrate.__file__).resolve().parent / "_core" / "_dehydrator.py"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12] if src.exists() else "?"
    print("rehydrate core benchmark")
    print(
        f"python   {platform.python_implementation()} {sys.version.split()[0]} "
        f"({platform.python_build()[1]}), {platform.platform()}, {os.cpu_count()} CPUs"
    )
    print(f"subject  {src} (sha256 {digest})")
    print(f"N        {n:,} elements; M in {ms}; median of {args.repeat} runs; drain cap {args.cap:g} s")
    print(
        f"TTLs     ttl_j = {args.ttl_base:g} + j * {args.ttl_step:g} s (j = 0..M-1); element i gets ttl_(i % M)"
    )
    print(f"arrivals element i pushed at t = i * {ARRIVAL_STEP:g} s (one SetClock shared by all three)")
    print("gc       disabled during the whole run, gc.collect() between phases")

    if not args.skip_check:
        t0 = perf()
        checks = sanity_check(ms, args.ttl_base, args.ttl_step)
        print(f"check    all three agree on {checks:,} calls (FakeClock, N=3000 per M) [{perf() - t0:.1f} s]")

    gc.collect()
    gc.disable()
    w = Workload(n)
    results: dict[str, Any] = {
        "meta": {
            "python": sys.version,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "n": n,
            "ttls": ms,
            "repeat": args.repeat,
            "cap_seconds": args.cap,
            "ttl_base": args.ttl_base,
            "ttl_step": args.ttl_step,
            "arrival_step": ARRIVAL_STEP,
            "batch": BATCH,
            "lease": LEASE,
            "dehydrator_sha256_12": digest,
            "units": "ops/s (elements/s for poll/xpoll+xack/claim); mem_* in bytes per element",
        },
        "results": {},
    }
    all_bars: list[tuple[int, str, float | None, bool | None]] = []
    started = perf()
    try:
        for m in ms:
            w.set_m(m, args.ttl_base, args.ttl_step)
            samples: dict[str, dict[str, list[Measurement]]] = {k: {nm: [] for nm in NAMES} for k, _ in ROWS}
            capped: set[tuple[str, str]] = set()
            checksums: dict[str, str] = {}

            def run(key: str, fn: Callable[[str], Measurement]) -> None:
                for _ in range(args.repeat):
                    for name in NAMES:
                        if (key, name) in capped:  # noqa: B023
                            continue
                        gc.collect()
                        meas = fn(name)
                        samples[key][name].append(meas)  # noqa: B023
                        if meas.partial:
                            capped.add((key, name))  # noqa: B023
                        gc.collect()

            for _ in range(args.repeat):
                for name in NAMES:
                    gc.collect()
                    for key, meas in phase_basic(name, w, m).items():
                        samples[key][name].append(meas)
                    gc.collect()
            print(f"  [M={m}] push/ttn/look/pull done ({perf() - started:.0f} s)", file=sys.stderr)
            run("poll_all", lambda name: phase_poll_all(name, w, checksums))  # noqa: B023
            if len(set(checksums.values())) != 1:
                raise SystemExit(f"poll() results differ between implementations at M={m}: {checksums}")
            print(f"  [M={m}] poll all done ({perf() - started:.0f} s)", file=sys.stderr)
            run("poll_batch", lambda name: _drain(name, w, _poll_batch, args.cap))
            print(f"  [M={m}] poll batch done ({perf() - started:.0f} s)", file=sys.stderr)
            run("xpoll_xack", lambda name: _drain(name, w, _xpoll_xack, args.cap))
            print(f"  [M={m}] xpoll+xack done ({perf() - started:.0f} s)", file=sys.stderr)
            run("claim", lambda name: _drain(name, w, _claim_batch, args.cap))
            print(f"  [M={m}] claim done ({perf() - started:.0f} s)", file=sys.stderr)

            medians: dict[str, dict[str, float | None]] = {}
            partial: dict[str, dict[str, bool]] = {}
            for key, _ in ROWS:
                medians[key], partial[key] = {}, {}
                for name in NAMES:
                    medians[key][name], partial[key][name] = median_of(samples[key][name])
            medians["mem_retained"], medians["mem_peak"] = {}, {}
            for name in NAMES:
                retained, peak = phase_memory(name, w)
                medians["mem_retained"][name] = retained
                medians["mem_peak"][name] = peak
            print(f"  [M={m}] memory done ({perf() - started:.0f} s)", file=sys.stderr)

            print_table(m, n, medians, partial)
            if any(any(p.values()) for p in partial.values()):
                print(
                    f"  * stopped after --cap {args.cap:g} s; rate over the elements processed (not repeated)"
                )
            for label, r, ok in bars(m, medians):
                all_bars.append((m, label, r, ok))
            results["results"][str(m)] = {
                "medians": medians,
                "partial": partial,
                "samples": {
                    key: {
                        name: [{"ops": s.ops, "seconds": s.seconds, "partial": s.partial} for s in ss]
                        for name, ss in per.items()
                    }
                    for key, per in samples.items()
                },
            }
            sys.stdout.flush()
    finally:
        gc.enable()

    print()
    print("Bars (Dehydrator vs the reference; ratio = Dehydrator / other, memory: lower is better)")
    failed = 0
    for m, label, r, ok in all_bars:
        verdict = "info" if ok is None else ("PASS" if ok else "FAIL")
        failed += ok is False
        print(f"  M={m:<7} {label:<42} {fmt_ratio(r):>9}  {verdict}")
    print(f"{failed} bar(s) failed; total time {perf() - started:.0f} s")

    if args.json:
        results["bars"] = [{"m": m, "bar": label, "ratio": r, "pass": ok} for m, label, r, ok in all_bars]
        Path(args.json).write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
