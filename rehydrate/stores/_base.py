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
  (an ``InvalidTypeError`` for data the serializer cannot take) before anything is written;
  :meth:`_loads` checks the serializer name stored beside a payload and raises
  :class:`~rehydrate.errors.SerializerMismatchError` rather than guess (:meth:`_mismatch` builds
  it for stores that detect a mismatch elsewhere, e.g. in a server-side script).
* **the next occurrence without encoding it again**, for stores that keep bytes: a recurring
  schedule's element (its envelope, ``rehydrate._schedules``) is read at every occurrence and
  filed again by ``rearm`` with one value changed, its ``next`` (the last key, an integer).
  :meth:`_keep_envelope`, called by ``claim`` for each element, keeps a claimed envelope's bytes
  until that claim ends; :meth:`_rearm_payload` then gives the bytes to file: the kept ones with
  their end rewritten when the element filed is the claimed one with another end (its ``next``,
  an extra run's request; :func:`ends`; the serializer JSON), else the element encoded
  (``_dumps``), and the old and new ends, with which the store rewrites the bytes it holds
  instead, so that a change written into the envelope while the claim ran is kept. Encoding an
  envelope was a third of what filing an occurrence cost on SQLite; the rewrite is a slice and a
  join. Nothing about schedules is kept anywhere but in the element, as before.
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

Nothing here does I/O or knows a backend: the stable part a new store (PostgreSQL...) builds on.
The contract suite checks the result: a store's harness (``tests/stores/harness_<name>.py``) gives
the store and a ``twin`` factory, through which the lifecycle and serializer rules are tested.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from operator import is_
from typing import Any, Final
from urllib.parse import parse_qsl

import anyio

from rehydrate._core import _validate
from rehydrate._core._records import Claim
from rehydrate._core._validate import Seconds
from rehydrate._schedules import KEY, REMOVED
from rehydrate.abc import Serializer, Store
from rehydrate.errors import (
    ElementTooLargeError,
    InvalidArgumentError,
    InvalidTypeError,
    SerializerMismatchError,
    StoreNotOpenError,
)
from rehydrate.serializers import JSONSerializer, get_serializer

__all__ = [
    "Converter",
    "StoreBase",
    "as_bool",
    "as_float",
    "as_int",
    "as_size",
    "as_str",
    "element_bytes",
    "ends",
    "merge_next",
    "rewritten",
    "url_options",
]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})

