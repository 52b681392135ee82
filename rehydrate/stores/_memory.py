"""The embedded store: named Dehydrators in this process. Fast, and gone when the process ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import anyio

from rehydrate._clock import SystemClock
from rehydrate._core import _limits, _validate, _workers
from rehydrate._core._dehydrator import Dehydrator
from rehydrate._core._limits import KeyState, LimitAnswer, LimitInfo, LimitSpec
from rehydrate._core._records import Claim, ElementInfo, Summary, WorkerRecord, new_claim
from rehydrate._core._validate import Seconds
from rehydrate.abc import Capabilities, Clock, Serializer, Subscription
from rehydrate.errors import InvalidArgumentError, InvalidTypeError
from rehydrate.stores._base import StoreBase, as_str, url_options
from rehydrate.stores._subscription import EventSubscription

__all__ = ["MemoryStore"]


class MemoryStore(StoreBase):
    """Dehydrators held in this process: the embedded default (``memory://``).

    Elements are lost when the process ends. They are kept as the objects given (not copied or
    serialized), unless ``serializer`` is given (a name, ``"json"``, ``"msgpack"`` or
    ``"pickle"``, or a :class:`~rehydrate.abc.Serializer`; ``memory://?serializer=json``): then
    each is kept as the bytes it writes, as the durable stores keep it, so that what they refuse
    is refused here too (:class:`~rehydrate.errors.InvalidTypeError` at the push, nothing filed)
    and every read hands back what they would (a tuple comes back a list, a new object each
    time). That is the one to test with: on a store without it, tests pass with elements that
    production's store refuses or changes. Time is ``clock`` (monotonic by default; a
    :class:`~rehydrate.testing.FakeClock` in tests). Every call yields to other tasks first (its
    one checkpoint, where it may be cancelled) and then does all its work without yielding: each
    is atomic, and a cancelled call has done nothing. Like every store it must be opened first
    (``async with store``, or a scheduler that opens it) and refuses calls after :meth:`aclose`
    (:class:`~rehydrate.errors.StoreNotOpenError`); its elements stay in the object, so opening
    it again finds them.
    """

    #: (``in_process``: nothing to gain from coalescing concurrent defers; a push costs no round
    #: trip here.)
    capabilities = Capabilities(claim_ahead=True, workers=True, in_process=True, limits=True)

    def __init__(self, *, clock: Clock | None = None, serializer: str | Serializer | None = None) -> None:
        if clock is not None and not isinstance(clock, Clock):
            raise InvalidTypeError(
                f"clock must be callable and have an async sleep(seconds) method, not {type(clock).__name__}"
            )
        self.clock: Clock = clock if clock is not None else SystemClock()
        #: ``None``: elements are the objects given. Else the dehydrators hold its bytes.
        self._codec: Serializer | None = None
        if serializer is not None:
            self._set_serializer(serializer)  # (the names, objects and errors of every store)
            self._codec = self._serializer
        self._dehydrators: dict[str, Dehydrator] = {}
        #: Stands in for a dehydrator that does not exist: it checks the arguments as a real one
        #: does and answers as an empty one. Only reads and fenced calls reach it, so it stays empty.
        self._nothing = Dehydrator(clock=self.clock)
        self._subscribers: dict[str, set[EventSubscription]] = {}
        #: Worker id -> (data as JSON text, last seen, expires), in this store's clock.
        self._workers: dict[str, tuple[str, float, float]] = {}
        #: (limit, key) -> its state, with the horizon it was last touched with: only keys with
        #: holders, starts in a window or waiters (an idle key is deleted).
        self._limits: dict[tuple[str, str], tuple[KeyState, float, float]] = {}
        self._limit_steps = 0
        self._open = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        serializer: str | Serializer | None = None,
        create: bool = True,
    ) -> MemoryStore:
        """``memory://``: nothing after the scheme; its one option is ``serializer``
        (``memory://?serializer=json``), which may be given as an argument instead, not both ways
        (``create`` is accepted and moot)."""
        if not isinstance(url, str):
            raise InvalidTypeError(f"url must be a str, not {type(url).__name__}")
        parts = urlsplit(url)
        if parts.scheme.lower() != "memory":
            raise InvalidArgumentError(f"not a memory:// URL: {url!r}")
        if parts.netloc or parts.path.strip("/"):
            raise InvalidArgumentError(f"a memory:// URL names nothing: {url!r}")
        found = url_options(url, parts.query, {"serializer": as_str}, {"serializer": serializer})
        _validate.flag(create, "create")
        return cls(clock=clock, serializer=found.get("serializer", serializer))

    def __repr__(self) -> str:
        if self._codec is None:
            return f"MemoryStore(clock={self.clock!r})"
        return f"MemoryStore(clock={self.clock!r}, serializer={self._codec!r})"

    @property
    def serializer(self) -> Serializer | None:
        """The serializer elements are kept with; ``None``: kept as the objects given."""
        return self._codec

    async def open(self) -> None:
        await anyio.lowlevel.checkpoint()
        self._open = True

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self._open = False

    # -- helpers ---------------------------------------------------------------------------------

    def _get(self, name: str) -> Dehydrator:
        if not self._open:
            raise self._not_open()
        d = self._dehydrators.get(_validate.element_id(name, "name"))
        return self._nothing if d is None else d

    def _get_or_create(self, name: str) -> Dehydrator:
        if not self._open:
            raise self._not_open()
        d = self._dehydrators.get(_validate.element_id(name, "name"))
        if d is None:
            d = self._dehydrators[name] = Dehydrator(clock=self.clock)
        return d

    def _notify_if_sooner(self, name: str, d: Dehydrator, before: float | None) -> None:
        after = d.next_due()
        if after is not None and (before is None or after < before):
            for subscription in self._subscribers.get(name, ()):
                subscription.notify()

    # -- the serializer (only with one) ---------------------------------------------------------

    def _encode(self, element: Any, ttl: Seconds, id: str | None) -> bytes:
        """``element`` as the serializer writes it, before anything is filed, after the checks a
        durable store makes first (so that a call wrong twice over is refused as there)."""
        _validate.seconds(ttl, "ttl")
        if id is not None:
            _validate.element_id(id)
        return self._dumps(element, None)  # no size limit: it keeps the bytes in this process

    def _decode(self, payload: Any) -> Any:
        """The element filed as ``payload`` (``None``: nothing there), a new object at every read."""
        assert self._codec is not None
        return None if payload is None else self._codec.loads(payload)

    def _decode_all(self, payloads: list[Any]) -> list[Any]:
        assert self._codec is not None
        loads = self._codec.loads
        return [None if payload is None else loads(payload) for payload in payloads]

    # -- ReDe verbs ------------------------------------------------------------------------------

    async def push(
        self, name: str, element: Any, *, ttl: Seconds, id: str | None = None, replace: bool = False
    ) -> str:
        await anyio.lowlevel.checkpoint()
        _validate.replace(replace, id)
        if self._codec is not None:
            _validate.element_id(name, "name")
            element = self._encode(element, ttl, id)
        d = self._get_or_create(name)
        before = d.next_due()
        if replace and id is not None and id in d:
            _validate.seconds(ttl, "ttl")  # before anything changes
            d.pull(id)
        id = d.push(element, ttl=ttl, id=id)
        self._notify_if_sooner(name, d, before)
        return id

    async def push_many(self, name: str, items: Iterable[tuple[Any, Seconds, str | None]]) -> list[str]:
        """Without a serializer, the template's checks are the in-process dehydrator's own
        (``Dehydrator.push_many`` checks every item first, as the template does): made once."""
        if self._codec is not None:
            return await super().push_many(name, items)
        await anyio.lowlevel.checkpoint()
        d = self._get_or_create(name)
        before = d.next_due()
        ids = d.push_many(items)  # every ttl counted from one reading of the clock, as rearm's
        self._notify_if_sooner(name, d, before)
        return ids

    async def _push_many(
        self, name: str, batch: list[tuple[Any, float, str | None]], asked: float
    ) -> list[str]:
        """With a serializer: the elements encoded, after the template's checks."""
        await anyio.lowlevel.checkpoint()
        items: Iterable[tuple[Any, Seconds, str | None]] = batch
        if self._codec is not None:
            dumps = self._dumps  # no size limit: it keeps the bytes in this process
            items = [(dumps(element, None), ttl, id) for element, ttl, id in batch]
        d = self._get_or_create(name)
        before = d.next_due()
        ids = d.push_many(items)  # every ttl counted from one reading of the clock, as replace_if's
        self._notify_if_sooner(name, d, before)
        return ids

    async def pull(self, name: str, id: str) -> Any:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.pull(id) if self._codec is None else self._decode(d.pull(id))

    async def poll(self, name: str, *, limit: int | None = None) -> list[Any]:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.poll(limit=limit) if self._codec is None else self._decode_all(d.poll(limit=limit))

    async def xpoll(self, name: str, *, limit: int | None = None) -> list[str]:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.xpoll(limit=limit)

    async def xack(
        self, name: str, *ids: str, attempt: int | None = None, token: int | None = None
    ) -> list[Any]:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        out = d.xack(*ids, attempt=attempt, token=token)
        return out if self._codec is None else self._decode_all(out)

    async def look(self, name: str, id: str) -> Any:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.look(id) if self._codec is None else self._decode(d.look(id))

    async def _look_many(self, name: str, ids: list[str]) -> list[Any]:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        out = [d.look(id) for id in ids]
        return out if self._codec is None else self._decode_all(out)

    async def ttn(self, name: str) -> float | None:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.ttn()

    async def update(self, name: str, id: str, element: Any, *, token: int | None = None) -> Any:
        await anyio.lowlevel.checkpoint()
        d = self._get_or_create(name)
        if self._codec is None:
            return d.update(id, element, token=token)
        _validate.element_id(id)
        _validate.token(token)
        return self._decode(d.update(id, self._dumps(element, None), token=token))

    # -- revisions: compare-and-set ---------------------------------------------------------------
    # Each verb is one call into the dehydrator with no checkpoint after the first: the
    # comparison and the write are one step, which the scheduling layer's rules rest on.

    async def read(self, name: str, id: str) -> tuple[Any, ElementInfo] | None:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        found = d.read(id)
        if found is None or self._codec is None:
            return found
        return self._decode(found[0]), found[1]

    async def replace_if(self, name: str, items: Iterable[tuple[str, int, Any, Seconds]]) -> list[int | None]:
        # Its own, as ack's: the in-process dehydrator checks every item (with the same
        # _validate functions) before it files any, and a run's end comes through here.
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        if self._codec is not None:
            dumps = self._dumps
            checked = _validate.conditional_replaces(items)
            items = [(id, revision, dumps(element, None), ttl) for id, revision, element, ttl in checked]
        before = d.next_due()
        done = d.replace_if(items)  # (it checks every item before it files any)
        self._notify_if_sooner(name, d, before)
        return done

    async def _replace_if(
        self, name: str, batch: list[tuple[str, int, Any, float]], asked: float
    ) -> list[int | None]:
        return await self.replace_if(name, batch)

    async def update_if(self, name: str, id: str, revision: int, element: Any) -> int | None:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        _validate.element_id(id)
        _validate.revision(revision)
        if self._codec is not None:
            element = self._dumps(element, None)
        return d.update_if(id, revision, element)

    async def pull_if(self, name: str, id: str, revision: int) -> bool:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.pull_if(id, revision)

    # -- leases ----------------------------------------------------------------------------------

    async def _claim(self, name: str, lease: float, limit: int | None, ahead: float) -> list[Claim]:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        claims = d.claim(lease=lease, limit=limit, ahead=ahead)
        if self._codec is None:
            return claims
        loads = self._codec.loads
        out: list[Claim] = []
        for c in claims:
            element = loads(c.element)
            out.append(
                new_claim(c.id, element, c.attempt, c.lease_until, c.token, c.due, c.claimed_at, c.revision)
            )
        return out

    async def ack(self, name: str, claims: Iterable[tuple[str, int]]) -> list[bool]:
        """The template's checks are the in-process dehydrator's own here (``Dehydrator.ack_many``
        checks the pairs with ``_validate.acks``, as the template does): made once, not twice,
        on the path of every delivery."""
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.ack_many(claims)

    async def _ack(self, name: str, pairs: list[tuple[str, int]]) -> list[bool]:
        return await self.ack(name, pairs)

    async def reschedule(
        self, name: str, id: str, *, ttl: Seconds, attempt: int | None = None, token: int | None = None
    ) -> bool:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        before = d.next_due()
        result = d.reschedule(id, ttl=ttl, attempt=attempt, token=token)
        self._notify_if_sooner(name, d, before)
        return result

    async def _release(
        self, name: str, batch: list[tuple[str, int, float]], *, hand_back: bool
    ) -> list[bool]:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        before = d.next_due()
        if hand_back:
            done = [d.hand_back(id, token=token, ttl=ttl) for id, token, ttl in batch]
        else:
            done = [d.reschedule(id, ttl=ttl, token=token) for id, token, ttl in batch]
        self._notify_if_sooner(name, d, before)
        return done

    async def extend(self, name: str, id: str, *, lease: Seconds, token: int) -> float | None:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        before = d.next_due()
        result = d.extend(id, lease=lease, token=token)
        self._notify_if_sooner(name, d, before)
        return result

    async def info(self, name: str, id: str) -> ElementInfo | None:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.info(id)

    # -- inspection and waiting ------------------------------------------------------------------

    async def names(self) -> list[str]:
        await anyio.lowlevel.checkpoint()
        if not self._open:
            raise self._not_open()
        return sorted(name for name, d in self._dehydrators.items() if len(d))

    async def size(self, name: str) -> int:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return len(d)

    async def summary(self, name: str) -> Summary:
        await anyio.lowlevel.checkpoint()
        return self._get(name).summary()

    async def ids(self, name: str, *, limit: int | None = None) -> list[str]:
        await anyio.lowlevel.checkpoint()
        d = self._get(name)
        return d.ids(limit=limit)

    # -- workers ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._open:
            raise self._not_open()

    async def heartbeat(self, worker: str, data: Mapping[str, Any], *, ttl: Seconds) -> None:
        await anyio.lowlevel.checkpoint()
        worker = _workers.check_worker(worker)
        text, seconds = _workers.worker_data(data), _workers.worker_ttl(ttl)
        self._check_open()
        now = self.clock()
        self._workers[worker] = (text, now, now + seconds)
        for id, (_, _, until) in list(self._workers.items()):
            if _workers.forgotten(until, now):
                del self._workers[id]

    async def deregister_worker(self, worker: str) -> bool:
        await anyio.lowlevel.checkpoint()
        worker = _workers.check_worker(worker)
        self._check_open()
        return self._workers.pop(worker, None) is not None

    async def workers(self) -> list[WorkerRecord]:
        await anyio.lowlevel.checkpoint()
        self._check_open()
        now = self.clock()
        return [
            _workers.record(id, text, seen, expires, now)
            for id, (text, seen, expires) in sorted(self._workers.items())
            if not _workers.forgotten(expires, now)
        ]

    # -- limits ----------------------------------------------------------------------------------
    # Each verb is one synchronous step after its checkpoint: atomic, as every verb here.

    def _limit_state(self, limit: str, key: str, holder: str | None, spec: LimitSpec) -> KeyState:
        self._check_open()
        _limits.check_names(limit, key, holder)
        _limits.check_spec(spec)
        entry = self._limits.get((limit, key))
        return KeyState() if entry is None else entry[0]

    def _limit_keep(self, limit: str, key: str, state: KeyState, spec: LimitSpec, now: float) -> None:
        """File the state back, or delete it if idle; every 1024 steps, sweep the keys nobody
        touched since they went idle (a lease or a window that ran out with no step after it),
        so that an idle key costs nothing for long."""
        if state.idle():
            self._limits.pop((limit, key), None)
        else:
            self._limits[limit, key] = (state, spec.window, spec.horizon)
        self._limit_steps += 1
        if self._limit_steps % 1024 == 0:
            for at, (other, window, horizon) in list(self._limits.items()):
                other.prune(now, window)
                for waiter in [w for w in other.waiters.values() if w.until + horizon <= now]:
                    del other.waiters[waiter.name, waiter.id]
                if other.idle():
                    del self._limits[at]

    async def limit_acquire(
        self,
        limit: str,
        key: str,
        holder: str,
        spec: LimitSpec,
        *,
        waiter: tuple[str, str, int] | None = None,
    ) -> LimitAnswer:
        await anyio.lowlevel.checkpoint()
        state = self._limit_state(limit, key, holder, spec)
        waiter = _limits.check_waiter(waiter)
        now = self.clock()
        answer = state.acquire(now, holder, spec, waiter)
        self._limit_keep(limit, key, state, spec, now)
        return answer

    async def limit_park(
        self, limit: str, key: str, spec: LimitSpec, waiters: Sequence[tuple[str, str, int]]
    ) -> LimitAnswer:
        await anyio.lowlevel.checkpoint()
        state = self._limit_state(limit, key, None, spec)
        checked = _limits.check_waiters(waiters)
        now = self.clock()
        answer = state.park(now, spec, checked)
        self._limit_keep(limit, key, state, spec, now)
        return answer

    async def limit_renew(self, limit: str, key: str, holder: str, spec: LimitSpec) -> bool:
        await anyio.lowlevel.checkpoint()
        state = self._limit_state(limit, key, holder, spec)
        return state.renew(self.clock(), holder, spec)

    async def limit_release(self, limit: str, key: str, holder: str, spec: LimitSpec) -> LimitAnswer:
        await anyio.lowlevel.checkpoint()
        state = self._limit_state(limit, key, holder, spec)
        now = self.clock()
        answer = state.release(now, holder, spec)
        self._limit_keep(limit, key, state, spec, now)
        return answer

    async def limits(self, limit: str | None = None) -> list[LimitInfo]:
        await anyio.lowlevel.checkpoint()
        self._check_open()
        if limit is not None:
            _limits.check_names(limit, "-")
        now = self.clock()
        out = []
        for (name, key), (state, window, _) in sorted(self._limits.items(), key=lambda item: item[0]):
            if limit is None or name == limit:
                state.prune(now, window)
                if state.idle():
                    del self._limits[name, key]
                else:
                    out.append(state.info(name, key))
        return out

    @asynccontextmanager
    async def _subscribe(self, name: str) -> AsyncIterator[Subscription]:
        subscription = EventSubscription(self.clock)
        subscribers = self._subscribers.setdefault(name, set())
        subscribers.add(subscription)
        try:
            yield subscription
        finally:
            subscribers.discard(subscription)
            if not subscribers:
                self._subscribers.pop(name, None)

    def subscribe(self, name: str) -> AbstractAsyncContextManager[Subscription]:
        self._get(name)
        return self._subscribe(name)
