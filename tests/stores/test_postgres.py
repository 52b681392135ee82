"""What the contract suite cannot see of the PostgreSQL store: its URL, schema, server clock,
LISTEN/NOTIFY across store objects and processes, failures (a server crash and restart, a worker
killed mid-handler) and large or many elements.

Every test runs on the session's throwaway server (``tests/pg_server.py``), each in tables of its
own; tests that crash or restart a server start one of their own. Without PostgreSQL's server
binaries they skip with one line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

from rehydrate import (
    DuplicateIdError,
    ElementTooLargeError,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    StoreRefusedError,
    StoreUnavailableError,
    UnsupportedStoreError,
)
from rehydrate._core._fence import attempt_of
from rehydrate.stores import PostgresStore, _postgres, open_store
from rehydrate.stores._postgres_sql import SCHEMA_VERSION
from tests.pg_server import PostgresServer, drop_tables, shared_server_url, skip_without_server
from tests.stores.server_clock import (
    SlowJSON,
    advance,
    batch_ttls_count_from_the_call,
    clock_is_measured_again,
    drifted_estimate_never_files_early,
    freeze,
)
from tests.test_faults import lines, start_worker, wait_for

pytestmark = pytest.mark.anyio

N = "jobs"


@pytest.fixture
def url(pytestconfig: pytest.Config) -> str:
    return shared_server_url(pytestconfig)


@pytest.fixture
def table() -> str:
    return f"rhtest_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def store(url: str, table: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore.from_url(url, table=table, retries=2, retry_backoff=0.05) as s:
        try:
            yield s
        finally:
            await drop_tables(s)


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    """A server of this module's own, for the tests that crash and restart it."""
    skip_without_server()
    with PostgresServer() as server:
        yield server


async def sql(store: PostgresStore, query: str, *params: Any) -> list[Any]:
    return await store._run(lambda conn: conn.execute(query, params).fetchall())


# -- URL and options -----------------------------------------------------------------------------


async def test_open_store_takes_both_schemes_and_its_options() -> None:
    s = open_store(
        "postgres://u:secret@db.example:5433/app?table=jobs&schema=work&pool_size=2&sslmode=require"
    )
    assert isinstance(s, PostgresStore)
    assert s.table == "work.jobs"
    assert "secret" not in repr(s)
    assert isinstance(open_store("postgresql://localhost/app"), PostgresStore)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://localhost/app?table=Jobs",  # not a lowercase identifier
        "postgresql://localhost/app?table=a;drop",
        "postgresql://localhost/app?schema=",
        "postgresql://localhost/app?pool_size=0",
        "postgresql://localhost/app?pool_size=many",
        "postgresql://localhost/app?synchronous_commit=sometimes",
        "postgresql://localhost/app?create=perhaps",
        "postgresql://localhost/app?timeout=-1",
        "postgresql://localhost/app?serializer=yaml",
        "postgresql://localhost/app?table=a&table=b",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        open_store(url)


def test_an_option_given_twice_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="both"):
        open_store("postgresql://localhost/app?table=a", table="b")


async def test_an_unknown_libpq_parameter_is_refused_at_open() -> None:
    with pytest.raises(InvalidArgumentError, match="invalid PostgreSQL URL"):
        await open_store("postgresql://localhost/app?no_such_option=1").open()


async def test_an_unreachable_server_is_unavailable() -> None:
    s = open_store("postgresql://postgres@127.0.0.1:1/app?timeout=1")
    with pytest.raises(StoreUnavailableError):
        await s.open()


# -- schema ----------------------------------------------------------------------------------------


async def test_tables_are_created_on_first_use_with_a_version_row(store: PostgresStore, table: str) -> None:
    assert await store.schema_version() == SCHEMA_VERSION == 4
    rows = await sql(store, "SELECT indexdef FROM pg_indexes WHERE tablename = %s ORDER BY indexname", table)
    assert any("(name, due, seq)" in row[0] for row in rows)
    assert any("(name, id)" in row[0] for row in rows)
    assert await store.migrate() == 4  # again: nothing to do


async def test_a_version_1_schema_is_migrated(store: PostgresStore, url: str, table: str) -> None:
    """Version 2 added the workers table: a version 1 schema gets it when a store that may create
    tables opens it (or from ``rehydrate migrate``); one that may not asks for the migration.
    (And version 3's column: migrations run one after the other.)"""
    await store.push(N, "kept", ttl=0, id="k")
    await store._run(lambda conn: conn.execute(f"DROP TABLE {table}_workers"))
    await store._run(lambda conn: conn.execute(f"ALTER TABLE {table} DROP COLUMN rev"))
    await sql(store, f"UPDATE {table}_meta SET value = 1 WHERE key = 'schema' RETURNING 1")
    with pytest.raises(RehydrateError, match=r"version 1.*rehydrate migrate"):
        await PostgresStore.from_url(f"{url}?create=0&table={table}").open()
    async with PostgresStore.from_url(url, table=table) as s:
        assert await s.schema_version() == SCHEMA_VERSION
        assert await s.look(N, "k") == "kept"
        assert await s.update_if(N, "k", await _revision(s, "k"), "changed") is not None
        await s.heartbeat("w", {"ok": True}, ttl=5)
        assert [w.data for w in await s.workers()] == [{"ok": True}]


async def test_create_false_refuses_missing_tables_then_works_after_migrate(url: str, table: str) -> None:
    checking = PostgresStore.from_url(f"{url}?create=0&table={table}")
    with pytest.raises(RehydrateError, match="rehydrate migrate"):
        await checking.open()
    async with PostgresStore.from_url(url, table=table) as creator:
        try:
            async with PostgresStore.from_url(f"{url}?create=false&table={table}") as s:
                await s.push(N, "x", ttl=0, id="x")
                assert await s.poll(N) == ["x"]
        finally:
            await drop_tables(creator)


async def test_a_schema_of_another_version_is_refused(store: PostgresStore, url: str, table: str) -> None:
    await sql(store, f"UPDATE {table}_meta SET value = 99 WHERE key = 'schema' RETURNING 1")
    with pytest.raises(RehydrateError, match="version 99"):
        await PostgresStore.from_url(url, table=table).open()