#: A URL option's converter: the option's text in, its value out; ``ValueError`` says what it wants.
Converter = Callable[[str], Any]
#: A store keeps the bytes of at most this many claimed envelopes (the running occurrences of
#: every process's runners on it); past that it forgets them all and starts again, which costs
#: each forgotten one an encoding at its rearm, nothing else.
_KEPT_ENVELOPES: Final = 100_000


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
    _kept: dict[tuple[str, str], tuple[int, dict[str, Any], bytes]] | None = None
    #: Per name, the due time (on :attr:`clock`) of the next element as the last claim that took
    #: fewer than it asked for read it (``None``: empty); a store whose claims read it makes it.
    _ttn_after: dict[str, float | None] | None = None
    #: ``REMOVED`` as this store's serializer writes it (see :meth:`_removed_payload`).
    _removed_bytes: bytes | None = None
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
        self._removed_bytes = None
        #: Claimed envelopes and their bytes, by (name, id), with the claim's token (see the
        #: module docstring); JSON only.
        self._kept = {} if type(self._serializer) is JSONSerializer else None

    def _keep_envelope(self, name: str, id: str, token: int, element: Any, payload: bytes = b"") -> None:
        """At a claim: keep the bytes of an envelope until the claim's rearm (or other end)."""
        kept = self._kept
        if kept is not None and type(element) is dict and element.get(KEY) == 1:
            if len(kept) >= _KEPT_ENVELOPES:
                kept.clear()
            kept[(name, id)] = (token, element, payload)

    def _forget_envelopes(self, name: str, ids: Iterable[str]) -> None:
        """Claims that ended otherwise than by a rearm (acked, rescheduled), or elements replaced
        while claimed (``update``): nothing to keep."""
        kept = self._kept
        if kept:
            for id in ids:
                kept.pop((name, id), None)

    def _removed_payload(self) -> bytes:
        """The bytes of a schedule unscheduled while its occurrence ran (``REMOVED``), as this
        store writes them: what its ``rearm`` compares the stored bytes (and those given) with."""
        payload = self._removed_bytes
        if payload is None:
            payload = self._removed_bytes = self._dumps(REMOVED, None)
        return payload

    def _rearm_payload(
        self, name: str, id: str, token: int, element: Any, *, rewrite: bool = True
    ) -> tuple[bytes, bytes | None, bytes]:
        """What to file ``element`` with as the claim ``token``'s next occurrence: ``(payload,
        old end, new end)``. When ``element`` is the claimed envelope with other values at its
        end (another ``next``; an extra run's request made its ``last_extra``), the store files
        the bytes it holds with their end ``old`` made ``new`` (so a change written into the
        envelope while its occurrence ran, by ``update``, is kept), or, if they no longer end so,
        ``payload``: the kept bytes rewritten the same way (empty without ``rewrite``, for a
        store that never files them: SQLite's rearm rewrites the stored end in its statement).
        Else ``old`` is ``None`` and ``payload`` is the element encoded."""
        kept = self._next_only(name, id, token, element)
        if kept is not None:
            held, old, new = kept
            if old and held.endswith(old):  # (what ``rewritten`` checks)
                # (Its size: the held bytes, less the old end, plus the new one, whether or not
                # this store files them.)
                self._check_size(len(held) - len(old) + len(new), name, id, "rearm")
                return (held[: -len(old)] + new if rewrite else b""), old, new
        return self._dumps(element, name, id, "rearm"), None, b""

    def _next_only(
        self, name: str, id: str, token: int, element: Any, *, forget: bool = True
    ) -> tuple[bytes, bytes, bytes] | None:
        """The bytes kept of the envelope the claim ``token`` handed out, and its end and
        ``element``'s (:func:`ends`), when ``element`` is that envelope with other values at its
        end only. Forgets what was kept, unless ``forget`` is false."""
        if not self._kept:
            return None
        kept = self._kept.pop((name, id), None) if forget else self._kept.get((name, id))
        if kept is None or kept[0] != token or type(element) is not dict:
            return None
        found = ends(kept[1], element)
        return None if found is None else (kept[2], *found)

    def _update_payload(
        self, name: str, id: str, token: int | None, element: Any
    ) -> tuple[bytes, bytes | None, bytes]:
        """What ``update`` files, as :meth:`_rearm_payload` says. A worker's update of the
        envelope it holds with other values at its end only (a late occurrence recording which
        one it runs) rewrites the stored bytes' end, keeping a change written meanwhile, and what
        it wrote stays kept as the claim's envelope (its rearm rewrites it in turn). Anything else
        is encoded whole, and a worker's other updates end what was kept."""
        if token is not None:
            kept = self._next_only(name, id, token, element, forget=False)
            if kept is not None:
                held, old, new = kept
                # (A store that rewrites stored bytes itself keeps none: Redis.)
                payload = rewritten(held, old, new) if held else self._dumps(element, name, id, "update")
                if payload is not None:
                    self._check_size(len(payload), name, id, "update")
                    assert self._kept is not None  # (it held the claim's envelope)
                    self._kept[(name, id)] = (token, element, payload if held else b"")
                    return payload, old, new
            self._forget_envelopes(name, [id])
        return self._dumps(element, name, id, "update"), None, b""

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
        ``name`` is given; ``id``, ``verb`` and the batch's ``item`` index name it)."""
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


