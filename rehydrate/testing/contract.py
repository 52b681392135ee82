"""The store contract's test suite: run it against a store of your own.

Every store of this package passes this one suite (``tests/stores/test_contract.py`` runs it
against each); a store written elsewhere (on DynamoDB, etcd, a table of your own) runs the very
same tests with one fixture, ``harness``, which yields a :class:`Harness`: the store, open, and a
way to move its time forward without sleeping.

.. code-block:: python

    # test_my_store.py
    import pytest
    from rehydrate.testing import FakeClock
    from rehydrate.testing.contract import Harness, StoreContract

    from my_store import MyStore


    class TestMyStore(StoreContract):
        @pytest.fixture
        async def harness(self):
            clock = FakeClock(1000.0)
            async with MyStore(clock=clock) as store:
                yield Harness(
                    store=store,
                    advance=clock.advance,
                    twin=lambda **options: MyStore(clock=clock, **options),
                    shared=False,
                )

A subclass whose name starts with ``Test`` is collected by pytest (the classes here are not);
``harness`` may also be a fixture of the module or of a ``conftest.py``, parametrized over
several stores. The tests are async and marked ``anyio``: they run on the ``anyio_backend``
fixture (asyncio alone unless you override it, e.g. with ``params=["asyncio", "trio"]``). Install
``rehydrate[testing]`` for pytest. The suite is also split by subject (:class:`VerbsContract`,
:class:`LeasesContract`... :class:`StoreContract` is all of them), to run a part.

Tests of what a store need not offer (:class:`~rehydrate.abc.Capabilities`: ``claim(ahead=)``,
the worker registry) are skipped for a store whose ``capabilities`` do not declare
it. Recurring schedules need nothing beyond the verbs every store has: their tests (a run's end,
a change made while it runs, through the scheduling layer's own functions) run on every store.
Those of the serialization rules run for a store with a ``serializer`` attribute (a store
that keeps bytes), those of the size limit for one with a ``max_element_bytes`` attribute that
its ``twin`` takes as a keyword.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, ClassVar, cast

import anyio
import attrs
import pytest

from rehydrate import (
    DuplicateIdError,
    ElementTooLargeError,
    InvalidArgumentError,
    InvalidTypeError,
    SerializerMismatchError,
    StoreNotOpenError,
    Summary,
    UnknownIdError,
)
from rehydrate._admin import change_schedule, remove_schedule
from rehydrate._clock import wall
from rehydrate._core._limits import LimitSpec
from rehydrate._core._records import Claim
from rehydrate._core._validate import MAX_SECONDS
from rehydrate._core._workers import WORKER_KEEP
from rehydrate._occurrences import Occurrences, rearm
from rehydrate._schedules import REMOVED, Occurrence, with_extra, with_paused, without_extra
from rehydrate.abc import Store

__all__ = [
    "BadInputContract",
    "Harness",
    "LeasesContract",
    "LifecycleContract",
    "LimitsContract",
    "RevisionsContract",
    "SerializersContract",
    "StoreContract",
    "SubscriptionsContract",
    "SummaryContract",
    "VerbsContract",
    "WorkersContract",
]


@attrs.define
class Harness:
    """What the ``harness`` fixture yields: a store to test, and how to move its time."""

    #: The store, open; its dehydrators empty (the tests use the names ``jobs``, ``one``, ``two``,
    #: ``many``, ``zero``, ``never-used``), its worker registry too.
    store: Store
    #: Move the store's time forward by this many seconds, without sleeping (a
    #: :class:`~rehydrate.testing.FakeClock`'s ``advance``, or an offset added to a server's time).
    advance: Callable[[float], Any]
    #: Another store on the same backend (file, server and key prefix), not opened, built with
    #: these extra constructor keywords (``serializer=...``, ``max_element_bytes=...``); for a
    #: store in memory, a new one. The lifecycle and serializer rules are checked through it.
    twin: Callable[..., Store] | None = None
    #: Whether ``twin`` sees what ``store`` holds (a file, a server): not so for a memory store,
    #: whose twin is a store of its own, so the tests of two store objects on one backend skip it.
    shared: bool = True


class _Contract:
    """A part of the suite. Not collected where it is defined; a subclass elsewhere is."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
    __test__: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__test__" not in cls.__dict__:
            # (pytest still collects only the classes named Test*, as it always does.)
            cls.__test__ = cls.__module__ != __name__


N = "jobs"

TWIN_NEEDED = "the store's harness must give Harness(twin=...): see rehydrate.testing.contract"


def about(seconds: float) -> float:
    """Equals any float within 10 ms of ``seconds`` (``pytest.approx``, typed as what it stands for)."""
    return cast(float, pytest.approx(seconds, abs=0.01))


async def state(store: Store, name: str = N) -> Any:
    ids = await store.ids(name)
    return (ids, [await store.info(name, id) for id in ids], await store.xpoll(name))


#: A revision no element holds: what a run's end gives for a claim that never held the element.
NOBODYS = 2**62


def _nothing(*_: Any) -> None:
    """What a lone :class:`~rehydrate._occurrences.Occurrences` files or acks: nothing here."""


async def write_back(store: Store, claim: Claim, envelope: Any, name: str = N) -> Occurrence:
    """The worker's record of the occurrence it runs, written under its claim before it runs
    (``Occurrences.write_back``, as a runner does for a late, coalesced occurrence); the
    occurrence, which carries the revision its run ends on."""
    occurrence = Occurrence(None, envelope, 0.0)
    await Occurrences(store, name, file=_nothing, ack=_nothing).write_back(claim, occurrence)
    return occurrence


def ending(
    claim: Claim, element: Any, ttl: float, written: Occurrence | None = None
) -> tuple[str, int, int, Any, Any, float]:
    """A run's end as a runner gives it to :func:`~rehydrate._occurrences.rearm`: file
    ``element`` in ``ttl`` seconds, on the revision the claim (or its ``written`` record) left."""
    if written is None:
        return (claim.id, claim.token, claim.revision, claim.element, element, ttl)
    revision = claim.revision if written.revision is None else written.revision
    return (claim.id, claim.token, revision, written.envelope, element, ttl)


def needs(store: Store, capability: str) -> None:
    """Skip the test unless ``store`` declares ``capability`` (:class:`~rehydrate.abc.Capabilities`)."""
    if not getattr(store.capabilities, capability):
        pytest.skip(f"{type(store).__name__} does not declare {capability} in its capabilities")


def serializer_of(store: Store) -> Any:
    """The store's serializer, for a store that keeps bytes; ``None`` for one that keeps objects."""
    return getattr(store, "serializer", None)


