"""A hypothesis state machine drives every verb against a plain reference model."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from rehydrate import Claim, Dehydrator, DuplicateIdError, ElementInfo, UnknownIdError
from rehydrate._core import _dehydrator
from rehydrate.testing import FakeClock

from . import strategies as s

#: Which revision a conditional rule passes: the element's own, one read earlier (perhaps of
#: another element, or of an element gone), or one nobody holds.
_WHICH = st.sampled_from(["current", "current", "old", "none"])


@attrs.define
class Entry:
    element: Any
    due: float
    seq: int
    ttl: float
    attempt: int = 0
    claimed: bool = False
    #: The token of its last claim (the model cannot predict tokens, only record them).
    token: int | None = None
    #: Its revision as last read; ``None`` once a write changed it (the next one read must be
    #: one never given before). The model cannot predict revisions, only record them.
    revision: int | None = None


class Model:
    """The obvious O(n) dehydrator: sort everything on every call."""

    def __init__(self) -> None:
        self.now = 0.0
        self.entries: dict[str, Entry] = {}
        self.seq = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def due_ids(self, limit: int | None, ahead: float = 0.0) -> list[str]:
        due = sorted(
            (e.due, e.seq, id)
            for id, e in self.entries.items()
            # (ahead of time: not under a lease that has not run out)
            if e.due <= self.now or (not e.claimed and e.due <= self.now + ahead)
        )
        return [id for _, _, id in due][:limit]

    def schedule(self, id: str, seconds: float, *, claimed: bool, renewal: bool = False) -> Entry:
        """File ``id`` anew at ``now + seconds``: a write, which changes its revision, unless
        ``renewal`` (a lease's renewal keeps it)."""
        entry = self.entries[id]
        if not renewal:
            entry.revision = None
        entry.due = self.now + seconds
        entry.ttl = float(seconds)
        entry.seq = self.next_seq()
        entry.claimed = claimed
        return entry


class DehydratorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(0.0)
        self.d = Dehydrator(clock=self.clock)
        self.model = Model()
        #: Every token ever issued, stale ones included, for the fenced rules to pick from.
        self.tokens: list[int] = []
        #: Every revision ever read, for the conditional rules to pick from (and to check that
        #: none is given twice).
        self.revisions: list[int] = []
        self.revisions_seen: set[int] = set()

    def observe(self, id: str, revision: int) -> None:
        """Check a revision read of ``id``: the one read before if nothing wrote it since, else
        one never given before."""
        assert type(revision) is int
        assert revision >= 0
        entry = self.model.entries[id]
        if entry.revision is None:
            assert revision not in self.revisions_seen, (id, revision)
            entry.revision = revision
            self.revisions.append(revision)
            self.revisions_seen.add(revision)
        else:
            assert revision == entry.revision, (id, revision, entry.revision)

    def pick_revision(self, id: str, which: str, index: int) -> int:
        """The element's current revision, one read earlier (of any element), or one nobody has."""
        entry = self.model.entries.get(id)
        if which == "current" and entry is not None and entry.revision is not None:
            return entry.revision
        if which == "old" and self.revisions:
            return self.revisions[index % len(self.revisions)]
        return 2**62

    def pick(self, index: int | None) -> int | None:
        """A token issued earlier (or, with no token yet, one nobody holds); ``None`` for no fencing."""
        if index is None:
            return None
        return self.tokens[index % len(self.tokens)] if self.tokens else 1

    def fenced(self, entry: Entry | None, attempt: int | None, token: int | None) -> bool:
        """Whether a call fenced by ``attempt`` and ``token`` may act on ``entry``."""
        return (
            entry is not None
            and (attempt is None or entry.attempt == attempt)
            and (token is None or entry.token == token)
        )

    @rule(element=s.elements, ttl=s.ttls, id=s.ids)
    def push(self, element: Any, ttl: float, id: str) -> None:
        if id in self.model.entries:
            with pytest.raises(DuplicateIdError):
                self.d.push(element, ttl=ttl, id=id)
            return
        assert self.d.push(element, ttl=ttl, id=id) == id
        m = self.model
        m.entries[id] = Entry(element, m.now + ttl, m.next_seq(), float(ttl))

    @rule(element=s.elements, ttl=s.ttls)
    def gidpush(self, element: Any, ttl: float) -> None:
        id = self.d.push(element, ttl=ttl)
        assert id not in self.model.entries
        m = self.model
        m.entries[id] = Entry(element, m.now + ttl, m.next_seq(), float(ttl))

    @rule(id=s.ids)
    def pull(self, id: str) -> None:
        entry = self.model.entries.pop(id, None)
        assert self.d.pull(id) == (None if entry is None else entry.element)

    @rule(id=s.ids)
    def look(self, id: str) -> None:
        entry = self.model.entries.get(id)
        assert self.d.look(id) == (None if entry is None else entry.element)

    @rule(limit=s.limits)
    def poll(self, limit: int | None) -> None:
        ids = self.model.due_ids(limit)
        expected = [self.model.entries.pop(id).element for id in ids]
        assert self.d.poll(limit=limit) == expected

    @rule(limit=s.limits)
    def xpoll(self, limit: int | None) -> None:
        assert self.d.xpoll(limit=limit) == self.model.due_ids(limit)

    @rule(
        ids=st.lists(s.ids, max_size=4),
        attempt=st.none() | st.integers(0, 3),
        token=st.none() | st.integers(0, 1000),
    )
    def xack(self, ids: list[str], attempt: int | None, token: int | None) -> None:
        fence = self.pick(token)
        expected: list[Any] = []
        m = self.model
        for id in ids:
            entry = m.entries.get(id)
            if not self.fenced(entry, attempt, fence) or (
                entry is not None and entry.due > m.now and not entry.claimed
            ):
                expected.append(None)
            else:
                expected.append(m.entries.pop(id).element)
        assert self.d.xack(*ids, attempt=attempt, token=fence) == expected

    @rule(lease=s.leases, limit=s.limits, ahead=st.sampled_from([0.0, 0.0, 0.5, 2.0]))
    def claim(self, lease: float, limit: int | None, ahead: float) -> None:
        m = self.model
        expected = []
        for id in m.due_ids(limit, ahead):
            entry = m.entries[id]
            entry.attempt += 1
            m.schedule(id, lease, claimed=True)  # (a write: a new revision)
            expected.append(Claim(id=id, element=entry.element, attempt=entry.attempt, lease_until=entry.due))
        claims = self.d.claim(lease=lease, limit=limit, ahead=ahead)
        assert claims == expected
        for claim in claims:
            assert claim.token not in self.tokens  # never reused, even for a reused id
            self.tokens.append(claim.token)
            m.entries[claim.id].token = claim.token
            self.observe(claim.id, claim.revision)

    @rule(id=s.ids, token=st.integers(0, 1000))
    def ack(self, id: str, token: int) -> None:
        fence = self.pick(token)
        entry = self.model.entries.get(id)
        ok = self.fenced(entry, None, fence) and entry is not None and entry.claimed
        if ok:
            del self.model.entries[id]
        assert fence is not None
        assert self.d.ack(id, token=fence) is ok

    @rule(
        id=s.ids,
        ttl=s.ttls,
        attempt=st.none() | st.integers(0, 3),
        token=st.none() | st.integers(0, 1000),
    )
    def reschedule(self, id: str, ttl: float, attempt: int | None, token: int | None) -> None:
        fence = self.pick(token)
        ok = self.fenced(self.model.entries.get(id), attempt, fence)
        if ok:
            self.model.schedule(id, ttl, claimed=False)
        assert self.d.reschedule(id, ttl=ttl, attempt=attempt, token=fence) is ok

    @rule(id=s.ids, ttl=s.ttls, token=st.integers(0, 1000))
    def hand_back(self, id: str, ttl: float, token: int) -> None:
        """A claim given back unrun: released with its attempt undone, and its token (no other
        token either) matching nothing since."""
        fence = self.pick(token)
        assert fence is not None
        entry = self.model.entries.get(id)
        ok = self.fenced(entry, None, fence) and entry is not None and entry.claimed
        if ok:
            assert entry is not None
            entry.attempt, entry.token = entry.attempt - 1, None
            self.model.schedule(id, ttl, claimed=False)
        assert self.d.hand_back(id, token=fence, ttl=ttl) is ok

    @rule(
        items=st.lists(
            st.tuples(s.ids, _WHICH, st.integers(0, 1000), s.elements), max_size=6, unique_by=lambda i: i[0]
        ),
        ttls=st.lists(s.ttls, min_size=1, max_size=2),
    )
    def end_claims(self, items: list[tuple[str, str, int, Any]], ttls: list[float]) -> None:
        """A runner's batch of next occurrences: ``replace_if`` on the revisions its claims
        read (the element's current one while it is claimed; a stale one else), a few ttls
        shared by many items (so most join a queue the batch made)."""
        m = self.model
        batch = []
        expected = []
        for i, (id, which, index, element) in enumerate(items):
            entry = m.entries.get(id)
            held = entry is not None and entry.claimed
            revision = self.pick_revision(id, which if held else "none", index)
            ttl = ttls[i % len(ttls)]
            batch.append((id, revision, element, ttl))
            ok = entry is not None and entry.revision == revision
            if ok:
                assert entry is not None
                entry.element, entry.attempt, entry.token = element, 0, None
                m.schedule(id, ttl, claimed=False)
            expected.append(ok)
        done = self.d.replace_if(batch)
        assert [rev is not None for rev in done] == expected
        for (id, *_), rev in zip(batch, done, strict=True):
            if rev is not None:
                self.observe(id, rev)

    @rule(id=s.ids, lease=s.leases, token=st.integers(0, 1000))
    def extend(self, id: str, lease: float, token: int) -> None:
        fence = self.pick(token)
        assert fence is not None
        entry = self.model.entries.get(id)
        expected = None
        if self.fenced(entry, None, fence) and entry is not None and entry.claimed:
            expected = self.model.schedule(id, lease, claimed=True, renewal=True).due
        assert self.d.extend(id, lease=lease, token=fence) == expected

    @precondition(lambda self: any(e.claimed for e in self.model.entries.values()))
    @rule(data=st.data(), lease=s.leases)
    def extend_held(self, data: st.DataObject, lease: float) -> None:
        """A renewal by the claim's holder (its latest token: a stale one is :meth:`extend`'s
        common case): the lease moves, the revision stays."""
        m = self.model
        id = data.draw(st.sampled_from(sorted(id for id, e in m.entries.items() if e.claimed)))
        entry = m.entries[id]
        token = entry.token
        assert token is not None
        expected = m.schedule(id, lease, claimed=True, renewal=True).due
        assert self.d.extend(id, lease=lease, token=token) == expected

    @rule(id=s.ids, element=s.elements)
    def update(self, id: str, element: Any) -> None:
        entry = self.model.entries.get(id)
        if entry is None:
            with pytest.raises(UnknownIdError):
                self.d.update(id, element)
            return
        assert self.d.update(id, element) == entry.element
        entry.element = element
        entry.revision = None

    @rule(id=s.ids, token=st.integers(0, 1000), element=s.elements)
    def update_holding(self, id: str, token: int, element: Any) -> None:
        """The holder's update, under its claim's token: a write like any other."""
        fence = self.pick(token)
        entry = self.model.entries.get(id)
        if not (self.fenced(entry, None, fence) and entry is not None and entry.claimed):
            with pytest.raises(UnknownIdError):
                self.d.update(id, element, token=fence)
            return
        assert self.d.update(id, element, token=fence) == entry.element
        entry.element = element
        entry.revision = None

    # -- revisions: compare-and-set

    @rule(id=s.ids)
    def read(self, id: str) -> None:
        e = self.model.entries.get(id)
        found = self.d.read(id)
        if e is None:
            assert found is None
            return
        assert found is not None
        assert found == (
            e.element,
            ElementInfo(id=id, due=e.due, ttl=e.ttl, attempt=e.attempt, claimed=e.claimed),
        )
        self.observe(id, found[1].revision)

    @rule(
        items=st.lists(
            st.tuples(s.ids, _WHICH, st.integers(0, 1000), s.elements), max_size=4, unique_by=lambda i: i[0]
        ),
        ttls=st.lists(s.ttls, min_size=1, max_size=2),
    )
    def replace_if(self, items: list[tuple[str, str, int, Any]], ttls: list[float]) -> None:
        """Filed anew where the revision is the element's, in order, at one ``now``; a claim
        ended so (its token then matches nothing)."""
        m = self.model
        batch = []
        expected: list[bool] = []
        for i, (id, which, index, element) in enumerate(items):
            revision = self.pick_revision(id, which, index)
            ttl = ttls[i % len(ttls)]
            batch.append((id, revision, element, ttl))
            entry = m.entries.get(id)
            ok = entry is not None and entry.revision == revision
            if ok:
                assert entry is not None
                entry.element, entry.attempt, entry.token = element, 0, None
                m.schedule(id, ttl, claimed=False)
            expected.append(ok)
        done = self.d.replace_if(batch)
        assert [rev is not None for rev in done] == expected
        for (id, *_), rev in zip(batch, done, strict=True):
            if rev is not None:
                self.observe(id, rev)

    @rule(id=s.ids, which=_WHICH, index=st.integers(0, 1000), element=s.elements)
    def update_if(self, id: str, which: str, index: int, element: Any) -> None:
        revision = self.pick_revision(id, which, index)
        entry = self.model.entries.get(id)
        rev = self.d.update_if(id, revision, element)
        if entry is None or entry.revision != revision:
            assert rev is None
            return
        assert rev is not None
        entry.element, entry.revision = element, None  # due time, attempt and claim kept
        self.observe(id, rev)

    @rule(id=s.ids, which=_WHICH, index=st.integers(0, 1000))
    def pull_if(self, id: str, which: str, index: int) -> None:
        revision = self.pick_revision(id, which, index)
        entry = self.model.entries.get(id)
        ok = entry is not None and entry.revision == revision
        if ok:
            del self.model.entries[id]
        assert self.d.pull_if(id, revision) is ok

    @rule(id=s.ids)
    def info(self, id: str) -> None:
        e = self.model.entries.get(id)
        expected = (
            None
            if e is None
            else ElementInfo(id=id, due=e.due, ttl=e.ttl, attempt=e.attempt, claimed=e.claimed)
        )
        assert self.d.info(id) == expected
        if e is not None:
            info = self.d.info(id)
            assert info is not None
            self.observe(id, info.revision)

    @rule(seconds=s.advances)
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.model.now = self.clock()

    @precondition(lambda self: self.model.entries)
    @rule()
    def advance_to_next_due(self) -> None:
        """Jump exactly to the next due time, where ties and boundaries live."""
        nxt = min(e.due for e in self.model.entries.values())
        if nxt > self.model.now:
            self.clock.advance(nxt - self.model.now)
            self.model.now = self.clock()

    @invariant()
    def same_size_and_ttn(self) -> None:
        m = self.model
        assert len(self.d) == len(m.entries)
        assert set(self.d) == set(m.entries)
        expected = None if not m.entries else max(0.0, min(e.due for e in m.entries.values()) - m.now)
        assert self.d.ttn() == expected

    @invariant()
    def revisions_hold(self) -> None:
        """Every element's revision: the one read before unless a write changed it since (a
        renewal is no write), else one never given before, to any element."""
        for id in self.model.entries:
            info = self.d.info(id)
            assert info is not None
            self.observe(id, info.revision)

    @invariant()
    def nodes_held_are_counted(self) -> None:
        """The count of nodes held, which the sweep goes by, is exact (if short, memory could
        grow unswept): the nodes in queues, the loose nodes and the sunk entries of forgotten queues.
        Pushes filed loose without a lookup skip the check, so their window must end before it."""
        assert_nodes_counted(self.d)
        assert self.d._loose_until <= self.d._check_at


def nodes_held(d: Dehydrator) -> int:
    """The nodes a dehydrator holds in its queues and heap, live or dead."""
    queues = [*d._queues.values(), *d._leases.values(), *d._runs.values()]
    loose = sum(1 for entry in d._heads if type(entry[-1]) is not _dehydrator._Queue)
    waiting = sum(map(len, d._later.values()))  # in time slots not yet opened
    return sum(len(q.items) - q.head for q in queues) + loose + waiting


def assert_nodes_counted(d: Dehydrator) -> None:
    sunk = sum(1 for entry in d._heads if type(entry[-1]) is _dehydrator._Queue and entry[0] == float("inf"))
    drawn = int(repr(d._seq)[len("count(") : -1])
    assert drawn - d._left == nodes_held(d) + sunk


#: Runs of the machine per test: a few times the profile's examples (tests/conftest.py), as a run is
#: a program of many steps; HYPOTHESIS_PROFILE=thorough searches harder, like every property test.
RUNS = settings().max_examples * 4


def _machine_settings(runs: int = RUNS) -> settings:
    return settings(max_examples=runs, stateful_step_count=60, deadline=None)


DehydratorMachine.TestCase.settings = _machine_settings(RUNS * 3 // 2)
test_dehydrator_matches_model = DehydratorMachine.TestCase


def test_with_eager_housekeeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same machine with compaction and sweeps on a hair trigger, so they run often."""
    monkeypatch.setattr(_dehydrator, "_COMPACT_MIN", 0)
    monkeypatch.setattr(_dehydrator, "_SWEEP_SLACK", 0)
    run_state_machine_as_test(
        DehydratorMachine,
        settings=_machine_settings(),
    )


def test_with_loose_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same machine with room for two TTL queues, so most elements are filed loose in the heap,
    and a window of two pushes filed loose without a lookup after each that finds no room."""
    monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", 2)
    monkeypatch.setattr(_dehydrator, "_SKIP", 2)
    run_state_machine_as_test(
        DehydratorMachine,
        settings=_machine_settings(RUNS * 3 // 2),
    )


@pytest.mark.parametrize("skip", [0, 3])  # 0: every push looks its TTL up
def test_with_loose_nodes_and_eager_housekeeping(skip: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", 1)
    monkeypatch.setattr(_dehydrator, "_SKIP", skip)
    monkeypatch.setattr(_dehydrator, "_COMPACT_MIN", 0)
    monkeypatch.setattr(_dehydrator, "_SWEEP_SLACK", 0)
    run_state_machine_as_test(
        DehydratorMachine,
        settings=_machine_settings(),
    )


@pytest.mark.parametrize(
    ("per_second", "run_min", "sweep_slack"),
    [(1, 3, 1024), (0.5, 1, 1024), (2, 1, 0)],  # slots of 1, 2 and 0.5 s; runs of one node; eager sweeps
)
def test_with_time_slots(
    per_second: float, run_min: int, sweep_slack: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most elements loose, in time slots as wide as the machine's TTLs and advances, so that a slot
    holds several (ties among them) and is opened into a run; TTLs past a 5 s horizon go into the
    heap beside them."""
    monkeypatch.setattr(_dehydrator, "_QUEUES_MAX", 1)
    monkeypatch.setattr(_dehydrator, "_SLOTS_PER_SECOND", per_second)
    monkeypatch.setattr(_dehydrator, "_HORIZON", 5.0)
    monkeypatch.setattr(_dehydrator, "_RUN_MIN", run_min)
    monkeypatch.setattr(_dehydrator, "_SWEEP_SLACK", sweep_slack)
    run_state_machine_as_test(
        DehydratorMachine,
        settings=_machine_settings(),
    )
