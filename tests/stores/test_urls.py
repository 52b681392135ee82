"""The one URL-option parser every store's ``from_url`` uses (``rehydrate/stores/_base.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from rehydrate import InvalidArgumentError, open_store
from rehydrate.stores import MemoryStore
from rehydrate.stores._base import as_bool, as_float, as_int, as_str, url_options

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