class VerbsContract(_Contract):
    async def test_push_look_poll(self, harness: Harness) -> None:
        s = harness.store
        assert await s.push(N, "Dehydrate this", ttl=3, id="101") == "101"
        assert await s.look(N, "101") == "Dehydrate this"
        assert await s.poll(N) == []
        harness.advance(3)
        assert await s.poll(N) == ["Dehydrate this"]
        assert await s.size(N) == 0

    async def test_look_many(self, harness: Harness) -> None:
        """Per id, in the order given, its element or None; claimed or not, due or not, nothing
        removed; an id given twice is read twice; a batch larger than a store's parts keeps order."""
        s = harness.store
        await s.push_many(N, [({"n": 1}, 0, "a"), ("B", 60, "b"), ([3], 0, "c")])
        (claim,) = await s.claim(N, lease=30, limit=1)
        assert claim.id == "a"
        assert await s.look_many(N, ["c", "missing", "a", "b", "a"]) == [[3], None, {"n": 1}, "B", {"n": 1}]
        assert await s.look_many(N, iter(["b"])) == ["B"]  # any iterable
        assert await s.look_many(N, []) == []
        assert await s.look_many("nobody", ["a", "b"]) == [None, None]
        assert await s.size(N) == 3
        assert (await s.info(N, "a")).claimed  # type: ignore[union-attr]
        many = [(i, 60, f"e{i}") for i in range(2500)]
        for start in range(0, len(many), 1000):
            await s.push_many("many", many[start : start + 1000])
        wanted = [f"e{i}" for i in range(2499, -1, -1)] + ["none"]
        assert await s.look_many("many", wanted) == [*range(2499, -1, -1), None]

    async def test_look_many_by_default_is_look_per_id(self, harness: Harness) -> None:
        """The contract's own look_many (what a store written before it gets) gives the same."""
        s = harness.store
        await s.push_many(N, [("A", 0, "a"), ("B", 60, "b")])
        wanted = ["b", "x", "a", "b"]
        assert await Store.look_many(s, N, wanted) == await s.look_many(N, wanted) == ["B", None, "A", "B"]
        with pytest.raises(InvalidArgumentError):
            await Store.look_many(s, N, "ab")

    async def test_generated_ids(self, harness: Harness) -> None:
        s = harness.store
        ids = {await s.push(N, i, ttl=1) for i in range(50)}
        assert len(ids) == 50
        assert await s.size(N) == 50

    async def test_duplicate_id(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "a", ttl=1, id="x")
        with pytest.raises(DuplicateIdError):
            await s.push(N, "b", ttl=1, id="x")
        assert await s.look(N, "x") == "a"

    async def test_push_replace(self, harness: Harness) -> None:
        s = harness.store
        assert await s.push(N, "v1", ttl=5, id="doc", replace=True) == "doc"  # absent: a plain push
        await s.push(N, "other", ttl=3, id="o")
        harness.advance(4)
        assert await s.push(N, "v2", ttl=5, id="doc", replace=True) == "doc"
        assert await s.size(N) == 2
        assert await s.look(N, "doc") == "v2"
        harness.advance(4)  # v1 would be due now; v2 is due at 9
        assert await s.poll(N) == ["other"]
        harness.advance(1)
        (claim,) = await s.claim(N, lease=30)
        assert (claim.element, claim.attempt) == ("v2", 1)
        # Replacing a claimed element: a new element, unclaimed; the old claim is fenced out.
        await s.push(N, "v3", ttl=0, id="doc", replace=True)
        info = await s.info(N, "doc")
        assert info is not None
        assert (info.attempt, info.claimed) == (0, False)
        assert await s.ack(N, [("doc", claim.token)]) == [False]
        assert await s.extend(N, "doc", lease=60, token=claim.token) is None
        assert await s.summary(N) == Summary(size=1, due=1, claimed=0, ttn=0.0)
        assert await s.poll(N) == ["v3"]
        await s.push(N, "x", ttl=1, id="o2")
        with pytest.raises(DuplicateIdError):  # without replace, as before
            await s.push(N, "y", ttl=1, id="o2")

    async def test_same_id_in_two_dehydrators(self, harness: Harness) -> None:
        s = harness.store
        await s.push("one", "a", ttl=1, id="x")
        await s.push("two", "b", ttl=1, id="x")
        assert await s.look("one", "x") == "a"
        assert await s.look("two", "x") == "b"
        assert await s.names() == ["one", "two"]

    async def test_due_order_and_ties(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "a", ttl=2, id="a")
        harness.advance(1)
        await s.push(N, "b", ttl=1, id="b")
        await s.push(N, "c", ttl=0.5, id="c")
        await s.push(N, "d", ttl=1, id="d")
        assert await s.ids(N) == ["c", "a", "b", "d"]
        harness.advance(5)
        assert await s.xpoll(N) == ["c", "a", "b", "d"]
        assert await s.xpoll(N, limit=2) == ["c", "a"]
        assert await s.poll(N, limit=3) == ["c", "a", "b"]
        assert await s.poll(N) == ["d"]

    async def test_pull(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "x", ttl=3, id="101")
        assert await s.pull(N, "101") == "x"
        assert await s.pull(N, "101") is None
        assert await s.pull("never-used", "101") is None

    async def test_xack(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "this", ttl=3, id="101")
        await s.push(N, "that", ttl=1, id="102")
        harness.advance(1)
        assert await s.poll(N) == ["that"]
        assert await s.xack(N, "101") == [None]  # not due yet
        harness.advance(2)
        assert await s.xack(N, "101", "102", "103") == ["this", None, None]

    async def test_ttn(self, harness: Harness) -> None:
        s = harness.store
        assert await s.ttn(N) is None
        await s.push(N, "this", ttl=3, id="101")
        await s.push(N, "that", ttl=1, id="102")
        assert await s.ttn(N) == pytest.approx(1.0, abs=1e-3)
        harness.advance(1)
        assert await s.ttn(N) == 0.0
        await s.poll(N)
        assert await s.ttn(N) == pytest.approx(2.0, abs=1e-3)

    async def test_ttn_after_claim(self, harness: Harness) -> None:
        """After a claim that took fewer than it asked for: what ``ttn`` says, counted down since
        the claim, whether the store read it with the claim or asks again."""
        s = harness.store
        assert await s.ttn_after_claim(N) is None  # nothing claimed yet: ttn's answer
        await s.push_many(N, [("a", 0, "a"), ("b", 10, "b")])
        claims = await s.claim(N, lease=60, limit=5)
        assert [c.id for c in claims] == ["a"]
        harness.advance(4)
        assert await s.ttn_after_claim(N) == about(6)
        assert await s.ttn_after_claim(N) == about(6)  # asked again
        harness.advance(6)
        claims += await s.claim(N, lease=60, limit=5)
        assert [c.id for c in claims] == ["a", "b"]
        assert await s.ttn_after_claim(N) == about(50)  # a's lease runs out first
        # A claim that took all it asked for: more may be due, and the answer says so.
        await s.push_many(N, [("c", 0, "c"), ("d", 0, "d")])
        claims += await s.claim(N, lease=60, limit=1)
        assert await s.ttn_after_claim(N) == 0.0
        claims += await s.claim(N, lease=60, limit=5)
        assert [c.id for c in claims] == ["a", "b", "c", "d"]
        assert await s.ack(N, [(c.id, c.token) for c in claims]) == [True] * 4
        # Nothing left: None.
        assert await s.claim(N, lease=60, limit=5) == []
        assert await s.ttn_after_claim(N) is None

    async def test_update(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "this", ttl=3, id="101")
        assert await s.update(N, "101", "that") == "this"
        assert await s.look(N, "101") == "that"
        with pytest.raises(UnknownIdError):
            await s.update(N, "nope", "x")

    async def test_update_with_a_token_is_fenced(self, harness: Harness) -> None:
        """What a worker writes into the element it holds (a schedule's coalesced occurrence)
        never overwrites what was filed under that id after its claim."""
        s = harness.store
        await s.push(N, "filed", ttl=0, id="j")
        with pytest.raises(UnknownIdError):  # not claimed: no claim to hold it under
            await s.update(N, "j", "x", token=1)
        (old,) = await s.claim(N, lease=5)
        assert await s.update(N, "j", "mine", token=old.token) == "filed"
        info = await s.info(N, "j")
        assert info is not None
        assert (info.attempt, info.claimed) == (1, True)  # the claim and its lease are kept
        assert await s.ack(N, [("j", old.token)]) == [True]  # and so is the token
        await s.push(N, "again", ttl=0, id="j")
        (stale,) = await s.claim(N, lease=5)
        harness.advance(5)
        (new,) = await s.claim(N, lease=5)
        with pytest.raises(UnknownIdError):  # the lease ran out and it was claimed again
            await s.update(N, "j", "stale", token=stale.token)
        await s.push(N, "replacement", ttl=50, id="j", replace=True)
        with pytest.raises(UnknownIdError):  # replaced (a paused schedule): left as filed
            await s.update(N, "j", "stale", token=new.token)
        assert await s.look(N, "j") == "replacement"
        with pytest.raises(UnknownIdError):
            await s.update(N, "nope", "x", token=new.token)
        with pytest.raises(InvalidArgumentError):
            await s.update(N, "j", "x", token=0)

    async def test_a_schedule_change_is_filed_anew_unless_a_worker_holds_it(self, harness: Harness) -> None:
        """A schedule changed while no occurrence runs (``change_schedule``: ``Scheduler.schedule``,
        ``pause``, ``resume``): filed anew in its place, as by ``push(replace=True)``, on the
        revision read (``replace_if``); a worker that claimed it since the read fences the change
        out (nothing changes, its claim included: read again), and one that holds it gets the
        change written into the element it holds, its claim kept (``update_if``)."""
        s = harness.store
        assert await s.read(N, "j") is None  # unknown: nothing to change
        await s.push(N, "filed", ttl=0, id="j")
        read = await s.info(N, "j")
        assert read is not None
        (running,) = await s.claim(N, lease=5)  # claimed since the read
        assert await change_schedule(s, N, "j", read, "new", 1, "held") is False
        assert await s.look(N, "j") == "filed"
        info = await s.info(N, "j")
        assert info is not None
        assert (info.attempt, info.claimed, info.ttl) == (1, True, about(5))
        # Read again: held, so the change goes into the element its worker holds.
        assert await change_schedule(s, N, "j", info, "new", 1, "held") is True
        assert await s.look(N, "j") == "held"
        info = await s.info(N, "j")
        assert info is not None
        assert (info.attempt, info.claimed, info.ttl) == (1, True, about(5))
        assert await s.ack(N, [("j", running.token)]) == [True]  # the claim is untouched
        await s.push(N, "again", ttl=0, id="j")
        (dead,) = await s.claim(N, lease=5)
        harness.advance(5)  # its lease ran out: its worker is taken for dead
        info = await s.info(N, "j")
        assert info is not None
        assert await change_schedule(s, N, "j", info, "new", 2, "held") is True
        info = await s.info(N, "j")
        assert info is not None
        assert (info.attempt, info.claimed, info.ttl) == (0, False, about(2))
        assert await s.look(N, "j") == "new"
        assert await s.ack(N, [("j", dead.token)]) == [False]  # fenced out, as by a replace
        assert (await s.summary(N)).claimed == 0  # (counted claims, where a store keeps a count)
        async with s.subscribe(N) as subscription:
            await subscription.wait(0)
            # Not claimed: replaced, and due sooner, it wakes the claim loops.
            assert await change_schedule(s, N, "j", info, "newer", 0, "held") is True
            with anyio.fail_after(5):
                assert await subscription.wait(None) is True
        assert [c.element for c in await s.claim(N, lease=5)] == ["newer"]
        assert await s.size(N) == 1

    async def test_a_schedule_is_removed_unless_a_worker_holds_it(self, harness: Harness) -> None:
        """``remove_schedule`` (``unschedule``): pulled on the revision read (``pull_if``), unless
        a worker claimed it since (nothing done: read again); one that a worker holds is marked
        ``REMOVED`` in the element it holds, its claim kept, and goes when the run ends."""
        s = harness.store
        assert await s.read(N, "j") is None
        assert await s.read("never-used", "j") is None
        await s.push(N, "waiting", ttl=10, id="j")
        info = await s.info(N, "j")
        assert info is not None
        assert await remove_schedule(s, N, "j", info) is True  # not due, not claimed: removed
        assert await s.look(N, "j") is None
        await s.push(N, "filed", ttl=0, id="j")
        read = await s.info(N, "j")
        assert read is not None
        (running,) = await s.claim(N, lease=5)
        assert await remove_schedule(s, N, "j", read) is False  # claimed since the read
        assert await s.look(N, "j") == "filed"
        info = await s.info(N, "j")
        assert info is not None
        assert await remove_schedule(s, N, "j", info) is True  # held: marked, its claim kept
        assert await s.look(N, "j") == REMOVED
        marked = await s.info(N, "j")
        assert marked is not None
        assert (marked.attempt, marked.claimed) == (1, True)
        harness.advance(5)  # the lease ran out
        assert await remove_schedule(s, N, "j", marked) is True
        assert await s.ack(N, [("j", running.token)]) == [False]
        assert await s.size(N) == 0
        assert (await s.summary(N)).claimed == 0  # (counted claims, where a store keeps a count)

    async def test_a_change_written_while_a_schedule_runs_is_kept(self, harness: Harness) -> None:
        """A schedule changed while its occurrence runs (``Scheduler.schedule`` writes the change
        into the element the worker holds, ``next`` kept): the worker's later writes of that
        envelope with only another ``next`` (recording a late occurrence, then filing the next
        one) keep the change, on every store."""
        s = harness.store
        envelope = {"rehydrate.schedule": 1, "trigger": {"every": 60.0}, "element": "a", "anchor": 0}
        await s.push(N, {**envelope, "next": 1_000_000}, ttl=0, id="j")
        (claim,) = await s.claim(N, lease=30)
        changed = {**claim.element, "element": "b"}
        assert list(changed)[-1] == "next"
        await s.update(N, "j", changed)
        # The worker records which occurrence it runs (coalesced), as the claim's holder.
        written = await write_back(s, claim, {**claim.element, "next": 2_000_000})
        assert await s.look(N, "j") == {**changed, "next": 2_000_000}
        info = await s.info(N, "j")
        assert info is not None
        assert info.claimed  # held all along: nothing else can run it meanwhile
        following = {**claim.element, "next": 3_000_000}
        assert await rearm(s, N, [ending(claim, following, 5, written)]) == [True]
        assert await s.look(N, "j") == {**changed, "next": 3_000_000}
        # Without a change meanwhile, what the worker files is what is stored.
        harness.advance(5)
        (again,) = await s.claim(N, lease=30)
        assert await rearm(s, N, [ending(again, {**again.element, "next": 4_000_000}, 5)]) == [True]
        assert await s.look(N, "j") == {**changed, "next": 4_000_000}

    async def test_a_change_written_while_an_extra_run_runs_is_kept(self, harness: Harness) -> None:
        """The same for an extra run (``run_now``): the worker files the envelope without the
        request and with its time as ``last_extra`` (both kept just before ``next``): its end
        differs, not only ``next``, and a pause written into it meanwhile is kept all the same."""
        s = harness.store
        envelope = {"rehydrate.schedule": 1, "trigger": {"every": 60.0}, "element": "a", "anchor": 0}
        envelope = with_extra(without_extra({**envelope, "next": 9_000_000}, ran=1), 7_000_000)
        assert list(envelope)[-3:] == ["last_extra", "extra", "next"]
        await s.push(N, envelope, ttl=0, id="j")
        (claim,) = await s.claim(N, lease=30)
        await s.update(N, "j", with_paused(claim.element, True))
        # What the runner files as the extra run ends (the request's time kept, due at ``next``).
        filed = without_extra(claim.element, ran=claim.element["extra"])
        assert await rearm(s, N, [ending(claim, filed, 5)]) == [True]
        assert await s.look(N, "j") == with_paused(filed, True)

    async def test_push_many(self, harness: Harness) -> None:
        s = harness.store
        ids = await s.push_many(N, [("a", 2, "a"), ("b", 1, None), ("c", timedelta(seconds=3), "c")])
        assert ids[0] == "a"
        assert ids[2] == "c"
        assert await s.size(N) == 3
        harness.advance(3)
        assert await s.poll(N) == ["b", "a", "c"]

    async def test_push_many_is_all_or_nothing(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "old", ttl=1, id="taken")
        with pytest.raises(DuplicateIdError):
            await s.push_many(N, [("a", 1, "fresh"), ("b", 1, "taken")])
        with pytest.raises(DuplicateIdError):
            await s.push_many(N, [("a", 1, "twice"), ("b", 1, "twice")])
        with pytest.raises(InvalidArgumentError):
            await s.push_many(N, [("a", 1, "fresh"), ("b", -1, "bad")])
        assert await s.ids(N) == ["taken"]

    async def test_json_like_elements_round_trip(self, harness: Harness) -> None:
        s = harness.store
        element = {"user": 7, "tags": ["a", "b"], "ratio": 0.5, "ok": True, "none": None}
        await s.push(N, element, ttl=0, id="e")
        assert await s.look(N, "e") == element
        assert await s.poll(N) == [element]


