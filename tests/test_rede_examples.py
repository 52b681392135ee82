"""Every example of the ReDe command reference, replayed on a Dehydrator with a fake clock.

ReDe counts TTLs in milliseconds; rehydrate counts seconds, so ``3000`` there is ``3`` here.
"""

from __future__ import annotations

import pytest

from rehydrate import Dehydrator, UnknownIdError
from rehydrate.testing import FakeClock


def test_push(dehydrator: Dehydrator, clock: FakeClock) -> None:
    """PUSH my_dehydrator 3000 "Dehydrate this" 101; LOOK; POLL (empty); wait 3 s; POLL."""
    assert dehydrator.push("Dehydrate this", ttl=3, id="101") == "101"
    assert dehydrator.look("101") == "Dehydrate this"
    assert dehydrator.poll() == []
    clock.advance(3)
    assert dehydrator.poll() == ["Dehydrate this"]


def test_gidpush(dehydrator: Dehydrator, clock: FakeClock) -> None:
    """GIDPUSH returns a generated id that LOOK finds."""
    gid = dehydrator.push("Dehydrate this", ttl=3)
    assert isinstance(gid, str)
    assert gid
    assert dehydrator.look(gid) == "Dehydrate this"
    assert dehydrator.poll() == []
    clock.advance(3)
    assert dehydrator.poll() == ["Dehydrate this"]


def test_gidpush_ids_are_unique(dehydrator: Dehydrator) -> None:
    ids = {dehydrator.push(i, ttl=1) for i in range(10_000)}
    assert len(ids) == 10_000 == len(dehydrator)
    other = Dehydrator()
    assert not ids & {other.push(i, ttl=1) for i in range(100)}


def test_pull(dehydrator: Dehydrator) -> None:
    """PULL returns the element once, then nil."""
    dehydrator.push("Dehydrate this", ttl=3, id="101")
    assert dehydrator.pull("101") == "Dehydrate this"
    assert dehydrator.pull("101") is None


def test_poll(dehydrator: Dehydrator, clock: FakeClock) -> None:
    """Two TTLs: POLL gives 'that' after 1 s and 'this' after 2 more."""
    dehydrator.push("Dehydrate this", ttl=3, id="101")
    dehydrator.push("Dehydrate that", ttl=1, id="102")
    assert dehydrator.poll() == []
    clock.advance(1)
    assert dehydrator.poll() == ["Dehydrate that"]
    clock.advance(2)
    assert dehydrator.poll() == ["Dehydrate this"]


def test_xpoll(dehydrator: Dehydrator, clock: FakeClock) -> None:
    """XPOLL lists due ids without removing them."""
    dehydrator.push("Dehydrate this", ttl=3, id="101")
    dehydrator.push("Dehydrate that", ttl=1, id="102")
    assert dehydrator.xpoll() == []
    clock.advance(1)
    assert dehydrator.xpoll() == ["102"]
    clock.advance(2)
    # ReDe lists 101 before 102; rehydrate lists due ids in due order, and 102 was due first.
    assert dehydrator.xpoll() == ["102", "101"]
    assert len(dehydrator) == 2


def test_xack(dehydrator: Dehydrator, clock: FakeClock) -> None:
    """POLL takes 102; XACK 101 102 103 gives 'this', nil, nil."""
    dehydrator.push("Dehydrate this", ttl=3, id="101")
    dehydrator.push("Dehydrate that", ttl=1, id="102")
    clock.advance(1)
    assert dehydrator.poll() == ["Dehydrate that"]
    clock.advance(2)
    assert dehydrator.xpoll() == ["101"]
    assert dehydrator.xack("101", "102", "103") == ["Dehydrate this", None, None]
    assert len(dehydrator) == 0


def test_look(dehydrator: Dehydrator) -> None:
    """LOOK shows each element without removing it, as often as asked."""
    dehydrator.push("Dehydrate this", ttl=3, id="101")
    dehydrator.push("Dehydrate that", ttl=3, id="102")
    assert dehydrator.look("101") == "Dehydrate this"
    assert dehydrator.look("102") == "Dehydrate that"
    assert dehydrator.look("102") == "Dehydrate that"
    assert dehydrator.look("103") is None


def test_ttn(dehydrator: Dehydrator, clock: FakeClock) -> None:
    """TTN: 1000 ms, then 0 once due, then 2000 ms after the POLL."""
    assert dehydrator.ttn() is None
    dehydrator.push("Dehydrate this", ttl=3, id="101")
    dehydrator.push("Dehydrate that", ttl=1, id="102")
    assert dehydrator.ttn() == 1.0
    clock.advance(1)
    assert dehydrator.ttn() == 0.0
    assert dehydrator.poll() == ["Dehydrate that"]
    assert dehydrator.ttn() == 2.0


def test_update(dehydrator: Dehydrator, clock: FakeClock) -> None:
    """UPDATE returns the original and LOOK sees the new element; the due time is kept."""
    dehydrator.push("Dehydrate this", ttl=3, id="101")
    clock.advance(1)
    assert dehydrator.update("101", "Dehydrate that") == "Dehydrate this"
    assert dehydrator.look("101") == "Dehydrate that"
    assert dehydrator.ttn() == 2.0
    with pytest.raises(UnknownIdError):
        dehydrator.update("102", "nothing")
