"""The SQL of the PostgreSQL store, one statement per verb, built once per (schema, table).

Every verb is one statement (a chain of common table expressions), so it is atomic and costs one
round trip in autocommit mode. Conventions:

* ``{now}`` is the server's clock in integer microseconds, read once per statement in the
  ``t`` CTE (``MATERIALIZED``: ``clock_timestamp()`` is volatile, so it is never inlined twice);
  ``%(pin)s`` and ``%(skew)s`` exist for tests only (``NULL`` and ``0`` otherwise).
* ``{counts}`` keeps ``size`` and ``claimed`` per name in a few rows (one per ``shard``, chosen by
  the backend's process id) so ``size`` and ``summary`` read a handful of rows instead of counting
  the dehydrator, and concurrent writers in different sessions rarely touch the same counter row.
* The arrays of batch verbs (``push``, ``ack``) are sent in binary (``%(ids)b``): bytea in text
  format is hex-escaped by the client and parsed back by the server, which cost about a quarter
  of a ``push_many`` of small elements.
* An element's revision (``ElementInfo.revision``) is ``coalesce(rev, seq)``: a write that files
  the element anew draws a fresh ``seq`` and sets ``rev`` to ``NULL`` (so claim, push and the
  refiles cost no more than before), ``update`` draws a fresh ``rev`` (it keeps ``seq``, the
  element's place among equal due times), and ``extend`` freezes the revision it had into ``rev``
  (it files the lease's end under a fresh ``seq``). Every value comes from the one sequence, so a
  revision is never given twice, not even to a new element under a reused id. Rows written before
  version 3 have ``rev`` ``NULL``: their ``seq`` is already a distinct revision, so the migration
  adds the column without rewriting a row.
* A write that may make an element due sooner reads the current head ``FOR SHARE SKIP LOCKED``
  and notifies (``pg_notify``, delivered at commit) when the new due time is sooner. The share
  lock keeps that head from being taken or moved later until this write commits, so a subscriber
  can never see both "old head gone" and "new element not there yet" (which would leave it asleep
  past the new element's due time with no notification); a head locked by a claimer is skipped
  and the next one compared instead, which is what the subscriber will see.
"""

from __future__ import annotations

from typing import Final

__all__ = ["SCHEMA_VERSION", "Statements"]

#: Bumped when the tables change shape; a later release migrates from the recorded version.
#: 2: the ``_workers`` table (worker heartbeats), added by ``create`` to a version 1 schema.
#: 3: the ``rev`` column (revisions, compare-and-set), added without rewriting the table.
#: 4: ``fillfactor = 100`` (was 85): pages filled whole, without rewriting the table.
SCHEMA_VERSION: Final = 4
#: How many counter rows one name may spread over.
SHARDS: Final = 16
#: The attempt bits of a claim stamp (rehydrate._core._fence.ATTEMPTS).
ATTEMPTS: Final = (1 << 20) - 1

_NOW = (
    "(coalesce(%(pin)s::bigint, (extract(epoch from clock_timestamp()) * 1000000)::bigint)"
    " + %(skew)s::bigint)"
)


#: A batch's ttls count from ``%(start)s`` (the caller's reading of this server's clock, in µs,
#: taken when the call began, before its elements were encoded) when it is at most this far behind
#: the server's now; from now otherwise (a drifted reading files late by a round trip, never early).
START_SLACK_US: Final = 250_000

#: ``t.now`` for a statement that files a batch: ``%(start)s`` when it is taken, else the server's now.
_FROM_START = f"""n AS MATERIALIZED (SELECT {_NOW} AS now),
        t AS MATERIALIZED (
            SELECT CASE WHEN %(start)s::bigint <= n.now AND n.now - %(start)s::bigint <= {START_SLACK_US}
                THEN %(start)s::bigint ELSE n.now END AS now
            FROM n
        )"""


def _counter(source: str, size: str, claimed: str) -> str:
    """A CTE adding ``size`` and ``claimed`` (aggregates over ``source``) to this session's counter row."""
    return f"""cnt AS (
        INSERT INTO {{counts}} AS c (name, shard, size, claimed)
        SELECT %(name)s, pg_backend_pid() %% {SHARDS}, {size}, {claimed} FROM {source} HAVING count(*) > 0
        ON CONFLICT (name, shard) DO UPDATE
        SET size = c.size + excluded.size, claimed = c.claimed + excluded.claimed
    )"""