async def _revision(store: PostgresStore, id: str, name: str = N) -> int:
    info = await store.info(name, id)
    assert info is not None
    return info.revision


# A database written by the version 2 store (the release before revisions): its DDL, verbatim, and
# the rows, counters and sequence that store left after these calls (at server time ``_V2_NOW``):
# push plain (ttl 3600), claimed, retried, extended (ttl 0), updated (ttl 100), replaced (ttl 0,
# then replaced with ttl 50); claim (lease 600: claimed, retried, extended); reschedule retried by
# its token (ttl 1800); extend extended (lease 900); update updated; push_many to "other" (ttls 10
# and 20, generated ids).
_V2_CREATE = (
    """CREATE TABLE {t} (
        name text COLLATE "C" NOT NULL,
        id text COLLATE "C" NOT NULL,
        due bigint NOT NULL,
        seq bigint NOT NULL,
        attempt bigint NOT NULL DEFAULT 0,
        claimed boolean NOT NULL DEFAULT false,
        ttl double precision NOT NULL,
        serializer text NOT NULL,
        payload bytea NOT NULL,
        PRIMARY KEY (name, id)
    ) WITH (
        fillfactor = 85,
        autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_insert_scale_factor = 0.01,
        autovacuum_analyze_scale_factor = 0.02,
        autovacuum_vacuum_cost_delay = 0
    )""",
    "CREATE INDEX {t}_due ON {t} (name, due, seq)",
    """CREATE TABLE {t}_counts (
        name text COLLATE "C" NOT NULL,
        shard integer NOT NULL,
        size bigint NOT NULL,
        claimed bigint NOT NULL,
        PRIMARY KEY (name, shard)
    ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000)""",
    "CREATE SEQUENCE {t}_seq AS bigint",
    """CREATE TABLE {t}_workers (
        id text COLLATE "C" PRIMARY KEY,
        data text NOT NULL,
        last_seen bigint NOT NULL,
        expires bigint NOT NULL
    )""",
    'CREATE TABLE {t}_meta (key text COLLATE "C" PRIMARY KEY, value bigint NOT NULL)',
    "INSERT INTO {t}_meta (key, value) VALUES ('schema', 2)",
)
_V2_NOW = 1796200001363143
_V2_LAST = 14
# (name, id, due, seq, attempt, claimed, ttl, serializer, payload)
_V2_ROWS = [
    ("jobs", "claimed", 1796200601330525, 8, 8388609, True, 600.0, "json", '{"n":"claimed"}'),
    ("jobs", "extended", 1796200901351703, 12, 10485761, True, 900.0, "json", '{"n":"extended"}'),
    ("jobs", "plain", 1796203601282823, 1, 0, False, 3600.0, "json", '{"n":"plain"}'),
    ("jobs", "replaced", 1796200051327715, 7, 0, False, 50.0, "json", '{"n":"replaced","v":2}'),
    ("jobs", "retried", 1796201801343503, 11, 9437185, False, 1800.0, "json", '{"n":"retried"}'),
    ("jobs", "updated", 1796200101315609, 5, 0, False, 100.0, "json", '{"n":"updated","v":2}'),
    ("other", "0661a26706b998601961645e7d0cc68b", 1796200011354129, 13, 0, False, 10.0, "json", '{"n":1}'),
    ("other", "0661a26706b9bba425b89444ff25c1df", 1796200021354129, 14, 0, False, 20.0, "json", '{"n":2}'),
]
# (name, size, claimed), on one counter shard each.
_V2_COUNTS = [("jobs", 6, 2), ("other", 2, 0)]


def _raw(url: str, *statements: tuple[str, Any]) -> list[Any]:
    """Run ``statements`` on a connection of their own, in one transaction; the last one's rows."""
    import psycopg

    rows: list[Any] = []
    with psycopg.connect(url) as conn:
        for statement, params in statements:
            cursor = conn.execute(statement, params)
            rows = cursor.fetchall() if cursor.description else []
    return rows


def _write_v2(url: str, table: str) -> int:
    """The version 2 database above under ``table``, its times moved to now (the same distance
    from it as when written); how far they moved (µs)."""
    now = _raw(url, ("SELECT (extract(epoch from clock_timestamp()) * 1000000)::bigint", None))[0][0]
    shift = int(now) - _V2_NOW
    statements: list[tuple[str, Any]] = [(s.format(t=table), None) for s in _V2_CREATE]
    statements += [
        (
            f"INSERT INTO {table} (name, id, due, seq, attempt, claimed, ttl, serializer, payload)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (name, id, due + shift, seq, attempt, claimed, ttl, codec, payload.encode()),
        )
        for name, id, due, seq, attempt, claimed, ttl, codec, payload in _V2_ROWS
    ]
    statements += [(f"INSERT INTO {table}_counts VALUES (%s, 3, %s, %s)", counts) for counts in _V2_COUNTS]
    statements.append((f"SELECT setval('{table}_seq', %s)", (_V2_LAST,)))
    _raw(url, *statements)
    return shift


