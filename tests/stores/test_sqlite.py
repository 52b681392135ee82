"""What only the SQLite store promises: durability, sharing one file, serializers, pragmas, processes.

The verbs themselves are covered by the contract suite (``test_contract.py`` with ``harness_sqlite``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import anyio
import pytest

import rehydrate
from rehydrate import (
    InvalidArgumentError,
    InvalidTypeError,
    SerializerMismatchError,
    StoreNotOpenError,
    StoreUnavailableError,
)
from rehydrate._occurrences import rearm
from rehydrate.stores import _sqlite_wake, open_store
from rehydrate.stores._sqlite import SQLiteStore
from rehydrate.testing import FakeClock

N = "jobs"


# -- durability -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_elements_due_times_attempts_and_claims_survive_a_reopen(tmp_path: Path) -> None:
    """Everything a store knows is in the file: a new store on it carries on where the old one was."""
    path = tmp_path / "jobs.db"
    clock = FakeClock(1000.0)
    async with SQLiteStore(path, clock=clock) as store:
        await store.push_many(N, [("a", 5, "a"), ("b", 0, "b"), ("c", 10, "c")])
        (claim,) = await store.claim(N, lease=30)
        before = [await store.info(N, id) for id in await store.ids(N)]
    assert claim.id == "b"

    async with SQLiteStore(path, clock=clock) as store:
        assert await store.ids(N) == ["a", "c", "b"]
        assert [await store.info(N, id) for id in await store.ids(N)] == before
        info = await store.info(N, "b")
        assert info is not None
        assert (info.claimed, info.attempt, info.due, info.ttl) == (True, 1, 1030.0, 30.0)
        assert await store.look(N, "a") == "a"
        assert await store.ttn(N) == 5.0
        assert await store.ack(N, [("b", claim.token)]) == [True]
        clock.advance(10)
        assert await store.poll(N) == ["a", "c"]
        assert await store.names() == []


@pytest.mark.anyio
async def test_wall_clock_by_default(tmp_path: Path) -> None:
    """Due times are Unix times, so they mean the same after a restart."""
    async with SQLiteStore(tmp_path / "jobs.db") as store:
        await store.push(N, "x", ttl=60, id="x")
        info = await store.info(N, "x")
    assert info is not None
    assert info.due == pytest.approx(time.time() + 60, abs=5)


# -- URLs and lifecycle -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_open_store_urls(tmp_path: Path) -> None:
    """``sqlite:////abs``, ``sqlite:///rel``, ``sqlite://:memory:``, and options in the query."""
    path = tmp_path / "url.db"
    store = open_store(f"sqlite:///{path}", serializer="pickle")
    assert isinstance(store, SQLiteStore)
    assert store.path == str(path)
    assert store.serializer.name == "pickle"
    async with store:
        await store.push(N, {1, 2}, ttl=0, id="s")
    assert path.exists()

    assert SQLiteStore.from_url("sqlite:///relative/jobs.db").path == "relative/jobs.db"
    assert SQLiteStore.from_url("sqlite:///with%20space.db").path == "with space.db"
    normal = SQLiteStore.from_url(f"sqlite:///{path}?synchronous=normal&busy_timeout=2")
    async with normal:
        assert await normal._pragma("synchronous") == 1
        assert await normal._pragma("busy_timeout") == 2000

    async with open_store("sqlite://:memory:") as memory:
        await memory.push(N, "m", ttl=0, id="m")
        assert await memory.poll(N) == ["m"]

    bad_urls = (
        "sqlite://host/x.db",
        "sqlite://",
        "sqlite:///x.db?color=red",
        "sqlite:///x.db?nap=soon",
        "sqlite:///x.db?a",
    )
    for bad in bad_urls:
        with pytest.raises(InvalidArgumentError):
            SQLiteStore.from_url(bad)
    with pytest.raises(InvalidArgumentError):
        SQLiteStore.from_url("sqlite:///x.db?synchronous=normal", synchronous="FULL")
    with pytest.raises(InvalidArgumentError):
        SQLiteStore(path, synchronous="OFF")


@pytest.mark.anyio
async def test_use_before_open_and_after_close(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "jobs.db")
    with pytest.raises(StoreNotOpenError, match="not open"):
        await store.push(N, "x", ttl=1)
    await store.open()
    await store.open()  # idempotent
    await store.push(N, "x", ttl=1, id="x")
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(StoreNotOpenError, match="not open"):
        await store.look(N, "x")
    async with store:  # and it can be opened again
        assert await store.look(N, "x") == "x"


@pytest.mark.anyio
async def test_wal_and_synchronous_pragmas(tmp_path: Path) -> None:
    """WAL mode (in the file) and synchronous=FULL (on the store's connection) are really set."""
    path = tmp_path / "jobs.db"
    async with SQLiteStore(path) as store:
        assert await store._pragma("journal_mode") == "wal"
        assert await store._pragma("synchronous") == 2  # FULL
        assert await store._pragma("busy_timeout") == 5000
    async with SQLiteStore(path, synchronous="normal", busy_timeout=0.5) as store:
        assert await store._pragma("synchronous") == 1  # NORMAL
        assert await store._pragma("busy_timeout") == 500
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def _commits(statements: list[str]) -> list[str]:
    """For each committed transaction in ``statements``, the synchronous setting it committed under."""
    setting, out = "FULL", []
    for statement in statements:
        if statement.startswith("PRAGMA synchronous ="):
            setting = statement.rsplit("=", 1)[1].strip()
        elif statement == "COMMIT":
            out.append(setting)
    return out


@pytest.mark.anyio
async def test_leases_commit_without_an_fsync_and_everything_else_with_one(tmp_path: Path) -> None:
    """claim and extend commit under synchronous=NORMAL (no fsync: losing them only brings the
    elements back); push, ack, reschedule and the rest stay FULL, and the connection is FULL after."""
    async with SQLiteStore(tmp_path / "jobs.db") as store:
        statements: list[str] = []
        assert store._conn is not None
        store._conn.set_trace_callback(statements.append)
        await store.push("n", "a", ttl=0, id="a")
        (claim,) = await store.claim("n", lease=30)
        assert await store.extend("n", "a", lease=60, token=claim.token) is not None
        assert await store.reschedule("n", "a", ttl=0, token=claim.token) is True
        (claim,) = await store.claim("n", lease=30)
        assert await store.ack("n", [("a", claim.token)]) == [True]
        assert await store.claim("n", lease=30) == []  # nothing due: a read, no transaction
        store._conn.set_trace_callback(None)
        assert _commits(statements) == ["FULL", "NORMAL", "NORMAL", "FULL", "NORMAL", "FULL"]
        assert await store._pragma("synchronous") == 2
    async with SQLiteStore(tmp_path / "jobs.db", synchronous="normal") as store:
        statements = []
        assert store._conn is not None
        store._conn.set_trace_callback(statements.append)
        await store.push("n", "b", ttl=0, id="b")
        await store.claim("n", lease=30)
        store._conn.set_trace_callback(None)
        assert not [s for s in statements if s.startswith("PRAGMA synchronous")]
        assert await store._pragma("synchronous") == 1


