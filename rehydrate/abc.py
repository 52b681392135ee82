"""The contracts every store (and clock) implements.

A *store* holds many named dehydrators, like keys in Redis, and offers the
:class:`~rehydrate.Dehydrator` verbs with the dehydrator's name first. The memory, SQLite and Redis
stores implement exactly this contract and pass one contract test suite
(``rehydrate.testing.contract``, which ``tests/stores/test_contract.py`` runs against each); a new
store should too, with one fixture (see that module). What a store offers beyond the verbs every
store has (``claim(ahead=)``, the worker registry, a schema to migrate, limits) it declares in
:attr:`Store.capabilities`, which callers read instead of probing the store. Recurring schedules
need nothing more than the verbs every store has: the scheduling layer
(``rehydrate._occurrences``, ``rehydrate._admin``) writes them with the compare-and-set verbs
below, so any store that passes the contract suite serves them.

Rules that hold for every method unless its docstring says otherwise:

* **Atomicity.** Each call is atomic with respect to every other call on the same dehydrator, from
  any process sharing the store: two concurrent ``claim`` calls never return the same element.
* **Ordering.** Due elements come out in due order; elements due at the same instant come out in the
  order they were pushed (or claimed, rescheduled or extended: each of those files the element anew).
* **Time.** Durations (``ttl``, ``lease``) are relative seconds (``float``, ``int`` or
  :class:`datetime.timedelta`), from 0 to ``MAX_SECONDS`` (10**9 s, about 31.7 years) in every
  store; longer is an ``InvalidArgumentError`` that names the maximum. Absolute times
  (``Claim.due``, ``Claim.lease_until``, ``ElementInfo.due``) are in the store's clock
  (:attr:`Store.clock`): monotonic for the memory store, Unix time for SQLite, the Redis server's
  ``TIME`` for Redis. Compare them with each other, not with another clock.
* **Leases and fencing.** ``claim`` files each element anew at ``now + lease`` and adds one to its
  attempt; until then nobody else can claim it, after that it is due again (redelivery).
  :meth:`Store.hand_back` takes that one back (a claim returned unrun is no attempt). Each
  claim carries a ``token``, never reused in the store. Calls that take ``token`` do nothing unless the
  element is still under that very claim: a worker whose lease ran out cannot ack, extend or move
  a newer claim, nor a new element pushed under the same id. (``attempt`` fencing, as in ReDe's
  XACK, compares only the attempt count, which starts again at 1 for a new element.)
* **Revisions and compare-and-set.** Every element carries a revision (``ElementInfo.revision``,
  ``Claim.revision``): a number that every write of the element changes (``push``, a replace,
  ``update``, ``claim``, ``reschedule``, ``hand_back``, the conditional writes below)
  and that a lease's renewal (``extend``) keeps; never given twice in a store, so a new element
  pushed under a reused id never has an old element's revision. :meth:`Store.read` returns an
  element with its revision in one atomic read, and :meth:`Store.replace_if`,
  :meth:`Store.update_if` and :meth:`Store.pull_if` write only if the revision is still the one
  given, the comparison and the write one atomic step: the primitive the scheduling layer
  builds its rules on (a change made while an occurrence runs, a removal during a run, the
  no-overlap rule, the fencing of a stale worker), once, above every store. Where one store
  step must stay atomic, and for which guarantee:

  - ``replace_if``'s comparison and write are one step, per item: a run ends by filing its
    schedule's next occurrence on the revision its claim read, so nobody can claim the id
    between the end and the filing (occurrences never overlap), and a worker whose lease ran
    out and whose element was claimed again (a new revision) never files a second next one.
  - ``update_if``'s comparison and write are one step: a change written into the element a
    worker holds (a pause, a new element, a removal during its run) lands only on the state it
    was decided on, so it neither overwrites a change made meanwhile nor lands on an
    occurrence claimed since the read (which would then run beside the next one).
  - ``pull_if``'s comparison and removal are one step: a schedule removed because nobody held
    it is never pulled from under a worker that claimed it since the read.
  - ``claim`` changes the revision in the step that takes the element: what makes the three
    above fence a claim made between a read and a write.
  - ``extend`` keeps the revision: a worker's lease renewals never fence out its own run's end.
* **Ids and names** are non-empty ``str`` of valid Unicode text (encodable as UTF-8: no lone
  surrogates); anything else is an ``InvalidArgumentError`` in every verb.
* **Lifecycle.** A store is used between :meth:`Store.open` and :meth:`Store.aclose` (``async with
  store``); every verb outside raises :class:`~rehydrate.errors.StoreNotOpenError`, the memory
  store's included. ``open`` and ``aclose`` are idempotent, and a closed store may be opened again.
* **Errors.** One class per condition, the same from every store. Bad arguments raise
  :class:`~rehydrate.errors.InvalidArgumentError` (also a ``ValueError``/``TypeError``) before
  anything changes; ``push(replace=True)`` without an ``id`` is one, and so is an element larger,
  serialized, than the store takes (:class:`~rehydrate.errors.ElementTooLargeError`, naming the
  limit; a batch with one is refused whole; ``docs/stores.md`` lists each store's). An element written by
  another serializer than the store's raises :class:`~rehydrate.errors.SerializerMismatchError`
  and is left as it was. An unknown id is not an error except for
  ``update`` (:class:`~rehydrate.errors.UnknownIdError`). ``push`` of an id that is present raises
  :class:`~rehydrate.errors.DuplicateIdError`. A store that cannot reach its backend raises
  :class:`~rehydrate.errors.StoreUnavailableError` after its own retries; the call may or may not
  have taken effect (it is safe to retry: every verb is idempotent or fenced). ``open`` raises it
  too, at once, for a backend that is not there (``create=False`` and no database, a wrong URL);
  :class:`~rehydrate.errors.StoreRefusedError`, a subclass, where the backend answered and refused
  (a wrong password, an unknown database or role), which waiting will not change.
* **Cancellation.** A call cancelled while it waits on its backend may or may not have taken
  effect (the same as a lost connection); retrying it is safe.
* **Workers.** :meth:`Store.heartbeat`, :meth:`Store.deregister_worker` and :meth:`Store.workers`
  keep a small registry of running workers beside the dehydrators (not in any of them), so any
  process can see which workers are alive. Its data is JSON whatever the store's serializer.
* **Elements** are what the store's serializer accepts (any object for the memory store without
  one, JSON data by default for SQLite, Redis and PostgreSQL), and come back as it reads them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, runtime_checkable

import attrs

from rehydrate._core import _validate
from rehydrate._core._limits import LimitAnswer, LimitInfo, LimitSpec, Wake
from rehydrate._core._records import Claim, ElementInfo, Summary, WorkerRecord
from rehydrate._core._validate import Seconds

if TYPE_CHECKING:
    import anyio

__all__ = [
    "Capabilities",
    "Clock",
    "LimitAnswer",
    "LimitInfo",
    "LimitSpec",
    "Serializer",
    "Store",
    "Subscription",
    "Wake",
]


@runtime_checkable
class Clock(Protocol):
    """Where a store and a scheduler read the time and wait for a moment of it.

    Waits are given as deadlines in the clock's own time, and the clock knows how to wait for
    them (trio's ``Clock.deadline_to_sleep_time`` is the model): one whose seconds are real
    seconds (:class:`~rehydrate._clock.SystemClock`, ``WallClock``, the Redis server's clock)
    hands the deadline to the event loop; ``rehydrate.testing.FakeClock`` stands still until
    advanced and wakes the waits it passes. Code that waits never asks which kind it holds.
    ``rehydrate._clock.ClockBase`` derives the last three verbs from the first two.

    Optionally, ``wall() -> float`` says what Unix time it is by this clock: the scheduler maps
    wall times (``defer(at=...)``, cron, ``Every(start=...)``) onto the clock through it, so a
    ``FakeClock(start=datetime)`` moves them too. Without it, ``time.time()`` is assumed.
    """

    def __call__(self) -> float:
        """The current time in seconds. Never goes backwards."""
        ...

    def move_on_at(self, deadline: float) -> AbstractContextManager[anyio.CancelScope]:
        """A cancel scope that is cancelled once this clock reads ``deadline`` (at once if it does).

        ``with clock.move_on_at(deadline): await something()`` bounds any wait by this clock.
        """
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once this clock reads ``deadline``."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock."""
        ...

    async def wait(self, event: anyio.Event, deadline: float | None) -> bool:
        """Wait for ``event``, or until this clock reads ``deadline`` (``None``: no deadline).

        ``True`` if the event is set when it returns.
        """
        ...


@runtime_checkable
class Serializer(Protocol):
    """Turns elements into bytes and back, for stores that keep bytes (SQLite, Redis)."""

    #: A short name, stored beside the payload so a mismatched reader fails loudly.
    name: str

    def dumps(self, element: Any) -> bytes:
        """Serialize ``element``; raise ``TypeError`` or ``ValueError`` if it cannot be."""
        ...

    def loads(self, data: bytes) -> Any:
        """The inverse of :meth:`dumps`."""
        ...


class Subscription(ABC):
    """Tells a sleeping loop that something in one dehydrator may have become due sooner.

    Obtained from :meth:`Store.subscribe` *before* reading ``ttn``, so nothing that happens between
    reading ``ttn`` and going to sleep is missed: the notification is remembered until the next
    :meth:`wait`.
    """

    @abstractmethod
    async def wait(self, timeout: float | None) -> bool:
        """Sleep until notified or until ``timeout`` seconds of the store's clock pass.

        Returns ``True`` when a notification arrived (possibly before the call: notifications since
        the last ``wait`` are remembered, and one ``wait`` consumes them all), ``False`` on timeout.
        ``timeout=None`` waits for a notification only. Spurious wake-ups are allowed; missed ones
        are not: every push, reschedule or extend that makes an element due earlier than every
        other element of the dehydrator notifies.
        """


@attrs.frozen
class Capabilities:
    """What a store offers beyond the verbs every store has, declared by its class
    (:attr:`Store.capabilities`) so that nobody has to find out by trying.

    The scheduler reads it (a handler's ``claim_ahead`` on a store without ``claim_ahead`` is
    refused when registered; heartbeats are not sent to a store without ``workers``), and so does
    the contract suite (``rehydrate.testing.contract``), which skips the tests of what a store
    does not declare. Declare only what the store implements as its docstring in :class:`Store`
    says: a capability declared is a promise the suite holds the store to.
    """

    #: ``claim(ahead=...)`` takes elements that fall due within ``ahead`` (``claim_ahead``).
    claim_ahead: bool = False
    #: :meth:`Store.heartbeat`, :meth:`Store.deregister_worker` and :meth:`Store.workers` are
    #: implemented: the worker registry (``rehydrate workers``, the dashboard's workers).
    workers: bool = False
    #: :meth:`Store.limit_acquire`, :meth:`Store.limit_renew`, :meth:`Store.limit_release` and
    #: :meth:`Store.limits` are implemented: global concurrency and rate limits
    #: (``rehydrate.Concurrency``, ``rehydrate.Rate``, ``Scheduler.handler(limits=...)``).
    limits: bool = False
    #: :meth:`Store.migrate` and :meth:`Store.check_schema` are implemented: the store keeps a
    #: schema that can be created (or upgraded) ahead of use, and checked (``rehydrate migrate``).
    #: A store without one creates what it needs as it goes: nothing to migrate.
    migrate: bool = False
    #: Every call is served in this process, with no round trip (to a server or a thread): the
    #: scheduler then files each ``defer`` at once instead of gathering concurrent ones into one
    #: :meth:`Store.push_many`, which would only add a wait; and no other process reaches it
    #: (``rehydrate worker --processes`` refuses it).
    in_process: bool = False


class Store(ABC):
    """Many named dehydrators behind one async API. See the module docstring for the shared rules.

    Use a store as an async context manager (``async with store:``), or call :meth:`open` and
    :meth:`aclose`. Names are non-empty strings. Stores built on ``rehydrate.stores._base``
    share its not-open error, serializer handling and URL-option parser.
    """

    #: The clock that absolute times from this store are in, and that subscriptions sleep on.
    clock: Clock
    #: What this store offers beyond the verbs every store has (by default, nothing): a class
    #: attribute, declared, never probed. The stores of this package declare everything.
    capabilities: ClassVar[Capabilities] = Capabilities()

    # -- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Connect to the backend. Idempotent. Called by ``async with``.

        Until it is called, and after :meth:`aclose`, every verb raises
        :class:`~rehydrate.errors.StoreNotOpenError`.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections and threads. Idempotent. Elements stay (except in memory)."""

    # -- ReDe verbs ----------------------------------------------------------------------------

    @abstractmethod
    async def push(
        self, name: str, element: Any, *, ttl: Seconds, id: str | None = None, replace: bool = False
    ) -> str:
        """Dehydrate ``element`` for ``ttl`` seconds (PUSH/GIDPUSH) and return its id.

        Without ``id`` a unique one is generated. Raises ``DuplicateIdError`` if ``id`` is present,
        unless ``replace`` (which needs an ``id``): then the element under ``id`` is removed and
        this one filed in its place, in one atomic step (a new element: attempt 0, unclaimed, due
        in ``ttl``; a worker still running the old one is fenced out). Durable stores have the
        element on disk (or
        acknowledged by the server) when this returns.
        """

    @abstractmethod
    async def push_many(self, name: str, items: Iterable[tuple[Any, Seconds, str | None]]) -> list[str]:
        """Push ``(element, ttl, id or None)`` items all at once and return their ids in order.

        All or nothing: if any id is present (or repeats within the batch) ``DuplicateIdError`` is
        raised and nothing is pushed. Costs one round trip per batch, not per item. A store may cap
        the size of one batch (Redis: 10,000) and raise ``InvalidArgumentError`` beyond it. The
        ttls may count from the call rather than from the write (SQLite and Redis do: encoding and
        sending a thousand elements takes milliseconds, which would make each of them that much
        later than its caller asked).
        """

    @abstractmethod
    async def pull(self, name: str, id: str) -> Any:
        """Remove and return the element, due or not, claimed or not (PULL); ``None`` if unknown."""

    @abstractmethod
    async def poll(self, name: str, *, limit: int | None = None) -> list[Any]:
        """Remove and return the due elements in due order, at most ``limit`` (POLL).

        Due includes claimed elements whose lease has run out.
        """

    @abstractmethod
    async def xpoll(self, name: str, *, limit: int | None = None) -> list[str]:
        """The ids of the due elements in due order, at most ``limit``, none removed (XPOLL)."""

    @abstractmethod
    async def xack(
        self, name: str, *ids: str, attempt: int | None = None, token: int | None = None
    ) -> list[Any]:
        """Remove and return each element that is due or claimed; ``None`` in its place otherwise (XACK).

        With ``attempt``, only elements whose attempt equals it are removed; with ``token``, only
        those still under that claim (fencing).
        """

    @abstractmethod
    async def look(self, name: str, id: str) -> Any:
        """The element, not removed (LOOK); ``None`` if unknown."""

    async def look_many(self, name: str, ids: Iterable[str]) -> list[Any]:
        """The elements under ``ids``, none removed: per id, in the order given, its element or
        ``None`` if unknown (a batch :meth:`look`; an id given twice is read twice).

        For reading many elements at once (``Scheduler.schedules``, dead letters): one round
        trip per batch instead of one per id. Every id is checked before anything is read: ``ids``
        must be an iterable of ids (a ``str`` is an ``InvalidTypeError``, not a list of
        characters), and a bad one is an ``InvalidArgumentError`` naming its index. An element
        written by another serializer raises ``SerializerMismatchError``, as :meth:`look` does.
        A store may read a large batch in parts, so it is not a snapshot of a dehydrator that
        changes meanwhile. The default implementation calls :meth:`look` per id (:meth:`ttn` for
        none, so that a closed store raises as for any batch); the stores of this package read a
        batch in one round trip (one script, one query).
        """
        _validate.element_id(name, "name")
        checked = _validate.id_list(ids)
        if not checked:
            await self.ttn(name)
        return [await self.look(name, id) for id in checked]

    @abstractmethod
    async def ttn(self, name: str) -> float | None:
        """Seconds until the next element is due (TTN); ``0.0`` if one is due; ``None`` if empty."""

    async def ttn_after_claim(self, name: str) -> float | None:
        """:meth:`ttn`, for a claim loop: asked right after a :meth:`claim` of ``name`` that took
        fewer elements than its limit, by a caller subscribed to ``name`` (:meth:`subscribe`).

        A store whose claim already learned the answer may give it without asking the server
        again (Redis: the claim's script returns it; SQLite: the claim's transaction reads it;
        PostgreSQL: the claim's statement, when it took nothing), as a due time counted down on
        :attr:`clock`; what became due sooner in between notified the subscription, so a loop
        that sleeps this long or until notified misses nothing. By default, :meth:`ttn`.
        """
        return await self.ttn(name)

    @abstractmethod
    async def update(self, name: str, id: str, element: Any, *, token: int | None = None) -> Any:
        """Replace the element, keeping its due time, attempt and claim; return the old one (UPDATE).

        Raises ``UnknownIdError`` if the id is unknown. With ``token``, fenced like :meth:`ack`:
        only while the element is still under that claim, else ``UnknownIdError`` and nothing
        done. A worker that rewrites the element it holds (a schedule recording which occurrence
        it runs) so never overwrites what someone filed under that id meanwhile (a replace, a
        pause).
        """

    # -- revisions: compare-and-set -------------------------------------------------------------

    @abstractmethod
    async def read(self, name: str, id: str) -> tuple[Any, ElementInfo] | None:
        """The element and what the store knows of it (its revision included), in one atomic
        read (:meth:`look` and :meth:`info` together); ``None`` if ``id`` is unknown.

        Raises ``SerializerMismatchError`` for an element written by another serializer, as
        :meth:`look` does.
        """

    @abstractmethod
    async def replace_if(self, name: str, items: Iterable[tuple[str, int, Any, Seconds]]) -> list[int | None]:
        """For each ``(id, revision, element, ttl)``: if the element under ``id`` still has
        ``revision``, file ``element`` in its place anew (unclaimed, attempt 0, due at
        ``now + ttl``, a new revision), and give that new revision; ``None`` in its place (nothing
        done) if ``id`` is unknown or its revision is another.

        The comparison and the write are one atomic step per item. A claim changes the revision,
        so a ``replace_if`` with a claim's :attr:`Claim.revision` is a fenced end of that claim
        that files what comes next (nobody can claim the id between the two), and fails if
        anyone wrote the element since the claim (an ``update``, a replace, a pull, a new claim
        after the lease ran out); the claim's own lease renewals do not count. One round trip
        per batch (a store may split a large one into atomic parts); "now" may be the moment of
        the call, as for :meth:`push_many`. Every item is checked before anything is done: an id
        given twice, a revision that is not a non-negative ``int`` or a bad ttl is an
        ``InvalidArgumentError``; an element the serializer refuses or that is too large raises
        as :meth:`push` does, and nothing is filed.
        """

    @abstractmethod
    async def update_if(self, name: str, id: str, revision: int, element: Any) -> int | None:
        """If the element under ``id`` still has ``revision``, replace it with ``element``,
        keeping its due time, attempt and claim (as :meth:`update`), and give the new revision;
        ``None`` (nothing done) if ``id`` is unknown or its revision is another. Atomic."""

    @abstractmethod
    async def pull_if(self, name: str, id: str, revision: int) -> bool:
        """Remove the element under ``id`` if it still has ``revision``; whether it did.
        Atomic: claimed or not, due or not, as :meth:`pull`."""

    # -- leases --------------------------------------------------------------------------------

    @abstractmethod
    async def claim(
        self, name: str, *, lease: Seconds, limit: int | None = None, ahead: Seconds = 0.0
    ) -> list[Claim]:
        """Atomically take up to ``limit`` due elements for ``lease`` seconds, in due order.

        Each is filed anew at ``now + lease`` with its attempt increased by one, and comes back
        (is due again) if the lease runs out before ``ack``/``xack``, ``reschedule`` or ``extend``.
        Stores bound ``limit`` internally (at most a few thousand per round trip) so one call never
        blocks the backend for long; loop to take more.

        ``ahead`` (seconds, default 0) also takes the elements that fall due within that long
        after now, in the same due order (their :attr:`Claim.due` is still to come, and
        ``claimed_at`` is before it): for a claim loop that holds them and hands each over at its
        due time, so that a burst's store work is done before the burst (``Scheduler.handler``'s
        ``claim_ahead``). Their leases run from now, as any claim's. A claimed element is taken
        only once its lease has run out, never ahead of it: its worker may still be running it.
        (So the TTN after such a claim may be within ``ahead``: a lease, to wait for in full.) A
        store that takes it declares ``claim_ahead`` in :attr:`capabilities`; one that cannot
        take elements early does not (and need not accept the argument): the scheduler then
        refuses ``claim_ahead`` with a clear error instead of delivering early.
        """

    @abstractmethod
    async def ack(self, name: str, claims: Iterable[tuple[str, int]]) -> list[bool]:
        """Fenced batch acknowledgement: remove each ``(id, token)`` still under that claim.

        Returns, per pair, whether it was removed. The element need not be due (an ack of a
        claim whose lease is still running is the normal case); an ack after the lease ran out
        still succeeds as long as nobody has claimed the element again. One round trip per batch.
        """

    @abstractmethod
    async def reschedule(
        self, name: str, id: str, *, ttl: Seconds, attempt: int | None = None, token: int | None = None
    ) -> bool:
        """File the element anew at ``now + ttl`` and release its claim (a delayed retry).

        The attempt count is kept. ``False`` (nothing done) if unknown or fenced out by ``attempt``
        or ``token``.
        """

    async def reschedule_many(self, name: str, items: Iterable[tuple[str, int, Seconds]]) -> list[bool]:
        """Fenced batch :meth:`reschedule`: for each ``(id, token, ttl)``, file the element anew
        at ``now + ttl`` and release its claim, keeping its attempt count, if it is still under
        that claim's token. Returns, per item, whether it did.

        It is how a scheduler sends the delayed retries of many handlers that failed at once (a
        downstream outage): one round trip for all of them instead of one each. Each item is
        exactly ``reschedule(name, id, ttl=ttl, token=token)`` and atomic; a store may split a
        large batch into atomic parts. Every item is checked before anything is done: an id given
        twice, or an item without a token, is an ``InvalidArgumentError``. The default
        implementation calls :meth:`reschedule` per item (:meth:`ttn` for none, so that a closed
        store raises as for any batch); the stores of this package do it in one round trip (one
        script, one transaction or one statement) per batch.
        """
        _validate.element_id(name, "name")
        batch = _validate.reschedules(items)
        if not batch:
            await self.ttn(name)
        return [await self.reschedule(name, id, ttl=ttl, token=token) for id, token, ttl in batch]

    async def hand_back(self, name: str, items: Iterable[tuple[str, int, Seconds]]) -> list[bool]:
        """Give claims back unrun: for each ``(id, token, ttl)`` still claimed under ``token``,
        file the element anew at ``now + ttl``, unclaimed, and undo that claim's attempt (its
        attempt is what it was before the claim). Returns, per item, whether it did.

        It is how a scheduler returns what it claimed and will not finish: a handler cancelled by
        a graceful stop, claims taken ahead (``claim_ahead``) or buffered for a channel that
        nobody started. Nothing failed, so nothing counts against ``Retry(attempts=...)``; a
        worker that dies instead leaves its claim to run out, which does count (the store cannot
        tell a dead worker from a failed run). Fenced like :meth:`ack`: ``False`` (nothing done)
        for an element gone, not claimed (a second hand-back under the same token included), or
        under another claim. Each item is atomic, one round trip per batch (a store may split a
        large batch into atomic parts); every item is checked first, as by
        :meth:`reschedule_many`. This default calls :meth:`reschedule_many`, which keeps the
        attempt and does not check that the element is claimed; the stores of this package
        implement it.
        """
        _validate.element_id(name, "name")
        return await self.reschedule_many(name, _validate.reschedules(items, "hand_back"))

    @abstractmethod
    async def extend(self, name: str, id: str, *, lease: Seconds, token: int) -> float | None:
        """Keep a running claim alive until ``now + lease``; return the new ``lease_until``.

        ``None`` (nothing done) if the element is gone, not claimed, or no longer under claim ``token``.
        """

    @abstractmethod
    async def info(self, name: str, id: str) -> ElementInfo | None:
        """What the store knows of the element; ``None`` if unknown."""

    # -- inspection and waiting ----------------------------------------------------------------

    @abstractmethod
    async def names(self) -> list[str]:
        """The names of the dehydrators that hold at least one element, sorted."""

    @abstractmethod
    async def size(self, name: str) -> int:
        """How many elements the dehydrator holds (due, waiting and claimed)."""

    async def summary(self, name: str) -> Summary:
        """Counts of the dehydrator at a glance (``rehydrate stats``). Not a snapshot, not a hot path.

        This generic version asks for every element's :meth:`info`; stores override it with one query.
        """
        size, ttn, ids = await self.size(name), await self.ttn(name), await self.ids(name)
        now = self.clock()
        due = claimed = 0
        for id in ids:
            info = await self.info(name, id)
            if info is not None:
                due += info.due <= now
                claimed += info.claimed
        return Summary(size=size, due=due, claimed=claimed, ttn=ttn)

    @abstractmethod
    def subscribe(self, name: str) -> AbstractAsyncContextManager[Subscription]:
        """Listen for "something may be due sooner" in ``name``; see :class:`Subscription`.

        Works across processes for shared stores (Redis: pub/sub; PostgreSQL: ``NOTIFY``; SQLite:
        a datagram through a socket beside the file).
        """

    @abstractmethod
    async def ids(self, name: str, *, limit: int | None = None) -> list[str]:
        """The ids in the dehydrator, due or not, in due order, at most ``limit``.

        For inspection (listing dead letters, the ``stats`` command): it may cost O(n), and a store
        may read it in pages, so it is not a snapshot of a dehydrator that changes meanwhile.
        """

    # -- workers ---------------------------------------------------------------------------------
    # Not abstract: a store written before these verbs still serves handlers; a scheduler on it
    # logs once that it cannot send heartbeats. Every store of this package implements them and
    # declares ``workers`` in its capabilities.

    async def heartbeat(self, worker: str, data: Mapping[str, Any], *, ttl: Seconds) -> None:
        """Say that ``worker`` is alive, with ``data``, until ``ttl`` seconds from now (store clock).

        An upsert: the first heartbeat registers the worker, each later one replaces its data and
        moves its expiry to ``now + ttl``, even if that is earlier than before. ``data`` is a
        mapping with ``str`` keys and JSON values (a JSON object of at most 64 KiB), stored as
        JSON: ``workers()`` returns it as ``json.loads`` makes it. ``ttl`` must be positive.
        Raises ``InvalidArgumentError`` (or ``InvalidTypeError``) for a bad ``worker`` id,
        ``data`` or ``ttl`` before anything changes. A store may forget here the workers expired
        longer than ``WORKER_KEEP`` (``rehydrate._core._workers``) ago.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement worker heartbeats")

    async def deregister_worker(self, worker: str) -> bool:
        """Forget ``worker`` (it stopped cleanly); ``True`` if it was listed, alive or expired."""
        raise NotImplementedError(f"{type(self).__name__} does not implement worker heartbeats")

    async def workers(self) -> list[WorkerRecord]:
        """The workers that sent a heartbeat, sorted by id, as of one instant of the store's clock.

        A worker is ``alive`` until its last heartbeat's expiry (``now < expires``); after that it
        is listed, not alive, for ``WORKER_KEEP`` (3600) seconds more, then forgotten: a worker
        that died shows as expired for an hour, one that deregistered not at all. ``age`` is the
        seconds since its last heartbeat. Not a hot path: it reads every worker.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement worker heartbeats")

    # -- limits ----------------------------------------------------------------------------------
    # Not abstract: a store without them serves everything but limited handlers (the scheduler
    # refuses ``limits=`` on it when the handler is declared). Every store of this package
    # implements them and declares ``limits`` in its capabilities. The rules (what a key's state
    # is, what each step does to it) are written once in ``rehydrate._core._limits``; a store
    # makes each step atomic.

    async def limit_acquire(
        self,
        limit: str,
        key: str,
        holder: str,
        spec: LimitSpec,
        *,
        waiter: tuple[str, str, int] | None = None,
    ) -> LimitAnswer:
        """Take a start of the limit key ``(limit, key)`` for ``holder``, all or nothing, in one
        atomic step: a concurrency slot held until ``now + spec.lease`` (if ``spec`` has a
        concurrency) and a start recorded in the rate windows (if it has rates).

        Granted (``LimitAnswer.granted``) if every part has room: fewer live holders than the
        concurrency (a lease that ran out is no holder) and, for each rate ``(n, per)``, fewer
        than ``n`` starts in ``(now - per, now]``. A holder that holds a slot already is granted
        again without a new start (its lease renewed): a retried call takes one slot. Refused,
        nothing is taken and ``retry_in`` says when the earliest chance is (the first lease to
        end, every full window sliding). With ``waiter`` ``(dehydrator name, id, attempt)`` (an
        element the caller hands back because the limit is full), the waiter joins the key's
        FIFO (or keeps its place in it) and ``parked_in`` says when to file it due: at the
        earliest chance at the head, further out behind it. A granted waiter leaves the FIFO.
        Every step (granted or not) wakes waiters as ``rehydrate._core._limits`` says, at most as
        many as there is room for: ``wake`` lists the ones to file earlier (fenced by their
        attempt). The limit name, key and holder are non-empty ``str`` of at most 512 UTF-8 bytes;
        anything else is an ``InvalidArgumentError``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement limits")

    async def limit_park(
        self, limit: str, key: str, spec: LimitSpec, waiters: Sequence[tuple[str, str, int]]
    ) -> LimitAnswer:
        """Queue several waiters ``(dehydrator name, id, attempt)`` of the limit key at once, in
        one atomic step, without asking for a slot: the caller was refused lately and parks more
        elements of the key (one step for a batch of claims, not an acquire each). Each joins the
        FIFO in the order given (or keeps its place), filed a horizon out; then the step wakes as
        any step does (with room, the head waiters now, maybe some of these; else the head alone
        at the earliest chance). Never grants: a caller wrong about the key being full costs a
        round trip, never an over-admission. ``parked`` gives each waiter's seconds until it is
        to be filed due, in order; ``retry_in`` the earliest chance (0: there is room now);
        ``wake`` the other waiters to file earlier. An empty list, a waiter given twice or a
        malformed one is an ``InvalidArgumentError``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement limits")

    async def limit_renew(self, limit: str, key: str, holder: str, spec: LimitSpec) -> bool:
        """Keep ``holder``'s slot until ``now + spec.lease``; ``False`` (nothing done) if it
        holds none (released, or its lease ran out: then someone else may hold it)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement limits")

    async def limit_release(self, limit: str, key: str, holder: str, spec: LimitSpec) -> LimitAnswer:
        """Free ``holder``'s slot (``granted``: it held one) and wake waiters for the room made,
        in one atomic step. The starts stay counted: a rate counts starts, not running work.
        A key with no live holder, no start in its windows and no waiter left is deleted."""
        raise NotImplementedError(f"{type(self).__name__} does not implement limits")

    async def limits(self, limit: str | None = None) -> list[LimitInfo]:
        """Every limit key with state (``limit``: only that limit's), sorted by limit and key:
        its live holders, the starts it remembers and how many wait. For views, not a hot path.
        A waiter more than a horizon past its time is forgotten by the next step that walks past
        it (or a periodic sweep): the memory store and Redis count it until then (and list a key
        left with only such waiters), the SQL stores' listing leaves it out already."""
        raise NotImplementedError(f"{type(self).__name__} does not implement limits")

    # -- schema ----------------------------------------------------------------------------------
    # For a store that keeps a schema (SQLite's file, PostgreSQL's tables), declared as
    # ``migrate`` in its capabilities; ``rehydrate migrate`` reads the flag, never probes.

    async def migrate(self) -> int:
        """Create the store's schema, or bring one written by an earlier version to this
        version's, and return its version. Works on an open store or an unopened one (connecting
        just for this); safe to run again, and from several processes at once."""
        raise NotImplementedError(f"{type(self).__name__} keeps no schema: nothing to migrate")

    async def check_schema(self) -> str | None:
        """``None`` if the schema is there at this version's, else what is wrong (one sentence).
        Changes nothing, creates nothing (``rehydrate migrate --check``)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no schema: nothing to check")
