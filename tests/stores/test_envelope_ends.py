"""``ends`` and ``rewritten`` (``rehydrate/stores/_base.py``): how the stores that serialize file a
schedule's next occurrence by rewriting the end of the bytes a claim read, instead of encoding
the envelope again. Each case is checked against the envelope encoded whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rehydrate.stores._base import ends, rewritten


def encoded(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, separators=(",", ":")).encode()


CLAIMED: dict[str, Any] = {
    "rehydrate.schedule": 1,
    "trigger": {"every": 3600.0, "start": 1767225600.0},
    "element": {"user": 1},
    "anchor": 1767225600000000,
    "next": 1795827600000000,
}


def check(claimed: dict[str, Any], element: dict[str, Any]) -> tuple[bytes, bytes]:
    found = ends(claimed, element)
    assert found is not None
    old, new = found
    assert rewritten(encoded(claimed), old, new) == encoded(element)
    return found


def test_another_next_only_rewrites_the_next() -> None:
    element = {**CLAIMED, "next": 1795831200000000}
    assert check(CLAIMED, element) == (b'"next":1795827600000000}', b'"next":1795831200000000}')
    # The same next: the same end (a coalesced occurrence filed for the time it already had).
    assert check(CLAIMED, dict(CLAIMED)) == (b'"next":1795827600000000}',) * 2


def test_integers_that_part_before_next_are_rewritten_with_it() -> None:
    claimed = {**{k: v for k, v in CLAIMED.items() if k != "next"}, "extra": 5, "next": 7}
    element = {**{k: v for k, v in CLAIMED.items() if k != "next"}, "last_extra": 5, "next": 9}
    assert check(claimed, element) == (b'"extra":5,"next":7}', b'"last_extra":5,"next":9}')


def test_a_key_less_at_the_end_is_rewritten_too() -> None:
    element = {k: v for k, v in CLAIMED.items() if k != "anchor"}
    assert check(CLAIMED, element) == (
        b'"anchor":1767225600000000,"next":1795827600000000}',
        b'"next":1795827600000000}',
    )


@pytest.mark.parametrize(
    "element",
    [
        # An equal value that is another object: its bytes are not known to be the same.
        {**CLAIMED, "element": {"user": 1}, "next": 1},
        # Another value before the end.
        {**CLAIMED, "element": {"user": 2}, "next": 1},
        # The same keys in another order: next is not at the end.
        {"next": 1, **{k: v for k, v in CLAIMED.items() if k != "next"}},
        # A value at the end that is not an integer.
        {**{k: v for k, v in CLAIMED.items() if k != "next"}, "paused": True, "next": 1},
        # A next that is not a whole number of microseconds.
        {**CLAIMED, "next": 1.5},
    ],
    ids=["equal-not-same", "changed", "reordered", "bool-at-the-end", "float-next"],
)
def test_anything_else_is_encoded_whole(element: dict[str, Any]) -> None:
    assert ends(CLAIMED, element) is None


def test_a_payload_that_does_not_end_so_is_not_rewritten() -> None:
    assert rewritten(b'{"next":1}', b'"next":2}', b'"next":3}') is None
    assert rewritten(b'{"next":1}', b"", b'"next":3}') is None
