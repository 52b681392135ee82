"""The PostgreSQL store: dehydrators in one table, shared by every process that reaches the database.

**Driver.** psycopg 3 and its connection pool (``pip install 'rehydrate[postgres]'``), imported
when a store opens. psycopg's async API runs on asyncio only, and rehydrate runs on trio as well,
so the store uses psycopg's *sync* API in worker threads (:func:`anyio.to_thread.run_sync`,
bounded by a capacity limiter as large as the pool), as the SQLite store does with ``sqlite3``.
The thread hop costs a few tens of microseconds per call against a round trip of about as much
on loopback and far more across a network (``benchmarks/bench_postgres.py`` measures both side
by side), and it keeps one code path for both event loops.

**Layout** (``_postgres_sql.py`` has every statement): one table per store,
``{schema}.{table}`` (``public.rehydrate`` by default), one row per element keyed by
``(name, id)``, with an index on ``(name, due, seq)`` so that ``poll``, ``claim``, ``xpoll`` and
``ttn`` are index range scans; beside it a small table of counters per name (``size`` and
``summary`` read a few rows, not the dehydrator), a sequence (filing order and claim numbers) and a
``_meta`` table holding the schema version. An element's revision is its ``seq`` unless its
``rev`` column says otherwise (``_postgres_sql.py`` says when). The tables are created on first use unless
``create=False`` (then a missing or outdated schema is an error that says to run
``rehydrate migrate``). Every verb is one statement, so one round trip in autocommit mode.

**Time** is the server's clock (``clock_timestamp()``), read inside each statement, in integer
microseconds: workers whose own clocks are wrong by any amount still agree, as with Redis's
``TIME``. :attr:`PostgresStore.clock` is this process's monotonic clock plus the offset to the
server measured when the store opened.

**Claims** take up to 1,000 due rows per statement with ``FOR UPDATE SKIP LOCKED``, so concurrent
workers take different rows and never wait for each other, and file them anew at the lease's end;
acks are fenced by the claim's token, as in every store.

**Wake-ups.** A write that makes an element due sooner than the dehydrator's earliest sends
``NOTIFY`` in its own transaction (so it is delivered exactly when the write commits, never
before). Each store that has subscriptions keeps one extra connection that ``LISTEN`` s, read by
one thread blocked on it (no polling interval), which wakes the subscriptions on the event loop.
This store's own writes wake its subscriptions at once.

**Failures.** A lost connection, a server that restarts or refuses connections for a while, a
serialization failure or a deadlock is retried ``retries`` times with exponential backoff (from
``retry_backoff`` seconds, at most 2 s apart), then raises
:class:`~rehydrate.errors.StoreUnavailableError`. Commits are synchronous by default: a call that
returned is on disk on the server. ``synchronous_commit=off`` (``?synchronous_commit=off``) lets
the server acknowledge before its WAL is flushed: faster for many small writes, and a server
crash can then lose the last few hundred milliseconds of acknowledged writes (never corrupt them).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from rehydrate._clock import ServerClock
from rehydrate._core import _limits, _validate, _workers
from rehydrate._core._fence import STAMP, attempt_of
from rehydrate._core._limits import LimitAnswer, LimitInfo, LimitSpec
from rehydrate._core._records import Claim, ElementInfo, Summary, WorkerRecord, new_claim
from rehydrate._core._validate import Seconds
from rehydrate.abc import Capabilities, Serializer, Subscription
from rehydrate.errors import (
    DuplicateIdError,
    ElementTooLargeError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    StoreRefusedError,
    StoreUnavailableError,
    UnknownIdError,
    UnsupportedStoreError,
)
from rehydrate.stores._base import (
    StoreBase,
    as_bool,
    as_float,
    as_int,
    as_size,
    as_str,
    element_bytes,
    url_options,
)
from rehydrate.stores._limits_sql import LimitTables
from rehydrate.stores._postgres_sql import SCHEMA_VERSION, Statements
from rehydrate.stores._remote import SAMPLES, Backoff, int_option, local_clock, set_offset
from rehydrate.stores._subscription import EventSubscription

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["PostgresStore"]

_T = TypeVar("_T")

#: The most elements one ``claim`` statement takes.
_CLAIM_BATCH: Final = 1000
#: How many ids one ``look_many`` query reads.
_LOOK_BATCH: Final = 1000
#: Durations above this are refused (due times are integer microseconds in a bigint).
_MAX_SECONDS: Final = 1e9
#: The largest bigint: the sequence's, and so every revision's, limit.
_MAX_BIGINT: Final = (1 << 63) - 1
#: A NOTIFY payload is at most 8000 bytes: longer names are sent as "" (wake every subscription).
_MAX_NOTE: Final = 4000
_IDENTIFIER: Final = re.compile(r"[a-z_][a-z0-9_]{0,39}")
_SYNCHRONOUS_COMMIT: Final = ("on", "off", "local", "remote_write", "remote_apply")
#: The largest element: a field holds at most 1 GB, and this store reads payloads in
#: PostgreSQL's text form (hex: two characters a byte, built in one allocation of at most 1 GB
#: on the server), so half of that, less room for the row's other columns. An element of 600 MB
#: was written and then could not be read: every claim of its dehydrator failed.
_MAX_ELEMENT: Final = 500 * 1024 * 1024
#: The most payload bytes one statement sends (push_many's array of payloads, in binary): the
#: server takes a message of at most 1 GB.
_MAX_BATCH_BYTES: Final = 2 * _MAX_ELEMENT


def _new_id() -> str:
    """32 hex digits: the microsecond it was made (14), then 72 random bits (18).

    Unique across processes without coordination (ids of one microsecond differ in 72 random
    bits), and time-ordered, so that a new row's primary-key entry lands at the right edge of the
    B-tree rather than on a random page of it: ``push_many`` of generated ids ran about 1.6 times
    as fast on a table already holding 200,000 elements. An id shows when it was made.
    """
    return f"{time.time_ns() // 1000:014x}{os.urandom(9).hex()}"


def _micros(seconds: float) -> int:
    if seconds > _MAX_SECONDS:
        raise InvalidArgumentError(f"durations must be at most {_MAX_SECONDS:.0f} seconds, got {seconds!r}")
    return round(seconds * 1_000_000)


def _revision(value: object) -> int:
    """A revision to compare with, as a bigint: one beyond a bigint was never given, and -1 (no
    revision) matches nothing, as it should."""
    revision = _validate.revision(value)
    return revision if revision <= _MAX_BIGINT else -1


def _text(value: str, what: str) -> str:
    """A name or id PostgreSQL can store: valid UTF-8 without NUL characters."""
    if "\x00" in value:
        raise InvalidArgumentError(f"{what} must not contain NUL characters: {value!r}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(f"{what} must be encodable as UTF-8 (no lone surrogates): {exc}") from None
    return value


def _name(value: object) -> str:
    return _text(_validate.element_id(value, "name"), "name")


def _id(value: object) -> str:
    return _text(_validate.element_id(value), "id")


def _line(exc: BaseException) -> str:
    """libpq's message on one line (it spreads hints over several)."""
    return " ".join(str(exc).split())


