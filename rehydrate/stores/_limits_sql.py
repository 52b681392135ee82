"""Limits on a SQL database (SQLite, PostgreSQL): three tables, one transaction per step.

Each step reads one limit key's rows (its holders, its starts in the window, the head of its
waiters' FIFO and the caller's own waiter), applies the rule of ``rehydrate._core._limits`` to
them in Python, and writes back what changed, all in the caller's transaction: SQLite's
``BEGIN IMMEDIATE`` (one writer at a time), PostgreSQL's with an advisory lock on the key first
(steps of one key queue; other keys' run side by side). The tables are created ``IF NOT EXISTS``
when the store opens, outside its schema version: a database without them gets them, and no
other table changes.

The statements are written with ``?`` placeholders; PostgreSQL's driver takes ``%s``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from rehydrate._core._limits import HEAD_ROWS, KeyState, LimitAnswer, LimitInfo, LimitSpec, Waiter

__all__ = ["LimitTables"]

#: Every this many steps, a step also deletes the rows of leases, starts and waiters long past,
#: whatever their key: a key that went idle with no step after it costs nothing for long.
_SWEEP_EVERY: Final = 512
#: How many ids one ``IN (...)`` of a bulk park names (well under SQLite's bound parameters).
_IN_CHUNK: Final = 500


class LimitTables:
    """The statements of one database's limit tables, and the steps that use them."""

    def __init__(self, prefix: str, *, postgres: bool, schema: str | None = None) -> None:
        real = "DOUBLE PRECISION" if postgres else "REAL"
        seq = "BIGSERIAL PRIMARY KEY" if postgres else "INTEGER PRIMARY KEY"
        without_rowid = "" if postgres else " WITHOUT ROWID"
        # Index names take no schema: the bare table names name them.
        hi, si, wi = f"{prefix}limit_holders", f"{prefix}limit_starts", f"{prefix}limit_waiters"
        at = "" if schema is None else f"{schema}."
        h, s, w = at + hi, at + si, at + wi
        self.create: tuple[str, ...] = (
            f"""CREATE TABLE IF NOT EXISTS {h} (
                lim TEXT NOT NULL, key TEXT NOT NULL, holder TEXT NOT NULL, until {real} NOT NULL,
                PRIMARY KEY (lim, key, holder)){without_rowid}""",
            f"CREATE INDEX IF NOT EXISTS {hi}_until ON {h} (until)",
            f"""CREATE TABLE IF NOT EXISTS {s} (
                lim TEXT NOT NULL, key TEXT NOT NULL, at {real} NOT NULL, until {real} NOT NULL)""",
            f"CREATE INDEX IF NOT EXISTS {si}_key ON {s} (lim, key, at)",
            f"CREATE INDEX IF NOT EXISTS {si}_until ON {s} (until)",
            # ``seq``: the FIFO order; ``until``: when the waiter's element is filed due.
            f"""CREATE TABLE IF NOT EXISTS {w} (
                seq {seq}, lim TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, id TEXT NOT NULL,
                attempt INTEGER NOT NULL, until {real} NOT NULL, forget {real} NOT NULL,
                UNIQUE (lim, key, name, id))""",
            f"CREATE INDEX IF NOT EXISTS {wi}_key ON {w} (lim, key, seq)",
            f"CREATE INDEX IF NOT EXISTS {wi}_forget ON {w} (forget)",
        )
        self.tables = (hi, si, wi)
        q = "%s" if postgres else "?"

        def sql(text: str) -> str:
            return text.replace("?", q)

        self._holders = sql(f"SELECT holder, until FROM {h} WHERE lim = ? AND key = ? AND until > ?")
        self._holder_until = sql(f"SELECT until FROM {h} WHERE lim = ? AND key = ? AND holder = ?")
        self._drop_holders = sql(f"DELETE FROM {h} WHERE lim = ? AND key = ? AND until <= ?")
        self._put_holder = sql(
            f"INSERT INTO {h} (lim, key, holder, until) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (lim, key, holder) DO UPDATE SET until = excluded.until"
        )
        self._drop_holder = sql(f"DELETE FROM {h} WHERE lim = ? AND key = ? AND holder = ?")
        self._starts = sql(f"SELECT at FROM {s} WHERE lim = ? AND key = ? AND at > ? ORDER BY at")
        self._drop_starts = sql(f"DELETE FROM {s} WHERE lim = ? AND key = ? AND at <= ?")
        self._put_start = sql(f"INSERT INTO {s} (lim, key, at, until) VALUES (?, ?, ?, ?)")
        columns = "name, id, attempt, until"
        self._head = sql(
            f"SELECT {columns} FROM {w} WHERE lim = ? AND key = ? ORDER BY seq LIMIT {HEAD_ROWS}"
        )
        self._own = sql(f"SELECT {columns} FROM {w} WHERE lim = ? AND key = ? AND name = ? AND id = ?")
        self._mark = q
        owns = f"SELECT {columns} FROM {w} WHERE lim = ? AND key = ? AND name = ? AND id IN "
        self._owns = sql(owns) + "({marks})"
        self._drop_waiter = sql(f"DELETE FROM {w} WHERE lim = ? AND key = ? AND name = ? AND id = ?")
        self._put_waiter = sql(
            f"INSERT INTO {w} (lim, key, name, id, attempt, until, forget) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (lim, key, name, id) DO UPDATE SET "
            "attempt = excluded.attempt, until = excluded.until, forget = excluded.forget"
        )
        self._sweeps = (
            sql(f"DELETE FROM {h} WHERE until <= ?"),
            sql(f"DELETE FROM {s} WHERE until <= ?"),
            sql(f"DELETE FROM {w} WHERE forget <= ?"),
        )
        self._list = sql(
            f"SELECT lim, key FROM {h} WHERE until > ? UNION SELECT lim, key FROM {s} WHERE until > ? "
            f"UNION SELECT lim, key FROM {w} WHERE forget > ? ORDER BY 1, 2"
        )
        self._list_holders = sql(f"SELECT lim, key, holder, until FROM {h} WHERE until > ?")
        self._list_starts = sql(f"SELECT lim, key, COUNT(*) FROM {s} WHERE until > ? GROUP BY lim, key")
        self._list_waiters = sql(f"SELECT lim, key, COUNT(*) FROM {w} WHERE forget > ? GROUP BY lim, key")
        self._steps = 0

    # Each step takes ``execute(statement, params) -> rows`` (the caller's cursor, in its
    # transaction) and the store's ``now``.

    def _load(
        self, execute: Execute, now: float, limit: str, key: str, spec: LimitSpec, own: tuple[str, str] | None
    ) -> tuple[KeyState, dict[tuple[str, str], tuple[int, float]]]:
        holders = execute(self._holders, (limit, key, now)) if spec.concurrency is not None else []
        starts = (
            [row[0] for row in execute(self._starts, (limit, key, now - spec.window))] if spec.rates else []
        )
        rows = list(execute(self._head, (limit, key)))
        if own is not None and not any((row[0], row[1]) == own for row in rows):
            rows += execute(self._own, (limit, key, *own))
        waiters = [Waiter(name=n, id=i, attempt=int(a), until=float(u)) for n, i, a, u in rows]
        return KeyState.loaded([(h, float(u)) for h, u in holders], [float(a) for a in starts], waiters)

    def _save(
        self,
        execute: Execute,
        now: float,
        limit: str,
        key: str,
        spec: LimitSpec,
        state: KeyState,
        before: dict[tuple[str, str], tuple[int, float]],
    ) -> None:
        execute(self._drop_holders, (limit, key, now))
        execute(self._drop_starts, (limit, key, now - spec.window))
        if state.new_start is not None:
            execute(self._put_start, (limit, key, state.new_start, state.new_start + spec.window))
        gone, written = state.changes(before)
        for name, id in gone:
            execute(self._drop_waiter, (limit, key, name, id))
        for waiter in written:
            params = (
                limit,
                key,
                waiter.name,
                waiter.id,
                waiter.attempt,
                waiter.until,
                waiter.until + spec.horizon,
            )
            execute(self._put_waiter, params)
        self._steps += 1
        if self._steps % _SWEEP_EVERY == 0:
            for statement in self._sweeps:
                execute(statement, (now,))

    def acquire(
        self,
        execute: Execute,
        now: float,
        limit: str,
        key: str,
        holder: str,
        spec: LimitSpec,
        waiter: tuple[str, str, int] | None,
    ) -> LimitAnswer:
        own = None if waiter is None else (waiter[0], waiter[1])
        state, before = self._load(execute, now, limit, key, spec, own)
        answer = state.acquire(now, holder, spec, waiter)
        if answer.granted and spec.concurrency is not None:
            execute(self._put_holder, (limit, key, holder, state.holders[holder]))
        self._save(execute, now, limit, key, spec, state, before)
        return answer

    def park(
        self,
        execute: Execute,
        now: float,
        limit: str,
        key: str,
        spec: LimitSpec,
        waiters: list[tuple[str, str, int]],
    ) -> LimitAnswer:
        state, before = self._load(execute, now, limit, key, spec, None)
        # Those queued already keep their place (and row): read in a few statements, not one each.
        missing: dict[str, list[str]] = {}
        for name, id, _ in waiters:
            if (name, id) not in state.waiters:
                missing.setdefault(name, []).append(id)
        for name, ids in missing.items():
            for lo in range(0, len(ids), _IN_CHUNK):
                chunk = ids[lo : lo + _IN_CHUNK]
                marks = ", ".join([self._mark] * len(chunk))
                for n, i, a, u in execute(self._owns.format(marks=marks), (limit, key, name, *chunk)):
                    waiter = Waiter(name=n, id=i, attempt=int(a), until=float(u))
                    state.waiters[n, i] = waiter
                    before[n, i] = (waiter.attempt, waiter.until)
        answer = state.park(now, spec, waiters)
        self._save(execute, now, limit, key, spec, state, before)
        return answer

    def renew(self, execute: Execute, now: float, limit: str, key: str, holder: str, spec: LimitSpec) -> bool:
        rows = execute(self._holder_until, (limit, key, holder))
        if not rows or float(rows[0][0]) <= now:
            return False
        execute(self._put_holder, (limit, key, holder, now + spec.lease))
        return True

    def release(
        self, execute: Execute, now: float, limit: str, key: str, holder: str, spec: LimitSpec
    ) -> LimitAnswer:
        state, before = self._load(execute, now, limit, key, spec, None)
        answer = state.release(now, holder, spec)
        if answer.granted:
            execute(self._drop_holder, (limit, key, holder))
        self._save(execute, now, limit, key, spec, state, before)
        return answer

    def listing(self, execute: Execute, now: float, limit: str | None) -> list[LimitInfo]:
        keys = [(a, b) for a, b in execute(self._list, (now, now, now)) if limit is None or a == limit]
        holders: dict[tuple[str, str], dict[str, float]] = {}
        for a, b, holder, until in execute(self._list_holders, (now,)):
            holders.setdefault((a, b), {})[holder] = float(until)
        starts = {(a, b): int(n) for a, b, n in execute(self._list_starts, (now,))}
        waiting = {(a, b): int(n) for a, b, n in execute(self._list_waiters, (now,))}
        return [
            LimitInfo(
                limit=a,
                key=b,
                holders=holders.get((a, b), {}),
                starts=starts.get((a, b), 0),
                waiting=waiting.get((a, b), 0),
            )
            for a, b in keys
        ]


#: Runs a statement in the caller's transaction and gives its rows (``[]`` for a write).
Execute = Callable[[str, tuple[Any, ...]], list[Any]]