@pytest.mark.parametrize("how", ["open", "migrate"])
async def test_a_version_2_database_reads_back_whole_with_distinct_revisions(
    url: str, table: str, how: str
) -> None:
    """Version 3 adds the revisions: a database written by the version 2 store is migrated on
    open (or by ``rehydrate migrate``, which calls ``migrate`` on an unopened store) without
    rewriting a row, every element reads back as it was written, each with a revision of its
    own, and every verb works on it, the conditional writes with those revisions included."""
    shift = await anyio.to_thread.run_sync(_write_v2, url, table)
    try:
        refusing = PostgresStore.from_url(f"{url}?create=0&table={table}")
        with pytest.raises(StoreUnavailableError, match=r"version 2.*version 4: run `rehydrate migrate"):
            await refusing.open()
        assert "a schema of version 2" in (await refusing.check_schema() or "")
        where = await anyio.to_thread.run_sync(
            _raw, url, (f"SELECT id, ctid::text FROM {table} ORDER BY id", None)
        )
        if how == "migrate":
            assert await PostgresStore.from_url(url, table=table).migrate() == 4
        async with PostgresStore.from_url(url, table=table, create=how == "open") as s:
            assert await s.schema_version() == 4
            # Not one row rewritten: each is where it was, its rev unset (its seq is its revision).
            assert await sql(s, f"SELECT id, ctid::text FROM {table} ORDER BY id") == where
            assert await sql(s, f"SELECT count(*) FROM {table} WHERE rev IS NOT NULL") == [(0,)]
            revisions: dict[str, int] = {}
            for name, id, due, _seq, attempt, claimed, ttl, _, payload in _V2_ROWS:
                read = await s.read(name, id)
                assert read is not None
                element, info = read
                assert element == json.loads(payload)
                assert (info.due, info.ttl, info.attempt, info.claimed) == (
                    (due + shift) / 1e6,
                    ttl,
                    attempt_of(attempt),
                    claimed,
                )
                assert info == await s.info(name, id)
                revisions[id] = info.revision
            assert len(set(revisions.values())) == len(_V2_ROWS)
            for name, size, held in _V2_COUNTS:
                summary = await s.summary(name)
                assert (summary.size, summary.claimed) == (size, held)

            # New revisions are never old ones: the sequence goes on from where version 2 left it.
            await s.push(N, {"n": "new"}, ttl=0, id="new")
            assert await _revision(s, "new") not in revisions.values()
            # The conditional writes take the revisions read, and refuse stale ones.
            assert await s.pull_if(N, "plain", revisions["updated"]) is False
            assert await s.update_if(N, "updated", revisions["updated"] + 1_000, "x") is None
            changed = await s.update_if(N, "updated", revisions["updated"], {"n": "updated", "v": 3})
            assert changed is not None
            assert changed not in revisions.values()
            assert await s.read(N, "updated") == (
                {"n": "updated", "v": 3},
                await s.info(N, "updated"),
            )
            # A claim of version 2 ends by its element's revision (its claim number).
            assert revisions["claimed"] == 8388609 >> 20
            (done,) = await s.replace_if(N, [("claimed", revisions["claimed"], {"n": "next"}, 60)])
            assert done is not None
            assert done not in revisions.values()
            assert await s.pull_if(
                "other", "0661a26706b998601961645e7d0cc68b", revisions["0661a26706b998601961645e7d0cc68b"]
            )
            # A renewal of a lease taken before the migration keeps the element's revision.
            assert await s.extend(N, "extended", lease=5, token=10485761) is not None
            assert await _revision(s, "extended") == revisions["extended"]
            assert (await s.summary(N)).claimed == 1
            assert (await s.summary("other")).size == 1
    finally:
        await _drop(url, table)


async def _fillfactor(store: PostgresStore, table: str) -> list[Any]:
    return await sql(store, "SELECT reloptions FROM pg_class WHERE relname = %s", table)


@pytest.mark.parametrize("how", ["open", "migrate"])
async def test_a_version_3_table_is_filled_whole_from_then_on(url: str, table: str, how: str) -> None:
    """Version 4 fills pages whole (``fillfactor = 100``, was 85): a table written by version 3
    (its rows are what version 4 writes; only the table's option differs) is migrated on open or
    by ``rehydrate migrate`` without moving a row, reads back as it was, and a claim taken before
    the migration is still acked by its token."""
    async with PostgresStore.from_url(url, table=table) as s:
        await s.push_many(N, [({"n": i}, 0 if i < 2 else 3600, f"e{i}") for i in range(10)])
        (held,) = await s.claim(N, lease=600, limit=1)
        await s.update(N, "e5", {"n": "five"})
        await s._run(lambda conn: conn.execute(f"ALTER TABLE {table} SET (fillfactor = 85)"))
        await sql(s, f"UPDATE {table}_meta SET value = 3 WHERE key = 'schema' RETURNING 1")
        before = {id: await s.read(N, id) for id in (f"e{i}" for i in range(10))}
        where = await sql(s, f"SELECT id, ctid::text FROM {table} ORDER BY id")
    try:
        refusing = PostgresStore.from_url(f"{url}?create=0&table={table}")
        with pytest.raises(StoreUnavailableError, match=r"version 3.*version 4: run `rehydrate migrate"):
            await refusing.open()
        if how == "migrate":
            assert await PostgresStore.from_url(url, table=table).migrate() == 4
        async with PostgresStore.from_url(url, table=table, create=how == "open") as s:
            assert await s.schema_version() == 4
            ((options,),) = await _fillfactor(s, table)
            assert [o for o in options if o.startswith("fillfactor=")] == ["fillfactor=100"]
            assert await sql(s, f"SELECT id, ctid::text FROM {table} ORDER BY id") == where
            for id, read in before.items():
                assert await s.read(N, id) == read, id
            assert await s.ack(N, [(held.id, held.token)]) == [True]
            assert await s.size(N) == 9
    finally:
        await _drop(url, table)