class LeasesContract(_Contract):
    async def test_claim_and_redeliver(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "job", ttl=1, id="j")
        assert await s.claim(N, lease=10) == []
        harness.advance(1)
        (first,) = await s.claim(N, lease=10)
        assert (first.id, first.element, first.attempt) == ("j", "job", 1)
        assert first.lease_until - first.claimed_at == pytest.approx(10, abs=1e-3)
        assert first.lateness >= 0
        assert await s.claim(N, lease=10) == []
        info = await s.info(N, "j")
        assert info is not None
        assert info.claimed
        assert info.attempt == 1
        harness.advance(10)
        (second,) = await s.claim(N, lease=10)
        assert second.attempt == 2

    async def test_claim_limit_and_order(self, harness: Harness) -> None:
        s = harness.store
        for i in range(5):
            await s.push(N, i, ttl=5 - i, id=str(i))
        harness.advance(5)
        assert [c.element for c in await s.claim(N, lease=1, limit=3)] == [4, 3, 2]
        assert [c.element for c in await s.claim(N, lease=1)] == [1, 0]

    async def test_claim_ahead(self, harness: Harness) -> None:
        """``ahead`` also takes what falls due within that long, in due order, leased from now;
        what is due later stays, and the TTN after the claim is the next element's own."""
        needs(harness.store, "claim_ahead")
        s = harness.store
        await s.push_many(N, [("a", 0, "a"), ("b", 2, "b"), ("c", 5, "c"), ("d", 2, "d")])
        claims = await s.claim(N, lease=10, ahead=3)
        assert [c.id for c in claims] == ["a", "b", "d"]
        a, b, _ = claims
        assert a.due <= a.claimed_at
        assert b.due - b.claimed_at == about(2)  # not due yet: held by the caller until then
        assert b.lateness == 0
        assert b.lease_until - b.claimed_at == about(10)  # the lease runs from now
        assert await s.ttn_after_claim(N) == about(5)  # c's, not counted down by ahead
        info = await s.info(N, "b")
        assert info is not None
        assert (info.claimed, info.attempt) == (True, 1)
        assert await s.claim(N, lease=10, ahead=4.9) == []  # c is due at 5
        assert await s.ack(N, [("b", b.token)]) == [True]
        harness.advance(5)
        assert [c.id for c in await s.claim(N, lease=10)] == ["c"]
        assert await s.size(N) == 3
        # Many, in due order across the store's pages and calls (some stores take 1,000 a call).
        await s.push_many("many", [(i, 1 + (i % 7) / 100, f"e{i}") for i in range(1500)])
        taken: list[Any] = []
        while page := await s.claim("many", lease=60, ahead=2):
            taken += page
        assert len(taken) == 1500
        assert [c.due for c in taken] == sorted(c.due for c in taken)
        # With lease=0 each claim is due again at once, before what is still ahead: taken once.
        await s.push_many("zero", [(i, 1 + i / 100, f"z{i}") for i in range(5)])
        zero = await s.claim("zero", lease=0, ahead=2)
        assert [(c.id, c.attempt) for c in zero] == [(f"z{i}", 1) for i in range(5)]

    async def test_claim_ahead_leaves_running_leases(self, harness: Harness) -> None:
        """Ahead of time, an element under a lease that has not run out is not taken (its
        worker may be running it), even amid others that are; once the lease is out, it is."""
        needs(harness.store, "claim_ahead")
        s = harness.store
        await s.push(N, "running", ttl=0, id="r")
        (first,) = await s.claim(N, lease=10)
        harness.advance(8)  # r's lease ends in 2 s
        await s.push_many(N, [("before", 1, "b"), ("after", 3, "c")])
        claims = await s.claim(N, lease=10, ahead=5)
        assert [c.id for c in claims] == ["b", "c"]
        assert await s.claim(N, lease=10, ahead=5) == []
        assert await s.ttn_after_claim(N) == about(2)  # r's lease, which the caller sleeps until
        assert await s.extend(N, "r", lease=10, token=first.token) is not None  # still r's worker's
        assert await s.ack(N, [(c.id, c.token) for c in claims]) == [True, True]
        harness.advance(10)
        (again,) = await s.claim(N, lease=10, ahead=5)
        assert (again.id, again.attempt) == ("r", 2)  # its lease ran out: taken

    @pytest.mark.parametrize(
        ("ahead", "error"),
        [
            (-1, InvalidArgumentError),
            (float("nan"), InvalidArgumentError),
            ("1", InvalidTypeError),
            (True, InvalidTypeError),
        ],
    )
    async def test_claim_ahead_bad_input(self, harness: Harness, ahead: Any, error: type[Exception]) -> None:
        needs(harness.store, "claim_ahead")
        s = harness.store
        await s.push(N, "a", ttl=1, id="a")
        with pytest.raises(error, match="ahead"):
            await s.claim(N, lease=10, ahead=ahead)
        info = await s.info(N, "a")
        assert info is not None
        assert (info.claimed, info.attempt) == (False, 0)  # untouched

    async def test_ack_is_fenced(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "job", ttl=0, id="j")
        (old,) = await s.claim(N, lease=5)
        harness.advance(5)
        (new,) = await s.claim(N, lease=5)
        assert (old.attempt, new.attempt) == (1, 2)
        assert await s.ack(N, [("j", old.token)]) == [False]
        assert await s.xack(N, "j", attempt=old.attempt) == [None]
        assert await s.xack(N, "j", token=old.token) == [None]
        assert await s.reschedule(N, "j", ttl=100, attempt=old.attempt) is False
        assert await s.reschedule(N, "j", ttl=100, token=old.token) is False
        assert await s.extend(N, "j", lease=100, token=old.token) is None
        assert await s.ack(N, [("j", new.token), ("missing", 1)]) == [True, False]
        assert await s.size(N) == 0

    async def test_a_stale_claim_cannot_touch_a_new_element_under_its_id(self, harness: Harness) -> None:
        """Cancel and defer again under the same id while the old claim's worker still runs: both
        claims are attempt 1, and only the token tells them apart."""
        s = harness.store
        await s.push(N, "old", ttl=0, id="doc")
        (old,) = await s.claim(N, lease=30)
        assert await s.pull(N, "doc") == "old"
        await s.push(N, "new", ttl=0, id="doc")
        (new,) = await s.claim(N, lease=30)
        assert (old.attempt, new.attempt) == (1, 1)
        assert old.token != new.token
        assert await s.ack(N, [("doc", old.token)]) == [False]
        assert await s.extend(N, "doc", lease=60, token=old.token) is None
        assert await s.reschedule(N, "doc", ttl=0, token=old.token) is False
        assert await s.xack(N, "doc", token=old.token) == [None]
        assert await s.look(N, "doc") == "new"
        assert await s.ack(N, [("doc", new.token)]) == [True]

    async def test_tokens_are_unique(self, harness: Harness) -> None:
        s = harness.store
        tokens = []
        for _ in range(3):
            await s.push_many(N, [(i, 0, f"e{i}") for i in range(20)])
            claims = await s.claim(N, lease=1)
            assert [c.attempt for c in claims] == [1] * 20
            tokens += [c.token for c in claims]
            harness.advance(1)
            again = await s.claim(N, lease=1)
            assert [c.attempt for c in again] == [2] * 20
            tokens += [c.token for c in again]
            assert await s.ack(N, [(c.id, c.token) for c in again]) == [True] * 20
        assert all(isinstance(t, int) and t >= 1 for t in tokens)
        assert len(set(tokens)) == len(tokens) == 120

    async def test_ack_needs_a_claim(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "job", ttl=0, id="j")
        assert await s.ack(N, [("j", 1)]) == [False]
        assert await s.size(N) == 1

    async def test_xack_removes_claimed(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "job", ttl=0, id="j")
        (c,) = await s.claim(N, lease=30)
        assert await s.xack(N, "j", token=c.token) == ["job"]

    async def test_reschedule_and_extend(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "job", ttl=0, id="j")
        (c,) = await s.claim(N, lease=10)
        harness.advance(6)
        until = await s.extend(N, "j", lease=10, token=c.token)
        assert until is not None
        assert until > c.lease_until
        harness.advance(6)
        assert await s.claim(N, lease=10) == []
        assert await s.reschedule(N, "j", ttl=2, token=c.token) is True
        info = await s.info(N, "j")
        assert info is not None
        assert not info.claimed
        harness.advance(2)
        (again,) = await s.claim(N, lease=10)
        assert again.attempt == 2

    async def test_rearm_ends_the_claim_and_files_the_next_one(self, harness: Harness) -> None:
        """A schedule's next occurrence: one step that ends the claim and files a new element."""
        s = harness.store
        await s.push(N, {"n": 1}, ttl=0, id="sched")
        await s.push(N, "later", ttl=100, id="other")
        (c,) = await s.claim(N, lease=10)
        assert c.attempt == 1
        assert await rearm(s, N, [ending(c, {"n": 2}, 5)]) == [True]
        info = await s.info(N, "sched")
        assert info is not None
        assert (info.attempt, info.claimed) == (0, False)
        assert info.ttl == pytest.approx(5)
        assert await s.look(N, "sched") == {"n": 2}
        assert await s.summary(N) == Summary(size=2, due=0, claimed=0, ttn=about(5))
        # The old claim is over: every fenced call with its token does nothing now.
        assert await rearm(s, N, [ending(c, {"n": 3}, 0)]) == [False]
        assert await s.ack(N, [("sched", c.token)]) == [False]
        assert await s.extend(N, "sched", lease=10, token=c.token) is None
        assert await s.look(N, "sched") == {"n": 2}
        assert await s.claim(N, lease=10) == []
        harness.advance(5)
        (again,) = await s.claim(N, lease=10)
        assert (again.id, again.element, again.attempt) == ("sched", {"n": 2}, 1)
        assert again.token != c.token
        assert await s.ack(N, [("sched", again.token)]) == [True]

    async def test_reschedule_many_retries_each_under_its_token(self, harness: Harness) -> None:
        """Delayed retries of a batch of failed handlers: each item is reschedule(token=...)."""
        s = harness.store
        await s.push_many(N, [(i, 0, f"e{i}") for i in range(30)])
        await s.push(N, "later", ttl=100, id="other")
        claims = await s.claim(N, lease=60)
        assert len(claims) == 30
        by_id = {c.id: c for c in claims}
        items = [(c.id, c.token, 5 + int(c.element) % 3) for c in claims]
        items[7] = (items[7][0], by_id["e0"].token, 0)  # another claim's token: fenced out
        items.insert(3, ("missing", claims[0].token, 0))
        done = await s.reschedule_many(N, items)
        assert done == [True] * 3 + [False] + [True] * 4 + [False] + [True] * 22
        assert await s.summary(N) == Summary(size=31, due=0, claimed=1, ttn=about(5))
        for c in claims:
            info = await s.info(N, c.id)
            assert info is not None
            if c.id == claims[7].id:
                assert info.claimed
                continue
            # Released, filed anew at now + ttl, its attempt kept.
            assert (info.claimed, info.attempt) == (False, 1)
            assert info.ttl == about(5 + int(c.element) % 3)
        # The token is kept (as reschedule keeps it): a second retry under it is still allowed.
        assert await s.reschedule_many(N, [("e1", by_id["e1"].token, 0)]) == [True]
        assert await s.reschedule(N, "e1", ttl=0, token=by_id["e1"].token) is True
        assert await s.reschedule_many("never-used", [("e1", 1, 0)]) == [False]
        assert await s.reschedule_many(N, []) == []
        harness.advance(7)
        (again,) = [c for c in await s.claim(N, lease=5) if c.id == "e1"]
        assert again.attempt == 2
        assert await s.reschedule_many(N, [("e1", by_id["e1"].token, 0)]) == [False]  # a new claim

    async def test_hand_back_undoes_the_claims_attempt(self, harness: Harness) -> None:
        """A claim given back unrun (a graceful stop) is no attempt: claimed again, the element
        has the attempt it had under that claim; a failed run, retried, still counts. Fenced like
        ack: only a claimed element under that token, and once."""
        s = harness.store
        await s.push_many(N, [("A", 0, "a"), ("B", 0, "b"), ("C", 0, "c")])
        await s.push(N, "later", ttl=100, id="other")
        first = {c.id: c for c in await s.claim(N, lease=60)}
        assert sorted((c.id, c.attempt) for c in first.values()) == [("a", 1), ("b", 1), ("c", 1)]
        # b's first run failed and was retried: that attempt counts.
        assert await s.reschedule(N, "b", ttl=0, token=first["b"].token) is True
        (b2,) = await s.claim(N, lease=60)
        assert (b2.id, b2.attempt) == ("b", 2)
        items = [
            ("a", first["a"].token, 0),
            ("missing", first["a"].token, 0),
            ("b", b2.token, 5),
            ("c", first["a"].token, 0),  # another claim's token: fenced out
        ]
        assert await s.hand_back(N, items) == [True, False, True, False]
        # Released, filed anew at now + ttl, the claim's attempt undone.
        a, b, c = [await s.info(N, id) for id in "abc"]
        assert a is not None
        assert (a.claimed, a.attempt, a.ttl) == (False, 0, 0)
        assert b is not None
        assert (b.claimed, b.attempt) == (False, 1)
        assert b.ttl == about(5)
        assert c is not None
        assert (c.claimed, c.attempt) == (True, 1)
        assert await s.summary(N) == Summary(size=4, due=1, claimed=1, ttn=0.0)
        # The token no longer matches: a second hand-back, or any fenced call with it, does nothing.
        assert await s.hand_back(N, [("a", first["a"].token, 0)]) == [False]
        assert await s.ack(N, [("a", first["a"].token)]) == [False]
        assert await s.extend(N, "a", lease=10, token=first["a"].token) is None
        assert await s.reschedule(N, "a", ttl=0, token=first["a"].token) is False
        assert (await s.info(N, "a")).attempt == 0  # type: ignore[union-attr]
        # Claimed again: the same attempt number as the claim handed back, under a new token.
        (again,) = await s.claim(N, lease=60)
        assert (again.id, again.attempt) == ("a", 1)
        assert again.token != first["a"].token
        harness.advance(5)
        (b3,) = await s.claim(N, lease=60)
        assert (b3.id, b3.attempt) == ("b", 2)
        # An element not under a claim (released by a retry, its token kept) is not handed back.
        assert await s.reschedule(N, "b", ttl=0, token=b3.token) is True
        assert await s.hand_back(N, [("b", b3.token, 0)]) == [False]
        assert (await s.info(N, "b")).attempt == 2  # type: ignore[union-attr]
        assert await s.hand_back(N, []) == []
        assert await s.hand_back("never-used", [("a", again.token, 0)]) == [False]

    async def test_a_lost_lease_counts_and_a_hand_back_after_it_does_not(self, harness: Harness) -> None:
        """A worker that dies leaves its lease to run out: the store cannot tell that from a
        failed run, so the next claim counts it. Handing that next claim back undoes only its own."""
        s = harness.store
        await s.push(N, "job", ttl=0, id="j")
        (c1,) = await s.claim(N, lease=10)
        harness.advance(11)  # the worker died: its lease runs out
        (c2,) = await s.claim(N, lease=10)
        assert (c1.attempt, c2.attempt) == (1, 2)
        assert await s.hand_back(N, [("j", c1.token, 0)]) == [False]  # the dead worker's claim
        assert await s.hand_back(N, [("j", c2.token, 0)]) == [True]
        (c3,) = await s.claim(N, lease=10)
        assert c3.attempt == 2
        # A claim whose lease ran out, and nobody claimed since, may still be handed back.
        harness.advance(11)
        assert await s.hand_back(N, [("j", c3.token, 0)]) == [True]
        (c4,) = await s.claim(N, lease=10)
        assert c4.attempt == 2

    async def test_hand_back_of_claims_taken_ahead(self, harness: Harness) -> None:
        """Claims taken ahead of their due time (``claim_ahead``) and given back unstarted, due
        when they were due: claimed then, they have the attempt they had."""
        needs(harness.store, "claim_ahead")
        s = harness.store
        await s.push_many(N, [("x", 2, "x"), ("y", 3, "y")])
        held = await s.claim(N, lease=10, ahead=5)
        assert sorted((c.id, c.attempt) for c in held) == [("x", 1), ("y", 1)]
        now = s.clock()
        items = [(c.id, c.token, max(0.0, c.due - now)) for c in held]
        assert await s.hand_back(N, items) == [True, True]
        assert await s.claim(N, lease=10) == []
        harness.advance(3)
        again = await s.claim(N, lease=10)
        assert [(c.id, c.attempt) for c in again] == [("x", 1), ("y", 1)]
        assert await s.ack(N, [(c.id, c.token) for c in again]) == [True, True]

    async def test_hand_back_by_default_is_reschedule_many(self, harness: Harness) -> None:
        """The contract's own hand_back (what a store written before it gets) still gives the
        claim back, checked as the stores' own is, but cannot undo its attempt."""
        s = harness.store
        await s.push(N, "e", ttl=0, id="a")
        (c,) = await s.claim(N, lease=60)
        with pytest.raises(InvalidArgumentError, match="hand_back needs each claim's token"):
            await Store.hand_back(s, N, [("a", cast(int, None), 0)])
        assert await Store.hand_back(s, N, [("a", c.token, 0), ("b", c.token, 0)]) == [True, False]
        info = await s.info(N, "a")
        assert info is not None
        assert (info.claimed, info.attempt) == (False, 1)

    async def test_hand_back_checks_every_item_first(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "e", ttl=0, id="a")
        (c,) = await s.claim(N, lease=60)
        bad: list[Any] = [
            [("a", c.token, 1), ("a", c.token, 2)],  # an id twice
            [("a", c.token, 1), ("b", None, 1)],  # no token
            [("a", c.token, 1), ("b", 0, 1)],
            [("a", c.token, 1), ("b", 1, -1)],
            [("a", c.token, 1), ("b", 1, 2e9)],
            [("a", c.token, 1), ("", 1, 1)],
            [("a", c.token, 1), ("b", 1)],
        ]
        for items in bad:
            with pytest.raises(InvalidArgumentError):
                await s.hand_back(N, items)
        with pytest.raises(InvalidTypeError):
            await s.hand_back(N, cast(Any, "ab"))
        with pytest.raises(InvalidArgumentError, match="hand_back needs each claim's token"):
            await s.hand_back(N, [("a", cast(int, None), 1)])
        info = await s.info(N, "a")
        assert info is not None
        assert (info.claimed, info.attempt) == (True, 1)  # nothing was done

    async def test_reschedule_many_checks_every_item_first(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "e", ttl=0, id="a")
        (c,) = await s.claim(N, lease=60)
        bad: list[Any] = [
            [("a", c.token, 1), ("a", c.token, 2)],  # an id twice
            [("a", c.token, 1), ("b", None, 1)],  # no token
            [("a", c.token, 1), ("b", 0, 1)],
            [("a", c.token, 1), ("b", 1, -1)],
            [("a", c.token, 1), ("b", 1, 2e9)],
            [("a", c.token, 1), ("", 1, 1)],
            [("a", c.token, 1), ("b", 1)],
            [("a", c.token, 1), "b"],
            "ab",
        ]
        for items in bad:
            with pytest.raises(InvalidArgumentError if items != "ab" else Exception):
                await s.reschedule_many(N, items)
        info = await s.info(N, "a")
        assert info is not None
        assert info.claimed  # nothing was done

    async def test_rearm_in_batches(self, harness: Harness) -> None:
        s = harness.store
        await s.push_many(N, [(i, 0, f"e{i}") for i in range(30)])
        claims = await s.claim(N, lease=60)
        assert len(claims) == 30
        items = [ending(c, c.element + 100, c.element % 3) for c in claims]
        items.insert(5, ("missing", claims[0].token, claims[0].revision, None, "x", 0))
        done = await rearm(s, N, items)
        assert done == [True] * 5 + [False] + [True] * 25
        assert await s.summary(N) == Summary(size=30, due=10, claimed=0, ttn=0.0)
        assert sorted(await s.poll(N)) == [100 + i for i in range(0, 30, 3)]
        assert await rearm(s, N, []) == []
        harness.advance(2)
        assert sorted(await s.poll(N)) == sorted(100 + i for i in range(30) if i % 3)

    async def test_rearm_is_fenced(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "e", ttl=0, id="j")
        # Not claimed: nothing to end.
        assert await rearm(s, N, [("j", 1, NOBODYS, "e", "x", 0)]) == [False]
        assert await rearm(s, N, [("missing", 1, NOBODYS, "e", "x", 0)]) == [False]
        assert await rearm(s, "never-used", [("j", 1, NOBODYS, "e", "x", 0)]) == [False]
        (old,) = await s.claim(N, lease=5)
        harness.advance(5)
        (new,) = await s.claim(N, lease=5)
        # The lease ran out and another worker claimed it: the stale worker files nothing.
        assert await rearm(s, N, [ending(old, "stale", 0)]) == [False]
        assert await s.look(N, "j") == "e"
        info = await s.info(N, "j")
        assert info is not None
        assert (info.attempt, info.claimed) == (2, True)
        # The same claim twice in one batch: only the first files.
        assert await rearm(s, N, [ending(new, "one", 50), ending(new, "two", 0)]) == [True, False]
        assert await s.look(N, "j") == "one"
        # Replaced while claimed: a new element, which the old claim cannot rearm.
        harness.advance(50)
        (latest,) = await s.claim(N, lease=5)
        await s.push(N, "replacement", ttl=50, id="j", replace=True)
        assert await rearm(s, N, [ending(latest, "stale", 0)]) == [False]
        assert await s.look(N, "j") == "replacement"
        with pytest.raises(InvalidArgumentError):
            await rearm(s, N, [ending(latest, "x", -1)])
        with pytest.raises(InvalidArgumentError):
            await rearm(s, N, [("", latest.token, latest.revision, "e", "x", 0)])
        with pytest.raises(InvalidArgumentError):
            await rearm(s, N, [ending(latest, "x", MAX_SECONDS + 1)])
        with pytest.raises(InvalidArgumentError):
            await rearm(s, "", [ending(latest, "x", 0)])

    async def test_rearm_checks_every_item_before_filing_any(self, harness: Harness) -> None:
        s = harness.store
        await s.push_many(N, [("a", 0, "a"), ("b", 0, "b")])
        claims = {c.id: c for c in await s.claim(N, lease=60)}
        good = ending(claims["a"], "next", 5)
        b = claims["b"]
        for bad in [
            ending(b, "x", -1),
            ("b", 0, b.revision, "b", "x", 5),
            ("", b.token, b.revision, "b", "x", 5),
            ("b", b.token, -1, "b", "x", 5),
        ]:
            with pytest.raises(InvalidArgumentError):
                await rearm(s, N, [good, bad])
        # Nothing was filed: both are still under their claims, and can be rearmed now.
        assert await s.summary(N) == Summary(size=2, due=0, claimed=2, ttn=60.0)
        assert await rearm(s, N, [good, ending(b, "b2", 0)]) == [True, True]
        assert await s.poll(N) == ["b2"]

    async def test_rearm_files_a_schedule_replanned_while_claimed_as_stored_at_once(
        self, harness: Harness
    ) -> None:
        """A schedule given another trigger while one of its occurrences runs has its first
        occurrence written into the element the worker holds (``Scheduler.schedule``). The
        worker's rearm, made from the envelope it claimed, then files the schedule as stored and
        due at once, for the runner that claims it to file for its time: the new trigger is not
        lost (nor by the worker's own update meanwhile), and its occurrence is not filed beside
        the one that runs. A change that keeps the next time (another element) is merged, as
        before, beside it in the same batch."""
        from rehydrate import Cron, Every
        from rehydrate._schedules import make_envelope, with_next

        s = harness.store
        every = Every(60)
        old = make_envelope(every, element={"n": 1}, next=120.0, anchor=60.0, misfire="coalesce", grace=None)
        await s.push_many(N, [(old, 0, "re"), (old, 0, "same")])
        claims = {c.id: c for c in await s.claim(N, lease=60)}
        replanned = make_envelope(
            Cron("*/5 * * * *"), element={"n": 2}, next=300.0, anchor=None, misfire="coalesce", grace=None
        )
        await s.update(N, "re", replanned)
        # The holder's own update after that (a late occurrence recording the one it runs, as
        # the claimed envelope with another next) leaves the re-planned schedule as it is.
        written = await write_back(s, claims["re"], with_next(claims["re"].element, 150.0))
        assert await s.look(N, "re") == replanned
        await s.update(N, "same", {**claims["same"].element, "element": {"n": 3}})
        items = [
            ending(claims["re"], with_next(claims["re"].element, 180.0), 30, written),
            ending(claims["same"], with_next(claims["same"].element, 180.0), 30),
        ]
        assert await rearm(s, N, items) == [True, True]
        assert await s.look(N, "re") == replanned
        assert await s.look(N, "same") == with_next({**claims["same"].element, "element": {"n": 3}}, 180.0)
        info = await s.info(N, "re")
        assert info is not None
        assert (info.claimed, info.attempt) == (False, 0)
        assert await s.ttn(N) == 0.0
        assert [c.id for c in await s.claim(N, lease=60)] == ["re"]
        harness.advance(30)
        assert [c.id for c in await s.claim(N, lease=60)] == ["same"]

    async def test_rearm_removes_a_schedule_unscheduled_while_claimed(self, harness: Harness) -> None:
        """``Scheduler.unschedule`` during a run writes ``REMOVED`` into the element the worker
        holds. The worker's rearm then removes it (beside another item filed in the same batch);
        the worker's own update before that leaves it removed. A runner that claims a ``REMOVED``
        element (its worker died) gives it back as it is: removed, unless a schedule was written
        into it since (``schedule()`` again), which is filed as stored, due at once."""
        from rehydrate import Every
        from rehydrate._schedules import make_envelope, with_next

        s = harness.store
        envelope = make_envelope(
            Every(60), element={"n": 1}, next=120.0, anchor=60.0, misfire="coalesce", grace=None
        )
        await s.push_many(N, [(envelope, 0, "gone"), (envelope, 0, "kept"), (dict(REMOVED), 0, "orphan")])
        await s.push_many(N, [(dict(REMOVED), 0, "again")])
        claims = {c.id: c for c in await s.claim(N, lease=60)}
        assert set(claims) == {"gone", "kept", "orphan", "again"}
        await s.update(N, "gone", dict(REMOVED))
        written = await write_back(s, claims["gone"], with_next(claims["gone"].element, 150.0))
        assert await s.look(N, "gone") == REMOVED
        items = [
            ending(claims["gone"], with_next(claims["gone"].element, 180.0), 30, written),
            ending(claims["kept"], with_next(claims["kept"].element, 180.0), 30),
        ]
        assert await rearm(s, N, items) == [True, True]
        assert await s.look(N, "gone") is None
        assert await s.look(N, "kept") == with_next(envelope, 180.0)
        # Claimed as REMOVED and given back so: removed, or what was written into it since.
        renewed = make_envelope(
            Every(10), element={"n": 2}, next=200.0, anchor=200.0, misfire="coalesce", grace=None
        )
        await s.update(N, "again", renewed)
        for id in ("orphan", "again"):  # (one item a call, as a runner sends it)
            assert await rearm(s, N, [ending(claims[id], claims[id].element, 0)]) == [True]
        assert await s.look(N, "orphan") is None
        assert await s.look(N, "again") == renewed
        info = await s.info(N, "again")
        assert info is not None
        assert (info.claimed, info.attempt) == (False, 0)
        assert await s.ttn(N) == 0.0
        assert await s.size(N) == 2
        assert await s.summary(N) == Summary(size=2, due=1, claimed=0, ttn=0.0)

    async def test_rearm_files_an_envelope_with_another_next_as_given(self, harness: Harness) -> None:
        """A schedule's envelope filed again with only its next changed (which a store that keeps
        bytes may file by rewriting the end of the bytes it read, not encoding it again) reads
        back as given: alone, beside elements that changed more, after an update made while it
        was claimed, and in a batch whose items are filed differently."""
        from rehydrate import Every
        from rehydrate._schedules import make_envelope, with_next

        s = harness.store

        def envelope(user: int) -> dict[str, Any]:
            element = {"user": user, "text": "é,}"}
            every = Every(60)
            return make_envelope(every, element=element, next=120.0, anchor=60.0, misfire="all", grace=None)

        await s.push_many(N, [(envelope(i), 0, f"s{i}") for i in range(5)])
        claims = {c.id: c for c in await s.claim(N, lease=60)}
        assert len(claims) == 5
        expected = {
            "s0": with_next(claims["s0"].element, 180.0),  # only next: the rewritten end
            "s1": {**with_next(claims["s1"].element, 180.0), "element": "changed"},  # more changed
            "s2": with_next(claims["s2"].element, 120.0),  # the same next again
            "s4": with_next(claims["s4"].element, 9e9),  # a longer number
        }
        # Updated by its holder while claimed (the runner writes a coalesced occurrence back so):
        # what is filed is still the element the rearm gives.
        written = {"s3": await write_back(s, claims["s3"], with_next(claims["s3"].element, 150.0))}
        expected["s3"] = with_next(claims["s3"].element, 210.0)
        items = [ending(claims[id], element, 30, written.get(id)) for id, element in sorted(expected.items())]
        assert await rearm(s, N, items) == [True] * 5
        assert await s.look_many(N, sorted(expected)) == [expected[id] for id in sorted(expected)]
        harness.advance(30)
        again = {c.id: c for c in await s.claim(N, lease=60)}
        assert {id: c.element for id, c in again.items()} == expected
        # Filed again from what was claimed just now, and from a claim that is over: fenced.
        latest, stale = again["s0"], claims["s0"]
        assert await rearm(s, N, [ending(latest, with_next(latest.element, 240.0), 0)]) == [True]
        assert await rearm(s, N, [ending(stale, with_next(stale.element, 1.0), 0)]) == [False]
        assert await s.look(N, "s0") == with_next(expected["s0"], 240.0)
        if not harness.shared or harness.twin is None:
            return  # a memory store shares nothing with another process
        # Updated while claimed by another process (a store object that kept nothing of it): s0
        # at its end (another next), so re-planned meanwhile, as a schedule given another trigger
        # is, and filed as stored, at once; s1 is filed whole, as given (its rearm is not the
        # claimed envelope with another next), whatever was stored meanwhile.
        (late,) = [c for c in await s.claim(N, lease=60) if c.id == "s0"]
        async with harness.twin() as other:
            await other.update(N, "s0", with_next(late.element, 250.0))
            await other.update(N, "s1", "not an envelope")
        filed = with_next(late.element, 300.0)
        items = [ending(late, filed, 5), ending(again["s1"], expected["s1"], 5)]
        assert await rearm(s, N, items) == [True, True]
        assert await s.look_many(N, ["s0", "s1"]) == [with_next(late.element, 250.0), expected["s1"]]
        assert await s.ttn(N) == 0.0

    async def test_a_rearm_files_the_envelope_as_claimed_not_as_changed_in_place(
        self, harness: Harness
    ) -> None:
        """docs/schedules.md: a handler's in-place change to its element stays with that run on a
        store that serializes with JSON (the next occurrence is filed from the bytes the claim
        read); the memory store holds the object itself, so the change is what it holds."""
        from rehydrate import Every
        from rehydrate._schedules import make_envelope, with_next

        s = harness.store
        now = math.floor(wall(s.clock))  # (on time: run as claimed, the next one 60 s on)
        envelope = make_envelope(
            Every(60), element={"n": 0}, next=now, anchor=now, misfire="coalesce", grace=None
        )
        await s.push(N, envelope, ttl=0, id="s")
        (claim,) = await s.claim(N, lease=60)
        # The runner's own way: planned as claimed, run, and the next one filed as it ends.
        filed: list[tuple[Any, ...]] = []
        occurrences = Occurrences(s, N, file=lambda *item: filed.append(item), ack=_nothing)
        occurrence = occurrences.begin(claim)
        assert occurrence is not None
        cast("dict[str, int]", occurrence.element)["n"] = 1  # what a handler that changes its element does
        occurrences.finish(claim, occurrence)
        ((id, token, revision, held, following, _, _),) = filed
        assert await rearm(s, N, [(id, token, revision, held, following, 0)]) == [True]
        stored = await s.look(N, "s")
        kept = getattr(serializer_of(s), "name", None) == "json"
        assert stored == {**with_next(envelope, now + 60), "element": {"n": 0 if kept else 1}}

    async def test_rearm_wakes_a_subscriber_when_sooner(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "e", ttl=0, id="j")
        (c,) = await s.claim(N, lease=60)
        async with s.subscribe(N) as subscription:
            assert await rearm(s, N, [ending(c, "e", 0)]) == [True]
            assert await subscription.wait(5) is True

    async def test_concurrent_claims_never_share(self, harness: Harness) -> None:
        s = harness.store
        await s.push_many(N, [(i, 0, f"e{i}") for i in range(200)])
        seen: list[str] = []

        async def claimer() -> None:
            while claims := await s.claim(N, lease=60, limit=7):
                seen.extend(c.id for c in claims)

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(claimer)
        assert sorted(seen) == sorted(f"e{i}" for i in range(200))


