"""What every store shares, so that one condition gives one error from every store.

A store subclasses :class:`StoreBase` (a :class:`~rehydrate.abc.Store`) and gets:

* **the not-open guard.** :meth:`StoreBase._not_open` builds the
  :class:`~rehydrate.errors.StoreNotOpenError` a store raises when it is used before ``open()``
  (``async with store``) or after ``aclose()``. The store keeps its own notion of "open" (a
  connection, a pool...) and calls it where that is missing.
* **serializer handling**, for stores that keep bytes: :meth:`StoreBase._set_serializer` resolves
  a name or a :class:`~rehydrate.abc.Serializer` (JSON by default) into ``_serializer``;
  :meth:`_dumps` serializes an element or raises :class:`~rehydrate.errors.InvalidArgumentError`
  (an ``InvalidTypeError`` for data the serializer cannot take) before anything is written;
  :meth:`_loads` checks the serializer name stored beside a payload and raises
  :class:`~rehydrate.errors.SerializerMismatchError` rather than guess (:meth:`_mismatch` builds
  it for stores that detect a mismatch elsewhere, e.g. in a server-side script).
* **one URL-option parser**, :func:`url_options`: a store's ``from_url`` hands it the URL and a
  table of the options its query may carry (name -> converter, see :func:`as_bool`,
  :func:`as_float`, :func:`as_int`, :func:`as_str`); unknown options are refused with a message
  that lists the known ones, and an option given both in the URL and as an argument is refused.
* **a convention, connect-or-create** (nothing to inherit): every store's ``from_url`` accepts
  ``create`` (``open_store(url, create=False)``). A store that creates its backend on first use
  (SQLite: the file) must refuse to when it is ``False`` and raise
  :class:`~rehydrate.errors.StoreUnavailableError`; stores that create nothing ignore it.

Nothing here does I/O or knows a backend: the stable part a new store (PostgreSQL...) builds on.
The contract suite checks the result: a store's harness (``tests/stores/harness_<name>.py``) gives
the store and a ``twin`` factory, through which the lifecycle and serializer rules are tested.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import parse_qsl

from rehydrate.abc import Serializer, Store
from rehydrate.errors import (
    InvalidArgumentError,
    InvalidTypeError,
    SerializerMismatchError,
    StoreNotOpenError,
)
from rehydrate.serializers import get_serializer

__all__ = [
    "Converter",
    "StoreBase",
    "as_bool",
    "as_float",
    "as_int",
    "as_str",
    "url_options",
]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})

#: A URL option's converter: the option's text in, its value out; ``ValueError`` says what it wants.
Converter = Callable[[str], Any]


def as_str(text: str) -> str:
    if not text:
        raise ValueError("expected a non-empty value")
    return text


def as_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("expected 1, true, yes, on or 0, false, no, off")


def as_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected a whole number") from None


def as_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("expected a number") from None


def url_options(
    url: str,
    query: str,
    known: Mapping[str, Converter],
    given: Mapping[str, Any] | None = None,
    *,
    shown: str | None = None,
) -> dict[str, Any]:
    """The options in ``query`` (a URL's query string), converted by ``known``; only those present.

    Raises :class:`~rehydrate.errors.InvalidArgumentError` for a malformed query, an option not in
    ``known`` (the message lists the known ones), an option given twice, a value its converter
    refuses, or an option that is also in ``given`` (the caller's keyword arguments; ``None``
    values count as not given). ``shown`` is the URL as messages show it (without a password).
    """
    shown = url if shown is None else shown
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise InvalidArgumentError(f"malformed query in {shown!r}: {exc}") from None
    given = given or {}
    found: dict[str, Any] = {}
    for key, text in pairs:
        convert = known.get(key)
        if convert is None:
            raise InvalidArgumentError(
                f"unknown option {key!r} in {shown!r}; known options: {', '.join(sorted(known))}"
            )
        if key in found:
            raise InvalidArgumentError(f"option {key!r} is given twice in {shown!r}")
        if given.get(key) is not None:
            raise InvalidArgumentError(f"{key} is given both in the URL and as an argument")
        try:
            found[key] = convert(text)
        except ValueError as exc:
            raise InvalidArgumentError(f"invalid {key}={text!r} in {shown!r}: {exc}") from None
    return found


class StoreBase(Store):
    """The shared part of the stores; see the module docstring for what a subclass gets."""

    _serializer: Serializer

    def _set_serializer(self, serializer: str | Serializer | None) -> None:
        """Resolve ``serializer`` (a name, an instance, or ``None`` for JSON) for this store."""
        self._serializer = get_serializer(serializer)

    def _not_open(self) -> StoreNotOpenError:
        return StoreNotOpenError(
            f"{self!r} is not open: use it as `async with store:` (or `await store.open()` first)"
        )

    def _dumps(self, element: Any) -> bytes:
        """``element`` as bytes, or a bad-argument error before anything is written."""
        try:
            return self._serializer.dumps(element)
        except InvalidArgumentError:
            raise
        except (TypeError, ValueError) as exc:
            raise InvalidTypeError(
                f"element cannot be serialized by {self._serializer.name!r}: {exc}"
            ) from exc

    def _mismatch(self, name: str, stored: str, id: str | None = None) -> SerializerMismatchError:
        what = f"element {id!r} of {name!r}" if id is not None else f"dehydrator {name!r}"
        return SerializerMismatchError(
            f"{what} was written with the {stored!r} serializer but this store uses "
            f"{self._serializer.name!r}: open it with serializer={stored!r}",
            stored=stored,
            configured=self._serializer.name,
        )

    def _loads(self, name: str, id: str, payload: bytes, stored: str) -> Any:
        """The element of ``payload``, written by the serializer named ``stored``."""
        if stored != self._serializer.name:
            raise self._mismatch(name, stored, id)
        return self._serializer.loads(payload)
