"""Every exception rehydrate raises on purpose derives from :class:`RehydrateError`.

Bad input is reported with subclasses that also derive from the matching built-in
(:class:`ValueError`, :class:`TypeError`, :class:`KeyError`), so callers may catch either.
"""

from __future__ import annotations

__all__ = [
    "DuplicateIdError",
    "ElementTooLargeError",
    "InvalidArgumentError",
    "InvalidTypeError",
    "LimitKeyError",
    "RehydrateError",
    "SchedulerNotRunningError",
    "SerializerMismatchError",
    "StoreNotOpenError",
    "StoreRefusedError",
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


class ElementTooLargeError(InvalidArgumentError):
    """An element, serialized, is larger than the store can hold (or than its
    ``max_element_bytes``), and was refused before anything was sent or written.

    Each store's limit is in ``docs/stores.md``: Redis's ``proto-max-bulk-len`` (512 MB by
    default), 500 MiB for PostgreSQL, SQLite's ``SQLITE_MAX_LENGTH`` (10**9 bytes) less room for
    the row. A batch (``push_many``, ``replace_if``) with one such element is refused whole. Large
    data belongs elsewhere (a file, an object store), with a reference to it in the element.
    """

    def __init__(self, message: str, *, id: str | None, size: int, limit: int) -> None:
        super().__init__(message)
        #: The element's id (``None``: none was given, one would have been generated).
        self.id = id
        #: Its size serialized, and the most this store takes, in bytes.
        self.size = size
        self.limit = limit


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
    refused (a password, a database that does not exist: :class:`StoreRefusedError`, never
    transient), which only a change of configuration fixes.
    """

    def __init__(self, *args: object, transient: bool = False) -> None:
        super().__init__(*args)
        #: True when the backend could not be reached at all (refused or timed-out connections,
        #: a server restarting): the same call may succeed later, so ``rehydrate worker`` waits
        #: for such a store at start-up. False when waiting cannot help.
        self.transient = transient


class StoreRefusedError(StoreUnavailableError):
    """The backend answered and refused this store for a reason that waiting will not change: a
    wrong password, an unknown role or database, no permission to connect, a TLS setting the
    server does not accept. The message is the server's reason.

    A :class:`StoreUnavailableError` (code that treats every store it cannot use alike keeps
    working); a caller that waits for a store to come up catches this one first and gives up
    at once, since retrying only repeats the refusal.
    """


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


class LimitKeyError(InvalidArgumentError):
    """A handler's ``limit_key`` raised, or returned what is no key (not a ``str`` or ``int``,
    empty, longer than 512 bytes): that element fails with this error, which names the cause,
    and follows its retry policy; nothing else stops."""
