"""The registry of store harnesses for the contract suite.

A store adds ``tests/stores/harness_<name>.py`` defining ``async def harness(request)`` (an async
generator yielding a :class:`Harness`); it is picked up here by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from rehydrate.abc import Store


@attrs.define
class Harness:
    store: Store
    #: Move the store's time forward by this many seconds, without sleeping.
    advance: Callable[[float], Any]
    #: Another store on the same backend (file, server and key prefix), not opened, built with
    #: these extra constructor keywords (``serializer=...``); for the memory store, a new one.
    #: The lifecycle and serializer rules of the contract are checked through it.
    twin: Callable[..., Store] | None = None
    #: Whether ``twin`` sees what ``store`` holds (a file, a server): not so for a memory store,
    #: whose twin is a store of its own, so the tests of two store objects on one backend skip it.
    shared: bool = True


HarnessFactory = Callable[[pytest.FixtureRequest], AsyncIterator[Harness]]

HARNESSES: dict[str, HarnessFactory] = {}
for _info in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if _info.name.startswith("harness_"):
        _module = importlib.import_module(f"{__package__}.{_info.name}")
        HARNESSES[_info.name.removeprefix("harness_")] = _module.harness
