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
store's own methods (the scripts take the same arguments and give the same replies); ``poll`` is
the former one, whose reply had no time in it. Other verbs are not available.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rehydrate._core import _validate
from rehydrate.stores._redis import RedisStore, _escape, _Script

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
                out.extend(self._loads(payload) for payload in reply[2:])
            if not int(reply[1]) or (n is not None and len(out) >= n):
                return out
            if max_seq == "":
                max_seq = int(reply[0])
