"""The queue-map on Redis: the design ``RedisStore`` used before it moved to one sorted set, kept
as the baseline that ``benchmarks/bench_redis.py`` measures it against.

The Lua beside this file is the store's former scripts, unchanged (``_lib.lua`` documents the keys
and their invariants): a LIST per distinct TTL (and per lease length, for claimed elements) whose
entries are in due order because they share a TTL, a HASH of element metadata and one of payloads,
and a SORTED SET of the lists' first entries scored by due time, for a k-way merge in Lua. Only
the scripts of the verbs the benchmark times are kept (push, pull, poll, claim, ack); the others
(look, info, update, reschedule, extend, xpoll, ids, ttn) are in the history of
``rehydrate/stores/_redis_scripts/``.

:class:`QueueMapStore` is a minimal client for them, written to the store's standard: the same
client (coredis), the same script arguments and paging (``batch`` elements per script, a poll or
claim loop that stops at elements filed after it began), JSON payloads joined into one reply,
server ``TIME`` inside the scripts, ``Claim`` objects built the same way, and attempts fenced on
ack. It has no retries, no serializer choice and no pub/sub: the benchmark does not need them.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from itertools import count
from pathlib import Path
from typing import Any

import coredis

from rehydrate import Claim

__all__ = ["QueueMapStore"]

_HERE = Path(__file__).resolve().parent
_VERBS = ("push", "pull", "take", "remove")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class QueueMapStore:
    """The queue-map scripts behind ``push``, ``push_many``, ``pull``, ``poll``, ``claim`` and ``ack``."""

    def __init__(self, url: str, *, prefix: str = "qm", batch: int = 1000) -> None:
        self._url = url
        self._prefix = prefix
        self._batch = batch
        self._client: coredis.Redis[bytes] | None = None
        self._shas: dict[str, str] = {}
        self._ids = count()
        self._id_prefix = secrets.token_hex(8)

    async def __aenter__(self) -> QueueMapStore:
        self._client = coredis.Redis.from_url(self._url, decode_responses=False)
        await self._client.__aenter__()
        lib = (_HERE / "_lib.lua").read_text(encoding="utf-8")
        for verb in _VERBS:
            source = lib + "\n" + (_HERE / f"{verb}.lua").read_text(encoding="utf-8")
            self._shas[verb] = _text(await self._client.script_load(source))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._client is not None
        await self._client.__aexit__(None, None, None)

    def _keys(self, name: str) -> list[str]:
        base = f"{self._prefix}:{{{name}}}"
        return [f"{base}:m", f"{base}:p", f"{base}:h", f"{base}:s", f"{base}:d", f"{self._prefix}:names"]

    async def _call(self, verb: str, name: str, args: list[Any]) -> Any:
        assert self._client is not None
        # The scripts' common head: no skew, no pinned time, the serializer's name, the name.
        head: list[Any] = [0, "", "json", name]
        return await self._client.evalsha(self._shas[verb], keys=self._keys(name), args=head + args)

    async def push(self, name: str, element: Any, *, ttl: float, id: str | None = None) -> str:
        (pushed,) = await self.push_many(name, [(element, ttl, id)])
        return pushed

    async def push_many(self, name: str, items: Iterable[tuple[Any, float, str | None]]) -> list[str]:
        ids: list[str] = []
        flat: list[Any] = ["0"]
        for element, ttl, id in items:
            id = id if id is not None else f"{self._id_prefix}{next(self._ids):x}"
            ids.append(id)
            flat += [id, round(ttl * 1e6), json.dumps(element, separators=(",", ":")).encode()]
        reply = await self._call("push", name, flat)
        if int(reply[0]) != 1:
            raise KeyError(_text(reply[1]))
        return ids

    async def pull(self, name: str, id: str) -> Any:
        reply = await self._call("pull", name, [id])
        return None if reply is None else json.loads(reply)

    async def poll(self, name: str) -> list[Any]:
        out: list[Any] = []
        max_seq: str | int = ""
        while True:
            reply = await self._call("take", name, ["poll", self._batch, 0, max_seq, "1"])
            if reply[2]:
                out += json.loads(b"[" + reply[2] + b"]")
            if not int(reply[1]):
                return out
            if max_seq == "":
                max_seq = int(reply[0])

    async def claim(self, name: str, *, lease: float, limit: int) -> list[Claim]:
        reply = await self._call("take", name, ["claim", limit, round(lease * 1e6), "", "1"])
        now, until = int(reply[2]) / 1e6, int(reply[3]) / 1e6
        rows = range(5, len(reply), 4)
        elements = json.loads(b"[" + reply[4] + b"]") if reply[4] else []
        return [
            Claim(
                id=_text(reply[i]),
                element=element,
                attempt=int(reply[i + 1]),
                lease_until=until,
                due=int(reply[i + 2]) / 1e6,
                claimed_at=now,
            )
            for i, element in zip(rows, elements, strict=True)
        ]

    async def ack(self, name: str, claims: Iterable[tuple[str, int]]) -> list[bool]:
        flat: list[Any] = ["ack"]
        for id, attempt in claims:
            flat += [id, attempt]
        return [bool(int(r)) for r in await self._call("remove", name, flat)]
