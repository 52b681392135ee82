"""A store written against rehydrate's store contract, from scratch: dehydrators in dicts.

The worked example of ``docs/stores.md`` ("Writing a store"): every verb of
:class:`rehydrate.abc.Store` over a plain ``dict`` per dehydrator, small enough to read in one
sitting, and checked by the contract suite (``test_dict_store.py``: one fixture). A real store
keeps the same shape with a backend behind each verb; what matters is what the contract asks of
every verb: arguments checked before anything changes, one atomic step per call, due order with
ties in filing order, fencing by the claim's token, and a revision that every write of an element
changes (a lease's renewal aside), for the compare-and-set verbs.

It declares ``claim_ahead`` and leaves out what a store may lack (the worker registry): the
suite skips those tests, and a scheduler on it sends no heartbeats. It serves handlers and
recurring schedules alike: a schedule needs nothing beyond the contract's verbs (its rules are
written once above them, on the compare-and-set verbs). It keeps the objects given, as the
memory store does without a serializer, and scans a whole dehydrator per call: fine for an
example, not for a million elements (a real store keeps an index by due time).
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio

from rehydrate import Claim, ElementInfo
from rehydrate.abc import Capabilities, Clock, Store, Subscription
from rehydrate.errors import (
    DuplicateIdError,
    InvalidArgumentError,
    InvalidTypeError,
    StoreNotOpenError,
    UnknownIdError,
)

#: The longest duration every store takes (``rehydrate.abc``: "Time").
MAX_SECONDS = 10**9
#: The most elements one claim takes: a store bounds one call, the caller loops for more.
CLAIM_BATCH = 1000


# -- argument checks: before anything changes, the same errors as every store's ------------------


def _text(value: object, what: str = "id") -> str:
    """A name or an id: a non-empty ``str`` of valid Unicode text."""
    if type(value) is not str or not value:
        raise InvalidArgumentError(f"{what} must be a non-empty str, got {value!r}")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{what} must be valid Unicode text (no lone surrogates)") from None
    return value


def _seconds(value: object, what: str) -> float:
    """A duration: a number or a timedelta, from 0 to ``MAX_SECONDS``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        kind = type(value).__name__
        raise InvalidTypeError(f"{what} must be seconds (a number or a timedelta), not {kind}")
    if not (isinstance(value, int) or math.isfinite(value)) or not 0 <= value <= MAX_SECONDS:
        raise InvalidArgumentError(f"{what} must be from 0 to at most 1,000,000,000 seconds, got {value!r}")
    return float(value)


def _positive(value: object, what: str, *, zero: bool = False) -> int:
    """A token (from 1), an attempt (from 0) or a limit (from 1)."""
    if type(value) is not int or value < (0 if zero else 1):
        raise InvalidArgumentError(f"{what} must be an int from {0 if zero else 1}, got {value!r}")
    return value


def _limit(value: object) -> int | None:
    return None if value is None else _positive(value, "limit")


def _batch(items: Iterable[Any], verb: str) -> list[tuple[str, int, float]]:
    """``(id, token, ttl)`` items, every one checked before any is done; an id only once."""
    if isinstance(items, str | bytes):
        raise InvalidTypeError(f"{verb} takes an iterable of (id, token, ttl), not {type(items).__name__}")
    out: list[tuple[str, int, float]] = []
    for item in items:
        try:
            id, token, ttl = item
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{verb} takes (id, token, ttl) items, got {item!r}") from None
        if token is None:
            raise InvalidArgumentError(f"{verb} needs each claim's token")
        out.append((_text(id), _positive(token, "token"), _seconds(ttl, "ttl")))
    if len({id for id, _, _ in out}) < len(out):
        raise InvalidArgumentError(f"{verb} got an id twice")
    return out


def _replaces(items: Iterable[Any]) -> list[tuple[str, int, Any, float]]:
    """``replace_if``'s ``(id, revision, element, ttl)`` items, checked as :func:`_batch`'s."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise InvalidTypeError(f"replace_if takes an iterable of (id, revision, element, ttl), not {items!r}")
    out: list[tuple[str, int, Any, float]] = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 4:
            raise InvalidArgumentError(f"replace_if takes (id, revision, element, ttl) items, got {item!r}")
        id, revision, element, ttl = item
        out.append((_text(id), _positive(revision, "revision", zero=True), element, _seconds(ttl, "ttl")))
    if len({id for id, _, _, _ in out}) < len(out):
        raise InvalidArgumentError("replace_if got an id twice")
    return out


# -- the store -------------------------------------------------------------------------------------


class _Entry:
    """One element and its place in time. A claimed element is filed at its lease's end."""

    __slots__ = ("attempt", "claimed", "due", "element", "revision", "seq", "token", "ttl")

    def __init__(self, element: Any, due: float, ttl: float, seq: int) -> None:
        self.element, self.due, self.ttl, self.seq = element, due, ttl, seq
        self.attempt = 0
        self.claimed = False
        #: The last claim's token; kept by a reschedule (a retry under it), cleared by a hand-back.
        self.token: int | None = None
        #: Set by every write (see ``DictStore._file``), from a counter that only grows.
        self.revision = -1

    def under(self, token: int) -> bool:
        """Still under the claim ``token``: fencing, as every store does it."""
        return self.claimed and self.token == token


