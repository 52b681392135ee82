"""What the tests of the stores whose clock is the server's (``ServerClock``: Redis, PostgreSQL)
share: how to stop and move their time without sleeping (:func:`freeze`, :func:`advance`, which
the harnesses use), and checks each test module calls with a store of its own: the batch verbs
count their ttls from the call, a drifted reading of the server's clock never files anything
early, and the offset to the server's clock is measured again after ``resync_every``.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest

from rehydrate._clock import ServerClock
from rehydrate._core import _validate
from rehydrate._occurrences import rearm
from rehydrate.abc import Store

N = "jobs"


class SlowJSON:
    """JSON taking 50 ms of CPU to encode each element: a batch that is slow to encode."""

    name = "json"

    def dumps(self, element: Any) -> bytes:
        until = time.perf_counter() + 0.05
        while time.perf_counter() < until:  # busy, as an encoder is (a sleep would block the loop)
            pass
        return json.dumps(element).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


def _server_clock(store: Store) -> ServerClock:
    clock = store.clock
    assert isinstance(clock, ServerClock)
    return clock


def advance(store: Store, seconds: float) -> float:
    """Move ``store``'s time forward by ``seconds`` without sleeping; its new clock reading.

    Every script (Redis) or statement (PostgreSQL) adds the clock's skew to the server's time, and
    so does the clock, so elements come due as if ``seconds`` had passed. Only calls made through
    this store object see it.
    """
    clock = _server_clock(store)
    clock.skew_us += round(_validate.seconds(seconds, "seconds") * 1_000_000)
    return clock()


async def freeze(store: Store) -> float:
    """Stop ``store``'s time at the server's current time: only :func:`advance` moves it from
    then on, so that durations compare exactly, as on a FakeClock. Its clock reading."""
    from rehydrate.stores import PostgresStore, RedisStore

    clock = _server_clock(store)
    if isinstance(store, RedisStore):
        _, _, clock.pinned_us = await store._server_time()
    else:
        assert isinstance(store, PostgresStore)
        sql = store._sql.now
        row = await store._run(lambda conn: conn.execute(sql, {"pin": None, "skew": 0}).fetchone())
        assert row is not None
        clock.pinned_us = int(row[0])
    return clock()


def read_behind(store: Store, seconds: float) -> float:
    """Make ``store``'s clock read ``seconds`` behind the server's (as after a step of the
    server's clock); the server's time before that."""
    clock = _server_clock(store)
    server_now = clock()
    assert abs(server_now - time.time()) < 0.05  # the test server runs on this machine
    clock.set_offset(server_now - seconds, time.monotonic())
    clock._last = -math.inf  # (it never goes backwards: let it, as from a fresh start)
    return server_now


async def batch_ttls_count_from_the_call(s: Store) -> None:
    """push_many and rearm take the time spent encoding off the ttls: due ``ttl`` after the call,
    not after the server stamps the batch (once everything is encoded). ``s`` encodes with
    :class:`SlowJSON`."""
    called = s.clock()
    await s.push_many(N, [("a", 10, "a"), ("b", 0, "b"), ("c", 5, "c")])  # 150 ms to encode
    info = await s.info(N, "a")
    assert info is not None
    assert info.due - called == pytest.approx(10, abs=0.05)
    (claim,) = await s.claim(N, lease=30)
    called = s.clock()
    ended = [("b", claim.token, claim.revision, claim.element, "b2", 60)]
    ended += [(id, 1, 2**62, None, "x", 1) for id in ("zz", "yy")]
    rearmed = await rearm(s, N, ended)
    assert rearmed == [True, False, False]
    info = await s.info(N, "b")
    assert info is not None
    assert info.due - called == pytest.approx(60, abs=0.05)
    # A single push counts from when the server runs it (it encodes one element).
    await s.push(N, "d", ttl=7, id="d")
    info = await s.info(N, "d")
    assert info is not None
    assert info.due - s.clock() == pytest.approx(7, abs=0.05)


async def drifted_estimate_never_files_early(store: Store) -> None:
    """The call's time is this process's estimate of the server's clock: one more than a quarter
    of a second behind the server (a drifted offset) is not taken, and the batch counts from when
    the server runs it instead: late by a round trip, never early. The same for a rearm."""
    read_behind(store, 10)
    before = time.time()
    await store.push_many(N, [("a", 5, "a"), ("b", 0, "b")])
    info = await store.info(N, "a")
    assert info is not None
    assert before + 5 - 0.05 <= info.due <= time.time() + 5 + 0.05  # not 10 s early
    (claim,) = await store.claim(N, lease=30)
    before = time.time()
    assert await rearm(store, N, [("b", claim.token, claim.revision, claim.element, "b2", 60)]) == [True]
    info = await store.info(N, "b")
    assert info is not None
    assert before + 60 - 0.05 <= info.due <= time.time() + 60 + 0.05


async def clock_is_measured_again(store: Store) -> None:
    """A server whose clock was stepped is read right again: once ``resync_every`` has passed, the
    store measures the offset to the server's clock again before its next call, and not before."""
    clock = _server_clock(store)
    read_behind(store, 10)
    assert clock.next_sync > time.monotonic() + 30
    await store.size(N)
    assert clock() - time.time() == pytest.approx(-10, abs=0.5)  # not measured again yet
    clock.next_sync = time.monotonic()  # resync_every has passed
    await store.size(N)
    assert abs(clock() - time.time()) < 0.05
    assert clock.next_sync > time.monotonic() + 30