#: What libpq says of a server that answered but cannot take a connection *yet*: worth waiting for.
_NOT_YET: Final = (
    "starting up",
    "shutting down",
    "in recovery mode",
    "not yet accepting connections",
    "too many clients",
    "connection slots are reserved",
    "administrator command",
)


def _check_batch_bytes(what: str, name: str, payloads: list[bytes]) -> None:
    """Refuse a batch whose elements together exceed what one statement takes (``what``: the
    verb and its preposition, ``"push_many to"``), before anything is sent."""
    total = sum(map(len, payloads))
    if total > _MAX_BATCH_BYTES:
        raise ElementTooLargeError(
            f"a {what} {name!r} of {len(payloads)} elements is {total:,} bytes serialized, "
            f"more than one PostgreSQL statement takes: {_MAX_BATCH_BYTES:,} bytes (the server "
            "reads a message of at most 1 GB); split the batch. Nothing was written",
            id=None,
            size=total,
            limit=_MAX_BATCH_BYTES,
        )


def _connect_error(exc: BaseException, shown: str) -> RehydrateError:
    """The error for a failed connection: :class:`StoreRefusedError` when the server answered
    and refused (no such database or role, a wrong password, no ``pg_hba.conf`` entry, TLS it
    does not serve), :class:`InvalidArgumentError` when libpq refused a parameter of the URL
    (``sslmode=bogus``) before connecting, else :class:`StoreUnavailableError` (refused or timed
    out connections, a server starting up or full: waiting may help). libpq gives no SQLSTATE for
    a failed connection: its message is all there is to go by, and is what the error says."""
    line = _line(exc)
    if "FATAL:" in line and not any(hint in line for hint in _NOT_YET):
        return StoreRefusedError(f"PostgreSQL at {shown} refused this store: {line}")
    if "SSL" in line and ("was required" in line or "does not support" in line):
        return StoreRefusedError(f"PostgreSQL at {shown} refused this store: {line}")
    if "connection is bad: invalid" in line or "invalid connection option" in line:
        return InvalidArgumentError(f"invalid PostgreSQL URL {shown!r}: {line}")
    return StoreUnavailableError(f"PostgreSQL at {shown} is unavailable: {line}", transient=True)


def _import_driver() -> None:
    """Import psycopg and its pool (their first import reads files; call it in a worker thread)."""
    import psycopg.conninfo
    import psycopg.errors  # noqa: F401
    import psycopg_pool  # noqa: F401


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))