class _Subscription(Subscription):
    """Set when something may be due sooner; remembered until the next ``wait``."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._event = anyio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else self._clock() + timeout
        await self._clock.wait(self._event, deadline)
        if not self._event.is_set():
            return False
        self._event = anyio.Event()
        return True


class DictStore(Store):
    """Dehydrators in dicts, in this process; time is ``clock`` (a FakeClock in tests).

    Every verb yields once (its checkpoint, where it may be cancelled) and then does all its work
    without yielding: each call is atomic with respect to every other.
    """

    capabilities = Capabilities(claim_ahead=True)

    def __init__(self, *, clock: Clock) -> None:
        self.clock = clock
        self._data: dict[str, dict[str, _Entry]] = {}
        self._subscribers: dict[str, set[_Subscription]] = {}
        self._seq = itertools.count()  # filing order: ties in due time come out in it
        self._tokens = itertools.count(1)  # never reused in this store
        #: Revisions, store-wide: never given twice, so an element pushed under a reused id never
        #: has a revision an old one had (a compare-and-set with the old one fails).
        self._revisions = itertools.count()
        self._open = False

    def __repr__(self) -> str:
        return f"DictStore(clock={self.clock!r})"

    async def open(self) -> None:
        await anyio.lowlevel.checkpoint()
        self._open = True

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self._open = False

    # -- plumbing ----------------------------------------------------------------------------------

    async def _enter(self, name: str | None = None) -> dict[str, _Entry]:
        """Every verb's first step: yield, refuse a closed store, check the name."""
        await anyio.lowlevel.checkpoint()
        if not self._open:
            raise StoreNotOpenError(f"{self!r} is not open: use it as `async with store:`")
        return {} if name is None else self._data.get(_text(name, "name"), {})

    def _file(self, name: str, id: str, entry: _Entry, ttl: float, *, renewal: bool = False) -> None:
        """(Re)file ``entry`` at now + ``ttl``, after what is due then already; wake if sooner.

        A write: the element gets a new revision, unless ``renewal`` (a lease's, which keeps it).
        """
        entries = self._data.setdefault(name, {})
        before = min((e.due for e in entries.values()), default=math.inf)
        entry.due, entry.ttl, entry.seq = self.clock() + ttl, ttl, next(self._seq)
        if not renewal:
            entry.revision = next(self._revisions)
        entries[id] = entry
        if entry.due < before:
            for subscription in self._subscribers.get(name, ()):
                subscription.notify()

    def _remove(self, name: str, id: str) -> _Entry | None:
        entries = self._data.get(name, {})
        entry = entries.pop(id, None)
        if not entries:
            self._data.pop(name, None)
        return entry

    @staticmethod
    def _in_order(entries: dict[str, _Entry], until: float, limit: int | None) -> list[tuple[str, _Entry]]:
        due = sorted((e.due, e.seq, id) for id, e in entries.items() if e.due <= until)
        return [(id, entries[id]) for _, _, id in due[:limit]]

    # -- the verbs -----------------------------------------------------------------------------------

    async def push(
        self, name: str, element: Any, *, ttl: Any, id: str | None = None, replace: bool = False
    ) -> str:
        entries = await self._enter(name)
        seconds = _seconds(ttl, "ttl")
        if type(replace) is not bool:
            raise InvalidArgumentError(f"replace must be a bool, got {replace!r}")
        if id is None:
            if replace:
                raise InvalidArgumentError("push(replace=True) needs the id of the element it replaces")
            id = uuid.uuid4().hex
        elif _text(id) in entries and not replace:
            raise DuplicateIdError(f"id {id!r} is already in {name!r}")
        self._file(name, id, _Entry(element, 0.0, 0.0, 0), seconds)  # a new element, unclaimed
        return id

    async def push_many(self, name: str, items: Iterable[tuple[Any, Any, str | None]]) -> list[str]:
        entries = await self._enter(name)
        batch = [(e, _seconds(ttl, "ttl"), None if id is None else _text(id)) for e, ttl, id in items]
        ids = [uuid.uuid4().hex if id is None else id for _, _, id in batch]
        if len(set(ids)) < len(ids) or any(id in entries for id in ids):
            raise DuplicateIdError(f"a push_many to {name!r} has an id that is present or given twice")
        for (element, seconds, _), id in zip(batch, ids, strict=True):
            self._file(name, id, _Entry(element, 0.0, 0.0, 0), seconds)
        return ids

    async def pull(self, name: str, id: str) -> Any:
        await self._enter(name)
        entry = self._remove(name, _text(id))
        return None if entry is None else entry.element

    async def poll(self, name: str, *, limit: int | None = None) -> list[Any]:
        entries = await self._enter(name)
        due = self._in_order(entries, self.clock(), _limit(limit))
        return [self._remove(name, id).element for id, _ in due]  # type: ignore[union-attr]

    async def xpoll(self, name: str, *, limit: int | None = None) -> list[str]:
        entries = await self._enter(name)
        return [id for id, _ in self._in_order(entries, self.clock(), _limit(limit))]

    async def xack(
        self, name: str, *ids: str, attempt: int | None = None, token: int | None = None
    ) -> list[Any]:
        entries = await self._enter(name)
        checked = [_text(id) for id in ids]
        attempt = None if attempt is None else _positive(attempt, "attempt", zero=True)
        token = None if token is None else _positive(token, "token")
        out: list[Any] = []
        for id in checked:
            entry = entries.get(id)
            if (
                entry is None
                or not (entry.claimed or entry.due <= self.clock())
                or (attempt is not None and entry.attempt != attempt)
                or (token is not None and not entry.under(token))
            ):
                out.append(None)
            else:
                out.append(self._remove(name, id).element)  # type: ignore[union-attr]
        return out

    async def look(self, name: str, id: str) -> Any:
        entry = (await self._enter(name)).get(_text(id))
        return None if entry is None else entry.element

    async def look_many(self, name: str, ids: Iterable[str]) -> list[Any]:
        await self._enter(name)  # (the contract's default checks the ids, then looks each up)
        return await super().look_many(name, ids)

    async def ttn(self, name: str) -> float | None:
        entries = await self._enter(name)
        if not entries:
            return None
        return max(0.0, min(e.due for e in entries.values()) - self.clock())

    async def update(self, name: str, id: str, element: Any, *, token: int | None = None) -> Any:
        entry = (await self._enter(name)).get(_text(id))
        if token is not None:
            _positive(token, "token")
        if entry is None or (token is not None and not entry.under(token)):
            raise UnknownIdError(f"no element {id!r} in {name!r}" + (" under that claim" if token else ""))
        old, entry.element = entry.element, element  # its due time, attempt and claim are kept
        entry.revision = next(self._revisions)
        return old

    # -- revisions: compare-and-set --------------------------------------------------------------
    # Each verb compares and writes with no checkpoint in between: one atomic step, as the
    # scheduling layer's rules (no overlap, a change made while an occurrence runs) need.

    async def read(self, name: str, id: str) -> tuple[Any, ElementInfo] | None:
        entry = (await self._enter(name)).get(_text(id))
        return None if entry is None else (entry.element, self._info(id, entry))

    async def replace_if(self, name: str, items: Iterable[tuple[str, int, Any, Any]]) -> list[int | None]:
        entries = await self._enter(name)
        out: list[int | None] = []
        for id, revision, element, seconds in _replaces(items):
            entry = entries.get(id)
            if entry is None or entry.revision != revision:
                out.append(None)
                continue
            new = _Entry(element, 0.0, 0.0, 0)  # a new element in its place: unclaimed, attempt 0
            self._file(name, id, new, seconds)
            out.append(new.revision)
        return out

    async def update_if(self, name: str, id: str, revision: int, element: Any) -> int | None:
        entry = (await self._enter(name)).get(_text(id))
        _positive(revision, "revision", zero=True)
        if entry is None or entry.revision != revision:
            return None
        entry.element, entry.revision = element, next(self._revisions)
        return entry.revision

    async def pull_if(self, name: str, id: str, revision: int) -> bool:
        entry = (await self._enter(name)).get(_text(id))
        _positive(revision, "revision", zero=True)
        if entry is None or entry.revision != revision:
            return False
        self._remove(name, id)
        return True

    # -- leases --------------------------------------------------------------------------------------

    async def claim(
        self, name: str, *, lease: Any, limit: int | None = None, ahead: Any = 0.0
    ) -> list[Claim]:
        entries = await self._enter(name)
        seconds, early, most = _seconds(lease, "lease"), _seconds(ahead, "ahead"), _limit(limit)
        now = self.clock()
        # Due now, or (ahead) within ``early`` and not under a lease that still runs.
        chosen = [
            (id, e) for id, e in self._in_order(entries, now + early, None) if e.due <= now or not e.claimed
        ][: min(most or CLAIM_BATCH, CLAIM_BATCH)]
        claims = []
        for id, entry in chosen:
            due = entry.due
            entry.attempt += 1
            entry.claimed, entry.token = True, next(self._tokens)
            self._file(name, id, entry, seconds)
            claims.append(
                Claim(
                    id=id,
                    element=entry.element,
                    attempt=entry.attempt,
                    lease_until=entry.due,
                    token=entry.token,
                    due=due,
                    claimed_at=now,
                    revision=entry.revision,
                )
            )
        return claims

    async def ack(self, name: str, claims: Iterable[tuple[str, int]]) -> list[bool]:
        entries = await self._enter(name)
        checked = [(_text(id), _positive(token, "token")) for id, token in claims]
        done = []
        for id, token in checked:
            entry = entries.get(id)
            done.append(entry is not None and entry.under(token) and self._remove(name, id) is not None)
        return done

    async def reschedule(
        self, name: str, id: str, *, ttl: Any, attempt: int | None = None, token: int | None = None
    ) -> bool:
        entry = (await self._enter(name)).get(_text(id))
        seconds = _seconds(ttl, "ttl")
        attempt = None if attempt is None else _positive(attempt, "attempt", zero=True)
        token = None if token is None else _positive(token, "token")
        if (
            entry is None
            or (attempt is not None and entry.attempt != attempt)
            or (token is not None and entry.token != token)  # a retry's token stays its own
        ):
            return False
        entry.claimed = False
        self._file(name, id, entry, seconds)
        return True

    async def reschedule_many(self, name: str, items: Iterable[tuple[str, int, Any]]) -> list[bool]:
        await self._enter(name)
        batch = _batch(items, "reschedule_many")
        return [await self.reschedule(name, id, ttl=ttl, token=token) for id, token, ttl in batch]

    async def hand_back(self, name: str, items: Iterable[tuple[str, int, Any]]) -> list[bool]:
        entries = await self._enter(name)
        done = []
        for id, token, ttl in _batch(items, "hand_back"):
            entry = entries.get(id)
            if entry is None or not entry.under(token):
                done.append(False)
                continue
            entry.attempt -= 1  # given back unrun: no attempt
            entry.claimed, entry.token = False, None
            self._file(name, id, entry, ttl)
            done.append(True)
        return done

    async def extend(self, name: str, id: str, *, lease: Any, token: int) -> float | None:
        entry = (await self._enter(name)).get(_text(id))
        seconds, token = _seconds(lease, "lease"), _positive(token, "token")
        if entry is None or not entry.under(token):
            return None
        self._file(name, id, entry, seconds, renewal=True)
        return entry.due

    async def info(self, name: str, id: str) -> ElementInfo | None:
        entry = (await self._enter(name)).get(_text(id))
        return None if entry is None else self._info(id, entry)

    @staticmethod
    def _info(id: str, entry: _Entry) -> ElementInfo:
        return ElementInfo(
            id=id,
            due=entry.due,
            ttl=entry.ttl,
            attempt=entry.attempt,
            claimed=entry.claimed,
            revision=entry.revision,
        )

    # -- inspection and waiting ----------------------------------------------------------------------

    async def names(self) -> list[str]:
        await self._enter()
        return sorted(self._data)

    async def size(self, name: str) -> int:
        return len(await self._enter(name))

    async def ids(self, name: str, *, limit: int | None = None) -> list[str]:
        entries = await self._enter(name)
        return [id for id, _ in self._in_order(entries, math.inf, _limit(limit))]

    def subscribe(self, name: str) -> AbstractAsyncContextManager[Subscription]:
        return self._subscribe(name)

    @asynccontextmanager
    async def _subscribe(self, name: str) -> AsyncIterator[Subscription]:
        await self._enter(name)
        subscription = _Subscription(self.clock)
        subscribers = self._subscribers.setdefault(name, set())
        subscribers.add(subscription)
        try:
            yield subscription
        finally:
            subscribers.discard(subscription)
