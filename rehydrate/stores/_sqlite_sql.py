"""The SQLite store's SQL: its schema, its statements, and the few helpers that run them.

Kept apart from ``_sqlite.py`` so the store reads as what it does (validate, run in a thread,
translate errors) and the SQL can be read, reviewed and tuned in one place. Every statement takes
its values as parameters; none is built from data.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Final, TypeVar

from rehydrate.stores import _sqlite_wake as _wake

__all__ = [
    "ACK",
    "CLAIM",
    "DELETE",
    "DELETE_ID",
    "DUE",
    "DUE_AHEAD",
    "DEREGISTER",
    "DUE_IDS",
    "EXTEND",
    "FORGET_WORKERS",
    "GET_SCHEMA",
    "HAS_TABLES",
    "HEAD",
    "HEARTBEAT",
    "IDS",
    "INFO",
    "INSERT",
    "LOOK",
    "MIGRATE",
    "NAMES",
    "PULL_IF",
    "READ",
    "REFILE",
    "REPLACE_IF",
    "ROW",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SET_PAYLOAD",
    "SET_SCHEMA",
    "SIZE",
    "SUMMARY",
    "UPDATE_IF",
    "WORKERS",
    "begin",
    "bump",
    "current_schema",
    "head",
    "next_seq",
    "read_signal",
    "transaction",
]

_T = TypeVar("_T")

#: Bumped when the tables change shape; a file written by a later version is refused, not guessed
#: at, and one written by an earlier version is brought up to this one when opened (``MIGRATE``).
#: 2: ``rehydrate_workers`` (worker heartbeats).
#: 3: ``rehydrate_elements.rev`` (each element's revision, for compare-and-set).
SCHEMA_VERSION: Final = 3

SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS rehydrate_meta (
        key TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    ) WITHOUT ROWID""",
    # One row per element. ``seq`` is the filing order (ties in due time come out in it);
    # ``ttl`` is the TTL or lease the element was last filed with; ``serializer`` names the
    # serializer that wrote ``payload``, so a store configured with another one fails loudly.
    # ``rev`` is the element's revision (ElementInfo.revision): drawn from the same counter as
    # ``seq`` (a write that files the row anew takes its new ``seq``; ``update`` draws one for it
    # alone; ``extend`` keeps it), so it only grows and is never given twice in the file.
    """CREATE TABLE IF NOT EXISTS rehydrate_elements (
        name TEXT NOT NULL,
        id TEXT NOT NULL,
        payload BLOB NOT NULL,
        serializer TEXT NOT NULL,
        due REAL NOT NULL,
        seq INTEGER NOT NULL,
        ttl REAL NOT NULL,
        attempt INTEGER NOT NULL DEFAULT 0,  -- the claim stamp: see rehydrate._core._fence
        claimed INTEGER NOT NULL DEFAULT 0,
        rev INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (name, id)
    )""",
    "CREATE INDEX IF NOT EXISTS rehydrate_elements_due ON rehydrate_elements (name, due, seq)",
    # A counter per name, bumped by every write that makes an element due sooner than all others:
    # what subscriptions in other processes watch.
    """CREATE TABLE IF NOT EXISTS rehydrate_signals (
        name TEXT PRIMARY KEY,
        counter INTEGER NOT NULL
    ) WITHOUT ROWID""",
    # One row per worker that sent a heartbeat (Store.heartbeat): its data as JSON text.
    """CREATE TABLE IF NOT EXISTS rehydrate_workers (
        id TEXT PRIMARY KEY,
        data TEXT NOT NULL,
        last_seen REAL NOT NULL,
        expires REAL NOT NULL
    ) WITHOUT ROWID""",
    "INSERT OR IGNORE INTO rehydrate_meta (key, value) VALUES ('seq', 0)",
)
#: From each earlier schema version to the next: what SCHEMA's ``IF NOT EXISTS`` statements do not
#: do by themselves (they create new tables; this changes existing ones and records the version).
MIGRATE: Final = {
    1: ("UPDATE rehydrate_meta SET value = 2 WHERE key = 'schema' AND value = 1",),
    # Each existing row's revision is its ``seq``: every row's was drawn once from the counter
    # (so they are distinct), and every revision given from now on is drawn after them.
    2: (
        "ALTER TABLE rehydrate_elements ADD COLUMN rev INTEGER NOT NULL DEFAULT 0",
        "UPDATE rehydrate_elements SET rev = seq",
        "UPDATE rehydrate_meta SET value = 3 WHERE key = 'schema' AND value = 2",
    ),
}