class SummaryContract(_Contract):
    async def test_counts(self, harness: Harness) -> None:
        s = harness.store
        assert await s.summary(N) == Summary(size=0, due=0, claimed=0, ttn=None)
        await s.push(N, "a", ttl=1, id="a")
        await s.push(N, "b", ttl=50, id="b")
        assert await s.summary(N) == Summary(size=2, due=0, claimed=0, ttn=about(1))
        await s.push(N, "c", ttl=1, id="c")
        harness.advance(1)
        (claim,) = await s.claim(N, lease=10, limit=1)
        assert claim.id == "a"
        assert await s.summary(N) == Summary(size=3, due=1, claimed=1, ttn=0.0)
        harness.advance(10)  # a's lease ran out: it is due again, and still counted as claimed
        summary = await s.summary(N)
        assert summary == Summary(size=3, due=2, claimed=1, ttn=0.0)
        # The generic version every store inherits agrees with the store's own.
        assert await Store.summary(s, N) == summary
        await s.ack(N, [("a", claim.token)])
        await s.pull(N, "c")
        assert await s.summary(N) == Summary(size=1, due=0, claimed=0, ttn=about(39))


class SubscriptionsContract(_Contract):
    async def test_earlier_push_notifies(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "late", ttl=100, id="late")
        async with s.subscribe(N) as sub:
            await s.push(N, "later", ttl=200, id="later")  # not sooner: may or may not notify
            await sub.wait(0)
            await s.push(N, "soon", ttl=1, id="soon")
            with anyio.fail_after(5):
                assert await sub.wait(None) is True

    async def test_notification_before_wait_is_kept(self, harness: Harness) -> None:
        s = harness.store
        async with s.subscribe(N) as sub:
            await s.push(N, "x", ttl=1, id="x")
            with anyio.fail_after(5):
                assert await sub.wait(30) is True

    async def test_what_comes_sooner_after_a_claim_notifies(self, harness: Harness) -> None:
        """A claim loop sleeps for ``ttn_after_claim`` or until notified: an element pushed
        after the claim, due sooner than that answer, wakes it (even if the answer predates it)."""
        s = harness.store
        async with s.subscribe(N) as sub:
            await s.push_many(N, [("a", 0, "a"), ("b", 100, "b")])
            await sub.wait(0)  # (consumes the pushes' notifications)
            assert [c.id for c in await s.claim(N, lease=60, limit=5)] == ["a"]
            await s.push(N, "soon", ttl=1, id="soon")
            ttn = await s.ttn_after_claim(N)
            assert ttn is not None
            with anyio.fail_after(5):
                assert await sub.wait(ttn) is True

    async def test_wait_times_out(self, harness: Harness) -> None:
        s = harness.store
        async with s.subscribe(N) as sub:
            assert await sub.wait(0) is False