class SlowJSON:
    """JSON that takes a second of the FakeClock to encode each element (a big batch, a slow codec)."""

    name = "json"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def dumps(self, element: Any) -> bytes:
        self.clock.advance(1.0)
        return json.dumps(element).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


@pytest.mark.anyio
async def test_batch_ttls_count_from_the_call(tmp_path: Path) -> None:
    """push_many and rearm: due ``ttl`` after the call, however long encoding the batch took."""
    clock = FakeClock(start=1000.0)
    async with SQLiteStore(tmp_path / "jobs.db", clock=clock, serializer=SlowJSON(clock)) as store:
        await store.push_many("n", [("a", 10, "a"), ("b", 20, "b"), ("c", 0, "c")])
        dues = {id: (await store.info("n", id)).due for id in "abc"}  # type: ignore[union-attr]
        assert dues == {"a": 1010.0, "b": 1020.0, "c": 1000.0}
        (claim,) = await store.claim("n", lease=30)  # "c", now at 1003
        ended = [("c", claim.token, claim.revision, claim.element, "c2", 60), ("zz", 1, 2**62, None, "x", 1)]
        assert await rearm(store, "n", ended) == [True, False]
        info = await store.info("n", "c")
        assert info is not None
        assert info.due == 1003.0 + 60  # from the call, not after the two seconds of encoding


@pytest.mark.anyio
async def test_unreachable_or_locked_file_raises_store_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError):
        await SQLiteStore(tmp_path / "no" / "such" / "dir.db").open()

    path = tmp_path / "jobs.db"
    async with SQLiteStore(path, busy_timeout=0.2) as store:
        await store.push(N, "x", ttl=0, id="x")
        raw = sqlite3.connect(path, isolation_level=None)
        try:
            raw.execute("BEGIN IMMEDIATE")  # another writer holds the lock past busy_timeout
            with pytest.raises(StoreUnavailableError, match="locked"):
                await store.claim(N, lease=10)
            assert await store.look(N, "x") == "x"  # readers are not blocked in WAL mode
            raw.execute("ROLLBACK")
        finally:
            raw.close()
        (claim,) = await store.claim(N, lease=10)
        assert claim.id == "x"


@pytest.mark.anyio
async def test_a_claim_with_nothing_due_takes_no_write_lock(tmp_path: Path) -> None:
    """A claim loop woken by a push that is not due yet (in every process sharing the file)
    finds nothing due: it says so from a read, neither waiting for the write lock another writer
    holds nor taking it; once something is due, it claims under the lock as ever."""
    path = tmp_path / "jobs.db"
    clock = FakeClock()
    async with SQLiteStore(path, clock=clock, busy_timeout=0.2) as store:
        await store.push(N, "later", ttl=30, id="later")
        raw = sqlite3.connect(path, isolation_level=None)
        try:
            raw.execute("BEGIN IMMEDIATE")  # another writer holds the lock past busy_timeout
            statements: list[str] = []
            assert store._conn is not None
            store._conn.set_trace_callback(statements.append)
            with anyio.fail_after(5):
                assert await store.claim(N, lease=10) == []
            assert not [s for s in statements if s.startswith(("BEGIN", "COMMIT"))]
            assert await store.ttn_after_claim(N) == pytest.approx(30)
            clock.advance(30)
            with pytest.raises(StoreUnavailableError, match="locked"):
                await store.claim(N, lease=10)  # due now: a claim needs the lock
            raw.execute("ROLLBACK")
        finally:
            raw.close()
        (claim,) = await store.claim(N, lease=10)
        assert claim.id == "later"


def test_a_writer_takes_the_lock_soon_after_it_is_freed(tmp_path: Path) -> None:
    """A writer that finds the write lock taken tries again in steps of at most 2 ms, not in
    SQLite's own busy waits (10 to 100 ms once it has waited a few ms), and keeps its busy_timeout."""
    from rehydrate.stores import _sqlite_sql as sql

    path = tmp_path / "lock.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    try:
        holder.execute("PRAGMA journal_mode = WAL")
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN IMMEDIATE")
        freed = []

        def free_later() -> None:
            time.sleep(0.06)  # long enough for SQLite's busy handler to be sleeping 10-25 ms
            freed.append(time.monotonic())
            holder.execute("ROLLBACK")

        thread = threading.Thread(target=free_later)
        thread.start()
        sql.begin(writer, 5.0)
        got = time.monotonic()
        thread.join()
        writer.execute("ROLLBACK")
        assert got - freed[0] < 0.015  # a few of its 2 ms steps (SQLite's own: up to 25 ms here)
        assert writer.execute("PRAGMA busy_timeout").fetchone() == (5000,)

        # Past busy_timeout: "database is locked", as before.
        holder.execute("BEGIN IMMEDIATE")
        writer.execute("PRAGMA busy_timeout = 100")
        began = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            sql.begin(writer, 0.1)
        assert 0.1 <= time.monotonic() - began < 1.0
        assert writer.execute("PRAGMA busy_timeout").fetchone() == (100,)
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        writer.close()


