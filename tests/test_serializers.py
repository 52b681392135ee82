"""The serializers on their own: what JSON reads back, fast path or not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rehydrate.serializers import JSONSerializer, MsgpackSerializer

ELEMENTS: list[Any] = [
    {"i": 1},
    {"rehydrate.schedule": 1, "trigger": {"every": 3600.0}, "element": {"user": 1}, "next": 17957628619826},
    [1, 2.5, "é\u2028", None, True, {"nested": ["x"]}],
    "text",
    0,
    None,
]


@pytest.mark.parametrize("element", ELEMENTS)
def test_what_json_writes_reads_back(element: Any) -> None:
    serializer = JSONSerializer()
    assert serializer.loads(serializer.dumps(element)) == element


@pytest.mark.parametrize(
    "data",
    [
        b' {"a": 1}\n',  # whitespace around it
        '\ufeff{"a": 1}'.encode(),  # a UTF-8 byte order mark
        '{"a": 1}'.encode("utf-16"),  # another encoding json.loads recognises
        '{"a": 1}'.encode("utf-32-be"),
    ],
)
def test_json_another_writer_wrote_reads_as_json_loads_reads_it(data: bytes) -> None:
    """The scanner is asked first; what it cannot read whole goes to ``json.loads``."""
    assert JSONSerializer().loads(data) == json.loads(data) == {"a": 1}


@pytest.mark.parametrize("data", [b"[1, 2", b'{"a": 1}x', b"", b"nope", b'{"a": NaN]'])
def test_bad_json_raises_as_json_loads_does(data: bytes) -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        JSONSerializer().loads(data)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(data)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    "element",
    [*ELEMENTS, {1: "a", 2.5: "b", None: "c", -3: "d"}, {"bytes": b"\x00\xff"}, {b"k": [1, {"x": 2}]}],
)
def test_what_msgpack_writes_reads_back(element: Any) -> None:
    """Keys of any type msgpack writes read back: an element that could be pushed but never
    read would be lost."""
    pytest.importorskip("msgpack")
    serializer = MsgpackSerializer()
    assert serializer.loads(serializer.dumps(element)) == element