class BadInputContract(_Contract):
    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.push(N, "x", ttl=-1),
            lambda s: s.push(N, "x", ttl=float("nan")),
            lambda s: s.push(N, "x", ttl="5"),
            lambda s: s.push(N, "x", ttl=1, id=""),
            lambda s: s.push(N, "x", ttl=-1, id="a", replace=True),
            lambda s: s.push(N, "x", ttl=1, id="a", replace=1),
            lambda s: s.push("", "x", ttl=1),
            lambda s: s.pull(N, ""),
            lambda s: s.look(N, 7),
            lambda s: s.look_many(N, "ab"),  # a str is not a list of ids
            lambda s: s.look_many(N, 7),
            lambda s: s.look_many(N, ["a", ""]),
            lambda s: s.look_many(N, ["a", None]),
            lambda s: s.look_many("", ["a"]),
            lambda s: s.poll(N, limit=0),
            lambda s: s.xpoll(N, limit=-1),
            lambda s: s.xack(N, "a", ""),
            lambda s: s.claim(N, lease=-1),
            lambda s: s.claim(N, lease=1, limit=0),
            lambda s: s.ack(N, [("a", 0)]),
            lambda s: s.ack(N, [("a", "1")]),
            lambda s: s.xack(N, "a", token=-1),
            lambda s: s.reschedule(N, "a", ttl=1, token=0),
            lambda s: s.reschedule(N, "a", ttl=float("inf")),
            lambda s: s.extend(N, "a", lease=-2, token=1),
            lambda s: s.extend(N, "a", lease=2, token=0),
            lambda s: s.update(N, "", 1),
            lambda s: s.info(N, None),
            lambda s: s.size(""),
            lambda s: s.summary(""),
            lambda s: s.ids(N, limit=0),
            lambda s: s.replace_if(N, [("a", 0, "x", -1)]),
            lambda s: s.replace_if(N, [("a", 0, "x", MAX_SECONDS + 1)]),
            lambda s: s.replace_if(N, [("", 0, "x", 1)]),
            lambda s: s.replace_if("", [("a", 0, "x", 1)]),
            lambda s: s.pull_if(N, "", 0),
            lambda s: s.pull_if(N, 7, 0),
            # push(replace=True) names the element it replaces.
            lambda s: s.push(N, "x", ttl=1, replace=True),
            # One longest duration for every store (10**400 overflows a float: refused all the same).
            lambda s: s.push(N, "x", ttl=MAX_SECONDS + 1),
            lambda s: s.push(N, "x", ttl=10**400),
            lambda s: s.push(N, "x", ttl=1e300),
            lambda s: s.push(N, "x", ttl=timedelta(days=365 * 40)),
            lambda s: s.push(N, "x", ttl=2e9, id="a", replace=True),
            lambda s: s.push_many(N, [("x", 1, "b"), ("y", 2e9, "c")]),
            lambda s: s.claim(N, lease=2e9),
            lambda s: s.reschedule(N, "a", ttl=2e9),
            lambda s: s.extend(N, "a", lease=2e9, token=1),
            # Ids and names are valid Unicode text: no lone surrogates, in any verb.
            lambda s: s.push(N, "x", ttl=1, id="\ud800"),
            lambda s: s.push(N, "x", ttl=1, id="b\udcff", replace=True),
            lambda s: s.push("\udcff", "x", ttl=1),
            lambda s: s.push_many(N, [("x", 1, "b"), ("y", 1, "\ud800")]),
            lambda s: s.pull(N, "\ud800"),
            lambda s: s.look(N, "a\udcff"),
            lambda s: s.look_many(N, ["a", "a\udcff"]),
            lambda s: s.info(N, "\ud800"),
            lambda s: s.xack(N, "a", "\ud800"),
            lambda s: s.update(N, "\ud800", 1),
            lambda s: s.ack(N, [("\ud800", 1)]),
            lambda s: s.reschedule(N, "\ud800", ttl=1),
            lambda s: s.extend(N, "\ud800", lease=1, token=1),
            lambda s: s.size("\ud800"),
            lambda s: s.ttn("n\udcff"),
            lambda s: s.poll("n\udcff"),
        ],
    )
    async def test_rejected_and_nothing_changes(self, harness: Harness, call: Any) -> None:
        s = harness.store
        await s.push(N, "keep", ttl=1, id="a")
        before = await state(s)
        with pytest.raises(InvalidArgumentError):
            await call(s)
        assert await state(s) == before

    async def test_look_many_names_the_bad_id(self, harness: Harness) -> None:
        with pytest.raises(InvalidArgumentError) as caught:
            await harness.store.look_many(N, ["a", "b", ""])
        assert caught.value.__notes__ == ["in ids[2]"]

    async def test_the_longest_duration_is_accepted(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "x", ttl=MAX_SECONDS, id="far")
        await s.push(N, "y", ttl=timedelta(seconds=MAX_SECONDS), id="far2")
        info = await s.info(N, "far")
        assert info is not None
        assert info.ttl == MAX_SECONDS
        with pytest.raises(InvalidArgumentError, match="at most 1,000,000,000 seconds"):
            await s.push(N, "x", ttl=MAX_SECONDS * 2)

    async def test_text_elements_are_valid_unicode(self, harness: Harness) -> None:
        """A store that serializes (JSON by default) refuses lone surrogates: nothing unprintable is kept."""
        s = harness.store
        if serializer_of(s) is None:
            pytest.skip("this store keeps elements as objects, not serialized")
        with pytest.raises(InvalidArgumentError, match="surrogate"):
            await s.push(N, "\ud800", ttl=0, id="s")
        with pytest.raises(InvalidArgumentError, match="surrogate"):
            await s.push(N, {"k\udcff": 1}, ttl=0, id="s")
        await s.push(N, {"é": "ü ✓ 😀"}, ttl=0, id="ok")
        assert await s.poll(N) == [{"é": "ü ✓ 😀"}]
        assert await s.ids(N) == []

    async def test_what_json_cannot_carry_is_refused_and_nothing_is_kept(self, harness: Harness) -> None:
        """With the default JSON serializer: NaN, an object JSON does not know and a cyclic element
        are each a clear ``InvalidTypeError``, alone or in a batch, and nothing is filed."""
        s = harness.store
        if getattr(serializer_of(s), "name", None) != "json":
            pytest.skip("this store does not serialize with JSON")
        cyclic: list[Any] = [1]
        cyclic.append(cyclic)
        for bad in (float("nan"), {"when": object()}, cyclic):
            with pytest.raises(InvalidTypeError, match="not JSON-serializable"):
                await s.push(N, bad, ttl=0, id="bad")
            with pytest.raises(InvalidTypeError, match="not JSON-serializable"):
                await s.push_many(N, [("fine", 0, "a"), (bad, 0, "b")])
        assert await s.ids(N) == []

    async def test_an_element_too_large_is_refused_at_once_and_nothing_is_written(
        self, harness: Harness
    ) -> None:
        """An element larger, serialized, than the store takes (here ``max_element_bytes``, a cap
        below the backend's own limit) is an ``ElementTooLargeError`` (an ``InvalidArgumentError``)
        naming its id, its size and the limit, raised before anything is sent: by every verb that
        writes an element, and a batch with one is refused whole. What was stored stays."""
        if harness.twin is None or getattr(harness.store, "max_element_bytes", None) is None:
            pytest.skip("this store has no max_element_bytes (the memory store: it keeps objects, not bytes)")
        big = "é" * 600  # 600 characters, 1,202 bytes as (UTF-8) JSON: its serialized size counts
        async with harness.twin(max_element_bytes=1000) as s:
            assert s.max_element_bytes == 1000  # type: ignore[attr-defined]
            await s.push(N, "x" * 998, ttl=0, id="kept")  # 1,000 bytes: taken
            with pytest.raises(ElementTooLargeError) as raised:
                await s.push(N, big, ttl=0, id="big")
            error = raised.value
            assert isinstance(error, InvalidArgumentError)
            assert (error.id, error.size, error.limit) == ("big", 1202, 1000)
            for said in ("'big'", "1,202 bytes", "1,000 bytes", "max_element_bytes"):
                assert said in str(error)
            with pytest.raises(ElementTooLargeError, match="no id given"):
                await s.push(N, big, ttl=0)
            with pytest.raises(ElementTooLargeError, match=r"'b'.*item 1 of a push_many.*nothing") as batch:
                await s.push_many(N, [("a", 0, "a"), (big, 0, "b"), ("c", 0, None)])
            assert (batch.value.id, batch.value.size) == ("b", 1202)
            with pytest.raises(ElementTooLargeError, match="'kept'"):
                await s.push(N, big, ttl=0, id="kept", replace=True)
            kept = await s.info(N, "kept")
            assert kept is not None
            with pytest.raises(ElementTooLargeError, match="'kept'"):
                await s.replace_if(N, [("kept", kept.revision, big, 0)])
            with pytest.raises(ElementTooLargeError, match="'kept'"):
                await s.update(N, "kept", big)
            (claim,) = await s.claim(N, lease=30)
            with pytest.raises(ElementTooLargeError, match="'kept'"):
                await s.update(N, "kept", big, token=claim.token)
            with pytest.raises(ElementTooLargeError, match=r"'kept'.*replace_if"):
                await rearm(s, N, [ending(claim, big, 5)])
            assert await s.ids(N) == ["kept"]
            assert await s.look(N, "kept") == "x" * 998
            assert await s.ack(N, [("kept", claim.token)]) == [True]  # the claim is as it was
            assert await s.ids(N) == []

    async def test_a_cap_is_an_option_of_the_url_and_of_the_constructor(self, harness: Harness) -> None:
        """``max_element_bytes`` is a positive number of bytes; a bad one is refused when the
        store is made. The default is the backend's own limit, named in ``docs/stores.md``."""
        if harness.twin is None or getattr(harness.store, "max_element_bytes", None) is None:
            pytest.skip("this store has no max_element_bytes (the memory store: it keeps objects, not bytes)")
        for bad in (0, -1):
            with pytest.raises(InvalidArgumentError, match="max_element_bytes must be positive"):
                harness.twin(max_element_bytes=bad)
        for wrong in ("1000", 1.5, True):
            with pytest.raises(InvalidTypeError, match="max_element_bytes"):
                harness.twin(max_element_bytes=wrong)
        limit = harness.store.max_element_bytes  # type: ignore[attr-defined]
        assert isinstance(limit, int)
        assert limit > 0
        async with harness.twin(max_element_bytes=10**12) as s:  # above it: the backend's holds
            assert s.max_element_bytes == limit  # type: ignore[attr-defined]


def _every_verb() -> list[Any]:
    return [
        lambda s: s.push(N, "x", ttl=1, id="a"),
        lambda s: s.push_many(N, [("x", 1, "a")]),
        lambda s: s.push_many(N, []),
        lambda s: s.pull(N, "a"),
        lambda s: s.poll(N),
        lambda s: s.xpoll(N),
        lambda s: s.xack(N, "a"),
        lambda s: s.look(N, "a"),
        lambda s: s.look_many(N, ["a"]),
        lambda s: s.look_many(N, []),
        lambda s: s.ttn(N),
        lambda s: s.update(N, "a", 1),
        lambda s: s.claim(N, lease=1),
        lambda s: s.ack(N, [("a", 1)]),
        lambda s: s.ack(N, []),
        lambda s: s.reschedule(N, "a", ttl=1),
        lambda s: s.reschedule_many(N, [("a", 1, 1)]),
        lambda s: s.reschedule_many(N, []),
        lambda s: s.hand_back(N, [("a", 1, 1)]),
        lambda s: s.hand_back(N, []),
        lambda s: s.extend(N, "a", lease=1, token=1),
        lambda s: s.info(N, "a"),
        lambda s: s.names(),
        lambda s: s.size(N),
        lambda s: s.summary(N),
        lambda s: s.ids(N),
        lambda s: s.read(N, "a"),
        lambda s: s.replace_if(N, [("a", 0, "x", 1)]),
        lambda s: s.update_if(N, "a", 0, "x"),
        lambda s: s.pull_if(N, "a", 0),
    ]


class LifecycleContract(_Contract):
    """Every store, the memory store included, is used inside ``async with store`` (or between
    ``open()`` and ``aclose()``); outside, every verb raises StoreNotOpenError."""

    @pytest.mark.parametrize("call", _every_verb())
    async def test_every_verb_needs_an_open_store(self, harness: Harness, call: Any) -> None:
        assert harness.twin is not None, TWIN_NEEDED
        store = harness.twin()
        with pytest.raises(StoreNotOpenError, match="not open"):
            await call(store)
        await store.open()
        await store.aclose()
        with pytest.raises(StoreNotOpenError):
            await call(store)

    async def test_a_claims_next_due_time_does_not_outlive_the_store(self, harness: Harness) -> None:
        """What a claim read of the next due time is gone with ``aclose``: a closed store raises
        like every verb, and a reopened one answers from the store, not from before."""
        assert harness.twin is not None, TWIN_NEEDED
        store = harness.twin()
        async with store:
            await store.push(N, "later", ttl=30, id="a")
            assert await store.claim(N, lease=5, limit=10) == []
        with pytest.raises(StoreNotOpenError, match="not open"):
            await store.ttn_after_claim(N)
        async with store:
            await store.pull(N, "a")  # the next due time the claim read is no longer true
            assert await store.ttn_after_claim(N) is None

    async def test_a_declared_schema_is_up_to_date_once_open(self, harness: Harness) -> None:
        """A store that declares ``migrate`` (a schema of its own) has made it by ``open``:
        ``check_schema`` finds nothing wrong, and ``migrate`` again changes nothing."""
        needs(harness.store, "migrate")
        s = harness.store
        assert await s.check_schema() is None
        version = await s.migrate()
        assert type(version) is int
        assert version >= 1
        assert await s.migrate() == version
        assert await s.check_schema() is None

    async def test_subscribe_needs_an_open_store(self, harness: Harness) -> None:
        assert harness.twin is not None, TWIN_NEEDED
        with pytest.raises(StoreNotOpenError):
            async with harness.twin().subscribe(N):
                pass

    async def test_open_and_close_are_idempotent_and_elements_stay(self, harness: Harness) -> None:
        assert harness.twin is not None, TWIN_NEEDED
        store = harness.twin()
        await store.open()
        await store.open()
        await store.push(N, "kept", ttl=0, id="k")
        await store.aclose()
        await store.aclose()
        async with store:
            assert await store.look(N, "k") == "kept"