def _locked_file(tmp_path: Path) -> tuple[str, str]:
    """A WAL database with a table, and its wake-up directory (not made yet)."""
    path = str(tmp_path / "lock.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    wake = _sqlite_wake.directory(path)
    assert wake is not None
    return path, wake


def _begin_in_a_thread(path: str, wake: str | None, got: list[float]) -> threading.Thread:
    """A writer on its own connection that takes the write lock (waiting as a store's writer does)."""
    from rehydrate.stores import _sqlite_sql as sql

    def run() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            sql.begin(conn, 30.0, wake)
            got.append(time.monotonic())
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _until(predicate: Any, within: float = 10.0) -> None:
    """Wait (sync, in short steps) until ``predicate()``: how the tests see a writer begin waiting."""
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_a_waiting_writer_is_handed_the_lock_when_a_transaction_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """A writer waiting for the lock is woken by the transaction that frees it, however it ends:
    with 5 s between its own tries, only the hand-over can give it the lock in time."""
    from rehydrate.stores import _sqlite_sql as sql

    monkeypatch.setattr(sql, "_LOCK_PAUSES", (5.0,))
    path, wake = _locked_file(tmp_path)
    lock = Path(wake) / "lock"
    holder = sqlite3.connect(path, isolation_level=None)
    got: list[float] = []
    threads: list[threading.Thread] = []

    def body(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")
        threads.append(_begin_in_a_thread(path, wake, got))
        _until(lambda: bool(_entries(lock)))  # the other writer found the lock taken and waits
        if ending == "rollback":
            raise RuntimeError("the body failed")

    try:
        if ending == "rollback":
            with pytest.raises(RuntimeError):
                sql.transaction(holder, body, 5.0, wake)
        else:
            sql.transaction(holder, body, 5.0, wake)
        freed = time.monotonic()
        threads[0].join(10)
        assert got
        assert got[0] - freed < 2.5  # not its own 5 s pause
        assert holder.execute("SELECT count(*) FROM t").fetchone() == ((1,) if ending == "commit" else (0,))
    finally:
        holder.close()
    assert _entries(lock) == []  # the waiter's socket is gone; the directories stay for the next
    _sqlite_wake.tidy(wake)  # what a closing store does
    assert not os.path.exists(wake)


def test_a_writer_that_hands_nothing_over_is_still_waited_out(tmp_path: Path) -> None:
    """A writer that does not hand the lock over (the ``sqlite3`` shell, an older rehydrate) is
    waited out in pauses, as before the hand-over existed; a wake-up directory it cannot use
    (a file in its place) leaves the writer pausing too."""
    path, wake = _locked_file(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        for where in (wake, str(tmp_path / "not-a-directory")):
            if where != wake:
                Path(where).write_text("")
            holder.execute("BEGIN IMMEDIATE")
            got: list[float] = []
            thread = _begin_in_a_thread(path, where, got)
            time.sleep(0.02)
            freed = time.monotonic()
            holder.execute("ROLLBACK")  # no hand-over
            thread.join(10)
            assert got
            assert got[0] - freed < 0.5
        assert _entries(Path(wake) / "lock") == []
    finally:
        holder.close()


def test_a_dead_waiters_socket_is_removed_by_the_next_hand_over(tmp_path: Path) -> None:
    _, wake = _locked_file(tmp_path)
    assert _sqlite_wake.hand_over(wake) == 0  # nobody has waited: no directory, nothing sent
    assert _sqlite_wake.hand_over(None) == 0
    waiter = _sqlite_wake.LockWaiter.bind(wake)
    assert waiter is not None
    lock = Path(wake) / "lock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(lock / "deadbeef"))
    dead.close()  # its process was SIGKILLed: the file stays, nobody is bound
    (lock / "notes.txt").write_text("not a socket")  # never removed: not ours
    assert sorted(_entries(lock) or []) != []
    assert _sqlite_wake.hand_over(wake) == 1  # the live waiter
    assert "deadbeef" not in (_entries(lock) or [])
    assert "notes.txt" in (_entries(lock) or [])
    began = time.monotonic()
    waiter.wait(5.0)  # returns at once: the hand-over is waiting in its socket
    assert time.monotonic() - began < 1.0
    waiter.close()


@pytest.mark.anyio
async def test_a_closing_store_removes_the_directories_nobody_uses(tmp_path: Path) -> None:
    """The lock waiters' directory stays between waits and goes when the store closes, unless a
    writer or a subscription still uses it."""
    path = str(tmp_path / "jobs.db")
    wake = Path(f"{path}-wake")
    async with SQLiteStore(path) as store:
        await store.push(N, "x", ttl=0)
        # A writer of another store waited once (in its worker thread, as a store's writer does).
        waiter = await anyio.to_thread.run_sync(_sqlite_wake.LockWaiter.bind, str(wake))
        assert waiter is not None
        await anyio.to_thread.run_sync(waiter.close)
        assert _entries(wake) == ["lock"]
    assert _entries(wake) is None
    async with SQLiteStore(path) as store, store.subscribe(N):
        waiter = await anyio.to_thread.run_sync(_sqlite_wake.LockWaiter.bind, str(wake))
        assert waiter is not None
        async with SQLiteStore(path):
            pass  # another store closes while a writer waits and a subscription listens
        assert _entries(wake / "lock") is not None
        await anyio.to_thread.run_sync(waiter.close)
    assert _entries(wake) is None  # the subscription left last, and took both


def _hold_the_lock_until_a_writer_waits(path: str, wake: str, done: Any) -> None:
    """Run in a spawned process: a store's write transaction that ends once a writer waits."""
    from rehydrate.stores import _sqlite_sql as sql

    lock = Path(wake) / "lock"
    conn = sqlite3.connect(path, isolation_level=None)

    def body(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (2)")
        done.set()  # holding the lock
        _until(lambda: bool(_entries(lock)), within=30)

    sql.transaction(conn, body, 5.0, wake)
    conn.close()


def test_a_writer_in_another_process_hands_the_lock_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rehydrate.stores import _sqlite_sql as sql

    monkeypatch.setattr(sql, "_LOCK_PAUSES", (5.0,))
    path, wake = _locked_file(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    holding = ctx.Event()
    holder = ctx.Process(target=_hold_the_lock_until_a_writer_waits, args=(path, wake, holding))
    holder.start()
    try:
        assert holding.wait(30)
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            began = time.monotonic()
            sql.begin(conn, 30.0, wake)  # waits (the lock is the other process's), then is handed it
            waited = time.monotonic() - began
            assert conn.execute("SELECT count(*) FROM t").fetchone() == (1,)  # the holder's commit
            conn.execute("ROLLBACK")
        finally:
            conn.close()
        assert waited < 2.5  # not its own 5 s pause
    finally:
        holder.join(30)
    assert holder.exitcode == 0


@pytest.mark.anyio
async def test_claim_is_bounded_per_call(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "jobs.db") as store:
        await store.push_many(N, [(i, 0, None) for i in range(1500)])
        assert len(await store.claim(N, lease=60)) == 1000
        assert len(await store.claim(N, lease=60, limit=5000)) == 500


@pytest.mark.anyio
async def test_a_claim_loop_asks_no_ttn_of_the_file(tmp_path: Path) -> None:
    """A claim that takes fewer than it asks for reads the head in the same trip to the worker
    thread: the claim loop's ``ttn_after_claim`` then runs no statement; once used, or after a
    claim that failed, the next one asks the file."""
    clock = FakeClock()
    async with SQLiteStore(tmp_path / "jobs.db", clock=clock) as store:
        statements: list[str] = []
        assert store._conn is not None
        store._conn.set_trace_callback(statements.append)
        await store.push_many(N, [("a", 0, "a"), ("b", 30, "b")])
        assert [c.id for c in await store.claim(N, lease=60, limit=5)] == ["a"]
        clock.advance(10)
        before = len(statements)
        assert await store.ttn_after_claim(N) == pytest.approx(20)
        assert len(statements) == before
        assert await store.ttn_after_claim(N) == pytest.approx(20)  # asked again: the file answers
        assert len(statements) > before
        # An idle turn (nothing due) reads it too.
        assert await store.claim(N, lease=60, limit=5) == []
        before = len(statements)
        assert await store.ttn_after_claim(N) == pytest.approx(20)
        assert len(statements) == before
        # A claim that failed leaves no answer behind: a row another serializer wrote stops it.
        async with SQLiteStore(tmp_path / "jobs.db", clock=clock, serializer="pickle") as other:
            await other.push(N, "x", ttl=0, id="x")
        with pytest.raises(SerializerMismatchError):
            await store.claim(N, lease=60, limit=5)
        before = len(statements)
        assert await store.ttn_after_claim(N) == 0.0  # x is due
        assert len(statements) > before
    # Closing forgets what a claim read: a closed store says so, as ttn does.
    with pytest.raises(StoreNotOpenError):
        await store.ttn_after_claim(N)


@pytest.mark.anyio
async def test_unencodable_name_is_a_bad_argument(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "jobs.db") as store:
        with pytest.raises(InvalidArgumentError):
            await store.push("\ud800", "x", ttl=0)
        assert await store.names() == []


# -- serializers ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_pickle_and_msgpack_take_what_json_refuses(tmp_path: Path) -> None:
    odd = {"when": datetime(2024, 1, 2, tzinfo=UTC), "tags": {"a", "b"}, "ratio": Fraction(1, 3)}
    async with SQLiteStore(tmp_path / "p.db", serializer="pickle") as store:
        await store.push(N, odd, ttl=0, id="odd")
        assert await store.look(N, "odd") == odd
        assert await store.poll(N) == [odd]
    async with SQLiteStore(tmp_path / "m.db", serializer="msgpack") as store:
        await store.push(N, {"raw": b"\x00\xff", "n": [1, 2.5]}, ttl=0, id="bin")
        assert await store.pull(N, "bin") == {"raw": b"\x00\xff", "n": [1, 2.5]}


@pytest.mark.anyio
async def test_json_refuses_non_json_and_writes_nothing(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "j.db") as store:
        with pytest.raises(InvalidTypeError):
            await store.push(N, {1, 2}, ttl=0, id="set")
        with pytest.raises(InvalidTypeError):
            await store.push_many(N, [("fine", 0, "ok"), (b"bytes", 0, "bytes")])
        await store.push(N, "keep", ttl=0, id="keep")
        with pytest.raises(InvalidTypeError):
            await store.update(N, "keep", object())
        assert await store.ids(N) == ["keep"]
        assert await store.look(N, "keep") == "keep"


@pytest.mark.anyio
async def test_a_mismatched_serializer_fails_loudly(tmp_path: Path) -> None:
    """Pickle is never loaded by a store that was not told to trust it."""
    path = tmp_path / "jobs.db"
    async with SQLiteStore(path, serializer="pickle") as store:
        await store.push(N, "x", ttl=0, id="x")
    async with SQLiteStore(path) as store:
        with pytest.raises(SerializerMismatchError, match="pickle"):
            await store.poll(N)
        assert await store.size(N) == 1  # the failed poll removed nothing


# -- several stores on one file -----------------------------------------------------------------


@pytest.mark.anyio
async def test_two_stores_on_one_file_see_and_wake_each_other(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    clock = FakeClock(1000.0)
    async with SQLiteStore(path, clock=clock) as a, SQLiteStore(path, clock=clock) as b:
        await b.push(N, "late", ttl=100, id="late")
        assert await a.look(N, "late") == "late"
        async with a.subscribe(N) as sub:
            await b.push(N, "later", ttl=200, id="later")  # not sooner: no notification
            assert await sub.wait(0) is False
            await b.push(N, "soon", ttl=1, id="soon")
            assert await sub.wait(0) is True  # a notification before the wait counts
            assert await sub.wait(0) is False  # and is consumed

            async def push_soon() -> None:
                await anyio.sleep(0.05)
                await b.push(N, "sooner", ttl=0.5, id="sooner")

            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(push_soon)
                with anyio.fail_after(5):
                    assert await sub.wait(30) is True  # 30 s of the FakeClock: never passes here
            assert (
                time.monotonic() - started < 1.0
            )  # woken by the datagram (or, failing it, the nap), not late
        assert await a.xpoll(N) == []
        clock.advance(1)
        assert await a.claim(N, lease=5) != []


@pytest.mark.anyio
async def test_wait_times_out_on_the_store_clock(tmp_path: Path) -> None:
    """With a FakeClock the timeout passes when the clock is advanced, not in real time."""
    clock = FakeClock(1000.0)
    async with SQLiteStore(tmp_path / "jobs.db", clock=clock) as store, store.subscribe(N) as sub:
        result: list[bool] = []

        async def waiter() -> None:
            result.append(await sub.wait(10))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.sleep(0.15)  # a few naps in real time: still waiting
            assert result == []
            clock.advance(10)
        assert result == [False]


# -- waking other processes ----------------------------------------------------------------------

#: So that a child process runs this checkout's rehydrate, not whichever one is installed.
_CHILD_ENV = {**os.environ, "PYTHONPATH": str(Path(rehydrate.__file__).resolve().parent.parent)}


def _entries(directory: Path) -> list[str] | None:
    """The files in a wake-up directory, ``None`` if there is none (sync: the tests' own look)."""
    return sorted(os.listdir(directory)) if directory.is_dir() else None


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def _woken_by(sub: Any, run: Any, *, within: float = 20) -> float:
    """Wait on ``sub`` while ``run()`` writes; how long after the write returned the wait ended."""
    woken = anyio.Event()
    when: list[float] = []

    async def waiter() -> None:
        assert await sub.wait(None) is True
        when.append(time.monotonic())
        woken.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.01)  # the waiter is asleep
        with anyio.fail_after(within):
            await run()
            wrote = time.monotonic()
            await woken.wait()
    return when[0] - wrote


@pytest.mark.anyio
async def test_a_push_by_the_command_in_another_process_wakes_a_subscription(tmp_path: Path) -> None:
    """No nap: the naps are 60 s apart, so only the wake-up datagram can end the wait in time."""
    path = tmp_path / "shared.db"
    async with SQLiteStore(path, nap=60) as store, store.subscribe(N) as sub:
        assert sub.listener is not None  # type: ignore[attr-defined]
        wake = Path(f"{path}-wake")
        assert _mode(wake) == _mode(tmp_path)  # the database directory's, not the umask's

        async def push() -> None:
            argv = [sys.executable, "-m", "rehydrate", "push", N, '"x"', "--store", f"sqlite:///{path}"]
            done = await anyio.run_process(argv, env=_CHILD_ENV, check=False)
            assert done.returncode == 0, done.stderr

        assert await _woken_by(sub, push) < 10  # the nap alone would take 60 s
        assert await store.ttn(N) is not None
    assert _entries(wake) is None  # the last subscriber removes the directory


@pytest.mark.anyio
async def test_plain_synchronous_code_wakes_subscribers_with_notify(tmp_path: Path) -> None:
    """``notify`` is what a writer without an event loop calls after its commit; it never raises."""
    path = str(tmp_path / "shared.db")
    async with SQLiteStore(path, nap=60) as store, store.subscribe(N) as sub:

        async def wake() -> None:
            sent = await anyio.to_thread.run_sync(_sqlite_wake.notify, path, {N: 7, "other": 1})
            assert sent == 1  # the one subscriber of N; nobody waits on "other"

        assert await _woken_by(sub, wake) < 10
        assert sub.seen == 7  # type: ignore[attr-defined]  # the counter came with the datagram
        # Old news (a counter already seen) does not wake it.
        await anyio.to_thread.run_sync(_sqlite_wake.notify, path, {N: 7})
        assert await sub.wait(0.01) is False
    for nowhere in (":memory:", str(tmp_path / "missing" / "x.db")):
        assert await anyio.to_thread.run_sync(_sqlite_wake.notify, nowhere, {N: 1}) == 0


def _bump_behind_the_stores_back(path: str) -> None:
    """A writer that sends no datagram (another tool, an older version): only the row changes."""
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE rehydrate_signals SET counter = counter + 1 WHERE name = ?", (N,))


@pytest.mark.anyio
async def test_a_datagram_it_cannot_read_makes_it_read_the_counter_row(tmp_path: Path) -> None:
    """Garbage (or a name cut short) in the socket: not ignored, not a crash, but a look at the row."""
    path = str(tmp_path / "shared.db")
    async with SQLiteStore(path, nap=60) as store:
        await store.push(N, "x", ttl=100)  # the name's counter row exists
        async with store.subscribe(N) as sub:
            listener = sub.listener  # type: ignore[attr-defined]
            assert listener is not None

            async def garbage() -> None:
                await anyio.to_thread.run_sync(_bump_behind_the_stores_back, path)
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
                    sender.sendto(b"\0" * 8 + b"\xff\xfe", listener.path)

            assert await _woken_by(sub, garbage) < 10  # the nap (60 s) did not do it


@pytest.mark.anyio
async def test_a_dead_processs_socket_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """A SIGKILLed subscriber leaves its socket file: a writer's refused datagram removes it."""
    path = tmp_path / "shared.db"
    script = (
        "import anyio, sys\n"
        "from rehydrate.stores._sqlite import SQLiteStore\n"
        "async def main():\n"
        f"    async with SQLiteStore({str(path)!r}) as s, s.subscribe({N!r}):\n"
        "        print('ready', flush=True)\n"
        "        await anyio.sleep(60)\n"
        "anyio.run(main)\n"
    )
    wake = Path(f"{path}-wake")
    async with SQLiteStore(path) as store:
        async with await anyio.open_process([sys.executable, "-c", script], env=_CHILD_ENV) as child:
            assert child.stdout is not None
            with anyio.fail_after(20):
                assert b"ready" in await child.stdout.receive()
            child.kill()  # SIGKILL: no clean-up
            await child.wait()
        assert len(_entries(wake) or []) == 1  # left behind
        await store.push(N, "x", ttl=1)  # bumps the counter: wakes (tries to) every subscriber
        assert _entries(wake) == []


@pytest.mark.anyio
async def test_a_new_subscription_removes_dead_sockets_of_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where nobody writes, dead sockets still do not pile up; and past the cap, subscriptions nap."""
    path = tmp_path / "shared.db"
    wake = Path(f"{path}-wake")
    os.mkdir(wake)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(wake / f"{_sqlite_wake.tag(N)}.deadbeef"))
    dead.close()  # the file stays, as after a SIGKILL
    other = wake / f"{_sqlite_wake.tag('other')}.feedface"
    os.close(os.open(other, os.O_CREAT | os.O_WRONLY))  # another name's (not even a socket): left alone
    monkeypatch.setattr(_sqlite_wake, "MAX_SUBSCRIBERS", 1)
    async with SQLiteStore(path) as store, store.subscribe(N) as first, store.subscribe(N) as second:
        names = _entries(wake) or []
        assert len(names) == 2  # the dead one is gone, the first subscription's socket came
        assert other.name in names
        assert first.listener is not None  # type: ignore[attr-defined]
        assert second.listener is None  # type: ignore[attr-defined]  # over the cap: the nap


@pytest.mark.anyio
async def test_without_the_channel_the_nap_still_wakes(tmp_path: Path) -> None:
    """A file where the directory would be: no socket, and another store's push is seen by the nap."""
    path = tmp_path / "shared.db"
    os.close(os.open(f"{path}-wake", os.O_CREAT | os.O_WRONLY))
    async with SQLiteStore(path) as a, SQLiteStore(path) as b, a.subscribe(N) as sub:
        assert sub.listener is None  # type: ignore[attr-defined]
        assert await _woken_by(sub, lambda: b.push(N, "x", ttl=1)) < 10  # the nap is 0.05 s
    async with SQLiteStore(":memory:") as memory, memory.subscribe(N) as sub:
        assert sub.listener is None  # type: ignore[attr-defined]


@pytest.mark.anyio
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="addresses through /proc/self/fd")
async def test_a_path_too_long_for_a_socket_address_still_wakes(tmp_path: Path) -> None:
    """Over 107 bytes, sockets are bound and reached through a descriptor of their directory."""
    path = tmp_path / ("x" * 120 + ".db")
    async with SQLiteStore(path, nap=60) as a, SQLiteStore(path) as b, a.subscribe(N) as sub:
        assert sub.listener is not None  # type: ignore[attr-defined]
        assert await _woken_by(sub, lambda: b.push(N, "x", ttl=1)) < 10


# -- several processes on one file --------------------------------------------------------------

ELEMENTS = 10_000


def _claim_and_ack(path: str, barrier: Any, results: Any) -> None:
    """Run in a spawned process: claim and ack until nothing is due; report what was claimed and acked."""

    async def main() -> tuple[list[str], list[str]]:
        claimed: list[str] = []
        acked: list[str] = []
        async with SQLiteStore(path) as store:
            await anyio.to_thread.run_sync(barrier.wait, 30)  # both open: start together
            while claims := await store.claim(N, lease=600, limit=50):
                claimed.extend(c.id for c in claims)
                await anyio.sleep(0.002)  # the work, so that one process cannot take everything
                oks = await store.ack(N, [(c.id, c.token) for c in claims])
                acked.extend(c.id for c, ok in zip(claims, oks, strict=True) if ok)
        return claimed, acked

    results.put(anyio.run(main))


def test_two_processes_handle_every_element_exactly_once(tmp_path: Path) -> None:
    """Two processes, each with its own store on one file, never claim the same element."""
    path = str(tmp_path / "shared.db")

    async def fill() -> None:
        async with SQLiteStore(path) as store:
            await store.push_many(N, [(i, 0, f"e{i}") for i in range(ELEMENTS)])

    anyio.run(fill)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    workers = [ctx.Process(target=_claim_and_ack, args=(path, barrier, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=60) for _ in workers]
    except queue.Empty:  # pragma: no cover - only on failure
        pytest.fail("a worker process did not report")
    finally:
        for worker in workers:
            worker.join(timeout=30)
    assert [worker.exitcode for worker in workers] == [0, 0]
    results.close()
    results.join_thread()

    (claimed_1, acked_1), (claimed_2, acked_2) = reports
    every = {f"e{i}" for i in range(ELEMENTS)}
    assert not set(claimed_1) & set(claimed_2)  # nothing claimed by both
    assert len(claimed_1) + len(claimed_2) == ELEMENTS  # nothing claimed twice
    assert sorted(acked_1 + acked_2) == sorted(every)  # everything handled exactly once
    assert acked_1
    assert acked_2  # both took part

    async def check() -> None:
        async with SQLiteStore(path) as store:
            assert await store.size(N) == 0

    anyio.run(check)


# -- only writers create a database --------------------------------------------------------------


@pytest.mark.anyio
async def test_create_false_opens_only_an_existing_store(tmp_path: Path) -> None:
    missing = tmp_path / "tpyo.db"
    store = SQLiteStore(missing, create=False)
    with pytest.raises(StoreUnavailableError, match="no SQLite database at"):
        await store.open()
    assert not missing.exists()
    with pytest.raises(StoreUnavailableError):
        await open_store(f"sqlite:///{missing}", create=False).open()
    assert not missing.exists()

    other = tmp_path / "other.db"  # a SQLite file that is not a rehydrate store: left alone
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE mine (x)")
    conn.close()
    before = other.read_bytes()
    with pytest.raises(StoreUnavailableError, match="holds no rehydrate store"):
        await SQLiteStore(other, create=False).open()
    assert other.read_bytes() == before

    real = tmp_path / "real.db"
    async with SQLiteStore(real) as writer:
        await writer.push(N, "x", ttl=0, id="x")
    async with SQLiteStore.from_url(f"sqlite:///{real}", create=False) as reader:
        assert await reader.look(N, "x") == "x"
    with pytest.raises(InvalidArgumentError):
        SQLiteStore(real, create="no")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "argv", [["stats"], ["look", "q", "x"], ["ttn", "q"], ["xpoll", "q"], ["dead", "q"], ["poll", "q"]]
)
def test_verbs_that_add_nothing_do_not_create_a_database(tmp_path: Path, argv: list[str]) -> None:
    """``rehydrate stats --store sqlite:///tpyo.db`` used to leave an empty tpyo.db behind."""
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", *argv, "--store", "sqlite:///tpyo.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "no SQLite database at 'tpyo.db'" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_push_creates_the_database(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", "push", "q", '"x"', "--id", "x", "--store", "sqlite:///new.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done
    assert (tmp_path / "new.db").exists()


@pytest.mark.anyio
async def test_a_version_1_file_is_migrated_when_opened(tmp_path: Path) -> None:
    """Version 2 added the workers table: a file of version 1 gets it, its elements untouched
    (and version 3's revisions)."""
    path = tmp_path / "v1.db"
    async with SQLiteStore(path) as store:
        await store.push("jobs", "kept", ttl=0, id="k")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE rehydrate_workers")
        conn.execute("ALTER TABLE rehydrate_elements DROP COLUMN rev")  # (version 3's)
        conn.execute("UPDATE rehydrate_meta SET value = 1 WHERE key = 'schema'")
    conn.close()
    async with SQLiteStore(path) as store:
        assert await store.look("jobs", "k") == "kept"
        await store.heartbeat("w", {"ok": True}, ttl=5)
        assert [w.data for w in await store.workers()] == [{"ok": True}]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM rehydrate_meta WHERE key = 'schema'").fetchone() == (3,)
    conn.close()


# -- element size ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_element_limit_is_sqlites_row_limit(tmp_path: Path) -> None:
    """SQLite holds rows of at most SQLITE_MAX_LENGTH bytes (10**9 by default, read from the
    connection): an element may take that less 64 KiB for the row's other columns. Beyond it,
    SQLite said "string or blob too big" and the store called itself unavailable; a row too big
    for its name and id (the element itself was checked) is a bad argument, nothing written."""
    async with SQLiteStore(tmp_path / "jobs.db") as store:
        assert store.max_element_bytes == 1_000_000_000 - 65536
        assert store._conn is not None
        store._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100_000)
        with pytest.raises(InvalidArgumentError, match="too big"):
            await store.push(N, "x", ttl=0, id="i" * 200_000)
        assert await store.size(N) == 0


# -- revisions (schema version 3) -------------------------------------------------------------------

#: The tables as version 2 (the release before revisions) created them, verbatim, and the
#: statements it filed, claimed and rescheduled with: a file written by that version.
_V2_SCHEMA = (
    """CREATE TABLE rehydrate_meta (
        key TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE rehydrate_elements (
        name TEXT NOT NULL,
        id TEXT NOT NULL,
        payload BLOB NOT NULL,
        serializer TEXT NOT NULL,
        due REAL NOT NULL,
        seq INTEGER NOT NULL,
        ttl REAL NOT NULL,
        attempt INTEGER NOT NULL DEFAULT 0,  -- the claim stamp: see rehydrate._core._fence
        claimed INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (name, id)
    )""",
    "CREATE INDEX rehydrate_elements_due ON rehydrate_elements (name, due, seq)",
    "CREATE TABLE rehydrate_signals (name TEXT PRIMARY KEY, counter INTEGER NOT NULL) WITHOUT ROWID",
    """CREATE TABLE rehydrate_workers (
        id TEXT PRIMARY KEY,
        data TEXT NOT NULL,
        last_seen REAL NOT NULL,
        expires REAL NOT NULL
    ) WITHOUT ROWID""",
    "INSERT INTO rehydrate_meta (key, value) VALUES ('seq', 0)",
    "INSERT INTO rehydrate_meta (key, value) VALUES ('schema', 2)",
)
_V2_INSERT = (
    "INSERT INTO rehydrate_elements (name, id, payload, serializer, due, seq, ttl)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_V2_CLAIM = (
    "UPDATE rehydrate_elements SET due = ?, seq = ?, ttl = ?, attempt = ?, claimed = 1"
    " WHERE name = ? AND id = ?"
)
_V2_REFILE = "UPDATE rehydrate_elements SET due = ?, seq = ?, ttl = ?, claimed = 0 WHERE name = ? AND id = ?"


def _v2_file(path: Path) -> dict[str, tuple[Any, float, int, bool, int]]:
    """A version-2 file, written as that version wrote it: four elements of ``jobs`` (one due,
    one later, one under a claim, one rescheduled after a claim) and one of ``other``. Returns
    what each should read back as: (element, due, attempt, claimed, claim token or 0)."""
    from rehydrate._core._fence import stamp

    conn = sqlite3.connect(path, isolation_level=None)
    seq = 0

    def next_seq() -> int:
        nonlocal seq
        seq += 1
        conn.execute("UPDATE rehydrate_meta SET value = ? WHERE key = 'seq'", (seq,))
        return seq

    conn.execute("BEGIN")
    for statement in _V2_SCHEMA:
        conn.execute(statement)
    rows: list[tuple[str, str, Any, float]] = [
        (N, "due", {"n": 1}, 1000.0),
        (N, "later", [2], 1500.0),
        (N, "held", "h", 1000.0),
    ]
    rows += [(N, "again", None, 1000.0), ("other", "due", 5, 900.0)]
    for name, id, element, due in rows:
        payload = json.dumps(element, separators=(",", ":")).encode()
        conn.execute(_V2_INSERT, (name, id, payload, "json", due, next_seq(), 0.0))
    held = stamp(next_seq(), 1)  # claimed at 1000 for 30 s
    conn.execute(_V2_CLAIM, (1030.0, seq, 30.0, held, N, "held"))
    again = stamp(next_seq(), 1)  # claimed, then rescheduled (its attempt kept) to 1200
    conn.execute(_V2_CLAIM, (1030.0, seq, 30.0, again, N, "again"))
    conn.execute(_V2_REFILE, (1200.0, next_seq(), 200.0, N, "again"))
    conn.execute("COMMIT")
    conn.close()
    return {
        "due": ({"n": 1}, 1000.0, 0, False, 0),
        "later": ([2], 1500.0, 0, False, 0),
        "held": ("h", 1030.0, 1, True, held),
        "again": (None, 1200.0, 1, False, 0),
    }


@pytest.mark.anyio
async def test_a_version_2_file_is_migrated_to_revisions(tmp_path: Path) -> None:
    """A file written by the version before revisions opens: every element reads back with its
    due time, attempt and claim, each with its own revision (the migration numbers existing rows),
    a claim taken before the migration can still be acked, and every write (conditional ones
    too) then gives revisions no migrated element has."""
    path = tmp_path / "v2.db"
    expected = _v2_file(path)
    clock = FakeClock(1010.0)
    async with SQLiteStore(path, clock=clock) as store:
        revisions: dict[str, int] = {}
        for id, (element, due, attempt, claimed, _) in expected.items():
            found = await store.read(N, id)
            assert found is not None, id
            assert found[0] == element
            info = found[1]
            assert (info.due, info.attempt, info.claimed) == (due, attempt, claimed), id
            assert info == await store.info(N, id)
            assert info.revision == (await store.info(N, id)).revision  # type: ignore[union-attr]
            revisions[id] = info.revision
        other = await store.info("other", "due")
        assert other is not None
        assert len({*revisions.values(), other.revision}) == 5  # all distinct
        assert await store.ack(N, [("held", expected["held"][4])]) == [True]
        assert await store.update_if(N, "due", revisions["due"] + 1000, "no") is None
        updated = await store.update_if(N, "due", revisions["due"], {"n": 2})
        assert updated is not None
        assert await store.look(N, "due") == {"n": 2}
        (claim,) = await store.claim(N, lease=10)
        assert claim.id == "due"
        replaced = await store.replace_if(
            N, [("due", claim.revision, "next", 60), ("later", revisions["later"], 3, 0)]
        )
        assert None not in replaced
        assert await store.pull_if(N, "again", revisions["again"])
        await store.push(N, "new", ttl=0, id="held")
        new = await store.info(N, "held")
        assert new is not None
        given = [updated, claim.revision, *replaced, new.revision]
        assert len(set(given)) == len(given)
        assert not set(given) & {*revisions.values(), other.revision}
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM rehydrate_meta WHERE key = 'schema'").fetchone() == (3,)
    conn.close()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rehydrate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_rehydrate_migrate_brings_a_version_2_file_to_revisions(tmp_path: Path) -> None:
    """``rehydrate migrate --check`` says a version-2 file needs migrating (one line, exit 1,
    nothing changed); ``rehydrate migrate`` migrates it, before any worker opens it."""
    path = tmp_path / "v2.db"
    _v2_file(path)
    url = "sqlite:///v2.db"
    checked = _cli("migrate", "--check", "--store", url, cwd=tmp_path)
    assert checked.returncode == 1, checked
    (line,) = checked.stderr.strip().splitlines()
    assert "schema of version 2" in line
    assert "rehydrate migrate" in line
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM rehydrate_meta WHERE key = 'schema'").fetchone() == (2,)
    conn.close()
    done = _cli("migrate", "--store", url, cwd=tmp_path)
    assert done.returncode == 0, done
    assert "schema version 3" in done.stdout
    assert _cli("migrate", "--check", "--store", url, cwd=tmp_path).returncode == 0
    conn = sqlite3.connect(path)
    revisions = conn.execute("SELECT rev FROM rehydrate_elements").fetchall()
    conn.close()
    assert len(set(revisions)) == 5
    missing = _cli("migrate", "--check", "--store", "sqlite:///tpyo.db", cwd=tmp_path)
    assert missing.returncode == 1
    assert "no SQLite database at 'tpyo.db'" in missing.stderr
    assert not (tmp_path / "tpyo.db").exists()


@pytest.mark.anyio
async def test_a_revision_is_never_given_again_after_a_reopen(tmp_path: Path) -> None:
    """Revisions come from the file's filing counter, not from the store object: an element
    pulled and pushed again under its id by another store (another process) on the file never
    gets the old element's revision back, so a write conditional on the old one does nothing."""
    path = tmp_path / "jobs.db"
    async with SQLiteStore(path) as store:
        await store.push(N, "old", ttl=0, id="x")
        old = await store.info(N, "x")
        assert old is not None
    for _ in range(3):
        async with SQLiteStore(path) as store:
            await store.pull(N, "x")
            await store.push(N, "new", ttl=0, id="x")
            new = await store.info(N, "x")
            assert new is not None
            assert new.revision != old.revision
            assert await store.update_if(N, "x", old.revision, "stale") is None
            assert not await store.pull_if(N, "x", old.revision)
            assert await store.replace_if(N, [("x", old.revision, "stale", 0)]) == [None]
            assert await store.look(N, "x") == "new"
            old = new


@pytest.mark.anyio
async def test_conditional_writes_from_two_connections_let_exactly_one_win(tmp_path: Path) -> None:
    """The comparison and the write are one statement in one ``BEGIN IMMEDIATE`` transaction,
    which is what makes compare-and-set hold across processes sharing the file: of two writers
    that read the same revision, exactly one writes and the other does nothing (the guarantee
    the scheduling layer's rules stand on: no write made on a stale read). Two store objects,
    two connections, racing each round, every pair of conditional verbs."""
    path = tmp_path / "jobs.db"
    async with SQLiteStore(path) as one, SQLiteStore(path) as two:
        await one.push(N, 0, ttl=0, id="x")
        verbs = ("update_if", "replace_if", "pull_if")
        for first in verbs:
            for second in verbs:
                info = await one.info(N, "x")
                if info is None:
                    await one.push(N, 0, ttl=0, id="x")
                    info = await one.info(N, "x")
                assert info is not None
                results: dict[str, object] = {}

                async def write(
                    store: SQLiteStore,
                    verb: str,
                    tag: str,
                    revision: int,
                    results: dict[str, object] = results,
                ) -> None:
                    if verb == "update_if":
                        results[tag] = await store.update_if(N, "x", revision, tag)
                    elif verb == "replace_if":
                        (results[tag],) = await store.replace_if(N, [("x", revision, tag, 0)])
                    else:
                        results[tag] = await store.pull_if(N, "x", revision)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(write, one, first, "one", info.revision)
                    tg.start_soon(write, two, second, "two", info.revision)
                won = [tag for tag, result in results.items() if result not in (None, False)]
                assert len(won) == 1, (first, second, results)
                (winner,) = won
                verb = first if winner == "one" else second
                now = await two.read(N, "x")
                if verb == "pull_if":
                    assert now is None
                else:
                    assert now is not None
                    assert now[0] == winner
                    assert now[1].revision == results[winner]


@pytest.mark.anyio
async def test_a_conditional_write_compares_once_it_holds_the_write_lock(tmp_path: Path) -> None:
    """Each conditional write compares the revision in the statement that writes, inside its
    ``BEGIN IMMEDIATE`` transaction: a writer that waited for another process's write lock
    compares with what that process wrote, not with what it saw before it waited. That is the
    guarantee the scheduling layer's rules stand on (a write decided on a stale read does
    nothing). Three stores (three connections) wait, with the revision they read, while another
    process holds the lock and writes the element; once it commits, all three do nothing."""
    path = tmp_path / "jobs.db"
    stores = [SQLiteStore(path) for _ in range(3)]
    async with stores[0], stores[1], stores[2]:
        await stores[0].push(N, "read", ttl=0, id="x")
        info = await stores[0].info(N, "x")
        assert info is not None
        results: list[object] = [None] * 3
        # Another process's write transaction (its statements run in a thread: blocking calls).
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        await anyio.to_thread.run_sync(other.execute, "BEGIN IMMEDIATE")
        lock = Path(f"{path}-wake") / "lock"

        def waiting() -> int:
            return len(list(lock.iterdir())) if lock.is_dir() else 0

        def written() -> None:
            """That process's write: the element replaced, with a revision from the counter."""
            other.execute("UPDATE rehydrate_meta SET value = value + 1 WHERE key = 'seq'")
            other.execute(
                "UPDATE rehydrate_elements SET payload = CAST('\"written\"' AS BLOB),"
                " rev = (SELECT value FROM rehydrate_meta WHERE key = 'seq') WHERE name = ? AND id = ?",
                (N, "x"),
            )
            other.execute("COMMIT")
            _sqlite_wake.hand_over(_sqlite_wake.directory(str(path)))

        async def write(index: int) -> None:
            store = stores[index]
            if index == 0:
                results[0] = await store.update_if(N, "x", info.revision, "stale")
            elif index == 1:
                (results[1],) = await store.replace_if(N, [("x", info.revision, "stale", 0)])
            else:
                results[2] = await store.pull_if(N, "x", info.revision)

        try:
            async with anyio.create_task_group() as tg:
                for index in range(3):
                    tg.start_soon(write, index)
                with anyio.fail_after(10):  # until all three wait for the lock (a worker thread each)
                    while True:
                        if await anyio.to_thread.run_sync(waiting) >= 3:
                            break
                        await anyio.sleep(0.001)  # (they wait in worker threads: no event to wait on)
                await anyio.to_thread.run_sync(written)
        finally:
            await anyio.to_thread.run_sync(other.close)
        assert results == [None, None, False]
        found = await stores[2].read(N, "x")
        assert found is not None
        assert found[0] == "written"
        assert found[1].revision != info.revision
