"""Serializers for stores that keep bytes (SQLite, Redis).

JSON is the default: safe to load whatever another service wrote into a shared Redis. msgpack is
more compact; pickle takes any Python object but loading it runs code, so use it only when every
writer is trusted. Neither is ever chosen for you.
"""

from __future__ import annotations

import json
import json.scanner
import pickle
from collections.abc import Callable
from typing import Any, final

from rehydrate.abc import Serializer
from rehydrate.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["Encoded", "JSONSerializer", "MsgpackSerializer", "PickleSerializer", "get_serializer"]


@final
class Encoded:
    """An element already written by the serializer named ``serializer``: its bytes (``data``)
    and what they stand for (``element``).

    A store of this package whose serializer has that name files ``data`` as they are instead of
    encoding ``element`` again (any other serializer encodes ``element``). It is how a caller that
    writes one element over and over with a small change (a schedule's next occurrence: its
    envelope with another ``next``) makes the bytes once from those it had, without the store
    knowing what the element is. The caller vouches that ``data`` is ``element`` as that
    serializer writes it. Give it only to a store that says it takes it
    (``rehydrate.stores._base.StoreBase``): another store would file the object itself.
    """

    __slots__ = ("data", "element", "serializer")

    data: bytes
    element: Any
    serializer: str

    def __init__(self, data: bytes, serializer: str, element: Any) -> None:
        self.data = data
        self.serializer = serializer
        self.element = element

    def __repr__(self) -> str:
        return f"Encoded({self.data!r}, {self.serializer!r}, {self.element!r})"


#: One encoder for every call: ``json.dumps`` with options builds a ``JSONEncoder`` each time, a
#: third of the cost of encoding a schedule's envelope. Encoding keeps no state between calls.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def _c_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode`` without its per-call set-up, where the C accelerator exists.

    ``JSONEncoder.encode`` builds the C encoder anew for every call (and a dict to detect cycles),
    which costs as much as encoding a small element. This one is
    built once, with the same options, and without the cycle check: a cyclic element ends in a
    ``RecursionError`` instead of a ``ValueError`` (``dumps`` refuses both alike), and a failed
    call leaves nothing behind that a later one could trip on.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator (another interpreter): the plain encoder
        return _ENCODER.encode
    chunks = make(
        None,  # no cycle check (see above)
        _ENCODER.default,
        json.encoder.encode_basestring,  # not ASCII-escaped, as ``ensure_ascii=False``
        None,  # no indent
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
    join = "".join

    def encode(element: Any) -> str:
        return join(chunks(element, 0))

    return encode


_encode = _c_encoder()


def _c_scanner() -> Callable[[str, int], tuple[Any, int]] | None:
    """The C scanner behind ``json.loads``, called directly where it exists.

    ``json.loads`` of bytes first guesses their encoding, decodes them, and matches a regular
    expression for whitespace on each side, which costs more than reading a small element's JSON
    (docs/benchmarks.md, "Measurements behind the code"). What this package writes is
    UTF-8 with no whitespace around it, so the scanner is asked first; anything else (a BOM,
    another encoding, whitespace, bad JSON) goes to ``json.loads``, which answers as always.
    """
    make = getattr(json.scanner, "c_make_scanner", None)
    if make is None:  # no C accelerator (another interpreter)
        return None
    scan: Callable[[str, int], tuple[Any, int]] = make(json.JSONDecoder())
    return scan


_scan = _c_scanner()


class JSONSerializer:
    """Compact UTF-8 JSON. Tuples come back as lists; non-JSON data raises ``TypeError``.

    Strings must be valid Unicode text: one holding a lone surrogate (``"\\ud800"``, what
    ``surrogateescape`` makes of undecodable bytes) is refused with
    :class:`~rehydrate.errors.InvalidArgumentError`, so nothing is stored that cannot be printed
    or read back by another language's JSON parser.
    """

    name = "json"

    def dumps(self, element: Any) -> bytes:
        try:
            # Not ASCII-escaped, so that encoding to UTF-8 refuses lone surrogates (and is shorter).
            return _encode(element).encode()
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                f"element holds text that is not valid Unicode (the lone surrogate "
                f"{exc.object[exc.start : exc.end]!r}): JSON cannot carry it"
            ) from None
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidTypeError(
                f"element is not JSON-serializable ({exc}); pass JSON data or choose "
                "serializer='msgpack' or 'pickle'"
            ) from exc

    def loads(self, data: bytes) -> Any:
        if _scan is not None:
            try:
                text = data.decode()
                element, end = _scan(text, 0)
            except (UnicodeDecodeError, StopIteration, ValueError):
                pass  # json.loads says what it is (or reads what the scanner alone cannot)
            else:
                if end == len(text):
                    return element
        return json.loads(data)

    def __repr__(self) -> str:
        return "JSONSerializer()"


class MsgpackSerializer:
    """msgpack (the ``msgpack`` package, extra ``rehydrate[msgpack]``)."""

    name = "msgpack"

    def __init__(self) -> None:
        try:
            import msgpack
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise InvalidArgumentError(
                "serializer 'msgpack' needs the msgpack package: pip install 'rehydrate[msgpack]'"
            ) from exc
        self._msgpack = msgpack

    def dumps(self, element: Any) -> bytes:
        try:
            data: bytes = self._msgpack.packb(element, use_bin_type=True)
        except (TypeError, ValueError) as exc:
            raise InvalidTypeError(f"element is not msgpack-serializable ({exc})") from exc
        return data

    def loads(self, data: bytes) -> Any:
        # ``strict_map_key=False``: what ``dumps`` writes reads back, a dict with int keys
        # included (msgpack's default refuses any key but str and bytes, on reading only).
        return self._msgpack.unpackb(data, raw=False, strict_map_key=False)

    def __repr__(self) -> str:
        return "MsgpackSerializer()"


class PickleSerializer:
    """pickle: any picklable object. Loading runs code: only for stores no stranger can write."""

    name = "pickle"

    def dumps(self, element: Any) -> bytes:
        try:
            return pickle.dumps(element, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise InvalidTypeError(f"element cannot be pickled ({exc})") from exc

    def loads(self, data: bytes) -> Any:
        return pickle.loads(data)

    def __repr__(self) -> str:
        return "PickleSerializer()"


_BY_NAME: dict[str, Callable[[], Serializer]] = {
    "json": JSONSerializer,
    "msgpack": MsgpackSerializer,
    "pickle": PickleSerializer,
}


def get_serializer(value: str | Serializer | None) -> Serializer:
    """A serializer from a name (``"json"``, ``"msgpack"``, ``"pickle"``) or an instance; JSON if ``None``."""
    if value is None:
        return JSONSerializer()
    if isinstance(value, str):
        try:
            factory = _BY_NAME[value]
        except KeyError:
            raise InvalidArgumentError(
                f"unknown serializer {value!r}; choose one of {', '.join(_BY_NAME)}"
            ) from None
        return factory()
    if isinstance(value, Serializer):
        return value
    raise InvalidTypeError(
        f"serializer must be a name or have name, dumps and loads, not {type(value).__name__}"
    )