class WorkersContract(_Contract):
    """The worker registry: heartbeats upsert, expire after their TTL, stay listed as expired for
    ``WORKER_KEEP``, and a deregistered worker is gone at once."""

    async def test_register_refresh_expire_forget(self, harness: Harness) -> None:
        needs(harness.store, "workers")
        s = harness.store
        assert await s.workers() == []
        await s.heartbeat("w2", {"host": "b", "n": 1}, ttl=3)
        await s.heartbeat("w1", {"host": "a", "handlers": {"jobs": {"in_flight": 2}}}, ttl=3)
        (w1, w2) = await s.workers()
        jobs = {"jobs": {"in_flight": 2}}
        assert (w1.id, w1.data, w1.alive) == ("w1", {"host": "a", "handlers": jobs}, True)
        assert (w2.id, w2.data, w2.alive) == ("w2", {"host": "b", "n": 1}, True)
        assert w1.expires == about(w1.last_seen + 3)
        assert w1.age == about(0)
        harness.advance(2)
        await s.heartbeat("w2", {"host": "b", "n": 2}, ttl=3)  # replaces the data, moves the expiry
        harness.advance(1.5)  # w1 expired at 3; w2 expires at 5
        (w1, w2) = await s.workers()
        assert (w1.alive, w1.age) == (False, about(3.5))
        assert (w2.alive, w2.data["n"], w2.age) == (True, 2, about(1.5))
        harness.advance(2)
        assert [w.alive for w in await s.workers()] == [False, False]
        await s.heartbeat("w1", {"host": "a"}, ttl=3)  # a worker that comes back is alive again
        assert [(w.id, w.alive) for w in await s.workers()] == [("w1", True), ("w2", False)]
        harness.advance(WORKER_KEEP)  # w2 expired WORKER_KEEP ago: forgotten
        await s.heartbeat("w1", {"host": "a"}, ttl=3)
        assert [(w.id, w.alive) for w in await s.workers()] == [("w1", True)]
        # Workers are not elements: no dehydrator holds them.
        assert await s.names() == []

    async def test_deregister(self, harness: Harness) -> None:
        needs(harness.store, "workers")
        s = harness.store
        await s.heartbeat("w", {}, ttl=10)
        await s.heartbeat("other", {}, ttl=10)
        assert await s.deregister_worker("w") is True
        assert await s.deregister_worker("w") is False
        assert [w.id for w in await s.workers()] == ["other"]

    async def test_bad_input_and_not_open(self, harness: Harness) -> None:
        needs(harness.store, "workers")
        s = harness.store
        bad: list[Any] = [
            lambda: s.heartbeat("", {}, ttl=1),
            lambda: s.heartbeat(cast(str, 7), {}, ttl=1),
            lambda: s.heartbeat("w", {}, ttl=0),
            lambda: s.heartbeat("w", {}, ttl=MAX_SECONDS + 1),
            lambda: s.heartbeat("w", cast(dict[str, Any], ["not", "an", "object"]), ttl=1),
            lambda: s.heartbeat("w", cast(Any, {1: "key not a str"}), ttl=1),
            lambda: s.heartbeat("w", {"x": object()}, ttl=1),
            lambda: s.heartbeat("w", {"x": float("nan")}, ttl=1),
            lambda: s.heartbeat("w", {"x": "\ud800"}, ttl=1),
            lambda: s.heartbeat("w", {"x": "y" * 70_000}, ttl=1),
            lambda: s.deregister_worker(""),
        ]
        for call in bad:
            with pytest.raises(InvalidArgumentError):
                await call()
        assert await s.workers() == []
        assert harness.twin is not None, TWIN_NEEDED
        store = harness.twin()
        for call in (
            lambda: store.heartbeat("w", {}, ttl=1),
            lambda: store.deregister_worker("w"),
            lambda: store.workers(),
        ):
            with pytest.raises(StoreNotOpenError):
                await call()


class SerializersContract(_Contract):
    async def test_a_mismatched_serializer_is_refused_and_nothing_changes(self, harness: Harness) -> None:
        s = harness.store
        if serializer_of(s) is None:
            pytest.skip("this store keeps elements as objects, not serialized")
        if not harness.shared:
            pytest.skip("another store object does not see this one's elements")
        assert harness.twin is not None, TWIN_NEEDED
        await s.push(N, {"a": 1}, ttl=0, id="x")
        before = await state(s)
        async with harness.twin(serializer="pickle") as other:
            for call in (
                lambda: other.look(N, "x"),
                lambda: other.look_many(N, ["x"]),
                lambda: other.pull(N, "x"),
                lambda: other.poll(N),
                lambda: other.claim(N, lease=5),
                lambda: other.update(N, "x", 2),
            ):
                with pytest.raises(SerializerMismatchError) as raised:
                    await call()
                assert (raised.value.stored, raised.value.configured) == ("json", "pickle")
                assert "serializer='json'" in str(raised.value)
        assert await state(s) == before

    async def test_every_verb_hands_back_what_its_serializer_reads(self, harness: Harness) -> None:
        """What a store keeps is what its serializer wrote: every verb that files an element files
        those bytes, and every verb that hands one back hands back what they read (a tuple comes
        back a list with JSON or msgpack, stays a tuple with pickle), a new object each time, so
        a handler's change to its element changes nothing stored. The memory store without a
        serializer keeps the objects themselves (``memory://?serializer=json`` is the one to test
        on); with one, it does as every other store does."""
        s = harness.store
        serializer = serializer_of(s)
        if serializer is None:
            pytest.skip("this store keeps elements as objects, not serialized")

        def stored(element: Any) -> Any:
            return serializer.loads(serializer.dumps(element))

        given = ("t", 1)
        read = stored(given)
        await s.push(N, given, ttl=0, id="push")
        await s.push_many(N, [(given, 0, "many")])
        await s.push(N, "x", ttl=0, id="replaced")
        await s.push(N, given, ttl=0, id="replaced", replace=True)
        await s.push(N, "x", ttl=0, id="unheld")
        unheld = await s.info(N, "unheld")
        assert unheld is not None
        assert await change_schedule(s, N, "unheld", unheld, given, 0, given) is True
        await s.push(N, "x", ttl=0, id="updated")
        assert await s.update(N, "updated", given) == "x"
        ids = ["push", "many", "replaced", "unheld", "updated"]
        assert await s.look_many(N, ids) == [read] * 5
        first, again = await s.look(N, "push"), await s.look(N, "push")
        assert first == again == read
        assert first is not again
        claims = {c.id: c for c in await s.claim(N, lease=60)}
        assert {id: c.element for id, c in claims.items()} == dict.fromkeys(ids, read)
        if isinstance(read, list):
            claims["push"].element.append("changed")  # what a handler that changes its element does
        assert await s.look(N, "push") == read
        assert await s.update(N, "updated", [given], token=claims["updated"].token) == read
        assert await s.look(N, "updated") == [read]
        assert await rearm(s, N, [ending(claims["push"], {"k": given}, 30.0)]) == [True]
        assert await s.look(N, "push") == {"k": read}
        assert await s.xack(N, "many", token=claims["many"].token) == [read]
        assert await s.pull(N, "replaced") == read
        harness.advance(30)
        assert await s.poll(N) == [{"k": read}]
        assert sorted(await s.ids(N)) == ["unheld", "updated"]

    async def test_what_json_cannot_carry_is_refused_by_every_verb_that_files(self, harness: Harness) -> None:
        """A datetime or a set (what a test on objects passes with and production refuses):
        ``InvalidTypeError`` from push, push_many, replace, update, replace_if, update_if and a
        run's end, nothing changed."""
        from datetime import UTC, datetime

        s = harness.store
        if getattr(serializer_of(s), "name", None) != "json":
            pytest.skip("this store does not serialize with JSON")
        await s.push(N, "kept", ttl=0, id="a")
        await s.push(N, "held", ttl=0, id="h")
        (claim,) = [c for c in await s.claim(N, lease=60) if c.id == "h"]
        before = await state(s)
        for bad in (datetime(2026, 1, 2, tzinfo=UTC), {"a", "b"}, {"at": {1}}):
            calls: list[Coroutine[Any, Any, object]] = [
                s.push(N, bad, ttl=0, id="new"),
                s.push(N, bad, ttl=0, id="a", replace=True),
                s.push_many(N, [("fine", 0, "n1"), (bad, 0, "n2")]),
                s.replace_if(N, [("a", 0, bad, 0)]),
                s.update_if(N, "a", 0, bad),
                s.update(N, "a", bad),
                s.update(N, "h", bad, token=claim.token),
                rearm(s, N, [ending(claim, bad, 0)]),
            ]
            for call in calls:
                with pytest.raises(InvalidTypeError, match="not JSON-serializable"):
                    await call
        assert await state(s) == before
        assert await s.look_many(N, ["a", "h"]) == ["kept", "held"]


async def revision_of(store: Store, id: str, name: str = N) -> int | None:
    """The element's revision as :meth:`Store.info` gives it; ``None`` if the id is unknown."""
    info = await store.info(name, id)
    return None if info is None else info.revision