def ends(claimed: dict[str, Any], element: dict[str, Any]) -> tuple[bytes, bytes] | None:
    """The compact JSON ends of two schedule envelopes that differ at their end only: from the
    first key where they part (the same keys before it, holding the very same values) to the
    closing brace, when every value there is an integer (``next``, ``extra``, ``last_extra``) and
    both end with ``next``; else ``None``. The bytes of ``claimed`` with its end made
    ``element``'s are ``element`` encoded."""
    if (
        type(nxt := element.get("next")) is int
        and type(was := claimed.get("next")) is int
        and len(element) == len(claimed)
    ):
        # The common case, at every occurrence: another ``next`` only, at the end of the same keys
        # (its ``%d``, as JSON has it). Compared in C, value by value (``is_``), with ``next``
        # made the same on one side: a generator of ``is`` tests cost twice as much.
        keys, values = list(element), list(element.values())
        values[-1] = was
        if keys[-1] == "next" and keys == list(claimed) and all(map(is_, values, claimed.values())):
            return b'"next":%d}' % was, b'"next":%d}' % nxt
    keys, other = list(claimed), list(element)
    if not keys or keys[-1] != "next" or not other or other[-1] != "next":
        return None
    first, most = 0, min(len(keys), len(other)) - 1
    while first < most and keys[first] == other[first] and claimed[keys[first]] is element[other[first]]:
        first += 1
    if first == 0:
        return None
    parts: list[bytes] = []
    for envelope, names in ((claimed, keys[first:]), (element, other[first:])):
        values = [envelope[key] for key in names]
        if not all(type(value) is int for value in values) or not all(
            key.isidentifier() and key.isascii() for key in names
        ):
            return None
        pairs = zip(names, values, strict=True)
        parts.append(b",".join(b'"%s":%d' % (key.encode(), value) for key, value in pairs) + b"}")
    return parts[0], parts[1]


def rewritten(payload: bytes, old: bytes, new: bytes) -> bytes | None:
    """``payload`` with its end ``old`` made ``new``, or ``None`` if it does not end so."""
    return payload[: -len(old)] + new if old and payload.endswith(old) else None


def merge_next(stored: Any, given: Any) -> tuple[Any, bool | None]:
    """What a rearm files for an element updated (by someone else than the worker that holds it)
    while its claim ran, and whether at once: a schedule's envelope as stored, changed meanwhile
    (its element, policy, a pause), with the next time the worker gives (and the extra run it
    made, ``last_extra``, if that request is the stored one); a schedule given another trigger
    meanwhile (re-planned: ``Scheduler.schedule`` wrote its new first occurrence into it) as
    stored, due at once, for the runner that claims it to file for its time; anything else as
    given (the memory store's counterpart of the rewrite of stored bytes, see
    :meth:`StoreBase._rearm_payload`). A schedule unscheduled while its occurrence ran (stored
    as ``REMOVED``) is removed (``None``); one given as ``REMOVED`` by the runner that claimed it
    so is removed if still so, else filed as stored (written into since), at once."""
    if type(stored) is dict and stored.get("removed") is True and stored == REMOVED:
        return stored, None
    if type(given) is dict and given.get("removed") is True and given == REMOVED:
        return stored, True
    if type(given) is dict and type(given.get("next")) is int:
        if (
            type(stored) is not dict
            or "next" not in stored
            or stored.get("trigger") != given.get("trigger")
            or stored.get("anchor") != given.get("anchor")
        ):
            # Re-planned (or written over with something else: kept, as the stores of bytes do).
            return stored, True
        merged = {key: value for key, value in stored.items() if key != "next"}
        ran = given.get("last_extra")
        if ran is not None and "extra" not in given and merged.get("extra") == ran:
            del merged["extra"]
            merged.pop("last_extra", None)
            merged["last_extra"] = ran
        merged["next"] = given["next"]
        return merged, False
    return given, False