HEAD: Final = "SELECT due FROM rehydrate_elements WHERE name = ? ORDER BY due, seq LIMIT 1"
DUE: Final = (
    "SELECT rowid, id, payload, serializer, due, attempt FROM rehydrate_elements"
    " WHERE name = ? AND due <= ? ORDER BY due, seq LIMIT ?"
)
#: DUE for a claim ahead of time: up to ?2, but a claimed row (a running lease) only up to ?3.
DUE_AHEAD: Final = (
    "SELECT rowid, id, payload, serializer, due, attempt FROM rehydrate_elements"
    " WHERE name = ?1 AND due <= ?2 AND (claimed = 0 OR due <= ?3) ORDER BY due, seq LIMIT ?4"
)
ROW: Final = (
    "SELECT rowid, payload, serializer, due, attempt, claimed FROM rehydrate_elements"
    " WHERE name = ? AND id = ?"
)
#: A new element: its revision is its filing number (?6).
INSERT: Final = (
    "INSERT INTO rehydrate_elements (name, id, payload, serializer, due, seq, ttl, rev)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6)"
)
DELETE: Final = "DELETE FROM rehydrate_elements WHERE rowid = ?"
#: A row filed anew, released (reschedule): a new revision, its filing number (?2).
REFILE: Final = (
    "UPDATE rehydrate_elements SET due = ?1, seq = ?2, ttl = ?3, claimed = 0, rev = ?2 WHERE rowid = ?4"
)
#: A lease renewed (extend): filed anew, still claimed, its revision kept (the claim's own
#: renewals must not fence out the claim's conditional writes).
EXTEND: Final = "UPDATE rehydrate_elements SET due = ?, seq = ?, ttl = ? WHERE rowid = ?"
#: A claim handed back unrun (hand_back): REFILE, with the stamp one attempt lower.
HAND_BACK: Final = (
    "UPDATE rehydrate_elements SET due = ?1, seq = ?2, ttl = ?3, claimed = 0, attempt = ?4, rev = ?2"
    " WHERE rowid = ?5"
)
NAMES: Final = """
    WITH RECURSIVE walk(name) AS (
        SELECT min(name) FROM rehydrate_elements
        UNION ALL
        SELECT (SELECT min(name) FROM rehydrate_elements WHERE name > walk.name)
        FROM walk WHERE walk.name IS NOT NULL
    )
    SELECT name FROM walk WHERE name IS NOT NULL
"""
DELETE_ID: Final = "DELETE FROM rehydrate_elements WHERE name = ? AND id = ?"
DUE_IDS: Final = "SELECT id FROM rehydrate_elements WHERE name = ? AND due <= ? ORDER BY due, seq LIMIT ?"
LOOK: Final = "SELECT payload, serializer FROM rehydrate_elements WHERE name = ? AND id = ?"
#: ``update``: the element replaced in place (due time, filing number, attempt and claim kept),
#: with a new revision (?3) drawn from the filing counter.
SET_PAYLOAD: Final = "UPDATE rehydrate_elements SET payload = ?, serializer = ?, rev = ? WHERE rowid = ?"
#: A claim: filed at the lease's end, its filing number (?2) the new revision.
CLAIM: Final = (
    "UPDATE rehydrate_elements SET due = ?1, seq = ?2, ttl = ?3, attempt = ?4, claimed = 1, rev = ?2"
    " WHERE rowid = ?5"
)
#: The element and what ``info`` gives, in one read (``Store.read``).
READ: Final = (
    "SELECT payload, serializer, due, ttl, attempt, claimed, rev FROM rehydrate_elements"
    " WHERE name = ? AND id = ?"
)
#: The conditional writes (compare-and-set): the comparison with the revision the caller read
#: and the write in one statement, so nothing can write the row between them (the guarantee the
#: scheduling layer's rules stand on: a write made on a stale read does nothing).
#: ``replace_if``: filed anew in place, unclaimed, attempt 0, its filing number (?4) the new revision.
REPLACE_IF: Final = (
    "UPDATE rehydrate_elements SET payload = ?1, serializer = ?2, due = ?3, seq = ?4, ttl = ?5,"
    " attempt = 0, claimed = 0, rev = ?4 WHERE name = ?6 AND id = ?7 AND rev = ?8"
)
#: ``update_if``: the element replaced, due time, attempt and claim kept; the new revision ?3.
UPDATE_IF: Final = (
    "UPDATE rehydrate_elements SET payload = ?1, serializer = ?2, rev = ?3"
    " WHERE name = ?4 AND id = ?5 AND rev = ?6"
)
#: ``pull_if``.
PULL_IF: Final = "DELETE FROM rehydrate_elements WHERE name = ? AND id = ? AND rev = ?"
ACK: Final = "DELETE FROM rehydrate_elements WHERE name = ? AND id = ? AND attempt = ? AND claimed = 1"
INFO: Final = "SELECT due, ttl, attempt, claimed, rev FROM rehydrate_elements WHERE name = ? AND id = ?"
SIZE: Final = "SELECT count(*) FROM rehydrate_elements WHERE name = ?"
SUMMARY: Final = (
    "SELECT count(*), coalesce(sum(due <= ?), 0), coalesce(sum(claimed), 0), min(due)"
    " FROM rehydrate_elements WHERE name = ?"
)
IDS: Final = "SELECT id FROM rehydrate_elements WHERE name = ? ORDER BY due, seq LIMIT ?"
HAS_TABLES: Final = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rehydrate_elements'"
SET_SCHEMA: Final = "INSERT OR IGNORE INTO rehydrate_meta (key, value) VALUES ('schema', ?)"
GET_SCHEMA: Final = "SELECT value FROM rehydrate_meta WHERE key = 'schema'"
HEARTBEAT: Final = (
    "INSERT INTO rehydrate_workers (id, data, last_seen, expires) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET data = excluded.data, last_seen = excluded.last_seen,"
    " expires = excluded.expires"
)
FORGET_WORKERS: Final = "DELETE FROM rehydrate_workers WHERE expires <= ?"
DEREGISTER: Final = "DELETE FROM rehydrate_workers WHERE id = ?"
WORKERS: Final = "SELECT id, data, last_seen, expires FROM rehydrate_workers WHERE expires > ? ORDER BY id"