class _Writer:
    """A transaction of its own on a connection of its own, left open: what another process's
    write looks like to this store while it has not committed (its row lock held)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url)

    def run(self, statement: str, params: Any) -> None:
        self.conn.execute(statement, params)

    def end(self, commit: bool) -> None:
        if commit:
            self.conn.commit()
        else:
            self.conn.rollback()
        self.conn.close()


async def _waits_for_a_lock(store: PostgresStore, table: str) -> None:
    """Until a statement on ``table`` waits for a row lock (at most 10 s)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE %s AND pid <> pg_backend_pid()"
    )
    with anyio.fail_after(10):
        for _ in iter(int, 1):  # (another server process's state: polled, nothing to wait on)
            if (await sql(store, query, f"%{table}%"))[0][0]:
                return
            await anyio.sleep(0.01)


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "rolled-back"])
@pytest.mark.parametrize("verb", ["replace_if", "update_if", "pull_if"])
async def test_a_conditional_write_compares_with_what_a_concurrent_write_left(
    store: PostgresStore, url: str, table: str, verb: str, commit: bool
) -> None:
    """The comparison and the write are one step: a conditional write that meets a row another
    transaction is changing waits for it, then compares with what that transaction left, not with
    what it read before (the fencing of a claim's end depends on it: a write that changed the
    revision in between makes it fail, one rolled back does not)."""
    await store.push(N, "old", ttl=0, id="a")
    (claim,) = await store.claim(N, lease=30)
    assert claim.revision == await _revision(store, "a")
    other = await anyio.to_thread.run_sync(_Writer, url)
    try:
        # Another process's update of the element, as the store's own statement makes it.
        params = {"name": N, "id": "a", "rev": claim.revision, "payload": b'"theirs"', "codec": "json"}
        await anyio.to_thread.run_sync(other.run, store._sql.update_if, params)
        async with anyio.create_task_group() as tg:
            outcome: list[Any] = []

            async def write() -> None:
                if verb == "replace_if":
                    outcome.append((await store.replace_if(N, [("a", claim.revision, "next", 0)]))[0])
                elif verb == "update_if":
                    outcome.append(await store.update_if(N, "a", claim.revision, "ours"))
                else:
                    outcome.append(await store.pull_if(N, "a", claim.revision))

            tg.start_soon(write)
            await _waits_for_a_lock(store, table)
            assert outcome == []
            await anyio.to_thread.run_sync(other.end, commit)
    except BaseException:
        await anyio.to_thread.run_sync(other.end, False)
        raise
    (done,) = outcome
    read = await store.read(N, "a")
    if commit:
        assert done in (None, False)
        assert read is not None
        assert read[0] == "theirs"
        assert read[1].claimed
    elif verb == "pull_if":
        assert done is True
        assert read is None
    else:
        assert isinstance(done, int)
        assert done != claim.revision
        assert read is not None
        assert read[0] == ("next" if verb == "replace_if" else "ours")
        assert read[1].revision == done
        assert read[1].claimed is (verb == "update_if")
    assert (await store.summary(N)).claimed == (1 if commit or verb == "update_if" else 0)


async def test_a_batch_of_conditional_replaces_is_one_statement(store: PostgresStore) -> None:
    """One round trip for any number of items; each compared on its own (a stale one is left
    alone, the others filed), in the order given among equal due times."""
    ids = [f"e{i}" for i in range(2_000)]
    await store.push_many(N, [(i, 0, id) for i, id in enumerate(ids)])
    revisions = [await _revision(store, id) for id in ids]
    await store.update(N, "e7", "changed")  # e7's revision is stale now
    calls: list[str] = []
    run = store._run

    async def counting(fn: Any, **kw: Any) -> Any:
        calls.append("call")
        return await run(fn, **kw)

    store._run = counting  # type: ignore[method-assign]
    try:
        done = await store.replace_if(
            N, [(id, rev, f"new {id}", 0) for id, rev in zip(ids, revisions, strict=True)]
        )
    finally:
        del store._run
    assert len(calls) == 1
    assert done[7] is None
    assert all(isinstance(rev, int) for i, rev in enumerate(done) if i != 7)
    assert len(set(done) - {None}) == len(ids) - 1
    assert not set(done) & set(revisions)
    assert await store.look(N, "e7") == "changed"
    ordered = await store.ids(N)
    assert [id for id in ordered if id != "e7"] == [id for id in ids if id != "e7"]


async def test_a_revision_beyond_a_bigint_matches_nothing(store: PostgresStore) -> None:
    await store.push(N, "x", ttl=0, id="a")
    huge = 1 << 64
    assert await store.update_if(N, "a", huge, "y") is None
    assert await store.pull_if(N, "a", huge) is False
    assert await store.replace_if(N, [("a", huge, "y", 0)]) == [None]
    assert await store.look(N, "a") == "x"


async def test_two_tables_in_one_database_are_separate(url: str, store: PostgresStore) -> None:
    other = f"rhtest_{uuid.uuid4().hex[:12]}"
    async with PostgresStore.from_url(url, table=other, schema="rh_other") as s2:
        try:
            await store.push(N, "a", ttl=0, id="x")
            await s2.push(N, "b", ttl=0, id="x")
            assert await store.look(N, "x") == "a"
            assert await s2.look(N, "x") == "b"
            assert s2.table == f"rh_other.{other}"
        finally:
            await drop_tables(s2)


# -- time ------------------------------------------------------------------------------------------


