"""The queue-map on Redis: the design ``RedisStore`` used before it moved to one sorted set, kept
as the baseline that ``benchmarks/bench_redis.py`` measures it against.

The Lua beside this file is the store's former scripts, unchanged (``_lib.lua`` documents the keys
and their invariants): a LIST per distinct TTL (and per lease length, for claimed elements) whose
entries are in due order because they share a TTL, a HASH of element metadata and one of payloads,
and a SORTED SET of the lists' first entries scored by due time, for a k-way merge in Lua. Only
the scripts of the verbs the benchmark times are kept (push, pull, poll, claim, ack); the others
(look, info, update, reschedule, extend, xpoll, ids, ttn, size) are in the history of
``rehydrate/stores/_redis_scripts/``.

:class:`QueueMapStore` is a :class:`~rehydrate.stores.RedisStore` that runs these scripts on
these keys instead of its own, so both designs are measured through the same client code
(arguments checked, elements serialized, replies parsed and retries handled alike): what differs
is only what the server does. ``push``, ``push_many``, ``pull``, ``claim`` and ``ack`` are the
store's own methods (the scripts take the same arguments and give the same replies); ``poll``,
``claim`` and ``ack`` are the former ones (its poll replied no time; it fenced by attempt, the
store now by a claim token). Other verbs are not available.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rehydrate._core import _validate
from rehydrate._core._dehydrator import Claim
from rehydrate._core._validate import Seconds
from rehydrate.stores._redis import RedisStore, _escape, _micros, _text
from rehydrate.stores._redis_client import Script as _Script

__all__ = ["QueueMapStore"]

_HERE = Path(__file__).resolve().parent
_VERBS = ("push", "pull", "take", "remove")


def _load() -> dict[str, _Script]:
    lib = (_HERE / "_lib.lua").read_text(encoding="utf-8")
    return {
        verb: _Script(verb, lib + "\n" + (_HERE / f"{verb}.lua").read_text(encoding="utf-8"))
        for verb in _VERBS
    }


class QueueMapStore(RedisStore):
    """The queue-map scripts behind ``push``, ``push_many``, ``pull``, ``poll``, ``claim`` and ``ack``."""

    _queue_map = _load()

    def _keys(self, name: str) -> list[str]:
        keys = self._keys_cache.get(name)
        if keys is None:
            _validate.element_id(name, "name")
            base = f"{self._prefix}:{{{_escape(name)}}}"
            keys = [f"{base}:m", f"{base}:p", f"{base}:h", f"{base}:s", f"{base}:d", self._registry]
            self._keys_cache[name] = keys
        return keys

    async def _eval(
        self,
        script: str,
        name: str,
        args: Sequence[str | bytes | int],
        *,
        retry: Sequence[str | bytes | int] = (),
    ) -> Any:
        # The former push.lua takes the retry flag and the triples: no start time (its ttls count
        # from when it runs), and no push1 (the store's lean single push came later).
        if script == "push1":
            script = "push"
        elif script == "push":
            args = [args[0], *args[2:]]
            retry = [retry[0], *retry[2:]] if retry else ()
        head = self._head(name)
        return await self._backend.eval(
            self._queue_map[script],
            self._keys(name),
            [*head, *args],
            retry_args=[*head, *retry] if retry else None,
        )

    async def poll(self, name: str, *, limit: int | None = None) -> list[Any]:
        self._keys(name)
        n = _validate.limit(limit)
        out: list[Any] = []
        max_seq: str | int = ""
        while True:
            page = self._batch if n is None else min(self._batch, n - len(out))
            reply = await self._eval("take", name, ["poll", page, 0, max_seq, self._join_flag])
            if self._join:
                out += self._loads_joined(reply[2])
            else:
                out.extend(self._serializer.loads(payload) for payload in reply[2:])
            if not int(reply[1]) or (n is not None and len(out) >= n):
                return out
            if max_seq == "":
                max_seq = int(reply[0])

    # (It predates Store.claim's ``ahead``, so a Scheduler refuses ``claim_ahead`` on this store.)
    async def claim(self, name: str, *, lease: Seconds, limit: int | None = None) -> list[Claim]:  # type: ignore[override]
        """The former claim: its scripts fence by attempt, so a claim's token is its attempt."""
        self._keys(name)
        micros = _micros(lease, "lease")
        n = _validate.limit(limit)
        out: list[Claim] = []
        first: list[str | int] = ["", ""]
        while True:
            page = self._batch if n is None else min(self._batch, n - len(out))
            reply = await self._eval(
                "take", name, ["claim", page, micros, first[0], self._join_flag, first[1]]
            )
            now, until = int(reply[2]) / 1e6, int(reply[3]) / 1e6
            rows = range(5, len(reply), 4)
            if self._join:
                elements = self._loads_joined(reply[4])
            else:
                elements = [self._serializer.loads(reply[i + 3]) for i in rows]
            out += [
                Claim(
                    id=_text(reply[i]),
                    element=element,
                    attempt=int(reply[i + 1]),
                    lease_until=until,
                    token=int(reply[i + 1]),
                    due=int(reply[i + 2]) / 1e6,
                    claimed_at=now,
                )
                for i, element in zip(rows, elements, strict=True)
            ]
            if not int(reply[1]) or (n is not None and len(out) >= n):
                return out
            if first[0] == "":
                first = [int(reply[0]), int(reply[2])]

    async def ack(self, name: str, claims: Iterable[tuple[str, int]]) -> list[bool]:
        """The former ack: ``(id, attempt)`` pairs (a claim's token is its attempt here)."""
        self._keys(name)
        pairs = list(claims)
        out: list[bool] = []
        for start in range(0, len(pairs), self._batch):
            flat: list[str | bytes | int] = []
            for id, attempt in pairs[start : start + self._batch]:
                flat += (id, attempt)
            reply = await self._eval("remove", name, ["ack", *flat])
            out.extend(bool(int(r)) for r in reply)
        return out
