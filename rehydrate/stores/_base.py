"""What every store shares, so that one condition gives one error from every store.

A store subclasses :class:`StoreBase` (a :class:`~rehydrate.abc.Store`) and gets:

* **the batch verbs' checks, once.** ``push_many``, ``look_many``, ``replace_if``, ``claim``,
  ``ack``, ``reschedule_many`` and ``hand_back`` are written here: each checks its arguments
  (``rehydrate._core._validate``: the same error, type and message, from every store) and
  answers an empty batch (after :meth:`StoreBase._check_open`), then calls the one protected
  method the store implements on checked arguments (``_push_many``, ``_look_many``,
  ``_replace_if``, ``_claim``, ``_ack``, ``_release``), which does the I/O and refuses only what
  its backend alone cannot take.
* **the not-open guard.** :meth:`StoreBase._not_open` builds the
  :class:`~rehydrate.errors.StoreNotOpenError` a store raises when it is used before ``open()``
  (``async with store``) or after ``aclose()``. The store keeps its own notion of "open" (a
  connection, a pool...) and calls it where that is missing.
* **serializer handling**, for stores that keep bytes: :meth:`StoreBase._set_serializer` resolves
  a name or a :class:`~rehydrate.abc.Serializer` (JSON by default) into ``_serializer``;
  :meth:`_dumps` serializes an element or raises :class:`~rehydrate.errors.InvalidArgumentError`
  (an ``InvalidTypeError`` for data the serializer cannot take) before anything is written, and
  takes an :class:`~rehydrate.serializers.Encoded` element of its serializer's writing as its
  bytes (what the scheduling layer hands in for a schedule's next occurrence: the claimed bytes
  with another ``next``, made above the store, which knows nothing of schedules);
  :meth:`_loads` checks the serializer name stored beside a payload and raises
  :class:`~rehydrate.errors.SerializerMismatchError` rather than guess (:meth:`_mismatch` builds
  it for stores that detect a mismatch elsewhere, e.g. in a server-side script).
* **the TTN that came with a claim**: a store whose claim also reads when the next element is
  due (a claim that took fewer than it asked for) records it in ``_ttn_after[name]``, a due time
  on its clock (``None``: empty), popped when a claim begins; :meth:`StoreBase.ttn_after_claim`
  answers from it once, counted down from :meth:`_ttn_now`, after :meth:`_check_open`; with
  nothing recorded (or no ``_ttn_after``: the memory store), it asks :meth:`ttn`.
* **one URL-option parser**, :func:`url_options`: a store's ``from_url`` hands it the URL and a
  table of the options its query may carry (name -> converter, see :func:`as_bool`,
  :func:`as_float`, :func:`as_int`, :func:`as_str`); unknown options are refused with a message
  that lists the known ones, and an option given both in the URL and as an argument is refused.
* **a convention, connect-or-create** (nothing to inherit): every store's ``from_url`` accepts
  ``create`` (``open_store(url, create=False)``). A store that creates its backend on first use
  (SQLite: the file) must refuse to when it is ``False`` and raise
  :class:`~rehydrate.errors.StoreUnavailableError`; stores that create nothing ignore it.

Nothing here does I/O or knows a backend, and nothing here (nor in any store) knows what a
schedule is: a schedule's rules are written once, above the contract, on its compare-and-set
verbs (``rehydrate._occurrences``, ``rehydrate._admin``). The stable part a new store builds on.
The contract suite checks the result: a store's harness (``tests/stores/harness_<name>.py``) gives
the store and a ``twin`` factory, through which the lifecycle and serializer rules are tested.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final
from urllib.parse import parse_qsl

import anyio

from rehydrate._core import _validate
from rehydrate._core._records import Claim
from rehydrate._core._validate import Seconds
from rehydrate.abc import Serializer, Store
from rehydrate.errors import (
    ElementTooLargeError,
    InvalidArgumentError,
    InvalidTypeError,
    SerializerMismatchError,
    StoreNotOpenError,
)
from rehydrate.serializers import Encoded, get_serializer

__all__ = [
    "Converter",
    "StoreBase",
    "as_bool",
    "as_float",
    "as_int",
    "as_size",
    "as_str",
    "element_bytes",
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


#: The suffixes ``as_size`` reads: decimal (kB, MB, GB) and binary (KiB, MiB, GiB), any case.
_SIZE_UNITS: Final = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def as_size(text: str) -> int:
    """A number of bytes: ``1048576``, ``64KiB``, ``10MB`` (kB, MB, GB are powers of 1000;
    KiB, MiB, GiB of 1024)."""
    lowered = text.strip().lower()
    digits = lowered.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = _SIZE_UNITS.get(lowered[len(digits) :].strip())
    if unit is None or not digits.strip().isdigit():
        raise ValueError("expected a number of bytes, optionally with kB, MB, GB, KiB, MiB or GiB")
    return int(digits) * unit


def element_bytes(value: object) -> int | None:
    """``max_element_bytes`` checked: ``None`` or a positive int."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"max_element_bytes must be an int (bytes), not {type(value).__name__}")
    if value < 1:
        raise InvalidArgumentError(f"max_element_bytes must be positive, got {value!r}")
    return value


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
    #: Per name, the due time (on :attr:`clock`) of the next element as the last claim that took
    #: fewer than it asked for read it (``None``: empty); a store whose claims read it makes it.
    _ttn_after: dict[str, float | None] | None = None
    #: The most bytes one element may take serialized (``None``: no limit, or not known until
    #: ``open``), and what sets it, for the error's message (see :meth:`_set_element_limit`).
    _element_limit: int | None = None
    _element_limit_why: str = ""
    #: What the caller asked for (``max_element_bytes``), lowering the backend's own limit.
    _element_limit_asked: int | None = None

    @property
    def max_element_bytes(self) -> int | None:
        """The most bytes one element may take once serialized, beyond which a write is refused
        with :class:`~rehydrate.errors.ElementTooLargeError` before anything is sent: the
        backend's limit, or ``max_element_bytes`` if that is lower. ``None`` before ``open`` where
        the backend's limit is read from the server (Redis)."""
        return self._element_limit

    def _set_element_limit(self, backend: int | None, why: str) -> None:
        """Set the limit: ``backend``'s (``why`` says where it comes from), or the caller's
        ``max_element_bytes`` where that is lower."""
        asked = self._element_limit_asked
        if asked is not None and (backend is None or asked <= backend):
            self._element_limit, self._element_limit_why = asked, "its max_element_bytes"
        else:
            self._element_limit, self._element_limit_why = backend, why

    async def ttn_after_claim(self, name: str) -> float | None:
        """See :meth:`Store.ttn_after_claim`: what the last claim of ``name`` recorded in
        ``_ttn_after``, counted down from :meth:`_ttn_now`; one trip to the server (or worker
        thread) less per idle turn of a claim loop. Once only; otherwise :meth:`ttn`."""
        after = self._ttn_after
        if after is None or name not in after:
            return await self.ttn(name)
        self._check_open()
        due = after.pop(name)
        await anyio.lowlevel.checkpoint()
        return None if due is None else max(0.0, due - self._ttn_now())

    def _check_open(self) -> None:
        """Raise :meth:`_not_open` if the store is closed, where a verb answers without I/O."""

    # -- the template: the batch verbs' checks, once for every store ------------------------------
    # Each public verb below checks its arguments (``rehydrate._core._validate``) and answers an
    # empty batch itself (after the not-open check, at a checkpoint, as any call), then hands the
    # checked batch to the store's one protected method, which does the I/O. A store adds only
    # what its backend alone refuses (Redis: a batch past one script; PostgreSQL: NUL in an id).

    async def _empty_batch(self) -> list[Any]:
        """An empty batch's answer: nothing to do, but a closed store still raises."""
        self._check_open()
        await anyio.lowlevel.checkpoint()
        return []

    async def push_many(self, name: str, items: Iterable[tuple[Any, Seconds, str | None]]) -> list[str]:
        asked = float(self.clock())  # what the ttls count from: the call (see Store.push_many)
        _validate.element_id(name, "name")
        batch = _validate.pushes(items)
        if not batch:
            return await self._empty_batch()
        return await self._push_many(name, batch, asked)

    @abstractmethod
    async def _push_many(
        self, name: str, batch: list[tuple[Any, float, str | None]], asked: float
    ) -> list[str]:
        """:meth:`push_many` of a checked, non-empty batch (no id twice); ``asked``: the call's
        time on :attr:`clock`, which the ttls may count from."""

    async def look_many(self, name: str, ids: Iterable[str]) -> list[Any]:
        _validate.element_id(name, "name")
        checked = _validate.id_list(ids)
        if not checked:
            return await self._empty_batch()
        return await self._look_many(name, checked)

    @abstractmethod
    async def _look_many(self, name: str, ids: list[str]) -> list[Any]:
        """:meth:`look_many` of checked, non-empty ids."""

    async def replace_if(self, name: str, items: Iterable[tuple[str, int, Any, Seconds]]) -> list[int | None]:
        asked = float(self.clock())  # what the ttls count from: the call (see Store.replace_if)
        _validate.element_id(name, "name")
        batch = _validate.conditional_replaces(items)
        if not batch:
            return await self._empty_batch()
        return await self._replace_if(name, batch, asked)

    @abstractmethod
    async def _replace_if(
        self, name: str, batch: list[tuple[str, int, Any, float]], asked: float
    ) -> list[int | None]:
        """:meth:`replace_if` of a checked, non-empty batch; ``asked`` as for :meth:`_push_many`."""

    async def claim(
        self, name: str, *, lease: Seconds, limit: int | None = None, ahead: Seconds = 0.0
    ) -> list[Claim]:
        _validate.element_id(name, "name")
        return await self._claim(
            name,
            _validate.seconds(lease, "lease"),
            _validate.limit(limit),
            _validate.seconds(ahead, "ahead"),
        )

    @abstractmethod
    async def _claim(self, name: str, lease: float, limit: int | None, ahead: float) -> list[Claim]:
        """:meth:`claim` with checked arguments."""

    async def ack(self, name: str, claims: Iterable[tuple[str, int]]) -> list[bool]:
        _validate.element_id(name, "name")
        pairs = _validate.acks(claims)
        if not pairs:
            return await self._empty_batch()
        return await self._ack(name, pairs)

    @abstractmethod
    async def _ack(self, name: str, pairs: list[tuple[str, int]]) -> list[bool]:
        """:meth:`ack` of checked, non-empty ``(id, token)`` pairs."""

    async def reschedule_many(self, name: str, items: Iterable[tuple[str, int, Seconds]]) -> list[bool]:
        _validate.element_id(name, "name")
        batch = _validate.reschedules(items)
        if not batch:
            return await self._empty_batch()
        return await self._release(name, batch, hand_back=False)

    async def hand_back(self, name: str, items: Iterable[tuple[str, int, Seconds]]) -> list[bool]:
        _validate.element_id(name, "name")
        batch = _validate.reschedules(items, "hand_back")
        if not batch:
            return await self._empty_batch()
        return await self._release(name, batch, hand_back=True)

    @abstractmethod
    async def _release(
        self, name: str, batch: list[tuple[str, int, float]], *, hand_back: bool
    ) -> list[bool]:
        """File each checked ``(id, token, ttl)`` still under that claim anew, released: a
        delayed retry (:meth:`reschedule_many`, its attempt kept) or, with ``hand_back``, a claim
        given back unrun (:meth:`hand_back`: only one still held, its attempt undone)."""

    def _ttn_now(self) -> float:
        """The time a TTN counts down from: the store's clock."""
        return float(self.clock())

    def _set_serializer(self, serializer: str | Serializer | None) -> None:
        """Resolve ``serializer`` (a name, an instance, or ``None`` for JSON) for this store."""
        self._serializer = get_serializer(serializer)

    def _not_open(self) -> StoreNotOpenError:
        return StoreNotOpenError(
            f"{self!r} is not open: use it as `async with store:` (or `await store.open()` first)"
        )

    def _dumps(
        self,
        element: Any,
        name: str | None,
        id: str | None = None,
        verb: str = "push",
        item: int | None = None,
    ) -> bytes:
        """``element`` as bytes, or a bad-argument error before anything is written: one the
        serializer cannot take, or one larger than :attr:`max_element_bytes` (checked when
        ``name`` is given; ``id``, ``verb`` and the batch's ``item`` index name it). An
        :class:`~rehydrate.serializers.Encoded` element written by this store's serializer is
        its bytes as they are."""
        if type(element) is Encoded:
            if element.serializer == self._serializer.name:
                payload = element.data
                if name is not None:
                    self._check_size(len(payload), name, id, verb, item)
                return payload
            element = element.element
        try:
            payload = self._serializer.dumps(element)
        except InvalidArgumentError:
            raise
        except (TypeError, ValueError) as exc:
            raise InvalidTypeError(
                f"element cannot be serialized by {self._serializer.name!r}: {exc}"
            ) from exc
        if name is not None:
            self._check_size(len(payload), name, id, verb, item)
        return payload

    def _check_size(self, size: int, name: str, id: str | None, verb: str, item: int | None = None) -> None:
        """Refuse an element of ``size`` bytes (serialized) beyond this store's limit: at once,
        with the limit named, rather than by the backend after sending it (Redis drops the
        connection, and the store would send it again at every retry)."""
        limit = self._element_limit
        if limit is None or size <= limit:
            return
        what = f"element {id!r}" if id is not None else "an element (no id given)"
        where = f"{verb} to {name!r}" if item is None else f"item {item} of a {verb} to {name!r}"
        batch = "; nothing of the batch was written" if item is not None else ""
        raise ElementTooLargeError(
            f"{what} ({where}) is {size:,} bytes serialized by {self._serializer.name!r}, more than "
            f"this store takes: {limit:,} bytes ({self._element_limit_why}){batch}. Keep large data "
            "elsewhere and put a reference to it in the element",
            id=id,
            size=size,
            limit=limit,
        )

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
