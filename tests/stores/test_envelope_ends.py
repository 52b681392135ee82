"""A schedule's next occurrence as the scheduling layer files it, without the store knowing what a
schedule is: on a store of this package that writes JSON, from the bytes its claim read with their
end rewritten (``Occurrences.finish``: an :class:`~rehydrate.serializers.Encoded` element), checked
against the envelope encoded whole; and the rule that tells a run's own end from a change made
while it ran (``merge_next``: the claimed envelope with another end only)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rehydrate._core._records import Claim
from rehydrate._occurrences import Occurrences
from rehydrate._schedules import Occurrence, merge_next
from rehydrate.serializers import Encoded
from rehydrate.stores import SQLiteStore
from rehydrate.testing import FakeClock


def encoded(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()


CLAIMED: dict[str, Any] = {
    "rehydrate.schedule": 1,
    "trigger": {"every": 3600.0, "start": 1767225600.0},
    "element": {"user": 1, "text": "é,}"},
    "anchor": 1767225600000000,
    "next": 1795827600000000,
}


def filed(claimed: dict[str, Any], following: int) -> Any:
    """What a runner on a JSON store files as the occurrence ``claimed`` stands for ends."""
    items: list[tuple[Any, ...]] = []
    store = SQLiteStore(":memory:", clock=FakeClock(1000.0))
    occurrences = Occurrences(store, "n", file=lambda *item: items.append(item), ack=lambda *_: None)
    occurrence = Occurrence(None, claimed, claimed["next"] / 1e6, following=following)
    occurrence.encoded = store.serializer.dumps(claimed)  # (what begin keeps as it is claimed)
    claim = Claim(id="s", element=claimed, attempt=1, lease_until=0.0, token=1, revision=1)
    occurrences.finish(claim, occurrence)
    ((_, _, _, _, element, _, _),) = items
    return element


def test_another_next_only_rewrites_the_next() -> None:
    element = filed(CLAIMED, 1795831200000000)
    assert type(element) is Encoded
    assert element.element == {**CLAIMED, "next": 1795831200000000}
    assert element.data == encoded(element.element)
    # The same next: the same bytes (a coalesced occurrence filed for the time it already had).
    again = filed(CLAIMED, CLAIMED["next"])
    assert again.data == encoded(CLAIMED)


def test_a_next_that_is_not_whole_microseconds_is_encoded_whole() -> None:
    element = filed({**CLAIMED, "next": 1.5}, 1795831200000000)
    assert element == {**CLAIMED, "next": 1795831200000000}  # (no Encoded: the store encodes it)


def test_integers_that_part_before_next_are_kept_with_it() -> None:
    """An extra run's end: ``extra`` made ``last_extra``, another ``next``; a pause written
    meanwhile is kept."""
    base = {k: v for k, v in CLAIMED.items() if k != "next"}
    claimed = {**base, "extra": 5, "next": 7}
    element = {**base, "last_extra": 5, "next": 9}
    stored = {**base, "paused": True, "extra": 5, "next": 7}
    assert merge_next(stored, element, claimed) == (
        {**base, "paused": True, "last_extra": 5, "next": 9},
        False,
    )


@pytest.mark.parametrize(
    "element",
    [
        # An equal value that is another object: not made from what the run held.
        {**CLAIMED, "element": {"user": 1, "text": "é,}"}, "next": 1},
        # Another value before the end.
        {**CLAIMED, "element": {"user": 2}, "next": 1},
        # A key less before the end.
        {k: v for k, v in CLAIMED.items() if k != "anchor"},
        # A value before the end that the run did not hold.
        {**{k: v for k, v in CLAIMED.items() if k != "next"}, "paused": True, "next": 1},
        # A next that is not a whole number of microseconds.
        {**CLAIMED, "next": 1.5},
    ],
    ids=["equal-not-same", "changed", "key-less", "bool-at-the-end", "float-next"],
)
def test_anything_else_is_filed_as_given(element: dict[str, Any]) -> None:
    changed = {**CLAIMED, "element": "changed meanwhile"}
    assert merge_next(changed, element, CLAIMED) == (element, False)


def test_a_stored_envelope_that_does_not_end_so_was_replanned() -> None:
    """Another ``next`` stored meanwhile (a new trigger's first occurrence): filed as stored, at once."""
    replanned = {**CLAIMED, "trigger": {"cron": "*/5 * * * *"}, "next": 1}
    assert merge_next(replanned, {**CLAIMED, "next": 2}, CLAIMED) == (replanned, True)