def _identifier(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a str, not {type(value).__name__}")
    if not _IDENTIFIER.fullmatch(value):
        raise InvalidArgumentError(
            f"{what} must be a lowercase SQL identifier (letters, digits, _; at most 40), not {value!r}"
        )
    return value


#: The constructor's options a URL's query may carry, and how to read them. Other parameters
#: (``sslmode``, ``connect_timeout``, ``application_name``...) go to libpq, which checks them.
_URL_OPTIONS: Final[dict[str, Callable[[str], Any]]] = {
    "schema": as_str,
    "table": as_str,
    "serializer": as_str,
    "synchronous_commit": as_str,
    "pool_size": as_int,
    "timeout": as_float,
    "retries": as_int,
    "retry_backoff": as_float,
    "create": as_bool,
    "max_element_bytes": as_size,
}


class _Listener:
    """One connection that ``LISTEN`` s on the store's channel, read by one thread.

    The thread blocks on the connection for up to ``wake`` seconds at a time (only to look at its
    stop flag; :meth:`stop` also sends a notification so it need not wait) and hands every
    notification's payload to ``deliver`` on the event loop. A lost connection is re-made with
    backoff; once listening again, it delivers ``""`` (wake every subscription: notifications
    may have been missed meanwhile).
    """

    def __init__(
        self, conninfo: str, channel: str, deliver: Callable[[str], None], *, timeout: float, backoff: Backoff
    ) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._deliver = deliver
        self._timeout = timeout
        self._backoff = backoff
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._token: Any = None

    def start(self, token: Any) -> None:
        """Start the thread and wait until it listens (called in a worker thread). Raises if it cannot."""
        self._token = token
        self._thread = threading.Thread(
            target=self._run, name=f"rehydrate-listen-{self._channel}", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def stop(self, poke: Callable[[], None]) -> None:
        """Stop the thread and close its connection (called in a worker thread)."""
        self._stop.set()
        if self._thread is None:
            return
        with suppress(Exception):  # the server is gone: the thread notices within its timeout
            poke()
        self._thread.join()

    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg

        conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=max(1, round(self._timeout)))
        conn.execute(f'LISTEN "{self._channel}"')
        return conn

    def _hand_over(self, payload: str) -> bool:
        try:
            anyio.from_thread.run_sync(self._deliver, payload, token=self._token)
        except RuntimeError:  # the event loop has ended: nobody to wake
            self._stop.set()
            return False
        return True

    def _run(self) -> None:
        import psycopg

        conn: psycopg.Connection[Any] | None = None
        failures = 0
        try:
            while not self._stop.is_set():
                if conn is None:
                    try:
                        conn = self._connect()
                    except psycopg.Error as exc:
                        if not self._ready.is_set():
                            self._error = StoreUnavailableError(f"cannot LISTEN: {_line(exc)}")
                            return
                        failures += 1
                        self._stop.wait(self._backoff.delay(min(failures, 8) + 1))
                        continue
                    if self._ready.is_set():
                        failures = 0
                        self._hand_over("")  # reconnected: anything may have happened meanwhile
                    self._ready.set()
                try:
                    for note in conn.notifies(timeout=1.0):
                        if self._stop.is_set() or not self._hand_over(note.payload):
                            break
                except psycopg.Error:
                    conn.close()
                    conn = None
        finally:
            self._ready.set()
            if conn is not None:
                conn.close()


#: The server's time in µs as every statement reads it (``_postgres_sql``'s, with the tests'
#: pin and skew), for a limit step's rule, which runs in Python.
_LIMIT_NOW: Final = (
    "SELECT coalesce(%(pin)s::bigint, (extract(epoch from clock_timestamp()) * 1000000)::bigint)"
    " + %(skew)s::bigint"
)


class PostgresStore(StoreBase):
    """Dehydrators in a PostgreSQL database (``postgresql://user:password@host:5432/db``).

    See the module's docstring for the design. Options (also as URL query parameters):

    Args:
        url: a libpq URL (``postgresql://`` or ``postgres://``); parameters other than the options
            below (``sslmode``, ``application_name``...) are passed to libpq.
        schema: the schema the tables live in (``public``); created if missing.
        table: the elements' table (``rehydrate``); ``{table}_counts``, ``{table}_meta`` and
            ``{table}_seq`` sit beside it. Several stores may share a database with different tables.
        serializer: ``"json"`` (default), ``"msgpack"``, ``"pickle"`` or a serializer object.
        synchronous_commit: the server setting for this store's sessions: ``on`` (default) or
            ``off`` (faster small writes; a server crash may lose the last acknowledged ones).
        pool_size: connections (and worker threads) for calls; one more listens when subscribed.
        timeout: seconds to connect or to wait for a free connection.
        retries: how often a failed call is retried (a lost connection, a server restart).
        retry_backoff: the first pause between retries, doubled each time, at most 2 s.
        create: create the tables on first use (default); with ``False``, a missing or outdated
            schema raises an error saying to run ``rehydrate migrate --store URL``.
        max_element_bytes: the most bytes one element may take serialized, below the store's own
            limit of 500 MiB (a field holds 1 GB, read in hex); a larger one raises
            :class:`~rehydrate.errors.ElementTooLargeError` before anything is sent, and so does
            a ``push_many`` whose elements together pass 1000 MiB (one statement's parameters).
    """

    capabilities = Capabilities(claim_ahead=True, workers=True, migrate=True, limits=True)

    def __init__(
        self,
        url: str = "postgresql://localhost/postgres",
        *,
        schema: str = "public",
        table: str = "rehydrate",
        serializer: str | Serializer | None = None,
        synchronous_commit: str = "on",
        pool_size: int = 4,
        timeout: Seconds = 5.0,
        retries: int = 8,
        retry_backoff: Seconds = 0.05,
        create: bool = True,
        max_element_bytes: int | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise InvalidTypeError(f"url must be a str, not {type(url).__name__}")
        if urlsplit(url).scheme.lower() not in ("postgresql", "postgres"):
            raise InvalidArgumentError(
                f"a PostgreSQL URL starts with postgresql:// or postgres://, not {_redact(url)!r}"
            )
        self._url = url
        self._schema = _identifier(schema, "schema")
        self._table = _identifier(table, "table")
        self._set_serializer(serializer)
        self._element_limit_asked = element_bytes(max_element_bytes)
        self._set_element_limit(
            _MAX_ELEMENT, "PostgreSQL's 1 GB a field, read as hex: half, less room for the row"
        )
        self._codec = self._serializer.name
        if not isinstance(synchronous_commit, str) or synchronous_commit.lower() not in _SYNCHRONOUS_COMMIT:
            raise InvalidArgumentError(
                f"synchronous_commit must be one of {', '.join(_SYNCHRONOUS_COMMIT)}, "
                f"not {synchronous_commit!r}"
            )
        self._synchronous_commit = synchronous_commit.lower()
        self._pool_size = int_option(pool_size, "pool_size", 1, 1000)
        self._timeout = _validate.seconds(timeout, "timeout")
        if self._timeout <= 0:
            raise InvalidArgumentError("timeout must be positive")
        self._retries = Backoff(
            int_option(retries, "retries", 0, 100), _validate.seconds(retry_backoff, "retry_backoff")
        )
        self._create_tables = _validate.flag(create, "create")
        self._sql = Statements(self._schema, self._table)
        #: The limits' tables (``rehydrate.stores._limits_sql``), beside the elements' table.
        self._limit_sql = LimitTables(f"{self._table}_", postgres=True, schema=self._schema)
        digest = hashlib.sha1(f"{self._schema}.{self._table}".encode()).hexdigest()[:12]
        self._channel = f"rehydrate_{self._table[:30]}_{digest}"
        self.clock: ServerClock = ServerClock("PostgreSQL")
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._errors: Any = None
        self._listener: _Listener | None = None
        self._listener_lock: anyio.Lock | None = None
        self._subscribers: dict[str, set[EventSubscription]] = {}
        #: Per name, the due time (on :attr:`clock`) of the next element as the last claim that
        #: took fewer than it asked for read it (``None``: empty); see :meth:`ttn_after_claim`.
        self._ttn_after: dict[str, float | None] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresStore:
        """``postgresql://user:password@host:port/db?table=jobs``; ``options`` are the constructor's.

        Every constructor option may be a query parameter (not both ways); other parameters are
        libpq's.
        """
        if not isinstance(url, str):
            raise InvalidTypeError(f"url must be a str, not {type(url).__name__}")
        parts = urlsplit(url)
        try:
            query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        except ValueError as exc:
            raise InvalidArgumentError(f"malformed query in {_redact(url)!r}: {exc}") from None
        ours = [(key, value) for key, value in query if key in _URL_OPTIONS]
        rest = [(key, value) for key, value in query if key not in _URL_OPTIONS]
        # ``create`` may come both ways: the URL's ``create=false`` (this deployment may not create
        # tables) and the caller's (``open_store(url, create=False)``: this command must not) both hold.
        create = options.pop("create", None)
        found = url_options(url, urlencode(ours), _URL_OPTIONS, options, shown=_redact(url))
        if create is not None:
            found["create"] = _validate.flag(create, "create") and found.get("create", True)
        options.update(found)
        return cls(urlunsplit(parts._replace(query=urlencode(rest))), **options)

    def __repr__(self) -> str:
        return (
            f"PostgresStore({_redact(self._url)!r}, table={self._schema}.{self._table}, "
            f"serializer={self._serializer!r})"
        )

    @property
    def serializer(self) -> Serializer:
        """The serializer elements are written with."""
        return self._serializer

    @property
    def table(self) -> str:
        """The elements' table, ``schema.table``."""
        return f"{self._schema}.{self._table}"

    # -- lifecycle -------------------------------------------------------------------------------

    def _conninfo(self) -> str:
        import psycopg
        import psycopg.conninfo

        try:
            psycopg.conninfo.conninfo_to_dict(self._url)
        except psycopg.ProgrammingError as exc:
            raise InvalidArgumentError(
                f"invalid PostgreSQL URL {_redact(self._url)!r}: {_line(exc)}"
            ) from None
        return self._url

    async def open(self) -> None:
        """Connect, create the tables if allowed (and missing), and set :attr:`clock`. Idempotent."""
        if self._pool is not None:
            await anyio.lowlevel.checkpoint()
            return
        try:
            # The first import reads files: do it off the event loop, as every other blocking call.
            await anyio.to_thread.run_sync(_import_driver)
            import psycopg
            import psycopg.errors
            import psycopg_pool
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise UnsupportedStoreError(
                "the PostgreSQL store needs psycopg 3 and psycopg-pool: pip install 'rehydrate[postgres]'"
            ) from exc
        conninfo = self._conninfo()
        self._errors = psycopg.errors
        # Custom plans only: a generic plan, made once for any parameters, may scan a whole
        # dehydrator where the parameters' plan reads a few index entries. No bitmap scans: before
        # the table has statistics, the planner would take every due row and sort them to claim a
        # few, where the (name, due, seq) index reads them in order.
        options = (
            f"-c synchronous_commit={self._synchronous_commit}"
            " -c plan_cache_mode=force_custom_plan -c enable_bitmapscan=off"
        )
        connect_timeout = max(1, round(self._timeout))
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            timeout=self._timeout,
            kwargs={"autocommit": True, "options": options, "connect_timeout": connect_timeout},
            name=f"rehydrate-{self._table}",
        )
        limiter = anyio.CapacityLimiter(self._pool_size)

        def start() -> None:
            # One connection first, alone: the pool would retry a refused one in the background
            # until its timeout, logging each attempt, and then report only that it timed out.
            try:
                psycopg.connect(
                    conninfo, autocommit=True, options=options, connect_timeout=connect_timeout
                ).close()
            except psycopg.Error as exc:
                raise _connect_error(exc, _redact(self._url)) from None
            try:
                pool.open(wait=True, timeout=self._timeout)
            except psycopg_pool.PoolTimeout as exc:
                pool.close()
                raise StoreUnavailableError(
                    f"PostgreSQL at {_redact(self._url)} is unavailable: no connection within "
                    f"{self._timeout} s ({_line(exc)})",
                    transient=True,
                ) from exc

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(start)
        self._pool, self._limiter = pool, limiter
        self._listener_lock = anyio.Lock()  # made here, in the event loop that uses it
        try:
            await self._prepare_schema()
            await self._set_clock()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop listening and close every connection. Idempotent; elements stay in the database."""
        pool, listener = self._pool, self._listener
        self._pool = self._listener = None
        self._ttn_after.clear()
        with anyio.CancelScope(shield=True):
            if listener is not None:
                await anyio.to_thread.run_sync(listener.stop, lambda: self._poke(pool))
            if pool is not None:
                await anyio.to_thread.run_sync(pool.close)
        await anyio.lowlevel.checkpoint()

    def _poke(self, pool: psycopg_pool.ConnectionPool[Any] | None) -> None:
        """Send a notification on the store's channel so the listening thread wakes now."""
        if pool is not None:
            with pool.connection(timeout=1.0) as conn:
                conn.execute("SELECT pg_notify(%s, '')", (self._channel,))

    def _check(self, conn: psycopg.Connection[Any]) -> int | None:
        """The schema version recorded in the database, ``None`` if the tables are missing."""
        sql = self._sql
        row = conn.execute(sql.exists, {"meta_name": sql.meta_name, "table_name": sql.table_name}).fetchone()
        if row is None or not (row[0] and row[1]):
            return None
        version = conn.execute(sql.version).fetchone()
        return None if version is None else int(version[0])

    def _create(self, conn: psycopg.Connection[Any]) -> int:
        """Create what is missing and migrate an older schema, one version at a time, in one
        transaction under an advisory lock (concurrent openers and ``rehydrate migrate`` wait
        for each other); the schema version it leaves."""
        sql = self._sql
        with conn.transaction():
            for statement in sql.create:
                conn.execute(statement, {"lock": f"rehydrate:{self.table}", "version": SCHEMA_VERSION})
            row = conn.execute(sql.version).fetchone()
            version = 0 if row is None else int(row[0])
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in sql.migrations.get(step, ()):
                    conn.execute(statement)
            row = conn.execute(sql.version).fetchone()
        return 0 if row is None else int(row[0])

    def _problem(self, version: int | None) -> str | None:
        if version == SCHEMA_VERSION:
            return None
        found = "no rehydrate tables" if version is None else f"a schema of version {version}"
        return (
            f"{self.table} in {_redact(self._url)} holds {found}; this version of rehydrate needs "
            f"version {SCHEMA_VERSION}"
        )

    async def _prepare_schema(self) -> None:
        version = await self._run(self._check)
        if (version is None or version < SCHEMA_VERSION) and self._create_tables:
            # Create the tables, or bring an earlier schema up to this one (adding tables and a
            # column; no row is rewritten).
            version = await self._run(self._create)
        problem = self._problem(version)
        if problem is not None:
            raise StoreUnavailableError(f"{problem}: run `rehydrate migrate --store URL`")
        if self._create_tables:
            await self._run(self._create_limits)

    def _create_limits(self, conn: psycopg.Connection[Any]) -> None:
        """The limits' tables, outside the schema version: created where missing, under the
        same advisory lock as the schema (concurrent openers wait for each other)."""
        names = [
            f"{self._table}_limit_holders",
            f"{self._table}_limit_starts",
            f"{self._table}_limit_waiters",
        ]
        found = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = ANY(%s)",
            (self._schema, names),
        ).fetchone()
        if found is not None and found[0] == len(names):
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"rehydrate:{self.table}",))
            for statement in self._limit_sql.create:
                conn.execute(statement)

    async def _with_connection(self, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """``fn`` on this store's pool if it is open, else on a connection of its own (the CLI's case)."""
        if self._pool is not None:
            return await self._run(fn)
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise UnsupportedStoreError(
                "the PostgreSQL store needs psycopg 3 and psycopg-pool: pip install 'rehydrate[postgres]'"
            ) from exc
        conninfo = self._conninfo()
        self._errors = psycopg.errors

        def body() -> _T:
            timeout = max(1, round(self._timeout))
            try:
                conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=timeout)
            except psycopg.Error as exc:
                raise _connect_error(exc, _redact(self._url)) from None
            with conn:
                return fn(conn)

        try:
            return await anyio.to_thread.run_sync(body)
        except psycopg.Error as exc:
            if self._transient(exc):
                raise StoreUnavailableError(f"PostgreSQL at {_redact(self._url)}: {_line(exc)}") from exc
            raise self._translate(exc) from exc

    async def migrate(self) -> int:
        """Create the tables (or bring them to this version's schema); return the schema version.

        Works on an open store or an unopened one (it then connects just for this). Safe to run
        from several processes at once (an advisory lock serializes them) and again later.
        ``rehydrate migrate --store URL`` calls it.
        """
        version = await self._with_connection(self._create)
        if version != SCHEMA_VERSION:
            raise RehydrateError(
                f"{self.table} holds a rehydrate schema of version {version}, and this version of "
                f"rehydrate knows no way from it to version {SCHEMA_VERSION}"
            )
        return version

    async def check_schema(self) -> str | None:
        """``None`` if the tables exist at this version's schema, else what is wrong (one sentence).

        Changes nothing: for deployments where the application may not create tables
        (``rehydrate migrate --check``).
        """
        return self._problem(await self._with_connection(self._check))

    async def schema_version(self) -> int | None:
        """The schema version recorded in the database, ``None`` if the tables do not exist."""
        return await self._with_connection(self._check)

    async def _set_clock(self) -> None:
        def sample(conn: psycopg.Connection[Any]) -> list[tuple[float, float, int]]:
            samples = []
            for _ in range(SAMPLES):
                before = local_clock()
                row = conn.execute(self._sql.now, {"pin": None, "skew": 0}).fetchone()
                after = local_clock()
                assert row is not None
                samples.append((before, after, int(row[0])))
            return samples

        set_offset(self.clock, await self._run(sample))

    # -- plumbing --------------------------------------------------------------------------------

    def _transient(self, exc: BaseException) -> bool:
        import psycopg
        import psycopg_pool

        errors = self._errors
        if isinstance(exc, (psycopg_pool.PoolTimeout, errors.TransactionRollback)):
            return True
        if isinstance(exc, psycopg.OperationalError):
            # Lost connections, shutdowns and refused connections; not a query cancelled by a timeout
            # or lock timeout the user configured, nor a full disk (those are retried too: they pass).
            return True
        return isinstance(exc, psycopg.InterfaceError) and "closed" in str(exc)

    async def _run(self, fn: Callable[[psycopg.Connection[Any]], _T], *, retry: bool = True) -> _T:
        """Run ``fn(connection)`` in a worker thread with a pooled connection; retry lost connections."""
        import psycopg

        if self.clock.take_sync():  # every ServerClock.resync_every; a failure is the call's to meet
            with suppress(RehydrateError):
                await self._set_clock()
        attempt = 1
        while True:
            pool, limiter = self._pool, self._limiter
            if pool is None or limiter is None:
                raise self._not_open()
            try:
                return await anyio.to_thread.run_sync(self._in_thread, pool, fn, limiter=limiter)
            except psycopg.Error as exc:
                if not self._transient(exc):
                    raise self._translate(exc) from exc
                attempt = await self._retries.pause(
                    attempt, exc, self._unavailable, retries=None if retry else 0
                )

    def _unavailable(self, exc: BaseException, attempt: int) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"PostgreSQL at {_redact(self._url)} is unavailable after {attempt} attempts: "
            f"{type(exc).__name__}: {_line(exc)}"
        )

    def _translate(self, exc: BaseException) -> BaseException:
        errors = self._errors
        if isinstance(exc, (errors.CharacterNotInRepertoire, errors.UntranslatableCharacter)):
            return InvalidArgumentError(f"PostgreSQL refused a name or id: {_line(exc)}")
        if isinstance(
            exc, (errors.UndefinedTable, errors.InsufficientPrivilege, errors.ReadOnlySqlTransaction)
        ):
            return StoreUnavailableError(f"PostgreSQL store {self.table}: {_line(exc)}")
        return exc

    @staticmethod
    def _in_thread(pool: psycopg_pool.ConnectionPool[Any], fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        with pool.connection() as conn:
            return fn(conn)

    def _params(self, **params: Any) -> dict[str, Any]:
        params["pin"] = self.clock.pinned_us
        params["skew"] = self.clock.skew_us
        return params

    def _note(self, name: str) -> str:
        return name if len(name.encode()) <= _MAX_NOTE else ""

    def _wake(self, name: str) -> None:
        """Wake this process's subscriptions of ``name`` ("" wakes every one); on the event loop."""
        if name:
            for subscription in self._subscribers.get(name, ()):
                subscription.notify()
        else:
            for subscriptions in self._subscribers.values():
                for subscription in subscriptions:
                    subscription.notify()

    def _removed(self, name: str, rows: Sequence[Any]) -> list[tuple[str, Any]]:
        """``(id, element)`` of removed rows in due order; raise if a row was refused for its serializer."""
        for row in rows:
            if row[4] is not None:
                raise self._mismatch(name, row[4], row[0])
        ordered = sorted(rows, key=lambda row: (row[2], row[3]))
        return [(row[0], self._serializer.loads(bytes(row[1]))) for row in ordered]

    # -- ReDe verbs ------------------------------------------------------------------------------

    async def push(
        self, name: str, element: Any, *, ttl: Seconds, id: str | None = None, replace: bool = False
    ) -> str:
        _name(name)
        micros = _micros(_validate.seconds(ttl, "ttl"))
        _validate.replace(replace, id)
        if id is not None:
            _id(id)
        payload = self._dumps(element, name, id)
        key = _new_id() if id is None else id
        if replace:
            params = self._params(
                name=name,
                id=key,
                ttl=micros,
                payload=payload,
                codec=self._codec,
                channel=self._channel,
                note=self._note(name),
            )
            sql = self._sql.push_replace
            row = await self._run(lambda conn: conn.execute(sql, params, prepare=True).fetchone())
            if row is not None and row[1]:
                self._wake(name)
            return key
        await self._push(name, [key], [payload], [micros], given={key} if id is not None else set())
        return key

    async def _push(
        self,
        name: str,
        keys: list[str],
        payloads: list[bytes],
        ttls: list[int],
        *,
        given: set[str],
        start: int | None = None,
    ) -> None:
        """File a batch; its ttls count from ``start`` (this store's clock, µs) when the server
        takes it (see ``START_SLACK_US``), else from when the statement runs."""
        sql = self._sql
        params = self._params(
            name=name,
            ids=keys,
            payloads=payloads,
            ttls=ttls,
            codec=self._codec,
            channel=self._channel,
            note=self._note(name),
            start=start,
        )
        retried = False

        def body(conn: psycopg.Connection[Any]) -> bool:
            nonlocal retried
            try:
                row = conn.execute(sql.push, params, prepare=True).fetchone()
            except self._errors.UniqueViolation:
                if retried:
                    # A retry after a lost reply: the first attempt may have landed. If every
                    # element is there with this very payload and unclaimed, it did.
                    same = conn.execute(
                        sql.same, {"name": name, "ids": keys, "payloads": payloads}
                    ).fetchone()
                    if same is not None and same[0] == len(keys):
                        return False
                found = conn.execute(sql.existing, {"name": name, "ids": keys}).fetchone()
                raise DuplicateIdError(found[0] if found else next(iter(given), keys[0])) from None
            finally:
                retried = True
            return bool(row and row[1])

        if await self._run(body):
            self._wake(name)

    async def _push_many(
        self, name: str, items: list[tuple[Any, float, str | None]], asked: float
    ) -> list[str]:
        """See :meth:`Store.push_many`: one statement (and so one round trip) per batch, of any size.

        Each element is due its ttl after the call, not after the statement runs: encoding a
        large batch takes milliseconds, and a schedule's first occurrences would be that late.
        """
        _name(name)
        keys: list[str] = []
        payloads: list[bytes] = []
        ttls: list[int] = []
        given: set[str] = set()
        for element, seconds, id in items:
            if id is None:
                key = _new_id()
            else:
                key = _id(id)
                given.add(key)
            keys.append(key)
            payloads.append(self._dumps(element, name, id, "push_many", len(payloads)))
            ttls.append(_micros(seconds))
        _check_batch_bytes("push_many to", name, payloads)
        await self._push(name, keys, payloads, ttls, given=given, start=round(asked * 1_000_000))
        return keys

    async def _remove(self, sql: str, name: str, **params: Any) -> list[tuple[str, Any]]:
        full = self._params(name=name, codec=self._codec, **params)
        rows = await self._run(lambda conn: conn.execute(sql, full, prepare=True).fetchall())
        return self._removed(name, rows)

    async def pull(self, name: str, id: str) -> Any:
        _name(name)
        _id(id)
        removed = await self._remove(self._sql.pull, name, id=id)
        return removed[0][1] if removed else None

    async def poll(self, name: str, *, limit: int | None = None) -> list[Any]:
        _name(name)
        n = _validate.limit(limit)
        return [element for _, element in await self._remove(self._sql.poll, name, limit=n)]

    async def xpoll(self, name: str, *, limit: int | None = None) -> list[str]:
        _name(name)
        n = _validate.limit(limit)
        params = self._params(name=name, limit=n)
        rows = await self._run(lambda conn: conn.execute(self._sql.xpoll, params, prepare=True).fetchall())
        return [row[0] for row in rows]

    async def xack(
        self, name: str, *ids: str, attempt: int | None = None, token: int | None = None
    ) -> list[Any]:
        _name(name)
        for id in _validate.ids(ids):
            _text(id, "id")
        _validate.attempt(attempt)
        _validate.token(token)
        if not ids:
            if self._pool is None:
                raise self._not_open()
            await anyio.lowlevel.checkpoint()
            return []
        removed = dict(await self._remove(self._sql.xack, name, ids=list(ids), attempt=attempt, token=token))
        return [removed.pop(id, None) for id in ids]

    async def look(self, name: str, id: str) -> Any:
        _name(name)
        _id(id)
        params = {"name": name, "id": id}
        row = await self._run(lambda conn: conn.execute(self._sql.look, params, prepare=True).fetchone())
        return None if row is None else self._loads(name, id, bytes(row[0]), row[1])

    async def _look_many(self, name: str, checked: list[str]) -> list[Any]:
        """See :meth:`Store.look_many`: one primary-key query per ``_LOOK_BATCH`` ids."""
        _name(name)
        for index, id in enumerate(checked):
            try:
                _id(id)
            except InvalidArgumentError as exc:
                exc.add_note(f"in ids[{index}]")
                raise
        query = self._sql.look_many

        def read(params: dict[str, Any]) -> Callable[[Any], list[Any]]:
            return lambda conn: conn.execute(query, params, prepare=True).fetchall()

        out: list[Any] = []
        for start in range(0, len(checked), _LOOK_BATCH):
            chunk = checked[start : start + _LOOK_BATCH]
            rows = await self._run(read({"name": name, "ids": chunk}))
            found = {row[0]: self._loads(name, row[0], bytes(row[1]), row[2]) for row in rows}
            out.extend(found.get(id) for id in chunk)
        return out

    async def ttn(self, name: str) -> float | None:
        _name(name)
        params = self._params(name=name)
        row = await self._run(lambda conn: conn.execute(self._sql.ttn, params, prepare=True).fetchone())
        return None if row is None else int(row[0]) / 1e6

    async def update(self, name: str, id: str, element: Any, *, token: int | None = None) -> Any:
        _name(name)
        _id(id)
        _validate.token(token)
        payload = self._dumps(element, name, id, "update")
        params = {"name": name, "id": id, "payload": payload, "codec": self._codec, "token": token}
        row = await self._run(lambda conn: conn.execute(self._sql.update, params, prepare=True).fetchone())
        if row is None:
            raise UnknownIdError(id)
        return self._loads(name, id, bytes(row[0]), row[1])

    # -- revisions: compare-and-set ---------------------------------------------------------------

    async def read(self, name: str, id: str) -> tuple[Any, ElementInfo] | None:
        """See :meth:`Store.read`: one primary-key query (one snapshot)."""
        _name(name)
        _id(id)
        params = {"name": name, "id": id}
        row = await self._run(lambda conn: conn.execute(self._sql.read, params, prepare=True).fetchone())
        if row is None:
            return None
        payload, stored, due, ttl, attempt, claimed, revision = row
        element = self._loads(name, id, bytes(payload), stored)
        info = ElementInfo(
            id=id, due=due / 1e6, ttl=ttl, attempt=attempt_of(attempt), claimed=claimed, revision=revision
        )
        return element, info

    async def _replace_if(
        self, name: str, batch: list[tuple[str, int, Any, float]], asked: float
    ) -> list[int | None]:
        """See :meth:`Store.replace_if`: one statement per batch, of any size (as ``push_many``),
        each item compared and refiled under its row's lock; the ttls count from the call.

        The comparison and the refile are one step because a claim's end depends on it: with the
        claim's revision, nobody may write the element (or claim it) between the two."""
        _name(name)
        ids: list[str] = []
        revisions: list[int] = []
        payloads: list[bytes] = []
        ttls: list[int] = []
        for index, (id, revision, element, ttl) in enumerate(batch):
            try:
                ids.append(_id(id))
                ttls.append(_micros(ttl))
            except InvalidArgumentError as exc:
                exc.add_note(f"in items[{index}] of a replace_if")
                raise
            revisions.append(revision if revision <= _MAX_BIGINT else -1)
            payloads.append(self._dumps(element, name, id, "replace_if", index))
        _check_batch_bytes("replace_if on", name, payloads)
        params = self._params(
            name=name,
            ids=ids,
            revs=revisions,
            payloads=payloads,
            ttls=ttls,
            codec=self._codec,
            channel=self._channel,
            note=self._note(name),
            start=round(asked * 1_000_000),
        )
        rows = await self._run(functools.partial(self._rows, self._sql.replace_if, params))
        done = {int(ord): int(revision) for ord, revision, _ in rows}
        if any(row[2] for row in rows):
            self._wake(name)
        return [done.get(i + 1) for i in range(len(ids))]

    async def update_if(self, name: str, id: str, revision: int, element: Any) -> int | None:
        """See :meth:`Store.update_if`: one statement, the comparison in its WHERE clause."""
        _name(name)
        _id(id)
        checked = _revision(revision)
        payload = self._dumps(element, name, id, "update_if")
        params = {"name": name, "id": id, "rev": checked, "payload": payload, "codec": self._codec}
        row = await self._run(lambda conn: conn.execute(self._sql.update_if, params, prepare=True).fetchone())
        return None if row is None else int(row[0])

    async def pull_if(self, name: str, id: str, revision: int) -> bool:
        """See :meth:`Store.pull_if`: one statement, the comparison in its WHERE clause."""
        _name(name)
        _id(id)
        params = {"name": name, "id": id, "rev": _revision(revision)}
        row = await self._run(lambda conn: conn.execute(self._sql.pull_if, params, prepare=True).fetchone())
        return bool(row and row[0])

    # -- leases ----------------------------------------------------------------------------------

    async def _claim(self, name: str, lease: float, n: int | None, ahead: float) -> list[Claim]:
        """See :meth:`Store.claim`: at most 1,000 elements per call, one statement."""
        _name(name)
        micros, early = _micros(lease), _micros(ahead)
        take = _CLAIM_BATCH if n is None else min(n, _CLAIM_BATCH)
        params = self._params(name=name, lease=micros, limit=take, codec=self._codec, ahead=early)
        self._ttn_after.pop(name, None)  # (what an earlier claim read is older than this one)
        rows = await self._run(lambda conn: conn.execute(self._sql.claim, params, prepare=True).fetchall())
        claims = []
        for id, payload, token, until, due, now, foreign in rows:
            if token < 0:
                # It took fewer than it asked for: the next due time after it (the server's
                # microseconds, as this store's clock reads them; None if empty).
                self._ttn_after[name] = None if until is None else until / 1e6
                continue
            if foreign is not None:
                self._ttn_after.pop(name, None)
                raise self._mismatch(name, foreign, id)
            data = bytes(payload)
            element = self._serializer.loads(data)
            # The claim's revision is its claim number (the fresh seq it filed the row under).
            claims.append(
                new_claim(
                    id, element, attempt_of(token), until / 1e6, token, due / 1e6, now / 1e6, token // STAMP
                )
            )
        if claims:
            # The statement reads the next due time in its snapshot, taken when it began, but
            # locks rows later: a write committed in between that made an element due sooner
            # than a row this claim then took did not notify (that row, due, was the head it
            # compared with), and the snapshot does not show it. Only a fresh read (ttn) sees
            # it; a claim that took nothing left every head in place, so its reading stands.
            self._ttn_after.pop(name, None)
        return claims

    def _check_open(self) -> None:
        if self._pool is None:
            raise self._not_open()

    async def _ack(self, name: str, pairs: list[tuple[str, int]]) -> list[bool]:
        _name(name)
        for id, _ in pairs:
            _id(id)
        params = self._params(name=name, ids=[id for id, _ in pairs], tokens=[token for _, token in pairs])
        rows = await self._run(lambda conn: conn.execute(self._sql.ack, params, prepare=True).fetchall())
        removed = {(id, token) for id, token in rows}
        out = []
        for pair in pairs:
            out.append(pair in removed)
            removed.discard(pair)
        return out

    async def _refile(
        self, name: str, id: str, micros: int, *, attempt: int | None, token: int | None, extend: bool
    ) -> int | None:
        params = self._params(
            name=name,
            id=id,
            ttl=micros,
            attempt=attempt,
            token=token,
            extend=extend,
            channel=self._channel,
            note=self._note(name),
        )
        row = await self._run(lambda conn: conn.execute(self._sql.refile, params, prepare=True).fetchone())
        if row is None:
            return None
        if row[1]:
            self._wake(name)
        return int(row[0])

    async def reschedule(
        self, name: str, id: str, *, ttl: Seconds, attempt: int | None = None, token: int | None = None
    ) -> bool:
        _name(name)
        micros = _micros(_validate.seconds(ttl, "ttl"))
        _id(id)
        _validate.attempt(attempt)
        _validate.token(token)
        return await self._refile(name, id, micros, attempt=attempt, token=token, extend=False) is not None

    async def _release(
        self, name: str, checked: list[tuple[str, int, float]], *, hand_back: bool
    ) -> list[bool]:
        """See :meth:`Store.reschedule_many` and :meth:`Store.hand_back`: one statement per
        1,000 items, each atomic."""
        _name(name)
        batch = [(_id(id), token, _micros(ttl)) for id, token, ttl in checked]
        statement = self._sql.hand_back if hand_back else self._sql.reschedule_many
        return await self._fenced(name, statement, ("ids", "tokens", "ttls"), batch)

    async def _fenced(
        self,
        name: str,
        statement: str,
        columns: tuple[str, ...],
        batch: Sequence[tuple[Any, ...]],
        **more: Any,
    ) -> list[bool]:
        """Run a fenced batch statement (``reschedule_many``, ``hand_back``) on
        ``batch``, 1,000 items a statement, each item's values passed as arrays named by
        ``columns``; whether each was done (the statement returns the 1-based position of each
        item it did)."""
        if not batch:
            if self._pool is None:
                raise self._not_open()
            await anyio.lowlevel.checkpoint()
            return []
        out: list[bool] = []
        for start in range(0, len(batch), _CLAIM_BATCH):
            part = batch[start : start + _CLAIM_BATCH]
            arrays = {column: [item[i] for item in part] for i, column in enumerate(columns)}
            params = self._params(name=name, channel=self._channel, note=self._note(name), **arrays, **more)
            rows = await self._run(functools.partial(self._rows, statement, params))
            done = {int(row[0]) for row in rows}
            if any(row[1] for row in rows):
                self._wake(name)
            out += [i + 1 in done for i in range(len(part))]
        return out

    @staticmethod
    def _rows(statement: str, params: dict[str, Any], conn: Any) -> list[Any]:
        return conn.execute(statement, params, prepare=True).fetchall()  # type: ignore[no-any-return]

    async def extend(self, name: str, id: str, *, lease: Seconds, token: int) -> float | None:
        _name(name)
        micros = _micros(_validate.seconds(lease, "lease"))
        _id(id)
        if _validate.token(token) is None:
            raise InvalidArgumentError("extend needs the claim's token")
        until = await self._refile(name, id, micros, attempt=None, token=token, extend=True)
        return None if until is None else until / 1e6

    async def info(self, name: str, id: str) -> ElementInfo | None:
        _name(name)
        _id(id)
        params = {"name": name, "id": id}
        row = await self._run(lambda conn: conn.execute(self._sql.info, params, prepare=True).fetchone())
        if row is None:
            return None
        return ElementInfo(
            id=id, due=row[0] / 1e6, ttl=row[1], attempt=attempt_of(row[2]), claimed=row[3], revision=row[4]
        )

    # -- inspection and waiting ------------------------------------------------------------------

    async def names(self) -> list[str]:
        """See :meth:`Store.names`; O(names * log n), by skipping from one name to the next in the index."""
        rows = await self._run(lambda conn: conn.execute(self._sql.names_query).fetchall())
        return sorted(row[0] for row in rows)

    async def size(self, name: str) -> int:
        """See :meth:`Store.size`: read from the name's counters, not counted."""
        _name(name)
        params = {"name": name}
        row = await self._run(lambda conn: conn.execute(self._sql.size, params, prepare=True).fetchone())
        return int(row[0]) if row else 0

    async def summary(self, name: str) -> Summary:
        """See :meth:`Store.summary`: size and claimed from the counters, due by an index-only range count."""
        _name(name)
        params = self._params(name=name)
        row = await self._run(lambda conn: conn.execute(self._sql.summary, params, prepare=True).fetchone())
        assert row is not None
        size, due, claimed, head, now = row
        ttn = None if head is None else max(0, head - now) / 1e6
        return Summary(size=int(size), due=int(due), claimed=int(claimed), ttn=ttn)

    async def ids(self, name: str, *, limit: int | None = None) -> list[str]:
        _name(name)
        n = _validate.limit(limit)
        params = {"name": name, "limit": n}
        rows = await self._run(lambda conn: conn.execute(self._sql.ids, params, prepare=True).fetchall())
        return [row[0] for row in rows]

    # -- workers ---------------------------------------------------------------------------------

    # -- limits ----------------------------------------------------------------------------------
    # Each step is one transaction holding an advisory lock on its limit key
    # (rehydrate.stores._limits_sql); time is the server's, as for every statement here.

    def _limit_step(
        self, limit: str, key: str | None, step: Callable[[Any, float], _T]
    ) -> Callable[[Any], _T]:
        def body(conn: psycopg.Connection[Any]) -> _T:
            with conn.transaction():
                if key is not None:
                    lock = int.from_bytes(
                        hashlib.blake2b(f"{limit}\x00{key}".encode(), digest_size=8).digest(),
                        "big",
                        signed=True,
                    )
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
                row = conn.execute(_LIMIT_NOW, self._params()).fetchone()
                assert row is not None
                now = int(row[0]) / 1e6

                def execute(statement: str, params: tuple[Any, ...]) -> list[Any]:
                    cursor = conn.execute(statement, params)
                    return cursor.fetchall() if cursor.description is not None else []

                return step(execute, now)

        return body

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
        tables = self._limit_sql
        return await self._run(
            self._limit_step(
                limit,
                key,
                lambda execute, now: tables.acquire(execute, now, limit, key, holder, spec, waiter),
            )
        )

    async def limit_park(
        self, limit: str, key: str, spec: LimitSpec, waiters: Sequence[tuple[str, str, int]]
    ) -> LimitAnswer:
        _limits.check_names(limit, key)
        _limits.check_spec(spec)
        checked = _limits.check_waiters(waiters)
        tables = self._limit_sql
        return await self._run(
            self._limit_step(
                limit, key, lambda execute, now: tables.park(execute, now, limit, key, spec, checked)
            )
        )

    async def limit_renew(self, limit: str, key: str, holder: str, spec: LimitSpec) -> bool:
        _limits.check_names(limit, key, holder)
        _limits.check_spec(spec)
        tables = self._limit_sql
        return await self._run(
            self._limit_step(
                limit, key, lambda execute, now: tables.renew(execute, now, limit, key, holder, spec)
            )
        )

    async def limit_release(self, limit: str, key: str, holder: str, spec: LimitSpec) -> LimitAnswer:
        _limits.check_names(limit, key, holder)
        _limits.check_spec(spec)
        tables = self._limit_sql
        return await self._run(
            self._limit_step(
                limit, key, lambda execute, now: tables.release(execute, now, limit, key, holder, spec)
            )
        )

    async def limits(self, limit: str | None = None) -> list[LimitInfo]:
        if limit is not None:
            _limits.check_names(limit, "-")
        tables = self._limit_sql
        return await self._run(
            self._limit_step(limit or "-", None, lambda execute, now: tables.listing(execute, now, limit))
        )

    async def heartbeat(self, worker: str, data: Mapping[str, Any], *, ttl: Seconds) -> None:
        worker = _text(_workers.check_worker(worker), "worker")
        text, seconds = _workers.worker_data(data), _workers.worker_ttl(ttl)
        params = self._params(id=worker, data=text, ttl=_micros(seconds), keep=_micros(_workers.WORKER_KEEP))
        await self._run(lambda conn: conn.execute(self._sql.heartbeat, params, prepare=True))

    async def deregister_worker(self, worker: str) -> bool:
        params = {"id": _text(_workers.check_worker(worker), "worker")}
        rows = await self._run(lambda conn: conn.execute(self._sql.deregister, params).fetchall())
        return bool(rows)

    async def workers(self) -> list[WorkerRecord]:
        params = self._params(keep=_micros(_workers.WORKER_KEEP))
        rows = await self._run(lambda conn: conn.execute(self._sql.workers, params).fetchall())
        return [
            _workers.record(id, text, seen / 1e6, expires / 1e6, now / 1e6)
            for id, text, seen, expires, now in rows
        ]

    async def _listen(self) -> None:
        """Start this store's listening connection and thread, once."""
        lock = self._listener_lock
        if self._pool is None or lock is None:
            raise self._not_open()
        async with lock:
            if self._listener is not None:
                return
            if self._pool is None:
                raise self._not_open()
            listener = _Listener(
                self._conninfo(), self._channel, self._wake, timeout=self._timeout, backoff=self._retries
            )
            token = anyio.lowlevel.current_token()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(listener.start, token)
            self._listener = listener

    @asynccontextmanager
    async def _subscribe(self, name: str) -> AsyncIterator[Subscription]:
        await self._listen()
        subscription = EventSubscription(self.clock)
        subscribers = self._subscribers.setdefault(name, set())
        subscribers.add(subscription)
        try:
            yield subscription
        finally:
            subscribers.discard(subscription)
            if not subscribers and self._subscribers.get(name) is subscribers:
                del self._subscribers[name]

    def subscribe(self, name: str) -> AbstractAsyncContextManager[Subscription]:
        """See :meth:`Store.subscribe`: ``LISTEN`` on one connection per store, woken at each commit
        that makes an element of ``name`` due sooner, in any process."""
        _name(name)
        return self._subscribe(name)
