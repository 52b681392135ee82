"""The SQLite store: named dehydrators in one file, durable, shared by the processes of one machine."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlsplit

import anyio
import anyio.to_thread

from rehydrate._clock import WallClock
from rehydrate._core import _limits, _validate, _workers
from rehydrate._core._fence import attempt_of, stamp
from rehydrate._core._limits import LimitAnswer, LimitInfo, LimitSpec
from rehydrate._core._records import Claim, ElementInfo, Summary, WorkerRecord, new_claim
from rehydrate._core._validate import Seconds
from rehydrate.abc import Capabilities, Clock, Serializer, Subscription
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    StoreUnavailableError,
    UnknownIdError,
)
from rehydrate.stores import _sqlite_sql as sql
from rehydrate.stores import _sqlite_wake as wake
from rehydrate.stores._base import StoreBase, as_float, as_size, as_str, element_bytes, url_options
from rehydrate.stores._limits_sql import LimitTables
from rehydrate.stores._sqlite_wake import Listener

__all__ = ["BlockingSQLiteStore", "SQLiteStore"]

_T = TypeVar("_T")

#: The most elements one ``claim`` takes in one transaction (the write lock is held meanwhile).
_CLAIM_BATCH: Final = 1000
#: How many ids ``look_many`` reads per trip to the connection's thread.
_LOOK_BATCH: Final = 1000
_SYNCHRONOUS: Final = ("FULL", "NORMAL")
#: How often a subscription reads its counter row when other processes cannot wake it (no wake-up
#: socket: ``:memory:``, no ``AF_UNIX``, a directory it may not write): the bound on their lateness.
_NAP: Final = 0.05
#: ...and when they can: the nap then only catches a writer that could not send (another user's
#: process, an older version), so one read a second is enough.
_NAP_WITH_WAKE: Final = 1.0

#: What a ``sqlite://`` URL's query may say, and how to read it.
_URL_OPTIONS: Final = {
    "serializer": as_str,
    "synchronous": as_str,
    "busy_timeout": as_float,
    "nap": as_float,
    "max_element_bytes": as_size,
}
#: SQLite holds a row of at most ``SQLITE_MAX_LENGTH`` bytes (10**9 unless built otherwise; read
#: at open): an element may take that less this, left for the row's name, id and other columns.
_ROW_RESERVE: Final = 64 * 1024
_DEFAULT_MAX_LENGTH: Final = 1_000_000_000

#: Payload bytes are bound as a ``bytearray`` (the same BLOB, a copy of a hundred bytes): the
#: ``sqlite3`` module binds ints, floats, strs and bytearrays directly, but looks up an adapter
#: for ``bytes`` first, and the failed lookups (two attribute errors made and cleared) cost more
#: than binding the value, three times per schedule occurrence filed (counted with callgrind: see
#: docs/benchmarks.md, "Recurring schedules").
_blob: Final = bytearray


#: The limits' tables and steps (``rehydrate.stores._limits_sql``).
_LIMITS: Final = LimitTables("rehydrate_", postgres=False)


def _new_id() -> str:
    """128 random bits in 32 hex digits: unique across processes without coordination."""
    return os.urandom(16).hex()


@contextmanager
def _translated(where: str) -> Iterator[None]:
    """Turn the backend's failures into :class:`StoreUnavailableError`; bad text into bad arguments."""
    try:
        yield
    except (sqlite3.ProgrammingError, sqlite3.InterfaceError, sqlite3.IntegrityError):
        raise  # a bug in this module, not an unavailable backend
    except sqlite3.DataError as exc:
        # "string or blob too big": a row beyond SQLITE_MAX_LENGTH (elements are refused before,
        # with the limit named; this is a name and id of hundreds of kilobytes), nothing written.
        raise InvalidArgumentError(f"SQLite store {where}: {exc}") from exc
    except sqlite3.Error as exc:
        # OperationalError: "database is locked" beyond busy_timeout, cannot open, disk I/O or
        # full, read-only file; DatabaseError: "file is not a database".
        raise StoreUnavailableError(f"SQLite store {where}: {exc}") from exc
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"names and ids must be encodable as UTF-8 (no lone surrogates): {exc}"
        ) from exc


class _SQLiteSubscription(Subscription):
    """Woken at once by this store's own writes, by a datagram for other processes' (see
    ``_sqlite_wake.py``), and failing both by the name's counter row, read every ``nap``."""

    def __init__(self, store: SQLiteStore, name: str) -> None:
        self._store = store
        self._name = name
        self._event = anyio.Event()
        #: The last counter value this subscription has reported (or started from).
        self.seen = 0
        #: This subscription's wake-up socket, ``None`` when other processes cannot wake it.
        self.listener: Listener | None = None
        #: The scope of the task waiting on the socket: a notification from this store cancels it.
        self._listening: anyio.CancelScope | None = None

    def notify(self, counter: int) -> None:
        self.seen = max(self.seen, counter)
        self._event.set()
        if self._listening is not None:
            self._listening.cancel()

    def _consume(self, counter: int = 0) -> bool:
        self.seen = max(self.seen, counter)
        self._event = anyio.Event()
        return True

    async def _changed(self) -> bool:
        counter = await self._store._signal(self._name)
        if counter > self.seen:
            return self._consume(counter)
        return False

    async def _listen(self, listener: Listener, nap: float) -> bool:
        """Wait for a datagram (or this store's notification); ``False`` when the counter row must
        be read: ``nap`` passed, or a datagram could not be read (cut short, another name's)."""
        with anyio.move_on_after(nap) as scope:
            self._listening = scope
            try:
                await anyio.wait_readable(listener.socket)
            finally:
                self._listening = None
        understood = True
        for news in listener.receive():
            if news is None or news[0] != self._name:
                understood = False
            elif news[1] > self.seen:  # older news is already seen
                self.notify(news[1])
        return self._event.is_set() or (understood and not scope.cancelled_caught)

    async def _nap_until_notified(self) -> bool:
        """Wait for a notification; every ``nap`` seconds, look at the shared counter as well."""
        nap = self._store._nap_for(self.listener)
        while True:
            listener = self.listener
            if listener is not None and self._listening is None:
                woke = await self._listen(listener, nap)
            else:  # no socket, or another task of this subscription already waits on it
                with anyio.move_on_after(nap) as scope:
                    await self._event.wait()
                woke = not scope.cancelled_caught
            if self._event.is_set():
                return self._consume()
            if not woke and await self._changed():
                return True

    async def wait(self, timeout: float | None) -> bool:
        if self._event.is_set():
            return self._consume()
        # A notification from another process may have come before this call: it counts.
        if await self._changed():
            return True
        if timeout is not None and timeout <= 0:
            return self._consume() if self._event.is_set() else False
        woke = False
        clock = self._store.clock
        if timeout is None:
            woke = await self._nap_until_notified()
        else:
            # The timeout runs on the store's clock (a FakeClock in tests), the naps in real time.
            with clock.move_on_at(clock() + timeout):
                woke = await self._nap_until_notified()
        if woke:
            return True
        # Cancelled by the timeout between a notification and its report: still report it.
        return self._consume() if self._event.is_set() else False