class RevisionsContract(_Contract):
    """Revisions and compare-and-set: every write of an element gives it a revision never given
    before (a lease's renewal keeps it), and ``replace_if``, ``update_if`` and ``pull_if`` write
    only while the element still has the revision they are given."""

    async def test_read_is_look_and_info_in_one(self, harness: Harness) -> None:
        s = harness.store
        assert await s.read(N, "a") is None
        assert await s.read("never-used", "a") is None
        await s.push(N, {"n": 1}, ttl=5, id="a")
        read = await s.read(N, "a")
        assert read is not None
        element, info = read
        assert element == {"n": 1}
        assert info == await s.info(N, "a")
        assert info.revision == await revision_of(s, "a")
        assert isinstance(info.revision, int)
        assert not isinstance(info.revision, bool)
        assert info.revision >= 0
        assert (info.id, info.attempt, info.claimed, info.ttl) == ("a", 0, False, about(5))
        harness.advance(5)
        (claim,) = await s.claim(N, lease=30)
        read = await s.read(N, "a")
        assert read is not None
        assert read[0] == {"n": 1}
        assert (read[1].attempt, read[1].claimed, read[1].revision) == (1, True, claim.revision)
        assert await s.size(N) == 1  # a read takes nothing

    async def test_every_write_changes_the_revision_and_a_renewal_keeps_it(self, harness: Harness) -> None:
        """Each write gives the element a revision it never had (nor any element before it); a
        read, a lease's renewal and a write fenced out (that does nothing) keep it."""
        s = harness.store
        seen: list[int] = []

        async def changed(id: str = "a") -> int:
            rev = await revision_of(s, id)
            assert rev is not None
            assert rev not in seen, f"revision {rev} given again (seen: {seen})"
            seen.append(rev)
            return rev

        async def kept(id: str = "a") -> None:
            assert await revision_of(s, id) == seen[-1]

        await s.push(N, "v1", ttl=0, id="a")
        await changed()
        await s.look(N, "a")
        await s.look_many(N, ["a"])
        await s.xpoll(N)
        await s.ids(N)
        await s.summary(N)
        await s.read(N, "a")
        await kept()
        await s.push(N, "v2", ttl=0, id="a", replace=True)
        await changed()
        await s.update(N, "a", "v3")
        await changed()
        (claim,) = await s.claim(N, lease=10)
        assert claim.revision == await changed()
        assert await s.extend(N, "a", lease=20, token=claim.token) is not None
        await kept()
        assert await s.ack(N, [("a", claim.token + 1)]) == [False]
        assert await s.reschedule(N, "a", ttl=0, token=claim.token + 1) is False
        await kept()
        await s.update(N, "a", "v4", token=claim.token)
        await changed()
        assert await s.reschedule(N, "a", ttl=0, token=claim.token) is True
        await changed()
        (claim,) = await s.claim(N, lease=10)
        assert claim.revision == await changed()
        assert await s.reschedule_many(N, [("a", claim.token, 0)]) == [True]
        await changed()
        (claim,) = await s.claim(N, lease=10)
        assert claim.revision == await changed()
        assert await s.hand_back(N, [("a", claim.token, 0)]) == [True]
        await changed()
        assert await s.hand_back(N, [("a", claim.token, 0)]) == [False]  # not claimed now
        await kept()
        assert await s.reschedule(N, "a", ttl=3) is True  # unfenced
        await changed()
        harness.advance(3)
        (claim,) = await s.claim(N, lease=10)
        assert claim.revision == await changed()
        assert await s.replace_if(N, [("a", claim.revision - 1, "v5", 0)]) == [None]  # nothing done
        await kept()
        harness.advance(10)  # the lease ran out
        assert (await s.replace_if(N, [("a", claim.revision, "v6", 0)]))[0] is not None
        await changed()
        (claim,) = await s.claim(N, lease=10)
        assert claim.revision == await changed()
        assert await rearm(s, N, [ending(claim, "v7", 0)]) == [True]
        await changed()
        # A new element under a reused id never has an old element's revision.
        assert await s.pull(N, "a") is not None
        await s.push(N, "again", ttl=0, id="a")
        await changed()
        assert await s.ack(N, [("a", (await s.claim(N, lease=10))[0].token)]) == [True]
        await s.push_many(N, [("b", 0, "b"), ("again", 0, "a")])
        await changed("b")
        await changed("a")
        # Writes to other elements do not touch it.
        await s.push(N, "c", ttl=0, id="c")
        await s.update(N, "b", "b2")
        await s.pull(N, "b")
        await kept()

    async def test_a_rearm_changes_the_revision_in_its_merge_cases(self, harness: Harness) -> None:
        """A schedule changed while its occurrence ran (merged with the next time given), and
        one re-planned meanwhile (filed as stored, due at once): each rearm is a write, and each
        element filed has a revision neither the claim nor the change had. The holder's update
        in between (recording the occurrence it runs) is a write too."""
        from rehydrate import Cron, Every
        from rehydrate._schedules import make_envelope, with_next

        s = harness.store
        old = make_envelope(
            Every(60), element={"n": 1}, next=120.0, anchor=60.0, misfire="coalesce", grace=None
        )
        await s.push_many(N, [(old, 0, "re"), (old, 0, "same")])
        claims = {c.id: c for c in await s.claim(N, lease=60)}
        seen = {c.revision for c in claims.values()}
        replanned = make_envelope(
            Cron("*/5 * * * *"), element={"n": 2}, next=300.0, anchor=None, misfire="coalesce", grace=None
        )
        await s.update(N, "re", replanned)
        await s.update(N, "same", {**claims["same"].element, "element": {"n": 3}})
        for id in ("re", "same"):
            rev = await revision_of(s, id)
            assert rev is not None
            assert rev not in seen
            seen.add(rev)
        written = await write_back(s, claims["same"], with_next(claims["same"].element, 150.0))
        rev = await revision_of(s, "same")
        assert rev is not None
        assert rev not in seen
        seen.add(rev)
        items = [
            ending(claims["re"], with_next(claims["re"].element, 180.0), 30),
            ending(claims["same"], with_next(claims["same"].element, 180.0), 30, written),
        ]
        assert await rearm(s, N, items) == [True, True]
        for id in ("re", "same"):
            rev = await revision_of(s, id)
            assert rev is not None
            assert rev not in seen, id
            seen.add(rev)
        assert await s.look(N, "re") == replanned

    async def test_a_claim_carries_the_revision_it_filed(self, harness: Harness) -> None:
        """Each claimed element's ``Claim.revision`` is its revision once claimed, taken ahead
        or not; every claim of a batch has its own."""
        s = harness.store
        await s.push_many(N, [(i, 0, f"e{i}") for i in range(5)])
        await s.push(N, "ahead", ttl=3, id="ahead")
        before = {id: await revision_of(s, id) for id in await s.ids(N)}
        ahead = s.capabilities.claim_ahead
        claims = await (s.claim(N, lease=30, ahead=5.0) if ahead else s.claim(N, lease=30))
        assert len(claims) == (6 if ahead else 5)
        for claim in claims:
            assert claim.revision == await revision_of(s, claim.id)
            assert claim.revision != before[claim.id]
        assert len({c.revision for c in claims}) == len(claims)

    async def test_replace_if(self, harness: Harness) -> None:
        """Compare-and-set replace: filed anew (unclaimed, attempt 0, due at now + ttl, a new
        revision) only while the element has the revision given; per item, in a batch."""
        s = harness.store
        await s.push_many(N, [("a", 10, "a"), ("b", 10, "b"), ("c", 10, "c")])
        rev_a, rev_b = await revision_of(s, "a"), await revision_of(s, "b")
        assert rev_a is not None
        assert rev_b is not None
        assert await s.update(N, "b", "b2") == "b"  # b changed since its revision was read
        result = await s.replace_if(
            N, [("a", rev_a, "A", 5), ("b", rev_b, "B", 5), ("missing", rev_a, "M", 5)]
        )
        assert result[1:] == [None, None]
        new_a = result[0]
        assert isinstance(new_a, int)
        assert new_a not in (rev_a, rev_b)
        read = await s.read(N, "a")
        assert read is not None
        assert read[0] == "A"
        info = read[1]
        assert (info.attempt, info.claimed, info.ttl, info.revision) == (0, False, about(5), new_a)
        assert await s.look_many(N, ["b", "missing"]) == ["b2", None]  # nothing done for them
        assert await s.replace_if(N, [("a", rev_a, "stale", 0)]) == [None]  # its old revision
        assert await s.look(N, "a") == "A"
        assert await s.replace_if(N, []) == []
        rev_c = await revision_of(s, "c")
        assert rev_c is not None
        assert await s.replace_if(N, iter([("c", rev_c, "C", 0)])) != [None]
        assert await s.poll(N) == ["C"]  # due now
        assert await s.replace_if("never-used", [("a", new_a, "x", 0)]) == [None]
        assert await s.size(N) == 2

    async def test_replace_if_with_a_claims_revision_ends_that_claim(self, harness: Harness) -> None:
        """With :attr:`Claim.revision`: a fenced end of the claim that files what comes next, in
        one step; refused once anyone wrote the element since the claim, its own renewals aside."""
        s = harness.store
        await s.push(N, "first", ttl=0, id="j")
        (claim,) = await s.claim(N, lease=10)
        assert await s.extend(N, "j", lease=30, token=claim.token) is not None  # a renewal: kept
        (rev,) = await s.replace_if(N, [("j", claim.revision, "next", 5)])
        assert rev is not None
        info = await s.info(N, "j")
        assert info is not None
        assert (info.attempt, info.claimed, info.ttl, info.revision) == (0, False, about(5), rev)
        assert (await s.summary(N)).claimed == 0
        # The claim is over: its token fences nothing in, its revision replaces nothing.
        assert await s.ack(N, [("j", claim.token)]) == [False]
        assert await s.extend(N, "j", lease=10, token=claim.token) is None
        assert await s.replace_if(N, [("j", claim.revision, "again", 0)]) == [None]
        assert await s.claim(N, lease=10) == []
        harness.advance(5)
        (claim,) = await s.claim(N, lease=10)
        assert claim.element == "next"
        # Changed while claimed (an update without the token): the claim's revision is stale.
        await s.update(N, "j", "changed")
        assert await s.replace_if(N, [("j", claim.revision, "lost", 0)]) == [None]
        assert await s.look(N, "j") == "changed"
        assert await s.ack(N, [("j", claim.token)]) == [True]  # the claim itself is untouched
        # The lease ran out and another claim took it: the first claim's revision is stale.
        await s.push(N, "again", ttl=0, id="j")
        (stale,) = await s.claim(N, lease=10)
        harness.advance(10)
        (fresh,) = await s.claim(N, lease=10)
        assert await s.replace_if(N, [("j", stale.revision, "stale", 0)]) == [None]
        assert await s.replace_if(N, [("j", fresh.revision, "fresh", 0)]) != [None]
        assert await s.ack(N, [("j", fresh.token)]) == [False]
        assert await s.poll(N) == ["fresh"]

    async def test_replace_if_in_a_large_batch_keeps_order(self, harness: Harness) -> None:
        """More items than a store's atomic parts: each answered in its place, filed in order."""
        s = harness.store
        n = 2500
        for start in range(0, n, 1000):
            await s.push_many("many", [(i, 0, f"e{i}") for i in range(start, min(n, start + 1000))])
        claims = {c.id: c for c in await s.claim("many", lease=60)}
        while len(claims) < n:
            claims.update((c.id, c) for c in await s.claim("many", lease=60))
        # Every third with a revision its element does not have: refused, in its place.
        items = [(f"e{i}", claims[f"e{i}"].revision + (i % 3 == 0), i, 0.0) for i in range(n)]
        result = await s.replace_if("many", items)
        assert len(result) == n
        done = [r is not None for r in result]
        assert done == [i % 3 != 0 for i in range(n)]
        assert len({r for r in result if r is not None}) == sum(done)
        assert await s.xpoll("many") == [f"e{i}" for i in range(n) if i % 3 != 0]

    async def test_replace_if_checks_every_item_first(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "keep", ttl=1, id="a")
        rev = await revision_of(s, "a")
        assert rev is not None
        before = await state(s)
        bad: list[Any] = [
            [("a", rev, "x", 0), ("a", rev, "y", 0)],  # an id twice
            [("a", rev, "x", 0), ("b", -1, "y", 0)],
            [("a", rev, "x", 0), ("b", True, "y", 0)],
            [("a", rev, "x", 0), ("b", "1", "y", 0)],
            [("a", rev, "x", 0), ("b", 1.0, "y", 0)],
            [("a", rev, "x", 0), ("b", None, "y", 0)],
            [("a", rev, "x", 0), ("b", 1, "y", -1)],
            [("a", rev, "x", 0), ("b", 1, "y", MAX_SECONDS + 1)],
            [("a", rev, "x", 0), ("b", 1, "y", float("nan"))],
            [("a", rev, "x", 0), ("", 1, "y", 0)],
            [("a", rev, "x", 0), (None, 1, "y", 0)],
            [("a", rev, "x", 0), ("\ud800", 1, "y", 0)],
            [("a", rev, "x", 0), ("b", 1, "y")],
            [("a", rev, "x", 0), "b"],
            "ab",
            7,
        ]
        for items in bad:
            with pytest.raises(InvalidArgumentError):
                await s.replace_if(N, items)
        with pytest.raises(InvalidArgumentError):
            await s.replace_if("", [("a", rev, "x", 0)])
        with pytest.raises(InvalidArgumentError):
            await s.replace_if("\udcff", [("a", rev, "x", 0)])
        assert await state(s) == before
        assert await s.look(N, "a") == "keep"

    async def test_replace_if_wakes_a_subscriber_when_sooner(self, harness: Harness) -> None:
        s = harness.store
        await s.push(N, "late", ttl=100, id="a")
        rev = await revision_of(s, "a")
        assert rev is not None
        async with s.subscribe(N) as subscription:
            await subscription.wait(0)
            assert await s.replace_if(N, [("a", rev, "soon", 0)]) != [None]
            with anyio.fail_after(5):
                assert await subscription.wait(None) is True
        assert await s.poll(N) == ["soon"]

    async def test_update_if(self, harness: Harness) -> None:
        """Compare-and-set update: the element replaced, its due time, attempt and claim kept, a
        new revision; nothing done for another revision or an unknown id."""
        s = harness.store
        assert await s.update_if(N, "a", 0, "x") is None
        assert await s.update_if("never-used", "a", 0, "x") is None
        await s.push(N, "v1", ttl=0, id="a")
        await s.push(N, "other", ttl=50, id="b")
        (claim,) = await s.claim(N, lease=10)
        before = await s.info(N, "a")
        assert before is not None
        rev = await s.update_if(N, "a", claim.revision, "v2")
        assert isinstance(rev, int)
        assert rev != claim.revision
        read = await s.read(N, "a")
        assert read is not None
        assert read[0] == "v2"
        assert (read[1].due, read[1].attempt, read[1].claimed) == (before.due, 1, True)  # kept
        assert read[1].revision == rev
        assert await s.update_if(N, "a", claim.revision, "v3") is None  # stale now
        assert await s.look(N, "a") == "v2"
        assert await s.extend(N, "a", lease=10, token=claim.token) is not None  # still its claim
        # The claim's revision is stale: a fenced end of it by revision is refused (what tells
        # the scheduling layer that the element changed while it ran).
        assert await s.replace_if(N, [("a", claim.revision, "next", 0)]) == [None]
        assert await s.ack(N, [("a", claim.token)]) == [True]
        assert await s.update_if(N, "a", rev, "gone") is None  # acked: unknown
        rev_b = await revision_of(s, "b")
        assert rev_b is not None
        assert await s.update_if(N, "b", rev, "x") is None  # another element's revision
        assert await s.update_if(N, "b", rev_b, "b2") is not None
        info = await s.info(N, "b")
        assert info is not None
        assert (info.ttl, info.attempt, info.claimed) == (about(50), 0, False)

    async def test_pull_if(self, harness: Harness) -> None:
        s = harness.store
        assert await s.pull_if(N, "a", 0) is False
        assert await s.pull_if("never-used", "a", 0) is False
        await s.push(N, "v1", ttl=30, id="a")
        rev = await revision_of(s, "a")
        assert rev is not None
        await s.update(N, "a", "v2")
        assert await s.pull_if(N, "a", rev) is False  # changed since
        assert await s.look(N, "a") == "v2"
        rev = await revision_of(s, "a")
        assert rev is not None
        assert await s.pull_if(N, "a", rev) is True  # not due: removed all the same
        assert await s.look(N, "a") is None
        assert await s.pull_if(N, "a", rev) is False
        # Claimed: removed, and the claim is over.
        await s.push(N, "v3", ttl=0, id="a")
        assert await s.pull_if(N, "a", rev) is False  # a new element: not the old revision
        (claim,) = await s.claim(N, lease=10)
        assert await s.pull_if(N, "a", claim.revision) is True
        assert await s.ack(N, [("a", claim.token)]) == [False]
        assert await s.size(N) == 0
        assert (await s.summary(N)).claimed == 0

    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.read(N, ""),
            lambda s: s.read(N, 7),
            lambda s: s.read("", "a"),
            lambda s: s.read(N, "\ud800"),
            lambda s: s.update_if(N, "", 0, "x"),
            lambda s: s.update_if(N, "a", -1, "x"),
            lambda s: s.update_if(N, "a", True, "x"),
            lambda s: s.update_if(N, "a", "0", "x"),
            lambda s: s.update_if(N, "a", None, "x"),
            lambda s: s.update_if("", "a", 0, "x"),
            lambda s: s.update_if(N, "\ud800", 0, "x"),
            lambda s: s.pull_if(N, "", 0),
            lambda s: s.pull_if(N, "a", -1),
            lambda s: s.pull_if(N, "a", False),
            lambda s: s.pull_if(N, "a", 1.5),
            lambda s: s.pull_if("", "a", 0),
            lambda s: s.pull_if("n\udcff", "a", 0),
        ],
    )
    async def test_bad_input_is_refused_and_nothing_changes(self, harness: Harness, call: Any) -> None:
        s = harness.store
        await s.push(N, "keep", ttl=1, id="a")
        before = await state(s)
        with pytest.raises(InvalidArgumentError):
            await call(s)
        assert await state(s) == before
        assert await s.look(N, "a") == "keep"

    async def test_the_verbs_need_an_open_store(self, harness: Harness) -> None:
        assert harness.twin is not None, TWIN_NEEDED
        store = harness.twin()
        calls: list[Any] = [
            lambda: store.read(N, "a"),
            lambda: store.replace_if(N, [("a", 0, "x", 0)]),
            lambda: store.replace_if(N, []),
            lambda: store.update_if(N, "a", 0, "x"),
            lambda: store.pull_if(N, "a", 0),
        ]
        for call in calls:
            with pytest.raises(StoreNotOpenError, match="not open"):
                await call()
        await store.open()
        await store.aclose()
        for call in calls:
            with pytest.raises(StoreNotOpenError):
                await call()

    async def test_serialized_elements(self, harness: Harness) -> None:
        """On a store that keeps bytes: ``read`` hands back what its serializer reads, a new
        object each time; ``replace_if`` and ``update_if`` file the serializer's bytes, refuse
        what it refuses and what is too large (naming the id), and change nothing then."""
        s = harness.store
        serializer = serializer_of(s)
        if serializer is None:
            pytest.skip("this store keeps elements as objects, not serialized")
        given = ("t", 1)
        read = serializer.loads(serializer.dumps(given))
        await s.push(N, given, ttl=0, id="a")
        await s.push(N, "x", ttl=0, id="b")
        first, again = await s.read(N, "a"), await s.read(N, "a")
        assert first is not None
        assert again is not None
        assert first[0] == again[0] == read
        assert first[0] is not again[0]
        old_b = await revision_of(s, "b")
        assert old_b is not None
        (rev_a,) = await s.replace_if(N, [("a", first[1].revision, [given], 0)])
        rev_b = await s.update_if(N, "b", old_b, {"k": given})
        assert rev_a is not None
        assert rev_b is not None
        assert await s.look_many(N, ["a", "b"]) == [[read], {"k": read}]
        if getattr(serializer, "name", None) == "json":
            before = await state(s)
            for bad in (float("nan"), {"when": object()}, {"a", "b"}):
                with pytest.raises(InvalidTypeError, match="not JSON-serializable"):
                    await s.replace_if(N, [("a", rev_a, "fine", 0), ("b", rev_b, bad, 0)])
                with pytest.raises(InvalidTypeError, match="not JSON-serializable"):
                    await s.update_if(N, "a", rev_a, bad)
            assert await state(s) == before
            assert await revision_of(s, "a") == rev_a
        if harness.twin is None or getattr(s, "max_element_bytes", None) is None:
            return
        big = "é" * 600  # 1,202 bytes as JSON
        async with harness.twin(max_element_bytes=1000) as small:
            await small.push(N, "kept", ttl=0, id="kept")
            rev = await revision_of(small, "kept")
            assert rev is not None
            with pytest.raises(ElementTooLargeError, match="'kept'"):
                await small.replace_if(N, [("kept", rev, big, 0)])
            with pytest.raises(ElementTooLargeError, match="'kept'"):
                await small.update_if(N, "kept", rev, big)
            assert await small.look(N, "kept") == "kept"
            assert await revision_of(small, "kept") == rev

    async def test_a_mismatched_serializer_cannot_read(self, harness: Harness) -> None:
        s = harness.store
        if serializer_of(s) is None:
            pytest.skip("this store keeps elements as objects, not serialized")
        if not harness.shared:
            pytest.skip("another store object does not see this one's elements")
        assert harness.twin is not None, TWIN_NEEDED
        await s.push(N, {"a": 1}, ttl=0, id="x")
        async with harness.twin(serializer="pickle") as other:
            with pytest.raises(SerializerMismatchError):
                await other.read(N, "x")
        assert await s.look(N, "x") == {"a": 1}


