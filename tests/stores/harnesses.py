"""The registry of store harnesses for the contract suite.

A store adds ``tests/stores/harness_<name>.py`` defining ``async def harness(request)`` (an async
generator yielding a :class:`rehydrate.testing.contract.Harness`); it is picked up here by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from rehydrate.testing.contract import Harness

__all__ = ["HARNESSES", "Harness", "HarnessFactory"]


HarnessFactory = Callable[[pytest.FixtureRequest], AsyncIterator[Harness]]

HARNESSES: dict[str, HarnessFactory] = {}
for _info in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if _info.name.startswith("harness_"):
        _module = importlib.import_module(f"{__package__}.{_info.name}")
        HARNESSES[_info.name.removeprefix("harness_")] = _module.harness
