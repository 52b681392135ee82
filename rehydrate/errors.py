"""Every exception rehydrate raises on purpose derives from :class:`RehydrateError`.

Bad input is reported with subclasses that also derive from the matching built-in
(:class:`ValueError`, :class:`TypeError`, :class:`KeyError`), so callers may catch either.
"""

from __future__ import annotations

__all__ = [
    "DuplicateIdError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "RehydrateError",
    "StoreUnavailableError",
    "UnknownIdError",
    "UnsupportedStoreError",
]


class RehydrateError(Exception):
    """Base class of every error rehydrate raises deliberately."""


class InvalidArgumentError(RehydrateError, ValueError):
    """An argument has the right kind but a value the call cannot accept.

    Examples: a negative, NaN or infinite TTL; an empty id; ``limit=0``. Type mistakes (an ``int``
    id, a string TTL) raise this too, and it also derives from :class:`TypeError` through
    :class:`InvalidTypeError`.
    """


class InvalidTypeError(InvalidArgumentError, TypeError):
    """An argument has a type the call cannot accept (an ``int`` id, a ``str`` TTL...)."""


class DuplicateIdError(RehydrateError, KeyError):
    """``push`` was given an id that is already dehydrating (ReDe's PUSH error)."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.id = id

    def __str__(self) -> str:
        return f"an element with id {self.id!r} is already dehydrating"


class UnknownIdError(RehydrateError, KeyError):
    """The id names no element (``update`` of an absent id, like ReDe's UPDATE error)."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.id = id

    def __str__(self) -> str:
        return f"no element with id {self.id!r} is dehydrating"


class StoreUnavailableError(RehydrateError, ConnectionError):
    """The store's backend could not be reached, even after the store's own retries.

    The call may or may not have taken effect; every verb is safe to retry.
    """


class UnsupportedStoreError(RehydrateError, ValueError):
    """``open_store`` was given a URL whose scheme names no store, or a store's extra is missing."""
