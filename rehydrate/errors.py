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
    "SchedulerNotRunningError",
    "SerializerMismatchError",
    "StoreNotOpenError",
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

    The call may or may not have taken effect; every verb is safe to retry. :attr:`transient`
    tells a backend that did not answer (retrying later may succeed) from one that answered and
    refused (a password, a database that does not exist), which only a change of configuration
    fixes.
    """

    def __init__(self, *args: object, transient: bool = False) -> None:
        super().__init__(*args)
        #: True when the backend could not be reached at all (refused or timed-out connections,
        #: a server restarting): the same call may succeed later, so ``rehydrate worker`` waits
        #: for such a store at start-up. False when waiting cannot help.
        self.transient = transient


class StoreNotOpenError(RehydrateError, RuntimeError):
    """A store was used before :meth:`~rehydrate.abc.Store.open` (``async with store``) or after
    :meth:`~rehydrate.abc.Store.aclose`. Every store raises it, the memory store included."""


class SerializerMismatchError(RehydrateError):
    """A store read an element written with another serializer than its own.

    The element is left as it was: open the store with the serializer named here
    (``serializer=``, or ``?serializer=`` in its URL) to read it. Never guessed at: loading
    pickle runs code.
    """

    def __init__(self, message: str, *, stored: str, configured: str) -> None:
        super().__init__(message)
        #: The serializer the element was written with, and the one this store uses.
        self.stored = stored
        self.configured = configured


class SchedulerNotRunningError(RehydrateError, RuntimeError):
    """A call that needs the scheduler running (``async with scheduler``) was made outside it."""


class UnsupportedStoreError(RehydrateError, ValueError):
    """``open_store`` was given a URL whose scheme names no store, or a store's extra is missing."""
