"""The Dehydrator beyond ReDe: leases, fencing, ordering, bad input, memory bounds."""

from __future__ import annotations

import copy
import math
from datetime import timedelta
from typing import Any

import pytest

from rehydrate import (
    Claim,
    Dehydrator,
    DuplicateIdError,
    ElementInfo,
    InvalidArgumentError,
    InvalidTypeError,
    RehydrateError,
    UnknownIdError,
)
from rehydrate._core import _dehydrator
from rehydrate._core._validate import MAX_SECONDS
from rehydrate.testing import FakeClock

from .test_dehydrator_stateful import assert_nodes_counted, nodes_held


def snapshot(d: Dehydrator) -> dict[str, Any]:
    """Everything observable about a dehydrator, without changing it."""
    return {
        "len": len(d),
        "ids": sorted(d),
        "info": {id: d.info(id) for id in d},
        "elements": {id: copy.deepcopy(d.look(id)) for id in d},
        "due": d.xpoll(),
        "ttn": d.ttn(),
    }


class TestOrdering:
    def test_due_order_across_ttls_ties_in_push_order(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("a", ttl=2, id="a")  # due 1002
        clock.advance(1)
        dehydrator.push("b", ttl=1, id="b")  # due 1002 too: pushed later, comes later
        dehydrator.push("c", ttl=0.5, id="c")  # due 1001.5
        dehydrator.push("d", ttl=1, id="d")  # due 1002, after b
        clock.advance(5)
        assert dehydrator.xpoll() == ["c", "a", "b", "d"]
        assert dehydrator.poll(limit=2) == ["c", "a"]
        assert dehydrator.poll() == ["b", "d"]

    def test_zero_ttl_is_due_at_once(self, dehydrator: Dehydrator) -> None:
        dehydrator.push("x", ttl=0)
        assert dehydrator.ttn() == 0.0
        assert dehydrator.poll() == ["x"]

    def test_timedelta_ttl(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("x", ttl=timedelta(milliseconds=1500), id="x")
        assert dehydrator.ttn() == 1.5
        clock.advance(1.5)
        assert dehydrator.poll() == ["x"]

    def test_clock_that_steps_back_stands_still(self) -> None:
        now = [10.0]
        d = Dehydrator(clock=lambda: now[0])
        d.push("a", ttl=1, id="a")
        now[0] = 5.0  # a clock stepping back must not break due order
        d.push("b", ttl=1, id="b")
        assert d.ttn() == 1.0
        now[0] = 11.0
        assert d.poll() == ["a", "b"]

    def test_poll_limit_keeps_the_rest(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        for i in range(10):
            dehydrator.push(i, ttl=i % 3, id=str(i))
        clock.advance(3)
        got = []
        while batch := dehydrator.poll(limit=4):
            assert len(batch) <= 4
            got.extend(batch)
        assert got == [0, 3, 6, 9, 1, 4, 7, 2, 5, 8]

    def test_pull_before_and_after_due(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("early", ttl=5, id="e")
        dehydrator.push("late", ttl=1, id="l")
        assert dehydrator.pull("e") == "early"
        clock.advance(2)
        assert dehydrator.pull("l") == "late"
        assert dehydrator.poll() == []
        assert dehydrator.ttn() is None

    def test_id_can_be_reused_after_it_left(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("one", ttl=5, id="x")
        assert dehydrator.pull("x") == "one"
        dehydrator.push("two", ttl=1, id="x")
        clock.advance(1)
        assert dehydrator.poll() == ["two"]

    def test_none_is_a_valid_element(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push(None, ttl=1, id="n")
        assert "n" in dehydrator
        clock.advance(1)
        assert dehydrator.poll() == [None]
        assert "n" not in dehydrator

    def test_a_queue_emptied_by_poll_still_takes_pushes(
        self, dehydrator: Dehydrator, clock: FakeClock
    ) -> None:
        """Regression: poll took the due prefix of a TTL's queue whose rest was dead (b moved
        away) and left the queue mapped but unseated, so the next push with that TTL was lost."""
        dehydrator.push("a", ttl=1.5, id="a")
        clock.advance(1)
        dehydrator.push("b", ttl=1.5, id="b")
        assert dehydrator.reschedule("b", ttl=0)
        clock.advance(0.5)
        assert dehydrator.poll() == ["b", "a"]
        dehydrator.push("c", ttl=1.5, id="c")
        assert dehydrator.ttn() == 1.5
        clock.advance(1.5)
        assert dehydrator.poll() == ["c"]


class TestClaims:
    def test_claim_leases_and_redelivers(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("job", ttl=1, id="j")
        assert dehydrator.claim(lease=10) == []
        clock.advance(1)
        (first,) = dehydrator.claim(lease=10)
        assert first == Claim(id="j", element="job", attempt=1, lease_until=1011.0)
        # Nobody else sees it while the lease runs.
        assert dehydrator.claim(lease=10) == []
        assert dehydrator.xpoll() == []
        assert dehydrator.ttn() == 10.0
        info = dehydrator.info("j")
        assert info == ElementInfo(id="j", due=1011.0, ttl=10.0, attempt=1, claimed=True)
        clock.advance(10)
        (second,) = dehydrator.claim(lease=10)
        assert second.attempt == 2
        assert second.lease_until == 1021.0

    def test_claim_limit_and_order(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        for i in range(5):
            dehydrator.push(i, ttl=5 - i, id=str(i))
        clock.advance(5)
        claims = dehydrator.claim(lease=1, limit=3)
        assert [c.element for c in claims] == [4, 3, 2]
        assert [c.element for c in dehydrator.claim(lease=1)] == [1, 0]

    def test_xack_removes_a_claimed_element(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("job", ttl=0, id="j")
        (claim,) = dehydrator.claim(lease=30)
        assert dehydrator.xack("j", attempt=claim.attempt) == ["job"]
        assert "j" not in dehydrator
        dehydrator.push("job", ttl=0, id="k")
        (claim,) = dehydrator.claim(lease=30)
        assert dehydrator.xack("k", token=claim.token) == ["job"]
        clock.advance(60)
        assert dehydrator.poll() == []

    def test_stale_ack_does_nothing(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("job", ttl=0, id="j")
        (old,) = dehydrator.claim(lease=5)
        clock.advance(5)  # lease ran out: redelivered to someone else
        (new,) = dehydrator.claim(lease=5)
        assert dehydrator.xack("j", attempt=old.attempt) == [None]
        assert dehydrator.xack("j", token=old.token) == [None]
        assert dehydrator.ack("j", token=old.token) is False
        assert dehydrator.reschedule("j", ttl=100, attempt=old.attempt) is False
        assert dehydrator.reschedule("j", ttl=100, token=old.token) is False
        assert dehydrator.extend("j", lease=100, token=old.token) is None
        assert dehydrator.info("j") == ElementInfo(id="j", due=1010.0, ttl=5.0, attempt=2, claimed=True)
        assert dehydrator.xack("j", token=new.token) == ["job"]

    def test_stale_token_cannot_touch_a_new_element_under_the_same_id(
        self, dehydrator: Dehydrator, clock: FakeClock
    ) -> None:
        """The id is cancelled and reused while the old claim's worker still runs: attempt fencing
        alone would let the old worker's ack delete the new element (both are attempt 1)."""
        dehydrator.push("old", ttl=0, id="doc")
        (old,) = dehydrator.claim(lease=30)
        assert dehydrator.pull("doc") == "old"
        dehydrator.push("new", ttl=0, id="doc")
        (new,) = dehydrator.claim(lease=30)
        assert (old.attempt, new.attempt) == (1, 1)
        assert old.token != new.token
        assert dehydrator.ack("doc", token=old.token) is False
        assert dehydrator.extend("doc", lease=60, token=old.token) is None
        assert dehydrator.reschedule("doc", ttl=0, token=old.token) is False
        assert dehydrator.xack("doc", token=old.token) == [None]
        assert dehydrator.look("doc") == "new"
        assert dehydrator.ack("doc", token=new.token) is True

    def test_tokens_never_repeat(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        tokens = []
        for _ in range(3):
            for i in range(10):
                dehydrator.push(i, ttl=0, id=str(i))
            claims = dehydrator.claim(lease=1)
            tokens += [c.token for c in claims]
            assert [c.attempt for c in claims] == [1] * 10
            for c in claims[:5]:
                assert dehydrator.ack(c.id, token=c.token)
            clock.advance(1)
            again = dehydrator.claim(lease=1)
            assert [c.attempt for c in again] == [2] * 5
            tokens += [c.token for c in again]
            for c in again:
                assert dehydrator.ack(c.id, token=c.token)
        assert len(set(tokens)) == len(tokens) == 45

    def test_ack_after_lease_ran_out_but_before_reclaim(
        self, dehydrator: Dehydrator, clock: FakeClock
    ) -> None:
        dehydrator.push("job", ttl=0, id="j")
        (claim,) = dehydrator.claim(lease=5)
        clock.advance(7)  # the worker was slow, but nobody claimed it again
        assert dehydrator.ack("j", token=claim.token) is True

    def test_xack_leaves_undue_unclaimed_elements(self, dehydrator: Dehydrator) -> None:
        dehydrator.push("later", ttl=5, id="l")
        assert dehydrator.xack("l") == [None]
        assert dehydrator.look("l") == "later"

    def test_reschedule_is_a_delayed_retry(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("job", ttl=0, id="j")
        (claim,) = dehydrator.claim(lease=30)
        assert dehydrator.reschedule("j", ttl=2, token=claim.token) is True
        info = dehydrator.info("j")
        assert info is not None
        assert not info.claimed
        assert info.attempt == 1
        assert dehydrator.claim(lease=30) == []
        clock.advance(2)
        (again,) = dehydrator.claim(lease=30)
        assert again.attempt == 2

    def test_reschedule_unknown_and_unclaimed(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        assert dehydrator.reschedule("nope", ttl=1) is False
        dehydrator.push("x", ttl=10, id="x")
        assert dehydrator.reschedule("x", ttl=1) is True
        clock.advance(1)
        assert dehydrator.poll() == ["x"]

    def test_extend_keeps_a_claim_alive(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("slow", ttl=0, id="s")
        (claim,) = dehydrator.claim(lease=10)
        clock.advance(6)
        assert dehydrator.extend("s", lease=10, token=claim.token) == 1016.0
        clock.advance(6)
        assert dehydrator.claim(lease=10) == []  # the original lease would have run out
        assert dehydrator.xack("s", attempt=1) == ["slow"]

    def test_extend_needs_a_claim(self, dehydrator: Dehydrator) -> None:
        dehydrator.push("x", ttl=5, id="x")
        assert dehydrator.extend("x", lease=10, token=1) is None
        assert dehydrator.extend("missing", lease=10, token=1) is None

    def test_update_keeps_the_claim(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("v1", ttl=0, id="x")
        dehydrator.claim(lease=5)
        assert dehydrator.update("x", "v2") == "v1"
        clock.advance(5)
        (claim,) = dehydrator.claim(lease=5)
        assert (claim.element, claim.attempt) == ("v2", 2)

    def test_pull_a_claimed_element(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        dehydrator.push("x", ttl=0, id="x")
        dehydrator.claim(lease=5)
        assert dehydrator.pull("x") == "x"
        clock.advance(10)
        assert dehydrator.claim(lease=5) == []

    def test_reclaim_drains_the_lease_queue_it_refills(
        self, dehydrator: Dehydrator, clock: FakeClock
    ) -> None:
        """Claims whose leases ran out are claimed again into the very same lease queue."""
        for i in range(3):
            dehydrator.push(i, ttl=0, id=str(i))
        assert len(dehydrator.claim(lease=5)) == 3
        clock.advance(5)
        assert [c.attempt for c in dehydrator.claim(lease=5)] == [2, 2, 2]
        assert dehydrator.ttn() == 5.0
        clock.advance(5)
        assert [c.element for c in dehydrator.claim(lease=5)] == [0, 1, 2]


BAD_DURATIONS = [-1, -0.001, math.nan, math.inf, -math.inf, timedelta(seconds=-1), True]
BAD_DURATION_TYPES = ["5", None, b"1", [1]]
BAD_IDS = ["", 7, None, b"id", ("a",)]
BAD_LIMITS = [0, -1, 1.5, "3", True]


@pytest.fixture
def loaded(dehydrator: Dehydrator, clock: FakeClock) -> Dehydrator:
    dehydrator.push({"n": 1}, ttl=1, id="due")
    dehydrator.push({"n": 2}, ttl=100, id="later")
    dehydrator.push({"n": 3}, ttl=0, id="claimed")
    dehydrator.claim(lease=50, limit=1)
    clock.advance(1)
    return dehydrator


class TestBadInput:
    """Each bad argument raises a clear RehydrateError and changes nothing."""

    @pytest.mark.parametrize("ttl", BAD_DURATIONS + BAD_DURATION_TYPES)
    def test_push_bad_ttl(self, loaded: Dehydrator, ttl: Any) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError, match="ttl"):
            loaded.push("x", ttl=ttl, id="new")
        assert snapshot(loaded) == before

    @pytest.mark.parametrize("ttl", BAD_DURATION_TYPES)
    def test_bad_ttl_type_is_a_type_error(self, loaded: Dehydrator, ttl: Any) -> None:
        with pytest.raises(TypeError):
            loaded.push("x", ttl=ttl)

    @pytest.mark.parametrize("bad_id", [i for i in BAD_IDS if i is not None])
    def test_push_bad_id(self, loaded: Dehydrator, bad_id: Any) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError, match="id"):
            loaded.push("x", ttl=1, id=bad_id)
        assert snapshot(loaded) == before

    def test_push_duplicate_id(self, loaded: Dehydrator) -> None:
        before = snapshot(loaded)
        with pytest.raises(DuplicateIdError, match="already dehydrating") as info:
            loaded.push("x", ttl=1, id="later")
        assert isinstance(info.value, KeyError)
        assert isinstance(info.value, RehydrateError)
        assert snapshot(loaded) == before

    @pytest.mark.parametrize("bad_id", BAD_IDS)
    @pytest.mark.parametrize(
        "call",
        [
            lambda d, i: d.pull(i),
            lambda d, i: d.look(i),
            lambda d, i: d.update(i, "x"),
            lambda d, i: d.info(i),
            lambda d, i: d.xack("due", i),
            lambda d, i: d.reschedule(i, ttl=1),
            lambda d, i: d.extend(i, lease=1, token=1),
        ],
        ids=["pull", "look", "update", "info", "xack", "reschedule", "extend"],
    )
    def test_bad_id_everywhere(self, loaded: Dehydrator, bad_id: Any, call: Any) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError, match="id"):
            call(loaded, bad_id)
        assert snapshot(loaded) == before

    @pytest.mark.parametrize("limit", BAD_LIMITS)
    @pytest.mark.parametrize(
        "call",
        [
            lambda d, n: d.poll(limit=n),
            lambda d, n: d.xpoll(limit=n),
            lambda d, n: d.claim(lease=1, limit=n),
        ],
        ids=["poll", "xpoll", "claim"],
    )
    def test_bad_limit(self, loaded: Dehydrator, limit: Any, call: Any) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError, match="limit"):
            call(loaded, limit)
        assert snapshot(loaded) == before

    @pytest.mark.parametrize("lease", BAD_DURATIONS + BAD_DURATION_TYPES)
    def test_bad_lease(self, loaded: Dehydrator, lease: Any) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError, match="lease"):
            loaded.claim(lease=lease)
        with pytest.raises(InvalidArgumentError, match="lease"):
            loaded.extend("claimed", lease=lease, token=1)
        assert snapshot(loaded) == before

    @pytest.mark.parametrize("ttl", BAD_DURATIONS)
    def test_bad_reschedule_ttl(self, loaded: Dehydrator, ttl: Any) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError, match="ttl"):
            loaded.reschedule("later", ttl=ttl)
        assert snapshot(loaded) == before

    @pytest.mark.parametrize("attempt", [-1, "1", 1.0, True])
    def test_bad_attempt(self, loaded: Dehydrator, attempt: Any) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError, match="attempt"):
            loaded.xack("claimed", attempt=attempt)
        with pytest.raises(InvalidArgumentError, match="attempt"):
            loaded.reschedule("claimed", ttl=1, attempt=attempt)
        assert snapshot(loaded) == before

    @pytest.mark.parametrize("token", [0, -1, "1", 1.0, True])
    def test_bad_token(self, loaded: Dehydrator, token: Any) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError, match="token"):
            loaded.xack("claimed", token=token)
        with pytest.raises(InvalidArgumentError, match="token"):
            loaded.reschedule("claimed", ttl=1, token=token)
        with pytest.raises(InvalidArgumentError, match="token"):
            loaded.extend("claimed", lease=1, token=token)
        with pytest.raises(InvalidArgumentError, match="token"):
            loaded.ack("claimed", token=token)
        assert snapshot(loaded) == before

    def test_extend_and_ack_need_a_token(self, loaded: Dehydrator) -> None:
        with pytest.raises(InvalidArgumentError, match="token"):
            loaded.extend("claimed", lease=1, token=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="token"):
            loaded.ack("claimed", token=None)  # type: ignore[arg-type]

    def test_xack_checks_every_id_first(self, loaded: Dehydrator) -> None:
        before = snapshot(loaded)
        with pytest.raises(InvalidArgumentError):
            loaded.xack("due", "")
        assert snapshot(loaded) == before

    def test_update_unknown(self, loaded: Dehydrator) -> None:
        before = snapshot(loaded)
        with pytest.raises(UnknownIdError) as info:
            loaded.update("missing", 1)
        assert isinstance(info.value, KeyError)
        assert "missing" in str(info.value)
        assert snapshot(loaded) == before

    def test_bad_clock(self) -> None:
        with pytest.raises(InvalidTypeError, match="clock"):
            Dehydrator(clock=3.0)  # type: ignore[arg-type]

    def test_errors_share_a_base(self) -> None:
        for cls in (DuplicateIdError, UnknownIdError, InvalidArgumentError, InvalidTypeError):
            assert issubclass(cls, RehydrateError)
        assert issubclass(InvalidArgumentError, ValueError)
        assert issubclass(InvalidTypeError, TypeError)


class TestMemoryBounds:
    def test_pulled_elements_do_not_pile_up(self, dehydrator: Dehydrator) -> None:
        """Push and pull a long-TTL element over and over: dead nodes are compacted away."""
        dehydrator.push("keep", ttl=3600, id="keep")
        for i in range(10_000):
            dehydrator.push(i, ttl=3600, id=f"x{i}")
            assert dehydrator.pull(f"x{i}") == i
        queues = dehydrator._queues
        assert len(queues) == 1
        (queue,) = queues.values()
        # Dead nodes never outnumber live ones by more than the sweep's slack.
        assert len(queue.items) - queue.head <= 1 + _dehydrator._SWEEP_SLACK + 1

    def test_pulled_payload_is_released_at_once(self, dehydrator: Dehydrator) -> None:
        import weakref

        class Payload:
            pass

        dehydrator.push("keep", ttl=3600, id="keep")
        payload = Payload()
        ref = weakref.ref(payload)
        dehydrator.push(payload, ttl=3600, id="p")
        del payload
        dehydrator.pull("p")
        assert ref() is None

    def test_stale_heads_do_not_pile_up(self, dehydrator: Dehydrator) -> None:
        """Many distinct TTLs each pushed then pulled leave no unbounded heap behind."""
        dehydrator.push("keep", ttl=1e6, id="keep")
        for i in range(10_000):
            dehydrator.push(i, ttl=1000 + i, id="x")
            dehydrator.pull("x")
        assert len(dehydrator._heads) < 3 * _dehydrator._SWEEP_SLACK
        assert len(dehydrator._queues) < 2 * _dehydrator._SWEEP_SLACK
        assert dehydrator.ttn() == 1e6

    def test_after_a_mass_pull_memory_stays_within_the_peak(self, dehydrator: Dehydrator) -> None:
        """Deaths are not counted, so the dead of a mass pull wait for filings: the nodes held never
        pass twice the peak of live ones (plus the slack), and are swept once filings go on."""
        n = 10_000
        for i in range(n):
            dehydrator.push(i, ttl=3600, id=f"x{i}")
        for i in range(n):
            dehydrator.pull(f"x{i}")
        bound = 2 * n + _dehydrator._SWEEP_SLACK + 1
        for i in range(5 * n):
            dehydrator.push(i, ttl=3600, id="y")
            assert nodes_held(dehydrator) <= bound
            dehydrator.pull("y")
        assert nodes_held(dehydrator) <= 2 * _dehydrator._SWEEP_SLACK + 2

    def test_acks_in_claim_order_leave_at_once(self, dehydrator: Dehydrator) -> None:
        """A scheduler acks mostly in claim order: the lease queue's dead front leaves with each
        ack, so no dead nodes add up to a sweep (an O(n) pause in the middle of deliveries)."""
        n = 5_000
        for i in range(n):
            dehydrator.push(i, ttl=0, id=f"x{i}")
        dehydrator.push("keep", ttl=3600, id="keep")
        for _ in range(n // 100):
            claims = dehydrator.claim(lease=60, limit=100)
            for claim in claims:
                assert dehydrator.ack(claim.id, token=claim.token)
            assert nodes_held(dehydrator) <= len(dehydrator) + _dehydrator._COMPACT_MIN + 1
        assert len(dehydrator) == 1
        assert dehydrator.ttn() == pytest.approx(3600)

    def test_rescheduled_elements_do_not_pile_up(self, dehydrator: Dehydrator) -> None:
        dehydrator.push("debounced", ttl=60, id="d")
        for _ in range(10_000):
            assert dehydrator.reschedule("d", ttl=60)
        assert sum(len(q.items) - q.head for q in dehydrator._queues.values()) < 2 * _dehydrator._SWEEP_SLACK
        assert len(dehydrator) == 1


def entries(d: Dehydrator) -> int:
    """Heap entries, with the loose nodes that wait in time slots to be opened into it."""
    return len(d._heads) + sum(map(len, d._later.values()))


class TestLooseNodes:
    """Past ``_QUEUES_MAX`` distinct TTLs, elements are filed loose: in a time slot if due within
    the horizon, else in the heap itself, as in a binary heap."""

    def test_distinct_ttls_past_the_limit_are_loose(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        n = _dehydrator._QUEUES_MAX + 500
        for i in range(n):
            dehydrator.push(i, ttl=1 + (i * 7919 % n) / 1000, id=f"e{i}")
        assert len(dehydrator._queues) == _dehydrator._QUEUES_MAX
        assert entries(dehydrator) == n
        last = n - 1
        info = dehydrator.info(f"e{last}")
        assert info is not None
        assert (info.ttl, info.claimed, info.attempt) == (1 + (last * 7919 % n) / 1000, False, 0)
        clock.advance(1.2)
        due = sorted(i for i in range(n) if 1 + (i * 7919 % n) / 1000 <= 1.2)
        assert sorted(dehydrator.xpoll()) == sorted(f"e{i}" for i in due)
        assert dehydrator.poll() == sorted(due, key=lambda i: i * 7919 % n)
        clock.advance(10)
        assert dehydrator.poll() == sorted(set(range(n)) - set(due), key=lambda i: i * 7919 % n)
        assert dehydrator.ttn() is None

    def test_a_burst_of_distinct_due_times_is_taken_as_one_run(
        self, dehydrator: Dehydrator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Loose elements due within one time slot wait outside the heap; the ``ttn`` that reaches
        their slot sorts them into a run with a single heap entry, claimed in due order. An element
        due past the horizon goes into the heap itself."""
        import random

        monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", 0)
        per_second = _dehydrator._SLOTS_PER_SECOND
        start = math.ceil((clock() + 10) * per_second) / per_second  # a slot's start, 10 s ahead
        rng = random.Random(3)
        dues = [start + rng.uniform(0, 0.5 / per_second) for _ in range(1000)]
        for i, due in enumerate(dues):
            dehydrator.push(i, ttl=due - clock(), id=f"e{i}")
        dehydrator.push("far", ttl=_dehydrator._HORIZON + 1, id="far")
        assert len(dehydrator._later) == 1
        assert len(dehydrator._heads) == 1  # only the element past the horizon
        assert dehydrator.ttn() == pytest.approx(min(dues) - clock())
        assert not dehydrator._later
        assert len(dehydrator._heads) == 2  # the run's entry, and the far element
        assert len(dehydrator._runs) == 1
        clock.advance(11)
        claims = dehydrator.claim(lease=30, limit=600) + dehydrator.claim(lease=30, limit=600)
        assert [claim.element for claim in claims] == sorted(range(1000), key=dues.__getitem__)
        assert not dehydrator._runs  # drained, and forgotten
        assert dehydrator.info("far") is not None

    def test_after_a_miss_the_next_pushes_are_loose_without_a_lookup(
        self, dehydrator: Dehydrator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", 2)
        monkeypatch.setattr(_dehydrator, "_SKIP", 3)

        def queued(ttl: float) -> int:
            queue = dehydrator._queues[ttl]
            return len(queue.items) - queue.head

        dehydrator.push("a", ttl=5, id="a")
        dehydrator.push("b", ttl=7, id="b")
        dehydrator.push("c", ttl=9, id="c")  # no room for a third queue: loose, and a window opens
        for i in range(3):  # TTL 5 has a queue, but these are not looked up
            dehydrator.push(f"w{i}", ttl=5, id=f"w{i}")
        assert queued(5) == 1
        dehydrator.push("d", ttl=5, id="d")  # the window is over: back in its queue
        assert queued(5) == 2
        assert entries(dehydrator) == 2 + 4  # two queue entries, four loose nodes
        info = dehydrator.info("w0")
        assert info is not None
        assert (info.ttl, info.claimed) == (5, False)
        clock.advance(5)  # one due time for a, w0..w2 and d: ties in push order, queued or loose
        assert dehydrator.ttn() == 0.0
        assert dehydrator.poll(limit=2) == ["a", "w0"]
        assert dehydrator.poll() == ["w1", "w2", "d"]
        clock.advance(4)
        assert dehydrator.poll() == ["b", "c"]
        assert len(dehydrator) == 0

    def test_a_claimed_loose_element_is_claimed(
        self, dehydrator: Dehydrator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", 0)
        dehydrator.push("x", ttl=1, id="x")
        assert dehydrator.xack("x") == [None]  # not due, not claimed
        clock.advance(1)
        (claim,) = dehydrator.claim(lease=30)
        info = dehydrator.info("x")
        assert info is not None
        assert info.claimed
        assert info.ttl == 30
        assert dehydrator.summary().claimed == 1
        assert dehydrator.reschedule("x", ttl=5, token=claim.token)
        info = dehydrator.info("x")
        assert info is not None
        assert (info.claimed, info.ttl, info.attempt) == (False, 5, 1)
        assert dehydrator.ack("x", token=claim.token) is False
        clock.advance(5)
        assert dehydrator.poll() == ["x"]

    def test_pulled_loose_elements_do_not_pile_up(
        self, dehydrator: Dehydrator, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", 0)
        dehydrator.push("keep", ttl=1e6, id="keep")
        for i in range(10_000):
            dehydrator.push(i, ttl=1000 + i % 3, id="x")
            dehydrator.pull("x")
        assert len(dehydrator._heads) < 3 * _dehydrator._SWEEP_SLACK
        assert dehydrator.ttn() == 1e6

    def test_xpoll_and_xack_drain_loose_elements_in_order(
        self, dehydrator: Dehydrator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", 4)
        n = 5000
        for i in range(n):
            dehydrator.push(i, ttl=(i * 31 % 97) / 10, id=f"e{i}")
        clock.advance(100)
        got: list[int] = []
        while ids := dehydrator.xpoll(limit=100):
            got += dehydrator.xack(*ids)
            assert len(dehydrator._heads) <= n
        assert got == sorted(range(n), key=lambda i: i * 31 % 97)
        assert len(dehydrator) == 0
        assert dehydrator.ttn() is None


@pytest.mark.parametrize(("queues_max", "per_second"), [(0, 64), (3, 64), (1024, 64), (0, 0.5), (3, 4)])
def test_a_long_random_workload_matches_a_model(
    queues_max: int, per_second: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of mixed steps at sizes the stateful test does not reach (bulk polls, sweeps);
    with time slots of a 64th of a second (the default), or as wide as the TTLs (runs of many)."""
    import random

    monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", queues_max)
    monkeypatch.setattr(_dehydrator, "_SLOTS_PER_SECOND", per_second)
    monkeypatch.setattr(_dehydrator, "_HORIZON", 10.0)
    monkeypatch.setattr(_dehydrator, "_SWEEP_SLACK", 16)
    rng = random.Random(queues_max)
    clock = FakeClock(0.0)
    d = Dehydrator(clock=clock)
    model: dict[str, tuple[float, int, int]] = {}  # id -> (due, seq, element)
    tokens: dict[str, int] = {}
    seq = 0
    ttls = [rng.choice([0.5, 1, 2]) if rng.random() < 0.5 else rng.uniform(0, 20) for _ in range(60)]

    def due_in_order() -> list[str]:
        now = clock()
        return [
            id
            for id, _ in sorted(((id, v) for id, v in model.items() if v[0] <= now), key=lambda kv: kv[1][:2])
        ]

    for step in range(6000):
        roll = rng.random()
        if roll < 0.45:
            id = f"e{rng.randrange(3000)}"
            if id in model:
                continue
            ttl = rng.choice(ttls)
            d.push(step, ttl=ttl, id=id)
            model[id] = (clock() + ttl, seq, step)
            seq += 1
        elif roll < 0.55 and model:
            id = rng.choice(list(model))
            assert d.pull(id) == model.pop(id)[2]
            tokens.pop(id, None)
        elif roll < 0.62:
            limit = rng.choice([None, 1, 7, 100])
            expected = due_in_order()[:limit]
            assert d.poll(limit=limit) == [model[id][2] for id in expected]
            for id in expected:
                del model[id]
                tokens.pop(id, None)
        elif roll < 0.69:
            ids = d.xpoll(limit=rng.choice([None, 5, 50]))
            assert ids == due_in_order()[: len(ids)]
            acked = ids[: rng.randrange(len(ids) + 1)]
            assert d.xack(*acked) == [model[id][2] for id in acked]
            for id in acked:
                del model[id]
                tokens.pop(id, None)
        elif roll < 0.76:
            lease = rng.choice([3, 7])
            expected = due_in_order()[:20]
            claims = d.claim(lease=lease, limit=20)
            assert [c.id for c in claims] == expected
            for c in claims:
                model[c.id] = (clock() + lease, seq, model[c.id][2])
                seq += 1
                tokens[c.id] = c.token
        elif roll < 0.80 and tokens:
            id = rng.choice(list(tokens))
            assert d.ack(id, token=tokens.pop(id))
            del model[id]
        elif roll < 0.84 and model:
            id = rng.choice(list(model))
            ttl = rng.choice(ttls)
            assert d.reschedule(id, ttl=ttl)
            model[id] = (clock() + ttl, seq, model[id][2])
            seq += 1
            tokens.pop(id, None)
        else:
            clock.advance(rng.choice([0.0, 0.1, 0.5, 2.0]))
        assert len(d) == len(model)
        if step % 50 == 0:
            assert_nodes_counted(d)
        expected_ttn = None if not model else max(0.0, min(v[0] for v in model.values()) - clock())
        assert d.ttn() == expected_ttn
    clock.advance(100)
    assert d.poll() == [model[id][2] for id in due_in_order()]
    assert len(d) == 0


class TestUnicodeIds:
    """Ids are valid Unicode text, as every store requires: a lone surrogate is refused, not stored."""

    @pytest.mark.parametrize("bad", ["\ud800", "a\udcff", "\udfff-tail"])
    def test_lone_surrogates_are_refused(self, dehydrator: Dehydrator, bad: str) -> None:
        dehydrator.push("keep", ttl=1, id="keep")
        for call in (
            lambda: dehydrator.push("x", ttl=1, id=bad),
            lambda: dehydrator.pull(bad),
            lambda: dehydrator.look(bad),
            lambda: dehydrator.info(bad),
            lambda: dehydrator.xack(bad),
            lambda: dehydrator.update(bad, 1),
        ):
            with pytest.raises(InvalidArgumentError, match="lone surrogate"):
                call()
        assert list(dehydrator) == ["keep"]

    def test_any_valid_text_is_an_id(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        for id in ("é", "日本", "😀", "a\u0301"):
            assert dehydrator.push(id, ttl=0, id=id) == id
            assert dehydrator.look(id) == id
        assert dehydrator.poll() == ["é", "日本", "😀", "a\u0301"]


class TestLongestDuration:
    """One maximum for every store and the Dehydrator: MAX_SECONDS (10**9 s, about 31.7 years)."""

    @pytest.mark.parametrize("ttl", [10**400, 1e300, 1_000_000_001, timedelta(days=365 * 32)])
    def test_longer_is_refused_with_the_maximum_named(self, dehydrator: Dehydrator, ttl: Any) -> None:
        with pytest.raises(InvalidArgumentError, match="at most 1,000,000,000 seconds"):
            dehydrator.push("x", ttl=ttl)
        dehydrator.push("x", ttl=1, id="c")
        with pytest.raises(InvalidArgumentError, match="at most"):
            dehydrator.claim(lease=ttl)
        with pytest.raises(InvalidArgumentError, match="at most"):
            dehydrator.reschedule("c", ttl=ttl)
        assert len(dehydrator) == 1

    def test_the_maximum_itself_is_accepted(self, dehydrator: Dehydrator) -> None:
        dehydrator.push("x", ttl=MAX_SECONDS, id="far")
        dehydrator.push("y", ttl=float(MAX_SECONDS), id="far2")
        assert dehydrator.ttn() == MAX_SECONDS


class TestReplaceIfEndsClaims:
    """A batch ``replace_if`` on the revisions claims read (a runner's next occurrences): each
    item ends its claim and files its element anew, at one ``now``, unless written since."""

    def test_each_item_is_fenced_by_its_claims_revision(
        self, dehydrator: Dehydrator, clock: FakeClock
    ) -> None:
        for id in "abc":
            dehydrator.push(id, ttl=0, id=id)
        claims = {c.id: c for c in dehydrator.claim(lease=30)}
        clock.advance(1)
        done = dehydrator.replace_if(
            [
                ("a", claims["a"].revision, "a2", 10),
                ("b", claims["c"].revision, "stale", 0),  # another claim's revision
                ("missing", claims["c"].revision, "x", 0),
                ("c", claims["c"].revision, "c2", timedelta(seconds=2)),
            ]
        )
        assert [revision is not None for revision in done] == [True, False, False, True]
        # That claim has ended: its revision matches nothing now.
        assert dehydrator.replace_if([("c", claims["c"].revision, "again", 0)]) == [None]
        assert [dehydrator.info(id) for id in "ac"] == [
            ElementInfo(id="a", due=1011.0, ttl=10.0, attempt=0, claimed=False),
            ElementInfo(id="c", due=1003.0, ttl=2.0, attempt=0, claimed=False),
        ]
        info = dehydrator.info("b")
        assert info is not None
        assert info.claimed
        clock.advance(2)
        assert dehydrator.poll() == ["c2"]

    @pytest.mark.parametrize(
        "bad",
        [("b", 1, "x", -1), ("b", 1, "x", math.nan), ("b", -1, "x", 1), ("b", None, "x", 1), ("", 1, "x", 1)],
    )
    def test_a_bad_item_files_none(self, dehydrator: Dehydrator, bad: Any) -> None:
        dehydrator.push("a", ttl=0, id="a")
        (claim,) = dehydrator.claim(lease=30)
        before = snapshot(dehydrator)
        with pytest.raises(RehydrateError):
            dehydrator.replace_if([("a", claim.revision, "a2", 0), bad])
        assert snapshot(dehydrator) == before
        assert dehydrator.replace_if([]) == []


class TestPushMany:
    """A batch push: every item as ``push`` would, all at one reading of the clock."""

    def test_one_clock_reading_for_the_batch(self) -> None:
        readings = iter(range(1000, 2000))  # a clock that moves a second at every reading
        dehydrator = Dehydrator(clock=lambda: float(next(readings)))
        ids = dehydrator.push_many([("a", 5, "a"), ("b", 5, None), ("c", timedelta(seconds=7), "c")])
        assert (ids[0], ids[2]) == ("a", "c")
        assert ids[1] not in ("a", "c")
        infos = [dehydrator.info(id) for id in ids]
        assert [i.due for i in infos if i is not None] == [1005.0, 1005.0, 1007.0]
        assert [i.ttl for i in infos if i is not None] == [5.0, 5.0, 7.0]

    def test_equal_due_times_come_out_batch_by_batch(self, dehydrator: Dehydrator, clock: FakeClock) -> None:
        """Batches filed a moment apart for one instant share it exactly (ttls counted from each
        batch's own clock reading), and ties come out in filing order."""
        dehydrator.push_many([(f"a{i}", 10, f"a{i}") for i in range(3)])
        clock.advance(0.25)
        dehydrator.push_many([(f"b{i}", 9.75, f"b{i}") for i in range(3)])
        clock.advance(10)
        claims = dehydrator.claim(lease=30)
        assert [c.id for c in claims] == ["a0", "a1", "a2", "b0", "b1", "b2"]
        assert {c.due for c in claims} == {1010.0}

    def test_duplicates_and_bad_items_file_none(self, dehydrator: Dehydrator) -> None:
        dehydrator.push("x", ttl=1, id="taken")
        before = snapshot(dehydrator)
        with pytest.raises(DuplicateIdError):
            dehydrator.push_many([("a", 1, "fresh"), ("b", 1, "taken")])
        with pytest.raises(DuplicateIdError):
            dehydrator.push_many([("a", 1, "twice"), ("b", 1, "twice")])
        with pytest.raises(InvalidArgumentError):
            dehydrator.push_many([("a", 1, "fresh"), ("b", -1, "bad")])
        with pytest.raises(InvalidTypeError):
            dehydrator.push_many([("a", 1, "fresh"), ("b", 1, 7)])  # type: ignore[list-item]
        assert snapshot(dehydrator) == before
        assert dehydrator.push_many([]) == []

    def test_the_same_elements_as_pushes(self, clock: FakeClock) -> None:
        """Against a push per item at the same moment: the same elements, due times and order."""
        one, many = Dehydrator(clock=clock), Dehydrator(clock=clock)
        items = [({"n": i}, (i * 7) % 5, f"e{i}") for i in range(50)]
        for element, ttl, id in items:
            one.push(element, ttl=ttl, id=id)
        many.push_many(items)
        clock.advance(10)
        assert snapshot(one) == snapshot(many)
        assert one.poll() == many.poll()


# -- revisions: compare-and-set ----------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda d: d.read(""),
        lambda d: d.read(7),
        lambda d: d.update_if("a", -1, "x"),
        lambda d: d.update_if("a", True, "x"),
        lambda d: d.update_if("", 0, "x"),
        lambda d: d.pull_if("a", "0"),
        lambda d: d.pull_if("\ud800", 0),
        lambda d: d.replace_if([("a", 0, "x", 0), ("a", 0, "y", 0)]),
        lambda d: d.replace_if([("a", 0, "x", 0), ("b", 0, "y", -1)]),
        lambda d: d.replace_if([("a", 0, "x", 0), ("b", None, "y", 0)]),
        lambda d: d.replace_if([("a", 0, "x")]),
        lambda d: d.replace_if("ab"),
    ],
)
def test_the_conditional_verbs_refuse_bad_input_and_change_nothing(call: Any) -> None:
    d = Dehydrator(clock=FakeClock())
    d.push("keep", ttl=0, id="a")
    d.push("wait", ttl=1, id="b")
    d.claim(lease=5)
    before = snapshot(d)
    revisions = [d.info(id).revision for id in ("a", "b")]  # type: ignore[union-attr]
    with pytest.raises(InvalidArgumentError):
        call(d)
    assert snapshot(d) == before
    assert [d.info(id).revision for id in ("a", "b")] == revisions  # type: ignore[union-attr]


def test_a_claims_revision_ends_it_in_one_step_and_memory_stays_bounded() -> None:
    """A schedule's next occurrence filed by revision, over and over: the claim ends and the
    next is filed, the nodes held stay counted, and the dead ones are swept as an ack's are."""
    clock = FakeClock()
    d = Dehydrator(clock=clock)
    d.push("first", ttl=0, id="j")
    for n in range(5000):
        (claim,) = d.claim(lease=30)
        assert claim.revision == d.info("j").revision  # type: ignore[union-attr]
        (rev,) = d.replace_if([("j", claim.revision, n, 1.0)])
        assert rev is not None
        assert d.ack("j", token=claim.token) is False
        clock.advance(1)
    assert_nodes_counted(d)
    assert nodes_held(d) <= 2 * len(d) + _dehydrator._SWEEP_SLACK
    assert d.look("j") == 4999
