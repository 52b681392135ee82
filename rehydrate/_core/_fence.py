"""Claim stamps: an element's attempt count and a never-repeated claim number in one ``int``.

A stamp is the fencing token of a claim (``Claim.token``): ``claim number * STAMP + attempt``. The
claim number comes from a counter that never goes back in a store (a dehydrator's own, SQLite's
filing sequence, Redis's), so a stale claimer's token matches neither a later claim of the same
element nor a new element pushed under the same id, whose attempts start again at 1. The stores
keep the stamp where they kept the attempt; the attempt is its low bits.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ATTEMPTS", "STAMP", "attempt_of", "stamp"]

STAMP: Final = 1 << 20
#: The mask of the attempt bits, and the most attempts counted (a claim past it stays at it).
ATTEMPTS: Final = STAMP - 1


def stamp(number: int, attempt: int) -> int:
    """The stamp of claim ``number`` (at least 1) at ``attempt``."""
    return number * STAMP + min(attempt, ATTEMPTS)


def attempt_of(value: int) -> int:
    return value & ATTEMPTS
