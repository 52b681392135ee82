"""The store records (``Claim``, ``ElementInfo``, ``Summary``): frozen, keyword-only, compared by
what says which element they are, shown and pickled whole."""

from __future__ import annotations

import copy
import pickle

import pytest

from rehydrate import Claim, ElementInfo, Summary


def _claim(**changes: object) -> Claim:
    fields: dict[str, object] = {
        "id": "a",
        "element": {"to": "ann"},
        "attempt": 1,
        "lease_until": 30.0,
        "token": 7,
        "due": 1.0,
        "claimed_at": 1.5,
        "revision": 12,
    }
    return Claim(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_claim_is_equal_by_what_it_holds_not_by_its_token_or_times() -> None:
    claim = _claim(element=("t", 1))
    assert claim == _claim(element=("t", 1), token=8, due=0.0, claimed_at=9.0, revision=13)
    assert hash(claim) == hash(_claim(element=("t", 1), token=8))
    assert claim != _claim(element=("t", 1), attempt=2)
    assert claim != _claim(element=("t", 1), lease_until=31.0)
    assert claim != ("a", ("t", 1), 1, 30.0)  # not a tuple
    assert claim.lateness == 0.5
    assert _claim(due=5.0, claimed_at=4.0).lateness == 0.0


def test_records_are_frozen_and_keyword_only() -> None:
    claim = _claim()
    with pytest.raises(AttributeError, match="frozen"):
        claim.id = "b"
    with pytest.raises(AttributeError, match="frozen"):
        del claim.token
    with pytest.raises(AttributeError):
        claim.extra = 1
    with pytest.raises(TypeError):
        Summary(1, 0, 0, None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ElementInfo(id="a", due=1.0, ttl=2.0, attempt=0)  # type: ignore[call-arg]


def test_records_show_every_field_and_survive_pickle_and_copy() -> None:
    records = [
        _claim(),
        ElementInfo(id="a", due=1.0, ttl=2.0, attempt=3, claimed=True, revision=5),
        Summary(size=4, due=1, claimed=2, ttn=None),
    ]
    assert repr(records[0]) == (
        "Claim(id='a', element={'to': 'ann'}, attempt=1, lease_until=30.0, token=7, due=1.0,"
        " claimed_at=1.5, revision=12)"
    )
    assert repr(records[1]) == "ElementInfo(id='a', due=1.0, ttl=2.0, attempt=3, claimed=True, revision=5)"
    assert repr(records[2]) == "Summary(size=4, due=1, claimed=2, ttn=None)"
    for record in records:
        for again in (pickle.loads(pickle.dumps(record)), copy.copy(record), copy.deepcopy(record)):
            assert again == record
            assert repr(again) == repr(record)
    assert pickle.loads(pickle.dumps(records[0])).token == 7
    assert pickle.loads(pickle.dumps(records[0])).revision == 12
    assert copy.copy(records[1]).revision == 5  # type: ignore[attr-defined]
    assert {records[1], records[2]} == {copy.copy(records[1]), copy.copy(records[2])}


def test_the_revision_is_kept_and_not_compared() -> None:
    """Both constructors keep a claim's revision (the keyword one the contract's example store
    uses); two reads of one state are equal whatever their revisions."""
    from rehydrate._core._records import new_claim

    assert _claim(revision=3).revision == 3
    assert Claim(id="a", element=1, attempt=1, lease_until=2.0).revision == 0
    assert new_claim("a", 1, 1, 2.0, 7, 1.0, 1.5, 9).revision == 9
    info = ElementInfo(id="a", due=1.0, ttl=2.0, attempt=0, claimed=False, revision=4)
    assert info.revision == 4
    assert info == ElementInfo(id="a", due=1.0, ttl=2.0, attempt=0, claimed=False, revision=5)
    assert hash(info) == hash(ElementInfo(id="a", due=1.0, ttl=2.0, attempt=0, claimed=False, revision=5))


def test_a_delivery_made_from_a_claim_is_the_one_its_constructor_makes() -> None:
    """The runner fills a ``Delivery``'s slots directly (it makes one per element): every field
    lands where the public constructor puts it, and the record stays frozen."""
    from datetime import UTC, datetime

    from rehydrate import Delivery
    from rehydrate._deliveries import delivery_from_claim
    from rehydrate.stores import MemoryStore

    store, when = MemoryStore(), datetime(2026, 11, 26, 9, tzinfo=UTC)
    fast = delivery_from_claim("jobs", _claim(), store, None, element="el", scheduled_for=when)
    made = Delivery(
        name="jobs",
        id="a",
        element="el",
        attempt=1,
        due=1.0,
        claimed_at=1.5,
        lease_until=30.0,
        token=7,
        store=store,
        scheduled_for=when,
    )
    assert fast == made
    assert repr(fast) == repr(made)
    assert (fast.token, fast.lateness, fast._store, fast._counters) == (7, 0.5, store, None)
    with pytest.raises(AttributeError):
        fast.attempt = 2  # type: ignore[misc]