async def test_due_times_are_the_servers_not_this_process(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose clock is a day off still files and finds elements by the server's clock."""
    (server_now,) = (await sql(store, "SELECT extract(epoch from clock_timestamp())::float8"))[0]
    assert abs(store.clock() - server_now) < 1.0
    monkeypatch.setattr(time, "time", lambda: server_now + 86_400)
    await store.push(N, "now", ttl=0, id="now")
    await store.push(N, "later", ttl=60, id="later")
    assert await store.xpoll(N) == ["now"]
    info = await store.info(N, "later")
    assert info is not None
    assert abs(info.due - (server_now + 60)) < 5


# -- elements --------------------------------------------------------------------------------------


async def test_a_one_megabyte_element(store: PostgresStore) -> None:
    big = "x" * (1 << 20)
    await store.push(N, big, ttl=0, id="big")
    (claim,) = await store.claim(N, lease=30)
    assert claim.element == big
    assert await store.ack(N, [("big", claim.token)]) == [True]


async def test_many_names(store: PostgresStore) -> None:
    names = [f"tenant-{i:04}" for i in range(300)]
    for name in names:
        await store.push_many(name, [(i, 0, None) for i in range(3)])
    assert await store.names() == names
    assert [await store.size(name) for name in names[:3]] == [3, 3, 3]
    await store.poll(names[0])
    assert (await store.names())[0] == names[1]


async def test_names_and_ids_with_unusual_characters(store: PostgresStore) -> None:
    for name in ["ünï", "with space", "a'b\"c", "%s", "💤"]:
        await store.push(name, name, ttl=0, id=name)
        assert await store.look(name, name) == name
    with pytest.raises(InvalidArgumentError, match="NUL"):
        await store.push("a\x00b", 1, ttl=0)
    with pytest.raises(InvalidArgumentError):
        await store.push(N, 1, ttl=0, id="\ud800")
    with pytest.raises(InvalidArgumentError, match="at most"):
        await store.push(N, 1, ttl=2e9)


def _scanned(plan: dict[str, Any], table: str) -> int:
    """The most rows any scan of ``table`` in an ``EXPLAIN (ANALYZE, FORMAT JSON)`` plan produced."""
    most = 0
    if plan.get("Relation Name") == table:
        most = int(plan.get("Actual Rows", 0)) * int(plan.get("Actual Loops", 1))
    for child in plan.get("Plans", []):
        most = max(most, _scanned(child, table))
    return most


async def test_claim_and_ack_read_only_the_rows_they_take(store: PostgresStore) -> None:
    """On a table without statistics yet (just filled), and after the same statement has run often
    enough for a generic plan, a claim of 100 must not read every due row (a bitmap scan and a
    sort), nor an ack scan the dehydrator to find its rows."""
    await store.push_many(N, [(i, 0, None) for i in range(20_000)])
    table = store._table

    async def explain(query: str, params: dict[str, Any]) -> int:
        def body(conn: Any) -> int:
            for _ in range(6):  # past the point where a generic plan may be chosen
                conn.execute(query, params, prepare=True).fetchall()
            ((plan,),) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchall()
            return _scanned(plan[0]["Plan"], table)

        return await store._run(body)

    claim = store._params(name=N, lease=60_000_000, limit=100, codec="json", ahead=0)
    assert await explain(store._sql.claim, claim) <= 1_000
    early = store._params(name=N, lease=60_000_000, limit=100, codec="json", ahead=50_000)
    assert await explain(store._sql.claim, early) <= 1_000
    claims = await store.claim(N, lease=60, limit=100)
    ack = store._params(name=N, ids=[c.id for c in claims], tokens=[c.token for c in claims])
    assert await explain(store._sql.ack, ack) <= 1_000


async def test_a_claim_loop_asks_no_ttn_after_a_claim_that_took_nothing(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that takes nothing brings the TTN with it, in its own statement (the rows it did not
    take, and its leases' end): the claim loop's ``ttn_after_claim`` makes no round trip; once
    used, the next one asks the server. A claim that took elements brings none: its statement
    reads in a snapshot older than the rows it locks, so a wake that committed in between, having
    compared itself with a row this claim took, notified nobody and must be read afresh."""
    trips = 0
    run = store._run

    async def counted(fn: Any) -> Any:
        nonlocal trips
        trips += 1
        return await run(fn)

    monkeypatch.setattr(store, "_run", counted)
    await store.push_many(N, [("a", 0, "a"), ("b", 30, "b")])
    assert [c.id for c in await store.claim(N, lease=60, limit=5)] == ["a"]
    before = trips
    ttn = await store.ttn_after_claim(N)
    assert ttn is not None
    assert 29 < ttn <= 30
    assert trips == before + 1  # took a: ttn's statement
    # Nothing taken: the claim's own reading, once; then the server again.
    assert await store.claim(N, lease=60, limit=5) == []
    before = trips
    assert await store.ttn_after_claim(N) == pytest.approx(ttn, abs=0.5)
    assert trips == before
    assert await store.ttn_after_claim(N) == pytest.approx(ttn, abs=0.5)
    assert trips == before + 1
    # The claim's own lease, when it ends first.
    await store.pull(N, "b")
    assert await store.claim(N, lease=60, limit=5) == []  # a is claimed until its lease ends
    before = trips
    assert 59 < (await store.ttn_after_claim(N) or 0) <= 60
    assert trips == before
    await store.push_many(N, [("c", 0, "c"), ("d", 0, "d")])
    assert [c.id for c in await store.claim(N, lease=5, limit=1)] == ["c"]
    before = trips
    assert await store.ttn_after_claim(N) == 0.0  # d is due: ttn's statement says so
    assert trips == before + 1
    assert [c.id for c in await store.claim(N, lease=5, limit=5)] == ["d"]
    assert await store.claim(N, lease=5, limit=5) == []
    before = trips
    assert 4 < (await store.ttn_after_claim(N) or 0) <= 5  # c and d's leases end first
    assert trips == before


async def test_a_push_many_of_ten_thousand_is_one_statement(store: PostgresStore) -> None:
    ids = await store.push_many(N, [(i, i % 7, None) for i in range(10_000)])
    assert len(set(ids)) == 10_000
    assert all(len(id) == 32 and int(id, 16) >= 0 for id in ids)
    assert await store.size(N) == 10_000
    with pytest.raises(DuplicateIdError) as caught:
        await store.push_many(N, [("new", 0, "fresh"), ("dup", 0, ids[5000])])
    assert caught.value.id == ids[5000]
    assert await store.size(N) == 10_000
    assert await store.look(N, "fresh") is None


async def test_push_many_checks_every_ttl_though_each_distinct_one_once(store: PostgresStore) -> None:
    """push_many remembers the TTLs it has checked: a bad one after good ones of equal value
    (True after 1) is still refused, with nothing written, and 1, 1.0 and a timedelta all work."""
    await freeze(store)
    bads: tuple[Any, ...] = (True, float("nan"), -1, "1")
    for bad in bads:
        with pytest.raises((InvalidArgumentError, InvalidTypeError)):
            await store.push_many(N, [("a", 1, "a"), ("b", 1.0, "b"), ("c", bad, "c")])
        assert await store.size(N) == 0
    ttls: list[Any] = [1, 1.0, 2, 1, timedelta(seconds=2)]
    ids = await store.push_many(N, [(i, ttl, None) for i, ttl in enumerate(ttls)])
    assert len(set(ids)) == 5
    infos = [await store.info(N, id) for id in ids]
    assert [info.ttl for info in infos if info is not None] == [1.0, 1.0, 2.0, 1.0, 2.0]
    assert await store.ids(N) == [ids[0], ids[1], ids[3], ids[2], ids[4]]


async def test_batch_ttls_count_from_the_call(url: str, table: str) -> None:
    async with PostgresStore.from_url(url, table=table, serializer=SlowJSON()) as s:
        try:
            await batch_ttls_count_from_the_call(s)
        finally:
            await drop_tables(s)


async def test_the_clock_is_measured_again_every_so_often(store: PostgresStore) -> None:
    await clock_is_measured_again(store)


async def test_a_drifted_clock_estimate_never_makes_a_batch_due_early(store: PostgresStore) -> None:
    await drifted_estimate_never_files_early(store)


async def test_a_push_retried_after_a_lost_reply_is_not_a_duplicate(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt commits, its reply is lost: the retry must not raise DuplicateIdError."""
    import psycopg

    real = store._in_thread
    lost = 0

    def lose_reply(pool: Any, fn: Any) -> Any:
        nonlocal lost
        result = real(pool, fn)
        if lost < 1:
            lost += 1
            raise psycopg.OperationalError("reply lost")
        return result

    monkeypatch.setattr(store, "_in_thread", lose_reply)
    assert await store.push(N, "x", ttl=5, id="x") == "x"
    lost = 0
    assert len(await store.push_many(N, [("p", 5, "p"), ("q", 5, None)])) == 2
    assert await store.size(N) == 3
    lost = 1
    with pytest.raises(DuplicateIdError):  # another payload under that id is a real duplicate
        await store.push(N, "not x", ttl=5, id="x")


async def test_elements_of_another_serializer_are_refused_not_removed(url: str, store: PostgresStore) -> None:
    await store.push(N, {"a": 1}, ttl=0, id="j")
    async with PostgresStore.from_url(url, table=store._table, serializer="pickle") as other:
        for call in (other.poll(N), other.pull(N, "j"), other.claim(N, lease=5), other.look(N, "j")):
            with pytest.raises(RehydrateError, match="json"):
                await call
    assert await store.poll(N) == [{"a": 1}]


async def test_summary_counts_follow_every_verb(store: PostgresStore) -> None:
    """size and claimed come from counters: they must agree with the rows after every kind of write."""
    await freeze(store)
    await store.push_many(N, [(i, 0, f"e{i}") for i in range(10)])
    claims = await store.claim(N, lease=5, limit=6)
    await store.ack(N, [(c.id, c.token) for c in claims[:2]])
    await store.reschedule(N, claims[2].id, ttl=0, token=claims[2].token)
    await store.push(N, "r", ttl=0, id=claims[3].id, replace=True)
    await store.pull(N, claims[4].id)
    advance(store, 5)
    await store.xack(N, claims[5].id)
    await store.poll(N, limit=1)
    (size, claimed), *_ = await sql(
        store, f"SELECT count(*), count(*) FILTER (WHERE claimed) FROM {store._table}"
    )
    summary = await store.summary(N)
    assert (summary.size, summary.claimed) == (size, claimed) == (5, 0)
    assert await store.size(N) == 5


# -- wake-ups --------------------------------------------------------------------------------------


async def test_another_store_objects_push_wakes_a_subscription(url: str, store: PostgresStore) -> None:
    """Two store objects are two sessions: the wake-up can only come through LISTEN/NOTIFY."""
    await store.push(N, "late", ttl=100, id="late")
    async with PostgresStore.from_url(url, table=store._table) as writer, store.subscribe(N) as sub:
        await writer.push(N, "later", ttl=200, id="later")
        await sub.wait(0)
        await writer.push(N, "soon", ttl=1, id="soon")
        with anyio.fail_after(5):
            assert await sub.wait(None) is True
        await writer.reschedule(N, "later", ttl=0)
        with anyio.fail_after(5):
            assert await sub.wait(None) is True


async def test_a_later_push_does_not_wake(url: str, store: PostgresStore) -> None:
    await store.push(N, "first", ttl=10, id="first")
    async with PostgresStore.from_url(url, table=store._table) as writer, store.subscribe(N) as sub:
        await writer.push(N, "later", ttl=100, id="later")
        assert await sub.wait(0.3) is False


async def test_a_push_holds_the_head_it_compared_against(url: str, store: PostgresStore) -> None:
    """A push later than the earliest element does not notify; so until it commits, that earliest
    element must stay put. Otherwise a subscriber could read "earliest gone, new one not there yet"
    and sleep past the new element with no notification coming."""
    import psycopg

    await store.push(N, "x", ttl=10, id="x")
    with psycopg.connect(url) as conn:  # not autocommit: the push's transaction stays open
        params = store._params(
            name=N,
            ids=["w"],
            payloads=[b'"w"'],
            ttls=[20_000_000],
            codec="json",
            channel=store._channel,
            note=N,
            start=None,
        )
        row = conn.execute(store._sql.push, params).fetchone()
        assert row is not None
        assert row[1] is False  # later than x: no notification
        pulled = anyio.Event()

        async def pull() -> None:
            assert await store.pull(N, "x") == "x"
            pulled.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pull)
            await anyio.sleep(0.5)
            assert not pulled.is_set()  # waits for the push to commit
            await anyio.to_thread.run_sync(conn.commit)
            with anyio.fail_after(5):
                await pulled.wait()
    assert await store.ids(N) == ["w"]


async def test_subscriptions_wake_again_after_a_server_restart(own_server: PostgresServer) -> None:
    table = f"rhtest_{uuid.uuid4().hex[:12]}"
    async with PostgresStore.from_url(own_server.url, table=table, retry_backoff=0.1) as s:
        async with s.subscribe(N) as sub:
            await anyio.to_thread.run_sync(own_server.restart)
            # The listener reconnects and wakes everyone once (notifications may have been missed).
            with anyio.fail_after(20):
                assert await sub.wait(None) is True
            async with PostgresStore.from_url(own_server.url, table=table) as writer:
                await writer.push(N, "x", ttl=0, id="x")
                with anyio.fail_after(10):
                    assert await sub.wait(None) is True
        await drop_tables(s)


async def test_aclose_stops_the_listening_thread(url: str, table: str) -> None:
    async with PostgresStore.from_url(url, table=table) as s:
        async with s.subscribe(N):
            pass
        listener = s._listener
        assert listener is not None
        await drop_tables(s)
    assert listener._thread is not None
    assert not listener._thread.is_alive()


# -- failures --------------------------------------------------------------------------------------


async def test_calls_ride_out_a_server_crash_and_restart(own_server: PostgresServer) -> None:
    """``pg_ctl stop -m immediate`` (no checkpoint) and a start 1 s later: calls made meanwhile wait,
    retry and succeed; everything acknowledged before the crash is there after it."""
    table = f"rhtest_{uuid.uuid4().hex[:12]}"
    async with PostgresStore.from_url(own_server.url, table=table, retries=10, retry_backoff=0.1) as s:
        await s.push_many(N, [(i, 0, f"before-{i}") for i in range(100)])
        own_server.stop("immediate")
        restarter = threading.Timer(1.0, own_server.start)
        restarter.start()
        try:
            await s.push(N, "during", ttl=0, id="during")
        finally:
            restarter.join()
        assert await s.size(N) == 101
        assert len(await s.poll(N)) == 101
        await drop_tables(s)


async def test_a_server_that_stays_down_is_unavailable(own_server: PostgresServer) -> None:
    table = f"rhtest_{uuid.uuid4().hex[:12]}"
    async with PostgresStore.from_url(
        own_server.url, table=table, retries=2, retry_backoff=0.05, timeout=1
    ) as s:
        own_server.stop("immediate")
        try:
            with pytest.raises(StoreUnavailableError, match="unavailable after 3 attempts"):
                await s.push(N, "x", ttl=0)
        finally:
            own_server.start()
        await s.push(N, "x", ttl=0, id="x")  # and it recovers on its own
        await drop_tables(s)


# -- real processes --------------------------------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(coro: Any) -> Any:
    return anyio.run(lambda: coro)


async def call(url: str, table: str, method: str, *args: Any, **kwargs: Any) -> Any:
    async with PostgresStore.from_url(url, table=table) as s:
        return await getattr(s, method)(*args, **kwargs)


async def _drop(url: str, table: str) -> None:
    async with PostgresStore.from_url(url, table=table) as s:
        await drop_tables(s)


@pytest.fixture
def process_table(pytestconfig: pytest.Config) -> Iterator[tuple[str, str]]:
    url = shared_server_url(pytestconfig)
    table = f"rhtest_{uuid.uuid4().hex[:12]}"
    yield url, table

    async def drop() -> None:
        async with PostgresStore.from_url(url, table=table) as s:
            await drop_tables(s)

    anyio.run(drop)


def test_worker_killed_mid_handler_loses_nothing(
    process_table: tuple[str, str], tmp_path: Path, backend: str
) -> None:
    url, table = process_table
    options = {"table": table}
    ids = [f"job-{i}" for i in range(20)]
    run(call(url, table, "push_many", "jobs", [({"n": i}, 0, id) for i, id in enumerate(ids)]))
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = start_worker(url, options, "hang", first_log, backend)
    try:
        wait_for(lambda: len(lines(first_log)) == 5, 30, "5 handlers started", first, first_log)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    started = {id for id, _, _ in lines(first_log)}
    second = start_worker(url, options, "ok", second_log, backend)
    try:
        wait_for(
            lambda: {i for i, _, _ in lines(second_log)} == set(ids), 30, "every element", second, second_log
        )
        wait_for(lambda: run(call(url, table, "size", "jobs")) == 0, 10, "the acks", second, second_log)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(10)
    handled = lines(second_log)
    assert sorted(id for id, _, _ in handled) == sorted(ids)
    attempts = {id: attempt for id, attempt, _ in handled}
    assert {id for id, attempt in attempts.items() if attempt == 2} == started
    assert second.returncode == 0


def test_two_workers_share_ten_thousand_elements_once(
    process_table: tuple[str, str], tmp_path: Path, backend: str
) -> None:
    url, table = process_table
    options = {"table": table}
    ids = [f"e{i}" for i in range(10_000)]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    workers = [start_worker(url, options, "ok", log, backend, concurrency=100) for log in logs]
    try:
        for worker, log in zip(workers, logs, strict=True):
            wait_for(lambda log=log: log.exists() and "ready" in log.read_text(), 30, "ready", worker, log)

        async def fill() -> None:
            async with PostgresStore.from_url(url, table=table) as s:
                for start in range(0, len(ids), 1000):
                    await s.push_many("jobs", [(None, 0, id) for id in ids[start : start + 1000]])

        anyio.run(fill)
        wait_for(lambda: sum(len(lines(log)) for log in logs) >= len(ids), 120, "10,000", workers[0], logs[0])
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(10)
    handled = [id for log in logs for id, _, _ in lines(log)]
    assert sorted(handled) == sorted(ids)  # every element, none twice
    assert all(lines(log) for log in logs)  # both took a share
    assert run(call(url, table, "size", "jobs")) == 0


def test_a_server_crash_mid_run_loses_nothing_acknowledged(
    own_server: PostgresServer, tmp_path: Path
) -> None:
    """A worker runs while elements are pushed; the server is stopped with ``-m immediate`` (a
    crash) and started again mid-run. Every push that returned is delivered (at least once: acks
    lost in the crash deliver again), and the dehydrator ends empty."""
    url, table = own_server.url, f"rhtest_{uuid.uuid4().hex[:12]}"
    options = {"table": table, "retries": 20, "retry_backoff": 0.1}
    log = tmp_path / "worker.log"
    worker = start_worker(url, options, "ok", log, "asyncio", concurrency=20)
    pushed: list[str] = []

    async def pusher(rounds: int, offset: int) -> None:
        async with PostgresStore.from_url(url, **options) as s:
            for r in range(rounds):
                batch = [f"p{offset + r}-{i}" for i in range(20)]
                await s.push_many("jobs", [(None, 0, id) for id in batch])
                pushed.extend(batch)  # acknowledged: it must not be lost
                await anyio.sleep(0.01)

    try:
        wait_for(lambda: log.exists() and "ready" in log.read_text(), 30, "ready", worker, log)
        anyio.run(pusher, 20, 0)
        own_server.stop("immediate")
        time.sleep(0.5)
        own_server.start()
        anyio.run(pusher, 20, 1000)
        wait_for(
            lambda: {i for i, _, _ in lines(log)} >= set(pushed), 60, "every pushed element", worker, log
        )
        wait_for(lambda: run(call(url, table, "size", "jobs")) == 0, 30, "the acks", worker, log)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(10)
        run(_drop(url, table))
    assert len(pushed) == 800
    assert worker.returncode == 0


def test_the_extra_is_named_in_the_error_without_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_psycopg(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("psycopg"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(UnsupportedStoreError, match=r"rehydrate\[postgres\]"):
        anyio.run(open_store("postgresql://localhost/app").open)


# -- rehydrate migrate -----------------------------------------------------------------------------


def test_migrate_command_creates_and_checks(
    process_table: tuple[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from rehydrate.cli._main import run as cli

    url, table = process_table
    target = f"{url}?table={table}"
    assert cli(["migrate", "--store", target, "--check"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no rehydrate tables" in err
    assert "rehydrate migrate" in err
    unopened = PostgresStore.from_url(url, table=table)
    assert anyio.run(unopened.schema_version) is None  # --check created nothing
    assert cli(["migrate", "--store", target]) == 0
    assert f"schema version {SCHEMA_VERSION}" in capsys.readouterr().out
    assert cli(["migrate", "--store", target]) == 0  # again: nothing to do
    assert cli(["migrate", "--store", target, "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert cli(["migrate", "--store", "memory://"]) == 0  # (SQLite has a schema to migrate too now)
    assert "nothing to migrate" in capsys.readouterr().out


def test_migrate_command_reports_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    from rehydrate.cli._main import run as cli

    assert cli(["migrate", "--store", "postgresql://postgres@127.0.0.1:1/x?timeout=1", "--check"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rehydrate: error: PostgreSQL at")
    assert err.count("\n") == 1


# -- element size ----------------------------------------------------------------------------------


async def test_the_element_limit_is_what_can_be_read_back(store: PostgresStore) -> None:
    """500 MiB: a field holds 1 GB, but the store reads payloads as hex (twice the bytes, in one
    allocation of at most 1 GB on the server); an element of 600 MB was written, and then every
    read of it, and every claim of its dehydrator, failed."""
    assert store.max_element_bytes == 500 * 1024 * 1024


async def test_a_batch_beyond_one_statement_is_refused_whole(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """push_many sends its payloads in one statement, which the server takes up to 1 GB: a batch
    beyond it is refused before anything is sent (the limit lowered here: a real one is 1000 MiB)."""
    monkeypatch.setattr(_postgres, "_MAX_BATCH_BYTES", 3000)
    await store.push_many(N, [("x" * 998, 0, f"a{i}") for i in range(3)])  # 3,000 bytes: taken
    with pytest.raises(ElementTooLargeError, match="split the batch"):
        await store.push_many(
            N, [("x" * 998, 0, "b"), ("x" * 998, 0, "c"), ("x" * 998, 0, None), ("", 0, "d")]
        )
    assert await store.ids(N) == ["a0", "a1", "a2"]


async def test_a_conditional_replace_beyond_one_statement_is_refused_whole(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """replace_if sends its payloads in one statement too: the same limit, checked before anything
    is sent (lowered here as above)."""
    monkeypatch.setattr(_postgres, "_MAX_BATCH_BYTES", 3000)
    await store.push_many(N, [("old", 0, f"a{i}") for i in range(4)])
    revisions = [await _revision(store, f"a{i}") for i in range(4)]
    items = [(f"a{i}", revisions[i], "x" * 998, 0) for i in range(3)]  # 3,000 bytes: taken
    assert None not in await store.replace_if(N, items)
    with pytest.raises(ElementTooLargeError, match=r"replace_if.*split the batch"):
        await store.replace_if(N, [("a3", revisions[3], "x" * 998, 0), *items])
    assert await store.look(N, "a3") == "old"
    assert await _revision(store, "a3") == revisions[3]


# -- connection refused ----------------------------------------------------------------------------


def _wrong(url: str, what: str) -> tuple[str, type[RehydrateError], str]:
    """A URL of the test server that it cannot serve, the error it must raise, and what it says."""
    parts = urlsplit(url)
    where = parts.netloc.rpartition("@")[2]
    if what == "database":
        return (
            f"postgresql://postgres@{where}/no_such_db",
            StoreRefusedError,
            'database "no_such_db" does not exist',
        )
    if what == "role":
        return (
            f"postgresql://no_such_role@{where}/postgres",
            StoreRefusedError,
            'role "no_such_role" does not exist',
        )
    return f"{url}?sslmode=bogus", InvalidArgumentError, 'invalid sslmode value: "bogus"'


WRONG = ["database", "role", "sslmode"]


@pytest.mark.parametrize("what", WRONG)
async def test_what_waiting_cannot_fix_fails_at_once_with_the_servers_reason(url: str, what: str) -> None:
    """A missing database, an unknown role, a bad sslmode: the pool retried them in the
    background until its timeout (5 s) and said only "pool initialization incomplete". Now one
    connection is made first and its failure raised at once: ``StoreRefusedError`` (the server
    refused: waiting will not help) or ``InvalidArgumentError`` (libpq refused the URL)."""
    wrong, error, says = _wrong(url, what)
    for use in ("open", "migrate"):  # the pool's open, and a connection of its own (the CLI's migrate)
        store = PostgresStore.from_url(wrong, timeout=5)
        started = time.monotonic()
        with pytest.raises(error) as raised:
            await (store.open() if use == "open" else store.migrate())
        assert time.monotonic() - started < 1
        assert says in str(raised.value)
        assert "\n" not in str(raised.value)
        assert not getattr(raised.value, "transient", False)  # rehydrate worker --wait gives up at once
        await store.aclose()


async def test_a_server_that_is_not_there_is_unavailable_at_once() -> None:
    """A refused connection is worth waiting for (a server restarting): ``StoreUnavailableError``,
    not the refused kind, and at once rather than after the pool's timeout."""
    store = PostgresStore.from_url("postgresql://postgres@127.0.0.1:1/postgres", timeout=5)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="Connection refused") as raised:
        await store.open()
    assert time.monotonic() - started < 1
    assert not isinstance(raised.value, StoreRefusedError)
    assert raised.value.transient  # rehydrate worker --wait waits for it


@pytest.mark.parametrize("what", WRONG)
def test_the_command_says_why_in_one_line(url: str, what: str) -> None:
    """``rehydrate stats``: one line with the server's reason, status 1, no lines of the pool's
    logger on stderr, and no wait for the pool's timeout."""
    wrong, error, says = _wrong(url, what)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rehydrate", "stats", "--store", wrong],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert time.monotonic() - started < 4  # (the interpreter's start included; it took 5 s and more)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rehydrate: error: ")
    assert says in lines[0]
    assert f"({error.__name__})" in lines[0]