class SQLiteStore(StoreBase):
    """Dehydrators in one SQLite file (``sqlite:///path/to/file.db``): durable, and shared by every
    process of the machine that opens the same file.

    **Durability.** The file is in WAL mode with ``synchronous=FULL`` by default: the write-ahead
    log is fsynced at every commit, so an element is on disk when ``push`` returns, as the
    :class:`~rehydrate.abc.Store` contract promises, even if the machine loses power a moment later.
    ``synchronous="NORMAL"`` (also ``?synchronous=normal`` in the URL) skips that fsync: still
    consistent and safe against a *process* crash (the commit is in the OS's page cache), but an
    OS crash or power loss can roll back the last transactions, pushes that had already returned
    among them. It is faster for small transactions; choose it knowingly. Either way, ``claim``
    and ``extend`` commit without an fsync: they only take or lengthen leases, so losing them
    (which takes a power loss or an OS crash, and the log keeps commits in order, so only the
    last ones; the next fsynced commit of any process makes them durable too) only makes those
    elements due again, which at-least-once delivery allows, and every process that held their
    leases died with the machine. That fsync was the largest part of a delivery's lateness. ``busy_timeout``
    (seconds, 5 by default) is how long a call waits for another process's write lock before
    raising :class:`~rehydrate.errors.StoreUnavailableError`.

    **Atomicity across processes.** Every call that writes is one ``BEGIN IMMEDIATE`` transaction:
    the write lock is taken before the due rows are read, so two processes' ``claim`` calls never
    return the same element, and ``push_many`` is all or nothing.

    **Time** is ``clock``, by default :class:`~rehydrate._clock.WallClock` (``time.time``): due
    times are stored as Unix times, so they survive a restart and every process on the machine
    agrees on them. A :class:`~rehydrate.testing.FakeClock` can be passed in tests. The clock is
    read inside each transaction (in the worker thread), once the write lock is held, except that
    the batch verbs ``push_many`` and ``replace_if`` count their ttls from the call; a clock that
    steps back is treated as standing still, as by the memory store.

    **Layout.** One table of elements, ``(name, id)`` its primary key, with a B-tree index on
    ``(name, due, seq)``: ``poll``, ``xpoll``, ``claim`` and ``ttn`` walk the index in due order
    from the dehydrator's first element, O(log n + k) for k elements. ``seq`` is a filing order
    kept in a counter row and allocated inside each transaction (push, claim, reschedule and
    extend file an element anew with a fresh one), so elements due at the same instant come out
    in the order they were filed. Each row's revision (``rev``) is drawn from the same counter:
    a write that files the row anew takes its new ``seq``, ``update`` draws one, ``extend`` keeps
    it; so it only grows, and the conditional writes compare it in the statement that writes.
    The statements are in ``_sqlite_sql.py``.

    **Threads.** ``sqlite3`` blocks, so every call runs in a worker thread through
    :func:`anyio.to_thread.run_sync`, and one connection serves the store, used by one thread at a
    time (an :class:`anyio.CapacityLimiter` of 1). The event loop never waits on the disk; asyncio
    and trio both work. A call cancelled while its transaction runs lets it finish (the call may
    then have taken effect, like any interrupted call to a store).

    **Elements** go through ``serializer`` (a name, ``"json"``, ``"msgpack"`` or ``"pickle"``, or a
    :class:`~rehydrate.abc.Serializer`; JSON by default). An element it cannot serialize raises
    :class:`~rehydrate.errors.InvalidTypeError` before anything is written. Elements are serialized
    on the event loop before the call goes to its thread (so no other task can change one while it
    is written) and deserialized in the worker thread inside the transaction (an element that
    cannot be read rolls the transaction back: nothing is removed). The serializer's name is stored
    with each element, and reading one written by another serializer raises
    :class:`~rehydrate.errors.SerializerMismatchError` rather than guessing (loading pickle runs code).

    **Subscriptions** are woken at once by this store's own writes, and by other processes' (or
    other store objects') through a *wake-up datagram*: every write that makes something due
    sooner bumps a per-name counter row in the same transaction, and once it has committed, the
    writer sends the new counter to each subscriber of that name, one Unix datagram socket per
    waiting subscription in a directory beside the file (``jobs.db-wake/``; see
    ``_sqlite_wake.py``). SQLite itself cannot push a notification to another process. The
    counter row stays the truth: a waiting subscription also reads it every ``nap`` seconds, in
    case a datagram could not be sent (1 s by default; 0.05 s where there is no socket to wait
    on: ``:memory:``, no ``AF_UNIX``, a directory it may not write). A notification is never
    lost, at worst noticed up to ``nap`` later. ``docs/stores-design-history.md`` has the
    alternatives and the measurements.

    Args:
        path: the database file, created by :meth:`open` if missing (its directory must exist), or
            ``":memory:"`` for a private in-memory database (not durable, not shared).
        clock: where the time comes from (wall time by default). Every process sharing a file must
            use the same clock.
        serializer: ``"json"`` (default), ``"msgpack"``, ``"pickle"`` or a serializer object.
        synchronous: ``"FULL"`` (default, an fsync per commit) or ``"NORMAL"``; see above.
        busy_timeout: seconds to wait for another process's write lock.
        nap: the longest a subscription sleeps before reading its counter row for other processes'
            notifications (the datagrams aside); by default 1 s with a wake-up socket, 0.05 s
            without one.
        create: ``False`` to refuse to create a missing file (or its tables) and raise
            :class:`~rehydrate.errors.StoreUnavailableError` instead, as the command's read-only
            verbs do: a mistyped path must not leave an empty database behind.
        max_element_bytes: the most bytes one element may take serialized, below SQLite's own
            limit (a row of ``SQLITE_MAX_LENGTH`` bytes, 10**9 by default, less 64 KiB for the
            row's other columns); a larger one raises
            :class:`~rehydrate.errors.ElementTooLargeError` before anything is written.
    """

    capabilities = Capabilities(claim_ahead=True, workers=True, migrate=True, limits=True)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        serializer: str | Serializer | None = None,
        synchronous: str = "FULL",
        busy_timeout: Seconds = 5.0,
        nap: Seconds | None = None,
        create: bool = True,
        max_element_bytes: int | None = None,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidTypeError(f"path must be a str or a path, not {type(path).__name__}")
        database = os.fspath(path)
        if not isinstance(database, str) or not database:
            raise InvalidArgumentError("path must be a non-empty str path (or ':memory:')")
        if clock is not None and not isinstance(clock, Clock):
            raise InvalidTypeError(
                f"clock must be callable and have an async sleep(seconds) method, not {type(clock).__name__}"
            )
        if not isinstance(synchronous, str) or synchronous.upper() not in _SYNCHRONOUS:
            raise InvalidArgumentError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self._nap = None if nap is None else _validate.seconds(nap, "nap")
        if self._nap is not None and self._nap <= 0:
            raise InvalidArgumentError("nap must be positive")
        self._busy_timeout = _validate.seconds(busy_timeout, "busy_timeout")
        self._database = database
        self._synchronous = synchronous.upper()
        self._create = _validate.flag(create, "create")
        self._set_serializer(serializer)
        self._element_limit_asked = element_bytes(max_element_bytes)
        self._set_row_limit(_DEFAULT_MAX_LENGTH)
        self.clock: Clock = clock if clock is not None else WallClock()
        self._conn: sqlite3.Connection | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._last_now = float("-inf")
        self._subscribers: dict[str, set[_SQLiteSubscription]] = {}
        #: Names whose counter the transaction in progress bumped, and to what (worker thread only).
        self._bumped: dict[str, int] = {}
        #: Per name, the due time (on :attr:`clock`) of the next element as the last claim that
        #: took fewer than it asked for read it, in its transaction (``None``: empty); see
        #: :meth:`ttn_after_claim`. Written in the worker thread, read once on the event loop.
        self._ttn_after: dict[str, float | None] = {}
        #: The wake-up directory, found at open (the path resolved once). This store's own
        #: subscriptions get its datagrams too: they cover a write whose caller was cancelled
        #: before it could notify them in-process.
        self._wake_dir: str | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        serializer: str | Serializer | None = None,
        synchronous: str | None = None,
        busy_timeout: Seconds | None = None,
        nap: Seconds | None = None,
        create: bool = True,
        max_element_bytes: int | None = None,
    ) -> SQLiteStore:
        """A store for ``sqlite:///relative/file.db``, ``sqlite:////absolute/file.db`` or ``sqlite://:memory:``.

        ``synchronous``, ``busy_timeout``, ``nap``, ``serializer`` and ``max_element_bytes``
        (bytes, or ``10MB``, ``64KiB``) may also be given as query parameters
        (``sqlite:///jobs.db?synchronous=normal&busy_timeout=10``), but not both ways.
        Path characters may be percent-encoded. ``create=False``: see the class.
        """
        if not isinstance(url, str):
            raise InvalidTypeError(f"url must be a str, not {type(url).__name__}")
        parts = urlsplit(url)
        if parts.scheme.lower() != "sqlite":
            raise InvalidArgumentError(f"not a sqlite:// URL: {url!r}")
        if parts.netloc == ":memory:" and parts.path in ("", "/"):
            path = ":memory:"
        elif parts.netloc:
            raise InvalidArgumentError(
                f"a sqlite URL names a file, not a host: {url!r} (use sqlite:///relative.db or "
                "sqlite:////absolute/path.db)"
            )
        else:
            path = unquote(parts.path.removeprefix("/"))
        if not path:
            raise InvalidArgumentError(f"the sqlite URL {url!r} names no file")
        given = {
            "serializer": serializer,
            "synchronous": synchronous,
            "busy_timeout": busy_timeout,
            "nap": nap,
            "max_element_bytes": max_element_bytes,
        }
        options: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
        options.update(url_options(url, parts.query, _URL_OPTIONS, given))
        return cls(path, clock=clock, create=create, **options)

    def __repr__(self) -> str:
        return (
            f"SQLiteStore({self._database!r}, serializer={self._serializer!r}, "
            f"synchronous={self._synchronous!r}, clock={self.clock!r})"
        )

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``)."""
        return self._database

    @property
    def serializer(self) -> Serializer:
        """The serializer elements are written with."""
        return self._serializer

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (creating it, its tables and its WAL) and set the pragmas. Idempotent."""
        if self._conn is not None:
            await anyio.lowlevel.checkpoint()
            return
        # Shielded: a connection made in the thread must not be dropped on the floor by a cancel.
        with anyio.CancelScope(shield=True):
            conn = await anyio.to_thread.run_sync(self._connect)
        if self._is_open():  # a concurrent open() won the race while this one connected
            await anyio.to_thread.run_sync(conn.close)
            return
        self._limiter = anyio.CapacityLimiter(1)
        self._conn = conn

    async def aclose(self) -> None:
        """Close the connection once calls in flight have finished. Idempotent; elements stay on disk."""
        if self._conn is None or self._limiter is None:
            await anyio.lowlevel.checkpoint()
            return
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._close_in_thread, self._conn, limiter=self._limiter)
        self._ttn_after.clear()

    async def migrate(self) -> int:
        """Create the tables, or bring a file written by an earlier version to this version's
        schema (as :meth:`open` does), and return the schema version.

        Works on an open store (already done when it opened) or an unopened one (opened just
        for this). ``rehydrate migrate --store sqlite:///file.db`` calls it: a large file's
        migration (version 3 writes every row once) can so be run before the workers start.
        """
        if self._conn is not None:
            await anyio.lowlevel.checkpoint()
            return sql.SCHEMA_VERSION
        await self.open()
        await self.aclose()
        return sql.SCHEMA_VERSION

    async def check_schema(self) -> str | None:
        """``None`` if the file holds this version's schema, else what is wrong (one sentence).
        Changes nothing, creates nothing (``rehydrate migrate --check``)."""
        return await anyio.to_thread.run_sync(self._schema_problem)

    def _schema_problem(self) -> str | None:
        if self._database != ":memory:" and not os.path.isfile(self._database):
            return f"no SQLite database at {self._database!r}"
        with _translated(f"{self._database!r} could not be read"):
            conn = sqlite3.connect(self._database, timeout=self._busy_timeout, isolation_level=None)
            try:
                version = sql.current_schema(conn)
            finally:
                conn.close()
        if version is None:
            return f"{self._database!r} holds no rehydrate store"
        if version != sql.SCHEMA_VERSION:
            return (
                f"{self._database!r} holds a rehydrate schema of version {version}, this version of "
                f"rehydrate uses version {sql.SCHEMA_VERSION}"
            )
        return None

    def _connect(self) -> sqlite3.Connection:
        if not self._create and self._database != ":memory:" and not os.path.isfile(self._database):
            raise StoreUnavailableError(f"no SQLite database at {self._database!r} (nothing was created)")
        self._wake_dir = wake.directory(self._database)
        with _translated(f"{self._database!r} could not be opened"):
            conn = sqlite3.connect(
                self._database,
                timeout=self._busy_timeout,
                isolation_level=None,  # transactions are ours: BEGIN IMMEDIATE ... COMMIT
                check_same_thread=False,  # used from worker threads, one at a time
            )
            try:
                self._setup(conn)
            except BaseException:
                conn.close()
                raise
        return conn

    def _set_row_limit(self, max_length: int) -> None:
        self._set_element_limit(
            max_length - _ROW_RESERVE,
            f"SQLite's limit of {max_length:,} bytes a row (SQLITE_MAX_LENGTH), less {_ROW_RESERVE:,} "
            "for its other columns",
        )

    def _setup(self, conn: sqlite3.Connection) -> None:
        self._set_row_limit(conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH))
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        if not self._create and self._database != ":memory:":
            found = conn.execute(sql.HAS_TABLES).fetchone()
            if found is None:
                raise StoreUnavailableError(
                    f"{self._database!r} holds no rehydrate store (nothing was created in it)"
                )
        # Switching a fresh file to WAL needs a moment of exclusive access, which another process
        # opening the same file may hold: retry within busy_timeout.
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                break
            except sqlite3.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
        if str(mode).lower() not in ("wal", "memory"):
            raise StoreUnavailableError(
                f"SQLite store {self._database!r}: cannot use WAL mode here (journal_mode is {mode!r})"
            )
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")

        def create(conn: sqlite3.Connection) -> int | None:
            for statement in sql.SCHEMA:
                conn.execute(statement)
            conn.execute(sql.SET_SCHEMA, (sql.SCHEMA_VERSION,))
            row = conn.execute(sql.GET_SCHEMA).fetchone()
            version = None if row is None else int(row[0])
            # A file of an earlier version: its new tables now exist; record each step.
            while version is not None and version in sql.MIGRATE:
                for statement in sql.MIGRATE[version]:
                    conn.execute(statement)
                version += 1
            return version

        # A file already at this version needs nothing created: one read, not a write transaction
        # (and its fsync) at every open, which a one-shot ``rehydrate push`` would pay each time.
        version = sql.current_schema(conn)
        if version != sql.SCHEMA_VERSION:
            version = sql.transaction(conn, create, self._busy_timeout, self._wake_dir)
        if version != sql.SCHEMA_VERSION:
            raise RehydrateError(
                f"{self._database!r} holds a rehydrate schema of version {version}, this version "
                f"of rehydrate reads version {sql.SCHEMA_VERSION}"
            )
        # The limits' tables, outside the schema version (created where missing; a read when not).
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_LIMITS.tables[-1],)
        ).fetchone()
        if found is None:

            def create_limits(conn: sqlite3.Connection) -> None:
                for statement in _LIMITS.create:
                    conn.execute(statement)

            sql.transaction(conn, create_limits, self._busy_timeout, self._wake_dir)

    def _is_open(self) -> bool:
        return self._conn is not None

    def _close_in_thread(self, conn: sqlite3.Connection) -> None:
        if self._conn is conn:  # not already closed by a concurrent aclose()
            self._conn = None
            conn.close()
            wake.tidy(self._wake_dir)  # the lock waiters' directory, once nobody waits

    # -- plumbing --------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``fn(connection)`` in a worker thread, alone on the connection."""
        conn, limiter = self._conn, self._limiter
        if conn is None or limiter is None:
            raise self._not_open()
        return await anyio.to_thread.run_sync(self._in_thread, conn, fn, limiter=limiter)

    async def _write(self, fn: Callable[[sqlite3.Connection], _T], *, lease_only: bool = False) -> _T:
        """Run ``fn(connection)`` in a worker thread, in one ``BEGIN IMMEDIATE`` transaction; once it
        has committed, wake the other processes' subscribers of the names it bumped.

        ``lease_only``: the transaction only claims or extends leases, and commits without an
        fsync (see the class's *Durability*): on its own it makes nobody a promise that a power
        loss could break, and it is the commit on every delivery's path.
        """
        return await self._run(lambda conn: self._transaction(conn, fn, lease_only))

    def _transaction(
        self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], _T], lease_only: bool = False
    ) -> _T:
        self._bumped.clear()
        relax = lease_only and self._synchronous == "FULL"
        try:
            if relax:
                conn.execute("PRAGMA synchronous = NORMAL")
            try:
                result = sql.transaction(conn, fn, self._busy_timeout, self._wake_dir)
            finally:
                if relax:
                    conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            self._bumped.clear()  # rolled back: nothing to tell
            raise
        if self._bumped:
            bumped, self._bumped = self._bumped, {}
            wake.send(self._wake_dir, bumped)  # in this thread, never on the event loop
        return result

    def _bump(self, conn: sqlite3.Connection, name: str) -> int:
        """Bump ``name``'s counter (in a write transaction), to be announced once it commits."""
        counter = sql.bump(conn, name)
        self._bumped[name] = counter
        return counter

    def _nap_for(self, listener: Listener | None) -> float:
        if self._nap is not None:
            return self._nap
        return _NAP if listener is None else _NAP_WITH_WAKE

    def _in_thread(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._conn is not conn:  # closed (and maybe reopened) while this call waited for its turn
            raise self._not_open()
        with _translated(repr(self._database)):
            return fn(conn)

    def _now(self) -> float:
        """The clock, never earlier than a time this store already used (called in the worker)."""
        now = float(self.clock())
        if now < self._last_now:
            return self._last_now
        self._last_now = now
        return now

    def _notify(self, name: str, counter: int | None) -> None:
        if counter is not None:
            for subscription in self._subscribers.get(name, ()):
                subscription.notify(counter)

    async def _signal(self, name: str) -> int:
        """The name's notification counter, as every process sees it."""
        return await self._run(lambda conn: sql.read_signal(conn, name))

    async def _pragma(self, pragma: str) -> Any:
        """The value of ``PRAGMA <pragma>`` on this store's connection (for tests and diagnostics)."""
        if not pragma.isidentifier():
            raise InvalidArgumentError(f"not a pragma name: {pragma!r}")
        return await self._run(lambda conn: conn.execute(f"PRAGMA {pragma}").fetchone()[0])

    # -- ReDe verbs ------------------------------------------------------------------------------

    async def push(
        self, name: str, element: Any, *, ttl: Seconds, id: str | None = None, replace: bool = False
    ) -> str:
        _validate.element_id(name, "name")
        seconds = _validate.seconds(ttl, "ttl")
        _validate.replace(replace, id)
        if id is not None:
            _validate.element_id(id)
        payload = self._dumps(element, name, id)
        key = _new_id() if id is None else id
        codec = self._serializer.name

        def body(conn: sqlite3.Connection) -> int | None:
            return self._file_one(conn, name, key, payload, codec, self._now(), seconds, replace)

        self._notify(name, await self._write(body))
        return key

    def _file_one(
        self,
        conn: sqlite3.Connection,
        name: str,
        key: str,
        payload: bytes,
        codec: str,
        now: float,
        seconds: float,
        replace: bool,
    ) -> int | None:
        """File one element due ``seconds`` after ``now`` (in place of the one under ``key`` with
        ``replace``), in the caller's transaction; the name's counter, bumped, if it is due first."""
        due = now + seconds
        head = sql.head(conn, name)
        if replace:
            conn.execute(sql.DELETE_ID, (name, key))
        try:
            conn.execute(sql.INSERT, (name, key, _blob(payload), codec, due, sql.next_seq(conn, 1), seconds))
        except sqlite3.IntegrityError:
            raise DuplicateIdError(key) from None
        return self._bump(conn, name) if head is None or due < head else None

    async def _push_many(
        self, name: str, items: list[tuple[Any, float, str | None]], asked: float
    ) -> list[str]:
        """See :meth:`Store.push_many`. The ttls count from the call, like :meth:`replace_if`'s: not from
        when the batch, encoded and checked, had the write lock (a thousand schedules' first
        occurrences were a few milliseconds late by that)."""
        batch: list[tuple[str, bytearray, float]] = []
        given: set[str] = set()
        for element, seconds, id in items:
            if id is None:
                key = _new_id()
            else:
                key = id
                given.add(key)
            batch.append((key, _blob(self._dumps(element, name, id, "push_many", len(batch))), seconds))
        codec = self._serializer.name

        def body(conn: sqlite3.Connection) -> int | None:
            for key in given:
                if conn.execute(sql.ROW, (name, key)).fetchone() is not None:
                    raise DuplicateIdError(key)
            now = min(asked, self._now())  # a clock that stepped back counts as standing still
            head = sql.head(conn, name)
            first = sql.next_seq(conn, len(batch))
            rows = [
                (name, key, payload, codec, now + seconds, first + i, seconds)
                for i, (key, payload, seconds) in enumerate(batch)
            ]
            try:
                conn.executemany(sql.INSERT, rows)
            except sqlite3.IntegrityError:  # a generated id met an existing one: 2**-122 odds
                raise DuplicateIdError(next(k for k, _, _ in batch if k not in given)) from None
            soonest = now + min(seconds for _, _, seconds in batch)
            return self._bump(conn, name) if head is None or soonest < head else None

        self._notify(name, await self._write(body))
        return [key for key, _, _ in batch]

    async def pull(self, name: str, id: str) -> Any:
        _validate.element_id(name, "name")
        _validate.element_id(id)

        def body(conn: sqlite3.Connection) -> Any:
            row = conn.execute(sql.ROW, (name, id)).fetchone()
            if row is None:
                return None
            element = self._loads(name, id, row[1], row[2])
            conn.execute(sql.DELETE, (row[0],))
            return element

        return await self._write(body)

    async def poll(self, name: str, *, limit: int | None = None) -> list[Any]:
        _validate.element_id(name, "name")
        n = _validate.limit(limit)

        def body(conn: sqlite3.Connection) -> list[Any]:
            rows = conn.execute(sql.DUE, (name, self._now(), -1 if n is None else n)).fetchall()
            elements = [self._loads(name, row[1], row[2], row[3]) for row in rows]
            conn.executemany(sql.DELETE, [(row[0],) for row in rows])
            return elements

        return await self._write(body)

    async def xpoll(self, name: str, *, limit: int | None = None) -> list[str]:
        _validate.element_id(name, "name")
        n = _validate.limit(limit)

        def body(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                sql.DUE_IDS,
                (name, self._now(), -1 if n is None else n),
            ).fetchall()
            return [row[0] for row in rows]

        return await self._run(body)

    async def xack(
        self, name: str, *ids: str, attempt: int | None = None, token: int | None = None
    ) -> list[Any]:
        _validate.element_id(name, "name")
        _validate.ids(ids)
        _validate.attempt(attempt)
        _validate.token(token)

        def body(conn: sqlite3.Connection) -> list[Any]:
            now = self._now()
            out: list[Any] = []
            for id in ids:
                row = conn.execute(sql.ROW, (name, id)).fetchone()
                if (
                    row is None
                    or (attempt is not None and attempt_of(row[4]) != attempt)
                    or (token is not None and row[4] != token)
                    or (row[3] > now and not row[5])
                ):
                    out.append(None)
                    continue
                out.append(self._loads(name, id, row[1], row[2]))
                conn.execute(sql.DELETE, (row[0],))
            return out

        return await self._write(body)

    async def look(self, name: str, id: str) -> Any:
        _validate.element_id(name, "name")
        _validate.element_id(id)

        def body(conn: sqlite3.Connection) -> Any:
            row = conn.execute(sql.LOOK, (name, id)).fetchone()
            return None if row is None else self._loads(name, id, row[0], row[1])

        return await self._run(body)

    async def _look_many(self, name: str, checked: list[str]) -> list[Any]:
        """See :meth:`Store.look_many`: ``_LOOK_BATCH`` primary-key reads per trip to the
        connection's thread (where ``look`` makes one trip per id)."""

        def body(chunk: list[str]) -> Callable[[sqlite3.Connection], list[Any]]:
            def read(conn: sqlite3.Connection) -> list[Any]:
                out = []
                for id in chunk:
                    row = conn.execute(sql.LOOK, (name, id)).fetchone()
                    out.append(None if row is None else self._loads(name, id, row[0], row[1]))
                return out

            return read

        found: list[Any] = []
        for start in range(0, len(checked), _LOOK_BATCH):
            found += await self._run(body(checked[start : start + _LOOK_BATCH]))
        return found

    async def ttn(self, name: str) -> float | None:
        _validate.element_id(name, "name")

        def body(conn: sqlite3.Connection) -> float | None:
            head = sql.head(conn, name)
            return None if head is None else max(0.0, head - self._now())

        return await self._run(body)

    async def update(self, name: str, id: str, element: Any, *, token: int | None = None) -> Any:
        _validate.element_id(name, "name")
        _validate.element_id(id)
        _validate.token(token)
        payload = _blob(self._dumps(element, name, id, "update"))
        codec = self._serializer.name

        def body(conn: sqlite3.Connection) -> Any:
            row = conn.execute(sql.ROW, (name, id)).fetchone()
            if row is None or (token is not None and (row[4] != token or not row[5])):
                raise UnknownIdError(id)
            old = self._loads(name, id, row[1], row[2])
            conn.execute(sql.SET_PAYLOAD, (payload, codec, sql.next_seq(conn, 1), row[0]))
            return old

        return await self._write(body)

    # -- revisions: compare-and-set ---------------------------------------------------------------

    async def read(self, name: str, id: str) -> tuple[Any, ElementInfo] | None:
        """See :meth:`Store.read`: one ``SELECT`` of the row, so the element and its revision are
        of one state."""
        _validate.element_id(name, "name")
        _validate.element_id(id)

        def body(conn: sqlite3.Connection) -> tuple[Any, ElementInfo] | None:
            row = conn.execute(sql.READ, (name, id)).fetchone()
            if row is None:
                return None
            payload, codec, due, ttl, stamped, claimed, revision = row
            info = ElementInfo(
                id=id, due=due, ttl=ttl, attempt=attempt_of(stamped), claimed=bool(claimed), revision=revision
            )
            return self._loads(name, id, payload, codec), info

        return await self._run(body)

    async def _replace_if(
        self, name: str, batch: list[tuple[str, int, Any, float]], asked: float
    ) -> list[int | None]:
        """See :meth:`Store.replace_if`: one write transaction for the batch, each item one
        conditional ``UPDATE`` (``REPLACE_IF``: the revision compared in its ``WHERE``). Each item
        is due ``ttl`` after the call, not after the write lock was had: a schedule's next
        occurrence is its nominal time, however long the batch waited for the lock and its
        elements took to encode (the ttls were measured at the call)."""
        codec = self._serializer.name
        payloads = [
            _blob(self._dumps(element, name, id, "replace_if", index))
            for index, (id, _, element, _) in enumerate(batch)
        ]

        def body(conn: sqlite3.Connection) -> tuple[list[int | None], int | None]:
            head = sql.head(conn, name)
            start = min(asked, self._now())  # a clock that stepped back counts as standing still
            seq = sql.next_seq(conn, len(batch))  # (those of items that do nothing go unused)
            done: list[int | None] = []
            soonest: float | None = None
            for (id, revision, _, seconds), payload in zip(batch, payloads, strict=True):
                due = start + seconds
                params = (payload, codec, due, seq, seconds, name, id, revision)
                if conn.execute(sql.REPLACE_IF, params).rowcount == 1:
                    done.append(seq)
                    soonest = due if soonest is None else min(soonest, due)
                else:
                    done.append(None)
                seq += 1
            sooner = soonest is not None and (head is None or soonest < head)
            return done, (self._bump(conn, name) if sooner else None)

        done, counter = await self._write(body)
        self._notify(name, counter)
        return done

    async def update_if(self, name: str, id: str, revision: int, element: Any) -> int | None:
        """See :meth:`Store.update_if`: one conditional ``UPDATE`` (``UPDATE_IF``)."""
        _validate.element_id(name, "name")
        _validate.element_id(id)
        expected = _validate.revision(revision)
        payload = _blob(self._dumps(element, name, id, "update_if"))
        codec = self._serializer.name

        def body(conn: sqlite3.Connection) -> int | None:
            new = sql.next_seq(conn, 1)
            if conn.execute(sql.UPDATE_IF, (payload, codec, new, name, id, expected)).rowcount != 1:
                return None
            return new

        return await self._write(body)

    async def pull_if(self, name: str, id: str, revision: int) -> bool:
        """See :meth:`Store.pull_if`: one conditional ``DELETE`` (``PULL_IF``)."""
        _validate.element_id(name, "name")
        _validate.element_id(id)
        expected = _validate.revision(revision)

        def body(conn: sqlite3.Connection) -> bool:
            return conn.execute(sql.PULL_IF, (name, id, expected)).rowcount == 1

        return await self._write(body)

    # -- leases ----------------------------------------------------------------------------------

    async def _claim(self, name: str, seconds: float, n: int | None, early: float) -> list[Claim]:
        """See :meth:`Store.claim`; at most 1,000 elements per call (one transaction; none, and
        no write lock, when nothing is due)."""
        take = _CLAIM_BATCH if n is None else min(n, _CLAIM_BATCH)
        self._ttn_after.pop(name, None)  # (what an earlier claim read is older than this one)

        def peeked(conn: sqlite3.Connection) -> list[Claim]:
            # Nothing due (a claim loop woken by a push that is not due yet, in every process
            # sharing the file): say so from a read, without taking the write lock that the
            # producer and the other workers wait for. The head is the TTN the claim loop asks
            # for next (ttn_after_claim), read in the same trip to the thread.
            head = sql.head(conn, name)
            if head is None or head > self._now() + early:
                self._ttn_after[name] = head
                return []
            return self._transaction(conn, body, lease_only=True)

        def body(conn: sqlite3.Connection) -> list[Claim]:
            now = self._now()
            if early:  # (not a running lease: see Store.claim)
                rows = conn.execute(sql.DUE_AHEAD, (name, now + early, now, take)).fetchall()
            else:
                rows = conn.execute(sql.DUE, (name, now, take)).fetchall()
            if not rows:
                # Taken by another process since the read: the head after it, as below.
                self._ttn_after[name] = sql.head(conn, name)
                return []
            until = now + seconds
            seq = first = sql.next_seq(conn, len(rows))
            # The filing number doubles as the claim number of the stamp (the fencing token): the
            # sequence never goes back in this file.
            stamps = [stamp(first + i, attempt_of(row[5]) + 1) for i, row in enumerate(rows)]
            claims = []
            for (_, id, payload, codec, due, _), token in zip(rows, stamps, strict=True):
                element = self._loads(name, id, payload, codec)
                claims.append(new_claim(id, element, attempt_of(token), until, token, due, now, seq))
                seq += 1
            conn.executemany(
                sql.CLAIM,
                [(until, first + i, seconds, stamps[i], row[0]) for i, row in enumerate(rows)],
            )
            if len(rows) < take:
                # It took fewer than it asked for: the head after it (its own leases count).
                self._ttn_after[name] = sql.head(conn, name)
            return claims

        try:
            return await self._run(peeked)
        except BaseException:
            self._ttn_after.pop(name, None)  # read in a transaction that did not commit
            raise

    def _check_open(self) -> None:
        if self._conn is None:
            raise self._not_open()

    def _ttn_now(self) -> float:
        """As ttn counts it (``_now``: never before a time this store already used), read only."""
        return max(float(self.clock()), self._last_now)

    async def _ack(self, name: str, pairs: list[tuple[str, int]]) -> list[bool]:
        def body(conn: sqlite3.Connection) -> list[bool]:
            return [conn.execute(sql.ACK, (name, id, token)).rowcount == 1 for id, token in pairs]

        return await self._write(body)

    async def reschedule(
        self, name: str, id: str, *, ttl: Seconds, attempt: int | None = None, token: int | None = None
    ) -> bool:
        _validate.element_id(name, "name")
        seconds = _validate.seconds(ttl, "ttl")
        _validate.element_id(id)
        _validate.attempt(attempt)
        _validate.token(token)

        def body(conn: sqlite3.Connection) -> tuple[bool, int | None]:
            row = conn.execute(sql.ROW, (name, id)).fetchone()
            if (
                row is None
                or (attempt is not None and attempt_of(row[4]) != attempt)
                or (token is not None and row[4] != token)
            ):
                return False, None
            return True, self._refile(conn, name, row[0], seconds, claimed=False)[1]

        done, counter = await self._write(body)
        self._notify(name, counter)
        return done

    async def _release(
        self, name: str, batch: list[tuple[str, int, float]], *, hand_back: bool
    ) -> list[bool]:
        """See :meth:`Store.reschedule_many` and :meth:`Store.hand_back`: one write transaction
        for the whole batch. Handing back takes only a claim still held, with that claim's
        attempt undone (the same claim number, one attempt fewer: the token no longer matches,
        so a second hand-back does nothing)."""

        def body(conn: sqlite3.Connection) -> tuple[list[bool], int | None]:
            done: list[bool] = []
            counter: int | None = None
            for id, token, seconds in batch:
                row = conn.execute(sql.ROW, (name, id)).fetchone()
                if row is None or row[4] != token or (hand_back and not row[5]):
                    done.append(False)
                    continue
                stamped = (token - 1 if attempt_of(token) else token) if hand_back else None
                bumped = self._refile(conn, name, row[0], seconds, claimed=False, stamped=stamped)[1]
                counter = bumped if bumped is not None else counter
                done.append(True)
            return done, counter

        done, counter = await self._write(body)
        self._notify(name, counter)
        return done

    async def extend(self, name: str, id: str, *, lease: Seconds, token: int) -> float | None:
        _validate.element_id(name, "name")
        seconds = _validate.seconds(lease, "lease")
        _validate.element_id(id)
        if _validate.token(token) is None:
            raise InvalidArgumentError("extend needs the claim's token")

        def body(conn: sqlite3.Connection) -> tuple[float | None, int | None]:
            row = conn.execute(sql.ROW, (name, id)).fetchone()
            if row is None or row[4] != token or not row[5]:
                return None, None
            return self._refile(conn, name, row[0], seconds, claimed=True)

        until, counter = await self._write(body, lease_only=True)
        self._notify(name, counter)
        return until

    def _refile(
        self,
        conn: sqlite3.Connection,
        name: str,
        rowid: int,
        seconds: float,
        *,
        claimed: bool,
        stamped: int | None = None,
    ) -> tuple[float, int | None]:
        """File a row anew at ``now + seconds`` (in a write transaction): still claimed, its
        revision kept (a lease's renewal), or released with a new revision; with ``stamped``,
        with that stamp in its attempt column too (a hand-back).

        Returns the new due time and, if that is sooner than every other element's, the bumped
        notification counter.
        """
        due = self._now() + seconds
        head = sql.head(conn, name)  # the row itself included: sooner means sooner than everything
        if claimed:
            conn.execute(sql.EXTEND, (due, sql.next_seq(conn, 1), seconds, rowid))
        elif stamped is None:
            conn.execute(sql.REFILE, (due, sql.next_seq(conn, 1), seconds, rowid))
        else:
            conn.execute(sql.HAND_BACK, (due, sql.next_seq(conn, 1), seconds, stamped, rowid))
        return due, (self._bump(conn, name) if head is None or due < head else None)

    async def info(self, name: str, id: str) -> ElementInfo | None:
        _validate.element_id(name, "name")
        _validate.element_id(id)

        def body(conn: sqlite3.Connection) -> ElementInfo | None:
            row = conn.execute(
                sql.INFO,
                (name, id),
            ).fetchone()
            if row is None:
                return None
            return ElementInfo(
                id=id,
                due=row[0],
                ttl=row[1],
                attempt=attempt_of(row[2]),
                claimed=bool(row[3]),
                revision=row[4],
            )

        return await self._run(body)

    # -- inspection and waiting ------------------------------------------------------------------

    async def names(self) -> list[str]:
        """See :meth:`Store.names`; O(names * log n), by skipping from one name to the next in the index."""
        rows = await self._run(lambda conn: conn.execute(sql.NAMES).fetchall())
        return sorted(row[0] for row in rows)

    async def size(self, name: str) -> int:
        _validate.element_id(name, "name")
        return await self._run(lambda conn: int(conn.execute(sql.SIZE, (name,)).fetchone()[0]))

    async def summary(self, name: str) -> Summary:
        _validate.element_id(name, "name")

        def body(conn: sqlite3.Connection) -> Summary:
            now = self._now()
            size, due, claimed, head = conn.execute(
                sql.SUMMARY,
                (now, name),
            ).fetchone()
            ttn = None if head is None else max(0.0, head - now)
            return Summary(size=size, due=due, claimed=claimed, ttn=ttn)

        return await self._run(body)

    async def ids(self, name: str, *, limit: int | None = None) -> list[str]:
        _validate.element_id(name, "name")
        n = _validate.limit(limit)

        def body(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                sql.IDS,
                (name, -1 if n is None else n),
            ).fetchall()
            return [row[0] for row in rows]

        return await self._run(body)

    # -- workers ---------------------------------------------------------------------------------

    async def heartbeat(self, worker: str, data: Mapping[str, Any], *, ttl: Seconds) -> None:
        worker = _workers.check_worker(worker)
        text, seconds = _workers.worker_data(data), _workers.worker_ttl(ttl)

        def body(conn: sqlite3.Connection) -> None:
            now = self._now()
            conn.execute(sql.HEARTBEAT, (worker, text, now, now + seconds))
            conn.execute(sql.FORGET_WORKERS, (now - _workers.WORKER_KEEP,))

        await self._write(body)

    async def deregister_worker(self, worker: str) -> bool:
        worker = _workers.check_worker(worker)
        return await self._write(lambda conn: conn.execute(sql.DEREGISTER, (worker,)).rowcount > 0)

    async def workers(self) -> list[WorkerRecord]:
        def body(conn: sqlite3.Connection) -> list[WorkerRecord]:
            now = self._now()
            rows = conn.execute(sql.WORKERS, (now - _workers.WORKER_KEEP,)).fetchall()
            return [_workers.record(id, text, seen, expires, now) for id, text, seen, expires in rows]

        return await self._run(body)

    # -- limits ----------------------------------------------------------------------------------
    # Each step is one BEGIN IMMEDIATE transaction (rehydrate.stores._limits_sql).

    @staticmethod
    def _executor(conn: sqlite3.Connection) -> Callable[[str, tuple[Any, ...]], list[Any]]:
        return lambda statement, params: conn.execute(statement, params).fetchall()

    async def limit_acquire(
        self,
        limit: str,
        key: str,
        holder: str,
        spec: LimitSpec,
        *,
        waiter: tuple[str, str, int] | None = None,
    ) -> LimitAnswer:
        _limits.check_names(limit, key, holder)
        _limits.check_spec(spec)
        waiter = _limits.check_waiter(waiter)
        return await self._write(
            lambda conn: _LIMITS.acquire(self._executor(conn), self._now(), limit, key, holder, spec, waiter),
            lease_only=True,
        )

    async def limit_park(
        self, limit: str, key: str, spec: LimitSpec, waiters: Sequence[tuple[str, str, int]]
    ) -> LimitAnswer:
        _limits.check_names(limit, key)
        _limits.check_spec(spec)
        checked = _limits.check_waiters(waiters)
        return await self._write(
            lambda conn: _LIMITS.park(self._executor(conn), self._now(), limit, key, spec, checked),
            lease_only=True,
        )

    async def limit_renew(self, limit: str, key: str, holder: str, spec: LimitSpec) -> bool:
        _limits.check_names(limit, key, holder)
        _limits.check_spec(spec)
        return await self._write(
            lambda conn: _LIMITS.renew(self._executor(conn), self._now(), limit, key, holder, spec),
            lease_only=True,
        )

    async def limit_release(self, limit: str, key: str, holder: str, spec: LimitSpec) -> LimitAnswer:
        _limits.check_names(limit, key, holder)
        _limits.check_spec(spec)
        return await self._write(
            lambda conn: _LIMITS.release(self._executor(conn), self._now(), limit, key, holder, spec),
            lease_only=True,
        )

    async def limits(self, limit: str | None = None) -> list[LimitInfo]:
        if limit is not None:
            _limits.check_names(limit, "-")
        return await self._run(lambda conn: _LIMITS.listing(self._executor(conn), self._now(), limit))

    @asynccontextmanager
    async def _subscribe(self, name: str) -> AsyncIterator[Subscription]:
        subscription = _SQLiteSubscription(self, name)
        if self._conn is None:
            raise self._not_open()
        subscribers = self._subscribers.setdefault(name, set())
        subscribers.add(subscription)
        try:
            # Bound before the counter is read: a write in between wakes it one way or both.
            with anyio.CancelScope(shield=True):  # a bound socket must not be dropped by a cancel
                listener = await anyio.to_thread.run_sync(Listener.bind, self._wake_dir, name)
            subscription.listener = listener
            # Registered first, then the counter read: a write in between notifies one way or both.
            subscription.seen = max(subscription.seen, await self._signal(name))
            yield subscription
        finally:
            subscribers.discard(subscription)
            if not subscribers and self._subscribers.get(name) is subscribers:
                del self._subscribers[name]
            listener, subscription.listener = subscription.listener, None
            if listener is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(listener.close)

    def subscribe(self, name: str) -> AbstractAsyncContextManager[Subscription]:
        """See :meth:`Store.subscribe`: this store's writes wake at once, other processes' by a
        datagram (failing that, within ``nap``)."""
        _validate.element_id(name, "name")
        return self._subscribe(name)


class BlockingSQLiteStore(SQLiteStore):
    """The SQLite store for a short process with no event loop: the command's one-shot verbs.

    Every statement runs in the calling thread, so its coroutines never suspend: the caller
    drives one with ``coro.send(None)`` (``rehydrate.cli._oneshot``) and pays neither an event
    loop's start-up nor a thread hop. A shell script pays a process per ``rehydrate push``, and
    starting asyncio cost more than the push itself (``benchmarks/bench_cli.py``). The SQL and
    its transactions are :class:`SQLiteStore`'s own; only where they run differs.

    Never inside an event loop (it would block it), and it cannot :meth:`subscribe`.
    """

    async def open(self) -> None:
        if self._conn is None:
            self._conn = self._connect()

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        conn = self._conn
        if conn is None:
            raise self._not_open()
        return self._in_thread(conn, fn)

    def subscribe(self, name: str) -> AbstractAsyncContextManager[Subscription]:
        raise RehydrateError("a blocking SQLite store (the command's one-shot verbs) cannot subscribe")