def _spec(concurrency: int | None = None, *rates: tuple[int, float], lease: float = 10.0) -> LimitSpec:
    return LimitSpec(concurrency=concurrency, rates=tuple(rates), lease=lease)


class LimitsContract(_Contract):
    """Limits (``Store.limit_acquire``, ``limit_park``, ``limit_renew``, ``limit_release``,
    ``limits``): each step atomic, all or nothing, the rules of ``rehydrate._core._limits``."""

    async def test_concurrency_slots_are_held_renewed_released_and_expire(self, harness: Harness) -> None:
        needs(harness.store, "limits")
        s, spec = harness.store, _spec(2, lease=10.0)
        assert (await s.limit_acquire("L", "k", "a", spec)).granted
        harness.advance(1)
        assert (await s.limit_acquire("L", "k", "b", spec)).granted
        no = await s.limit_acquire("L", "k", "c", spec)
        assert not no.granted
        assert no.retry_in == about(9)  # a's lease ends first
        assert no.parked_in is None
        assert no.wake == ()
        assert (await s.limit_acquire("L", "k", "a", spec)).granted  # a holder again: no new slot
        assert not (await s.limit_acquire("L", "k", "c", spec)).granted
        (info,) = await s.limits()
        assert (info.limit, info.key, sorted(info.holders), info.starts, info.waiting) == (
            "L",
            "k",
            ["a", "b"],
            0,
            0,
        )
        released = await s.limit_release("L", "k", "b", spec)
        assert released.granted
        assert not (await s.limit_release("L", "k", "b", spec)).granted  # released already
        assert (await s.limit_acquire("L", "k", "c", spec)).granted
        harness.advance(5)
        assert await s.limit_renew("L", "k", "c", spec)  # c's lease now ends 10 s from here
        harness.advance(6)  # a's ended (renewed at 1, until 11 - 0): it holds nothing
        assert not await s.limit_renew("L", "k", "a", spec)
        assert (await s.limit_acquire("L", "k", "d", spec)).granted
        assert not (await s.limit_acquire("L", "k", "e", spec)).granted
        assert await s.limits("other") == []

    async def test_rates_count_starts_in_a_sliding_window(self, harness: Harness) -> None:
        needs(harness.store, "limits")
        s, spec = harness.store, _spec(None, (2, 10.0), (3, 100.0))
        assert (await s.limit_acquire("R", "k", "a", spec)).granted
        harness.advance(4)
        assert (await s.limit_acquire("R", "k", "b", spec)).granted
        no = await s.limit_acquire("R", "k", "c", spec)
        assert not no.granted
        assert no.retry_in == about(6)  # when a's start leaves the 10 s window
        assert not await s.limit_renew("R", "k", "a", spec)  # a rate holds no slot
        harness.advance(6.01)
        assert (await s.limit_acquire("R", "k", "c", spec)).granted
        harness.advance(20)
        no = await s.limit_acquire("R", "k", "d", spec)  # 3 in 100 s: full until a leaves it
        assert not no.granted
        assert no.retry_in == about(100 - 30.01)
        (info,) = await s.limits("R")
        assert info.starts == 3
        assert info.holders == {}

    async def test_all_or_nothing(self, harness: Harness) -> None:
        needs(harness.store, "limits")
        s, spec = harness.store, _spec(5, (1, 10.0))
        assert (await s.limit_acquire("A", "k", "a", spec)).granted
        no = await s.limit_acquire("A", "k", "b", spec)  # a slot is free, the window is not
        assert not no.granted
        assert no.retry_in == about(10)
        (info,) = await s.limits("A")
        assert (list(info.holders), info.starts) == (["a"], 1)
        assert not (await s.limit_acquire("A", "k", "c", _spec(1))).granted  # and the other way

    async def test_keys_are_apart_and_idle_ones_are_deleted(self, harness: Harness) -> None:
        needs(harness.store, "limits")
        s, spec = harness.store, _spec(1, (5, 2.0), lease=3.0)
        assert (await s.limit_acquire("K", "one", "a", spec)).granted
        assert (await s.limit_acquire("K", "two", "b", spec)).granted
        assert (await s.limit_acquire("K2", "one", "c", spec)).granted
        assert [(i.limit, i.key) for i in await s.limits()] == [("K", "one"), ("K", "two"), ("K2", "one")]
        assert [i.key for i in await s.limits("K")] == ["one", "two"]
        for limit, key, holder in (("K", "one", "a"), ("K", "two", "b"), ("K2", "one", "c")):
            await s.limit_release(limit, key, holder, spec)
        harness.advance(2.5)  # every start has left its window
        assert await s.limits() == []
        assert await s.names() == []  # limits are not dehydrators

    async def test_waiters_queue_and_a_release_wakes_the_head(self, harness: Harness) -> None:
        needs(harness.store, "limits")
        s, spec = harness.store, _spec(1, lease=10.0)
        assert (await s.limit_acquire("W", "k", "h", spec)).granted
        first = await s.limit_acquire("W", "k", "x1", spec, waiter=("jobs", "e1", 0))
        assert not first.granted
        assert first.parked_in == about(10)  # the head: due when the lease ends
        second = await s.limit_acquire("W", "k", "x2", spec, waiter=("jobs", "e2", 3))
        assert second.parked_in == about(10)  # behind it: a horizon out
        assert second.wake == ()
        (info,) = await s.limits("W")
        assert info.waiting == 2
        released = await s.limit_release("W", "k", "h", spec)
        assert [(w.name, w.id, w.attempt) for w in released.wake] == [("jobs", "e1", 0)]
        assert released.wake[0].ttl == about(0)
        # The woken head takes the slot and leaves the queue; the next is moved up to the
        # earliest chance (the new holder's lease end).
        granted = await s.limit_acquire("W", "k", "x1b", spec, waiter=("jobs", "e1", 0))
        assert granted.granted
        assert [(w.id, w.attempt) for w in granted.wake] == []  # e2 was due a horizon out = 10
        harness.advance(4)
        no = await s.limit_acquire("W", "k", "x2b", spec, waiter=("jobs", "e2", 3))
        assert no.parked_in == about(6)  # the head now: x1b's lease ends in 6
        (info,) = await s.limits("W")
        assert info.waiting == 1
        await s.limit_release("W", "k", "x1b", spec)
        assert (await s.limit_acquire("W", "k", "x2c", spec, waiter=("jobs", "e2", 3))).granted
        assert (await s.limits("W"))[0].waiting == 0

    async def test_a_release_wakes_as_many_as_there_is_room_for(self, harness: Harness) -> None:
        needs(harness.store, "limits")
        s, spec = harness.store, _spec(3, lease=30.0)
        for holder in "abc":
            assert (await s.limit_acquire("M", "k", holder, spec)).granted
        for i in range(6):
            await s.limit_acquire("M", "k", f"w{i}", spec, waiter=("jobs", f"e{i}", 0))
        woken = [[w.id for w in (await s.limit_release("M", "k", h, spec)).wake] for h in "abc"]
        assert woken == [["e0"], ["e1"], ["e2"]]  # one per slot freed, in FIFO order
        grant = await s.limit_acquire("M", "k", "n", spec)  # (not one of them: it comes first)
        assert grant.granted
        assert grant.wake == ()  # room for two: e0..e2 are on their way to it
        harness.advance(2)  # they did not come (their elements were being parked, or are gone)
        grant = await s.limit_acquire("M", "k", "m", spec)
        assert grant.granted
        assert [w.id for w in grant.wake] == ["e3"]  # room for one: the next waiter, not all

    async def test_park_queues_many_waiters_in_one_step_and_never_grants(self, harness: Harness) -> None:
        needs(harness.store, "limits")
        s, spec = harness.store, _spec(1, lease=10.0)
        assert (await s.limit_acquire("P", "k", "h", spec)).granted
        first = await s.limit_acquire("P", "k", "x", spec, waiter=("jobs", "e0", 0))
        assert first.parked_in == about(10)  # the head
        parked = await s.limit_park("P", "k", spec, [("jobs", "e1", 0), ("jobs", "e2", 2), ("jobs", "e0", 0)])
        assert not parked.granted
        assert parked.retry_in == about(10)  # h's lease end: no room
        assert parked.parked == (about(10), about(10), about(10))  # behind the head: a horizon out
        assert parked.wake == ()
        (info,) = await s.limits("P")
        assert (list(info.holders), info.waiting) == (["h"], 3)  # e0 kept its place: no new row
        # Released: the head is woken, then the others in FIFO order, one per slot.
        released = await s.limit_release("P", "k", "h", spec)
        assert [(w.id, w.attempt) for w in released.wake] == [("e0", 0)]
        harness.advance(2)  # e0 never came (it is on its way no longer)
        # Parking while there is room: nothing taken, retry_in 0 (the caller's belief was stale),
        # and the head is filed due now; here the FIFO's head is e1, then e2 (one slot: e1).
        stale = await s.limit_park("P", "k", spec, [("jobs", "e3", 0)])
        assert not stale.granted
        assert stale.retry_in == about(0)
        assert [w.id for w in stale.wake] == ["e1"]
        assert stale.parked == (about(10),)
        assert (await s.limits("P"))[0].holders == {}
        # Alone in the FIFO with room, the parked waiter is the head: due now, in ``parked``.
        alone = await s.limit_park("P", "q", spec, [("jobs", "f1", 0), ("jobs", "f2", 0)])
        assert alone.retry_in == about(0)
        assert alone.parked == (about(0), about(10))
        assert alone.wake == ()
        granted = await s.limit_acquire("P", "q", "y", spec, waiter=("jobs", "f1", 0))
        assert granted.granted
        assert (await s.limits("P"))[1].waiting == 1  # f1 left the FIFO; f2 waits

    @pytest.mark.parametrize(
        "waiters",
        [[], [("jobs", "e", 0), ("jobs", "e", 1)], [("jobs", "e")], [None], "jobs", [("jobs", "e", -1)]],
    )
    async def test_park_refuses_bad_waiters(self, harness: Harness, waiters: Any) -> None:
        needs(harness.store, "limits")
        with pytest.raises(InvalidArgumentError):
            await harness.store.limit_park("P", "k", _spec(1), waiters)
        assert await harness.store.limits() == []

    async def test_concurrent_acquires_never_over_admit(self, harness: Harness) -> None:
        needs(harness.store, "limits")
        s, spec = harness.store, _spec(3, (5, 60.0))
        granted: list[str] = []

        async def take(holder: str) -> None:
            if (await s.limit_acquire("C", "k", holder, spec)).granted:
                granted.append(holder)

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(take, f"h{i}")
        assert len(granted) == 3
        for holder in granted:
            await s.limit_release("C", "k", holder, spec)
        granted.clear()
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(take, f"g{i}")
        assert len(granted) == 2  # five starts a minute: three taken already

    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.limit_acquire("", "k", "h", _spec(1)),
            lambda s: s.limit_acquire("L", "", "h", _spec(1)),
            lambda s: s.limit_acquire("L", "k", "", _spec(1)),
            lambda s: s.limit_acquire("L", "k" * 600, "h", _spec(1)),
            lambda s: s.limit_acquire("L", 5, "h", _spec(1)),
            lambda s: s.limit_acquire("L", "k", "h", {"concurrency": 1}),
            lambda s: s.limit_acquire("L", "k", "h", _spec(1), waiter=("jobs", "e")),
            lambda s: s.limit_acquire("L", "k", "h", _spec(1), waiter=("jobs", "e", -1)),
            lambda s: s.limit_renew("L", "k", "", _spec(1)),
            lambda s: s.limit_release("L", None, "h", _spec(1)),
            lambda s: s.limits(""),
        ],
    )
    async def test_bad_input_is_refused_and_nothing_changes(self, harness: Harness, call: Any) -> None:
        needs(harness.store, "limits")
        with pytest.raises(InvalidArgumentError):
            await call(harness.store)
        assert await harness.store.limits() == []

    def test_a_spec_is_checked_when_made(self) -> None:
        for bad in (
            {"concurrency": 0, "lease": 1.0},
            {"concurrency": None, "lease": 1.0},
            {"concurrency": 1, "lease": 0.0},
            {"concurrency": None, "rates": ((0, 1.0),), "lease": 1.0},
            {"concurrency": None, "rates": ((1, 0.0),), "lease": 1.0},
        ):
            with pytest.raises(InvalidArgumentError):
                LimitSpec(**bad)


class StoreContract(
    VerbsContract,
    LeasesContract,
    SummaryContract,
    SubscriptionsContract,
    BadInputContract,
    LifecycleContract,
    WorkersContract,
    SerializersContract,
    RevisionsContract,
    LimitsContract,
):
    """The whole suite: subclass it as ``TestMyStore`` and give it a ``harness`` fixture."""
