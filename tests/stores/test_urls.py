"""The one URL-option parser every store's ``from_url`` uses (``rehydrate/stores/_base.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rehydrate import InvalidArgumentError, InvalidTypeError, open_store
from rehydrate.serializers import JSONSerializer, PickleSerializer
from rehydrate.stores import MemoryStore
from rehydrate.stores._base import as_bool, as_float, as_int, as_size, as_str, url_options

KNOWN: dict[str, Any] = {"name": as_str, "flag": as_bool, "seconds": as_float, "count": as_int}


def test_options_are_converted() -> None:
    found = url_options("x://", "name=a&flag=yes&seconds=1.5&count=3", KNOWN)
    assert found == {"name": "a", "flag": True, "seconds": 1.5, "count": 3}
    assert url_options("x://", "", KNOWN) == {}
    assert url_options("x://", "flag=off", KNOWN, {"name": "given"}) == {"flag": False}


@pytest.mark.parametrize(
    ("query", "given", "says"),
    [
        ("nmae=a", {}, "unknown option 'nmae' in 'x://'; known options: count, flag, name, seconds"),
        ("name=a&name=b", {}, "given twice"),
        ("name=a", {"name": "b"}, "both in the URL and as an argument"),
        ("flag=maybe", {}, "invalid flag='maybe' in 'x://': expected 1, true"),
        ("seconds=soon", {}, "invalid seconds='soon' in 'x://': expected a number"),
        ("count=1.5", {}, "invalid count='1.5' in 'x://': expected a whole number"),
        ("name=", {}, "expected a non-empty value"),
        ("name", {}, "malformed query"),
    ],
)
def test_mistakes_are_refused_with_a_clear_message(query: str, given: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says.replace("?", r"\?")):
        url_options("x://", query, KNOWN, given)


@pytest.mark.parametrize(
    "url",
    [
        "memory://?clock=1",
        "memory://somewhere",
        "memory:///path",
        "sqlite:///x.db?synchronus=normal",
        "redis://127.0.0.1:1/0?prefx=billing",
        "redis://127.0.0.1:1/abc",
    ],
)
def test_every_store_refuses_unknown_options_and_typos(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        open_store(url)


def test_memory_url() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    assert isinstance(open_store("memory:"), MemoryStore)


@pytest.mark.parametrize(
    ("text", "size"),
    [("1048576", 1048576), ("64KiB", 65536), ("10MB", 10_000_000), ("2 gib", 2 * 1024**3), ("5kb", 5000)],
)
def test_sizes_take_decimal_and_binary_units(text: str, size: int) -> None:
    assert as_size(text) == size


@pytest.mark.parametrize("text", ["", "MB", "1.5MB", "-1", "10 megabytes", "1e6"])
def test_a_size_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="number of bytes"):
        as_size(text)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///x.db?max_element_bytes=64KiB",
        "redis://127.0.0.1:1/0?max_element_bytes=64KiB",
        "postgresql://localhost/app?max_element_bytes=64KiB",
    ],
)
def test_a_store_url_caps_the_element_size(url: str) -> None:
    """``max_element_bytes``, in bytes or with a unit; SQLite's and PostgreSQL's own limits are
    known before ``open`` (Redis's is read from the server then)."""
    store = open_store(url)
    if not url.startswith("redis"):
        assert store.max_element_bytes == 65536  # type: ignore[attr-defined]
    assert store._element_limit_asked == 65536  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgumentError, match="invalid max_element_bytes='lots'"):
        open_store(url.replace("64KiB", "lots"))


def test_memory_url_takes_a_serializer_as_the_durable_stores_do() -> None:
    """``memory://?serializer=json`` (or the argument), with the names, objects and errors of the
    stores that keep bytes: the one option a memory URL has."""
    store = open_store("memory://?serializer=json")
    assert isinstance(store, MemoryStore)
    assert isinstance(store.serializer, JSONSerializer)
    assert isinstance(
        cast(MemoryStore, open_store("memory://", serializer="pickle")).serializer, PickleSerializer
    )
    assert cast(MemoryStore, open_store("memory://")).serializer is None  # the default: the objects
    mine = JSONSerializer()
    assert MemoryStore(serializer=mine).serializer is mine
    with pytest.raises(InvalidArgumentError, match="unknown serializer 'yaml'; choose one of json, msgpack"):
        MemoryStore(serializer="yaml")
    with pytest.raises(InvalidTypeError, match="serializer must be a name or have name, dumps and loads"):
        MemoryStore(serializer=cast(Any, 42))
    with pytest.raises(InvalidArgumentError, match="given both in the URL and as an argument"):
        open_store("memory://?serializer=json", serializer="json")
    with pytest.raises(
        InvalidArgumentError,
        match=r"unknown option 'clock' in 'memory://\?clock=1'; known options: serializer$",
    ):
        open_store("memory://?clock=1")


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (
            "?serializer=yaml",
            InvalidArgumentError("unknown serializer 'yaml'; choose one of json, msgpack, pickle"),
        ),
        ("?serializer=", InvalidArgumentError("invalid serializer=''")),
        ("?serializer=json&serializer=pickle", InvalidArgumentError("option 'serializer' is given twice")),
        (42, InvalidTypeError("serializer must be a name or have name, dumps and loads, not int")),
    ],
)
def test_a_bad_serializer_is_refused_by_memory_as_by_sqlite(
    given: Any, error: Exception, tmp_path: Path
) -> None:
    for url in ("memory://", f"sqlite:///{tmp_path / 'x.db'}"):
        with pytest.raises(type(error)) as raised:
            open_store(url + given) if isinstance(given, str) else open_store(url, serializer=given)
        assert str(error) in str(raised.value)
    assert not (tmp_path / "x.db").exists()