def current_schema(conn: sqlite3.Connection) -> int | None:
    """The file's schema version, read without a transaction; ``None`` before it has tables."""
    try:
        row = conn.execute(GET_SCHEMA).fetchone()
    except sqlite3.OperationalError:  # no such table: a new file
        return None
    return None if row is None else int(row[0])


#: Between two tries for the write lock, a writer waits at most these (then the last, again and
#: again), woken as soon as a writer of this store frees the lock (``_sqlite_wake.LockWaiter``).
#: SQLite's own busy handler sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms: a worker that
#: found the lock taken three times in a row (a producer pushing one element at a time from another
#: process) then slept 10 to 100 ms while the lock was free, the tail of SQLite's cross-process
#: lateness (``bench_workers.py --store sqlite --enqueue one``).
_LOCK_PAUSES: Final = (0.0002, 0.0005, 0.001, 0.002)


def begin(conn: sqlite3.Connection, busy_timeout: float, wake: str | None = None) -> None:
    """``BEGIN IMMEDIATE``, waiting for another process's write lock up to ``busy_timeout`` seconds
    (then ``OperationalError: database is locked``, as before); the connection's own busy timeout
    (its readers') is ``busy_timeout`` again afterwards.

    ``wake``: the database's wake-up directory. A writer that finds the lock taken waits there to
    be handed it (see :func:`transaction`), each wait bounded by the next of ``_LOCK_PAUSES``;
    without one, it sleeps those pauses.
    """
    conn.execute("PRAGMA busy_timeout = 0")  # this loop waits, not SQLite's busy handler
    waiter: _wake.LockWaiter | None = None
    try:
        deadline: float | None = None
        tries = 0
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:  # SQLITE_BUSY and its extended codes
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + busy_timeout
                    waiter = _wake.LockWaiter.bind(wake)
                    if waiter is not None:
                        continue  # the lock may have been freed before the waiter could hear of it
                if now >= deadline:
                    raise
                pause = _LOCK_PAUSES[min(tries, len(_LOCK_PAUSES) - 1)]
                if waiter is None:
                    time.sleep(pause)
                else:
                    waiter.wait(pause)
                tries += 1
    finally:
        if waiter is not None:
            waiter.close()
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")


def transaction(
    conn: sqlite3.Connection,
    body: Callable[[sqlite3.Connection], _T],
    busy_timeout: float,
    wake: str | None = None,
) -> _T:
    """Run ``body`` in a write transaction taken up front (``BEGIN IMMEDIATE``); roll back if it raises.

    Taking the write lock at ``BEGIN`` (not at the first write) is what makes read-then-write
    sequences, such as claim's select-then-refile, atomic across processes: a second claimer waits
    (up to ``busy_timeout``) instead of reading the same due rows. ``wake``: the database's wake-up
    directory, where writers wait for the lock (:func:`begin`); once the transaction has ended,
    they are handed the lock.
    """
    begin(conn, busy_timeout, wake)
    try:
        result = body(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    finally:
        _wake.hand_over(wake)
    return result


def next_seq(conn: sqlite3.Connection, n: int) -> int:
    """Reserve ``n`` filing numbers (inside a write transaction) and return the first."""
    conn.execute("UPDATE rehydrate_meta SET value = value + ? WHERE key = 'seq'", (n,))
    (last,) = conn.execute("SELECT value FROM rehydrate_meta WHERE key = 'seq'").fetchone()
    return int(last) - n + 1


def head(conn: sqlite3.Connection, name: str) -> float | None:
    """The due time of the dehydrator's next element, ``None`` if it is empty. O(log n)."""
    row = conn.execute(HEAD, (name,)).fetchone()
    return None if row is None else float(row[0])


def bump(conn: sqlite3.Connection, name: str) -> int:
    """Tell subscribers (in every process) that ``name`` has something due sooner; the new counter."""
    conn.execute("INSERT OR IGNORE INTO rehydrate_signals (name, counter) VALUES (?, 0)", (name,))
    conn.execute("UPDATE rehydrate_signals SET counter = counter + 1 WHERE name = ?", (name,))
    return read_signal(conn, name)


def read_signal(conn: sqlite3.Connection, name: str) -> int:
    row = conn.execute("SELECT counter FROM rehydrate_signals WHERE name = ?", (name,)).fetchone()
    return 0 if row is None else int(row[0])