#: An element's revision (see the module's docstring).
_REV = "coalesce(e.rev, e.seq)"

_HEAD = """head AS MATERIALIZED (
        SELECT due FROM {table} WHERE name = %(name)s ORDER BY due, seq LIMIT 1 FOR SHARE SKIP LOCKED
    )"""

_NOTIFY = (
    "CASE WHEN (SELECT due FROM head) IS NULL OR {due} < (SELECT due FROM head)"
    " THEN pg_notify(%(channel)s, %(note)s)::text IS NULL ELSE false END"
)


def _refile_many(*, hand_back: bool) -> str:
    """``reschedule_many``'s statement, or ``hand_back``'s: only claimed rows, the attempt undone."""
    claimed = " AND e.claimed" if hand_back else ""
    attempt = (
        f", attempt = CASE WHEN e.attempt & {ATTEMPTS} > 0 THEN e.attempt - 1 ELSE e.attempt END"
        if hand_back
        else ""
    )
    return f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now),
        found AS MATERIALIZED (
            SELECT f.*, nextval('{{seq_name}}') AS n FROM (
                SELECT a.ttl, a.ord, x.tid, x.claimed
                FROM unnest(%(ids)s::text[], %(tokens)s::bigint[], %(ttls)s::bigint[])
                    WITH ORDINALITY AS a(id, token, ttl, ord)
                CROSS JOIN LATERAL (
                    SELECT e.ctid AS tid, e.claimed FROM {{table}} e
                    WHERE e.name = %(name)s AND e.id = a.id AND e.attempt = a.token{claimed}
                    FOR UPDATE
                ) x
            ) f ORDER BY f.ord
        ),
        {_HEAD},
        upd AS (
            UPDATE {{table}} e
            SET due = t.now + f.ttl, seq = f.n, rev = NULL, ttl = f.ttl / 1e6, claimed = false{attempt}
            FROM found f, t
            WHERE e.ctid = f.tid AND e.name = %(name)s
            RETURNING f.ord, e.due, f.claimed
        ),
        {_counter("upd", "0", "-count(*) FILTER (WHERE claimed)")}
        SELECT ord, {_NOTIFY.format(due="(SELECT min(due) FROM upd)")} FROM upd"""


_TEMPLATES: Final = {
    "create": (
        "SELECT pg_advisory_xact_lock(hashtext(%(lock)s))",
        "CREATE SCHEMA IF NOT EXISTS {schema}",
        """CREATE TABLE IF NOT EXISTS {meta} (
            key text COLLATE "C" PRIMARY KEY,
            value bigint NOT NULL
        )""",
        # One row per element. ``due`` is in server microseconds; ``seq`` is the filing order (ties
        # in due time come out in it) and doubles as the claim number of ``attempt``, the claim
        # stamp (see rehydrate._core._fence); ``ttl`` is the TTL or lease it was last filed with;
        # ``rev``, if not NULL, the revision (else ``seq`` is; see the module's docstring).
        # Pages are filled whole (fillfactor 100): room kept on each page served only a HOT
        # ``update`` (a claim changes ``due``, indexed, so it is never HOT) and cost every
        # pending element a sixth more; an ``update`` finds room freed by claim/ack churn anyway.
        # The autovacuum settings keep up with that churn on a busy table.
        """CREATE TABLE IF NOT EXISTS {table} (
            name text COLLATE "C" NOT NULL,
            id text COLLATE "C" NOT NULL,
            due bigint NOT NULL,
            seq bigint NOT NULL,
            attempt bigint NOT NULL DEFAULT 0,
            claimed boolean NOT NULL DEFAULT false,
            ttl double precision NOT NULL,
            serializer text NOT NULL,
            payload bytea NOT NULL,
            rev bigint,
            PRIMARY KEY (name, id)
        ) WITH (
            fillfactor = 100,
            autovacuum_vacuum_scale_factor = 0.01,
            autovacuum_vacuum_insert_scale_factor = 0.01,
            autovacuum_analyze_scale_factor = 0.02,
            autovacuum_vacuum_cost_delay = 0
        )""",
        "CREATE INDEX IF NOT EXISTS {due_index} ON {table} (name, due, seq)",
        """CREATE TABLE IF NOT EXISTS {counts} (
            name text COLLATE "C" NOT NULL,
            shard integer NOT NULL,
            size bigint NOT NULL,
            claimed bigint NOT NULL,
            PRIMARY KEY (name, shard)
        ) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000)""",
        "CREATE SEQUENCE IF NOT EXISTS {seq} AS bigint",
        # One row per worker that sent a heartbeat (Store.heartbeat); times in server microseconds.
        """CREATE TABLE IF NOT EXISTS {workers} (
            id text COLLATE "C" PRIMARY KEY,
            data text NOT NULL,
            last_seen bigint NOT NULL,
            expires bigint NOT NULL
        )""",
        "INSERT INTO {meta} (key, value) VALUES ('schema', %(version)s) ON CONFLICT (key) DO NOTHING",
    ),
    # Migrations, each from the version before it, run after "create" (in its transaction, under
    # its lock) only on a schema older than the version: the ALTER TABLE takes an exclusive lock,
    # and a `rehydrate migrate` run on an up-to-date schema should not queue behind every claim.
    "migrate_2": ("UPDATE {meta} SET value = 2 WHERE key = 'schema' AND value = 1",),
    "migrate_3": (
        # Without a default: the rows are not rewritten (a NULL ``rev`` reads as ``seq``).
        "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS rev bigint",
        "UPDATE {meta} SET value = 3 WHERE key = 'schema' AND value = 2",
    ),
    # Only pages filled from now on are filled whole: no row is moved.
    "migrate_4": (
        "ALTER TABLE {table} SET (fillfactor = 100)",
        "UPDATE {meta} SET value = 4 WHERE key = 'schema' AND value = 3",
    ),
    "version": "SELECT value FROM {meta} WHERE key = 'schema'",
    "exists": "SELECT to_regclass(%(meta_name)s) IS NOT NULL, to_regclass(%(table_name)s) IS NOT NULL",
    "now": f"SELECT {_NOW}",
    # push and push_many (without replace): a duplicate id fails the whole statement.
    "push": f"""WITH {_FROM_START},
        {_HEAD},
        src AS (
            SELECT * FROM unnest(%(ids)b::text[], %(payloads)b::bytea[], %(ttls)b::bigint[])
            WITH ORDINALITY AS u(id, payload, ttl, ord)
        ),
        ins AS (
            INSERT INTO {{table}} (name, id, due, seq, ttl, serializer, payload)
            SELECT %(name)s, s.id, t.now + s.ttl, nextval('{{seq_name}}'), s.ttl / 1e6, %(codec)s, s.payload
            FROM (SELECT * FROM src ORDER BY ord) s, t
            RETURNING due
        ),
        {_counter("ins", "count(*)", "0")}
        SELECT count(*), {_NOTIFY.format(due="(SELECT min(due) FROM ins)")} FROM ins""",
    # push with replace: the element under id (if any) is overwritten as a new one.
    "push_replace": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now),
        old AS MATERIALIZED (
            SELECT claimed FROM {{table}} WHERE name = %(name)s AND id = %(id)s FOR UPDATE
        ),
        {_HEAD},
        ins AS (
            INSERT INTO {{table}} AS e (name, id, due, seq, ttl, serializer, payload)
            SELECT %(name)s, %(id)s, t.now + %(ttl)s, nextval('{{seq_name}}'), %(ttl)s / 1e6, %(codec)s,
                %(payload)s
            FROM t, (SELECT count(*) AS n FROM old) o WHERE o.n >= 0  -- old first: it reads the row
            ON CONFLICT (name, id) DO UPDATE SET due = excluded.due, seq = excluded.seq, rev = NULL,
                ttl = excluded.ttl, attempt = 0, claimed = false, serializer = excluded.serializer,
                payload = excluded.payload
            RETURNING due, (e.xmax = 0) AS inserted
        ),
        {_counter("ins", "count(*) FILTER (WHERE inserted)", "-coalesce((SELECT claimed::int FROM old), 0)")}
        SELECT count(*), {_NOTIFY.format(due="(SELECT min(due) FROM ins)")} FROM ins""",
    "existing": "SELECT id FROM {table} WHERE name = %(name)s AND id = ANY(%(ids)s::text[]) LIMIT 1",
    "same": (
        "SELECT count(*) FROM {table} e JOIN unnest(%(ids)s::text[], %(payloads)s::bytea[]) AS u(id, payload)"
        " ON e.id = u.id WHERE e.name = %(name)s AND e.payload = u.payload AND e.attempt = 0"
    ),
    # Removals: rows written by another serializer are not removed (``bad``): the call raises.
    "pull": f"""WITH picked AS MATERIALIZED (
            SELECT ctid AS tid, id, serializer FROM {{table}} WHERE name = %(name)s AND id = %(id)s FOR UPDATE
        ),
        bad AS MATERIALIZED (SELECT id, serializer FROM picked WHERE serializer <> %(codec)s),
        del AS (
            DELETE FROM {{table}} e USING picked p
            WHERE e.ctid = p.tid AND e.name = %(name)s AND NOT EXISTS (SELECT 1 FROM bad)
            RETURNING e.id, e.payload, e.due, e.seq, e.claimed
        ),
        {_counter("del", "-count(*)", "-count(*) FILTER (WHERE claimed)")}
        SELECT id, payload, due, seq, NULL FROM del UNION ALL SELECT id, NULL, 0, 0, serializer FROM bad""",
    "poll": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now),
        picked AS MATERIALIZED (
            SELECT ctid AS tid, id, serializer FROM {{table}}
            WHERE name = %(name)s AND due <= (SELECT now FROM t)
            ORDER BY due, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED
        ),
        bad AS MATERIALIZED (SELECT id, serializer FROM picked WHERE serializer <> %(codec)s LIMIT 1),
        del AS (
            DELETE FROM {{table}} e USING picked p
            WHERE e.ctid = p.tid AND e.name = %(name)s AND NOT EXISTS (SELECT 1 FROM bad)
            RETURNING e.id, e.payload, e.due, e.seq, e.claimed
        ),
        {_counter("del", "-count(*)", "-count(*) FILTER (WHERE claimed)")}
        SELECT id, payload, due, seq, NULL FROM del UNION ALL SELECT id, NULL, 0, 0, serializer FROM bad""",
    "xack": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now),
        picked AS MATERIALIZED (
            SELECT ctid AS tid, id, serializer FROM {{table}}
            WHERE name = %(name)s AND id = ANY(%(ids)s::text[])
                AND (%(attempt)s::bigint IS NULL OR attempt & {ATTEMPTS} = %(attempt)s::bigint)
                AND (%(token)s::bigint IS NULL OR attempt = %(token)s::bigint)
                AND (claimed OR due <= (SELECT now FROM t))
            FOR UPDATE
        ),
        bad AS MATERIALIZED (SELECT id, serializer FROM picked WHERE serializer <> %(codec)s LIMIT 1),
        del AS (
            DELETE FROM {{table}} e USING picked p
            WHERE e.ctid = p.tid AND e.name = %(name)s AND NOT EXISTS (SELECT 1 FROM bad)
            RETURNING e.id, e.payload, e.due, e.seq, e.claimed
        ),
        {_counter("del", "-count(*)", "-count(*) FILTER (WHERE claimed)")}
        SELECT id, payload, due, seq, NULL FROM del UNION ALL SELECT id, NULL, 0, 0, serializer FROM bad""",
    "xpoll": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now)
        SELECT id FROM {{table}} WHERE name = %(name)s AND due <= (SELECT now FROM t)
        ORDER BY due, seq LIMIT %(limit)s""",
    "look": "SELECT payload, serializer FROM {table} WHERE name = %(name)s AND id = %(id)s",
    "look_many": """SELECT id, payload, serializer FROM {table}
        WHERE name = %(name)s AND id = ANY(%(ids)s::text[])""",
    "ttn": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now)
        SELECT greatest(0, due - (SELECT now FROM t)) FROM {{table}}
        WHERE name = %(name)s ORDER BY due, seq LIMIT 1""",
    # update: the payload replaced, a fresh revision drawn; due time, seq, attempt and claim kept.
    "update": """WITH old AS MATERIALIZED (
            SELECT payload, serializer FROM {table} WHERE name = %(name)s AND id = %(id)s
                AND (%(token)s::bigint IS NULL OR (attempt = %(token)s::bigint AND claimed))
            FOR UPDATE
        ),
        upd AS (
            UPDATE {table} SET serializer = %(codec)s, rev = nextval('{seq_name}'), payload = %(payload)s
            WHERE name = %(name)s AND id = %(id)s AND (SELECT serializer FROM old) = %(codec)s
            RETURNING 1
        )
        SELECT payload, serializer, (SELECT count(*) FROM upd) FROM old""",
    # One statement per batch: the due rows in due order, locked or skipped (SKIP LOCKED: concurrent
    # claimers take different rows and never wait for each other), filed anew at the lease's end
    # with a fresh filing number that is also the claim number of the stamp. A claim that takes
    # fewer than it asks for also answers the TTN after it (a row with attempt -1, first): the
    # earliest due among the rows it did not take (the statement's snapshot predates its update)
    # and its own leases' end, so that the claim loop's ttn_after_claim needs no round trip. A due
    # time, not a TTN: counted from the statement's start, a TTN would wake the loop late by the
    # statement, its commit and the reply.
    "claim": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now),
        picked AS MATERIALIZED (
            SELECT p.tid, p.id, p.due, p.attempt, p.claimed, p.serializer, nextval('{{seq_name}}') AS n
            FROM (
                SELECT ctid AS tid, id, due, attempt, claimed, serializer FROM {{table}}
                WHERE name = %(name)s AND due <= (SELECT now FROM t) + %(ahead)s
                    AND (NOT claimed OR due <= (SELECT now FROM t))
                ORDER BY due, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED
            ) p
        ),
        bad AS MATERIALIZED (SELECT id, serializer FROM picked WHERE serializer <> %(codec)s LIMIT 1),
        upd AS (
            UPDATE {{table}} e
            SET due = t.now + %(lease)s, seq = p.n, rev = NULL, ttl = %(lease)s / 1e6, claimed = true,
                attempt = p.n * {ATTEMPTS + 1} + least((p.attempt & {ATTEMPTS}) + 1, {ATTEMPTS})
            FROM picked p, t
            WHERE e.ctid = p.tid AND e.name = %(name)s AND NOT EXISTS (SELECT 1 FROM bad)
            RETURNING e.id, e.payload, e.attempt, e.due AS until, p.due, p.claimed, t.now
        ),
        {_counter("upd", "0", "count(*) FILTER (WHERE NOT claimed)")}
        SELECT id, payload, attempt, until, due, now, NULL FROM upd
        UNION ALL SELECT id, NULL, 0, 0, 0, 0, serializer FROM bad
        UNION ALL SELECT NULL, NULL, -1, least(
                (SELECT e.due FROM {{table}} e
                WHERE e.name = %(name)s AND e.ctid <> ALL(ARRAY(SELECT tid FROM picked))
                ORDER BY e.due, e.seq LIMIT 1),
                CASE WHEN EXISTS (SELECT 1 FROM picked) THEN (SELECT now FROM t) + %(lease)s END
            ), 0, 0, NULL
            WHERE (SELECT count(*) FROM picked) < %(limit)s
        ORDER BY 3""",
    # One primary-key lookup per (id, token), whatever the planner knows of the table; the rows
    # found are deleted by their physical address (a TID scan).
    "ack": f"""WITH found AS MATERIALIZED (
            SELECT x.tid FROM unnest(%(ids)b::text[], %(tokens)b::bigint[]) AS a(id, token)
            CROSS JOIN LATERAL (
                SELECT e.ctid AS tid FROM {{table}} e
                WHERE e.name = %(name)s AND e.id = a.id AND e.attempt = a.token AND e.claimed
                FOR UPDATE
            ) x
        ),
        del AS (
            DELETE FROM {{table}} e
            WHERE e.ctid = ANY(ARRAY(SELECT tid FROM found)) AND e.name = %(name)s AND e.claimed
            RETURNING e.id, e.attempt
        ),
        {_counter("del", "-count(*)", "-count(*)")}
        SELECT id, attempt FROM del""",
    # reschedule (release the claim) and extend (keep it): file the element anew at now + ttl;
    # a reschedule gives it a new revision (the fresh seq), an extend keeps the one it had.
    "refile": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now),
        old AS MATERIALIZED (
            SELECT ctid AS tid, id, claimed FROM {{table}}
            WHERE name = %(name)s AND id = %(id)s
                AND (%(attempt)s::bigint IS NULL OR attempt & {ATTEMPTS} = %(attempt)s::bigint)
                AND (%(token)s::bigint IS NULL OR attempt = %(token)s::bigint)
                AND (claimed OR NOT %(extend)s)
            FOR UPDATE
        ),
        {_HEAD},
        upd AS (
            UPDATE {{table}} e
            SET due = t.now + %(ttl)s, seq = nextval('{{seq_name}}'), ttl = %(ttl)s / 1e6,
                claimed = %(extend)s, rev = CASE WHEN %(extend)s THEN {_REV} END
            FROM old o, t
            WHERE e.ctid = o.tid AND e.name = %(name)s
            RETURNING e.due, o.claimed
        ),
        {_counter("upd", "0", "-count(*) FILTER (WHERE claimed AND NOT %(extend)s)")}
        SELECT due, {_NOTIFY.format(due="(SELECT min(due) FROM upd)")} FROM upd""",
    # reschedule_many (delayed retries): each (id, token) still under that token, claimed or not,
    # is filed anew at now + ttl and released, its attempt kept (reschedule's rule per item; the
    # caller gives each id once).
    "reschedule_many": _refile_many(hand_back=False),
    # hand_back (claims given back unrun): each (id, token) still claimed under that token is
    # filed so with that claim's attempt undone: the same claim number, one attempt fewer, so the
    # token no longer matches and a second hand-back does nothing.
    "hand_back": _refile_many(hand_back=True),
    "info": """SELECT due, ttl, attempt, claimed, coalesce(rev, seq) FROM {table}
        WHERE name = %(name)s AND id = %(id)s""",
    # read: look and info in one snapshot (one statement).
    "read": """SELECT payload, serializer, due, ttl, attempt, claimed, coalesce(rev, seq) FROM {table}
        WHERE name = %(name)s AND id = %(id)s""",
    # The conditional writes. Each compares the revision in the WHERE clause of the statement that
    # writes (or of its FOR UPDATE lookup): under READ COMMITTED, a row another transaction changed
    # meanwhile is re-read once its lock is ours and the comparison made again on what it holds
    # now, so no write can land between the comparison and this one (the fencing the scheduling
    # layer builds on: a claim's revision ends that claim only if nobody wrote the element since).
    #
    # replace_if: each (id, revision) found at that revision is filed anew as a new element
    # (attempt 0, unclaimed) at now + ttl, in the order given; each gives its position and new
    # revision (the fresh seq). The caller gives each id once.
    "replace_if": f"""WITH {_FROM_START},
        found AS MATERIALIZED (
            SELECT f.*, nextval('{{seq_name}}') AS n FROM (
                SELECT a.payload, a.ttl, a.ord, x.tid, x.claimed
                FROM unnest(%(ids)b::text[], %(revs)b::bigint[], %(payloads)b::bytea[], %(ttls)b::bigint[])
                    WITH ORDINALITY AS a(id, rev, payload, ttl, ord)
                CROSS JOIN LATERAL (
                    SELECT e.ctid AS tid, e.claimed FROM {{table}} e
                    WHERE e.name = %(name)s AND e.id = a.id AND {_REV} = a.rev
                    FOR UPDATE
                ) x
            ) f ORDER BY f.ord
        ),
        {_HEAD},
        upd AS (
            UPDATE {{table}} e
            SET due = t.now + f.ttl, seq = f.n, rev = NULL, ttl = f.ttl / 1e6, attempt = 0,
                claimed = false, serializer = %(codec)s, payload = f.payload
            FROM found f, t
            WHERE e.ctid = f.tid AND e.name = %(name)s
            RETURNING f.ord, f.n, e.due, f.claimed
        ),
        {_counter("upd", "0", "-count(*) FILTER (WHERE claimed)")}
        SELECT ord, n, {_NOTIFY.format(due="(SELECT min(due) FROM upd)")} FROM upd""",
    # update_if: the payload replaced and a fresh revision drawn, at that revision only.
    "update_if": """UPDATE {table} e SET serializer = %(codec)s, payload = %(payload)s,
            rev = nextval('{seq_name}')
        WHERE e.name = %(name)s AND e.id = %(id)s AND coalesce(e.rev, e.seq) = %(rev)s
        RETURNING e.rev""",
    # pull_if: removed at that revision only, claimed or not, written by any serializer.
    "pull_if": f"""WITH del AS (
            DELETE FROM {{table}} e WHERE e.name = %(name)s AND e.id = %(id)s AND {_REV} = %(rev)s
            RETURNING e.claimed
        ),
        {_counter("del", "-count(*)", "-count(*) FILTER (WHERE claimed)")}
        SELECT count(*) FROM del""",
    # The distinct names by skipping from one to the next in the primary key: O(names * log n).
    "names_query": """WITH RECURSIVE walk(name) AS (
            (SELECT name FROM {table} ORDER BY name LIMIT 1)
            UNION ALL
            SELECT (SELECT e.name FROM {table} e WHERE e.name > w.name ORDER BY e.name LIMIT 1)
            FROM walk w WHERE w.name IS NOT NULL
        )
        SELECT name FROM walk WHERE name IS NOT NULL""",
    "size": "SELECT coalesce(sum(size), 0) FROM {counts} WHERE name = %(name)s",
    "summary": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now)
        SELECT
            (SELECT coalesce(sum(size), 0) FROM {{counts}} WHERE name = %(name)s),
            (SELECT count(*) FROM {{table}} WHERE name = %(name)s AND due <= (SELECT now FROM t)),
            (SELECT coalesce(sum(claimed), 0) FROM {{counts}} WHERE name = %(name)s),
            (SELECT due FROM {{table}} WHERE name = %(name)s ORDER BY due, seq LIMIT 1),
            (SELECT now FROM t)""",
    "ids": "SELECT id FROM {table} WHERE name = %(name)s ORDER BY due, seq LIMIT %(limit)s",
    # Workers: an upsert that also forgets the workers expired longer than %(keep)s (µs) ago.
    "heartbeat": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now),
        gone AS (
            DELETE FROM {{workers}} WHERE expires <= (SELECT now FROM t) - %(keep)s AND id <> %(id)s
        )
        INSERT INTO {{workers}} (id, data, last_seen, expires)
        SELECT %(id)s, %(data)s, t.now, t.now + %(ttl)s FROM t
        ON CONFLICT (id) DO UPDATE
        SET data = excluded.data, last_seen = excluded.last_seen, expires = excluded.expires""",
    "deregister": "DELETE FROM {workers} WHERE id = %(id)s RETURNING 1",
    "workers": f"""WITH t AS MATERIALIZED (SELECT {_NOW} AS now)
        SELECT id, data, last_seen, expires, (SELECT now FROM t) FROM {{workers}}
        WHERE expires > (SELECT now FROM t) - %(keep)s ORDER BY id""",
    "drop": (
        "DROP TABLE IF EXISTS {workers}",
        "DROP TABLE IF EXISTS {table}",
        "DROP TABLE IF EXISTS {counts}",
        "DROP TABLE IF EXISTS {meta}",
        "DROP SEQUENCE IF EXISTS {seq}",
    ),
}


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class Statements:
    """The statements for the tables of one store (``schema``.``table`` and its companions)."""

    def __init__(self, schema: str, table: str) -> None:
        names = {
            "schema": _quote(schema),
            "table": f"{_quote(schema)}.{_quote(table)}",
            "meta": f"{_quote(schema)}.{_quote(table + '_meta')}",
            "counts": f"{_quote(schema)}.{_quote(table + '_counts')}",
            "seq": f"{_quote(schema)}.{_quote(table + '_seq')}",
            "workers": f"{_quote(schema)}.{_quote(table + '_workers')}",
            "due_index": _quote(table + "_due"),
        }
        # nextval() takes the sequence's name as text: quoted identifiers inside a string literal.
        names["seq_name"] = names["seq"].replace("'", "''")
        self.identifiers = names
        self.meta_name = names["meta"]
        self.table_name = names["table"]

        def fill(template: str) -> str:
            return template.format(**names)

        self.create = tuple(fill(s) for s in _TEMPLATES["create"])
        #: Per schema version, the statements that bring the one before it to it.
        self.migrations = {
            version: tuple(fill(s) for s in _TEMPLATES[f"migrate_{version}"])
            for version in range(2, SCHEMA_VERSION + 1)
        }
        self.drop = tuple(fill(s) for s in _TEMPLATES["drop"])
        for key, template in _TEMPLATES.items():
            if isinstance(template, str):
                setattr(self, key, fill(template))

    # Set by __init__ from _TEMPLATES (declared for the type checker).
    version: str
    exists: str
    now: str
    push: str
    push_replace: str
    existing: str
    same: str
    pull: str
    poll: str
    xack: str
    xpoll: str
    look: str
    look_many: str
    ttn: str
    update: str
    claim: str
    ack: str
    refile: str
    reschedule_many: str
    hand_back: str
    info: str
    read: str
    replace_if: str
    update_if: str
    pull_if: str
    names_query: str
    size: str
    summary: str
    ids: str
    heartbeat: str
    deregister: str
    workers: str
